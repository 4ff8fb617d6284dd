/* trainer/pipeline/job.c — the driver's side of a job of pipelines of stage actors (stage.h):
 * one placement group of P x S bundles (SPREAD), the actors in it (bundle p * S + s is pipeline
 * p's stage s), their setup calls at once (the links and communicators meet in the rendezvous, so
 * every stage must be in setup together), then per step one "step" call on every actor, waited on
 * all at once so that the first failure (a dead stage) ends the step without waiting for the
 * stages blocked on it. ct__pipe_job_save gathers pipeline 0's stages' states into one checkpoint
 * (pipe_ckpt.c); ct__pipe_job_train is the loop of steps, checkpoints and retries (a dead stage
 * ends the whole job; the next starts from the last checkpoint). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/ct.h"
#include "stage.h"

struct ct__pipe_job {
    ct__pipe_job_opts o;
    ct_placement_group *pg;
    ct_actor **actors; /* [p * S + s] */
    int n;
    int64_t start_step;      /* the checkpoint's steps done */
    int64_t epoch_batches;   /* trainer mode: stage 0's loader's batches an epoch */
    uint64_t sent, received; /* p2p bytes, all stages, as of the last step */
};

void ct__pipe_job_p2p_bytes(const ct__pipe_job *j, uint64_t *sent, uint64_t *received)
{
    *sent = j ? j->sent : 0;
    *received = j ? j->received : 0;
}

int64_t ct__pipe_job_start_step(const ct__pipe_job *j)
{
    return j ? j->start_step : 0;
}

int64_t ct__pipe_job_epoch_batches(const ct__pipe_job *j)
{
    return j ? j->epoch_batches : 0;
}

ct_actor *ct__pipe_job_actor(ct__pipe_job *j, int p, int s)
{
    return j && p >= 0 && p < j->o.pipelines && s >= 0 && s < j->o.stages
               ? j->actors[p * j->o.stages + s]
               : NULL;
}

void ct__pipe_job_end(ct__pipe_job **jp)
{
    if (!jp || !*jp)
        return;
    ct__pipe_job *j = *jp;
    for (int i = 0; i < j->n; i++) {
        if (j->actors[i]) {
            ct_actor_kill(j->actors[i]);
            ct_actor_release(&j->actors[i]);
        }
    }
    if (j->pg)
        ct_placement_group_remove(&j->pg);
    free(j->actors);
    free(j);
    *jp = NULL;
}

/* calls method on every actor with the same args at once; the first failure; results (may be
 * NULL) get each reply of size bytes */
static int call_all(ct__pipe_job *j, const char *method, const void *args, size_t len,
                    void *results, size_t size, int timeout_ms)
{
    ct_future **fs = calloc((size_t)j->n, sizeof *fs);
    int rc = fs ? 0 : ct__error(CT_ENOMEM, "pipeline job: out of memory"), left = 0;
    for (int i = 0; i < j->n && rc == 0; i++, left++)
        rc = ct_actor_call_async(j->actors[i], method, args, len, &fs[i]);
    while (rc == 0 && left > 0) {
        int i = ct_future_wait_any(fs, j->n, timeout_ms);
        if (i < 0) {
            rc = ct__error(i, "pipeline job: %s: no reply within %d ms", method, timeout_ms);
            break;
        }
        void *r = NULL;
        size_t rl = 0;
        rc = ct_future_wait(fs[i], 0, &r, &rl);
        if (rc < 0)
            ct__error(rc, "pipeline job: %s on pipeline %d stage %d: %s", method, i / j->o.stages,
                      i % j->o.stages, ct_last_error());
        else if (results && rl == size)
            memcpy((char *)results + (size_t)i * size, r, size);
        else if (results)
            rc = ct__error(CT_EPROTO,
                           "pipeline job: %s on pipeline %d stage %d: a reply of %zu "
                           "bytes, not %zu",
                           method, i / j->o.stages, i % j->o.stages, rl, size);
        free(r);
        ct_future_destroy(&fs[i]);
        left--;
    }
    for (int i = 0; fs && i < j->n; i++)
        ct_future_destroy(&fs[i]);
    free(fs);
    return rc;
}

