/* tests/cuda/test_cudnn.c — the cuDNN ops of trainer/cuda (cuda.h) on a GPU, against ct's CPU
 * ops (trainer/cpu/cpu.h, plain layout) on the same inputs, forward and backward:
 *   - convolution 2x3x9x9 -> 4 channels, 3x3, stride 1, pad 1; and 2x4x8x8 -> 6 channels, 3x3,
 *     stride 2, no padding, with bias (also: a second forward gives the same bits, from the
 *     algorithm the first one chose);
 *   - determinism: backward data and backward weights of 64x64x32x32 -> 64, 3x3, pad 1 (a
 *     shape where cuDNN's fastest algorithms add with atomics) run three times give the same
 *     bits, and match the CPU; with ct__cuda_set_deterministic(false) they still run and match
 *     (a note says whether two such runs differed, i.e. whether the shape shows anything);
 *   - batch norm over (4,3,5,5): training forward (y, batch mean, biased variance), inference
 *     forward with other statistics, backward (dx, dscale, dshift);
 *   - max pooling and average pooling with and without the padding counted, 2x2 stride 2 and
 *     3x3 stride 2 pad 1;
 *   - relu, elu, tanh, sigmoid on 1000 values; softmax and log-softmax over (7, 10);
 *   - what is not done on CUDA is CT_ENOSYS (transposed convolution, blocked layouts, fused-ReLU
 *     batch norm, leaky relu, ceil-mode pooling), a NULL pointer CT_EINVAL.
 * Agreement: max |gpu - cpu| <= 1e-4 x max |cpu| over each output tensor (a relative tolerance
 * against the tensor's scale: elements near 0 come from sums whose rounding error scales with
 * the terms, not with the result). Outputs are filled with NaN first, so an element the GPU did
 * not write fails. Exits 77 with "no GPU" where no CUDA device can be used. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/error.h"
#include "trainer/cpu/cpu.h"
#include "trainer/cuda/cuda.h"

#include "check.h"

#define RTOL 1e-4

/* on failure: counts it and goes to the function's `out` */
#define CHECK_RC(expr) CHECK_RC_OR(expr, goto out)

/* ---- buffers: every one a test makes is freed by bufs_free at its end ---- */

enum { MAX_BUFS = 64 };
static void *host_bufs[MAX_BUFS], *dev_bufs[MAX_BUFS];
static int n_host, n_dev;

static void oom(const char *what)
{
    fprintf(stderr, "test_cudnn: %s: out of memory or too many buffers\n", what);
    exit(1);
}

/* n zeroed host floats */
static float *host(int64_t n)
{
    float *p = calloc((size_t)n, sizeof *p);
    if (!p || n_host == MAX_BUFS)
        oom("host");
    host_bufs[n_host++] = p;
    return p;
}

/* deterministic values in [lo, hi) (an LCG) */
static float *host_random(int64_t n, uint32_t seed, float lo, float hi)
{
    float *x = host(n);
    fill_random(x, n, seed, lo, hi);
    return x;
}

/* n device floats, all NaN: an output element nobody writes fails the comparison */
static float *dev(int64_t n)
{
    void *p = NULL;
    if (n_dev == MAX_BUFS || ct__cuda_malloc(&p, (size_t)n * sizeof(float), NULL) < 0 ||
        ct__cuda_fill(p, NAN, n, NULL) < 0)
        oom("device");
    dev_bufs[n_dev++] = p;
    return p;
}

/* a device copy of n host floats */
static float *upload(const float *h, int64_t n)
{
    float *d = dev(n);
    if (ct__cuda_to_device(d, h, (size_t)n * sizeof(float), NULL) < 0)
        oom("upload");
    return d;
}

static void bufs_free(void)
{
    for (int i = 0; i < n_host; i++)
        free(host_bufs[i]);
    for (int i = 0; i < n_dev; i++)
        ct__cuda_free(dev_bufs[i]);
    n_host = n_dev = 0;
}

/* The device tensor d against the CPU's `want`: max |d - want| <= RTOL x max |want|. Reports
 * the worst element. */
