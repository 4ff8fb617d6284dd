/* tests/engine/test_pipeline.c — pipelining within a replica (issue 40, item 4):
 *
 * - the schedules as action lists, for 1..4 stages and 1..8 micro-batches: every (stage,
 *   micro-batch, forward | backward) exactly once, dependencies before their users, the ticks
 *   in order and the unit-time makespan 2 (M + S - 1) (bubble (S-1)/(M+S-1)); GPipe keeps M
 *   micro-batches in flight on every stage, 1F1B at most S - s on stage s (exactly min(S-s,M));
 *   the two programs of S = 2, M = 4 written out;
 * - GPipe and 1F1B with M = 4 over a BatchNorm-free model split into two stages on checkdev:0
 *   and checkdev:1 give the loss and every parameter's gradient of the whole batch on one
 *   device to 1e-6. The batch has 10 rows, so the micro-batches are 3, 3, 2, 2 rows and their
 *   losses are weighted 3/10, 3/10, 2/10, 2/10 (a plain 1/M would fail);
 * - the same with each stage's program on a thread of its own (ct_pipeline_use_threads), on the
 *   two checking devices and with both stages on the CPU, and with both stages on the CPU driven
 *   from one thread (on the CPU the Linear weight gradients are deferred to one product over
 *   every micro-batch's rows, trainer/nn/wgrad_defer.c); two calls without zeroing the
 *   gradients give twice the whole batch's (the deferred product adds to what the gradient
 *   holds); a weight with a gradient-ready hook is not deferred (its hook runs once per
 *   micro-batch and last sees the whole gradient);
 * - batch norm per micro-batch (PyTorch's rule): with BatchNorm1d in stage 0, 1F1B with M = 2
 *   gives the gradients, running statistics and num_batches_tracked of the two micro-batches
 *   run one after another through the whole model (not the whole batch's gradients);
 * - a forward's tape detached, another pass run, then attached and walked
 *   (ct_autograd_tape_detach / _attach; attaching over recorded nodes is refused);
 * - bad schedule names and micro-batch counts are refused naming them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/nn.h"
#include "ct/optim.h"
#include "ct/pipeline.h"
#include "testutil.h"

#define N 10
#define IN 12
#define CLASSES 5
#define MAXP 8

/* ---- schedules ---- */

static void check_schedule(ct_pipe_schedule k, int S, int M)
{
    ct_pipe_action *a = NULL;
    int n = 0;
    const char *nm = ct_pipe_schedule_name(k);
    int rc = ct_pipe_schedule_actions(k, S, M, &a, &n);
    CHECK(rc == 0 && n == 2 * S * M, "%s S=%d M=%d: rc %d, %d actions", nm, S, M, rc, n);
    if (rc < 0)
        return;
    int *tick = malloc(sizeof(int) * 2 * S * M); /* [(s*M+m)*2+op] */
    for (int i = 0; i < 2 * S * M; i++)
        tick[i] = -1;
    int last = 0, makespan = 0;
    for (int i = 0; i < n; i++) {
        int *t = &tick[(a[i].stage * M + a[i].micro_batch) * 2 + a[i].op];
        CHECK(*t < 0, "%s S=%d M=%d: action %d repeated", nm, S, M, i);
        *t = a[i].tick;
        CHECK(a[i].tick >= last, "%s: ticks out of order at %d", nm, i);
        last = a[i].tick;
        makespan = a[i].tick + 1 > makespan ? a[i].tick + 1 : makespan;
    }
    for (int s = 0; s < S; s++)
        for (int m = 0; m < M; m++) {
            int f = tick[(s * M + m) * 2], b = tick[(s * M + m) * 2 + 1];
            CHECK(f >= 0 && b > f, "%s S=%d M=%d: F/B(%d,%d) at %d/%d", nm, S, M, s, m, f, b);
            if (s > 0)
                CHECK(tick[((s - 1) * M + m) * 2] < f, "%s: F(%d,%d) before its input", nm, s, m);
            if (s < S - 1)
                CHECK(tick[((s + 1) * M + m) * 2 + 1] < b, "%s: B(%d,%d) before its gradient", nm,
                      s, m);
        }
    CHECK(makespan == 2 * (M + S - 1), "%s S=%d M=%d: makespan %d, want %d", nm, S, M, makespan,
          2 * (M + S - 1));
    /* micro-batches in flight per stage (forward run, backward not yet), in each stage's order */
    for (int s = 0; s < S; s++) {
        int inflight = 0, peak = 0;
        for (int i = 0; i < n; i++) {
            if (a[i].stage != s)
                continue;
            inflight += a[i].op == CT_PIPE_FORWARD ? 1 : -1;
            peak = inflight > peak ? inflight : peak;
        }
        int want = k == CT_PIPE_GPIPE ? M : (S - s < M ? S - s : M);
        CHECK(peak == want, "%s S=%d M=%d stage %d: peak %d in flight, want %d", nm, S, M, s, peak,
              want);
        if (k == CT_PIPE_1F1B)
            CHECK(peak <= S - s, "1f1b stage %d: peak %d > S - s", s, peak);
    }
    free(tick);
    free(a);
}

