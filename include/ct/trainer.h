/* ct/trainer.h — the trainer: data-parallel training of a model on a ct cluster, with
 * checkpoints in the object store and recovery from lost replicas and nodes.
 * docs/GUIDE.md explains how it works, section by section; this header keeps the contracts.
 *
 *     static ct_module *make_mlp(trainer_ctx *ctx)
 *     {
 *         return CT_SEQUENTIAL(ct_nn_flatten_new(), ct_nn_linear_new(784, 10, true));
 *     }
 *
 *     int main(void)
 *     {
 *         trainer_register_model("mlp", make_mlp); // before ct_init: replicas run main again
 *         ct_init(NULL);                           // in a replica: serves, never returns
 *         trainer *t = NULL;
 *         trainer_stats st;
 *         trainer_create(&(trainer_opts){.model = "mlp", .data = "fashion_mnist",
 *                                        .optimizer = "adam", .num_replicas = 2}, &t);
 *         trainer_train(t, .max_retries = 3, .stats = &st);
 *         trainer_shutdown(&t);
 *         ct_shutdown();
 *     }
 *
 * Ownership: trainer_create gives an owned trainer (trainer_shutdown); strings in options are
 * copied. Threads: a trainer is used by one thread at a time; the registry functions are not
 * thread-safe (call them from main before ct_init). */
#ifndef CT_TRAINER_H
#define CT_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "ct/ct.h"
#include "ct/data.h"
#include "ct/nn.h"
#include "ct/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- creators and the registry (GUIDE.md section 2) ---- */

/* What a creator knows about where it runs. Opaque; borrowed during the creator call. */
typedef struct trainer_ctx trainer_ctx;

int trainer_ctx_rank(const trainer_ctx *ctx);       /* 0 .. world_size-1; 0 in the driver */
int trainer_ctx_world_size(const trainer_ctx *ctx); /* replicas in this group; 1 in the driver */
uint64_t trainer_ctx_seed(const trainer_ctx *ctx);
int64_t trainer_ctx_start_epoch(const trainer_ctx *ctx); /* epoch this replica starts at */
bool trainer_ctx_is_driver(const trainer_ctx *ctx);      /* the driver's own check-run */
const char *trainer_ctx_config(const trainer_ctx *ctx);  /* the whole config string */
/* Config key "precision" = f32 (default), bf16 or f16 (ct_precision_parse; a bad value fails
 * the creation naming the key). The built-in steps apply it (forward and loss in an autocast
 * region); a custom step does so itself: ct_autocast_push(it) around forward and loss.
 * f16 with one model: every replica keeps a loss scaler (torch.cuda.amp.GradScaler's rules,
 * ct_grad_scaler in ct/optim.h; trainer_step_scaler) that the step helpers apply, in the
 * built-in train step and in a custom one alike: trainer_step_backward runs backward of
 * loss * scale (/ accumulate), trainer_step_clip_grad_norm and trainer_step_optimizer unscale
 * the gradients after they were averaged over the replicas (an inf or NaN on one replica is
 * one in all: all skip alike), and trainer_step_optimizer skips the update when any is inf or
 * NaN (a skipped step still counts as a step: trainer_stats.skipped_steps counts them) and
 * updates the scale (backoff on a skip, growth after growth_interval good steps). Config keys
 * (torch's defaults): scaler_init_scale (65536), scaler_growth_factor (2),
 * scaler_backoff_factor (0.5), scaler_growth_interval (2000). The scale and its growth count
 * are in the checkpoints (a checkpoint without them loads with a fresh scaler). Several models
 * with f16: no scaler is kept; the custom step scales itself (ct_grad_scaler).
 * bf16 and f16 run where the device has them: checkdev and CUDA; a CPU with AVX512_BF16 or AMX
 * for bf16, never f16 (oneDNN has no f16 CPU kernels): on CPU replicas trainer_create checks
 * the driver's CPU and fails with CT_ENOSYS naming the instruction set. */