static void compare(const char *what, const char *name, const float *d, const float *want,
                    int64_t n)
{
    float *got = host(n);
    int rc = download(got, d, n);
    if (rc < 0) {
        fprintf(stderr, "%s %s: download: %s\n", what, name, ct_last_error());
        failures++;
        return;
    }
    double scale = 0, worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - (double)want[i]);
        if (isnan(diff))
            diff = INFINITY;
        if (diff > worst) {
            worst = diff;
            at = i;
        }
    }
    if (worst > RTOL * scale) {
        fprintf(stderr,
                "%s %s: worst difference %.3g at [%lld]: gpu %.9g cpu %.9g (tolerance %.3g = "
                "%g x max |cpu| %.4g)\n",
                what, name, worst, (long long)at, got[at], want[at], RTOL * scale, RTOL, scale);
        failures++;
    }
}

/* ---- convolution ---- */

static void test_conv(const char *what, ct__conv_p p)
{
    int64_t nx = p.n * p.ic * p.ih * p.iw, nw = p.oc * p.ic * p.kh * p.kw;
    int64_t ny = p.n * p.oc * p.oh * p.ow, nb = p.oc;
    float *x = host_random(nx, 1, -1, 1), *w = host_random(nw, 2, -1, 1);
    float *b = host_random(nb, 3, -1, 1), *dy = host_random(ny, 4, -1, 1);
    float *y = host(ny), *dx = host(nx), *dw = host(nw), *db = host(nb);
    CHECK_RC(ct__cpu_conv_fwd(&p, x, w, p.bias ? b : NULL, y));
    CHECK_RC(ct__cpu_conv_bwd_data(&p, w, dy, dx));
    CHECK_RC(ct__cpu_conv_bwd_weights(&p, x, dy, dw, p.bias ? db : NULL));

    float *gx = upload(x, nx), *gw = upload(w, nw), *gb = upload(b, nb), *gdy = upload(dy, ny);
    float *gy = dev(ny), *gy2 = dev(ny), *gdx = dev(nx), *gdw = dev(nw), *gdb = dev(nb);
    CHECK_RC(ct__cuda_conv_fwd(&p, gx, gw, p.bias ? gb : NULL, gy, NULL));
    CHECK_RC(ct__cuda_conv_bwd_data(&p, gw, gdy, gdx, NULL));
    CHECK_RC(ct__cuda_conv_bwd_weights(&p, gx, gdy, gdw, p.bias ? gdb : NULL, NULL));
    compare(what, "y", gy, y, ny);
    compare(what, "dx", gdx, dx, nx);
    compare(what, "dw", gdw, dw, nw);
    if (p.bias)
        compare(what, "db", gdb, db, nb);

    /* again: the algorithm now comes from the table, the same one, so the same bits */
    CHECK_RC(ct__cuda_conv_fwd(&p, gx, gw, p.bias ? gb : NULL, gy2, NULL));
    float *a = host(ny), *a2 = host(ny);
    CHECK_RC(download(a, gy, ny));
    CHECK_RC(download(a2, gy2, ny));
    CHECK(memcmp(a, a2, (size_t)ny * sizeof(float)) == 0);

    /* not done on CUDA, or wrong */
    ct__conv_p q = p;
    q.transposed = 1;
    CHECK(ct__cuda_conv_fwd(&q, gx, gw, gb, gy, NULL) == CT_ENOSYS);
    q = p;
    q.xfmt = CT__FMT_BLK8;
    CHECK(ct__cuda_conv_bwd_data(&q, gw, gdy, gdx, NULL) == CT_ENOSYS);
    q = p;
    q.oh += 1; /* more output than padding on both sides gives */
    CHECK(ct__cuda_conv_bwd_weights(&q, gx, gdy, gdw, gdb, NULL) == CT_ENOSYS);
    CHECK(ct__cuda_conv_fwd(&p, NULL, gw, gb, gy, NULL) == CT_EINVAL);
out:
    bufs_free();
}

/* ---- deterministic convolution algorithms ---- */

/* the number of elements whose bits differ between the device tensors a and b */
static int64_t bits_differ(const float *a, const float *b, int64_t n)
{
    float *ha = host(n), *hb = host(n);
    if (download(ha, a, n) < 0 || download(hb, b, n) < 0) {
        fprintf(stderr, "bits_differ: download: %s\n", ct_last_error());
        failures++;
        return -1;
    }
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += memcmp(&ha[i], &hb[i], sizeof(float)) != 0;
    return d;
}

