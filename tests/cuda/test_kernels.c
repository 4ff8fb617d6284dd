/* tests/cuda/test_kernels.c — the CUDA backend (trainer/cuda/cuda.h) on a GPU, against ct's CPU
 * code on the same inputs:
 *   - pinned host memory: an asynchronous round trip on a stream;
 *   - the caching allocator: a freed block comes back to the next request of its class on its
 *     stream and never to another stream; the statistics count it; empty_cache returns what is
 *     free; a request larger than the device fails with CT_ENOMEM, and the cache is released
 *     and retried first; a foreign or double free is refused;
 *   - fill, scale, axpy, relu forward and backward: exact against the same float operations;
 *     relu at NaN, +-inf, -0 and +-FLT_MIN: the bits of ct__cpu_relu_fwd/_bwd (NaN as isnan);
 *   - sum: within 1e-6 of a double sum on the host, and the same bits on every run;
 *   - mean cross entropy forward and backward against ct_loss_cross_entropy_* (1e-5), with an
 *     ignored target (-100);
 *   - cuBLASLt products in all four transpose cases, with accumulation, and a Linear's forward
 *     (bias), backward data and backward weights (bias gradient) against ct__cpu_* (1e-4); then
 *     all of them again on views 4, 64 and 192 bytes into their allocations (the same shapes, so
 *     a plan made for aligned pointers would be reused if alignment were not in its key);
 *   - fused SGD (momentum, nesterov, weight decay, maximize), Adam (L2, amsgrad) and AdamW:
 *     3 steps with the same bits as ct_optim_step;
 *   - flash attention (flash_attention.cu) forward and backward against ct__cpu_attn_* in the
 *     same precision (f32, bf16, f16), on a GPT-2 layer's shape (12 heads of 64, T 1024, causal)
 * and on head sizes 32 and 128 with odd T and dropout: f32 to 1e-5, bf16 and f16 to their rounding
 * (the bounds of tests/cudaemu/test_kernels.c); two runs give the same bits; the times of a forward
 * and a backward are printed. Exits 77 with "no GPU" where no CUDA device can be used (this is how
 * `make test` runs it on machines without one; scripts/gpu-check.sh runs it on a GPU). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct/error.h"
#include "ct/loss.h"
#include "ct/optim.h"
#include "trainer/cpu/cpu.h"
#include "trainer/cuda/cuda.h"

#include "check.h"

#define CHECK_RC(expr) CHECK_RC_OR(expr, return )

/* device copy of n host floats (from the allocator) */
static float *upload(const float *h, int64_t n)
{
    void *d = NULL;
    if (ct__cuda_malloc(&d, (size_t)n * sizeof(float), NULL) < 0 ||
        ct__cuda_to_device(d, h, (size_t)n * sizeof(float), NULL) < 0)
        return NULL;
    return d;
}

/* first index where a and b differ in bits, or -1 */
static int64_t first_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)))
            return i;
    return -1;
}

