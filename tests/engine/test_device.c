/* tests/engine/test_device.c — the engine's ops on a device against the same ops on the CPU:
 * each op runs forward and backward on CPU tensors, then on copies of them on the device
 * (ct_tensor_to), and the outputs and every input's gradient must agree within a tolerance
 * relative to the CPU's largest value. The device is argv[1]: "checkdev" (the checking device:
 * CPU kernels run late on worker threads with memory the host cannot read, so a missing copy
 * or wait fails here) or "cuda" (exit 77 without a GPU; scripts/gpu-check.sh runs it on one).
 *
 * Every public op of nn.h and loss.h runs here (engine_device_coverage fails on one that does
 * not); the losses CUDA lacks are refused there with CT_ENOSYS naming the op and the device.
 * Also: inputs on two devices are refused with a message naming both; a kernel a device lacks
 * fails with CT_ENOSYS naming the op and the device; dropout draws the same mask on every
 * device for the same seed; a small CNN moved with ct_module_to trains (SGD, AdamW) to the CPU's
 * losses, parameters and optimizer state (argv[2] steps, default 10). */
#include "ct/optim.h"

#include "testutil.h"

static ct_device dev;
static double tol;

/* host copy of any tensor's floats */
static float *host_f32(const ct_tensor *t)
{
    ct_tensor *p = ct_nn_to_plain((ct_tensor *)t);
    int64_t n = ct_tensor_numel(t);
    float *h = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!p || ct_tensor_copy_to(p, h, (size_t)n * sizeof(float)) < 0) {
        fprintf(stderr, "copy to host: %s\n", ct_last_error());
        memset(h, 0xff, (size_t)n * sizeof(float)); /* NaN: fails every comparison */
    }
    ct_tensor_release(&p);
    return h;
}

