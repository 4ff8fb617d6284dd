/* trainer/train/pipeline_train.c — trainer_train for a pipeline (config key pipeline_stages or
 * micro_batches above 1; pipeline_keys.c decided it can run): num_replicas pipelines of S stage
 * actors (trainer/pipeline/stage.h in trainer mode), each stage running the trainer's creators
 * and cutting its part of the GPT, the first and the last reading the replicas' batches (the
 * pipeline p as rank p of num_replicas). An epoch runs as segments, as the replicas' does
 * (trainer.c): one "epoch" call on every stage per segment, a segment ending at the epoch's end,
 * every checkpoint_every_steps and every validate_every_steps optimizer steps. After a segment
 * the stages' parameters and optimizer state are gathered into the driver's model and optimizer
 * (trainer_get_model, trainer_save) and put in the store as the trainer's checkpoint (its
 * position: the epoch and the batch within it), also into checkpoint_dir; a validation that is
 * due runs on the stages ("validate": forward passes over each pipeline's slice of the
 * validation set) and goes to the stats, on_validate and the run log as the replicas' do. A
 * failure (a dead stage is a dead pipeline) ends the whole job; up to max_retries times a new
 * one starts from the last checkpoint (its stages load their parts of it), at that checkpoint's
 * step. trainer.c did the start (resume: the driver's state is the file's, and the stages start
 * from it) and does the end. Still refused (CT_ENOSYS naming it): restore_best. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "driver.h"
#include "trainer/pipeline/stage.h"

/* the driver's state as a trainer checkpoint at its position (local's epoch and batch) in the
 * store (*id; prev, when not NULL, freed), and into dir (may be NULL) with score and cst */
static int put_checkpoint(trainer *t, const ct_object_id *prev, ct_object_id *id, tr_ckptdir *dir,
                          double score, const trainer_stats *cst)
{
    tr_state *local = &t->local;
    tr_ckpt_plan *plan = NULL;
    local->world = t->num_replicas;
    local->offset = 0;
    int rc = ct__ckpt_plan(local, &t->spec, t->num_replicas, NULL, &plan);
    size_t size = rc == 0 ? ct__ckpt_size(plan) : 0;
    void *buf = rc == 0 ? malloc(size) : NULL;
    if (rc == 0 && !buf)
        rc = ct__error(CT_ENOMEM, "trainer: pipeline checkpoint: out of memory");
    if (rc == 0) {
        ct__ckpt_write(plan, buf);
        int live = ct_object_store_nodes();
        ct_object_id next;
        rc = ct_put(buf, size, &(ct_put_opts){.replicas = live > 0 && live < 2 ? live : 2}, &next);
        if (rc == 0) {
            if (prev)
                ct_free(prev);
            *id = next;
        }
    }
    char name[TR_CKPT_NAME_MAX];
    if (rc == 0 && dir &&
        (rc = ct__ckptdir_add(dir, buf, size, local->epoch, local->batch, local->step, score, cst,
                              name, sizeof name)) == 0)
        CT_LOG(CT_LOG_INFO, "trainer", "pipeline: checkpoint %s written (epoch %lld batch %lld)",
               name, (long long)local->epoch, (long long)local->batch);
    free(buf);
    ct__ckpt_plan_free(&plan);
    return rc;
}

/* the driver's scheduler where the stages' are after a segment of nbatches (end: it ended the
 * epoch), for the checkpoint; the learning rates then come from the stages' optimizers */
static int step_sched(const tr_spec *spec, tr_state *local, int64_t nbatches, bool end)
{
    int64_t k = !local->sched                         ? 0
                : spec->sched_every == TR_SCHED_EPOCH ? end
                : spec->sched_every == TR_SCHED_BATCH ? nbatches
                                                      : 0;
    int rc = 0;
    for (int64_t i = 0; i < k && rc == 0; i++)
        rc = ct_sched_step(local->sched);
    return rc;
}

/* the driver's state back to the checkpoint's (id) */
static int rewind_local(const tr_spec *spec, tr_state *local, const ct_object_id *id)
{
    ct_object_view v = {0};
    int rc = ct_get(id, 30000, &v);
    if (rc == 0)
        rc = ct__ckpt_load(local, spec, v.data, v.size);
    ct_object_release(&v);
    return rc;
}

/* the job options of t's pipeline */
static int job_opts(trainer *t, ct__pipe_job_opts *jo)
{
    ct_gpt_config cfg;
    int rc = ct_nn_gpt_config(t->local.models[0], &cfg);
    if (rc < 0)
        return rc;
    *jo = (ct__pipe_job_opts){.gpt = cfg,
                              .stages = t->pipe.stages,
                              .pipelines = t->num_replicas,
                              .micro_batches = t->pipe.micro_batches,
                              .schedule = (ct_pipe_schedule)t->pipe.schedule,
                              .batch = (int)t->spec.batch,
                              .seed = t->spec.seed,
                              .threads = t->spec.threads,
                              .cpus_per_stage = t->spec.threads, /* cpus_per_replica */
                              .timeout_ms = t->spec.comm_timeout_ms,
                              .spec = &t->spec};
    return 0;
}

