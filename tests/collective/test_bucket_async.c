/* tests/collective/test_bucket_async.c — a step of device gradients does not block the host on
 * its allreduces, and is still ordered: the checking device, the CPU ring, 2 forked ranks.
 *
 * ordered: in each of 3 steps rank 1 starts its backward only after rank 0's ct_bucketer_finish
 * has returned and rank 0 has queued its "optimizer" (a copy of every gradient on the compute
 * stream) after it; rank 0 says so through the rendezvous. A finish that waited on the host for
 * the allreduces would wait for rank 1, who waits for it: the step would time out. Both ranks
 * then download the copies and must see the exact averages, so the compute stream waited for
 * the communication stream's last bucket. Between the two, each rank's main thread allreduces
 * one float while its buckets' allreduces may still be queued on the stream: it must wait for
 * them (the communicator keeps one order of collectives per rank) and get the sum.
 *
 * skipped: the same with the bucketer's stream waits removed (ct__bucketer_test_skip_waits).
 * Rank 0 synchronizes its compute stream before it lets rank 1 start, which it can only do
 * because nothing there waits for the averages any more: its copies hold its own gradients,
 * every value wrong, every step (the averages cannot exist yet). Not under TSan (the streams
 * race on the gradients by design, see test_bucket_device.c).
 *
 * watchdog: rank 1 joins the communicator and never calls an allreduce. Rank 0's finish returns
 * at once; ct_bucketer_wait then fails with CT_ETIMEDOUT from the communicator's watchdog,
 * naming the bucket's allreduce that hung, after the bucketer's 1.5 s timeout (the ring's own
 * deadline is twice that), and the communicator is broken; rank 0's compute stream is not
 * stuck (it synchronizes). */
#include <string.h>

#include "harness.h"
#include "trainer/backend/backend.h"
#include "trainer/collective/internal.h"

#define NG 5

static const size_t counts[NG] = {10, 3000, 1, 5000, 700};

struct run {
    ct_rendezvous *rdv;
    ct_comm *c;
    const ct__backend *bk;
    float *g[NG], *out[NG];
    float *host;
};

static int open_run(struct run *r, int rank, int world, const char *group)
{
    memset(r, 0, sizeof *r);
    CHECK(r->rdv = ct_rendezvous_file_new(t_rdv_dir));
    CHECK_RC(ct_comm_new(&(ct_comm_opts){.rendezvous = r->rdv,
                                         .group_id = group,
                                         .rank = rank,
                                         .world_size = world,
                                         .node_id = "a",
                                         .host = "127.0.0.1",
                                         .timeout_ms = 20000},
                         &r->c));
    CHECK(r->bk = ct__backend_of(CT_CHECKDEV));
    CHECK(r->host = malloc(5000 * sizeof(float)));
    for (int i = 0; i < NG; i++) {
        CHECK_RC(r->bk->alloc((void **)&r->g[i], counts[i] * sizeof(float)));
        CHECK_RC(r->bk->alloc((void **)&r->out[i], counts[i] * sizeof(float)));
        CHECK_RC(r->bk->fill((int64_t)counts[i], -7.0f, r->g[i]));
    }
    return 0;
}

static void close_run(struct run *r)
{
    for (int i = 0; i < NG; i++) {
        r->bk->free(r->g[i]);
        r->bk->free(r->out[i]);
    }
    r->bk->synchronize(NULL);
    free(r->host);
    ct_comm_destroy(&r->c);
    ct_rendezvous_file_destroy(&r->rdv);
}

static int signal_key(struct run *r, const char *group, const char *what, int s)
{
    char key[256];
    snprintf(key, sizeof key, "%s/%s/%d", group, what, s);
    return r->rdv->put(r->rdv->ctx, key, "1", 1);
}

static int wait_key(struct run *r, const char *group, const char *what, int s)
{
    char key[256];
    void *v = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "%s/%s/%d", group, what, s);
    int rc = r->rdv->get(r->rdv->ctx, key, &v, &len, 30000);
    free(v);
    return rc;
}

/* rank's gradients for step s: gradient i is (rank + 1) * (i + 1) + s, queued */
static int backward(struct run *r, ct_bucketer *b, int rank, int s)
{
    for (int i = 0; i < NG; i++) {
        CHECK_RC(r->bk->fill((int64_t)counts[i], (float)((rank + 1) * (i + 1) + s), r->g[i]));
        CHECK_RC(ct_bucketer_mark_ready(b, i));
    }
    return 0;
}

/* the "optimizer": out = g on the compute stream */
static int optimizer(struct run *r)
{
    for (int i = 0; i < NG; i++)
        CHECK_RC(r->bk->copy(r->out[i], r->g[i], counts[i] * sizeof(float)));
    return 0;
}

/* how many values of the copies differ from want(i, s) */
static int count_wrong(struct run *r, int s, int own_rank)
{
    int wrong = 0;
    for (int i = 0; i < NG; i++) {
        if (r->bk->download(r->host, r->out[i], counts[i] * sizeof(float)) < 0)
            return -1;
        float avg = (float)((1 * (i + 1) + s) + (2 * (i + 1) + s)) / 2.0f;
        float own = (float)((own_rank + 1) * (i + 1) + s);
        for (size_t j = 0; j < counts[i]; j++)
            wrong += own_rank < 0 ? r->host[j] != avg : r->host[j] != own;
    }
    return wrong;
}

