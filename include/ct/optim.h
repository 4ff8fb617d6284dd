/* ct/optim.h — optimizers (SGD, Adam, AdamW) and learning-rate schedulers on raw f32 arrays.
 *
 * The idea: an optimizer updates parameters it does not own. The engine hands it an array of
 * ct_param_ref (name, value, grad, numel) and calls ct_optim_step() after backward; the update
 * is PyTorch 1.13's torch.optim.SGD / Adam / AdamW (single-tensor, foreach=False path) to
 * float rounding (<= ~2e-7 relative after 10 steps in the tests): one branch-free vectorised loop
 * per parameter, with AVX2/AVX-512 clones chosen at load time and no FMA contraction, so every
 * machine computes bit-identical updates. A scheduler changes the optimizer's learning rate
 * exactly as torch.optim.lr_scheduler does (recursive "chainable" forms). Both expose their
 * state as named entries (ct_state_entry) that a checkpoint writer stores and gives back.
 *
 * Also: gradient clipping by norm or value (torch.nn.utils.clip_grad_*), SequentialLR.
 * Not here: tensors, autograd, devices (CPU f32 only), sparse gradients, foreach/fused paths.
 *
 * Worked example:
 *
 *     ct_param_ref ps[] = {{"0.weight", w, gw, 784 * 256}, {"0.bias", b, gb, 256}};
 *     ct_optim *o = ct_optim_adam_new(ps, 2, &(ct_adam_opts){.lr = 1e-3});
 *     ct_sched *s = ct_sched_multistep_new(o, &(ct_multistep_opts){
 *         .milestones = {10, 20}, .num_milestones = 2, .gamma = 0.1});
 *     for (epoch...) { for (batch...) { ct_optim_zero_grad(o); backward(); ct_optim_step(o); }
 *                      ct_sched_step(s); }
 *     ct_sched_destroy(&s); ct_optim_destroy(&o);
 *
 * Ownership: an optimizer copies the ct_param_ref array and the names; the value/grad arrays
 * are borrowed and must stay valid (and not move) until the optimizer is destroyed or
 * ct_optim_set_param_ptrs() re-points them. A scheduler borrows its optimizer, which must
 * outlive it. Entries returned by the state-dict functions are borrowed (see each function).
 *
 * Threads: an optimizer or scheduler is not thread-safe; use each from one thread at a time.
 * Distinct objects may be used from distinct threads.
 *
 * Options: zero means "the PyTorch default". Where zero is also a legal value different from the
 * default (e.g. Adam's beta1, AdamW's weight_decay), pass CT_ZERO (negative zero) for a
 * literal zero. */
#ifndef CT_OPTIM_H
#define CT_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "ct/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A literal 0.0 in an options struct field whose 0 means "default" (negative zero). */
#define CT_ZERO (-0.0)

/* One parameter: value and gradient arrays of numel floats each. grad == NULL means "no
 * gradient": the parameter is skipped by step (as PyTorch skips p.grad is None). */
typedef struct ct_param_ref {
    const char *name; /* stable dotted name, the state-dict key prefix; copied */
    float *value;     /* (numel) borrowed */
    float *grad;      /* (numel) borrowed, or NULL */
    int64_t numel;
    ct_device device; /* where value and grad live (CT_CPU when left 0); the optimizer's state
                         and its steps are there too (ct/tensor.h) */
} ct_param_ref;

/* State entries: how optimizers and schedulers expose and restore their state. */
typedef enum ct_state_kind {
    CT_STATE_TENSOR = 0, /* data[numel] f32 */
    CT_STATE_SCALAR = 1, /* scalar (double) */
    CT_STATE_STRING = 2, /* str (NUL-terminated) */
} ct_state_kind;

typedef struct ct_state_entry {
    const char *name;
    ct_state_kind kind;
    const float *data; /* CT_STATE_TENSOR */
    int64_t numel;     /* CT_STATE_TENSOR */
    double scalar;     /* CT_STATE_SCALAR */
    const char *str;   /* CT_STATE_STRING */
} ct_state_entry;

/* ---- optimizers ----------------------------------------------------------------------- */

typedef struct ct_optim ct_optim;

