/* ct/trainer.h — the trainer: data-parallel training of a model on a ct cluster, with
 * checkpoints in the object store and recovery from lost replicas and nodes.
 *
 * A complete program (the Fashion-MNIST CNN on 2 replicas of an embedded cluster):
 *
 *     static ct_module *make_cnn(trainer_ctx *ctx) { return fmnist_make_model("cnn"); }
 *
 *     int main(void)
 *     {
 *         trainer_register_model("cnn", make_cnn);   // before ct_init: runs in every process
 *         ct_init(NULL);                             // in a replica process: serves, never returns
 *         trainer *t = NULL;
 *         int rc = trainer_create(&(trainer_opts){
 *             .model = "cnn", .data = "fashion_mnist", .optimizer = "adam",
 *             .loss = "cross_entropy", .scheduler = "steplr",
 *             .config = "lr=1e-3,step_size=1,gamma=0.5", .num_replicas = 2,
 *             .batch_size = 64, .epochs = 3}, &t);
 *         trainer_stats st;
 *         rc = trainer_train(t, .max_retries = 3, .checkpoint = TRAINER_CHECKPOINT_AUTO,
 *                            .stats = &st);
 *         trainer_validate(t, &st);                  // st.val_accuracy over all replicas
 *         trainer_save(t, "model.safetensors");
 *         trainer_shutdown(&t);
 *         ct_shutdown();
 *     }
 *
 * Creators. Models, data, optimizers, losses, schedulers and initialization hooks are C
 * functions registered by name in a process-wide registry before ct_init(): a replica is this
 * same executable started again in actor mode, so the registrations run there too, and the
 * trainer only passes names. Each creator gets a trainer_ctx (rank, world size, seed, epoch the
 * replica starts at, and the user config, a "key=value,key=value" string read with
 * trainer_config_*). Built-ins: optimizer "adam", "adamw", "sgd"; loss "cross_entropy", "nll"
 * (i64 labels), "mse", "l1", "bce_with_logits" (f32 targets); scheduler "steplr", "multistep",
 * "exponential", "cosine", "warmup_cosine", "plateau"; data "fashion_mnist". The keys each
 * built-in reads are listed after the trainer_register_* functions below.
 *
 * How it runs. trainer_create runs every creator once in the driver (checks names, config and
 * shapes before anything is started; the driver's copy of the model is what trainer_get_model
 * returns). trainer_train starts num_replicas replica actors (a class the library registers;
 * as many as fit between min_replicas and max_replicas: "Elastic bounds" below), each with
 * cpus_per_replica CPUs; they meet through the head's KV under a fresh group id per
 * attempt, broadcast rank 0's weights, and train: each replica reads its shard of the training
 * set (DistributedSampler semantics, reshuffled per epoch from the seed), gradients are averaged
 * in buckets while backward runs (DDP-style), so every replica keeps identical weights. Dropout
 * and other random draws are reseeded before every batch from (seed, epoch, rank, batch index),
 * which is what makes a resumed epoch repeat bit for bit, from its start or from any batch. Buffers
 * (BatchNorm statistics) are broadcast from rank 0 at the end of each epoch. Statistics are summed
 * over all replicas by the driver.
 *
 * Checkpoints. With TRAINER_CHECKPOINT_AUTO, rank 0 writes one at the end of every epoch
 * straight into the object store (ct_object_create/seal, 2 copies on distinct nodes when there
 * are 2; fewer is counted in trainer_stats.checkpoints_under_replicated and logged), the driver
 * pulls a copy to its own node, loads it into its model, and only then frees the previous
 * checkpoint: there is always one complete checkpoint, never a partial one. The bytes are a
 * safetensors file (see DESIGN.md "Checkpoint format"): model parameters and buffers by dotted
 * name; optimizer tensors as "optim.<name>" (several models, see "Several models" below:
 * model i's entries as "m<i>.<name>", optimizer i's as "optim<i>.<name>", also the keys in
 * "optimizer_state"; one model: no prefix, as above); __metadata__ strings "format"
 * ("ct-checkpoint"), "format_version" ("2"), "epoch" (epochs completed), "step" (optimizer
 * steps per replica), "world_size", "seed", "rng" (how random draws are seeded), "model",
 * "data", "optimizer", "loss", "scheduler" (creator names), "config", and "optimizer_state" /
 * "scheduler_state" (JSON objects of the non-tensor state entries). trainer_save writes it.
 * format_version "2" added "batch" (batches of the epoch after "epoch" done per replica: a
 * checkpoint within an epoch, trainer_train_opts.checkpoint_every_steps; "0" at an epoch's
 * end) and per-batch random draws; version "1" files (no "batch": an epoch's end) still load.
 * Within an epoch a plateau scheduler on "train_loss" adds "plateau_loss_sum" and
 * "plateau_samples" (the epoch's training loss and samples so far, all ranks), so that the
 * resumed epoch steps it on the whole epoch's mean. The scheduler state is the one after any
 * validation of the segment the checkpoint ends (validations run before it is written).
 * The loader's position needs no more state: the epoch's data order is a function of (seed,
 * epoch) (sharded data: of (seed, rank, epoch)), so a group restarted at batch b of an epoch
 * (with as many replicas as the checkpoint says in "world_size"; another size starts where as
 * many samples were seen, rounded down, and sharded data then reads other shards) seeks its
 * loader there, and the run goes on bit for bit as if it had not stopped. A checkpoint is
 * also written to trainer_train_opts.checkpoint_dir when one is given.
 *
 * Fault tolerance (the RaySGD protocol). When a replica's process exits or its node is
 * declared dead, the survivors' collectives fail within milliseconds; the driver ends the
 * whole group, waits for the head to report the deaths, asks the head for free resources,
 * starts as many replicas as fit (at most max_replicas), each restoring the last checkpoint
 * from the store, and continues from that epoch (or that batch of it: checkpoint_every_steps).
 * Every failure spends one of max_retries (a group that fails to start too); past them
 * trainer_train returns CT_ERETRY and ct_last_error() says what failed (replica, pid, node,
 * signal or exit status). A group whose program cannot start on a node (an exec error, a
 * missing shared library: the node quotes its stderr) spends none: trainer_train returns
 * CT_ESTART at once with that message. The driver's node is assumed not to fail.
 *
 * Elastic bounds (trainer_opts.min_replicas, max_replicas). A group has between min_replicas
 * and max_replicas replicas: as many as the head's free resources fit, up to max_replicas.
 * While fewer than min_replicas fit (at the start, or after a failure), the driver does not
 * train: it waits, asking the head again after each backoff sleep (backoff_* options, growing
 * per wait round, reset once a group starts) and logging "waiting for N replicas, M fit".
 * Waiting spends no retries (the failure that led to it spent one); it is bounded by
 * trainer_train_opts.min_replicas_timeout_ms (past it trainer_train returns CT_ETIMEDOUT
 * naming the replicas wanted and fitting; 0: waits for ever). A group smaller than
 * max_replicas grows at every checkpoint it writes (each checkpoint_every_steps segment and
 * each epoch's end): when the free resources then fit at least one more replica, the driver
 * ends the group right after that checkpoint (after its on_validate / on_epoch calls) and
 * starts a bigger one from it, within the epoch where as many samples were seen (see
 * "Checkpoints"; no retry spent; counted in trainer_stats.growths and logged). With
 * TRAINER_CHECKPOINT_NONE a group never grows. Before each group of a new size starts the
 * driver calls trainer_train_opts.on_world_size (see trainer_scale_lr there).
 *
 * Ownership: trainer_create gives an owned trainer (trainer_shutdown). Strings in options are
 * copied. Threads: a trainer is used by one thread at a time; while trainer_train or
 * trainer_validate runs, it consumes this process's ct events (ct_events_next). The registry
 * functions are not thread-safe: call them from main before ct_init. */
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

