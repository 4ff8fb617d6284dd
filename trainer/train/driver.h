/* trainer/train/driver.h — the driver's state (struct trainer) and what its files share:
 * trainer.c (the group, the epoch loop, restart recovery), live.c (the survivors of a death go
 * on) and heal.c (a replacement heals from a live peer). Not a public header; replicas never
 * see it. */
#ifndef CT_TRAINER_TRAIN_DRIVER_H
#define CT_TRAINER_TRAIN_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

/* for the head's report of the death the survivors saw (live.c, heal.c) */
#define LIVE_DEATH_WAIT_MS 1000
/* a group smaller than before a live recovery: optimizer steps per segment, so that a
 * replacement that fits joins at the next step boundary (trainer.c's run_segment, heal.c) */
#define HEAL_POLL_STEPS 1
/* a replacement copies a serving peer's snapshot of step S while the survivors train steps S ..
 * S+HEAL_OVERLAP_STEPS-1; it enters at step S+HEAL_OVERLAP_STEPS, always there (the survivors
 * wait there for the rest of its copy), so that where it enters is a function of the step, not
 * of the machine's speed: the same kill gives the same weights (heal.c) */
#define HEAL_OVERLAP_STEPS 2

/* What the driver sums over the segments of an epoch. */
typedef struct epoch_sums {
    double loss, seconds;
    int64_t samples;
    tr_metrics m;
    bool agree;
    int64_t skipped; /* steps the loss scaler skipped (rank 0's: all ranks skip alike) */
} epoch_sums;

struct trainer {
    tr_spec spec;
    int num_replicas;
    int min_replicas, max_replicas; /* elastic bounds: 1 <= min <= num_replicas <= max */
    double cpus;
    int gpus; /* per replica (CUDA replicas) */
    ct_strategy placement;
    tr_state local; /* the driver's model, optimizer, scheduler: the last checkpoint's state */
    /* the running group */
    ct_actor **actors;
    int world;
    int groups;       /* groups started so far (group ids) */
    bool group_fresh; /* no epoch completed yet by this group */
    bool at_ckpt;     /* the group's state is the newest checkpoint's (its last segment wrote it) */
    /* the newest complete checkpoint */
    bool has_ckpt;
    ct_object_id ckpt;
    bool ckpt_unsaved;     /* adopted, not yet written to the checkpoint directory */
    bool under_replicated; /* the last checkpoint stored had fewer copies than asked */
    int copies_kept;       /* the most copies a checkpoint was asked for so far (note_copies) */
    epoch_sums acc;        /* the epoch being trained: its segments' sums so far */
    trainer_stats stats;
    char last_failure[600];
    /* the validations of the last segment (tr_report's tail), for on_validate */
    tr_val_result *vals;
    int nvals;
    char group[64];      /* the running group's id */
    int told_world;      /* the group size on_world_size was last told (0: none) */
    int logged_world;    /* the group size last logged (ct__driver_note_group_size; 0: none) */
    bool warned_world;   /* ... and it was below num_replicas (logged as a warning) */
    bool shrink_live;    /* ... it shrank in a live recovery (shrink_why: what died) */
    char shrink_why[96]; /* why the last group ended without a failure ("node X drained"),
                            for ct__driver_note_group_size's reason when the next one is smaller */
    double lr_scale;     /* trainer_scale_lr's factor for groups from the current checkpoint */
    bool live;           /* recovery "live" applies (trainer_create decided) */
    double live_lr;      /* the next train_epoch's rates times this (a live recovery's) */
    bool live_fresh;     /* no step completed yet since the last live recovery */
    /* the group's size before its first live recovery: replacements heal from live peers
     * until it is that size again (ct__heal_replacement; 0: no live recovery since it started) */
    int heal_to;
    int heal_next; /* the next serving peer's rank, round-robin over the group */
    /* replacements in a row that did not get in (drop_newcomer); at HEAL_MAX_REFUSED the
     * driver stops healing this group (heal_to 0: a checkpoint grows it by a restart) */
    int heal_refused;
    /* a replacement copying while the survivors go on (heal overlap): its "heal" call in flight,
     * the snapshot, the serving peer's rank (it records its averaged gradients) and the step at
     * which it enters; a NULL actor: none */
    struct {
        ct_actor *a;
        ct_future *f;
        tr_snapshot snap;
        int peer;
        int64_t enter_step;
        int64_t t0, t1; /* its start; its copy's start */
    } heal_job;
    /* ct__driver_call_all after a failure waits for every call (a survivor's error, a death's
     * report), after the first death's report for LIVE_SETTLE_MS at most, not only for that death:
     * live recovery must know every replica that died (two killed at once) */
    bool wait_all;
    tr_progress *progress; /* the run log (progress.c); NULL: none asked for */
    tr_head_report report; /* what the head is told of the job (report.c) */
    const char
        *fail_reason; /* why the last group failed, for the retry counter (ct__driver_end_group) */
    bool tokens;      /* the data's targets are tokens: validation reports perplexity */
    /* restore_best: the best-scoring checkpoint of this trainer_train call, kept in the store
     * (it may be ckpt itself) with its score and step */
    bool has_best;
    ct_object_id best;
    double best_score;
    int64_t best_step;
    tr_pipeline pipe; /* config keys pipeline_stages, micro_batches, schedule */
};

