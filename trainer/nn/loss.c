/* trainer/nn/loss.c — the losses as autograd ops, on the kernels of the input's device (the
 * backend table's loss_fwd / loss_bwd; on the CPU, ct/loss.h's kernels of trainer/loss/).
 * Mean reduction; the result is a scalar tensor (shape ()). Backward hands the kernel the
 * upstream scalar gradient; the kernels ACCUMULATE into the input's gradient, which matches
 * the autograd protocol once a fresh gradient buffer is zeroed. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/nn.h"
#include "trainer/backend/backend.h"
#include "trainer/tensor/tensor_impl.h"

static int loss_bw(ct__node *nd)
{
    const ct__loss_p *c = nd->ctx;
    ct_tensor *x = nd->in[0], *t = nd->in[1];
    if (!x->requires_grad)
        return 0;
    const ct__backend *bk = ct__bk(x);
    bool acc;
    float *g = ct__grad_dst(x, &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "loss backward: out of memory");
    int rc = acc ? 0 : bk->zero(g, (size_t)ct_tensor_numel(x) * sizeof(float));
    return rc < 0 ? rc
                  : CT__BK_CALL(bk, loss_bwd, c, ct__f32(x), ct_tensor_data(t),
                                ct__f32(nd->out->grad), g);
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
    bool cls = kind == CT__LOSS_CE || kind == CT__LOSS_NLL;
    ct__loss_p c = {.kind = kind, .label_smoothing = smoothing};
    if (cls && t->dtype == CT_F32 && x->ndim == 2 && ct_tensor_numel(t) == x->shape[0]) {
        /* class ids carried as floats (a target dataset's, e.g. next tokens (B, T)) */
        ct_tensor *ti = ct_tensor_to_i64(t);
        y = ti ? loss_plain(op, kind, x, ti, smoothing) : NULL;
        ct_tensor_release(&ti);
        return y;
    }
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
    const ct__backend *bk = ct__bk(x);
    if (ct__bk(t) != bk) {
        ct__error(CT_EINVAL, "%s: input on device %s, target on %s (move it with ct_tensor_to)", op,
                  bk->name, ct__bk(t)->name);
        return NULL;
    }
    if (ct__supports(bk, &(ct__op_desc){.kind = CT__OP_LOSS, .name = op, .loss = &c}) < 0)
        return NULL;
    y = ct__tensor_empty_on(bk, CT_F32, 0, NULL);
    if (!y)
        return NULL;
    if (CT__BK_CALL(bk, loss_fwd, &c, ct__f32(x), ct_tensor_data(t), ct__f32(y)) < 0)
        goto err;
    ct_tensor *in[2] = {x, t};
    if (ct__needs_grad(1, in)) {
        ct__loss_p *cc = malloc(sizeof(*cc));
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
    return loss_op("cross_entropy", CT__LOSS_CE, logits, target, label_smoothing);
}
ct_tensor *ct_nn_nll_loss(ct_tensor *log_probs, ct_tensor *target)
{
    return loss_op("nll_loss", CT__LOSS_NLL, log_probs, target, 0.0f);
}
ct_tensor *ct_nn_mse_loss(ct_tensor *input, ct_tensor *target)
{
    return loss_op("mse_loss", CT__LOSS_MSE, input, target, 0.0f);
}
ct_tensor *ct_nn_l1_loss(ct_tensor *input, ct_tensor *target)
{
    return loss_op("l1_loss", CT__LOSS_L1, input, target, 0.0f);
}
ct_tensor *ct_nn_bce_loss(ct_tensor *probs, ct_tensor *target)
{
    return loss_op("bce_loss", CT__LOSS_BCE, probs, target, 0.0f);
}
ct_tensor *ct_nn_bce_with_logits_loss(ct_tensor *logits, ct_tensor *target)
{
    return loss_op("bce_with_logits_loss", CT__LOSS_BCEL, logits, target, 0.0f);
}
