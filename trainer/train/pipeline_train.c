/* trainer/train/pipeline_train.c — trainer_train for a pipeline (config key pipeline_stages or
 * micro_batches above 1; pipeline_keys.c decided it can run): num_replicas pipelines of S stage
 * actors (trainer/pipeline/stage.h in trainer mode), each stage running the trainer's creators
 * and cutting its part of the GPT, the first and the last reading the replicas' batches (the
 * pipeline p as rank p of num_replicas). Per epoch one "epoch" call on every stage; the epoch's
 * mean training loss goes to the stats and on_epoch; after every epoch the stages' parameters
 * and optimizer state are gathered into the driver's model and optimizer (trainer_get_model,
 * trainer_save) and put in the store as the trainer's checkpoint. A
 * failure (a dead stage is a dead pipeline) ends the whole job; up to max_retries times a new
 * one starts from the last checkpoint (its stages load their parts of it), at that epoch's
 * start. A first slice: the options it does not run yet are CT_ENOSYS naming them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "internal.h"
#include "trainer/pipeline/stage.h"

static const char *unsupported(const trainer_train_opts *o)
{
    return o->resume                   ? "opts.resume"
           : o->checkpoint_dir         ? "opts.checkpoint_dir"
           : o->checkpoint_every_steps ? "opts.checkpoint_every_steps"
           : o->log_dir                ? "opts.log_dir"
           : o->validate_every_epoch   ? "opts.validate_every_epoch"
           : o->validate_every_steps   ? "opts.validate_every_steps"
           : o->on_validate            ? "opts.on_validate"
           : o->restore_best           ? "opts.restore_best"
                                       : NULL;
}

/* the driver's state as a trainer checkpoint in the store (*id; prev, when not NULL, freed) */
static int put_checkpoint(const tr_spec *spec, tr_state *local, int pipelines,
                          const ct_object_id *prev, ct_object_id *id)
{
    tr_ckpt_plan *plan = NULL;
    local->world = pipelines;
    local->batch = 0;
    local->offset = 0;
    int rc = ct__ckpt_plan(local, spec, pipelines, NULL, &plan);
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
    free(buf);
    ct__ckpt_plan_free(&plan);
    return rc;
}

/* the driver's scheduler where the stages' are after an epoch of nbatches (for the
 * checkpoint; the learning rates then come from the stages' optimizers) */
static int step_sched(const tr_spec *spec, tr_state *local, int64_t nbatches)
{
    int64_t k = !local->sched                         ? 0
                : spec->sched_every == TR_SCHED_EPOCH ? 1
                : spec->sched_every == TR_SCHED_BATCH ? nbatches
                                                      : 0;
    int rc = 0;
    for (int64_t i = 0; i < k && rc == 0; i++)
        rc = ct_sched_step(local->sched);
    return rc;
}

/* the driver's state back to the checkpoint's (id), or left as it is without one (nothing was
 * gathered into it yet) */
static int rewind_local(const tr_spec *spec, tr_state *local, const ct_object_id *id)
{
    if (!id)
        return 0;
    ct_object_view v = {0};
    int rc = ct_get(id, 30000, &v);
    if (rc == 0)
        rc = ct__ckpt_load(local, spec, v.data, v.size);
    ct_object_release(&v);
    return rc;
}

int ct__trainer_pipeline_train(const tr_spec *spec, const tr_pipeline *pp, int pipelines,
                               tr_state *local, trainer_stats *stats, const trainer_train_opts *o,
                               trainer *t)
{
    const char *no = unsupported(o);
    if (!no && local->data.sharded && pipelines > 1)
        no = "num_replicas > 1 (pipelines) over sharded data";
    if (no)
        return ct__error(CT_ENOSYS,
                         "trainer_train: %s with a pipeline (config key pipeline_stages = "
                         "%d, micro_batches = %d) is not run yet",
                         no, pp->stages, pp->micro_batches);
    int64_t epochs = o->epochs > 0 ? o->epochs : spec->epochs, nbatches = 0;
    ct_gpt_config cfg;
    int rc = ct_nn_gpt_config(local->models[0], &cfg);
    if (rc < 0)
        return rc;
    ct__pipe_job_opts jo = {.gpt = cfg,
                            .stages = pp->stages,
                            .pipelines = pipelines,
                            .micro_batches = pp->micro_batches,
                            .schedule = (ct_pipe_schedule)pp->schedule,
                            .batch = (int)spec->batch,
                            .seed = spec->seed,
                            .threads = spec->threads,
                            .cpus_per_stage = spec->threads, /* cpus_per_replica, whole CPUs */
                            .timeout_ms = spec->comm_timeout_ms,
                            .spec = spec};
    ct_object_id ckpt;
    bool have_ckpt = false;
    int retries = 0;
    /* trained before (an earlier trainer_train, trainer_restore): the stages start from the
     * driver's state, not from the creators' */
    if (local->step > 0 || local->epoch > 0) {
        if ((rc = put_checkpoint(spec, local, pipelines, NULL, &ckpt)) < 0)
            return rc;
        have_ckpt = true;
    }
    ct__pipe_job *j = NULL;
    while (local->epoch < epochs) {
        int64_t e = local->epoch;
        double sum = 0;
        int64_t n = 0;
        if (!j) {            /* a job: from the creators (the seed), or from the last checkpoint */
            static int jobs; /* a group id per job of this process */
            char group[64];
            snprintf(group, sizeof group, "trainer-%d-%d", (int)getpid(), ++jobs);
            jo.start_epoch = e;
            jo.ckpt = have_ckpt ? &ckpt : NULL;
            if ((rc = ct__pipe_job_start(&jo, group, &j)) == 0) {
                nbatches = ct__pipe_job_epoch_batches(j); /* its loader's: the replicas' */
                CT_LOG(CT_LOG_INFO, "trainer",
                       "pipeline: %d x %d stage actors, %d micro-batches, %s, %lld batches an "
                       "epoch, from epoch %lld",
                       pipelines, pp->stages, pp->micro_batches,
                       ct_pipe_schedule_name((ct_pipe_schedule)pp->schedule), (long long)nbatches,
                       (long long)e);
            }
        }
        /* an epoch, then the driver's model and optimizer from the stages: the checkpoint */
        if (rc == 0 && (rc = ct__pipe_job_epoch(j, e, nbatches, &sum, &n)) == 0 &&
            (rc = step_sched(spec, local, nbatches)) == 0 &&
            (rc = ct__pipe_job_gather(j, local->models[0], local->optims[0])) == 0) {
            local->epoch = e + 1;
            local->step += nbatches;
            if ((rc = put_checkpoint(spec, local, pipelines, have_ckpt ? &ckpt : NULL, &ckpt)) == 0)
                have_ckpt = true;
        }
        if (rc == 0) {
            stats->epoch = e + 1;
            stats->steps = local->step;
            stats->train_loss = n > 0 ? sum / (double)n : 0.0;
            if (o->on_epoch && o->on_epoch(t, stats, o->user) < 0)
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
        stats->retries_used++;
        CT_LOG(CT_LOG_WARN, "trainer", "pipeline: epoch %lld failed (%s); retry %d of %d from %s",
               (long long)e + 1, why, retries, o->max_retries,
               have_ckpt ? "the last checkpoint" : "the start");
        if ((rc = rewind_local(spec, local, have_ckpt ? &ckpt : NULL)) < 0)
            break;
    }
    ct__pipe_job_end(&j);
    if (have_ckpt)
        ct_free(&ckpt);
    if (o->stats)
        *o->stats = *stats;
    return rc;
}
