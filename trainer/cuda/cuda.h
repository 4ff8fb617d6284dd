/* trainer/cuda/cuda.h — the CUDA backend's internal interface: the device probe, a caching
 * allocator, and kernels on raw device buffers. Built only where CMake finds CUDA (CT_HAVE_CUDA);
 * plain C callers, no CUDA headers needed. Not public API.
 *
 * Every function returns 0 or a negative CT_E* code with a message (ct_last_error); a CUDA
 * error's message names the call and cudaGetErrorString. Streams are cudaStream_t passed as
 * void * (NULL: the legacy default stream). Kernels are launched on the given stream and not
 * waited for; a launch error is reported at once, an execution error by the next call that
 * synchronizes (ct__cuda_sync). */
#ifndef CT_CUDA_H
#define CT_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/backend/table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the device (device.c) ---- */

/* CUDA devices this process can use: 0 without a driver, without a device, or when
 * CUDA_VISIBLE_DEVICES hides them all (never an error: a CPU-only machine runs on). *why, when
 * not NULL and the count is 0, says why (static). */
int ct__cuda_device_count(const char **why);
/* The current device's dense peak FLOP/s in precision dt (CT_F32; CT_BF16 and CT_F16 on tensor
 * cores): SMs x its clock x the FLOPs per clock per SM of its architecture (device.c's table);
 * 0 for an architecture the table lacks, or without a device. threads: unused (the backend
 * table's signature). */
double ct__cuda_peak_flops(int dt, int threads);
/* A new stream that does not synchronize with the legacy default stream; freed with
 * ct__cuda_stream_free (NULL: nothing). */
int ct__cuda_stream_new(void **stream);
void ct__cuda_stream_free(void *stream);
/* Waits for all work on the stream (NULL: the whole device). */
int ct__cuda_sync(void *stream);

/* Events order work across streams: record one on stream A after a producer, make stream B wait
 * on it (the host does not block), and B's later work starts after A's producer is done. An
 * event (cudaEvent_t as void *, no timing) is freed with ct__cuda_event_free (NULL: nothing);
 * recording it again moves it to the newest point. */
int ct__cuda_event_new(void **ev);
void ct__cuda_event_free(void *ev);
/* Marks the point on the stream that the work queued so far ends at. */
int ct__cuda_event_record(void *ev, void *stream);
/* Later work on `stream` waits, on the device, for ev's last recorded point. */
int ct__cuda_stream_wait(void *stream, void *ev);
/* Blocks the host until ev's last recorded point is reached (never recorded: at once). */
int ct__cuda_event_sync(void *ev);
/* 1 when ev's last recorded point is reached (or it was never recorded), 0 while work before it
 * still runs, or a negative CT_E* code. Does not block. */
int ct__cuda_event_done(void *ev);
/* fn(arg) on the host when stream reaches it (cudaLaunchHostFunc): the backend's host_fn */
int ct__cuda_host_fn(void *stream, void (*fn)(void *arg), void *arg);
/* Host <-> device copies of `bytes`, ordered on the stream; async when the host side is pinned. */
int ct__cuda_to_device(void *dst, const void *src, size_t bytes, void *stream);
int ct__cuda_to_host(void *dst, const void *src, size_t bytes, void *stream);

/* Page-locked host memory (cudaHostAlloc): copies from and to it are asynchronous, so the
 * loader can fill the next batch's pinned buffer while this one is copied and computed on.
 * Freed with ct__cuda_pinned_free (NULL: nothing). Not cached: allocate once, reuse. */
int ct__cuda_pinned_alloc(void **p, size_t bytes);
void ct__cuda_pinned_free(void *p);

