/* trainer/nn/attention.c — fused scaled dot-product attention as one differentiable op:
 * o = softmax(q k^T / sqrt(hs), causal when asked) v, with dropout on the probabilities in
 * training. The forward keeps only the rows' log-sum-exp (bh, t), so memory grows with T and not
 * T^2; backward recomputes the probabilities (the backends' attn_fwd / attn_bwd).
 *
 * Two forms of one op: ct_nn_attention takes q, k, v (..., T, hs), e.g. (B, H, T, hs);
 * ct_nn_attention_qkv takes them packed in one (B, T, 3C) tensor and gives (B, T, C), the
 * kernels reading and writing the heads in place (table.h's layout), where the first form
 * needs a slice and two permutes each way. Under autocast to bf16 or f16 the products' operands
 * are rounded to it (ct__attn_p.dt; inputs, output and softmax stay f32). Not here: the kernels
 * (trainer/cpu, trainer/cuda), multi-head projections (the modules). */
#include <math.h>

#include "ct/nn.h"
#include "trainer/nn/nn_impl.h"
#include "trainer/nn/op_util.h"

typedef struct attn_ctx {
    const ct__backend *bk;
    ct__attn_p p;
    float *lse;    /* device: (bh, t) */
    int64_t third; /* the qkv form: C, the offset of k (and v at 2C) in qkv; 0: three tensors */
} attn_ctx;

static void attn_ctx_free(void *ctx)
{
    attn_ctx *c = ctx;
    if (c)
        c->bk->free(c->lse);
    free(c);
}

/* Where backward writes t's gradient: t's gradient, *acc when it holds a sum already (the kernel
 * then adds to it), or scratch (slot) when t wants none. */
static float *grad_target(const ct__backend *bk, ct_tensor *t, int slot, bool *acc)
{
    *acc = false;
    if (!wants(t))
        return ct__scratch(bk, slot, ct_tensor_numel(t));
    float *g = ct__grad_dst(t, acc);
    if (!g)
        ct__error(CT_ENOMEM, "attention backward: out of memory for a gradient");
    return g;
}

static int attn_bw(ct__node *nd)
{
    attn_ctx *c = nd->ctx;
    const ct__backend *bk = c->bk;
    const float *q, *k, *v;
    float *dq, *dk, *dv;
    bool acc[3] = {false, false, false};
    if (c->third) { /* one tensor, one gradient: dq, dk, dv are its thirds */
        q = ct__f32(nd->in[0]), k = q + c->third, v = k + c->third;
        dq = grad_target(bk, nd->in[0], 0, &acc[0]);
        dk = dq ? dq + c->third : NULL, dv = dq ? dk + c->third : NULL;
        acc[1] = acc[2] = acc[0];
    } else {
        q = ct__f32(nd->in[0]), k = ct__f32(nd->in[1]), v = ct__f32(nd->in[2]);
        dq = grad_target(bk, nd->in[0], 0, &acc[0]), dk = grad_target(bk, nd->in[1], 1, &acc[1]);
        dv = grad_target(bk, nd->in[2], 2, &acc[2]);
    }
    float *delta = ct__scratch(bk, 3, c->p.bh * c->p.t);
    if (!dq || !dk || !dv || !delta)
        return ct__error(CT_ENOMEM, "attention backward: out of memory");
    /* the kernel writes all three or adds to all three: when only some hold a sum, the others
     * are zeroed and it adds */
    bool add = acc[0] || acc[1] || acc[2];
    float *d[3] = {dq, dk, dv};
    int64_t n = c->third ? 0 : c->p.bh * c->p.t * c->p.hs;
    for (int i = 0; i < 3 && add && n; i++) {
        int rc = acc[i] ? 0 : bk->fill(n, 0.0f, d[i]);
        if (rc < 0)
            return rc;
    }
    return K(attn_bwd, &c->p, q, k, v, ct__f32(nd->out), c->lse, ct__f32(nd->out->grad), delta, dq,
             dk, dv, add);
}

