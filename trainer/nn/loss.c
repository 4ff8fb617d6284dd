/* trainer/nn/loss.c — the loss kernels of ct/loss.h (trainer/loss/) wrapped as autograd ops.
 * Mean reduction; the result is a scalar tensor (shape ()). Backward hands the kernel the
 * upstream scalar gradient; the kernels ACCUMULATE into the input's gradient, which matches
 * the autograd protocol once a fresh gradient buffer is zeroed.
 * Not here: the loss math itself (trainer/loss/loss.c). */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/loss.h"
#include "ct/nn.h"
#include "trainer/tensor/tensor_impl.h"

enum { L_CE, L_NLL, L_MSE, L_L1, L_BCE, L_BCEL };

typedef struct loss_ctx {
    int kind;
    float smoothing;
    int64_t n, c;
} loss_ctx;

static float *acc_grad(ct_tensor *t)
{
    bool acc;
    float *g = ct__grad_dst(t, &acc);
    if (g && !acc)
        memset(g, 0, (size_t)ct_tensor_numel(t) * sizeof(float));
    return g;
}

static int loss_bw(ct__node *nd)
{
    loss_ctx *c = nd->ctx;
    ct_tensor *x = nd->in[0], *t = nd->in[1];
    if (!x->requires_grad)
        return 0;
    const float *go = ct__f32(nd->out->grad);
    float *g = acc_grad(x);
    if (!g)
        return ct__error(CT_ENOMEM, "loss backward: out of memory");
    const float *xp = ct__f32(x);
    ct_ce_opts ce = {.label_smoothing = c->smoothing};
    switch (c->kind) {
    case L_CE:
        return ct_loss_cross_entropy_backward(xp, ct_tensor_data(t), c->n, c->c, &ce, go, g);
    case L_NLL:
        return ct_loss_nll_backward(xp, ct_tensor_data(t), c->n, c->c, NULL, go, g);
    case L_MSE:
        return ct_loss_mse_backward(xp, ct__f32(t), c->n * c->c, CT_REDUCTION_MEAN, go, g);
    case L_L1:
        return ct_loss_l1_backward(xp, ct__f32(t), c->n * c->c, CT_REDUCTION_MEAN, go, g);
    case L_BCE:
        return ct_loss_bce_backward(xp, ct__f32(t), c->n, c->c, NULL, go, g);
    default:
        return ct_loss_bce_with_logits_backward(xp, ct__f32(t), c->n, c->c, NULL, go, g);
    }
}

static ct_tensor *loss_plain(const char *op, int kind, ct_tensor *x, ct_tensor *t, float smoothing);

static ct_tensor *loss_op(const char *op, int kind, ct_tensor *x, ct_tensor *t, float smoothing)
{
    ct_tensor *xp = ct_nn_to_plain(x), *tp = ct_nn_to_plain(t);
    ct_tensor *y = xp && tp ? loss_plain(op, kind, xp, tp, smoothing) : NULL;
    ct_tensor_release(&xp);
    ct_tensor_release(&tp);
    return y;
}

static ct_tensor *loss_plain(const char *op, int kind, ct_tensor *x, ct_tensor *t, float smoothing)
{
    ct_tensor *y = NULL;
    if (!x || !t || x->dtype != CT_F32 || !ct_tensor_is_contiguous(x) ||
        !ct_tensor_is_contiguous(t)) {
        ct__error(CT_EINVAL, "%s: input and target must be contiguous, input f32", op);
        return NULL;
    }
    bool cls = kind == L_CE || kind == L_NLL;
    loss_ctx c = {kind, smoothing, 0, 0};
    if (cls) {
        if (x->ndim != 2 || t->dtype != CT_I64 || ct_tensor_numel(t) != x->shape[0]) {
            ct__error(CT_EINVAL, "%s: needs input (N,C) f32 and target (N) i64", op);
            return NULL;
        }
        c.n = x->shape[0];
        c.c = x->shape[1];
    } else {
        if (t->dtype != CT_F32 || ct_tensor_numel(t) != ct_tensor_numel(x)) {
            ct__error(CT_EINVAL, "%s: target must be f32 with the input's %lld elements", op,
                      (long long)ct_tensor_numel(x));
            return NULL;
        }
        c.n = x->ndim > 0 ? x->shape[0] : 1;
        c.c = c.n ? ct_tensor_numel(x) / c.n : 0;
    }
    y = ct__tensor_empty(CT_F32, 0, NULL);
    if (!y)
        return NULL;
    const float *xp = ct__f32(x);
    float *out = ct__f32(y);
    ct_ce_opts ce = {.label_smoothing = smoothing};
    int rc;
    switch (kind) {
    case L_CE:
        rc = ct_loss_cross_entropy_forward(xp, ct_tensor_data(t), c.n, c.c, &ce, out);
        break;
    case L_NLL:
        rc = ct_loss_nll_forward(xp, ct_tensor_data(t), c.n, c.c, NULL, out);
        break;
    case L_MSE:
        rc = ct_loss_mse_forward(xp, ct__f32(t), c.n * c.c, CT_REDUCTION_MEAN, out);
        break;
    case L_L1:
        rc = ct_loss_l1_forward(xp, ct__f32(t), c.n * c.c, CT_REDUCTION_MEAN, out);
        break;
    case L_BCE:
        rc = ct_loss_bce_forward(xp, ct__f32(t), c.n, c.c, NULL, out);
        break;
    default:
        rc = ct_loss_bce_with_logits_forward(xp, ct__f32(t), c.n, c.c, NULL, out);
        break;
    }
    if (rc < 0)
        goto err;
    ct_tensor *in[2] = {x, t};
    if (ct__needs_grad(1, in)) {
        loss_ctx *cc = malloc(sizeof(*cc));
        if (!cc) {
            ct__error(CT_ENOMEM, "%s: out of memory", op);
            goto err;
        }
        *cc = c;
        if (!ct__node_record(op, loss_bw, y, 2, in, cc, NULL)) {
            ct__error(CT_ENOMEM, "%s: out of memory recording the op", op);
            goto err;
        }
    }
    return y;
err:
    ct_tensor_release(&y);
    return NULL;
}

ct_tensor *ct_nn_cross_entropy(ct_tensor *logits, ct_tensor *target, float label_smoothing)
{
    return loss_op("cross_entropy", L_CE, logits, target, label_smoothing);
}
ct_tensor *ct_nn_nll_loss(ct_tensor *log_probs, ct_tensor *target)
{
    return loss_op("nll_loss", L_NLL, log_probs, target, 0.0f);
}
ct_tensor *ct_nn_mse_loss(ct_tensor *input, ct_tensor *target)
{
    return loss_op("mse_loss", L_MSE, input, target, 0.0f);
}
ct_tensor *ct_nn_l1_loss(ct_tensor *input, ct_tensor *target)
{
    return loss_op("l1_loss", L_L1, input, target, 0.0f);
}
ct_tensor *ct_nn_bce_loss(ct_tensor *probs, ct_tensor *target)
{
    return loss_op("bce_loss", L_BCE, probs, target, 0.0f);
}
ct_tensor *ct_nn_bce_with_logits_loss(ct_tensor *logits, ct_tensor *target)
{
    return loss_op("bce_with_logits_loss", L_BCEL, logits, target, 0.0f);
}