/* ---- the caching allocator (alloc.c) ----
 * cudaMalloc and cudaFree synchronize the device, so a training step must not call them. Blocks
 * that are freed go to a free list of their stream and size class and are handed out again to
 * the next request of that class on that stream: work queued on one stream runs in order, so the
 * block's old users are done before its new ones start, with no event. A block is never reused
 * on another stream. Streams are told apart by cudaStreamGetId, never reused in a process, not
 * by their handle, which a new stream may get again. A block used on ANOTHER stream too must be
 * told so (ct__cuda_record_stream), as PyTorch's recordStream: when it is freed, an event is
 * recorded on each of those streams, and it returns to its free list only when they are all
 * done (checked without blocking at each ct__cuda_malloc). Size classes: multiples of 512 bytes
 * up to 1 MiB; above that four classes per power of two (2^k, 1.25, 1.5, 1.75 x 2^k), so at most
 * 25% is lost to rounding. When cudaMalloc runs out of memory, the allocator waits for the freed
 * blocks' events, releases the cached blocks and tries once more. Thread-safe (one mutex). */
typedef struct ct_cuda_alloc_stats {
    int64_t allocated_bytes;      /* in blocks handed out now (their class sizes) */
    int64_t peak_allocated_bytes; /* the most allocated_bytes ever was */
    int64_t reserved_bytes;       /* obtained from cudaMalloc and not yet returned */
    int64_t requested_bytes;      /* what callers asked for, of the blocks handed out now */
    int64_t allocs;               /* ct__cuda_malloc calls that succeeded */
    int64_t cache_hits;           /* of those, served from a free list */
    int64_t device_mallocs;       /* cudaMalloc calls that succeeded */
    int64_t device_frees;         /* cudaFree calls (ct__cuda_empty_cache, out-of-memory retry) */
    int64_t oom_retries;          /* out-of-memory retries after releasing the cache */
    int64_t pending_blocks;       /* freed, waiting for the work of other streams that used them */
    int64_t pending_bytes;        /* their class sizes (in reserved_bytes, not allocated_bytes) */
} ct_cuda_alloc_stats;

/* *p = a device block of at least `bytes` (0: a 512-byte block) for use on `stream`. */
int ct__cuda_malloc(void **p, size_t bytes, void *stream);
/* Returns p (from ct__cuda_malloc; NULL: nothing) to its stream's free list; when it was used on
 * other streams (ct__cuda_record_stream), once the work queued there by now is done. */
int ct__cuda_free(void *p);
/* p (in use, from ct__cuda_malloc) is also used by work queued on `stream`, not its own: it must
 * not be reused until that work is done. The stream must live until p is freed. Recording p's
 * own stream, or one already recorded, does nothing. */
int ct__cuda_record_stream(void *p, void *stream);
/* The class size a request of `bytes` gets. */
size_t ct__cuda_alloc_class(size_t bytes);
/* Returns every cached free block to the device (cudaFree), after waiting for the events of the
 * freed blocks that other streams used; blocks in use stay. */
int ct__cuda_empty_cache(void);
void ct__cuda_alloc_stats_get(ct_cuda_alloc_stats *out);

/* ---- kernels (elementwise.cu, loss.cu, optim.cu) ---- */

/* Elementwise over n floats; out may alias an input. */
int ct__cuda_fill(float *x, float value, int64_t n, void *stream);
int ct__cuda_scale(float *x, float alpha, int64_t n, void *stream);                /* x *= alpha */
int ct__cuda_axpy(float *y, float alpha, const float *x, int64_t n, void *stream); /* y += a x */
/* y = x where x > 0, NaN where x is NaN, else +0 (as PyTorch and ct__cpu_relu_fwd with slope 0:
 * NaN is not hidden, -inf gives 0). */
int ct__cuda_relu_fwd(const float *x, float *y, int64_t n, void *stream);
/* dx = dy where x > 0, else +0, also at x == 0 and where x is NaN: ct__cpu_relu_bwd's rule on the
 * output y, which is > 0 exactly where x is (PyTorch's threshold_backward passes dy where y is
 * NaN). acc: dx += ... */
int ct__cuda_relu_bwd(const float *x, const float *dy, float *dx, int64_t n, bool acc,
                      void *stream);
