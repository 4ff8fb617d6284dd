/* bench/objectstore/bench_objectstore.c — object store throughput: memcpy (the physical limit),
 * local put (create + copy + seal) and get (pin + read every byte + release), and node-to-node
 * pull over loopback TCP from a holder process, for several object sizes.
 *
 * Pulls go over the holder's data port (objectstore/xfer_data.h); OS_BENCH_ZMQ_ONLY=1 pulls with
 * ZeroMQ chunk messages instead (the older path), CT_XFER_NO_SENDFILE=1 (seen by the holder)
 * makes it send() instead of sendfile(). OS_BENCH_PULL_ONLY=1 skips the local figures,
 * OS_BENCH_PULL_REPS=n sets the number of pulls, OS_BENCH_CHUNK_MB / OS_BENCH_WINDOW the
 * pull's chunk size and window.
 *
 * Usage: bench_objectstore [sizes in MiB, default "1 64 1024"]. Each figure is the median of
 * several runs after one warm-up run; the warm-up of a put also faults in the arena pages, as a
 * long-running node's store would have them. Prints one "key=value" line per measurement. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <zmq.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/common.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"

#define MB (1ull << 20)

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int reps_for(uint64_t size)
{
    return size >= 512 * MB ? 5 : size >= 32 * MB ? 10 : 200;
}

static volatile uint64_t sink;

/* CPU seconds (user + system) used so far by process pid (all its threads). */
static double cpu_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / sysconf(_SC_CLK_TCK);
}

static uint64_t read_all(const void *p, uint64_t n)
{
    const uint64_t *q = p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (uint64_t i = 0; i + 4 <= n / 8; i += 4) {
        s0 += q[i];
        s1 += q[i + 1];
        s2 += q[i + 2];
        s3 += q[i + 3];
    }
    return s0 ^ s1 ^ s2 ^ s3;
}

