/* bench/bench_cluster.h — the cluster a runtime benchmark starts for itself: a ct-head on
 * loopback and ct-nodes (both from the directory of the running binary), with this program
 * connected as the driver. Everything started is killed by pid at exit (the nodes first, then
 * the head: a node whose head went first logs that it drains), what killed nodes left is purged,
 * and the cluster's secret (CT_SECRET_FILE, made here and inherited) is removed. Header only:
 * each benchmark is one program (bench_objectstore_rt, bench_trainer_recovery,
 * pipeline_nodes_bench). */
#ifndef CT_BENCH_CLUSTER_H
#define CT_BENCH_CLUSTER_H

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/common.h"
#include "ct/ct.h"

void ct__objnode_purge_leftovers(void); /* actor/objnode.c */

static pid_t bc_procs[16];
static int bc_nprocs;
static char bc_secret_dir[] = "/tmp/ct-bench-secret.XXXXXX", bc_secret_file[64];

static void bc_kill_all(void)
{
    fflush(stdout);
    for (int i = bc_nprocs - 1; i >= 0; i--)
        if (bc_procs[i] > 0) {
            kill(bc_procs[i], SIGTERM);
            waitpid(bc_procs[i], NULL, 0);
        }
    bc_nprocs = 0;
    ct__objnode_purge_leftovers();
    if (bc_secret_file[0]) {
        unlink(bc_secret_file);
        rmdir(bc_secret_dir);
        bc_secret_file[0] = 0;
    }
}

/* Starts argv (it dies with this process); with out, its stdout is a pipe read from *out. */
static pid_t bc_spawn(char *const argv[], int *out)
{
    int p[2] = {-1, -1};
    if (bc_nprocs == (int)(sizeof bc_procs / sizeof bc_procs[0]) || (out && pipe(p)))
        return -1;
    pid_t me = getpid(), pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        if (out)
            dup2(p[1], 1);
        execv(argv[0], argv);
        _exit(127);
    }
    if (out) {
        close(p[1]);
        *out = p[0];
    }
    if (pid > 0)
        bc_procs[bc_nprocs++] = pid;
    return pid;
}

/* out = "<directory of this binary>/name" */
static void bc_bin(const char *name, char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    snprintf(out, cap, "%s/%s", dirname(self), name);
}

/* The secret, the head (its "listening on" line read within 10 s), ct_init to it and the
 * node-joined events subscribed; addr gets its address. 0, or -1 with a line on stderr that
 * starts with who. */
static int bc_start_head(const char *who, char *addr, size_t cap)
{
    atexit(bc_kill_all);
    signal(SIGPIPE, SIG_IGN);
    if (!ct__auth_off()) {
        if (!mkdtemp(bc_secret_dir))
            return fprintf(stderr, "%s: mkdtemp: %s\n", who, strerror(errno)), -1;
        snprintf(bc_secret_file, sizeof bc_secret_file, "%s/secret", bc_secret_dir);
        if (ct__secret_file_create(bc_secret_file))
            return fprintf(stderr, "%s: %s\n", who, ct_last_error()), -1;
        setenv("CT_SECRET_FILE", bc_secret_file, 1);
    }
    char headp[PATH_MAX + 16], line[160] = "";
    bc_bin("ct-head", headp, sizeof headp);
    char *hargv[] = {headp, "--port", "0", NULL};
    int fd = -1;
    if (bc_spawn(hargv, &fd) < 0)
        return fprintf(stderr, "%s: cannot start %s\n", who, headp), -1;
    size_t k = 0;
    struct pollfd pfd = {fd, POLLIN, 0};
    while (k + 1 < sizeof line && poll(&pfd, 1, 10000) > 0 && read(fd, line + k, 1) == 1 &&
           line[k] != '\n')
        k++;
    line[k] = 0;
    close(fd);
    if (strncmp(line, "listening on ", 13))
        return fprintf(stderr, "%s: ct-head did not start\n", who), -1;
    snprintf(addr, cap, "%.*s", (int)(cap ? cap - 1 : 0), line + 13);
    if (ct_init(&(ct_init_opts){.address = addr}) < 0)
        return fprintf(stderr, "%s: ct_init: %s\n", who, ct_last_error()), -1;
    ct_events_subscribe(1u << CT_EVENT_NODE_JOINED);
    return 0;
}

/* A ct-node of the head at addr with args (NULL-terminated: "--cpus", "1", ...), waited for
 * until it joins (timeout_ms). 0, or -1 with a line on stderr. */
static int bc_start_node(const char *who, const char *addr, char *const args[], int timeout_ms)
{
    char nodep[PATH_MAX + 16];
    bc_bin("ct-node", nodep, sizeof nodep);
    char *argv[24] = {nodep, "--head", (char *)addr};
    int n = 3;
    for (int i = 0; args && args[i] && n < 23; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    ct_event ev;
    if (bc_spawn(argv, NULL) < 0 || ct_events_next(&ev, timeout_ms))
        return fprintf(stderr, "%s: a node did not join\n", who), -1;
    return 0;
}

#endif
