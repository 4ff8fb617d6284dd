/* tests/collective/test_ops.c — allreduce (sum, avg), broadcast, allgather, barrier, and ZeRO's
 * reduce-scatter (the allreduce's bits on each rank's chunk), allgather of chunks and allgatherv
 * (uneven counts, some empty) of the
 * ring backend across 2, 3, 4 and 8 forked ranks, lengths 1, 7, 1000 and 10^6 (10^6 only up to
 * 4 ranks, 10^5 for 8: 8 ranks on 2 cores is slow), with integer-valued floats so sums are exact.
 * argv[1] picks the placement: shm (one node id), tcp (a node id per rank), mixed (two nodes,
 * interleaved ranks, so node blocks are not contiguous and some roots are not leaders), blocks
 * (two nodes of consecutive ranks, of unequal sizes but for W=2, one node). Both are the
 * hierarchical layout (hier.c). */
#include <math.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "harness.h"

static const char *mode = "shm";
static _Atomic long long *barrier_entry_ms; /* shared with the ranks: [world] */
static int barrier_world;                   /* the world being run (blocks' split) */

static const char *node_of(int rank, char *buf)
{
    if (strcmp(mode, "shm") == 0)
        return "n0";
    if (strcmp(mode, "tcp") == 0)
        sprintf(buf, "n%d", rank);
    else if (strcmp(mode, "blocks") == 0)
        sprintf(buf, "%s", rank < 1 + barrier_world / 2 ? "a" : "b");
    else
        sprintf(buf, "%s", rank % 3 == 0 ? "a" : "b");
    return buf;
}

static int check_lengths(ct_comm *c, int rank, int world, size_t len)
{
    float *buf = malloc(len * sizeof(float));
    float *all = malloc(len * world * sizeof(float));
    CHECK(buf && all);

    /* allreduce SUM: exact */
    for (size_t i = 0; i < len; i++)
        buf[i] = (float)((rank + 1) * (int)(i % 13 + 1));
    CHECK_RC(ct_comm_allreduce(c, buf, len, CT_F32, CT_COMM_SUM, 0));
    for (size_t i = 0; i < len; i++) {
        float want = (float)(world * (world + 1) / 2 * (int)(i % 13 + 1));
        if (buf[i] != want) {
            fprintf(stderr, "%s W=%d len=%zu rank %d: sum[%zu] = %g, want %g\n", mode, world, len,
                    rank, i, buf[i], want);
            return 1;
        }
    }
    /* allreduce AVG */
    for (size_t i = 0; i < len; i++)
        buf[i] = (float)(rank * 3 + (int)(i % 7));
    CHECK_RC(ct_comm_allreduce(c, buf, len, CT_F32, CT_COMM_AVG, 0));
    for (size_t i = 0; i < len; i++) {
        double want = 3.0 * (world - 1) / 2.0 + (double)(i % 7);
        if (fabs(buf[i] - want) > 1e-5 * (1 + fabs(want))) {
            fprintf(stderr, "%s W=%d len=%zu rank %d: avg[%zu] = %.9g, want %.9g\n", mode, world,
                    len, rank, i, buf[i], want);
            return 1;
        }
    }
    /* broadcast from rank 0 and from the last rank (not a node leader in "mixed") */
    int roots[2] = {0, world - 1};
    for (int k = 0; k < 2; k++) {
        int root = roots[k];
        for (size_t i = 0; i < len; i++)
            buf[i] = rank == root ? (float)(i % 1000) + 0.5f + (float)root : -1.0f;
        CHECK_RC(ct_comm_broadcast(c, buf, len, CT_F32, root, 0));
        for (size_t i = 0; i < len; i++) {
            float want = (float)(i % 1000) + 0.5f + (float)root;
            if (buf[i] != want) {
                fprintf(stderr, "%s W=%d len=%zu rank %d: bcast(root %d)[%zu] = %g, want %g\n",
                        mode, world, len, rank, root, i, buf[i], want);
                return 1;
            }
        }
    }
    /* allgather, out of place then in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        for (size_t i = 0; i < len * world; i++)
            all[i] = -7.0f;
        float *send = inplace ? all + (size_t)rank * len : buf;
        for (size_t i = 0; i < len; i++)
            send[i] = (float)(rank * 1000 + (int)(i % 1000));
        CHECK_RC(ct_comm_allgather(c, send, all, len, CT_F32, 0));
        for (int r = 0; r < world; r++)
            for (size_t i = 0; i < len; i++) {
                float want = (float)(r * 1000 + (int)(i % 1000));
                if (all[(size_t)r * len + i] != want) {
                    fprintf(stderr, "%s W=%d len=%zu rank %d: allgather%s[%d][%zu] = %g, want %g\n",
                            mode, world, len, rank, inplace ? " in place" : "", r, i,
                            all[(size_t)r * len + i], want);
                    return 1;
                }
            }
    }
    /* reduce-scatter (AVG) of non-integer values: this rank's chunk has the allreduce's bits */
    size_t lo, n, olo, on;
    ct_comm_chunk(len, world, rank, &lo, &n);
    CHECK(lo ==
          (size_t)rank * (len / world) + ((size_t)rank < len % world ? (size_t)rank : len % world));
    CHECK(n == len / world + ((size_t)rank < len % world));
    float *ref = all; /* len * world >= len floats */
    for (size_t i = 0; i < len; i++)
        buf[i] = ref[i] = (float)(rank + 1) * 0.1f + (float)(i % 11) * 0.37f + 1e-3f * (float)i;
    CHECK_RC(ct_comm_allreduce(c, ref, len, CT_F32, CT_COMM_AVG, 0));
    CHECK_RC(ct_comm_reduce_scatter(c, buf, len, CT_COMM_AVG, 0));
    for (size_t i = lo; i < lo + n; i++)
        if (memcmp(&buf[i], &ref[i], sizeof(float))) {
            fprintf(stderr, "%s W=%d len=%zu rank %d: reduce_scatter[%zu] = %.9g, allreduce %.9g\n",
                    mode, world, len, rank, i, buf[i], ref[i]);
            return 1;
        }
    /* allgather of chunks: every element from its owner */
    for (size_t i = 0; i < len; i++)
        buf[i] = i >= lo && i < lo + n ? (float)(rank * 1000 + (int)(i % 1000)) : -7.0f;
    CHECK_RC(ct_comm_allgather_chunks(c, buf, len, CT_F32, 0));
    for (int r = 0; r < world; r++) {
        ct_comm_chunk(len, world, r, &olo, &on);
        for (size_t i = olo; i < olo + on; i++)
            if (buf[i] != (float)(r * 1000 + (int)(i % 1000))) {
                fprintf(stderr, "%s W=%d len=%zu rank %d: allgather_chunks[%zu] = %g, want %d\n",
                        mode, world, len, rank, i, buf[i], r * 1000 + (int)(i % 1000));
                return 1;
            }
    }
    /* allgatherv with uneven counts (some zero): rank r's block of counts[r] at its offset */
    size_t counts[8], total = 0, my_off = 0;
    for (int r = 0; r < world; r++) {
        counts[r] = r % 3 == 1 ? 0 : (len + (size_t)r * 7) / (size_t)(r + 1);
        if (r < rank)
            my_off += counts[r];
        total += counts[r];
    }
    float *v = malloc((total ? total : 1) * sizeof(float));
    CHECK(v);
    for (size_t i = 0; i < total; i++)
        v[i] = i >= my_off && i < my_off + counts[rank] ? (float)(rank * 100000 + (int)(i % 9973))
                                                        : -7.0f;
    CHECK_RC(ct_comm_allgatherv(c, v, counts, CT_F32, 0));
    for (int r = 0, off = 0; r < world; off += (int)counts[r], r++)
        for (size_t i = (size_t)off; i < (size_t)off + counts[r]; i++)
            if (v[i] != (float)(r * 100000 + (int)(i % 9973))) {
                fprintf(stderr, "%s W=%d len=%zu rank %d: allgatherv[%zu] = %g, want rank %d's\n",
                        mode, world, len, rank, i, v[i], r);
                return 1;
            }
    free(v);
    free(buf);
    free(all);
    return 0;
}

