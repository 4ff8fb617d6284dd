/* trainer/cuda/loss.cu — mean cross entropy on the GPU (cuda.h): a thread per row computes
 * log-sum-exp in float, as ATen's log_softmax does, and one block adds the rows in double. */
#include <math.h>

#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

#define IGNORE_INDEX (-100)

/* row i's loss (0 when ignored) and whether it counts */
static __global__ void ce_rows_kernel(const float *x, const int64_t *t, int64_t n, int64_t c,
                                      float *row_loss, int *row_counts)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float *r = x + i * c;
        int64_t ti = t[i];
        if (ti == IGNORE_INDEX) {
            row_loss[i] = 0.0f;
            row_counts[i] = 0;
            continue;
        }
        float mx = r[0];
        for (int64_t j = 1; j < c; j++)
            mx = fmaxf(mx, r[j]);
        float s = 0.0f;
        for (int64_t j = 0; j < c; j++)
            s += expf(r[j] - mx);
        float lse = mx + logf(s);
        row_loss[i] = ti >= 0 && ti < c ? lse - r[ti] : NAN;
        row_counts[i] = 1;
    }
}

/* one block: *loss = sum of row losses / rows counted (NaN when none, as PyTorch) */
static __global__ void ce_mean_kernel(const float *row_loss, const int *row_counts, int64_t n,
                                      float *loss, float *inv_count)
{
    __shared__ double s[CT_CUDA_THREADS];
    __shared__ long long k[CT_CUDA_THREADS];
    double v = 0.0;
    long long cnt = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        v += row_loss[i];
        cnt += row_counts[i];
    }
    s[threadIdx.x] = v;
    k[threadIdx.x] = cnt;
    __syncthreads();
    for (unsigned w = CT_CUDA_THREADS / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) {
            s[threadIdx.x] += s[threadIdx.x + w];
            k[threadIdx.x] += k[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (loss)
            *loss = (float)(s[0] / (double)k[0]);
        if (inv_count)
            *inv_count = k[0] ? (float)(1.0 / (double)k[0]) : NAN;
    }
}

static __global__ void ce_grad_kernel(const float *x, const int64_t *t, int64_t n, int64_t c,
                                      const float *grad_out, const float *inv_count, float *g)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float *r = x + i * c;
        float *gr = g + i * c;
        int64_t ti = t[i];
        if (ti == IGNORE_INDEX) {
            for (int64_t j = 0; j < c; j++)
                gr[j] = 0.0f;
            continue;
        }
        float mx = r[0];
        for (int64_t j = 1; j < c; j++)
            mx = fmaxf(mx, r[j]);
        float s = 0.0f;
        for (int64_t j = 0; j < c; j++)
            s += expf(r[j] - mx);
        float scale = *grad_out * *inv_count;
        for (int64_t j = 0; j < c; j++)
            gr[j] = (expf(r[j] - mx) / s - (j == ti ? 1.0f : 0.0f)) * scale;
    }
}

static int check(const char *fn, const float *x, const int64_t *t, int64_t n, int64_t c,
                 const void *out)
{
    if (!x || !t || !out)
        return ct__error(CT_EINVAL, "%s: %s is NULL", fn, !x ? "logits" : !t ? "target" : "out");
    if (n < 1 || c < 1)
        return ct__error(CT_EINVAL, "%s: shape (%lld, %lld): both must be >= 1", fn, (long long)n,
                         (long long)c);
    return 0;
}

/* row losses and counts in one scratch block: n floats, then n ints */
static int ce_scratch(int64_t n, void *stream, float **row_loss, int **row_counts)
{
    void *p = NULL;
    int rc = ct__cuda_malloc(&p, (size_t)n * (sizeof(float) + sizeof(int)), stream);
    *row_loss = (float *)p;
    *row_counts = p ? (int *)((float *)p + n) : NULL;
    return rc;
}

extern "C" int ct__cuda_cross_entropy_fwd(const float *logits, const int64_t *target, int64_t n,
                                          int64_t c, float *loss, void *stream)
{
    int rc = check("cuda_cross_entropy_fwd", logits, target, n, c, loss);
    float *rows;
    int *counts;
    if (rc || (rc = ce_scratch(n, stream, &rows, &counts)) < 0)
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    ce_rows_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, s>>>(logits, target, n, c, rows,
                                                                  counts);
    ce_mean_kernel<<<1, CT_CUDA_THREADS, 0, s>>>(rows, counts, n, loss, NULL);
    rc = ct__cuda_status(cudaGetLastError(), "cuda_cross_entropy_fwd");
    int frc = ct__cuda_free(rows);
    return rc ? rc : frc;
}

extern "C" int ct__cuda_cross_entropy_bwd(const float *logits, const int64_t *target, int64_t n,
                                          int64_t c, const float *grad_out, float *grad,
                                          void *stream)
{
    int rc = check("cuda_cross_entropy_bwd", logits, target, n, c, grad);
    if (rc == 0 && !grad_out)
        rc = ct__error(CT_EINVAL, "cuda_cross_entropy_bwd: grad_out is NULL");
    float *rows;
    int *counts;
    if (rc || (rc = ce_scratch(n + 1, stream, &rows, &counts)) < 0)
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    float *inv_count = rows + n; /* the scratch's last float */
    ce_rows_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, s>>>(logits, target, n, c, rows,
                                                                  counts);
    ce_mean_kernel<<<1, CT_CUDA_THREADS, 0, s>>>(rows, counts, n, NULL, inv_count);
    ce_grad_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, s>>>(logits, target, n, c, grad_out,
                                                                  inv_count, grad);
    rc = ct__cuda_status(cudaGetLastError(), "cuda_cross_entropy_bwd");
    int frc = ct__cuda_free(rows);
    return rc ? rc : frc;
}
