/* trainer/cuda/optim.cu — fused SGD, Adam and AdamW steps: one kernel over a flat parameter
 * buffer. The step's constants and each element's update come from trainer/optim/update.h,
 * the code optim.c runs; this file is compiled with --fmad=false (no multiply-add contraction;
 * optim.c has -ffp-contract=off) and IEEE division and square root (nvcc's defaults), so a
 * step's result has the CPU's bits. */
#include <math.h>

#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"
#include "trainer/optim/update.h"

static __global__ void sgd_kernel(float *p, const float *g, float *buf, int64_t n, ct__sgd_k k)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ct__sgd_update_at(p, g, buf, i, k, k.use_wd, k.mode);
}

static __global__ void adam_kernel(float *p, const float *g, float *m, float *v, float *mx,
                                   int64_t n, ct__adam_k k, bool amsgrad)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ct__adam_update_at(p, g, m, v, mx, i, k, k.l2, amsgrad);
}

extern "C" int ct__cuda_sgd_step(float *param, const float *grad, float *momentum_buf, int64_t n,
                                 const ct__sgd_h *h, void *stream)
{
    if (!param || !grad || !h || n < 0 || (h->momentum != 0.0 && !momentum_buf))
        return ct__error(CT_EINVAL, "cuda_sgd_step: %s",
                         n < 0             ? "n < 0"
                         : !h              ? "hyper-parameters are NULL"
                         : !param || !grad ? "param or grad is NULL"
                                           : "momentum != 0 needs a momentum buffer");
    if (n == 0)
        return 0;
    ct__sgd_k k = ct__sgd_constants(h->lr, h->momentum, h->dampening, h->weight_decay, h->nesterov,
                                    h->maximize, h->first);
    sgd_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        param, grad, momentum_buf, n, k);
    return ct__cuda_status(cudaGetLastError(), "cuda_sgd_step");
}

extern "C" int ct__cuda_adam_step(float *param, const float *grad, float *exp_avg,
                                  float *exp_avg_sq, float *max_exp_avg_sq, int64_t n,
                                  const ct__adam_h *h, void *stream)
{
    if (!param || !grad || !exp_avg || !exp_avg_sq || !h || n < 0 ||
        (h->amsgrad && !max_exp_avg_sq) || !(h && h->step >= 1.0))
        return ct__error(CT_EINVAL, "cuda_adam_step: %s",
                         n < 0                           ? "n < 0"
                         : !h                            ? "hyper-parameters are NULL"
                         : h->amsgrad && !max_exp_avg_sq ? "amsgrad needs max_exp_avg_sq"
                         : !(h->step >= 1.0)             ? "step must be >= 1"
                                                         : "a buffer is NULL");
    if (n == 0)
        return 0;
    ct__adam_k k = ct__adam_constants(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay,
                                      h->decoupled, h->maximize, h->step);
    adam_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, k, h->amsgrad);
    return ct__cuda_status(cudaGetLastError(), "cuda_adam_step");
}
