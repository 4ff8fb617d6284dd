/* trainer/backend/table.h — the engine's one interface to compute devices: the op descriptors
 * and a table of functions per backend (after ggml's ggml-backend-impl.h). Internal: the
 * backends that fill a table include it (trainer/cpu/backend_cpu.c, trainer/cuda/backend_cuda.c,
 * trainer/checkdev/checkdev.c); trainer/tensor, nn, optim get it through backend.h, with the
 * choice of a device's table.
 *
 * A tensor's device belongs to its storage; an op asks ct__backend_of(device) (backend.h) for
 * the table of its inputs' device and calls through it. All pointers a kernel gets are that
 * device's memory (the host's for the CPU). A table entry that is NULL is a kernel the backend
 * lacks: callers go through CT__BK_CALL, which fails with CT_ENOSYS naming the op and the device;
 * nothing falls back to the host silently.
 *
 * Ordering. Each backend has one compute stream per process, on which every kernel entry is
 * queued in call order; a kernel's return means queued, not done (the CPU's are done).
 * Memory from alloc is for that stream: freed memory is reused only by later work on it. Work
 * on another stream (communication, copies) orders itself with events: record on one stream,
 * stream_wait on the other. download waits for the compute stream first, so the host sees every
 * result queued before it; upload copies the host bytes before it returns. A NULL stream
 * argument means the compute stream.
 *
 * Kernel contracts are those of trainer/cpu/cpu.h (row-major, PyTorch layouts, f32, outputs
 * OVERWRITTEN unless the entry says it adds). Every entry returns 0 or a negative CT_E* code
 * with a message (ct_last_error). */
#ifndef CT_BACKEND_TABLE_H
#define CT_BACKEND_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/common.h"
#include "ct/device.h"
#include "ct/dtype.h"

/* ---- op descriptors, shared by every backend ---- */

/* Activation layouts of 4-D (N,C,H,W) tensors: plain NCHW, or oneDNN's nChw8c / nChw16c
 * (channels in blocks of 8 or 16 innermost; the value is the block). A blocked layout is used
 * only when C is a multiple of the block, so it has no padding: same byte size as NCHW. Only
 * the CPU produces blocked layouts (blocked_fmt below). */
enum { CT__FMT_PLAIN = 0, CT__FMT_BLK8 = 8, CT__FMT_BLK16 = 16 };

/* Convolution / transposed convolution, 2-D.
 * conv:   x (n,ic,ih,iw), w (oc,ic,kh,kw), b (oc), y (n,oc,oh,ow)
 * deconv: x (n,ic,ih,iw), w (ic,oc,kh,kw) (PyTorch ConvTranspose2d layout), y (n,oc,oh,ow)
 * Dilation as PyTorch (1 = dense). Output sizes must be consistent (caller computes them). */
typedef struct ct__conv_p {
    int64_t n, ic, ih, iw, oc, oh, ow, kh, kw;
    int64_t sh, sw, ph, pw, dh, dw;
    int bias;       /* 0/1 */
    int transposed; /* 0 conv, 1 deconv */
    int xfmt, yfmt; /* CT__FMT_* of x / dx and y / dy */
    int dt;         /* operand precision: CT_F32, or CT_BF16 / CT_F16 under autocast (lowp.h) */
} ct__conv_p;

/* Batch norm over (n,c,hw) (hw = 1 for BatchNorm1d). mean/var are the batch statistics
 * (var biased) written by training forward and read by backward. */
typedef struct ct__bn_p {
    int64_t n, c, hw;
    int64_t h, w; /* used with a blocked fmt (hw = h * w) */
    int fmt;
    int relu; /* fused ReLU on the output (y = max(bn(x), 0)); training keeps a workspace */
    float eps;
} ct__bn_p;

/* Pooling 2-D: x (n,c,ih,iw) -> y (n,c,oh,ow). */
enum { CT__POOL_MAX = 0, CT__POOL_AVG_INCL = 1, CT__POOL_AVG_EXCL = 2 };
typedef struct ct__pool_p {
    int64_t n, c, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw;
    int alg;
    int fmt; /* layout of x and y */
} ct__pool_p;

/* Elementwise activations. alpha: negative slope (relu) or ELU's alpha. */
enum { CT__ELT_RELU = 0, CT__ELT_ELU, CT__ELT_TANH, CT__ELT_SIGMOID };

