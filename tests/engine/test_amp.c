/* tests/engine/test_amp.c — mixed precision: autocast (ct_autocast_push) and the loss scaler
 * (ct_grad_scaler), against PyTorch's values in ref/amp.bin (make_reference_amp.py). The
 * device checks run on the checking device, or on the GPU with argv[2] "cuda" (exit 77 without
 * one; scripts/gpu-check.sh), where cuDNN's bf16 convolution output is rounded to bf16 first,
 * so its exact-answer tolerance is 4e-3.
 *
 * - Rounding to bf16 / f16 (trainer/backend/lowp.h) is torch's .to(), bit for bit.
 * - Linear, convolution and matmul under bf16 autocast on the checking device, forward and
 *   backward:
 *     * within 1e-5 (relative to the largest value) of the exact answer for operands rounded
 *       to bf16 (float64 in the reference): the products of two bf16 values are exact in f32,
 *       so only the f32 sums' order differs;
 *     * within 2e-2 of torch.autocast("cpu", bfloat16): torch also rounds its OUTPUT (and its
 *       bias, and the gradients of intermediate casts) to bf16, 2^-9 relative each, and sums
 *       of a few hundred such terms can cancel, so a few times 2^-8 of the largest value;
 *     * and the f32 op is farther than 1e-4 from the exact bf16 answer, so the test fails if
 *       autocast were ignored.
 * - The CPU: where oneDNN has bf16 kernels (AVX512_BF16, AMX) the same checks; elsewhere the ops
 *   fail with CT_ENOSYS whose message names the op, the device and the missing ISA; f16 on the
 *   CPU fails likewise everywhere (oneDNN 2.x has no f16 CPU kernels).
 * - The loss scaler replays the reference's 14 steps (overflow, NaN, growth) on the CPU and the
 *   checking device: scale, growth tracker and skipped steps exactly, the parameters within
 *   1e-6 (torch's SGD rounds through an FMA where it vectorises); and the default
 *   options double the scale after exactly 2000 finite steps.
 * - A small MLP trained 50 steps (SGD) in bf16 autocast on the checking device and in f16 with
 *   the scaler stays within 2e-2 (absolute, loss ~1.4) of the same run in f32 on the CPU at every
 *   step, and is not identical to it. */
#include <stdint.h>

#include "ct/optim.h"
#include "trainer/backend/lowp.h"

#include "testutil.h"

static ref_file R;
static ct_device dev = CT_CHECKDEV; /* argv[2] "cuda": the GPU (scripts/gpu-check.sh) */
static double conv_exact_tol = 1e-5;

/* ---- helpers ---- */

static float *host(const ct_tensor *t)
{
    int64_t n = ct_tensor_numel(t);
    float *h = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (ct_tensor_copy_to(t, h, (size_t)n * sizeof(float)) < 0) {
        fprintf(stderr, "copy to host: %s\n", ct_last_error());
        memset(h, 0xff, (size_t)n * sizeof(float));
    }
    return h;
}

/* got (any device) against want (CPU), relative to want's largest value */
static int near(const char *what, const ct_tensor *got, const ct_tensor *want, double tol)
{
    if (!got) {
        CHECK(got != NULL, "%s: missing", what);
        return -1;
    }
    CHECK(ct_tensor_numel(got) == ct_tensor_numel(want), "%s: size", what);
    float *g = host(got);
    int rc = close_f32(what, g, ct_tensor_f32(want), ct_tensor_numel(want), tol);
    free(g);
    return rc;
}

/* max |a - b| / max |b| */
static double rel_dist(const ct_tensor *a, const ct_tensor *b)
{
    float *x = host(a);
    const float *y = ct_tensor_f32(b);
    double big = 1e-30, d = 0;
    for (int64_t i = 0; i < ct_tensor_numel(b); i++) {
        big = fmax(big, fabs(y[i]));
        d = fmax(d, fabs((double)x[i] - y[i]));
    }
    free(x);
    return d / big;
}

static bool same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* ---- rounding ---- */

