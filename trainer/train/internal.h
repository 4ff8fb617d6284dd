/* trainer/train/internal.h — what the trainer's files share: the creator registry, the
 * creator context, the state a replica (or the driver) builds from the creators, the spec the
 * driver sends to replicas, and the checkpoint codec. Not a public header. */
#ifndef CT_TRAINER_TRAIN_INTERNAL_H
#define CT_TRAINER_TRAIN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct/collective.h"
#include "ct/trainer.h"

#define TR_NAME_MAX 64
/* a comma-separated list of names (trainer_opts.model, .optimizer, .loss) */
#define TR_LIST_MAX 256
#define TR_MAX_MODELS 8 /* models (and optimizers) per trainer */
#define TR_CONFIG_MAX 2048
#define TR_MAX_KEYS 64
#define TR_REPLICA_CLASS "ct.trainer.Replica"
/* copies of a checkpoint in the store: this many, or one per live node with a store if fewer */
#define TR_CKPT_COPIES 2

typedef enum tr_kind {
    TR_MODEL,
    TR_DATA,
    TR_OPTIM,
    TR_LOSS,
    TR_SCHED,
    TR_HOOK,
    TR_TRAIN_STEP,
    TR_VAL_STEP,
    TR_NKINDS
} tr_kind;

/* The registered (or built-in) creator of that kind and name, or NULL. */
void *ct__trainer_lookup(tr_kind kind, const char *name);
const char *ct__trainer_kind_name(tr_kind kind);
/* CT_ENOTREG for a name that lookup did not find, the message starting with what: it names the
 * kind and the name, and lists the registered ones (or says it came after ct_init). */
int ct__trainer_not_registered(tr_kind kind, const char *name, const char *what);
/* The config keys declared for step name of kind (TR_TRAIN_STEP / TR_VAL_STEP), or "". */
const char *ct__trainer_step_keys(tr_kind kind, const char *step);
/* Built-ins (builtins.c): the function of that kind and name, or NULL; the i-th built-in name
 * of kind, or NULL past the last. */
void *ct__trainer_builtin(tr_kind kind, const char *name);
const char *ct__trainer_builtin_name(tr_kind kind, int i);
/* The config keys the built-in creator of that kind and name reads as paths (comma-separated;
 * "" for none or no such built-in). */
const char *ct__trainer_builtin_paths(tr_kind kind, const char *name);
/* Splits a comma-separated list of names ("generator, discriminator"; blanks around names
 * ignored) into names[0..cap). Returns the count, or CT_EINVAL for an empty or too long name or
 * more than cap names (the message starts with what, e.g. "trainer_create: opts.model"). */
int ct__trainer_split_names(const char *list, char names[][TR_NAME_MAX], int cap, const char *what);

/* What the driver sends every replica when it creates it: plain bytes, same in every replica. */
typedef struct tr_spec {
    char model[TR_LIST_MAX], optimizer[TR_LIST_MAX], loss[TR_LIST_MAX]; /* lists of names */
    char data[TR_NAME_MAX], scheduler[TR_NAME_MAX], hook[TR_NAME_MAX];
    char train_step[TR_NAME_MAX], validate_step[TR_NAME_MAX]; /* "": the built-ins */
    char config[TR_CONFIG_MAX];
    uint64_t seed;
    int64_t batch, epochs;
    double bucket_mb;
    int threads, comm_timeout_ms;
    int accumulate;  /* batches per optimizer step, >= 1 */
    int sched_every; /* when the scheduler steps: TR_SCHED_EPOCH, _BATCH or _MANUAL */
    bool bind_cpus;  /* replicas of one machine get CPUs of their own (cpu_binding.c) */
    int device;      /* ct_device the replicas train on (the driver's model stays on the CPU) */
    int zero;        /* ZeRO stage: 0 off, 1 optimizer state sharded over replicas (zero.c) */
    int topology;    /* ct_comm_topology of the ring communicator (config key comm_topology) */
} tr_spec;

enum { TR_SCHED_EPOCH, TR_SCHED_BATCH, TR_SCHED_MANUAL };

struct trainer_ctx {
    int rank, world;
    uint64_t seed;
    int64_t start_epoch, epochs;
    bool driver;
    const char *config;
    int nkeys;
    char keys[TR_MAX_KEYS][TR_NAME_MAX];
    char *vals[TR_MAX_KEYS];
    bool used[TR_MAX_KEYS];
    /* the keys the creators and steps asked for, present or not: a key nothing read is
     * compared with them for a "did you mean" */
    int nasked;
    char asked[2 * TR_MAX_KEYS][TR_NAME_MAX];
    char err[512];      /* first error recorded (a bad value, a creator's message) */
    ct_dtype precision; /* key "precision" (f32, bf16, f16; default f32): trainer_ctx_precision */
    /* key "devices_per_replica" (1 .. CT_MAX_DEVICE_INDEX; default 1), and the first of them:
     * the replica's device (ct__trainer_state_build sets it; CT_CPU in the driver) */
    int ndevices;
    ct_device device;
};

