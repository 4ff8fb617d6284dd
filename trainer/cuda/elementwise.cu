/* trainer/cuda/elementwise.cu — elementwise kernels (fill, scale, axpy, ReLU, a Linear's bias,
 * column sums, 1/std), the deterministic sum reduction, and a spinning kernel for tests
 * (cuda.h). */
#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

static __global__ void fill_kernel(float *x, float v, int64_t n)
{
    GRID_STRIDE(i, n) x[i] = v;
}
static __global__ void scale_kernel(float *x, float a, int64_t n)
{
    GRID_STRIDE(i, n) x[i] = x[i] * a;
}
static __global__ void axpy_kernel(float *y, float a, const float *x, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = y[i] + a * x[i];
}
/* NaN stays NaN (x > 0 is false for it, so it needs its own test): a diverging model must not
 * be hidden by a ReLU, and PyTorch and the CPU keep it too */
static __global__ void relu_fwd_kernel(const float *x, float *y, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        y[i] = v > 0.0f ? v : v != v ? v : 0.0f;
    }
}
/* 0 where x is NaN too: the CPU's rule (ct__cpu_relu_bwd passes dy only where y > 0) */
static __global__ void relu_bwd_kernel(const float *x, const float *dy, float *dx, int64_t n,
                                       bool acc)
{
    GRID_STRIDE(i, n)
    {
        float g = x[i] > 0.0f ? dy[i] : 0.0f;
        dx[i] = acc ? dx[i] + g : g;
    }
}

/* The launch status of the kernel just queued. */
static int launched(const char *what)
{
    return ct__cuda_status(cudaGetLastError(), what);
}

static int check(const char *fn, int64_t n, const void *a, const void *b)
{
    if (n < 0 || !a || !b)
        return ct__error(CT_EINVAL, "%s: %s", fn, n < 0 ? "n < 0" : "a buffer is NULL");
    return 0;
}

extern "C" int ct__cuda_fill(float *x, float value, int64_t n, void *stream)
{
    int rc = check("cuda_fill", n, x, x);
    if (rc || n == 0)
        return rc;
    fill_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(x, value, n);
    return launched("cuda_fill");
}

extern "C" int ct__cuda_scale(float *x, float alpha, int64_t n, void *stream)
{
    int rc = check("cuda_scale", n, x, x);
    if (rc || n == 0)
        return rc;
    scale_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(x, alpha, n);
    return launched("cuda_scale");
}

extern "C" int ct__cuda_axpy(float *y, float alpha, const float *x, int64_t n, void *stream)
{
    int rc = check("cuda_axpy", n, y, x);
    if (rc || n == 0)
        return rc;
    axpy_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(y, alpha, x, n);
    return launched("cuda_axpy");
}

extern "C" int ct__cuda_relu_fwd(const float *x, float *y, int64_t n, void *stream)
{
    int rc = check("cuda_relu_fwd", n, x, y);
    if (rc || n == 0)
        return rc;
    relu_fwd_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(x, y, n);
    return launched("cuda_relu_fwd");
}

extern "C" int ct__cuda_relu_bwd(const float *x, const float *dy, float *dx, int64_t n, bool acc,
                                 void *stream)
{
    int rc = check("cuda_relu_bwd", n, x, dy);
    if (rc == 0 && !dx)
        rc = ct__error(CT_EINVAL, "cuda_relu_bwd: dx is NULL");
    if (rc || n == 0)
        return rc;
    relu_bwd_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(x, dy, dx, n,
                                                                                      acc);
    return launched("cuda_relu_bwd");
}

/* a thread per column, down the rows in order (coalesced: neighbouring threads read
 * neighbouring columns); in float like the CPU's column sums */
static __global__ void col_sums_kernel(const float *x, int64_t rows, int64_t cols, float *y,
                                       bool acc)
{
    GRID_STRIDE(j, cols)
    {
        float s = 0.0f;
        for (int64_t i = 0; i < rows; i++)
            s += x[i * cols + j];
        y[j] = acc ? y[j] + s : s;
    }
}

