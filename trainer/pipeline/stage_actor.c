/* trainer/pipeline/stage_actor.c — the stage actor (class "ct.pipeline.Stage", stage.h): one
 * stage of one pipeline, in its own process on its node.
 *
 * setup: its part of the GPT (gpt_stage.c), Adam over it, its p2p links (to the stages before
 * and after it, and between the first and the last for the tied embedding), and with P > 1
 * pipelines a ring communicator with stage s of the other pipelines. step: the schedule's
 * actions of this stage in list order (pipeline.c's executor, apart): F(m) takes micro-batch m's
 * activation from the stage before (stage 0: its rows of the batch), records the forward on a
 * tape of its own (ct_autograd_tape_detach) and sends the output on (the last stage: the loss);
 * B(m) waits for the gradient of that output from the stage after (the last stage: the loss
 * scaled by n_m / N), walks the tape and sends its input's gradient back. Then the tied weight's
 * gradients are added (first + last, the same bits on both), the pipelines' gradients averaged,
 * and Adam steps. state: the stage's parameters and Adam state, for the driver's checkpoint; a
 * setup given a checkpoint starts from its part of it (pipe_ckpt.c). Trainer mode: epoch runs a
 * segment of an epoch from the replicas' loader (the last stage records its steps for the run
 * log); validate runs the pipeline's slice of the validation set forward, stage to stage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/collective.h"
#include "ct/ct.h"
#include "ct/data.h"
#include "ct/metrics.h"
#include "ct/optim.h"
#include "p2p.h"
#include "stage.h"
#include "trainer/nn/nn_impl.h"

/* what a tag carries: a step's activations, gradients, tied gradient and rows; a validation's
 * activations (its batch as the micro-batch) and its batches' count */
enum { KIND_ACT = 0, KIND_GRAD = 1, KIND_TIED = 2, KIND_ROWS = 3, KIND_VAL = 4, KIND_VBATCHES = 5 };

typedef struct {
    ct_tape *tape;
    ct_tensor *in, *out; /* out: the last stage's loss */
} cell;

typedef struct stage {
    ct__pipe_setup_args a;
    ct__gpt_stage *g;
    ct_optim *opt;
    ct_rendezvous *rdv;
    ct__p2p *p2p;
    ct_comm *dp; /* stage s of every pipeline (P > 1) */
    ct_pipe_action *acts;
    int nact;
    cell *cells;
    trainer_loss_fn loss; /* the last stage's */
    int64_t target_rows;  /* target rows per sample (the synthetic data's are flat: T) */
    int64_t steps;        /* steps run (trainer mode: the p2p tags' step) */
    /* trainer mode (a trainer_train pipeline): the trainer's creators, data and loader */
    bool trainer;
    trainer_ctx ctx;
    tr_state whole; /* its data (the first and the last stage) and loss; no model kept */
    ct_loader *loader;
    ct_sched *sched; /* the trainer's scheduler over opt, or NULL */
    tr_recorder rec; /* the last stage's step records (records.c) */
} stage;

static ct_tensor *cross_entropy(ct_tensor *out, ct_tensor *target)
{
    return ct_nn_cross_entropy(out, target, 0.0f);
}

static int stage_new(const void *args, size_t len, void **state)
{
    (void)args, (void)len;
    *state = calloc(1, sizeof(stage));
    return *state ? 0 : ct__error(CT_ENOMEM, "pipeline stage: out of memory");
}

static void stage_free(void *state)
{
    stage *st = state;
    if (!st)
        return;
    ct__p2p_close(&st->p2p);
    ct_comm_destroy(&st->dp);
    ct_rendezvous_kv_destroy(&st->rdv);
    ct_optim_destroy(&st->opt);
    ct__gpt_stage_destroy(&st->g);
    ct_loader_destroy(&st->loader);
    ct_sched_destroy(&st->sched);
    ct__rec_free(&st->rec);
    if (st->trainer) {
        ct__trainer_state_free(&st->whole);
        ct__trainer_ctx_free(&st->ctx);
    }
    free(st->acts);
    free(st->cells);
    free(st);
}