static int check_opts(const ct__pipe_job_opts *o)
{
    if (o->stages < 1 || o->stages > o->gpt.n_layer || o->pipelines < 1 || o->micro_batches < 1 ||
        o->micro_batches > o->batch || o->batch < 1)
        return ct__error(CT_EINVAL,
                         "pipeline job: %d stages (1..n_layer %d), %d pipelines, %d micro-batches "
                         "of a batch of %d (1..batch)",
                         o->stages, o->gpt.n_layer, o->pipelines, o->micro_batches, o->batch);
    if ((unsigned)o->schedule >= CT_PIPE_NSCHEDULES)
        return ct__error(CT_EINVAL, "pipeline job: schedule %d", (int)o->schedule);
    return 0;
}

int ct__pipe_job_start(const ct__pipe_job_opts *opts, const char *group, ct__pipe_job **out)
{
    if (!opts || !group || !out || strlen(group) >= sizeof(((ct__pipe_setup_args *)0)->group))
        return ct__error(CT_EINVAL, "pipeline job: NULL options, or a group name too long");
    *out = NULL;
    int rc = ct__pipe_register_stage_class(); /* links stage_actor.c into the program */
    if (rc == 0)
        rc = check_opts(opts);
    if (rc < 0)
        return rc;
    ct__pipe_job *j = calloc(1, sizeof *j);
    int n = opts->stages * opts->pipelines;
    if (!j || !(j->actors = calloc((size_t)n, sizeof *j->actors))) {
        free(j);
        return ct__error(CT_ENOMEM, "pipeline job: out of memory");
    }
    j->o = *opts;
    j->o.init_file = NULL;
    j->n = n;
    int timeout = opts->timeout_ms > 0 ? opts->timeout_ms : 120000;
    double cpus = opts->cpus_per_stage > 0 ? opts->cpus_per_stage : 1;
    ct_bundle *b = calloc((size_t)n, sizeof *b);
    if (!b) {
        ct__pipe_job_end(&j);
        return ct__error(CT_ENOMEM, "pipeline job: out of memory");
    }
    for (int i = 0; i < n; i++)
        b[i] = (ct_bundle){.cpu = cpus};
    rc = ct_placement_group_create(b, n, CT_SPREAD, &j->pg);
    free(b);
    if (rc == 0 && (rc = ct_placement_group_wait(j->pg, timeout)) < 0)
        ct__error(rc, "pipeline job: %d bundles of %g CPU did not fit within %d ms", n, cpus,
                  timeout);
    for (int i = 0; i < n && rc == 0; i++)
        rc = ct_actor_create(
            CT__PIPE_STAGE_CLASS,
            &(ct_resources){.cpu = cpus, .pg = j->pg, .bundle = i, .timeout_ms = timeout}, NULL, 0,
            &j->actors[i]);
    /* setup: every actor at once (they meet each other); each its own stage and pipeline */
    size_t flen = opts->init_file ? strlen(opts->init_file) + 1 : 0;
    size_t alen = sizeof(ct__pipe_setup_args) + flen;
    ct__pipe_setup_args *a = rc == 0 ? calloc(1, alen) : NULL;
    ct_future **fs = rc == 0 ? calloc((size_t)n, sizeof *fs) : NULL;
    if (rc == 0 && (!a || !fs))
        rc = ct__error(CT_ENOMEM, "pipeline job: out of memory");
    for (int i = 0; i < n && rc == 0; i++) {
        a->o = j->o;
        a->o.spec = NULL;
        a->o.ckpt = NULL;
        a->trainer = opts->spec != NULL;
        if (opts->spec)
            a->spec = *opts->spec;
        a->has_ckpt = opts->ckpt != NULL;
        if (opts->ckpt)
            a->ckpt = *opts->ckpt;
        a->stage = i % opts->stages;
        a->pipeline = i / opts->stages;
        snprintf(a->group, sizeof a->group, "%s", group);
        if (flen)
            memcpy(a + 1, opts->init_file, flen);
        rc = ct_actor_call_async(j->actors[i], "setup", a, alen, &fs[i]);
    }
    for (int left = n; rc == 0 && left > 0; left--) {
        int i = ct_future_wait_any(fs, n, timeout + 10000);
        if (i < 0) {
            rc = ct__error(i, "pipeline job: setup: no reply");
            break;
        }
        void *r = NULL;
        size_t rl = 0;
        if ((rc = ct_future_wait(fs[i], 0, &r, &rl)) < 0)
            ct__error(rc, "pipeline job: setup of pipeline %d stage %d: %s", i / opts->stages,
                      i % opts->stages, ct_last_error());
        else if (i == 0 && rl == 2 * sizeof(int64_t)) { /* stage 0 of pipeline 0 */
            memcpy(&j->start_step, r, sizeof j->start_step);
            memcpy(&j->epoch_batches, (char *)r + sizeof(int64_t), sizeof j->epoch_batches);
        }
        free(r);
        ct_future_destroy(&fs[i]);
    }
    for (int i = 0; fs && i < n; i++)
        ct_future_destroy(&fs[i]);
    free(fs);
    free(a);
    if (rc < 0) { /* ending the job (kills) must not take the failure's message */
        char why[600];
        snprintf(why, sizeof why, "%s", ct_last_error());
        ct__pipe_job_end(&j);
        return ct__error(rc, "%s", why);
    }
    *out = j;
    return 0;
}

