/* trainer/train/pipeline_train.c — trainer_train for a pipeline (config key pipeline_stages or
 * micro_batches above 1; pipeline_keys.c decided it can run): num_replicas pipelines of S stage
 * actors (trainer/pipeline/stage.h in trainer mode), each stage running the trainer's creators
 * and cutting its part of the GPT, the first and the last reading the replicas' batches (the
 * pipeline p as rank p of num_replicas). Per epoch one "epoch" call on every stage; the epoch's
 * mean training loss goes to the stats and on_epoch; at the end the stages' parameters and
 * optimizer state are gathered into the driver's model and optimizer (trainer_get_model,
 * trainer_save). A first slice: the options it does not run yet are CT_ENOSYS naming them; a
 * failure (a dead stage) ends trainer_train with its error, without a retry. */
#include <stdio.h>
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
           : o->max_retries            ? "opts.max_retries"
                                       : NULL;
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
                            .timeout_ms = spec->comm_timeout_ms,
                            .spec = spec};
    static int jobs; /* a group id per job of this process */
    char group[64];
    snprintf(group, sizeof group, "trainer-%d-%d", (int)getpid(), ++jobs);
    ct__pipe_job *j = NULL;
    if ((rc = ct__pipe_job_start(&jo, group, &j)) < 0)
        return rc;
    nbatches = ct__pipe_job_epoch_batches(j); /* its loader's: the replicas' */
    CT_LOG(CT_LOG_INFO, "trainer",
           "pipeline: %d x %d stage actors, %d micro-batches, %s, %lld batches an epoch", pipelines,
           pp->stages, pp->micro_batches, ct_pipe_schedule_name((ct_pipe_schedule)pp->schedule),
           (long long)nbatches);
    for (int64_t e = local->epoch; rc == 0 && e < epochs; e++) {
        double sum = 0;
        int64_t n = 0;
        if ((rc = ct__pipe_job_epoch(j, e, nbatches, &sum, &n)) < 0)
            break;
        local->epoch = e + 1;
        local->step += nbatches;
        stats->epoch = e + 1;
        stats->steps = local->step;
        stats->train_loss = n > 0 ? sum / (double)n : 0.0;
        if (o->on_epoch && o->on_epoch(t, stats, o->user) < 0)
            break;
    }
    /* the driver's model and optimizer: where the stages are */
    if (rc == 0)
        rc = ct__pipe_job_gather(j, local->models[0], local->optims[0]);
    char why[600];
    snprintf(why, sizeof why, "%s", ct_last_error());
    ct__pipe_job_end(&j);
    if (rc < 0) /* a dead stage, a stage's error: ending the job kept its message */
        ct__error(rc, "%s", why);
    if (o->stats)
        *o->stats = *stats;
    return rc;
}