static void test_rounding(void)
{
    ct_tensor *in = ref_must(&R, "round.in"), *bf = ref_must(&R, "round.bf16"),
              *hf = ref_must(&R, "round.f16");
    const float *x = ct_tensor_f32(in), *b = ct_tensor_f32(bf), *h = ct_tensor_f32(hf);
    int bad = 0;
    for (int64_t i = 0; i < ct_tensor_numel(in); i++) {
        if (!same_bits(ct__round_bf16(x[i]), b[i]) && bad++ < 5)
            fprintf(stderr, "bf16(%.9g) = %.9g, torch %.9g\n", x[i], ct__round_bf16(x[i]), b[i]);
        if (!same_bits(ct__round_f16(x[i]), h[i]) && bad++ < 5)
            fprintf(stderr, "f16(%.9g) = %.9g, torch %.9g\n", x[i], ct__round_f16(x[i]), h[i]);
    }
    CHECK(bad == 0, "%d roundings differ from torch's", bad);
    CHECK(isnan(ct__round_bf16(NAN)) && isnan(ct__round_f16(NAN)), "NaN stays NaN");
}

/* ---- the autocast stack ---- */

static void test_stack(void)
{
    CHECK(ct_autocast_dtype() == CT_F32, "outside a region: f32");
    CHECK(ct_autocast_pop() == CT_EINVAL && strstr(ct_last_error(), "no autocast region"),
          "pop without push");
    CHECK(ct_autocast_push(CT_I64) == CT_EINVAL && strstr(ct_last_error(), "I64"), "push(I64)");
    CHECK(ct_autocast_push(CT_BF16) == 0 && ct_autocast_dtype() == CT_BF16, "push bf16");
    CHECK(ct_autocast_push(CT_F32) == 0 && ct_autocast_dtype() == CT_F32, "nested f32");
    CHECK(ct_autocast_pop() == 0 && ct_autocast_dtype() == CT_BF16, "back to bf16");
    CHECK(ct_autocast_pop() == 0 && ct_autocast_dtype() == CT_F32, "back to f32");
    int i, rc = 0;
    for (i = 0; i < 20 && (rc = ct_autocast_push(CT_F16)) == 0; i++)
        ;
    CHECK(i == 16 && rc == CT_ERANGE, "depth 16 (got %d, rc %d)", i, rc);
    while (ct_autocast_pop() == 0)
        ;
    ct_dtype dt;
    CHECK(ct_precision_parse("bf16", &dt) == 0 && dt == CT_BF16, "parse bf16");
    CHECK(ct_precision_parse("fp16", &dt) == 0 && dt == CT_F16, "parse fp16");
    CHECK(ct_precision_parse("f32", &dt) == 0 && dt == CT_F32, "parse f32");
    CHECK(ct_precision_parse("half", &dt) == CT_EINVAL && strstr(ct_last_error(), "\"half\""),
          "parse half");
}

/* ---- ops under autocast ---- */

typedef struct op_out {
    ct_tensor *y, *gx, *gw, *gb;
} op_out;

static void op_out_free(op_out *o)
{
    ct_tensor_release(&o->y), ct_tensor_release(&o->gx), ct_tensor_release(&o->gw),
        ct_tensor_release(&o->gb);
}

/* Runs Linear or conv (pad 1) on dev in precision dt; the outputs on the device. Returns -1
 * with ct_last_error set when the forward or backward fails. */
static int run_op(const char *name, ct_device dev, ct_dtype dt, op_out *o)
{
    char k[64];
    ct_tensor *in[4];
    const char *n4[4] = {"x", "w", "b", "gy"};
    *o = (op_out){0};
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof k, "%s.%s", name, n4[i]);
        in[i] = ct_tensor_to(ref_must(&R, k), dev);
        if (i < 3)
            ct_tensor_set_requires_grad(in[i], true);
    }
    int rc = -1;
    ct_autocast_push(dt);
    ct_conv_opts pad1 = {.padding = {1, 1}};
    o->y = strcmp(name, "lin") == 0 ? ct_nn_linear(in[0], in[1], in[2])
                                    : ct_nn_conv2d(in[0], in[1], in[2], &pad1);
    ct_autocast_pop();
    if (o->y) {
        ct_tensor *y = ct_nn_to_plain(o->y);
        ct_tensor_release(&o->y);
        o->y = y;
    }
    if (o->y && ct_tensor_backward(o->y, in[3]) == 0) {
        o->gx = ct_tensor_retain(ct_tensor_grad(in[0]));
        o->gw = ct_tensor_retain(ct_tensor_grad(in[1]));
        o->gb = ct_tensor_retain(ct_tensor_grad(in[2]));
        rc = 0;
    }
    for (int i = 0; i < 4; i++)
        ct_tensor_release(&in[i]);
    return rc;
}