/* torch.optim.SGD. lr 0 -> 1e-3 (torch has no default). Checks: lr >= 0, momentum >= 0,
 * weight_decay >= 0, dampening >= 0; nesterov needs momentum > 0 and dampening == 0. */
typedef struct ct_sgd_opts {
    double lr;
    double momentum;
    double dampening;
    bool nesterov;
    double weight_decay; /* L2 penalty added to the gradient */
    bool maximize;
} ct_sgd_opts;

/* torch.optim.Adam / AdamW. Defaults: lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8,
 * weight_decay 0 (Adam, added to the gradient) or 1e-2 (AdamW, decoupled: p *= 1 - lr*wd).
 * Checks: lr >= 0, eps >= 0, 0 <= beta1 < 1, 0 <= beta2 < 1, weight_decay >= 0. */
typedef struct ct_adam_opts {
    double lr;
    double beta1;
    double beta2;
    double eps;
    double weight_decay;
    bool amsgrad;
    bool maximize;
} ct_adam_opts;

/* Return 0, or CT_EINVAL naming the offending field (ct_last_error()). opts may be NULL. */
int ct_sgd_opts_check(const ct_sgd_opts *opts);
int ct_adam_opts_check(const ct_adam_opts *opts);

/* Create an optimizer over params[0..n) as one parameter group (group 0). opts may be NULL
 * (all defaults). Returns an owned object, or NULL on bad options or arguments (CT_EINVAL,
 * message in ct_last_error()) or out of memory. Parameter names must be unique. */
ct_optim *ct_optim_sgd_new(const ct_param_ref *params, int n, const ct_sgd_opts *opts);
ct_optim *ct_optim_adam_new(const ct_param_ref *params, int n, const ct_adam_opts *opts);
ct_optim *ct_optim_adamw_new(const ct_param_ref *params, int n, const ct_adam_opts *opts);

/* Add a parameter group with its own hyper-parameters (as torch's add_param_group). opts must
 * point to the optimizer's own options type (ct_sgd_opts for SGD, ct_adam_opts for Adam/AdamW);
 * NULL means defaults. Returns the new group's index (>= 1) or a negative CT_E* code. */
int ct_optim_add_group(ct_optim *o, const ct_param_ref *params, int n, const void *opts);

/* Frees the optimizer and its state (not the parameters). Accepts NULL; nulls *o. */
void ct_optim_destroy(ct_optim **o);

/* One update of every parameter that has a gradient. Returns 0 or CT_EINVAL (o NULL). */
int ct_optim_step(ct_optim *o);

/* Sets every gradient to zero (torch's zero_grad(set_to_none=False)). */
void ct_optim_zero_grad(ct_optim *o);

/* torch.nn.utils.clip_grad_norm_ over the optimizer's parameters that have gradients: the
 * norm_type-norm of all gradients together (norm_type 0 -> 2; INFINITY for the max norm; > 0)
 * into *total_norm (may be NULL); if max_norm / (total + 1e-6) < 1 every gradient is scaled by
 * it. CT_EINVAL for max_norm < 0 or a bad norm_type. Parameters on a device (all on one): the
 * L2 norm only (each parameter's norm there, one download of them; CT_ENOSYS for others), the
 * same floats as the CPU's where the device runs the CPU's kernels (the checking device). */
int ct_optim_clip_grad_norm(ct_optim *o, double max_norm, double norm_type, double *total_norm);
/* torch.nn.utils.clip_grad_value_: clamps every gradient element into [-clip, clip]. */
int ct_optim_clip_grad_value(ct_optim *o, double clip);

/* Re-points parameter i (in creation/group order) to new value/grad arrays of the same numel. */
int ct_optim_set_param_ptrs(ct_optim *o, int i, float *value, float *grad);

/* ZeRO-1: parameter i is stepped only on elements [lo, lo + n) (the part this replica owns); its
 * state arrays hold n floats (state that exists keeps its part of the old range), a state dict's
 * tensors hold that part only, and ct_optim_load_state_dict takes full tensors and keeps the
 * part. Default: [0, numel). CT_EINVAL for a range outside the parameter. */
