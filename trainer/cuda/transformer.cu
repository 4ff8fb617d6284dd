/* trainer/cuda/transformer.cu — the transformer ops' kernels on the GPU: layer norm (a warp per
 * row), GELU, embedding lookup and its scatter-add. The contracts are the backend table's
 * (trainer/backend/backend.h); trainer/cpu/transformer.c is the reference. Every sum runs in a
 * fixed order (warp shuffles over fixed lanes, rows in order per column), so a run gives the
 * same bits every time. Not here: attention and the GEMMs (to come; gemm.c). */
#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

enum { WARPS = CT_CUDA_THREADS / 32 };

static __device__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static int launched(const char *what)
{
    return ct__cuda_status(cudaGetLastError(), what);
}

static unsigned row_blocks(int64_t rows)
{
    int64_t b = (rows + WARPS - 1) / WARPS;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* ---- layer norm ---- */

static __global__ void ln_fwd_kernel(int64_t rows, int64_t d, float eps, const float *x,
                                     const float *w, const float *b, float *y, float *mean,
                                     float *rstd)
{
    int lane = threadIdx.x % 32;
    for (int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32; r < rows;
         r += (int64_t)gridDim.x * WARPS) {
        const float *xr = x + r * d;
        float s = 0;
        for (int64_t i = lane; i < d; i += 32)
            s += xr[i];
        float m = warp_sum(s) / (float)d, v = 0;
        for (int64_t i = lane; i < d; i += 32)
            v += (xr[i] - m) * (xr[i] - m);
        float rs = 1.0f / sqrtf(warp_sum(v) / (float)d + eps);
        for (int64_t i = lane; i < d; i += 32)
            y[r * d + i] = (xr[i] - m) * rs * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }
    }
}

static __global__ void ln_bwd_dx_kernel(int64_t rows, int64_t d, const float *x, const float *w,
                                        const float *mean, const float *rstd, const float *dy,
                                        float *dx, bool acc)
{
    int lane = threadIdx.x % 32;
    for (int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32; r < rows;
         r += (int64_t)gridDim.x * WARPS) {
        const float *xr = x + r * d, *gr = dy + r * d;
        float m = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
        for (int64_t i = lane; i < d; i += 32) {
            float g = gr[i] * (w ? w[i] : 1.0f);
            s1 += g;
            s2 += g * (xr[i] - m) * rs;
        }
        s1 = warp_sum(s1) / (float)d;
        s2 = warp_sum(s2) / (float)d;
        for (int64_t i = lane; i < d; i += 32) {
            float g = gr[i] * (w ? w[i] : 1.0f);
            float v = rs * (g - s1 - (xr[i] - m) * rs * s2);
            dx[r * d + i] = acc ? dx[r * d + i] + v : v;
        }
    }
}

/* a thread per column, down the rows in order */
static __global__ void ln_bwd_dwb_kernel(int64_t rows, int64_t d, const float *x, const float *mean,
                                         const float *rstd, const float *dy, float *dw, float *db)
{
    GRID_STRIDE(i, d)
    {
        float sw = 0, sb = 0;
        for (int64_t r = 0; r < rows; r++) {
            float g = dy[r * d + i];
            sw += g * (x[r * d + i] - mean[r]) * rstd[r];
            sb += g;
        }
        if (dw)
            dw[i] += sw;
        if (db)
            db[i] += sb;
    }
}

extern "C" int ct__cuda_layernorm_fwd(int64_t rows, int64_t d, float eps, const float *x,
                                      const float *w, const float *b, float *y, float *mean,
                                      float *rstd, void *stream)
{
    if (rows <= 0 || d <= 0)
        return rows < 0 || d < 0 ? ct__error(CT_EINVAL, "cuda_layernorm_fwd: negative size") : 0;
    ln_fwd_kernel<<<row_blocks(rows), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        rows, d, eps, x, w, b, y, mean, rstd);
    return launched("cuda_layernorm_fwd");
}