/* method on every stage (args alike, timeout_ms as call_all's); last[0..P) gets each pipeline's
 * last stage's reply, j the p2p byte counts of all stages */
static int call_stages(ct__pipe_job *j, const char *method, const void *args, size_t len,
                       int timeout_ms, ct__pipe_reply *last)
{
    if (!j)
        return ct__error(CT_EINVAL, "pipeline job: NULL job");
    ct__pipe_reply *r = calloc((size_t)j->n, sizeof *r);
    if (!r)
        return ct__error(CT_ENOMEM, "pipeline job: out of memory");
    int rc = call_all(j, method, args, len, r, sizeof *r, timeout_ms);
    if (rc == 0) {
        j->sent = j->received = 0;
        for (int i = 0; i < j->n; i++) {
            j->sent += r[i].sent;
            j->received += r[i].received;
        }
        for (int p = 0; p < j->o.pipelines; p++)
            last[p] = r[p * j->o.stages + j->o.stages - 1];
    }
    free(r);
    return rc;
}

/* a call on every stage with the pipelines' sums: loss_sum, samples, correct (each may be
 * NULL) */
static int call_summed(ct__pipe_job *j, const char *method, const void *args, size_t len,
                       int timeout_ms, double *loss_sum, int64_t *samples, int64_t *correct)
{
    ct__pipe_reply *last = j ? calloc((size_t)j->o.pipelines, sizeof *last) : NULL;
    if (j && !last)
        return ct__error(CT_ENOMEM, "pipeline job: out of memory");
    int rc = call_stages(j, method, args, len, timeout_ms, last);
    ct__pipe_reply sum = {0};
    for (int p = 0; rc == 0 && p < j->o.pipelines; p++) {
        sum.loss_sum += last[p].loss_sum;
        sum.samples += last[p].samples;
        sum.correct += last[p].correct;
    }
    if (rc == 0 && loss_sum)
        *loss_sum = sum.loss_sum;
    if (rc == 0 && samples)
        *samples = sum.samples;
    if (rc == 0 && correct)
        *correct = sum.correct;
    free(last);
    return rc;
}

int ct__pipe_job_step(ct__pipe_job *j, int64_t step, double *loss)
{
    ct__pipe_reply *last = j ? calloc((size_t)j->o.pipelines, sizeof *last) : NULL;
    if (j && !last)
        return ct__error(CT_ENOMEM, "pipeline job: out of memory");
    int timeout = j && j->o.timeout_ms > 0 ? j->o.timeout_ms : 120000;
    int rc = call_stages(j, "step", &step, sizeof step, timeout + 10000, last);
    double sum = 0; /* the mean over the pipelines of each one's batch loss */
    for (int p = 0; rc == 0 && p < j->o.pipelines; p++)
        sum += last[p].samples > 0 ? last[p].loss_sum / (double)last[p].samples : 0.0;
    if (rc == 0 && loss)
        *loss = sum / j->o.pipelines;
    free(last);
    return rc;
}

int ct__pipe_job_epoch(ct__pipe_job *j, const ct__pipe_epoch_args *ea, double *loss_sum,
                       int64_t *samples)
{
    /* no limit on the whole segment: each of its receives waits at most opts.timeout_ms on a
     * peer, and a dead stage's links close at once */
    return call_summed(j, "epoch", ea, sizeof *ea, -1, loss_sum, samples, NULL);
}