int ct_optim_set_shard(ct_optim *o, int i, int64_t lo, int64_t n);
/* The index of the parameter whose value array is value, or -1. */
int ct_optim_find_param(const ct_optim *o, const float *value);
/* Bytes of optimizer state (momentum, exp_avg, exp_avg_sq, max_exp_avg_sq) allocated now. */
int64_t ct_optim_state_bytes(const ct_optim *o);

int ct_optim_num_params(const ct_optim *o);
int ct_optim_num_groups(const ct_optim *o);
/* "sgd", "adam" or "adamw". */
const char *ct_optim_kind(const ct_optim *o);

/* Learning rate of group g (0 .. num_groups-1); NaN when g is out of range. */
double ct_optim_get_lr(const ct_optim *o, int g);
/* Sets group g's lr, or every group's when g < 0. CT_EINVAL if lr < 0 or g out of range. */
int ct_optim_set_lr(ct_optim *o, int g, double lr);

/* State dict. Entries (names in PyTorch's terms):
 *   "type"                              string  "sgd" | "adam" | "adamw"
 *   "param_groups.<g>.<hyper>"          scalar  lr, momentum, dampening, nesterov,
 *                                               weight_decay, maximize (SGD); lr, beta1, beta2,
 *                                               eps, weight_decay, amsgrad, maximize (Adam/W);
 *                                               initial_lr once a scheduler has set it
 *   "<param>.momentum_buffer"           tensor  SGD with momentum, after the param's first step
 *   "<param>.step"                      scalar  Adam/AdamW, after the param's first step
 *   "<param>.exp_avg", ".exp_avg_sq"    tensor  Adam/AdamW, idem
 *   "<param>.max_exp_avg_sq"            tensor  amsgrad only
 * *entries is borrowed until the next call on o; tensor data points at the live state (it
 * changes with each step: copy it out before stepping again). */
int ct_optim_state_dict(ct_optim *o, const ct_state_entry **entries, int *n);

/* Restores state saved by ct_optim_state_dict of an optimizer of the same type with the same
 * parameter names, group layout and sizes. Every entry must be known; a parameter's state must
 * be complete or absent (absent: the parameter starts fresh, as in PyTorch). Hyper-parameters
 * are restored too (as torch's load_state_dict does). Data is copied. On error (CT_EINVAL or
 * CT_ERANGE naming the entry) the optimizer is left unchanged. */
int ct_optim_load_state_dict(ct_optim *o, const ct_state_entry *entries, int n);

/* ---- learning-rate schedulers ---------------------------------------------------------- */

typedef struct ct_sched ct_sched;

/* StepLR: lr *= gamma every step_size epochs. step_size must be >= 1; gamma 0 -> 0.1. */
typedef struct ct_steplr_opts {
    int step_size;
    double gamma;
} ct_steplr_opts;

/* MultiStepLR: lr *= gamma at each milestone (a milestone listed twice applies gamma^2). */
#define CT_SCHED_MAX_MILESTONES 32
typedef struct ct_multistep_opts {
    int milestones[CT_SCHED_MAX_MILESTONES];
    int num_milestones;
    double gamma; /* 0 -> 0.1 */
} ct_multistep_opts;

/* ExponentialLR: lr *= gamma every epoch. gamma must be > 0. */
typedef struct ct_exponential_opts {
    double gamma;
} ct_exponential_opts;

/* CosineAnnealingLR (PyTorch's recursive form, including its behaviour past t_max). */
typedef struct ct_cosine_opts {
    int t_max; /* >= 1 */
    double eta_min;
} ct_cosine_opts;

/* LinearLR: factor goes linearly from start_factor to end_factor over total_iters epochs.
 * Defaults: start_factor 1/3, end_factor 1.0 (CT_ZERO for 0), total_iters 5.
 * Checks: 0 < start_factor <= 1, 0 <= end_factor <= 1. */
typedef struct ct_linear_opts {
    double start_factor;
    double end_factor;
    int total_iters;
} ct_linear_opts;

/* ReduceLROnPlateau. Defaults: mode min, factor 0.1, patience 10 (CT_PATIENCE_ZERO for 0),
 * threshold 1e-4 (CT_ZERO for 0), threshold_mode rel, cooldown 0, min_lr 0, eps 1e-8.
 * Checks: factor < 1, threshold >= 0, min_lr >= 0. */
