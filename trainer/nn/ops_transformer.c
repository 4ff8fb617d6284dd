/* trainer/nn/ops_transformer.c — the differentiable ops a transformer adds to ops.c's: layer
 * norm, GELU, the elementwise product and embedding lookup. Forward on the kernels of the
 * inputs' device (trainer/backend/backend.h); backward ACCUMULATES into each input that
 * requires a gradient, as in ops.c.
 *
 * Shapes: layer norm x (..., D) with weight, bias (D); embedding idx (...) i64 into weight
 * (V, D) giving (..., D); GELU and the product any shape; permute and slice any shape (a
 * contiguous copy); bmm (B, M, K) @ (B, K, N); causal softmax (..., T, T). Not here: fused
 * attention (attention.c), the modules (module.c). */
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

/* d(a b) = dy b into a's gradient, dy a into b's; a * a gets both terms, the second added to
 * the first (ct__grad_dst says the gradient holds a sum by then) */
static int mul_bw(ct__node *nd)
{
    const ct__backend *bk = ct__bk(nd->in[0]);
    const float *dy = ct__f32(nd->out->grad);
    int64_t n = ct_tensor_numel(nd->in[0]);
    for (int i = 0; i < 2; i++) {
        ct_tensor *t = nd->in[i], *other = nd->in[1 - i];
        if (!wants(t))
            continue;
        bool acc;
        float *g = ct__grad_dst(t, &acc);
        if (!g)
            return ct__error(CT_ENOMEM, "mul backward: out of memory for a gradient");
        int rc = K(mul, n, dy, ct__f32(other), g, acc);
        if (rc < 0)
            return rc;
    }
    return 0;
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

/* ---------------- permute, slice (contiguous copies) ---------------- */

static void contiguous_strides(int nd, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

typedef struct perm_ctx {
    int perm[CT_MAX_DIMS];
} perm_ctx;

/* dx[perm-strided] (+)= dy (contiguous) */
static int permute_bw(ct__node *nd)
{
    perm_ctx *c = nd->ctx;
    ct_tensor *x = nd->in[0], *y = nd->out;
    const ct__backend *bk = ct__bk(x);
    int64_t xst[CT_MAX_DIMS];
    contiguous_strides(x->ndim, x->shape, xst);
    ct__strided_p p = {.ndim = y->ndim};
    memcpy(p.shape, y->shape, sizeof(int64_t) * y->ndim);
    contiguous_strides(y->ndim, y->shape, p.sstride);
    for (int i = 0; i < y->ndim; i++)
        p.dstride[i] = xst[c->perm[i]];
    bool acc;
    float *dx = ct__grad_dst(x, &acc);
    if (!dx)
        return ct__error(CT_ENOMEM, "permute backward: out of memory for a gradient");
    return K(strided_copy, &p, ct__f32(nd->out->grad), dx, acc);
}

ct_tensor *ct_nn_permute(ct_tensor *x, const int *perm)
{
    if (check_f32(x, "permute", "x", 1, CT_MAX_DIMS) < 0)
        return NULL;
    if (!perm) {
        ct__error(CT_EINVAL, "permute: perm is NULL");
        return NULL;
    }
    perm_ctx c;
    bool seen[CT_MAX_DIMS] = {false};
    for (int i = 0; i < x->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= x->ndim || seen[perm[i]]) {
            ct__error(CT_EINVAL, "permute: perm[%d] = %d is not a new dimension of %d", i, perm[i],
                      x->ndim);
            return NULL;
        }
        seen[perm[i]] = true;
        c.perm[i] = perm[i];
    }
    const ct__backend *bk = ct__bk(x);
    ct_tensor *px = plain(x), *y = NULL;
    if (!px)
        return NULL;
    ct__strided_p p = {.ndim = px->ndim};
    for (int i = 0; i < px->ndim; i++) {
        p.shape[i] = px->shape[perm[i]];
        p.sstride[i] = px->strides[perm[i]];
    }
    contiguous_strides(p.ndim, p.shape, p.dstride);
    if ((y = new_out(bk, p.ndim, p.shape)) &&
        (K(strided_copy, &p, ct__f32(px), ct__f32(y), false) < 0 ||
         record("permute", permute_bw, y, 1, &px, &c, sizeof c, NULL) < 0))
        ct_tensor_release(&y);
    ct_tensor_release(&px);
    return y;
}

ct_tensor *ct_nn_transpose(ct_tensor *x, int d0, int d1)
{
    if (check_f32(x, "transpose", "x", 1, CT_MAX_DIMS) < 0)
        return NULL;
    if (d0 < 0 || d0 >= x->ndim || d1 < 0 || d1 >= x->ndim) {
        ct__error(CT_EINVAL, "transpose: dimensions %d, %d of a tensor of %d", d0, d1, x->ndim);
        return NULL;
    }
    int perm[CT_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        perm[i] = i == d0 ? d1 : i == d1 ? d0 : i;
    return ct_nn_permute(x, perm);
}

typedef struct slice_ctx {
    int dim;
    int64_t start;
} slice_ctx;

/* dx = 0 outside the slice (unless it holds a sum), dx[slice] += dy */
static int slice_bw(ct__node *nd)
{
    slice_ctx *c = nd->ctx;
    ct_tensor *x = nd->in[0], *y = nd->out;
    const ct__backend *bk = ct__bk(x);
    float *dx = grad_zeroed(bk, x);
    if (!dx)
        return CT_ENOMEM;
    ct__strided_p p = {.ndim = y->ndim};
    memcpy(p.shape, y->shape, sizeof(int64_t) * y->ndim);
    contiguous_strides(y->ndim, y->shape, p.sstride);
    contiguous_strides(x->ndim, x->shape, p.dstride);
    return K(strided_copy, &p, ct__f32(nd->out->grad), dx + c->start * p.dstride[c->dim], true);
}

ct_tensor *ct_nn_slice(ct_tensor *x, int dim, int64_t start, int64_t len)
{
    if (check_f32(x, "slice", "x", 1, CT_MAX_DIMS) < 0)
        return NULL;
    if (dim < 0 || dim >= x->ndim || start < 0 || len < 0 || start + len > x->shape[dim]) {
        ct__error(CT_EINVAL, "slice: [%lld, %lld) of dimension %d is outside the tensor's (%s%lld)",
                  (long long)start, (long long)(start + len), dim,
                  dim >= 0 && dim < x->ndim ? "size " : "dims ",
                  (long long)(dim >= 0 && dim < x->ndim ? x->shape[dim] : x->ndim));
        return NULL;
    }
    const ct__backend *bk = ct__bk(x);
    ct_tensor *px = plain(x), *y = NULL;
    if (!px)
        return NULL;
    slice_ctx c = {dim, start};
    ct__strided_p p = {.ndim = px->ndim};
    memcpy(p.shape, px->shape, sizeof(int64_t) * px->ndim);
    p.shape[dim] = len;
    memcpy(p.sstride, px->strides, sizeof(int64_t) * px->ndim);
    contiguous_strides(p.ndim, p.shape, p.dstride);
    if ((y = new_out(bk, p.ndim, p.shape)) &&
        (K(strided_copy, &p, ct__f32(px) + start * px->strides[dim], ct__f32(y), false) < 0 ||
         record("slice", slice_bw, y, 1, &px, &c, sizeof c, NULL) < 0))
        ct_tensor_release(&y);
    ct_tensor_release(&px);
    return y;
}

/* ---------------- batched matmul ---------------- */

typedef struct bmm_ctx {
    int64_t batch, m, k, n;
    bool ta, tb;
    int dt; /* autocast precision of the forward (CT_F32: none) */
} bmm_ctx;

/* With dy (M, N) per batch: da = dy op(b)^T, stored as a is (transposed when ta); db = op(a)^T
 * dy, stored as b is. */
static int bmm_bw(ct__node *nd)
{
    bmm_ctx *c = nd->ctx;
    ct_tensor *a = nd->in[0], *b = nd->in[1];
    const ct__backend *bk = ct__bk(a);
    const float *dy = ct__f32(nd->out->grad), *pa = ct__f32(a), *pb = ct__f32(b);
    int64_t M = c->m, K_ = c->k, N = c->n, sa = M * K_, sb = K_ * N, sy = M * N;
    if (wants(a)) {
        bool acc;
        float *da = ct__grad_dst(a, &acc);
        if (!da)
            return ct__error(CT_ENOMEM, "bmm backward: out of memory for a gradient");
        for (int64_t i = 0; i < c->batch; i++) {
            int rc = c->ta ? mm_dt(bk, c->dt, K_, N, M, pb + i * sb, c->tb, dy + i * sy, true,
                                   da + i * sa, acc)
                           : mm_dt(bk, c->dt, M, N, K_, dy + i * sy, false, pb + i * sb, !c->tb,
                                   da + i * sa, acc);
            if (rc < 0)
                return rc;
        }
    }
    if (wants(b)) {
        bool acc;
        float *db = ct__grad_dst(b, &acc);
        if (!db)
            return ct__error(CT_ENOMEM, "bmm backward: out of memory for a gradient");
        for (int64_t i = 0; i < c->batch; i++) {
            int rc = c->tb ? mm_dt(bk, c->dt, N, M, K_, dy + i * sy, true, pa + i * sa, c->ta,
                                   db + i * sb, acc)
                           : mm_dt(bk, c->dt, K_, M, N, pa + i * sa, !c->ta, dy + i * sy, false,
                                   db + i * sb, acc);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

ct_tensor *ct_nn_bmm(ct_tensor *a, ct_tensor *b, bool trans_a, bool trans_b)
{
    if (check_f32(a, "bmm", "a", 3, 3) < 0 || check_f32(b, "bmm", "b", 3, 3) < 0)
        return NULL;
    ct_tensor *in[2] = {a, b};
    const ct__backend *bk = bk_of("bmm", 2, in);
    if (!bk)
        return NULL;
    bmm_ctx c = {.batch = a->shape[0],
                 .m = a->shape[trans_a ? 2 : 1],
                 .k = a->shape[trans_a ? 1 : 2],
                 .n = b->shape[trans_b ? 1 : 2],
                 .ta = trans_a,
                 .tb = trans_b,
                 .dt = ct_autocast_dtype()};
    int64_t kb = b->shape[trans_b ? 2 : 1];
    if (b->shape[0] != c.batch || kb != c.k) {
        ct__error(CT_ERANGE,
                  "bmm: a is (%lld, %lld, %lld)%s and b (%lld, %lld, %lld)%s: batch or inner "
                  "sizes differ",
                  (long long)a->shape[0], (long long)a->shape[1], (long long)a->shape[2],
                  trans_a ? " transposed" : "", (long long)b->shape[0], (long long)b->shape[1],
                  (long long)b->shape[2], trans_b ? " transposed" : "");
        return NULL;
    }
    if (c.dt != CT_F32 &&
        ct__supports(bk, &(ct__op_desc){.kind = CT__OP_LOWP, .name = "bmm", .dt = c.dt}) < 0)
        return NULL;
    int64_t shape[3] = {c.batch, c.m, c.n};
    ct_tensor *y = new_out(bk, 3, shape);
    if (!y)
        return NULL;
    for (int64_t i = 0; i < c.batch; i++)
        if (mm_dt(bk, c.dt, c.m, c.k, c.n, ct__f32(a) + i * c.m * c.k, trans_a,
                  ct__f32(b) + i * c.k * c.n, trans_b, ct__f32(y) + i * c.m * c.n, false) < 0)
            goto err;
    if (record("bmm", bmm_bw, y, 2, in, &c, sizeof c, NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

/* ---------------- causal softmax ---------------- */

static int softmax_causal_bw(ct__node *nd)
{
    ct_tensor *x = nd->in[0], *y = nd->out;
    const ct__backend *bk = ct__bk(x);
    int64_t t = x->shape[x->ndim - 1];
    gslot sx;
    int rc = gbegin(&sx, x, 0);
    if (rc == 0)
        rc = K(softmax_bwd, false, sx.n / t, t, ct__f32(y), ct__f32(y->grad), sx.dst);
    return rc < 0 ? rc : gend(&sx);
}

ct_tensor *ct_nn_softmax_causal(ct_tensor *x)
{
    if (check_f32(x, "softmax_causal", "x", 2, CT_MAX_DIMS) < 0)
        return NULL;
    int64_t t = x->shape[x->ndim - 1];
    if (x->shape[x->ndim - 2] != t) {
        ct__error(CT_ERANGE, "softmax_causal: x's last two dimensions (%lld, %lld) must be (T, T)",
                  (long long)x->shape[x->ndim - 2], (long long)t);
        return NULL;
    }
    const ct__backend *bk = ct__bk(x);
    ct_tensor *px = plain(x), *y = NULL;
    if (!px)
        return NULL;
    if ((y = new_out(bk, px->ndim, px->shape)) &&
        (K(softmax_causal_fwd, t ? ct_tensor_numel(px) / t : 0, t, ct__f32(px), ct__f32(y)) < 0 ||
         record("softmax_causal", softmax_causal_bw, y, 1, &px, NULL, 0, NULL) < 0))
        ct_tensor_release(&y);
    ct_tensor_release(&px);
    return y;
}