extern "C" int ct__cuda_layernorm_bwd(int64_t rows, int64_t d, const float *x, const float *w,
                                      const float *mean, const float *rstd, const float *dy,
                                      float *dx, bool acc, float *dw, float *db, void *stream)
{
    if (rows <= 0 || d <= 0)
        return rows < 0 || d < 0 ? ct__error(CT_EINVAL, "cuda_layernorm_bwd: negative size") : 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (dx) {
        ln_bwd_dx_kernel<<<row_blocks(rows), CT_CUDA_THREADS, 0, s>>>(rows, d, x, w, mean, rstd, dy,
                                                                      dx, acc);
        int rc = launched("cuda_layernorm_bwd dx");
        if (rc)
            return rc;
    }
    if (dw || db) {
        ln_bwd_dwb_kernel<<<ct__cuda_blocks(d), CT_CUDA_THREADS, 0, s>>>(rows, d, x, mean, rstd, dy,
                                                                         dw, db);
        return launched("cuda_layernorm_bwd dw db");
    }
    return 0;
}

/* ---- GELU ---- */

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_C 0.044715f

static __global__ void gelu_fwd_kernel(bool tanh_approx, int64_t n, const float *x, float *y)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        y[i] = tanh_approx ? 0.5f * v * (1.0f + tanhf(SQRT_2_OVER_PI * (v + GELU_C * v * v * v)))
                           : 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    }
}

static __global__ void gelu_bwd_kernel(bool tanh_approx, int64_t n, const float *x, const float *dy,
                                       float *dx, bool acc)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i], g;
        if (tanh_approx) {
            float t = tanhf(SQRT_2_OVER_PI * (v + GELU_C * v * v * v));
            g = 0.5f * (1.0f + t) +
                0.5f * v * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
        } else {
            g = 0.5f * (1.0f + erff(v * 0.7071067811865476f)) +
                v * expf(-0.5f * v * v) * 0.3989422804014327f;
        }
        dx[i] = acc ? dx[i] + dy[i] * g : dy[i] * g;
    }
}

extern "C" int ct__cuda_gelu_fwd(bool tanh_approx, int64_t n, const float *x, float *y,
                                 void *stream)
{
    if (n <= 0)
        return n < 0 ? ct__error(CT_EINVAL, "cuda_gelu_fwd: n < 0") : 0;
    gelu_fwd_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(tanh_approx,
                                                                                      n, x, y);
    return launched("cuda_gelu_fwd");
}

extern "C" int ct__cuda_gelu_bwd(bool tanh_approx, int64_t n, const float *x, const float *dy,
                                 float *dx, bool acc, void *stream)
{
    if (n <= 0)
        return n < 0 ? ct__error(CT_EINVAL, "cuda_gelu_bwd: n < 0") : 0;
    gelu_bwd_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        tanh_approx, n, x, dy, dx, acc);
    return launched("cuda_gelu_bwd");
}

/* ---- embedding ---- */

/* an index outside [0, vocab) gives a row of NaN: the GPU cannot return an error from here,
 * and a NaN loss is seen at once */
static __global__ void emb_fwd_kernel(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                                      const float *table, float *y)
{
    GRID_STRIDE(e, n * d)
    {
        int64_t i = e / d, c = e % d, t = idx[i];
        y[e] = t >= 0 && t < vocab ? table[t * d + c] : __int_as_float(0x7fc00000);
    }
}

/* a thread per column, the rows in order: no atomics, the same bits every run */
static __global__ void emb_bwd_kernel(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                                      int64_t padding_idx, const float *dy, float *dtable)
{
    GRID_STRIDE(c, d)
    {
        for (int64_t i = 0; i < n; i++) {
            int64_t t = idx[i];
            if (t != padding_idx && t >= 0 && t < vocab)
                dtable[t * d + c] += dy[i * d + c];
        }
    }
}