/* *out (device, one float) = the sum of x, in double, rounded once: the same on every run. */
int ct__cuda_sum(const float *x, int64_t n, float *out, void *stream);
/* g *= inv_scale; *found_inf (device) = 1 when a result is inf or NaN, else untouched */
int ct__cuda_unscale(float *g, int64_t n, float inv_scale, float *found_inf, void *stream);
/* *out (device, one float) = sqrt(the sum of x's squares, in double), rounded once. */
int ct__cuda_norm2(const float *x, int64_t n, float *out, void *stream);

/* y (cols) = the sums of x (rows, cols)'s columns [+ y when acc]: a bias's gradient. */
int ct__cuda_col_sums(const float *x, int64_t rows, int64_t cols, float *y, bool acc, void *stream);

/* y (rows, cols) += b (cols) on every row: a Linear's bias where cuBLASLt's epilogue cannot
 * take it (gemm.c). */
int ct__cuda_add_bias(float *y, const float *b, int64_t rows, int64_t cols, void *stream);

/* y[i] = 1 / sqrt(var[i] + eps) over n: what cuDNN's batch norm backward takes (cudnn.c). */
int ct__cuda_inv_std(const float *var, float eps, float *y, int64_t n, void *stream);

/* For tests: one GPU thread that spins for `ms` milliseconds on the GPU's global timer, so that
 * work queued after it on the stream surely waits. */
int ct__cuda_test_spin(void *stream, int ms);

/* Mean cross entropy of logits (n,c) against class indices target (n), as PyTorch's
 * F.cross_entropy with no weights, no label smoothing, ignore_index -100: *loss (device, one
 * float); grad (n,c) = d loss / d logits times *grad_out (device, one float). Targets outside
 * [0, c) other than -100 make the loss NaN (the CPU loss reports them; here they are not read
 * back). */
int ct__cuda_cross_entropy_fwd(const float *logits, const int64_t *target, int64_t n, int64_t c,
                               float *loss, void *stream);
int ct__cuda_cross_entropy_bwd(const float *logits, const int64_t *target, int64_t n, int64_t c,
                               const float *grad_out, float *grad, void *stream);

/* ---- matrix products (gemm.c, cuBLASLt, plain f32) ----
 * As trainer/cpu/cpu.h's: c (m,n) = op(a) @ op(b) [+ c when accumulate]; op(a) is (m,k): a
 * stored (m,k), or (k,m) when ta; op(b) is (k,n): b stored (k,n), or (n,k) when tb. Linear: x
 * (n,ic), w (oc,ic), b (oc) or NULL, y (n,oc); db may be NULL. Pointers need only a float's
 * alignment (4 bytes): a view into a larger buffer is fine. */
/* Autocast (table.h's matmul_lp): y (n elements of dt, CT_BF16 or CT_F16) = x rounded to
 * nearest even; the product with a and b so rounded (bf16 / f16 operands on cuBLASLt), f32
 * accumulation (CUBLAS_COMPUTE_32F) and c. */
int ct__cuda_to_lp(int dt, const float *x, void *y, int64_t n, void *stream);
/* y (n floats) = x (n elements of dt, CT_BF16 or CT_F16) widened, exactly */
int ct__cuda_from_lp(int dt, const void *x, float *y, int64_t n, void *stream);
int ct__cuda_matmul_lp(int dt, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                       const float *b, bool tb, float *c, bool accumulate, void *stream);
int ct__cuda_matmul(int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b,
                    bool tb, float *c, bool accumulate, void *stream);
int ct__cuda_ip_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                    const float *b, float *y, void *stream);
int ct__cuda_ip_bwd_data(int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy,
                         float *dx, void *stream);
int ct__cuda_ip_bwd_weights(int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy,
                            float *dw, float *db, void *stream);

/* Fused optimizer steps: one kernel over a flat buffer of n parameters (one parameter group),
 * with the update rules and float roundings of trainer/optim/optim.c (PyTorch 1.13's
 * single-tensor path); compiled without FMA contraction, as optim.c is, so a step gives the
 * same bits as ct_optim_step on the CPU. */
