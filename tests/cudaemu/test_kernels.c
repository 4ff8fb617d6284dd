/* tests/cudaemu/test_kernels.c — every CUDA kernel of ct's own (trainer/cuda/ *.cu), run on the
 * CPU by the CUDA emulator (trainer/cudaemu), against the CPU backend's table (ct__backend_cpu)
 * on the same inputs, on shapes that reach every branch: a tail of a block, several blocks, and
 * the grid-stride loops past the launch's 4,096 blocks (elementwise: over 2^20 values; row
 * kernels: over 32,768 rows). What the comparison is, per kernel:
 *   - bits: fill, scale, axpy, ReLU and its backward (NaN, +-inf, -0, +-FLT_MIN, inf and NaN
 *     gradients), leaky ReLU, add, mul, the counter, broadcast, the bias, dropout's Philox mask,
 *     the casts to and from bf16 / f16 (against lowp.h's rounding: subnormals, overflow, ties),
 *     the strided copy, the embedding's lookup and its scatter-add, batch norm's running
 *     statistics, the optimizers (SGD in every momentum mode, Adam, AMSGrad, AdamW: 3 steps);
 *   - within a tolerance (other orders of summation, another libm): sums, norms, column sums,
 *     layer norm, GELU, the causal softmax, cross entropy, ELU / tanh / sigmoid backward,
 *     frozen batch norm's backward, adaptive average pooling, attention forward and backward
 *     (causal and not, dropout, heads read in place from a packed (B, T, 3C) tensor, head sizes
 *     over 32), flash attention in f32, bf16 and f16 against the CPU in the same precision
 *     (test_flash: the bounds are argued there; -inf scores, dropout, T from 1 to 200).
 * The emulator runs each block's threads in lock step and fails a launch whose barriers or
 * shuffles some thread misses; test_emulator.c shows that. What it cannot show is written in
 * docs/ARCHITECTURE.md ("The CUDA emulator"). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct/error.h"
#include "trainer/backend/backend.h"
#include "trainer/backend/lowp.h"
#include "trainer/cuda/cuda.h"

#include "../cuda/check.h"

static const ct__backend *cpu = &ct__backend_cpu;

/* a call that must succeed: counts and prints a failure (ct_last_error), and goes on */
#define OK(expr) CHECK_RC_OR(expr, (void)0)

/* ---- buffers: host ones from malloc, device ones from the emulated allocator ---- */

enum { MAX_BUFS = 64 };
static void *host_bufs[MAX_BUFS], *dev_bufs[MAX_BUFS];
static int n_host, n_dev;

static float *hbuf(int64_t n)
{
    float *p = calloc((size_t)(n ? n : 1), sizeof(float));
    if (!p || n_host == MAX_BUFS) {
        fprintf(stderr, "out of host buffers\n");
        exit(1);
    }
    return host_bufs[n_host++] = p;
}

/* a device copy of h[0..bytes) */
static void *dcopy(const void *h, size_t bytes)
{
    void *d = NULL;
    if (n_dev == MAX_BUFS || ct__cuda_malloc(&d, bytes ? bytes : 1, NULL) ||
        ct__cuda_to_device(d, h, bytes, NULL)) {
        fprintf(stderr, "device buffer: %s\n", ct_last_error());
        exit(1);
    }
    return dev_bufs[n_dev++] = d;
}
static float *dfloats(const float *h, int64_t n)
{
    return dcopy(h, (size_t)n * sizeof(float));
}

/* h[0..n) = the device's d[0..n), after everything queued */
static void get(float *h, const float *d, int64_t n)
{
    OK(ct__cuda_to_host(h, d, (size_t)n * sizeof(float), NULL));
    OK(ct__cuda_sync(NULL));
}

static void free_all(void)
{
    while (n_host)
        free(host_bufs[--n_host]);
    while (n_dev)
        OK(ct__cuda_free(dev_bufs[--n_dev]));
}

static float *random_buf(int64_t n, uint32_t seed, float lo, float hi)
{
    float *x = hbuf(n);
    fill_random(x, n, seed, lo, hi);
    return x;
}

/* got against want: the same bits when tol < 0, else |got - want| <= tol max(1, |want|); NaN
 * matches NaN only. Prints the first difference. */
static void expect(const char *what, const float *got, const float *want, int64_t n, float tol)
{
    for (int64_t i = 0; i < n; i++) {
        float g = got[i], w = want[i];
        bool same = tol < 0 ? memcmp(&g, &w, sizeof g) == 0
                            : (isnan(g) && isnan(w)) || fabsf(g - w) <= tol * fmaxf(1.0f, fabsf(w));
        if (!same) {
            fprintf(stderr, "%s: [%lld] of %lld: emulated CUDA %.9g (0x%08x), CPU %.9g (0x%08x)\n",
                    what, (long long)i, (long long)n, g, *(const uint32_t *)&got[i], w,
                    *(const uint32_t *)&want[i]);
            failures++;
            return;
        }
    }
}

/* the device's d[0..n) against want */
static void expect_dev(const char *what, const float *d, const float *want, int64_t n, float tol)
{
    float *h = hbuf(n);
    get(h, d, n);
    expect(what, h, want, n, tol);
}

/* n values whose first ones are the special floats */
static float *with_specials(int64_t n, uint32_t seed)
{
    static const float specials[] = {NAN,     -NAN,     INFINITY, -INFINITY, 0.0f, -0.0f,
                                     FLT_MIN, -FLT_MIN, 1e-40f,   -1e-40f,   1.0f, -1.0f};
    float *x = random_buf(n, seed, -2, 2);
    for (size_t i = 0; i < sizeof specials / sizeof *specials && (int64_t)i < n; i++)
        x[i] = specials[i];
    return x;
}

/* ---- elementwise.cu ---- */

enum { BIG = 4096 * 256 + 1000 }; /* past the 4,096 blocks of 256: the grid-stride loop */