static int timeout_of(const stage *st)
{
    return st->a.o.timeout_ms > 0 ? st->a.o.timeout_ms : 120000;
}

/* trainer mode: the trainer's creators as a replica runs them (rank `pipeline` of P; data only
 * where it is read), the stage cut from the whole model they made, the trainer's optimizer over
 * the stage, and the replica's training loader */
static int trainer_build(stage *st)
{
    const ct__pipe_job_opts *o = &st->a.o;
    const tr_spec *spec = &st->a.spec;
    int s = st->a.stage, S = o->stages, p = st->a.pipeline, rc;
    bool data = s == 0 || s == S - 1;
    if ((rc = ct__trainer_ctx_init(&st->ctx, spec->config, p, o->pipelines, spec->seed,
                                   o->start_epoch, spec->epochs, false)) < 0)
        return rc;
    st->trainer = true;
    if ((rc = ct__trainer_state_build(spec, &st->ctx, data, &st->whole)) < 0)
        return rc;
    ct_gpt_config cfg;
    if ((rc = ct_nn_gpt_config(st->whole.models[0], &cfg)) < 0)
        return rc;
    if (!(st->g = ct__gpt_stage_from(&cfg, s, S, st->whole.models[0])))
        return CT_EINVAL;
    trainer_optimizer_creator oc =
        (trainer_optimizer_creator)ct__trainer_lookup(TR_OPTIM, spec->optimizer);
    if (!oc || !(st->opt = oc(&st->ctx, ct__gpt_stage_module(st->g))) || st->ctx.err[0])
        return ct__error(CT_EINVAL, "pipeline stage %d: optimizer \"%s\": %s", s, spec->optimizer,
                         st->ctx.err[0] ? st->ctx.err : ct_last_error());
    if (spec->scheduler[0]) { /* over the stage's optimizer, as the replicas' over theirs */
        trainer_scheduler_creator sc =
            (trainer_scheduler_creator)ct__trainer_lookup(TR_SCHED, spec->scheduler);
        if (!sc || !(st->sched = sc(&st->ctx, st->opt)) || st->ctx.err[0])
            return ct__error(CT_EINVAL, "pipeline stage %d: scheduler \"%s\": %s", s,
                             spec->scheduler, st->ctx.err[0] ? st->ctx.err : ct_last_error());
    }
    if (st->a.has_ckpt) { /* a retry: the checkpoint's weights and optimizer state */
        ct_object_view v = {0};
        if ((rc = ct_get(&st->a.ckpt, 60000, &v)) < 0)
            return ct__error(rc, "pipeline stage %d: the checkpoint: %s", s, ct_last_error());
        rc = ct__ckpt_load(&st->whole, spec, v.data, v.size);
        ct_object_release(&v);
        if (rc == 0)
            rc = ct__pipe_take_part(st->whole.models[0], st->whole.optims[0],
                                    ct__gpt_stage_module(st->g), st->opt);
        const ct_state_entry *se = NULL;
        int nse = 0;
        if (rc == 0 && st->sched && st->whole.sched &&
            (rc = ct_sched_state_dict(st->whole.sched, &se, &nse)) == 0)
            rc = ct_sched_load_state_dict(st->sched, se, nse);
        if (rc < 0)
            return rc;
    }
    st->loss = st->whole.losses[0];
    st->target_rows = 1;
    for (int i = 0; i < st->whole.nmodels; i++) { /* only the data and the loss stay */
        ct_optim_destroy(&st->whole.optims[i]);
        ct_module_destroy(&st->whole.models[i]);
    }
    if (!data)
        return 0;
    const trainer_data *d = &st->whole.data;
    ct_loader_opts lo = {.batch_size = spec->batch,
                         .shuffle = true,
                         .seed = spec->seed,
                         .rank = p,
                         .world_size = o->pipelines,
                         .prefetch = d->prefetch < 0    ? 0
                                     : d->prefetch == 0 ? 2
                                                        : d->prefetch,
                         .transform = d->transform};
    if (d->sharded) { /* the replica's rule (replica.c loader_new) for a group of one */
        if (o->pipelines > 1)
            return ct__error(CT_ENOSYS, "pipeline stage: sharded data over %d pipelines",
                             o->pipelines);
        lo.rank = 0;
        lo.world_size = 1;
        lo.seed = ct__pipe_mix(spec->seed ^ ct__pipe_mix((uint64_t)p));
        lo.pad_to = ct_dataset_length(d->train);
    }
    return ct_loader_new(d->train, &lo, &st->loader);
}

