/* trainer/train/step.c — custom training and validation steps: the step context and its
 * helpers (backward with the gradient bucketer, per model when there are several, optimizer
 * steps, gradient-norm clipping, named metrics), the built-in steps (the replica runs them through
 * the same interface as a user's), the one-backward-per-step check, and the driver's side: the
 * metrics averaged over replicas (the step names are checked with the creators' in trainer.c). Not
 * here: the epoch loop (replica.c), the registry (registry.c), the driver (trainer.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/metrics.h"
#include "internal.h"

/* ---- the context ---- */

trainer_ctx *trainer_step_ctx(trainer_step *s)
{
    return s ? s->ctx : NULL;
}
ct_module *trainer_step_model(trainer_step *s)
{
    return s ? s->st->models[0] : NULL;
}
ct_optim *trainer_step_optim(trainer_step *s)
{
    return s ? s->st->optims[0] : NULL;
}
trainer_loss_fn trainer_step_loss(trainer_step *s)
{
    return s ? s->st->losses[0] : NULL;
}
int trainer_step_num_models(const trainer_step *s)
{
    return s ? s->st->nmodels : 0;
}
ct_module *trainer_step_model_at(trainer_step *s, int i)
{
    return s && i >= 0 && i < s->st->nmodels ? s->st->models[i] : NULL;
}
ct_optim *trainer_step_optim_at(trainer_step *s, int i)
{
    return s && i >= 0 && i < s->st->nmodels ? s->st->optims[i] : NULL;
}
trainer_loss_fn trainer_step_loss_at(trainer_step *s, int i)
{
    return s && i >= 0 && i < s->st->nmodels ? s->st->losses[i] : NULL;
}
ct_sched *trainer_step_scheduler(trainer_step *s)
{
    return s ? s->st->sched : NULL;
}
ct_grad_scaler *trainer_step_scaler(trainer_step *s)
{
    return s ? s->st->scaler : NULL;
}
int64_t trainer_step_epoch(const trainer_step *s)
{
    return s ? s->epoch : 0;
}
int64_t trainer_step_index(const trainer_step *s)
{
    return s ? s->index : 0;
}
int64_t trainer_step_count(const trainer_step *s)
{
    return s ? s->st->step : 0;
}
bool trainer_step_training(const trainer_step *s)
{
    return s && s->training;
}
bool trainer_step_sync(const trainer_step *s)
{
    return s && s->training && s->accum_pos + 1 >= s->accum_len;
}

/* ---- the helpers ---- */

/* Backward of loss with model i's gradients reduced (the other models' bucketers ignore the
 * gradients this backward leaves in their parameters). fn: the public name, for messages. */
static int backward_model(trainer_step *s, int i, ct_tensor *loss, const char *fn)
{
    if (!s || !loss)
        return ct__error(CT_EINVAL, "%s: %s is NULL", fn, !s ? "s" : "loss");
    if (!s->training)
        return ct__error(CT_EINVAL, "%s: called from validate step \"%s\"", fn, s->name);
    int n = s->st->nmodels;
    if (i < 0 || i >= n)
        return ct__error(CT_EINVAL, "%s: model %d of %d in train step \"%s\"", fn, i, n, s->name);
    s->backwards++;
    if (s->model_backwards[i]++) {
        if (n == 1)
            return ct__error(CT_EINVAL,
                             "%s: called twice in one step of train step \"%s\" "
                             "(every rank must run exactly one backward per step)",
                             fn, s->name);
        return ct__error(CT_EINVAL,
                         "%s: model %d reduced twice in one step of train step \"%s\" (every "
                         "rank must reduce each model at most once per step)",
                         fn, i, s->name);
    }
    /* not the accumulation group's last batch: gradients add up locally, nothing is reduced */
    bool sync = trainer_step_sync(s);
    if (n > 1) /* what another model's backward left here must not go into this update */
        ct_module_zero_grad(s->st->models[i]);
    for (int k = 0; k < n; k++)
        ct_bucketer_set_no_sync(s->bucketers[k], k != i || !sync);
    /* accumulating a group of k batches: the backward starts from 1/k instead of 1 (what DDP
     * users do by dividing the loss by k), so the summed gradients are the group's average, as
     * one batch of k times the size gives, with no pass over them afterwards; with the loss
     * scaler (f16) from scale / k: the gradients stay scaled until trainer_step_optimizer (or
     * the clipping) unscales them, after they were averaged */
    float seed = 1.0f / (float)s->accum_len;
    if (s->st->scaler)
        seed *= ct_grad_scaler_scale(s->st->scaler);
    int rc = ct_tensor_backward_scaled(loss, seed);
    /* always: this also drains buckets a failed backward queued */
    int64_t w0 = ct__now_ns();
    int src = ct_bucketer_finish(s->bucketers[i]);
    /* device gradients: finish returned before the allreduces ran (the compute stream waits
     * for them); with several models the next model's bucketer must not talk on the
     * communicator before this one is done, and under live recovery a peer's death must fail
     * this step before its optimizer step runs on gradients that were not averaged (the
     * survivors go on from the weights before it), so the host waits here */
    if ((n > 1 || s->live) && src == 0)
        src = ct_bucketer_wait(s->bucketers[i]);
    s->wait_ns += ct__now_ns() - w0; /* a straggler waits least: its step record shows it */
    for (int k = 0; k < n; k++)
        ct_bucketer_set_no_sync(s->bucketers[k], false);
    return rc < 0 ? rc : src;
}