static void test_allocator(void)
{
    ct_cuda_alloc_stats s0, s;
    ct__cuda_alloc_stats_get(&s0);
    CHECK(ct__cuda_alloc_class(0) == 512 && ct__cuda_alloc_class(1) == 512);
    CHECK(ct__cuda_alloc_class(513) == 1024 && ct__cuda_alloc_class(1 << 20) == 1 << 20);
    CHECK(ct__cuda_alloc_class((1 << 20) + 1) == (1 << 20) + (1 << 18));
    CHECK(ct__cuda_alloc_class(7u << 20) == 7u << 20 &&
          ct__cuda_alloc_class((7u << 20) + 1) == 8u << 20);

    void *a = NULL, *b = NULL, *c = NULL;
    CHECK_RC(ct__cuda_malloc(&a, 1000, NULL));
    CHECK_RC(ct__cuda_free(a));
    CHECK_RC(ct__cuda_malloc(&b, 1024, NULL)); /* the same class: the same block */
    CHECK(b == a);
    ct__cuda_alloc_stats_get(&s);
    CHECK(s.allocs - s0.allocs == 2 && s.cache_hits - s0.cache_hits == 1);
    CHECK(s.device_mallocs - s0.device_mallocs == 1);
    CHECK(s.allocated_bytes - s0.allocated_bytes == 1024 &&
          s.requested_bytes - s0.requested_bytes == 1024);

    /* another stream never gets b's block */
    void *stream = NULL;
    CHECK_RC(ct__cuda_stream_new(&stream));
    CHECK_RC(ct__cuda_free(b));
    CHECK_RC(ct__cuda_malloc(&c, 1000, stream));
    CHECK(c != b);
    CHECK_RC(ct__cuda_free(c));

    /* a refused free, then a double free */
    int x;
    CHECK(ct__cuda_free(&x) == CT_EINVAL);
    CHECK(ct__cuda_free(c) == CT_EINVAL);

    /* the block works: write and read back */
    float h[256], back[256];
    fill_random(h, 256, 7, -1, 1);
    float *d = upload(h, 256);
    CHECK(d != NULL);
    if (d) {
        CHECK_RC(download(back, d, 256));
        CHECK(first_diff(h, back, 256) < 0);
        CHECK_RC(ct__cuda_free(d));
    }

    /* pinned host memory: an async round trip on a stream of its own */
    float *pin = NULL;
    CHECK_RC(ct__cuda_pinned_alloc((void **)&pin, sizeof h));
    CHECK_RC(ct__cuda_malloc((void **)&d, sizeof h, stream));
    memcpy(pin, h, sizeof h);
    CHECK_RC(ct__cuda_to_device(d, pin, sizeof h, stream));
    CHECK_RC(ct__cuda_fill(d, 0.5f, 1, stream));
    memset(back, 0, sizeof back);
    CHECK_RC(ct__cuda_to_host(pin, d, sizeof h, stream));
    CHECK_RC(ct__cuda_sync(stream));
    CHECK(pin[0] == 0.5f && first_diff(pin + 1, h + 1, 255) < 0);
    ct__cuda_pinned_free(pin);
    CHECK_RC(ct__cuda_free(d));

    /* everything free goes back */
    CHECK_RC(ct__cuda_empty_cache());
    ct__cuda_alloc_stats_get(&s);
    CHECK(s.reserved_bytes == s.allocated_bytes);

    /* more than the device has: out of memory, after one retry with the cache released */
    void *big = NULL;
    CHECK_RC(ct__cuda_malloc(&a, 4096, NULL));
    CHECK_RC(ct__cuda_free(a)); /* something cached */
    int64_t retries = s.oom_retries;
    int rc = ct__cuda_malloc(&big, (size_t)1 << 50, NULL);
    CHECK(rc == CT_ENOMEM && big == NULL);
    CHECK(strstr(ct_last_error(), "bytes") != NULL);
    ct__cuda_alloc_stats_get(&s);
    CHECK(s.oom_retries == retries + 1 && s.reserved_bytes == s.allocated_bytes);
    ct__cuda_stream_free(stream);
}