#define CT_PATIENCE_ZERO (-1)
typedef enum ct_plateau_mode { CT_PLATEAU_MIN = 0, CT_PLATEAU_MAX = 1 } ct_plateau_mode;
typedef enum ct_threshold_mode { CT_THRESHOLD_REL = 0, CT_THRESHOLD_ABS = 1 } ct_threshold_mode;
typedef struct ct_plateau_opts {
    ct_plateau_mode mode;
    double factor;
    int patience;
    double threshold;
    ct_threshold_mode threshold_mode;
    int cooldown;
    double min_lr; /* for every group */
    double eps;
} ct_plateau_opts;

/* Create a scheduler over o (borrowed). As in PyTorch, creation records each group's
 * initial_lr (if not yet set) and performs the initial step (epoch 0), which may change the
 * lr (LinearLR multiplies it by start_factor). Returns NULL on bad options (CT_EINVAL naming
 * the field, in ct_last_error()) or out of memory. opts may be NULL only where every field has
 * a default (multistep with no milestones, linear, plateau). */
ct_sched *ct_sched_steplr_new(ct_optim *o, const ct_steplr_opts *opts);
ct_sched *ct_sched_multistep_new(ct_optim *o, const ct_multistep_opts *opts);
ct_sched *ct_sched_exponential_new(ct_optim *o, const ct_exponential_opts *opts);
ct_sched *ct_sched_cosine_new(ct_optim *o, const ct_cosine_opts *opts);
ct_sched *ct_sched_linear_new(ct_optim *o, const ct_linear_opts *opts);
ct_sched *ct_sched_plateau_new(ct_optim *o, const ct_plateau_opts *opts);

/* SequentialLR: scheds[0] until milestones[0], then scheds[1] (restarted at its epoch 0 with its
 * closed form), ... (e.g. a LinearLR warm-up, then cosine). milestones has n-1 sorted entries.
 * Takes ownership of scheds[0..n) (also on failure; the entries are set to NULL); they must be
 * distinct non-plateau schedulers over o, created just before, as in PyTorch. Creation resets
 * the lr to initial_lr and re-does only scheds[0]'s initial step. */
ct_sched *ct_sched_sequential_new(ct_optim *o, ct_sched **scheds, int n, const int *milestones);

/* Warm-up then cosine, as torch's SequentialLR(o, [LinearLR(o, start_factor, 1.0,
 * warmup_steps), CosineAnnealingLR(o, T_max = total_steps - warmup_steps, eta_min)],
 * milestones = [warmup_steps]) (and built from those three here, so ct_sched_kind says
 * "sequential"): the lr rises linearly from start_factor * lr to lr over warmup_steps steps,
 * then falls along a cosine to eta_min at total_steps (past it, torch's recursive cosine goes
 * on). Defaults: start_factor 1/3 (LinearLR's), eta_min 0. Checks: warmup_steps >= 1,
 * total_steps > warmup_steps, 0 < start_factor <= 1, eta_min >= 0. */
typedef struct ct_warmup_cosine_opts {
    int warmup_steps;
    int total_steps;
    double start_factor;
    double eta_min;
} ct_warmup_cosine_opts;
ct_sched *ct_sched_warmup_cosine_new(ct_optim *o, const ct_warmup_cosine_opts *opts);

/* Accepts NULL; nulls *s. */
void ct_sched_destroy(ct_sched **s);

/* Advances one epoch (or batch) and sets the optimizer's lr. CT_EINVAL for a plateau
 * scheduler, which needs ct_sched_step_metric. */
int ct_sched_step(ct_sched *s);
/* ReduceLROnPlateau's step with the monitored value. CT_EINVAL for other schedulers. */
int ct_sched_step_metric(ct_sched *s, double metric);

/* The lr of group g that the last step set (torch's get_last_lr()); NaN if g is out of range. */
double ct_sched_get_last_lr(const ct_sched *s, int g);
/* "steplr", "multistep", "exponential", "cosine", "linear", "plateau" or "sequential". */
const char *ct_sched_kind(const ct_sched *s);
int ct_sched_last_epoch(const ct_sched *s);

