/* trainer/loss/loss.c — loss forward/backward kernels (include/ct/loss.h), PyTorch 1.13
 * semantics, plain C loops over row-major arrays. Cross entropy's exps are float (vecmath.h's,
 * vectorised in ISA clones), its log-sum-exp summed in double.
 *
 * Not here: autograd glue, tensors, CUDA kernels.
 *
 * Cross entropy per row i with target t, log-probabilities lp = x - logsumexp(x), class
 * weights w (1 without), smoothing ls over C classes:
 *   loss_i = (1-ls) * (-w_t lp_t) + ls/C * (-sum_c w_c lp_c)
 *   dloss_i/dx_j = (1-ls) w_t (p_j - [j==t]) + ls/C (W p_j - w_j),   W = sum_c w_c
 * mean divides by sum_i w_{t_i} over rows not ignored (PyTorch's nll_loss and label-smoothing
 * normalisation). */
#include <math.h>
#include <stddef.h>

#include "common/common.h"
#include "ct/loss.h"
#include "trainer/cpu/vecmath.h"

static int check_red(const char *fn, ct_reduction r)
{
    if ((unsigned)r > CT_REDUCTION_NONE)
        return ct__error(CT_EINVAL, "%s: reduction = %d: must be mean, sum or none", fn, (int)r);
    return 0;
}

/* ---- cross entropy and nll ---------------------------------------------------------------- */

static int check_class(const char *fn, const float *x, const int64_t *target, int64_t n, int64_t c,
                       const ct_ce_opts *o, const void *out_or_grad)
{
    int rc;
    if (!x || !target || !out_or_grad)
        return ct__error(CT_EINVAL, "%s: NULL %s", fn,
                         !x        ? "input"
                         : !target ? "target"
                                   : "output");
    if (n < 0 || c < 1)
        return ct__error(CT_EINVAL, "%s: shape (N=%lld, C=%lld): need N >= 0 and C >= 1", fn,
                         (long long)n, (long long)c);
    if ((rc = check_red(fn, o->reduction)))
        return rc;
    if (!(o->label_smoothing >= 0.0 && o->label_smoothing <= 1.0))
        return ct__error(CT_EINVAL, "%s: label_smoothing = %g: must be in [0, 1]", fn,
                         o->label_smoothing);
    int64_t ign = o->use_ignore_index ? o->ignore_index : -100;
    for (int64_t i = 0; i < n; i++)
        if (target[i] != ign && (target[i] < 0 || target[i] >= c))
            return ct__error(CT_EINVAL, "%s: target[%lld] = %lld: out of range [0, %lld)", fn,
                             (long long)i, (long long)target[i], (long long)c);
    return 0;
}

static inline int64_t ignore_of(const ct_ce_opts *o)
{
    return o->use_ignore_index ? o->ignore_index : -100;
}

/* Sum of the weights of the counted targets: the mean's denominator. */
static double total_weight(const int64_t *target, int64_t n, const ct_ce_opts *o)
{
    double tw = 0;
    int64_t ign = ignore_of(o);
    for (int64_t i = 0; i < n; i++)
        if (target[i] != ign)
            tw += o->weight ? o->weight[target[i]] : 1.0;
    return tw;
}

/* logsumexp of one row: float exps (vecmath.h's, which vectorise), summed in double */
CT_CLONES static double row_lse(const float *x, int64_t c)
{
    float mx = x[0];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 1; j < c; j++)
        mx = x[j] > mx ? x[j] : mx;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < c; j++)
        s += (double)ct__expf_unclamped(x[j] - mx);
    return mx + log(s);
}

/* g[j] += ga p_j with p_j = e^(x_j - lse) (plain cross entropy: the target's -ga is the
 * caller's) */
CT_CLONES static void add_probs(const float *restrict x, int64_t c, float lse, float ga,
                                float *restrict g)
{
    for (int64_t j = 0; j < c; j++)
        g[j] += ga * ct__expf_unclamped(x[j] - lse);
}