static void test_conv_determinism(void)
{
    const char *what = "conv 64x64x32x32 -> 64, 3x3 pad 1";
    enum { REPS = 3 };
    ct__conv_p p = {.n = 64,
                    .ic = 64,
                    .ih = 32,
                    .iw = 32,
                    .oc = 64,
                    .oh = 32,
                    .ow = 32,
                    .kh = 3,
                    .kw = 3,
                    .sh = 1,
                    .sw = 1,
                    .ph = 1,
                    .pw = 1,
                    .dh = 1,
                    .dw = 1};
    int64_t nx = p.n * p.ic * p.ih * p.iw, nw = p.oc * p.ic * p.kh * p.kw;
    int64_t ny = p.n * p.oc * p.oh * p.ow;
    float *x = host_random(nx, 51, -1, 1), *w = host_random(nw, 52, -1, 1);
    float *dy = host_random(ny, 53, -1, 1), *dx = host(nx), *dw = host(nw);
    CHECK(ct__cuda_deterministic()); /* the default */
    CHECK_RC(ct__cpu_conv_bwd_data(&p, w, dy, dx));
    CHECK_RC(ct__cpu_conv_bwd_weights(&p, x, dy, dw, NULL));

    float *gx = upload(x, nx), *gw = upload(w, nw), *gdy = upload(dy, ny);
    float *gdx[REPS], *gdw[REPS];
    for (int r = 0; r < REPS; r++) {
        gdx[r] = dev(nx), gdw[r] = dev(nw);
        CHECK_RC(ct__cuda_conv_bwd_data(&p, gw, gdy, gdx[r], NULL));
        CHECK_RC(ct__cuda_conv_bwd_weights(&p, gx, gdy, gdw[r], NULL, NULL));
    }
    compare(what, "dx (deterministic)", gdx[0], dx, nx);
    compare(what, "dw (deterministic)", gdw[0], dw, nw);
    for (int r = 1; r < REPS; r++) {
        int64_t ddx = bits_differ(gdx[0], gdx[r], nx), ddw = bits_differ(gdw[0], gdw[r], nw);
        if (ddx || ddw) {
            fprintf(stderr,
                    "%s: deterministic run %d differs from run 0 in %lld of dx, %lld of dw\n", what,
                    r, (long long)ddx, (long long)ddw);
            failures++;
        }
    }

    /* the fastest algorithms: chosen again (the table is keyed by the setting), still right */
    ct__cuda_set_deterministic(false);
    for (int r = 0; r < 2; r++) {
        CHECK_RC(ct__cuda_conv_bwd_data(&p, gw, gdy, gdx[r], NULL));
        CHECK_RC(ct__cuda_conv_bwd_weights(&p, gx, gdy, gdw[r], NULL, NULL));
    }
    compare(what, "dx (fastest)", gdx[0], dx, nx);
    compare(what, "dw (fastest)", gdw[0], dw, nw);
    printf("note: %s, fastest algorithms: two runs differ in %lld of %lld dx and %lld of %lld dw "
           "elements\n",
           what, (long long)bits_differ(gdx[0], gdx[1], nx), (long long)nx,
           (long long)bits_differ(gdw[0], gdw[1], nw), (long long)nw);
out:
    ct__cuda_set_deterministic(true);
    bufs_free();
}

/* ---- batch norm ---- */