/* ---- creators and the registry ---- */

/* What a creator knows about where it runs. Opaque; borrowed during the creator call. */
typedef struct trainer_ctx trainer_ctx;

int trainer_ctx_rank(const trainer_ctx *ctx);       /* 0 .. world_size-1; 0 in the driver */
int trainer_ctx_world_size(const trainer_ctx *ctx); /* replicas in this group; 1 in the driver */
uint64_t trainer_ctx_seed(const trainer_ctx *ctx);
int64_t trainer_ctx_start_epoch(const trainer_ctx *ctx); /* epoch this replica starts at */
bool trainer_ctx_is_driver(const trainer_ctx *ctx);      /* the driver's own check-run */
const char *trainer_ctx_config(const trainer_ctx *ctx);  /* the whole config string */

/* Config values by key (the config is "key=value,key=value"; blanks around keys and values are
 * ignored). Each returns the value, or def when the key is absent. A value that does not parse
 * (e.g. "lr=fast" read as a double) is recorded in ctx: the creation then fails with an error
 * naming the key. A key no creator reads is an error too (a typo must not be ignored). */
double trainer_config_double(trainer_ctx *ctx, const char *key, double def);
int64_t trainer_config_int(trainer_ctx *ctx, const char *key, int64_t def);
bool trainer_config_bool(trainer_ctx *ctx, const char *key, bool def); /* 1/0/true/false */
/* Borrowed until the ctx ends; copy it. */
const char *trainer_config_str(trainer_ctx *ctx, const char *key, const char *def);
/* Records a creator's own error (also naming a key); the creator then returns NULL / < 0. */
void trainer_ctx_fail(trainer_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What a data creator fills. The trainer takes ownership of train, val and keep[] (keep: the
 * datasets train / val borrow from, e.g. a subset's base; destroyed after them). transform's
 * mean/std must point at static storage (they are copied by the loaders). val may be NULL.
 * Datasets of i64 labels or target datasets (f32 targets of a fixed shape, ct/data.h: e.g.
 * ct_dataset_from_f32_targets, a CSV with ct_csv_opts.targets): the batches' y follows.
 *
 * sharded: train and val hold only this rank's shard (e.g. ct_dataset_open_csv_shard(path,
 * &o, trainer_ctx_rank(ctx), trainer_ctx_world_size(ctx), ...)), so no process reads the
 * whole set. Shuffling is then DistributedSampler-like within each shard: a rank's records are
 * its own for the whole run, reshuffled every epoch by a permutation of (seed, rank, epoch)
 * (deterministic: a resumed epoch sees the same order); a shorter shard is padded by
 * repeating its epoch order from the start to the longest shard's length (the ranks compare
 * lengths at setup), so every rank runs as many steps; an empty shard is an error. Validation
 * covers each rank's whole val shard. The shards follow the group's world size: a group of
 * another size after a failure reads other shards. The driver's check-run is rank 0 of 1: it
 * reads the whole file unless the creator reads less there (trainer_ctx_is_driver). */