extern "C" int ct__cuda_col_sums(const float *x, int64_t rows, int64_t cols, float *y, bool acc,
                                 void *stream)
{
    int rc = check("cuda_col_sums", rows < 0 ? rows : cols, x, y);
    if (rc || cols == 0)
        return rc;
    col_sums_kernel<<<ct__cuda_blocks(cols), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        x, rows, cols, y, acc);
    return launched("cuda_col_sums");
}

static __global__ void add_bias_kernel(float *y, const float *b, int64_t rows, int64_t cols)
{
    GRID_STRIDE(i, rows * cols) y[i] = y[i] + b[i % cols];
}

extern "C" int ct__cuda_add_bias(float *y, const float *b, int64_t rows, int64_t cols, void *stream)
{
    int rc = check("cuda_add_bias", rows < 0 ? rows : cols, y, b);
    if (rc || rows == 0 || cols == 0)
        return rc;
    add_bias_kernel<<<ct__cuda_blocks(rows * cols), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        y, b, rows, cols);
    return launched("cuda_add_bias");
}

static __global__ void inv_std_kernel(const float *var, float eps, float *y, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = 1.0f / sqrtf(var[i] + eps);
}

extern "C" int ct__cuda_inv_std(const float *var, float eps, float *y, int64_t n, void *stream)
{
    int rc = check("cuda_inv_std", n, var, y);
    if (rc || n == 0)
        return rc;
    inv_std_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(var, eps, y,
                                                                                     n);
    return launched("cuda_inv_std");
}

/* every thread that finds a non-finite value stores the same 1: no atomics needed */
static __global__ void unscale_kernel(float *g, int64_t n, float inv_scale, float *found_inf)
{
    GRID_STRIDE(i, n)
    {
        float v = g[i] * inv_scale;
        g[i] = v;
        if (!isfinite(v))
            *found_inf = 1.0f;
    }
}

extern "C" int ct__cuda_unscale(float *g, int64_t n, float inv_scale, float *found_inf,
                                void *stream)
{
    int rc = check("cuda_unscale", n, g, found_inf);
    if (rc || n == 0)
        return rc;
    unscale_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        g, n, inv_scale, found_inf);
    return launched("cuda_unscale");
}

/* ---- sum ----
 * Deterministic: a fixed number of blocks for a given n, each sums its grid-stride share in
 * double and then its threads in a fixed tree; one block adds the partials the same way. */
enum { SUM_BLOCKS = 256 };

