/* trainer/cpu/backend_cpu.c — the CPU's backend table (trainer/backend/table.h): host memory,
 * no streams (every kernel is done when it returns, so events and waits are no-ops), the
 * kernels of dnnl.c, gemm.c and loops.c, the losses of ct/loss.h, and the few loops the
 * engine's ops needed beside them (batch norm's frozen backward and running statistics,
 * dropout's mask, sum).
 *
 * Host buffers are 64-byte aligned. A per-thread cache keeps recently freed buffers by exact
 * size (up to CACHE_SLOTS of them and CACHE_MAX_BYTES): a training step allocates the same
 * activation sizes every step, and reusing them avoids glibc handing the memory back to the
 * kernel and the page faults of taking it again (with 64 slots a GPT step at block 128 took
 * 440k faults in 10 steps, and 80k with 1024; `perf stat -e page-faults build/bin/gpt_bench 10
 * 1 4 4 128 128 16`). A thread's cache is freed when the thread ends (ct__at_thread_exit). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/loss.h"
#include "ct/nn.h"
#include "trainer/backend/philox.h"
#include "trainer/cpu/cpu.h"
#include "trainer/cpu/vecmath.h"

/* ---- memory: exact-size reuse of freed buffers ---- */
#define CACHE_SLOTS 1024 /* a GPT step frees several hundred buffers of a few dozen sizes */
#define CACHE_MIN_BYTES 4096
#define CACHE_MAX_BYTES ((size_t)512 << 20)
static __thread struct {
    void *p;
    size_t n;
} cache[CACHE_SLOTS]; /* cache[0..ncache) */
static __thread int ncache;
static __thread size_t cache_bytes;
static __thread bool cache_release_set; /* cache_release is registered for the thread's end */

/* the block size of a request: buffers are handed back by size, and free gets no size */
typedef struct hdr {
    size_t n;
    char pad[56]; /* keeps the data 64-byte aligned */
} hdr;

/* Takes slot i out of the cache (the last slot moves into it). */
static void *cache_take(int i)
{
    void *p = cache[i].p;
    cache_bytes -= cache[i].n;
    cache[i] = cache[--ncache];
    return p;
}

/* At the thread's end (a stage thread's): its cached buffers go back. */
static void cache_release(void)
{
    while (ncache)
        free(cache_take(ncache - 1));
    cache_release_set = false;
}

static int cpu_alloc(void **out, size_t n)
{
    size_t rounded = (n + 63) & ~(size_t)63;
    if (!rounded)
        rounded = 64;
    if (rounded >= CACHE_MIN_BYTES)
        for (int i = ncache - 1; i >= 0; i--) /* recently freed ones first: warm in cache */
            if (cache[i].n == rounded) {
                *out = (hdr *)cache_take(i) + 1;
                return 0;
            }
    hdr *h = aligned_alloc(64, sizeof(hdr) + rounded);
    if (!h) {
        *out = NULL;
        return ct__error(CT_ENOMEM, "cpu: out of memory for %zu bytes", n);
    }
    h->n = rounded;
    *out = h + 1;
    return 0;
}

static void cpu_free(void *p)
{
    if (!p)
        return;
    hdr *h = (hdr *)p - 1;
    size_t n = h->n;
    if (!cache_release_set)
        cache_release_set = ct__at_thread_exit(cache_release) == 0;
    if (n < CACHE_MIN_BYTES || n > CACHE_MAX_BYTES || !cache_release_set) {
        free(h);
        return;
    }
    while (ncache && (ncache == CACHE_SLOTS || cache_bytes + n > CACHE_MAX_BYTES))
        free(cache_take(0)); /* one of the older ones goes */
    cache[ncache].p = h;
    cache[ncache].n = n;
    ncache++;
    cache_bytes += n;
}

static int cpu_devices(const char **why)
{
    (void)why;
    return 1;
}

