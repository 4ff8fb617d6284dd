/* trainer/nn/ops_transformer.c — the differentiable ops a transformer adds to ops.c's: layer
 * norm, GELU, the elementwise product and embedding lookup. Forward on the kernels of the
 * inputs' device (trainer/backend/backend.h); backward ACCUMULATES into each input that
 * requires a gradient, as in ops.c.
 *
 * Shapes: layer norm x (..., D) with weight, bias (D); embedding idx (...) i64 into weight
 * (V, D) giving (..., D); GELU and the product any shape. Not here: attention, batched matmul,
 * views (to come), the modules (module.c). */
#include "ct/nn.h"
#include "trainer/nn/op_util.h"

static const int64_t *i64_of(const ct_tensor *t)
{
    return (const int64_t *)t->storage->data + t->offset;
}

/* x itself when plain, else a plain copy (recorded); NULL on error */
static ct_tensor *plain(ct_tensor *x)
{
    return x->fmt == CT__FMT_PLAIN ? ct_tensor_retain(x) : ct_nn_to_plain(x);
}

/* Makes t's gradient a sum of nothing yet: zeroes it unless it holds one already (kernels that
 * ADD: dw, db, dtable). Returns the buffer, or NULL. */
static float *grad_zeroed(const ct__backend *bk, ct_tensor *t)
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

/* ---------------- layer norm ---------------- */

typedef struct ln_ctx {
    const ct__backend *bk;
    int64_t rows, d;
    float *stats; /* device: mean[rows], rstd[rows] */
} ln_ctx;

static void ln_ctx_free(void *ctx)
{
    ln_ctx *c = ctx;
    if (c)
        c->bk->free(c->stats);
    free(c);
}

static int ln_bw(ct__node *nd)
{
    ln_ctx *c = nd->ctx;
    const ct__backend *bk = c->bk;
    ct_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->in[2];
    float *dx = NULL, *dw = NULL, *db = NULL;
    bool acc = false;
    if (wants(x) && !(dx = ct__grad_dst(x, &acc)))
        return ct__error(CT_ENOMEM, "layer_norm backward: out of memory for a gradient");
    if (wants(w) && !(dw = grad_zeroed(bk, w)))
        return CT_ENOMEM;
    if (wants(b) && !(db = grad_zeroed(bk, b)))
        return CT_ENOMEM;
    return K(layernorm_bwd, c->rows, c->d, ct__f32(x), w ? ct__f32(w) : NULL, c->stats,
             c->stats + c->rows, ct__f32(nd->out->grad), dx, acc, dw, db);
}

ct_tensor *ct_nn_layer_norm(ct_tensor *x, ct_tensor *weight, ct_tensor *bias, float eps)
{
    if (check_f32(x, "layer_norm", "x", 1, CT_MAX_DIMS) < 0 ||
        (weight && check_f32(weight, "layer_norm", "weight", 1, 1) < 0) ||
        (bias && check_f32(bias, "layer_norm", "bias", 1, 1) < 0))
        return NULL;
    int64_t d = x->shape[x->ndim - 1];
    if ((weight && weight->shape[0] != d) || (bias && bias->shape[0] != d)) {
        ct__error(CT_ERANGE, "layer_norm: x's last dimension is %lld but weight / bias have %lld",
                  (long long)d, (long long)(weight ? weight->shape[0] : bias->shape[0]));
        return NULL;
    }
    ct_tensor *ts[3] = {x, weight, bias};
    const ct__backend *bk = bk_of("layer_norm", 3, ts);
    if (!bk)
        return NULL;
    ct_tensor *px = plain(x), *y = NULL;
    ln_ctx *c = calloc(1, sizeof(*c));
    if (!px || !c) {
        if (!c)
            ct__error(CT_ENOMEM, "layer_norm: out of memory");
        goto err;
    }
    c->bk = bk;
    c->d = d;
    c->rows = d ? ct_tensor_numel(px) / d : 0;
    if (bk->alloc((void **)&c->stats, 2 * (size_t)c->rows * sizeof(float) + 1) < 0 ||
        !(y = new_out(bk, px->ndim, px->shape)))
        goto err;
    if (K(layernorm_fwd, c->rows, d, eps, ct__f32(px), weight ? ct__f32(weight) : NULL,
          bias ? ct__f32(bias) : NULL, ct__f32(y), c->stats, c->stats + c->rows) < 0)
        goto err;
    ct_tensor *in[3] = {px, weight, bias};
    if (ct__needs_grad(3, in)) {
        ln_ctx *owned = c;
        c = NULL; /* the node's, even when recording fails */
        if (!ct__node_record("layer_norm", ln_bw, y, 3, in, owned, ln_ctx_free)) {
            ct__error(CT_ENOMEM, "layer_norm: out of memory recording the op");
            goto err;
        }
    }
    ln_ctx_free(c);
    ct_tensor_release(&px);
    return y;
err:
    ln_ctx_free(c);
    ct_tensor_release(&px);
    ct_tensor_release(&y);
    return NULL;
}

