/* trainer/cpu/cpu.h — the engine's CPU kernels on raw f32 arrays, plain row-major layouts
 * (NCHW activations, PyTorch weight layouts). Internal: used by trainer/nn/.
 *
 * Every oneDNN call lives in dnnl.c behind these functions (oneDNN 3 changed the API: only that
 * file has to change). Each distinct (op, shape) creates its primitive once and caches it; later
 * calls only set data pointers and execute. Kernels OVERWRITE their outputs; the autograd layer
 * handles accumulation. loops.c holds the plain C kernels oneDNN has no primitive for; gemm.c
 * the small matrix products that dnnl.c's Linear and matmul functions hand to it.
 *
 * Return 0 or a negative CT_E* code (CT_EDNNL with the failing call in ct_last_error()).
 * Thread-safety: the primitive cache is locked; threads execute primitives concurrently (each
 * runs an entry of its own, dnnl.c). */
#ifndef CT_CPU_H
#define CT_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainer/backend/table.h"

/* The blocked layout ops produce on this CPU: the one oneDNN's convolution picks for its ISA
 * (nChw16c with AVX-512, nChw8c with AVX2), provided batch norm and pooling have JIT kernels
 * for it; CT__FMT_PLAIN when they do not. Env CT_DNNL_BLOCKED=0, 8 or 16 forces a layout. */
int ct__cpu_blocked_fmt(void);
/* Calls fn(op, impl, arg) for every cached primitive, with oneDNN's implementation name
 * (impl_info_str, e.g. "jit:avx2", "bnorm_ref:any"); returns how many there were. */
int ct__cpu_each_impl(void (*fn)(const char *op, const char *impl, void *arg), void *arg);
/* Whether an implementation name is one of oneDNN's reference (unoptimised) kernels. */
bool ct__cpu_impl_is_ref(const char *impl);
/* dst = src converted between layouts, (n,c,h,w). */
int ct__cpu_reorder(int64_t n, int64_t c, int64_t h, int64_t w, const float *src, int sfmt,
                    float *dst, int dfmt);

/* This CPU's FP32 peak FLOP/s for one core (peak.c: its FMA units measured, once), for MFU; 0
 * unknown. */
double ct__cpu_peak_flops_per_core(void);

/* Convolution / transposed convolution, 2-D (ct__conv_p in table.h). */
int ct__cpu_conv_fwd(const ct__conv_p *p, const float *x, const float *w, const float *b, float *y);
int ct__cpu_conv_bwd_data(const ct__conv_p *p, const float *w, const float *dy, float *dx);
/* db may be NULL when p->bias is 0. */
int ct__cpu_conv_bwd_weights(const ct__conv_p *p, const float *x, const float *dy, float *dw,
                             float *db);

/* Inner product (Linear): x (n,ic), w (oc,ic), b (oc) or NULL, y (n,oc). */
int ct__cpu_ip_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                   const float *b, float *y);
int ct__cpu_ip_bwd_data(int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy,
                        float *dx);
int ct__cpu_ip_bwd_weights(int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy,
                           float *dw, float *db);

/* c (m,n) = op(a) @ op(b) [+ c when accumulate]; op(a) is (m,k): a stored (m,k), or (k,m) when
 * ta; op(b) is (k,n): b stored (k,n), or (n,k) when tb. */
int ct__cpu_matmul(int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b,
                   bool tb, float *c, bool accumulate);

/* The same product in gemm.c's AVX2+FMA kernels, on the calling thread, with an optional bias
 * (n) added to every row of c; not both a and b transposed. dnnl.c's Linear and matmul calls
 * choose it (dnnl.c's gemm_here(): small products, and one thread where oneDNN has no AVX-512);
 * the attention's blocks (cpu/attention.c) call it directly. Only where ct__cpu_gemm_runs():
 * the CPU has AVX2 and FMA. */
bool ct__cpu_gemm_runs(void);
/* A Linear's forward (y = x w^T + b) for n <= CT__CPU_ROWS_MAX rows in gemm_rows.c's AVX-512
 * kernel, on the calling thread, the weight read in place. dnnl.c's ct__cpu_ip_fwd chooses it
 * (its rows_here(): one thread, AVX-512, past gemm.c's small products). Only where
 * ct__cpu_rows_runs(): the CPU has AVX-512F. */