/* Losses (mean reduction) of trainer/nn/loss.c: x (n,c); target int64 class indices (n) for
 * cross entropy and nll, else f32 (n,c). */
enum { CT__LOSS_CE, CT__LOSS_NLL, CT__LOSS_MSE, CT__LOSS_L1, CT__LOSS_BCE, CT__LOSS_BCEL };
typedef struct ct__loss_p {
    int kind;
    int64_t n, c;
    float label_smoothing; /* cross entropy only */
} ct__loss_p;

/* An elementwise copy over an index space of shape (ndim <= CT_MAX_DIMS), each side with its own
 * strides in elements: permute, slice and their backward. */
typedef struct ct__strided_p {
    int ndim;
    int64_t shape[CT_MAX_DIMS], sstride[CT_MAX_DIMS], dstride[CT_MAX_DIMS];
} ct__strided_p;

/* Fused scaled dot-product attention over bh slices of (t, hs): o = softmax(scale q k^T, causal
 * when asked) v, with dropout (probability dropout) on the probabilities: element (b, i, j) is
 * kept, times 1 / (1 - dropout), unless ct__philox_uniform(seed, 0, (b t + i) t + j) < dropout.
 * The layout: slice b is head b % heads of sequence b / heads, and its row i starts at
 * ct__attn_slice(p, b, rs) + i rs, with rs = in_rs in q, k, v, dq, dk and dv and out_rs in o and
 * dout. Contiguous (B, H, T, hs) tensors: heads 1, in_rs = out_rs = hs. q, k and v as thirds
 * of one (B, T, 3C) tensor (k at + C, v at + 2C) and o (B, T, C): heads H, in_rs 3C, out_rs C.
 * dt: the products' precision, autocast's (trainer/nn/attention.c). CT_F32 (0): f32 throughout.
 * CT_BF16 (CT_F16): the operands of each product are rounded to bf16 (f16) (q, k, v, dout; the
 * probabilities before P v; in backward P and dS before the products they weigh), every sum in f32;
 * inputs, outputs, lse and the softmax stay f32. */
typedef struct ct__attn_p {
    int64_t bh, t, hs;
    int64_t heads, in_rs, out_rs;
    float scale, dropout;
    bool causal;
    uint64_t seed;
    int dt; /* ct_dtype: CT_F32, CT_BF16 or CT_F16 */
} ct__attn_p;

/* where slice b starts in a tensor whose rows are rs apart (the layout above); CUDA's kernels
 * call it too */
#ifdef __CUDACC__
__host__ __device__
#endif
    static inline int64_t
    ct__attn_slice(const ct__attn_p *p, int64_t b, int64_t rs)
{
    return b / p->heads * p->t * rs + b % p->heads * p->hs;
}

/* One optimizer step's hyper-parameters (trainer/optim/optim.c's group), for a fused step over
 * a flat buffer with the update rules and float roundings of trainer/optim/update.h. */
typedef struct ct__sgd_h {
    double lr, momentum, dampening, weight_decay;
    bool nesterov, maximize;
    bool first; /* the momentum buffer does not exist yet: it starts as the gradient */
} ct__sgd_h;

typedef struct ct__adam_h {
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad, maximize;
    bool decoupled; /* AdamW */
    double step;    /* this step's number, from 1 */
} ct__adam_h;

/* What a device's supports() is asked before an op runs: the op's kind, its public name (for
 * the message) and the parameters its support can depend on. */
typedef enum ct__op_kind {
    CT__OP_LOSS, /* loss_fwd / loss_bwd with *loss */
    CT__OP_LOWP, /* a matrix product or convolution in autocast precision dt (not CT_F32) */
    CT__OP_ACT,  /* the activation alg (CT__ELT_*): eltwise_fwd / eltwise_bwd */
} ct__op_kind;
typedef struct ct__op_desc {
    ct__op_kind kind;
    const char *name;
    const ct__loss_p *loss;
    int dt;
    int alg;
} ct__op_desc;

/* ---- the table ---- */