/* ---- the creator context and its config (config.c) ---- */
/* Parses config into ctx (other fields as given). CT_EINVAL naming the bad pair. */
int ct__trainer_ctx_init(trainer_ctx *ctx, const char *config, int rank, int world, uint64_t seed,
                         int64_t start_epoch, int64_t epochs, bool driver);
void ct__trainer_ctx_free(trainer_ctx *ctx);
/* 0, or CT_EINVAL for a recorded error or (check_unused) a key no creator read. */
int ct__trainer_ctx_check(trainer_ctx *ctx, bool check_unused);
/* config with the values of the comma-separated keys made absolute (relative to this process's
 * working directory; "./" dropped) into out (cap bytes); other pairs as they were. CT_EINVAL
 * when it does not fit, CT_EIO when the working directory is unknown. */
int ct__trainer_absolute_paths(const char *config, const char *keys, char *out, size_t cap);
/* Marks the keys declared for spec's steps (trainer_register_step_keys) as read (registry.c). */
void ct__trainer_ctx_use_step_keys(trainer_ctx *ctx, const tr_spec *spec);

/* The objects built from the creators. models[i] has its own optimizer optims[i] and loss
 * losses[i] (one loss creator may serve all: the same function); the scheduler drives
 * optims[0]. epoch: epochs completed; step: optimizer steps (batches that updated); batch:
 * batches of epoch `epoch` done (a checkpoint within an epoch; 0 at an epoch's end); world:
 * the group size a loaded checkpoint was written by (0: none loaded). */
typedef struct tr_state {
    trainer_data data;
    bool has_data;
    int nmodels; /* 1 .. TR_MAX_MODELS */
    ct_module *models[TR_MAX_MODELS];
    ct_optim *optims[TR_MAX_MODELS];
    trainer_loss_fn losses[TR_MAX_MODELS];
    ct_sched *sched;
    int64_t epoch, step, batch;
    int world;
    /* positions of epoch `epoch`'s order seen before its batch 0 under this world: > 0 after a
     * live recovery re-sharded the epoch's rest over the survivors (ct_loader_seek_offset) */
    int64_t offset;
    /* a plateau scheduler's monitored value (config plateau_metric): "val_loss",
     * "val_accuracy", "train_loss" or a validate step's metric name; "" for other schedulers */
    char plateau_metric[TR_NAME_MAX];
    /* plateau_metric "train_loss": the training loss summed over all ranks and the samples
     * of epoch `epoch`'s batches done (added up segment by segment; in a checkpoint within an
     * epoch, so that a resumed epoch's mean is the whole epoch's) */
    double epoch_loss_sum;
    int64_t epoch_samples;
    /* precision f16 with one model: the loss scaler (trainer_step_scaler; config keys
     * scaler_*), made with scaler_opts; in checkpoints ("grad_scaler") with skipped: the
     * optimizer steps it skipped for inf/NaN gradients so far (they count in step) */
    ct_grad_scaler *scaler;
    ct_grad_scaler_opts scaler_opts;
    int64_t skipped;
} tr_state;

/* Runs the hook and the creators of spec (data only if with_data) in this thread, seeding the
 * module generator with spec->seed first. On error the state is freed and the message names
 * the creator (or the config key). */
int ct__trainer_state_build(const tr_spec *spec, trainer_ctx *ctx, bool with_data, tr_state *st);
/* Only the data creator of spec, with ctx, into *d (zeroed first); on error nothing is left
 * and the message names the creator. ct__trainer_data_free destroys what d holds. */
int ct__trainer_data_build(const tr_spec *spec, trainer_ctx *ctx, trainer_data *d);
void ct__trainer_data_free(trainer_data *d);
void ct__trainer_state_free(tr_state *st);

/* ---- pipelines of stage actors (pipeline_keys.c, pipeline_train.c; trainer/pipeline/) ---- */

/* config keys pipeline_stages, micro_batches, schedule; stages 1 and micro_batches 1: none */
typedef struct tr_pipeline {
    int stages, micro_batches;
    int schedule; /* ct_pipe_schedule */
} tr_pipeline;
/* Reads and checks the keys (CT_EINVAL naming the key) and, for a pipeline, what it needs of
 * the rest (CT_ENOSYS naming what it cannot run yet): local is the driver's check-run state. */
int ct__trainer_pipeline_keys(trainer_ctx *ctx, const tr_spec *spec, const tr_state *local,
                              tr_pipeline *out);
/* trainer_train for a pipeline (pipeline_train.c; t's pipe, num_replicas pipelines of stage
 * actors) after trainer.c's start (resume, the checkpoint directory dir (may be NULL) whose
 * checkpoints are scored by attr (may be NULL), the run log): the stats, the validations and
 * on_validate, on_epoch, the checkpoints; the trained model and optimizer in t's local. */
