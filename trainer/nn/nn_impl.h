/* trainer/nn/nn_impl.h — internals shared by the nn files: the per-thread generator (rng.c) used for
 * initialisation and dropout. Not public API. */
#ifndef CT_NN_IMPL_H
#define CT_NN_IMPL_H

#include <stdint.h>

/* Uniform float in [0, 1) from this thread's generator (seeded by ct_nn_manual_seed). */
float ct__rng_uniform(void);
/* The generator's next 64 bits (dropout seeds its counter-based mask with one). */
uint64_t ct__rng_u64(void);
/* Uniform in [lo, hi). */
float ct__rng_range(float lo, float hi);

#endif