static void compare(const char *op, const char *what, const ct_tensor *cpu, const ct_tensor *d)
{
    if (!cpu || !d) {
        CHECK(cpu && d, "%s: %s missing (%s)", op, what, ct_last_error());
        return;
    }
    CHECK(ct_tensor_device(d) == dev, "%s: %s is not on the device", op, what);
    int64_t n = ct_tensor_numel(cpu);
    float *a = host_f32(cpu), *b = host_f32(d);
    double big = 1.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(a[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        worst = isnan(e) ? INFINITY : fmax(worst, e);
    }
    CHECK(worst <= tol * big, "%s: %s differs by %g (max |cpu| %g)", op, what, worst, big);
    free(a);
    free(b);
}

typedef ct_tensor *(*op_fn)(ct_tensor **in, const void *cfg);

/* Runs f on the CPU and on the device with the same inputs and upstream gradient. */
static void run(const char *name, op_fn f, const void *cfg, int n, ct_tensor **in, bool *grads)
{
    ct_tensor *din[6] = {0};
    for (int i = 0; i < n; i++) {
        din[i] = ct_tensor_to(in[i], dev);
        CHECK(din[i] != NULL, "%s: input %d to the device: %s", name, i, ct_last_error());
        if (!din[i])
            goto out;
        if (grads[i]) {
            ct_tensor_set_requires_grad(in[i], true);
            ct_tensor_set_requires_grad(din[i], true);
        }
    }
    if (getenv("VERBOSE"))
        fprintf(stderr, "op %s\n", name);
    /* the CPU's forward and backward, then the device's (one tape per thread) */
    ct_nn_manual_seed(5); /* dropout: the same draw on both */
    ct_tensor *y = f(in, cfg), *g = NULL, *dy = NULL;
    int rc1 = -1, rc2 = -1;
    if (y) {
        g = rand_t(ct_tensor_ndim(y), ct_tensor_shape(y));
        rc1 = ct_tensor_backward(y, g);
    }
    ct_nn_manual_seed(5);
    dy = f(din, cfg);
    if (dy)
        rc2 = ct_tensor_backward(dy, g);
    CHECK(y && dy, "%s forward: %s", name, ct_last_error());
    if (!y || !dy) {
        ct_autograd_clear_tape();
        ct_tensor_release(&y);
        ct_tensor_release(&dy);
        ct_tensor_release(&g);
        goto out;
    }
    compare(name, "output", y, dy);
    CHECK(rc1 == 0 && rc2 == 0, "%s backward: %d %d: %s", name, rc1, rc2, ct_last_error());
    for (int i = 0; i < n && rc1 == 0 && rc2 == 0; i++)
        if (grads[i]) {
            char what[32];
            snprintf(what, sizeof what, "grad of input %d", i);
            compare(name, what, ct_tensor_grad(in[i]), ct_tensor_grad(din[i]));
        }
    ct_tensor_release(&g);
    ct_tensor_release(&y);
    ct_tensor_release(&dy);
out:
    for (int i = 0; i < n; i++) {
        ct_tensor_release(&din[i]);
        ct_tensor_release(&in[i]);
    }
}

/* ---- the ops ---- */
static ct_tensor *f_linear(ct_tensor **in, const void *c)
{
    return ct_nn_linear(in[0], in[1], in[2]);
}
static ct_tensor *f_matmul(ct_tensor **in, const void *c)
{
    return ct_nn_matmul(in[0], in[1]);
}
static ct_tensor *f_conv(ct_tensor **in, const void *c)
{
    ct_tensor *y = ct_nn_conv2d(in[0], in[1], in[2], c);
    ct_tensor *p = y ? ct_nn_to_plain(y) : NULL;
    ct_tensor_release(&y);
    return p;
}
static ct_tensor *f_bn(ct_tensor **in, const void *c)
{
    bool train = *(const int *)c != 0, relu = *(const int *)c == 2;
    ct_tensor *y = (relu ? ct_nn_batch_norm_relu : ct_nn_batch_norm)(in[0], in[1], in[2], in[3],
                                                                     in[4], train, 0.1f, 1e-5f);
    ct_tensor *p = y ? ct_nn_to_plain(y) : NULL;
    ct_tensor_release(&y);
    return p;
}
static ct_tensor *f_maxpool(ct_tensor **in, const void *c)
{
    return ct_nn_max_pool2d(in[0], 2, 2, 0);
}
static ct_tensor *f_avgpool(ct_tensor **in, const void *c)
{
    return ct_nn_avg_pool2d(in[0], 3, 2, 1, *(const bool *)c);
}
static ct_tensor *f_apool(ct_tensor **in, const void *c)
{
    return ct_nn_adaptive_avg_pool2d(in[0], 3, 2);
}
static ct_tensor *f_act(ct_tensor **in, const void *c)
{
    switch (*(const int *)c) {
    case 0:
        return ct_nn_relu(in[0]);
    case 1:
        return ct_nn_leaky_relu(in[0], 0.1f);
    case 2:
        return ct_nn_elu(in[0], 1.0f);
    case 3:
        return ct_nn_tanh(in[0]);
    default:
        return ct_nn_sigmoid(in[0]);
    }
}
static ct_tensor *f_softmax(ct_tensor **in, const void *c)
{
    return *(const bool *)c ? ct_nn_log_softmax(in[0]) : ct_nn_softmax(in[0]);
}
static ct_tensor *f_add(ct_tensor **in, const void *c)
{
    return ct_nn_add(in[0], in[1]);
}
static ct_tensor *f_sum(ct_tensor **in, const void *c)
{
    return ct_nn_sum(in[0]);
}
static ct_tensor *f_dropout(ct_tensor **in, const void *c)
{
    return ct_nn_dropout(in[0], 0.3f, true);
}
static ct_tensor *f_flatten(ct_tensor **in, const void *c)
{
    return ct_nn_flatten(in[0]);
}
static ct_tensor *f_ce(ct_tensor **in, const void *c)
{
    return ct_nn_cross_entropy(in[0], in[1], 0.0f);
}
/* the other losses: mse and l1 on (x, t); nll on log_softmax(x); bce on sigmoid(x) against
 * sigmoid(t) (probabilities and targets in (0, 1)); bce with logits on x against sigmoid(t) */
static ct_tensor *f_loss(ct_tensor **in, const void *c)
{
    int kind = *(const int *)c;
    if (kind == 0)
        return ct_nn_mse_loss(in[0], in[1]);
    if (kind == 1)
        return ct_nn_l1_loss(in[0], in[1]);
    if (kind == 2) {
        ct_tensor *lp = ct_nn_log_softmax(in[0]), *y = lp ? ct_nn_nll_loss(lp, in[1]) : NULL;
        ct_tensor_release(&lp);
        return y;
    }
    ct_tensor *t = ct_nn_sigmoid(in[1]), *y = NULL;
    if (t && kind == 3) {
        ct_tensor *p = ct_nn_sigmoid(in[0]);
        y = p ? ct_nn_bce_loss(p, t) : NULL;
        ct_tensor_release(&p);
    } else if (t) {
        y = ct_nn_bce_with_logits_loss(in[0], t);
    }
    ct_tensor_release(&t);
    return y;
}
static ct_tensor *f_conv_transpose(ct_tensor **in, const void *c)
{
    ct_tensor *y = ct_nn_conv_transpose2d(in[0], in[1], in[2], c);
    ct_tensor *p = y ? ct_nn_to_plain(y) : NULL;
    ct_tensor_release(&y);
    return p;
}
/* (6, 4, 5) viewed as (4, 30), then the view's dimensions swapped and made a tensor */
static ct_tensor *f_reshape_transpose(ct_tensor **in, const void *c)
{
    int64_t shape[2] = {4, 30};
    ct_tensor *r = ct_nn_reshape(in[0], 2, shape), *t = r ? ct_nn_transpose(r, 0, 1) : NULL;
    ct_tensor *y = t ? ct_nn_mul(t, t) : NULL; /* a product: backward is not the identity */
    ct_tensor_release(&r);
    ct_tensor_release(&t);
    return y;
}

static ct_tensor *f_layer_norm(ct_tensor **in, const void *c)
{
    return ct_nn_layer_norm(in[0], in[1], in[2], 1e-5f);
}
static ct_tensor *f_gelu(ct_tensor **in, const void *c)
{
    return ct_nn_gelu(in[0], *(const bool *)c);
}
static ct_tensor *f_mul(ct_tensor **in, const void *c)
{
    return ct_nn_mul(in[0], in[1]);
}
static ct_tensor *f_embedding(ct_tensor **in, const void *c)
{
    return ct_nn_embedding(in[0], in[1], *(const int64_t *)c);
}

static ct_tensor *f_permute(ct_tensor **in, const void *c)
{
    return ct_nn_permute(in[0], (const int[]){0, 2, 1, 3});
}
static ct_tensor *f_slice(ct_tensor **in, const void *c)
{
    return ct_nn_slice(in[0], 2, 5, 9);
}
static ct_tensor *f_bmm(ct_tensor **in, const void *c)
{
    const bool *t = c;
    return ct_nn_bmm(in[0], in[1], t[0], t[1]);
}
static ct_tensor *f_softmax_causal(ct_tensor **in, const void *c)
{
    return ct_nn_softmax_causal(in[0]);
}

/* c: {causal, with dropout} */
static ct_tensor *f_attention(ct_tensor **in, const void *c)
{
    const bool *o = c;
    return ct_nn_attention(in[0], in[1], in[2], o[0], o[1] ? 0.2f : 0.0f, true);
}

/* c: {causal, with dropout}; q, k, v packed (B, T, 3C), 3 heads */
static ct_tensor *f_attention_qkv(ct_tensor **in, const void *c)
{
    const bool *o = c;
    return ct_nn_attention_qkv(in[0], 3, o[0], o[1] ? 0.2f : 0.0f, true);
}

/* c: {causal}; q, k, v packed (B, T, 3C), 3 heads, under autocast to bf16 (backward runs after
 * the region: the node keeps its precision) */
static ct_tensor *f_attention_qkv_bf16(ct_tensor **in, const void *c)
{
    const bool *o = c;
    if (ct_autocast_push(CT_BF16) < 0)
        return NULL;
    ct_tensor *y = ct_nn_attention_qkv(in[0], 3, o[0], 0.0f, true);
    ct_autocast_pop();
    return y;
}

static ct_tensor *targets(int64_t n, int64_t classes)
{
    int64_t shape[1] = {n};
    ct_tensor *t = ct_tensor_new(CT_I64, 1, shape);
    int64_t *p = ct_tensor_data(t);
    for (int64_t i = 0; i < n; i++)
        p[i] = (i * 7) % classes;
    p[1] = -100; /* ignored */
    return t;
}

static void test_ops(void)
{
    {
        int64_t xs[2] = {17, 33}, ws[2] = {9, 33}, bs[1] = {9};
        ct_tensor *in[3] = {rand_t(2, xs), rand_t(2, ws), rand_t(1, bs)};
        run("linear", f_linear, NULL, 3, in, (bool[]){true, true, true});
    }
    {
        int64_t as[2] = {13, 7}, bs[2] = {7, 19};
        ct_tensor *in[2] = {rand_t(2, as), rand_t(2, bs)};
        run("matmul", f_matmul, NULL, 2, in, (bool[]){true, true});
    }
    {
        int64_t xs[4] = {4, 16, 9, 9}, ws[4] = {32, 16, 3, 3}, bs[1] = {32};
        ct_conv_opts o = {.stride = {2, 2}, .padding = {1, 1}};
        ct_tensor *in[3] = {rand_t(4, xs), rand_t(4, ws), rand_t(1, bs)};
        run("conv2d", f_conv, &o, 3, in, (bool[]){true, true, true});
    }
    for (int mode = 0; mode < 3; mode++) { /* eval, train, train with fused relu */
        int64_t xs[4] = {4, 16, 5, 5}, cs[1] = {16};
        ct_tensor *in[5] = {rand_t(4, xs), rand_t(1, cs), rand_t(1, cs), rand_t(1, cs),
                            rand_t(1, cs)};
        float *rv = ct_tensor_f32(in[4]);
        for (int i = 0; i < 16; i++)
            rv[i] = 0.5f + fabsf(rv[i]); /* a variance */
        const char *names[3] = {"batch_norm eval", "batch_norm train", "batch_norm_relu train"};
        run(names[mode], f_bn, &mode, 5, in, (bool[]){true, true, true, false, false});
    }
    {
        int64_t xs[4] = {2, 8, 8, 8};
        ct_tensor *in[1] = {rand_t(4, xs)};
        run("max_pool2d", f_maxpool, NULL, 1, in, (bool[]){true});
    }
    for (int incl = 0; incl < 2; incl++) {
        int64_t xs[4] = {2, 3, 7, 7};
        bool b = incl;
        ct_tensor *in[1] = {rand_t(4, xs)};
        run(incl ? "avg_pool2d incl" : "avg_pool2d excl", f_avgpool, &b, 1, in, (bool[]){true});
    }
    {
        int64_t xs[4] = {2, 3, 7, 5};
        ct_tensor *in[1] = {rand_t(4, xs)};
        run("adaptive_avg_pool2d", f_apool, NULL, 1, in, (bool[]){true});
    }
    const char *acts[5] = {"relu", "leaky_relu", "elu", "tanh", "sigmoid"};
    for (int a = 0; a < 5; a++) {
        int64_t xs[2] = {37, 29};
        ct_tensor *in[1] = {rand_t(2, xs)};
        run(acts[a], f_act, &a, 1, in, (bool[]){true});
    }
    for (int lg = 0; lg < 2; lg++) {
        int64_t xs[2] = {11, 10};
        bool b = lg;
        ct_tensor *in[1] = {rand_t(2, xs)};
        run(lg ? "log_softmax" : "softmax", f_softmax, &b, 1, in, (bool[]){true});
    }
    {
        int64_t xs[3] = {5, 6, 7};
        ct_tensor *in[2] = {rand_t(3, xs), rand_t(3, xs)};
        run("add", f_add, NULL, 2, in, (bool[]){true, true});
    }
    {
        int64_t xs[2] = {100, 37};
        ct_tensor *in[1] = {rand_t(2, xs)};
        run("sum", f_sum, NULL, 1, in, (bool[]){true});
    }
    {
        int64_t xs[2] = {64, 33};
        ct_tensor *in[1] = {rand_t(2, xs)};
        run("dropout", f_dropout, NULL, 1, in, (bool[]){true});
    }
    {
        int64_t xs[4] = {3, 4, 5, 6};
        ct_tensor *in[1] = {rand_t(4, xs)};
        run("flatten", f_flatten, NULL, 1, in, (bool[]){true});
    }
    {
        int64_t xs[2] = {40, 10};
        ct_tensor *in[2] = {rand_t(2, xs), targets(40, 10)};
        run("cross_entropy", f_ce, NULL, 2, in, (bool[]){true, false});
    }
    { /* the losses the CUDA backend lacks (its loss kernel is cross entropy's): refused
       * there with CT_ENOSYS naming the op and the device, compared elsewhere */
        const char *names[5] = {"mse_loss", "l1_loss", "nll_loss", "bce_loss",
                                "bce_with_logits_loss"};
        for (int kind = 0; kind < 5; kind++) {
            int64_t xs[2] = {24, 10};
            ct_tensor *in[2] = {rand_t(2, xs), kind == 2 ? targets(24, 10) : rand_t(2, xs)};
            if (dev != CT_CUDA) {
                run(names[kind], f_loss, &kind, 2, in, (bool[]){true, false});
                continue;
            }
            ct_tensor *d0 = ct_tensor_to(in[0], dev), *d1 = ct_tensor_to(in[1], dev);
            ct_tensor *dev_in[2] = {d0, d1}, *y = d0 && d1 ? f_loss(dev_in, &kind) : NULL;
            CHECK(y == NULL && strstr(ct_last_error(), "not implemented on device cuda"),
                  "%s on cuda: %s", names[kind], ct_last_error());
            ct_autograd_clear_tape();
            ct_tensor_release(&y);
            ct_tensor_release(&d0);
            ct_tensor_release(&d1);
            ct_tensor_release(&in[0]);
            ct_tensor_release(&in[1]);
        }
    }
    {
        int64_t xs[4] = {2, 8, 5, 5}, ws[4] = {8, 6, 3, 3}, bs[1] = {6};
        ct_conv_opts o = {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}};
        ct_tensor *in[3] = {rand_t(4, xs), rand_t(4, ws), rand_t(1, bs)};
        run("conv_transpose2d", f_conv_transpose, &o, 3, in, (bool[]){true, true, true});
    }
    {
        int64_t xs[3] = {6, 4, 5};
        ct_tensor *in[1] = {rand_t(3, xs)};
        run("reshape, transpose", f_reshape_transpose, NULL, 1, in, (bool[]){true});
    }
    { /* rows wider than a warp: each lane takes several columns */
        int64_t xs[2] = {50, 300};
        ct_tensor *in[2] = {rand_t(2, xs), targets(50, 300)};
        run("cross_entropy 300 classes", f_ce, NULL, 2, in, (bool[]){true, false});
    }
    {
        int64_t xs[3] = {3, 5, 96}, ws[1] = {96};
        ct_tensor *in[3] = {rand_t(3, xs), rand_t(1, ws), rand_t(1, ws)};
        run("layer_norm", f_layer_norm, NULL, 3, in, (bool[]){true, true, true});
    }
    { /* 65 rows: the weight and bias gradients' sums in chunks of 32 rows, the last partial */
        int64_t xs[3] = {5, 13, 40}, ws[1] = {40};
        ct_tensor *in[3] = {rand_t(3, xs), rand_t(1, ws), rand_t(1, ws)};
        run("layer_norm 65 rows", f_layer_norm, NULL, 3, in, (bool[]){true, true, true});
    }
    for (int approx = 0; approx < 2; approx++) {
        int64_t xs[2] = {37, 29};
        bool b = approx;
        ct_tensor *in[1] = {rand_t(2, xs)};
        run(approx ? "gelu tanh" : "gelu", f_gelu, &b, 1, in, (bool[]){true});
    }
    {
        int64_t xs[2] = {13, 21};
        ct_tensor *in[2] = {rand_t(2, xs), rand_t(2, xs)};
        run("mul", f_mul, NULL, 2, in, (bool[]){true, true});
    }
    for (int64_t pad = -1; pad <= 3; pad += 4) {
        int64_t is[2] = {4, 9}, ws[2] = {11, 24};
        ct_tensor *in[2] = {targets(36, 11), rand_t(2, ws)};
        int64_t *ix = ct_tensor_data(in[0]);
        ix[1] = 3; /* targets() puts an ignore_index there */
        ct_tensor *idx = ct_tensor_view(in[0], 2, is);
        ct_tensor_release(&in[0]);
        in[0] = idx;
        run(pad < 0 ? "embedding" : "embedding padding_idx", f_embedding, &pad, 2, in,
            (bool[]){false, true});
    }
    { /* 600 positions over 5 tokens: long runs of each token (the sorted scatter-add) */
        int64_t is[2] = {20, 30}, ws[2] = {5, 40};
        ct_tensor *in[2] = {targets(600, 5), rand_t(2, ws)};
        ((int64_t *)ct_tensor_data(in[0]))[1] = 4;
        ct_tensor *idx = ct_tensor_view(in[0], 2, is);
        ct_tensor_release(&in[0]);
        in[0] = idx;
        int64_t pad = -1;
        run("embedding 600 positions", f_embedding, &pad, 2, in, (bool[]){false, true});
    }
    {
        int64_t xs[4] = {2, 3, 7, 33};
        ct_tensor *in[1] = {rand_t(4, xs)};
        run("permute", f_permute, NULL, 1, in, (bool[]){true});
    }
    {
        int64_t xs[3] = {3, 4, 17};
        ct_tensor *in[1] = {rand_t(3, xs)};
        run("slice", f_slice, NULL, 1, in, (bool[]){true});
    }
    for (int tr = 0; tr < 4; tr++) {
        bool t[2] = {tr & 1, tr & 2};
        int64_t as[3] = {3, t[0] ? 9 : 13, t[0] ? 13 : 9},
                bs[3] = {3, t[1] ? 21 : 9, t[1] ? 9 : 21};
        ct_tensor *in[2] = {rand_t(3, as), rand_t(3, bs)};
        const char *names[4] = {"bmm", "bmm trans_a", "bmm trans_b", "bmm trans_a trans_b"};
        run(names[tr], f_bmm, t, 2, in, (bool[]){true, true});
    }
    {
        int64_t xs[4] = {2, 3, 40, 40};
        ct_tensor *in[1] = {rand_t(4, xs)};
        run("softmax_causal", f_softmax_causal, NULL, 1, in, (bool[]){true});
    }
    for (int mode = 0; mode < 3; mode++) { /* full, causal, causal with dropout */
        int64_t xs[4] = {2, 3, 37, 40};
        bool o[2] = {mode > 0, mode > 1};
        ct_tensor *in[3] = {rand_t(4, xs), rand_t(4, xs), rand_t(4, xs)};
        const char *names[3] = {"attention", "attention causal", "attention causal dropout"};
        run(names[mode], f_attention, o, 3, in, (bool[]){true, true, true});
    }
    { /* key 0 scores -inf for every query (1e20 * -1e20 overflows) and weighs 0, as on the CPU,
       * though it comes first in each row */
        int64_t xs[4] = {1, 2, 5, 8};
        ct_tensor *in[3] = {rand_t(4, xs), rand_t(4, xs), rand_t(4, xs)};
        float *q = ct_tensor_f32(in[0]), *k = ct_tensor_f32(in[1]);
        for (int64_t r = 0; r < 2 * 5; r++) {
            q[r * 8] = 1e20f;
            k[r * 8] = r % 5 == 0 ? -1e20f : 0.0f;
        }
        run("attention -inf score", f_attention, (bool[]){false, false}, 3, in,
            (bool[]){true, true, true});
    }
    for (int mode = 0; mode < 3; mode++) {
        int64_t xs[3] = {2, 37, 3 * 3 * 40};
        bool o[2] = {mode > 0, mode > 1};
        ct_tensor *in[1] = {rand_t(3, xs)};
        const char *names[3] = {"attention_qkv", "attention_qkv causal",
                                "attention_qkv causal dropout"};
        run(names[mode], f_attention_qkv, o, 1, in, (bool[]){true});
    }
    /* head size 64, T past a block of 64: CUDA's flash kernels (f32, then bf16 on tensor cores
     * against the CPU's bf16, within bf16's rounding: 2^-8 of the values' size, 1e-2 here) */
    for (int mode = 0; mode < 4; mode++) {
        int64_t xs[3] = {2, 70, 3 * 3 * 64};
        bool o[2] = {mode % 2 == 1, false};
        ct_tensor *in[1] = {rand_t(3, xs)};
        const char *names[4] = {"attention_qkv hs 64", "attention_qkv hs 64 causal",
                                "attention_qkv hs 64 bf16", "attention_qkv hs 64 causal bf16"};
        double was = tol;
        if (mode >= 2)
            tol = 1e-2;
        run(names[mode], mode < 2 ? f_attention_qkv : f_attention_qkv_bf16, o, 1, in,
            (bool[]){true});
        tol = was;
    }
}

