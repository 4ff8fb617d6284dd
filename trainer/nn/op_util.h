/* trainer/nn/op_util.h — what every file of differentiable ops shares: argument checks, the
 * backend of an op's tensors, gradient destinations (the grad itself, or scratch added after),
 * and recording a tape node. Static inline, for the ops files of trainer/nn only; not API. */
#ifndef CT_NN_OP_UTIL_H
#define CT_NN_OP_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/backend/backend.h"
#include "trainer/tensor/tensor_impl.h"

static inline int check_f32(const ct_tensor *t, const char *op, const char *arg, int min_nd,
                            int max_nd)
{
    if (!t)
        return ct__error(CT_EINVAL, "%s: %s is NULL", op, arg);
    if (t->dtype != CT_F32)
        return ct__error(CT_EINVAL, "%s: %s must be f32 (is %s)", op, arg, ct_dtype_name(t->dtype));
    if (t->ndim < min_nd || t->ndim > max_nd)
        return ct__error(CT_EINVAL, "%s: %s has %d dims, expected %d..%d", op, arg, t->ndim, min_nd,
                         max_nd);
    if (!ct_tensor_is_contiguous(t))
        return ct__error(CT_EINVAL, "%s: %s must be contiguous", op, arg);
    return 0;
}

/* The backend of the op's tensors (NULLs skipped), which must share one device. */
static inline const ct__backend *bk_of(const char *op, int n, ct_tensor *const *ts)
{
    const ct__backend *bk = NULL;
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            continue;
        if (bk && ct__bk(ts[i]) != bk) {
            ct__error(CT_EINVAL, "%s: inputs on devices %s and %s (move them with ct_tensor_to)",
                      op, bk->name, ct__bk(ts[i])->name);
            return NULL;
        }
        bk = ct__bk(ts[i]);
    }
    return bk;
}

/* Calls a kernel of the backend bk, in scope */
#define K(fn, ...) CT__BK_CALL(bk, fn, __VA_ARGS__)

static inline bool wants(const ct_tensor *t)
{
    return t && t->requires_grad;
}

/* t's gradient holds a sum already (the next one is added to it) */
static inline bool accumulates(const ct_tensor *t)
{
    return t->grad && !t->grad_empty;
}

/* Destination for a kernel that overwrites: the grad itself, or scratch to be added after. */
typedef struct gslot {
    const ct__backend *bk;
    float *g, *dst;
    int64_t n;
    bool acc;
} gslot;

static inline int gbegin(gslot *s, ct_tensor *t, int slot)
{
    s->bk = ct__bk(t);
    s->n = ct_tensor_numel(t);
    s->g = ct__grad_dst(t, &s->acc);
    if (!s->g)
        return ct__error(CT_ENOMEM, "backward: out of memory for a gradient");
    s->dst = s->acc ? ct__scratch(s->bk, slot, s->n) : s->g;
    if (!s->dst)
        return ct__error(CT_ENOMEM, "backward: out of memory for scratch");
    return 0;
}

static inline int gend(gslot *s)
{
    return s->acc ? s->bk->axpy(s->n, 1.0f, s->dst, s->g) : 0;
}

static inline ct_tensor *new_out(const ct__backend *bk, int ndim, const int64_t *shape)
{
    return ct__tensor_empty_on(bk, CT_F32, ndim, shape);
}

static inline void *ctx_dup(const void *p, size_t n)
{
    void *c = malloc(n);
    if (c)
        memcpy(c, p, n);
    return c;
}

/* Records the node; on failure to allocate the ctx, nothing is recorded and the op fails. */
static inline int record(const char *name, int (*bw)(ct__node *), ct_tensor *out, int nin,
                         ct_tensor *const *in, void *ctx, size_t ctx_size, ct__node **node)
{
    if (node)
        *node = NULL;
    if (!ct__needs_grad(nin, in))
        return 0;
    void *c = ctx_size ? ctx_dup(ctx, ctx_size) : NULL;
    if (ctx_size && !c)
        return ct__error(CT_ENOMEM, "%s: out of memory", name);
    ct__node *n = ct__node_record(name, bw, out, nin, in, c, NULL);
    if (!n)
        return ct__error(CT_ENOMEM, "%s: out of memory recording the op", name);
    if (node)
        *node = n;
    return 0;
}

/* Makes t's gradient a sum of nothing yet: zeroes it unless it holds one already (kernels that
 * ADD: dw, db, dtable). Returns the buffer, or NULL. */
static inline float *grad_zeroed(const ct__backend *bk, ct_tensor *t)
{
    bool acc;
    float *g = ct__grad_dst(t, &acc);
    if (!g) {
        ct__error(CT_ENOMEM, "backward: out of memory for a gradient");
        return NULL;
    }
    if (!acc && bk->fill(ct_tensor_numel(t), 0.0f, g) < 0)
        return NULL;
    return g;
}

/* c (m,n) (+)= op(a) @ op(b) (the matmul entry's contract) in precision dt: CT_F32 the f32
 * kernel, CT_BF16 / CT_F16 the autocast one (matmul_lp). */
static inline int mm_dt(const ct__backend *bk, int dt, int64_t m, int64_t k, int64_t n,
                        const float *a, bool ta, const float *b, bool tb, float *c, bool acc)
{
    if (dt == CT_F32)
        return CT__BK_CALL(bk, matmul, m, k, n, a, ta, b, tb, c, acc);
    return CT__BK_CALL(bk, matmul_lp, dt, m, k, n, a, ta, b, tb, c, acc);
}

#endif