/* stage s's program as "F0 F1 B0 ..." */
static void program(ct_pipe_schedule k, int S, int M, int s, char *buf, size_t size)
{
    ct_pipe_action *a = NULL;
    int n = 0;
    buf[0] = 0;
    if (ct_pipe_schedule_actions(k, S, M, &a, &n) < 0)
        return;
    size_t at = 0;
    for (int i = 0; i < n; i++)
        if (a[i].stage == s)
            at += (size_t)snprintf(buf + at, size - at, "%s%c%d", at ? " " : "",
                                   a[i].op == CT_PIPE_FORWARD ? 'F' : 'B', a[i].micro_batch);
    free(a);
}

static void test_schedules(void)
{
    for (int k = 0; k < CT_PIPE_NSCHEDULES; k++)
        for (int S = 1; S <= 4; S++)
            for (int M = 1; M <= 8; M++)
                check_schedule((ct_pipe_schedule)k, S, M);
    char p[128];
    const struct {
        ct_pipe_schedule k;
        int s;
        const char *want;
    } progs[] = {{CT_PIPE_GPIPE, 0, "F0 F1 F2 F3 B0 B1 B2 B3"},
                 {CT_PIPE_GPIPE, 1, "F0 F1 F2 F3 B0 B1 B2 B3"},
                 {CT_PIPE_1F1B, 0, "F0 F1 B0 F2 B1 F3 B2 B3"},
                 {CT_PIPE_1F1B, 1, "F0 B0 F1 B1 F2 B2 F3 B3"}};
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        program(progs[i].k, 2, 4, progs[i].s, p, sizeof p);
        CHECK(!strcmp(p, progs[i].want), "%s stage %d: \"%s\", want \"%s\"",
              ct_pipe_schedule_name(progs[i].k), progs[i].s, p, progs[i].want);
    }
    ct_pipe_schedule k = CT_PIPE_GPIPE;
    CHECK(ct_pipe_schedule_parse("1f1b", &k) == 0 && k == CT_PIPE_1F1B, "parse 1f1b");
    CHECK(ct_pipe_schedule_parse("gpipe", &k) == 0 && k == CT_PIPE_GPIPE, "parse gpipe");
    CHECK(ct_pipe_schedule_parse("GPipe", &k) == CT_EINVAL &&
              strstr(ct_last_error(), "schedule \"GPipe\"") && strstr(ct_last_error(), "\"1f1b\""),
          "GPipe refused: %s", ct_last_error());
    ct_pipe_action *a = NULL;
    int n = 0;
    CHECK(ct_pipe_schedule_actions(CT_PIPE_1F1B, 2, 0, &a, &n) == CT_EINVAL && !a,
          "0 micro-batches refused");
}

/* ---- a forward set aside and walked later ---- */

/* y = relu(x) recorded and detached; z = 3x recorded meanwhile: attaching over it is refused
 * (the tape kept); after z's backward, attaching y's tape and walking it gives x.grad =
 * 3 + (x > 0), the two passes' sum */