typedef struct trainer_data {
    ct_dataset *train, *val;
    ct_dataset *keep[4];
    ct_transform_opts transform;
    int num_classes; /* for accuracy; 0: the model's output width */
    bool sharded;
    /* training batches built ahead by the loader's background thread; 0: 2; negative: none,
     * each batch built when the step asks for it. None suits small in-memory samples (e.g. a
     * tiny MLP's): there the thread's hand-off per batch (a wake-up, a context switch) costs
     * more than building the batch, and it is paid per batch, so most with many small
     * batches (gradient accumulation). */
    int prefetch;
} trainer_data;

/* A loss: mean over the batch of loss(output (N,C), target), shape (): target is (N) i64
 * labels, or f32 (N, ...) targets from a target dataset (for "mse", "l1": the output's shape;
 * "bce_with_logits": multi-label 0/1 targets of the output's shape). Returns a new tensor
 * recorded on the tape, or NULL. */
typedef ct_tensor *(*trainer_loss_fn)(ct_tensor *output, ct_tensor *target);

/* Creator signatures. Return an owned object, or NULL / a negative CT_E* code (with
 * trainer_ctx_fail or ct__error's message). */
typedef ct_module *(*trainer_model_creator)(trainer_ctx *ctx);
typedef int (*trainer_data_creator)(trainer_ctx *ctx, trainer_data *out);
typedef ct_optim *(*trainer_optimizer_creator)(trainer_ctx *ctx, ct_module *model);
typedef trainer_loss_fn (*trainer_loss_creator)(trainer_ctx *ctx);
typedef ct_sched *(*trainer_scheduler_creator)(trainer_ctx *ctx, ct_optim *optim);
/* Runs first in every replica (and in the driver's check-run); returns 0 or a CT_E* code. */
typedef int (*trainer_hook)(trainer_ctx *ctx);

/* Register a creator under name (copied, <= 63 bytes). CT_EEXIST when the name is taken for
 * that kind; CT_EINVAL for a NULL or empty argument. Call before ct_init, in the same order in
 * every process (main does that). Built-in names may be replaced by registering them first. */
int trainer_register_model(const char *name, trainer_model_creator fn);
int trainer_register_data(const char *name, trainer_data_creator fn);
int trainer_register_optimizer(const char *name, trainer_optimizer_creator fn);
int trainer_register_loss(const char *name, trainer_loss_creator fn);
int trainer_register_scheduler(const char *name, trainer_scheduler_creator fn);
int trainer_register_hook(const char *name, trainer_hook fn);

/* The built-ins and the config keys they read (defaults in brackets):
 *   optimizer "adam"/"adamw": lr [1e-3], beta1 [0.9], beta2 [0.999], eps [1e-8],
 *             weight_decay [0 / 1e-2]; "sgd": lr [1e-2], momentum [0], weight_decay [0],
 *             nesterov [false]
 *   loss "cross_entropy": label_smoothing [0]; "nll"; "mse", "l1", "bce_with_logits" (f32
 *             targets of the output's shape; torch.nn.functional's, mean reduction)
 *   scheduler "steplr": step_size [1], gamma [0.1]; "multistep": milestones ["" e.g. "5:10"],
 *             gamma [0.1]; "exponential": gamma [0.9]; "cosine": t_max [epochs], eta_min [0];
 *             "warmup_cosine" (ct_sched_warmup_cosine_new; steps are scheduler steps, so
 *             with scheduler_step "batch" they count optimizer steps): warmup_steps [1],
 *             total_steps [epochs], start_factor [1/3], eta_min [0]
 *             "plateau" (ReduceLROnPlateau, ct_sched_plateau_new, torch's semantics): mode
 *             ["min" / "max"], factor [0.1], patience [10], threshold [1e-4], threshold_mode
 *             ["rel" / "abs"], cooldown [0], min_lr [0], eps [1e-8], plateau_metric
 *             ["val_loss"; "val_accuracy", "train_loss" or a validate step's metric name].
 *             It steps on that value, not per scheduler_step (unless "manual"): after each
 *             validation run during training (trainer_train_opts.validate_every_epoch /
 *             validate_every_steps, required for a val_* metric), or with "train_loss"
 *             after every epoch on its mean training loss. Every rank steps it with the same
 *             value (all ranks' sums, added alike), so the replicas stay identical. A plateau
 *             scheduler a user registers is driven the same way (plateau_metric is read for
 *             any scheduler whose ct_sched_kind is "plateau").
 *   data "fashion_mnist": data_dir [CT_FASHION_MNIST_DIR], limit [all 60000 training samples],
 *             val_limit [all 10000 test samples]; pixels normalised (mean 0.2860, std 0.3530);
 *             augmentation of the training batches: crop_pad [0; N > 0: random 28x28 crops of
 *             the image zero-padded by N], hflip [0: the probability of a horizontal flip].
 *             Validation batches are never cropped or flipped (for any data creator).
 *             Decoded once per cluster (by the driver's check-run) and shared through the
 *             object store, so a replica starts without inflating the files again.
 * They need no registration; a name you register yourself is found first (it overrides). */