struct tr_ckptdir;
/* What trainer_train cannot run with a pipeline yet (CT_ENOSYS naming it), before anything
 * starts. */
int ct__trainer_pipeline_check(const trainer *t, const trainer_train_opts *o);
int ct__trainer_pipeline_train(trainer *t, const trainer_train_opts *o, struct tr_ckptdir *dir,
                               const char *attr);
/* trainer_validate for a pipeline: a job from the driver's state validates; *loss_sum, *correct
 * and *total over the pipelines' slices of the validation set. */
int ct__trainer_pipeline_validate(trainer *t, double *loss_sum, int64_t *correct, int64_t *total);

/* ---- checkpoint codec (ckpt.c) ---- */

/* A checkpoint being written: the header is built first, then the bytes are copied into a
 * buffer of ct__ckpt_size() bytes (e.g. an object-store allocation). */
typedef struct tr_ckpt_plan tr_ckpt_plan;
/* An optimizer's state dict with ZeRO's shards gathered into full tensors (zero.c); entry names
 * are the optimizer's, valid until its next state dict. */
typedef struct tr_zero_state {
    ct_state_entry *e;
    int n;
    float **bufs; /* [n] the gathered tensors (NULL for other entries) */
} tr_zero_state;
/* full: NULL, or per model the optimizer state to write instead of its state dict (ZeRO) */
int ct__ckpt_plan(const tr_state *st, const tr_spec *spec, int world, const tr_zero_state *full,
                  tr_ckpt_plan **out);
size_t ct__ckpt_size(const tr_ckpt_plan *p);
/* Writes the ct__ckpt_size bytes to dst; returns their CRC-32C, computed in the same pass. */
uint32_t ct__ckpt_write(const tr_ckpt_plan *p, void *dst);
void ct__ckpt_plan_free(tr_ckpt_plan **p);
/* Loads checkpoint bytes into st (models, optimizers, scheduler, epoch, step), after checking
 * the format, the creator names and every entry. CT_EINVAL naming what is wrong; st unchanged
 * as far as the models go when the header is bad (with several models, a model that does not
 * match leaves the models before it loaded: the driver rewinds to its checkpoint). */
int ct__ckpt_load(tr_state *st, const tr_spec *spec, const void *buf, size_t len);

/* ---- the checkpoint directory (ckptdir.c) ---- */

#define TR_CKPT_NAME_MAX 64 /* "ckpt-epochEEEE-stepSSSSSS.safetensors" */

typedef struct tr_ckptdir tr_ckptdir;
/* Opens (creates) dir and reads its index.json if there is one (a job going on in it keeps its
 * list). keep: newest kept (<= 0: all); nbest: best kept besides them by the score attribute
 * attr (NULL: no scores). CT_EINVAL for a bad index, CT_EIO when dir cannot be made. */
int ct__ckptdir_open(const char *dir, int keep, int nbest, const char *attr, bool maximize,
                     tr_ckptdir **out);
/* The path of the best-scoring checkpoint d lists, and its score: 0; 1 when none is scored. */
int ct__ckptdir_best(const tr_ckptdir *d, char *path, size_t cap, double *score);
void ct__ckptdir_free(tr_ckptdir **d);
/* Writes the checkpoint bytes atomically as ckpt-epochEEEE-stepSSSSSS.safetensors (its name
 * into name), then the index (with st, the stats at this checkpoint; may be NULL), then
 * deletes the files no longer kept. score: NaN for none. */
int ct__ckptdir_add(tr_ckptdir *d, const void *buf, size_t len, int64_t epoch, int64_t batch,
                    int64_t step, double score, const trainer_stats *st, char *name, size_t cap);
/* The path of the latest checkpoint in dir (the index's "latest", else the last by name); 1
 * when dir holds none; CT_E* for a directory that cannot be read or a bad index. */
int ct__ckptdir_latest(const char *dir, char *path, size_t cap);
/* The stats kept with checkpoint file ckpt, when it is the latest of its directory's index,
 * into st's fields that describe the run (epoch, steps, losses, accuracy, metrics); CT_ENOENT
 * when none are kept. */
int ct__ckptdir_stats(const char *ckpt, trainer_stats *st);

/* ---- batches to a device (upload.c) ---- */

struct ct__backend;
typedef struct tr_uploader {
    const struct ct__backend *bk;
    void *stream;           /* the copy stream */
    void *copied, *compute; /* events: the last upload done; the compute stream's work so far */
    void *stage;            /* host staging (pinned on CUDA), cap bytes */
    size_t cap;
    bool used;
} tr_uploader;
int ct__uploader_init(tr_uploader *u, ct_device device);
void ct__uploader_free(tr_uploader *u);
/* *out = a new tensor on u's device holding a copy of host's bytes (ndim, shape, dt),
 * ready for the compute stream's later work. */
int ct__uploader_put(tr_uploader *u, ct_dtype dt, int ndim, const int64_t *shape, const void *host,
                     ct_tensor **out);