/* a job at the driver's position (epoch local.epoch), its stages from ckpt (NULL: the
 * creators); *nbatches the batches of an epoch */
static int start_job(trainer *t, ct__pipe_job_opts *jo, const ct_object_id *ckpt, ct__pipe_job **j,
                     int64_t *nbatches)
{
    static int jobs; /* a group id per job of this process */
    char group[64];
    snprintf(group, sizeof group, "trainer-%d-%d", (int)getpid(), ++jobs);
    jo->start_epoch = t->local.epoch;
    jo->ckpt = ckpt;
    int rc = ct__pipe_job_start(jo, group, j);
    if (rc < 0)
        return rc;
    *nbatches = ct__pipe_job_epoch_batches(*j);       /* its loader's: the replicas' */
    snprintf(t->group, sizeof t->group, "%s", group); /* the step records' */
    CT_LOG(CT_LOG_INFO, "trainer",
           "pipeline: %d x %d stage actors, %d micro-batches, %s, %lld batches an epoch, from "
           "epoch %lld batch %lld (step %lld)",
           t->num_replicas, t->pipe.stages, t->pipe.micro_batches,
           ct_pipe_schedule_name((ct_pipe_schedule)t->pipe.schedule), (long long)*nbatches,
           (long long)t->local.epoch, (long long)t->local.batch, (long long)t->local.step);
    return 0;
}

/* a validation on the job's stages after the segment that ended at the driver's position,
 * kept as the segment's one (t->vals[0]) */
static int validate_now(trainer *t, ct__pipe_job *j, int64_t epoch)
{
    tr_val_result v = {.epoch = epoch, .step = t->local.step};
    int rc = ct__pipe_job_validate(j, &v.loss_sum, &v.correct, &v.total);
    if (rc < 0)
        return rc;
    if (!t->vals && !(t->vals = malloc(sizeof *t->vals)))
        return ct__error(CT_ENOMEM, "trainer: out of memory");
    t->vals[0] = v;
    t->nvals = 1;
    return 0;
}

/* steps of the segment from the driver's position: to the epoch's end of nbatches, or to the
 * next multiple of every (> 0) of the steps, whichever comes first */
static int64_t segment_steps(const tr_state *local, int64_t nbatches, int64_t every, int64_t vevery)
{
    int64_t n = nbatches - local->batch;
    if (every > 0 && every - local->step % every < n)
        n = every - local->step % every;
    if (vevery > 0 && vevery - local->step % vevery < n)
        n = vevery - local->step % vevery;
    return n;
}

int ct__trainer_pipeline_check(const trainer *t, const trainer_train_opts *o)
{
    const char *no = NULL;
    if (o->restore_best)
        no = "opts.restore_best";
    else if (t->local.data.sharded && t->num_replicas > 1)
        no = "num_replicas > 1 (pipelines) over sharded data";
    if (no)
        return ct__error(CT_ENOSYS,
                         "trainer_train: %s with a pipeline (config key pipeline_stages = %d, "
                         "micro_batches = %d) is not run yet",
                         no, t->pipe.stages, t->pipe.micro_batches);
    return 0;
}

