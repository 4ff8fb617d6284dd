/* trainer/train/pipeline_keys.c — the trainer's pipeline config keys (issue 40 item 7), read and
 * checked by name in trainer_create:
 *   pipeline_stages  (1)      stage actors per replica, 1 .. 1024
 *   micro_batches    (1)      micro-batches per batch, 1 .. batch_size
 *   schedule         ("1f1b") "gpipe" or "1f1b" (ct_pipe_schedule_parse)
 * A bad value is CT_EINVAL naming the key. A pipeline (stages or micro-batches above 1) is
 * CT_ENOSYS for now: trainer_train does not start stage actors yet; trainer/pipeline/stage.h's
 * job does (tests/trainer/test_pipeline_nodes.c), and ct_pipeline_forward_backward within one
 * process. Not here: running pipelines. */
#include "common/common.h"
#include "ct/pipeline.h"
#include "internal.h"

int ct__trainer_pipeline_keys(trainer_ctx *ctx, int64_t batch_size)
{
    int64_t stages = trainer_config_int(ctx, "pipeline_stages", 1);
    int64_t micro = trainer_config_int(ctx, "micro_batches", 1);
    const char *schedule = trainer_config_str(ctx, "schedule", "1f1b");
    ct_pipe_schedule kind;
    if (stages < 1 || stages > 1024)
        return ct__error(
            CT_EINVAL, "trainer_create: config key \"pipeline_stages\" = %lld: not from 1 to 1024",
            (long long)stages);
    if (micro < 1 || micro > batch_size)
        return ct__error(CT_EINVAL,
                         "trainer_create: config key \"micro_batches\" = %lld: not from 1 to the "
                         "batch size, %lld",
                         (long long)micro, (long long)batch_size);
    if (ct_pipe_schedule_parse(schedule, &kind) < 0)
        return ct__error(CT_EINVAL,
                         "trainer_create: config key \"schedule\" = \"%s\": not one of "
                         "\"gpipe\", \"1f1b\"",
                         schedule);
    if (stages > 1 || micro > 1)
        return ct__error(CT_ENOSYS,
                         "trainer_create: config keys \"pipeline_stages\" = %lld, "
                         "\"micro_batches\" = %lld: trainer_train does not run pipelines yet "
                         "(stage actors: trainer/pipeline/stage.h; within one process: "
                         "ct_pipeline_forward_backward, ct/pipeline.h)",
                         (long long)stages, (long long)micro);
    return 0;
}
