/* tests/collective/test_overlap.c — DDP-style overlap: a small CNN's parameter gradients are
 * handed to the bucketer by gradient-ready hooks (ct_module_on_grad_ready) while backward is
 * still running, among 3 forked ranks (two on one node, one on another: shared memory and
 * TCP). Checks, per rank:
 *   (a) after each of 3 SGD steps the bucketed gradients equal a plain flat allreduce (AVG) of
 *       the same local gradients within 1e-6, and the weights stay identical across ranks
 *       (bit for bit, against rank 0's broadcast);
 *   (b) every parameter's hook fires exactly once per backward, in decreasing parameter order,
 *       and before backward returns;
 *   (c) with 4 buckets, the first bucket's allreduce has finished and written its averaged
 *       gradients back while backward is still running: the last hook (parameter 0) waits,
 *       before marking its own gradient, until bucket 0 holds the averaged values (it cannot,
 *       if communication only started in ct_bucketer_finish: then the wait times out);
 *   (d) no_sync: backward over micro-batch A with no_sync, then B synced, equals the AVG over
 *       ranks of (grad A + grad B), DDP's accumulation semantics.
 * Not here: the bucketer's own layout / error paths (test_bucket.c). */
#include <math.h>
#include <stdint.h>

#include "ct/nn.h"
#include "ct/optim.h"
#include "ct/tensor.h"
#include "harness.h"

#define MAXP 16
#define BATCH 8

typedef struct ddp {
    ct_bucketer *b;
    const ct_param_ref *refs;
    int np;
    int fired[MAXP], order[4 * MAXP], nfired;
    bool backward_returned, late;
    /* (c): when set, the last hook waits for bucket 0 to hold these averaged values */
    const float *expect;
    const float *flat_g;
    int overlap_seen;
} ddp;

static ct_module *small_cnn(void)
{
    ct_conv_opts p1 = {.padding = {1, 1}};
    return CT_SEQUENTIAL(ct_nn_conv2d_new(1, 16, 3, &p1, true), ct_nn_batchnorm2d_new(16),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 0, 0),
                         ct_nn_conv2d_new(16, 16, 3, &p1, true), ct_nn_relu_new(),
                         ct_nn_flatten_new(), ct_nn_linear_new(16 * 6 * 6, 32, true),
                         ct_nn_relu_new(), ct_nn_linear_new(32, 10, true));
}

/* waits (up to 10 s) until the communication thread has written bucket 0 back, then checks its
 * gradients equal expect; 1 when they do. ct_bucketer_buckets_done() takes the bucketer's
 * lock, so the reads below are ordered after the thread's writes (no peeking while it writes). */
static int wait_bucket0(ddp *d)
{
    int first, n;
    ct_bucketer_bucket_range(d->b, 0, &first, &n);
    long long end = t_now_ms() + 10000;
    while (ct_bucketer_buckets_done(d->b) < 1) {
        if (t_now_ms() >= end)
            return 0;
        usleep(200);
    }
    for (int k = first; k < first + n; k++) {
        const ct_param_ref *p = &d->refs[d->np - 1 - k];
        const float *e = d->expect + (p->grad - d->flat_g);
        for (int64_t j = 0; j < p->numel; j++)
            if (!(fabsf(p->grad[j] - e[j]) <= 1e-6f))
                return 0;
    }
    return 1;
}

static int on_param(int i, void *user)
{
    ddp *d = user;
    if (d->backward_returned)
        d->late = true;
    if (i >= 0 && i < MAXP)
        d->fired[i]++;
    if (d->nfired < 4 * MAXP)
        d->order[d->nfired++] = i;
    if (i == 0 && d->expect) /* the last gradient of the pass: bucket 0 must be done already */
        d->overlap_seen = wait_bucket0(d);
    /* DDP order: the bucketer's gradient k is parameter np-1-k */
    return ct_bucketer_mark_ready(d->b, d->np - 1 - i);
}

