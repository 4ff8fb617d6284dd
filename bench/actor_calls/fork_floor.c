/* bench/actor_calls/fork_floor.c — the floor under actor creation on this machine: what forking
 * N bare "actors" costs when nothing else runs. It links the same runtime as an actor
 * executable (so it maps the same shared libraries: the per-VMA work of fork is what dominates),
 * starts Z forker processes (as the node starts Z zygotes), and each forks its share with
 * clone(CLONE_PARENT); a child binds + listens on a loopback TCP port, reports over a
 * socketpair and waits. No head, node, driver, protobuf or connect: only fork and the child's
 * minimum. Prints the wall rate and the CPU per fork (forker) and per child start.
 * Not a test and not ct's own path; run.sh prints it next to the creation row.
 * Usage: fork_floor [N=500] [Z=ncpu] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "ct/ct.h"

static double now_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct rec {
    double cpu; /* the child's CPU at ready, or (kind 1) the forker's CPU for all its forks */
    int kind;
    int n;
} rec;

int main(int argc, char **argv)
{
    /* the same libraries as an actor executable are mapped (the runtime is linked in) */
    ct_serve_if_worker();
    int n = argc > 1 ? atoi(argv[1]) : 500;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nz = argc > 2 ? atoi(argv[2]) : (int)(ncpu < 1 ? 1 : ncpu);
    if (n < 1 || nz < 1)
        return 2;
    int sv[2], go[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) || pipe(go))
        return 1;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t me = getpid();
    pid_t *zp = calloc(nz, sizeof *zp);
    for (int z = 0; z < nz; z++) {
        zp[z] = fork();
        if (zp[z] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            char c;
            if (read(go[0], &c, 1) != 1)
                _exit(1);
            int mine = n / nz + (z < n % nz);
            double c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
            for (int i = 0; i < mine; i++) {
                pid_t pid = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, 0);
                if (pid == 0) {
                    prctl(PR_SET_PDEATHSIG, SIGKILL);
                    if (getppid() != me)
                        _exit(1);
                    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                    struct sockaddr_in sa = {.sin_family = AF_INET};
                    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
                    socklen_t sl = sizeof sa;
                    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 64) ||
                        getsockname(fd, (struct sockaddr *)&sa, &sl))
                        _exit(1);
                    rec r = {now_s(CLOCK_PROCESS_CPUTIME_ID), 0, 1};
                    if (send(sv[1], &r, sizeof r, 0) != sizeof r)
                        _exit(1);
                    pause();
                    _exit(0);
                }
            }
            rec r = {now_s(CLOCK_PROCESS_CPUTIME_ID) - c0, 1, mine};
            if (send(sv[1], &r, sizeof r, 0) != sizeof r)
                _exit(1);
            pause();
            _exit(0);
        }
    }
    usleep(200000); /* forkers loaded and waiting */
    double t0 = now_s(CLOCK_MONOTONIC), child_cpu = 0, fork_cpu = 0, t = 0;
    char start[64] = {0};
    if (write(go[1], start, nz) != nz)
        return 1;
    int ready = 0, done = 0;
    while (ready < n || done < nz) {
        rec r;
        if (recv(sv[0], &r, sizeof r, 0) != sizeof r)
            break;
        if (r.kind == 0) {
            child_cpu += r.cpu;
            if (++ready == n)
                t = now_s(CLOCK_MONOTONIC) - t0;
        } else {
            fork_cpu += r.cpu;
            done++;
        }
    }
    printf("fork_floor %.0f\n", t > 0 ? n / t : 0.0);
    printf("fork_floor_cpu_us fork %.0f child %.0f (%d forkers, %d children)\n", fork_cpu / n * 1e6,
           child_cpu / n * 1e6, nz, n);
    fflush(stdout);
    /* every child and forker is ours (subreaper): kill by pid, reap all */
    for (int z = 0; z < nz; z++)
        kill(zp[z], SIGKILL);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)me, (int)me);
    FILE *f = fopen(path, "r");
    int pid;
    while (f && fscanf(f, "%d", &pid) == 1)
        kill(pid, SIGKILL);
    if (f)
        fclose(f);
    while (waitpid(-1, NULL, 0) > 0)
        ;
    free(zp);
    return ready == n ? 0 : 1;
}
