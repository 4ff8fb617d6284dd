/* tests/collective/test_bucket_device.c — the bucketer over gradients on the checking device,
 * with the CPU ring as its communication backend (2 forked ranks on one node).
 *
 * Each "backward" first leaves the compute stream a backlog (200 small kernels, so that its
 * worker runs tens of milliseconds behind the host), then writes each gradient with a kernel
 * and marks it ready at once, as the engine's gradient-ready hook does: the gradient is queued,
 * not written. After finish an "optimizer" kernel copies every gradient on the compute stream
 * and the host downloads the copies. With the bucketer's waits (a bucket's event recorded on
 * the compute stream and waited for by the communication stream; the compute stream waiting
 * for the last bucket's averages) every value is the exact average, over 3 steps. With the
 * waits skipped (ct__bucketer_test_skip_waits, for this test only) the same run must go wrong:
 * the communication stream reads gradients before they are written and the copies read them
 * before the averages arrive, so at least one of 3 steps has a wrong value. The same again with
 * the gradients on two devices (the first three on checkdev:0, the rest on checkdev:1, as a
 * model across devices has them: ct_bucketer_opts.devices), each with its own backlog. Under
 * TSan only the halves with the waits run (the others race on purpose). */
#include <math.h>

#include "harness.h"
#include "trainer/backend/backend.h"
#include "trainer/collective/internal.h"

#define NG 6
#define BACKLOG 200

static const size_t counts[NG] = {10, 3000, 1, 5000, 700, 2500};

/* One step; returns how many values were wrong (or -1 on an error). bks[i]: gradient i's
 * device, scratch[i] memory there. */
static int step(const ct__backend **bks, ct_bucketer *b, float **g, float **out, float **scratch,
                int rank, int s, float *host)
{
    for (int k = 0; k < BACKLOG; k++)
        for (int i = 0; i < NG; i += NG - 1)
            if (bks[i]->fill(1024, (float)k, scratch[i]) < 0)
                return -1;
    for (int i = 0; i < NG; i++) {
        const ct__backend *bk = bks[i];
        if (bk->fill((int64_t)counts[i], (float)((rank + 1) * (i + 1) + s), g[i]) < 0 ||
            ct_bucketer_mark_ready(b, i) < 0)
            return -1;
    }
    if (ct_bucketer_finish(b) < 0)
        return -1;
    for (int i = 0; i < NG; i++)
        if (bks[i]->copy(out[i], g[i], counts[i] * sizeof(float)) < 0)
            return -1;
    int wrong = 0;
    for (int i = 0; i < NG; i++) {
        if (bks[i]->download(host, out[i], counts[i] * sizeof(float)) < 0)
            return -1;
        float want = (float)((1 * (i + 1) + s) + (2 * (i + 1) + s)) / 2.0f;
        for (size_t j = 0; j < counts[i]; j++)
            wrong += host[j] != want;
    }
    /* the next step starts from stale gradients the wrong order can read: a sentinel */
    for (int i = 0; i < NG; i++)
        if (bks[i]->fill((int64_t)counts[i], -7.0f, g[i]) < 0)
            return -1;
    return bks[0]->synchronize(NULL) < 0 || bks[NG - 1]->synchronize(NULL) < 0 ? -1 : wrong;
}

static int run(int rank, int world, bool skip, bool two, const char *group, int *wrong_steps)
{
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    CHECK(rdv);
    ct_comm *c = NULL;
    CHECK_RC(ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                         .group_id = group,
                                         .rank = rank,
                                         .world_size = world,
                                         .node_id = "a",
                                         .host = "127.0.0.1",
                                         .timeout_ms = 20000},
                         &c));
    ct_device devs[NG];
    const ct__backend *bks[NG];
    float *g[NG], *out[NG], *scratch[NG] = {0}, *host = malloc(5000 * sizeof(float));
    CHECK(host);
    for (int i = 0; i < NG; i++) {
        devs[i] = ct_device_make(CT_CHECKDEV, two && i >= NG / 2);
        CHECK(bks[i] = ct__backend_of(devs[i]));
        const ct__backend *bk = bks[i];
        CHECK_RC(bk->alloc((void **)&scratch[i], 1024 * sizeof(float)));
        CHECK_RC(bk->alloc((void **)&g[i], counts[i] * sizeof(float)));
        CHECK_RC(bk->alloc((void **)&out[i], counts[i] * sizeof(float)));
        CHECK_RC(bk->fill((int64_t)counts[i], -7.0f, g[i]));
    }
    ct_bucketer *b = NULL;
    CHECK_RC(ct_bucketer_new(c, g, counts, NG,
                             &(ct_bucketer_opts){.first_bucket_bytes = 4096,
                                                 .bucket_bytes = 8192,
                                                 .device = CT_CHECKDEV,
                                                 .devices = two ? devs : NULL},
                             &b));
    CHECK(ct_bucketer_num_buckets(b) >= 3);
    for (int k = 0; two && k < ct_bucketer_num_buckets(b); k++) { /* one device a bucket */
        int first, n;
        ct_bucketer_bucket_range(b, k, &first, &n);
        CHECK(devs[first] == devs[first + n - 1]);
    }
    ct__bucketer_test_skip_waits(b, skip);
    *wrong_steps = 0;
    for (int s = 0; s < 3; s++) {
        int w = step(bks, b, g, out, scratch, rank, s, host);
        CHECK(w >= 0);
        *wrong_steps += w > 0;
        if (w > 0)
            fprintf(stderr, "rank %d, waits %s, step %d: %d wrong values\n", rank,
                    skip ? "skipped" : "kept", s, w);
    }
    ct_bucketer_destroy(&b);
    for (int i = 0; i < NG; i++) {
        bks[i]->free(g[i]);
        bks[i]->free(out[i]);
        bks[i]->free(scratch[i]);
    }
    free(host);
    ct_comm_destroy(&c);
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

static int rank_main(int rank, int world, void *arg)
{
    (void)arg;
    int wrong = 0;
    for (int two = 0; two < 2; two++) {
        if (run(rank, world, false, two, two ? "bdev2-waits" : "bdev-waits", &wrong))
            return 1;
        CHECK(wrong == 0); /* with the waits: exact averages, every step */
#ifndef __SANITIZE_THREAD__
        /* Without the waits the streams' worker threads race on the gradients by design (a
         * fill on the compute stream against the communication stream's download), which is
         * what the checking device must show. ThreadSanitizer reports that very race, so a TSan
         * build (gcc defines __SANITIZE_THREAD__; make tsan) runs only the halves with the
         * waits. */
        if (run(rank, world, true, two, two ? "bdev2-nowaits" : "bdev-nowaits", &wrong))
            return 1;
        CHECK(wrong > 0); /* without them the checking device shows the race */
#endif
    }
    return 0;
}

int main(void)
{
    if (t_rdv_init() < 0)
        return 1;
    int bad = t_run(2, rank_main, NULL, 60000, "bucket_device");
    t_rdv_cleanup();
    if (!bad)
        fprintf(stderr, "bucket_device: ok\n");
    return bad;
}