/* A small CNN (conv, batch norm, ReLU, max pooling, dropout, Linear) built twice from one seed,
 * one copy moved to the device with ct_module_to; both train the same batches with an
 * optimizer whose state lives with the parameters. The losses of every step and the final
 * parameters (read back through the state dict) must agree; so must the optimizer's state
 * dict, whose tensors are host copies. */
#ifndef DROP
#define DROP 0.1f
#endif
static ct_module *small_cnn(void)
{
    ct_nn_manual_seed(11);
    ct_conv_opts pad1 = {.padding = {1, 1}};
    /* no bias before batch norm: its gradient is rounding noise, which Adam scales up to lr */
    return CT_SEQUENTIAL(ct_nn_conv2d_new(3, 16, 3, &pad1, false), ct_nn_batchnorm2d_new(16),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 2, 0), ct_nn_dropout_new(DROP),
                         ct_nn_flatten_new(), ct_nn_linear_new(16 * 4 * 4, 10, true));
}

static ct_optim *optim_for(ct_module *m, bool adam)
{
    const ct_param_ref *refs;
    int n;
    if (ct_module_params(m, &refs, &n) < 0)
        return NULL;
    if (adam)
        return ct_optim_adamw_new(refs, n, &(ct_adam_opts){.lr = 1e-3, .amsgrad = true});
    return ct_optim_sgd_new(refs, n, &(ct_sgd_opts){.lr = 0.05, .momentum = 0.9, .nesterov = true});
}