static void test_tapes(void)
{
    int64_t shape[1] = {4};
    float hx[4] = {-1.0f, 2.0f, -0.5f, 3.0f}, g[4];
    ct_tensor *x = ct_tensor_from_f32(1, shape, hx);
    ct_tensor_set_requires_grad(x, true);
    ct_tensor *y = ct_nn_relu(x), *sy = ct_nn_sum(y);
    ct_tape *t = ct_autograd_tape_detach();
    CHECK(t != NULL, "detach");
    ct_tensor *z = ct_nn_add(x, x), *z3 = ct_nn_add(z, x), *sz = ct_nn_sum(z3);
    CHECK(ct_autograd_tape_attach(&t) == CT_EINVAL && t != NULL, "attach over recorded nodes");
    CHECK(ct_tensor_backward(sz, NULL) == 0, "z's backward: %s", ct_last_error());
    CHECK(ct_autograd_tape_attach(&t) == 0 && t == NULL, "attach: %s", ct_last_error());
    CHECK(ct_tensor_backward(sy, NULL) == 0, "y's backward: %s", ct_last_error());
    ct_tensor *gx = ct_tensor_grad(x);
    CHECK(gx && ct_tensor_copy_to(gx, g, sizeof g) == 0, "x.grad");
    for (int i = 0; gx && i < 4; i++)
        CHECK(g[i] == 3.0f + (hx[i] > 0.0f), "x.grad[%d] = %g", i, g[i]);
    ct_tape_destroy(&t);
    ct_tensor *ts[] = {sz, z3, z, sy, y, x};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        ct_tensor_release(&ts[i]);
}

/* ---- gradients equal the whole batch's ---- */

static ct_tensor *mean_ce(ct_tensor *out, ct_tensor *target, void *user)
{
    (void)user;
    return ct_nn_cross_entropy(out, target, 0.0f);
}

/* every parameter's gradient (and count) of m, host side, in state-dict order (buffers left
 * out) */
static int grads(ct_module *m, float *g, int cap)
{
    const ct_named_tensor *sd;
    int n, at = 0;
    if (ct_module_state_dict(m, &sd, &n) < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        if (!ct_tensor_requires_grad(sd[i].tensor))
            continue; /* a buffer */
        ct_tensor *gr = ct_tensor_grad(sd[i].tensor);
        ct_tensor *h = gr ? ct_tensor_to(gr, CT_CPU) : NULL;
        int64_t k = h ? ct_tensor_numel(h) : 0;
        if (!h || at + k > cap || ct_tensor_copy_to(h, g + at, (size_t)k * sizeof(float)) < 0) {
            ct_tensor_release(&h);
            return -1;
        }
        at += (int)k;
        ct_tensor_release(&h);
    }
    return at;
}

/* a gradient-ready hook's record: how often it ran, and the gradient it saw last */
typedef struct hook_seen {
    int calls;
    float last[4096];
    int64_t n;
} hook_seen;

static int see_grad(ct_tensor *t, void *user)
{
    hook_seen *h = user;
    ct_tensor *g = ct_tensor_grad(t), *c = g ? ct_tensor_to(g, CT_CPU) : NULL;
    h->calls++;
    h->n = c ? ct_tensor_numel(c) : 0;
    if (!c || h->n > 4096 || ct_tensor_copy_to(c, h->last, (size_t)h->n * sizeof(float)) < 0)
        h->n = -1;
    ct_tensor_release(&c);
    return 0;
}

/* the model's two stages on c0 and c1, driven from this thread (threads 0) or each stage from
 * a thread of its own */