static void test_elementwise(void)
{
    enum { N = 100003 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)),
          *dy = malloc(N * sizeof(float)), *got = malloc(N * sizeof(float)),
          *want = malloc(N * sizeof(float));
    fill_random(x, N, 1, -1, 1);
    fill_random(y, N, 2, -1, 1);
    fill_random(dy, N, 3, -1, 1);
    x[5] = 0.0f; /* relu's gradient at 0 is 0 */
    float *dx_ = upload(x, N), *dy_ = upload(y, N), *ddy = upload(dy, N), *dout = upload(y, N);
    CHECK(dx_ && dy_ && ddy && dout);
    if (!(dx_ && dy_ && ddy && dout))
        return;

    CHECK_RC(ct__cuda_relu_fwd(dx_, dout, N, NULL));
    CHECK_RC(download(got, dout, N));
    for (int64_t i = 0; i < N; i++)
        want[i] = x[i] > 0.0f ? x[i] : 0.0f;
    CHECK(first_diff(got, want, N) < 0);

    CHECK_RC(ct__cuda_relu_bwd(dx_, ddy, dout, N, false, NULL));
    CHECK_RC(download(got, dout, N));
    for (int64_t i = 0; i < N; i++)
        want[i] = x[i] > 0.0f ? dy[i] : 0.0f;
    CHECK(first_diff(got, want, N) < 0 && got[5] == 0.0f);
    CHECK_RC(ct__cuda_relu_bwd(dx_, ddy, dout, N, true, NULL)); /* adds the same again */
    CHECK_RC(download(got, dout, N));
    for (int64_t i = 0; i < N; i++)
        want[i] = want[i] + (x[i] > 0.0f ? dy[i] : 0.0f);
    CHECK(first_diff(got, want, N) < 0);

    CHECK_RC(ct__cuda_axpy(dy_, 0.5f, dx_, N, NULL)); /* y += 0.5 x */
    CHECK_RC(ct__cuda_scale(dy_, -2.0f, N, NULL));
    CHECK_RC(download(got, dy_, N));
    for (int64_t i = 0; i < N; i++)
        want[i] = (y[i] + 0.5f * x[i]) * -2.0f;
    CHECK(first_diff(got, want, N) < 0);

    CHECK_RC(ct__cuda_fill(dy_, 3.25f, N, NULL));
    CHECK_RC(download(got, dy_, N));
    CHECK(got[0] == 3.25f && got[N - 1] == 3.25f);

    /* sum: against a double sum, and the same bits twice */
    float *dsum = upload(want, 1), s1 = 0, s2 = 0;
    CHECK_RC(ct__cuda_sum(dx_, N, dsum, NULL));
    CHECK_RC(download(&s1, dsum, 1));
    CHECK_RC(ct__cuda_sum(dx_, N, dsum, NULL));
    CHECK_RC(download(&s2, dsum, 1));
    double ref = 0;
    for (int64_t i = 0; i < N; i++)
        ref += x[i];
    CHECK(fabs(s1 - ref) <= 1e-6 * fmax(1.0, fabs(ref)));
    CHECK(memcmp(&s1, &s2, sizeof s1) == 0);
    CHECK(ct__cuda_sum(NULL, N, dsum, NULL) == CT_EINVAL);

    ct__cuda_free(dsum);
    ct__cuda_free(dx_);
    ct__cuda_free(dy_);
    ct__cuda_free(ddy);
    ct__cuda_free(dout);
    free(x), free(y), free(dy), free(got), free(want);
}

/* a and b the same float: the same bits, or both NaN (a NaN's payload is not promised) */
static bool same_float(float a, float b)
{
    return isnan(a) ? isnan(b) : memcmp(&a, &b, sizeof a) == 0;
}

/* ReLU where float has its edges: the GPU gives the CPU's bits (slope 0) */
static void test_relu_edges(void)
{
    enum { E = 12 };
    const float x[E] = {NAN,   -NAN, INFINITY, -INFINITY, -0.0f,  0.0f,
                        -1.0f, 1.0f, FLT_MIN,  -FLT_MIN,  -3e38f, 3e38f};
    const float dy[E] = {1.0f,      -1.0f, 2.0f, INFINITY, -1.0f, 3.0f,
                         -INFINITY, NAN,   4.0f, -2.0f,    -6.0f, -INFINITY};
    float want_y[E], want_dx[E], got[E];
    ct__cpu_relu_fwd(0.0f, E, x, want_y);
    ct__cpu_relu_bwd(0.0f, E, want_y, dy, want_dx);
    float *dx_ = upload(x, E), *ddy = upload(dy, E), *dout = upload(x, E);
    CHECK(dx_ && ddy && dout);
    if (!(dx_ && ddy && dout))
        return;
    CHECK_RC(ct__cuda_relu_fwd(dx_, dout, E, NULL));
    CHECK_RC(download(got, dout, E));
    for (int i = 0; i < E; i++)
        if (!same_float(got[i], want_y[i])) {
            uint32_t gb, wb;
            memcpy(&gb, &got[i], 4), memcpy(&wb, &want_y[i], 4);
            fprintf(stderr, "relu(%g): gpu %g (0x%08x) cpu %g (0x%08x)\n", x[i], got[i],
                    (unsigned)gb, want_y[i], (unsigned)wb);
            failures++;
        }
    CHECK(isnan(got[0]) && isnan(got[1]) && got[3] == 0.0f && !signbit(got[3]));
    CHECK_RC(ct__cuda_relu_bwd(dx_, ddy, dout, E, false, NULL));
    CHECK_RC(download(got, dout, E));
    for (int i = 0; i < E; i++)
        if (!same_float(got[i], want_dx[i])) {
            fprintf(stderr, "relu backward at x %g, dy %g: gpu %g cpu %g\n", x[i], dy[i], got[i],
                    want_dx[i]);
            failures++;
        }
    ct__cuda_free(dx_), ct__cuda_free(ddy), ct__cuda_free(dout);
}

