/* trainer/nn/ops.c — differentiable ops: forward on the kernels of the inputs' device (the
 * backend table of trainer/backend/backend.h), a tape node whose backward ACCUMULATES into each
 * input that requires a gradient, on the same device.
 *
 * Shapes: activations (N,C,H,W) or (N,F), PyTorch weight layouts. Inputs must be contiguous
 * f32 on one device. Not here: losses (loss.c), modules (module.c), kernels (the backends). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/nn.h"
#include "trainer/backend/backend.h"
#include "trainer/nn/nn_impl.h"
#include "trainer/nn/op_util.h"
#include "trainer/tensor/tensor_impl.h"

/* ---------------- layouts ---------------- */

static int to_plain_bw(ct__node *nd)
{
    ct_tensor *x = nd->in[0];
    const ct__backend *bk = ct__bk(x);
    gslot sx;
    int rc = 0;
    if ((rc = gbegin(&sx, x, 0)) < 0)
        return rc;
    if ((rc = K(reorder, x->shape[0], x->shape[1], x->shape[2], x->shape[3], ct__f32(nd->out->grad),
                CT__FMT_PLAIN, sx.dst, x->fmt)) < 0)
        return rc;
    return gend(&sx);
}

ct_tensor *ct_nn_to_plain(ct_tensor *x)
{
    if (!x) {
        ct__error(CT_EINVAL, "to_plain: NULL tensor");
        return NULL;
    }
    if (x->fmt == CT__FMT_PLAIN)
        return ct_tensor_retain(x);
    const ct__backend *bk = ct__bk(x);
    ct_tensor *y = new_out(bk, 4, x->shape);
    if (!y)
        return NULL;
    if (K(reorder, x->shape[0], x->shape[1], x->shape[2], x->shape[3], ct__f32(x), x->fmt,
          ct__f32(y), CT__FMT_PLAIN) < 0 ||
        record("to_plain", to_plain_bw, y, 1, &x, NULL, 0, NULL) < 0)
        ct_tensor_release(&y);
    return y;
}

/* ---------------- linear / matmul ---------------- */

typedef struct lin_ctx {
    int64_t n, ic, oc;
    int dt; /* autocast precision of the forward (CT_F32: none) */
} lin_ctx;

/* Linear's backward under autocast: both products in the forward's precision (as torch's
 * autocast, whose bf16 casts are on the tape), through the autocast matmul; db in f32. */
static int linear_bw_lp(ct__node *nd, const lin_ctx *c)
{
    ct_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->nin > 2 ? nd->in[2] : NULL;
    const ct__backend *bk = ct__bk(x);
    const float *dy = ct__f32(nd->out->grad);
    bool acc;
    float *g;
    int rc;
    if (wants(x)) { /* dx (n,ic) = dy (n,oc) @ w (oc,ic) */
        if (!(g = ct__grad_dst(x, &acc)))
            return ct__error(CT_ENOMEM, "linear backward: out of memory");
        if ((rc = mm_dt(bk, c->dt, c->n, c->oc, c->ic, dy, false, ct__f32(w), false, g, acc)) < 0)
            return rc;
    }
    if (wants(w)) { /* dw (oc,ic) = dy^T @ x (n,ic) */
        if (!(g = ct__grad_dst(w, &acc)))
            return ct__error(CT_ENOMEM, "linear backward: out of memory");
        if ((rc = mm_dt(bk, c->dt, c->oc, c->n, c->ic, dy, true, ct__f32(x), false, g, acc)) < 0)
            return rc;
    }
    if (b && wants(b)) {
        if (!(g = grad_zeroed(bk, b)))
            return CT_ENOMEM;
        if ((rc = K(add_col_sums, c->n, c->oc, dy, g)) < 0)
            return rc;
    }
    return 0;
}

/* w's gradient (and b's, where b wants one) from n rows: dw += dy^T x, db += dy's column sums;
 * x (n, ic) and dy (n, oc) f32 on w's device. Linear's backward calls it for its rows, or
 * wgrad_defer.c once for the rows of several micro-batches (nn_impl.h), through the pointer
 * the backward gives it. */
static int linear_wgrad(ct_tensor *w, ct_tensor *b, int64_t n, int64_t ic, int64_t oc,
                        const float *x, const float *dy)
{
    const ct__backend *bk = ct__bk(w);
    gslot sw, sb;
    int rc = 0;
    bool bw_ = wants(w), bb = b && wants(b);
    if (bw_ && accumulates(w) && (!bb || accumulates(b))) {
        /* adding to gradients that hold earlier batches' (gradient accumulation): dw += dy^T x
         * in one matmul with oneDNN's sum post-op, db += dy's column sums, in place; the
         * inner product below would need scratch and a pass to add it for each */
        bool acc;
        if ((rc = K(matmul, oc, n, ic, dy, true, x, false, ct__grad_dst(w, &acc), true)) < 0)
            return rc;
        if (bb && (rc = K(add_col_sums, n, oc, dy, ct__grad_dst(b, &acc))) < 0)
            return rc;
    } else if (bw_ || bb) {
        /* oneDNN computes both; a bias that needs no grad still gets a scratch target */
        float *dw, *db = NULL;
        if (bw_ && (rc = gbegin(&sw, w, 1)) < 0)
            return rc;
        if (bb && (rc = gbegin(&sb, b, 2)) < 0)
            return rc;
        dw = bw_ ? sw.dst : ct__scratch(bk, 1, oc * ic);
        if (b)
            db = bb ? sb.dst : ct__scratch(bk, 2, oc);
        if ((rc = K(ip_bwd_weights, n, ic, oc, x, dy, dw, db)) < 0 ||
            (bw_ && (rc = gend(&sw)) < 0) || (bb && (rc = gend(&sb)) < 0))
            return rc;
    }
    return 0;
}