typedef struct ct__backend {
    const char *name; /* "cpu", "cuda", "checkdev", "checkdev:1": errors name it */
    ct_device device; /* kind and index: one table per device index (backend.c) */
    /* how many devices of this kind the process can use (0: none, and *why says why) */
    int (*devices)(const char **why);
    /* the dense FLOP/s this process can reach on its device in precision dt (CT_F32, CT_BF16,
     * CT_F16), running threads CPU threads: MFU's denominator. The CPU: threads cores of this
     * CPU's FP32 peak (clock x FMA width) in every precision; CUDA: the current device's SMs x
     * its clock x a table of dense FLOPs per clock per SM; 0 where it is not known */
    double (*peak_flops)(int dt, int threads);
    /* 0 when this device runs op with its parameters; else CT_ENOSYS with a message naming the
     * op, the parameters that decide and the device. Asked before dispatch (ct__supports), so
     * an op is refused at its call, not by a kernel later (on a device that runs kernels
     * asynchronously, at the next synchronize). NULL: every op whose entry is there */
    int (*supports)(const ct__op_desc *op);

    /* memory: alloc'd bytes are uninitialised; free(NULL) does nothing */
    int (*alloc)(void **p, size_t bytes);
    void (*free)(void *p);
    int (*upload)(void *dst, const void *host_src, size_t bytes);
    int (*download)(void *host_dst, const void *src, size_t bytes);
    int (*copy)(void *dst, const void *src, size_t bytes); /* within the device */
    int (*zero)(void *p, size_t bytes);
    /* host staging memory for the _async copies (pinned on CUDA, plain elsewhere) */
    int (*host_alloc)(void **p, size_t bytes);
    void (*host_free)(void *p);
    /* copies queued on stream (NULL: the compute stream), ordered with its other work and NOT
     * waiting for any other stream: the host memory is the stream's until it is synchronized
     * (or an event recorded after the copy completes); host memory from host_alloc */
    int (*upload_async)(void *dst, const void *host_src, size_t bytes, void *stream);
    int (*download_async)(void *host_dst, const void *src, size_t bytes, void *stream);
    /* dst (this device) = bytes of src, memory of another device of this kind (cuda:1 and
     * cuda:0), queued on stream (NULL: the compute stream) and NOT waiting for src's device: the
     * caller records an event on src's stream after the work that wrote src and has stream wait
     * for it first. NULL: the kind has no peer copies (ct_tensor_to goes through the host). */
    int (*peer_copy)(void *dst, const void *src, size_t bytes, void *stream);

    /* streams and events (stream NULL: the compute stream) */
    int (*stream_new)(void **stream);
    void (*stream_free)(void *stream);
    int (*synchronize)(void *stream); /* the host waits for the stream's queued work */
    int (*event_new)(void **ev);
    void (*event_free)(void *ev);
    int (*event_record)(void *ev, void *stream); /* ev completes when the stream's work so far
                                                    has */
    int (*stream_wait)(void *stream, void *ev);  /* the stream's later work waits for ev */
    int (*event_sync)(void *ev);                 /* the host waits for ev */
    /* fn(arg) runs on the host when stream (not NULL) reaches it, in order with the stream's
     * work, whose later work waits for it to return (CUDA: cudaLaunchHostFunc, so fn makes no
     * CUDA call; the checking device: a task of the stream's worker). fn has no way to fail the
     * stream: it keeps its failure where its caller looks. NULL: the backend has none. */
    int (*host_fn)(void *stream, void (*fn)(void *arg), void *arg);

    /* layouts: the blocked layout convolutions should produce here (CT__FMT_PLAIN: none) */
    int (*blocked_fmt)(void);
    int (*reorder)(int64_t n, int64_t c, int64_t h, int64_t w, const float *src, int sfmt,
                   float *dst, int dfmt);

    /* convolution */
    int (*conv_fwd)(const ct__conv_p *p, const float *x, const float *w, const float *b, float *y);
    int (*conv_bwd_data)(const ct__conv_p *p, const float *w, const float *dy, float *dx);
    int (*conv_bwd_weights)(const ct__conv_p *p, const float *x, const float *dy, float *dw,
                            float *db); /* db may be NULL when p->bias is 0 */

    /* Linear: x (n,ic), w (oc,ic), b (oc) or NULL, y (n,oc) */
    int (*ip_fwd)(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w, const float *b,
                  float *y);
    int (*ip_bwd_data)(int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy,
                       float *dx);
    int (*ip_bwd_weights)(int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy,
                          float *dw, float *db); /* db may be NULL */
    /* c (m,n) = op(a) @ op(b) [+ c when accumulate]; op(a) is a (m,k) or, when ta, a stored
     * (k,m); op(b) is b (k,n) or, when tb, b stored (n,k) */
    int (*matmul)(int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b, bool tb,
                  float *c, bool accumulate);
    /* matmul's autocast form (trainer/backend/lowp.h): a and b rounded to dt (CT_BF16 or
     * CT_F16, round-to-nearest-even), products accumulated in f32, c f32. A backend without
     * kernels for dt on this machine fails with CT_ENOSYS naming the op, device and why. */
    int (*matmul_lp)(int dt, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                     const float *b, bool tb, float *c, bool accumulate);
    /* y (cols) += the column sums of x (rows, cols) */
    int (*add_col_sums)(int64_t rows, int64_t cols, const float *x, float *y);

    /* batch norm; ws: bn_ws_bytes of device memory (the fused ReLU's), NULL when 0 */
    size_t (*bn_ws_bytes)(const ct__bn_p *p);
    int (*bn_fwd_train)(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                        float *y, float *mean, float *var, void *ws);
    int (*bn_fwd_infer)(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                        const float *mean, const float *var, float *y);
    /* y: the forward's output (the fused ReLU's mask, for backends that keep no workspace) */
    int (*bn_bwd)(const ct__bn_p *p, const float *x, const float *y, const float *dy,
                  const float *scale, const float *mean, const float *var, const void *ws,
                  float *dx, float *dscale, float *dshift);
    /* backward with frozen statistics (eval mode), plain layout: y = (x - mean) rstd scale +
     * shift [then relu, dy masked where y <= 0]; dx, dscale, dshift may each be NULL */
    int (*bn_bwd_frozen)(const ct__bn_p *p, const float *x, const float *y, const float *dy,
                         const float *scale, const float *mean, const float *var, float *dx,
                         float *dscale, float *dshift);
    /* rm = (1 - m) rm + m mean; rv = (1 - m) rv + m var unbias, over c */
    int (*bn_update_running)(int64_t c, float momentum, float unbias, const float *mean,
                             const float *var, float *rm, float *rv);

    /* pooling; ws: pool_ws_bytes of device memory (max pooling's indices), or NULL; backward
     * gets the forward's x and y as well, for backends that find the maximum again */
    size_t (*pool_ws_bytes)(const ct__pool_p *p);
    int (*pool_fwd)(const ct__pool_p *p, const float *x, float *y, void *ws, bool training);
    int (*pool_bwd)(const ct__pool_p *p, const float *x, const float *y, const float *dy,
                    const void *ws, float *dx);
    /* adaptive average pooling (PyTorch's windows); backward adds into dx when acc */
    int (*adaptive_avg_fwd)(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                            const float *x, float *y);
    int (*adaptive_avg_bwd)(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                            const float *dy, float *dx, bool acc);

    /* activations; backward reads the forward OUTPUT y (each of CT__ELT_*'s derivatives is a
     * function of y) */
    int (*eltwise_fwd)(int alg, float alpha, int64_t n, const float *x, float *y);
    int (*eltwise_bwd)(int alg, float alpha, int64_t n, const float *y, const float *dy, float *dx);
    /* (log-)softmax over the last axis of (rows, cols); backward reads the forward output */
    int (*softmax_fwd)(bool log, int64_t rows, int64_t cols, const float *x, float *y);
    int (*softmax_bwd)(bool log, int64_t rows, int64_t cols, const float *y, const float *dy,
                       float *dx);

    /* transformer ops. Layer norm over the last axis of (rows, d); w, b (d) may be NULL;
     * forward keeps mean and rstd (rows) for backward, which writes dx (adds when acc; NULL:
     * not wanted) and ADDS into dw and db (NULL: not wanted). */
    int (*layernorm_fwd)(int64_t rows, int64_t d, float eps, const float *x, const float *w,
                         const float *b, float *y, float *mean, float *rstd);
    int (*layernorm_bwd)(int64_t rows, int64_t d, const float *x, const float *w, const float *mean,
                         const float *rstd, const float *dy, float *dx, bool acc, float *dw,
                         float *db);
    /* GELU, exact (erf) or its tanh approximation; backward reads the forward INPUT x */
    int (*gelu_fwd)(bool tanh_approx, int64_t n, const float *x, float *y);
    int (*gelu_bwd)(bool tanh_approx, int64_t n, const float *x, const float *dy, float *dx,
                    bool acc);
    /* y (n, d) = rows idx (n, i64) of table (vocab, d); backward ADDS dy's rows into dtable's,
     * skipping padding_idx (-1: none). An index outside [0, vocab) is CT_EINVAL (the CPU) */
    int (*embedding_fwd)(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                         const float *table, float *y);
    int (*embedding_bwd)(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                         int64_t padding_idx, const float *dy, float *dtable);

    /* dst (+)= src over p's index space (dst at p->dstride, src at p->sstride) */
    int (*strided_copy)(const ct__strided_p *p, const float *src, float *dst, bool acc);
    /* softmax over the last axis of (rows, t) with a causal mask: row r is query r % t and sees
     * columns 0 .. r % t (the others get 0); backward is softmax_bwd's */
    int (*softmax_causal_fwd)(int64_t rows, int64_t t, const float *x, float *y);

    /* attention (ct__attn_p): forward writes o and lse (bh, t), the rows' log-sum-exp, which
     * backward reads to recompute the probabilities; backward writes dq, dk, dv (ADDS into them
     * when acc) and uses delta (bh, t floats of device memory) as its scratch */
    int (*attn_fwd)(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                    float *lse);
    int (*attn_bwd)(const ct__attn_p *p, const float *q, const float *k, const float *v,
                    const float *o, const float *lse, const float *dout, float *delta, float *dq,
                    float *dk, float *dv, bool acc);

    /* elementwise on n floats */
    int (*fill)(int64_t n, float value, float *x);
    int (*add)(int64_t n, const float *a, const float *b, float *y);           /* y = a + b */
    int (*axpy)(int64_t n, float alpha, const float *x, float *y);             /* y += alpha x */
    int (*mul)(int64_t n, const float *a, const float *b, float *y, bool acc); /* y (+)= a b */
    int (*add_i64)(int64_t n, int64_t v, int64_t *x); /* x += v (a counter: num_batches_tracked) */
    /* y = x rounded to integers (token ids and class labels carried as floats) */
    int (*f32_to_i64)(int64_t n, const float *x, int64_t *y);
    /* *out (one float) = the sum of x, in double; the same bits on every run */
    int (*sum)(int64_t n, const float *x, float *out);
    /* *out (one float) = sqrt(the sum of x's squares, in double), rounded once (gradient
     * clipping's per-parameter L2 norm) */
    int (*norm2)(int64_t n, const float *x, float *out);
    int (*scale)(int64_t n, float alpha, float *x); /* x *= alpha */
    /* the loss scaler's unscale and inf check in one pass: g *= inv_scale; *found_inf (one
     * float of this device) = 1 when some result is inf or NaN, else left as it is (so one
     * flag serves every gradient of a step, read once) */
    int (*unscale)(int64_t n, float inv_scale, float *g, float *found_inf);
    /* x (+)= *value (one float of this device) broadcast: sum's backward */
    int (*broadcast)(int64_t n, const float *value, float *x, bool acc);
    /* mask[i] = u(seed, offset + i) < p ? 0 : 1 / (1 - p), u uniform in [0, 1) from a
     * counter-based generator (Philox 4x32-10): the same on every backend and run */
    int (*dropout_mask)(int64_t n, float p, uint64_t seed, uint64_t offset, float *mask);

    /* losses (mean reduction): *out = the loss; backward ADDS d loss / d x times *grad_out
     * (one float) to grad */
    int (*loss_fwd)(const ct__loss_p *p, const float *x, const void *target, float *out);
    int (*loss_bwd)(const ct__loss_p *p, const float *x, const void *target, const float *grad_out,
                    float *grad);

    /* optimizer steps over n parameters (update.h's operations: the same bits on every
     * backend); momentum_buf may be NULL without momentum, max_exp_avg_sq without amsgrad */
    int (*sgd_step)(float *param, const float *grad, float *momentum_buf, int64_t n,
                    const ct__sgd_h *h);
    int (*adam_step)(float *param, const float *grad, float *exp_avg, float *exp_avg_sq,
                     float *max_exp_avg_sq, int64_t n, const ct__adam_h *h);
} ct__backend;

