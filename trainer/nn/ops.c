/* trainer/nn/ops.c — differentiable ops: forward on the CPU kernels (trainer/cpu/), a tape node
 * whose backward ACCUMULATES into each input that requires a gradient.
 *
 * Shapes: activations (N,C,H,W) or (N,F), PyTorch weight layouts. Inputs must be contiguous
 * f32. Not here: losses (loss.c), modules (module.c), oneDNN calls (trainer/cpu/dnnl.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/nn.h"
#include "trainer/cpu/cpu.h"
#include "trainer/nn/nn_impl.h"
#include "trainer/tensor/tensor_impl.h"

/* ---- helpers ---- */

static int check_f32(const ct_tensor *t, const char *op, const char *arg, int min_nd, int max_nd)
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
    float *g, *dst;
    int64_t n;
    bool acc;
} gslot;

static int gbegin(gslot *s, ct_tensor *t, int slot)
{
    s->n = ct_tensor_numel(t);
    s->g = ct__grad_dst(t, &s->acc);
    if (!s->g)
        return ct__error(CT_ENOMEM, "backward: out of memory for a gradient");
    s->dst = s->acc ? ct__scratch(slot, s->n) : s->g;
    if (!s->dst)
        return ct__error(CT_ENOMEM, "backward: out of memory for scratch");
    return 0;
}

static void gend(gslot *s)
{
    if (s->acc)
        ct__cpu_axpy(s->n, 1.0f, s->dst, s->g);
}

static ct_tensor *new_out(int ndim, const int64_t *shape)
{
    return ct__tensor_empty(CT_F32, ndim, shape);
}

static void *ctx_dup(const void *p, size_t n)
{
    void *c = malloc(n);
    if (c)
        memcpy(c, p, n);
    return c;
}