static void test_bn(void)
{
    const char *what = "batch norm (4,3,5,5)";
    ct__bn_p p = {.n = 4, .c = 3, .hw = 25, .h = 5, .w = 5, .eps = 1e-5f};
    int64_t nx = p.n * p.c * p.hw, c = p.c;
    /* a mean away from 0 and unequal spreads: the statistics matter */
    float *x = host_random(nx, 11, -1.5f, 2.5f), *dy = host_random(nx, 12, -1, 1);
    float *scale = host_random(c, 13, 0.5f, 1.5f), *shift = host_random(c, 14, -1, 1);
    float *run_mean = host_random(c, 15, -0.5f, 0.5f), *run_var = host_random(c, 16, 0.5f, 2);
    float *y = host(nx), *mean = host(c), *var = host(c), *yi = host(nx);
    float *dx = host(nx), *dscale = host(c), *dshift = host(c);
    CHECK_RC(ct__cpu_bn_fwd_train(&p, x, scale, shift, y, mean, var, NULL));
    CHECK_RC(ct__cpu_bn_fwd_infer(&p, x, scale, shift, run_mean, run_var, yi));
    CHECK_RC(ct__cpu_bn_bwd(&p, x, dy, scale, mean, var, NULL, dx, dscale, dshift));

    float *gx = upload(x, nx), *gdy = upload(dy, nx), *gscale = upload(scale, c);
    float *gshift = upload(shift, c), *grm = upload(run_mean, c), *grv = upload(run_var, c);
    float *gmean_cpu = upload(mean, c), *gvar_cpu = upload(var, c);
    float *gy = dev(nx), *gmean = dev(c), *gvar = dev(c), *gyi = dev(nx);
    float *gdx = dev(nx), *gdscale = dev(c), *gdshift = dev(c);
    CHECK_RC(ct__cuda_bn_fwd_train(&p, gx, gscale, gshift, gy, gmean, gvar, NULL));
    CHECK_RC(ct__cuda_bn_fwd_infer(&p, gx, gscale, gshift, grm, grv, gyi, NULL));
    /* backward from the CPU's statistics: the same inputs as the CPU's backward */
    CHECK_RC(
        ct__cuda_bn_bwd(&p, gx, gdy, gscale, gmean_cpu, gvar_cpu, gdx, gdscale, gdshift, NULL));
    compare(what, "y", gy, y, nx);
    compare(what, "mean", gmean, mean, c);
    compare(what, "var (biased)", gvar, var, c);
    compare(what, "y (inference)", gyi, yi, nx);
    compare(what, "dx", gdx, dx, nx);
    compare(what, "dscale", gdscale, dscale, c);
    compare(what, "dshift", gdshift, dshift, c);

    ct__bn_p q = p;
    q.relu = 1;
    CHECK(ct__cuda_bn_fwd_train(&q, gx, gscale, gshift, gy, gmean, gvar, NULL) == CT_ENOSYS);
    q = p;
    q.fmt = CT__FMT_BLK8;
    CHECK(ct__cuda_bn_bwd(&q, gx, gdy, gscale, gmean, gvar, gdx, gdscale, gdshift, NULL) ==
          CT_ENOSYS);
out:
    bufs_free();
}

/* ---- pooling ---- */

static void test_pool(int alg, int64_t k, int64_t s, int64_t pad)
{
    static const char *const algs[] = {"max", "avg (padding counted)", "avg (padding not counted)"};
    char what[96];
    ct__pool_p p = {.n = 2,
                    .c = 3,
                    .ih = 8,
                    .iw = 8,
                    .kh = k,
                    .kw = k,
                    .sh = s,
                    .sw = s,
                    .ph = pad,
                    .pw = pad,
                    .alg = alg};
    p.oh = (p.ih + 2 * pad - k) / s + 1;
    p.ow = (p.iw + 2 * pad - k) / s + 1;
    snprintf(what, sizeof what, "%s pool %lldx%lld stride %lld pad %lld", algs[alg], (long long)k,
             (long long)k, (long long)s, (long long)pad);
    int64_t nx = p.n * p.c * p.ih * p.iw, ny = p.n * p.c * p.oh * p.ow;
    float *x = host_random(nx, 21, -1, 1), *dy = host_random(ny, 22, -1, 1);
    float *y = host(ny), *dx = host(nx);
    size_t ws_bytes = ct__cpu_pool_ws_bytes(&p);
    void *ws = malloc(ws_bytes ? ws_bytes : 1);
    if (!ws)
        oom("pool workspace");
    CHECK_RC(ct__cpu_pool_fwd(&p, x, y, ws, true));
    CHECK_RC(ct__cpu_pool_bwd(&p, dy, ws, dx));

    float *gx = upload(x, nx), *gdy = upload(dy, ny), *gy = dev(ny), *gdx = dev(nx);
    CHECK_RC(ct__cuda_pool_fwd(&p, gx, gy, NULL));
    CHECK_RC(ct__cuda_pool_bwd(&p, gx, gy, gdy, gdx, NULL));
    compare(what, "y", gy, y, ny);
    compare(what, "dx", gdx, dx, nx);

    ct__pool_p q = p;
    q.oh += 1; /* ceil mode */
    CHECK(ct__cuda_pool_fwd(&q, gx, gy, NULL) == CT_ENOSYS);
    CHECK(ct__cuda_pool_bwd(&p, gx, NULL, gdy, gdx, NULL) == CT_EINVAL);
out:
    free(ws);
    bufs_free();
}

/* ---- activations and softmax ---- */

