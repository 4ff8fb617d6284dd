/* tests/collective/netns_hosts.h — simulated hosts for the collective's namespace test and
 * bench/allreduce_hier: network namespaces joined by a bridge, one address each. Needs root
 * and ip(8). Header-only, test and benchmark code only. */
#ifndef CT_TEST_NETNS_HOSTS_H
#define CT_TEST_NETNS_HOSTS_H

/* the includer defines _GNU_SOURCE before its first include (setns, unshare) */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>

#define NETNS_HOSTS 4

static pid_t netns_holders[NETNS_HOSTS];

/* Moves the calling process into host's namespace (its address: 10.79.0.<host + 1>). */
static inline int netns_join_host(int host)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)netns_holders[host]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET)) {
        fprintf(stderr, "setns %s: %s\n", path, strerror(errno));
        return 1;
    }
    close(fd);
    return 0;
}

/* Makes NETNS_HOSTS holders, each asleep in its own network namespace with eth0 at
 * 10.79.0.<host + 1>, joined by a bridge (ctbr0) in the caller's namespace: call it after
 * unshare(CLONE_NEWNET), so that the bridge goes with the caller. 0, or -1 when ip(8) failed. The
 * caller kills netns_holders[] by pid (they also die with it: PR_SET_PDEATHSIG). */
static inline int netns_make_hosts(void)
{
    char cmd[256], b;
    if (system("ip link add ctbr0 type bridge && ip link set ctbr0 up && ip link set lo up"))
        return -1;
    for (int k = 0; k < NETNS_HOSTS; k++) {
        int go[2], ready[2];
        if (pipe(go) || pipe(ready))
            return -1;
        pid_t pid = fork();
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (unshare(CLONE_NEWNET) || write(ready[1], "u", 1) != 1 || read(go[0], &b, 1) != 1)
                _exit(1);
            snprintf(cmd, sizeof cmd,
                     "ip link set lo up && ip addr add 10.79.0.%d/24 dev eth0 && "
                     "ip link set eth0 up",
                     k + 1);
            int rc = system(cmd);
            if (write(ready[1], rc ? "n" : "y", 1) != 1)
                _exit(1);
            for (;;)
                pause();
        }
        if (pid < 0)
            return -1;
        netns_holders[k] = pid;
        int rc = -1;
        if (read(ready[0], &b, 1) == 1 && b == 'u') {
            snprintf(cmd, sizeof cmd,
                     "ip link add ctv%d type veth peer name eth0 netns %d && "
                     "ip link set ctv%d master ctbr0 && ip link set ctv%d up",
                     k, (int)pid, k, k);
            rc = system(cmd);
            if (write(go[1], "g", 1) != 1 || read(ready[0], &b, 1) != 1 || b != 'y')
                rc = -1;
        }
        close(go[0]);
        close(go[1]);
        close(ready[0]);
        close(ready[1]);
        if (rc)
            return -1;
    }
    return 0;
}

#endif