static void test_elementwise(int64_t n)
{
    float *x = with_specials(n, 1), *y0 = random_buf(n, 2, -1, 1), *want = hbuf(n);
    float *dx = dfloats(x, n), *dy = dfloats(y0, n);

    OK(ct__cuda_fill(dy, 0.25f, n, NULL));
    OK(cpu->fill(n, 0.25f, want));
    expect_dev("fill", dy, want, n, -1);

    float *dz = dfloats(y0, n);
    memcpy(want, y0, (size_t)n * sizeof(float));
    OK(ct__cuda_scale(dz, -1.5f, n, NULL));
    OK(cpu->scale(n, -1.5f, want));
    expect_dev("scale", dz, want, n, -1);

    OK(ct__cuda_axpy(dz, 0.75f, dx, n, NULL));
    OK(cpu->axpy(n, 0.75f, x, want));
    expect_dev("axpy", dz, want, n, -1);

    float *drelu = dfloats(y0, n), *relu = hbuf(n);
    OK(ct__cuda_relu_fwd(dx, drelu, n, NULL));
    OK(cpu->eltwise_fwd(CT__ELT_RELU, 0.0f, n, x, relu));
    expect_dev("relu_fwd", drelu, relu, n, -1);

    /* backward: gradients with inf and NaN where the input is not positive */
    float *g = with_specials(n, 3), *dg = dfloats(g, n), *dgx = dfloats(y0, n);
    OK(ct__cuda_relu_bwd(dx, dg, dgx, n, false, NULL));
    OK(cpu->eltwise_bwd(CT__ELT_RELU, 0.0f, n, relu, g, want));
    expect_dev("relu_bwd", dgx, want, n, -1);
    OK(ct__cuda_relu_bwd(dx, dg, dgx, n, true, NULL)); /* acc: twice the gradient */
    for (int64_t i = 0; i < n; i++)
        want[i] = want[i] + want[i];
    expect_dev("relu_bwd acc", dgx, want, n, -1);
    free_all();
}

static void test_reductions(void)
{
    /* sum and norm2 over one value, a block's tail, several blocks, past 256 blocks */
    static const int64_t ns[] = {1, 300, 70000, BIG};
    for (size_t t = 0; t < sizeof ns / sizeof *ns; t++) {
        int64_t n = ns[t];
        float *x = random_buf(n, 10 + (uint32_t)t, -1, 3), *dx = dfloats(x, n);
        float zero = 0, *dout = dfloats(&zero, 1), got, want;
        OK(ct__cuda_sum(dx, n, dout, NULL));
        get(&got, dout, 1);
        OK(cpu->sum(n, x, &want));
        expect("sum", &got, &want, 1, 1e-6f);
        OK(ct__cuda_norm2(dx, n, dout, NULL));
        get(&got, dout, 1);
        OK(cpu->norm2(n, x, &want));
        expect("norm2", &got, &want, 1, 1e-6f);
        free_all();
    }

    /* column sums (acc and not) and the bias, over a tail of columns */
    int64_t rows = 37, cols = 1000;
    float *x = random_buf(rows * cols, 20, -1, 1), *b = random_buf(cols, 21, -1, 1);
    float *y = random_buf(cols, 22, -1, 1), *want = hbuf(cols);
    float *dx = dfloats(x, rows * cols), *dy = dfloats(y, cols);
    OK(ct__cuda_col_sums(dx, rows, cols, dy, false, NULL));
    OK(cpu->add_col_sums(rows, cols, x, want)); /* want was 0: the sums */
    expect_dev("col_sums", dy, want, cols, 1e-6f);
    OK(ct__cuda_col_sums(dx, rows, cols, dy, true, NULL));
    OK(cpu->add_col_sums(rows, cols, x, want));
    expect_dev("col_sums acc", dy, want, cols, 1e-6f);

    float *wantb = hbuf(rows * cols), *db = dfloats(b, cols);
    for (int64_t i = 0; i < rows * cols; i++)
        wantb[i] = x[i] + b[i % cols];
    OK(ct__cuda_add_bias(dx, db, rows, cols, NULL));
    expect_dev("add_bias", dx, wantb, rows * cols, -1);

    /* the loss scaler's unscale: the flag set by a non-finite result only, never cleared */
    for (int bad = 0; bad < 3; bad++) {
        int64_t n = bad == 2 ? BIG : 5000;
        float *g = random_buf(n, 24, -1e4f, 1e4f), zero = 0, flag = -1, want_flag = 0;
        if (bad == 1)
            g[n - 1] = INFINITY;
        if (bad == 2)
            g[n / 2] = NAN;
        float *d_g = dfloats(g, n), *d_flag = dfloats(&zero, 1);
        OK(ct__cuda_unscale(d_g, n, 1.0f / 65536, d_flag, NULL));
        OK(cpu->unscale(n, 1.0f / 65536, g, &want_flag));
        expect_dev("unscale", d_g, g, n, -1);
        get(&flag, d_flag, 1);
        CHECK(flag == want_flag && want_flag == (bad ? 1.0f : 0.0f));
    }

    float *var = random_buf(cols, 23, 0, 2), *wanti = hbuf(cols), *dv = dfloats(var, cols);
    for (int64_t i = 0; i < cols; i++)
        wanti[i] = 1.0f / sqrtf(var[i] + 1e-5f);
    OK(ct__cuda_inv_std(dv, 1e-5f, dv, cols, NULL));
    expect_dev("inv_std", dv, wanti, cols, -1);
    free_all();
}

/* ---- casts (elementwise.cu, transformer.cu) ---- */

static void test_casts(void)
{
    enum { N = 5000 };
    float *x = with_specials(N, 30);
    /* ties at bf16 and f16 precision, subnormals of both, the edges of f16's range */
    static const float edges[] = {
        1.00390625f,  1.01171875f, 1.00048828125f, 1.00146484375f, 65504.0f,    65519.99f,
        65520.0f,     -65520.0f,   0x1p-24f,       0x1.8p-25f,     0x1p-25f,    0x1p-14f,
        0x1.ffcp-15f, 3.0e38f,     FLT_MAX,        0x1p-133f,      0x1.8p-133f, 0x1p-134f};
    memcpy(x + 12, edges, sizeof edges);
    for (int64_t i = 40; i < N; i += 2) /* wide magnitudes */
        x[i] = ldexpf(x[i], (int)(i % 80) - 40);
    float *dx = dfloats(x, N), *want = hbuf(N), *dback = dfloats(x, N);
    void *dlp = NULL;
    OK(ct__cuda_malloc(&dlp, N * 2, NULL));
    static const int dts[] = {CT_BF16, CT_F16};
    for (int t = 0; t < 2; t++) {
        OK(ct__cuda_to_lp(dts[t], dx, dlp, N, NULL));
        OK(ct__cuda_from_lp(dts[t], dlp, dback, N, NULL));
        memcpy(want, x, N * sizeof(float));
        ct__round_lp(dts[t], N, want, want);
        float *got = hbuf(N);
        get(got, dback, N);
        for (int64_t i = 0; i < N; i++) /* NaN: any NaN (the GPU's is canonical) */
            if (isnan(want[i]) && isnan(got[i]))
                got[i] = want[i];
        expect(dts[t] == CT_BF16 ? "bf16 round trip" : "f16 round trip", got, want, N, -1);
    }
    OK(ct__cuda_free(dlp));

    /* f32 to i64: token ids carried as floats, rounded */
    float *ids = random_buf(N, 31, -300, 300);
    int64_t *want64 = (int64_t *)hbuf(2 * N), *got64 = (int64_t *)hbuf(2 * N);
    int64_t *d64 = dcopy(want64, N * sizeof(int64_t));
    OK(ct__cuda_f32_to_i64(N, dfloats(ids, N), d64, NULL));
    OK(cpu->f32_to_i64(N, ids, want64));
    OK(ct__cuda_to_host(got64, d64, N * sizeof(int64_t), NULL));
    OK(ct__cuda_sync(NULL));
    CHECK(memcmp(got64, want64, N * sizeof(int64_t)) == 0);
    free_all();
}

