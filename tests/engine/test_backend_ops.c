/* tests/engine/test_backend_ops.c — every public op on a backend against the CPU, after ggml's
 * tests/test-backend-ops.cpp: one table of op cases (cases[] below), each a public op with
 * inputs whose shapes reach tails and several blocks, run forward and backward on CPU tensors
 * and on copies of them on the backend; the outputs and every input's gradient must agree
 * within the case's tolerance, relative to the CPU's largest value. A few cases (entry_cases[])
 * call the entries only the optimizer and the tensor API reach, against the CPU's. argv[1]
 * names the backend (backends[]): "checkdev" (the checking device: CPU kernels run late on
 * worker threads with memory the host cannot read, so a missing copy or wait fails here),
 * "cuda" (exit 77 without a GPU; scripts/gpu-check.sh runs it on one) or "cudaemu" (the CUDA
 * backend over the emulator, trainer/cudaemu/backend_cudaemu.c, in test_engine_backend_ops_emu
 * only). --headers: the public headers whose ops must each have a case.
 *
 * Nothing here is a silent pass:
 * - every `ct_tensor *ct_nn_...(` op declared in the headers must be the op of some case, and
 *   every case's ct_nn_ op must be declared there (the names are read from the headers);
 * - the backend's table is run through a counting copy (counted below: each op entry counts its
 *   calls, then calls the backend's own), and every entry the backend has must be called by
 *   some case. A new op entry in backend.h without a row in ENTRIES fails the build
 *   (_Static_assert);
 * - a case the backend refuses (ct__supports, as ggml's supports_op) must be refused by the op
 *   itself as well, at its call, with an error naming the op and the device;
 * - a case is "not run" (printed) only where it needs an entry the backend's own table lacks
 *   (NULL: CT__BK_CALL's "E is not implemented on device D"), or, for ct_tensor_to, where the
 *   backend is no device of the engine (cudaemu).
 * `--without ENTRY OP` runs every case against the counting copy with ENTRY removed (as a
 * backend that lacks the kernel) and passes only when the run fails, every failure naming ENTRY
 * and one of them OP: removing one entry fails the test with the op's name (ctest
 * engine_backend_ops_without). ENTRY must be one the engine calls through CT__BK_CALL (not
 * fill, axpy or the *_ws_bytes / blocked_fmt queries, which it calls directly).
 *
 * Backward runs through sum(y * g) with g on y's device, so that no tensor crosses devices.
 * Also, on a device of the engine: inputs on two devices are refused with a message naming
 * both; a small CNN moved with ct_module_to trains (SGD, AdamW) to the CPU's losses, parameters
 * and optimizer state. */
#include <stdarg.h>
#include <stddef.h>

#include "ct/optim.h"
#include "trainer/backend/backend.h"
#include "trainer/cudaemu/backend_cudaemu.h"
#include "trainer/tensor/tensor_impl.h"

#include "testutil.h"

/* ---- the backends, each compared with the CPU ---- */

/* the emulator's table, in the programs that link ct_cudaemu_backend (CMake builds this file
 * twice: test_engine_backend_ops_emu links it) */
#pragma weak ct__cudaemu_backend

typedef struct backend_row {
    const char *name;
    ct_device device;
    double tol; /* the default tolerance, relative to the CPU's largest value */
    /* true: the table is table()'s, not ct__backend_of(device)'s, and no device of the engine
     * (no ct_tensor_to, no ct_module_to); table is NULL where this program does not have it */
    bool own_table;
    const struct ct__backend *(*table)(void);
} backend_row;

static const backend_row backends[] = {
    {"checkdev", CT_CHECKDEV, 1e-5}, /* the CPU's kernels: the same bits, but the layout */
    {"cuda", CT_CUDA, 1e-4},
    /* backend_cuda.c and ct's CUDA kernels on the CPU (trainer/cudaemu/backend_cudaemu.c) */
    {"cudaemu", CT_CUDA, 1e-4, true, ct__cudaemu_backend},
};

static const backend_row *bkrow;  /* the backend under test */
static const ct__backend *under;  /* its table */
static ct__backend counted;       /* under's, each op entry counting its calls */
static const char *removed_entry; /* --without: the entry counted lacks */

/* ---- the counting table ---- */

/* The op entries of ct__backend, blocked_fmt to adam_step (the runtime entries before them,
 * memory, streams and events, are not ops: the checkdev and collective tests cover them).
 * X(return type, entry, parameters, arguments). */
#define ENTRIES(X)                                                                                 \
    X(int, blocked_fmt, (void), ())                                                                \
    X(int, reorder,                                                                                \
      (int64_t n, int64_t c, int64_t h, int64_t w, const float *src, int sfmt, float *dst,         \
       int dfmt),                                                                                  \
      (n, c, h, w, src, sfmt, dst, dfmt))                                                          \
    X(int, conv_fwd,                                                                               \
      (const ct__conv_p *p, const float *x, const float *w, const float *b, float *y),             \
      (p, x, w, b, y))                                                                             \
    X(int, conv_bwd_data, (const ct__conv_p *p, const float *w, const float *dy, float *dx),       \
      (p, w, dy, dx))                                                                              \
    X(int, conv_bwd_weights,                                                                       \
      (const ct__conv_p *p, const float *x, const float *dy, float *dw, float *db),                \
      (p, x, dy, dw, db))                                                                          \
    X(int, ip_fwd,                                                                                 \
      (int64_t n, int64_t ic, int64_t oc, const float *x, const float *w, const float *b,          \
       float *y),                                                                                  \
      (n, ic, oc, x, w, b, y))                                                                     \
    X(int, ip_bwd_data,                                                                            \
      (int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy, float *dx),             \
      (n, ic, oc, w, dy, dx))                                                                      \
    X(int, ip_bwd_weights,                                                                         \
      (int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy, float *dw, float *db),  \
      (n, ic, oc, x, dy, dw, db))                                                                  \
    X(int, matmul,                                                                                 \
      (int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b, bool tb,          \
       float *c, bool accumulate),                                                                 \
      (m, k, n, a, ta, b, tb, c, accumulate))                                                      \
    X(int, matmul_lp,                                                                              \
      (int dt, int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b, bool tb,  \
       float *c, bool accumulate),                                                                 \
      (dt, m, k, n, a, ta, b, tb, c, accumulate))                                                  \
    X(int, add_col_sums, (int64_t rows, int64_t cols, const float *x, float *y),                   \
      (rows, cols, x, y))                                                                          \
    X(size_t, bn_ws_bytes, (const ct__bn_p *p), (p))                                               \
    X(int, bn_fwd_train,                                                                           \
      (const ct__bn_p *p, const float *x, const float *scale, const float *shift, float *y,        \
       float *mean, float *var, void *ws),                                                         \
      (p, x, scale, shift, y, mean, var, ws))                                                      \
    X(int, bn_fwd_infer,                                                                           \
      (const ct__bn_p *p, const float *x, const float *scale, const float *shift,                  \
       const float *mean, const float *var, float *y),                                             \
      (p, x, scale, shift, mean, var, y))                                                          \
    X(int, bn_bwd,                                                                                 \
      (const ct__bn_p *p, const float *x, const float *y, const float *dy, const float *scale,     \
       const float *mean, const float *var, const void *ws, float *dx, float *dscale,              \
       float *dshift),                                                                             \
      (p, x, y, dy, scale, mean, var, ws, dx, dscale, dshift))                                     \
    X(int, bn_bwd_frozen,                                                                          \
      (const ct__bn_p *p, const float *x, const float *y, const float *dy, const float *scale,     \
       const float *mean, const float *var, float *dx, float *dscale, float *dshift),              \
      (p, x, y, dy, scale, mean, var, dx, dscale, dshift))                                         \
    X(int, bn_update_running,                                                                      \
      (int64_t c, float momentum, float unbias, const float *mean, const float *var, float *rm,    \
       float *rv),                                                                                 \
      (c, momentum, unbias, mean, var, rm, rv))                                                    \
    X(size_t, pool_ws_bytes, (const ct__pool_p *p), (p))                                           \
    X(int, pool_fwd, (const ct__pool_p *p, const float *x, float *y, void *ws, bool training),     \
      (p, x, y, ws, training))                                                                     \
    X(int, pool_bwd,                                                                               \
      (const ct__pool_p *p, const float *x, const float *y, const float *dy, const void *ws,       \
       float *dx),                                                                                 \
      (p, x, y, dy, ws, dx))                                                                       \
    X(int, adaptive_avg_fwd,                                                                       \
      (int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow, const float *x, float *y),      \
      (nc, ih, iw, oh, ow, x, y))                                                                  \
    X(int, adaptive_avg_bwd,                                                                       \
      (int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow, const float *dy, float *dx,     \
       bool acc),                                                                                  \
      (nc, ih, iw, oh, ow, dy, dx, acc))                                                           \
    X(int, eltwise_fwd, (int alg, float alpha, int64_t n, const float *x, float *y),               \
      (alg, alpha, n, x, y))                                                                       \
    X(int, eltwise_bwd,                                                                            \
      (int alg, float alpha, int64_t n, const float *y, const float *dy, float *dx),               \
      (alg, alpha, n, y, dy, dx))                                                                  \
    X(int, softmax_fwd, (bool log, int64_t rows, int64_t cols, const float *x, float *y),          \
      (log, rows, cols, x, y))                                                                     \
    X(int, softmax_bwd,                                                                            \
      (bool log, int64_t rows, int64_t cols, const float *y, const float *dy, float *dx),          \
      (log, rows, cols, y, dy, dx))                                                                \
    X(int, layernorm_fwd,                                                                          \
      (int64_t rows, int64_t d, float eps, const float *x, const float *w, const float *b,         \
       float *y, float *mean, float *rstd),                                                        \
      (rows, d, eps, x, w, b, y, mean, rstd))                                                      \
    X(int, layernorm_bwd,                                                                          \
      (int64_t rows, int64_t d, const float *x, const float *w, const float *mean,                 \
       const float *rstd, const float *dy, float *dx, bool acc, float *dw, float *db),             \
      (rows, d, x, w, mean, rstd, dy, dx, acc, dw, db))                                            \
    X(int, gelu_fwd, (bool tanh_approx, int64_t n, const float *x, float *y),                      \
      (tanh_approx, n, x, y))                                                                      \
    X(int, gelu_bwd,                                                                               \
      (bool tanh_approx, int64_t n, const float *x, const float *dy, float *dx, bool acc),         \
      (tanh_approx, n, x, dy, dx, acc))                                                            \
    X(int, embedding_fwd,                                                                          \
      (int64_t n, int64_t d, int64_t vocab, const int64_t *idx, const float *table, float *y),     \
      (n, d, vocab, idx, table, y))                                                                \
    X(int, embedding_bwd,                                                                          \
      (int64_t n, int64_t d, int64_t vocab, const int64_t *idx, int64_t padding_idx,               \
       const float *dy, float *dtable),                                                            \
      (n, d, vocab, idx, padding_idx, dy, dtable))                                                 \
    X(int, strided_copy, (const ct__strided_p *p, const float *src, float *dst, bool acc),         \
      (p, src, dst, acc))                                                                          \
    X(int, softmax_causal_fwd, (int64_t rows, int64_t t, const float *x, float *y),                \
      (rows, t, x, y))                                                                             \
    X(int, attn_fwd,                                                                               \
      (const ct__attn_p *p, const float *q, const float *k, const float *v, float *o, float *lse), \
      (p, q, k, v, o, lse))                                                                        \
    X(int, attn_bwd,                                                                               \
      (const ct__attn_p *p, const float *q, const float *k, const float *v, const float *o,        \
       const float *lse, const float *dout, float *delta, float *dq, float *dk, float *dv,         \
       bool acc),                                                                                  \
      (p, q, k, v, o, lse, dout, delta, dq, dk, dv, acc))                                          \
    X(int, fill, (int64_t n, float value, float *x), (n, value, x))                                \
    X(int, add, (int64_t n, const float *a, const float *b, float *y), (n, a, b, y))               \
    X(int, axpy, (int64_t n, float alpha, const float *x, float *y), (n, alpha, x, y))             \
    X(int, mul, (int64_t n, const float *a, const float *b, float *y, bool acc),                   \
      (n, a, b, y, acc))                                                                           \
    X(int, add_i64, (int64_t n, int64_t v, int64_t * x), (n, v, x))                                \
    X(int, f32_to_i64, (int64_t n, const float *x, int64_t *y), (n, x, y))                         \
    X(int, sum, (int64_t n, const float *x, float *out), (n, x, out))                              \
    X(int, norm2, (int64_t n, const float *x, float *out), (n, x, out))                            \
    X(int, scale, (int64_t n, float alpha, float *x), (n, alpha, x))                               \
    X(int, unscale, (int64_t n, float inv_scale, float *g, float *found_inf),                      \
      (n, inv_scale, g, found_inf))                                                                \
    X(int, broadcast, (int64_t n, const float *value, float *x, bool acc), (n, value, x, acc))     \
    X(int, dropout_mask, (int64_t n, float p, uint64_t seed, uint64_t offset, float *mask),        \
      (n, p, seed, offset, mask))                                                                  \
    X(int, loss_fwd, (const ct__loss_p *p, const float *x, const void *target, float *out),        \
      (p, x, target, out))                                                                         \
    X(int, loss_bwd,                                                                               \
      (const ct__loss_p *p, const float *x, const void *target, const float *grad_out,             \
       float *grad),                                                                               \
      (p, x, target, grad_out, grad))                                                              \
    X(int, sgd_step,                                                                               \
      (float *param, const float *grad, float *momentum_buf, int64_t n, const ct__sgd_h *h),       \
      (param, grad, momentum_buf, n, h))                                                           \
    X(int, adam_step,                                                                              \
      (float *param, const float *grad, float *exp_avg, float *exp_avg_sq, float *max_exp_avg_sq,  \
       int64_t n, const ct__adam_h *h),                                                            \
      (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, h))

