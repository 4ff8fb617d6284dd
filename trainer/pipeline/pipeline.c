/* trainer/pipeline/pipeline.c — runs a schedule's actions over stage modules on devices, from
 * one thread (ct/pipeline.h).
 *
 * Each forward F(s, m) records into a tape of its own (ct_autograd_tape_detach), so forwards
 * and backwards of different micro-batches can interleave as 1F1B does; B(s, m) attaches that
 * tape again and walks it. Between stages the activation is copied to the next device out of
 * autograd (a leaf there that requires a gradient); B(s, m) back-propagates the gradient that
 * leaf received in B(s+1, m), so each stage's backward is its own walk, as it will be when the
 * stages are actors apart. The copies are ct_tensor_to's, ordered by events between the two
 * devices' streams: the host thread only queues work, and on devices with streams (CUDA, the
 * checking device) stage s works on micro-batch m+1 while stage s+1 works on m. On the CPU the
 * host does the work, so ct_pipeline_use_threads runs each stage's program (its actions, in
 * list order) on a thread of its own instead (started once, kept between calls), an action
 * waiting for the ones it depends on (F(s-1, m) before F(s, m), B(s+1, m) before B(s, m))
 * under one mutex. A stage's Linear weight gradients are deferred while it runs its actions
 * (trainer/nn/wgrad_defer.c): each backward computes the input's gradient the previous stage
 * waits for, and each weight's gradient is computed once, over all micro-batches' rows, after
 * the stage's last action. Not here: the order of the actions (schedule.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/pipeline.h"
#include "trainer/nn/nn_impl.h"

typedef struct run run;

struct ct_pipeline {
    int n;
    ct_module **stages; /* borrowed */
    ct_device *devices;
    /* stage threads (ct_pipeline_use_threads): started once, kept between calls, so each keeps
     * its engine's per-thread state (the CPU's buffer cache, scratch) warm */
    int stage_threads; /* 0: the caller drives every stage */
    pthread_t *th;
    struct stage_thread *st;
    int nth;
    pthread_mutex_t mu; /* guards what follows and the current run's done and failed */
    pthread_cond_t cv;
    uint64_t gen; /* a call's number: a new one starts the threads' programs */
    int finished, stop;
    run *cur;
};

static void threads_stop(ct_pipeline *p);
static int threads_start(ct_pipeline *p);

int ct_pipeline_use_threads(ct_pipeline *p, int threads_per_stage)
{
    if (!p || threads_per_stage < 0)
        return ct__error(CT_EINVAL, "pipeline: threads per stage %d (want 0 or more)",
                         threads_per_stage);
    threads_stop(p);
    p->stage_threads = threads_per_stage;
    return threads_per_stage > 0 ? threads_start(p) : 0;
}

ct_pipeline *ct_pipeline_new(ct_module *const *stages, const ct_device *devices, int n)
{
    ct_pipeline *p = NULL;
    if (!stages || !devices || n < 1 || n > 1024) {
        ct__error(CT_EINVAL, "pipeline: %d stages (want 1..1024, with modules and devices)", n);
        return NULL;
    }
    for (int s = 0; s < n; s++) {
        if (!stages[s]) {
            ct__error(CT_EINVAL, "pipeline: stage %d has no module", s);
            return NULL;
        }
        if (ct_module_to(stages[s], devices[s]) < 0)
            return NULL; /* ct_module_to said why */
    }
    p = calloc(1, sizeof(*p));
    if (p) {
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
    }
    if (!p || !(p->stages = malloc((size_t)n * sizeof(*p->stages))) ||
        !(p->devices = malloc((size_t)n * sizeof(*p->devices)))) {
        ct_pipeline_destroy(&p);
        ct__error(CT_ENOMEM, "pipeline: out of memory");
        return NULL;
    }
    p->n = n;
    memcpy(p->stages, stages, (size_t)n * sizeof(*stages));
    memcpy(p->devices, devices, (size_t)n * sizeof(*devices));
    return p;
}

void ct_pipeline_destroy(ct_pipeline **p)
{
    if (!p || !*p)
        return;
    threads_stop(*p);
    pthread_cond_destroy(&(*p)->cv);
    pthread_mutex_destroy(&(*p)->mu);
    free((*p)->stages);
    free((*p)->devices);
    free(*p);
    *p = NULL;
}