static int stage_setup(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    stage *st = state;
    if (len < sizeof(ct__pipe_setup_args) || st->g)
        return ct__error(CT_EINVAL, "pipeline stage: bad setup call");
    memcpy(&st->a, args, sizeof st->a);
    const ct__pipe_job_opts *o = &st->a.o;
    const char *init = len > sizeof st->a ? (const char *)args + sizeof st->a : NULL;
    /* init: only the synthetic jobs' (a trainer pipeline starts from its creators) */
    if (init && (memchr(init, 0, len - sizeof st->a) == NULL || !*init))
        init = NULL;
    int s = st->a.stage, S = o->stages, rc = 0;
    int64_t step0 = 0;
    ct_nn_set_threads(o->threads > 0 ? o->threads : 1);
    if (st->a.trainer) {
        if ((rc = trainer_build(st)) < 0)
            return rc;
    } else {
        const ct_param_ref *refs = NULL;
        int np = 0;
        st->loss = cross_entropy;
        st->target_rows = o->gpt.block_size;
        if (!(st->g = ct__gpt_stage_new(&o->gpt, s, S, o->seed)))
            return CT_EINVAL;
        if ((rc = ct_module_params(ct__gpt_stage_module(st->g), &refs, &np)) < 0)
            return rc;
        if (!(st->opt = ct_optim_adam_new(refs, np, &(ct_adam_opts){.lr = o->lr})))
            return CT_EINVAL;
        if (init && (rc = ct__pipe_ckpt_load_stage(o, init, ct__gpt_stage_module(st->g), st->opt,
                                                   &step0)) < 0)
            return rc;
    }
    if ((rc = ct_pipe_schedule_actions(o->schedule, S, o->micro_batches, &st->acts, &st->nact)) < 0)
        return rc;
    if (!(st->cells = calloc((size_t)o->micro_batches, sizeof *st->cells)))
        return ct__error(CT_ENOMEM, "pipeline stage: out of memory");
    if (!(st->rdv = ct_rendezvous_kv_new("pipeline/")))
        return CT_ENOMEM;
    int peers[3], n = 0;
    if (s > 0)
        peers[n++] = s - 1;
    if (s < S - 1)
        peers[n++] = s + 1;
    if (S > 2 && (s == 0 || s == S - 1)) /* the tied embedding's link */
        peers[n++] = s == 0 ? S - 1 : 0;
    char group[160];
    snprintf(group, sizeof group, "%s/pipe%d", st->a.group, st->a.pipeline);
    if ((rc = ct__p2p_open(st->rdv, group, s, peers, n, timeout_of(st), &st->p2p)) < 0)
        return rc;
    if (o->pipelines > 1) {
        snprintf(group, sizeof group, "%s/stage%d", st->a.group, s);
        rc = ct_comm_new(&(ct_comm_opts){.rendezvous = st->rdv,
                                         .group_id = group,
                                         .rank = st->a.pipeline,
                                         .world_size = o->pipelines,
                                         .node_id = ct_self_node_id(),
                                         .timeout_ms = timeout_of(st)},
                         &st->dp);
    }
    /* the steps done (the checkpoint's) and, in trainer mode, the batches of an epoch */
    int64_t rep[2] = {step0, st->loader ? ct_loader_num_batches(st->loader) : 0};
    if (rc == 0 && !(*res = malloc(sizeof rep)))
        rc = ct__error(CT_ENOMEM, "pipeline stage: out of memory");
    if (rc == 0) {
        memcpy(*res, rep, sizeof rep);
        *rlen = sizeof rep;
    }
    return rc;
}

