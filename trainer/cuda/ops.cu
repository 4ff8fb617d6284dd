/* trainer/cuda/ops.cu — the small kernels the engine's ops need beside cuDNN and cuBLASLt
 * (cuda.h, "engine kernels"): add, leaky ReLU (cuDNN has none), multiply, broadcast, dropout's
 * Philox mask, activation backward from the output, batch norm's frozen backward and running
 * statistics, adaptive average pooling. Each does what backend_cpu.c's loop of the same name does.
 */
#include "common/common.h"

#include "trainer/backend/philox.h"
#include "trainer/cuda/cuda_internal.h"

#define LAUNCH(kernel, n, stream, ...)                                                             \
    (kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)(stream)>>>(__VA_ARGS__),      \
     ct__cuda_status(cudaGetLastError(), #kernel))

static __global__ void add_kernel(int64_t n, const float *a, const float *b, float *y)
{
    GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

static __global__ void leaky_relu_kernel(float slope, int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n) y[i] = x[i] > 0.0f ? x[i] : slope * x[i]; /* NaN: slope * NaN */
}

static __global__ void mul_kernel(int64_t n, const float *a, const float *b, float *y, bool acc)
{
    GRID_STRIDE(i, n) y[i] = acc ? y[i] + a[i] * b[i] : a[i] * b[i];
}

static __global__ void add_i64_kernel(int64_t n, int64_t v, int64_t *x)
{
    GRID_STRIDE(i, n) x[i] += v;
}

static __global__ void broadcast_kernel(int64_t n, const float *v, float *x, bool acc)
{
    float c = *v;
    GRID_STRIDE(i, n) x[i] = acc ? x[i] + c : c;
}

static __global__ void dropout_kernel(int64_t n, float p, uint64_t seed, uint64_t offset,
                                      float *mask)
{
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    GRID_STRIDE(i, n) mask[i] = ct__philox_uniform(seed, offset, (uint64_t)i) < p ? 0.0f : scale;
}

/* d act / d x from the output y, as oneDNN's use_dst_for_bwd and loops.c's relu */
static __global__ void eltwise_bwd_kernel(int alg, float alpha, int64_t n, const float *y,
                                          const float *dy, float *dx)
{
    GRID_STRIDE(i, n)
    {
        float v = y[i], g = dy[i];
        switch (alg) {
        case CT__ELT_RELU: /* loops.c's rule: a slope of 0 gives +0 (g * 0 is -0 or NaN) */
            dx[i] = v > 0.0f ? g : alpha != 0.0f ? g * alpha : 0.0f;
            break;
        case CT__ELT_ELU:
            dx[i] = v > 0.0f ? g : g * (v + alpha);
            break;
        case CT__ELT_TANH:
            dx[i] = g * (1.0f - v * v);
            break;
        default: /* sigmoid */
            dx[i] = g * v * (1.0f - v);
            break;
        }
    }
}

/* one block per channel: sums over (n, hw) in double, in a fixed order (the same bits on
 * every run), then dx per element */
static __global__ void bn_frozen_kernel(ct__bn_p p, const float *x, const float *y, const float *dy,
                                        const float *scale, const float *mean, const float *var,
                                        float *dx, float *dscale, float *dshift)
{
    __shared__ double s1[CT_CUDA_THREADS], s2[CT_CUDA_THREADS];
    int64_t ch = blockIdx.x, C = p.c, hw = p.hw, m = p.n * hw;
    float rstd = 1.0f / sqrtf(var[ch] + p.eps);
    double a = 0, b = 0;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
        int64_t i = (k / hw * C + ch) * hw + k % hw;
        float g = (p.relu && !(y[i] > 0.0f)) ? 0.0f : dy[i];
        a += g;
        b += g * (x[i] - mean[ch]) * rstd;
        if (dx)
            dx[i] = g * rstd * scale[ch];
    }
    s1[threadIdx.x] = a;
    s2[threadIdx.x] = b;
    __syncthreads();
    for (unsigned w = CT_CUDA_THREADS / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            s1[threadIdx.x] += s1[threadIdx.x + w];
            s2[threadIdx.x] += s2[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (dscale)
            dscale[ch] = (float)s2[0];
        if (dshift)
            dshift[ch] = (float)s1[0];
    }
}

static __global__ void bn_running_kernel(int64_t c, float m, float unbias, const float *mean,
                                         const float *var, float *rm, float *rv)
{
    GRID_STRIDE(i, c)
    {
        rm[i] = (1.0f - m) * rm[i] + m * mean[i];
        rv[i] = (1.0f - m) * rv[i] + m * var[i] * unbias;
    }
}

/* PyTorch's adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out)) */
static __device__ int64_t win_lo(int64_t o, int64_t in, int64_t out)
{
    return o * in / out;
}
static __device__ int64_t win_hi(int64_t o, int64_t in, int64_t out)
{
    return ((o + 1) * in + out - 1) / out;
}

static __global__ void apool_fwd_kernel(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                                        const float *x, float *y)
{
    GRID_STRIDE(i, nc * oh * ow)
    {
        int64_t c = i / (oh * ow), oy = i / ow % oh, ox = i % ow;
        int64_t y0 = win_lo(oy, ih, oh), y1 = win_hi(oy, ih, oh);
        int64_t x0 = win_lo(ox, iw, ow), x1 = win_hi(ox, iw, ow);
        float s = 0.0f;
        for (int64_t a = y0; a < y1; a++)
            for (int64_t b = x0; b < x1; b++)
                s += x[(c * ih + a) * iw + b];
        y[i] = s / (float)((y1 - y0) * (x1 - x0));
    }
}

/* a thread per input element gathers the windows that hold it (no atomics: deterministic) */
static __global__ void apool_bwd_kernel(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                                        const float *dy, float *dx, bool acc)
{
    GRID_STRIDE(i, nc * ih * iw)
    {
        int64_t c = i / (ih * iw), a = i / iw % ih, b = i % iw;
        float g = 0.0f;
        for (int64_t oy = a * oh / ih; oy < oh && win_lo(oy, ih, oh) <= a; oy++) {
            int64_t y0 = win_lo(oy, ih, oh), y1 = win_hi(oy, ih, oh);
            if (a < y0 || a >= y1)
                continue;
            for (int64_t ox = b * ow / iw; ox < ow && win_lo(ox, iw, ow) <= b; ox++) {
                int64_t x0 = win_lo(ox, iw, ow), x1 = win_hi(ox, iw, ow);
                if (b < x0 || b >= x1)
                    continue;
                g += dy[(c * oh + oy) * ow + ox] / (float)((y1 - y0) * (x1 - x0));
            }
        }
        dx[i] = acc ? dx[i] + g : g;
    }
}

extern "C" int ct__cuda_add(int64_t n, const float *a, const float *b, float *y, void *s)
{
    return n == 0 ? 0 : LAUNCH(add_kernel, n, s, n, a, b, y);
}

extern "C" int ct__cuda_leaky_relu_fwd(float slope, int64_t n, const float *x, float *y, void *s)
{
    return n == 0 ? 0 : LAUNCH(leaky_relu_kernel, n, s, slope, n, x, y);
}

extern "C" int ct__cuda_mul(int64_t n, const float *a, const float *b, float *y, bool acc, void *s)
{
    return n == 0 ? 0 : LAUNCH(mul_kernel, n, s, n, a, b, y, acc);
}

extern "C" int ct__cuda_add_i64(int64_t n, int64_t v, int64_t *x, void *s)
{
    return n == 0 ? 0 : LAUNCH(add_i64_kernel, n, s, n, v, x);
}

extern "C" int ct__cuda_broadcast(int64_t n, const float *v, float *x, bool acc, void *s)
{
    return n == 0 ? 0 : LAUNCH(broadcast_kernel, n, s, n, v, x, acc);
}

extern "C" int ct__cuda_dropout_mask(int64_t n, float p, uint64_t seed, uint64_t offset,
                                     float *mask, void *s)
{
    return n == 0 ? 0 : LAUNCH(dropout_kernel, n, s, n, p, seed, offset, mask);
}

extern "C" int ct__cuda_eltwise_bwd_dst(int alg, float alpha, int64_t n, const float *y,
                                        const float *dy, float *dx, void *s)
{
    return n == 0 ? 0 : LAUNCH(eltwise_bwd_kernel, n, s, alg, alpha, n, y, dy, dx);
}

extern "C" int ct__cuda_bn_bwd_frozen(const ct__bn_p *p, const float *x, const float *y,
                                      const float *dy, const float *scale, const float *mean,
                                      const float *var, float *dx, float *dscale, float *dshift,
                                      void *s)
{
    if (p->fmt != CT__FMT_PLAIN)
        return ct__error(CT_ENOSYS, "cuda_bn_bwd_frozen: blocked layouts are the CPU's");
    if (p->c == 0)
        return 0;
    bn_frozen_kernel<<<(unsigned)p->c, CT_CUDA_THREADS, 0, (cudaStream_t)s>>>(
        *p, x, y, dy, scale, mean, var, dx, dscale, dshift);
    return ct__cuda_status(cudaGetLastError(), "bn_frozen_kernel");
}

extern "C" int ct__cuda_bn_update_running(int64_t c, float m, float unbias, const float *mean,
                                          const float *var, float *rm, float *rv, void *s)
{
    return c == 0 ? 0 : LAUNCH(bn_running_kernel, c, s, c, m, unbias, mean, var, rm, rv);
}

extern "C" int ct__cuda_adaptive_avg_fwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                                         const float *x, float *y, void *s)
{
    int64_t n = nc * oh * ow;
    return n == 0 ? 0 : LAUNCH(apool_fwd_kernel, n, s, nc, ih, iw, oh, ow, x, y);
}

extern "C" int ct__cuda_adaptive_avg_bwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                                         const float *dy, float *dx, bool acc, void *s)
{
    int64_t n = nc * ih * iw;
    return n == 0 ? 0 : LAUNCH(apool_bwd_kernel, n, s, nc, ih, iw, oh, ow, dy, dx, acc);
}
