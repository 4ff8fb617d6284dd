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
#define TR_CONFIG_MAX 2048
#define TR_MAX_KEYS 64
#define TR_REPLICA_CLASS "ct.trainer.Replica"

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
/* Built-ins (builtins.c): the function of that kind and name, or NULL. */
void *ct__trainer_builtin(tr_kind kind, const char *name);

/* What the driver sends every replica when it creates it: plain bytes, same in every replica. */
typedef struct tr_spec {
    char model[TR_NAME_MAX], data[TR_NAME_MAX], optimizer[TR_NAME_MAX], loss[TR_NAME_MAX],
        scheduler[TR_NAME_MAX], hook[TR_NAME_MAX];
    char train_step[TR_NAME_MAX], validate_step[TR_NAME_MAX]; /* "": the built-ins */
    char config[TR_CONFIG_MAX];
    uint64_t seed;
    int64_t batch, epochs;
    double bucket_mb;
    int threads, comm_timeout_ms;
    int accumulate;  /* batches per optimizer step, >= 1 */
    int sched_every; /* when the scheduler steps: TR_SCHED_EPOCH, _BATCH or _MANUAL */
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
    char err[512]; /* first error recorded (a bad value, a creator's message) */
};

/* Parses config into ctx (other fields as given). CT_EINVAL naming the bad pair. */
int ct__trainer_ctx_init(trainer_ctx *ctx, const char *config, int rank, int world, uint64_t seed,
                         int64_t start_epoch, int64_t epochs, bool driver);
void ct__trainer_ctx_free(trainer_ctx *ctx);
/* 0, or CT_EINVAL for a recorded error or (check_unused) a key no creator read. */
int ct__trainer_ctx_check(trainer_ctx *ctx, bool check_unused);

/* The objects built from the creators. epoch: epochs completed; step: optimizer steps; batch:
 * batches of epoch `epoch` done (a checkpoint within an epoch; 0 at an epoch's end); world:
 * the group size a loaded checkpoint was written by (0: none loaded). */
typedef struct tr_state {
    trainer_data data;
    bool has_data;
    ct_module *model;
    ct_optim *optim;
    ct_sched *sched;
    trainer_loss_fn loss;
    int64_t epoch, step, batch;
    int world;
    /* a plateau scheduler's monitored value (config plateau_metric): "val_loss",
     * "val_accuracy", "train_loss" or a validate step's metric name; "" for other schedulers */
    char plateau_metric[TR_NAME_MAX];
    /* plateau_metric "train_loss": the training loss summed over all ranks and the samples
     * of epoch `epoch`'s batches done (added up segment by segment; in a checkpoint within an
     * epoch, so that a resumed epoch's mean is the whole epoch's) */
    double epoch_loss_sum;
    int64_t epoch_samples;
} tr_state;

/* Runs the hook and the creators of spec (data only if with_data) in this thread, seeding the
 * module generator with spec->seed first. On error the state is freed and the message names
 * the creator (or the config key). */
int ct__trainer_state_build(const tr_spec *spec, trainer_ctx *ctx, bool with_data, tr_state *st);
void ct__trainer_state_free(tr_state *st);

/* ---- checkpoint codec (ckpt.c) ---- */

/* A checkpoint being written: the header is built first, then the bytes are copied into a
 * buffer of ct__ckpt_size() bytes (e.g. an object-store allocation). */
typedef struct tr_ckpt_plan tr_ckpt_plan;
int ct__ckpt_plan(const tr_state *st, const tr_spec *spec, int world, tr_ckpt_plan **out);
size_t ct__ckpt_size(const tr_ckpt_plan *p);
void ct__ckpt_write(const tr_ckpt_plan *p, void *dst);
void ct__ckpt_plan_free(tr_ckpt_plan **p);
/* Loads checkpoint bytes into st (model, optimizer, scheduler, epoch, step), after checking
 * the format, the creator names and every entry. CT_EINVAL naming what is wrong; st unchanged
 * as far as the model goes when the header is bad. */
int ct__ckpt_load(tr_state *st, const tr_spec *spec, const void *buf, size_t len);

/* ---- the checkpoint directory (ckptdir.c) ---- */

#define TR_CKPT_NAME_MAX 64 /* "ckpt-epochEEEE-stepSSSSSS.safetensors" */

typedef struct tr_ckptdir tr_ckptdir;
/* Opens (creates) dir and reads its index.json if there is one (a job going on in it keeps its
 * list). keep: newest kept, and best kept by the score attribute attr (NULL: no scores); 0
 * keeps all. CT_EINVAL for a bad index, CT_EIO when dir cannot be made. */
int ct__ckptdir_open(const char *dir, int keep, const char *attr, bool maximize, tr_ckptdir **out);
void ct__ckptdir_free(tr_ckptdir **d);
/* Writes the checkpoint bytes atomically as ckpt-epochEEEE-stepSSSSSS.safetensors (its name
 * into name), then the index, then deletes the files no longer kept. score: NaN for none. */
int ct__ckptdir_add(tr_ckptdir *d, const void *buf, size_t len, int64_t epoch, int64_t batch,
                    int64_t step, double score, char *name, size_t cap);
/* The path of the latest checkpoint in dir (the index's "latest", else the last by name).
 * CT_ENOENT when there is none. */
int ct__ckptdir_latest(const char *dir, char *path, size_t cap);

/* ---- the replica actor (replica.c) ---- */

/* Per-rank arguments of the "setup" call. */
typedef struct tr_setup_args {
    int rank, world;
    char group[64];
    int64_t start_epoch;
    int64_t start_batch; /* the checkpoint's position within start_epoch (0: its start) */
    int has_ckpt;
    ct_object_id ckpt;
    char driver_node[32];
} tr_setup_args;

/* One call trains a segment of an epoch: from batch start_batch (where the replica is, or a
 * seek of its loader) until `steps` optimizer steps are done or the epoch ends. */
typedef struct tr_epoch_args {
    int64_t epoch;
    int64_t start_batch;
    int64_t steps;          /* 0: to the epoch's end */
    int checkpoint;         /* rank 0 writes one at the segment's end */
    int64_t validate_every; /* validate after every that many optimizer steps; 0: never */
    int validate_end;       /* validate at the epoch's end (validate_every_epoch) */
} tr_epoch_args;

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
    int64_t end_batch; /* the position reached: batches of the epoch done */
    int epoch_done;    /* the epoch ended (scheduler stepped, buffers broadcast) */
    int has_ckpt;
    ct_object_id ckpt;
    int copies, copies_asked; /* of the checkpoint: nodes holding it after the seal, asked */
    int nval;                 /* validations run during the segment, in order */
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
struct trainer_step {
    trainer_ctx *ctx;
    tr_state *st;
    ct_bucketer *bucketer; /* NULL in a validate step */
    const char *name;      /* the step's registered name, for messages */
    bool training;
    int64_t epoch, index;
    int backwards, optimizer_steps; /* calls in this step */
    int updates;                    /* optimizer steps really taken in this step (0 or 1) */
    int accum_pos, accum_len;       /* batch's place in its accumulation group; group size */
    tr_metrics *metrics;            /* the replica's sums for this epoch / validation */
    int64_t batch_n;
};

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

/* Registers the replica class (idempotent); the library does it from a constructor. */
int ct__trainer_register_replica_class(void);

uint64_t ct__trainer_hash(const void *p, size_t n);
/* Prefixes the calling thread's ct_last_error() message with the formatted text ("<text>:
 * <old message>") and returns rc. (ct__error cannot take ct_last_error() as an argument:
 * both are the same buffer.) */
int ct__trainer_error_prefix(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