static int forward(stage *st, int64_t step, int mb, const int64_t *start, const int64_t *len,
                   ct_tensor *x, ct_tensor *y, double *loss)
{
    int s = st->a.stage, S = st->a.o.stages, rc = 0;
    cell *c = &st->cells[mb];
    if (s == 0) {
        c->in = ct_tensor_narrow0(x, start[mb], len[mb]);
    } else if ((rc = ct__p2p_recv(st->p2p, s - 1, ct__p2p_tag(step, KIND_ACT, mb), timeout_of(st),
                                  &c->in)) == 0) {
        ct_tensor_set_requires_grad(c->in, true);
    }
    if (!c->in)
        return rc < 0 ? rc : CT_ENOMEM;
    ct_tensor *out = ct__gpt_stage_forward(st->g, c->in);
    if (out && s == S - 1) {
        int64_t k = st->target_rows;
        ct_tensor *t = ct_tensor_narrow0(y, start[mb] * k, len[mb] * k);
        c->out = t ? st->loss(out, t) : NULL;
        ct_tensor_release(&t);
        if (c->out)
            *loss += (double)ct_tensor_item(c->out) * (double)len[mb];
    } else {
        c->out = ct_tensor_retain(out);
    }
    ct_tensor_release(&out);
    if (!c->out || !(c->tape = ct_autograd_tape_detach())) {
        ct_autograd_clear_tape();
        return CT_EINVAL;
    }
    if (s < S - 1) {
        bool was = ct_autograd_set_enabled(false);
        rc = ct__p2p_send(st->p2p, s + 1, ct__p2p_tag(step, KIND_ACT, mb), c->out);
        ct_autograd_set_enabled(was);
    }
    return rc;
}

static int backward(stage *st, int64_t step, int mb, const int64_t *len, int64_t total)
{
    int s = st->a.stage, S = st->a.o.stages;
    cell *c = &st->cells[mb];
    int rc = ct_autograd_tape_attach(&c->tape);
    if (rc < 0)
        return rc;
    if (s == S - 1) {
        rc = ct_tensor_backward_scaled(c->out, (float)((double)len[mb] / (double)total));
    } else {
        ct_tensor *g = NULL;
        rc = ct__p2p_recv(st->p2p, s + 1, ct__p2p_tag(step, KIND_GRAD, mb), timeout_of(st), &g);
        if (rc == 0)
            rc = ct_tensor_backward(c->out, g);
        else
            ct_autograd_clear_tape();
        ct_tensor_release(&g);
    }
    if (rc == 0 && s > 0) {
        ct_tensor *g = ct_tensor_grad(c->in);
        rc = g ? ct__p2p_send(st->p2p, s - 1, ct__p2p_tag(step, KIND_GRAD, mb), g)
               : ct__error(CT_EINVAL, "pipeline stage %d: its input got no gradient", s);
    }
    ct_tensor_release(&c->in);
    ct_tensor_release(&c->out);
    return rc;
}

/* the tied embedding's gradient: first's + last's, in that order on both */
static int add_tied(stage *st, int64_t step)
{
    int s = st->a.stage, S = st->a.o.stages;
    if (S == 1 || (s != 0 && s != S - 1))
        return 0;
    ct_tensor *w = ct__gpt_stage_tied(st->g), *g = w ? ct_tensor_grad(w) : NULL, *other = NULL;
    if (!g)
        return ct__error(CT_EINVAL, "pipeline stage %d: the tied embedding has no gradient", s);
    int peer = s == 0 ? S - 1 : 0;
    int rc = ct__p2p_send(st->p2p, peer, ct__p2p_tag(step, KIND_TIED, 0), g);
    if (rc == 0)
        rc = ct__p2p_recv(st->p2p, peer, ct__p2p_tag(step, KIND_TIED, 0), timeout_of(st), &other);
    if (rc == 0 && ct_tensor_numel(other) != ct_tensor_numel(g))
        rc = ct__error(CT_EPROTO, "pipeline stage %d: the tied gradient's size differs", s);
    if (rc == 0) {
        float *a = ct_tensor_data(g);
        const float *b = ct_tensor_data(other);
        for (int64_t i = 0; i < ct_tensor_numel(g); i++)
            a[i] = s == 0 ? a[i] + b[i] : b[i] + a[i];
    }
    ct_tensor_release(&other);
    return rc;
}