static int cpu_memcpy(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static int cpu_zero(void *p, size_t bytes)
{
    if (bytes)
        memset(p, 0, bytes);
    return 0;
}

/* ---- streams and events: the CPU has none; everything is done when it returns ---- */
static int cpu_stream_new(void **s)
{
    *s = NULL;
    return 0;
}
static void cpu_nothing(void *p)
{
    (void)p;
}
static int cpu_sync(void *p)
{
    (void)p;
    return 0;
}
static int cpu_event_new(void **ev)
{
    *ev = NULL;
    return 0;
}
/* the CPU's streams have done their work when a call returns: fn runs now */
static int cpu_host_fn(void *stream, void (*fn)(void *arg), void *arg)
{
    (void)stream;
    fn(arg);
    return 0;
}

static int cpu_two(void *a, void *b)
{
    (void)a, (void)b;
    return 0;
}

/* ---- kernels that return nothing in cpu.h ---- */
static int cpu_add(int64_t n, const float *a, const float *b, float *y)
{
    ct__cpu_add(n, a, b, y);
    return 0;
}
static int cpu_axpy(int64_t n, float alpha, const float *x, float *y)
{
    ct__cpu_axpy(n, alpha, x, y);
    return 0;
}
static int cpu_add_col_sums(int64_t rows, int64_t cols, const float *x, float *y)
{
    ct__cpu_add_col_sums(rows, cols, x, y);
    return 0;
}
static int cpu_adaptive_avg_fwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                                const float *x, float *y)
{
    ct__cpu_adaptive_avg_fwd(nc, ih, iw, oh, ow, x, y);
    return 0;
}
static int cpu_adaptive_avg_bwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                                const float *dy, float *dx, bool acc)
{
    ct__cpu_adaptive_avg_bwd(nc, ih, iw, oh, ow, dy, dx, acc);
    return 0;
}

/* ReLU with a slope >= 0 in loops.c's vectorised C; the rest through oneDNN */
static int cpu_eltwise_fwd(int alg, float alpha, int64_t n, const float *x, float *y)
{
    if (alg == CT__ELT_RELU && alpha >= 0.0f) {
        ct__cpu_relu_fwd(alpha, n, x, y);
        return 0;
    }
    return ct__cpu_eltwise_fwd(alg, alpha, n, x, y);
}
static int cpu_eltwise_bwd(int alg, float alpha, int64_t n, const float *y, const float *dy,
                           float *dx)
{
    if (alg == CT__ELT_RELU && alpha >= 0.0f) {
        ct__cpu_relu_bwd(alpha, n, y, dy, dx);
        return 0;
    }
    return ct__cpu_eltwise_bwd(alg, alpha, n, y, dy, dx);
}

static int cpu_bn_bwd(const ct__bn_p *p, const float *x, const float *y, const float *dy,
                      const float *scale, const float *mean, const float *var, const void *ws,
                      float *dx, float *dscale, float *dshift)
{
    (void)y; /* the fused ReLU's workspace says where it was active */
    return ct__cpu_bn_bwd(p, x, dy, scale, mean, var, ws, dx, dscale, dshift);
}

static int cpu_pool_bwd(const ct__pool_p *p, const float *x, const float *y, const float *dy,
                        const void *ws, float *dx)
{
    (void)x, (void)y;
    return ct__cpu_pool_bwd(p, dy, ws, dx);
}

/* ---- loops of the engine's ops ---- */
static int cpu_bn_bwd_frozen(const ct__bn_p *p, const float *x, const float *y, const float *dy,
                             const float *scale, const float *mean, const float *var, float *dx,
                             float *dscale, float *dshift)
{
    int64_t C = p->c, hw = p->hw, N = p->n;
    for (int64_t ch = 0; ch < C; ch++) {
        float rstd = 1.0f / sqrtf(var[ch] + p->eps);
        double sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < N; i++) {
            const float *g = dy + (i * C + ch) * hw, *xx = x + (i * C + ch) * hw;
            const float *yy = y + (i * C + ch) * hw;
            float *d = dx ? dx + (i * C + ch) * hw : NULL;
            for (int64_t j = 0; j < hw; j++) {
                float gj = (p->relu && !(yy[j] > 0.0f)) ? 0.0f : g[j];
                sdy += gj;
                sdyx += gj * (xx[j] - mean[ch]) * rstd;
                if (d)
                    d[j] = gj * rstd * scale[ch];
            }
        }
        if (dscale)
            dscale[ch] = (float)sdyx;
        if (dshift)
            dshift[ch] = (float)sdy;
    }
    return 0;
}

static int cpu_bn_update_running(int64_t c, float momentum, float unbias, const float *mean,
                                 const float *var, float *rm, float *rv)
{
    for (int64_t i = 0; i < c; i++) {
        rm[i] = (1.0f - momentum) * rm[i] + momentum * mean[i];
        rv[i] = (1.0f - momentum) * rv[i] + momentum * var[i] * unbias;
    }
    return 0;
}

static int cpu_fill(int64_t n, float v, float *x)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
    return 0;
}