int trainer_step_backward(trainer_step *s, ct_tensor *loss)
{
    if (s && s->st->nmodels > 1)
        return ct__error(CT_EINVAL,
                         "trainer_step_backward: train step \"%s\" has %d models: call "
                         "trainer_step_backward_model for each model to reduce",
                         s->name, s->st->nmodels);
    return backward_model(s, 0, loss, "trainer_step_backward");
}

int trainer_step_backward_model(trainer_step *s, int i, ct_tensor *loss)
{
    return backward_model(s, i, loss, "trainer_step_backward_model");
}

int trainer_step_optimizer_at(trainer_step *s, int i)
{
    if (!s)
        return ct__error(CT_EINVAL, "trainer_step_optimizer: s is NULL");
    if (i < 0 || i >= s->st->nmodels)
        return ct__error(CT_EINVAL, "trainer_step_optimizer_at: optimizer %d of %d in step \"%s\"",
                         i, s->st->nmodels, s->name);
    if (!s->training || s->model_backwards[i] != 1 || s->optimizer_steps[i]) {
        const char *why = !s->training                 ? "not a train step"
                          : s->model_backwards[i] != 1 ? "before trainer_step_backward"
                                                       : "called twice in one step";
        if (s->st->nmodels == 1)
            return ct__error(CT_EINVAL, "trainer_step_optimizer: in %s step \"%s\": %s",
                             s->training ? "train" : "validate", s->name, why);
        return ct__error(CT_EINVAL,
                         "trainer_step_optimizer_at: optimizer %d in %s step \"%s\": %s%s", i,
                         s->training ? "train" : "validate", s->name, why,
                         s->training && s->model_backwards[i] != 1 ? "_model of its model" : "");
    }
    s->optimizer_steps[i]++;
    if (!trainer_step_sync(s))
        return 0; /* accumulating: the group's last batch steps */
    /* a serving peer of a heal: the averaged gradients, for the replacement's replay (out of
     * memory: the log is dropped, and the replacement gets the whole state instead) */
    if (s->log && ct__gradlog_opt(s->log, s->st, i, s->ctx->device) < 0) {
        ct__gradlog_reset(s->log);
        s->log = NULL;
    }
    ct_grad_scaler *sc = s->st->scaler;
    if (sc) { /* f16: unscale (unless clipping did), step only when all are finite, update */
        bool stepped = false;
        int rc = ct_grad_scaler_step(sc, s->st->optims[i], &stepped);
        if (rc == 0)
            rc = ct_grad_scaler_update(sc);
        s->unscaled = false;
        if (rc < 0)
            return rc;
        if (stepped)
            s->updates++;
        else
            s->skipped++;
        ct_module_zero_grad(s->st->models[i]);
        return 0;
    }
    int rc = ct_optim_step(s->st->optims[i]);
    /* ZeRO-1: each rank stepped its shard; everyone gets every rank's */
    if (rc == 0 && s->zero)
        rc = ct__zero_allgather(s->st->models[i], s->bucketers[i]);
    if (rc == 0) {
        s->updates++;
        ct_module_zero_grad(s->st->models[i]);
    }
    return rc;
}

int trainer_step_optimizer(trainer_step *s)
{
    return trainer_step_optimizer_at(s, 0);
}

int trainer_step_clip_grad_norm(trainer_step *s, double max_norm, double *norm)
{
    if (!s || !s->training || s->model_backwards[0] != 1)
        return ct__error(CT_EINVAL, "trainer_step_clip_grad_norm: only in a train step, after "
                                    "trainer_step_backward");
    if (!trainer_step_sync(s)) { /* accumulating: the local partial sums mean nothing yet */
        if (norm)
            *norm = 0;
        return 0;
    }
    /* f16: the averaged gradients unscaled first (trainer_step_optimizer then only checks) */
    int rc;
    if (s->st->scaler && !s->unscaled) {
        if ((rc = ct_grad_scaler_unscale(s->st->scaler, s->st->optims[0])) < 0)
            return rc;
        s->unscaled = true;
    }
    /* max_norm <= 0: the norm only (an infinite bound never scales) */
    double n = 0;
    double bound = max_norm > 0 ? max_norm : INFINITY;
    rc = s->zero ? ct__zero_clip(s->comm, s->st->optims[0], bound, &n)
                 : ct_optim_clip_grad_norm(s->st->optims[0], bound, 2.0, &n);
    if (rc == 0) { /* for the step record */
        s->grad_norm = n;
        s->has_grad_norm = true;
    }
    if (norm)
        *norm = n;
    return rc;
}