/* ---- the replica actor (replica.c) ---- */

/* Per-rank arguments of the "setup" call. */
typedef struct tr_setup_args {
    int rank, world;
    char group[64];
    int64_t start_epoch;
    int64_t start_batch;  /* the checkpoint's position within start_epoch (0: its start) */
    int64_t start_offset; /* ... after this many positions of its order (tr_state.offset) */
    int has_ckpt;
    ct_object_id ckpt;
    char driver_node[32];
    double lr_scale; /* with a checkpoint: its learning rates times this (trainer_scale_lr) */
} tr_setup_args;

/* One call trains a segment of an epoch: from batch start_batch (where the replica is, or a
 * seek of its loader) until `steps` optimizer steps are done or the epoch ends. */
typedef struct tr_epoch_args {
    int64_t epoch;
    int64_t offset; /* tr_state.offset: the epoch's positions seen before its batch 0 */
    int64_t start_batch;
    int64_t steps;          /* 0: to the epoch's end */
    int checkpoint;         /* rank 0 writes one at the segment's end */
    int64_t validate_every; /* validate after every that many optimizer steps; 0: never */
    int validate_end;       /* validate at the epoch's end (validate_every_epoch) */
    int report_ms;          /* > 0: send per-step records to the driver this often (records.c) */
    double lr_scale;        /* > 0 and not 1: the rates times this first (a live recovery's) */
    /* > 0: end after this many optimizer steps too, with no checkpoint unless the epoch ended:
     * a step boundary where the driver may let a replacement in (heal_replacement) */
    int64_t pause_steps;
    /* this rank records the averaged gradients of every optimizer step of the segment
     * (tr_grad_log): it served a replacement's snapshot, which replays them when it enters;
     * 0: it drops any it recorded */
    int record_grads;
    /* recovery "live" applies: a device's averaged gradients are waited for inside their step
     * (step.c), so a peer's death is seen in the step that lost it, before its optimizer step
     * changed the weights, and the survivors go on from those weights */
    int live;
} tr_epoch_args;

/* The "regroup" call of live recovery: this survivor's rank in the new group of world ranks,
 * which meets under a new group id. */
typedef struct tr_regroup_args {
    int rank, world;
    char group[64];
    /* a replacement healed from a snapshot older than the group's step: 1 + the rank whose
     * tr_grad_log holds the averaged gradients since then (0: none) */
    int log_from;
} tr_regroup_args;

/* Healing a replacement from a live peer (trainer.c, heal_replacement): the "snapshot" call
 * asks an idle serving peer to put its whole state into the store, sealed toward node (the
 * newcomer's); it replies a tr_snapshot, which is the newcomer's "heal" call's args. */
typedef struct tr_snapshot_args {
    char node[32];
} tr_snapshot_args;

/* A serving peer's state in the store: the checkpoint bytes of its models, optimizers,
 * scheduler, loss scaler and counters (id, size, their CRC-32C), the weights' hash, and its
 * position: the data position (epoch, batch under offset) of a group of world replicas; RNG
 * draws are a function of that position (replica.c, batch_seed). put_ns: serializing and
 * sealing it. The "heal" reply is a tr_snapshot too: the newcomer's hash after loading it and
 * get_ns, its fetch and load. */
typedef struct tr_snapshot {
    ct_object_id id;
    uint64_t size;
    uint32_t crc;
    uint64_t hash;
    int64_t step, epoch, batch, offset;
    int world;
    int64_t put_ns, get_ns;
    /* full optimizer steps left in the epoch after it (the serving peer's loader), and whether
     * this replica can record its averaged gradients for a replay (replica_live.c,
     * replay_refusal: 0 and why when not), for the driver's overlap */
    int64_t steps_left;
    int replay_ok;
    char replay_why[80];
} tr_snapshot;

/* The steps' named metrics of one replica: sums of value * batch size and of batch sizes. */
typedef struct tr_metrics {
    int n;
    char names[TRAINER_MAX_METRICS][TRAINER_METRIC_NAME_MAX];
    double sum[TRAINER_MAX_METRICS], weight[TRAINER_MAX_METRICS];
} tr_metrics;

#define TR_REPORT_MAGIC 0x43545250u     /* "CTRP": a tr_report */
#define TR_VAL_REPORT_MAGIC 0x43545256u /* "CTRV": a tr_val_report */

/* One validation run during an epoch: all ranks' sums, added in rank order (the same on every
 * rank: the plateau scheduler steps on it). */
typedef struct tr_val_result {
    int64_t epoch, step; /* 0-based epoch it ran in; optimizer steps done before it */
    double loss_sum;
    int64_t correct, total;
    tr_metrics metrics;
} tr_val_result;