/* ---- ops.cu ---- */

static void test_ops(int64_t n)
{
    float *a = with_specials(n, 40), *b = random_buf(n, 41, -3, 3), *want = hbuf(n);
    float *da = dfloats(a, n), *db = dfloats(b, n), *dy = dfloats(b, n);

    OK(ct__cuda_add(n, da, db, dy, NULL));
    OK(cpu->add(n, a, b, want));
    expect_dev("add", dy, want, n, -1);
    OK(ct__cuda_mul(n, da, db, dy, false, NULL));
    OK(cpu->mul(n, a, b, want, false));
    expect_dev("mul", dy, want, n, -1);
    OK(ct__cuda_mul(n, da, db, dy, true, NULL));
    OK(cpu->mul(n, a, b, want, true));
    expect_dev("mul acc", dy, want, n, -1);

    OK(ct__cuda_leaky_relu_fwd(0.125f, n, da, dy, NULL));
    OK(cpu->eltwise_fwd(CT__ELT_RELU, 0.125f, n, a, want));
    expect_dev("leaky_relu_fwd", dy, want, n, -1);

    float v = 2.5f, *dv = dfloats(&v, 1);
    OK(ct__cuda_broadcast(n, dv, dy, false, NULL));
    OK(cpu->broadcast(n, &v, want, false));
    expect_dev("broadcast", dy, want, n, -1);
    OK(ct__cuda_broadcast(n, dv, dy, true, NULL));
    OK(cpu->broadcast(n, &v, want, true));
    expect_dev("broadcast acc", dy, want, n, -1);

    int64_t cnt[3] = {5, -7, 1LL << 40}, wcnt[3] = {5, -7, 1LL << 40}, got[3];
    int64_t *dcnt = dcopy(cnt, sizeof cnt);
    OK(ct__cuda_add_i64(3, 3, dcnt, NULL));
    OK(cpu->add_i64(3, 3, wcnt));
    OK(ct__cuda_to_host(got, dcnt, sizeof got, NULL));
    OK(ct__cuda_sync(NULL));
    CHECK(memcmp(got, wcnt, sizeof got) == 0);

    OK(ct__cuda_dropout_mask(n, 0.3f, 1234, 77, dy, NULL));
    OK(cpu->dropout_mask(n, 0.3f, 1234, 77, want));
    expect_dev("dropout_mask", dy, want, n, -1);

    /* ReLU's backward where the output is 0: +0 whatever dy is (not -2 * 0 = -0, inf * 0 = NaN) */
    float y0[4] = {0, 0, 0, 1}, g0[4] = {-2, INFINITY, NAN, 3}, want0[4];
    float *d_y0 = dfloats(y0, 4), *d_g0 = dfloats(g0, 4), *d_dx0 = dfloats(g0, 4);
    OK(ct__cuda_eltwise_bwd_dst(CT__ELT_RELU, 0.0f, 4, d_y0, d_g0, d_dx0, NULL));
    OK(cpu->eltwise_bwd(CT__ELT_RELU, 0.0f, 4, y0, g0, want0));
    CHECK(want0[0] == 0 && !signbit(want0[0]) && want0[1] == 0 && want0[2] == 0 && want0[3] == 3);
    expect_dev("eltwise_bwd_dst relu at y = 0, dy = -2, inf, NaN, then 3 at y = 1", d_dx0, want0, 4,
               -1);

    /* activation backward from the output: ReLU's bits (dy of inf and NaN where y is 0 or
     * negative), the others within rounding */
    float *g = with_specials(n, 42);
    float *dg = dfloats(g, n);
    static const struct {
        int alg;
        float alpha, tol;
        const char *name;
    } acts[] = {{CT__ELT_RELU, 0.0f, -1, "relu"},
                {CT__ELT_RELU, 0.125f, -1, "leaky relu"},
                {CT__ELT_ELU, 1.0f, 1e-6f, "elu"},
                {CT__ELT_TANH, 0.0f, 1e-6f, "tanh"},
                {CT__ELT_SIGMOID, 0.0f, 1e-6f, "sigmoid"}};
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
        float *y = hbuf(n);
        OK(cpu->eltwise_fwd(acts[i].alg, acts[i].alpha, n, a, y));
        float *dyo = dfloats(y, n);
        char what[64];
        snprintf(what, sizeof what, "eltwise_bwd_dst %s", acts[i].name);
        OK(ct__cuda_eltwise_bwd_dst(acts[i].alg, acts[i].alpha, n, dyo, dg, dy, NULL));
        OK(cpu->eltwise_bwd(acts[i].alg, acts[i].alpha, n, y, g, want));
        /* the smooth ones on finite values only (oneDNN's and CUDA's special cases differ) */
        if (acts[i].tol >= 0)
            for (int64_t j = 0; j < 12; j++)
                want[j] = NAN;
        float *got = hbuf(n);
        get(got, dy, n);
        if (acts[i].tol >= 0)
            for (int64_t j = 0; j < 12; j++)
                got[j] = NAN;
        expect(what, got, want, n, acts[i].tol);
    }
    free_all();
}