/* what one (stage, micro-batch) holds between its forward and its backward */
typedef struct {
    ct_tape *tape;  /* the forward's nodes */
    ct_tensor *in;  /* the stage's input (a leaf requiring a gradient for stages > 0) */
    ct_tensor *out; /* the stage's output; for the last stage, the micro-batch's loss */
} cell;

struct run {
    ct_pipeline *p;
    ct_tensor *input, *target;
    ct_pipe_loss_fn loss_fn;
    void *user;
    int m;
    int64_t *start, *len, total;
    cell *cells; /* [s * m + mb] */
    ct_tensor **losses;
    const ct_pipe_action *acts;
    int nact;
    /* stage threads: done[(s * m + mb) * 2 + op], guarded by p->mu */
    char *done;
    int failed;
};

/* rows [start, start+len) of t as a new tensor on device d, out of autograd */
static ct_tensor *rows_on(ct_tensor *t, int64_t start, int64_t len, ct_device d)
{
    ct_tensor *v = ct_tensor_narrow0(t, start, len);
    ct_tensor *c = v ? ct_tensor_to(v, d) : NULL;
    ct_tensor_release(&v);
    return c;
}

static int forward(run *r, int s, int mb)
{
    ct_pipeline *p = r->p;
    cell *c = &r->cells[(size_t)s * r->m + mb];
    ct_tensor *y = NULL;
    int rc = 0;
    bool was = ct_autograd_set_enabled(false);
    if (s == 0) {
        c->in = rows_on(r->input, r->start[mb], r->len[mb], p->devices[0]);
    } else {
        /* plain layout first: a convolution's output may be blocked, and the copy (and the
         * next stage's gradient) are row-major */
        ct_tensor *prev = r->cells[(size_t)(s - 1) * r->m + mb].out;
        ct_tensor *plain = ct_nn_to_plain(prev);
        c->in = plain ? ct_tensor_to(plain, p->devices[s]) : NULL;
        ct_tensor_release(&plain);
        if (c->in)
            ct_tensor_set_requires_grad(c->in, true);
    }
    ct_autograd_set_enabled(was);
    if (!c->in)
        return CT_EINVAL; /* the copy said why */
    y = ct_module_forward(p->stages[s], c->in);
    if (!y) {
        rc = CT_EINVAL;
        goto out;
    }
    if (s == p->n - 1) {
        was = ct_autograd_set_enabled(false);
        ct_tensor *t = rows_on(r->target, r->start[mb], r->len[mb], p->devices[s]);
        ct_autograd_set_enabled(was);
        c->out = t ? r->loss_fn(y, t, r->user) : NULL;
        ct_tensor_release(&t);
        if (!c->out) {
            rc = ct__error(CT_EINVAL, "pipeline: the loss of micro-batch %d failed: %s", mb,
                           ct_last_error());
            goto out;
        }
    } else {
        c->out = ct_tensor_retain(y);
    }
    if (!(c->tape = ct_autograd_tape_detach()))
        rc = CT_ENOMEM;
out:
    ct_tensor_release(&y);
    if (rc < 0)
        ct_autograd_clear_tape();
    return rc;
}

static int backward(run *r, int s, int mb)
{
    ct_pipeline *p = r->p;
    cell *c = &r->cells[(size_t)s * r->m + mb];
    int rc = ct_autograd_tape_attach(&c->tape);
    if (rc < 0)
        return rc;
    if (s == p->n - 1) {
        rc = ct_tensor_backward_scaled(c->out, (float)((double)r->len[mb] / (double)r->total));
    } else {
        cell *next = &r->cells[(size_t)(s + 1) * r->m + mb];
        ct_tensor *g = ct_tensor_grad(next->in);
        if (!g) {
            ct_autograd_clear_tape();
            return ct__error(CT_EINVAL, "pipeline: stage %d's input got no gradient", s + 1);
        }
        rc = ct_tensor_backward(c->out, g);
        ct_tensor_release(&next->in);
        ct_tensor_release(&c->out);
    }
    if (s == 0)
        ct_tensor_release(&c->in);
    return rc;
}

