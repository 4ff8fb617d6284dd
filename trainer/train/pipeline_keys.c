/* trainer/train/pipeline_keys.c — the trainer's pipeline config keys (issue 40 item 7), read and
 * checked by name in trainer_create:
 *   pipeline_stages  (1)      stage actors per replica, 1 .. the GPT's n_layer
 *   micro_batches    (1)      micro-batches per batch, 1 .. batch_size
 *   schedule         ("1f1b") "gpipe" or "1f1b" (ct_pipe_schedule_parse)
 * A bad value is CT_EINVAL naming the key. A pipeline (stages or micro-batches above 1) runs
 * what pipeline_train.c can: one GPT (the model splits as trainer/pipeline/gpt_stage.c cuts
 * it), the built-in train and validate steps, on the CPU, without dropout, a plateau scheduler,
 * accumulation, ZeRO or precisions below f32 (sharded data: one pipeline only, pipeline_train.c);
 * anything else is CT_ENOSYS naming it. Not here: running pipelines. */
#include "common/common.h"
#include "ct/pipeline.h"
#include "internal.h"

/* what a pipeline cannot run yet, or NULL */
static const char *unsupported(const tr_spec *spec, const tr_state *local, const trainer_ctx *ctx)
{
    ct_gpt_config cfg;
    if (local->nmodels != 1 || ct_nn_gpt_config(local->models[0], &cfg) < 0)
        return "a model other than one GPT (ct_nn_gpt_new's, as the built-in \"gpt\")";
    if (cfg.dropout > 0)
        return "dropout (the stages do not reseed it per batch as replicas do)";
    if (spec->train_step[0])
        return "a custom train step";
    if (spec->validate_step[0]) /* the stages validate as the built-in step does */
        return "a custom validate step";
    if (local->sched && local->plateau_metric[0])
        return "a plateau scheduler";
    if (local->sched && spec->sched_every == TR_SCHED_MANUAL)
        return "scheduler_step \"manual\"";
    if (spec->accumulate > 1)
        return "accumulate";
    if (spec->zero)
        return "ZeRO";
    if (spec->device != CT_CPU)
        return "a device other than the CPU";
    if (ctx->precision != CT_F32)
        return "a precision other than f32";
    return NULL;
}

int ct__trainer_pipeline_keys(trainer_ctx *ctx, const tr_spec *spec, const tr_state *local,
                              tr_pipeline *out)
{
    int64_t stages = trainer_config_int(ctx, "pipeline_stages", 1);
    int64_t micro = trainer_config_int(ctx, "micro_batches", 1);
    const char *schedule = trainer_config_str(ctx, "schedule", "1f1b");
    ct_pipe_schedule kind;
    *out = (tr_pipeline){.stages = 1, .micro_batches = 1, .schedule = CT_PIPE_1F1B};
    if (stages < 1 || stages > 1024)
        return ct__error(
            CT_EINVAL, "trainer_create: config key \"pipeline_stages\" = %lld: not from 1 to 1024",
            (long long)stages);
    if (micro < 1 || micro > spec->batch)
        return ct__error(CT_EINVAL,
                         "trainer_create: config key \"micro_batches\" = %lld: not from 1 to the "
                         "batch size, %lld",
                         (long long)micro, (long long)spec->batch);
    if (ct_pipe_schedule_parse(schedule, &kind) < 0)
        return ct__error(CT_EINVAL,
                         "trainer_create: config key \"schedule\" = \"%s\": not one of "
                         "\"gpipe\", \"1f1b\"",
                         schedule);
    if (stages == 1 && micro == 1)
        return 0;
    const char *no = unsupported(spec, local, ctx);
    if (no)
        return ct__error(CT_ENOSYS,
                         "trainer_create: config keys \"pipeline_stages\" = %lld, "
                         "\"micro_batches\" = %lld: a pipeline with %s is not run yet",
                         (long long)stages, (long long)micro, no);
    ct_gpt_config cfg;
    ct_nn_gpt_config(local->models[0], &cfg);
    if (stages > cfg.n_layer)
        return ct__error(CT_EINVAL,
                         "trainer_create: config key \"pipeline_stages\" = %lld: more stages than "
                         "the GPT's %d layers",
                         (long long)stages, cfg.n_layer);
    *out = (tr_pipeline){.stages = (int)stages, .micro_batches = (int)micro, .schedule = kind};
    return 0;
}