/* ---------------- GELU ---------------- */

static int gelu_bw(ct__node *nd)
{
    bool tanh_approx = *(bool *)nd->ctx;
    ct_tensor *x = nd->in[0];
    const ct__backend *bk = ct__bk(x);
    bool acc;
    float *dx = ct__grad_dst(x, &acc);
    if (!dx)
        return ct__error(CT_ENOMEM, "gelu backward: out of memory for a gradient");
    return K(gelu_bwd, tanh_approx, ct_tensor_numel(x), ct__f32(x), ct__f32(nd->out->grad), dx,
             acc);
}

ct_tensor *ct_nn_gelu(ct_tensor *x, bool tanh_approx)
{
    if (check_f32(x, "gelu", "x", 0, CT_MAX_DIMS) < 0)
        return NULL;
    const ct__backend *bk = ct__bk(x);
    ct_tensor *y = new_out(bk, x->ndim, x->shape);
    if (!y)
        return NULL;
    y->fmt = x->fmt; /* elementwise: any layout */
    if (K(gelu_fwd, tanh_approx, ct_tensor_numel(x), ct__f32(x), ct__f32(y)) < 0 ||
        record("gelu", gelu_bw, y, 1, &x, &tanh_approx, sizeof(tanh_approx), NULL) < 0)
        ct_tensor_release(&y);
    return y;
}

/* ---------------- elementwise product ---------------- */

static int mul_bw(ct__node *nd)
{
    ct_tensor *a = nd->in[0], *b = nd->in[1];
    const ct__backend *bk = ct__bk(a);
    const float *dy = ct__f32(nd->out->grad);
    int64_t n = ct_tensor_numel(a);
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        ct_tensor *t = nd->in[i], *other = nd->in[1 - i];
        if (!wants(t) || (i == 1 && a == b)) /* a * a: both terms land in the first pass */
            continue;
        bool acc;
        float *g = ct__grad_dst(t, &acc);
        if (!g)
            return ct__error(CT_ENOMEM, "mul backward: out of memory for a gradient");
        rc = K(mul, n, dy, ct__f32(other), g, acc);
        if (rc == 0 && a == b)
            rc = K(mul, n, dy, ct__f32(other), g, true);
    }
    return rc;
}