static void test_gradients(ct_device c0, ct_device c1, int threads)
{
    ct_nn_manual_seed(7);
    ct_module *a = CT_SEQUENTIAL(ct_nn_linear_new(IN, 32, true), ct_nn_tanh_new(),
                                 ct_nn_linear_new(32, 24, true));
    ct_module *b = CT_SEQUENTIAL(ct_nn_relu_new(), ct_nn_linear_new(24, 16, true), ct_nn_tanh_new(),
                                 ct_nn_linear_new(16, CLASSES, true));
    ct_module *root = CT_SEQUENTIAL(a, b);
    CHECK(root && ct_module_to(root, c0) == 0, "model: %s", ct_last_error());

    float hx[N * IN];
    int64_t hy[N], xs[2] = {N, IN}, ys[1] = {N};
    for (int i = 0; i < N * IN; i++)
        hx[i] = sinf(0.37f * (float)i) * 1.5f;
    for (int i = 0; i < N; i++)
        hy[i] = (i * 3 + 1) % CLASSES;
    ct_tensor *cx = ct_tensor_from_f32(2, xs, hx), *cy = ct_tensor_new(CT_I64, 1, ys);
    ct_tensor_copy_from(cy, hy, sizeof hy);

    /* the whole batch on one device */
    static float ref[4096], got[4096];
    ct_tensor *x = ct_tensor_to(cx, c0), *y = ct_tensor_to(cy, c0);
    ct_module_zero_grad(root);
    ct_tensor *logits = ct_module_forward(root, x);
    ct_tensor *l = logits ? mean_ce(logits, y, NULL) : NULL;
    CHECK(l && ct_tensor_backward(l, NULL) == 0, "whole batch: %s", ct_last_error());
    float ref_loss = l ? ct_tensor_item(l) : NAN;
    int np = grads(root, ref, 4096);
    CHECK(np > 1000, "%d gradient values", np);
    ct_tensor_release(&l);
    ct_tensor_release(&logits);
    ct_tensor_release(&x);
    ct_tensor_release(&y);

    ct_module *st[2] = {a, b};
    ct_device dev[2] = {c0, c1};
    ct_pipeline *p = ct_pipeline_new(st, dev, 2);
    CHECK(p && ct_pipeline_use_threads(p, threads) == 0, "threads %d", threads);
    const ct_param_ref *refs;
    int nr;
    CHECK(p && ct_module_params(root, &refs, &nr) == 0 && refs[0].device == c0 &&
              refs[nr - 1].device == c1,
          "stages on checkdev:0 and checkdev:1: %s", ct_last_error());
    for (int k = 0; k < CT_PIPE_NSCHEDULES && p; k++) {
        ct_module_zero_grad(root);
        float loss = NAN;
        int rc =
            ct_pipeline_forward_backward(p, cx, cy, mean_ce, NULL, 4, (ct_pipe_schedule)k, &loss);
        CHECK(rc == 0, "%s: rc %d", ct_pipe_schedule_name((ct_pipe_schedule)k), rc);
        CHECK(fabsf(loss - ref_loss) <= 1e-6f, "%s: loss %.9g, whole batch %.9g",
              ct_pipe_schedule_name((ct_pipe_schedule)k), loss, ref_loss);
        int ng = grads(root, got, 4096);
        CHECK(ng == np, "%s: %d gradient values, want %d",
              ct_pipe_schedule_name((ct_pipe_schedule)k), ng, np);
        float worst = 0.0f;
        int at = 0;
        for (int i = 0; i < np && ng == np; i++)
            if (!(fabsf(got[i] - ref[i]) <= worst)) {
                worst = fabsf(got[i] - ref[i]);
                at = i;
            }
        CHECK(worst <= 1e-6f, "%s: gradient %d is %.9g, whole batch %.9g",
              ct_pipe_schedule_name((ct_pipe_schedule)k), at, got[at], ref[at]);
        char n0[16], n1[16];
        printf("%s M=4 on %s/%s, %s: loss %.7f (whole batch %.7f), max |grad - whole batch's| "
               "%.3g\n",
               ct_pipe_schedule_name((ct_pipe_schedule)k), ct_device_name(c0, n0, sizeof n0),
               ct_device_name(c1, n1, sizeof n1), threads ? "a thread a stage" : "one thread", loss,
               ref_loss, worst);
    }
    /* two calls add up */
    if (p) {
        ct_module_zero_grad(root);
        int rc = 0;
        for (int i = 0; i < 2 && rc == 0; i++)
            rc = ct_pipeline_forward_backward(p, cx, cy, mean_ce, NULL, 4, CT_PIPE_1F1B, NULL);
        int ng = grads(root, got, 4096);
        float worst = 0.0f;
        for (int i = 0; i < np && ng == np; i++)
            worst = fmaxf(worst, fabsf(got[i] - 2.0f * ref[i]));
        CHECK(rc == 0 && ng == np && worst <= 2e-6f,
              "two calls: rc %d, %d gradient values, max |grad - 2 x whole batch's| %.3g", rc, ng,
              worst);
    }
    /* a weight with a gradient-ready hook (stage 1's first Linear) is not deferred: the hook
     * runs once per micro-batch and the last time sees the whole gradient (deferred, it would
     * run before the gradient is complete) */
    const ct_named_tensor *sd = NULL;
    int nsd = 0;
    ct_tensor *hw = NULL;
    if (ct_module_state_dict(b, &sd, &nsd) == 0)
        for (int i = 0; i < nsd && !hw; i++)
            if (ct_tensor_ndim(sd[i].tensor) == 2)
                hw = sd[i].tensor;
    static hook_seen seen;
    memset(&seen, 0, sizeof seen);
    if (p && hw && ct_tensor_on_grad_ready(hw, see_grad, &seen) == 0) {
        ct_module_zero_grad(root);
        int rc = ct_pipeline_forward_backward(p, cx, cy, mean_ce, NULL, 4, CT_PIPE_1F1B, NULL);
        ct_tensor *g = ct_tensor_grad(hw), *c = g ? ct_tensor_to(g, CT_CPU) : NULL;
        static float final[4096];
        int64_t k = c ? ct_tensor_numel(c) : 0;
        CHECK(rc == 0 && c && k == seen.n &&
                  ct_tensor_copy_to(c, final, (size_t)k * sizeof(float)) == 0,
              "hooked weight: rc %d, %lld values, the hook saw %lld", rc, (long long)k,
              (long long)seen.n);
        float worst = 0.0f;
        for (int64_t i = 0; c && i < k && k == seen.n; i++)
            worst = fmaxf(worst, fabsf(final[i] - seen.last[i]));
        CHECK(seen.calls == 4 && worst == 0.0f,
              "hooked weight: the hook ran %d times (want 4), its last view differs by %.3g",
              seen.calls, worst);
        ct_tensor_release(&c);
        ct_tensor_on_grad_ready(hw, NULL, NULL);
    } else {
        CHECK(0, "no weight to hook: %s", ct_last_error());
    }
    /* refusals */
    int rc =
        p ? ct_pipeline_forward_backward(p, cx, cy, mean_ce, NULL, N + 1, CT_PIPE_1F1B, NULL) : -1;
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "11 micro-batches for a batch of 10"),
          "too many micro-batches: %d %s", rc, ct_last_error());
    ct_pipeline_destroy(&p);
    ct_tensor_release(&cx);
    ct_tensor_release(&cy);
    ct_module_destroy(&root);
}

