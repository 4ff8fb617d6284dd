/* trainer/pipeline/stage.h — pipeline stages as actors on different nodes (issue 40 items 5-7),
 * with the GPT as the model: stage 0 holds the embeddings and the first layers, the last stage the
 * last layers, ln_f and the output layer (the token embedding's weight, tied: the first and the
 * last stage each hold a copy and add their gradients before every step, as Megatron does).
 *
 * A job is P pipelines x S stages: P x S actors of class "ct.pipeline.Stage", placed by one
 * placement group (SPREAD, one bundle per actor). Stage s of pipeline p runs the schedule's
 * actions of stage s (ct_pipe_schedule_actions, the list order) for its micro-batches; the
 * activations and their gradients go stage to stage over p2p.h's links, never through the head
 * or the driver. With P > 1, stage s of every pipeline averages its gradients (one allreduce of
 * its flat gradient buffer over a ring communicator of the P stages s) before the optimizer
 * steps. The driver (ct__pipe_job_*) only starts the actors and calls "step" (synthetic data) or
 * "epoch" (trainer mode: the trainer's creators and data; a segment of an epoch) and "validate"
 * on each; the last stages reply their losses. A dead stage fails the step (its neighbours'
 * receives fail at once with CT_EDEAD, the driver's call on it too); the job is then over, and
 * ct__pipe_job_train starts a new one from the last checkpoint (ct__pipe_job_save's file: the
 * trainer's checkpoint format with every stage's parameters and Adam state), which goes on exactly
 * where it was.
 *
 * Internal (ct__): trainer_train drives it through the config key pipeline_stages
 * (trainer/train/pipeline_train.c, trainer mode: ct__pipe_job_opts.spec). */
#ifndef CT_PIPELINE_STAGE_H
#define CT_PIPELINE_STAGE_H

#include <stdint.h>

#include "ct/ct.h"
#include "ct/nn.h"
#include "ct/optim.h"
#include "ct/pipeline.h"
#include "trainer/train/internal.h"

#define CT__PIPE_STAGE_CLASS "ct.pipeline.Stage"

typedef struct ct__pipe_job_opts {
    ct_gpt_config gpt; /* dropout must be 0 for runs equal to one process's */
    int stages;        /* S >= 1, <= gpt.n_layer */
    int pipelines;     /* P >= 1 (data parallel over pipelines) */
    int micro_batches; /* M, 1 .. batch */
    ct_pipe_schedule schedule;
    int batch;             /* rows per pipeline per step (the global batch is P x batch) */
    uint64_t seed;         /* weights (ct_nn_manual_seed before ct_nn_gpt_new) and data */
    float lr;              /* Adam's */
    int threads;           /* engine threads per stage (ct_nn_set_threads); 0: 1 */
    int timeout_ms;        /* p2p and collective waits; 0: 120000 */
    double cpus_per_stage; /* 0: 1 */
    /* NULL, or a checkpoint (ct__pipe_job_save's) to start from: a path every stage's node can
     * read (one machine, or a shared file system; trainer mode passes its checkpoint through
     * the object store instead: ckpt below) */
    const char *init_file;
    /* NULL: the GPT gpt and the synthetic data above. Else a trainer_train pipeline: the stages
     * run spec's creators (the model a GPT: gpt, seed, lr and batch then come from spec), read
     * its data with the replicas' loader (pipeline p as rank p of P) and are driven by
     * ct__pipe_job_epoch; no init_file. */
    const tr_spec *spec;
    int64_t start_epoch;      /* trainer mode: the epoch the run is at (the creators' ctx) */
    const ct_object_id *ckpt; /* trainer mode: NULL, or the checkpoint (trainer format, in the
                                 store) the stages start from */
} ct__pipe_job_opts;

/* The synthetic token data both ends of a pipeline draw the same batch from: rows
 * [row0, row0 + n) of step `step`'s global batch, x (n, T) and y (n * T) i64 (y: x shifted by
 * one, the next token). Learnable: each row walks a fixed random sequence over the vocabulary
 * from a position drawn from (seed, step, row). */