int ct__trainer_metric_add(tr_metrics *m, const char *name, double value, double weight)
{
    int i = 0;
    while (i < m->n && strcmp(m->names[i], name))
        i++;
    if (i == m->n) {
        if (m->n == TRAINER_MAX_METRICS)
            return ct__error(CT_ENOSPC, "trainer_step_metric: \"%s\": more than %d metrics", name,
                             TRAINER_MAX_METRICS);
        snprintf(m->names[m->n++], TRAINER_METRIC_NAME_MAX, "%s", name);
    }
    m->sum[i] += value * weight;
    m->weight[i] += weight;
    return 0;
}

/* A name that can be a JSON key and a TensorBoard tag as it is (progress.c writes both). */
static bool good_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= TRAINER_METRIC_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (name[i] <= ' ' || name[i] > '~' || name[i] == '"' || name[i] == '\\')
            return false;
    return true;
}

int trainer_step_metric(trainer_step *s, const char *name, double value)
{
    if (!s || !good_name(name))
        return ct__error(CT_EINVAL,
                         "trainer_step_metric: bad name \"%s\" (1..%d printable characters, no "
                         "blanks, quotes or backslashes)",
                         name ? name : "(null)", TRAINER_METRIC_NAME_MAX - 1);
    int rc = ct__trainer_metric_add(s->metrics, name, value, (double)s->batch_n);
    if (rc == 0 && s->rec_metrics)
        rc = ct__trainer_metric_add(s->rec_metrics, name, value, (double)s->batch_n);
    return rc;
}

/* ---- the built-in steps ---- */

/* Forward and loss inside an autocast region of the config's precision (bf16, f16: as
 * torch.autocast, matrix products and convolutions round their operands; each op records it for
 * its backward, which runs outside the region). f16's loss scaling is in the helpers
 * (trainer_step_backward scales, trainer_step_optimizer unscales, checks, steps or skips). */
static ct_tensor *forward_in_precision(trainer_step *s, const trainer_batch *b, ct_tensor **y)
{
    ct_dtype prec = trainer_ctx_precision(s->ctx);
    if (prec != CT_F32 && ct_autocast_push(prec) < 0)
        return NULL;
    *y = ct_module_forward(s->st->models[0], b->x);           /* (N,C) */
    ct_tensor *loss = *y ? s->st->losses[0](*y, b->y) : NULL; /* () */
    if (prec != CT_F32)
        ct_autocast_pop();
    return loss;
}

int trainer_builtin_train_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_tensor *y = NULL, *loss = forward_in_precision(s, b, &y);
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    if (rc == 0)
        rc = trainer_step_optimizer(s);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&y);
    return rc;
}

int trainer_builtin_validate_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int64_t hits = 0;
    ct_dtype prec = trainer_ctx_precision(s->ctx); /* as in training: the forward autocast */
    if (prec != CT_F32 && ct_autocast_push(prec) < 0)
        return CT_EINVAL;
    ct_tensor *y = ct_module_forward(s->st->models[0], b->x);
    if (prec != CT_F32)
        ct_autocast_pop();
    ct_tensor *plain = y ? ct_nn_to_plain(y) : NULL; /* (N,C) in plain layout */
    ct_tensor *loss = plain ? s->st->losses[0](plain, b->y) : NULL;
    /* top-1 only for i64 labels: f32 targets (regression, multi-label) count the loss only */
    bool labels = ct_tensor_dtype(b->y) == CT_I64;
    /* on a device the top-1 count reads host copies */
    bool dev = plain && ct_tensor_device(plain) != CT_CPU;
    ct_tensor *hp = dev && labels ? ct_tensor_to(plain, CT_CPU) : ct_tensor_retain(plain);
    ct_tensor *hy = dev && labels ? ct_tensor_to(b->y, CT_CPU) : ct_tensor_retain(b->y);
    int rc = !loss || !hp || !hy ? CT_EINVAL
             : labels ? ct_metrics_topk_correct(ct_tensor_f32(hp), ct_tensor_data(hy), b->n,
                                                ct_tensor_dim(plain, 1), 1, &hits)
                      : 0;
    ct_tensor_release(&hp);
    ct_tensor_release(&hy);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->correct = hits;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&plain);
    ct_tensor_release(&y);
    return rc;
}