/* a count stage 0 knows (a batch's rows, a validation's batches) on a middle stage, which reads
 * no data: stage 0 sends it down the middle stages (S > 2) under tag (step, kind) */
static int share_count(stage *st, int64_t step, int kind, int64_t *N)
{
    int s = st->a.stage, S = st->a.o.stages, rc = 0;
    if (S <= 2)
        return 0;
    if (s > 0 && s < S - 1) {
        ct_tensor *t = NULL;
        if ((rc = ct__p2p_recv(st->p2p, s - 1, ct__p2p_tag(step, kind, 0), timeout_of(st), &t)) < 0)
            return rc;
        *N = (int64_t)ct_tensor_item(t);
        ct_tensor_release(&t);
    }
    if (s < S - 2) {
        float v = (float)*N; /* exact below 2^24 rows */
        ct_tensor *t = ct_tensor_from_f32(1, (int64_t[]){1}, &v);
        rc = t ? ct__p2p_send(st->p2p, s + 1, ct__p2p_tag(step, kind, 0), t) : CT_ENOMEM;
        ct_tensor_release(&t);
    }
    return rc;
}

/* one optimizer step over a batch of N rows (x on the first stage, y on the last; NULL and N
 * unknown (0) on the middle stages, which learn N from share_count); *loss_sum: the sum over
 * the batch's rows of the loss on the last stage. A batch of fewer rows than micro-batches (an
 * epoch's last) runs in as many micro-batches as rows. */
static int run_step(stage *st, int64_t step, ct_tensor *x, ct_tensor *y, int64_t N,
                    double *loss_sum)
{
    int s = st->a.stage, rc = share_count(st, step, KIND_ROWS, &N);
    if (rc < 0)
        return rc;
    if (N < 1)
        return ct__error(CT_EINVAL, "pipeline stage %d: an empty batch", s);
    int M = st->a.o.micro_batches < N ? st->a.o.micro_batches : (int)N;
    const ct_pipe_action *acts = st->acts;
    ct_pipe_action *fewer = NULL;
    int nact = st->nact;
    if (M < st->a.o.micro_batches) {
        if ((rc = ct_pipe_schedule_actions(st->a.o.schedule, st->a.o.stages, M, &fewer, &nact)) < 0)
            return rc;
        acts = fewer;
    }
    int64_t start[M], lens[M];
    for (int i = 0, at = 0; i < M; i++) { /* torch.tensor_split's sizes, as pipeline.c */
        start[i] = at;
        lens[i] = N / M + (i < N % M);
        at += (int)lens[i];
    }
    ct_module *m = ct__gpt_stage_module(st->g);
    ct_module_zero_grad(m);
    double sum = 0.0;
    /* Linear weight gradients once over every micro-batch's rows, as pipeline.c's stages */
    ct__wgrad_defer_begin();
    for (int i = 0; i < nact && rc == 0; i++) {
        const ct_pipe_action *a = &acts[i];
        if (a->stage != s)
            continue;
        rc = a->op == CT_PIPE_FORWARD ? forward(st, step, a->micro_batch, start, lens, x, y, &sum)
                                      : backward(st, step, a->micro_batch, lens, N);
    }
    int wrc = ct__wgrad_defer_end(rc == 0);
    rc = rc < 0 ? rc : wrc;
    free(fewer);
    for (int i = 0; i < M; i++) { /* after a failure: what is left */
        ct_tape_destroy(&st->cells[i].tape);
        ct_tensor_release(&st->cells[i].in);
        ct_tensor_release(&st->cells[i].out);
    }
    if (rc == 0)
        rc = add_tied(st, step);
    if (rc == 0 && st->dp) {
        float *v = NULL, *g = NULL;
        int64_t n = 0;
        if ((rc = ct_module_flat(m, &v, &g, &n)) == 0)
            rc = ct_comm_allreduce(st->dp, g, (size_t)n, CT_F32, CT_COMM_AVG, 0);
    }
    if (rc == 0)
        rc = ct_optim_step(st->opt);
    st->steps++;
    *loss_sum = sum;
    return rc;
}

