/* bench/allreduce/bench_allreduce.c — ct's side of the allreduce benchmark: 2 forked ranks,
 * f32 allreduce (SUM) of each size, warm-up then timed iterations; rank 0 prints per size
 *   RESULT <impl> <bytes> <median latency us> <bus bandwidth GB/s>
 * busbw = algbw * 2(n-1)/n (nccl-tests), algbw = bytes / median time. `memcpy` mode measures
 * this machine's memcpy bandwidth (64 MiB, median) as the limit. Each size is checked before
 * and after its timed calls: one allreduce of a rank-dependent pattern, every element compared
 * with the exact sum; a wrong element prints "allreduce: WRONG SUM ..." and the program exits 1. */
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

int ct__auth_ensure(void); /* common/auth.h: one secret for the forked ranks */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const size_t sizes[] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};

static int iters_for(size_t bytes)
{
    return bytes <= 65536 ? 2000 : bytes <= (1 << 20) ? 300 : bytes <= (16 << 20) ? 40 : 15;
}

/* Allreduces n floats of a pattern (rank r holds (i % 1000) + 1000 r, sums exact in f32) and
 * compares every element with the sum over both ranks; returns 0, or 1 after printing the first
 * wrong element or the error. */
static int check_sum(ct_comm *c, float *buf, size_t n, int rank, const char *mode)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(i % 1000) + 1000.0f * (float)rank;
    if (ct_comm_allreduce(c, buf, n, CT_F32, CT_COMM_SUM, 0) < 0) {
        fprintf(stderr, "rank %d: allreduce: %s\n", rank, ct_last_error());
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        float want = 2.0f * (float)(i % 1000) + 1000.0f; /* rank 0's + rank 1's */
        if (buf[i] != want) {
            fprintf(stderr,
                    "allreduce: WRONG SUM ct_%s %zu bytes, rank %d: element %zu = %g, want %g\n",
                    mode, n * sizeof(float), rank, i, buf[i], want);
            return 1;
        }
    }
    return 0;
}

static int rank_main(int rank, const char *mode, const char *dir)
{
    const int world = 2;
    ct_rendezvous *rdv = ct_rendezvous_file_new(dir);
    char node[16];
    snprintf(node, sizeof node, "n%d", strcmp(mode, "shm") == 0 ? 0 : rank);
    ct_comm *c = NULL;
    int rc = ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                         .group_id = mode,
                                         .rank = rank,
                                         .world_size = world,
                                         .node_id = node,
                                         .host = "127.0.0.1",
                                         .timeout_ms = 60000},
                         &c);
    if (rc < 0) {
        fprintf(stderr, "rank %d: ct_comm_new: %s\n", rank, ct_last_error());
        return 1;
    }
    float *buf = malloc(64 << 20);
    double *t = malloc(sizeof(double) * 4000);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k] / sizeof(float);
        int iters = iters_for(sizes[k]), warm = iters / 10 + 2;
        if (check_sum(c, buf, n, rank, mode))
            return 1;
        for (size_t i = 0; i < n; i++)
            buf[i] = 1.0f;
        for (int it = 0; it < warm + iters; it++) {
            double t0 = now_us();
            rc = ct_comm_allreduce(c, buf, n, CT_F32, CT_COMM_SUM, 0);
            double dt = now_us() - t0;
            if (rc < 0) {
                fprintf(stderr, "rank %d: allreduce: %s\n", rank, ct_last_error());
                return 1;
            }
            if (it >= warm)
                t[it - warm] = dt;
        }
        if (check_sum(c, buf, n, rank, mode)) /* again: repeated calls left nothing wrong */
            return 1;
        qsort(t, (size_t)iters, sizeof *t, cmp_d);
        double med = t[iters / 2];
        double busbw = (double)sizes[k] / (med * 1e-6) * 2.0 * (world - 1) / world / 1e9;
        if (rank == 0)
            printf("RESULT ct_%s %zu %.2f %.3f\n", mode, sizes[k], med, busbw);
        fflush(stdout);
        ct_comm_barrier(c, 0);
    }
    ct_comm_destroy(&c);
    ct_rendezvous_file_destroy(&rdv);
    free(buf);
    free(t);
    return 0;
}

static int bench_memcpy(void)
{
    size_t bytes = 64 << 20;
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double t[15];
    for (int it = 0; it < 15; it++) {
        double t0 = now_us();
        memcpy(b, a, bytes);
        t[it] = now_us() - t0;
        a[it] = b[bytes - 1 - (size_t)it]; /* keep the copies observable */
    }
    qsort(t, 15, sizeof *t, cmp_d);
    printf("RESULT memcpy %zu %.2f %.3f\n", bytes, t[7], (double)bytes / (t[7] * 1e-6) / 1e9);
    free(a);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "shm";
    if (strcmp(mode, "memcpy") == 0)
        return bench_memcpy();
    if (strcmp(mode, "shm") && strcmp(mode, "tcp")) {
        fprintf(stderr, "usage: %s shm|tcp|memcpy\n", argv[0]);
        return 2;
    }
    char dir[] = "/tmp/ct-bench-allreduce-XXXXXX";
    if (ct__auth_ensure() || !mkdtemp(dir))
        return 1;
    pid_t pids[2], parent = getpid();
    fflush(stdout);
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            _exit(rank_main(r, mode, dir));
        }
    }
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        int st;
        if (pids[r] > 0 && waitpid(pids[r], &st, 0) == pids[r])
            bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        if (bad)
            for (int q = 0; q < 2; q++)
                if (pids[q] > 0)
                    kill(pids[q], SIGKILL);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        bad = 1;
    return bad;
}