/* Shared by cross entropy (log_softmax = 1) and nll (input already log-probabilities). */
static int class_forward(const char *fn, int log_softmax, const float *x, const int64_t *target,
                         int64_t n, int64_t c, const ct_ce_opts *opts, float *out)
{
    ct_ce_opts d = {0};
    const ct_ce_opts *o = opts ? opts : &d;
    int rc = check_class(fn, x, target, n, c, o, out);
    if (rc)
        return rc;
    if (!log_softmax && o->label_smoothing != 0.0)
        return ct__error(CT_EINVAL, "%s: label_smoothing = %g: nll takes none", fn,
                         o->label_smoothing);
    const double ls = o->label_smoothing;
    const int64_t ign = ignore_of(o);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *row = x + i * c;
        int64_t t = target[i];
        double li = 0;
        if (t != ign) {
            double lse = log_softmax ? row_lse(row, c) : 0.0;
            double wt = o->weight ? o->weight[t] : 1.0;
            li = (1.0 - ls) * (-wt * (row[t] - lse));
            if (ls != 0.0) {
                double sm = 0;
                for (int64_t j = 0; j < c; j++)
                    sm += (o->weight ? o->weight[j] : 1.0) * (row[j] - lse);
                li += ls / (double)c * -sm;
            }
        }
        if (o->reduction == CT_REDUCTION_NONE)
            out[i] = (float)li;
        else
            sum += li;
    }
    if (o->reduction == CT_REDUCTION_SUM)
        out[0] = (float)sum;
    else if (o->reduction == CT_REDUCTION_MEAN)
        out[0] = (float)(sum / total_weight(target, n, o));
    return 0;
}

static int class_backward(const char *fn, int log_softmax, const float *x, const int64_t *target,
                          int64_t n, int64_t c, const ct_ce_opts *opts, const float *grad_out,
                          float *grad)
{
    ct_ce_opts d = {0};
    const ct_ce_opts *o = opts ? opts : &d;
    int rc = check_class(fn, x, target, n, c, o, grad);
    if (rc)
        return rc;
    if (!grad_out)
        return ct__error(CT_EINVAL, "%s: NULL grad_out", fn);
    if (!log_softmax && o->label_smoothing != 0.0)
        return ct__error(CT_EINVAL, "%s: label_smoothing = %g: nll takes none", fn,
                         o->label_smoothing);
    const double ls = o->label_smoothing;
    const int64_t ign = ignore_of(o);
    double scale = 1.0;
    if (o->reduction == CT_REDUCTION_MEAN)
        scale = 1.0 / total_weight(target, n, o);
    double wsum = (double)c;
    if (o->weight) {
        wsum = 0;
        for (int64_t j = 0; j < c; j++)
            wsum += o->weight[j];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t t = target[i];
        if (t == ign)
            continue;
        const float *row = x + i * c;
        float *g = grad + i * c;
        double gi = (o->reduction == CT_REDUCTION_NONE ? grad_out[i] : grad_out[0]) * scale;
        double wt = o->weight ? o->weight[t] : 1.0;
        if (!log_softmax) {
            g[t] += (float)(-wt * gi);
            continue;
        }
        double lse = row_lse(row, c);
        double a = (1.0 - ls) * wt, b = ls / (double)c;
        if (!o->weight && ls == 0.0) { /* the common case, in float */
            add_probs(row, c, (float)lse, (float)gi, g);
            g[t] -= (float)gi;
            continue;
        }
        for (int64_t j = 0; j < c; j++) {
            double p = exp((double)row[j] - lse);
            double wj = o->weight ? o->weight[j] : 1.0;
            double dj = a * (p - (j == t ? 1.0 : 0.0)) + b * (wsum * p - wj);
            g[j] += (float)(gi * dj);
        }
    }
    return 0;
}

int ct_loss_cross_entropy_forward(const float *logits, const int64_t *target, int64_t n, int64_t c,
                                  const ct_ce_opts *opts, float *out)
{
    return class_forward("cross_entropy_forward", 1, logits, target, n, c, opts, out);
}

int ct_loss_cross_entropy_backward(const float *logits, const int64_t *target, int64_t n, int64_t c,
                                   const ct_ce_opts *opts, const float *grad_out,
                                   float *grad_logits)
{
    return class_backward("cross_entropy_backward", 1, logits, target, n, c, opts, grad_out,
                          grad_logits);
}

int ct_loss_nll_forward(const float *logp, const int64_t *target, int64_t n, int64_t c,
                        const ct_ce_opts *opts, float *out)
{
    return class_forward("nll_forward", 0, logp, target, n, c, opts, out);
}

int ct_loss_nll_backward(const float *logp, const int64_t *target, int64_t n, int64_t c,
                         const ct_ce_opts *opts, const float *grad_out, float *grad_logp)
{
    return class_backward("nll_backward", 0, logp, target, n, c, opts, grad_out, grad_logp);
}