#define ENTRY_ENUM(ret, name, params, args) E_##name,
enum { ENTRIES(ENTRY_ENUM) N_ENTRIES };

/* every op entry of backend.h has a row: they are the function pointers from blocked_fmt to the
 * last, adam_step */
_Static_assert(offsetof(ct__backend, adam_step) + sizeof(void (*)(void)) == sizeof(ct__backend),
               "adam_step is no longer ct__backend's last entry: update ENTRIES");
_Static_assert((offsetof(ct__backend, adam_step) - offsetof(ct__backend, blocked_fmt)) /
                           sizeof(void (*)(void)) +
                       1 ==
                   N_ENTRIES,
               "ct__backend has an op entry without a row in ENTRIES (test_backend_ops.c)");

static long calls[N_ENTRIES];

/* count_NAME: counts the call, then calls under's NAME */
#define ENTRY_COUNTING(ret, name, params, args)                                                    \
    static ret count_##name params                                                                 \
    {                                                                                              \
        calls[E_##name]++;                                                                         \
        return under->name args;                                                                   \
    }
ENTRIES(ENTRY_COUNTING)

typedef struct entry_row {
    const char *name;
    bool present; /* under has it */
} entry_row;
static entry_row entries[N_ENTRIES];

/* counted := under's table with every entry it has counting; without (when not NULL) left out
 * as a backend that lacks it. Returns 0, or -1 when without is no entry's name. */
static int make_counted(const char *without)
{
    counted = *under;
    bool found = without == NULL;
#define ENTRY_INSTALL(ret, name, params, args)                                                     \
    entries[E_##name] = (entry_row){#name, under->name != NULL};                                   \
    counted.name = under->name ? count_##name : NULL;                                              \
    if (without && !strcmp(without, #name)) {                                                      \
        counted.name = NULL;                                                                       \
        found = true;                                                                              \
    }
    ENTRIES(ENTRY_INSTALL)
    return found ? 0 : -1;
}

/* ---- inputs ---- */

enum {
    IN_RAND = 1, /* f32, uniform in (-1, 1) */
    IN_VAR,      /* f32, in (0.5, 1.5): a variance */
    IN_CLASSES,  /* i64 class indices (i * 7) % classes, element 1 the ignore index -100 */
    IN_INDEX,    /* i64 indices (i * 7) % classes, all in range */
};

typedef struct in_spec {
    int kind; /* IN_*; 0 ends the list */
    int ndim;
    int64_t shape[4];
    bool grad;       /* its gradient is compared */
    int64_t classes; /* IN_CLASSES, IN_INDEX */
    bool blocked;    /* IN_RAND, 4-D: in the nChw8c layout (as a CPU convolution's output moved
                        to the device with ct_tensor_to, whatever the device's own layouts) */
} in_spec;

#define MAX_IN 5

static ct_tensor *make_input(const in_spec *s)
{
    if (s->kind == IN_RAND || s->kind == IN_VAR) {
        ct_tensor *t = rand_t(s->ndim, s->shape);
        float *p = ct_tensor_f32(t);
        for (int64_t i = 0; s->kind == IN_VAR && i < ct_tensor_numel(t); i++)
            p[i] = 0.5f + fabsf(p[i]);
        if (!s->blocked)
            return t;
        ct_tensor *b = ct_tensor_new(CT_F32, 4, s->shape);
        const int64_t *d = s->shape;
        if (ct__backend_cpu.reorder(d[0], d[1], d[2], d[3], p, CT__FMT_PLAIN, ct_tensor_f32(b),
                                    CT__FMT_BLK8) < 0)
            fprintf(stderr, "reorder to nChw8c: %s\n", ct_last_error());
        b->fmt = CT__FMT_BLK8;
        ct_tensor_release(&t);
        return b;
    }
    ct_tensor *t = ct_tensor_new(CT_I64, s->ndim, s->shape);
    int64_t *p = ct_tensor_data(t);
    for (int64_t i = 0; i < ct_tensor_numel(t); i++)
        p[i] = (i * 7) % s->classes;
    if (s->kind == IN_CLASSES && ct_tensor_numel(t) > 1)
        p[1] = -100;
    return t;
}

/* cpu's copy on bk's device (not on the autograd tape) */
static ct_tensor *to_table(const ct__backend *bk, const ct_tensor *cpu)
{
    ct_tensor *t =
        ct__tensor_empty_on(bk, ct_tensor_dtype(cpu), ct_tensor_ndim(cpu), ct_tensor_shape(cpu));
    size_t bytes = (size_t)ct_tensor_numel(cpu) * ct_dtype_size(ct_tensor_dtype(cpu));
    if (t)
        t->fmt = cpu->fmt;
    if (t && bk->upload(ct_tensor_data(t), ct_tensor_data((ct_tensor *)cpu), bytes) < 0)
        ct_tensor_release(&t);
    return t;
}

static ct_tensor *to_counted(const ct_tensor *cpu)
{
    return to_table(&counted, cpu);
}

/* ---- the cases ---- */

typedef ct_tensor *(*fwd_fn)(ct_tensor **in, int mode);

typedef struct op_case {
    const char *op;      /* the public op it checks, as its header declares it */
    const char *variant; /* what else it reaches, for the messages */
    fwd_fn fwd;          /* the op on in (in[i] from in_spec[i]), mode as the case says */
    int mode;
    in_spec in[MAX_IN];
    double tol;                   /* 0: the backend's */
    int autocast;                 /* CT_BF16: the op runs under autocast (the CPU too, where
                                     it supports it; else in f32) */
    ct__op_desc need[2];          /* asked of the backend first, in the order the op asks
                                     (name NULL: nothing) */
    ct__loss_p loss;              /* a CT__OP_LOSS need's */
    void (*prep)(ct_tensor **in); /* special values, after the inputs are made */
    bool engine_device;           /* runs only on a device of the engine (ct__backend_of's) */
} op_case;

static ct_tensor *plain(ct_tensor *y)
{
    ct_tensor *p = y ? ct_nn_to_plain(y) : NULL;
    ct_tensor_release(&y);
    return p;
}

/* v * v, v released: after a view, so that backward is not the identity */
static ct_tensor *squared(ct_tensor *v)
{
    ct_tensor *y = v ? ct_nn_mul(v, v) : NULL;
    ct_tensor_release(&v);
    return y;
}

static ct_tensor *f_linear(ct_tensor **in, int mode)
{
    return ct_nn_linear(in[0], in[1], in[2]);
}
/* x to the cpu and back to its device (ct__backend_of's table): the gradient goes back too */
static ct_tensor *f_to_round_trip(ct_tensor **in, int mode)
{
    ct_tensor *h = ct_tensor_to(in[0], CT_CPU);
    ct_tensor *y = h ? ct_tensor_to(h, ct_tensor_device(in[0])) : NULL;
    ct_tensor_release(&h);
    return squared(y);
}

/* x and w each used twice: their gradients accumulate (into the buffer the first wrote) */
static ct_tensor *f_linear_twice(ct_tensor **in, int mode)
{
    ct_tensor *a = ct_nn_linear(in[0], in[1], in[2]), *b = ct_nn_linear(in[0], in[1], NULL);
    ct_tensor *y = a && b ? ct_nn_add(a, b) : NULL;
    ct_tensor_release(&a);
    ct_tensor_release(&b);
    return y;
}
static ct_tensor *f_matmul(ct_tensor **in, int mode)
{
    return ct_nn_matmul(in[0], in[1]);
}
static const ct_conv_opts conv_opts[] = {
    {.stride = {2, 2}, .padding = {1, 1}},
    {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}},
    {.stride = {1, 1}},
};
/* conv2d with conv_opts[mode], its output made plain (a blocked layout on the CPU) */
static ct_tensor *f_conv(ct_tensor **in, int mode)
{
    return plain(ct_nn_conv2d(in[0], in[1], in[2], &conv_opts[mode]));
}
static ct_tensor *f_conv_transpose(ct_tensor **in, int mode)
{
    return plain(ct_nn_conv_transpose2d(in[0], in[1], in[2], &conv_opts[mode]));
}
/* x in a blocked layout, made plain (backward: the gradient reordered into x's layout) */
static ct_tensor *f_to_plain(ct_tensor **in, int mode)
{
    return squared(ct_nn_to_plain(in[0]));
}
/* mode: 0 eval, 1 train, 2 eval with the fused relu, 3 train with it */
static ct_tensor *f_bn(ct_tensor **in, int mode)
{
    bool train = mode & 1;
    if (mode & 2)
        return plain(ct_nn_batch_norm_relu(in[0], in[1], in[2], in[3], in[4], train, 0.1f, 1e-5f));
    return plain(ct_nn_batch_norm(in[0], in[1], in[2], in[3], in[4], train, 0.1f, 1e-5f));
}
static ct_tensor *f_maxpool(ct_tensor **in, int mode)
{
    return ct_nn_max_pool2d(in[0], 2, 2, 0);
}
static ct_tensor *f_avgpool(ct_tensor **in, int mode)
{
    return ct_nn_avg_pool2d(in[0], 3, 2, 1, mode);
}
static ct_tensor *f_apool(ct_tensor **in, int mode)
{
    return ct_nn_adaptive_avg_pool2d(in[0], 3, 2);
}
static ct_tensor *f_relu(ct_tensor **in, int mode)
{
    return ct_nn_relu(in[0]);
}
static ct_tensor *f_leaky_relu(ct_tensor **in, int mode)
{
    return ct_nn_leaky_relu(in[0], 0.1f);
}
static ct_tensor *f_elu(ct_tensor **in, int mode)
{
    return ct_nn_elu(in[0], 1.0f);
}
static ct_tensor *f_tanh(ct_tensor **in, int mode)
{
    return ct_nn_tanh(in[0]);
}
static ct_tensor *f_sigmoid(ct_tensor **in, int mode)
{
    return ct_nn_sigmoid(in[0]);
}
static ct_tensor *f_softmax(ct_tensor **in, int mode)
{
    return ct_nn_softmax(in[0]);
}
static ct_tensor *f_log_softmax(ct_tensor **in, int mode)
{
    return ct_nn_log_softmax(in[0]);
}
static ct_tensor *f_add(ct_tensor **in, int mode)
{
    return ct_nn_add(in[0], in[mode]);
}
static ct_tensor *f_sum(ct_tensor **in, int mode)
{
    return ct_nn_sum(in[0]);
}
static ct_tensor *f_dropout(ct_tensor **in, int mode)
{
    return ct_nn_dropout(in[0], 0.3f, true);
}
static ct_tensor *f_flatten(ct_tensor **in, int mode)
{
    return squared(ct_nn_flatten(in[0]));
}
/* (6, 4, 5) viewed as (4, 30) */
static ct_tensor *f_reshape(ct_tensor **in, int mode)
{
    return squared(ct_nn_reshape(in[0], 2, (const int64_t[]){4, 30}));
}
/* (6, 4, 5) with dimensions 0 and 2 swapped */
static ct_tensor *f_transpose(ct_tensor **in, int mode)
{
    return squared(ct_nn_transpose(in[0], 0, 2));
}
static ct_tensor *f_cross_entropy(ct_tensor **in, int mode)
{
    return ct_nn_cross_entropy(in[0], in[1], mode ? 0.1f : 0.0f);
}
/* on log_softmax(x) */
static ct_tensor *f_nll(ct_tensor **in, int mode)
{
    ct_tensor *lp = ct_nn_log_softmax(in[0]), *y = lp ? ct_nn_nll_loss(lp, in[1]) : NULL;
    ct_tensor_release(&lp);
    return y;
}
static ct_tensor *f_mse(ct_tensor **in, int mode)
{
    return ct_nn_mse_loss(in[0], in[1]);
}
static ct_tensor *f_l1(ct_tensor **in, int mode)
{
    return ct_nn_l1_loss(in[0], in[1]);
}
/* sigmoid(x) against sigmoid(t): probabilities and targets in (0, 1) */
static ct_tensor *f_bce(ct_tensor **in, int mode)
{
    ct_tensor *p = ct_nn_sigmoid(in[0]), *t = ct_nn_sigmoid(in[1]);
    ct_tensor *y = p && t ? ct_nn_bce_loss(p, t) : NULL;
    ct_tensor_release(&p);
    ct_tensor_release(&t);
    return y;
}
static ct_tensor *f_bce_logits(ct_tensor **in, int mode)
{
    ct_tensor *t = ct_nn_sigmoid(in[1]), *y = t ? ct_nn_bce_with_logits_loss(in[0], t) : NULL;
    ct_tensor_release(&t);
    return y;
}
static ct_tensor *f_layer_norm(ct_tensor **in, int mode)
{
    return ct_nn_layer_norm(in[0], in[1], in[2], 1e-5f);
}
static ct_tensor *f_gelu(ct_tensor **in, int mode)
{
    return ct_nn_gelu(in[0], mode);
}
static ct_tensor *f_mul(ct_tensor **in, int mode)
{
    return ct_nn_mul(in[0], in[1]);
}
/* mode: padding_idx */
static ct_tensor *f_embedding(ct_tensor **in, int mode)
{
    return ct_nn_embedding(in[0], in[1], mode);
}
static ct_tensor *f_permute(ct_tensor **in, int mode)
{
    return ct_nn_permute(in[0], (const int[]){0, 2, 1, 3});
}
static ct_tensor *f_slice(ct_tensor **in, int mode)
{
    return ct_nn_slice(in[0], 2, 5, 9);
}
/* mode: bit 0 trans_a, bit 1 trans_b */
static ct_tensor *f_bmm(ct_tensor **in, int mode)
{
    return ct_nn_bmm(in[0], in[1], mode & 1, mode & 2);
}
static ct_tensor *f_softmax_causal(ct_tensor **in, int mode)
{
    return ct_nn_softmax_causal(in[0]);
}
/* mode: 0 full, 1 causal, 2 causal with dropout */
static ct_tensor *f_attention(ct_tensor **in, int mode)
{
    return ct_nn_attention(in[0], in[1], in[2], mode > 0, mode > 1 ? 0.2f : 0.0f, true);
}
/* q, k, v packed (B, T, 3C), 3 heads */
static ct_tensor *f_attention_qkv(ct_tensor **in, int mode)
{
    return ct_nn_attention_qkv(in[0], 3, mode > 0, mode > 1 ? 0.2f : 0.0f, true);
}

/* key 0 scores -inf for every query (1e20 * -1e20 overflows) and weighs 0, as on the CPU,
 * though it comes first in each row: q, k (1, 2, 5, 8) */
static void prep_inf_score(ct_tensor **in)
{
    float *q = ct_tensor_f32(in[0]), *k = ct_tensor_f32(in[1]);
    for (int64_t r = 0; r < 2 * 5; r++) {
        q[r * 8] = 1e20f;
        k[r * 8] = r % 5 == 0 ? -1e20f : 0.0f;
    }
}

#define F32(n, ...)                                                                                \
    {                                                                                              \
        IN_RAND, n, {__VA_ARGS__}, true, 0                                                         \
    }
#define F32_NOGRAD(n, ...)                                                                         \
    {                                                                                              \
        IN_RAND, n, {__VA_ARGS__}, false, 0                                                        \
    }
#define LOSS(k, nm) .need = {{CT__OP_LOSS, nm}}, .loss = {.kind = k}
#define LOWP(nm) .autocast = CT_BF16, .tol = 2e-2, .need = {{CT__OP_LOWP, nm, .dt = CT_BF16}}
#define ACT(nm, a) .need = {{CT__OP_ACT, nm, .alg = a}}

/* clang-format off */
static const op_case cases[] = {
    {"ct_nn_linear", "", f_linear, 0, {F32(2, 17, 33), F32(2, 9, 33), F32(1, 9)}},
    {"ct_nn_linear", "x and w used twice", f_linear_twice, 0,
     {F32(2, 17, 33), F32(2, 9, 33), F32(1, 9)}},
    {"ct_nn_linear", "bf16", f_linear, 0, {F32(2, 17, 33), F32(2, 9, 33), F32(1, 9)},
     LOWP("linear")},
    {"ct_nn_matmul", "", f_matmul, 0, {F32(2, 13, 7), F32(2, 7, 19)}},
    {"ct_nn_matmul", "bf16", f_matmul, 0, {F32(2, 13, 7), F32(2, 7, 19)}, LOWP("matmul")},
    {"ct_nn_conv2d", "stride 2, pad 1", f_conv, 0,
     {F32(4, 4, 16, 9, 9), F32(4, 32, 16, 3, 3), F32(1, 32)}},
    {"ct_nn_conv2d", "bf16", f_conv, 0, {F32(4, 4, 16, 9, 9), F32(4, 32, 16, 3, 3), F32(1, 32)},
     LOWP("conv2d")},
    {"ct_nn_conv_transpose2d", "stride 2, output padding 1", f_conv_transpose, 1,
     {F32(4, 2, 8, 5, 5), F32(4, 8, 6, 3, 3), F32(1, 6)}},
    {"ct_nn_to_plain", "nChw8c", f_to_plain, 0,
     {{IN_RAND, 4, {2, 16, 5, 5}, true, .blocked = true}}},
    {"ct_nn_batch_norm", "eval", f_bn, 0,
     {F32(4, 4, 16, 5, 5), F32(1, 16), F32(1, 16), F32_NOGRAD(1, 16), {IN_VAR, 1, {16}}}},
    {"ct_nn_batch_norm", "train", f_bn, 1,
     {F32(4, 4, 16, 5, 5), F32(1, 16), F32(1, 16), F32_NOGRAD(1, 16), {IN_VAR, 1, {16}}}},
    {"ct_nn_batch_norm_relu", "eval", f_bn, 2,
     {F32(4, 4, 16, 5, 5), F32(1, 16), F32(1, 16), F32_NOGRAD(1, 16), {IN_VAR, 1, {16}}}},
    {"ct_nn_batch_norm_relu", "train", f_bn, 3,
     {F32(4, 4, 16, 5, 5), F32(1, 16), F32(1, 16), F32_NOGRAD(1, 16), {IN_VAR, 1, {16}}}},
    {"ct_nn_max_pool2d", "", f_maxpool, 0, {F32(4, 2, 8, 8, 8)}},
    {"ct_nn_avg_pool2d", "padding excluded", f_avgpool, 0, {F32(4, 2, 3, 7, 7)}},
    {"ct_nn_avg_pool2d", "padding included", f_avgpool, 1, {F32(4, 2, 3, 7, 7)}},
    {"ct_nn_adaptive_avg_pool2d", "7x5 to 3x2", f_apool, 0, {F32(4, 2, 3, 7, 5)}},
    {"ct_nn_relu", "", f_relu, 0, {F32(2, 37, 29)}, ACT("relu", CT__ELT_RELU)},
    {"ct_nn_leaky_relu", "", f_leaky_relu, 0, {F32(2, 37, 29)}, ACT("leaky_relu", CT__ELT_RELU)},
    {"ct_nn_elu", "", f_elu, 0, {F32(2, 37, 29)}, ACT("elu", CT__ELT_ELU)},
    {"ct_nn_tanh", "", f_tanh, 0, {F32(2, 37, 29)}, ACT("tanh", CT__ELT_TANH)},
    {"ct_nn_sigmoid", "", f_sigmoid, 0, {F32(2, 37, 29)}, ACT("sigmoid", CT__ELT_SIGMOID)},
    {"ct_nn_softmax", "", f_softmax, 0, {F32(2, 11, 10)}},
    {"ct_nn_log_softmax", "", f_log_softmax, 0, {F32(2, 11, 10)}},
    {"ct_nn_add", "", f_add, 1, {F32(3, 5, 6, 7), F32(3, 5, 6, 7)}},
    {"ct_nn_add", "x + x (its gradient accumulates)", f_add, 0, {F32(3, 5, 6, 7)}},
    /* tensor.h's one differentiable op */
    {"ct_tensor_to", "to the cpu and back", f_to_round_trip, 0, {F32(2, 33, 17)},
     .engine_device = true},
    {"ct_nn_sum", "", f_sum, 0, {F32(2, 100, 37)}},
    {"ct_nn_dropout", "", f_dropout, 0, {F32(2, 64, 33)}},
    {"ct_nn_flatten", "", f_flatten, 0, {F32(4, 3, 4, 5, 6)}},
    {"ct_nn_reshape", "", f_reshape, 0, {F32(3, 6, 4, 5)}},
    {"ct_nn_transpose", "", f_transpose, 0, {F32(3, 6, 4, 5)}},
    {"ct_nn_cross_entropy", "", f_cross_entropy, 0,
     {F32(2, 40, 10), {IN_CLASSES, 1, {40}, false, 10}}, LOSS(CT__LOSS_CE, "cross_entropy")},
    {"ct_nn_cross_entropy", "300 classes (rows wider than a warp)", f_cross_entropy, 0,
     {F32(2, 50, 300), {IN_CLASSES, 1, {50}, false, 300}}, LOSS(CT__LOSS_CE, "cross_entropy")},
    {"ct_nn_cross_entropy", "label smoothing 0.1", f_cross_entropy, 1,
     {F32(2, 40, 10), {IN_CLASSES, 1, {40}, false, 10}},
     .need = {{CT__OP_LOSS, "cross_entropy"}},
     .loss = {.kind = CT__LOSS_CE, .label_smoothing = 0.1f}},
    {"ct_nn_nll_loss", "on log_softmax", f_nll, 0,
     {F32(2, 24, 10), {IN_CLASSES, 1, {24}, false, 10}}, LOSS(CT__LOSS_NLL, "nll_loss")},
    {"ct_nn_mse_loss", "", f_mse, 0, {F32(2, 24, 10), F32_NOGRAD(2, 24, 10)},
     LOSS(CT__LOSS_MSE, "mse_loss")},
    {"ct_nn_l1_loss", "", f_l1, 0, {F32(2, 24, 10), F32_NOGRAD(2, 24, 10)},
     LOSS(CT__LOSS_L1, "l1_loss")},
    {"ct_nn_bce_loss", "on sigmoids", f_bce, 0, {F32(2, 24, 10), F32_NOGRAD(2, 24, 10)},
     .need = {{CT__OP_ACT, "sigmoid", .alg = CT__ELT_SIGMOID}, {CT__OP_LOSS, "bce_loss"}},
     .loss = {.kind = CT__LOSS_BCE}},
    {"ct_nn_bce_with_logits_loss", "", f_bce_logits, 0, {F32(2, 24, 10), F32_NOGRAD(2, 24, 10)},
     .need = {{CT__OP_ACT, "sigmoid", .alg = CT__ELT_SIGMOID},
              {CT__OP_LOSS, "bce_with_logits_loss"}},
     .loss = {.kind = CT__LOSS_BCEL}},
    {"ct_nn_layer_norm", "", f_layer_norm, 0, {F32(3, 3, 5, 96), F32(1, 96), F32(1, 96)}},
    {"ct_nn_layer_norm", "65 rows (chunks of 32, the last partial)", f_layer_norm, 0,
     {F32(3, 5, 13, 40), F32(1, 40), F32(1, 40)}},
    {"ct_nn_gelu", "erf", f_gelu, 0, {F32(2, 37, 29)}},
    {"ct_nn_gelu", "tanh", f_gelu, 1, {F32(2, 37, 29)}},
    {"ct_nn_mul", "", f_mul, 0, {F32(2, 13, 21), F32(2, 13, 21)}},
    {"ct_nn_embedding", "", f_embedding, -1, {{IN_INDEX, 2, {4, 9}, false, 11}, F32(2, 11, 24)}},
    {"ct_nn_embedding", "padding_idx 3", f_embedding, 3,
     {{IN_INDEX, 2, {4, 9}, false, 11}, F32(2, 11, 24)}},
    {"ct_nn_embedding", "600 positions, 5 tokens (sorted scatter-add)", f_embedding, -1,
     {{IN_INDEX, 2, {20, 30}, false, 5}, F32(2, 5, 40)}},
    {"ct_nn_permute", "", f_permute, 0, {F32(4, 2, 3, 7, 33)}},
    {"ct_nn_slice", "", f_slice, 0, {F32(3, 3, 4, 17)}},
    {"ct_nn_bmm", "", f_bmm, 0, {F32(3, 3, 13, 9), F32(3, 3, 9, 21)}},
    {"ct_nn_bmm", "trans_a", f_bmm, 1, {F32(3, 3, 9, 13), F32(3, 3, 9, 21)}},
    {"ct_nn_bmm", "trans_b", f_bmm, 2, {F32(3, 3, 13, 9), F32(3, 3, 21, 9)}},
    {"ct_nn_bmm", "trans_a trans_b", f_bmm, 3, {F32(3, 3, 9, 13), F32(3, 3, 21, 9)}},
    {"ct_nn_bmm", "bf16", f_bmm, 0, {F32(3, 3, 13, 9), F32(3, 3, 9, 21)}, LOWP("bmm")},
    {"ct_nn_softmax_causal", "", f_softmax_causal, 0, {F32(4, 2, 3, 40, 40)}},
    {"ct_nn_attention", "", f_attention, 0,
     {F32(4, 2, 3, 37, 40), F32(4, 2, 3, 37, 40), F32(4, 2, 3, 37, 40)}},
    {"ct_nn_attention", "causal", f_attention, 1,
     {F32(4, 2, 3, 37, 40), F32(4, 2, 3, 37, 40), F32(4, 2, 3, 37, 40)}},
    {"ct_nn_attention", "causal, dropout", f_attention, 2,
     {F32(4, 2, 3, 37, 40), F32(4, 2, 3, 37, 40), F32(4, 2, 3, 37, 40)}},
    {"ct_nn_attention", "a -inf score first in each row", f_attention, 0,
     {F32(4, 1, 2, 5, 8), F32(4, 1, 2, 5, 8), F32(4, 1, 2, 5, 8)}, .prep = prep_inf_score},
    {"ct_nn_attention_qkv", "", f_attention_qkv, 0, {F32(3, 2, 37, 3 * 3 * 40)}},
    {"ct_nn_attention_qkv", "causal", f_attention_qkv, 1, {F32(3, 2, 37, 3 * 3 * 40)}},
    {"ct_nn_attention_qkv", "causal, dropout", f_attention_qkv, 2, {F32(3, 2, 37, 3 * 3 * 40)}},
    /* head size 64, T past a block of 64: CUDA's flash kernels, f32 and bf16 (tensor cores) */
    {"ct_nn_attention_qkv", "hs 64", f_attention_qkv, 0, {F32(3, 2, 70, 3 * 3 * 64)}},
    {"ct_nn_attention_qkv", "hs 64, causal", f_attention_qkv, 1, {F32(3, 2, 70, 3 * 3 * 64)}},
    {"ct_nn_attention_qkv", "hs 64, bf16", f_attention_qkv, 0, {F32(3, 2, 70, 3 * 3 * 64)},
     .autocast = CT_BF16, .tol = 1e-2},
    {"ct_nn_attention_qkv", "hs 64, causal, bf16", f_attention_qkv, 1,
     {F32(3, 2, 70, 3 * 3 * 64)}, .autocast = CT_BF16, .tol = 1e-2},
};
/* clang-format on */

static int case_fails; /* checks failed in the current case */
/* --without: the ops of the failed cases whose message names the removed entry, and the
 * failures that do not */
static const char *named_ops[256]; /* more than the cases */
static int n_named, unrelated;

static void case_check(bool ok, const op_case *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* a failed check of case c: names the op, the variant and the backend */
static void case_check(bool ok, const op_case *c, const char *fmt, ...)
{
    if (ok)
        return;
    char msg[1024], missing[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL %s%s%s on %s: %s\n", c->op, *c->variant ? " " : "", c->variant,
            bkrow->name, msg);
    g_fail++;
    if (case_fails++ || !removed_entry)
        return; /* a case's first failure says why */
    snprintf(missing, sizeof missing, "%s is not implemented on device %s", removed_entry,
             under->name);
    if (strstr(msg, missing) && n_named < (int)CT_ARRAY_LEN(named_ops))
        named_ops[n_named++] = c->op;
    else
        unrelated++;
}

/* host copy of any f32 tensor */
static float *host_f32(const ct_tensor *t)
{
    ct_tensor *p = ct_nn_to_plain((ct_tensor *)t);
    int64_t n = ct_tensor_numel(t);
    float *h = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!p || ct_tensor_copy_to(p, h, (size_t)n * sizeof(float)) < 0) {
        fprintf(stderr, "copy to host: %s\n", ct_last_error());
        memset(h, 0xff, (size_t)n * sizeof(float)); /* NaN: fails every comparison */
    }
    ct_tensor_release(&p);
    return h;
}

/* |d - cpu| <= tol max(1, max |cpu|), elementwise over n floats */
static bool close_enough(const float *a, const float *b, int64_t n, double tol, double *worst,
                         double *big)
{
    *big = 1.0;
    *worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        *big = fmax(*big, fabs(a[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        *worst = isnan(e) ? INFINITY : fmax(*worst, e);
    }
    return *worst <= tol * *big;
}

static void compare(const op_case *c, double tol, const char *what, const ct_tensor *cpu,
                    const ct_tensor *d)
{
    if (!cpu || !d) {
        case_check(false, c, "%s missing (%s)", what, ct_last_error());
        return;
    }
    case_check(ct_tensor_device(d) == bkrow->device, c, "%s is not on the device", what);
    case_check(ct_tensor_numel(cpu) == ct_tensor_numel(d), c, "%s: %lld elements, not %lld", what,
               (long long)ct_tensor_numel(d), (long long)ct_tensor_numel(cpu));
    if (ct_tensor_numel(cpu) != ct_tensor_numel(d))
        return;
    float *a = host_f32(cpu), *b = host_f32(d);
    double worst, big;
    bool ok = close_enough(a, b, ct_tensor_numel(cpu), tol, &worst, &big);
    case_check(ok, c, "%s differs by %g (max |cpu| %g, tolerance %g)", what, worst, big, tol);
    free(a);
    free(b);
}

/* the case's forward under its autocast when on says so */
static ct_tensor *forward(const op_case *c, ct_tensor **in, bool autocast)
{
    if (autocast && ct_autocast_push(c->autocast) < 0)
        return NULL;
    ct_nn_manual_seed(5); /* dropout: the same draw on both */
    ct_tensor *y = c->fwd(in, c->mode);
    if (autocast)
        ct_autocast_pop();
    return y;
}

/* backward of y with upstream gradient g (on y's device), through sum(y * g): no tensor crosses
 * devices (the emulator's table is no device ct__backend_of knows) */
static int backward_with(ct_tensor *y, ct_tensor *g)
{
    ct_tensor *p = ct_nn_mul(y, g), *s = p ? ct_nn_sum(p) : NULL;
    int rc = s ? ct_tensor_backward(s, NULL) : -1;
    ct_tensor_release(&p);
    ct_tensor_release(&s);
    return rc;
}

static int n_lacking; /* cases not run: the backend lacks an entry they need */

/* The entry err names as missing ("E is not implemented on device D", CT__BK_CALL's) where the
 * backend's own table lacks it, else NULL (an entry --without removed is the backend's). */
static const char *lacked_entry(const char *err)
{
    char m[160];
    for (int e = 0; e < N_ENTRIES; e++) {
        if (entries[e].present)
            continue;
        snprintf(m, sizeof m, "%s is not implemented on device %s", entries[e].name, under->name);
        if (strstr(err, m))
            return entries[e].name;
    }
    return NULL;
}

/* The backend refuses c: the op itself must refuse it too, at its call, with an error naming
 * the device and what (the op, or the layout), or an entry the backend lacks that the op
 * reaches first */
static void check_refusal(const op_case *c, ct_tensor **din, const char *what, const char *why)
{
    ct_tensor *y = forward(c, din, c->autocast != 0);
    const char *e = ct_last_error();
    bool named = strstr(e, what) && strstr(e, under->name);
    case_check(y == NULL && (named || lacked_entry(e)), c, "refused (%s), but the op said: %s", why,
               y ? "ok" : e);
    ct_autograd_clear_tape();
    ct_tensor_release(&y);
    printf("  %-28s %-40s refused: %s\n", c->op, c->variant, why);
}

/* Runs case c on the CPU and on the counting table with the same inputs and upstream gradient;
 * returns the number of failed checks. */
static int run_case(const op_case *c)
{
    case_fails = 0;
    ct_tensor *in[MAX_IN] = {0}, *din[MAX_IN] = {0}, *y = NULL, *dy = NULL, *g = NULL, *dg = NULL;
    int n = 0;
    for (; n < MAX_IN && c->in[n].kind; n++) {
        in[n] = make_input(&c->in[n]);
    }
    if (c->prep)
        c->prep(in);
    for (int i = 0; i < n; i++) {
        din[i] = to_counted(in[i]);
        case_check(din[i] != NULL, c, "input %d to the device: %s", i, ct_last_error());
        if (!din[i])
            goto out;
        ct_tensor_set_requires_grad(in[i], c->in[i].grad);
        ct_tensor_set_requires_grad(din[i], c->in[i].grad);
    }
    double tol = c->tol ? c->tol : bkrow->tol;
    if (c->engine_device && bkrow->own_table) {
        printf("  %-28s %-40s not run: %s is no device of the engine\n", c->op, c->variant,
               bkrow->name);
        goto out;
    }
    const ct__op_desc *lowp = NULL;
    for (int k = 0; k < 2 && c->need[k].name; k++) {
        ct__op_desc need = c->need[k];
        need.loss = &c->loss;
        if (need.kind == CT__OP_LOWP)
            lowp = &c->need[k];
        if (ct__supports(&counted, &need) < 0) {
            char why[512];
            snprintf(why, sizeof why, "%s", ct_last_error());
            check_refusal(c, din, need.name, why);
            goto out;
        }
    }
    /* a blocked tensor (from the CPU, by ct_tensor_to) on a backend without blocked layouts (no
     * blocked_fmt: CUDA) is refused by its reorder, not read as plain */
    bool blocked = false;
    for (int i = 0; i < n; i++)
        blocked = blocked || c->in[i].blocked;
    if (blocked && !under->blocked_fmt) {
        check_refusal(c, din, "blocked", "a blocked layout on a backend without blocked layouts");
        goto out;
    }
    /* the CPU in the case's precision where it has it (else f32: within tol of it) */
    bool cpu_lowp = c->autocast && (!lowp || ct__supports(&ct__backend_cpu, lowp) == 0);
    int rc1 = -1, rc2 = -1;
    if ((y = forward(c, in, cpu_lowp))) {
        g = rand_t(ct_tensor_ndim(y), ct_tensor_shape(y));
        rc1 = backward_with(y, g);
    }
    /* g on dy's table: the counting one, but for ct_tensor_to's case (ct__backend_of's) */
    if ((dy = forward(c, din, c->autocast != 0)) && (dg = to_table(ct__bk(dy), g)))
        rc2 = backward_with(dy, dg);
    const char *lacks = y && (!dy || rc2 < 0) ? lacked_entry(ct_last_error()) : NULL;
    if (lacks) { /* as ggml's "not supported": the table says the backend lacks the kernel */
        printf("  %-28s %-40s not run: %s lacks %s\n", c->op, c->variant, under->name, lacks);
        n_lacking++;
        ct_autograd_clear_tape();
        goto out;
    }
    case_check(y && dy, c, "forward: %s", ct_last_error());
    if (!y || !dy) {
        ct_autograd_clear_tape();
        goto out;
    }
    compare(c, tol, "output", y, dy);
    case_check(rc1 == 0 && rc2 == 0, c, "backward: %d %d: %s", rc1, rc2, ct_last_error());
    for (int i = 0; i < n && rc1 == 0 && rc2 == 0; i++)
        if (c->in[i].grad) {
            char what[32];
            snprintf(what, sizeof what, "grad of input %d", i);
            compare(c, tol, what, ct_tensor_grad(in[i]), ct_tensor_grad(din[i]));
        }
    printf("  %-28s %-40s %s%s\n", c->op, c->variant, case_fails ? "FAILED" : "ok",
           c->autocast && !cpu_lowp ? " (cpu reference in f32: it has no bf16 here)" : "");
out:
    ct_tensor_release(&g);
    ct_tensor_release(&dg);
    ct_tensor_release(&y);
    ct_tensor_release(&dy);
    for (int i = 0; i < n; i++) {
        ct_tensor_release(&din[i]);
        ct_tensor_release(&in[i]);
    }
    return case_fails;
}

/* ---- cases of the entries only the optimizer and the tensor API reach ---- */

/* n floats of bk's device from host (NULL: zeros) */
static float *dev_f32(const ct__backend *bk, const float *host, int64_t n)
{
    void *p = NULL;
    size_t bytes = (size_t)n * sizeof(float);
    if (bk->alloc(&p, bytes) < 0)
        return NULL;
    if ((host ? bk->upload(p, host, bytes) : bk->zero(p, bytes)) < 0) {
        bk->free(p);
        return NULL;
    }
    return p;
}

/* appends bk's n floats at p to out (out[*len...]) and frees them */
static void take(const ct__backend *bk, float *p, int64_t n, float *out, int64_t *len)
{
    if (!p || bk->download(out + *len, p, (size_t)n * sizeof(float)) < 0)
        memset(out + *len, 0xff, (size_t)n * sizeof(float));
    *len += n;
    bk->free(p);
}

enum { OPT_N = 1000 + 13 }; /* several blocks and a tail */
static float opt_host[3][OPT_N];

/* Each runs one group of entries on bk and writes what they produced to out (at most
 * 4 OPT_N floats), *len their number; 0 or the entries' error. */
typedef int (*entry_case_fn)(const ct__backend *bk, float *out, int64_t *len);

/* two SGD steps, nesterov momentum and weight decay: the parameters and the momentum */
static int e_sgd(const ct__backend *bk, float *out, int64_t *len)
{
    float *p = dev_f32(bk, opt_host[0], OPT_N), *g = dev_f32(bk, opt_host[1], OPT_N);
    float *m = dev_f32(bk, NULL, OPT_N);
    ct__sgd_h h = {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true, .first = 1};
    int rc = p && g && m ? CT__BK_CALL(bk, sgd_step, p, g, m, OPT_N, &h) : -1;
    h.first = false;
    if (rc == 0)
        rc = CT__BK_CALL(bk, sgd_step, p, g, m, OPT_N, &h);
    take(bk, p, OPT_N, out, len);
    take(bk, m, OPT_N, out, len);
    bk->free(g);
    return rc;
}

/* two AdamW steps with amsgrad: the parameters and the three moments */
static int e_adam(const ct__backend *bk, float *out, int64_t *len)
{
    float *p = dev_f32(bk, opt_host[0], OPT_N), *g = dev_f32(bk, opt_host[1], OPT_N);
    float *m = dev_f32(bk, NULL, OPT_N), *v = dev_f32(bk, NULL, OPT_N);
    float *vmax = dev_f32(bk, NULL, OPT_N);
    ct__adam_h h = {.lr = 1e-2,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .eps = 1e-8,
                    .weight_decay = 1e-2,
                    .amsgrad = true,
                    .decoupled = true,
                    .step = 1};
    int rc =
        p && g && m && v && vmax ? CT__BK_CALL(bk, adam_step, p, g, m, v, vmax, OPT_N, &h) : -1;
    h.step = 2;
    if (rc == 0)
        rc = CT__BK_CALL(bk, adam_step, p, g, m, v, vmax, OPT_N, &h);
    take(bk, p, OPT_N, out, len);
    take(bk, m, OPT_N, out, len);
    take(bk, v, OPT_N, out, len);
    take(bk, vmax, OPT_N, out, len);
    bk->free(g);
    return rc;
}

/* clipping's L2 norm, then scale by 0.5, then the loss scaler's unscale by 0.25 of a gradient
 * with an inf at the end: the norm, the gradient and found_inf */
static int e_clip_unscale(const ct__backend *bk, float *out, int64_t *len)
{
    opt_host[2][OPT_N - 1] = INFINITY;
    float *g = dev_f32(bk, opt_host[1], OPT_N), *inf = dev_f32(bk, opt_host[2] + OPT_N - 1, 1);
    float *norm = dev_f32(bk, NULL, 1), *flag = dev_f32(bk, NULL, 1);
    int rc = g && inf && norm && flag ? CT__BK_CALL(bk, norm2, OPT_N, g, norm) : -1;
    if (rc == 0)
        rc = CT__BK_CALL(bk, scale, OPT_N, 0.5f, g);
    if (rc == 0)
        rc = CT__BK_CALL(bk, unscale, OPT_N, 0.25f, g, flag);
    if (rc == 0)
        rc = CT__BK_CALL(bk, unscale, 1, 0.25f, inf, flag);
    take(bk, norm, 1, out, len);
    take(bk, g, OPT_N, out, len);
    take(bk, flag, 1, out, len);
    bk->free(inf);
    opt_host[2][OPT_N - 1] = 0.5f;
    return rc;
}

/* Linear's bias gradient: y (33) += the column sums of x (29, 33); y */
static int e_col_sums(const ct__backend *bk, float *out, int64_t *len)
{
    float *x = dev_f32(bk, opt_host[0], 29 * 33), *y = dev_f32(bk, opt_host[1], 33);
    int rc = x && y ? CT__BK_CALL(bk, add_col_sums, 29, 33, x, y) : -1;
    take(bk, y, 33, out, len);
    bk->free(x);
    return rc;
}

/* batch norm's running statistics, momentum 0.1, unbias 45 / 44, over 7 channels: rm and rv */
static int e_bn_running(const ct__backend *bk, float *out, int64_t *len)
{
    float var[7];
    for (int i = 0; i < 7; i++)
        var[i] = 0.5f + fabsf(opt_host[1][i]);
    float *mean = dev_f32(bk, opt_host[0], 7), *v = dev_f32(bk, var, 7);
    float *rm = dev_f32(bk, opt_host[2], 7), *rv = dev_f32(bk, var + 1, 6);
    int rc = mean && v && rm && rv
                 ? CT__BK_CALL(bk, bn_update_running, 6, 0.1f, 45.0f / 44.0f, mean, v, rm, rv)
                 : -1;
    take(bk, rm, 6, out, len);
    take(bk, rv, 6, out, len);
    bk->free(mean);
    bk->free(v);
    return rc;
}

/* batch norm's backward in eval mode with the fused ReLU (dy masked where the output y <= 0),
 * x (3, 7, 45): dx, dscale, dshift */
static int e_bn_frozen(const ct__backend *bk, float *out, int64_t *len)
{
    enum { N = 3, C = 7, HW = 45 };
    ct__bn_p p = {.n = N, .c = C, .hw = HW, .h = 5, .w = 9, .relu = 1, .eps = 1e-5f};
    float var[C];
    for (int i = 0; i < C; i++)
        var[i] = 0.5f + fabsf(opt_host[2][i]);
    float *x = dev_f32(bk, opt_host[0], N * C * HW), *y = dev_f32(bk, opt_host[1], N * C * HW);
    float *dy = dev_f32(bk, opt_host[2], N * C * HW), *sc = dev_f32(bk, opt_host[1] + 100, C);
    float *mean = dev_f32(bk, opt_host[0] + 200, C), *v = dev_f32(bk, var, C);
    float *dx = dev_f32(bk, NULL, N * C * HW), *dsc = dev_f32(bk, NULL, C);
    float *dsh = dev_f32(bk, NULL, C);
    int rc = x && y && dy && sc && mean && v && dx && dsc && dsh
                 ? CT__BK_CALL(bk, bn_bwd_frozen, &p, x, y, dy, sc, mean, v, dx, dsc, dsh)
                 : -1;
    take(bk, dx, N * C * HW, out, len);
    take(bk, dsc, C, out, len);
    take(bk, dsh, C, out, len);
    float *in[] = {x, y, dy, sc, mean, v};
    for (size_t i = 0; i < CT_ARRAY_LEN(in); i++)
        bk->free(in[i]);
    return rc;
}

/* batch norm's num_batches_tracked += 1, twice, and ct_tensor_to_i64 of floats near integers:
 * the integers, as floats */
static int e_i64(const ct__backend *bk, float *out, int64_t *len)
{
    int64_t shape[1] = {OPT_N}, one[1] = {1};
    ct_tensor *x = ct__tensor_empty_on(bk, CT_F32, 1, shape);
    ct_tensor *cnt = ct__tensor_empty_on(bk, CT_I64, 1, one), *y = NULL;
    float h[OPT_N];
    for (int i = 0; i < OPT_N; i++)
        h[i] = opt_host[1][i] * 1000.0f;
    int64_t c0 = 41, r[OPT_N], c = 0;
    int rc = x && cnt ? ct_tensor_copy_from(x, h, sizeof h) : -1;
    if (rc == 0)
        rc = ct_tensor_copy_from(cnt, &c0, sizeof c0);
    if (rc == 0)
        rc = CT__BK_CALL(bk, add_i64, 1, 1, ct_tensor_data(cnt));
    if (rc == 0)
        rc = CT__BK_CALL(bk, add_i64, 1, 1, ct_tensor_data(cnt));
    if (rc == 0)
        rc = (y = ct_tensor_to_i64(x)) ? ct_tensor_copy_to(y, r, sizeof r) : -1;
    if (rc == 0)
        rc = ct_tensor_copy_to(cnt, &c, sizeof c);
    for (int i = 0; i < OPT_N; i++)
        out[(*len)++] = rc == 0 ? (float)r[i] : NAN;
    out[(*len)++] = rc == 0 ? (float)c : NAN;
    ct_tensor_release(&x);
    ct_tensor_release(&cnt);
    ct_tensor_release(&y);
    return rc;
}

typedef struct entry_case {
    const char *what; /* the public function that reaches the entries, and the entries */
    entry_case_fn run;
} entry_case;

static const entry_case entry_cases[] = {
    {"ct_optim_step (sgd_step)", e_sgd},
    {"ct_optim_step (adam_step)", e_adam},
    {"ct_optim_clip_grad_norm, ct_grad_scaler_unscale (norm2, scale, unscale)", e_clip_unscale},
    {"batch norm's num_batches_tracked, ct_tensor_to_i64 (add_i64, f32_to_i64)", e_i64},
    /* reached by ct_nn_linear and ct_nn_batch_norm too, but also here for a backend that has
     * these entries and not the others those ops need (cudaemu: no cuBLASLt, no cuDNN) */
    {"ct_nn_linear's bias gradient (add_col_sums)", e_col_sums},
    {"ct_nn_batch_norm's running statistics (bn_update_running)", e_bn_running},
    {"ct_nn_batch_norm_relu's eval backward (bn_bwd_frozen)", e_bn_frozen},
};

_Static_assert(CT_ARRAY_LEN(named_ops) >= CT_ARRAY_LEN(cases) + CT_ARRAY_LEN(entry_cases),
               "named_ops holds every case's op");

/* the same bits on every backend (update.h's operations; the sums in double) */
static int run_entry_case(const entry_case *e)
{
    static float a[4 * OPT_N + 2], b[4 * OPT_N + 2];
    int64_t na = 0, nb = 0;
    op_case c = {.op = e->what, .variant = ""};
    case_fails = 0;
    int rc1 = e->run(&ct__backend_cpu, a, &na), rc2 = e->run(&counted, b, &nb);
    case_check(rc1 == 0 && rc2 == 0, &c, "%d %d: %s", rc1, rc2, ct_last_error());
    double worst, big;
    bool ok = na == nb && close_enough(a, b, na, bkrow->tol, &worst, &big);
    case_check(ok, &c, "results differ by %g (max |cpu| %g)", worst, big);
    printf("  %-70s %s\n", e->what, case_fails ? "FAILED" : "ok");
    return case_fails;
}

/* ---- coverage ---- */

static void coverage_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* a coverage failure: a message of its own (ct_last_error is some case's) */
static void coverage_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL coverage: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    g_fail++;
}

/* the `ct_tensor *ct_nn_NAME(` declarations of header: appended to ops (n of them) */
static void header_ops(const char *header, char ops[][64], int *n, int cap)
{
    FILE *f = fopen(header, "r");
    if (!f) {
        coverage_fail("cannot read %s", header);
        return;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        if (strncmp(p, "ct_tensor *ct_nn_", 17))
            continue;
        p += strlen("ct_tensor *");
        size_t len = strcspn(p, "(");
        if (p[len] != '(' || len >= 64 || *n >= cap)
            continue;
        memcpy(ops[*n], p, len);
        ops[(*n)++][len] = 0;
    }
    fclose(f);
}

/* every public op of the headers has a case; every case's op is one of them */
static void check_op_coverage(int nheaders, char **headers)
{
    static char ops[256][64];
    int n = 0;
    for (int h = 0; h < nheaders; h++)
        header_ops(headers[h], ops, &n, 256);
    if (n == 0)
        coverage_fail("no public op found in the %d header(s)", nheaders);
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (size_t k = 0; k < CT_ARRAY_LEN(cases) && !found; k++)
            found = !strcmp(cases[k].op, ops[i]);
        if (!found)
            coverage_fail("public op %s has no case in test_backend_ops.c's cases[]", ops[i]);
    }
    for (size_t k = 0; k < CT_ARRAY_LEN(cases); k++) {
        bool found = false;
        for (int i = 0; i < n && !found; i++)
            found = !strcmp(cases[k].op, ops[i]);
        if (!found && !strncmp(cases[k].op, "ct_nn_", 6))
            coverage_fail("case %s %s: no such public op in the headers", cases[k].op,
                          cases[k].variant);
    }
    printf("%d public ops, each with a case\n", n);
}

/* every entry the backend has was called by some case */
static void check_entry_coverage(void)
{
    int reached = 0, present = 0;
    for (int e = 0; e < N_ENTRIES; e++) {
        if (!entries[e].present)
            continue;
        present++;
        if (calls[e] == 0)
            coverage_fail("entry %s of backend %s is called by no case: add a case for the op "
                          "that reaches it",
                          entries[e].name, bkrow->name);
        reached += calls[e] > 0;
    }
    printf("%d of the %d op entries in %s's table, %d of them called by the cases\n", present,
           N_ENTRIES, bkrow->name, reached);
}

/* ---- refusals and training, on the device as programs use it ---- */

static ct_tensor *targets(int64_t n, int64_t classes)
{
    return make_input(&(in_spec){IN_CLASSES, 1, {n}, false, classes});
}

/* two devices in one op */
static void test_mixed_devices(void)
{
    int64_t xs[2] = {4, 3}, ws[2] = {2, 3};
    ct_tensor *x = rand_t(2, xs), *w = rand_t(2, ws);
    ct_tensor *dx = ct_tensor_to(x, bkrow->device);
    ct_tensor *y = ct_nn_linear(dx, w, NULL);
    CHECK(y == NULL && strstr(ct_last_error(), "devices") && strstr(ct_last_error(), "cpu"),
          "mixed devices: %s", ct_last_error());
    ct_tensor_release(&y);
    ct_tensor_release(&dx);
    ct_tensor_release(&x);
    ct_tensor_release(&w);
}

/* A small CNN (conv, batch norm, ReLU, max pooling, dropout, Linear) built twice from one seed,
 * one copy moved to the device with ct_module_to; both train the same batches with an
 * optimizer whose state lives with the parameters. The losses of every step and the final
 * parameters (read back through the state dict) must agree; so must the optimizer's state
 * dict, whose tensors are host copies. */
static ct_module *small_cnn(void)
{
    ct_nn_manual_seed(11);
    ct_conv_opts pad1 = {.padding = {1, 1}};
    /* no bias before batch norm: its gradient is rounding noise, which Adam scales up to lr */
    return CT_SEQUENTIAL(ct_nn_conv2d_new(3, 16, 3, &pad1, false), ct_nn_batchnorm2d_new(16),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 2, 0), ct_nn_dropout_new(0.1f),
                         ct_nn_flatten_new(), ct_nn_linear_new(16 * 4 * 4, 10, true));
}

static ct_optim *optim_for(ct_module *m, bool adam)
{
    const ct_param_ref *refs;
    int n;
    if (ct_module_params(m, &refs, &n) < 0)
        return NULL;
    if (adam)
        return ct_optim_adamw_new(refs, n, &(ct_adam_opts){.lr = 1e-3, .amsgrad = true});
    return ct_optim_sgd_new(refs, n, &(ct_sgd_opts){.lr = 0.05, .momentum = 0.9, .nesterov = true});
}

/* forward, backward, the gradients' L2 norm clipped to 0.5 (*norm: before), optimizer step */
static double train_step(ct_module *m, ct_optim *o, ct_tensor *x, ct_tensor *y, double *norm)
{
    ct_optim_zero_grad(o);
    ct_tensor *logits = ct_module_forward(m, x);
    ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, y, 0.0f) : NULL;
    double v = NAN;
    *norm = NAN;
    if (loss && ct_tensor_backward(loss, NULL) == 0 &&
        ct_optim_clip_grad_norm(o, 0.5, 2.0, norm) == 0 && ct_optim_step(o) == 0)
        v = ct_tensor_item(loss);
    else
        fprintf(stderr, "train step: %s\n", ct_last_error());
    ct_tensor_release(&logits);
    ct_tensor_release(&loss);
    return v;
}

static void test_training(bool adam, int steps)
{
    const char *what = adam ? "AdamW (amsgrad)" : "SGD (nesterov)";
    double tol = bkrow->tol;
    ct_device dev = bkrow->device;
    ct_module *cpu = small_cnn(), *d = small_cnn();
    CHECK(ct_module_to(d, dev) == 0, "module_to: %s", ct_last_error());
    ct_optim *oc = optim_for(cpu, adam), *od = optim_for(d, adam);
    CHECK(oc && od, "optimizers: %s", ct_last_error());
    if (!oc || !od)
        goto out;
    double worst = 0, worst_norm = 0;
    for (int s = 0; s < steps; s++) {
        int64_t xs[4] = {8, 3, 8, 8};
        ct_tensor *x = rand_t(4, xs), *y = targets(8, 10);
        ct_tensor *dx = ct_tensor_to(x, dev), *dy = ct_tensor_to(y, dev);
        ct_nn_manual_seed(100 + s); /* dropout's draw */
        double nc = 0, nd = 0;
        double lc = train_step(cpu, oc, x, y, &nc);
        ct_nn_manual_seed(100 + s);
        double ld = train_step(d, od, dx, dy, &nd);
        worst_norm = fmax(worst_norm, isnan(nd - nc) ? INFINITY : fabs(nd - nc) / fmax(nc, 1));
        worst = fmax(worst, isnan(ld - lc) ? INFINITY : fabs(ld - lc));
        ct_tensor_release(&x), ct_tensor_release(&y), ct_tensor_release(&dx),
            ct_tensor_release(&dy);
    }
    CHECK(worst <= 10 * tol, "%s: %d steps: losses differ by up to %g", what, steps, worst);
    /* clipping by norm on the device: the backend's norm2 and scale */
    CHECK(worst_norm <= 10 * tol, "%s: %d steps: clipped norms differ by up to %g (relative)", what,
          steps, worst_norm);
    const ct_named_tensor *sc, *sd;
    int nc, nd;
    CHECK(ct_module_state_dict(cpu, &sc, &nc) == 0 && ct_module_state_dict(d, &sd, &nd) == 0 &&
              nc == nd,
          "state dicts: %s", ct_last_error());
    for (int i = 0; i < nc && nc == nd; i++) {
        if (ct_tensor_dtype(sc[i].tensor) != CT_F32)
            continue;
        int64_t n = ct_tensor_numel(sc[i].tensor);
        float *a = host_f32(sc[i].tensor), *b = host_f32(sd[i].tensor);
        double w, big;
        CHECK(close_enough(a, b, n, 10 * tol, &w, &big), "%s: %s after training differs by %g",
              what, sc[i].name, w);
        free(a);
        free(b);
    }
    const ct_state_entry *ec, *ed;
    int mc, md;
    CHECK(ct_optim_state_dict(oc, &ec, &mc) == 0 && ct_optim_state_dict(od, &ed, &md) == 0 &&
              mc == md,
          "optimizer state dicts: %s", ct_last_error());
    for (int i = 0; i < mc && mc == md; i++) {
        if (ec[i].kind != CT_STATE_TENSOR)
            continue;
        double w, big;
        CHECK(close_enough(ec[i].data, ed[i].data, ec[i].numel, 10 * tol, &w, &big),
              "%s: optimizer state %s differs by %g", what, ec[i].name, w);
    }
    printf("%s, %d steps on %s: losses within %.3g of the CPU's\n", what, steps, bkrow->name,
           worst);
out:
    ct_optim_destroy(&oc);
    ct_optim_destroy(&od);
    ct_module_destroy(&cpu);
    ct_module_destroy(&d);
}

/* ---- main ---- */

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s BACKEND [STEPS] [--without ENTRY OP] [--headers HEADER...]\n"
            "  BACKEND: checkdev, cuda or cudaemu; STEPS: of the training check (10)\n"
            "  --without: the run without the op entry ENTRY must fail naming OP\n"
            "  HEADER: public headers whose ct_nn_ ops must each have a case\n",
            argv0);
    return 2;
}

