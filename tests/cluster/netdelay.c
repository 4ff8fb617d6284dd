/* tests/cluster/netdelay.c — ct-test-netdelay --delay-us N PID1 PID2 ...: a switch between
 * network namespaces that holds every packet N microseconds before it passes it on.
 *
 * Why: cluster_ssh_netns wants 1 ms of delay on each link between its test hosts, and the
 * project's kernels (the CI's Firecracker VMs) have no sch_netem, nor sch_fq for a BPF
 * departure-time delay. TUN is there on every kernel: this switch is the hosts' only link.
 *
 * How: for each PIDi (a process that holds host i's network namespace, whose address is
 * 10.200.0.i) it enters that namespace (setns), opens /dev/net/tun there as a TUN device
 * "eth0" (IFF_TUN | IFF_NO_PI: bare IP packets) and goes back to its own namespace: the device
 * lives in the host's namespace, bound to the fd, and goes when this process does. The test
 * gives each eth0 its address, a large MTU (fewer packets to carry) and brings it up.
 *
 * Every packet read from a host's eth0 is queued with due time = read time + delay; the delay
 * is constant, so one FIFO is in due order. A due packet is written to the eth0 of the host its
 * IPv4 destination 10.200.0.i names; anything else (IPv6, other addresses) is dropped and
 * counted, like a switch with no route. The queue is bounded (QUEUE_MAX_BYTES): a full queue
 * drops, like a full qdisc. ppoll waits until the earliest due time with a nanosecond timeout
 * and a 1 ns timer slack, so the delay is not rounded up by the default 50 us slack.
 *
 * It prints "netdelay: ready" once every device exists (the test waits for the line), dies
 * with its parent (PR_SET_PDEATHSIG: the test script, even SIGKILLed) and on SIGTERM/SIGINT
 * prints one stats line and exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_HOSTS 254               /* 10.200.0.1 .. 10.200.0.254 */
#define PKT_MAX 65536               /* above any MTU a TUN device takes */
#define QUEUE_MAX_BYTES (64u << 20) /* packets held at most, like a qdisc's limit */
#define READ_BURST 64               /* packets read from one host per round: no host starves */
#define NS_PER_S 1000000000LL