#define CT__CPU_ROWS_MAX 32
bool ct__cpu_rows_runs(void);
int ct__cpu_rows_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                     const float *b, float *y);
int ct__cpu_gemm(int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b, bool tb,
                 float *c, bool accumulate, const float *bias);
/* The part of a product's c that is needed, and of op(a) that is not zero (the causal blocks of
 * attention): row i of c is needed only at columns j < i + n_hi, and row i of op(a) is zero
 * outside columns [i + k_lo, i + k_hi). A product with a band may skip the rest, a tile of rows
 * at a time: entries of c past the band are left as they were or computed; c's rows whose terms
 * all lie outside [0, k) are 0 (or unchanged when accumulating). CT_GEMM_OPEN: no bound. */
typedef struct ct__gemm_band {
    int64_t n_hi, k_lo, k_hi;
} ct__gemm_band;
#define CT_GEMM_OPEN ((int64_t)1 << 60)
/* the same with the rows of a, b and c lda, ldb and ldc floats apart (a's stored rows: k, or m
 * when ta; b's: n, or k when tb), and an optional band (then no bias) */
int ct__cpu_gemm_ld(int64_t m, int64_t k, int64_t n, const float *a, int64_t lda, bool ta,
                    const float *b, int64_t ldb, bool tb, float *c, int64_t ldc, bool accumulate,
                    const float *bias, const ct__gemm_band *band);
/* A Linear's weight gradient in gemm.c: dw (oc,ic) = dy^T x, dy (n,oc), x (n,ic); db (oc) =
 * dy's column sums, taken while dy is packed (db NULL: none). */
int ct__cpu_gemm_wgrad(int64_t oc, int64_t n, int64_t ic, const float *dy, const float *x,
                       float *dw, float *db);
/* b packed once for many products (the attention's keys and values, for each block of query
 * rows): ct__cpu_gemm_pack writes op(b) (k,n) as gemm.c's panels into `panels`, 64-byte aligned,
 * of ct__cpu_gemm_pack_floats(k, n) floats; ct__cpu_gemm_packed multiplies by its first
 * k <= pk rows and n columns, pk the k it was packed with. */
int64_t ct__cpu_gemm_pack_floats(int64_t k, int64_t n);
void ct__cpu_gemm_pack(int64_t k, int64_t n, const float *b, int64_t ldb, bool tb, float *panels);
int ct__cpu_gemm_packed(int64_t m, int64_t k, int64_t n, const float *a, int64_t lda, bool ta,
                        const float *panels, int64_t pk, float *c, int64_t ldc, bool accumulate,
                        const ct__gemm_band *band);

/* Autocast (dnnl.c): 0 when this CPU has oneDNN kernels for dt (CT_F32 always; CT_BF16 with
 * AVX512_BF16 or AMX; CT_F16 never with oneDNN 2.x), else CT_ENOSYS naming op, the device
 * and the missing ISA. The conv kernels above check their p->dt with it. */
int ct__cpu_lp_check(int dt, const char *op);
/* matmul with a and b rounded to dt, f32 accumulation and c (table.h's matmul_lp) */
int ct__cpu_matmul_lp(int dt, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                      const float *b, bool tb, float *c, bool accumulate);

/* Batch norm (ct__bn_p in table.h). */
/* Bytes of the fused-ReLU workspace written by training forward, read by backward (0 if !relu). */
size_t ct__cpu_bn_ws_bytes(const ct__bn_p *p);
int ct__cpu_bn_fwd_train(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                         float *y, float *mean, float *var, void *ws);
int ct__cpu_bn_fwd_infer(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                         const float *mean, const float *var, float *y);
int ct__cpu_bn_bwd(const ct__bn_p *p, const float *x, const float *dy, const float *scale,
                   const float *mean, const float *var, const void *ws, float *dx, float *dscale,
                   float *dshift);

/* Pooling 2-D (ct__pool_p in table.h). Max pooling keeps a workspace for backward
 * (ct__cpu_pool_ws_bytes bytes; 0 for average pooling). */
size_t ct__cpu_pool_ws_bytes(const ct__pool_p *p);
int ct__cpu_pool_fwd(const ct__pool_p *p, const float *x, float *y, void *ws, bool training);
int ct__cpu_pool_bwd(const ct__pool_p *p, const float *dy, const void *ws, float *dx);