/* ---- batch norm: per micro-batch ---- */

/* every state-dict entry of m (parameters and buffers, i64 ones as floats), host side; the
 * copies in no-grad mode (a copy of a parameter recorded on the tape would hold it) */
static int state(ct_module *m, float *v, int cap)
{
    const ct_named_tensor *sd;
    int n, at = 0;
    if (ct_module_state_dict(m, &sd, &n) < 0)
        return -1;
    bool grad_mode = ct_autograd_set_enabled(false);
    for (int i = 0; i < n && at >= 0; i++) {
        ct_tensor *h = ct_tensor_to(sd[i].tensor, CT_CPU);
        int64_t k = h ? ct_tensor_numel(h) : -1;
        if (k >= 0 && at + k > cap) {
            k = -1;
        } else if (k >= 0 && ct_tensor_dtype(h) == CT_I64) {
            int64_t tmp[16];
            if (k > 16 || ct_tensor_copy_to(h, tmp, (size_t)k * sizeof(int64_t)) < 0)
                k = -1;
            for (int64_t j = 0; j < k; j++)
                v[at + j] = (float)tmp[j];
        } else if (k >= 0 && ct_tensor_copy_to(h, v + at, (size_t)k * sizeof(float)) < 0) {
            k = -1;
        }
        ct_tensor_release(&h);
        at = k < 0 ? -1 : at + (int)k;
    }
    ct_autograd_set_enabled(grad_mode);
    return at;
}

static void bn_model(ct_module **a, ct_module **b, ct_module **root)
{
    ct_nn_manual_seed(11);
    *a = CT_SEQUENTIAL(ct_nn_linear_new(IN, 16, true), ct_nn_batchnorm1d_new(16), ct_nn_relu_new());
    *b = CT_SEQUENTIAL(ct_nn_linear_new(16, CLASSES, true));
    *root = CT_SEQUENTIAL(*a, *b);
}

/* BatchNorm in stage 0, 1F1B with M = 2 on checkdev:0/1: the gradients, running statistics and
 * num_batches_tracked are those of running the micro-batches one after another through the
 * whole model on one device (each loss scaled by 1/2), PyTorch's rule; and the gradients are
 * not the whole batch's (batch statistics over 8 rows differ from two sets over 4). */