/* rep, with the stage's p2p byte counts so far, as a call's reply */
static int reply(stage *st, ct__pipe_reply *rep, void **res, size_t *rlen)
{
    ct__p2p_bytes(st->p2p, &rep->sent, &rep->received);
    if (!(*res = malloc(sizeof *rep)))
        return ct__error(CT_ENOMEM, "pipeline stage: out of memory");
    memcpy(*res, rep, sizeof *rep);
    *rlen = sizeof *rep;
    return 0;
}

static int stage_step(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    stage *st = state;
    if (len != sizeof(int64_t) || !st->g || st->trainer)
        return ct__error(CT_EINVAL, "pipeline stage: step before setup, or bad arguments");
    int64_t step;
    memcpy(&step, args, sizeof step);
    const ct__pipe_job_opts *o = &st->a.o;
    int s = st->a.stage, rc = 0;
    ct_tensor *x = NULL, *y = NULL;
    if ((s == 0 || s == o->stages - 1) &&
        (rc = ct__pipe_gpt_batch(o->seed, step, (int64_t)st->a.pipeline * o->batch, o->batch,
                                 o->gpt.block_size, o->gpt.vocab_size, &x, &y)) < 0)
        return rc;
    ct__pipe_reply rep = {.samples = o->batch, .steps = 1};
    rc = run_step(st, step, x, y, o->batch, &rep.loss_sum);
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    return rc < 0 ? rc : reply(st, &rep, res, rlen);
}

/* the next batch of ld as tensors x (N, ...) and y (N, ...) f32 targets or (N) i64 labels,
 * wrapping the batch's buffers (valid until the next ct_loader_next); 0 at the end, 1 with a
 * batch, or a negative code */
static int next_batch(ct_loader *ld, ct_tensor **x, ct_tensor **y, int64_t *n)
{
    ct_batch b = {0};
    int got = ct_loader_next(ld, &b);
    if (got <= 0)
        return got;
    int64_t xs[CT_DATA_MAX_DIMS + 1] = {b.n}, ys[CT_DATA_MAX_DIMS + 1] = {b.n};
    for (int d = 0; d < b.ndim; d++)
        xs[d + 1] = b.shape[d];
    for (int d = 0; d < b.tndim; d++)
        ys[d + 1] = b.tshape[d];
    *x = ct_tensor_wrap(CT_F32, b.ndim + 1, xs, (void *)b.x);
    *y = b.tndim ? ct_tensor_wrap(CT_F32, b.tndim + 1, ys, (void *)b.target)
                 : ct_tensor_wrap(CT_I64, 1, ys, (void *)b.y);
    *n = b.n;
    return *x && *y ? 1 : CT_ENOMEM;
}

/* trainer mode: a segment of an epoch, nbatches batches from batch start_batch of the
 * replica's loader (the first and the last stage read the same batches); the last stage records
 * each step for the driver's run log as a replica of rank `pipeline` does */
