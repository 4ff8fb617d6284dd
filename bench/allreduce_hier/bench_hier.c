/* bench/allreduce_hier/bench_hier.c — hierarchical allreduce against the flat TCP ring, 4
 * simulated hosts (network namespaces joined by a bridge, tests/collective/netns_hosts.h) x 2
 * ranks, f32 SUM of 64 MiB (argv[1]: another size in MiB). Each rank opens both communicators
 * (opts.topology HIER and FLAT); the timed calls alternate between them (after a barrier each),
 * so the machine's load falls on both alike. Before timing, one call on each checks that they
 * give the same bits. Rank 0 prints per layout
 *   RESULT <layout> <bytes> <median ms> <bus bandwidth GB/s>
 * (busbw = bytes / median * 2(n-1)/n) and last
 *   allreduce_hier: ct=<hier GB/s> ref=<flat GB/s> GB/s ratio=<hier/flat>
 * Needs root (namespaces): exits 77 saying why otherwise. */
#define _GNU_SOURCE /* setns, unshare (netns_hosts.h) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "ct/collective.h"
#include "ct/error.h"
#include "netns_hosts.h"

int ct__auth_ensure(void); /* common/auth.h: one secret for the forked ranks */

#define PER_HOST 2
#define WORLD (NETNS_HOSTS * PER_HOST)
#define ITERS 7

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int fail(int rank, const char *what)
{
    fprintf(stderr, "bench_hier: rank %d: %s: %s\n", rank, what, ct_last_error());
    return 1;
}

static int rank_main(int rank, size_t bytes, const char *dir)
{
    int host = rank / PER_HOST;
    char node[16], addr[32];
    snprintf(node, sizeof node, "host%d", host);
    snprintf(addr, sizeof addr, "10.79.0.%d", host + 1);
    if (netns_join_host(host))
        return 1;
    ct_rendezvous *rdv = ct_rendezvous_file_new(dir);
    ct_comm *c[2] = {NULL, NULL}; /* hierarchical, flat */
    for (int k = 0; k < 2; k++)
        if (ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                        .group_id = k ? "flat" : "hier",
                                        .rank = rank,
                                        .world_size = WORLD,
                                        .node_id = node,
                                        .host = addr,
                                        .timeout_ms = 120000,
                                        .topology = k ? CT_COMM_TOPO_FLAT : CT_COMM_TOPO_HIER},
                        &c[k]) < 0)
            return fail(rank, "ct_comm_new");
    size_t n = bytes / sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b)
        return fail(rank, "malloc");
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] = (float)rank * 0.37f + (float)(i % 1013) * 1e-3f;
    if (ct_comm_allreduce(c[0], a, n, CT_F32, CT_COMM_SUM, 0) < 0 ||
        ct_comm_allreduce(c[1], b, n, CT_F32, CT_COMM_SUM, 0) < 0)
        return fail(rank, "allreduce");
    if (memcmp(a, b, bytes)) {
        fprintf(stderr, "bench_hier: rank %d: hierarchical and flat results differ\n", rank);
        return 1;
    }
    double t[2][ITERS];
    for (int it = 0; it < ITERS; it++)
        for (int k = 0; k < 2; k++) {
            if (ct_comm_barrier(c[1], 0) < 0)
                return fail(rank, "barrier");
            double t0 = now_ms();
            if (ct_comm_allreduce(c[k], a, n, CT_F32, CT_COMM_SUM, 0) < 0)
                return fail(rank, "allreduce");
            t[k][it] = now_ms() - t0;
        }
    if (ct_comm_barrier(c[1], 0) < 0)
        return fail(rank, "barrier");
    if (rank == 0) {
        double bw[2];
        for (int k = 0; k < 2; k++) {
            qsort(t[k], ITERS, sizeof(double), cmp_d);
            double med = t[k][ITERS / 2];
            bw[k] = (double)bytes / (med * 1e-3) * 2.0 * (WORLD - 1) / WORLD / 1e9;
            printf("RESULT %s %zu %.1f %.3f\n", k ? "flat" : "hier", bytes, med, bw[k]);
        }
        printf("allreduce_hier: ct=%.3f ref=%.3f GB/s ratio=%.2f\n", bw[0], bw[1], bw[0] / bw[1]);
        fflush(stdout);
    }
    ct_comm_destroy(&c[0]);
    ct_comm_destroy(&c[1]);
    ct_rendezvous_file_destroy(&rdv);
    free(a);
    free(b);
    return 0;
}

static void kill_holders(void)
{
    for (int k = 0; k < NETNS_HOSTS; k++)
        if (netns_holders[k] > 0) {
            kill(netns_holders[k], SIGKILL);
            waitpid(netns_holders[k], NULL, 0);
        }
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
    if (mib == 0) {
        fprintf(stderr, "usage: %s [MiB > 0]\n", argv[0]);
        return 2;
    }
    if (geteuid() != 0 || unshare(CLONE_NEWNET) || netns_make_hosts() < 0) {
        fprintf(stderr, "bench_hier: SKIP: needs root and ip(8) for 4 network namespaces\n");
        kill_holders();
        return 77;
    }
    char dir[] = "/tmp/ct-bench-hier-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    ct__auth_ensure();
    fflush(stdout);
    pid_t pids[WORLD] = {0};
    for (int r = 0; r < WORLD; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            _exit(rank_main(r, mib << 20, dir));
        }
    }
    int bad = 0;
    for (int r = 0; r < WORLD; r++) {
        int st = 0;
        if (pids[r] > 0 && waitpid(pids[r], &st, 0) == pids[r] &&
            !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            bad = 1;
            for (int q = 0; q < WORLD; q++) /* one failed: the others would wait for it */
                if (q != r && pids[q] > 0)
                    kill(pids[q], SIGKILL);
        }
    }
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_hier: could not remove %s\n", dir);
    kill_holders();
    return bad;
}