static void test_batch_norm(void)
{
    /* 3 channels of 5 x 70 values: each channel's block loops past its 256 threads */
    ct__bn_p p = {.n = 5, .c = 3, .hw = 70, .h = 7, .w = 10, .fmt = CT__FMT_PLAIN, .eps = 1e-5f};
    int64_t m = p.n * p.c * p.hw;
    float *x = random_buf(m, 50, -2, 2), *dy = random_buf(m, 51, -1, 1);
    float *scale = random_buf(p.c, 52, 0.5f, 1.5f), *mean = random_buf(p.c, 53, -0.5f, 0.5f);
    float *var = random_buf(p.c, 54, 0.5f, 2);
    float *y = random_buf(m, 55, -1, 1); /* the forward's output: the ReLU's mask */
    float *dx = hbuf(m), *ds = hbuf(p.c), *dsh = hbuf(p.c);
    float *d_x = dfloats(x, m), *d_y = dfloats(y, m), *d_dy = dfloats(dy, m);
    float *d_scale = dfloats(scale, p.c), *d_mean = dfloats(mean, p.c), *d_var = dfloats(var, p.c);
    float *d_dx = dfloats(dx, m), *d_ds = dfloats(ds, p.c), *d_dsh = dfloats(dsh, p.c);
    for (int relu = 0; relu < 2; relu++) {
        p.relu = relu;
        OK(ct__cuda_bn_bwd_frozen(&p, d_x, d_y, d_dy, d_scale, d_mean, d_var, d_dx, d_ds, d_dsh,
                                  NULL));
        OK(cpu->bn_bwd_frozen(&p, x, y, dy, scale, mean, var, dx, ds, dsh));
        expect_dev(relu ? "bn_bwd_frozen relu dx" : "bn_bwd_frozen dx", d_dx, dx, m, 1e-6f);
        expect_dev("bn_bwd_frozen dscale", d_ds, ds, p.c, 1e-5f);
        expect_dev("bn_bwd_frozen dshift", d_dsh, dsh, p.c, 1e-5f);
    }
    /* only the parameters' gradients, then only dx */
    OK(ct__cuda_bn_bwd_frozen(&p, d_x, d_y, d_dy, d_scale, d_mean, d_var, NULL, d_ds, d_dsh, NULL));
    expect_dev("bn_bwd_frozen dscale alone", d_ds, ds, p.c, 1e-5f);
    OK(ct__cuda_bn_bwd_frozen(&p, d_x, d_y, d_dy, d_scale, d_mean, d_var, d_dx, NULL, NULL, NULL));
    expect_dev("bn_bwd_frozen dx alone", d_dx, dx, m, 1e-6f);

    float *rm = random_buf(p.c, 56, -1, 1), *rv = random_buf(p.c, 57, 0, 1);
    float *d_rm = dfloats(rm, p.c), *d_rv = dfloats(rv, p.c);
    OK(ct__cuda_bn_update_running(p.c, 0.1f, 1.01f, d_mean, d_var, d_rm, d_rv, NULL));
    OK(cpu->bn_update_running(p.c, 0.1f, 1.01f, mean, var, rm, rv));
    expect_dev("bn_update_running mean", d_rm, rm, p.c, -1);
    expect_dev("bn_update_running var", d_rv, rv, p.c, -1);
    free_all();
}