/* ---- elementwise losses -------------------------------------------------------------------- */

static int check_elem(const char *fn, const float *x, const float *y, int64_t numel, ct_reduction r,
                      const void *out, const float *grad_out, int backward)
{
    if (!x || !y || !out || (backward && !grad_out))
        return ct__error(CT_EINVAL, "%s: NULL %s", fn,
                         !x     ? "input"
                         : !y   ? "target"
                         : !out ? "output"
                                : "grad_out");
    if (numel < 0)
        return ct__error(CT_EINVAL, "%s: numel = %lld: must be >= 0", fn, (long long)numel);
    return check_red(fn, r);
}

/* kind 0: mse, 1: l1 */
static int elem_forward(const char *fn, int kind, const float *x, const float *y, int64_t numel,
                        ct_reduction r, float *out)
{
    int rc = check_elem(fn, x, y, numel, r, out, NULL, 0);
    if (rc)
        return rc;
    double sum = 0;
    for (int64_t k = 0; k < numel; k++) {
        float d = x[k] - y[k];
        float l = kind == 0 ? d * d : fabsf(d);
        if (r == CT_REDUCTION_NONE)
            out[k] = l;
        else
            sum += l;
    }
    if (r == CT_REDUCTION_SUM)
        out[0] = (float)sum;
    else if (r == CT_REDUCTION_MEAN)
        out[0] = (float)(sum / (double)numel);
    return 0;
}

static int elem_backward(const char *fn, int kind, const float *x, const float *y, int64_t numel,
                         ct_reduction r, const float *grad_out, float *grad)
{
    int rc = check_elem(fn, x, y, numel, r, grad, grad_out, 1);
    if (rc)
        return rc;
    const float scale = r == CT_REDUCTION_MEAN ? (float)(1.0 / (double)numel) : 1.0f;
    const float norm = kind == 0 ? 2.0f * scale : scale;
    const bool none = r == CT_REDUCTION_NONE;
    const float g0 = grad_out[0];
    for (int64_t k = 0; k < numel; k++) {
        float d = x[k] - y[k];
        float gk = none ? grad_out[k] : g0;
        float dl = kind == 0 ? d : (float)((d > 0) - (d < 0));
        grad[k] += norm * dl * gk;
    }
    return 0;
}

int ct_loss_mse_forward(const float *input, const float *target, int64_t numel,
                        ct_reduction reduction, float *out)
{
    return elem_forward("mse_forward", 0, input, target, numel, reduction, out);
}

int ct_loss_mse_backward(const float *input, const float *target, int64_t numel,
                         ct_reduction reduction, const float *grad_out, float *grad_input)
{
    return elem_backward("mse_backward", 0, input, target, numel, reduction, grad_out, grad_input);
}

int ct_loss_l1_forward(const float *input, const float *target, int64_t numel,
                       ct_reduction reduction, float *out)
{
    return elem_forward("l1_forward", 1, input, target, numel, reduction, out);
}

int ct_loss_l1_backward(const float *input, const float *target, int64_t numel,
                        ct_reduction reduction, const float *grad_out, float *grad_input)
{
    return elem_backward("l1_backward", 1, input, target, numel, reduction, grad_out, grad_input);
}

/* ---- binary cross entropy ----------------------------------------------------------------- */

static int check_bce(const char *fn, const float *x, const float *y, int64_t n, int64_t c,
                     const ct_bce_opts *o, const void *out, int backward, const float *grad_out,
                     int logits)
{
    int rc = check_elem(fn, x, y, n, o->reduction, out, grad_out, backward);
    if (rc)
        return rc;
    if (c < 1)
        return ct__error(CT_EINVAL, "%s: shape (N=%lld, C=%lld): need C >= 1", fn, (long long)n,
                         (long long)c);
    if (!logits && o->pos_weight)
        return ct__error(CT_EINVAL, "%s: pos_weight is for bce_with_logits only", fn);
    if (!logits)
        for (int64_t k = 0; k < n * c; k++)
            if (!(x[k] >= 0.0f && x[k] <= 1.0f))
                return ct__error(CT_EINVAL, "%s: input[%lld] = %g: must be in [0, 1]", fn,
                                 (long long)k, x[k]);
    return 0;
}