struct pkt {
    struct pkt *next;
    int64_t due_ns; /* CLOCK_MONOTONIC */
    int dst;        /* index of the destination host */
    size_t len;
    unsigned char data[];
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    stop = 1;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* The TUN device "eth0" in the network namespace of pid, from this process's namespace `self`
 * (an fd of /proc/self/ns/net): returns its fd (non-blocking), or -1 with a message. */
static int open_tun_in(pid_t pid, int self)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0) {
        fprintf(stderr, "netdelay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (setns(ns, CLONE_NEWNET) < 0) {
        fprintf(stderr, "netdelay: setns %s: %s\n", path, strerror(errno));
        close(ns);
        return -1;
    }
    close(ns);
    /* the device is made in the namespace that opens /dev/net/tun (the fd's socket keeps it) */
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    int err = errno;
    if (fd >= 0) {
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
        strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
        if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    if (setns(self, CLONE_NEWNET) < 0) { /* never stay in a host: the test counts its pids */
        fprintf(stderr, "netdelay: setns back: %s\n", strerror(errno));
        exit(1);
    }
    if (fd < 0)
        fprintf(stderr, "netdelay: tun eth0 in pid %d: %s\n", (int)pid, strerror(err));
    return fd;
}

/* Index of the host that an IP packet goes to, or -1: IPv4 to 10.200.0.i, i in 1..nhosts. */
static int route(const unsigned char *p, size_t len, int nhosts)
{
    if (len < 20 || (p[0] >> 4) != 4)
        return -1;
    if (p[16] != 10 || p[17] != 200 || p[18] != 0 || p[19] < 1 || p[19] > nhosts)
        return -1;
    return p[19] - 1;
}

static void usage(void)
{
    fprintf(stderr, "usage: ct-test-netdelay --delay-us N PID...\n"
                    "  PIDi holds the network namespace of host i (address 10.200.0.i)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 4 || strcmp(argv[1], "--delay-us") != 0)
        usage();
    char *end;
    long delay_us = strtol(argv[2], &end, 10);
    if (*end || delay_us < 0 || delay_us > 10 * 1000 * 1000)
        usage();
    int64_t delay_ns = (int64_t)delay_us * 1000;
    int nhosts = argc - 3;
    if (nhosts > MAX_HOSTS)
        usage();

    /* dies with the test script, however it ends; a parent already gone leaves us to init */
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent || parent == 1)
        return 1;
    prctl(PR_SET_TIMERSLACK, 1UL); /* ppoll wakes at the due time, not up to 50 us later */

    /* SIGTERM/SIGINT only during ppoll: the flag is seen before the next wait, never lost */
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &waitmask);
    sigdelset(&waitmask, SIGTERM);
    sigdelset(&waitmask, SIGINT);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0) {
        perror("netdelay: /proc/self/ns/net");
        return 1;
    }
    struct pollfd pfd[MAX_HOSTS];
    for (int i = 0; i < nhosts; i++) {
        long pid = strtol(argv[3 + i], &end, 10);
        if (*end || pid <= 0)
            usage();
        pfd[i].fd = open_tun_in((pid_t)pid, self);
        if (pfd[i].fd < 0)
            return 1;
        pfd[i].events = POLLIN;
    }
    close(self);
    printf("netdelay: ready\n");
    fflush(stdout);

    static unsigned char buf[PKT_MAX];
    struct pkt *head = NULL, *tail = NULL;
    size_t qbytes = 0, qpkts = 0, max_bytes = 0, max_pkts = 0;
    unsigned long long forwarded = 0, fwd_bytes = 0, unroutable = 0, full = 0, write_err = 0;
    while (!stop) {
        struct timespec ts, *timeout = NULL;
        if (head) {
            int64_t wait = head->due_ns - now_ns();
            if (wait < 0)
                wait = 0;
            ts.tv_sec = wait / NS_PER_S;
            ts.tv_nsec = wait % NS_PER_S;
            timeout = &ts;
        }
        int n = ppoll(pfd, nhosts, timeout, &waitmask);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("netdelay: ppoll");
            return 1;
        }
        for (int i = 0; n > 0 && i < nhosts; i++) {
            if (pfd[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
                fprintf(stderr, "netdelay: host %d's device failed\n", i + 1);
                return 1;
            }
            if (!(pfd[i].revents & POLLIN))
                continue;
            for (int k = 0; k < READ_BURST; k++) {
                ssize_t len = read(pfd[i].fd, buf, sizeof buf);
                if (len < 0) {
                    if (errno == EAGAIN || errno == EINTR)
                        break;
                    fprintf(stderr, "netdelay: read host %d: %s\n", i + 1, strerror(errno));
                    return 1;
                }
                int64_t due = now_ns() + delay_ns;
                int dst = route(buf, (size_t)len, nhosts);
                if (dst < 0) {
                    unroutable++;
                    continue;
                }
                if (qbytes + (size_t)len > QUEUE_MAX_BYTES) {
                    full++;
                    continue;
                }
                struct pkt *p = malloc(sizeof *p + (size_t)len);
                if (!p) {
                    full++;
                    continue;
                }
                p->next = NULL;
                p->due_ns = due;
                p->dst = dst;
                p->len = (size_t)len;
                memcpy(p->data, buf, (size_t)len);
                if (tail)
                    tail->next = p;
                else
                    head = p;
                tail = p;
                qbytes += p->len;
                qpkts++;
                if (qbytes > max_bytes)
                    max_bytes = qbytes;
                if (qpkts > max_pkts)
                    max_pkts = qpkts;
            }
        }
        /* everything due goes out; a write that fails (device down) is a drop, as on a wire */
        int64_t now = now_ns();
        while (head && head->due_ns <= now) {
            struct pkt *p = head;
            head = p->next;
            if (!head)
                tail = NULL;
            if (write(pfd[p->dst].fd, p->data, p->len) == (ssize_t)p->len) {
                forwarded++;
                fwd_bytes += p->len;
            } else {
                write_err++;
            }
            qbytes -= p->len;
            qpkts--;
            free(p);
        }
    }
    printf("netdelay: forwarded %llu packets (%llu bytes); dropped %llu unroutable, %llu queue "
           "full, %llu write errors; max queue %zu packets (%zu bytes)\n",
           forwarded, fwd_bytes, unroutable, full, write_err, max_pkts, max_bytes);
    fflush(stdout);
    return 0;
}
