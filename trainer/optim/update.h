/* trainer/optim/update.h — the SGD and Adam/AdamW updates, shared by optim.c's CPU loops and
 * trainer/cuda/optim.cu's fused kernels: the float constants of a step, rounded from the double
 * hyper-parameters where ATen rounds them, and one element's update, the same float operations
 * in the same order (PyTorch 1.13's single-tensor path). With no multiply-add contraction on
 * either side (optim.c: -ffp-contract=off; optim.cu: --fmad=false) a step gives the same bits on
 * the CPU and the GPU. The element functions take their flags as separate arguments: callers
 * pass literal constants, so each variant is its own branch-free loop the compiler vectorises.
 * maximize multiplies the gradient by -1 (exact); Adam's decay factor is 1 (exact). */
#ifndef CT_OPTIM_UPDATE_H
#define CT_OPTIM_UPDATE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define CT_UPDATE_FN static __host__ __device__ __forceinline__
#else
#define CT_UPDATE_FN static inline __attribute__((always_inline))
#endif

enum { CT__MOM_NONE, CT__MOM_FIRST, CT__MOM_PLAIN, CT__MOM_FIRST_NESTEROV, CT__MOM_NESTEROV };

/* ---- SGD ---- */

typedef struct ct__sgd_k {
    float sign, wd, mom, damp1, neg_lr;
    bool use_wd;
    int mode; /* CT__MOM_*; first: the momentum buffer does not exist yet */
} ct__sgd_k;

static inline ct__sgd_k ct__sgd_constants(double lr, double momentum, double dampening,
                                          double weight_decay, bool nesterov, bool maximize,
                                          bool first)
{
    ct__sgd_k k = {.sign = maximize ? -1.0f : 1.0f,
                   .wd = (float)weight_decay,
                   .mom = (float)momentum,
                   .damp1 = (float)(1.0 - dampening),
                   .neg_lr = (float)(-lr),
                   .use_wd = weight_decay != 0.0,
                   .mode = CT__MOM_NONE};
    if (momentum != 0.0)
        k.mode = nesterov ? (first ? CT__MOM_FIRST_NESTEROV : CT__MOM_NESTEROV)
                          : (first ? CT__MOM_FIRST : CT__MOM_PLAIN);
    return k;
}

/* p[i] -= lr * d, d the gradient with weight decay and momentum; buf is read only with
 * momentum. use_wd and mode: k's, as literals. */
CT_UPDATE_FN void ct__sgd_update_at(float *p, const float *g, float *buf, int64_t i, ct__sgd_k k,
                                    const bool use_wd, const int mode)
{
    float d = k.sign * g[i];
    if (use_wd)
        d = d + k.wd * p[i];
    if (mode != CT__MOM_NONE) {
        /* torch: buf = clone(d) on the first step, else buf*mom + (1-dampening)*d */
        float b = (mode == CT__MOM_FIRST || mode == CT__MOM_FIRST_NESTEROV)
                      ? d
                      : buf[i] * k.mom + k.damp1 * d;
        buf[i] = b;
        d = (mode == CT__MOM_FIRST_NESTEROV || mode == CT__MOM_NESTEROV) ? d + k.mom * b : b;
    }
    p[i] = p[i] + k.neg_lr * d;
}

/* ---- Adam (decoupled: AdamW) ---- */

typedef struct ct__adam_k {
    float sign, decay, wd, b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step_size;
    bool l2; /* Adam's weight decay, added to the gradient */
} ct__adam_k;

/* step: this step's number, from 1 */
static inline ct__adam_k ct__adam_constants(double lr, double beta1, double beta2, double eps,
                                            double weight_decay, bool decoupled, bool maximize,
                                            double step)
{
    const double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    return (ct__adam_k){.sign = maximize ? -1.0f : 1.0f,
                        /* AdamW's decay p *= 1 - lr*wd comes first; it is 1 for Adam */
                        .decay = decoupled ? (float)(1.0 - lr * weight_decay) : 1.0f,
                        .wd = (float)weight_decay,
                        .b1 = (float)beta1,
                        .omb1 = (float)(1.0 - beta1),
                        .b2 = (float)beta2,
                        .omb2 = (float)(1.0 - beta2),
                        .bc2_sqrt = (float)sqrt(bc2),
                        .eps = (float)eps,
                        .neg_step_size = (float)(-(lr / bc1)),
                        .l2 = !decoupled && weight_decay != 0.0};
}

/* mx only with amsgrad; l2 and amsgrad as literals */
CT_UPDATE_FN void ct__adam_update_at(float *p, const float *g, float *m, float *v, float *mx,
                                     int64_t i, ct__adam_k k, const bool l2, const bool amsgrad)
{
    float d = k.sign * g[i];
    float pi = p[i] * k.decay;
    if (l2)
        d = d + k.wd * pi;
    float mi = m[i] * k.b1 + k.omb1 * d;
    float vi = v[i] * k.b2 + k.omb2 * d * d;
    m[i] = mi;
    v[i] = vi;
    if (amsgrad) {
        vi = mx[i] > vi ? mx[i] : vi;
        mx[i] = vi;
    }
    float den = sqrtf(vi) / k.bc2_sqrt + k.eps;
    p[i] = pi + k.neg_step_size * mi / den;
}

#endif