ct_dtype trainer_ctx_precision(const trainer_ctx *ctx);
/* Config key "devices_per_replica" = k (1 .. 4; default 1): the devices a replica's model may
 * span, device i (0 .. k-1) being the replica's device with its index plus i (device
 * "checkdev": checkdev:0 .. checkdev:k-1; "cuda": the k GPUs the replica was given, see
 * gpus_per_replica). A model creator places its parts with ct_module_to(child,
 * trainer_ctx_device(ctx, i)); with k > 1 the trainer then leaves the placement as it is. In
 * the driver's check-run (and for i out of range) every device is CT_CPU. Each device's
 * gradients are averaged on that device. On "checkdev" k > 1 trains; on "cuda" trainer_create
 * refuses k > 1 for now (CT_ENOSYS: NCCL averages one GPU's gradients a communicator). The
 * seams between devices are the model's (ct_nn_to_device_new in a Sequential); its output
 * must end on device 0, where the labels are. */
int trainer_ctx_num_devices(const trainer_ctx *ctx);
ct_device trainer_ctx_device(const trainer_ctx *ctx, int i);

/* The config value of key ("key=value,..."), or def when absent. A value that does not parse,
 * and a key that nothing reads, fail the creation with an error naming the key. */
double trainer_config_double(trainer_ctx *ctx, const char *key, double def);
int64_t trainer_config_int(trainer_ctx *ctx, const char *key, int64_t def);
bool trainer_config_bool(trainer_ctx *ctx, const char *key, bool def); /* 1/0/true/false */
/* Borrowed until the ctx ends; copy it. */
const char *trainer_config_str(trainer_ctx *ctx, const char *key, const char *def);
/* Records a creator's own error; the creator then returns NULL / < 0. */
void trainer_ctx_fail(trainer_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What a data creator fills. The trainer owns train, val (may be NULL) and keep[] (datasets
 * they borrow from, destroyed after them). transform's mean/std point at static storage. */
typedef struct trainer_data {
    ct_dataset *train, *val;
    ct_dataset *keep[4];
    ct_transform_opts transform;
    int num_classes; /* for accuracy; 0: the model's output width */
    bool sharded;    /* train and val hold only this rank's shard (GUIDE.md section 2) */
    int prefetch;    /* batches built ahead by the loader's thread; 0: 2; negative: none */
    /* the targets are token ids (a language model): validation reports perplexity
     * (trainer_stats.val_perplexity), not accuracy */
    bool tokens;
} trainer_data;

/* A loss: the batch mean of loss(output (N,C), target (N) i64 labels or f32 targets), shape
 * (). Returns a new tensor recorded on the tape, or NULL. */
typedef ct_tensor *(*trainer_loss_fn)(ct_tensor *output, ct_tensor *target);

/* Creators return an owned object, or NULL / a negative CT_E* code with a message
 * (trainer_ctx_fail). A hook runs first in every replica and in the driver's check-run. */
typedef ct_module *(*trainer_model_creator)(trainer_ctx *ctx);
typedef int (*trainer_data_creator)(trainer_ctx *ctx, trainer_data *out);
typedef ct_optim *(*trainer_optimizer_creator)(trainer_ctx *ctx, ct_module *model);
typedef trainer_loss_fn (*trainer_loss_creator)(trainer_ctx *ctx);
typedef ct_sched *(*trainer_scheduler_creator)(trainer_ctx *ctx, ct_optim *optim);
typedef int (*trainer_hook)(trainer_ctx *ctx);

/* Register a creator under name (copied, <= 63 bytes), before ct_init, in the same order in
 * every process. CT_EEXIST when the name is taken for that kind; CT_EINVAL for NULL or "", or
 * after ct_init (replicas would never see it).
 * A name registered here is found before a built-in of that name (GUIDE.md lists them). */
int trainer_register_model(const char *name, trainer_model_creator fn);
int trainer_register_data(const char *name, trainer_data_creator fn);
int trainer_register_optimizer(const char *name, trainer_optimizer_creator fn);
int trainer_register_loss(const char *name, trainer_loss_creator fn);
int trainer_register_scheduler(const char *name, trainer_scheduler_creator fn);
int trainer_register_hook(const char *name, trainer_hook fn);

/* ---- custom training and validation steps (GUIDE.md section 4) ---- */

#define TRAINER_MAX_METRICS 64
#define TRAINER_METRIC_NAME_MAX 48

/* One batch: x (N, ...) f32, y (N) i64 labels or (N, ...) f32 targets. Borrowed. */
typedef struct trainer_batch {
    ct_tensor *x, *y;
    int64_t n;
    const int64_t *index; /* (N) each sample's index in its dataset (tests that count samples) */
} trainer_batch;

/* What a step reports for its batch; zeroed before the call. */
typedef struct trainer_step_out {
    double loss_sum; /* sum over the batch's samples of the loss (mean loss * n) */
    int64_t correct; /* top-1 hits (validation accuracy counts these) */
    int64_t samples; /* samples counted in loss_sum / correct (0: the batch is not counted) */
} trainer_step_out;

/* The context of one step call. Opaque; borrowed during the call, valid from its thread. */
typedef struct trainer_step trainer_step;

/* Returns 0 or a negative CT_E* code (the replica's epoch / validation then fails with it). */
typedef int (*trainer_step_fn)(trainer_step *s, const trainer_batch *b, trainer_step_out *out);

/* Register a step under name, as a creator. The built-ins need no name: leave opts NULL. */
int trainer_register_train_step(const char *name, trainer_step_fn fn);
int trainer_register_validate_step(const char *name, trainer_step_fn fn);
/* Declares the config keys ("clip,warmup") step `step` reads: when it is chosen, they count as
 * read. CT_ENOTREG for an unknown step. */
int trainer_register_step_keys(const char *step, const char *keys);

/* What a step works with, borrowed for the call. Declare the config keys a step reads
 * (trainer_register_step_keys): the driver's check-run refuses a key nothing reads. */
trainer_ctx *trainer_step_ctx(trainer_step *s);
ct_module *trainer_step_model(trainer_step *s);
ct_optim *trainer_step_optim(trainer_step *s);
trainer_loss_fn trainer_step_loss(trainer_step *s); /* the loss creator's function */
ct_sched *trainer_step_scheduler(trainer_step *s);  /* NULL when there is none */
/* The replica's loss scaler (precision f16, one model; see trainer_ctx_precision); NULL
 * otherwise. Read its scale; the helpers below apply it. */
ct_grad_scaler *trainer_step_scaler(trainer_step *s);
int64_t trainer_step_epoch(const trainer_step *s); /* 0-based epoch being run */
int64_t trainer_step_index(const trainer_step *s); /* batch index in this epoch */
int64_t trainer_step_count(const trainer_step *s); /* optimizer steps done before this one */
bool trainer_step_training(const trainer_step *s); /* train step (true) or validate step */
/* True when this batch's backward reduces and the optimizer steps: always, or with
 * accumulation the last batch of each group. */
bool trainer_step_sync(const trainer_step *s);

/* Train steps: backward of loss (shape ()), gradients averaged over replicas on return.
 * Exactly once per step on every rank; CT_EINVAL on a second call, from a validate step, or
 * with several models. With the loss scaler (f16) the gradients are left scaled by its scale. */
int trainer_step_backward(trainer_step *s, ct_tensor *loss);
/* Optimizer 0's step, then zero grad. After trainer_step_backward, at most once per step.
 * With the loss scaler: unscales (unless clipping did), skips the step when a gradient is inf
 * or NaN, and updates the scale. */
int trainer_step_optimizer(trainer_step *s);

/* Several models: models, optimizers and losses by index 0 .. num_models-1 (NULL out of
 * range); trainer_step_model / _optim / _loss are index 0. */
int trainer_step_num_models(const trainer_step *s);
ct_module *trainer_step_model_at(trainer_step *s, int i);
ct_optim *trainer_step_optim_at(trainer_step *s, int i);
trainer_loss_fn trainer_step_loss_at(trainer_step *s, int i);
/* Zeroes model i's gradients, runs backward of loss and averages only model i's gradients.
 * At most once per model per step; CT_EINVAL for a bad index, a second call, a validate step. */
int trainer_step_backward_model(trainer_step *s, int i, ct_tensor *loss);
/* Optimizer i's step, then zero model i's gradients; after its backward, at most once. */
int trainer_step_optimizer_at(trainer_step *s, int i);
/* torch.nn.utils.clip_grad_norm_ (L2) over optimizer 0's parameters, after backward: *norm
 * (may be NULL) gets the norm before clipping; max_norm <= 0 only measures. With the loss
 * scaler the gradients are unscaled first (as torch's scaler.unscale_ before clipping). */
int trainer_step_clip_grad_norm(trainer_step *s, double max_norm, double *norm);

/* Adds value for this batch to the named metric (averaged over batches and replicas).
 * CT_ENOSPC past TRAINER_MAX_METRICS names, CT_EINVAL for a bad name. */
int trainer_step_metric(trainer_step *s, const char *name, double value);

/* The built-in steps, callable from a custom one. train: forward, loss, backward, optimizer
 * (out: loss_sum, samples). validate: forward, loss, top-1 for i64 labels (out: + correct). */
int trainer_builtin_train_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out);
int trainer_builtin_validate_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out);