static void check_op(const char *name, ct_device dev, const char *devname)
{
    char k[96], what[128];
    op_out lp, f;
    CHECK(run_op(name, dev, CT_BF16, &lp) == 0, "%s bf16 on %s", name, devname);
    CHECK(run_op(name, dev, CT_F32, &f) == 0, "%s f32 on %s", name, devname);
    const char *outs[4] = {"y", "gx", "gw", "gb"};
    ct_tensor *got[4] = {lp.y, lp.gx, lp.gw, lp.gb}, *f32[4] = {f.y, f.gx, f.gw, f.gb};
    for (int i = 0; i < 4 && got[i]; i++) {
        snprintf(k, sizeof k, "%s.exact.%s", name, outs[i]);
        snprintf(what, sizeof what, "%s bf16 %s on %s vs exact", name, outs[i], devname);
        near(what, got[i], ref_must(&R, k), strcmp(name, "conv") ? 1e-5 : conv_exact_tol);
        snprintf(k, sizeof k, "%s.auto.%s", name, i == 0 ? "y" : outs[i]);
        snprintf(what, sizeof what, "%s bf16 %s on %s vs torch autocast", name, outs[i], devname);
        near(what, got[i], ref_must(&R, k), 2e-2);
        if (i < 3) { /* db is an f32 sum in both: not a product */
            snprintf(k, sizeof k, "%s.exact.%s", name, outs[i]);
            double d = rel_dist(f32[i], ref_must(&R, k));
            CHECK(d > 1e-4, "%s f32 %s on %s is %g from the bf16 answer: autocast did nothing?",
                  name, outs[i], devname, d);
        }
    }
    op_out_free(&lp);
    op_out_free(&f);
}

/* matmul (and so bmm's kernel) against exact rounded products computed here */
static void test_matmul(ct_device dev)
{
    int64_t as[2] = {5, 33}, bs[2] = {33, 7};
    ct_tensor *a = rand_t(2, as), *b = rand_t(2, bs);
    ct_tensor *da = ct_tensor_to(a, dev), *db = ct_tensor_to(b, dev);
    ct_autocast_push(CT_BF16);
    ct_tensor *y = ct_nn_matmul(da, db);
    ct_autocast_pop();
    int64_t ys[2] = {5, 7};
    ct_tensor *want = ct_tensor_new(CT_F32, 2, ys);
    const float *pa = ct_tensor_f32(a), *pb = ct_tensor_f32(b);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 7; j++) {
            double s = 0;
            for (int k = 0; k < 33; k++)
                s += (double)ct__round_bf16(pa[i * 33 + k]) * ct__round_bf16(pb[k * 7 + j]);
            ct_tensor_f32(want)[i * 7 + j] = (float)s;
        }
    near("matmul bf16 vs exact", y, want, 1e-5);
    ct_tensor_release(&y), ct_tensor_release(&want), ct_tensor_release(&a), ct_tensor_release(&b),
        ct_tensor_release(&da), ct_tensor_release(&db);
}

/* the CPU: the same as the checking device where oneDNN has bf16, else a clear error */
static void test_cpu(void)
{
    op_out o;
    int rc = run_op("lin", CT_CPU, CT_BF16, &o);
    char err[512];
    snprintf(err, sizeof err, "%s", ct_last_error());
    op_out_free(&o);
    if (rc == 0) {
        printf("this CPU has bf16 kernels: checking them\n");
        check_op("lin", CT_CPU, "cpu");
        check_op("conv", CT_CPU, "cpu");
    } else {
        CHECK(strstr(err, "linear in bf16 is not available on device cpu") &&
                  strstr(err, "AVX512_BF16") && strstr(err, "AMX"),
              "linear bf16 on this CPU: %s", err);
        rc = run_op("conv", CT_CPU, CT_BF16, &o);
        CHECK(rc < 0 && strstr(ct_last_error(), "conv2d in bf16 is not available on device cpu") &&
                  strstr(ct_last_error(), "AVX512_BF16"),
              "conv bf16 on this CPU: %s", ct_last_error());
        op_out_free(&o);
        printf("this CPU has no bf16 kernels: %s\n", err);
    }
    rc = run_op("lin", CT_CPU, CT_F16, &o);
    CHECK(rc < 0 && strstr(ct_last_error(), "linear in f16 is not available on device cpu"),
          "linear f16 on the CPU: %s", ct_last_error());
    op_out_free(&o);
}