static int linear_bw(ct__node *nd)
{
    lin_ctx *c = nd->ctx;
    ct_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->nin > 2 ? nd->in[2] : NULL;
    const ct__backend *bk = ct__bk(x);
    const float *dy = ct__f32(nd->out->grad);
    gslot sx;
    int rc = 0;
    if (c->dt != CT_F32)
        return linear_bw_lp(nd, c);
    if (wants(x)) {
        if ((rc = gbegin(&sx, x, 0)) < 0 ||
            (rc = K(ip_bwd_data, c->n, c->ic, c->oc, ct__f32(w), dy, sx.dst)) < 0 ||
            (rc = gend(&sx)) < 0)
            return rc;
    }
    if (!wants(w) && !(b && wants(b)))
        return 0;
    /* 1: kept for one product over every micro-batch's rows (a pipeline's stage runs) */
    if ((rc = ct__wgrad_defer(w, b, c->n, c->ic, c->oc, ct__f32(x), dy, linear_wgrad)) != 0)
        return rc < 0 ? rc : 0;
    return linear_wgrad(w, b, c->n, c->ic, c->oc, ct__f32(x), dy);
}

ct_tensor *ct_nn_linear(ct_tensor *x, ct_tensor *w, ct_tensor *b)
{
    ct_tensor *y = NULL;
    if (check_f32(x, "linear", "x", 2, 2) < 0 || check_f32(w, "linear", "weight", 2, 2) < 0 ||
        (b && check_f32(b, "linear", "bias", 1, 1) < 0))
        return NULL;
    ct_tensor *in[3] = {x, w, b};
    const ct__backend *bk = bk_of("linear", 3, in);
    if (!bk)
        return NULL;
    lin_ctx c = {x->shape[0], x->shape[1], w->shape[0], ct_autocast_dtype()};
    if (w->shape[1] != c.ic || (b && b->shape[0] != c.oc)) {
        ct__error(CT_ERANGE, "linear: x (%lld,%lld) vs weight (%lld,%lld)%s", (long long)c.n,
                  (long long)c.ic, (long long)w->shape[0], (long long)w->shape[1],
                  b ? " / bias" : "");
        return NULL;
    }
    if (c.dt != CT_F32 &&
        ct__supports(bk, &(ct__op_desc){.kind = CT__OP_LOWP, .name = "linear", .dt = c.dt}) < 0)
        return NULL;
    int64_t shape[2] = {c.n, c.oc};
    y = new_out(bk, 2, shape);
    if (!y)
        goto err;
    if (c.dt != CT_F32) {
        /* autocast: y = x @ w^T in c.dt, then + b in f32 as a rank-1 product ones (n) b (oc),
         * exact */
        float *ones = b ? ct__scratch(bk, 0, c.n) : NULL;
        if (b && !ones) {
            ct__error(CT_ENOMEM, "linear: out of memory");
            goto err;
        }
        if (mm_dt(bk, c.dt, c.n, c.ic, c.oc, ct__f32(x), false, ct__f32(w), true, ct__f32(y),
                  false) < 0 ||
            (b && (K(fill, c.n, 1.0f, ones) < 0 ||
                   K(matmul, c.n, 1, c.oc, ones, false, ct__f32(b), false, ct__f32(y), true) < 0)))
            goto err;
    } else if (K(ip_fwd, c.n, c.ic, c.oc, ct__f32(x), ct__f32(w), b ? ct__f32(b) : NULL,
                 ct__f32(y)) < 0)
        goto err;
    if (record("linear", linear_bw, y, b ? 3 : 2, in, &c, sizeof(c), NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

typedef struct mm_ctx {
    int64_t m, k, n;
    int dt; /* autocast precision of the forward (CT_F32: none) */
} mm_ctx;

static int matmul_bw(ct__node *nd)
{
    mm_ctx *c = nd->ctx;
    ct_tensor *a = nd->in[0], *b = nd->in[1];
    const ct__backend *bk = ct__bk(a);
    const float *dy = ct__f32(nd->out->grad);
    int rc = 0;
    bool acc;
    if (wants(a)) { /* da (m,k) = dy (m,n) @ b^T */
        float *g = ct__grad_dst(a, &acc);
        if (!g)
            return ct__error(CT_ENOMEM, "matmul backward: out of memory");
        if ((rc = mm_dt(bk, c->dt, c->m, c->n, c->k, dy, false, ct__f32(b), true, g, acc)) < 0)
            return rc;
    }
    if (wants(b)) { /* db (k,n) = a^T @ dy */
        float *g = ct__grad_dst(b, &acc);
        if (!g)
            return ct__error(CT_ENOMEM, "matmul backward: out of memory");
        if ((rc = mm_dt(bk, c->dt, c->k, c->m, c->n, ct__f32(a), true, dy, false, g, acc)) < 0)
            return rc;
    }
    return 0;
}

ct_tensor *ct_nn_matmul(ct_tensor *a, ct_tensor *b)
{
    ct_tensor *y = NULL;
    if (check_f32(a, "matmul", "a", 2, 2) < 0 || check_f32(b, "matmul", "b", 2, 2) < 0)
        return NULL;
    ct_tensor *in[2] = {a, b};
    const ct__backend *bk = bk_of("matmul", 2, in);
    if (!bk)
        return NULL;
    mm_ctx c = {a->shape[0], a->shape[1], b->shape[1], ct_autocast_dtype()};
    if (b->shape[0] != c.k) {
        ct__error(CT_ERANGE, "matmul: a (%lld,%lld) @ b (%lld,%lld)", (long long)c.m,
                  (long long)c.k, (long long)b->shape[0], (long long)c.n);
        return NULL;
    }
    if (c.dt != CT_F32 &&
        ct__supports(bk, &(ct__op_desc){.kind = CT__OP_LOWP, .name = "matmul", .dt = c.dt}) < 0)
        return NULL;
    int64_t shape[2] = {c.m, c.n};
    y = new_out(bk, 2, shape);
    if (!y)
        goto err;
    if (mm_dt(bk, c.dt, c.m, c.k, c.n, ct__f32(a), false, ct__f32(b), false, ct__f32(y), false) < 0)
        goto err;
    if (record("matmul", matmul_bw, y, 2, in, &c, sizeof(c), NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

/* ---------------- convolution ---------------- */

static int conv_bw(ct__node *nd)
{
    ct__conv_p *p = nd->ctx;
    ct_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->nin > 2 ? nd->in[2] : NULL;
    const ct__backend *bk = ct__bk(x);
    const float *dy = ct__f32(nd->out->grad);
    gslot sx, sw, sb;
    int rc = 0;
    if (wants(x)) {
        if ((rc = gbegin(&sx, x, 0)) < 0 ||
            (rc = K(conv_bwd_data, p, ct__f32(w), dy, sx.dst)) < 0 || (rc = gend(&sx)) < 0)
            return rc;
    }
    if (wants(w) || wants(b)) {
        bool bw_ = wants(w), bb = b && wants(b);
        if (bw_ && (rc = gbegin(&sw, w, 1)) < 0)
            return rc;
        if (bb && (rc = gbegin(&sb, b, 2)) < 0)
            return rc;
        float *dw = bw_ ? sw.dst : ct__scratch(bk, 1, ct_tensor_numel(w));
        float *db = b ? (bb ? sb.dst : ct__scratch(bk, 2, p->oc)) : NULL;
        if ((rc = K(conv_bwd_weights, p, ct__f32(x), dy, dw, db)) < 0 ||
            (bw_ && (rc = gend(&sw)) < 0) || (bb && (rc = gend(&sb)) < 0))
            return rc;
    }
    return 0;
}

static ct_tensor *conv_common(const char *op, ct_tensor *x, ct_tensor *w, ct_tensor *b,
                              const ct_conv_opts *o, bool transposed)
{
    ct_tensor *y = NULL;
    ct_conv_opts d = {{0}};
    if (!o)
        o = &d;
    if (check_f32(x, op, "x", 4, 4) < 0 || check_f32(w, op, "weight", 4, 4) < 0 ||
        (b && check_f32(b, op, "bias", 1, 1) < 0))
        return NULL;
    ct_tensor *in[3] = {x, w, b};
    const ct__backend *bk = bk_of(op, 3, in);
    if (!bk)
        return NULL;
    ct__conv_p p = {0};
    p.n = x->shape[0];
    p.ic = x->shape[1];
    p.ih = x->shape[2];
    p.iw = x->shape[3];
    p.oc = transposed ? w->shape[1] : w->shape[0];
    int64_t wic = transposed ? w->shape[0] : w->shape[1];
    p.kh = w->shape[2];
    p.kw = w->shape[3];
    p.sh = o->stride[0] > 0 ? o->stride[0] : 1;
    p.sw = o->stride[1] > 0 ? o->stride[1] : 1;
    p.ph = o->padding[0];
    p.pw = o->padding[1];
    p.dh = o->dilation[0] > 0 ? o->dilation[0] : 1;
    p.dw = o->dilation[1] > 0 ? o->dilation[1] : 1;
    p.bias = b != NULL;
    p.transposed = transposed;
    p.dt = ct_autocast_dtype();
    /* outputs with channels in whole blocks stay in oneDNN's blocked layout for this CPU */
    int blk = bk->blocked_fmt ? bk->blocked_fmt() : CT__FMT_PLAIN;
    p.xfmt = x->fmt;
    p.yfmt = (!transposed && blk != CT__FMT_PLAIN && p.oc % blk == 0) ? blk : CT__FMT_PLAIN;
    if (wic != p.ic || (b && b->shape[0] != p.oc)) {
        ct__error(CT_ERANGE, "%s: x has %lld channels, weight expects %lld (bias %lld, out %lld)",
                  op, (long long)p.ic, (long long)wic, b ? (long long)b->shape[0] : -1LL,
                  (long long)p.oc);
        return NULL;
    }
    int64_t ekh = (p.kh - 1) * p.dh + 1, ekw = (p.kw - 1) * p.dw + 1;
    if (!transposed) {
        p.oh = (p.ih + 2 * p.ph - ekh) / p.sh + 1;
        p.ow = (p.iw + 2 * p.pw - ekw) / p.sw + 1;
    } else {
        p.oh = (p.ih - 1) * p.sh - 2 * p.ph + ekh + o->output_padding[0];
        p.ow = (p.iw - 1) * p.sw - 2 * p.pw + ekw + o->output_padding[1];
    }
    if (p.oh <= 0 || p.ow <= 0 || p.ph < 0 || p.pw < 0) {
        ct__error(CT_ERANGE,
                  "%s: input %lldx%lld with kernel %lldx%lld, padding %lld gives no "
                  "output",
                  op, (long long)p.ih, (long long)p.iw, (long long)p.kh, (long long)p.kw,
                  (long long)p.ph);
        return NULL;
    }
    if (p.dt != CT_F32 &&
        ct__supports(bk, &(ct__op_desc){.kind = CT__OP_LOWP, .name = op, .dt = p.dt}) < 0)
        return NULL;
    int64_t shape[4] = {p.n, p.oc, p.oh, p.ow};
    y = new_out(bk, 4, shape);
    if (!y)
        goto err;
    y->fmt = p.yfmt;
    if (K(conv_fwd, &p, ct__f32(x), ct__f32(w), b ? ct__f32(b) : NULL, ct__f32(y)) < 0)
        goto err;
    if (record(op, conv_bw, y, b ? 3 : 2, in, &p, sizeof(p), NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

ct_tensor *ct_nn_conv2d(ct_tensor *x, ct_tensor *w, ct_tensor *b, const ct_conv_opts *o)
{
    return conv_common("conv2d", x, w, b, o, false);
}

ct_tensor *ct_nn_conv_transpose2d(ct_tensor *x, ct_tensor *w, ct_tensor *b, const ct_conv_opts *o)
{
    return conv_common("conv_transpose2d", x, w, b, o, true);
}

/* ---------------- batch norm ---------------- */

typedef struct bn_ctx {
    ct__bn_p p;
    bool training;
    const ct__backend *bk;
    float *stats; /* device: mean[c], var[c] (batch stats in training, running in eval) */
    void *ws;     /* device: the fused ReLU's workspace (training), or NULL */
} bn_ctx;

static void bn_ctx_free(void *ctx)
{
    bn_ctx *c = ctx;
    if (c) {
        c->bk->free(c->stats);
        c->bk->free(c->ws);
    }
    free(c);
}

/* c floats of value v on bk's device (scratch slot) */
static float *bn_ones(const ct__backend *bk, int64_t c, int slot, float v)
{
    float *p = ct__scratch(bk, slot, c);
    return p && bk->fill(c, v, p) == 0 ? p : NULL;
}

static int bn_bw(ct__node *nd)
{
    bn_ctx *c = nd->ctx;
    const ct__bn_p *p = &c->p;
    const ct__backend *bk = c->bk;
    const float *mean = c->stats, *var = mean + p->c;
    ct_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->in[2];
    const float *dy = ct__f32(nd->out->grad);
    int rc = 0;
    int64_t C = p->c;
    /* scratch slots: 0 dx, 1 dscale, 2 dshift, 3 ones (scale when weight is NULL) */
    const float *scale = w ? ct__f32(w) : bn_ones(bk, C, 3, 1.0f);
    gslot sx = {0}, sw = {0}, sb = {0};
    bool wx = wants(x), ww = wants(w), wb = wants(b);
    if (!scale)
        return ct__error(CT_ENOMEM, "batch_norm backward: out of memory");
    if (wx && (rc = gbegin(&sx, x, 0)) < 0)
        return rc;
    if (ww && (rc = gbegin(&sw, w, 1)) < 0)
        return rc;
    if (wb && (rc = gbegin(&sb, b, 2)) < 0)
        return rc;
    if (c->training) {
        float *dx = wx ? sx.dst : ct__scratch(bk, 0, ct_tensor_numel(x));
        float *dsc = ww ? sw.dst : ct__scratch(bk, 1, C);
        float *dsh = wb ? sb.dst : ct__scratch(bk, 2, C);
        rc = K(bn_bwd, p, ct__f32(x), ct__f32(nd->out), dy, scale, mean, var, c->ws, dx, dsc, dsh);
    } else { /* frozen statistics: y = (x - rm) * rstd * w + b (then relu) */
        rc = K(bn_bwd_frozen, p, ct__f32(x), ct__f32(nd->out), dy, scale, mean, var,
               wx ? sx.dst : NULL, ww ? sw.dst : NULL, wb ? sb.dst : NULL);
    }
    if (rc < 0 || (wx && (rc = gend(&sx)) < 0) || (ww && (rc = gend(&sw)) < 0) ||
        (wb && (rc = gend(&sb)) < 0))
        return rc;
    return 0;
}

static ct_tensor *bn_common(ct_tensor *x, ct_tensor *weight, ct_tensor *bias,
                            ct_tensor *running_mean, ct_tensor *running_var, bool training,
                            float momentum, float eps, bool relu);

ct_tensor *ct_nn_batch_norm(ct_tensor *x, ct_tensor *weight, ct_tensor *bias,
                            ct_tensor *running_mean, ct_tensor *running_var, bool training,
                            float momentum, float eps)
{
    return bn_common(x, weight, bias, running_mean, running_var, training, momentum, eps, false);
}

ct_tensor *ct_nn_batch_norm_relu(ct_tensor *x, ct_tensor *weight, ct_tensor *bias,
                                 ct_tensor *running_mean, ct_tensor *running_var, bool training,
                                 float momentum, float eps)
{
    return bn_common(x, weight, bias, running_mean, running_var, training, momentum, eps, true);
}

static ct_tensor *bn_common(ct_tensor *x, ct_tensor *weight, ct_tensor *bias,
                            ct_tensor *running_mean, ct_tensor *running_var, bool training,
                            float momentum, float eps, bool relu)
{
    ct_tensor *y = NULL;
    bn_ctx *c = NULL;
    if (check_f32(x, "batch_norm", "x", 2, 4) < 0 || x->ndim == 3)
        goto bad;
    ct_tensor *gin[3] = {x, weight, bias};
    if (!training && x->fmt != CT__FMT_PLAIN && ct__needs_grad(3, gin)) {
        /* the frozen-statistics backward takes plain data */
        ct_tensor *xp = ct_nn_to_plain(x);
        y = xp ? bn_common(xp, weight, bias, running_mean, running_var, training, momentum, eps,
                           relu)
               : NULL;
        ct_tensor_release(&xp);
        return y;
    }
    int64_t C = x->shape[1];
    ct_tensor *vecs[4] = {weight, bias, running_mean, running_var};
    const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++) {
        if (!vecs[i])
            continue;
        if (check_f32(vecs[i], "batch_norm", names[i], 1, 1) < 0)
            return NULL;
        if (vecs[i]->shape[0] != C) {
            ct__error(CT_ERANGE, "batch_norm: %s has %lld elements, x has %lld channels", names[i],
                      (long long)vecs[i]->shape[0], (long long)C);
            return NULL;
        }
    }
    ct_tensor *all[5] = {x, weight, bias, running_mean, running_var};
    const ct__backend *bk = bk_of("batch_norm", 5, all);
    if (!bk)
        return NULL;
    if (!training && (!running_mean || !running_var)) {
        ct__error(CT_EINVAL, "batch_norm: eval mode needs running_mean and running_var");
        return NULL;
    }
    ct__bn_p bp = {.n = x->shape[0],
                   .c = C,
                   .hw = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1,
                   .h = x->ndim == 4 ? x->shape[2] : 1,
                   .w = x->ndim == 4 ? x->shape[3] : 1,
                   .fmt = x->fmt,
                   .relu = relu,
                   .eps = eps};
    size_t ws = training && relu && bk->bn_ws_bytes ? bk->bn_ws_bytes(&bp) : 0;
    if (!(c = calloc(1, sizeof(*c)))) {
        ct__error(CT_ENOMEM, "batch_norm: out of memory");
        return NULL;
    }
    c->p = bp;
    c->training = training;
    c->bk = bk;
    if (bk->alloc((void **)&c->stats, 2 * (size_t)C * sizeof(float)) < 0 ||
        (ws && bk->alloc(&c->ws, ws) < 0))
        goto err;
    float *mean = c->stats, *var = mean + C;
    y = new_out(bk, x->ndim, x->shape);
    if (!y)
        goto err;
    y->fmt = x->fmt;
    const float *scale = weight ? ct__f32(weight) : bn_ones(bk, C, 0, 1.0f);
    const float *shift = bias ? ct__f32(bias) : bn_ones(bk, C, 1, 0.0f);
    if (!scale || !shift) {
        ct__error(CT_ENOMEM, "batch_norm: out of memory");
        goto err;
    }
    if (training) {
        int64_t cnt = bp.n * bp.hw;
        if (cnt <= 1) {
            ct__error(CT_EINVAL, "batch_norm: training needs more than one value per channel");
            goto err;
        }
        if (K(bn_fwd_train, &c->p, ct__f32(x), scale, shift, ct__f32(y), mean, var, c->ws) < 0)
            goto err;
        if (running_mean && running_var &&
            K(bn_update_running, C, momentum, (float)cnt / (float)(cnt - 1), mean, var,
              ct__f32(running_mean), ct__f32(running_var)) < 0)
            goto err;
    } else {
        size_t bytes = (size_t)C * sizeof(float);
        if (bk->copy(mean, ct__f32(running_mean), bytes) < 0 ||
            bk->copy(var, ct__f32(running_var), bytes) < 0 ||
            K(bn_fwd_infer, &c->p, ct__f32(x), scale, shift, mean, var, ct__f32(y)) < 0)
            goto err;
    }
    ct_tensor *in[3] = {x, weight, bias};
    if (ct__needs_grad(3, in)) {
        bn_ctx *owned = c;
        c = NULL; /* owned by the node, even when recording fails */
        if (!ct__node_record("batch_norm", bn_bw, y, 3, in, owned, bn_ctx_free)) {
            ct__error(CT_ENOMEM, "batch_norm: out of memory recording the op");
            goto err;
        }
    }
    bn_ctx_free(c);
    return y;
bad:
    if (x && x->ndim == 3)
        ct__error(CT_EINVAL, "batch_norm: x must be (N,C) or (N,C,H,W)");
    return NULL;
err:
    bn_ctx_free(c);
    ct_tensor_release(&y);
    return NULL;
}

/* ---------------- pooling ---------------- */

typedef struct pool_ctx {
    ct__pool_p p;
    const ct__backend *bk;
    void *ws; /* device: max pooling's workspace for backward, or NULL */
} pool_ctx;

static void pool_ctx_free(void *ctx)
{
    pool_ctx *c = ctx;
    if (c)
        c->bk->free(c->ws);
    free(c);
}

static int pool_bw(ct__node *nd)
{
    pool_ctx *c = nd->ctx;
    const ct__backend *bk = c->bk;
    ct_tensor *x = nd->in[0];
    gslot sx;
    int rc = 0;
    if ((rc = gbegin(&sx, x, 0)) < 0 || (rc = K(pool_bwd, &c->p, ct__f32(x), ct__f32(nd->out),
                                                ct__f32(nd->out->grad), c->ws, sx.dst)) < 0)
        return rc;
    return gend(&sx);
}

static ct_tensor *pool_common(const char *op, ct_tensor *x, int k, int s, int pad, int alg)
{
    ct_tensor *y = NULL;
    pool_ctx *c = NULL;
    if (check_f32(x, op, "x", 4, 4) < 0)
        return NULL;
    const ct__backend *bk = ct__bk(x);
    if (s <= 0)
        s = k;
    ct__pool_p p = {.n = x->shape[0],
                    .c = x->shape[1],
                    .ih = x->shape[2],
                    .iw = x->shape[3],
                    .kh = k,
                    .kw = k,
                    .sh = s,
                    .sw = s,
                    .ph = pad,
                    .pw = pad,
                    .alg = alg,
                    .fmt = x->fmt};
    if (k <= 0 || pad < 0 || 2 * pad > k) {
        ct__error(CT_EINVAL, "%s: kernel %d / padding %d invalid (padding <= kernel/2)", op, k,
                  pad);
        return NULL;
    }
    p.oh = (p.ih + 2 * pad - k) / s + 1;
    p.ow = (p.iw + 2 * pad - k) / s + 1;
    if (p.oh <= 0 || p.ow <= 0) {
        ct__error(CT_ERANGE, "%s: input %lldx%lld smaller than kernel %d", op, (long long)p.ih,
                  (long long)p.iw, k);
        return NULL;
    }
    bool grad = ct__needs_grad(1, &x);
    size_t ws = grad && bk->pool_ws_bytes ? bk->pool_ws_bytes(&p) : 0;
    if (!(c = calloc(1, sizeof(*c)))) {
        ct__error(CT_ENOMEM, "%s: out of memory", op);
        return NULL;
    }
    c->p = p;
    c->bk = bk;
    if (ws && bk->alloc(&c->ws, ws) < 0)
        goto err;
    int64_t shape[4] = {p.n, p.c, p.oh, p.ow};
    y = new_out(bk, 4, shape);
    if (!y)
        goto err;
    y->fmt = x->fmt;
    if (K(pool_fwd, &p, ct__f32(x), ct__f32(y), c->ws, grad) < 0)
        goto err;
    if (grad) {
        ct__node *nd = ct__node_record(op, pool_bw, y, 1, &x, c, pool_ctx_free);
        c = NULL;
        if (!nd) {
            ct__error(CT_ENOMEM, "%s: out of memory recording the op", op);
            goto err;
        }
    }
    pool_ctx_free(c);
    return y;
err:
    pool_ctx_free(c);
    ct_tensor_release(&y);
    return NULL;
}

ct_tensor *ct_nn_max_pool2d(ct_tensor *x, int kernel, int stride, int padding)
{
    return pool_common("max_pool2d", x, kernel, stride, padding, CT__POOL_MAX);
}

ct_tensor *ct_nn_avg_pool2d(ct_tensor *x, int kernel, int stride, int padding,
                            bool count_include_pad)
{
    return pool_common("avg_pool2d", x, kernel, stride, padding,
                       count_include_pad ? CT__POOL_AVG_INCL : CT__POOL_AVG_EXCL);
}

typedef struct apool_ctx {
    int64_t nc, ih, iw, oh, ow;
} apool_ctx;

static int apool_bw(ct__node *nd)
{
    apool_ctx *c = nd->ctx;
    const ct__backend *bk = ct__bk(nd->in[0]);
    bool acc;
    float *g = ct__grad_dst(nd->in[0], &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "adaptive_avg_pool2d backward: out of memory");
    return K(adaptive_avg_bwd, c->nc, c->ih, c->iw, c->oh, c->ow, ct__f32(nd->out->grad), g, acc);
}

static ct_tensor *apool_plain(ct_tensor *x, int out_h, int out_w);

ct_tensor *ct_nn_adaptive_avg_pool2d(ct_tensor *x, int out_h, int out_w)
{
    ct_tensor *xp = ct_nn_to_plain(x);
    ct_tensor *y = xp ? apool_plain(xp, out_h, out_w) : NULL;
    ct_tensor_release(&xp);
    return y;
}

static ct_tensor *apool_plain(ct_tensor *x, int out_h, int out_w)
{
    ct_tensor *y = NULL;
    if (check_f32(x, "adaptive_avg_pool2d", "x", 4, 4) < 0)
        return NULL;
    if (out_h <= 0 || out_w <= 0) {
        ct__error(CT_EINVAL, "adaptive_avg_pool2d: output size %dx%d", out_h, out_w);
        return NULL;
    }
    apool_ctx c = {x->shape[0] * x->shape[1], x->shape[2], x->shape[3], out_h, out_w};
    int64_t shape[4] = {x->shape[0], x->shape[1], out_h, out_w};
    const ct__backend *bk = ct__bk(x);
    y = new_out(bk, 4, shape);
    if (!y)
        goto err;
    if (K(adaptive_avg_fwd, c.nc, c.ih, c.iw, c.oh, c.ow, ct__f32(x), ct__f32(y)) < 0)
        goto err;
    if (record("adaptive_avg_pool2d", apool_bw, y, 1, &x, &c, sizeof(c), NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

/* ---------------- eltwise ---------------- */

typedef struct elt_ctx {
    int alg;
    float alpha;
} elt_ctx;

static int elt_bw(ct__node *nd)
{
    elt_ctx *c = nd->ctx;
    const ct__backend *bk = ct__bk(nd->in[0]);
    gslot sx;
    int rc = 0;
    if ((rc = gbegin(&sx, nd->in[0], 0)) < 0 ||
        (rc = K(eltwise_bwd, c->alg, c->alpha, sx.n, ct__f32(nd->out), ct__f32(nd->out->grad),
                sx.dst)) < 0)
        return rc;
    return gend(&sx);
}

static ct_tensor *elt(const char *op, ct_tensor *x, int alg, float alpha)
{
    ct_tensor *y = NULL;
    if (check_f32(x, op, "x", 0, CT_MAX_DIMS) < 0)
        return NULL;
    elt_ctx c = {alg, alpha};
    const ct__backend *bk = ct__bk(x);
    if (ct__supports(bk, &(ct__op_desc){.kind = CT__OP_ACT, .name = op, .alg = alg}) < 0)
        return NULL;
    y = new_out(bk, x->ndim, x->shape);
    if (!y)
        goto err;
    y->fmt = x->fmt; /* elementwise: any layout */
    if (K(eltwise_fwd, alg, alpha, ct_tensor_numel(x), ct__f32(x), ct__f32(y)) < 0)
        goto err;
    if (record(op, elt_bw, y, 1, &x, &c, sizeof(c), NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

ct_tensor *ct_nn_relu(ct_tensor *x)
{
    return elt("relu", x, CT__ELT_RELU, 0.0f);
}
ct_tensor *ct_nn_leaky_relu(ct_tensor *x, float negative_slope)
{
    return elt("leaky_relu", x, CT__ELT_RELU, negative_slope);
}
ct_tensor *ct_nn_elu(ct_tensor *x, float alpha)
{
    return elt("elu", x, CT__ELT_ELU, alpha);
}
ct_tensor *ct_nn_tanh(ct_tensor *x)
{
    return elt("tanh", x, CT__ELT_TANH, 0.0f);
}
ct_tensor *ct_nn_sigmoid(ct_tensor *x)
{
    return elt("sigmoid", x, CT__ELT_SIGMOID, 0.0f);
}

/* ---------------- softmax ---------------- */

typedef struct sm_ctx {
    bool log;
    int64_t rows, cols;
} sm_ctx;

static int sm_bw(ct__node *nd)
{
    sm_ctx *c = nd->ctx;
    const ct__backend *bk = ct__bk(nd->in[0]);
    gslot sx;
    int rc = 0;
    if ((rc = gbegin(&sx, nd->in[0], 0)) < 0 ||
        (rc = K(softmax_bwd, c->log, c->rows, c->cols, ct__f32(nd->out), ct__f32(nd->out->grad),
                sx.dst)) < 0)
        return rc;
    return gend(&sx);
}

static ct_tensor *softmax_common(const char *op, ct_tensor *x, bool log)
{
    ct_tensor *y = NULL;
    if (check_f32(x, op, "x", 1, CT_MAX_DIMS) < 0)
        return NULL;
    sm_ctx c = {log, ct_tensor_numel(x) / x->shape[x->ndim - 1], x->shape[x->ndim - 1]};
    const ct__backend *bk = ct__bk(x);
    y = new_out(bk, x->ndim, x->shape);
    if (!y)
        goto err;
    if (K(softmax_fwd, log, c.rows, c.cols, ct__f32(x), ct__f32(y)) < 0)
        goto err;
    if (record(op, sm_bw, y, 1, &x, &c, sizeof(c), NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

static ct_tensor *softmax_plain(const char *op, ct_tensor *x, bool log)
{
    ct_tensor *xp = ct_nn_to_plain(x);
    ct_tensor *y = xp ? softmax_common(op, xp, log) : NULL;
    ct_tensor_release(&xp);
    return y;
}

ct_tensor *ct_nn_softmax(ct_tensor *x)
{
    return softmax_plain("softmax", x, false);
}
ct_tensor *ct_nn_log_softmax(ct_tensor *x)
{
    return softmax_plain("log_softmax", x, true);
}

/* ---------------- add, sum, dropout, reshape ---------------- */

static int add_bw(ct__node *nd)
{
    const float *dy = ct__f32(nd->out->grad);
    int64_t n = ct_tensor_numel(nd->out);
    /* one input may take dy itself, the other gets a copy; x + x adds both into one buffer */
    bool passed = nd->in[0] == nd->in[1];
    for (int i = 0; i < 2; i++) {
        ct_tensor *t = nd->in[i];
        if (!wants(t))
            continue;
        if (!passed && ct__grad_pass(nd, t)) {
            passed = true;
            continue;
        }
        bool acc;
        float *g = ct__grad_dst(t, &acc);
        if (!g)
            return ct__error(CT_ENOMEM, "add backward: out of memory");
        int rc = ct__grad_add(ct__bk(t), g, dy, n, acc);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static ct_tensor *add_same_fmt(ct_tensor *a, ct_tensor *b);

ct_tensor *ct_nn_add(ct_tensor *a, ct_tensor *b)
{
    if (check_f32(a, "add", "a", 0, CT_MAX_DIMS) < 0 ||
        check_f32(b, "add", "b", 0, CT_MAX_DIMS) < 0)
        return NULL;
    if (a->fmt == b->fmt)
        return add_same_fmt(a, b);
    ct_tensor *pa = ct_nn_to_plain(a), *pb = ct_nn_to_plain(b), *y = NULL;
    if (pa && pb)
        y = add_same_fmt(pa, pb);
    ct_tensor_release(&pa);
    ct_tensor_release(&pb);
    return y;
}

static ct_tensor *add_same_fmt(ct_tensor *a, ct_tensor *b)
{
    ct_tensor *y = NULL;
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim) != 0) {
        ct__error(CT_ERANGE, "add: shapes differ (%lld vs %lld elements, %d vs %d dims)",
                  (long long)ct_tensor_numel(a), (long long)ct_tensor_numel(b), a->ndim, b->ndim);
        return NULL;
    }
    ct_tensor *in[2] = {a, b};
    const ct__backend *bk = bk_of("add", 2, in);
    if (!bk)
        return NULL;
    y = new_out(bk, a->ndim, a->shape);
    if (!y)
        goto err;
    y->fmt = a->fmt;
    if (K(add, ct_tensor_numel(a), ct__f32(a), ct__f32(b), ct__f32(y)) < 0)
        goto err;
    if (record("add", add_bw, y, 2, in, NULL, 0, NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

static int sum_bw(ct__node *nd)
{
    ct_tensor *x = nd->in[0];
    const ct__backend *bk = ct__bk(x);
    bool acc;
    float *g = ct__grad_dst(x, &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "sum backward: out of memory");
    return K(broadcast, ct_tensor_numel(x), ct__f32(nd->out->grad), g, acc);
}

ct_tensor *ct_nn_sum(ct_tensor *x)
{
    ct_tensor *y = NULL;
    if (check_f32(x, "sum", "x", 0, CT_MAX_DIMS) < 0)
        return NULL;
    const ct__backend *bk = ct__bk(x);
    y = new_out(bk, 0, NULL);
    if (!y)
        goto err;
    if (K(sum, ct_tensor_numel(x), ct__f32(x), ct__f32(y)) < 0)
        goto err;
    if (record("sum", sum_bw, y, 1, &x, NULL, 0, NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

static int dropout_bw(ct__node *nd)
{
    ct_tensor *x = nd->in[0];
    const ct__backend *bk = ct__bk(x);
    const float *mask = ct__f32(nd->saved[0]), *dy = ct__f32(nd->out->grad);
    bool acc;
    float *g = ct__grad_dst(x, &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "dropout backward: out of memory");
    return K(mul, ct_tensor_numel(x), dy, mask, g, acc);
}

ct_tensor *ct_nn_dropout(ct_tensor *x, float p, bool training)
{
    ct_tensor *y = NULL, *mask = NULL;
    if (check_f32(x, "dropout", "x", 0, CT_MAX_DIMS) < 0)
        return NULL;
    if (!(p >= 0.0f && p <= 1.0f)) {
        ct__error(CT_EINVAL, "dropout: p = %g not in [0, 1]", p);
        return NULL;
    }
    if (!training || p == 0.0f)
        return ct_tensor_retain(x);
    int64_t n = ct_tensor_numel(x);
    const ct__backend *bk = ct__bk(x);
    y = new_out(bk, x->ndim, x->shape);
    mask = new_out(bk, x->ndim, x->shape);
    if (!y || !mask)
        goto err;
    y->fmt = mask->fmt = x->fmt;
    /* a counter-based mask over the elements in plain (NCHW) order: one draw of ct's generator
     * seeds it, so a seeded run drops the same elements on every device, whatever the layout;
     * for a blocked x the mask is then put in x's layout */
    uint64_t seed = ct__rng_u64();
    if (x->fmt == CT__FMT_PLAIN) {
        if (K(dropout_mask, n, p, seed, 0, ct__f32(mask)) < 0)
            goto err;
    } else {
        float *plain = ct__scratch(bk, 0, n);
        if (!plain || K(dropout_mask, n, p, seed, 0, plain) < 0 ||
            K(reorder, x->shape[0], x->shape[1], x->shape[2], x->shape[3], plain, CT__FMT_PLAIN,
              ct__f32(mask), x->fmt) < 0)
            goto err;
    }
    if (K(mul, n, ct__f32(x), ct__f32(mask), ct__f32(y), false) < 0)
        goto err;
    ct__node *nd;
    if (record("dropout", dropout_bw, y, 1, &x, NULL, 0, &nd) < 0)
        goto err;
    if (nd)
        nd->saved[0] = ct_tensor_retain(mask);
    ct_tensor_release(&mask);
    return y;
err:
    ct_tensor_release(&mask);
    ct_tensor_release(&y);
    return NULL;
}

static int reshape_bw(ct__node *nd)
{
    ct_tensor *x = nd->in[0];
    int64_t n = ct_tensor_numel(x);
    if (ct__grad_pass(nd, x))
        return 0;
    bool acc;
    float *g = ct__grad_dst(x, &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "reshape backward: out of memory");
    return ct__grad_add(ct__bk(x), g, ct__f32(nd->out->grad), n, acc);
}

ct_tensor *ct_nn_reshape(ct_tensor *x, int ndim, const int64_t *shape)
{
    ct_tensor *xp = ct_nn_to_plain(x);
    ct_tensor *y = xp ? ct_tensor_view(xp, ndim, shape) : NULL;
    if (y && record("reshape", reshape_bw, y, 1, &xp, NULL, 0, NULL) < 0)
        ct_tensor_release(&y);
    ct_tensor_release(&xp);
    return y;
}

ct_tensor *ct_nn_flatten(ct_tensor *x)
{
    if (!x || x->ndim < 1) {
        ct__error(CT_EINVAL, "flatten: needs a tensor with a batch dimension");
        return NULL;
    }
    int64_t shape[2] = {x->shape[0], x->shape[0] ? ct_tensor_numel(x) / x->shape[0] : 0};
    return ct_nn_reshape(x, 2, shape);
}