/* ---- the trainer ---- */

typedef struct trainer trainer;

typedef struct trainer_opts {
    /* required: registered names; model, optimizer and loss may be comma-separated lists
     * (several models: GUIDE.md section 4), each list <= 255 bytes */
    const char *model, *data, *optimizer;
    const char *loss;                /* NULL: "cross_entropy" */
    const char *scheduler;           /* NULL: none */
    const char *initialization_hook; /* NULL: none; a trainer_register_hook name */
    const char *config;              /* "key=value,..." read by creators; NULL: "" */
    int num_replicas;                /* 0: 1; the default of max_replicas */
    /* true: replicas train on CUDA GPUs (each asks the head for gpus_per_replica GPUs; the
     * node's CUDA_VISIBLE_DEVICES picks them): model, gradients and optimizer state on the GPU,
     * gradients averaged over NCCL. Same as device = "cuda". */
    bool use_gpu;
    double cpus_per_replica; /* resources per replica; 0: 1 (also its threads) */
    ct_strategy placement;   /* CT_PACK (default) or CT_SPREAD over nodes */
    int64_t batch_size;      /* per replica; 0: 64 */
    int64_t epochs;          /* total epochs trainer_train runs to; 0: 1 */
    uint64_t seed;           /* model init, shuffling, dropout */
    /* gradient bucket size (MB) after the first (1 MiB); 0: 25, or, when the replicas fill one
     * machine's CPUs (each bound to its own), all gradients in one bucket reduced after backward */
    double bucket_mb;
    int comm_timeout_ms;       /* backstop for a hung peer; 0: 60000 */
    const char *train_step;    /* NULL: the built-in; a trainer_register_train_step name */
    const char *validate_step; /* NULL: the built-in; ..._validate_step name */
    int accumulate; /* batches per optimizer step (gradient accumulation); 0 or 1: every batch */
    /* when the scheduler steps: "epoch" (NULL), "batch" (every optimizer step) or "manual" */
    const char *scheduler_step;
    /* a group has as many replicas as fit, at most max_replicas (0: num_replicas), never fewer
     * than min_replicas (0: 1; below it the driver waits); fewer than num_replicas is logged.
     * .min_replicas = num_replicas insists on all. min <= num <= max or CT_EINVAL. */
    int min_replicas, max_replicas;
    /* true: do not bind each replica's threads to CPUs of their own when they fill a node */
    bool no_cpu_binding;
    int gpus_per_replica; /* with use_gpu; 0: 1 */
    /* where replicas train: NULL or "cpu", "cuda" (use_gpu), or "checkdev": the checking
     * device, which runs everywhere without a GPU resource and makes code that would race on
     * a GPU fail (tests; its gradients are averaged by the CPU ring). The driver's own model
     * stays on the CPU; checkpoints are the same files whatever the device. */
    const char *device;
    /* ZeRO stage (or config key "zero" when 0 here): 0 off; 1 shards the optimizer state over
     * the replicas: gradients are reduce-scattered, each replica steps (and keeps AdamW's
     * moments for) only its 1/N of the elements, then the parameters are allgathered. Same
     * results and checkpoint format as without it. CPU replicas only (CT_ENOSYS else). */
    int zero_stage;
    /* what the driver does when a replica dies (or config key "recovery" when NULL here):
     * "live" (NULL: the default where it applies): the survivors discard the step in flight
     * and go on at once with the smaller world, the epoch's rest re-sharded over them, no step
     * lost or trained twice; "restart": every replica is ended and a new group starts from the
     * last checkpoint (the steps since it are trained again). Live needs CPU replicas without
     * ZeRO and unsharded data, and min_replicas survivors; otherwise the driver restarts, and
     * logs why (GUIDE.md section 6). Anything else: CT_EINVAL. */
    const char *recovery;
} trainer_opts;

