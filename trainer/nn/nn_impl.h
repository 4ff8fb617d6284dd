/* trainer/nn/nn_impl.h — internals shared by the nn files: the per-thread generator used for
 * initialisation and dropout. Not public API. */
#ifndef CT_NN_IMPL_H
#define CT_NN_IMPL_H

#include <stdint.h>

/* Uniform float in [0, 1) from this thread's generator (seeded by ct_nn_manual_seed). */
float ct__rng_uniform(void);
/* Uniform in [lo, hi). */
float ct__rng_range(float lo, float hi);

#endif