/* ---- custom training and validation steps ----
 *
 * What one batch does is a step function, registered by name like a creator and selected with
 * trainer_opts.train_step / .validate_step (NULL: the built-in steps below, which are
 * themselves step functions: the trainer has one code path). As RaySGD's TrainingOperator
 * train_batch / validate_batch overrides. A train step that re-implements the built-in:
 *
 *     static int my_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
 *     {
 *         ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);    // (N,C)
 *         ct_tensor *loss = y ? trainer_step_loss(s)(y, b->y) : NULL;       // ()
 *         int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;      // synced grads
 *         if (rc == 0)
 *             rc = trainer_step_optimizer(s);                             // step + zero grad
 *         if (rc == 0) {
 *             out->loss_sum = ct_tensor_item(loss) * (double)b->n;
 *             out->samples = b->n;
 *         }
 *         ct_tensor_release(&loss);
 *         ct_tensor_release(&y);
 *         return rc;
 *     }
 *     trainer_register_train_step("mine", my_step);    // before ct_init, like every creator
 *
 * Who calls what. A replica calls the train step once per batch of its shard, in its actor
 * thread, with gradients zeroed and autograd on; the validate step once per batch of its slice
 * of the validation set, with the model in eval mode and autograd off. Steps run only in
 * replicas (never in the driver's check-run). Everything a step gets is borrowed for the call.
 *
 * The one-backward-per-step rule. Gradients are averaged across replicas by collectives that
 * every rank must issue in the same order, so a train step must call trainer_step_backward
 * exactly once, on every rank, for every batch (it runs backward, reducing gradient buckets
 * while backward runs, and returns when the averaged gradients are written back: the only way
 * to get synced gradients). Between it and trainer_step_optimizer (at most once, after it) the
 * step may read and change the gradients (clipping, trainer_step_clip_grad_norm), and several
 * forward passes or a combination of losses may go into the one loss tensor given to backward.
 * To skip an update (e.g. a non-finite gradient norm, which every rank sees alike because the
 * gradients are synced), still call backward and just do not call trainer_step_optimizer: the
 * gradients are zeroed before the next batch. The rule is checked in
 * every rank at every step: a step that returns without calling backward, or calls it twice,
 * fails with CT_EINVAL naming the step. Every rank runs the same number of steps (equal
 * shards), so a rank that breaks the rule (also in a rank-dependent branch) is caught at that
 * very step; its peers, blocked in the gradient collective it will never join, are ended by the
 * driver within seconds (not after comm_timeout_ms). The failure spends a retry, repeats on
 * the retry and ends in CT_ERETRY with the message. A step that returns an error fails the
 * same way. A loss that does not reach every parameter is fine (those gradients are reduced
 * as they are, zero).
 *
 * Gradient accumulation (trainer_opts.accumulate = k > 1, DDP's no_sync). A replica's batches
 * of an epoch form groups of k (the last group may be shorter). Gradients are zeroed before a
 * group's first batch only; in every batch but the group's last, trainer_step_backward does
 * not reduce (the gradients add up locally in each rank), trainer_step_optimizer does nothing
 * and trainer_step_clip_grad_norm neither clips nor measures (*norm = 0). In the group's last
 * batch (trainer_step_sync() true) backward reduces the summed gradients as usual and then
 * divides them by the group's batch count, so that for a mean-reduced loss k batches of n
 * give the gradient of one batch of k*n (no need to divide the loss by k); then clipping and
 * the optimizer step work on the averaged gradient. Still one backward per batch on every
 * rank. trainer_stats.steps and trainer_step_count count optimizer steps, not batches, and so
 * does a scheduler stepped per "batch" (trainer_opts.scheduler_step).
 *
 * Several models (RaySGD's creators returning several models and optimizers; e.g. a GAN,
 * examples/dcgan_fashion_mnist.c). trainer_opts.model is a comma-separated list of up to 8
 * registered model names ("generator,discriminator"): the models, in that order, are indices
 * 0, 1, ... Optimizer i is created over model i: .optimizer gives one name per model
 * ("adam_g,adam_d"), or one name whose creator is called once per model. .loss gives one
 * name (its creator runs once; the function serves all) or one per model. A scheduler (one)
 * drives optimizer 0. Such a trainer needs a custom train step (CT_EINVAL naming
 * opts.train_step otherwise) and no gradient accumulation (opts.accumulate). The step sees them
 * by index (trainer_step_model_at, _optim_at, _loss_at) and, for each model it updates, calls
 * trainer_step_backward_model(s, i, loss) then trainer_step_optimizer_at(s, i). The rule
 * becomes: per step, each model's gradients are reduced at most once, at least one model is
 * reduced, and every rank reduces the same models in the same order (the collectives must
 * match; an order that differs between ranks is not detected: it fails or hangs until
 * comm_timeout_ms). A second reduction of a model fails like a second backward (CT_EINVAL
 * naming the model), a step reducing none fails as today. trainer_step_backward_model zeroes
 * model i's gradients before its backward: a backward through another model (a generator's
 * loss goes through the discriminator) leaves gradients in that model's parameters, which
 * must not go into its next update. trainer_stats.steps counts batches in which at least one
 * optimizer stepped. The built-in validate step uses model 0. Every model's initial weights
 * and buffers are broadcast from rank 0, every model's buffers at each epoch's end, and
 * weights_agree covers all models. Checkpoints hold every model and optimizer, with prefixes
 * (see "Checkpoints" above).
 *
 * Threads. The trainer_step_* functions are valid only during the step call and from its
 * thread (the replica's actor thread); a step may use threads of its own between them.
 *
 * Metrics. A step fills out (sums over its batch) and may add up to TRAINER_MAX_METRICS named
 * scalars per batch with trainer_step_metric (e.g. "grad_norm"); the driver averages each over
 * the batches of all replicas weighted by the batch size, and reports them in trainer_stats
 * .metrics (training, last epoch) and .val_metrics (last validation), and per step in the run
 * log (see "Seeing a run" below). The first use of a name in a step fixes its slot; every rank
 * must use the same names in the same order. A name is 1 .. TRAINER_METRIC_NAME_MAX-1
 * printable ASCII characters without blanks, quotes or backslashes (it becomes a JSON key and a
 * TensorBoard tag). */

#define TRAINER_MAX_METRICS 64
#define TRAINER_METRIC_NAME_MAX 48