/* ---- the loss scaler ---- */

static void test_scaler_ref(ct_device dev)
{
    ct_tensor *c = ref_must(&R, "scaler.c"), *p0 = ref_must(&R, "scaler.p0");
    const float *sc = ct_tensor_f32(ref_must(&R, "scaler.scale")),
                *tr = ct_tensor_f32(ref_must(&R, "scaler.tracker")),
                *st = ct_tensor_f32(ref_must(&R, "scaler.stepped")),
                *pw = ct_tensor_f32(ref_must(&R, "scaler.p"));
    int steps = (int)ct_tensor_shape(c)[0];
    /* p is a Linear's weight (1, 4): loss = sum(x p^T) with x = c gives p's gradient c * scale */
    ct_module *m = ct_nn_linear_new(4, 1, false);
    const ct_param_ref *refs;
    int n;
    ct_module_params(m, &refs, &n);
    memcpy(refs[0].value, ct_tensor_f32(p0), 4 * sizeof(float));
    CHECK(ct_module_to(m, dev) == 0 && ct_module_params(m, &refs, &n) == 0 && n == 1, "module: %s",
          ct_last_error());
    ct_optim *o = ct_optim_sgd_new(refs, 1, &(ct_sgd_opts){.lr = 0.1});
    ct_grad_scaler *s = ct_grad_scaler_new(&(ct_grad_scaler_opts){.growth_interval = 3});
    CHECK(o && s, "optimizer and scaler: %s", ct_last_error());
    CHECK(ct_grad_scaler_scale(s) == 65536.0f, "initial scale %g", ct_grad_scaler_scale(s));
    for (int i = 0; o && s && i < steps; i++) {
        int64_t four[2] = {1, 4};
        ct_tensor *ci = ct_tensor_new(CT_F32, 2, four);
        memcpy(ct_tensor_f32(ci), ct_tensor_f32(c) + 4 * i, 4 * sizeof(float));
        ct_tensor *dci = ct_tensor_to(ci, dev);
        ct_optim_zero_grad(o);
        ct_tensor *prod = ct_module_forward(m, dci), *loss = prod ? ct_nn_sum(prod) : NULL;
        bool stepped = true;
        CHECK(loss && ct_grad_scaler_backward(s, loss) == 0 &&
                  ct_grad_scaler_step(s, o, &stepped) == 0 && ct_grad_scaler_update(s) == 0,
              "step %d: %s", i, ct_last_error());
        CHECK(ct_grad_scaler_scale(s) == sc[i] && ct_grad_scaler_growth_tracker(s) == (int)tr[i] &&
                  stepped == (st[i] != 0),
              "%s step %d: scale %g tracker %d stepped %d, torch's rule %g %d %d",
              dev == CT_CPU ? "cpu" : "checkdev", i, ct_grad_scaler_scale(s),
              ct_grad_scaler_growth_tracker(s), stepped, sc[i], (int)tr[i], st[i] != 0);
        const ct_named_tensor *sd;
        int nsd;
        ct_module_state_dict(m, &sd, &nsd);
        float *ph = host(sd[0].tensor);
        /* within 1e-6: torch's SGD adds alpha * g with a fused multiply-add where it
         * vectorises, ct's update.h does not (1 ulp apart); a step taken or skipped wrongly, or
         * a gradient unscaled wrongly, is off by far more */
        for (int j = 0; j < 4; j++)
            CHECK(fabs(ph[j] - pw[4 * i + j]) <= 1e-6 * fmax(1.0, fabs(pw[4 * i + j])),
                  "step %d: p[%d] = %.9g, torch %.9g", i, j, ph[j], pw[4 * i + j]);
        free(ph);
        ct_tensor_release(&prod), ct_tensor_release(&loss), ct_tensor_release(&ci),
            ct_tensor_release(&dci);
    }
    /* misuse */
    CHECK(ct_grad_scaler_update(s) == CT_EINVAL && strstr(ct_last_error(), "no step or unscale"),
          "update twice");
    CHECK(ct_grad_scaler_unscale(s, o) == 0 && ct_grad_scaler_unscale(s, o) == CT_EINVAL &&
              strstr(ct_last_error(), "already called"),
          "unscale twice");
    ct_grad_scaler_destroy(&s);
    ct_optim_destroy(&o);
    ct_module_destroy(&m);
}