static void test_cross_entropy(void)
{
    enum { NR = 300, C = 10 };
    float logits[NR * C], grad_cpu[NR * C], grad_gpu[NR * C];
    int64_t target[NR];
    fill_random(logits, NR * C, 11, -1, 1);
    for (int i = 0; i < NR; i++) {
        logits[i * C] *= 8.0f; /* some large logits: log-sum-exp must be stable */
        target[i] = (i * 7) % C;
    }
    target[3] = -100; /* ignored: out of the mean */
    float loss_cpu = 0, loss_gpu = 0, one = 1.0f;
    memset(grad_cpu, 0, sizeof grad_cpu); /* ct_loss_*_backward adds into its output */
    CHECK_RC(ct_loss_cross_entropy_forward(logits, target, NR, C, NULL, &loss_cpu));
    CHECK_RC(ct_loss_cross_entropy_backward(logits, target, NR, C, NULL, &one, grad_cpu));

    float *dl = upload(logits, NR * C), *dgo = upload(&one, 1), *dloss = upload(&one, 1);
    int64_t *dt = NULL;
    CHECK_RC(ct__cuda_malloc((void **)&dt, sizeof target, NULL));
    CHECK_RC(ct__cuda_to_device(dt, target, sizeof target, NULL));
    float *dg = NULL;
    CHECK_RC(ct__cuda_malloc((void **)&dg, sizeof grad_gpu, NULL));
    CHECK_RC(ct__cuda_cross_entropy_fwd(dl, dt, NR, C, dloss, NULL));
    CHECK_RC(ct__cuda_cross_entropy_bwd(dl, dt, NR, C, dgo, dg, NULL));
    CHECK_RC(download(&loss_gpu, dloss, 1));
    CHECK_RC(download(grad_gpu, dg, NR * C));
    CHECK(fabsf(loss_gpu - loss_cpu) <= 1e-5f * fabsf(loss_cpu));
    double worst = 0;
    for (int i = 0; i < NR * C; i++)
        worst = fmax(worst, fabs(grad_gpu[i] - grad_cpu[i]));
    CHECK(worst <= 1e-7); /* gradients are about 1/NR: 1e-7 is 1e-5 of them */
    for (int j = 0; j < C; j++)
        CHECK(grad_gpu[3 * C + j] == 0.0f);
    if (failures)
        fprintf(stderr, "cross entropy: cpu %.9g gpu %.9g, worst grad diff %g\n", loss_cpu,
                loss_gpu, worst);
    ct__cuda_free(dl), ct__cuda_free(dgo), ct__cuda_free(dloss), ct__cuda_free(dt),
        ct__cuda_free(dg);
}

/* worst |got - want| / max(1, |want|) over n */
static double worst_rel(const float *got, const float *want, int64_t n, int64_t *at)
{
    double worst = 0;
    *at = -1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(d <= worst)) { /* NaN counts */
            worst = isnan(d) ? INFINITY : d;
            *at = i;
        }
    }
    return worst;
}

static void expect_close(const char *what, const float *got, const float *want, int64_t n)
{
    int64_t at;
    double w = worst_rel(got, want, n, &at);
    if (w > 1e-4) {
        fprintf(stderr, "%s: [%lld] gpu %.9g cpu %.9g (relative %g)\n", what, (long long)at,
                got[at], want[at], w);
        failures++;
    }
}

/* Byte offsets of the GEMM operands into their allocations: ct's a (and a Linear's x), b (w and
 * dy), c (every output but the bias gradient) and the bias (and its gradient). The allocator's
 * blocks are 256-byte aligned, so an offset of 4 gives a 4-byte aligned view, 192 a 64-byte one. */
typedef struct offsets {
    size_t a, b, c, bias;
} offsets;

enum { MAX_VIEWS = 16 };
static void *view_base[MAX_VIEWS];
static int n_views;

/* a device view `off` bytes into a new allocation, holding the n host floats h; freed by
 * views_free */