static ct_bucketer *new_bucketer(struct run *r, int timeout_ms)
{
    ct_bucketer *b = NULL;
    if (ct_bucketer_new(r->c, r->g, counts, NG,
                        &(ct_bucketer_opts){.first_bucket_bytes = 4096,
                                            .bucket_bytes = 8192,
                                            .timeout_ms = timeout_ms,
                                            .device = CT_CHECKDEV},
                        &b) < 0)
        fprintf(stderr, "ct_bucketer_new: %s\n", ct_last_error());
    return b;
}

static int ordered(int rank, int world, bool skip, const char *group)
{
    struct run r;
    if (open_run(&r, rank, world, group))
        return 1;
    ct_bucketer *b = new_bucketer(&r, 0);
    CHECK(b);
    CHECK(ct_bucketer_num_buckets(b) >= 3);
    ct__bucketer_test_skip_waits(b, skip);
    for (int s = 0; s < 3; s++) {
        if (rank == 1)
            CHECK_RC(wait_key(&r, group, "go", s));
        if (backward(&r, b, rank, s))
            return 1;
        CHECK_RC(ct_bucketer_finish(b)); /* rank 0: rank 1 has not begun this step */
        if (optimizer(&r))
            return 1;
        if (rank == 0 && skip) {
            /* nothing on the compute stream waits for the averages: it finishes alone */
            CHECK_RC(r.bk->synchronize(NULL));
            int own = count_wrong(&r, s, 0);
            if (own != 0)
                fprintf(stderr, "skipped, step %d: %d values not rank 0's own\n", s, own);
            CHECK(own == 0); /* every value is rank 0's gradient, none the average */
        }
        if (rank == 0)
            CHECK_RC(signal_key(&r, group, "go", s));
        /* a collective of the host's while the buckets' allreduces may still be queued: it
         * waits for them (one order on every rank), so it meets the peer's own */
        float x = (float)(rank + 1);
        CHECK_RC(ct_comm_allreduce(r.c, &x, 1, CT_F32, CT_COMM_SUM, 0));
        CHECK(x == 3.0f);
        if (!skip) {
            int wrong = count_wrong(&r, s, -1);
            if (wrong)
                fprintf(stderr, "rank %d, step %d: %d values not the average\n", rank, s, wrong);
            CHECK(wrong == 0);
        }
        CHECK_RC(ct_bucketer_wait(b)); /* the next step's fills after this one's uploads */
        for (int i = 0; i < NG; i++)
            CHECK_RC(r.bk->fill((int64_t)counts[i], -7.0f, r.g[i]));
    }
    ct_bucketer_destroy(&b);
    close_run(&r);
    return 0;
}

static int watchdog(int rank, int world, const char *group)
{
    struct run r;
    if (open_run(&r, rank, world, group))
        return 1;
    if (rank == 1) { /* never joins an allreduce */
        CHECK_RC(wait_key(&r, group, "done", 0));
        close_run(&r);
        return 0;
    }
    ct_bucketer *b = new_bucketer(&r, 1500);
    CHECK(b);
    long long t0 = t_now_ms();
    if (backward(&r, b, rank, 0))
        return 1;
    CHECK_RC(ct_bucketer_finish(b)); /* the stall is on the streams, not here */
    int rc = ct_bucketer_wait(b);
    const char *msg = ct_last_error();
    fprintf(stderr, "watchdog: ct_bucketer_wait = %d after %lld ms: %s\n", rc, t_now_ms() - t0,
            msg);
    CHECK(rc == CT_ETIMEDOUT);
    CHECK(strstr(msg, "collective watchdog"));
    CHECK(strstr(msg, "the allreduce of gradient bucket 0 of"));
    CHECK(strstr(msg, "communicator aborted"));
    CHECK(ct_comm_status(r.c) == CT_ETIMEDOUT);
    CHECK_RC(r.bk->synchronize(NULL)); /* the compute stream did not wait forever */
    CHECK_RC(ct_bucketer_wait(b));     /* reported once */
    ct_bucketer_destroy(&b);
    CHECK_RC(signal_key(&r, group, "done", 0));
    close_run(&r);
    return 0;
}

static int rank_main(int rank, int world, void *arg)
{
    (void)arg;
    if (ordered(rank, world, false, "basync-ordered"))
        return 1;
#ifndef __SANITIZE_THREAD__
    if (ordered(rank, world, true, "basync-skipped"))
        return 1;
#endif
    return watchdog(rank, world, "basync-watchdog");
}

int main(void)
{
    if (t_rdv_init() < 0)
        return 1;
    int bad = t_run(2, rank_main, NULL, 90000, "bucket_async");
    t_rdv_cleanup();
    if (!bad)
        fprintf(stderr, "bucket_async: ok\n");
    return bad;
}