static void test_scaler_defaults(void)
{
    ct_grad_scaler *s = ct_grad_scaler_new(NULL);
    float v[4] = {1, 2, 3, 4}, g[4] = {0};
    ct_param_ref ref = {.name = "p", .value = v, .grad = g, .numel = 4};
    ct_optim *o = ct_optim_sgd_new(&ref, 1, &(ct_sgd_opts){.lr = 0});
    for (int i = 1; i <= 2000; i++) {
        ct_grad_scaler_step(s, o, NULL);
        ct_grad_scaler_update(s);
        if (i == 1999)
            CHECK(ct_grad_scaler_scale(s) == 65536.0f && ct_grad_scaler_growth_tracker(s) == 1999,
                  "after 1999 finite steps: %g, %d", ct_grad_scaler_scale(s),
                  ct_grad_scaler_growth_tracker(s));
    }
    CHECK(ct_grad_scaler_scale(s) == 131072.0f && ct_grad_scaler_growth_tracker(s) == 0,
          "after 2000 finite steps: %g, %d", ct_grad_scaler_scale(s),
          ct_grad_scaler_growth_tracker(s));
    g[2] = INFINITY;
    bool stepped = true;
    CHECK(ct_grad_scaler_step(s, o, &stepped) == 0 && !stepped && ct_grad_scaler_found_inf(s),
          "an inf gradient skips the step");
    ct_grad_scaler_update(s);
    CHECK(ct_grad_scaler_scale(s) == 65536.0f, "backoff 0.5: %g", ct_grad_scaler_scale(s));
    CHECK(ct_grad_scaler_load(s, 1024.0f, 7) == 0 && ct_grad_scaler_scale(s) == 1024.0f &&
              ct_grad_scaler_growth_tracker(s) == 7,
          "load");
    CHECK(ct_grad_scaler_load(s, 1024.0f, 2000) == CT_EINVAL, "load tracker 2000");
    ct_grad_scaler_destroy(&s);
    ct_optim_destroy(&o);
    CHECK(!ct_grad_scaler_new(&(ct_grad_scaler_opts){.growth_factor = 0.9}) &&
              strstr(ct_last_error(), "growth_factor = 0.9"),
          "growth_factor 0.9 refused");
    CHECK(!ct_grad_scaler_new(&(ct_grad_scaler_opts){.backoff_factor = 1.5}) &&
              strstr(ct_last_error(), "backoff_factor = 1.5"),
          "backoff_factor 1.5 refused");
    CHECK(!ct_grad_scaler_new(&(ct_grad_scaler_opts){.growth_interval = -1}) &&
              strstr(ct_last_error(), "growth_interval = -1"),
          "growth_interval -1 refused");
}

/* ---- training ---- */

#define STEPS 50
static ct_module *mlp(void)
{
    ct_nn_manual_seed(3);
    return CT_SEQUENTIAL(ct_nn_linear_new(20, 64, true), ct_nn_relu_new(),
                         ct_nn_linear_new(64, 64, true), ct_nn_relu_new(),
                         ct_nn_linear_new(64, 4, true));
}