static float *upload_at(const float *h, int64_t n, size_t off)
{
    void *base = NULL;
    if (n_views == MAX_VIEWS || ct__cuda_malloc(&base, off + (size_t)n * sizeof(float), NULL) < 0)
        return NULL;
    view_base[n_views++] = base;
    float *d = (float *)((char *)base + off);
    return ct__cuda_to_device(d, h, (size_t)n * sizeof(float), NULL) < 0 ? NULL : d;
}

static void views_free(void)
{
    for (int i = 0; i < n_views; i++)
        ct__cuda_free(view_base[i]);
    n_views = 0;
}

/* Every product at these offsets against the CPU. Called first with offsets 0, so a plan made for
 * aligned pointers is in the table when the same shapes come again misaligned. */
static void test_gemm(offsets o)
{
    enum { M = 37, K = 53, N = 29 }; /* odd sizes: no kernel's favourite multiple */
    float a[M * K], b[K * N], c0[M * N], want[M * N], got[M * N];
    char what[128];
    views_free(); /* what a failed call (CHECK_RC returns) left */
    fill_random(a, M * K, 31, -1, 1);
    fill_random(b, K * N, 32, -1, 1);
    fill_random(c0, M * N, 33, -1, 1);
    float *da = upload_at(a, M * K, o.a), *db = upload_at(b, K * N, o.b),
          *dc = upload_at(c0, M * N, o.c);
    CHECK(da && db && dc);
    if (!(da && db && dc))
        goto out;
    for (int t = 0; t < 8; t++) {
        bool ta = t & 1, tb = t & 2, acc = t & 4;
        snprintf(what, sizeof what, "matmul ta %d tb %d accumulate %d, offsets a %zu b %zu c %zu",
                 ta, tb, acc, o.a, o.b, o.c);
        memcpy(want, c0, sizeof want);
        CHECK_RC(ct__cpu_matmul(M, K, N, a, ta, b, tb, want, acc));
        CHECK_RC(ct__cuda_to_device(dc, c0, sizeof c0, NULL));
        CHECK_RC(ct__cuda_matmul(M, K, N, da, ta, db, tb, dc, acc, NULL));
        CHECK_RC(download(got, dc, M * N));
        expect_close(what, got, want, M * N);
    }
    views_free();

    /* Linear: x (B, IC), w (OC, IC), bias (OC) */
    enum { B = 19, IC = 45, OC = 23 };
    float x[B * IC], w[OC * IC], bias[OC], y[B * OC], yg[B * OC], dy[B * OC], dx[B * IC],
        dxg[B * IC], dw[OC * IC], dwg[OC * IC], dbias[OC], dbg[OC];
    fill_random(x, B * IC, 41, -1, 1);
    fill_random(w, OC * IC, 42, -1, 1);
    fill_random(bias, OC, 43, -1, 1);
    fill_random(dy, B * OC, 44, -1, 1);
    memset(y, 0, sizeof y), memset(dx, 0, sizeof dx), memset(dw, 0, sizeof dw);
    memset(dbias, 0, sizeof dbias);
    float *gx = upload_at(x, B * IC, o.a), *gw = upload_at(w, OC * IC, o.b),
          *gb = upload_at(bias, OC, o.bias), *gy = upload_at(y, B * OC, o.c),
          *gdy = upload_at(dy, B * OC, o.b), *gdx = upload_at(dx, B * IC, o.c),
          *gdw = upload_at(dw, OC * IC, o.c), *gdb = upload_at(dbias, OC, o.bias);
    CHECK(gx && gw && gb && gy && gdy && gdx && gdw && gdb);
    if (!(gx && gw && gb && gy && gdy && gdx && gdw && gdb))
        goto out;
    CHECK_RC(ct__cpu_ip_fwd(B, IC, OC, x, w, bias, y));
    CHECK_RC(ct__cpu_ip_bwd_data(B, IC, OC, w, dy, dx));
    CHECK_RC(ct__cpu_ip_bwd_weights(B, IC, OC, x, dy, dw, dbias));
    CHECK_RC(ct__cuda_ip_fwd(B, IC, OC, gx, gw, gb, gy, NULL));
    CHECK_RC(ct__cuda_ip_bwd_data(B, IC, OC, gw, gdy, gdx, NULL));
    CHECK_RC(ct__cuda_ip_bwd_weights(B, IC, OC, gx, gdy, gdw, gdb, NULL));
    CHECK_RC(download(yg, gy, B * OC));
    CHECK_RC(download(dxg, gdx, B * IC));
    CHECK_RC(download(dwg, gdw, OC * IC));
    CHECK_RC(download(dbg, gdb, OC));
    snprintf(what, sizeof what, "linear, offsets x %zu w/dy %zu outputs %zu bias %zu:", o.a, o.b,
             o.c, o.bias);
    char part[192];
    snprintf(part, sizeof part, "%s forward", what);
    expect_close(part, yg, y, B * OC);
    snprintf(part, sizeof part, "%s backward data", what);
    expect_close(part, dxg, dx, B * IC);
    snprintf(part, sizeof part, "%s backward weights", what);
    expect_close(part, dwg, dw, OC * IC);
    snprintf(part, sizeof part, "%s backward bias", what);
    expect_close(part, dbg, dbias, OC);
out:
    views_free();
}

