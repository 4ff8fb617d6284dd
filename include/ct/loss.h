/* ct/loss.h — loss kernels on raw f32 arrays: cross entropy (label smoothing, class weights,
 * ignore_index), NLL, MSE, L1, BCE and BCE-with-logits, forward and backward, with PyTorch
 * 1.13's semantics (torch.nn.functional.*) for every reduction.
 *
 * Not here: tensors or autograd (the engine wraps these), soft (probability) targets for cross
 * entropy, spatial (N,C,d1,...) inputs (flatten them to rows first), devices other than CPU.
 *
 * Shapes: N rows (samples), C classes/columns, arrays row-major.
 *   forward  out:        (1) for CT_REDUCTION_MEAN/SUM; (N) for cross_entropy/nll with NONE;
 *                        (N*C) (elementwise, same shape as input) for mse/l1/bce* with NONE.
 *   backward grad_out:   same shape as forward's out.
 *            grad_input: same shape as input; ACCUMULATED (+=), as backward does in llm.c.
 * Scalar reductions are summed in double. The gradient is taken with respect to the first
 * argument (logits / log-probabilities / input) only.
 *
 * Errors: every function returns 0, or CT_EINVAL naming the argument (NULL pointer, bad size,
 * bad option, a target class out of range as "target[i] = t", a BCE input out of [0,1]) with
 * nothing written. All functions are thread-safe (no state); buffers are borrowed for the call.
 *
 * Example:
 *     float loss;
 *     ct_loss_cross_entropy_forward(logits, y, N, C, &(ct_ce_opts){.label_smoothing = 0.1},
 *                                   &loss);
 *     float one = 1.0f;
 *     ct_loss_cross_entropy_backward(logits, y, N, C, &(ct_ce_opts){.label_smoothing = 0.1},
 *                                    &one, grad_logits);
 */
#ifndef CT_LOSS_H
#define CT_LOSS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_reduction {
    CT_REDUCTION_MEAN = 0, /* default */
    CT_REDUCTION_SUM = 1,
    CT_REDUCTION_NONE = 2,
} ct_reduction;

/* Options of cross_entropy and nll (opts may be NULL: mean, no smoothing, no weights).
 * Targets equal to the ignore index contribute 0 and are left out of the mean's denominator.
 * Without use_ignore_index, PyTorch's default ignore_index -100 applies. With class weights,
 * the mean divides by the sum of the targets' weights (as PyTorch does). A mean over no
 * counted target is NaN, as in PyTorch. */
typedef struct ct_ce_opts {
    ct_reduction reduction;
    double label_smoothing; /* [0, 1]; cross entropy only (must be 0 for nll) */
    const float *weight;    /* (C) class weights, or NULL */
    bool use_ignore_index;
    int64_t ignore_index;
} ct_ce_opts;

/* Cross entropy on logits (N,C) with class-index targets (N). */
int ct_loss_cross_entropy_forward(const float *logits, const int64_t *target, int64_t n, int64_t c,
                                  const ct_ce_opts *opts, float *out);
int ct_loss_cross_entropy_backward(const float *logits, const int64_t *target, int64_t n, int64_t c,
                                   const ct_ce_opts *opts, const float *grad_out,
                                   float *grad_logits);

/* Negative log-likelihood on log-probabilities (N,C) with class-index targets (N). */
int ct_loss_nll_forward(const float *logp, const int64_t *target, int64_t n, int64_t c,
                        const ct_ce_opts *opts, float *out);
int ct_loss_nll_backward(const float *logp, const int64_t *target, int64_t n, int64_t c,
                         const ct_ce_opts *opts, const float *grad_out, float *grad_logp);

/* Mean squared error and L1 over numel elements; gradient w.r.t. input. L1's gradient at
 * input == target is 0 (sign(0)), as in PyTorch. */
int ct_loss_mse_forward(const float *input, const float *target, int64_t numel,
                        ct_reduction reduction, float *out);
int ct_loss_mse_backward(const float *input, const float *target, int64_t numel,
                         ct_reduction reduction, const float *grad_out, float *grad_input);
int ct_loss_l1_forward(const float *input, const float *target, int64_t numel,
                       ct_reduction reduction, float *out);
int ct_loss_l1_backward(const float *input, const float *target, int64_t numel,
                        ct_reduction reduction, const float *grad_out, float *grad_input);

/* Options of bce and bce_with_logits (opts may be NULL: mean, no weights). */
typedef struct ct_bce_opts {
    ct_reduction reduction;
    const float *weight;     /* (N*C) per-element rescaling, or NULL */
    const float *pos_weight; /* (C) weight of positive examples, bce_with_logits only */
} ct_bce_opts;

/* Binary cross entropy on probabilities (N,C) in [0,1] (log clamped at -100, as PyTorch). */
int ct_loss_bce_forward(const float *input, const float *target, int64_t n, int64_t c,
                        const ct_bce_opts *opts, float *out);
int ct_loss_bce_backward(const float *input, const float *target, int64_t n, int64_t c,
                         const ct_bce_opts *opts, const float *grad_out, float *grad_input);

/* Binary cross entropy on logits (N,C), numerically stable for any logit. */
int ct_loss_bce_with_logits_forward(const float *logits, const float *target, int64_t n, int64_t c,
                                    const ct_bce_opts *opts, float *out);
int ct_loss_bce_with_logits_backward(const float *logits, const float *target, int64_t n, int64_t c,
                                     const ct_bce_opts *opts, const float *grad_out,
                                     float *grad_logits);

#ifdef __cplusplus
}
#endif
#endif