/* 50 steps of SGD on fixed batches (labels from a random linear map); losses into l */
static void train(ct_device dev, ct_dtype dt, double *l)
{
    ct_module *m = mlp();
    if (ct_module_to(m, dev) < 0)
        fprintf(stderr, "module_to: %s\n", ct_last_error());
    const ct_param_ref *refs;
    int n;
    ct_module_params(m, &refs, &n);
    ct_optim *o = ct_optim_sgd_new(refs, n, &(ct_sgd_opts){.lr = 0.1, .momentum = 0.9});
    ct_grad_scaler *s = dt == CT_F16 ? ct_grad_scaler_new(NULL) : NULL;
    fd_rng = 12345;
    for (int i = 0; i < STEPS; i++) {
        int64_t xs[2] = {32, 20}, ys[1] = {32};
        ct_tensor *x = rand_t(2, xs), *y = ct_tensor_new(CT_I64, 1, ys);
        for (int r = 0; r < 32; r++) {
            const float *px = ct_tensor_f32(x) + r * 20;
            int64_t c = (px[0] + px[1] > 0 ? 1 : 0) + (px[2] - px[3] > 0 ? 2 : 0);
            ((int64_t *)ct_tensor_data(y))[r] = c;
        }
        ct_tensor *dx = ct_tensor_to(x, dev), *dy = ct_tensor_to(y, dev);
        ct_optim_zero_grad(o);
        ct_autocast_push(dt);
        ct_tensor *logits = ct_module_forward(m, dx);
        ct_autocast_pop();
        ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, dy, 0.0f) : NULL;
        int rc = -1;
        if (loss)
            rc = s ? (ct_grad_scaler_backward(s, loss) || ct_grad_scaler_step(s, o, NULL) ||
                      ct_grad_scaler_update(s))
                   : (ct_tensor_backward(loss, NULL) || ct_optim_step(o));
        l[i] = rc == 0 ? ct_tensor_item(loss) : NAN;
        if (rc)
            fprintf(stderr, "step %d: %s\n", i, ct_last_error());
        ct_tensor_release(&x), ct_tensor_release(&y), ct_tensor_release(&dx),
            ct_tensor_release(&dy), ct_tensor_release(&logits), ct_tensor_release(&loss);
    }
    ct_grad_scaler_destroy(&s);
    ct_optim_destroy(&o);
    ct_module_destroy(&m);
}

static void test_training(void)
{
    double f32[STEPS], bf[STEPS], hf[STEPS];
    train(CT_CPU, CT_F32, f32);
    train(dev, CT_BF16, bf);
    train(dev, CT_F16, hf);
    double wb = 0, wh = 0;
    for (int i = 0; i < STEPS; i++) {
        if (getenv("VERBOSE"))
            fprintf(stderr, "step %d: f32 %.6f bf16 %.6f f16 %.6f\n", i, f32[i], bf[i], hf[i]);
        wb = isnan(bf[i]) ? INFINITY : fmax(wb, fabs(bf[i] - f32[i]));
        wh = isnan(hf[i]) ? INFINITY : fmax(wh, fabs(hf[i] - f32[i]));
    }
    CHECK(f32[STEPS - 1] < 0.75 * f32[0], "f32 learns: %g -> %g", f32[0], f32[STEPS - 1]);
    CHECK(wb <= 2e-2, "bf16 losses up to %g from f32's", wb);
    CHECK(wh <= 2e-2, "f16 (scaled) losses up to %g from f32's", wh);
    CHECK(wb > 0 && wh > 0, "autocast changed nothing (bf16 %g, f16 %g)", wb, wh);
    printf("MLP, %d steps: loss %.4f -> %.4f in f32; bf16 within %.2g, f16 within %.2g\n", STEPS,
           f32[0], f32[STEPS - 1], wb, wh);
}

int main(int argc, char **argv)
{
    R = ref_load(ref_dir(argc, argv), "amp.bin");
    if (argc > 2 && !strcmp(argv[2], "cuda")) {
        /* cuDNN's bf16 convolution returns bf16 (widened after): 2^-9 of each value */
        dev = CT_CUDA;
        conv_exact_tol = 4e-3;
        int64_t one = 1;
        ct_tensor *t = ct_tensor_new(CT_F32, 1, &one), *d = ct_tensor_to(t, CT_CUDA);
        ct_tensor_release(&t);
        if (!d) {
            printf("no GPU: %s\n", ct_last_error());
            ref_free(&R);
            return 77;
        }
        ct_tensor_release(&d);
    }
    const char *dn = dev == CT_CUDA ? "cuda" : "checkdev";
    test_rounding();
    test_stack();
    check_op("lin", dev, dn);
    check_op("conv", dev, dn);
    test_matmul(dev);
    test_cpu();
    test_scaler_ref(CT_CPU);
    test_scaler_ref(dev);
    test_scaler_defaults();
    test_training();
    ref_free(&R);
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    printf("ok\n");
    return 0;
}