static int cpu_mul(int64_t n, const float *a, const float *b, float *y, bool acc)
{
    if (acc)
        for (int64_t i = 0; i < n; i++)
            y[i] += a[i] * b[i];
    else
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] * b[i];
    return 0;
}

static int cpu_add_i64(int64_t n, int64_t v, int64_t *x)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += v;
    return 0;
}

static int cpu_sum(int64_t n, const float *x, float *out)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    *out = (float)s;
    return 0;
}

/* the parameter's L2 norm as ct_optim_clip_grad_norm computes it on the CPU */
static int cpu_unscale(int64_t n, float inv_scale, float *g, float *found_inf)
{
    bool bad = false;
    for (int64_t i = 0; i < n; i++) {
        float v = g[i] * inv_scale;
        g[i] = v;
        bad |= !isfinite(v);
    }
    if (bad)
        *found_inf = 1.0f;
    return 0;
}

/* every loss; autocast precisions where oneDNN has the CPU's kernels (dnnl.c) */
static int cpu_supports(const ct__op_desc *op)
{
    return op->kind == CT__OP_LOWP ? ct__cpu_lp_check(op->dt, op->name) : 0;
}

static double cpu_peak_flops(int dt, int threads)
{
    (void)dt; /* no table of bf16 rates for CPUs: FP32's is the bound MFU shows */
    return (threads > 0 ? threads : 1) * ct__cpu_peak_flops_per_core();
}

static int cpu_norm2(int64_t n, const float *x, float *out)
{
    *out = (float)sqrt(ct__sumsq8(x, n));
    return 0;
}

static int cpu_scale(int64_t n, float alpha, float *x)
{
    for (int64_t i = 0; i < n; i++)
        x[i] *= alpha;
    return 0;
}