static void reduce_out(ct_reduction r, double sum, int64_t numel, float *out)
{
    if (r == CT_REDUCTION_SUM)
        out[0] = (float)sum;
    else if (r == CT_REDUCTION_MEAN)
        out[0] = (float)(sum / (double)numel);
}

int ct_loss_bce_forward(const float *input, const float *target, int64_t n, int64_t c,
                        const ct_bce_opts *opts, float *out)
{
    ct_bce_opts d = {0};
    const ct_bce_opts *o = opts ? opts : &d;
    int rc = check_bce("bce_forward", input, target, n, c, o, out, 0, NULL, 0);
    if (rc)
        return rc;
    double sum = 0;
    for (int64_t k = 0; k < n * c; k++) {
        double x = input[k], y = target[k];
        double l = (y - 1.0) * fmax(log(1.0 - x), -100.0) - y * fmax(log(x), -100.0);
        if (o->weight)
            l *= o->weight[k];
        if (o->reduction == CT_REDUCTION_NONE)
            out[k] = (float)l;
        else
            sum += l;
    }
    reduce_out(o->reduction, sum, n * c, out);
    return 0;
}

int ct_loss_bce_backward(const float *input, const float *target, int64_t n, int64_t c,
                         const ct_bce_opts *opts, const float *grad_out, float *grad_input)
{
    ct_bce_opts d = {0};
    const ct_bce_opts *o = opts ? opts : &d;
    int rc = check_bce("bce_backward", input, target, n, c, o, grad_input, 1, grad_out, 0);
    if (rc)
        return rc;
    const int64_t numel = n * c;
    const double scale = o->reduction == CT_REDUCTION_MEAN ? 1.0 / (double)numel : 1.0;
    for (int64_t k = 0; k < numel; k++) {
        double x = input[k], y = target[k];
        double g = o->reduction == CT_REDUCTION_NONE ? grad_out[k] : grad_out[0];
        double gk = g * (x - y) / fmax((1.0 - x) * x, 1e-12);
        if (o->weight)
            gk *= o->weight[k];
        grad_input[k] += (float)(gk * scale);
    }
    return 0;
}

int ct_loss_bce_with_logits_forward(const float *logits, const float *target, int64_t n, int64_t c,
                                    const ct_bce_opts *opts, float *out)
{
    ct_bce_opts d = {0};
    const ct_bce_opts *o = opts ? opts : &d;
    int rc = check_bce("bce_with_logits_forward", logits, target, n, c, o, out, 0, NULL, 1);
    if (rc)
        return rc;
    double sum = 0;
    for (int64_t k = 0; k < n * c; k++) {
        double x = logits[k], y = target[k];
        double lw = o->pos_weight ? (o->pos_weight[k % c] - 1.0) * y + 1.0 : 1.0;
        /* log(1 + exp(-x)) computed without overflow: log1p(exp(-|x|)) + max(-x, 0) */
        double l = (1.0 - y) * x + lw * (log1p(exp(-fabs(x))) + fmax(-x, 0.0));
        if (o->weight)
            l *= o->weight[k];
        if (o->reduction == CT_REDUCTION_NONE)
            out[k] = (float)l;
        else
            sum += l;
    }
    reduce_out(o->reduction, sum, n * c, out);
    return 0;
}

int ct_loss_bce_with_logits_backward(const float *logits, const float *target, int64_t n, int64_t c,
                                     const ct_bce_opts *opts, const float *grad_out,
                                     float *grad_logits)
{
    ct_bce_opts d = {0};
    const ct_bce_opts *o = opts ? opts : &d;
    int rc =
        check_bce("bce_with_logits_backward", logits, target, n, c, o, grad_logits, 1, grad_out, 1);
    if (rc)
        return rc;
    const int64_t numel = n * c;
    const double scale = o->reduction == CT_REDUCTION_MEAN ? 1.0 / (double)numel : 1.0;
    for (int64_t k = 0; k < numel; k++) {
        double x = logits[k], y = target[k];
        double g = o->reduction == CT_REDUCTION_NONE ? grad_out[k] : grad_out[0];
        double sig = 1.0 / (1.0 + exp(-x));
        double gk;
        if (o->pos_weight) {
            double t = o->pos_weight[k % c] * y;
            gk = ((t + 1.0 - y) * sig - t) * g;
        } else {
            gk = (sig - y) * g;
        }
        if (o->weight)
            gk *= o->weight[k];
        grad_logits[k] += (float)(gk * scale);
    }
    return 0;
}