/* 3 steps of the CPU optimizer `o` over (p, g) against the fused kernel `kind` on copies */
enum { OPT_N = 10007 };
static void compare_optim(const char *what, int kind, const ct_sgd_opts *so, const ct_adam_opts *ao)
{
    static float p[OPT_N], g[OPT_N], p0[OPT_N], got[OPT_N];
    fill_random(p, OPT_N, 21, -1, 1);
    memcpy(p0, p, sizeof p);
    ct_param_ref ref = {.name = "w", .value = p, .grad = g, .numel = OPT_N};
    ct_optim *o = kind == 0   ? ct_optim_sgd_new(&ref, 1, so)
                  : kind == 1 ? ct_optim_adam_new(&ref, 1, ao)
                              : ct_optim_adamw_new(&ref, 1, ao);
    CHECK(o != NULL);
    float *dp = upload(p0, OPT_N), *dg = NULL, *s1 = NULL, *s2 = NULL, *s3 = NULL;
    float zeros[OPT_N] = {0};
    s1 = upload(zeros, OPT_N), s2 = upload(zeros, OPT_N), s3 = upload(zeros, OPT_N);
    CHECK(o && dp && s1 && s2 && s3);
    if (!(o && dp && s1 && s2 && s3))
        return;
    for (int step = 1; step <= 3; step++) {
        fill_random(g, OPT_N, 100 + (uint32_t)step, -1, 1);
        dg = upload(g, OPT_N);
        CHECK_RC(ct_optim_step(o));
        if (kind == 0) {
            ct__sgd_h h = {.lr = so->lr,
                           .momentum = so->momentum,
                           .dampening = so->dampening,
                           .weight_decay = so->weight_decay,
                           .nesterov = so->nesterov,
                           .maximize = so->maximize,
                           .first = step == 1};
            CHECK_RC(ct__cuda_sgd_step(dp, dg, s1, OPT_N, &h, NULL));
        } else {
            ct__adam_h h = {.lr = ao->lr ? ao->lr : 1e-3,
                            .beta1 = ao->beta1 ? ao->beta1 : 0.9,
                            .beta2 = ao->beta2 ? ao->beta2 : 0.999,
                            .eps = ao->eps ? ao->eps : 1e-8,
                            .weight_decay = ao->weight_decay,
                            .amsgrad = ao->amsgrad,
                            .maximize = ao->maximize,
                            .decoupled = kind == 2,
                            .step = step};
            CHECK_RC(ct__cuda_adam_step(dp, dg, s1, s2, s3, OPT_N, &h, NULL));
        }
        ct__cuda_free(dg);
    }
    CHECK_RC(download(got, dp, OPT_N));
    int64_t at = first_diff(got, p, OPT_N);
    if (at >= 0) {
        fprintf(stderr, "%s: [%lld] gpu %.9g cpu %.9g\n", what, (long long)at, got[at], p[at]);
        failures++;
    }
    CHECK(first_diff(p, p0, OPT_N) >= 0); /* it moved */
    ct_optim_destroy(&o);
    ct__cuda_free(dp), ct__cuda_free(s1), ct__cuda_free(s2), ct__cuda_free(s3);
}