/* Records the node; on failure to allocate the ctx, nothing is recorded and the op fails. */
static int record(const char *name, int (*bw)(ct__node *), ct_tensor *out, int nin,
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

/* ---------------- layouts ---------------- */

static int to_plain_bw(ct__node *nd)
{
    ct_tensor *x = nd->in[0];
    gslot sx;
    int rc = 0;
    if ((rc = gbegin(&sx, x, 0)) < 0)
        return rc;
    if ((rc = ct__cpu_reorder(x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                              ct__f32(nd->out->grad), CT__FMT_PLAIN, sx.dst, x->fmt)) < 0)
        return rc;
    gend(&sx);
    return 0;
}

ct_tensor *ct_nn_to_plain(ct_tensor *x)
{
    if (!x) {
        ct__error(CT_EINVAL, "to_plain: NULL tensor");
        return NULL;
    }
    if (x->fmt == CT__FMT_PLAIN)
        return ct_tensor_retain(x);
    ct_tensor *y = new_out(4, x->shape);
    if (!y)
        return NULL;
    if (ct__cpu_reorder(x->shape[0], x->shape[1], x->shape[2], x->shape[3], ct__f32(x), x->fmt,
                        ct__f32(y), CT__FMT_PLAIN) < 0 ||
        record("to_plain", to_plain_bw, y, 1, &x, NULL, 0, NULL) < 0)
        ct_tensor_release(&y);
    return y;
}

#define OUT_OR_FAIL(t)                                                                             \
    do {                                                                                           \
        if (!(t))                                                                                  \
            goto err;                                                                              \
    } while (0)

/* ---------------- linear / matmul ---------------- */

typedef struct lin_ctx {
    int64_t n, ic, oc;
} lin_ctx;

static int linear_bw(ct__node *nd)
{
    lin_ctx *c = nd->ctx;
    ct_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->nin > 2 ? nd->in[2] : NULL;
    const float *dy = ct__f32(nd->out->grad);
    gslot sx, sw, sb;
    int rc = 0;
    if (wants(x)) {
        if ((rc = gbegin(&sx, x, 0)) < 0 ||
            (rc = ct__cpu_ip_bwd_data(c->n, c->ic, c->oc, ct__f32(w), dy, sx.dst)) < 0)
            return rc;
        gend(&sx);
    }
    bool bw_ = wants(w), bb = b && wants(b);
    if (bw_ && accumulates(w) && (!bb || accumulates(b))) {
        /* adding to gradients that hold earlier batches' (gradient accumulation): dw += dy^T x
         * in one matmul with oneDNN's sum post-op, db += dy's column sums, in place; the
         * inner product below would need scratch and a pass to add it for each */
        bool acc;
        if ((rc = ct__cpu_matmul(c->oc, c->n, c->ic, dy, true, ct__f32(x), false,
                                 ct__grad_dst(w, &acc), true)) < 0)
            return rc;
        if (bb)
            ct__cpu_add_col_sums(c->n, c->oc, dy, ct__grad_dst(b, &acc));
    } else if (bw_ || bb) {
        /* oneDNN computes both; a bias that needs no grad still gets a scratch target */
        float *dw, *db = NULL;
        if (bw_ && (rc = gbegin(&sw, w, 1)) < 0)
            return rc;
        if (bb && (rc = gbegin(&sb, b, 2)) < 0)
            return rc;
        dw = bw_ ? sw.dst : ct__scratch(1, c->oc * c->ic);
        if (b)
            db = bb ? sb.dst : ct__scratch(2, c->oc);
        if ((rc = ct__cpu_ip_bwd_weights(c->n, c->ic, c->oc, ct__f32(x), dy, dw, db)) < 0)
            return rc;
        if (bw_)
            gend(&sw);
        if (bb)
            gend(&sb);
    }
    return 0;
}

ct_tensor *ct_nn_linear(ct_tensor *x, ct_tensor *w, ct_tensor *b)
{
    ct_tensor *y = NULL;
    if (check_f32(x, "linear", "x", 2, 2) < 0 || check_f32(w, "linear", "weight", 2, 2) < 0 ||
        (b && check_f32(b, "linear", "bias", 1, 1) < 0))
        return NULL;
    lin_ctx c = {x->shape[0], x->shape[1], w->shape[0]};
    if (w->shape[1] != c.ic || (b && b->shape[0] != c.oc)) {
        ct__error(CT_ERANGE, "linear: x (%lld,%lld) vs weight (%lld,%lld)%s", (long long)c.n,
                  (long long)c.ic, (long long)w->shape[0], (long long)w->shape[1],
                  b ? " / bias" : "");
        return NULL;
    }
    int64_t shape[2] = {c.n, c.oc};
    y = new_out(2, shape);
    OUT_OR_FAIL(y);
    if (ct__cpu_ip_fwd(c.n, c.ic, c.oc, ct__f32(x), ct__f32(w), b ? ct__f32(b) : NULL, ct__f32(y)) <
        0)
        goto err;
    ct_tensor *in[3] = {x, w, b};
    if (record("linear", linear_bw, y, b ? 3 : 2, in, &c, sizeof(c), NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

typedef struct mm_ctx {
    int64_t m, k, n;
} mm_ctx;

static int matmul_bw(ct__node *nd)
{
    mm_ctx *c = nd->ctx;
    ct_tensor *a = nd->in[0], *b = nd->in[1];
    const float *dy = ct__f32(nd->out->grad);
    int rc = 0;
    bool acc;
    if (wants(a)) { /* da (m,k) = dy (m,n) @ b^T */
        float *g = ct__grad_dst(a, &acc);
        if (!g)
            return ct__error(CT_ENOMEM, "matmul backward: out of memory");
        if ((rc = ct__cpu_matmul(c->m, c->n, c->k, dy, false, ct__f32(b), true, g, acc)) < 0)
            return rc;
    }
    if (wants(b)) { /* db (k,n) = a^T @ dy */
        float *g = ct__grad_dst(b, &acc);
        if (!g)
            return ct__error(CT_ENOMEM, "matmul backward: out of memory");
        if ((rc = ct__cpu_matmul(c->k, c->m, c->n, ct__f32(a), true, dy, false, g, acc)) < 0)
            return rc;
    }
    return 0;
}

ct_tensor *ct_nn_matmul(ct_tensor *a, ct_tensor *b)
{
    ct_tensor *y = NULL;
    if (check_f32(a, "matmul", "a", 2, 2) < 0 || check_f32(b, "matmul", "b", 2, 2) < 0)
        return NULL;
    mm_ctx c = {a->shape[0], a->shape[1], b->shape[1]};
    if (b->shape[0] != c.k) {
        ct__error(CT_ERANGE, "matmul: a (%lld,%lld) @ b (%lld,%lld)", (long long)c.m,
                  (long long)c.k, (long long)b->shape[0], (long long)c.n);
        return NULL;
    }
    int64_t shape[2] = {c.m, c.n};
    y = new_out(2, shape);
    OUT_OR_FAIL(y);
    if (ct__cpu_matmul(c.m, c.k, c.n, ct__f32(a), false, ct__f32(b), false, ct__f32(y), false) < 0)
        goto err;
    ct_tensor *in[2] = {a, b};
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
    const float *dy = ct__f32(nd->out->grad);
    gslot sx, sw, sb;
    int rc = 0;
    if (wants(x)) {
        if ((rc = gbegin(&sx, x, 0)) < 0 ||
            (rc = ct__cpu_conv_bwd_data(p, ct__f32(w), dy, sx.dst)) < 0)
            return rc;
        gend(&sx);
    }
    if (wants(w) || wants(b)) {
        bool bw_ = wants(w), bb = b && wants(b);
        if (bw_ && (rc = gbegin(&sw, w, 1)) < 0)
            return rc;
        if (bb && (rc = gbegin(&sb, b, 2)) < 0)
            return rc;
        float *dw = bw_ ? sw.dst : ct__scratch(1, ct_tensor_numel(w));
        float *db = b ? (bb ? sb.dst : ct__scratch(2, p->oc)) : NULL;
        if ((rc = ct__cpu_conv_bwd_weights(p, ct__f32(x), dy, dw, db)) < 0)
            return rc;
        if (bw_)
            gend(&sw);
        if (bb)
            gend(&sb);
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
    /* outputs with channels in whole blocks stay in oneDNN's blocked layout for this CPU */
    int blk = ct__cpu_blocked_fmt();
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
    int64_t shape[4] = {p.n, p.oc, p.oh, p.ow};
    y = new_out(4, shape);
    OUT_OR_FAIL(y);
    y->fmt = p.yfmt;
    if (ct__cpu_conv_fwd(&p, ct__f32(x), ct__f32(w), b ? ct__f32(b) : NULL, ct__f32(y)) < 0)
        goto err;
    ct_tensor *in[3] = {x, w, b};
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
    size_t ws_bytes; /* fused ReLU workspace (training) */
    /* followed by mean[c], var[c] (batch stats in training, running stats in eval), then the
     * workspace */
} bn_ctx;

static float *bn_ones(int64_t c, int slot, float v)
{
    float *p = ct__scratch(slot, c);
    if (p)
        for (int64_t i = 0; i < c; i++)
            p[i] = v;
    return p;
}

static int bn_bw(ct__node *nd)
{
    bn_ctx *c = nd->ctx;
    const ct__bn_p *p = &c->p;
    const float *mean = (const float *)(c + 1), *var = mean + p->c;
    ct_tensor *x = nd->in[0], *w = nd->in[1], *b = nd->in[2];
    const float *dy = ct__f32(nd->out->grad);
    int rc = 0;
    int64_t C = p->c, hw = p->hw, N = p->n;
    /* scratch slots: 0 dx, 1 dscale, 2 dshift, 3 ones (scale when weight is NULL) */
    const float *scale = w ? ct__f32(w) : bn_ones(C, 3, 1.0f);
    gslot sx = {0}, sw = {0}, sb = {0};
    bool wx = wants(x), ww = wants(w), wb = wants(b);
    if (wx && (rc = gbegin(&sx, x, 0)) < 0)
        return rc;
    if (ww && (rc = gbegin(&sw, w, 1)) < 0)
        return rc;
    if (wb && (rc = gbegin(&sb, b, 2)) < 0)
        return rc;
    if (c->training) {
        float *dx = wx ? sx.dst : ct__scratch(0, ct_tensor_numel(x));
        float *dsc = ww ? sw.dst : ct__scratch(1, C);
        float *dsh = wb ? sb.dst : ct__scratch(2, C);
        if ((rc = ct__cpu_bn_bwd(p, ct__f32(x), dy, scale, mean, var, var + C, dx, dsc, dsh)) < 0)
            return rc;
    } else {
        /* frozen statistics: y = (x - rm) * rstd * w + b (then relu: dy masked by y > 0) */
        const float *xp = ct__f32(x), *yp = ct__f32(nd->out);
        for (int64_t ch = 0; ch < C; ch++) {
            float rstd = 1.0f / sqrtf(var[ch] + p->eps);
            double sdy = 0, sdyx = 0;
            for (int64_t i = 0; i < N; i++) {
                const float *g = dy + (i * C + ch) * hw, *xx = xp + (i * C + ch) * hw;
                float *dx = wx ? sx.dst + (i * C + ch) * hw : NULL;
                const float *yy = yp + (i * C + ch) * hw;
                for (int64_t j = 0; j < hw; j++) {
                    float gj = (p->relu && !(yy[j] > 0.0f)) ? 0.0f : g[j];
                    sdy += gj;
                    sdyx += gj * (xx[j] - mean[ch]) * rstd;
                    if (dx)
                        dx[j] = gj * rstd * scale[ch];
                }
            }
            if (ww)
                sw.dst[ch] = (float)sdyx;
            if (wb)
                sb.dst[ch] = (float)sdy;
        }
    }
    if (wx)
        gend(&sx);
    if (ww)
        gend(&sw);
    if (wb)
        gend(&sb);
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
        /* the frozen-statistics backward is a plain C loop: give it plain data */
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
    size_t ws = training && relu ? ct__cpu_bn_ws_bytes(&bp) : 0;
    c = calloc(1, sizeof(*c) + 2 * (size_t)C * sizeof(float) + ws);
    if (!c) {
        ct__error(CT_ENOMEM, "batch_norm: out of memory");
        return NULL;
    }
    c->ws_bytes = ws;
    c->p.relu = relu;
    c->p.n = x->shape[0];
    c->p.c = C;
    c->p.hw = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1;
    c->p.h = x->ndim == 4 ? x->shape[2] : 1;
    c->p.w = x->ndim == 4 ? x->shape[3] : 1;
    c->p.fmt = x->fmt;
    c->p.eps = eps;
    c->training = training;
    float *mean = (float *)(c + 1), *var = mean + C;
    y = new_out(x->ndim, x->shape);
    if (!y)
        goto err;
    y->fmt = x->fmt;
    const float *scale = weight ? ct__f32(weight) : bn_ones(C, 0, 1.0f);
    const float *shift = bias ? ct__f32(bias) : bn_ones(C, 1, 0.0f);
    if (training) {
        int64_t cnt = c->p.n * c->p.hw;
        if (cnt <= 1) {
            ct__error(CT_EINVAL, "batch_norm: training needs more than one value per channel");
            goto err;
        }
        if (ct__cpu_bn_fwd_train(&c->p, ct__f32(x), scale, shift, ct__f32(y), mean, var, var + C) <
            0)
            goto err;
        if (running_mean && running_var) {
            float *rm = ct__f32(running_mean), *rv = ct__f32(running_var);
            float unb = (float)cnt / (float)(cnt - 1);
            for (int64_t i = 0; i < C; i++) {
                rm[i] = (1.0f - momentum) * rm[i] + momentum * mean[i];
                rv[i] = (1.0f - momentum) * rv[i] + momentum * var[i] * unb;
            }
        }
    } else {
        memcpy(mean, ct__f32(running_mean), (size_t)C * sizeof(float));
        memcpy(var, ct__f32(running_var), (size_t)C * sizeof(float));
        if (ct__cpu_bn_fwd_infer(&c->p, ct__f32(x), scale, shift, mean, var, ct__f32(y)) < 0)
            goto err;
    }
    ct_tensor *in[3] = {x, weight, bias};
    if (ct__needs_grad(3, in)) {
        if (!ct__node_record("batch_norm", bn_bw, y, 3, in, c, NULL)) {
            c = NULL;
            ct__error(CT_ENOMEM, "batch_norm: out of memory recording the op");
            goto err;
        }
        c = NULL; /* owned by the node */
    }
    free(c);
    return y;
bad:
    if (x && x->ndim == 3)
        ct__error(CT_EINVAL, "batch_norm: x must be (N,C) or (N,C,H,W)");
    return NULL;
err:
    free(c);
    ct_tensor_release(&y);
    return NULL;
}

/* ---------------- pooling ---------------- */

typedef struct pool_ctx {
    ct__pool_p p;
    size_t ws_bytes;
    /* followed by the workspace */
} pool_ctx;

static int pool_bw(ct__node *nd)
{
    pool_ctx *c = nd->ctx;
    ct_tensor *x = nd->in[0];
    gslot sx;
    int rc = 0;
    if ((rc = gbegin(&sx, x, 0)) < 0)
        return rc;
    if ((rc = ct__cpu_pool_bwd(&c->p, ct__f32(nd->out->grad), c + 1, sx.dst)) < 0)
        return rc;
    gend(&sx);
    return 0;
}

static ct_tensor *pool_common(const char *op, ct_tensor *x, int k, int s, int pad, int alg)
{
    ct_tensor *y = NULL;
    pool_ctx *c = NULL;
    if (check_f32(x, op, "x", 4, 4) < 0)
        return NULL;
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
    size_t ws = grad ? ct__cpu_pool_ws_bytes(&p) : 0;
    c = malloc(sizeof(*c) + ws);
    if (!c) {
        ct__error(CT_ENOMEM, "%s: out of memory", op);
        return NULL;
    }
    c->p = p;
    c->ws_bytes = ws;
    int64_t shape[4] = {p.n, p.c, p.oh, p.ow};
    y = new_out(4, shape);
    if (!y)
        goto err;
    y->fmt = x->fmt;
    if (ct__cpu_pool_fwd(&p, ct__f32(x), ct__f32(y), c + 1, grad) < 0)
        goto err;
    if (grad) {
        ct__node *nd = ct__node_record(op, pool_bw, y, 1, &x, c, NULL);
        c = NULL;
        if (!nd) {
            ct__error(CT_ENOMEM, "%s: out of memory recording the op", op);
            goto err;
        }
    }
    free(c);
    return y;
err:
    free(c);
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
    bool acc;
    float *g = ct__grad_dst(nd->in[0], &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "adaptive_avg_pool2d backward: out of memory");
    ct__cpu_adaptive_avg_bwd(c->nc, c->ih, c->iw, c->oh, c->ow, ct__f32(nd->out->grad), g, acc);
    return 0;
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
    y = new_out(4, shape);
    OUT_OR_FAIL(y);
    ct__cpu_adaptive_avg_fwd(c.nc, c.ih, c.iw, c.oh, c.ow, ct__f32(x), ct__f32(y));
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
    gslot sx;
    int rc = 0;
    if ((rc = gbegin(&sx, nd->in[0], 0)) < 0)
        return rc;
    if (c->alg == CT__ELT_RELU && c->alpha >= 0.0f)
        ct__cpu_relu_bwd(c->alpha, sx.n, ct__f32(nd->out), ct__f32(nd->out->grad), sx.dst);
    else if ((rc = ct__cpu_eltwise_bwd(c->alg, c->alpha, sx.n, ct__f32(nd->out),
                                       ct__f32(nd->out->grad), sx.dst)) < 0)
        return rc;
    gend(&sx);
    return 0;
}

static ct_tensor *elt(const char *op, ct_tensor *x, int alg, float alpha)
{
    ct_tensor *y = NULL;
    if (check_f32(x, op, "x", 0, CT_MAX_DIMS) < 0)
        return NULL;
    elt_ctx c = {alg, alpha};
    y = new_out(x->ndim, x->shape);
    OUT_OR_FAIL(y);
    y->fmt = x->fmt; /* elementwise: any layout */
    if (alg == CT__ELT_RELU && alpha >= 0.0f)
        ct__cpu_relu_fwd(alpha, ct_tensor_numel(x), ct__f32(x), ct__f32(y));
    else if (ct__cpu_eltwise_fwd(alg, alpha, ct_tensor_numel(x), ct__f32(x), ct__f32(y)) < 0)
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
    gslot sx;
    int rc = 0;
    if ((rc = gbegin(&sx, nd->in[0], 0)) < 0)
        return rc;
    if ((rc = ct__cpu_softmax_bwd(c->log, c->rows, c->cols, ct__f32(nd->out),
                                  ct__f32(nd->out->grad), sx.dst)) < 0)
        return rc;
    gend(&sx);
    return 0;
}

static ct_tensor *softmax_common(const char *op, ct_tensor *x, bool log)
{
    ct_tensor *y = NULL;
    if (check_f32(x, op, "x", 1, CT_MAX_DIMS) < 0)
        return NULL;
    sm_ctx c = {log, ct_tensor_numel(x) / x->shape[x->ndim - 1], x->shape[x->ndim - 1]};
    y = new_out(x->ndim, x->shape);
    OUT_OR_FAIL(y);
    if (ct__cpu_softmax_fwd(log, c.rows, c.cols, ct__f32(x), ct__f32(y)) < 0)
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
    for (int i = 0; i < 2; i++) {
        ct_tensor *t = nd->in[i];
        if (!wants(t))
            continue;
        bool acc;
        float *g = ct__grad_dst(t, &acc);
        if (!g)
            return ct__error(CT_ENOMEM, "add backward: out of memory");
        if (acc)
            ct__cpu_axpy(n, 1.0f, dy, g);
        else
            memcpy(g, dy, (size_t)n * sizeof(float));
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
    y = new_out(a->ndim, a->shape);
    OUT_OR_FAIL(y);
    y->fmt = a->fmt;
    ct__cpu_add(ct_tensor_numel(a), ct__f32(a), ct__f32(b), ct__f32(y));
    ct_tensor *in[2] = {a, b};
    if (record("add", add_bw, y, 2, in, NULL, 0, NULL) < 0)
        goto err;
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

static int sum_bw(ct__node *nd)
{
    float g0 = ct__f32(nd->out->grad)[0];
    ct_tensor *x = nd->in[0];
    int64_t n = ct_tensor_numel(x);
    bool acc;
    float *g = ct__grad_dst(x, &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "sum backward: out of memory");
    for (int64_t i = 0; i < n; i++)
        g[i] = acc ? g[i] + g0 : g0;
    return 0;
}

ct_tensor *ct_nn_sum(ct_tensor *x)
{
    ct_tensor *y = NULL;
    if (check_f32(x, "sum", "x", 0, CT_MAX_DIMS) < 0)
        return NULL;
    y = new_out(0, NULL);
    OUT_OR_FAIL(y);
    const float *p = ct__f32(x);
    double s = 0;
    int64_t n = ct_tensor_numel(x);
    for (int64_t i = 0; i < n; i++)
        s += p[i];
    ct__f32(y)[0] = (float)s;
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
    const float *mask = ct__f32(nd->saved[0]), *dy = ct__f32(nd->out->grad);
    int64_t n = ct_tensor_numel(x);
    bool acc;
    float *g = ct__grad_dst(x, &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "dropout backward: out of memory");
    for (int64_t i = 0; i < n; i++)
        g[i] = acc ? g[i] + dy[i] * mask[i] : dy[i] * mask[i];
    return 0;
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
    y = new_out(x->ndim, x->shape);
    mask = new_out(x->ndim, x->shape);
    if (!y || !mask)
        goto err;
    y->fmt = mask->fmt = x->fmt;
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    float *m = ct__f32(mask), *yp = ct__f32(y);
    const float *xp = ct__f32(x);
    for (int64_t i = 0; i < n; i++) {
        m[i] = ct__rng_uniform() < p ? 0.0f : scale;
        yp[i] = xp[i] * m[i];
    }
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
    bool acc;
    float *g = ct__grad_dst(x, &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "reshape backward: out of memory");
    ct__grad_add(g, ct__f32(nd->out->grad), n, acc);
    return 0;
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

void ct_nn_set_threads(int n)
{
    ct__cpu_set_threads(n);
}
