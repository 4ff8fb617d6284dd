/* trainer/nn/attention.c — fused scaled dot-product attention as one differentiable op:
 * o = softmax(q k^T / sqrt(hs), causal when asked) v, with dropout on the probabilities in
 * training. The forward keeps only the rows' log-sum-exp (bh, t), so memory grows with T and not
 * T^2; backward recomputes the probabilities (the backends' attn_fwd / attn_bwd).
 *
 * Shapes: q, k, v, o (..., T, hs), e.g. (B, H, T, hs). Not here: the kernels (trainer/cpu,
 * trainer/cuda), multi-head projections (the modules). */
#include <math.h>

#include "ct/nn.h"
#include "trainer/nn/nn_impl.h"
#include "trainer/nn/op_util.h"

typedef struct attn_ctx {
    const ct__backend *bk;
    ct__attn_p p;
    float *lse; /* device: (bh, t) */
} attn_ctx;

static void attn_ctx_free(void *ctx)
{
    attn_ctx *c = ctx;
    if (c)
        c->bk->free(c->lse);
    free(c);
}

/* t's gradient zeroed unless it holds a sum (the kernel adds), or zeroed scratch when t wants
 * none (slot) */
static float *add_target(const ct__backend *bk, ct_tensor *t, int slot)
{
    int64_t n = ct_tensor_numel(t);
    if (wants(t))
        return grad_zeroed(bk, t);
    float *s = ct__scratch(bk, slot, n);
    return s && bk->fill(n, 0.0f, s) == 0 ? s : NULL;
}

static int attn_bw(ct__node *nd)
{
    attn_ctx *c = nd->ctx;
    const ct__backend *bk = c->bk;
    ct_tensor *q = nd->in[0], *k = nd->in[1], *v = nd->in[2];
    float *dq = add_target(bk, q, 0), *dk = add_target(bk, k, 1), *dv = add_target(bk, v, 2);
    float *delta = ct__scratch(bk, 3, c->p.bh * c->p.t);
    if (!dq || !dk || !dv || !delta)
        return ct__error(CT_ENOMEM, "attention backward: out of memory");
    return K(attn_bwd, &c->p, ct__f32(q), ct__f32(k), ct__f32(v), ct__f32(nd->out), c->lse,
             ct__f32(nd->out->grad), delta, dq, dk, dv);
}

ct_tensor *ct_nn_attention(ct_tensor *q, ct_tensor *k, ct_tensor *v, bool causal, float dropout,
                           bool training)
{
    if (check_f32(q, "attention", "q", 2, CT_MAX_DIMS) < 0 ||
        check_f32(k, "attention", "k", 2, CT_MAX_DIMS) < 0 ||
        check_f32(v, "attention", "v", 2, CT_MAX_DIMS) < 0)
        return NULL;
    if (k->ndim != q->ndim || v->ndim != q->ndim ||
        memcmp(k->shape, q->shape, sizeof(int64_t) * q->ndim) != 0 ||
        memcmp(v->shape, q->shape, sizeof(int64_t) * q->ndim) != 0) {
        ct__error(CT_ERANGE, "attention: q, k and v must have one shape (..., T, hs)");
        return NULL;
    }
    if (!(dropout >= 0.0f && dropout < 1.0f)) {
        ct__error(CT_EINVAL, "attention: dropout = %g not in [0, 1)", dropout);
        return NULL;
    }
    if (q->fmt != CT__FMT_PLAIN || k->fmt != CT__FMT_PLAIN || v->fmt != CT__FMT_PLAIN) {
        ct__error(CT_EINVAL, "attention: q, k and v must be in the plain layout");
        return NULL;
    }
    ct_tensor *in[3] = {q, k, v};
    const ct__backend *bk = bk_of("attention", 3, in);
    if (!bk)
        return NULL;
    int64_t t = q->shape[q->ndim - 2], hs = q->shape[q->ndim - 1];
    attn_ctx *c = calloc(1, sizeof(*c));
    ct_tensor *o = NULL;
    if (!c) {
        ct__error(CT_ENOMEM, "attention: out of memory");
        return NULL;
    }
    c->bk = bk;
    c->p = (ct__attn_p){.bh = t && hs ? ct_tensor_numel(q) / (t * hs) : 0,
                        .t = t,
                        .hs = hs,
                        .scale = hs ? 1.0f / sqrtf((float)hs) : 1.0f,
                        .dropout = training ? dropout : 0.0f,
                        .causal = causal};
    if (c->p.dropout > 0.0f)
        c->p.seed = ct__rng_u64(); /* one draw of ct's generator, as ct_nn_dropout */
    if (bk->alloc((void **)&c->lse, (size_t)(c->p.bh * t) * sizeof(float) + 1) < 0 ||
        !(o = new_out(bk, q->ndim, q->shape)) ||
        K(attn_fwd, &c->p, ct__f32(q), ct__f32(k), ct__f32(v), ct__f32(o), c->lse) < 0)
        goto err;
    if (ct__needs_grad(3, in)) {
        attn_ctx *owned = c;
        c = NULL; /* the node's, even when recording fails */
        if (!ct__node_record("attention", attn_bw, o, 3, in, owned, attn_ctx_free)) {
            ct__error(CT_ENOMEM, "attention: out of memory recording the op");
            goto err;
        }
    }
    attn_ctx_free(c);
    return o;
err:
    attn_ctx_free(c);
    ct_tensor_release(&o);
    return NULL;
}