/* Both forms' forward: c (the layout set) is consumed; o of shape (ndim, shape). */
static ct_tensor *attn_run(attn_ctx *c, int nin, ct_tensor **in, const float *q, const float *k,
                           const float *v, int ndim, const int64_t *shape, float dropout,
                           bool training)
{
    const ct__backend *bk = c->bk;
    ct_tensor *o = NULL;
    c->p.scale = c->p.hs ? 1.0f / sqrtf((float)c->p.hs) : 1.0f;
    c->p.dropout = training ? dropout : 0.0f;
    /* autocast's precision, kept in the node for backward: bf16 or f16 products (table.h's
     * dt) */
    ct_dtype dt = ct_autocast_dtype();
    c->p.dt = dt == CT_BF16 || dt == CT_F16 ? (int)dt : CT_F32;
    if (c->p.dropout > 0.0f)
        c->p.seed = ct__rng_u64(); /* one draw of ct's generator, as ct_nn_dropout */
    if (bk->alloc((void **)&c->lse, (size_t)(c->p.bh * c->p.t) * sizeof(float) + 1) < 0 ||
        !(o = new_out(bk, ndim, shape)) || K(attn_fwd, &c->p, q, k, v, ct__f32(o), c->lse) < 0)
        goto err;
    if (ct__needs_grad(nin, in)) {
        attn_ctx *owned = c;
        c = NULL; /* the node's, even when recording fails */
        if (!ct__node_record("attention", attn_bw, o, nin, in, owned, attn_ctx_free)) {
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

static bool dropout_ok(float dropout)
{
    if (dropout >= 0.0f && dropout < 1.0f)
        return true;
    ct__error(CT_EINVAL, "attention: dropout = %g not in [0, 1)", dropout);
    return false;
}

static attn_ctx *ctx_new(const ct__backend *bk)
{
    attn_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        ct__error(CT_ENOMEM, "attention: out of memory");
    else
        c->bk = bk;
    return c;
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
    if (!dropout_ok(dropout))
        return NULL;
    if (q->fmt != CT__FMT_PLAIN || k->fmt != CT__FMT_PLAIN || v->fmt != CT__FMT_PLAIN) {
        ct__error(CT_EINVAL, "attention: q, k and v must be in the plain layout");
        return NULL;
    }
    ct_tensor *in[3] = {q, k, v};
    const ct__backend *bk = bk_of("attention", 3, in);
    attn_ctx *c = bk ? ctx_new(bk) : NULL;
    if (!c)
        return NULL;
    int64_t t = q->shape[q->ndim - 2], hs = q->shape[q->ndim - 1];
    c->p = (ct__attn_p){.bh = t && hs ? ct_tensor_numel(q) / (t * hs) : 0,
                        .t = t,
                        .hs = hs,
                        .heads = 1,
                        .in_rs = hs,
                        .out_rs = hs,
                        .causal = causal};
    return attn_run(c, 3, in, ct__f32(q), ct__f32(k), ct__f32(v), q->ndim, q->shape, dropout,
                    training);
}

ct_tensor *ct_nn_attention_qkv(ct_tensor *qkv, int n_head, bool causal, float dropout,
                               bool training)
{
    if (check_f32(qkv, "attention_qkv", "qkv", 3, 3) < 0 || !dropout_ok(dropout))
        return NULL;
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3;
    if (n_head < 1 || qkv->shape[2] % 3 != 0 || C % n_head != 0) {
        ct__error(CT_EINVAL,
                  "attention_qkv: qkv's last dimension %lld must be 3 C with C a multiple of "
                  "n_head %d",
                  (long long)qkv->shape[2], n_head);
        return NULL;
    }
    if (qkv->fmt != CT__FMT_PLAIN) {
        ct__error(CT_EINVAL, "attention_qkv: qkv must be in the plain layout");
        return NULL;
    }
    attn_ctx *c = ctx_new(ct__bk(qkv));
    if (!c)
        return NULL;
    c->third = C;
    c->p = (ct__attn_p){.bh = B * n_head,
                        .t = T,
                        .hs = C / n_head,
                        .heads = n_head,
                        .in_rs = 3 * C,
                        .out_rs = C,
                        .causal = causal};
    const float *q = ct__f32(qkv);
    int64_t shape[3] = {B, T, C};
    return attn_run(c, 1, &qkv, q, q + C, q + 2 * C, 3, shape, dropout, training);
}