/* One batch: x (N, ...) f32 (the loader's transform applied), y (N) i64 labels or, from a
 * target dataset, (N, ...) f32 targets (ct_tensor_dtype tells). Borrowed. */
typedef struct trainer_batch {
    ct_tensor *x, *y;
    int64_t n;
} trainer_batch;

/* What a step reports for its batch; zeroed before the call. */
typedef struct trainer_step_out {
    double loss_sum; /* sum over the batch's samples of the loss (mean loss * n) */
    int64_t correct; /* top-1 hits (validation accuracy counts these) */
    int64_t samples; /* samples counted in loss_sum / correct (0: the batch is not counted) */
} trainer_step_out;

/* The context of one step call. Opaque; borrowed during the call. */
typedef struct trainer_step trainer_step;

/* Returns 0 or a negative CT_E* code (the replica's epoch / validation then fails with it). */
typedef int (*trainer_step_fn)(trainer_step *s, const trainer_batch *b, trainer_step_out *out);

/* Register a step under name (rules as for creators: copied, <= 63 bytes, CT_EEXIST, before
 * ct_init in every process). The built-ins need no name: leave the opts fields NULL. */
int trainer_register_train_step(const char *name, trainer_step_fn fn);
int trainer_register_validate_step(const char *name, trainer_step_fn fn);

/* What a step works with (all borrowed for the call). trainer_step_ctx gives the rank, world
 * size, seed and the user config (trainer_config_*): a key a step reads must also be read by a
 * creator or the initialization_hook (they run in the driver's check-run, where an unread key
 * is refused); the hook is the natural place, as RaySGD's TrainingOperator.setup(config). */
trainer_ctx *trainer_step_ctx(trainer_step *s);
ct_module *trainer_step_model(trainer_step *s);
ct_optim *trainer_step_optim(trainer_step *s);
trainer_loss_fn trainer_step_loss(trainer_step *s); /* the loss creator's function */
ct_sched *trainer_step_scheduler(trainer_step *s);  /* NULL when there is none */
int64_t trainer_step_epoch(const trainer_step *s);  /* 0-based epoch being run */
int64_t trainer_step_index(const trainer_step *s);  /* batch index in this epoch */
int64_t trainer_step_count(const trainer_step *s);  /* optimizer steps done before this one */
bool trainer_step_training(const trainer_step *s);  /* train step (true) or validate step */
/* True when this batch's backward reduces the gradients and the optimizer steps: always without
 * accumulation, else the last batch of each accumulation group (see above). */
bool trainer_step_sync(const trainer_step *s);

/* Train steps only. Backward of loss (shape ()) with the gradient buckets reduced while it
 * runs, then waits until every gradient holds the average over replicas. Exactly once per
 * step (see the rule above); CT_EINVAL on a second call or from a validate step, and with
 * several models (use trainer_step_backward_model). */
int trainer_step_backward(trainer_step *s, ct_tensor *loss);
/* Optimizer step (optimizer 0), then zero grad. After trainer_step_backward, at most once per
 * step. */
int trainer_step_optimizer(trainer_step *s);

/* Several models (see "Several models" above). The models, optimizers and losses by index
 * 0 .. trainer_step_num_models(s)-1 (NULL out of range); trainer_step_model / _optim / _loss
 * are index 0. */
int trainer_step_num_models(const trainer_step *s);
ct_module *trainer_step_model_at(trainer_step *s, int i);
ct_optim *trainer_step_optim_at(trainer_step *s, int i);
trainer_loss_fn trainer_step_loss_at(trainer_step *s, int i);
/* Zeroes model i's gradients (with several models), runs backward of loss and reduces (averages
 * across replicas) only model i's gradients; other models' parameters the loss reaches get
 * gradients too, unreduced: they are zeroed before their own model's backward, so they never
 * reach that model's update. At most once per model per step; CT_EINVAL for a bad index, a
 * second call for the model, or from a validate step. With one model, as
 * trainer_step_backward (no zeroing). */
int trainer_step_backward_model(trainer_step *s, int i, ct_tensor *loss);
/* Optimizer i's step, then zero model i's gradients. After trainer_step_backward_model(s, i,
 * ...), at most once per step. */
int trainer_step_optimizer_at(trainer_step *s, int i);
/* torch.nn.utils.clip_grad_norm_ (L2) over the optimizer's parameters (all the model's with
 * the built-in optimizers), through ct_optim_clip_grad_norm: the norm of all gradients together
 * and, when max_norm > 0 and the norm exceeds it, every gradient scaled by
 * max_norm / (norm + 1e-6). After trainer_step_backward. *norm (may be NULL) gets the norm
 * before clipping. With several models: optimizer 0's, after model 0's backward. */
int trainer_step_clip_grad_norm(trainer_step *s, double max_norm, double *norm);

/* Adds value (one scalar for this batch) to the named metric; see "Metrics" above. CT_ENOSPC
 * past TRAINER_MAX_METRICS names, CT_EINVAL for a bad name (message naming it). */
int trainer_step_metric(trainer_step *s, const char *name, double value);

/* The built-in steps, callable from a custom step (e.g. to add a metric around them).
 * train: forward, loss, backward, optimizer; out: loss_sum, samples.
 * validate: forward, loss, top-1 (i64 labels only: with f32 targets correct stays 0, so
 * val_accuracy reads 0 and the loss is the measure); out: loss_sum, correct, samples. */
int trainer_builtin_train_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out);
int trainer_builtin_validate_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out);

/* ---- the trainer ---- */