static void test_adaptive_pool(void)
{
    static const int64_t shapes[][4] = {{7, 5, 3, 2}, {9, 9, 4, 4}, {5, 6, 5, 6}, {6, 4, 1, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t nc = 37, ih = shapes[s][0], iw = shapes[s][1], oh = shapes[s][2], ow = shapes[s][3];
        float *x = random_buf(nc * ih * iw, 60, -1, 1), *y = hbuf(nc * oh * ow);
        float *dy = random_buf(nc * oh * ow, 61, -1, 1), *dx = random_buf(nc * ih * iw, 62, -1, 1);
        float *d_x = dfloats(x, nc * ih * iw), *d_y = dfloats(y, nc * oh * ow);
        float *d_dy = dfloats(dy, nc * oh * ow), *d_dx = dfloats(dx, nc * ih * iw);
        OK(ct__cuda_adaptive_avg_fwd(nc, ih, iw, oh, ow, d_x, d_y, NULL));
        OK(cpu->adaptive_avg_fwd(nc, ih, iw, oh, ow, x, y));
        expect_dev("adaptive_avg_fwd", d_y, y, nc * oh * ow, 1e-6f);
        OK(ct__cuda_adaptive_avg_bwd(nc, ih, iw, oh, ow, d_dy, d_dx, true, NULL));
        OK(cpu->adaptive_avg_bwd(nc, ih, iw, oh, ow, dy, dx, true));
        expect_dev("adaptive_avg_bwd acc", d_dx, dx, nc * ih * iw, 1e-6f);
        OK(ct__cuda_adaptive_avg_bwd(nc, ih, iw, oh, ow, d_dy, d_dx, false, NULL));
        OK(cpu->adaptive_avg_bwd(nc, ih, iw, oh, ow, dy, dx, false));
        expect_dev("adaptive_avg_bwd", d_dx, dx, nc * ih * iw, 1e-6f);
        free_all();
    }
}

/* ---- transformer.cu ---- */

static void test_layernorm(int64_t rows, int64_t d, bool affine)
{
    int64_t n = rows * d;
    float *x = random_buf(n, 70, -2, 3), *dy = random_buf(n, 71, -1, 1);
    float *w = affine ? random_buf(d, 72, 0.5f, 1.5f) : NULL;
    float *b = affine ? random_buf(d, 73, -0.5f, 0.5f) : NULL;
    float *y = hbuf(n), *mean = hbuf(rows), *rstd = hbuf(rows);
    float *dx = random_buf(n, 74, -1, 1), *dw = random_buf(d, 75, -1, 1),
          *db = random_buf(d, 76, -1, 1);
    float *d_x = dfloats(x, n), *d_dy = dfloats(dy, n), *d_y = dfloats(y, n);
    float *d_w = w ? dfloats(w, d) : NULL, *d_b = b ? dfloats(b, d) : NULL;
    float *d_mean = dfloats(mean, rows), *d_rstd = dfloats(rstd, rows);
    float *d_dx = dfloats(dx, n), *d_dw = dfloats(dw, d), *d_db = dfloats(db, d);
    OK(ct__cuda_layernorm_fwd(rows, d, 1e-5f, d_x, d_w, d_b, d_y, d_mean, d_rstd, NULL));
    OK(cpu->layernorm_fwd(rows, d, 1e-5f, x, w, b, y, mean, rstd));
    expect_dev("layernorm_fwd y", d_y, y, n, 2e-6f);
    expect_dev("layernorm_fwd mean", d_mean, mean, rows, 2e-6f);
    expect_dev("layernorm_fwd rstd", d_rstd, rstd, rows, 2e-6f);
    /* backward from the CPU's statistics, so both start alike: dx added to, dw and db too */
    OK(ct__cuda_to_device(d_mean, mean, (size_t)rows * sizeof(float), NULL));
    OK(ct__cuda_to_device(d_rstd, rstd, (size_t)rows * sizeof(float), NULL));
    OK(ct__cuda_layernorm_bwd(rows, d, d_x, d_w, d_mean, d_rstd, d_dy, d_dx, true,
                              affine ? d_dw : NULL, affine ? d_db : NULL, NULL));
    OK(cpu->layernorm_bwd(rows, d, x, w, mean, rstd, dy, dx, true, affine ? dw : NULL,
                          affine ? db : NULL));
    expect_dev("layernorm_bwd dx acc", d_dx, dx, n, 1e-5f);
    expect_dev("layernorm_bwd dw", d_dw, dw, d, 1e-4f);
    expect_dev("layernorm_bwd db", d_db, db, d, 1e-4f);
    OK(ct__cuda_layernorm_bwd(rows, d, d_x, d_w, d_mean, d_rstd, d_dy, d_dx, false, NULL, NULL,
                              NULL));
    OK(cpu->layernorm_bwd(rows, d, x, w, mean, rstd, dy, dx, false, NULL, NULL));
    expect_dev("layernorm_bwd dx", d_dx, dx, n, 1e-5f);
    free_all();
}

static void test_gelu(int64_t n)
{
    float *x = random_buf(n, 80, -6, 6), *dy = random_buf(n, 81, -1, 1);
    float *y = hbuf(n), *dx = random_buf(n, 82, -1, 1);
    float *d_x = dfloats(x, n), *d_y = dfloats(y, n), *d_dy = dfloats(dy, n),
          *d_dx = dfloats(dx, n);
    for (int tanh_approx = 0; tanh_approx < 2; tanh_approx++) {
        /* the tanh form's backward takes 1 - t^2 in float (as PyTorch's CUDA kernel does),
         * which cancels where t nears -1: the CPU's tanh (1 - 2 / (e^2z + 1), absolute error
         * about 1e-7) and CUDA's tanhf give derivatives up to about 3e-6 apart there */
        float tol = tanh_approx ? 4e-6f : 1e-6f;
        OK(ct__cuda_gelu_fwd(tanh_approx, n, d_x, d_y, NULL));
        OK(cpu->gelu_fwd(tanh_approx, n, x, y));
        expect_dev(tanh_approx ? "gelu_fwd tanh" : "gelu_fwd", d_y, y, n, 1e-6f);
        OK(ct__cuda_gelu_bwd(tanh_approx, n, d_x, d_dy, d_dx, true, NULL));
        OK(cpu->gelu_bwd(tanh_approx, n, x, dy, dx, true));
        expect_dev(tanh_approx ? "gelu_bwd tanh acc" : "gelu_bwd acc", d_dx, dx, n, tol);
        OK(ct__cuda_gelu_bwd(tanh_approx, n, d_x, d_dy, d_dx, false, NULL));
        OK(cpu->gelu_bwd(tanh_approx, n, x, dy, dx, false));
        expect_dev(tanh_approx ? "gelu_bwd tanh" : "gelu_bwd", d_dx, dx, n, tol);
    }
    free_all();
}

static void test_strided_and_softmax(void)
{
    /* (B, T, H, D) = (3, 50, 4, 9) permuted to (B, H, T, D), and added back */
    ct__strided_p p = {.ndim = 4, .shape = {3, 4, 50, 9}};
    int64_t n = 3 * 50 * 4 * 9;
    int64_t ss[4] = {50 * 4 * 9, 9, 4 * 9, 1}, ds[4] = {4 * 50 * 9, 50 * 9, 9, 1};
    memcpy(p.sstride, ss, sizeof ss);
    memcpy(p.dstride, ds, sizeof ds);
    float *src = random_buf(n, 90, -1, 1), *dst = random_buf(n, 91, -1, 1);
    float *d_src = dfloats(src, n), *d_dst = dfloats(dst, n);
    OK(ct__cuda_strided_copy(&p, d_src, d_dst, true, NULL));
    OK(cpu->strided_copy(&p, src, dst, true));
    expect_dev("strided_copy acc", d_dst, dst, n, -1);
    OK(ct__cuda_strided_copy(&p, d_src, d_dst, false, NULL));
    OK(cpu->strided_copy(&p, src, dst, false));
    expect_dev("strided_copy", d_dst, dst, n, -1);

    /* causal softmax: rows of 70 columns (three per lane at the end), 6 sequences */
    int64_t t = 70, rows = 6 * t;
    float *x = random_buf(rows * t, 92, -8, 8), *y = hbuf(rows * t);
    float *d_x = dfloats(x, rows * t), *d_y = dfloats(y, rows * t);
    OK(ct__cuda_softmax_causal_fwd(rows, t, d_x, d_y, NULL));
    OK(cpu->softmax_causal_fwd(rows, t, x, y));
    expect_dev("softmax_causal_fwd", d_y, y, rows * t, 1e-6f);
    free_all();
}

/* ---- embedding.cu ---- */

static void test_embedding(int64_t n, int64_t d, int64_t vocab, int64_t padding_idx)
{
    int64_t *idx = (int64_t *)hbuf(2 * n);
    uint32_t s = 100;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        idx[i] = (int64_t)((s >> 8) % (uint32_t)vocab); /* long runs when vocab is small */
    }
    float *table = random_buf(vocab * d, 101, -1, 1), *y = hbuf(n * d);
    float *dy = random_buf(n * d, 102, -1, 1), *dtable = random_buf(vocab * d, 103, -1, 1);
    int64_t *d_idx = dcopy(idx, (size_t)n * sizeof(int64_t));
    float *d_table = dfloats(table, vocab * d), *d_y = dfloats(y, n * d);
    float *d_dy = dfloats(dy, n * d), *d_dtable = dfloats(dtable, vocab * d);
    OK(ct__cuda_embedding_fwd(n, d, vocab, d_idx, d_table, d_y, NULL));
    OK(cpu->embedding_fwd(n, d, vocab, idx, table, y));
    expect_dev("embedding_fwd", d_y, y, n * d, -1);
    /* into a zero table the same bits (each row's sum in position order); into a table that
     * holds values, the GPU adds a token's sum once, the CPU each row: other roundings */
    float *zeros = hbuf(vocab * d), *d_zeros = dfloats(zeros, vocab * d);
    OK(ct__cuda_embedding_bwd(n, d, vocab, d_idx, padding_idx, d_dy, d_zeros, NULL));
    OK(cpu->embedding_bwd(n, d, vocab, idx, padding_idx, dy, zeros));
    expect_dev("embedding_bwd into zeros", d_zeros, zeros, vocab * d, -1);
    OK(ct__cuda_embedding_bwd(n, d, vocab, d_idx, padding_idx, d_dy, d_dtable, NULL));
    OK(cpu->embedding_bwd(n, d, vocab, idx, padding_idx, dy, dtable));
    expect_dev("embedding_bwd", d_dtable, dtable, vocab * d, 1e-5f);

    /* an index outside the table: a NaN row on the GPU (the CPU refuses it) */
    int64_t bad = vocab;
    OK(ct__cuda_to_device(d_idx, &bad, sizeof bad, NULL));
    OK(ct__cuda_embedding_fwd(n, d, vocab, d_idx, d_table, d_y, NULL));
    float *row = hbuf(d);
    get(row, d_y, d);
    for (int64_t c = 0; c < d; c++)
        CHECK(isnan(row[c]));
    CHECK(cpu->embedding_fwd(1, d, vocab, &bad, table, y) == CT_EINVAL);
    free_all();
}