/* The tables: the CPU's (trainer/cpu/backend_cpu.c), the checking device's
 * (trainer/checkdev/checkdev.c) and, where this build has CUDA, the GPU's
 * (trainer/cuda/backend_cuda.c, reached through cudalib.h). Callers use ct__backend_of. */
extern const ct__backend ct__backend_cpu;
extern const ct__backend ct__backend_checkdev;
extern const ct__backend ct__backend_cuda;

/* The error of a missing kernel: CT_ENOSYS, "OP is not implemented on device DEVICE". Inline,
 * so that the backends' own files can use it without a link cycle. */
static inline int ct__backend_missing(const ct__backend *b, const char *op)
{
    return ct__error(CT_ENOSYS, "%s is not implemented on device %s", op, b->name);
}

/* b->supports(op) when b has it, else 0 (the CPU's, the checking device's and CUDA's tables
 * say what they refuse). */
static inline int ct__supports(const ct__backend *b, const ct__op_desc *op)
{
    return b->supports ? b->supports(op) : 0;
}

/* Calls b->fn(args...), or fails with ct__backend_missing(b, "fn") when b lacks it. */
#define CT__BK_CALL(b, fn, ...) ((b)->fn ? (b)->fn(__VA_ARGS__) : ct__backend_missing((b), #fn))