/* Flash attention on the GPU against the CPU in p's precision: q, k, v thirds of one packed
 * (B, T, 3C) tensor, o (B, T, C); backward adds into dq, dk, dv that hold 0. Tolerances as in
 * tests/cudaemu/test_kernels.c (test_flash): f32 1e-5 (+ 1e-5 relative); bf16 (f16), with
 * u = 2^-8 (2^-10): o within u max|v| / (1 - dropout), the gradients within (2u max|grad| +
 * u / 4) / (1 - dropout). */
static void flash_case(int64_t batch, int64_t heads, int64_t t, int64_t hs, bool causal, int dt,
                       float dropout)
{
    int64_t c = heads * hs, in = batch * t * 3 * c, out = batch * t * c, rows = batch * heads * t;
    ct__attn_p p = packed_attn(batch, heads, t, hs, causal, dropout, 7, dt);
    bool lowp = dt != CT_F32;
    float u = dt == CT_BF16 ? 0x1p-8f : 0x1p-10f;
    float *qkv = malloc((size_t)in * sizeof(float)), *dout = malloc((size_t)out * sizeof(float));
    float *o = malloc((size_t)out * sizeof(float)), *o_gpu = malloc((size_t)out * sizeof(float));
    float *lse = malloc((size_t)rows * sizeof(float)),
          *delta = malloc((size_t)rows * sizeof(float));
    float *g = calloc((size_t)in, sizeof(float)), *g_gpu = malloc((size_t)in * sizeof(float));
    float *g_again = malloc((size_t)in * sizeof(float));
    float *dqkv = NULL, *ddout = NULL, *d_o = NULL, *dlse = NULL, *ddelta = NULL, *dg = NULL;
    if (!qkv || !dout || !o || !o_gpu || !lse || !delta || !g || !g_gpu || !g_again) {
        CHECK(!"host memory");
        goto out;
    }
    fill_random(qkv, in, 31, -2, 2);
    fill_random(dout, out, 32, -1, 1);
    dqkv = upload(qkv, in), ddout = upload(dout, out), d_o = upload(o, out);
    dlse = upload(lse, rows), ddelta = upload(delta, rows), dg = upload(g, in);
    CHECK(dqkv && ddout && d_o && dlse && ddelta && dg);
    if (!dqkv || !ddout || !d_o || !dlse || !ddelta || !dg)
        goto out;
    CHECK(ct__cuda_flash_takes(&p));
    /* each direction twice: the first loads the kernels (CUDA's lazy loading), the second is
     * timed (and backward's must give the first's bits) */
    struct timespec t0, t1, t2, t3;
    for (int run = 0; run < 2; run++) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK_RC_OR(ct__cuda_flash_fwd(&p, dqkv, dqkv + c, dqkv + 2 * c, d_o, dlse, NULL),
                    goto out);
        CHECK_RC_OR(ct__cuda_sync(NULL), goto out);
        clock_gettime(CLOCK_MONOTONIC, &t1);
    }
    CHECK_RC_OR(ct__cuda_flash_bwd(&p, dqkv, dqkv + c, dqkv + 2 * c, d_o, dlse, ddout, ddelta, dg,
                                   dg + c, dg + 2 * c, false, NULL),
                goto out);
    CHECK_RC_OR(ct__cpu_attn_fwd(&p, qkv, qkv + c, qkv + 2 * c, o, lse), goto out);
    CHECK_RC_OR(download(o_gpu, d_o, out), goto out);
    /* backward from the GPU's o and lse (backward's inputs), checked against the CPU's */
    CHECK_RC_OR(download(lse, dlse, rows), goto out);
    CHECK_RC_OR(ct__cpu_attn_bwd(&p, qkv, qkv + c, qkv + 2 * c, o_gpu, lse, dout, delta, g, g + c,
                                 g + 2 * c, true),
                goto out);
    CHECK_RC_OR(download(g_gpu, dg, in), goto out);
    clock_gettime(CLOCK_MONOTONIC, &t2); /* the same bits again, timed */
    CHECK_RC_OR(ct__cuda_flash_bwd(&p, dqkv, dqkv + c, dqkv + 2 * c, d_o, dlse, ddout, ddelta, dg,
                                   dg + c, dg + 2 * c, false, NULL),
                goto out);
    CHECK_RC_OR(ct__cuda_sync(NULL), goto out);
    clock_gettime(CLOCK_MONOTONIC, &t3);
    CHECK_RC_OR(download(g_again, dg, in), goto out);
    CHECK(first_diff(g_again, g_gpu, in) < 0);
    float vmax = 0, gmax = 0, kept = 1.0f / (1.0f - dropout), eo = 0, eg = 0;
    for (int64_t i = 0; i < in; i++) {
        if (i % (3 * c) >= 2 * c)
            vmax = fmaxf(vmax, fabsf(qkv[i]));
        gmax = fmaxf(gmax, fabsf(g[i]));
    }
    float to = lowp ? u * vmax * kept : 0, tg = lowp ? (2 * u * gmax + u / 4) * kept : 0;
    for (int64_t i = 0; i < out; i++) { /* excess over the allowance; NaN fails */
        float e = fabsf(o_gpu[i] - o[i]) - (lowp ? to : 1e-5f + 1e-5f * fabsf(o[i]));
        eo = isnan(e) ? INFINITY : fmaxf(eo, e);
    }
    for (int64_t i = 0; i < in; i++) {
        float e = fabsf(g_gpu[i] - g[i]) - (lowp ? tg : 1e-5f + 1e-5f * fabsf(g[i]));
        eg = isnan(e) ? INFINITY : fmaxf(eg, e);
    }
    printf("flash %s B %lld H %lld T %lld hs %lld%s dropout %g: forward %.3f ms, backward "
           "%.3f ms\n",
           dt == CT_BF16  ? "bf16"
           : dt == CT_F16 ? "f16"
                          : "f32",
           (long long)batch, (long long)heads, (long long)t, (long long)hs, causal ? " causal" : "",
           (double)dropout, (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6,
           (t3.tv_sec - t2.tv_sec) * 1e3 + (t3.tv_nsec - t2.tv_nsec) / 1e6);
    if (eo > 0 || eg > 0) {
        fprintf(stderr, "  o past its allowance by %g, the gradients by %g\n", eo, eg);
        failures++;
    }
out:
    ct__cuda_free(dqkv), ct__cuda_free(ddout), ct__cuda_free(d_o), ct__cuda_free(dlse),
        ct__cuda_free(ddelta), ct__cuda_free(dg);
    free(qkv), free(dout), free(o), free(o_gpu), free(lse), free(delta), free(g), free(g_gpu),
        free(g_again);
}

