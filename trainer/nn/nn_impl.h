/* trainer/nn/nn_impl.h — internals shared by the nn files (and the trainer's checkpoint
 * reader): the per-thread generator (rng.c) used for initialisation and dropout, a module
 * tree's modes and device, loading a state dict from safetensors bytes, inference's thread
 * rule. Not public API. */
#ifndef CT_NN_IMPL_H
#define CT_NN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct/nn.h"

/* Uniform float in [0, 1) from this thread's generator (seeded by ct_nn_manual_seed). */
float ct__rng_uniform(void);
/* The generator's next 64 bits (dropout seeds its counter-based mask with one). */
uint64_t ct__rng_u64(void);
/* Uniform in [lo, hi). */
float ct__rng_range(float lo, float hi);

/* Modules in m's tree (m included). */
int ct__module_count(const ct_module *m);
/* The training flags of m's tree in pre-order, ct__module_count(m) of them: saved into modes,
 * or (restore) set from them. */
void ct__module_modes(ct_module *m, bool *modes, bool restore);
/* The device of m's first parameter or buffer; CT_CPU when it has none. */
ct_device ct__module_device(const ct_module *m);
/* ct_module_load_file on the bytes of a safetensors file read already (path names it in
 * messages). A trainer's checkpoint (metadata format "ct-checkpoint") gives its model's
 * entries: the optimizer's ("optim.") are skipped, several models are refused. */
int ct__module_load_bytes(ct_module *m, const void *buf, size_t len, const char *path, bool strict);

/* Inference's OpenMP threads for a forward of about work multiply-adds (generate.c): one per
 * CT__INFER_WORK_PER_THREAD, at least 1, at most the calling thread's setting. */
#define CT__INFER_WORK_PER_THREAD ((int64_t)1 << 27)
int ct__infer_threads(int64_t work);

/* Deferred Linear weight gradients (wgrad_defer.c), per thread: after ct__wgrad_defer_begin, a
 * Linear's backward keeps the rows of x and dy for its weight's gradient (ct__wgrad_defer
 * returns 1; 0 when it does not defer: off, not on the CPU, a hook; or a CT_E* code), and
 * ct__wgrad_defer_end computes each weight's gradient once over all its rows with the wgrad
 * function its backward gave (apply; false drops them, after a failure) and stops deferring.
 * ct__wgrad_defer_free also frees the buffers kept for the next call (a thread that ends). */
typedef int ct__wgrad_fn(ct_tensor *w, ct_tensor *b, int64_t n, int64_t ic, int64_t oc,
                         const float *x, const float *dy); /* dw += dy^T x, db += dy's sums */
void ct__wgrad_defer_begin(void);
int ct__wgrad_defer(ct_tensor *w, ct_tensor *b, int64_t n, int64_t ic, int64_t oc, const float *x,
                    const float *dy, ct__wgrad_fn *wgrad);
int ct__wgrad_defer_end(bool apply);
void ct__wgrad_defer_free(void);

#endif