/* What a replica reports after a segment of an epoch; nval tr_val_result entries follow it. */
typedef struct tr_report {
    uint32_t magic; /* TR_REPORT_MAGIC */
    int rank, world;
    int64_t epoch;
    char group[64];
    tr_metrics metrics;
    double loss_sum;
    int64_t samples, steps;
    double seconds;
    int64_t first_step_ns; /* CLOCK_MONOTONIC of this replica's first step in its group, or 0 */
    uint64_t weights_hash;
    int64_t end_batch;  /* the position reached: batches of the epoch done */
    int64_t end_offset; /* ... after this many positions of its order (tr_state.offset) */
    int epoch_done;     /* the epoch ended (scheduler stepped, buffers broadcast) */
    int has_ckpt;
    ct_object_id ckpt;
    int copies, copies_asked; /* of the checkpoint: nodes holding it after the seal, asked */
    int nval;                 /* validations run during the segment, in order */
    /* this replica's node is draining (told to stop): the segment ended at the first step
     * boundary after the replica heard it, with a checkpoint there (this replica's, or rank
     * 0's at an epoch's end); mid-epoch the replica then left the group (its peers fail) */
    int drained;
    /* the loss scaler (f16): steps it skipped in this segment, and so far (tr_state's);
     * its scale after the segment (0: no scaler) */
    int64_t skipped, skipped_total;
    double loss_scale;
    int64_t optim_state_bytes; /* this replica's optimizer state (all its optimizers) */
    double ckpt_seconds;       /* writing its checkpoint (has_ckpt) */
    int64_t replayed;          /* "regroup": the steps this rank replayed from a tr_grad_log */
} tr_report;

typedef struct tr_val_report {
    uint32_t magic; /* TR_VAL_REPORT_MAGIC */
    int rank, world;
    char group[64];
    uint64_t seq; /* validations this replica ran (tells two sets of one group apart) */
    tr_metrics metrics;
    double loss_sum;
    int64_t correct, total;
} tr_val_report;

/* ---- steps (step.c) ---- */

/* What a step call works with; a trainer_step is this struct (step.c's accessors read it). */
/* The averaged gradients of the optimizer steps a serving peer took since a replacement's
 * snapshot (gradlog.c): entries of (model, its first group's lr, its gradients) and step ends,
 * which the replacement replays in order to reach the group's step with the same weights and
 * optimizer state (heal overlap; recovery "live"). */
typedef struct tr_grad_log {
    bool on;
    int64_t step0; /* tr_state.step when it began */
    unsigned char *buf;
    size_t len, cap;
} tr_grad_log;

/* Appends model m's averaged gradients (before its optimizer step) to log; on a device (the
 * model's, CT_CPU: host memory) downloaded. 0, CT_ENOMEM or the download's error. */
int ct__gradlog_opt(tr_grad_log *log, tr_state *st, int m, ct_device device);
/* Appends the end of an optimizer step (tr_state.step goes on, a per-batch scheduler steps). */
int ct__gradlog_step(tr_grad_log *log);
/* Empties log and frees its memory; off until begun again. */
void ct__gradlog_reset(tr_grad_log *log);
/* Replays len bytes of a log on st (spec: when its scheduler steps, and its device, where the
 * gradients are uploaded): each model's optimizer
 * steps on the recorded gradients, with the recorded rate (CT_EPROTO when the optimizer's rate
 * differs, or an entry is malformed); *steps: the optimizer steps replayed. */
int ct__gradlog_replay(tr_state *st, const tr_spec *spec, const void *buf, size_t len,
                       int64_t *steps);

struct trainer_step {
    trainer_ctx *ctx;
    tr_state *st;
    ct_bucketer **bucketers; /* one per model (st->nmodels); NULL in a validate step */
    const char *name;        /* the step's registered name, for messages */
    bool training;
    int64_t epoch, index;
    int backwards;                      /* backward calls in this step, all models */
    int model_backwards[TR_MAX_MODELS]; /* ... per model */
    int optimizer_steps[TR_MAX_MODELS]; /* optimizer calls in this step, per optimizer */
    int updates;              /* optimizer steps really taken in this step (0 .. nmodels) */
    int skipped;              /* ... and skipped by the loss scaler (inf/NaN gradients) */
    bool unscaled;            /* the scaler unscaled this step's gradients (for clipping) */
    int accum_pos, accum_len; /* batch's place in its accumulation group; group size */
    tr_metrics *metrics;      /* the replica's sums for this epoch / validation */
    tr_metrics *rec_metrics;  /* also summed here when not NULL: the step record's */
    int64_t batch_n;
    double grad_norm;   /* measured by trainer_step_clip_grad_norm in this step, */
    bool has_grad_norm; /* when has_grad_norm */
    int64_t wait_ns;    /* spent in this step waiting for the averaged gradients */
    ct_comm *comm;      /* the replica's host communicator (ZeRO's clipping) */
    bool zero;          /* ZeRO-1: optimizers step their shards, then parameters are gathered */
    tr_grad_log *log;   /* not NULL: each optimizer step's averaged gradients go here too */
    bool live;          /* tr_epoch_args.live: the host waits for each step's allreduces */
};