static int stage_epoch(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    stage *st = state;
    ct__pipe_epoch_args ea;
    if (len != sizeof ea || !st->g || !st->trainer)
        return ct__error(CT_EINVAL, "pipeline stage: epoch before a trainer setup, or bad args");
    memcpy(&ea, args, sizeof ea);
    bool last = st->a.stage == st->a.o.stages - 1;
    tr_state rs = {.nmodels = 1, .optims = {st->opt}, .step = ea.step}; /* for the records */
    trainer_step ts = {.ctx = &st->ctx,
                       .st = &rs,
                       .training = true,
                       .epoch = ea.epoch,
                       .index = ea.start_batch,
                       .accum_len = 1};
    int64_t batches = st->loader ? ct_loader_num_batches(st->loader) : 0;
    if (last)
        ct__rec_begin(&st->rec, &ts, st->a.group, st->a.pipeline, ea.report_ms);
    ct__pipe_reply rep = {0};
    int rc = st->loader ? ct_loader_seek(st->loader, ea.epoch, ea.start_batch) : 0;
    for (int64_t b = 0; rc == 0 && b < ea.nbatches; b++) {
        ct_tensor *x = NULL, *y = NULL;
        int64_t n = 0;
        int got = st->loader ? next_batch(st->loader, &x, &y, &n) : 1;
        if (got == 0)
            rc = ct__error(CT_EINVAL,
                           "pipeline stage %d: the epoch ended after %lld of %lld batches",
                           st->a.stage, (long long)(ea.start_batch + b),
                           (long long)(ea.start_batch + ea.nbatches));
        double sum = 0;
        if (got == 1)
            rc = run_step(st, st->steps, x, y, n, &sum);
        else if (got < 0)
            rc = got;
        ct_tensor_release(&x);
        ct_tensor_release(&y);
        rep.loss_sum += sum;
        rep.samples += n;
        rep.steps++;
        rs.step++;
        ts.index++;
        if (rc == 0 && last) /* before the scheduler: the lr the step used */
            ct__rec_batch(&st->rec, &ts, &(trainer_step_out){.loss_sum = sum, .samples = n},
                          batches);
        if (rc == 0 && st->sched && st->a.spec.sched_every == TR_SCHED_BATCH)
            rc = ct_sched_step(st->sched);
    }
    if (last)
        ct__rec_flush(&st->rec); /* in the KV before the reply: the driver reads them all */
    if (rc == 0 && ea.end && st->sched && st->a.spec.sched_every == TR_SCHED_EPOCH)
        rc = ct_sched_step(st->sched);
    return rc < 0 ? rc : reply(st, &rep, res, rlen);
}

/* the first and the last stage: a loader over this pipeline's slice of the validation set, as
 * a replica of rank p of P slices it (trainer/train/replica.c validate_local), in batches of the
 * training's size, the images as they are (normalised, never cropped or flipped) */
static int val_loader(stage *st, ct_dataset **slice, ct_loader **ld)
{
    const trainer_data *d = &st->whole.data;
    int64_t n = ct_dataset_length(d->val), w = st->a.o.pipelines, k = st->a.pipeline;
    int64_t lo = d->sharded ? 0 : n * k / w, hi = d->sharded ? n : n * (k + 1) / w;
    const ct_transform_opts *tt = &d->transform;
    ct_transform_opts vt = {.mean = tt->mean, .std = tt->std, .n_mean = tt->n_mean};
    int rc = ct_dataset_subset(d->val, lo, hi - lo, slice);
    if (rc == 0)
        rc = ct_loader_new(
            *slice,
            &(ct_loader_opts){.batch_size = st->a.spec.batch, .prefetch = 2, .transform = vt}, ld);
    return rc;
}

/* one validation batch through the stage, forward only: stage 0 embeds x, a middle stage takes
 * the activation from the stage before, every stage but the last sends its output on; the last
 * adds the loss times the rows and (i64 labels) the top-1 hits to rep, as the built-in validate
 * step counts them */