/* TF32 for f32 GEMMs and convolutions where the device has it (CUDA's cuBLASLt compute type
 * and cuDNN math type): off unless ct_set_tf32(true) (trainer/nn/autocast.c). */
bool ct__tf32_allowed(void);

/* ---- device indices: one table per index of a kind (cuda:1, checkdev:2, ...) ----
 * A kind's tables differ only in their name and device and in the entries that are given no
 * memory or stream of the device, so cannot find it from their arguments: alloc, stream_new,
 * event_new, synchronize, event_record and stream_wait. A backend defines those once with the
 * index first (static alloc_on(int dev, ...), stream_new_on, event_new_on, synchronize_on,
 * event_record_on, stream_wait_on), CT__INDEX_ENTRIES(i) makes index i's entries from them,
 * and ct__index_tables fills the tables of indices 1 .. CT_MAX_DEVICE_INDEX - 1 from its
 * index-0 table. */
typedef struct {
    int (*alloc)(void **p, size_t bytes);
    int (*stream_new)(void **stream);
    int (*event_new)(void **ev);
    int (*synchronize)(void *stream);
    int (*event_record)(void *ev, void *stream);
    int (*stream_wait)(void *stream, void *ev);
} ct__index_entries;

#define CT__INDEX_ENTRIES(i)                                                                       \
    static int alloc_##i(void **p, size_t bytes)                                                   \
    {                                                                                              \
        return alloc_on(i, p, bytes);                                                              \
    }                                                                                              \
    static int stream_new_##i(void **stream)                                                       \
    {                                                                                              \
        return stream_new_on(i, stream);                                                           \
    }                                                                                              \
    static int event_new_##i(void **ev)                                                            \
    {                                                                                              \
        return event_new_on(i, ev);                                                                \
    }                                                                                              \
    static int synchronize_##i(void *stream)                                                       \
    {                                                                                              \
        return synchronize_on(i, stream);                                                          \
    }                                                                                              \
    static int event_record_##i(void *ev, void *stream)                                            \
    {                                                                                              \
        return event_record_on(i, ev, stream);                                                     \
    }                                                                                              \
    static int stream_wait_##i(void *stream, void *ev)                                             \
    {                                                                                              \
        return stream_wait_on(i, stream, ev);                                                      \
    }                                                                                              \
    static const ct__index_entries index_entries_##i = {                                           \
        alloc_##i,       stream_new_##i,   event_new_##i,                                          \
        synchronize_##i, event_record_##i, stream_wait_##i,                                        \
    };

/* tables[i] = base with index i's entries, device and name ("KIND:i"; names holds them), for
 * i = 1 .. CT_MAX_DEVICE_INDEX - 1 (tables[0] is left alone: base itself is index 0's). */
static inline void ct__index_tables(ct__backend tables[CT_MAX_DEVICE_INDEX],
                                    char names[CT_MAX_DEVICE_INDEX][16], const ct__backend *base,
                                    const ct__index_entries *const per[CT_MAX_DEVICE_INDEX])
{
    for (int i = 1; i < CT_MAX_DEVICE_INDEX; i++) {
        tables[i] = *base;
        snprintf(names[i], 16, "%s:%d", base->name, i);
        tables[i].name = names[i];
        tables[i].device = ct_device_make(ct_device_kind(base->device), i);
        tables[i].alloc = per[i]->alloc;
        tables[i].stream_new = per[i]->stream_new;
        tables[i].event_new = per[i]->event_new;
        tables[i].synchronize = per[i]->synchronize;
        tables[i].event_record = per[i]->event_record;
        tables[i].stream_wait = per[i]->stream_wait;
    }
}

#endif