/* Checks the options, runs every creator once in this process (with the built-in step, one
 * sample through model and loss: CT_ERANGE naming shapes that do not fit) and keeps the
 * driver's model. Starts nothing. Needs ct_init() first. On error *out is NULL and the message
 * names the bad option, creator name, config key or shapes. */
int trainer_create(const trainer_opts *opts, trainer **out);

/* A named metric of the steps (see trainer_step_metric). */
typedef struct trainer_metric {
    char name[TRAINER_METRIC_NAME_MAX];
    double value;
} trainer_metric;

/* Statistics of the last epoch, all replicas together. */
typedef struct trainer_stats {
    int64_t epoch;        /* epochs completed */
    int64_t steps;        /* optimizer steps so far (per replica) */
    double train_loss;    /* mean over the last epoch's samples of all replicas */
    double samples_per_s; /* last epoch: samples of all replicas / slowest replica's time */
    double epoch_seconds; /* last epoch, slowest replica */
    double val_loss;      /* last validation (trainer_validate, validate_every_*) */
    double val_accuracy;  /* top-1 (correct / samples: 0 for f32 targets) */
    /* token targets (trainer_data.tokens: the built-in "text"): exp(val_loss), the mean
     * per-token loss's perplexity; 0 for other data */
    double val_perplexity;
    int64_t val_samples; /* validation samples counted (all replicas) */
    int64_t val_epoch;   /* a validation during training: the 0-based epoch it ran in */
    int64_t val_step;    /* ... and the optimizer steps done before it */
    int retries_used;    /* failures recovered so far (all trainer_train calls) */
    int replicas;        /* replicas in the current group */
    bool weights_agree;  /* the replicas' weight hashes were equal after the last epoch */
    /* timing, CLOCK_MONOTONIC ns (comparable across processes of one host): */
    int64_t train_start_ns;      /* trainer_train entered */
    int64_t group_start_ns;      /* the current group's creation began */
    int64_t group_first_step_ns; /* the current group's first completed step (slowest rank) */
    int64_t failure_seen_ns;     /* the driver saw the last failure */
    /* the steps' named metrics, averaged over all replicas' batches: */
    int nmetrics; /* last epoch */
    trainer_metric metrics[TRAINER_MAX_METRICS];
    int val_nmetrics; /* last validation */
    trainer_metric val_metrics[TRAINER_MAX_METRICS];
    int64_t group_start_step; /* optimizer steps done when the current group started */
    /* checkpoints stored with fewer copies than earlier ones had (copies lost with a node) */
    int checkpoints_under_replicated;
    int growths; /* groups ended at a checkpoint to start a bigger one (no retry spent) */
    /* groups ended because a node was told to stop (SIGTERM: NODE_DRAINING), each at a
     * checkpoint taken at the step boundary after the replica there heard it (no retry spent,
     * no step lost), and the optimizer steps of the last such checkpoint */
    int drains;
    int64_t drain_step;
    /* resume found the job complete: nothing trained, the stats are the finished run's */
    bool complete_at_resume;
    /* precision f16's loss scaler: optimizer steps it skipped so far (inf/NaN gradients;
     * counted in steps too), and its scale now (0: no scaler) */
    int64_t skipped_steps;
    double loss_scale;
    /* bytes of optimizer state per replica (the largest replica's, last segment): with
     * zero_stage 1 about 1/N of what it is without */
    int64_t optim_state_bytes;
    /* replicas lost that the survivors went on without (recovery "live"; no retry spent), and
     * the survivors' first completed step after the last such loss (slowest rank; CLOCK_MONOTONIC
     * ns, as the timing fields above) */
    int live_recoveries;
    int64_t live_first_step_ns;
    /* replacements that healed from a live peer and grew the group back within the epoch
     * (recovery "live"), and of the last one: ns from the failure the driver saw to the group
     * of the bigger world agreed, the snapshot's copy (the peer's put, the newcomer's fetch and
     * load) and its bytes */
    int heals;
    int64_t heal_ns, heal_copy_ns, heal_bytes;
    /* of the last heal: the steps the survivors trained while the replacement copied, which
     * it replayed from the serving peer's averaged gradients as it entered (0: they waited) */
    int64_t heal_replayed_steps;
} trainer_stats;