/* forward, backward, the gradients' L2 norm clipped to 0.5 (*norm: before), optimizer step */
static double train_step(ct_module *m, ct_optim *o, ct_tensor *x, ct_tensor *y, double *norm)
{
    ct_optim_zero_grad(o);
    ct_tensor *logits = ct_module_forward(m, x);
    ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, y, 0.0f) : NULL;
    double v = NAN;
    *norm = NAN;
    if (loss && ct_tensor_backward(loss, NULL) == 0 &&
        ct_optim_clip_grad_norm(o, 0.5, 2.0, norm) == 0 && ct_optim_step(o) == 0)
        v = ct_tensor_item(loss);
    else
        fprintf(stderr, "train step: %s\n", ct_last_error());
    ct_tensor_release(&logits);
    ct_tensor_release(&loss);
    return v;
}

static void test_training(bool adam, int steps)
{
    const char *what = adam ? "AdamW (amsgrad)" : "SGD (nesterov)";
    ct_module *cpu = small_cnn(), *d = small_cnn();
    CHECK(ct_module_to(d, dev) == 0, "module_to: %s", ct_last_error());
    ct_optim *oc = optim_for(cpu, adam), *od = optim_for(d, adam);
    CHECK(oc && od, "optimizers: %s", ct_last_error());
    if (!oc || !od)
        goto out;
    double worst = 0, worst_norm = 0;
    for (int s = 0; s < steps; s++) {
        int64_t xs[4] = {8, 3, 8, 8};
        ct_tensor *x = rand_t(4, xs), *y = targets(8, 10);
        ct_tensor *dx = ct_tensor_to(x, dev), *dy = ct_tensor_to(y, dev);
        ct_nn_manual_seed(100 + s); /* dropout's draw */
        double nc = 0, nd = 0;
        double lc = train_step(cpu, oc, x, y, &nc);
        ct_nn_manual_seed(100 + s);
        double ld = train_step(d, od, dx, dy, &nd);
        worst_norm = fmax(worst_norm, isnan(nd - nc) ? INFINITY : fabs(nd - nc) / fmax(nc, 1));
        if (getenv("VERBOSE"))
            fprintf(stderr, "step %d: cpu %.9g %s %.9g\n", s, lc, what, ld);
        worst = fmax(worst, isnan(ld - lc) ? INFINITY : fabs(ld - lc));
        ct_tensor_release(&x), ct_tensor_release(&y), ct_tensor_release(&dx),
            ct_tensor_release(&dy);
    }
    CHECK(worst <= 10 * tol, "%s: %d steps: losses differ by up to %g", what, steps, worst);
    /* clipping by norm on the device: the backend's norm2 and scale */
    CHECK(worst_norm <= 10 * tol, "%s: %d steps: clipped norms differ by up to %g (relative)", what,
          steps, worst_norm);
    const ct_named_tensor *sc, *sd;
    int nc, nd;
    CHECK(ct_module_state_dict(cpu, &sc, &nc) == 0 && ct_module_state_dict(d, &sd, &nd) == 0 &&
              nc == nd,
          "state dicts: %s", ct_last_error());
    for (int i = 0; i < nc && nc == nd; i++) {
        if (ct_tensor_dtype(sc[i].tensor) != CT_F32)
            continue;
        char name[96];
        snprintf(name, sizeof name, "%s after training", sc[i].name);
        compare(what, name, sc[i].tensor, sd[i].tensor);
    }
    const ct_state_entry *ec, *ed;
    int mc, md;
    CHECK(ct_optim_state_dict(oc, &ec, &mc) == 0 && ct_optim_state_dict(od, &ed, &md) == 0 &&
              mc == md,
          "optimizer state dicts: %s", ct_last_error());
    for (int i = 0; i < mc && mc == md; i++) {
        if (ec[i].kind != CT_STATE_TENSOR)
            continue;
        double big = 1.0, diff = 0;
        for (int64_t k = 0; k < ec[i].numel; k++) {
            big = fmax(big, fabs(ec[i].data[k]));
            diff = fmax(diff, fabs((double)ec[i].data[k] - ed[i].data[k]));
        }
        CHECK(diff <= 10 * tol * big, "%s: optimizer state %s differs by %g", what, ec[i].name,
              diff);
    }
    printf("%s, %d steps on %s: losses within %.3g of the CPU's\n", what, steps,
           dev == CT_CUDA ? "cuda" : "checkdev", worst);
out:
    ct_optim_destroy(&oc);
    ct_optim_destroy(&od);
    ct_module_destroy(&cpu);
    ct_module_destroy(&d);
}