/* ---- attention.cu ---- */

/* q, k, v as thirds of one (B, T, 3C) tensor, heads read in place, out (B, T, C) */
static void test_attention(int64_t batch, int64_t heads, int64_t t, int64_t hs, bool causal,
                           float dropout)
{
    int64_t c = heads * hs, in = batch * t * 3 * c, out = batch * t * c, rows = batch * heads * t;
    ct__attn_p p = packed_attn(batch, heads, t, hs, causal, dropout, 42, CT_F32);
    float *qkv = random_buf(in, 110, -2, 2), *dout = random_buf(out, 111, -1, 1);
    float *o = hbuf(out), *lse = hbuf(rows), *delta = hbuf(rows);
    float *dqkv = random_buf(in, 112, -1, 1);
    float *d_qkv = dfloats(qkv, in), *d_dout = dfloats(dout, out), *d_o = dfloats(o, out);
    float *d_lse = dfloats(lse, rows), *d_delta = dfloats(delta, rows), *d_dqkv = dfloats(dqkv, in);
    char what[128];
    snprintf(what, sizeof what, "attention B %lld H %lld T %lld hs %lld%s dropout %g",
             (long long)batch, (long long)heads, (long long)t, (long long)hs,
             causal ? " causal" : "", (double)dropout);
    OK(ct__cuda_attn_fwd(&p, d_qkv, d_qkv + c, d_qkv + 2 * c, d_o, d_lse, NULL));
    OK(cpu->attn_fwd(&p, qkv, qkv + c, qkv + 2 * c, o, lse));
    fprintf(stderr, "  %s\n", what);
    expect_dev("attn_fwd o", d_o, o, out, 1e-5f);
    expect_dev("attn_fwd lse", d_lse, lse, rows, 1e-5f);
    /* backward from the CPU's forward, so both start alike; adds into dq, dk, dv, then writes */
    OK(ct__cuda_to_device(d_o, o, (size_t)out * sizeof(float), NULL));
    OK(ct__cuda_to_device(d_lse, lse, (size_t)rows * sizeof(float), NULL));
    for (int acc = 1; acc >= 0; acc--) {
        OK(ct__cuda_attn_bwd(&p, d_qkv, d_qkv + c, d_qkv + 2 * c, d_o, d_lse, d_dout, d_delta,
                             d_dqkv, d_dqkv + c, d_dqkv + 2 * c, acc, NULL));
        OK(cpu->attn_bwd(&p, qkv, qkv + c, qkv + 2 * c, o, lse, dout, delta, dqkv, dqkv + c,
                         dqkv + 2 * c, acc));
        expect_dev(acc ? "attn_bwd dq dk dv acc" : "attn_bwd dq dk dv", d_dqkv, dqkv, in, 1e-5f);
    }
    free_all();
}

/* ---- flash_attention.cu ---- */

