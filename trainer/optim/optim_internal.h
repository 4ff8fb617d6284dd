/* trainer/optim/optim_internal.h — what the schedulers need from an optimizer: its groups'
 * learning rates and initial_lr (PyTorch keeps initial_lr in the param group, so schedulers
 * created one after another share it). Not public. */
#ifndef CT_OPTIM_INTERNAL_H
#define CT_OPTIM_INTERNAL_H

#include <stdbool.h>
#include "ct/optim.h"

/* Group g's initial_lr; sets it to the current lr first when it is not set yet. */
double ct__optim_initial_lr(ct_optim *o, int g);

/* Every gradient *= inv_scale on its device; *found_inf = some gradient was inf or NaN before
 * (torch's _amp_foreach_non_finite_check_and_unscale_). For the grad scaler (scaler.c). */
int ct__optim_unscale_grads(ct_optim *o, float inv_scale, bool *found_inf);

#endif