static void test_flash(void)
{
    static const int dts[] = {CT_F32, CT_BF16, CT_F16};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        int dt = dts[i];
        flash_case(4, 12, 1024, 64, true, dt, 0.0f); /* a GPT-2 layer's attention, batch 4 */
        flash_case(2, 4, 777, 128, true, dt, 0.1f);
        flash_case(3, 2, 333, 32, false, dt, 0.0f);
    }
}

static void test_optimizers(void)
{
    compare_optim("sgd", 0, &(ct_sgd_opts){.lr = 0.1}, NULL);
    compare_optim(
        "sgd momentum wd", 0,
        &(ct_sgd_opts){.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-2}, NULL);
    compare_optim("sgd nesterov maximize", 0,
                  &(ct_sgd_opts){.lr = 0.05, .momentum = 0.9, .nesterov = true, .maximize = true},
                  NULL);
    compare_optim("adam", 1, NULL, &(ct_adam_opts){.lr = 1e-2});
    compare_optim("adam l2 amsgrad", 1, NULL,
                  &(ct_adam_opts){.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
    compare_optim("adamw", 2, NULL, &(ct_adam_opts){.lr = 1e-2, .weight_decay = 0.05});
}

int main(void)
{
    if (no_gpu())
        return 77;
    test_allocator();
    test_elementwise();
    test_relu_edges();
    test_cross_entropy();
    /* aligned first; then views at 4-, 64- and 64-byte (192) alignments, alone and mixed */
    static const offsets offs[] = {{0, 0, 0, 0},         {4, 4, 4, 4},    {64, 64, 64, 64},
                                   {192, 192, 192, 192}, {4, 64, 192, 4}, {192, 4, 64, 64},
                                   {0, 0, 4, 4}};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++)
        test_gemm(offs[i]);
    test_optimizers();
    test_flash();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("cuda: allocator, elementwise, relu edges, sum, cross entropy, GEMMs (aligned and "
               "not), SGD/Adam/AdamW, flash attention: ok\n");
    return failures ? 1 : 0;
}