/* the largest |x| over n values */
static float max_abs(const float *x, int64_t n)
{
    float m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* got against want within atol + rtol |want| (flash's bf16 bounds); prints the worst place */
static void expect_near(const char *what, const float *d, const float *want, int64_t n, float atol,
                        float rtol)
{
    float *got = hbuf(n), worst = 0, most = 0;
    int64_t at = -1;
    get(got, d, n);
    for (int64_t i = 0; i < n; i++) {
        float err = fabsf(got[i] - want[i]), lim = atol + rtol * fabsf(want[i]);
        most = fmaxf(most, err);
        if (!(err <= lim) && (at < 0 || err - lim > worst))
            worst = err - lim, at = i;
    }
    fprintf(stderr, "    %s: largest difference %.3g (allowed %.3g + %.3g |CPU|)\n", what,
            (double)most, (double)atol, (double)rtol);
    if (at >= 0) {
        fprintf(stderr, "%s: [%lld] of %lld: emulated CUDA %.9g, CPU %.9g (allowed %.3g)\n", what,
                (long long)at, (long long)n, got[at], want[at],
                (double)(atol + rtol * fabsf(want[at])));
        failures++;
    }
}

/* Flash attention (ct__cuda_flash_fwd / _bwd called directly, so the f32 tiles are checked as
 * well as the bf16 ones) against the CPU's attention in the same precision (p.dt): q, k, v as
 * thirds of one (B, T, 3C) tensor, heads read in place, out (B, T, C); backward adds into dq,
 * dk, dv, then writes them. f32: 1e-5 (the sums' order). bf16 (f16): both sides multiply the
 * same bf16 (f16) operands and sum in f32, but the GPU rounds each key tile's weights
 * exp(s - m_running) and divides by the row sum at the end, while the CPU rounds the normalised
 * P_ij: each weight differs by at most u = 2^-8 (f16: 2^-10, twice the unit roundoff) of
 * itself, so |o - o_cpu| <= u sum_j P_ij |v_j| <= u max|v|. Backward: dq, dk, dv are sums of P
 * (or dS) times rounded operands, with delta = do . o (GPU) against sum_j P_ij dP_ij (CPU),
 * which differ by the forward's bound times |do|; the test allows 2u of the largest gradient
 * plus u / 4 (see the code). */
static void test_flash(int64_t batch, int64_t heads, int64_t t, int64_t hs, bool causal, int dt,
                       bool inf, float dropout)
{
    int64_t c = heads * hs, in = batch * t * 3 * c, out = batch * t * c, rows = batch * heads * t;
    ct__attn_p p = packed_attn(batch, heads, t, hs, causal, dropout, 43, dt);
    float *qkv = random_buf(in, 210 + (uint32_t)t, -2, 2), *dout = random_buf(out, 211, -1, 1);
    float *o = hbuf(out), *lse = hbuf(rows), *delta = hbuf(rows);
    float *dqkv = random_buf(in, 212, -1, 1);
    if (inf) /* every fifth key scores -inf with every query (1e20 * -1e20 overflows), key 0 too */
        for (int64_t r = 0; r < batch * t; r++)
            for (int64_t h = 0; h < heads; h++) {
                qkv[r * 3 * c + h * hs] = 1e20f;
                qkv[r * 3 * c + c + h * hs] = r % t % 5 == 0 ? -1e20f : 0.0f;
            }
    float *d_qkv = dfloats(qkv, in), *d_dout = dfloats(dout, out), *d_o = dfloats(o, out);
    float *d_lse = dfloats(lse, rows), *d_delta = dfloats(delta, rows), *d_dqkv = dfloats(dqkv, in);
    bool lowp = dt != CT_F32;
    float u = dt == CT_BF16 ? 0x1p-8f : 0x1p-10f;
    char what[160];
    snprintf(what, sizeof what, "flash %s B %lld H %lld T %lld hs %lld%s%s dropout %g",
             dt == CT_BF16  ? "bf16"
             : dt == CT_F16 ? "f16"
                            : "f32",
             (long long)batch, (long long)heads, (long long)t, (long long)hs,
             causal ? " causal" : "", inf ? " -inf scores" : "", (double)dropout);
    fprintf(stderr, "  %s\n", what);
    CHECK(ct__cuda_flash_takes(&p));
    OK(ct__cuda_flash_fwd(&p, d_qkv, d_qkv + c, d_qkv + 2 * c, d_o, d_lse, NULL));
    OK(cpu->attn_fwd(&p, qkv, qkv + c, qkv + 2 * c, o, lse));
    /* o: u max|v| (the comment above), over 1 - dropout (the kept weights' factor, which the
     * sum of the weights takes too); lse: the same sums, f32 either way */
    float vmax = 0;
    for (int64_t r = 0; r < batch * t; r++)
        vmax = fmaxf(vmax, max_abs(qkv + r * 3 * c + 2 * c, c));
    float kept = 1.0f / (1.0f - dropout);
    expect_near("flash_fwd o", d_o, o, out, lowp ? u * vmax * kept : 1e-5f, lowp ? 0 : 1e-5f);
    expect_near("flash_fwd lse", d_lse, lse, rows, 1e-5f, 1e-5f);
    /* backward from the CPU's forward, so both start alike; adds into dq, dk, dv, then writes.
     * bf16, f16: each gradient is a sum over up to t terms of a weight times an operand; the
     * weights differ by at most u of |P| |dP - delta| scale (plus delta's difference), so the
     * bound is 2u times the sum of the terms' sizes, which is at most t (|do| |v| + |do|) |q|
     * scale (dq, dk) or t |do| (dv) for these inputs; that grows with t, so the test takes the
     * tighter, measured form: 2u times the largest gradient plus u / 4. */
    OK(ct__cuda_to_device(d_o, o, (size_t)out * sizeof(float), NULL));
    OK(ct__cuda_to_device(d_lse, lse, (size_t)rows * sizeof(float), NULL));
    for (int acc = 1; acc >= 0; acc--) {
        OK(ct__cuda_flash_bwd(&p, d_qkv, d_qkv + c, d_qkv + 2 * c, d_o, d_lse, d_dout, d_delta,
                              d_dqkv, d_dqkv + c, d_dqkv + 2 * c, acc, NULL));
        OK(cpu->attn_bwd(&p, qkv, qkv + c, qkv + 2 * c, o, lse, dout, delta, dqkv, dqkv + c,
                         dqkv + 2 * c, acc));
        /* with -inf scores, dk's column 0 sums dS_ij 1e20 over the rows, terms that cancel:
         * there f32 allows 1e-5 of the largest gradient */
        float gmax = max_abs(dqkv, in), f32_atol = inf ? 1e-5f * gmax : 1e-5f;
        expect_near(acc ? "flash_bwd dq dk dv acc" : "flash_bwd dq dk dv", d_dqkv, dqkv, in,
                    lowp ? (2 * u * gmax + u / 4) * kept : f32_atol, lowp ? 0 : 1e-5f);
    }
    free_all();
}

/* Flash bf16 where the weights are exact: q = 0, so every score is 0 and every P_ij = 1 / 64
 * (64 keys, no mask), a bf16 value on both sides; o is then the mean of the bf16-rounded values
 * on both, to f32's sums (1e-5), and differs from the f32 mean by more than 1e-4 (v is
 * rounded: a kernel that stages v unrounded fails here, where the general bound lets it pass). */
static void test_flash_uniform(void)
{
    int64_t heads = 2, t = 64, hs = 64, c = heads * hs, in = t * 3 * c, out = t * c;
    ct__attn_p p = {.bh = heads,
                    .t = t,
                    .hs = hs,
                    .heads = heads,
                    .in_rs = 3 * c,
                    .out_rs = c,
                    .scale = 0.125f,
                    .dt = CT_BF16};
    float *qkv = random_buf(in, 220, -2, 2), *o = hbuf(out), *o32 = hbuf(out),
          *lse = hbuf(heads * t);
    for (int64_t i = 0; i < t; i++)
        memset(qkv + i * 3 * c, 0, (size_t)c * sizeof(float));
    float *d_qkv = dfloats(qkv, in), *d_o = dfloats(o, out), *d_lse = dfloats(lse, heads * t);
    fprintf(stderr, "  flash bf16 q = 0: every weight 1/64\n");
    OK(ct__cuda_flash_fwd(&p, d_qkv, d_qkv + c, d_qkv + 2 * c, d_o, d_lse, NULL));
    OK(cpu->attn_fwd(&p, qkv, qkv + c, qkv + 2 * c, o, lse));
    expect_near("flash_fwd o, q = 0", d_o, o, out, 1e-5f, 1e-5f);
    p.dt = CT_F32;
    OK(cpu->attn_fwd(&p, qkv, qkv + c, qkv + 2 * c, o32, lse));
    float most = 0;
    for (int64_t i = 0; i < out; i++)
        most = fmaxf(most, fabsf(o[i] - o32[i]));
    CHECK(most > 1e-4f);
    free_all();
}

/* ---- loss.cu ---- */

static void test_cross_entropy(int64_t n, int64_t c)
{
    float *x = random_buf(n * c, 120, -5, 5);
    int64_t *t = (int64_t *)hbuf(2 * n);
    for (int64_t i = 0; i < n; i++)
        t[i] = i % 7 == 3 ? -100 : (i * 37) % c; /* some ignored */
    ct__loss_p p = {.kind = CT__LOSS_CE, .n = n, .c = c};
    float *d_x = dfloats(x, n * c), *d_g = dfloats(x, n * c), zero = 0, *d_loss = dfloats(&zero, 1);
    int64_t *d_t = dcopy(t, (size_t)n * sizeof(int64_t));
    float loss = 0, got = 0, gout = 0.75f, *d_gout = dfloats(&gout, 1), *g = hbuf(n * c);
    OK(ct__cuda_cross_entropy_fwd(d_x, d_t, n, c, d_loss, NULL));
    get(&got, d_loss, 1);
    OK(cpu->loss_fwd(&p, x, t, &loss));
    expect("cross_entropy_fwd", &got, &loss, 1, 1e-5f);
    OK(ct__cuda_cross_entropy_bwd(d_x, d_t, n, c, d_gout, d_g, NULL));
    OK(cpu->loss_bwd(&p, x, t, &gout, g)); /* g was 0: adds the gradient */
    expect_dev("cross_entropy_bwd", d_g, g, n * c, 1e-6f);
    free_all();
}

/* ---- optim.cu ---- */

static void test_optimizers(int64_t n)
{
    for (int v = 0; v < 9; v++) {
        float *p = random_buf(n, 130, -1, 1), *g = random_buf(n, 131, -1, 1);
        float *s1 = hbuf(n), *s2 = hbuf(n), *s3 = hbuf(n);
        float *d_p = dfloats(p, n), *d_g = dfloats(g, n), *d_s1 = dfloats(s1, n),
              *d_s2 = dfloats(s2, n), *d_s3 = dfloats(s3, n);
        char what[64];
        for (int step = 1; step <= 3; step++) {
            if (v < 5) { /* SGD: plain, momentum, nesterov, weight decay + dampening, maximize */
                ct__sgd_h h = {.lr = 0.1,
                               .momentum = v == 0 ? 0 : 0.9,
                               .nesterov = v == 2,
                               .dampening = v == 3 ? 0.1 : 0,
                               .weight_decay = v == 3 ? 0.01 : 0,
                               .maximize = v == 4,
                               .first = step == 1};
                OK(ct__cuda_sgd_step(d_p, d_g, d_s1, n, &h, NULL));
                OK(cpu->sgd_step(p, g, s1, n, &h));
                snprintf(what, sizeof what, "sgd %d step %d", v, step);
            } else { /* Adam, Adam + L2, AMSGrad, AdamW */
                ct__adam_h h = {.lr = 1e-3,
                                .beta1 = 0.9,
                                .beta2 = 0.999,
                                .eps = 1e-8,
                                .weight_decay = v == 6 || v == 8 ? 0.01 : 0,
                                .amsgrad = v == 7,
                                .decoupled = v == 8,
                                .step = step};
                OK(ct__cuda_adam_step(d_p, d_g, d_s1, d_s2, d_s3, n, &h, NULL));
                OK(cpu->adam_step(p, g, s1, s2, s3, n, &h));
                snprintf(what, sizeof what, "adam %d step %d", v, step);
            }
            expect_dev(what, d_p, p, n, -1);
            expect_dev(what, d_s1, s1, n, -1);
        }
        free_all();
    }
}

/* the test kernel that spins: it waits on %globaltimer for at least the time asked */
static void test_spin(void)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    OK(ct__cuda_test_spin(NULL, 2));
    OK(ct__cuda_sync(NULL));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec) >= 2e6);
    CHECK(ct__cuda_test_spin(NULL, -1) == CT_EINVAL);
}