int main(int argc, char **argv)
{
    uint64_t sizes[8] = {1 * MB, 64 * MB, 1024 * MB};
    int nsizes = 3;
    if (ct__auth_ensure()) /* one secret for both processes: the transfers check it */
        return 1;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 8; i++)
            sizes[nsizes++] = strtoull(argv[i], NULL, 10) * MB;
    }
    uint64_t maxsz = 0;
    for (int i = 0; i < nsizes; i++)
        maxsz = sizes[i] > maxsz ? sizes[i] : maxsz;
    unsigned char *src = malloc(maxsz), *dst = malloc(maxsz);
    if (!src || !dst)
        return fprintf(stderr, "out of memory\n"), 1;
    for (uint64_t i = 0; i < maxsz; i++)
        src[i] = (unsigned char)(i * 131 + (i >> 12));
    memset(dst, 1, maxsz);

    char name[64], hname[64];
    snprintf(name, sizeof name, "osbench-%d", (int)getpid());
    snprintf(hname, sizeof hname, "osbench-h-%d", (int)getpid());
    ct_store *s = ct_store_new(&(ct_store_opts){.name = name, .memory_cap = maxsz + 64 * MB});
    if (!s)
        return fprintf(stderr, "store: %s\n", ct_last_error()), 1;

    /* Holder process for the pulls: one object per size. */
    int fd[2];
    if (pipe(fd))
        return 1;
    pid_t parent = getpid();
    pid_t holder = fork();
    if (holder == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        uint64_t total = 0;
        for (int i = 0; i < nsizes; i++)
            total += sizes[i] + 4096;
        ct_store *hs = ct_store_new(&(ct_store_opts){.name = hname, .memory_cap = total});
        if (!hs)
            _exit(2);
        for (int i = 0; i < nsizes; i++) {
            ct_object_id id = {{0}};
            id.b[0] = (uint8_t)(i + 1);
            if (ct_store_put(hs, &id, src, sizes[i]))
                _exit(3);
        }
        ct_xfer_server *srv = ct_xfer_server_new(hs, NULL);
        if (!srv)
            _exit(4);
        char ep[256];
        snprintf(ep, sizeof ep, "%s", ct_xfer_server_endpoint(srv));
        if (write(fd[1], ep, sizeof ep) != sizeof ep)
            _exit(5);
        for (;;)
            pause();
    }
    char ep[256];
    if (read(fd[0], ep, sizeof ep) != sizeof ep) {
        fprintf(stderr, "holder did not start\n");
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
        return 1;
    }

    static double t[4096];
    void *zctx = zmq_ctx_new(); /* one per process, as ct-node would keep */
    for (int k = 0; k < nsizes; k++) {
        uint64_t sz = sizes[k];
        int reps = reps_for(sz);
        const char *unit = sz >= 1024 * MB ? "GiB" : "MiB";
        uint64_t shown = sz >= 1024 * MB ? sz / (1024 * MB) : sz / MB;

        if (getenv("OS_BENCH_PULL_ONLY"))
            goto pull;
        /* memcpy between two faulted buffers. */
        for (int r = 0; r <= reps; r++) {
            int64_t t0 = ct__now_ns();
            memcpy(dst, src, sz);
            if (r)
                t[r - 1] = sz / ((ct__now_ns() - t0) / 1e9) / 1e9;
        }
        sink += dst[sz / 3];
        printf("memcpy_%llu%s=%.2f GB/s\n", (unsigned long long)shown, unit, median(t, reps));

        /* Local put: create + memcpy + seal; then delete (not timed). */
        ct_object_id id = {{0}};
        id.b[0] = 0xee;
        for (int r = 0; r <= reps; r++) {
            void *p;
            int64_t t0 = ct__now_ns();
            if (ct_store_create(s, &id, sz, &p))
                return fprintf(stderr, "create: %s\n", ct_last_error()), 1;
            memcpy(p, src, sz);
            ct_store_seal(s, &id);
            if (r)
                t[r - 1] = sz / ((ct__now_ns() - t0) / 1e9) / 1e9;
            if (r < reps)
                ct_store_delete(s, &id);
        }
        printf("put_%llu%s=%.2f GB/s\n", (unsigned long long)shown, unit, median(t, reps));

        /* Local get: pin + read every byte + release (zero-copy, so this is read bandwidth). */
        for (int r = 0; r <= reps; r++) {
            ct_store_view v;
            int64_t t0 = ct__now_ns();
            ct_store_get(s, &id, &v);
            sink += read_all(v.data, v.size);
            ct_store_release(s, &v);
            if (r)
                t[r - 1] = sz / ((ct__now_ns() - t0) / 1e9) / 1e9;
        }
        printf("get_read_%llu%s=%.2f GB/s\n", (unsigned long long)shown, unit, median(t, reps));
        int64_t t0 = ct__now_ns();
        for (int r = 0; r < 10000; r++) {
            ct_store_view v;
            ct_store_get(s, &id, &v);
            ct_store_release(s, &v);
        }
        printf("get_pin_release_%llu%s=%.3f us\n", (unsigned long long)shown, unit,
               (ct__now_ns() - t0) / 1e3 / 10000);
        ct_store_delete(s, &id);

    pull:;
        /* Pull from the holder process over loopback TCP. */
        ct_object_id hid = {{0}};
        hid.b[0] = (uint8_t)(k + 1);
        const char *holders[] = {ep};
        int preps = reps > 20 ? 20 : reps;
        if (getenv("OS_BENCH_PULL_REPS")) /* more pulls, e.g. to profile them */
            preps = atoi(getenv("OS_BENCH_PULL_REPS")) > 0 ? atoi(getenv("OS_BENCH_PULL_REPS")) : 1;
        double cpu0 = 0, wall0 = 0;
        ct_xfer_pull_opts po = {.zmq_ctx = zctx};
        if (getenv("OS_BENCH_CHUNK_MB"))
            po.chunk_size = strtoull(getenv("OS_BENCH_CHUNK_MB"), NULL, 10) * MB;
        if (getenv("OS_BENCH_ZMQ_ONLY")) /* the chunks-over-ZeroMQ path, for comparison */
            po.zmq_only = 1;
        if (getenv("OS_BENCH_WINDOW"))
            po.window = atoi(getenv("OS_BENCH_WINDOW"));
        for (int r = 0; r <= preps; r++) {
            t0 = ct__now_ns();
            int rc = ct_xfer_pull(s, &hid, holders, 1, &po, NULL);
            if (rc)
                return fprintf(stderr, "pull: %s\n", ct_last_error()), 1;
            if (r)
                t[r - 1] = sz / ((ct__now_ns() - t0) / 1e9) / 1e9;
            ct_store_delete(s, &hid);
            if (r == 0) {
                cpu0 = cpu_of(getpid()) + cpu_of(holder);
                wall0 = ct__now_ns() / 1e9;
            }
        }
        double cpu = cpu_of(getpid()) + cpu_of(holder) - cpu0, wall = ct__now_ns() / 1e9 - wall0;
        printf("pull_%llu%s=%.2f GB/s\n", (unsigned long long)shown, unit, median(t, preps));
        printf("pull_cpu_%llu%s=%.3f cpu-s/GB (both processes, %.2f cores busy)\n",
               (unsigned long long)shown, unit, cpu / (preps * sz / 1e9), cpu / wall);
        fflush(stdout);
    }
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    ct_store_purge(hname);
    zmq_ctx_term(zctx);
    ct_store_destroy(&s);
    free(src);
    free(dst);
    return 0;
}