static int rank_main(int rank, int world, void *arg)
{
    (void)arg;
    char nb[32], group[64];
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    CHECK(rdv);
    snprintf(group, sizeof group, "ops-%s-%d", mode, world);
    /* mixed: the default address (the first non-loopback IPv4 address) */
    const char *host = strcmp(mode, "mixed") ? "127.0.0.1" : NULL;
    barrier_world = world;
    ct_comm *c = NULL;
    CHECK_RC(ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                         .group_id = group,
                                         .rank = rank,
                                         .world_size = world,
                                         .node_id = node_of(rank, nb),
                                         .host = host,
                                         .timeout_ms = 20000},
                         &c));
    CHECK(ct_comm_rank(c) == rank && ct_comm_world_size(c) == world);
    /* 8 ranks on 2 cores: 10^5 instead of 10^6 still takes the large-message paths */
    size_t lens[4] = {1, 7, 1000, world <= 4 ? 1000000 : 100000};
    for (int k = 0; k < 4; k++)
        if (check_lengths(c, rank, world, lens[k]))
            return 1;
    /* barrier: nobody leaves before the last rank arrives (it arrives 100 ms late) */
    CHECK_RC(ct_comm_barrier(c, 0));
    if (rank == world - 1) {
        usleep(100 * 1000);
        atomic_store(&barrier_entry_ms[world], t_now_ms());
    }
    CHECK_RC(ct_comm_barrier(c, 0));
    long long left = t_now_ms(), entered = atomic_load(&barrier_entry_ms[world]);
    if (entered == 0 || left < entered) {
        fprintf(stderr,
                "%s W=%d rank %d left the barrier at %lld, before the last rank "
                "entered it (%lld)\n",
                mode, world, rank, left, entered);
        return 1;
    }
    CHECK(ct_comm_status(c) == 0);
    /* f16 on the ring backend is refused, and does not break the communicator */
    CHECK(ct_comm_allreduce(c, nb, 1, CT_F16, CT_COMM_SUM, 0) == CT_EINVAL);
    CHECK_RC(ct_comm_barrier(c, 0));
    ct_comm_destroy(&c);
    CHECK(c == NULL);
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        mode = argv[1];
    if (strcmp(mode, "shm") && strcmp(mode, "tcp") && strcmp(mode, "mixed") &&
        strcmp(mode, "blocks")) {
        fprintf(stderr, "usage: %s shm|tcp|mixed|blocks\n", argv[0]);
        return 2;
    }
    barrier_entry_ms = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (barrier_entry_ms == MAP_FAILED || t_rdv_init() < 0)
        return 1;
    int worlds[4] = {2, 3, 4, 8}, bad = 0;
    for (int k = 0; k < 4 && !bad; k++) {
        char label[64];
        snprintf(label, sizeof label, "ops %s W=%d", mode, worlds[k]);
        long long t0 = t_now_ms();
        bad = t_run(worlds[k], rank_main, NULL, 60000, label);
        fprintf(stderr, "%s: %s in %lld ms\n", label, bad ? "FAILED" : "ok", t_now_ms() - t0);
    }
    t_rdv_cleanup();
    return bad;
}