int ct__trainer_pipeline_train(trainer *t, const trainer_train_opts *o, tr_ckptdir *dir,
                               const char *attr)
{
    tr_state *local = &t->local;
    const tr_spec *spec = &t->spec;
    int64_t epochs = o->epochs > 0 ? o->epochs : spec->epochs, nbatches = 0;
    int64_t every = o->checkpoint_every_steps, vevery = o->validate_every_steps;
    ct__pipe_job_opts jo;
    int rc = job_opts(t, &jo);
    if (rc < 0)
        return rc;
    ct_object_id ckpt;
    int retries = 0;
    /* the driver's state now: what a failure before the first checkpoint rewinds it to; when
     * trained before (an earlier trainer_train, trainer_restore, a resume) the stages start
     * from it, else from the creators (the same weights: the driver's check-run made them) */
    bool from_ckpt = local->step > 0 || local->epoch > 0 || local->batch > 0;
    if ((rc = put_checkpoint(t, NULL, &ckpt, NULL, 0, NULL)) < 0)
        return rc;
    if (local->batch == 0) /* (a resume within an epoch counts from its checkpoint) */
        t->acc = (epoch_sums){.agree = true};
    epoch_sums at_ckpt = t->acc; /* the epoch's sums as of the last checkpoint */
    ct__pipe_job *j = NULL;
    while (local->epoch < epochs) {
        int64_t e = local->epoch, b0 = local->batch, seg = 0, n = 0, t0 = ct__now_ns();
        double sum = 0;
        bool end = false;
        if (!j && (rc = start_job(t, &jo, from_ckpt ? &ckpt : NULL, &j, &nbatches)) == 0) {
            t->stats.group_start_step = local->step;
            t->stats.group_start_ns = ct__now_ns();
            t->stats.replicas = t->num_replicas;
        }
        if (rc == 0 && b0 == 0)
            t->acc = (epoch_sums){.agree = true};
        if (rc == 0) {
            seg = segment_steps(local, nbatches, every, vevery);
            end = b0 + seg >= nbatches;
            ct__progress_segment_start(t->progress, t->group, t->num_replicas, e, b0);
        }
        /* a segment, then the driver's model and optimizer from the stages: the checkpoint */
        ct__pipe_epoch_args ea = {.epoch = e,
                                  .start_batch = b0,
                                  .nbatches = seg,
                                  .step = local->step,
                                  .end = end,
                                  .report_ms = ct__progress_report_ms(t->progress)};
        if (rc == 0 && (rc = ct__pipe_job_epoch(j, &ea, &sum, &n)) == 0 &&
            (rc = step_sched(spec, local, seg, end)) == 0 &&
            (rc = ct__pipe_job_gather(j, local->models[0], local->optims[0])) == 0) {
            local->step += seg;
            local->batch = end ? 0 : b0 + seg;
            local->epoch = end ? e + 1 : e;
            t->acc.loss += sum;
            t->acc.samples += n;
            t->acc.seconds += (double)(ct__now_ns() - t0) / 1e9;
            t->nvals = 0;
            bool val =
                (vevery > 0 && local->step % vevery == 0) || (end && o->validate_every_epoch);
            if (val)
                rc = validate_now(t, j, e);
        }
        trainer_stats cst;
        if (rc == 0) {
            ct__driver_local_stats(t);
            if (end) {
                ct__driver_epoch_stats(t, &t->stats);
                t->stats.epoch = e + 1;
            }
            int vrc = ct__driver_deliver_validations(t, o); /* the stats and on_validate */
            double score = ct__driver_ckpt_stats(t, attr, end, &cst);
            if ((rc = put_checkpoint(t, &ckpt, &ckpt, dir, score, &cst)) < 0)
                break;
            from_ckpt = true;
            at_ckpt = t->acc;
            ct__driver_segment_records(t, end);
            if ((rc = vrc) < 0)
                break;
            if (end && o->on_epoch && o->on_epoch(t, &t->stats, o->user) < 0)
                break;
            continue;
        }
        /* a failure (a dead stage is a dead pipeline): the whole job goes; a retry starts from
         * the last checkpoint, which the driver's state still is (or is made again from) */
        char why[600];
        snprintf(why, sizeof why, "%s", ct_last_error());
        ct__pipe_job_end(&j);
        if (retries == o->max_retries) {
            rc = ct__error(rc, "%s", why);
            break;
        }
        retries++;
        t->stats.retries_used++;
        t->stats.failure_seen_ns = ct__now_ns();
        CT_LOG(CT_LOG_WARN, "trainer",
               "pipeline: epoch %lld batch %lld failed (%s); retry %d of %d from %s",
               (long long)e + 1, (long long)b0, why, retries, o->max_retries,
               from_ckpt ? "the last checkpoint" : "the start");
        if ((rc = rewind_local(spec, local, &ckpt)) < 0)
            break;
        t->acc = at_ckpt;
    }
    ct__pipe_job_end(&j);
    ct_free(&ckpt);
    return rc;
}

int ct__trainer_pipeline_validate(trainer *t, double *loss_sum, int64_t *correct, int64_t *total)
{
    ct__pipe_job_opts jo;
    ct__pipe_job *j = NULL;
    ct_object_id ckpt;
    bool have_ckpt = false;
    int64_t nbatches = 0;
    int rc = job_opts(t, &jo);
    /* the driver's state (trained, restored) to the stages; the creators' without one */
    tr_state *local = &t->local;
    if (rc == 0 && (local->step > 0 || local->epoch > 0 || local->batch > 0) &&
        (rc = put_checkpoint(t, NULL, &ckpt, NULL, 0, NULL)) == 0)
        have_ckpt = true;
    if (rc == 0)
        rc = start_job(t, &jo, have_ckpt ? &ckpt : NULL, &j, &nbatches);
    if (rc == 0)
        rc = ct__pipe_job_validate(j, loss_sum, correct, total);
    ct__pipe_job_end(&j);
    if (have_ckpt)
        ct_free(&ckpt);
    return rc;
}