/* ---- group.c: the running group ---- */

/* Calls method on every replica at once with per-rank args (args + i * stride); results[i]
 * get the replies (malloc'd). On failure returns the first error and *failed its rank, msg its
 * message. */
int ct__driver_call_all(trainer *t, const char *method, const void *args, size_t len, size_t stride,
                        void **results, int *failed, char *msg, size_t msgcap);
/* A replacement copying while the survivors go on (t->heal_job, heal.c), if any, is killed and
 * let go: the group changed under it (a death, a restart, the run's end). */
void ct__driver_abort_heal(trainer *t, const char *why);
/* Ends the group: kills every replica and waits for the head's reports of their deaths; why
 * (may be NULL) gets what failed. */
void ct__driver_end_group(trainer *t, char *why, size_t cap, int failed_rank, int failed_rc,
                          const char *msg);
/* How many replicas fit in the free resources now besides the running group's (*out). */
int ct__driver_replicas_that_fit(trainer *t, int *out);
/* Tells on_world_size of a group of n replicas (when n changed); its error, if any. */
int ct__driver_tell_world_size(trainer *t, const trainer_train_opts *o, int n);
/* Logs the size of a group that started when it differs from the last one logged. */
void ct__driver_note_group_size(trainer *t, int n);
/* What each replica asks for and the group's bounds, as fit.c takes them. */
tr_ask ct__driver_ask(const trainer *t);
/* The stats of the driver's state (a checkpoint's): steps, the loss scaler's. */
void ct__driver_local_stats(trainer *t);

/* ---- driver_stats.c: what the pipeline's loop (pipeline_train.c) shares with the replicas' ----
 */

/* A validation's sums as the val_* fields of st. */
void ct__driver_set_val_stats(const trainer *t, trainer_stats *st, double loss, int64_t correct,
                              int64_t total, const tr_metrics *m);
/* The last segment's validations (t->vals) into the stats, one by one, each handed to
 * on_validate; its stop as an error. */
int ct__driver_deliver_validations(trainer *t, const trainer_train_opts *o);
/* The epoch's statistics so far (t->acc) into st. */
void ct__driver_epoch_stats(const trainer *t, trainer_stats *st);
/* The run log and the head's report of a segment that ended well (epoch_done: its epoch). */
void ct__driver_segment_records(trainer *t, bool epoch_done);
/* The stats a checkpoint is indexed with into st; its score by attr (NaN: none). */
double ct__driver_ckpt_stats(const trainer *t, const char *attr, bool epoch_end, trainer_stats *st);

/* ---- live.c, heal.c: recovery "live" ---- */

/* After a segment failed by a death: the survivors go on without the dead (live.c). 0, or a
 * negative code when the driver must restart the group instead. */
int ct__live_recover(trainer *t, const trainer_train_opts *o, int64_t steps, int64_t *done_steps,
                     char *why, size_t cap);
/* At a step boundary after a live recovery shrank the group: a replacement heals from a live
 * peer and the group grows back by one (heal.c), at once or, while it copies and the group
 * trains on, at the step t->heal_job says. 0 (also when none got in), or a negative code with
 * why set and the group ended. */
int ct__heal_replacement(trainer *t, const trainer_train_opts *o, char *why, size_t cap);

#endif