/* one action, and the last stage's loss kept for the total */
static int act(run *r, const ct_pipe_action *a)
{
    if (a->op == CT_PIPE_BACKWARD)
        return backward(r, a->stage, a->micro_batch);
    int rc = forward(r, a->stage, a->micro_batch);
    if (rc == 0 && a->stage == r->p->n - 1)
        r->losses[a->micro_batch] =
            ct_tensor_retain(r->cells[(size_t)a->stage * r->m + a->micro_batch].out);
    return rc;
}

struct stage_thread {
    ct_pipeline *p;
    int stage, rc;
    uint64_t seen; /* the last call it ran (p->gen when it started) */
};

/* may a (of this stage) run: what it depends on is done */
static bool deps_done(run *r, const ct_pipe_action *a)
{
    if (a->op == CT_PIPE_FORWARD)
        return a->stage == 0 || r->done[((size_t)(a->stage - 1) * r->m + a->micro_batch) * 2];
    return a->stage == r->p->n - 1 ||
           r->done[((size_t)(a->stage + 1) * r->m + a->micro_batch) * 2 + 1];
}

/* stage st->stage's actions of run r, in order; the first error */
static int stage_program(ct_pipeline *p, run *r, int stage)
{
    int rc = 0;
    ct__wgrad_defer_begin();
    for (int i = 0; i < r->nact && rc == 0; i++) {
        const ct_pipe_action *a = &r->acts[i];
        if (a->stage != stage)
            continue;
        pthread_mutex_lock(&p->mu);
        while (!r->failed && !deps_done(r, a))
            pthread_cond_wait(&p->cv, &p->mu);
        bool failed = r->failed;
        pthread_mutex_unlock(&p->mu);
        if (failed)
            break;
        rc = act(r, a);
        pthread_mutex_lock(&p->mu);
        if (rc < 0)
            r->failed = 1;
        else
            r->done[((size_t)a->stage * r->m + a->micro_batch) * 2 + a->op] = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    bool failed = r->failed;
    pthread_mutex_unlock(&p->mu);
    int wrc = ct__wgrad_defer_end(rc == 0 && !failed);
    return rc < 0 ? rc : wrc;
}

/* a stage thread: each new call's program, until stopped */
static void *stage_main(void *arg)
{
    struct stage_thread *st = arg;
    ct_pipeline *p = st->p;
    ct_nn_set_threads(p->stage_threads);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == st->seen)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        st->seen = p->gen;
        run *r = p->cur;
        pthread_mutex_unlock(&p->mu);
        int rc = stage_program(p, r, st->stage);
        pthread_mutex_lock(&p->mu);
        st->rc = rc;
        p->finished++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    ct__wgrad_defer_free();
    return NULL;
}

static void threads_stop(ct_pipeline *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int s = 0; s < p->nth; s++)
        pthread_join(p->th[s], NULL);
    free(p->th);
    free(p->st);
    p->th = NULL;
    p->st = NULL;
    p->nth = 0;
    p->stop = 0;
}

static int threads_start(ct_pipeline *p)
{
    p->th = calloc((size_t)p->n, sizeof(*p->th));
    p->st = calloc((size_t)p->n, sizeof(*p->st));
    if (!p->th || !p->st) {
        threads_stop(p);
        return ct__error(CT_ENOMEM, "pipeline: out of memory");
    }
    for (int s = 0; s < p->n; s++) {
        p->st[s] = (struct stage_thread){.p = p, .stage = s, .seen = p->gen};
        if (pthread_create(&p->th[s], NULL, stage_main, &p->st[s]) != 0) {
            threads_stop(p);
            return ct__error(CT_ENOMEM, "pipeline: cannot start stage %d's thread", s);
        }
        p->nth++;
    }
    return 0;
}