int ct__pipe_gpt_batch(uint64_t seed, int64_t step, int64_t row0, int64_t n, int64_t T,
                       int64_t vocab, ct_tensor **x, ct_tensor **y);
/* splitmix64's finaliser (the replicas' seed mixing, trainer/train/replica.c) */
uint64_t ct__pipe_mix(uint64_t x);
/* Layers [*first, *first + *n) of n_layer belong to stage s of S (the first stages one more when
 * S does not divide n_layer). */
void ct__pipe_gpt_layers(int n_layer, int stages, int s, int *first, int *n);

typedef struct ct__pipe_job ct__pipe_job;
/* Starts the P x S stage actors (a placement group of SPREAD bundles) and sets them up (their
 * links, communicators, models from opts.seed or init_file, or in trainer mode from the
 * creators or ckpt); group names this try (unique). */
int ct__pipe_job_start(const ct__pipe_job_opts *opts, const char *group, ct__pipe_job **out);
/* The steps done when the job started (init_file's; 0 without). */
int64_t ct__pipe_job_start_step(const ct__pipe_job *j);
/* One optimizer step on every pipeline; *loss (may be NULL): the mean over the pipelines of each
 * pipeline's batch loss. CT_EDEAD when a stage died (the job cannot go on). */
int ct__pipe_job_step(ct__pipe_job *j, int64_t step, double *loss);
/* The bytes all stages sent and received over their p2p links since the job started (as of the
 * last step): the activations and gradients, their headers, the tied gradients. */
void ct__pipe_job_p2p_bytes(const ct__pipe_job *j, uint64_t *sent, uint64_t *received);
/* Trainer mode: the batches of an epoch (stage 0's loader's, rank 0 of P). */
int64_t ct__pipe_job_epoch_batches(const ct__pipe_job *j);
/* Trainer mode: a segment of an epoch on every pipeline (ea: which, below); *loss_sum and
 * *samples (may be NULL): over the pipelines' last stages. */
struct ct__pipe_epoch_args;
int ct__pipe_job_epoch(ct__pipe_job *j, const struct ct__pipe_epoch_args *ea, double *loss_sum,
                       int64_t *samples);
/* Trainer mode: every pipeline's forward passes over its slice of the validation set (the
 * replicas' slices: pipeline p as rank p of P); *v the sums over the pipelines. */
int ct__pipe_job_validate(ct__pipe_job *j, double *loss_sum, int64_t *correct, int64_t *total);
/* Pipeline 0's stages' parameters and optimizer state into whole (a model of the GPT's names)
 * and opt (an optimizer over it of the stages' kind). */
int ct__pipe_job_gather(ct__pipe_job *j, ct_module *whole, ct_optim *opt);
/* Every stage's parameters and Adam state of pipeline 0 gathered into one checkpoint at path,
 * with `step` steps done (ct__pipe_ckpt_save). */
int ct__pipe_job_save(ct__pipe_job *j, int64_t step, const char *path);

/* A run of `steps` steps with retries: a job from opts (group: group-try<k>), a checkpoint at
 * ckpt_path every ckpt_every steps (> 0), and when a step fails (a stage died: CT_EDEAD, or
 * anything else) the job ends and a new one starts from the last checkpoint (from the start
 * when there is none yet), up to max_retries times. before_step (may be NULL) runs before each
 * step's call (a test kills a stage there). losses[0..steps) get each step's loss (a retried
 * step's latest); *retries the retries spent. */
typedef void (*ct__pipe_step_hook)(ct__pipe_job *j, int64_t step, int try_, void *user);
int ct__pipe_job_train(const ct__pipe_job_opts *opts, const char *group, int64_t steps,
                       int64_t ckpt_every, const char *ckpt_path, int max_retries,
                       ct__pipe_step_hook before_step, void *user, double *losses, int *retries);
/* The actor of pipeline p, stage s (borrowed), e.g. to kill it in a test. */
struct ct_actor *ct__pipe_job_actor(ct__pipe_job *j, int p, int s);
/* Kills the actors, removes the placement group, frees j. */
void ct__pipe_job_end(ct__pipe_job **j);