/* Elementwise on n floats. Backward reads the forward OUTPUT y. alpha: negative slope (relu)
 * or ELU alpha. */
int ct__cpu_eltwise_fwd(int alg, float alpha, int64_t n, const float *x, float *y);
int ct__cpu_eltwise_bwd(int alg, float alpha, int64_t n, const float *y, const float *dy,
                        float *dx);

/* (Log-)softmax over the last axis of (rows, cols). Backward reads the forward output. */
int ct__cpu_softmax_fwd(bool log, int64_t rows, int64_t cols, const float *x, float *y);
int ct__cpu_softmax_bwd(bool log, int64_t rows, int64_t cols, const float *y, const float *dy,
                        float *dx);

/* transformer.c: layer norm, GELU, embedding (the backend table's contracts) */
int ct__cpu_layernorm_fwd(int64_t rows, int64_t d, float eps, const float *x, const float *w,
                          const float *b, float *y, float *mean, float *rstd);
int ct__cpu_layernorm_bwd(int64_t rows, int64_t d, const float *x, const float *w,
                          const float *mean, const float *rstd, const float *dy, float *dx,
                          bool acc, float *dw, float *db);
int ct__cpu_gelu_fwd(bool tanh_approx, int64_t n, const float *x, float *y);
int ct__cpu_gelu_bwd(bool tanh_approx, int64_t n, const float *x, const float *dy, float *dx,
                     bool acc);
int ct__cpu_embedding_fwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                          const float *table, float *y);
int ct__cpu_embedding_bwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                          int64_t padding_idx, const float *dy, float *dtable);
int ct__cpu_f32_to_i64(int64_t n, const float *x, int64_t *y);
int ct__cpu_strided_copy(const ct__strided_p *p, const float *src, float *dst, bool acc);
int ct__cpu_softmax_causal_fwd(int64_t rows, int64_t t, const float *x, float *y);
/* attention.c: fused attention (the backend table's contract) */
int ct__cpu_attn_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                     float *lse);
int ct__cpu_attn_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                     const float *o, const float *lse, const float *dout, float *delta, float *dq,
                     float *dk, float *dv, bool acc);

/* Sets the OpenMP thread count used by oneDNN and the C loops (<= 0: OMP_NUM_THREADS or all
 * cores, as ct_nn_set_threads says). */
void ct__cpu_set_threads(int n);
int ct__cpu_threads(void);
/* Drops every cached primitive (tests, shutdown); no thread may be running a kernel (an entry
 * runs outside the cache's lock). */
void ct__cpu_cache_clear(void);
/* Number of primitives created so far (tests check caching). */
int64_t ct__cpu_primitives_created(void);

/* ---- optimizer steps (optim_cpu.c): the backend table's sgd_step / adam_step ---- */
int ct__cpu_sgd_step(float *param, const float *grad, float *buf, int64_t n, const ct__sgd_h *h);
int ct__cpu_adam_step(float *param, const float *grad, float *m, float *v, float *mx, int64_t n,
                      const ct__adam_h *h);

/* ---- plain C kernels (loops.c) ---- */
void ct__cpu_add(int64_t n, const float *a, const float *b, float *y); /* y = a + b */
void ct__cpu_axpy(int64_t n, float alpha, const float *x, float *y);   /* y += alpha x */
/* y (cols) += the column sums of x (rows, cols): a bias gradient added to one that accumulates */
void ct__cpu_add_col_sums(int64_t rows, int64_t cols, const float *x, float *y);
/* y = x > 0 ? x : slope x, and its backward from y (slope >= 0, so y > 0 exactly where x > 0).
 * Slope 0: y = +0 (not 0 x: -inf gives 0) where x <= 0, NaN where x is NaN; dx = +0 where
 * y <= 0 or is NaN. */
void ct__cpu_relu_fwd(float slope, int64_t n, const float *x, float *y);
void ct__cpu_relu_bwd(float slope, int64_t n, const float *y, const float *dy, float *dx);
/* Adaptive average pooling, PyTorch's window rule; backward accumulates into dx when acc. */
void ct__cpu_adaptive_avg_fwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                              const float *x, float *y);
void ct__cpu_adaptive_avg_bwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                              const float *dy, float *dx, bool acc);

#endif
