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

/* ZeRO's gradient clipping (L2, CPU): sums[i] := the sum of squares of parameter i's gradient
 * over its shard (ct_optim_set_shard), in double; the caller adds every rank's sums, then
 * ct__optim_clip_sumsq takes the per-parameter norms (in float, as ct_optim_clip_grad_norm does)
 * and scales the shards' gradients when the total exceeds max_norm. */
int ct__optim_shard_sumsq(ct_optim *o, double *sums);
int ct__optim_clip_sumsq(ct_optim *o, const double *sums, double max_norm, double *total_norm);

#endif