/* ---- one stage of the GPT (gpt_stage.c) ---- */
typedef struct ct__gpt_stage ct__gpt_stage;
/* Stage s of S of the GPT cfg, its weights those of ct_nn_gpt_new(cfg) after
 * ct_nn_manual_seed(seed), named as there. NULL on error. */
ct__gpt_stage *ct__gpt_stage_new(const ct_gpt_config *cfg, int s, int stages, uint64_t seed);
/* The same with whole's weights (a GPT of cfg: ct_nn_gpt_new's names). */
ct__gpt_stage *ct__gpt_stage_from(const ct_gpt_config *cfg, int s, int stages, ct_module *whole);
/* Stage 0: x (B, T) i64 token ids -> the activations (B, T, C); a middle stage (B, T, C) ->
 * (B, T, C); the last: -> logits (B*T, vocab). Recorded on this thread's tape. */
ct_tensor *ct__gpt_stage_forward(ct__gpt_stage *g, ct_tensor *x);
/* The stage's modules as one (parameters, state dict, optimizer). Borrowed. */
ct_module *ct__gpt_stage_module(ct__gpt_stage *g);
/* The token embedding's weight on the first and the last stage (tied), else NULL. Borrowed. */
ct_tensor *ct__gpt_stage_tied(ct__gpt_stage *g);
void ct__gpt_stage_destroy(ct__gpt_stage **g);

/* ---- checkpoints (pipe_ckpt.c): the trainer's format (trainer/train/ckpt.c), model "gpt" ---- */
/* A stage's parameters and optimizer state, for ct__pipe_gather (*out malloc'd). */
int ct__pipe_stage_state(ct_module *stage, ct_optim *opt, void **out, size_t *out_len);
/* The stages' states (replies[s] of lens[s] bytes, s < stages) into whole and opt. */
int ct__pipe_gather(ct_module *whole, ct_optim *opt, void *const *replies, const size_t *lens,
                    int stages);
/* The stages' states (replies[s] of lens[s] bytes, s < o->stages) gathered into a whole GPT and
 * its Adam, written to path (a temporary file, fsync, rename) with `step` steps done. */
int ct__pipe_ckpt_save(const ct__pipe_job_opts *o, void *const *replies, const size_t *lens,
                       int64_t step, const char *path);
/* whole's weights into stage (by name), and whole_opt's state of stage's parameters (and its
 * hyper-parameters) into opt. */
int ct__pipe_take_part(ct_module *whole, ct_optim *whole_opt, ct_module *stage, ct_optim *opt);
/* A stage's part of path's weights and Adam state into stage and opt; *step (may be NULL): the
 * steps done. */
int ct__pipe_ckpt_load_stage(const ct__pipe_job_opts *o, const char *path, ct_module *stage,
                             ct_optim *opt, int64_t *step);

/* ---- what the driver and the actors share (stage_actor.c, job.c) ---- */
/* a stage's reply to "step", "epoch" and "validate": the last stage's sums over its pipeline's
 * samples (0 elsewhere: loss_sum, the loss times the rows; correct, top-1 hits of a validation
 * with i64 labels), the steps run, and the stage's p2p byte counts so far */
typedef struct ct__pipe_reply {
    double loss_sum;
    int64_t samples, correct, steps;
    uint64_t sent, received;
} ct__pipe_reply;
/* a segment of an epoch: nbatches batches from batch start_batch, step optimizer steps done
 * before it; end: it ends the epoch (an epoch's scheduler steps then); report_ms > 0: the last
 * stages put their step records for the driver's run log every report_ms (records.c, as rank
 * `pipeline` of the job's group) */
typedef struct ct__pipe_epoch_args {
    int64_t epoch, start_batch, nbatches, step;
    int32_t end, report_ms;
} ct__pipe_epoch_args;
typedef struct ct__pipe_setup_args {
    ct__pipe_job_opts o; /* init_file: the path follows the struct, NUL-terminated; spec NULL */
    bool trainer;        /* trainer mode: spec below */
    tr_spec spec;
    bool has_ckpt; /* trainer mode: start from ckpt (ct__pipe_job_opts.ckpt) */
    ct_object_id ckpt;
    int stage, pipeline;
    char group[96];
} ct__pipe_setup_args;
int ct__pipe_register_stage_class(void);

#endif