/* ---- ZeRO-1 (zero.c) ---- */
/* Sets every optimized parameter's shard to what this rank owns in bucketer b (shard mode). */
int ct__zero_shard(ct_module *model, ct_optim *o, ct_bucketer *b);
/* After the optimizer step: every rank's owned parameter elements to all. */
int ct__zero_allgather(ct_module *model, ct_bucketer *b);
/* clip_grad_norm (L2) over the shards, the sums of squares added over ranks. */
int ct__zero_clip(ct_comm *c, ct_optim *o, double max_norm, double *norm);
/* A collective: o's state dict with full tensors (see tr_zero_state). */
int ct__zero_gather_state(ct_comm *c, ct_optim *o, tr_zero_state *z);
void ct__zero_state_free(tr_zero_state *z);

/* The step function of spec (the built-in for ""). */
trainer_step_fn ct__trainer_step_fn(const tr_spec *spec, bool training);
/* Runs one step: s->backwards etc. reset; after the call, checks the one-backward rule for a
 * train step (CT_EINVAL naming the step). Clears the tape and drains the bucketer when the
 * step failed half-way. */
int ct__trainer_step_run(trainer_step *s, trainer_step_fn fn, const trainer_batch *b,
                         trainer_step_out *out);

/* Driver side: adds a replica's metric sums into acc (by name); then out / nout get the
 * averages (sum / weight) of acc: e.g. trainer_stats.metrics / .nmetrics. */
void ct__trainer_metrics_add(tr_metrics *acc, const tr_metrics *m);
void ct__trainer_metrics_out(const tr_metrics *acc, trainer_metric *out, int *nout);

/* Adds value * weight (and weight) to the named metric of m; CT_ENOSPC past
 * TRAINER_MAX_METRICS names. The name is checked by the caller. */
int ct__trainer_metric_add(tr_metrics *m, const char *name, double value, double weight);

/* ---- per-step records (records.c) ----
 *
 * A replica that is asked to (tr_epoch_args.report_ms > 0) keeps one record per optimizer step
 * (per accumulation group) and puts them, as text lines, in chunks under the head's KV key
 * "trainer/<group>/rec/<rank>/<epoch>/<start_batch>/<seq>" (one series per train_epoch call, a
 * segment of the epoch; seq from 0) every report_ms and at the end of the segment (before its
 * reply). The driver reads and deletes the chunks in order while it waits for the segment, and
 * merges the ranks' records of one step into a tr_step_record. KV rather than an actor method:
 * the replica's actor thread is busy in train_epoch, and a put every ~100 ms costs well
 * under a millisecond. */

/* The replica's side. */
typedef struct tr_recorder {
    int report_ms;    /* 0: off */
    char prefix[128]; /* "trainer/<group>/rec/<rank>/<epoch>/<start_batch>/" */
    uint64_t seq;     /* the next chunk */
    char *buf;        /* records not sent yet */
    size_t len, cap;
    int64_t flushed_ns, t0_ns; /* last put; end of the last record (or the epoch's start) */
    double peak_flops;         /* this replica's device's peak (MFU), set once by the replica */
    double loss_sum;           /* the record being built (an accumulation group) */
    int64_t samples, wait_ns;
    int64_t data_ns; /* waiting for batches (the replica adds to it, the record resets it) */
    tr_metrics metrics;
} tr_recorder;

/* Starts a segment's records (off when report_ms <= 0): s->epoch and s->index (the segment's
 * first batch) are set; points s->rec_metrics at the record's. */
void ct__rec_begin(tr_recorder *rec, trainer_step *s, const char *group, int rank, int report_ms);
/* After a successful batch (s->index already counts it; s->st->step counts its update): adds it
 * to the record, which ends at the accumulation group's last batch; puts the chunk when
 * report_ms passed. Call before a per-batch scheduler step (the record's lr is the one the step
 * used). Never fails (a chunk that cannot be put is dropped, logged). */
void ct__rec_batch(tr_recorder *rec, const trainer_step *s, const trainer_step_out *so,
                   int64_t batches);
/* Puts what is left (end of the segment). */
void ct__rec_flush(tr_recorder *rec);
/* Restarts the step clock: what ran since the last record (an in-line validation) is in no
 * step's step_s. */
void ct__rec_idle(tr_recorder *rec);
void ct__rec_free(tr_recorder *rec);

/* One step of all ranks, merged by the driver. */
typedef struct tr_step_record {
    int64_t epoch, batch, batches; /* 0-based epoch; batches done in it of batches */
    int64_t step;                  /* optimizer steps done (per replica), this one included */
    double wall_time;              /* rank 0's CLOCK_REALTIME at the step's end, seconds */
    double loss;                   /* mean over all ranks' samples */
    int64_t samples;               /* all ranks */
    double lr;                     /* param group 0's, as the step used it */
    double grad_norm;              /* when has_grad_norm (rank 0's; equal in all: synced) */
    bool has_grad_norm;
    double samples_per_s; /* samples / the slowest rank's step_s */
    double peak_flops;    /* the sum of the ranks' device peaks (0 when one is unknown) */
    int world;
    double *step_s, *wait_s; /* per rank: wall time of the step (since the previous record, data
                                loading included), of which waiting for averaged gradients */
    double *data_s;          /* per rank: of step_s, waiting for the batch (the loader) */
    int nmetrics;
    trainer_metric metrics[TRAINER_MAX_METRICS]; /* averaged over the ranks' samples */
} tr_step_record;