/* MFU's denominator from the device's attributes and device.c's table: the emulator describes
 * an sm_90 of 132 SMs at 1.98 GHz (256 FP32 and 4,096 bf16 FLOPs per clock per SM) */
static void test_peak_flops(void)
{
    double f32 = ct__cuda_peak_flops(CT_F32, 1), bf16 = ct__cuda_peak_flops(CT_BF16, 1);
    printf("peak: f32 %.4g, bf16 %.4g FLOP/s\n", f32, bf16);
    CHECK(f32 == 132 * 1.98e9 * 256);
    CHECK(bf16 == 132 * 1.98e9 * 4096);
    CHECK(ct__cuda_peak_flops(CT_F16, 1) == bf16);
}

int main(void)
{
    test_spin();
    test_peak_flops();
    test_elementwise(1000);
    test_elementwise(BIG);
    test_reductions();
    test_casts();
    test_ops(1000);
    test_ops(BIG);
    test_batch_norm();
    test_adaptive_pool();
    test_layernorm(65, 100, true);  /* several blocks, a tail of lanes */
    test_layernorm(3, 300, false);  /* no affine, rows of many values a lane */
    test_layernorm(32800, 3, true); /* past 4,096 blocks of 8 rows: the rows' grid stride */
    test_gelu(1000);
    test_gelu(BIG);
    test_strided_and_softmax();
    test_embedding(600, 37, 5, -1);  /* long runs of few tokens */
    test_embedding(1000, 8, 300, 7); /* 9 bits of keys, a padding index */
    test_attention(2, 3, 37, 40, true, 0.0f);
    test_attention(1, 2, 45, 16, false, 0.0f);
    test_attention(2, 1, 33, 33, true, 0.2f);
    test_attention(1, 1, 9, 256, true, 0.0f); /* the largest head: 8 values a lane */
    test_attention(1, 2, 70, 64, true, 0.0f); /* through attention.cu to the flash kernels */
    test_attention(1, 2, 70, 32, false, 0.2f);
    /* flash: one row, a tile's edge and past it, several blocks, odd T; every head size */
    for (int dt = CT_F32; dt <= CT_BF16; dt += CT_BF16 - CT_F32) {
        test_flash(1, 1, 1, 32, true, dt, false, 0.0f);
        test_flash(1, 2, 63, 32, false, dt, false, 0.0f);
        test_flash(2, 2, 64, 64, true, dt, false, 0.0f);
        test_flash(1, 2, 65, 128, true, dt, false, 0.0f);
        test_flash(1, 1, 200, 64, true, dt, false, 0.0f);
        test_flash(2, 1, 97, 128, false, dt, false, 0.0f);
        test_flash(1, 2, 70, 32, false, dt, true, 0.0f);
        test_flash(2, 2, 70, 64, true, dt, false, 0.2f);
        test_flash(1, 1, 65, 128, false, dt, false, 0.5f);
    }
    /* f16 operands (no -inf case: 1e20 is past f16's range) */
    test_flash(1, 2, 63, 32, false, CT_F16, false, 0.0f);
    test_flash(1, 2, 65, 128, true, CT_F16, false, 0.0f);
    test_flash(1, 1, 200, 64, true, CT_F16, false, 0.0f);
    test_flash(2, 2, 70, 64, true, CT_F16, false, 0.2f);
    test_flash_uniform();
    test_cross_entropy(70, 300);
    test_cross_entropy(100, 10);
    test_optimizers(1000);
    test_optimizers(BIG);
    if (failures)
        fprintf(stderr, "cudaemu_kernels: %d failures\n", failures);
    else
        printf("cudaemu_kernels: every kernel agrees with the CPU backend\n");
    return failures ? 1 : 0;
}