/* State dict: "type" (string), "last_epoch", "step_count", "base_lrs.<g>", "last_lr.<g>", the
 * hyper-parameters by PyTorch's names ("step_size", "gamma", "T_max", "eta_min", ...,
 * "milestones" as a string "5,12,12"), and for plateau "best", "num_bad_epochs",
 * "cooldown_counter", "min_lrs.<g>", "mode", "threshold_mode"; for sequential "last_epoch",
 * "milestones", "last_lr.<g>" and each child's entries under "schedulers.<i>.". All
 * scalars/strings. *entries is borrowed until the next call on s. */
int ct_sched_state_dict(ct_sched *s, const ct_state_entry **entries, int *n);
/* Restores a state saved from a scheduler of the same type over as many groups. Every entry the
 * scheduler saves must be present and no other. Does not touch the optimizer's lr: restore the
 * optimizer's state too (as in PyTorch). On error the scheduler is unchanged. */
int ct_sched_load_state_dict(ct_sched *s, const ct_state_entry *entries, int n);

/* ---------------- dynamic loss scaling (f16 training) ----------------
 *
 * torch.cuda.amp.GradScaler's rules. f16 gradients underflow to zero below 2^-24; scaling the
 * loss by S scales every gradient by S. Per step:
 *   ct_grad_scaler_backward(s, loss)   backward of loss * scale
 *   ct_grad_scaler_unscale(s, o)       optional (before clipping): grads *= 1 / scale, and note
 *                                      whether any was inf or NaN (once per step)
 *   ct_grad_scaler_step(s, o, &done)   unscales unless done already; runs ct_optim_step only
 *                                      when every gradient was finite (*done says which)
 *   ct_grad_scaler_update(s)           a step with inf/NaN: scale *= backoff_factor and the
 *                                      count of good steps restarts; else the count goes up,
 *                                      and at growth_interval scale *= growth_factor (kept only
 *                                      when finite) and the count restarts.
 * The scale is an f32, as torch's. Gradients on any device: the check runs on their device's
 * kernels and copies one float per parameter to the host. */
typedef struct ct_grad_scaler ct_grad_scaler;
typedef struct ct_grad_scaler_opts {
    double init_scale;     /* 0 -> 65536 (2^16); must be > 0 */
    double growth_factor;  /* 0 -> 2; must be > 1 */
    double backoff_factor; /* 0 -> 0.5; must be in (0, 1) */
    int growth_interval;   /* 0 -> 2000; must be >= 1 */
} ct_grad_scaler_opts;

/* opts may be NULL (defaults). NULL with CT_EINVAL naming the bad field, or CT_ENOMEM. */
ct_grad_scaler *ct_grad_scaler_new(const ct_grad_scaler_opts *opts);
void ct_grad_scaler_destroy(ct_grad_scaler **s);
/* ct_tensor_backward of loss * the current scale (loss a scalar). */
int ct_grad_scaler_backward(ct_grad_scaler *s, ct_tensor *loss);
/* Returns 0, CT_EINVAL (NULL; unscale twice in one step), or a kernel's error. */
int ct_grad_scaler_unscale(ct_grad_scaler *s, ct_optim *o);
int ct_grad_scaler_step(ct_grad_scaler *s, ct_optim *o, bool *stepped);
int ct_grad_scaler_update(ct_grad_scaler *s);
/* The current scale; the number of finite steps since the last change (growth_tracker); whether
 * this step's unscale found inf or NaN. */
float ct_grad_scaler_scale(const ct_grad_scaler *s);
int ct_grad_scaler_growth_tracker(const ct_grad_scaler *s);
bool ct_grad_scaler_found_inf(const ct_grad_scaler *s);
/* Restores a checkpoint's scale and growth tracker (torch's state_dict "scale", "_growth_tracker").
 * CT_EINVAL unless scale > 0 and finite and 0 <= tracker < growth_interval. */
int ct_grad_scaler_load(ct_grad_scaler *s, float scale, int growth_tracker);

#ifdef __cplusplus
}
#endif
#endif
