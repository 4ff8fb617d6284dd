/* trainer/cpu/optim_cpu.c — the CPU's optimizer steps (the backend table's sgd_step and
 * adam_step): PyTorch 1.13's torch.optim.SGD / Adam / AdamW single-tensor updates, one element
 * at a time by trainer/optim/update.h (shared with the CUDA kernels, so both give the same bits).
 *
 * Each body is an always-inline loop of constant flags: the dispatchers call it with literal
 * flags, so every variant is its own branch-free loop the compiler vectorises. Compiled with
 * -O3 -fno-math-errno -ffp-contract=off (CMakeLists.txt): no FMA contraction, so every ISA
 * clone gives bit-identical results and replicas on mixed nodes agree. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "trainer/backend/table.h"
#include "trainer/cpu/vecmath.h" /* CT_CLONES */
#include "trainer/optim/update.h"

#define CT_INLINE static inline __attribute__((always_inline))

CT_INLINE void sgd_body(float *restrict p, const float *restrict g, float *restrict buf, int64_t n,
                        ct__sgd_k k, const bool use_wd, const int mode)
{
    for (int64_t i = 0; i < n; i++)
        ct__sgd_update_at(p, g, buf, i, k, use_wd, mode);
}

CT_CLONES static void sgd_update(float *restrict p, const float *restrict g, float *restrict buf,
                                 int64_t n, const ct__sgd_h *h)
{
    const ct__sgd_k k = ct__sgd_constants(h->lr, h->momentum, h->dampening, h->weight_decay,
                                          h->nesterov, h->maximize, h->first);
#define SGD_CASE(WD, MODE)                                                                         \
    sgd_body(p, g, buf, n, k, WD, MODE);                                                           \
    break
    switch (k.mode * 2 + k.use_wd) {
    case CT__MOM_NONE * 2:
        SGD_CASE(false, CT__MOM_NONE);
    case CT__MOM_NONE * 2 + 1:
        SGD_CASE(true, CT__MOM_NONE);
    case CT__MOM_FIRST * 2:
        SGD_CASE(false, CT__MOM_FIRST);
    case CT__MOM_FIRST * 2 + 1:
        SGD_CASE(true, CT__MOM_FIRST);
    case CT__MOM_PLAIN * 2:
        SGD_CASE(false, CT__MOM_PLAIN);
    case CT__MOM_PLAIN * 2 + 1:
        SGD_CASE(true, CT__MOM_PLAIN);
    case CT__MOM_FIRST_NESTEROV * 2:
        SGD_CASE(false, CT__MOM_FIRST_NESTEROV);
    case CT__MOM_FIRST_NESTEROV * 2 + 1:
        SGD_CASE(true, CT__MOM_FIRST_NESTEROV);
    case CT__MOM_NESTEROV * 2:
        SGD_CASE(false, CT__MOM_NESTEROV);
    default:
        SGD_CASE(true, CT__MOM_NESTEROV);
    }
#undef SGD_CASE
}

CT_INLINE void adam_body(float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, float *restrict mx, int64_t n, ct__adam_k k,
                         const bool l2, const bool amsgrad)
{
    for (int64_t i = 0; i < n; i++)
        ct__adam_update_at(p, g, m, v, mx, i, k, l2, amsgrad);
}

CT_CLONES static void adam_update(float *restrict p, const float *restrict g, float *restrict m,
                                  float *restrict v, float *restrict mx, int64_t n,
                                  const ct__adam_h *h)
{
    const ct__adam_k k = ct__adam_constants(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay,
                                            h->decoupled, h->maximize, h->step);
#define ADAM_CASE(L2, AMS)                                                                         \
    adam_body(p, g, m, v, mx, n, k, L2, AMS);                                                      \
    break
    switch (k.l2 * 2 + h->amsgrad) {
    case 0:
        ADAM_CASE(false, false);
    case 1:
        ADAM_CASE(false, true);
    case 2:
        ADAM_CASE(true, false);
    default:
        ADAM_CASE(true, true);
    }
#undef ADAM_CASE
}

int ct__cpu_sgd_step(float *param, const float *grad, float *buf, int64_t n, const ct__sgd_h *h)
{
    if (h->momentum != 0.0 && !buf && n > 0)
        return ct__error(CT_EINVAL, "sgd_step: momentum != 0 needs a momentum buffer");
    sgd_update(param, grad, buf, n, h);
    return 0;
}

int ct__cpu_adam_step(float *param, const float *grad, float *m, float *v, float *mx, int64_t n,
                      const ct__adam_h *h)
{
    if (h->amsgrad && !mx && n > 0)
        return ct__error(CT_EINVAL, "adam_step: amsgrad needs max_exp_avg_sq");
    adam_update(param, grad, m, v, mx, n, h);
    return 0;
}