int ct__cuda_sgd_step(float *param, const float *grad, float *momentum_buf, int64_t n,
                      const ct__sgd_h *h, void *stream);

int ct__cuda_adam_step(float *param, const float *grad, float *exp_avg, float *exp_avg_sq,
                       float *max_exp_avg_sq, int64_t n, const ct__adam_h *h, void *stream);

/* ---- cuDNN ops (cudnn.c) ----
 * The CUDA versions of trainer/cpu/cpu.h's convolution, batch norm, pooling, activation and
 * softmax ops: the same parameter structs and semantics (outputs OVERWRITTEN, shapes as there),
 * plain NCHW f32 only. CT_ENOSYS, with a message, for what is not done here: blocked layouts
 * (fmt != 0), transposed convolution, an output size other than the one the padding gives on
 * both sides (PyTorch's ceil_mode), batch norm with fused ReLU, leaky ReLU (slope != 0), tensors
 * of 2^31 or more elements. All pointers are device memory; work is queued on `stream` and not
 * waited for. Thread-safe: each thread has its own cuDNN handle, bound to the device that was
 * current when the thread first called here. */
/* Convolution algorithms: by default only those cuDNN reports as deterministic (the same bits on
 * every run; its fastest often adds with atomics). set_deterministic(false) allows the fastest.
 * Process-wide; the algorithm of a shape is chosen again after it changes. */
void ct__cuda_set_deterministic(bool on);
bool ct__cuda_deterministic(void);

int ct__cuda_conv_fwd(const ct__conv_p *p, const float *x, const float *w, const float *b, float *y,
                      void *stream);
int ct__cuda_conv_bwd_data(const ct__conv_p *p, const float *w, const float *dy, float *dx,
                           void *stream);
/* db may be NULL when p->bias is 0. */
int ct__cuda_conv_bwd_weights(const ct__conv_p *p, const float *x, const float *dy, float *dw,
                              float *db, void *stream);

/* mean/var (c): the batch mean and BIASED variance, as ct__cpu_bn_fwd_train writes them and
 * ct__cpu_bn_bwd reads them. No workspace: p->relu is CT_ENOSYS. */
int ct__cuda_bn_fwd_train(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                          float *y, float *mean, float *var, void *stream);
int ct__cuda_bn_fwd_infer(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                          const float *mean, const float *var, float *y, void *stream);
int ct__cuda_bn_bwd(const ct__bn_p *p, const float *x, const float *dy, const float *scale,
                    const float *mean, const float *var, float *dx, float *dscale, float *dshift,
                    void *stream);

/* Pooling with no workspace: backward takes the forward's input x and output y instead (as
 * cudnnPoolingBackward does; max pooling finds each window's maximum again). */
int ct__cuda_pool_fwd(const ct__pool_p *p, const float *x, float *y, void *stream);
int ct__cuda_pool_bwd(const ct__pool_p *p, const float *x, const float *y, const float *dy,
                      float *dx, void *stream);

/* Activations (CT__ELT_*; alpha: ELU's alpha, relu's slope, which must be 0). Unlike
 * ct__cpu_eltwise_bwd, backward takes the forward input x as well as its output y:
 * cudnnActivationBackward reads both, and does not document which activation uses which. */
int ct__cuda_eltwise_fwd(int alg, float alpha, int64_t n, const float *x, float *y, void *stream);
int ct__cuda_eltwise_bwd(int alg, float alpha, int64_t n, const float *x, const float *y,
                         const float *dy, float *dx, void *stream);

/* (Log-)softmax over the last axis of (rows, cols); backward reads the forward output y. */
int ct__cuda_softmax_fwd(bool log, int64_t rows, int64_t cols, const float *x, float *y,
                         void *stream);
int ct__cuda_softmax_bwd(bool log, int64_t rows, int64_t cols, const float *y, const float *dy,
                         float *dx, void *stream);