/* The driver's side: the reader of one group's chunks. */
typedef struct tr_reader tr_reader;
typedef void (*tr_record_fn)(const tr_step_record *r, void *user);
/* A reader for group (world ranks); fn gets every merged record. NULL on out of memory. */
tr_reader *ct__reader_new(const char *group, int world, tr_record_fn fn, void *user);
/* From now on reads the chunks of the segment of epoch from start_batch (after reading what is
 * left of the previous segment's). */
void ct__reader_segment(tr_reader *rd, int64_t epoch, int64_t start_batch);
/* Reads and deletes every chunk there now, calling fn for each complete step. */
void ct__reader_poll(tr_reader *rd);
/* Deletes what is left in the KV (chunks of a group that ended) and frees; accepts NULL. */
void ct__reader_free(tr_reader **rd);

/* ---- the run log (progress.c): metrics.jsonl, the TensorBoard events, the progress line ---- */
typedef struct tr_progress tr_progress;
/* Starts (or, same log_dir, continues) the log of a trainer_train call: *p is replaced unless
 * its log_dir is the same. Nothing (NULL) when opts asks for no output. CT_EINVAL / CT_EIO
 * naming the option or path. */
int ct__progress_start(tr_progress **p, const trainer_train_opts *o, int64_t epochs);
/* Ends a trainer_train call's output (the live line); the files stay open for validations. */
void ct__progress_stop(tr_progress *p);
void ct__progress_free(tr_progress **p);
/* report_ms for the replicas (0 when p is NULL). */
int ct__progress_report_ms(const tr_progress *p);
/* A segment of epoch from start_batch starts on group (world replicas): its records are read
 * from now on. */
void ct__progress_segment_start(tr_progress *p, const char *group, int world, int64_t epoch,
                                int64_t start_batch);
/* Reads the replicas' records now (while waiting for a segment; and once after it). */
void ct__progress_poll(tr_progress *p);
/* An epoch ended (st: the trainer's stats after it). */
void ct__progress_epoch(tr_progress *p, const trainer_stats *st);
/* A validation's record (st's val_* fields): one that ran in epoch (0-based) after step
 * optimizer steps (in-line during training, or trainer_validate's). */
void ct__progress_val(tr_progress *p, const trainer_stats *st, int64_t epoch, int64_t step);
/* A line of its own on stderr where the run log prints lines (inside trainer_train); false
 * (nothing printed) otherwise. */
