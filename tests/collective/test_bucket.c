/* tests/collective/test_bucket.c — the gradient bucketer among 3 forked ranks (two on one
 * node, one on another, so both transports run): bucket layout (first bucket small, then
 * large, gradients never split), results bit-identical to a plain per-tensor allreduce (AVG)
 * of integer-valued data, buckets reduced while the "backward" loop is still marking, two
 * steps in a row, no_sync accumulation, argument errors, in place (gradients carved from one
 * buffer reduced there, padding and all, unless a gap is more than padding), shard mode (ZeRO-1:
 * each rank's chunks of the buckets reduced with the allreduce's bits, covering every gradient
 * once, then allgathered), and a step on an aborted communicator (fails with CT_ECANCELED, no
 * hang). */
#include <math.h>

#include "harness.h"

#define NG 24

static size_t counts[NG];

static void fill(float *g, size_t n, int rank, int i, int step)
{
    for (size_t j = 0; j < n; j++)
        g[j] = (float)((rank + 1) * (int)((j + (size_t)i) % 17) + step);
}

static int rank_main(int rank, int world, void *arg)
{
    (void)arg;
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    CHECK(rdv);
    ct_comm *c = NULL;
    CHECK_RC(ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                         .group_id = "bucket",
                                         .rank = rank,
                                         .world_size = world,
                                         .node_id = rank < 2 ? "a" : "b",
                                         .host = "127.0.0.1",
                                         .timeout_ms = 20000},
                         &c));
    float *g[NG], *ref[NG];
    for (int i = 0; i < NG; i++) {
        g[i] = malloc(counts[i] * sizeof(float));
        ref[i] = malloc(counts[i] * sizeof(float));
        CHECK(g[i] && ref[i]);
    }
    ct_bucketer *b = NULL;
    ct_bucketer_opts bo = {.first_bucket_bytes = 64 * 1024, .bucket_bytes = 1024 * 1024};
    CHECK(ct_bucketer_new(c, g, counts, 0, &bo, &b) == CT_EINVAL && b == NULL);
    CHECK_RC(ct_bucketer_new(c, g, counts, NG, &bo, &b));

    /* layout: contiguous, in order, each bucket reaches its size unless it is the last */
    int nb = ct_bucketer_num_buckets(b), next = 0;
    CHECK(nb >= 3);
    for (int k = 0; k < nb; k++) {
        int first, n;
        ct_bucketer_bucket_range(b, k, &first, &n);
        CHECK(first == next && n >= 1);
        size_t bytes = 0;
        for (int i = first; i < first + n; i++)
            bytes += counts[i] * sizeof(float);
        if (k < nb - 1)
            CHECK(bytes >= (k == 0 ? bo.first_bucket_bytes : bo.bucket_bytes));
        if (n > 1) /* closed as soon as it reached its size */
            CHECK(bytes - counts[first + n - 1] * sizeof(float) <
                  (k == 0 ? bo.first_bucket_bytes : bo.bucket_bytes));
        next = first + n;
    }
    CHECK(next == NG);

    for (int step = 0; step < 2; step++) {
        /* reference: plain allreduce per tensor */
        for (int i = 0; i < NG; i++) {
            fill(ref[i], counts[i], rank, i, step);
            CHECK_RC(ct_comm_allreduce(c, ref[i], counts[i], CT_F32, CT_COMM_AVG, 0));
        }
        /* "backward": gradients become ready one after another, with work in between */
        for (int i = 0; i < NG; i++) {
            fill(g[i], counts[i], rank, i, step);
            usleep(1000);
            CHECK_RC(ct_bucketer_mark_ready(b, i));
        }
        CHECK(ct_bucketer_mark_ready(b, NG - 1) == CT_EINVAL); /* twice */
        CHECK(ct_bucketer_mark_ready(b, NG) == CT_EINVAL);
        CHECK_RC(ct_bucketer_finish(b));
        for (int i = 0; i < NG; i++)
            for (size_t j = 0; j < counts[i]; j++)
                if (g[i][j] != ref[i][j]) {
                    fprintf(stderr, "rank %d step %d: grad %d[%zu] = %.9g, allreduce %.9g\n", rank,
                            step, i, j, g[i][j], ref[i][j]);
                    return 1;
                }
    }

    /* no_sync: two local micro-batches accumulate, then one synced step reduces the sum */
    ct_bucketer_set_no_sync(b, true);
    for (int i = 0; i < NG; i++)
        fill(g[i], counts[i], rank, i, 5);
    for (int i = 0; i < NG; i++)
        CHECK_RC(ct_bucketer_mark_ready(b, i));
    CHECK_RC(ct_bucketer_finish(b));
    for (int i = 0; i < NG; i++) /* untouched: still this rank's values */
        for (size_t j = 0; j < counts[i]; j++) {
            float want = (float)((rank + 1) * (int)((j + (size_t)i) % 17) + 5);
            if (g[i][j] != want) {
                fprintf(stderr, "rank %d no_sync: grad %d[%zu] = %g, want local %g\n", rank, i, j,
                        g[i][j], want);
                return 1;
            }
        }
    ct_bucketer_set_no_sync(b, false);
    for (int i = 0; i < NG; i++) {
        for (size_t j = 0; j < counts[i]; j++)
            g[i][j] += (float)((rank + 1) * (int)((j + (size_t)i) % 17) + 6);
        CHECK_RC(ct_bucketer_mark_ready(b, i));
    }
    CHECK_RC(ct_bucketer_finish(b));
    for (int i = 0; i < NG; i++)
        for (size_t j = 0; j < counts[i]; j++) {
            int m = (int)((j + (size_t)i) % 17);
            /* sum over ranks of (r+1)*m*2 + 11, divided by world */
            double want = (double)(world * (world + 1) * m + 11 * world) / world;
            if (fabs(g[i][j] - want) > 1e-6 * (1 + want)) {
                fprintf(stderr, "rank %d accumulated: grad %d[%zu] = %.9g, want %.9g\n", rank, i, j,
                        g[i][j], want);
                return 1;
            }
        }
    /* finish with nothing marked marks everything: still a full, correct step */
    for (int i = 0; i < NG; i++)
        fill(g[i], counts[i], rank, i, 0);
    CHECK_RC(ct_bucketer_finish(b));
    for (int i = 0; i < NG; i++) {
        fill(ref[i], counts[i], rank, i, 0);
        CHECK_RC(ct_comm_allreduce(c, ref[i], counts[i], CT_F32, CT_COMM_AVG, 0));
        CHECK(memcmp(g[i], ref[i], counts[i] * sizeof(float)) == 0);
    }
    /* in place (opts.in_place): gradients carved from one buffer as ct_module_params carves a
     * module's (64-byte aligned; the trainer hands them over last first, so gradient 0 is the
     * highest in memory). Every bucket is reduced there, with the allreduce's bits, and the
     * padding keeps its zeros. A second layout puts 64 floats between the first two gradients
     * of the first bucket of several: that bucket is packed, with the same results. */
    int gapped = -1;
    for (int k = 0; k < nb && gapped < 0; k++) {
        int first, nk;
        ct_bucketer_bucket_range(b, k, &first, &nk);
        gapped = nk > 1 ? first + 1 : -1;
    }
    CHECK(gapped > 0);
    for (int layout = 0; layout < 2; layout++) {
        size_t total = 0, at[NG];
        for (int i = NG - 1; i >= 0; i--) {
            at[i] = total;
            total = (total + counts[i] + 15) & ~(size_t)15;
            if (layout == 1 && i == gapped)
                total += 64;
        }
        float *flat = calloc(total, sizeof(float)), *gf[NG];
        CHECK(flat);
        for (int i = 0; i < NG; i++) {
            gf[i] = flat + at[i];
            fill(gf[i], counts[i], rank, i, 4);
            fill(ref[i], counts[i], rank, i, 4);
            CHECK_RC(ct_comm_allreduce(c, ref[i], counts[i], CT_F32, CT_COMM_AVG, 0));
        }
        ct_bucketer *bp = NULL;
        ct_bucketer_opts io = bo;
        io.in_place = true;
        CHECK_RC(ct_bucketer_new(c, gf, counts, NG, &io, &bp));
        for (int k = 0; k < nb; k++) {
            int first, nk;
            ct_bucketer_bucket_range(bp, k, &first, &nk);
            bool gap = layout == 1 && first < gapped && gapped < first + nk;
            CHECK(ct_bucketer_in_place(bp, k) == !gap);
        }
        for (int i = 0; i < NG; i++)
            CHECK_RC(ct_bucketer_mark_ready(bp, i));
        CHECK_RC(ct_bucketer_finish(bp));
        for (int i = 0; i < NG; i++)
            CHECK(memcmp(gf[i], ref[i], counts[i] * sizeof(float)) == 0);
        /* the gradients' averages are all at least 4: every other float, padding, is still 0 */
        size_t nonzero = 0, used = 0;
        for (int i = 0; i < NG; i++)
            used += counts[i];
        for (size_t j = 0; j < total; j++)
            nonzero += flat[j] != 0.0f;
        CHECK(nonzero == used);
        ct_bucketer_destroy(&bp);
        free(flat);
    }

    /* shard mode (ZeRO-1): each rank gets the averages of its chunks of the buckets (the
     * allreduce's bits); the shards of a gradient over all ranks cover it once; the allgather
     * puts every rank's shard everywhere */
    size_t lo, n;
    ct_bucketer_shard(b, 3, &lo, &n);
    CHECK(lo == 0 && n == counts[3]);
    CHECK(ct_bucketer_allgather(b, g) == CT_EINVAL); /* not in shard mode */
    ct_bucketer *bs = NULL;
    bo.shard = true;
    CHECK_RC(ct_bucketer_new(c, g, counts, NG, &bo, &bs));
    for (int i = 0; i < NG; i++) {
        fill(g[i], counts[i], rank, i, 3);
        fill(ref[i], counts[i], rank, i, 3);
        CHECK_RC(ct_comm_allreduce(c, ref[i], counts[i], CT_F32, CT_COMM_AVG, 0));
    }
    for (int i = 0; i < NG; i++)
        CHECK_RC(ct_bucketer_mark_ready(bs, i));
    CHECK_RC(ct_bucketer_finish(bs));
    float owned[NG];
    for (int i = 0; i < NG; i++) {
        ct_bucketer_shard(bs, i, &lo, &n);
        CHECK(lo + n <= counts[i]);
        owned[i] = (float)n;
        if (n && memcmp(g[i] + lo, ref[i] + lo, n * sizeof(float))) {
            fprintf(stderr, "rank %d shard: grad %d [%zu, %zu) is not the allreduce's\n", rank, i,
                    lo, lo + n);
            return 1;
        }
        for (size_t j = 0; j < counts[i]; j++) /* only the shard is known: the rest is lost */
            g[i][j] = j >= lo && j < lo + n ? g[i][j] : -1.0f;
    }
    CHECK_RC(ct_comm_allreduce(c, owned, NG, CT_F32, CT_COMM_SUM, 0));
    for (int i = 0; i < NG; i++)
        if (owned[i] != (float)counts[i]) {
            fprintf(stderr, "shards of grad %d cover %g of %zu elements\n", i, owned[i], counts[i]);
            return 1;
        }
    CHECK_RC(ct_bucketer_allgather(bs, g));
    for (int i = 0; i < NG; i++)
        if (memcmp(g[i], ref[i], counts[i] * sizeof(float))) {
            fprintf(stderr, "rank %d shard: grad %d after the allgather differs\n", rank, i);
            return 1;
        }
    ct_bucketer_destroy(&bs);

    /* an aborted communicator: the step fails with CT_ECANCELED instead of hanging, the
     * thread is joined by destroy */
    for (int i = 0; i < NG / 2; i++) { /* a faster peer may have aborted already */
        int rc = ct_bucketer_mark_ready(b, i);
        CHECK(rc == 0 || rc == CT_ECONNRESET);
    }
    ct_comm_abort(c);
    for (int i = NG / 2; i < NG; i++) {
        int rc = ct_bucketer_mark_ready(b, i);
        CHECK(rc == 0 || rc == CT_ECANCELED || rc == CT_ECONNRESET);
    }
    /* own abort, or a peer that aborted first while a bucket was in flight */
    int frc = ct_bucketer_finish(b);
    CHECK(frc == CT_ECANCELED || frc == CT_ECONNRESET);
    ct_bucketer_destroy(&b);
    CHECK(b == NULL);
    ct_bucketer_destroy(&b);
    for (int i = 0; i < NG; i++) {
        free(g[i]);
        free(ref[i]);
    }
    ct_comm_destroy(&c);
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

int main(void)
{
    /* a mix of sizes, like a small CNN's gradients in reverse order: biases and big weights */
    for (int i = 0; i < NG; i++)
        counts[i] = i % 3 == 0 ? 10 + (size_t)i : i % 3 == 1 ? 3000 * (size_t)(i + 1) : 70000;
    counts[3] = 400000; /* starts bucket 1 and fills it alone: reduced in place */
    counts[7] = 1;
    if (t_rdv_init() < 0)
        return 1;
    int bad = t_run(3, rank_main, NULL, 60000, "bucket");
    t_rdv_cleanup();
    if (!bad)
        fprintf(stderr, "bucket: ok\n");
    return bad;
}