/* The value of the named metric in metrics (val: val_metrics) of st, or def when absent. */
double trainer_stats_metric(const trainer_stats *st, bool val, const char *name, double def);

#define TRAINER_CHECKPOINT_AUTO 0 /* rank 0 writes one at the end of every epoch */
#define TRAINER_CHECKPOINT_NONE 1 /* only after the last epoch */

/* trainer_train_opts.checkpoint_num_to_keep: the default (0), and every checkpoint kept */
#define TRAINER_KEEP_CHECKPOINTS 3
#define TRAINER_KEEP_ALL (-1)

/* trainer_train_opts.min_replicas_timeout_ms's default: 5 minutes */
#define TRAINER_MIN_REPLICAS_TIMEOUT_MS 300000

#define TRAINER_PROGRESS_AUTO 0 /* the live line when stderr is a terminal */
#define TRAINER_PROGRESS_ON 1   /* the live line always */
#define TRAINER_PROGRESS_OFF 2  /* never */

/* Called by the driver after every epoch (and every validation during training) with the
 * stats (borrowed); a negative return stops training with that code. */
typedef int (*trainer_epoch_fn)(trainer *t, const trainer_stats *st, void *user);

/* Called by the driver before a group of another size than the last one starts (old_size 0:
 * the first); a negative return stops training. The place to call trainer_scale_lr. */