static __device__ double block_sum(double v)
{
    __shared__ double s[CT_CUDA_THREADS];
    s[threadIdx.x] = v;
    __syncthreads();
    for (unsigned w = CT_CUDA_THREADS / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    return s[0];
}

static __global__ void sum_partials_kernel(const float *x, int64_t n, double *partial)
{
    double v = 0.0;
    GRID_STRIDE(i, n) v += x[i];
    double t = block_sum(v);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = t;
}

static __global__ void sumsq_partials_kernel(const float *x, int64_t n, double *partial)
{
    double v = 0.0;
    GRID_STRIDE(i, n)
    {
        double a = (double)x[i];
        v += a * a;
    }
    double t = block_sum(v);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = t;
}

static __global__ void norm_final_kernel(const double *partial, int np, float *out)
{
    double v = 0.0;
    for (int i = threadIdx.x; i < np; i += blockDim.x)
        v += partial[i];
    double t = block_sum(v);
    if (threadIdx.x == 0)
        *out = (float)sqrt(t);
}

static __global__ void sum_final_kernel(const double *partial, int np, float *out)
{
    double v = 0.0;
    for (int i = threadIdx.x; i < np; i += blockDim.x)
        v += partial[i];
    double t = block_sum(v);
    if (threadIdx.x == 0)
        *out = (float)t;
}

extern "C" int ct__cuda_sum(const float *x, int64_t n, float *out, void *stream)
{
    int rc = check("cuda_sum", n, x, out);
    if (rc)
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    double *partial = NULL;
    if ((rc = ct__cuda_malloc((void **)&partial, SUM_BLOCKS * sizeof(double), stream)) < 0)
        return rc;
    unsigned blocks = ct__cuda_blocks(n);
    if (blocks > (unsigned)SUM_BLOCKS)
        blocks = SUM_BLOCKS;
    sum_partials_kernel<<<blocks, CT_CUDA_THREADS, 0, s>>>(x, n, partial);
    rc = launched("cuda_sum");
    if (rc == 0) {
        sum_final_kernel<<<1, CT_CUDA_THREADS, 0, s>>>(partial, (int)blocks, out);
        rc = launched("cuda_sum");
    }
    /* stream-ordered: the block is reused only by later work on this stream */
    int frc = ct__cuda_free(partial);
    return rc ? rc : frc;
}

extern "C" int ct__cuda_norm2(const float *x, int64_t n, float *out, void *stream)
{
    int rc = check("cuda_norm2", n, x, out);
    if (rc)
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    double *partial = NULL;
    if ((rc = ct__cuda_malloc((void **)&partial, SUM_BLOCKS * sizeof(double), stream)) < 0)
        return rc;
    unsigned blocks = ct__cuda_blocks(n);
    if (blocks > (unsigned)SUM_BLOCKS)
        blocks = SUM_BLOCKS;
    if (blocks < 1)
        blocks = 1;
    sumsq_partials_kernel<<<blocks, CT_CUDA_THREADS, 0, s>>>(x, n, partial);
    rc = launched("cuda_norm2");
    if (rc == 0) {
        norm_final_kernel<<<1, CT_CUDA_THREADS, 0, s>>>(partial, (int)blocks, out);
        rc = launched("cuda_norm2");
    }
    int frc = ct__cuda_free(partial);
    return rc ? rc : frc;
}

/* ---- a spinning kernel, for tests ---- */

static __device__ uint64_t global_ns(void)
{
#ifdef CT_EMU_DEVICE_CODE
    return ct_emu::globaltimer_ns();
#else
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}

/* the global timer, not clock64: it counts nanoseconds whatever the SM clock runs at */
static __global__ void spin_kernel(uint64_t ns)
{
    uint64_t start = global_ns();
    while (global_ns() - start < ns) {
    }
}

extern "C" int ct__cuda_test_spin(void *stream, int ms)
{
    if (ms < 0)
        return ct__error(CT_EINVAL, "cuda_test_spin: ms = %d < 0", ms);
    spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((uint64_t)ms * 1000000u);
    return launched("cuda_test_spin");
}

/* ---- autocast: f32 rounded to bf16 / f16 (round-to-nearest-even, lowp.h's rule) ---- */

#include <cuda_bf16.h>
#include <cuda_fp16.h>

static __global__ void to_bf16_kernel(const float *x, __nv_bfloat16 *y, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}
static __global__ void to_f16_kernel(const float *x, __half *y, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = __float2half_rn(x[i]);
}

extern "C" int ct__cuda_to_lp(int dt, const float *x, void *y, int64_t n, void *stream)
{
    int rc = check("cuda_to_lp", n, x, y);
    if (rc || n == 0)
        return rc;
    if (dt == CT_BF16)
        to_bf16_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            x, (__nv_bfloat16 *)y, n);
    else if (dt == CT_F16)
        to_f16_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            x, (__half *)y, n);
    else
        return ct__error(CT_EINVAL, "cuda_to_lp: precision %d is not an autocast dtype", dt);
    return launched("cuda_to_lp");
}

static __global__ void from_bf16_kernel(const __nv_bfloat16 *x, float *y, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = __bfloat162float(x[i]);
}
static __global__ void from_f16_kernel(const __half *x, float *y, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = __half2float(x[i]);
}

extern "C" int ct__cuda_from_lp(int dt, const void *x, float *y, int64_t n, void *stream)
{
    int rc = check("cuda_from_lp", n, x, y);
    if (rc || n == 0)
        return rc;
    if (dt == CT_BF16)
        from_bf16_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            (const __nv_bfloat16 *)x, y, n);
    else if (dt == CT_F16)
        from_f16_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
            (const __half *)x, y, n);
    else
        return ct__error(CT_EINVAL, "cuda_from_lp: precision %d is not an autocast dtype", dt);
    return launched("cuda_from_lp");
}