typedef struct trainer trainer;

typedef struct trainer_opts {
    /* required: registered names; model, optimizer and loss may be comma-separated lists
     * ("generator,discriminator"; see "Several models"), each list <= 255 bytes */
    const char *model, *data, *optimizer;
    const char *loss;                /* NULL: "cross_entropy" */
    const char *scheduler;           /* NULL: none */
    const char *initialization_hook; /* NULL: none; a trainer_register_hook name */
    const char *config;              /* "key=value,..." read by creators; NULL: "" */
    int num_replicas;                /* 0: 1; the default of max_replicas */
    bool use_gpu;                    /* not built yet: CT_ENOSYS */
    double cpus_per_replica;         /* resources per replica; 0: 1 (also its threads) */
    ct_strategy placement;           /* CT_PACK (default) or CT_SPREAD over nodes */
    int64_t batch_size;              /* per replica; 0: 64 */
    int64_t epochs;                  /* total epochs trainer_train runs to; 0: 1 */
    uint64_t seed;                   /* model init, shuffling, dropout */
    double bucket_mb;                /* gradient bucket size after the first; 0: 25 */
    int comm_timeout_ms;             /* backstop for a hung peer; 0: 60000 */
    const char *train_step;          /* NULL: the built-in; a trainer_register_train_step name */
    const char *validate_step;       /* NULL: the built-in; ..._validate_step name */
    int accumulate; /* batches per optimizer step (gradient accumulation); 0 or 1: every batch */
    /* when the scheduler steps (RaySGD's scheduler_step_freq): "epoch" (NULL: after every
     * epoch), "batch" (after every optimizer step: every batch, or every accumulate batches),
     * "manual" (never by the trainer: a custom step calls ct_sched_step on
     * trainer_step_scheduler) */
    const char *scheduler_step;
    /* Elastic bounds (see "Elastic bounds" above); min_replicas <= num_replicas <= max_replicas
     * is required (CT_EINVAL). A group has as many replicas as fit, up to max_replicas (0:
     * num_replicas: without these fields, at most num_replicas as ever), and never fewer than
     * min_replicas (0: 1): below it the driver waits. */
    int min_replicas, max_replicas;
    /* By default, when the replicas on one machine fill the CPUs its node may use (2 or
     * more replicas, cpus_per_replica each), each replica's threads are bound to CPUs of their
     * own, the way MPI launchers bind ranks to cores: a thread waiting for a peer then never
     * takes the CPU the peer needs. true: leave their placement to the kernel. */
    bool no_cpu_binding;
} trainer_opts;

/* Checks the options, runs every creator once in this process and keeps the driver's model.
 * Starts nothing. Needs ct_init() first. On error *out is NULL and the message names the bad
 * option, creator name or config key. */
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
    double val_accuracy;  /* top-1 (correct / samples: 0 for f32 targets, see above) */
    int64_t val_samples;  /* validation samples counted (all replicas) */
    int64_t val_epoch;    /* a validation during training: the 0-based epoch it ran in */
    int64_t val_step;     /* ... and the optimizer steps done before it */
    int retries_used;     /* failures recovered so far (all trainer_train calls) */
    int replicas;         /* replicas in the current group */
    bool weights_agree;   /* the replicas' weight hashes were equal after the last epoch */
    /* timing, CLOCK_MONOTONIC ns (comparable across processes of one host): */
    int64_t train_start_ns;      /* trainer_train entered */
    int64_t group_start_ns;      /* the current group's creation began */
    int64_t group_first_step_ns; /* the current group's first completed step (slowest rank) */
    int64_t failure_seen_ns;     /* the driver saw the last failure */
    /* the steps' named metrics (trainer_step_metric), averaged over all replicas' batches: */
    int nmetrics; /* last epoch */
    trainer_metric metrics[TRAINER_MAX_METRICS];
    int val_nmetrics; /* last validation */
    trainer_metric val_metrics[TRAINER_MAX_METRICS];
    int64_t group_start_step; /* optimizer steps done when the current group started (its
                                 checkpoint's; within an epoch with checkpoint_every_steps) */
    /* checkpoints stored with fewer copies than asked (2; e.g. a cluster of one node), each
     * also logged: such a checkpoint does not survive the loss of its node */
    int checkpoints_under_replicated;
    /* groups ended at a checkpoint to start a bigger one (see "Elastic bounds"; no retry) */
    int growths;
} trainer_stats;

/* The value of the named metric in metrics (val: val_metrics) of st, or def when absent. */
double trainer_stats_metric(const trainer_stats *st, bool val, const char *name, double def);

#define TRAINER_CHECKPOINT_AUTO 0 /* rank 0 writes one at the end of every epoch */
#define TRAINER_CHECKPOINT_NONE                                                                    \
    1 /* only after the last epoch: a failure restarts from the                                    \
         last checkpoint (restored or earlier), else from epoch 0 */

