/* ct/pipeline.h — pipeline parallelism within a replica: a model split into S stages (modules,
 * each on its own device), a batch split into M micro-batches, and a schedule that orders the
 * stages' forward and backward passes over the micro-batches (GPipe's, or 1F1B's).
 *
 * A schedule is data: an ordered list of actions (stage, micro-batch, forward | backward), made
 * by one function per schedule (ct_pipe_schedule_actions). The order is a valid order for one
 * thread driving every stage (this file's executor), and the actions of one stage, in list
 * order, are that stage's program when the stages run apart (threads, or actors on nodes).
 * Each action carries its tick: the step at which it runs when every action takes one unit and
 * each stage runs one action at a time, so a schedule's bubble can be read from it.
 *
 * Example (two stages on checkdev:0 and checkdev:1, loss a mean over its micro-batch):
 *     ct_module *st[2] = {seq1, seq2};
 *     ct_device dev[2] = {CT_CHECKDEV, ct_device_make(CT_CHECKDEV, 1)};
 *     ct_pipeline *p = ct_pipeline_new(st, dev, 2);
 *     ct_module_zero_grad(seq1); ct_module_zero_grad(seq2);
 *     float loss;
 *     ct_pipeline_forward_backward(p, x, y, my_loss, NULL, 4, CT_PIPE_1F1B, &loss);
 *     ct_optim_step(opt);                       // gradients = the whole batch's
 *     ct_pipeline_destroy(&p);
 *
 * Gradients: micro-batch m's loss is back-propagated scaled by n_m / N (1/M for equal
 * micro-batches), so for a loss that is a mean over its batch the accumulated gradients are the
 * whole batch's. Batch norm sees one micro-batch at a time (PyTorch's rule): its statistics are
 * the micro-batch's, and its running statistics are updated once per micro-batch. */
#ifndef CT_PIPELINE_H
#define CT_PIPELINE_H

#include "ct/nn.h"
#include "ct/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schedules. GPipe: every forward, then every backward (M micro-batches in flight per
 * stage). 1F1B (PipeDream-flush, torch's Schedule1F1B): stage s runs S - 1 - s forwards, then
 * alternates one forward and one backward, then drains its backwards (at most S - s in flight). */
typedef enum { CT_PIPE_GPIPE = 0, CT_PIPE_1F1B = 1, CT_PIPE_NSCHEDULES } ct_pipe_schedule;
typedef enum { CT_PIPE_FORWARD = 0, CT_PIPE_BACKWARD = 1 } ct_pipe_op;

typedef struct ct_pipe_action {
    int stage, micro_batch;
    ct_pipe_op op;
    int tick; /* unit-time step at which it runs (see above) */
} ct_pipe_action;

/* "gpipe" or "1f1b" -> *out; CT_EINVAL naming the string and the valid names otherwise. */
int ct_pipe_schedule_parse(const char *s, ct_pipe_schedule *out);
const char *ct_pipe_schedule_name(ct_pipe_schedule s);
/* The 2*S*M actions of schedule s for `stages` stages and `micro_batches` micro-batches, in
 * the order of their ticks (within a tick, by stage). *out: caller frees (free()). Returns 0,
 * CT_EINVAL (bad counts or schedule), CT_ENOMEM. */
int ct_pipe_schedule_actions(ct_pipe_schedule s, int stages, int micro_batches,
                             ct_pipe_action **out, int *n);

/* Loss of one micro-batch: a scalar tensor (the mean over its rows, for the scaling above);
 * output is the last stage's output, target the micro-batch's rows of the target, on the last
 * stage's device. NULL on error. */
typedef ct_tensor *(*ct_pipe_loss_fn)(ct_tensor *output, ct_tensor *target, void *user);

typedef struct ct_pipeline ct_pipeline;
/* A pipeline over stages[0..n) on devices[0..n): each stage is placed on its device
 * (ct_module_to). The modules are borrowed until ct_pipeline_destroy. NULL on error. */
ct_pipeline *ct_pipeline_new(ct_module *const *stages, const ct_device *devices, int n);
/* One forward and backward of (input, target) split along dim 0 into micro_batches parts
 * (sizes differ by at most one, the first ones larger, as torch.tensor_split), run in the
 * schedule's order from this thread (on devices with streams, the stages' work overlaps).
 * Gradients ACCUMULATE into the stages' parameters (zero them before). input on any device
 * (copied to stage 0's), target on any device. *loss (may be NULL): the batch's loss, the
 * micro-batches' losses weighted by n_m / N. Returns 0 or a negative CT_E* code; on error the
 * gradients are partial. Not thread-safe for one pipeline. */
int ct_pipeline_forward_backward(ct_pipeline *p, ct_tensor *input, ct_tensor *target,
                                 ct_pipe_loss_fn loss_fn, void *user, int micro_batches,
                                 ct_pipe_schedule schedule, float *loss);
/* threads_per_stage > 0: ct_pipeline_forward_backward runs each stage's program (its actions
 * in the schedule's order) on a thread of its own with that many engine threads
 * (ct_nn_set_threads); for stages on the CPU, where the host does the work. The threads start
 * here and stay (their per-thread engine state warm) until the next call or
 * ct_pipeline_destroy. 0 (the default): the calling thread drives every stage. CT_EINVAL for a
 * negative count, CT_ENOMEM when a thread cannot start. */
int ct_pipeline_use_threads(ct_pipeline *p, int threads_per_stage);
void ct_pipeline_destroy(ct_pipeline **p);

#ifdef __cplusplus
}
#endif

#endif
