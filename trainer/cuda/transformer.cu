/* trainer/cuda/transformer.cu — the transformer ops' kernels on the GPU: layer norm (a warp per
 * row), GELU, casts, strided copies and the causal softmax. The contracts are the backend
 * table's (trainer/backend/table.h); trainer/cpu/transformer.c is the reference. Every sum
 * runs in a fixed order (warp shuffles over fixed lanes, rows in order per column), so a run
 * gives the same bits every time. Not here: the embedding (embedding.cu), attention
 * (attention.cu), the GEMMs (gemm.c). */
#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

static int launched(const char *what)
{
    return ct__cuda_status(cudaGetLastError(), what);
}

/* ---- layer norm ---- */

static __global__ void ln_fwd_kernel(int64_t rows, int64_t d, float eps, const float *x,
                                     const float *w, const float *b, float *y, float *mean,
                                     float *rstd)
{
    int lane = threadIdx.x % 32;
    WARP_ROWS(r, rows)
    {
        const float *xr = x + r * d;
        float s = 0;
        for (int64_t i = lane; i < d; i += 32)
            s += xr[i];
        float m = ct__warp_sum(s) / (float)d, v = 0;
        for (int64_t i = lane; i < d; i += 32)
            v += (xr[i] - m) * (xr[i] - m);
        float rs = 1.0f / sqrtf(ct__warp_sum(v) / (float)d + eps);
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
    WARP_ROWS(r, rows)
    {
        const float *xr = x + r * d, *gr = dy + r * d;
        float m = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
        for (int64_t i = lane; i < d; i += 32) {
            float g = gr[i] * (w ? w[i] : 1.0f);
            s1 += g;
            s2 += g * (xr[i] - m) * rs;
        }
        s1 = ct__warp_sum(s1) / (float)d;
        s2 = ct__warp_sum(s2) / (float)d;
        for (int64_t i = lane; i < d; i += 32) {
            float g = gr[i] * (w ? w[i] : 1.0f);
            float v = rs * (g - s1 - (xr[i] - m) * rs * s2);
            dx[r * d + i] = acc ? dx[r * d + i] + v : v;
        }
    }
}

/* dw and db in two passes, in a fixed order (no atomics): a thread per (chunk of LN_PART rows,
 * column) sums its rows in order into part (2 x chunks x d: the w sums, then the b sums); then
 * a thread per column adds its chunks in order. A thread per column down all the rows had d
 * threads in flight (128 for the GPT of bench/gpt_train), each a chain of rows loads long. */
enum { LN_PART = 32 };

static __global__ void ln_bwd_dwb_part_kernel(int64_t rows, int64_t d, int64_t chunks,
                                              const float *x, const float *mean, const float *rstd,
                                              const float *dy, float *part)
{
    GRID_STRIDE(e, chunks * d)
    {
        int64_t q = e / d, i = e % d, end = (q + 1) * LN_PART < rows ? (q + 1) * LN_PART : rows;
        float sw = 0, sb = 0;
        for (int64_t r = q * LN_PART; r < end; r++) {
            float g = dy[r * d + i];
            sw += g * (x[r * d + i] - mean[r]) * rstd[r];
            sb += g;
        }
        part[e] = sw;
        part[chunks * d + e] = sb;
    }
}

static __global__ void ln_bwd_dwb_sum_kernel(int64_t d, int64_t chunks, const float *part,
                                             float *dw, float *db)
{
    GRID_STRIDE(i, d)
    {
        float sw = 0, sb = 0;
        for (int64_t q = 0; q < chunks; q++) {
            sw += part[q * d + i];
            sb += part[(chunks + q) * d + i];
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
    ln_fwd_kernel<<<ct__cuda_row_blocks(rows), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
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
        ln_bwd_dx_kernel<<<ct__cuda_row_blocks(rows), CT_CUDA_THREADS, 0, s>>>(rows, d, x, w, mean,
                                                                               rstd, dy, dx, acc);
        int rc = launched("cuda_layernorm_bwd dx");
        if (rc)
            return rc;
    }
    if (dw || db) {
        int64_t chunks = (rows + LN_PART - 1) / LN_PART;
        float *part = NULL;
        int rc = ct__cuda_malloc((void **)&part, (size_t)(2 * chunks * d) * sizeof(float), stream);
        if (rc < 0)
            return rc;
        ln_bwd_dwb_part_kernel<<<ct__cuda_blocks(chunks * d), CT_CUDA_THREADS, 0, s>>>(
            rows, d, chunks, x, mean, rstd, dy, part);
        ln_bwd_dwb_sum_kernel<<<ct__cuda_blocks(d), CT_CUDA_THREADS, 0, s>>>(d, chunks, part, dw,
                                                                             db);
        rc = launched("cuda_layernorm_bwd dw db");
        int frc = ct__cuda_free(part); /* stream-ordered: reused only after these kernels */
        return rc ? rc : frc;
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

static __global__ void softmax_causal_kernel(int64_t rows, int64_t t, const float *x, float *y)
{
    int lane = threadIdx.x % 32;
    WARP_ROWS(r, rows)
    {
        const float *xr = x + r * t;
        float *yr = y + r * t;
        int64_t seen = r % t + 1;
        float m = -INFINITY;
        for (int64_t j = lane; j < seen; j += 32)
            m = fmaxf(m, xr[j]);
        m = ct__warp_max(m);
        float s = 0;
        for (int64_t j = lane; j < seen; j += 32)
            s += expf(xr[j] - m);
        float inv = 1.0f / ct__warp_sum(s);
        for (int64_t j = lane; j < t; j += 32)
            yr[j] = j < seen ? expf(xr[j] - m) * inv : 0.0f;
    }
}

extern "C" int ct__cuda_softmax_causal_fwd(int64_t rows, int64_t t, const float *x, float *y,
                                           void *stream)
{
    if (rows <= 0 || t <= 0)
        return rows < 0 || t < 0 ? ct__error(CT_EINVAL, "cuda_softmax_causal: negative size") : 0;
    softmax_causal_kernel<<<ct__cuda_row_blocks(rows), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        rows, t, x, y);
    return launched("cuda_softmax_causal_fwd");
}