/* every stage's program on its thread; the first error */
static int run_threads(run *r)
{
    ct_pipeline *p = r->p;
    int rc = 0;
    if (!(r->done = calloc((size_t)p->n * r->m * 2, 1)))
        return ct__error(CT_ENOMEM, "pipeline: out of memory");
    pthread_mutex_lock(&p->mu);
    p->cur = r;
    p->finished = 0;
    p->gen++;
    pthread_cond_broadcast(&p->cv);
    while (p->finished < p->nth)
        pthread_cond_wait(&p->cv, &p->mu);
    p->cur = NULL;
    for (int s = 0; s < p->nth && rc == 0; s++)
        rc = p->st[s].rc;
    pthread_mutex_unlock(&p->mu);
    free(r->done);
    r->done = NULL;
    if (rc < 0) /* the message is the stage thread's */
        rc = ct__error(rc, "pipeline: a stage's thread failed (%s)", ct_strerror(rc));
    return rc;
}

static void release_cells(run *r)
{
    for (size_t i = 0; r->cells && i < (size_t)r->p->n * r->m; i++) {
        ct_tape_destroy(&r->cells[i].tape);
        ct_tensor_release(&r->cells[i].in);
        ct_tensor_release(&r->cells[i].out);
    }
}

int ct_pipeline_forward_backward(ct_pipeline *p, ct_tensor *input, ct_tensor *target,
                                 ct_pipe_loss_fn loss_fn, void *user, int micro_batches,
                                 ct_pipe_schedule schedule, float *loss)
{
    if (!p || !input || !target || !loss_fn)
        return ct__error(CT_EINVAL, "pipeline: NULL pipeline, input, target or loss");
    int64_t n = ct_tensor_ndim(input) > 0 ? ct_tensor_dim(input, 0) : 0;
    if (micro_batches < 1 || micro_batches > n)
        return ct__error(CT_EINVAL, "pipeline: %d micro-batches for a batch of %lld", micro_batches,
                         (long long)n);
    if (ct_tensor_ndim(target) < 1 || ct_tensor_dim(target, 0) != n)
        return ct__error(CT_EINVAL, "pipeline: target has %lld rows, input %lld",
                         (long long)(ct_tensor_ndim(target) ? ct_tensor_dim(target, 0) : 0),
                         (long long)n);
    ct_pipe_action *acts = NULL;
    int nact = 0, rc = ct_pipe_schedule_actions(schedule, p->n, micro_batches, &acts, &nact);
    if (rc < 0)
        return rc;
    run r = {.p = p,
             .input = input,
             .target = target,
             .loss_fn = loss_fn,
             .user = user,
             .m = micro_batches,
             .total = n};
    r.start = malloc((size_t)micro_batches * sizeof(*r.start));
    r.len = malloc((size_t)micro_batches * sizeof(*r.len));
    r.cells = calloc((size_t)p->n * micro_batches, sizeof(*r.cells));
    ct_tensor **losses = r.losses = calloc((size_t)micro_batches, sizeof(*losses));
    ct_tape *outer = ct_autograd_tape_detach(); /* the caller's recorded nodes, kept aside */
    if (!r.start || !r.len || !r.cells || !losses || !outer) {
        rc = ct__error(CT_ENOMEM, "pipeline: out of memory");
        goto out;
    }
    for (int i = 0, at = 0; i < micro_batches; i++) { /* torch.tensor_split's sizes */
        r.start[i] = at;
        r.len[i] = n / micro_batches + (i < n % micro_batches);
        at += (int)r.len[i];
    }
    r.acts = acts;
    r.nact = nact;
    if (p->nth > 0) {
        rc = run_threads(&r);
    } else {
        ct__wgrad_defer_begin();
        for (int i = 0; i < nact && rc == 0; i++)
            rc = act(&r, &acts[i]);
        int wrc = ct__wgrad_defer_end(rc == 0);
        rc = rc < 0 ? rc : wrc;
    }
    if (rc == 0 && loss) {
        double sum = 0.0;
        for (int i = 0; i < micro_batches; i++)
            sum += (double)ct_tensor_item(losses[i]) * (double)r.len[i] / (double)n;
        *loss = (float)sum;
    }
out:
    release_cells(&r);
    for (int i = 0; losses && i < micro_batches; i++)
        ct_tensor_release(&losses[i]);
    ct_autograd_clear_tape();
    if (outer)
        ct_autograd_tape_attach(&outer);
    free(losses);
    free(r.start);
    free(r.len);
    free(r.cells);
    free(acts);
    return rc;
}