static void make_batch(ct_tensor *x, ct_tensor *y, int rank, int salt)
{
    float *xp = ct_tensor_f32(x);
    for (int i = 0; i < BATCH * 144; i++)
        xp[i] = (float)(((i + 13 * rank + 7 * salt) * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < BATCH; i++)
        ((int64_t *)ct_tensor_data(y))[i] = (i * 3 + rank + salt) % 10;
}

static int fwd_bwd(ct_module *net, ct_tensor *x, ct_tensor *y, bool zero)
{
    if (zero)
        ct_module_zero_grad(net);
    ct_tensor *logits = ct_module_forward(net, x);
    ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, y, 0.0f) : NULL;
    int rc = loss ? ct_tensor_backward(loss, NULL) : CT_EINVAL;
    ct_tensor_release(&loss);
    ct_tensor_release(&logits);
    return rc;
}

static int close_all(const char *what, int rank, const float *got, const float *want, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (!(fabsf(got[j] - want[j]) <= 1e-6f)) {
            fprintf(stderr, "rank %d %s: flat grad[%lld] = %.9g, flat allreduce %.9g\n", rank, what,
                    (long long)j, got[j], want[j]);
            return 1;
        }
    return 0;
}

static int rank_main(int rank, int world, void *arg)
{
    (void)arg;
    ct_nn_set_threads(1);
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    CHECK(rdv);
    ct_comm *c = NULL;
    CHECK_RC(ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                         .group_id = "overlap",
                                         .rank = rank,
                                         .world_size = world,
                                         .node_id = rank < 2 ? "a" : "b",
                                         .host = "127.0.0.1",
                                         .timeout_ms = 20000},
                         &c));
    ct_nn_manual_seed(3); /* same initial weights on every rank */
    ct_module *net = small_cnn();
    CHECK(net);
    ddp d = {0};
    float *flat_v, *flat_g;
    int64_t numel;
    CHECK_RC(ct_module_params(net, &d.refs, &d.np));
    CHECK_RC(ct_module_flat(net, &flat_v, &flat_g, &numel));
    CHECK(d.np == 10);
    d.flat_g = flat_g;
    float *grads[MAXP];
    size_t counts[MAXP];
    for (int k = 0; k < d.np; k++) { /* reverse parameter order, as backward produces them */
        grads[k] = d.refs[d.np - 1 - k].grad;
        counts[k] = (size_t)d.refs[d.np - 1 - k].numel;
    }
    CHECK_RC(ct_bucketer_new(
        c, grads, counts, d.np,
        &(ct_bucketer_opts){.first_bucket_bytes = 1024, .bucket_bytes = 8 * 1024}, &d.b));
    CHECK(ct_bucketer_num_buckets(d.b) == 4);
    CHECK_RC(ct_module_on_grad_ready(net, on_param, &d));

    int64_t xs[4] = {BATCH, 1, 12, 12}, ys[1] = {BATCH};
    ct_tensor *x = ct_tensor_new(CT_F32, 4, xs), *y = ct_tensor_new(CT_I64, 1, ys);
    float *ref = malloc((size_t)numel * sizeof(float));
    float *tmp = malloc((size_t)numel * sizeof(float));
    CHECK(x && y && ref && tmp);

    for (int step = 0; step < 3; step++) {
        make_batch(x, y, rank, step);
        /* reference: local backward (hooks fire, the bucketer ignores them), flat allreduce */
        ct_bucketer_set_no_sync(d.b, true);
        d.backward_returned = false;
        CHECK_RC(fwd_bwd(net, x, y, true));
        ct_bucketer_set_no_sync(d.b, false);
        memcpy(ref, flat_g, (size_t)numel * sizeof(float));
        CHECK_RC(ct_comm_allreduce(c, ref, (size_t)numel, CT_F32, CT_COMM_AVG, 0));

        /* the same backward, reduced by buckets during backward */
        memset(d.fired, 0, sizeof d.fired);
        d.nfired = 0;
        d.backward_returned = false;
        d.expect = ref;
        d.overlap_seen = 0;
        CHECK_RC(fwd_bwd(net, x, y, true));
        d.backward_returned = true;
        d.expect = NULL;
        CHECK_RC(ct_bucketer_finish(d.b));
        /* (b) */
        CHECK(!d.late);
        for (int i = 0; i < d.np; i++)
            if (d.fired[i] != 1) {
                fprintf(stderr, "rank %d step %d: parameter %d (%s) fired %d times\n", rank, step,
                        i, d.refs[i].name, d.fired[i]);
                return 1;
            }
        CHECK(d.nfired == d.np);
        for (int k = 0; k < d.np; k++)
            if (d.order[k] != d.np - 1 - k) {
                fprintf(stderr, "rank %d: hook %d was parameter %d, want %d\n", rank, k, d.order[k],
                        d.np - 1 - k);
                return 1;
            }
        /* (c) */
        if (!d.overlap_seen) {
            fprintf(stderr, "rank %d step %d: bucket 0 not reduced before the last hook\n", rank,
                    step);
            return 1;
        }
        /* (a) */
        if (close_all("bucketed", rank, flat_g, ref, numel))
            return 1;
        for (int64_t j = 0; j < numel; j++) /* SGD, lr 0.1 */
            flat_v[j] -= 0.1f * flat_g[j];
        memcpy(tmp, flat_v, (size_t)numel * sizeof(float));
        CHECK_RC(ct_comm_broadcast(c, tmp, (size_t)numel, CT_F32, 0, 0));
        if (memcmp(tmp, flat_v, (size_t)numel * sizeof(float)) != 0) {
            fprintf(stderr, "rank %d step %d: weights differ from rank 0's\n", rank, step);
            return 1;
        }
    }

    /* (d) no_sync: expected = AVG over ranks of (grad A + grad B) */
    ct_tensor *x2 = ct_tensor_new(CT_F32, 4, xs), *y2 = ct_tensor_new(CT_I64, 1, ys);
    CHECK(x2 && y2);
    make_batch(x, y, rank, 10);
    make_batch(x2, y2, rank, 11);
    ct_bucketer_set_no_sync(d.b, true);
    d.backward_returned = false;
    CHECK_RC(fwd_bwd(net, x, y, true));
    memcpy(ref, flat_g, (size_t)numel * sizeof(float));
    CHECK_RC(fwd_bwd(net, x2, y2, true));
    for (int64_t j = 0; j < numel; j++)
        ref[j] += flat_g[j];
    CHECK_RC(ct_comm_allreduce(c, ref, (size_t)numel, CT_F32, CT_COMM_AVG, 0));
    CHECK_RC(fwd_bwd(net, x, y, true)); /* micro-batch A: local only */
    CHECK_RC(ct_bucketer_finish(d.b));  /* no-op in no_sync */
    ct_bucketer_set_no_sync(d.b, false);
    d.nfired = 0;
    CHECK_RC(fwd_bwd(net, x2, y2, false)); /* micro-batch B accumulates, buckets reduce */
    CHECK_RC(ct_bucketer_finish(d.b));
    CHECK(d.nfired == d.np);
    if (close_all("no_sync accumulated", rank, flat_g, ref, numel))
        return 1;

    ct_module_on_grad_ready(net, NULL, NULL);
    ct_bucketer_destroy(&d.b);
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    ct_tensor_release(&x2);
    ct_tensor_release(&y2);
    free(ref);
    free(tmp);
    ct_module_destroy(&net);
    ct_comm_destroy(&c);
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

int main(void)
{
    if (t_rdv_init() < 0)
        return 1;
    int bad = t_run(3, rank_main, NULL, 90000, "overlap");
    t_rdv_cleanup();
    if (!bad)
        fprintf(stderr, "overlap: ok\n");
    return bad;
}