static int cpu_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    if (bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static int cpu_host_alloc(void **p, size_t bytes)
{
    if (!(*p = malloc(bytes ? bytes : 1)))
        return ct__error(CT_ENOMEM, "cpu host_alloc: out of memory (%zu bytes)", bytes);
    return 0;
}

static int cpu_broadcast(int64_t n, const float *value, float *x, bool acc)
{
    float v = *value;
    for (int64_t i = 0; i < n; i++)
        x[i] = acc ? x[i] + v : v;
    return 0;
}

static int cpu_dropout_mask(int64_t n, float p, uint64_t seed, uint64_t offset, float *mask)
{
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    for (int64_t i = 0; i < n; i++)
        mask[i] = ct__philox_uniform(seed, offset, (uint64_t)i) < p ? 0.0f : scale;
    return 0;
}

/* ---- losses: ct/loss.h's kernels, which add into their gradient ---- */
static int cpu_loss_fwd(const ct__loss_p *p, const float *x, const void *target, float *out)
{
    ct_ce_opts ce = {.label_smoothing = p->label_smoothing};
    switch (p->kind) {
    case CT__LOSS_CE:
        return ct_loss_cross_entropy_forward(x, target, p->n, p->c, &ce, out);
    case CT__LOSS_NLL:
        return ct_loss_nll_forward(x, target, p->n, p->c, NULL, out);
    case CT__LOSS_MSE:
        return ct_loss_mse_forward(x, target, p->n * p->c, CT_REDUCTION_MEAN, out);
    case CT__LOSS_L1:
        return ct_loss_l1_forward(x, target, p->n * p->c, CT_REDUCTION_MEAN, out);
    case CT__LOSS_BCE:
        return ct_loss_bce_forward(x, target, p->n, p->c, NULL, out);
    case CT__LOSS_BCEL:
        return ct_loss_bce_with_logits_forward(x, target, p->n, p->c, NULL, out);
    }
    return ct__error(CT_EINVAL, "loss: kind %d unknown", p->kind);
}

static int cpu_loss_bwd(const ct__loss_p *p, const float *x, const void *target, const float *go,
                        float *g)
{
    ct_ce_opts ce = {.label_smoothing = p->label_smoothing};
    switch (p->kind) {
    case CT__LOSS_CE:
        return ct_loss_cross_entropy_backward(x, target, p->n, p->c, &ce, go, g);
    case CT__LOSS_NLL:
        return ct_loss_nll_backward(x, target, p->n, p->c, NULL, go, g);
    case CT__LOSS_MSE:
        return ct_loss_mse_backward(x, target, p->n * p->c, CT_REDUCTION_MEAN, go, g);
    case CT__LOSS_L1:
        return ct_loss_l1_backward(x, target, p->n * p->c, CT_REDUCTION_MEAN, go, g);
    case CT__LOSS_BCE:
        return ct_loss_bce_backward(x, target, p->n, p->c, NULL, go, g);
    case CT__LOSS_BCEL:
        return ct_loss_bce_with_logits_backward(x, target, p->n, p->c, NULL, go, g);
    }
    return ct__error(CT_EINVAL, "loss: kind %d unknown", p->kind);
}

const ct__backend ct__backend_cpu = {
    .name = "cpu",
    .device = CT_CPU,
    .devices = cpu_devices,
    .peak_flops = cpu_peak_flops,
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = cpu_memcpy,
    .zero = cpu_zero,
    .host_alloc = cpu_host_alloc,
    .host_free = free,
    .upload_async = cpu_memcpy_async,
    .download_async = cpu_memcpy_async,
    .stream_new = cpu_stream_new,
    .stream_free = cpu_nothing,
    .synchronize = cpu_sync,
    .event_new = cpu_event_new,
    .event_free = cpu_nothing,
    .event_record = cpu_two,
    .stream_wait = cpu_two,
    .event_sync = cpu_sync,
    .host_fn = cpu_host_fn,
    .blocked_fmt = ct__cpu_blocked_fmt,
    .reorder = ct__cpu_reorder,
    .conv_fwd = ct__cpu_conv_fwd,
    .conv_bwd_data = ct__cpu_conv_bwd_data,
    .conv_bwd_weights = ct__cpu_conv_bwd_weights,
    .ip_fwd = ct__cpu_ip_fwd,
    .ip_bwd_data = ct__cpu_ip_bwd_data,
    .ip_bwd_weights = ct__cpu_ip_bwd_weights,
    .matmul = ct__cpu_matmul,
    .matmul_lp = ct__cpu_matmul_lp,
    .add_col_sums = cpu_add_col_sums,
    .bn_ws_bytes = ct__cpu_bn_ws_bytes,
    .bn_fwd_train = ct__cpu_bn_fwd_train,
    .bn_fwd_infer = ct__cpu_bn_fwd_infer,
    .bn_bwd = cpu_bn_bwd,
    .bn_bwd_frozen = cpu_bn_bwd_frozen,
    .bn_update_running = cpu_bn_update_running,
    .pool_ws_bytes = ct__cpu_pool_ws_bytes,
    .pool_fwd = ct__cpu_pool_fwd,
    .pool_bwd = cpu_pool_bwd,
    .adaptive_avg_fwd = cpu_adaptive_avg_fwd,
    .adaptive_avg_bwd = cpu_adaptive_avg_bwd,
    .eltwise_fwd = cpu_eltwise_fwd,
    .eltwise_bwd = cpu_eltwise_bwd,
    .softmax_fwd = ct__cpu_softmax_fwd,
    .softmax_bwd = ct__cpu_softmax_bwd,
    .layernorm_fwd = ct__cpu_layernorm_fwd,
    .layernorm_bwd = ct__cpu_layernorm_bwd,
    .gelu_fwd = ct__cpu_gelu_fwd,
    .gelu_bwd = ct__cpu_gelu_bwd,
    .embedding_fwd = ct__cpu_embedding_fwd,
    .embedding_bwd = ct__cpu_embedding_bwd,
    .strided_copy = ct__cpu_strided_copy,
    .f32_to_i64 = ct__cpu_f32_to_i64,
    .softmax_causal_fwd = ct__cpu_softmax_causal_fwd,
    .attn_fwd = ct__cpu_attn_fwd,
    .attn_bwd = ct__cpu_attn_bwd,
    .fill = cpu_fill,
    .add = cpu_add,
    .axpy = cpu_axpy,
    .mul = cpu_mul,
    .add_i64 = cpu_add_i64,
    .sum = cpu_sum,
    .norm2 = cpu_norm2,
    .scale = cpu_scale,
    .unscale = cpu_unscale,
    .broadcast = cpu_broadcast,
    .dropout_mask = cpu_dropout_mask,
    .loss_fwd = cpu_loss_fwd,
    .loss_bwd = cpu_loss_bwd,
    .sgd_step = ct__cpu_sgd_step,
    .adam_step = ct__cpu_adam_step,
};

/* ct/nn.h's thread count is the CPU backend's: oneDNN's and the loops' OpenMP threads */
void ct_nn_set_threads(int n)
{
    ct__cpu_set_threads(n);
}
