/* trainer/cuda/optim.cu — fused SGD, Adam and AdamW steps: one kernel over a flat parameter
 * buffer. Each element is updated by trainer/optim/update.h, the code optim.c's loops run; the
 * hyper-parameters are rounded to float on the host as optim.c rounds them, and this file is
 * compiled with --fmad=false (no multiply-add contraction; optim.c has -ffp-contract=off) and
 * IEEE division and square root (nvcc's defaults), so a step's result has the CPU's bits. */
#include <math.h>

#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"
#include "trainer/optim/update.h"

static __global__ void sgd_kernel(float *p, const float *g, float *buf, int64_t n, float sign,
                                  float wd, float mom, float damp1, float neg_lr, bool use_wd,
                                  int mode)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ct__sgd_update_at(p, g, buf, i, sign, wd, mom, damp1, neg_lr, use_wd, mode);
}

static __global__ void adam_kernel(float *p, const float *g, float *m, float *v, float *mx,
                                   int64_t n, float sign, float decay, float wd, float b1,
                                   float omb1, float b2, float omb2, float bc2_sqrt, float eps,
                                   float neg_step_size, bool l2, bool amsgrad)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ct__adam_update_at(p, g, m, v, mx, i, sign, decay, wd, b1, omb1, b2, omb2, bc2_sqrt, eps,
                           neg_step_size, l2, amsgrad);
}

extern "C" int ct__cuda_sgd_step(float *param, const float *grad, float *momentum_buf, int64_t n,
                                 const ct_cuda_sgd *h, void *stream)
{
    if (!param || !grad || !h || n < 0 || (h->momentum != 0.0 && !momentum_buf))
        return ct__error(CT_EINVAL, "cuda_sgd_step: %s",
                         n < 0             ? "n < 0"
                         : !h              ? "hyper-parameters are NULL"
                         : !param || !grad ? "param or grad is NULL"
                                           : "momentum != 0 needs a momentum buffer");
    if (n == 0)
        return 0;
    int mode = CT__MOM_NONE;
    if (h->momentum != 0.0)
        mode = h->nesterov ? (h->first ? CT__MOM_FIRST_NESTEROV : CT__MOM_NESTEROV)
                           : (h->first ? CT__MOM_FIRST : CT__MOM_PLAIN);
    sgd_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        param, grad, momentum_buf, n, h->maximize ? -1.0f : 1.0f, (float)h->weight_decay,
        (float)h->momentum, (float)(1.0 - h->dampening), (float)(-h->lr), h->weight_decay != 0.0,
        mode);
    return ct__cuda_status(cudaGetLastError(), "cuda_sgd_step");
}

extern "C" int ct__cuda_adam_step(float *param, const float *grad, float *exp_avg,
                                  float *exp_avg_sq, float *max_exp_avg_sq, int64_t n,
                                  const ct_cuda_adam *h, void *stream)
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
    double bc1 = 1.0 - pow(h->beta1, h->step), bc2 = 1.0 - pow(h->beta2, h->step);
    /* AdamW's decay p *= 1 - lr*wd comes first; it is 1 for Adam */
    float decay = h->decoupled ? (float)(1.0 - h->lr * h->weight_decay) : 1.0f;
    adam_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, h->maximize ? -1.0f : 1.0f, decay,
        (float)h->weight_decay, (float)h->beta1, (float)(1.0 - h->beta1), (float)h->beta2,
        (float)(1.0 - h->beta2), (float)sqrt(bc2), (float)h->eps, (float)(-(h->lr / bc1)),
        !h->decoupled && h->weight_decay != 0.0, h->amsgrad);
    return ct__cuda_status(cudaGetLastError(), "cuda_adam_step");
}