typedef int (*trainer_world_size_fn)(trainer *t, int old_size, int new_size, void *user);

/* From on_world_size: groups started from the current checkpoint multiply their learning
 * rates by factor (> 0, finite; else CT_EINVAL) after restoring it, until the next one. */
int trainer_scale_lr(trainer *t, double factor);

/* How trainer_train runs; zero means the default. GUIDE.md sections 5 to 7. */
typedef struct trainer_train_opts {
    int max_retries;           /* failures tolerated; 0: none */
    int checkpoint;            /* TRAINER_CHECKPOINT_AUTO (0) or _NONE */
    trainer_stats *stats;      /* filled at the end (may be NULL) */
    int64_t epochs;            /* 0: trainer_opts.epochs */
    bool validate_every_epoch; /* fill val_* after each epoch */
    trainer_epoch_fn on_epoch;
    void *user;
    int64_t validate_every_steps; /* 0: not by steps */
    /* after each validation during training (with user). With validate_every_steps, and
     * on_validate, restore_best or checkpoint_dir, every validation ends a segment with a
     * checkpoint of its step (scored by it): a negative return stops every replica at that
     * step, and the driver's model is that step's */
    trainer_epoch_fn on_validate;
    /* backoff before the k-th retry of a group that failed to start, and in the k-th wait for
     * min_replicas: base_ms * factor^(k-1), at most cap_ms, +- jitter fraction */
    int backoff_base_ms;   /* 0: 100 */
    double backoff_factor; /* 0: 2 */
    int backoff_cap_ms;    /* 0: 5000 */
    double backoff_jitter; /* 0: 0.1; CT_ZERO for none */
    int create_timeout_ms; /* starting a group (actors + rendezvous); 0: 30000 */
    /* also a checkpoint whenever the optimizer step count reaches a multiple of N (0: epochs'
     * ends only; needs TRAINER_CHECKPOINT_AUTO) */
    int64_t checkpoint_every_steps;
    /* a directory on the driver's host (made if missing) that gets every checkpoint too; it
     * keeps the newest checkpoint_num_to_keep files plus the checkpoint_num_best best-scoring
     * ones and deletes the others (never the latest, never a best; after the index that no
     * longer lists them is in place, so a resume always finds the latest) */
    const char *checkpoint_dir;
    int checkpoint_num_to_keep; /* newest kept; 0: TRAINER_KEEP_CHECKPOINTS (3); TRAINER_KEEP_ALL */
    int checkpoint_num_best;    /* best kept besides them by the score; 0: 1; negative: none */
    /* the score: NULL: "val_loss" when validation runs during training (validate_every_*), else
     * none; or "train_loss", "val_loss", "val_accuracy", "val_perplexity", a step's metric */
    const char *checkpoint_score_attribute;
    const char *checkpoint_score_order; /* "min" (NULL) or "max": which score is best */
    /* before training: trainer_restore of this checkpoint file, or of the latest checkpoint in
     * this directory; none there (a missing path, an empty directory): a fresh start; a missing
     * *.safetensors file: CT_ENOENT */
    const char *resume;
    const char *log_dir; /* NULL: none; else metrics.jsonl and a TensorBoard event file */
    int progress;        /* TRAINER_PROGRESS_AUTO (0), _ON or _OFF */
    int log_every_steps; /* without the live line: a plain line every N optimizer steps; 0: none */
    /* > 0: the model's FLOPs for one sample's forward and backward (a GPT's, per window of T
     * tokens: T (6 N + 12 L T C)); the log then shows MFU, percent of the sum of the replicas'
     * own peaks, each measured where it runs: a CPU replica's cores (its threads x clock x FMA
     * width, FP32), a GPU replica's device (SMs x clock x dense FLOPs per clock of its
     * architecture, in the run's precision: bf16 / f16 on tensor cores, else FP32); no MFU
     * when a replica's device is not in that table */
    double flops_per_sample;
    int report_ms; /* how often replicas send their step records; 0: 100 */
    /* the longest wait for min_replicas to fit (then CT_ETIMEDOUT); 0:
     * TRAINER_MIN_REPLICAS_TIMEOUT_MS (5 minutes). A request no live node could meet even when
     * empty (a GPU where no node has one) fails at once with CT_EINVAL instead. */
    int min_replicas_timeout_ms;
    trainer_world_size_fn on_world_size; /* may be NULL; with user */
    /* at the end (the last epoch, or on_validate / on_epoch stopping), the driver's model
     * (trainer_save, trainer_get_model) and the next group's start become the best-scoring
     * checkpoint's (the score as checkpoint_score_attribute says; CT_EINVAL when there is none)
     * of this call's, or of checkpoint_dir's when it holds a better one (a resumed job) */
    bool restore_best;
} trainer_train_opts;