extern "C" int ct__cuda_embedding_fwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                                      const float *table, float *y, void *stream)
{
    if (n <= 0 || d <= 0)
        return n < 0 || d < 0 ? ct__error(CT_EINVAL, "cuda_embedding_fwd: negative size") : 0;
    emb_fwd_kernel<<<ct__cuda_blocks(n * d), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        n, d, vocab, idx, table, y);
    return launched("cuda_embedding_fwd");
}

extern "C" int ct__cuda_embedding_bwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                                      int64_t padding_idx, const float *dy, float *dtable,
                                      void *stream)
{
    if (n <= 0 || d <= 0)
        return n < 0 || d < 0 ? ct__error(CT_EINVAL, "cuda_embedding_bwd: negative size") : 0;
    emb_bwd_kernel<<<ct__cuda_blocks(d), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        n, d, vocab, idx, padding_idx, dy, dtable);
    return launched("cuda_embedding_bwd");
}

/* ---- casts ---- */

static __global__ void f32_to_i64_kernel(int64_t n, const float *x, int64_t *y)
{
    GRID_STRIDE(i, n) y[i] = (int64_t)rintf(x[i]);
}

extern "C" int ct__cuda_f32_to_i64(int64_t n, const float *x, int64_t *y, void *stream)
{
    if (n <= 0)
        return n < 0 ? ct__error(CT_EINVAL, "cuda_f32_to_i64: n < 0") : 0;
    f32_to_i64_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(n, x, y);
    return launched("cuda_f32_to_i64");
}

/* ---- strided copy (permute, slice) ---- */

static __global__ void strided_kernel(ct__strided_p p, int64_t n, const float *src, float *dst,
                                      bool acc)
{
    GRID_STRIDE(e, n)
    {
        int64_t so = 0, dof = 0, rem = e;
        for (int i = p.ndim - 1; i >= 0; i--) {
            int64_t k = rem % p.shape[i];
            rem /= p.shape[i];
            so += k * p.sstride[i];
            dof += k * p.dstride[i];
        }
        dst[dof] = acc ? dst[dof] + src[so] : src[so];
    }
}

extern "C" int ct__cuda_strided_copy(const ct__strided_p *p, const float *src, float *dst, bool acc,
                                     void *stream)
{
    if (p->ndim < 1 || p->ndim > CT_MAX_DIMS)
        return ct__error(CT_EINVAL, "cuda_strided_copy: %d dims", p->ndim);
    int64_t n = 1;
    for (int i = 0; i < p->ndim; i++)
        n *= p->shape[i];
    if (n <= 0)
        return 0;
    strided_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(*p, n, src,
                                                                                     dst, acc);
    return launched("cuda_strided_copy");
}

/* ---- causal softmax: a warp per row ---- */

static __device__ float warp_max(float v)
{
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __global__ void softmax_causal_kernel(int64_t rows, int64_t t, const float *x, float *y)
{
    int lane = threadIdx.x % 32;
    for (int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32; r < rows;
         r += (int64_t)gridDim.x * WARPS) {
        const float *xr = x + r * t;
        float *yr = y + r * t;
        int64_t seen = r % t + 1;
        float m = -INFINITY;
        for (int64_t j = lane; j < seen; j += 32)
            m = fmaxf(m, xr[j]);
        m = warp_max(m);
        float s = 0;
        for (int64_t j = lane; j < seen; j += 32)
            s += expf(xr[j] - m);
        float inv = 1.0f / warp_sum(s);
        for (int64_t j = lane; j < t; j += 32)
            yr[j] = j < seen ? expf(xr[j] - m) * inv : 0.0f;
    }
}

extern "C" int ct__cuda_softmax_causal_fwd(int64_t rows, int64_t t, const float *x, float *y,
                                           void *stream)
{
    if (rows <= 0 || t <= 0)
        return rows < 0 || t < 0 ? ct__error(CT_EINVAL, "cuda_softmax_causal: negative size") : 0;
    softmax_causal_kernel<<<row_blocks(rows), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(rows, t,
                                                                                          x, y);
    return launched("cuda_softmax_causal_fwd");
}
