/* trainer/optim/update.h — one element of the SGD and Adam/AdamW updates, shared by optim.c's CPU
 * loops and trainer/cuda/optim.cu's fused kernels, so that both run the same float operations in
 * the same order (PyTorch 1.13's single-tensor path). With no multiply-add contraction on either
 * side (optim.c: -ffp-contract=off; optim.cu: --fmad=false) a step gives the same bits on the
 * CPU and the GPU. The callers pass constant flags, so each variant is its own branch-free loop
 * the compiler vectorises. maximize multiplies the gradient by -1 (exact); Adam's decay factor
 * is 1 (exact). */
#ifndef CT_OPTIM_UPDATE_H
#define CT_OPTIM_UPDATE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CT_UPDATE_FN static __host__ __device__ __forceinline__
#else
#include <math.h>
#define CT_UPDATE_FN static inline __attribute__((always_inline))
#endif

enum { CT__MOM_NONE, CT__MOM_FIRST, CT__MOM_PLAIN, CT__MOM_FIRST_NESTEROV, CT__MOM_NESTEROV };

/* p[i] -= lr * d, d the gradient with weight decay and momentum; buf is read only with momentum */
CT_UPDATE_FN void ct__sgd_update_at(float *p, const float *g, float *buf, int64_t i, float sign,
                                    float wd, float mom, float damp1, float neg_lr,
                                    const bool use_wd, const int mode)
{
    float d = sign * g[i];
    if (use_wd)
        d = d + wd * p[i];
    if (mode != CT__MOM_NONE) {
        /* torch: buf = clone(d) on the first step, else buf*mom + (1-dampening)*d */
        float b = (mode == CT__MOM_FIRST || mode == CT__MOM_FIRST_NESTEROV)
                      ? d
                      : buf[i] * mom + damp1 * d;
        buf[i] = b;
        d = (mode == CT__MOM_FIRST_NESTEROV || mode == CT__MOM_NESTEROV) ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
}

/* Adam (decay 1, l2 for weight decay) or AdamW (decay = 1 - lr*wd, no l2); mx only with
 * amsgrad */
CT_UPDATE_FN void ct__adam_update_at(float *p, const float *g, float *m, float *v, float *mx,
                                     int64_t i, float sign, float decay, float wd, float b1,
                                     float omb1, float b2, float omb2, float bc2_sqrt, float eps,
                                     float neg_step_size, const bool l2, const bool amsgrad)
{
    float d = sign * g[i];
    float pi = p[i] * decay;
    if (l2)
        d = d + wd * pi;
    float mi = m[i] * b1 + omb1 * d;
    float vi = v[i] * b2 + omb2 * d * d;
    m[i] = mi;
    v[i] = vi;
    if (amsgrad) {
        vi = mx[i] > vi ? mx[i] : vi;
        mx[i] = vi;
    }
    float den = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = pi + neg_step_size * mi / den;
}

#endif