ct_tensor *ct_nn_mul(ct_tensor *a, ct_tensor *b)
{
    if (check_f32(a, "mul", "a", 0, CT_MAX_DIMS) < 0 ||
        check_f32(b, "mul", "b", 0, CT_MAX_DIMS) < 0)
        return NULL;
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim) != 0) {
        ct__error(CT_ERANGE, "mul: shapes differ (%lld vs %lld elements, %d vs %d dims)",
                  (long long)ct_tensor_numel(a), (long long)ct_tensor_numel(b), a->ndim, b->ndim);
        return NULL;
    }
    ct_tensor *in[2] = {a, b};
    const ct__backend *bk = bk_of("mul", 2, in);
    if (!bk)
        return NULL;
    bool same = a->fmt == b->fmt;
    ct_tensor *pa = same ? ct_tensor_retain(a) : plain(a);
    ct_tensor *pb = same ? ct_tensor_retain(b) : plain(b);
    ct_tensor *y = pa && pb ? new_out(bk, pa->ndim, pa->shape) : NULL;
    if (y) {
        y->fmt = pa->fmt;
        ct_tensor *pin[2] = {pa, pb};
        if (K(mul, ct_tensor_numel(pa), ct__f32(pa), ct__f32(pb), ct__f32(y), false) < 0 ||
            record("mul", mul_bw, y, 2, pin, NULL, 0, NULL) < 0)
            ct_tensor_release(&y);
    }
    ct_tensor_release(&pa);
    ct_tensor_release(&pb);
    return y;
}

/* ---------------- embedding ---------------- */

typedef struct emb_ctx {
    int64_t n, d, vocab, padding_idx;
    ct_tensor *idx; /* retained: backward scatters by it */
} emb_ctx;

static void emb_ctx_free(void *ctx)
{
    emb_ctx *c = ctx;
    if (c)
        ct_tensor_release(&c->idx);
    free(c);
}

static int emb_bw(ct__node *nd)
{
    emb_ctx *c = nd->ctx;
    ct_tensor *w = nd->in[0];
    const ct__backend *bk = ct__bk(w);
    float *dw = grad_zeroed(bk, w);
    if (!dw)
        return CT_ENOMEM;
    return K(embedding_bwd, c->n, c->d, c->vocab, i64_of(c->idx), c->padding_idx,
             ct__f32(nd->out->grad), dw);
}

ct_tensor *ct_nn_embedding(ct_tensor *idx, ct_tensor *weight, int64_t padding_idx)
{
    if (check_f32(weight, "embedding", "weight", 2, 2) < 0)
        return NULL;
    if (!idx || idx->dtype != CT_I64 || !ct_tensor_is_contiguous(idx) || idx->ndim >= CT_MAX_DIMS) {
        ct__error(CT_EINVAL, "embedding: idx must be contiguous i64 of at most %d dims",
                  CT_MAX_DIMS - 1);
        return NULL;
    }
    int64_t vocab = weight->shape[0], d = weight->shape[1];
    if (padding_idx < -1 || padding_idx >= vocab) {
        ct__error(CT_EINVAL, "embedding: padding_idx %lld is outside [0, %lld) (-1: none)",
                  (long long)padding_idx, (long long)vocab);
        return NULL;
    }
    ct_tensor *ts[2] = {idx, weight};
    const ct__backend *bk = bk_of("embedding", 2, ts);
    if (!bk)
        return NULL;
    int64_t shape[CT_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * idx->ndim);
    shape[idx->ndim] = d;
    ct_tensor *y = new_out(bk, idx->ndim + 1, shape);
    if (!y)
        return NULL;
    emb_ctx c = {ct_tensor_numel(idx), d, vocab, padding_idx, NULL};
    if (K(embedding_fwd, c.n, d, vocab, i64_of(idx), ct__f32(weight), ct__f32(y)) < 0)
        goto err;
    if (ct__needs_grad(1, &weight)) {
        emb_ctx *owned = malloc(sizeof(*owned));
        if (!owned) {
            ct__error(CT_ENOMEM, "embedding: out of memory");
            goto err;
        }
        *owned = c;
        owned->idx = ct_tensor_retain(idx);
        if (!ct__node_record("embedding", emb_bw, y, 1, &weight, owned, emb_ctx_free)) {
            ct__error(CT_ENOMEM, "embedding: out of memory recording the op");
            goto err;
        }
    }
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}