static int val_batch(stage *st, int64_t b, ct_tensor *x, ct_tensor *y, int64_t n,
                     ct_tensor *(*loss_fn)(ct_tensor *, ct_tensor *), ct__pipe_reply *rep)
{
    int s = st->a.stage, S = st->a.o.stages, rc = 0;
    uint64_t tag = ct__p2p_tag(st->steps, KIND_VAL, (int)(b & 0xffff));
    ct_tensor *in = s == 0 ? ct_tensor_retain(x) : NULL, *out = NULL, *loss = NULL;
    if (s > 0 && (rc = ct__p2p_recv(st->p2p, s - 1, tag, timeout_of(st), &in)) < 0)
        return rc;
    if (!in || !(out = ct__gpt_stage_forward(st->g, in)))
        rc = CT_EINVAL;
    if (rc == 0 && s < S - 1)
        rc = ct__p2p_send(st->p2p, s + 1, tag, out);
    if (rc == 0 && s == S - 1) {
        int64_t hits = 0;
        if (!(loss = loss_fn(out, y)))
            rc = CT_EINVAL;
        else if (ct_tensor_dtype(y) == CT_I64)
            rc = ct_metrics_topk_correct(ct_tensor_f32(out), ct_tensor_data(y), n,
                                         ct_tensor_dim(out, 1), 1, &hits);
        if (rc == 0) {
            rep->loss_sum += (double)ct_tensor_item(loss) * (double)n;
            rep->correct += hits;
            rep->samples += n;
        }
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&out);
    ct_tensor_release(&in);
    return rc;
}

/* trainer mode: the pipeline's forward passes over its slice of the validation set (no tape,
 * no gradients, the modules in eval mode); the last stage replies the sums. Stage 0 tells the
 * middle stages how many batches there are; the last stage reads the same slice. */
static int stage_validate(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    stage *st = state;
    (void)args, (void)len;
    if (!st->g || !st->trainer)
        return ct__error(CT_EINVAL, "pipeline stage: validate before a trainer setup");
    int s = st->a.stage, S = st->a.o.stages, rc = 0;
    bool data = s == 0 || s == S - 1;
    ct__pipe_reply rep = {0};
    ct_dataset *slice = NULL;
    ct_loader *ld = NULL;
    int64_t nb = 0;
    if (data && st->whole.data.val && (rc = val_loader(st, &slice, &ld)) == 0)
        nb = ct_loader_num_batches(ld);
    if (rc == 0)
        rc = share_count(st, st->steps, KIND_VBATCHES, &nb);
    ct_module *m = ct__gpt_stage_module(st->g);
    ct_module_train(m, false);
    bool was = ct_autograd_set_enabled(false);
    for (int64_t b = 0; rc == 0 && b < nb; b++) {
        ct_tensor *x = NULL, *y = NULL;
        int64_t n = 0;
        int got = ld ? next_batch(ld, &x, &y, &n) : 1;
        if (got == 0)
            rc = ct__error(CT_EINVAL, "pipeline stage %d: the validation set ended early", s);
        else
            rc = got < 0 ? got : val_batch(st, b, x, y, n, st->loss, &rep);
        ct_tensor_release(&x);
        ct_tensor_release(&y);
    }
    ct_autograd_set_enabled(was);
    ct_module_train(m, true);
    ct_loader_destroy(&ld);
    ct_dataset_destroy(&slice);
    return rc < 0 ? rc : reply(st, &rep, res, rlen);
}

/* the stage's parameters and Adam state (pipe_ckpt.c's format), for the driver's checkpoint */
static int stage_state(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    stage *st = state;
    (void)args, (void)len;
    if (!st->g)
        return ct__error(CT_EINVAL, "pipeline stage: state before setup");
    return ct__pipe_stage_state(ct__gpt_stage_module(st->g), st->opt, res, rlen);
}

int ct__pipe_register_stage_class(void)
{
    static int done;
    if (done)
        return 0;
    int rc = ct_actor_class_register(CT__PIPE_STAGE_CLASS,
                                     &(ct_actor_class){.create = stage_new,
                                                       .destroy = stage_free,
                                                       .methods = {{"setup", stage_setup},
                                                                   {"step", stage_step},
                                                                   {"epoch", stage_epoch},
                                                                   {"validate", stage_validate},
                                                                   {"state", stage_state}}});
    done = rc == 0;
    return rc;
}

/* every process that links the stage actor registers its class before main (replica.c's way) */
__attribute__((constructor)) static void register_at_load(void)
{
    ct__pipe_register_stage_class();
}