static void test_eltwise(int alg, float alpha)
{
    static const char *const algs[] = {"relu", "elu", "tanh", "sigmoid"};
    enum { N = 1000 };
    char what[64];
    snprintf(what, sizeof what, "%s (alpha %g)", algs[alg], (double)alpha);
    float *x = host_random(N, 31, -3, 3), *dy = host_random(N, 32, -1, 1);
    float *y = host(N), *dx = host(N);
    CHECK_RC(ct__cpu_eltwise_fwd(alg, alpha, N, x, y));
    CHECK_RC(ct__cpu_eltwise_bwd(alg, alpha, N, y, dy, dx));

    float *gx = upload(x, N), *gdy = upload(dy, N), *gy = dev(N), *gdx = dev(N);
    CHECK_RC(ct__cuda_eltwise_fwd(alg, alpha, N, gx, gy, NULL));
    CHECK_RC(ct__cuda_eltwise_bwd(alg, alpha, N, gx, gy, gdy, gdx, NULL));
    compare(what, "y", gy, y, N);
    compare(what, "dx", gdx, dx, N);

    if (alg == CT__ELT_RELU) /* leaky relu: cuDNN has none */
        CHECK(ct__cuda_eltwise_fwd(alg, 0.1f, N, gx, gy, NULL) == CT_ENOSYS);
    CHECK(ct__cuda_eltwise_bwd(alg, alpha, N, NULL, gy, gdy, gdx, NULL) == CT_EINVAL);
out:
    bufs_free();
}

static void test_softmax(bool log)
{
    enum { R = 7, C = 10 };
    const char *what = log ? "log-softmax (7,10)" : "softmax (7,10)";
    float *x = host_random(R * C, 41, -4, 4), *dy = host_random(R * C, 42, -1, 1);
    float *y = host(R * C), *dx = host(R * C);
    CHECK_RC(ct__cpu_softmax_fwd(log, R, C, x, y));
    CHECK_RC(ct__cpu_softmax_bwd(log, R, C, y, dy, dx));

    float *gx = upload(x, R * C), *gdy = upload(dy, R * C), *gy = dev(R * C), *gdx = dev(R * C);
    CHECK_RC(ct__cuda_softmax_fwd(log, R, C, gx, gy, NULL));
    CHECK_RC(ct__cuda_softmax_bwd(log, R, C, gy, gdy, gdx, NULL));
    compare(what, "y", gy, y, R * C);
    compare(what, "dx", gdx, dx, R * C);
out:
    bufs_free();
}

int main(void)
{
    if (no_gpu())
        return 77;
    test_conv("conv 2x3x9x9 -> 4, 3x3 stride 1 pad 1", (ct__conv_p){.n = 2,
                                                                    .ic = 3,
                                                                    .ih = 9,
                                                                    .iw = 9,
                                                                    .oc = 4,
                                                                    .oh = 9,
                                                                    .ow = 9,
                                                                    .kh = 3,
                                                                    .kw = 3,
                                                                    .sh = 1,
                                                                    .sw = 1,
                                                                    .ph = 1,
                                                                    .pw = 1,
                                                                    .dh = 1,
                                                                    .dw = 1});
    test_conv("conv 2x4x8x8 -> 6, 3x3 stride 2, bias", (ct__conv_p){.n = 2,
                                                                    .ic = 4,
                                                                    .ih = 8,
                                                                    .iw = 8,
                                                                    .oc = 6,
                                                                    .oh = 3,
                                                                    .ow = 3,
                                                                    .kh = 3,
                                                                    .kw = 3,
                                                                    .sh = 2,
                                                                    .sw = 2,
                                                                    .dh = 1,
                                                                    .dw = 1,
                                                                    .bias = 1});
    test_conv_determinism();
    test_bn();
    for (int alg = CT__POOL_MAX; alg <= CT__POOL_AVG_EXCL; alg++) {
        test_pool(alg, 2, 2, 0);
        test_pool(alg, 3, 2, 1);
    }
    test_eltwise(CT__ELT_RELU, 0.0f);
    test_eltwise(CT__ELT_ELU, 0.7f);
    test_eltwise(CT__ELT_TANH, 0.0f);
    test_eltwise(CT__ELT_SIGMOID, 0.0f);
    test_softmax(false);
    test_softmax(true);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("cudnn: conv (deterministic and fastest), batch norm, pooling, activations, "
               "softmax match the CPU: ok\n");
    return failures ? 1 : 0;
}