/* every case against the counting table; returns the failed checks */
static int run_all(void)
{
    int failed = 0;
    for (size_t k = 0; k < CT_ARRAY_LEN(cases); k++)
        failed += run_case(&cases[k]) > 0;
    for (size_t k = 0; k < CT_ARRAY_LEN(entry_cases); k++)
        failed += run_entry_case(&entry_cases[k]) > 0;
    return failed;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(argv[0]);
    for (size_t b = 0; b < CT_ARRAY_LEN(backends); b++)
        if (!strcmp(argv[1], backends[b].name))
            bkrow = &backends[b];
    const char *without_op = NULL;
    int steps = 10, a = 2;
    if (a < argc && argv[a][0] >= '0' && argv[a][0] <= '9')
        steps = atoi(argv[a++]);
    if (a + 2 < argc && !strcmp(argv[a], "--without")) {
        removed_entry = argv[a + 1];
        without_op = argv[a + 2];
        a += 3;
    }
    int nheaders = 0;
    if (a < argc && !strcmp(argv[a], "--headers"))
        nheaders = argc - ++a;
    else if (a < argc)
        return usage(argv[0]);
    if (!bkrow)
        return usage(argv[0]);
    if (bkrow->own_table) {
        if (!bkrow->table || !(under = bkrow->table())) {
            printf("no backend %s in this program (test_engine_backend_ops_emu has it)\n",
                   bkrow->name);
            return 77;
        }
    } else if (!(under = ct__backend_of(bkrow->device))) {
        printf("no device %s: %s\n", bkrow->name, ct_last_error());
        return bkrow->device == CT_CUDA ? 77 : 1;
    }
    if (make_counted(removed_entry) < 0) {
        fprintf(stderr, "--without %s: no op entry of ct__backend has that name\n", removed_entry);
        return 2;
    }
    for (int i = 0; i < OPT_N; i++) {
        opt_host[0][i] = fd_rand();
        opt_host[1][i] = fd_rand();
        opt_host[2][i] = fd_rand();
    }
    ct_nn_set_threads(1);

    if (removed_entry) {
        /* the cases against a table without removed_entry: the run must fail, naming the op
         * whose case reaches the entry and the entry, and fail for nothing else */
        printf("every case on %s without its entry %s:\n", bkrow->name, removed_entry);
        int failed = run_all();
        bool named = false;
        for (int i = 0; i < n_named; i++)
            named = named || !strcmp(named_ops[i], without_op);
        printf("%d case(s) failed, %d of them naming %s; %d other failure(s)\n", failed, n_named,
               removed_entry, unrelated);
        if (failed == 0 || !named || unrelated) {
            fprintf(stderr, "without %s, the test should fail with %s and %s only\n", removed_entry,
                    without_op, removed_entry);
            return 1;
        }
        printf("without %s the test fails, naming %s: ok\n", removed_entry, without_op);
        return 0;
    }

    printf("every case on %s against the cpu:\n", bkrow->name);
    run_all();
    if (nheaders)
        check_op_coverage(nheaders, argv + a);
    else
        printf("public ops not checked for cases: no --headers\n");
    check_entry_coverage();
    if (n_lacking)
        printf("%d case(s) not run: %s lacks an entry they need\n", n_lacking, bkrow->name);
    if (!bkrow->own_table) { /* a device of the engine */
        test_mixed_devices();
        test_training(false, steps);
        test_training(true, steps);
    }
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed on %s\n", g_fail, bkrow->name);
        return 1;
    }
    printf("every public op on %s matches the cpu: ok\n", bkrow->name);
    return 0;
}