/* refusals: two devices in one op; a kernel the device lacks */
static void test_errors(void)
{
    int64_t xs[2] = {4, 3}, ws[2] = {2, 3};
    ct_tensor *x = rand_t(2, xs), *w = rand_t(2, ws);
    ct_tensor *dx = ct_tensor_to(x, dev);
    ct_tensor *y = ct_nn_linear(dx, w, NULL);
    CHECK(y == NULL && strstr(ct_last_error(), "devices") && strstr(ct_last_error(), "cpu"),
          "mixed devices: %s", ct_last_error());
    ct_tensor_release(&y);
    if (dev == CT_CUDA) { /* mse is the CPU's and checkdev's only */
        ct_tensor *dt = ct_tensor_to(x, dev);
        y = ct_nn_mse_loss(dx, dt);
        CHECK(y == NULL && strstr(ct_last_error(), "mse_loss is not implemented on device cuda"),
              "missing kernel: %s", ct_last_error());
        ct_tensor_release(&y);
        ct_tensor_release(&dt);
    }
    ct_tensor_release(&dx);
    ct_tensor_release(&x);
    ct_tensor_release(&w);
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "checkdev";
    if (!strcmp(name, "cuda")) {
        dev = CT_CUDA;
        tol = 1e-4;
        int64_t one[1] = {1};
        ct_tensor *t = ct_tensor_new(CT_F32, 1, one), *d = ct_tensor_to(t, CT_CUDA);
        ct_tensor_release(&t);
        if (!d) {
            printf("no GPU: %s\n", ct_last_error());
            return 77;
        }
        ct_tensor_release(&d);
    } else if (!strcmp(name, "checkdev")) {
        dev = CT_CHECKDEV;
        tol = 1e-5;
    } else {
        fprintf(stderr, "usage: %s checkdev|cuda\n", argv[0]);
        return 2;
    }
    ct_nn_set_threads(1);
    test_ops();
    test_errors();
    int steps = argc > 2 ? atoi(argv[2]) : 10;
    test_training(false, steps);
    test_training(true, steps);
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed on %s\n", g_fail, name);
        return 1;
    }
    printf("engine ops on %s match the CPU: ok\n", name);
    return 0;
}