int ct__pipe_job_validate(ct__pipe_job *j, double *loss_sum, int64_t *correct, int64_t *total)
{
    return call_summed(j, "validate", NULL, 0, -1, loss_sum, total, correct);
}

/* pipeline 0's stages' "state" replies into (*r)[0..S), (*rl)[0..S) (the pipelines' agree);
 * free them with free_states */
static int states(ct__pipe_job *j, void ***r, size_t **rl)
{
    int S = j->o.stages, rc = 0;
    *r = calloc((size_t)S, sizeof **r);
    *rl = calloc((size_t)S, sizeof **rl);
    if (!*r || !*rl)
        rc = ct__error(CT_ENOMEM, "pipeline job: out of memory");
    for (int s = 0; s < S && rc == 0; s++)
        if ((rc = ct_actor_call(j->actors[s], "state", NULL, 0, &(*r)[s], &(*rl)[s], 60000)) < 0)
            ct__error(rc, "pipeline job: the state of stage %d: %s", s, ct_last_error());
    return rc;
}

static void free_states(ct__pipe_job *j, void **r, size_t *rl)
{
    for (int s = 0; r && s < j->o.stages; s++)
        free(r[s]);
    free(r);
    free(rl);
}

int ct__pipe_job_gather(ct__pipe_job *j, ct_module *whole, ct_optim *opt)
{
    if (!j || !whole || !opt)
        return ct__error(CT_EINVAL, "pipeline job: NULL job, model or optimizer");
    void **r = NULL;
    size_t *rl = NULL;
    int rc = states(j, &r, &rl);
    if (rc == 0)
        rc = ct__pipe_gather(whole, opt, r, rl, j->o.stages);
    free_states(j, r, rl);
    return rc;
}

int ct__pipe_job_save(ct__pipe_job *j, int64_t step, const char *path)
{
    if (!j || !path)
        return ct__error(CT_EINVAL, "pipeline job: NULL job or path");
    void **r = NULL;
    size_t *rl = NULL;
    int rc = states(j, &r, &rl);
    if (rc == 0)
        rc = ct__pipe_ckpt_save(&j->o, r, rl, step, path);
    free_states(j, r, rl);
    return rc;
}

int ct__pipe_job_train(const ct__pipe_job_opts *opts, const char *group, int64_t steps,
                       int64_t ckpt_every, const char *ckpt_path, int max_retries,
                       ct__pipe_step_hook before_step, void *user, double *losses, int *retries)
{
    if (!opts || !group || !ckpt_path || ckpt_every < 1 || steps < 0 || !losses)
        return ct__error(CT_EINVAL, "pipeline train: bad arguments");
    ct__pipe_job_opts o = *opts;
    ct__pipe_job *j = NULL;
    bool have_ckpt = false;
    int rc = 0, tries = 0;
    int64_t step = 0;
    while (step < steps) {
        if (!j) { /* a new job: from the last checkpoint, or opts' start */
            char g[96];
            snprintf(g, sizeof g, "%s-try%d", group, tries);
            o.init_file = have_ckpt ? ckpt_path : opts->init_file;
            if ((rc = ct__pipe_job_start(&o, g, &j)) == 0) {
                step = ct__pipe_job_start_step(j);
                continue;
            }
        } else {
            if (before_step)
                before_step(j, step, tries, user);
            if ((rc = ct__pipe_job_step(j, step, &losses[step])) == 0) {
                step++;
                bool due = step % ckpt_every == 0 || step == steps;
                if (due && (rc = ct__pipe_job_save(j, step, ckpt_path)) == 0)
                    have_ckpt = true;
                if (rc == 0)
                    continue;
            }
        }
        /* a failure: a dead stage is a dead pipeline, all of its stages go */
        char why[512];
        snprintf(why, sizeof why, "%s", ct_last_error());
        ct__pipe_job_end(&j);
        if (tries == max_retries) {
            rc = ct__error(rc, "pipeline train: %d retries spent; the last failure: %s",
                           max_retries, why);
            break;
        }
        ct__log(CT_LOG_WARN, "pipeline", "step %lld failed (%s: %s); retry %d from %s",
                (long long)step, ct_strerror(rc), why, tries + 1,
                have_ckpt ? ckpt_path : "the start");
        tries++;
        rc = 0;
    }
    ct__pipe_job_end(&j);
    if (retries)
        *retries = tries;
    return rc;
}