/* Seeing a run. While an epoch runs (each segment of it: checkpoint_every_steps), every
 * replica keeps one record per optimizer step (its loss, samples, the learning rate of param
 * group 0 the step used, the gradient norm when the step measured
 * one with trainer_step_clip_grad_norm, its step time and, of it, the time spent waiting for
 * the averaged gradients, the step's named metrics) and sends them to the driver about every
 * report_ms (through the head's KV; batched, so a step is not slowed). The driver merges the
 * ranks' records of each step and, as trainer_train_opts asks:
 *   - progress: a live line on stderr, rewritten in place ("epoch 2/3 step 120/469 | 1234
 *     samples/s | ETA 0:01:12 | loss 0.4321"), by default only when stderr is a terminal;
 *     else with log_every_steps > 0 one plain line every that many optimizer steps;
 *   - log_dir: metrics.jsonl (appended), one JSON object per line: per step
 *     {"type":"step","epoch":0,"batch":12,"batches":16,"step":12,"wall_time":..,"loss":..,
 *      "samples":..,"lr":..,"grad_norm":.. (when measured),"samples_per_s":..,
 *      "step_s":[per rank],"wait_s":[per rank],"metrics":{name:value}},
 *     per epoch {"type":"epoch","epoch":0,"step":..,"wall_time":..,"train_loss":..,
 *      "samples_per_s":..,"epoch_seconds":..,"replicas":..,"retries_used":..,"metrics":{..}},
 *     per validation (in-line during training: validate_every_steps / _epoch; and
 *     trainer_validate's) {"type":"val","epoch":..,"step":..,"wall_time":..,"val_loss":..,
 *      "val_accuracy":..,"val_samples":..,"metrics":{..}}
 *     ("epoch": 0-based, the epoch the record belongs to; "step": optimizer steps done (a
 *     validation: before it; the in-line ones are written when their segment ends, after
 *     its step records, then the epoch's record); every step once across checkpoints within
 *     an epoch; a job resumed from a checkpoint (resume) goes on at the checkpoint's step;
 *     "step_s": the rank's wall time since its previous record, data loading included;
 *     "wait_s": of that, the time it waited for the averaged gradients: a straggler waits
 *     least; "samples_per_s": all ranks' samples / the largest step_s; a value that is not
 *     finite is null; records a failed segment's group sent stay, and the steps retried
 *     from the last checkpoint follow: the later record of a step is the one that counts);
 *     and a TensorBoard event file events.out.tfevents.<secs>.<host>
 *     with the same values as scalars at x = step: tags train/loss, train/lr, train/grad_norm,
 *     train/samples_per_s, train/step_s/rank<r>, train/wait_s/rank<r>, train/metrics/<name>;
 *     epoch/train_loss, epoch/samples_per_s, epoch/seconds, epoch/metrics/<name>; val/loss,
 *     val/accuracy, val/metrics/<name>. TensorBoard stores them as float.
 * The log stays open after trainer_train (a later trainer_validate adds its record) until the
 * next trainer_train with another log_dir, or trainer_shutdown. */
#define TRAINER_PROGRESS_AUTO 0 /* the live line when stderr is a terminal */
#define TRAINER_PROGRESS_ON 1   /* the live line always */
#define TRAINER_PROGRESS_OFF 2  /* never */

/* Called by the driver after every epoch with the stats (borrowed); a negative return stops
 * training with that code. */
typedef int (*trainer_epoch_fn)(trainer *t, const trainer_stats *st, void *user);

/* Called by the driver before a group of another size than the last one starts (old_size: the
 * last group's size, 0 before the first, or after trainer_restore / resume the checkpoint's
 * "world_size"; new_size: the group about to start). trainer_get_stats then gives the
 * position it starts at (steps: the checkpoint's optimizer steps). A negative return stops
 * training with that code. A group trainer_validate starts counts as the last group but calls
 * no hook. The replicas' creators see the new size (trainer_ctx_world_size),
 * but a group that restores a checkpoint also restores the optimizer's learning rates; to
 * rescale them (e.g. the linear scaling rule: trainer_scale_lr(t, (double)new_size /
 * old_size)) call trainer_scale_lr from this hook. */
typedef int (*trainer_world_size_fn)(trainer *t, int old_size, int new_size, void *user);

/* From on_world_size: every group started from the current checkpoint multiplies its
 * optimizers' learning rates (every param group of each) by factor (> 0) after restoring it; calls
 * multiply (a group of 3 -> 2 that fails to start, then 2 -> 1: 2/3 * 1/2). The checkpoints
 * such a group writes hold the scaled rates, so the factor ends (back to 1) when the driver
 * adopts the next checkpoint. A group started without a checkpoint (from the creators) is not
 * scaled: its creators see the world size. A scheduler goes on from the scaled rate (the
 * chainable steplr, multistep, exponential, plateau); the base rates it keeps are not scaled.
 * CT_EINVAL for factor <= 0 or not finite. */
int trainer_scale_lr(trainer *t, double factor);

/* Validation during training. The replicas validate in-line (each its slice, sums gathered
 * from all ranks, BatchNorm buffers from rank 0 first), every validate_every_steps optimizer
 * steps (counted over the whole run, as trainer_stats.steps) and/or after every epoch
 * (validate_every_epoch; skipped when a validation ran at the epoch's last step already),
 * right after that step, so always before the checkpoint that step may end in (a segment's:
 * checkpoint_every_steps, or the epoch's), and report with their segment (the epoch, or its
 * part up to such a checkpoint). The driver then, after each segment (before that
 * checkpoint goes to checkpoint_dir, and before on_epoch at an epoch's end), fills the stats'
 * val_* fields with each of the segment's validations in order and calls on_validate (may be
 * NULL; a negative return stops training like on_epoch's, after the checkpoint_dir write);
 * stats keeps the last. A failed segment's validations are not reported: the group repeats
 * them from the checkpoint. A plateau scheduler steps on them (see "plateau" above). */