bool ct__progress_note(tr_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the head's view of the job (report.c): TrainReport for the head's metrics ----
 * The driver's last known step, epoch, loss, throughput, replicas alive and retries by reason,
 * sent to the head at most every TR_REPORT_MS (forced sends: a group started or ended, a
 * retry, an epoch, the end of trainer_train). Never fails training: a send that fails is
 * logged once and dropped. */
#define TR_REPORT_MS 250
#define TR_REASONS 8
#define TR_POINTS 64 /* steps kept between sends (the newest) */
/* Histograms of seconds the head shows (ct_train_*_seconds): a step (the slowest rank's, data
 * loading included), its wait for averaged gradients (the slowest rank's), its wait for the
 * batch (the slowest rank's), and writing a checkpoint (the replica that wrote it). */
enum { TR_HIST_STEP, TR_HIST_ALLREDUCE, TR_HIST_DATA_WAIT, TR_HIST_CHECKPOINT, TR_HISTS };
#define TR_HIST_BOUNDS 15
typedef struct tr_hist {
    uint64_t counts[TR_HIST_BOUNDS]; /* <= each of report.c's bounds, not cumulative */
    uint64_t count;
    double sum;
} tr_hist;
/* counts by reason ([a-z_]; the last slot sums what does not fit) */
typedef struct tr_reasons {
    int n;
    char reason[TR_REASONS][32];
    uint64_t count[TR_REASONS];
} tr_reasons;
typedef struct tr_head_report {
    int64_t sent_ms; /* last send */
    bool dirty;      /* something changed since */
    bool warned;     /* a failed send was logged */
    int64_t step, epoch;
    double loss, sps, mfu; /* mfu < 0: unknown */
    int replicas;
    bool done;
    tr_reasons retries;
    double val_loss;          /* NaN: no validation yet */
    int64_t ckpts, ckpt_step; /* checkpoints adopted, the newest one's steps */
    tr_hist hist[TR_HISTS];   /* seconds: TR_HIST_STEP, _ALLREDUCE, ... */
    int64_t epochs;           /* trainer_train's (for the ETA); 0: unknown */
    uint64_t drains;          /* groups a node's drain ended ... */
    tr_reasons drains_by;     /* ... by reason: "mid_epoch", "segment_end" */
    uint64_t live, heals;     /* live recoveries; replacements healed from a live peer */
    char live_what[160];      /* the newest of each, in words ("": none) */
    char heal_what[160];
    double eta;         /* seconds until the last epoch ends; NaN: unknown */
    double spb;         /* seconds per batch, a moving average of the records' (0: none) */
    int64_t last_batch; /* epoch * batches + batch of the last record; -1: none */
    double last_wall;   /* its wall_time */
    int npts;           /* steps since the last send, for the loss curve */
    int64_t pt_step[TR_POINTS];
    double pt_loss[TR_POINTS], pt_sps[TR_POINTS];
} tr_head_report;
void ct__report_init(tr_head_report *r);
/* A merged step record (progress.c) with its MFU (< 0: unknown). */
void ct__report_step(tr_head_report *r, const tr_step_record *rec, double mfu);
void ct__report_epoch(tr_head_report *r, const trainer_stats *st);
/* A validation's result (st's val_* as set_val_stats made them): its loss, when it had samples. */
void ct__report_val(tr_head_report *r, const trainer_stats *st);
void ct__report_replicas(tr_head_report *r, int n);
/* A retry spent, by reason ("node_lost", "replica_killed", ...; [a-z_]). */
void ct__report_retry(tr_head_report *r, const char *reason);
void ct__report_done(tr_head_report *r);
/* A group ended because its node drained (told to stop), by where the drain caught it:
 * "mid_epoch" (its replica checkpointed at the next step and left) or "segment_end" (heard as
 * the segment ended). */
void ct__report_drain(tr_head_report *r, const char *reason);
/* The survivors went on live without the dead (what: in words, printf style) ... */
void ct__report_live(tr_head_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* ... a replacement healed from a live peer and joined. */
void ct__report_heal(tr_head_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A checkpoint of the job's state was adopted at `step` optimizer steps; its replica took
 * write_s seconds to write it. */
void ct__report_checkpoint(tr_head_report *r, int64_t step, double write_s);
/* Sends when something changed and TR_REPORT_MS passed (or force). */
void ct__report_send(tr_head_report *r, bool force);
/* progress.c hands every merged record to r as well (NULL: none). */
void ct__progress_set_report(tr_progress *p, tr_head_report *r);

/* cpu_binding.c: binds this replica's threads to CPUs of its own when enabled and the
 * replicas of its machine fit (see there). A collective call: every rank of comm must make
 * it. Returns how many replicas of the group were bound on this machine (this one among them;
 * every rank derives it from the same gathered claims, so ranks that share a machine agree),
 * 0 when it was not bound, or the communicator's error; a placement that does not fit binds
 * nothing. */
int ct__replica_bind_cpus(ct_comm *comm, int threads, bool enabled, int timeout_ms);

/* Registers the replica class (idempotent); the library does it from a constructor. */
int ct__trainer_register_replica_class(void);

/* Prefixes the calling thread's ct_last_error() message with the formatted text ("<text>:
 * <old message>") and returns rc. (ct__error cannot take ct_last_error() as an argument:
 * both are the same buffer.) */
int ct__trainer_error_prefix(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- what fits the cluster (fit.c) ---- */

/* What each replica asks for, and how many the driver wants. */
typedef struct tr_ask {
    double cpus;
    int gpus;
    int min_replicas, max_replicas;
} tr_ask;

/* The live nodes (that take actors) as the group's replicas see them: how many replicas fit. */
typedef struct tr_fit {
    int now;                 /* in the free resources now, each on one node (no cap) */
    int now_cpu, now_gpu;    /* ... were only CPUs, or only GPUs, asked for */
    int empty;               /* were every node empty: 0 means never on these nodes */
    int nodes;               /* live nodes */
    double cpu_max, gpu_max; /* the most CPUs and GPUs one node has */
    double cpu_free, gpu_free;
    char desc[240]; /* the nodes by their totals: "2 x {CPU: 1}, 1 x {CPU: 8, GPU: 2}" */
} tr_fit;

/* Asks the head for its live nodes and counts the replicas of a that fit (*f). 0 or an error. */
int ct__fit_count(const tr_ask *a, tr_fit *f);
/* What a replica asks for: "1 CPU" or "2 CPUs and 1 GPU". */
void ct__fit_replica_shape(const tr_ask *a, char *buf, size_t cap);
/* What is short while fewer than min_replicas fit now: "free GPUs", "free CPUs", ... */
const char *ct__fit_short(const tr_ask *a, const tr_fit *f);
/* A request no live node could meet even when empty: CT_EINVAL naming the missing resource and
 * the nodes there are; 0 when a node could hold a replica, or with no live node to judge by. */
int ct__fit_never(const tr_ask *a, const tr_fit *f);

#endif