trainer_step_fn ct__trainer_step_fn(const tr_spec *spec, bool training)
{
    const char *name = training ? spec->train_step : spec->validate_step;
    if (!name[0])
        return training ? trainer_builtin_train_step : trainer_builtin_validate_step;
    return (trainer_step_fn)ct__trainer_lookup(training ? TR_TRAIN_STEP : TR_VAL_STEP, name);
}

int ct__trainer_step_run(trainer_step *s, trainer_step_fn fn, const trainer_batch *b,
                         trainer_step_out *out)
{
    memset(out, 0, sizeof *out);
    s->backwards = 0;
    memset(s->model_backwards, 0, sizeof s->model_backwards);
    memset(s->optimizer_steps, 0, sizeof s->optimizer_steps);
    s->updates = 0;
    s->skipped = 0;
    s->unscaled = false;
    s->batch_n = b->n;
    s->has_grad_norm = false;
    s->wait_ns = 0;
    if (!fn)
        return ct__error(CT_ENOENT, "trainer replica: %s step \"%s\" is not registered here",
                         s->training ? "train" : "validate", s->name);
    int rc = fn(s, b, out);
    /* a step that clipped (unscaled) but took no optimizer step: the scaler's step ends here,
     * so that the next one starts scaled again (its inf/NaN backs the scale off as a skip) */
    if (s->unscaled && s->st->scaler) {
        int urc = ct_grad_scaler_update(s->st->scaler);
        s->unscaled = false;
        if (rc == 0)
            rc = urc;
    }
    int twice = -1; /* a model reduced more than once (its call failed; the step went on) */
    for (int i = 0; i < s->st->nmodels && twice < 0; i++)
        if (s->model_backwards[i] > 1)
            twice = i;
    if (s->training && s->backwards == 0) {
        ct_autograd_clear_tape(); /* a forward without backward leaves its tape */
        if (rc == 0 && s->st->nmodels == 1)
            rc = ct__error(CT_EINVAL,
                           "trainer: train step \"%s\" returned without calling "
                           "trainer_step_backward (every rank must run exactly one backward "
                           "per step, also to skip an update)",
                           s->name);
        else if (rc == 0)
            rc = ct__error(CT_EINVAL,
                           "trainer: train step \"%s\" returned without calling "
                           "trainer_step_backward_model (every rank must reduce at least one "
                           "of the %d models per step, also to skip an update)",
                           s->name, s->st->nmodels);
    } else if (s->training && twice >= 0 && rc == 0) {
        if (s->st->nmodels == 1)
            rc = ct__error(CT_EINVAL,
                           "trainer: train step \"%s\" called trainer_step_backward %d "
                           "times in one step",
                           s->name, s->backwards);
        else
            rc = ct__error(CT_EINVAL,
                           "trainer: train step \"%s\" reduced model %d %d times in one step",
                           s->name, twice, s->model_backwards[twice]);
    }
    if (rc < 0 && !s->training)
        ct_autograd_clear_tape();
    return rc;
}

/* ---- the driver's side ---- */

void ct__trainer_metrics_add(tr_metrics *acc, const tr_metrics *m)
{
    for (int i = 0; i < m->n && i < TRAINER_MAX_METRICS; i++) {
        int j = 0;
        while (j < acc->n && strcmp(acc->names[j], m->names[i]))
            j++;
        if (j == acc->n) {
            if (j == TRAINER_MAX_METRICS)
                continue;
            snprintf(acc->names[acc->n++], TRAINER_METRIC_NAME_MAX, "%s", m->names[i]);
        }
        acc->sum[j] += m->sum[i];
        acc->weight[j] += m->weight[i];
    }
}

void ct__trainer_metrics_out(const tr_metrics *acc, trainer_metric *out, int *nout)
{
    for (int j = 0; j < acc->n; j++) {
        snprintf(out[j].name, TRAINER_METRIC_NAME_MAX, "%s", acc->names[j]);
        out[j].value = acc->weight[j] > 0 ? acc->sum[j] / acc->weight[j] : 0;
    }
    *nout = acc->n;
}

double trainer_stats_metric(const trainer_stats *st, bool val, const char *name, double def)
{
    if (!st || !name)
        return def;
    int n = val ? st->val_nmetrics : st->nmetrics;
    const trainer_metric *m = val ? st->val_metrics : st->metrics;
    for (int i = 0; i < n && i < TRAINER_MAX_METRICS; i++)
        if (!strcmp(m[i].name, name))
            return m[i].value;
    return def;
}