/* ---- engine kernels (ops.cu): backend_cpu.c's loops of the same names, on the GPU ---- */
int ct__cuda_add(int64_t n, const float *a, const float *b, float *y, void *stream);
int ct__cuda_mul(int64_t n, const float *a, const float *b, float *y, bool acc, void *stream);
/* y = x > 0 ? x : slope x (cuDNN has no leaky ReLU) */
int ct__cuda_leaky_relu_fwd(float slope, int64_t n, const float *x, float *y, void *stream);
int ct__cuda_broadcast(int64_t n, const float *value, float *x, bool acc, void *stream);
int ct__cuda_add_i64(int64_t n, int64_t v, int64_t *x, void *stream);
int ct__cuda_dropout_mask(int64_t n, float p, uint64_t seed, uint64_t offset, float *mask,
                          void *stream);
/* activation backward from the forward OUTPUT y (CT__ELT_*), as the CPU's */
int ct__cuda_eltwise_bwd_dst(int alg, float alpha, int64_t n, const float *y, const float *dy,
                             float *dx, void *stream);
int ct__cuda_bn_bwd_frozen(const ct__bn_p *p, const float *x, const float *y, const float *dy,
                           const float *scale, const float *mean, const float *var, float *dx,
                           float *dscale, float *dshift, void *stream);
int ct__cuda_bn_update_running(int64_t c, float momentum, float unbias, const float *mean,
                               const float *var, float *rm, float *rv, void *stream);
int ct__cuda_adaptive_avg_fwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                              const float *x, float *y, void *stream);
int ct__cuda_adaptive_avg_bwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                              const float *dy, float *dx, bool acc, void *stream);

/* ---- transformer kernels (transformer.cu): the backend table's contracts, on the GPU; an
 * embedding index outside [0, vocab) gives a row of NaN ---- */
int ct__cuda_layernorm_fwd(int64_t rows, int64_t d, float eps, const float *x, const float *w,
                           const float *b, float *y, float *mean, float *rstd, void *stream);
int ct__cuda_layernorm_bwd(int64_t rows, int64_t d, const float *x, const float *w,
                           const float *mean, const float *rstd, const float *dy, float *dx,
                           bool acc, float *dw, float *db, void *stream);
int ct__cuda_gelu_fwd(bool tanh_approx, int64_t n, const float *x, float *y, void *stream);
int ct__cuda_gelu_bwd(bool tanh_approx, int64_t n, const float *x, const float *dy, float *dx,
                      bool acc, void *stream);
int ct__cuda_embedding_fwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                           const float *table, float *y, void *stream);
int ct__cuda_embedding_bwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                           int64_t padding_idx, const float *dy, float *dtable, void *stream);
int ct__cuda_f32_to_i64(int64_t n, const float *x, int64_t *y, void *stream);
int ct__cuda_strided_copy(const ct__strided_p *p, const float *src, float *dst, bool acc,
                          void *stream);
int ct__cuda_softmax_causal_fwd(int64_t rows, int64_t t, const float *x, float *y, void *stream);
/* attention.cu: fused attention, head size <= 256 (CT_ENOSYS past it): the flash kernels where
 * they apply (ct__cuda_flash_takes), else a warp per row in f32 (p->dt ignored: more precise
 * than a CT_BF16 asks) */
int ct__cuda_attn_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                      float *lse, void *stream);
int ct__cuda_attn_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                      const float *o, const float *lse, const float *dout, float *delta, float *dq,
                      float *dk, float *dv, bool acc, void *stream);
/* flash_attention.cu: flash attention in p->dt (CT_BF16, CT_F16 on tensor cores, else f32), for
 * head sizes 32, 64, 128 (ct__cuda_flash_takes; CT_EINVAL otherwise); backward writes delta, then
 * dq, dk, dv (adds into them when acc) */
bool ct__cuda_flash_takes(const ct__attn_p *p);
int ct__cuda_flash_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                       float *o, float *lse, void *stream);
int ct__cuda_flash_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                       const float *o, const float *lse, const float *dout, float *delta, float *dq,
                       float *dk, float *dv, bool acc, void *stream);

#ifdef __cplusplus
}
#endif
#endif
