/* trainer/cuda/loss.cu — mean cross entropy on the GPU (cuda.h): a warp per row computes
 * log-sum-exp in float, as ATen's log_softmax does (its 32 lanes read the row's columns side by
 * side, and shuffles over fixed lanes combine them: the same bits every run), and one block adds
 * the rows in double and counts the targets that are not ignored. A target outside [0, c) that
 * is not ignored gives a NaN loss and a NaN gradient row: a kernel cannot return an error, and a
 * NaN is seen at once (the CPU backend refuses it). */
#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

#define IGNORE_INDEX (-100)

/* a row's largest value and its sum of exp(x - max), every lane of the warp given both */
static __device__ void row_max_sum(const float *r, int64_t c, int lane, float *mx, float *s)
{
    float m = -INFINITY;
    for (int64_t j = lane; j < c; j += 32)
        m = fmaxf(m, r[j]);
    m = ct__warp_max(m);
    float sum = 0.0f;
    for (int64_t j = lane; j < c; j += 32)
        sum += expf(r[j] - m);
    *mx = m;
    *s = ct__warp_sum(sum);
}

/* row i's loss (0 when ignored) */
static __global__ void ce_rows_kernel(const float *x, const int64_t *t, int64_t n, int64_t c,
                                      float *row_loss)
{
    int lane = threadIdx.x % 32;
    WARP_ROWS(i, n)
    {
        const float *r = x + i * c;
        int64_t ti = t[i];
        if (ti == IGNORE_INDEX) { /* the whole warp: ti is the row's */
            if (lane == 0)
                row_loss[i] = 0.0f;
            continue;
        }
        float mx, s;
        row_max_sum(r, c, lane, &mx, &s);
        if (lane == 0)
            row_loss[i] = ti >= 0 && ti < c ? mx + logf(s) - r[ti] : NAN;
    }
}

/* one block: *loss = sum of row losses / targets counted (NaN when none, as PyTorch), when
 * row_loss and loss are given; *inv_count = 1 / targets counted, when given */
static __global__ void ce_mean_kernel(const float *row_loss, const int64_t *t, int64_t n,
                                      float *loss, float *inv_count)
{
    __shared__ double s[CT_CUDA_THREADS];
    __shared__ long long k[CT_CUDA_THREADS];
    double v = 0.0;
    long long cnt = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        if (row_loss)
            v += row_loss[i];
        cnt += t[i] != IGNORE_INDEX;
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
    int lane = threadIdx.x % 32;
    WARP_ROWS(i, n)
    {
        const float *r = x + i * c;
        float *gr = g + i * c;
        int64_t ti = t[i];
        if (ti == IGNORE_INDEX || ti < 0 || ti >= c) {
            float v = ti == IGNORE_INDEX ? 0.0f : NAN;
            for (int64_t j = lane; j < c; j += 32)
                gr[j] = v;
            continue;
        }
        float mx, s;
        row_max_sum(r, c, lane, &mx, &s);
        float scale = *grad_out * *inv_count;
        for (int64_t j = lane; j < c; j += 32)
            gr[j] = (expf(r[j] - mx) / s - (j == ti ? 1.0f : 0.0f)) * scale;
    }
}

static int check(const char *fn, const float *x, const int64_t *t, int64_t n, int64_t c,
                 const void *out)
{
    if (!x || !t || !out)
        return ct__error(CT_EINVAL, "%s: %s is NULL", fn, !x ? "logits" : !t ? "target" : "out");
    if (n < 0 || c < 1)
        return ct__error(CT_EINVAL, "%s: shape (%lld, %lld): n must be >= 0 and c >= 1", fn,
                         (long long)n, (long long)c);
    return 0;
}

extern "C" int ct__cuda_cross_entropy_fwd(const float *logits, const int64_t *target, int64_t n,
                                          int64_t c, float *loss, void *stream)
{
    int rc = check("cuda_cross_entropy_fwd", logits, target, n, c, loss);
    if (rc == 0 && n == 0) /* the mean over no targets: NaN, as on the CPU and in PyTorch */
        return ct__cuda_fill(loss, NAN, 1, stream);
    float *rows = NULL;
    if (rc || (rc = ct__cuda_malloc((void **)&rows, (size_t)n * sizeof(float), stream)) < 0)
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    ce_rows_kernel<<<ct__cuda_row_blocks(n), CT_CUDA_THREADS, 0, s>>>(logits, target, n, c, rows);
    ce_mean_kernel<<<1, CT_CUDA_THREADS, 0, s>>>(rows, target, n, loss, NULL);
    rc = ct__cuda_status(cudaGetLastError(), "cuda_cross_entropy_fwd");
    int frc = ct__cuda_free(rows); /* stream-ordered: reused only after these kernels */
    return rc ? rc : frc;
}

extern "C" int ct__cuda_cross_entropy_bwd(const float *logits, const int64_t *target, int64_t n,
                                          int64_t c, const float *grad_out, float *grad,
                                          void *stream)
{
    int rc = check("cuda_cross_entropy_bwd", logits, target, n, c, grad);
    if (rc == 0 && !grad_out)
        rc = ct__error(CT_EINVAL, "cuda_cross_entropy_bwd: grad_out is NULL");
    if (rc == 0 && n == 0) /* no rows: no gradient to write */
        return 0;
    float *inv_count = NULL;
    if (rc || (rc = ct__cuda_malloc((void **)&inv_count, sizeof(float), stream)) < 0)
        return rc;
    cudaStream_t s = (cudaStream_t)stream;
    ce_mean_kernel<<<1, CT_CUDA_THREADS, 0, s>>>(NULL, target, n, NULL, inv_count);
    ce_grad_kernel<<<ct__cuda_row_blocks(n), CT_CUDA_THREADS, 0, s>>>(logits, target, n, c,
                                                                      grad_out, inv_count, grad);
    rc = ct__cuda_status(cudaGetLastError(), "cuda_cross_entropy_bwd");
    int frc = ct__cuda_free(inv_count);
    return rc ? rc : frc;
}