static void test_batchnorm(void)
{
    const ct_device c0 = CT_CHECKDEV, c1 = ct_device_make(CT_CHECKDEV, 1);
    float hx[8 * IN];
    int64_t hy[8], xs[2] = {8, IN}, ys[1] = {8};
    for (int i = 0; i < 8 * IN; i++)
        hx[i] = cosf(0.23f * (float)i) * 2.0f + 0.1f * (float)(i % 7);
    for (int i = 0; i < 8; i++)
        hy[i] = (i * 2 + 1) % CLASSES;
    ct_tensor *cx = ct_tensor_from_f32(2, xs, hx), *cy = ct_tensor_new(CT_I64, 1, ys);
    ct_tensor_copy_from(cy, hy, sizeof hy);
    static float gref[4096], sref[4096], got[4096], sgot[4096], gwhole[4096];

    /* reference: the two micro-batches in turn, then the whole batch, on checkdev:0 */
    ct_module *a, *b, *ref;
    bn_model(&a, &b, &ref);
    CHECK(ref && ct_module_to(ref, c0) == 0, "bn model: %s", ct_last_error());
    ct_module_zero_grad(ref);
    for (int m = 0; m < 2; m++) {
        ct_tensor *xv = ct_tensor_narrow0(cx, 4 * m, 4), *yv = ct_tensor_narrow0(cy, 4 * m, 4);
        ct_tensor *x = ct_tensor_to(xv, c0), *y = ct_tensor_to(yv, c0);
        ct_tensor *o = ct_module_forward(ref, x), *l = o ? mean_ce(o, y, NULL) : NULL;
        CHECK(l && ct_tensor_backward_scaled(l, 0.5f) == 0, "micro-batch %d: %s", m,
              ct_last_error());
        ct_tensor *ts[] = {l, o, x, y, xv, yv};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            ct_tensor_release(&ts[i]);
    }
    int ng = grads(ref, gref, 4096), ns = state(ref, sref, 4096);
    ct_module_destroy(&ref);
    bn_model(&a, &b, &ref);
    ct_module_to(ref, c0);
    ct_module_zero_grad(ref);
    ct_tensor *x = ct_tensor_to(cx, c0), *y = ct_tensor_to(cy, c0);
    ct_tensor *o = ct_module_forward(ref, x), *l = o ? mean_ce(o, y, NULL) : NULL;
    CHECK(l && ct_tensor_backward(l, NULL) == 0, "whole batch: %s", ct_last_error());
    int nw = grads(ref, gwhole, 4096);
    ct_tensor *ts[] = {l, o, x, y};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        ct_tensor_release(&ts[i]);
    ct_module_destroy(&ref);

    /* the pipeline */
    bn_model(&a, &b, &ref);
    ct_module *st[2] = {a, b};
    ct_device dev[2] = {c0, c1};
    ct_pipeline *p = ct_pipeline_new(st, dev, 2);
    ct_module_zero_grad(ref);
    CHECK(p && ct_pipeline_forward_backward(p, cx, cy, mean_ce, NULL, 2, CT_PIPE_1F1B, NULL) == 0,
          "bn pipeline: %s", ct_last_error());
    int n2 = grads(ref, got, 4096), ns2 = state(ref, sgot, 4096);
    CHECK(ng > 0 && ng == n2 && nw == ng && ns > 0 && ns == ns2, "sizes %d %d %d, %d %d", ng, n2,
          nw, ns, ns2);
    float worst = 0.0f, worst_s = 0.0f, whole = 0.0f;
    for (int i = 0; i < ng && ng == n2 && nw == ng; i++) {
        worst = fmaxf(worst, fabsf(got[i] - gref[i]));
        whole = fmaxf(whole, fabsf(gwhole[i] - gref[i]));
    }
    for (int i = 0; i < ns && ns == ns2; i++)
        worst_s = fmaxf(worst_s, fabsf(sgot[i] - sref[i]));
    CHECK(worst <= 1e-6f && worst_s <= 1e-6f,
          "batch norm per micro-batch: gradients %.3g, state %.3g off", worst, worst_s);
    CHECK(whole > 1e-4f, "the whole batch's gradients differ by only %.3g", whole);
    printf("batch norm, 1f1b M=2: max |grad - micro-batches in turn| %.3g, state %.3g; whole "
           "batch differs by %.3g\n",
           worst, worst_s, whole);
    ct_pipeline_destroy(&p);
    ct_module_destroy(&ref);
    ct_tensor_release(&cx);
    ct_tensor_release(&cy);
}

int main(void)
{
    test_schedules();
    test_tapes();
    test_gradients(CT_CHECKDEV, ct_device_make(CT_CHECKDEV, 1), 0);
    test_gradients(CT_CHECKDEV, ct_device_make(CT_CHECKDEV, 1), 1);
    test_gradients(CT_CPU, CT_CPU, 1);
    test_gradients(CT_CPU, CT_CPU, 0);
    test_batchnorm();
    if (g_fail)
        fprintf(stderr, "test_pipeline: %d failure(s)\n", g_fail);
    else
        printf("test_pipeline: ok\n");
    return g_fail ? 1 : 0;
}