/* Trains from the current epoch up to the epoch count. Returns 0, CT_ERETRY when more than
 * max_retries failures happened (ct_last_error() names the last one), CT_ESTART at once when
 * the replicas' program cannot start on a node (no retry spent), a replica's own code at once
 * when building its config, creators or data failed in a way no other node would change
 * (CT_EINVAL, CT_ENOENT, CT_ENOSYS, CT_ENOTREG, CT_ERANGE; no retry spent), or another code.
 * The group stays up afterwards for trainer_validate; trainer_shutdown ends it. */
int trainer_train_with(trainer *t, const trainer_train_opts *opts);
#define trainer_train(t, ...) trainer_train_with((t), &(trainer_train_opts){__VA_ARGS__})

/* Loss and top-1 accuracy on the validation set, split over the replicas (a group is started
 * from the last checkpoint when none runs). Fills st's val_* fields. */
int trainer_validate(trainer *t, trainer_stats *st);

/* Writes the last checkpoint as a safetensors file on the driver's disk; trainer_restore reads
 * one into the driver and makes it the next group's start. CT_EINVAL naming a mismatch. */
int trainer_save(trainer *t, const char *path);
int trainer_restore(trainer *t, const char *path);

/* The driver's model holding the last checkpoint's weights (model i: trainer_get_model_at,
 * NULL out of range). Borrowed until trainer_shutdown. */
ct_module *trainer_get_model(trainer *t);
int trainer_num_models(trainer *t);
ct_module *trainer_get_model_at(trainer *t, int i);

/* Facts about replica i (0 .. replicas-1) of the running group, for tests and tools. */
typedef struct trainer_replica_info {
    int pid;
    char node_id[32];
    char actor_id[32];
} trainer_replica_info;
int trainer_replica_info_get(trainer *t, int i, trainer_replica_info *info);
/* The state stats of trainer_train report, any time. */
int trainer_get_stats(trainer *t, trainer_stats *st);

/* Ends the group, frees the last checkpoint from the store and the trainer. Accepts NULL;
 * nulls *t. */
void trainer_shutdown(trainer **t);

#ifdef __cplusplus
}
#endif
#endif