typedef struct trainer_train_opts {
    int max_retries;           /* failures tolerated; 0: none */
    int checkpoint;            /* TRAINER_CHECKPOINT_AUTO (0) or _NONE */
    trainer_stats *stats;      /* filled at the end (may be NULL) */
    int64_t epochs;            /* 0: trainer_opts.epochs */
    bool validate_every_epoch; /* fill val_* after each epoch */
    trainer_epoch_fn on_epoch;
    void *user;
    int64_t validate_every_steps; /* 0: not by steps */
    trainer_epoch_fn on_validate; /* after each validation during training (with user) */
    /* backoff while fewer than min_replicas fit (the k-th wait round), and before the k-th
     * retry of a group that failed to start: base_ms * factor^(k-1), at most cap_ms, +- jitter
     * fraction */
    int backoff_base_ms;   /* 0: 100 */
    double backoff_factor; /* 0: 2 */
    int backoff_cap_ms;    /* 0: 5000 */
    double backoff_jitter; /* 0: 0.1; CT_ZERO for none */
    int create_timeout_ms; /* starting a group (actors + rendezvous); 0: 30000 */
    /* Also a checkpoint within epochs: whenever the optimizer step count reaches a multiple
     * of N (0: at epochs' ends only). Needs TRAINER_CHECKPOINT_AUTO. A failure then costs at
     * most N steps, and the group restarts at that batch of the epoch. */
    int64_t checkpoint_every_steps;
    /* A directory on the driver's host (made if missing) that gets every checkpoint too (see
     * "Checkpoint directory" below); NULL: none. */
    const char *checkpoint_dir;
    int checkpoint_num_to_keep;             /* newest kept, and best kept; 0: all */
    const char *checkpoint_score_attribute; /* NULL: no best; else the score (see below) */
    const char *checkpoint_score_order;     /* "min" (NULL) or "max": which score is best */
    /* Before training: trainer_restore of this checkpoint file, or of the latest checkpoint in
     * this directory (a checkpoint_dir of an earlier run, e.g. of a cluster since lost); the
     * job then goes on from its epoch and batch (that epoch's stats then cover the batches
     * after it). CT_ENOENT when there is none. */
    const char *resume;
    /* seeing a run (above): */
    const char *log_dir; /* NULL: no files; else metrics.jsonl and the event file go there
                            (created if missing) */
    int progress;        /* TRAINER_PROGRESS_AUTO (0), _ON or _OFF */
    int log_every_steps; /* without the live line: a plain line every N optimizer steps; 0: none */
    int report_ms;       /* how often replicas send their step records; 0: 100 */
    /* elastic bounds (see "Elastic bounds" above): */
    int min_replicas_timeout_ms;         /* the longest wait for min_replicas; 0: for ever */
    trainer_world_size_fn on_world_size; /* may be NULL; with user */
} trainer_train_opts;

/* Checkpoint directory (Ray's CheckpointConfig). Each checkpoint the driver adopts is written
 * to checkpoint_dir as ckpt-epochEEEE-stepSSSSSS.safetensors (epochs completed, optimizer
 * steps: name order is training order), atomically (a temporary file, fsync, rename; the
 * directory fsynced), then index.json, written the same way:
 *   {"format": "ct-checkpoint-index", "version": 1, "latest": FILE, "score_attribute": NAME
 *    or null, "score_order": "min"|"max", "best": [FILE, ...] (best first),
 *    "checkpoints": [{"file", "epoch", "batch", "step", "score": number or null}, ...]}
 * ("checkpoints": the files kept, oldest first), then the files no longer kept are deleted:
 * the newest checkpoint_num_to_keep, plus the best checkpoint_num_to_keep by score (0: all
 * kept). The score of a checkpoint is checkpoint_score_attribute's value when it is written:
 * "train_loss" (over the epoch's batches so far), "val_loss" / "val_accuracy" (the last
 * validation: validations during training run before the checkpoint that ends their segment
 * is written, so one at that step scores it), or a
 * step metric's name (trainer_step_metric; training, else validation). A checkpoint without
 * a value (no validation yet) has score null and is never among the best. A directory that
 * has an index already (the job resumed) keeps its list. */

/* Trains from the current epoch up to the epoch count. Returns 0, CT_ERETRY when more than
 * max_retries failures happened (ct_last_error() names the last one), CT_ESTART when the
 * replicas' program cannot start (not retried), or another CT_E* code
 * (a creator's error in every replica, an on_epoch stop). The group stays up afterwards for
 * trainer_validate; trainer_shutdown ends it. */
int trainer_train_with(trainer *t, const trainer_train_opts *opts);
#define trainer_train(t, ...) trainer_train_with((t), &(trainer_train_opts){__VA_ARGS__})

/* Loss and top-1 accuracy on the validation set, split over the replicas (a group is started
 * from the last checkpoint when none runs: waiting at most 30 s for min_replicas to fit, else
 * CT_ETIMEDOUT). Fills st's val_* fields (other fields as of the last epoch). */
int trainer_validate(trainer *t, trainer_stats *st);

/* Writes the current state (the last checkpoint, as loaded in the driver) as a safetensors file
 * on the driver's disk. trainer_restore reads one (written by trainer_save, same creators and
 * shapes) into the driver's state and makes it the checkpoint the next group starts from; the
 * running group, if any, is ended. CT_EINVAL naming the key or field on a mismatch. */
int trainer_save(trainer *t, const char *path);
int trainer_restore(trainer *t, const char *path);

/* The driver's model holding the last checkpoint's weights. Borrowed until trainer_shutdown.
 * With several models: model 0; trainer_get_model_at gives model i (NULL out of range). */
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

/* Ends the group (kills the replicas, waits for them to be reported gone), frees the last
 * checkpoint from the store and the trainer. Accepts NULL; nulls *t. */
void trainer_shutdown(trainer **t);

#ifdef __cplusplus
}
#endif
#endif
