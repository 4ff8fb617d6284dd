/* trainer/train/trainer.c — the trainer's driver side: trainer_create (options, a check-run of
 * every creator), the replica group (actors created where resources fit, a fresh rendezvous
 * group id per attempt), the epoch loop with checkpoints adopted from the object store, the
 * recovery protocol (end the group, wait for the head to report the deaths, start as many
 * replicas as fit from the last checkpoint, back off when none fits, grow back at epoch
 * boundaries, count retries), validation, save / restore.
 * Not here: the replica's training step (replica.c), the checkpoint bytes (ckpt.c), the run log
 * (progress.c; called at a few points: start / stop, each epoch and validation, polls). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/common.h"
#include "internal.h"

struct trainer {
    tr_spec spec;
    int num_replicas;
    double cpus;
    ct_strategy placement;
    tr_state local; /* the driver's model, optimizer, scheduler: the last checkpoint's state */
    /* the running group */
    ct_actor **actors;
    int world;
    int groups;       /* groups started so far (group ids) */
    bool group_fresh; /* no epoch completed yet by this group */
    /* the newest complete checkpoint */
    bool has_ckpt;
    ct_object_id ckpt;
    trainer_stats stats;
    char last_failure[600];
    char group[64];        /* the running group's id */
    tr_progress *progress; /* the run log (progress.c); NULL: none asked for */
};

static int copy_name(char *dst, const char *src, const char *field, tr_kind kind, bool required)
{
    if (!src || !*src) {
        if (required)
            return ct__error(CT_EINVAL,
                             "trainer_create: opts.%s is required (a registered %s "
                             "name)",
                             field, ct__trainer_kind_name(kind));
        dst[0] = 0;
        return 0;
    }
    if (strlen(src) >= TR_NAME_MAX)
        return ct__error(CT_EINVAL, "trainer_create: opts.%s \"%s\" longer than %d bytes", field,
                         src, TR_NAME_MAX - 1);
    if (!ct__trainer_lookup(kind, src))
        return ct__error(CT_ENOENT, "trainer_create: opts.%s: no %s named \"%s\" is registered",
                         field, ct__trainer_kind_name(kind), src);
    snprintf(dst, TR_NAME_MAX, "%s", src);
    return 0;
}

int trainer_create(const trainer_opts *o, trainer **out)
{
    trainer *t = NULL;
    trainer_ctx ctx;
    bool ctx_ok = false;
    int rc;
    if (out)
        *out = NULL;
    if (!o || !out)
        return ct__error(CT_EINVAL, "trainer_create: %s is NULL", !o ? "opts" : "out");
    ct__trainer_register_replica_class();
    if (o->use_gpu)
        return ct__error(CT_ENOSYS, "trainer_create: opts.use_gpu: the engine has no CUDA "
                                    "backend yet (CPU replicas only)");
    if (o->num_replicas < 0 || o->num_replicas > 1024)
        return ct__error(CT_EINVAL, "trainer_create: opts.num_replicas %d not in [0, 1024]",
                         o->num_replicas);
    if (o->batch_size < 0 || o->epochs < 0 || o->cpus_per_replica < 0 || o->bucket_mb < 0 ||
        o->comm_timeout_ms < 0 || o->accumulate < 0)
        return ct__error(CT_EINVAL, "trainer_create: opts.%s is negative",
                         o->batch_size < 0         ? "batch_size"
                         : o->epochs < 0           ? "epochs"
                         : o->cpus_per_replica < 0 ? "cpus_per_replica"
                         : o->bucket_mb < 0        ? "bucket_mb"
                         : o->accumulate < 0       ? "accumulate"
                                                   : "comm_timeout_ms");
    if (o->config && strlen(o->config) >= TR_CONFIG_MAX)
        return ct__error(CT_EINVAL, "trainer_create: opts.config longer than %d bytes",
                         TR_CONFIG_MAX - 1);
    if (!(t = calloc(1, sizeof *t)))
        return ct__error(CT_ENOMEM, "trainer_create: out of memory");
    tr_spec *s = &t->spec;
    if ((rc = copy_name(s->model, o->model, "model", TR_MODEL, true)) < 0 ||
        (rc = copy_name(s->data, o->data, "data", TR_DATA, true)) < 0 ||
        (rc = copy_name(s->optimizer, o->optimizer, "optimizer", TR_OPTIM, true)) < 0 ||
        (rc = copy_name(s->loss, o->loss ? o->loss : "cross_entropy", "loss", TR_LOSS, true)) < 0 ||
        (rc = copy_name(s->scheduler, o->scheduler, "scheduler", TR_SCHED, false)) < 0 ||
        (rc = copy_name(s->hook, o->initialization_hook, "initialization_hook", TR_HOOK, false)) <
            0 ||
        (rc = copy_name(s->train_step, o->train_step, "train_step", TR_TRAIN_STEP, false)) < 0 ||
        (rc = copy_name(s->validate_step, o->validate_step, "validate_step", TR_VAL_STEP, false)) <
            0)
        goto fail;
    snprintf(s->config, sizeof s->config, "%s", o->config ? o->config : "");
    s->seed = o->seed;
    s->batch = o->batch_size ? o->batch_size : 64;
    s->epochs = o->epochs ? o->epochs : 1;
    s->bucket_mb = o->bucket_mb ? o->bucket_mb : 25;
    t->cpus = o->cpus_per_replica > 0 ? o->cpus_per_replica : 1;
    s->threads = (int)t->cpus > 0 ? (int)t->cpus : 1;
    s->comm_timeout_ms = o->comm_timeout_ms ? o->comm_timeout_ms : 60000;
    s->accumulate = o->accumulate > 1 ? o->accumulate : 1;
    if (!o->scheduler_step || !strcmp(o->scheduler_step, "epoch")) {
        s->sched_every = TR_SCHED_EPOCH;
    } else if (!strcmp(o->scheduler_step, "batch")) {
        s->sched_every = TR_SCHED_BATCH;
    } else if (!strcmp(o->scheduler_step, "manual")) {
        s->sched_every = TR_SCHED_MANUAL;
    } else {
        rc = ct__error(CT_EINVAL,
                       "trainer_create: opts.scheduler_step \"%s\": not \"epoch\", \"batch\" "
                       "or \"manual\"",
                       o->scheduler_step);
        goto fail;
    }
    t->num_replicas = o->num_replicas ? o->num_replicas : 1;
    t->placement = o->placement;
    /* the check-run: every creator once, here, before anything is started */
    if ((rc = ct__trainer_ctx_init(&ctx, s->config, 0, 1, s->seed, 0, s->epochs, true)) < 0)
        goto fail;
    ctx_ok = true;
    if ((rc = ct__trainer_state_build(s, &ctx, true, &t->local)) < 0)
        goto fail;
    if ((rc = ct__trainer_ctx_check(&ctx, true)) < 0)
        goto fail;
    /* the driver keeps model, optimizer and scheduler, not the data */
    ct_dataset_destroy(&t->local.data.train);
    ct_dataset_destroy(&t->local.data.val);
    for (int i = 0; i < 4; i++)
        ct_dataset_destroy(&t->local.data.keep[i]);
    t->local.has_data = false;
    ct__trainer_ctx_free(&ctx);
    t->stats.replicas = 0;
    *out = t;
    return 0;
fail:
    if (ctx_ok)
        ct__trainer_ctx_free(&ctx);
    ct__trainer_state_free(&t->local);
    free(t);
    return rc;
}

/* ---- the group ---- */

/* Describes the death of actor a from its event. */
static void describe_death(char *buf, size_t cap, int rank, const ct_actor *a, const ct_event *ev)
{
    char how[200];
    if (!ev)
        snprintf(how, sizeof how, "died (no death event from the head yet)");
    else if (ev->term_signal)
        snprintf(how, sizeof how, "killed by signal %d (%s)%s%s", ev->term_signal,
                 strsignal(ev->term_signal),
                 ev->reason[0] && !strstr(ev->reason, "signal") ? ": " : "",
                 ev->reason[0] && !strstr(ev->reason, "signal") ? ev->reason : "");
    else if (strstr(ev->reason, "node") && strstr(ev->reason, "dead"))
        snprintf(how, sizeof how, "was lost with its node (%s)", ev->reason);
    else
        snprintf(how, sizeof how, "exited with status %d%s%s", ev->exit_status,
                 ev->reason[0] ? ": " : "", ev->reason);
    snprintf(buf, cap, "replica %d (actor %s, pid %d, node %s) %s", rank, ct_actor_id(a),
             ct_actor_pid(a), ct_actor_node(a), how);
}

/* Waits up to timeout_ms for the head's death events of every actor of the group (so that their
 * resources are free again); fills evs[i] / got[i] for the ones seen. */
static void wait_deaths(trainer *t, ct_event *evs, bool *got, int timeout_ms)
{
    int64_t until = ct__now_ms() + timeout_ms;
    for (;;) {
        int left = 0;
        for (int i = 0; i < t->world; i++)
            left += !got[i];
        int64_t now = ct__now_ms();
        if (!left || now >= until)
            return;
        ct_event ev;
        if (ct_events_next(&ev, (int)(until - now)) < 0)
            return;
        if (ev.type != CT_EVENT_ACTOR_DEAD)
            continue;
        for (int i = 0; i < t->world; i++)
            if (!got[i] && !strcmp(ev.actor_id, ct_actor_id(t->actors[i]))) {
                evs[i] = ev;
                got[i] = true;
            }
    }
}

/* Ends the group: kills every replica, waits for the head to report them dead (resources free
 * again), releases the handles. With why != NULL, writes what failed: the first replica that
 * died by itself, else failed_rank's error (msg). */
static void end_group(trainer *t, char *why, size_t cap, int failed_rank, int failed_rc,
                      const char *msg)
{
    if (!t->actors)
        return;
    bool *dead_before = calloc((size_t)t->world, sizeof *dead_before);
    bool *got = calloc((size_t)t->world, sizeof *got);
    ct_event *evs = calloc((size_t)t->world, sizeof *evs);
    for (int i = 0; i < t->world; i++) {
        if (dead_before)
            dead_before[i] = ct_actor_is_dead(t->actors[i]);
        ct_actor_kill(t->actors[i]);
    }
    int64_t t0 = ct__now_ns();
    if (got && evs)
        wait_deaths(t, evs, got, 10000);
    CT_LOG(CT_LOG_DEBUG, "trainer", "group ended: deaths reported in %.1f ms",
           (ct__now_ns() - t0) / 1e6);
    if (why) {
        int first = -1;
        for (int i = 0; i < t->world && first < 0; i++)
            if (dead_before && dead_before[i])
                first = i;
        if (first >= 0)
            describe_death(why, cap, first, t->actors[first],
                           got && got[first] ? &evs[first] : NULL);
        else if (failed_rank >= 0)
            snprintf(why, cap, "replica %d (actor %s, pid %d, node %s) failed: %s: %s", failed_rank,
                     ct_actor_id(t->actors[failed_rank]), ct_actor_pid(t->actors[failed_rank]),
                     ct_actor_node(t->actors[failed_rank]), ct_strerror(failed_rc),
                     msg && *msg ? msg : "no message");
        else
            snprintf(why, cap, "%s", msg && *msg ? msg : "group failed");
    }
    for (int i = 0; i < t->world; i++)
        ct_actor_release(&t->actors[i]);
    free(t->actors);
    t->actors = NULL;
    t->world = 0;
    t->stats.replicas = 0;
    free(dead_before);
    free(got);
    free(evs);
}

/* How many replicas fit in the free resources now (at most num_replicas). */
static int replicas_that_fit(trainer *t, int *out)
{
    double total = 0, free_cpu = 0;
    int rc = ct_cluster_resources("CPU", &total, &free_cpu);
    if (rc < 0)
        return rc;
    int n = (int)floor(free_cpu / t->cpus + 1e-9);
    *out = n < t->num_replicas ? n : t->num_replicas;
    return 0;
}

/* Calls method on every replica at once with per-rank args (args + i * stride); results[i]
 * get the replies (malloc'd). On failure returns the first error and *failed its rank; once a
 * call has failed the others get at most 3 s more (a replica that hangs outside a collective
 * must not hang the driver). */
#define FAIL_GRACE_MS 1500
#define PROGRESS_POLL_MS 100 /* reads the replicas' step records this often (progress.c) */

static int call_all(trainer *t, const char *method, const void *args, size_t len, size_t stride,
                    void **results, int *failed, char *msg, size_t msgcap)
{
    ct_future **f = calloc((size_t)t->world, sizeof *f);
    int rc = f ? 0 : CT_ENOMEM;
    *failed = -1;
    for (int i = 0; i < t->world && rc == 0; i++) {
        const void *a = args ? (const char *)args + (size_t)i * stride : NULL;
        rc = ct_actor_call_async(t->actors[i], method, a, len, &f[i]);
        if (rc < 0) {
            *failed = i;
            snprintf(msg, msgcap, "%s", ct_last_error());
        }
    }
    /* Completion order: the first failure ends the wait (a live replica blocked in a
     * collective with a dead one may not return for the communicator's whole timeout). After
     * it, up to FAIL_GRACE_MS more for a dead replica's report, which explains the others'
     * collective errors (a dead node's replicas are reported about a second after its death). */
    int64_t grace_until = 0;
    for (int left = f ? t->world : 0; left > 0;) {
        int wait_ms = t->progress ? PROGRESS_POLL_MS : -1;
        if (rc < 0) {
            int64_t now = ct__now_ms();
            if (!grace_until)
                grace_until = now + FAIL_GRACE_MS;
            if (now >= grace_until || (*failed >= 0 && ct_actor_is_dead(t->actors[*failed])))
                break;
            wait_ms = (int)(grace_until - now);
        }
        int i = ct_future_wait_any(f, t->world, wait_ms);
        if (i == CT_ETIMEDOUT && rc == 0 && t->progress) { /* the step records meanwhile */
            ct__progress_poll(t->progress);
            continue;
        }
        if (i < 0)
            break; /* grace over */
        int w = ct_future_wait(f[i], -1, results ? &results[i] : NULL, NULL);
        ct_future_destroy(&f[i]);
        left--;
        if (w < 0 && (rc == 0 || (ct_actor_is_dead(t->actors[i]) && *failed >= 0 &&
                                  !ct_actor_is_dead(t->actors[*failed])))) {
            if (rc == 0)
                rc = w;
            *failed = i;
            snprintf(msg, msgcap, "%s", ct_last_error());
        }
    }
    for (int i = 0; f && i < t->world; i++)
        ct_future_destroy(&f[i]);
    free(f);
    return rc;
}

/* Starts n replicas from the newest checkpoint (or the creators' initial state) and waits for
 * the group to be set up. On failure the group is ended and why says what failed. */
static int start_group(trainer *t, int n, int timeout_ms, char *why, size_t cap)
{
    int rc, failed = -1;
    char msg[600] = "";
    tr_setup_args *sa = NULL;
    t->stats.group_start_ns = ct__now_ns();
    t->stats.group_first_step_ns = 0;
    if (!(t->actors = calloc((size_t)n, sizeof *t->actors)))
        return ct__error(CT_ENOMEM, "trainer: out of memory");
    t->world = n;
    ct_resources res = {.cpu = t->cpus, .strategy = t->placement, .timeout_ms = timeout_ms};
    int64_t t0 = ct__now_ns();
    rc = ct_actor_create_many(TR_REPLICA_CLASS, &res, &t->spec, sizeof t->spec, n, t->actors);
    int64_t t1 = ct__now_ns();
    if (rc < 0) {
        snprintf(msg, sizeof msg, "starting %d replicas: %s: %s", n, ct_strerror(rc),
                 ct_last_error());
        goto fail;
    }
    if (!(sa = calloc((size_t)n, sizeof *sa))) {
        rc = CT_ENOMEM;
        goto fail;
    }
    char group[64];
    snprintf(group, sizeof group, "g%d-%d-%lld", (int)getpid(), ++t->groups,
             (long long)(ct__now_ns() / 1000));
    for (int i = 0; i < n; i++) {
        sa[i].rank = i;
        sa[i].world = n;
        memcpy(sa[i].group, group, sizeof group);
        sa[i].start_epoch = t->local.epoch;
        sa[i].has_ckpt = t->has_ckpt;
        sa[i].ckpt = t->ckpt;
        snprintf(sa[i].driver_node, sizeof sa[i].driver_node, "%s", ct_object_node());
    }
    if ((rc = call_all(t, "setup", sa, sizeof *sa, sizeof *sa, NULL, &failed, msg, sizeof msg)) < 0)
        goto fail;
    free(sa);
    memcpy(t->group, group, sizeof group);
    t->group_fresh = true;
    t->stats.replicas = n;
    CT_LOG(CT_LOG_INFO, "trainer",
           "group %s: %d replicas from epoch %lld (%s): created in %.1f ms, set up in %.1f ms",
           group, n, (long long)t->local.epoch, t->has_ckpt ? "checkpoint" : "initial state",
           (t1 - t0) / 1e6, (ct__now_ns() - t1) / 1e6);
    return 0;
fail:
    free(sa);
    if (t->actors) {
        end_group(t, why, cap, failed, rc, msg);
    }
    if (why && !why[0])
        snprintf(why, cap, "%s", msg);
    return rc < 0 ? rc : CT_EINVAL;
}

/* Makes the newest checkpoint id the current one: pulls it to the driver's node, loads it into
 * the driver's state, then frees the previous one (never before the new one is complete). */
static int adopt_checkpoint(trainer *t, const ct_object_id *id)
{
    ct_object_view v = {0};
    int rc = ct_get(id, 30000, &v);
    if (rc < 0)
        return ct__trainer_error_prefix(rc, "trainer: fetching the new checkpoint");
    rc = ct__ckpt_load(&t->local, &t->spec, v.data, v.size);
    ct_object_release(&v);
    if (rc < 0)
        return rc;
    if (t->has_ckpt)
        ct_free(&t->ckpt);
    t->ckpt = *id;
    t->has_ckpt = true;
    return 0;
}

/* Restores the driver's state to the current checkpoint (after a group failed mid-epoch with
 * checkpoints off, or to undo nothing: the state is already the checkpoint's). */
static int rewind_to_checkpoint(trainer *t)
{
    if (!t->has_ckpt) { /* replicas start over from the creators' state, as the driver's own */
        t->local.epoch = 0;
        t->local.step = 0;
        return 0;
    }
    ct_object_view v = {0};
    int rc = ct_get(&t->ckpt, 30000, &v);
    if (rc < 0)
        return rc;
    rc = ct__ckpt_load(&t->local, &t->spec, v.data, v.size);
    ct_object_release(&v);
    return rc;
}

static int run_validation(trainer *t, char *why, size_t cap)
{
    int failed, rc, world = t->world;
    void **res = calloc((size_t)world, sizeof *res);
    char msg[600] = "";
    if (!res)
        return CT_ENOMEM;
    rc = call_all(t, "validate", NULL, 0, 0, res, &failed, msg, sizeof msg);
    if (rc == 0) {
        double loss = 0;
        int64_t correct = 0, total = 0;
        tr_metrics m = {0};
        for (int i = 0; i < t->world; i++) {
            tr_val_report *r = res[i];
            loss += r->loss_sum;
            correct += r->correct;
            total += r->total;
            ct__trainer_metrics_add(&m, &r->metrics);
        }
        ct__trainer_metrics_out(&m, t->stats.val_metrics, &t->stats.val_nmetrics);
        t->stats.val_loss = total ? loss / (double)total : 0;
        t->stats.val_accuracy = total ? (double)correct / (double)total : 0;
        t->stats.val_samples = total;
        ct__progress_val(t->progress, &t->stats);
    } else {
        end_group(t, why, cap, failed, rc, msg);
    }
    for (int i = 0; i < world; i++)
        free(res[i]);
    free(res);
    return rc;
}

/* One epoch on the group; on success the stats and (if asked) the checkpoint are updated. */
static int run_epoch(trainer *t, int64_t epoch, bool checkpoint, char *why, size_t cap)
{
    tr_epoch_args *ea = calloc((size_t)t->world, sizeof *ea);
    void **res = calloc((size_t)t->world, sizeof *res);
    int failed = -1, rc, world = t->world;
    char msg[600] = "";
    if (!ea || !res) {
        free(ea);
        free(res);
        return CT_ENOMEM;
    }
    ct__progress_epoch_start(t->progress, t->group, t->world, epoch);
    for (int i = 0; i < t->world; i++)
        ea[i] = (tr_epoch_args){.epoch = epoch,
                                .checkpoint = checkpoint,
                                .report_ms = ct__progress_report_ms(t->progress)};
    rc = call_all(t, "train_epoch", ea, sizeof *ea, sizeof *ea, res, &failed, msg, sizeof msg);
    if (rc < 0) {
        t->stats.failure_seen_ns = ct__now_ns();
        end_group(t, why, cap, failed, rc, msg);
        goto out;
    }
    double loss = 0, slowest = 0;
    int64_t samples = 0, first_step = 0;
    bool agree = true;
    tr_metrics m = {0};
    for (int i = 0; i < t->world; i++) {
        tr_report *r = res[i];
        ct__trainer_metrics_add(&m, &r->metrics);
        loss += r->loss_sum;
        samples += r->samples;
        slowest = r->seconds > slowest ? r->seconds : slowest;
        first_step = r->first_step_ns > first_step ? r->first_step_ns : first_step;
        agree &= r->weights_hash == ((tr_report *)res[0])->weights_hash;
    }
    tr_report *r0 = res[0];
    if (t->group_fresh)
        t->stats.group_first_step_ns = first_step;
    t->group_fresh = false;
    t->stats.train_loss = samples ? loss / (double)samples : 0;
    t->stats.samples_per_s = slowest > 0 ? (double)samples / slowest : 0;
    t->stats.epoch_seconds = slowest;
    t->stats.weights_agree = agree;
    ct__trainer_metrics_out(&m, t->stats.metrics, &t->stats.nmetrics);
    if (r0->has_ckpt) {
        if ((rc = adopt_checkpoint(t, &r0->ckpt)) < 0) {
            snprintf(why, cap, "adopting the checkpoint of epoch %lld: %s", (long long)epoch + 1,
                     ct_last_error());
            end_group(t, NULL, 0, -1, rc, NULL);
            goto out;
        }
    } else {
        t->local.epoch = epoch + 1; /* the driver's model lags (no checkpoint) */
        t->local.step += r0->steps;
    }
    t->stats.epoch = epoch + 1;
    t->stats.steps = t->local.step;
    ct__progress_epoch(t->progress, &t->stats);
    if (!agree)
        CT_LOG(CT_LOG_WARN, "trainer", "replicas' weights differ after epoch %lld",
               (long long)epoch + 1);
out:
    for (int i = 0; i < world; i++)
        free(res[i]);
    free(res);
    free(ea);
    return rc;
}

/* Sleep before the k-th consecutive attempt to start a group (k >= 1). */
static void backoff(const trainer_train_opts *o, int k)
{
    double base = o->backoff_base_ms > 0 ? o->backoff_base_ms : 100;
    double factor = o->backoff_factor > 0 ? o->backoff_factor : 2;
    double cap = o->backoff_cap_ms > 0 ? o->backoff_cap_ms : 5000;
    double jitter = o->backoff_jitter == 0 && !signbit(o->backoff_jitter) ? 0.1 : o->backoff_jitter;
    double ms = base * pow(factor, k - 1);
    if (ms > cap)
        ms = cap;
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = 0x80000000u;
    ms *= 1 + jitter * (2.0 * r / 4294967296.0 - 1);
    if (ms > 0)
        usleep((useconds_t)(ms * 1000));
}

/* A failure: spends a retry. Returns 0 to go on, CT_ERETRY when they are spent. */
static int spend_retry(trainer *t, int max_retries, const char *why)
{
    snprintf(t->last_failure, sizeof t->last_failure, "%s", why);
    if (t->stats.retries_used >= max_retries)
        return ct__error(CT_ERETRY, "trainer: failure with all %d retr%s used; it was: %s",
                         max_retries, max_retries == 1 ? "y" : "ies", why);
    t->stats.retries_used++;
    CT_LOG(CT_LOG_WARN, "trainer", "failure %d of %d allowed: %s", t->stats.retries_used,
           max_retries, why);
    return 0;
}

/* Starts a group of as many replicas as fit, backing off while none does. Each failed start
 * spends a retry. */
static int ensure_group(trainer *t, const trainer_train_opts *o, int max_retries)
{
    int attempt = 0, rc;
    char why[600];
    while (!t->actors) {
        int n = 0;
        why[0] = 0;
        if ((rc = replicas_that_fit(t, &n)) < 0)
            return rc;
        if (n > 0) {
            rc = start_group(t, n, o->create_timeout_ms > 0 ? o->create_timeout_ms : 30000, why,
                             sizeof why);
            if (rc == 0)
                return 0;
        } else {
            snprintf(why, sizeof why,
                     "no resources for a replica (%.3g CPU each): every CPU of the cluster is "
                     "taken or its nodes are gone",
                     t->cpus);
        }
        if ((rc = spend_retry(t, max_retries, why)) < 0)
            return rc;
        backoff(o, ++attempt);
    }
    return 0;
}

int trainer_train_with(trainer *t, const trainer_train_opts *o)
{
    static const trainer_train_opts defaults;
    if (!t)
        return ct__error(CT_EINVAL, "trainer_train: t is NULL");
    if (!o)
        o = &defaults;
    if (o->max_retries < 0)
        return ct__error(CT_EINVAL, "trainer_train: max_retries %d < 0", o->max_retries);
    if (o->checkpoint != TRAINER_CHECKPOINT_AUTO && o->checkpoint != TRAINER_CHECKPOINT_NONE)
        return ct__error(CT_EINVAL, "trainer_train: checkpoint %d is neither AUTO nor NONE",
                         o->checkpoint);
    int64_t epochs = o->epochs > 0 ? o->epochs : t->spec.epochs;
    int max_retries = t->stats.retries_used + o->max_retries; /* per call */
    int rc = ct__progress_start(&t->progress, o, epochs);
    char why[600];
    if (rc < 0)
        return rc;
    t->stats.train_start_ns = ct__now_ns();
    while (t->local.epoch < epochs) {
        /* at an epoch boundary with fewer replicas than asked: grow back when they fit now */
        if (t->actors && t->world < t->num_replicas && !t->group_fresh &&
            (o->checkpoint == TRAINER_CHECKPOINT_AUTO)) {
            int n = 0;
            if (replicas_that_fit(t, &n) == 0 && n >= 1) {
                CT_LOG(CT_LOG_INFO, "trainer", "growing the group: %d replicas fit more", n);
                end_group(t, NULL, 0, -1, 0, NULL);
            }
        }
        if (!t->actors && (rc = ensure_group(t, o, max_retries)) < 0)
            break;
        why[0] = 0;
        int64_t epoch = t->local.epoch;
        /* with checkpoints off, still one after the last epoch: the driver's model and
         * trainer_save then hold the trained weights */
        bool ckpt = o->checkpoint == TRAINER_CHECKPOINT_AUTO || epoch + 1 == epochs;
        rc = run_epoch(t, epoch, ckpt, why, sizeof why);
        if (rc < 0) {
            if ((rc = spend_retry(t, max_retries, why)) < 0)
                break;
            if ((rc = rewind_to_checkpoint(t)) < 0)
                break;
            continue; /* at once: the resources are there unless a node went away */
        }
        if (o->validate_every_epoch && (rc = run_validation(t, why, sizeof why)) < 0) {
            if ((rc = spend_retry(t, max_retries, why)) < 0)
                break;
            continue;
        }
        if (o->on_epoch && (rc = o->on_epoch(t, &t->stats, o->user)) < 0) {
            rc = ct__error(rc, "trainer_train: on_epoch stopped training after epoch %lld",
                           (long long)t->stats.epoch);
            break;
        }
        rc = 0;
    }
    t->stats.epoch = t->local.epoch;
    t->stats.steps = t->local.step;
    ct__progress_stop(t->progress);
    if (o->stats)
        *o->stats = t->stats;
    return rc;
}

int trainer_validate(trainer *t, trainer_stats *st)
{
    if (!t)
        return ct__error(CT_EINVAL, "trainer_validate: t is NULL");
    char why[600] = "";
    int rc;
    if (!t->actors && (rc = ensure_group(t, &(trainer_train_opts){0}, t->stats.retries_used)) < 0)
        return rc;
    if ((rc = run_validation(t, why, sizeof why)) < 0)
        return ct__error(rc, "trainer_validate: %s", why);
    if (st)
        *st = t->stats;
    return 0;
}

int trainer_save(trainer *t, const char *path)
{
    if (!t || !path)
        return ct__error(CT_EINVAL, "trainer_save: %s is NULL", !t ? "t" : "path");
    tr_ckpt_plan *p = NULL;
    char tmp[4200];
    void *buf = NULL;
    FILE *f = NULL;
    int rc = ct__ckpt_plan(&t->local, &t->spec, t->world ? t->world : t->num_replicas, &p);
    if (rc < 0)
        return rc;
    size_t size = ct__ckpt_size(p);
    if (!(buf = malloc(size))) {
        rc = ct__error(CT_ENOMEM, "trainer_save: out of memory");
        goto out;
    }
    ct__ckpt_write(p, buf);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    if (!(f = fopen(tmp, "wb"))) {
        rc = ct__error(CT_EIO, "trainer_save: cannot open %s for writing", tmp);
        goto out;
    }
    if (fwrite(buf, 1, size, f) != size || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rc = ct__error(CT_EIO, "trainer_save: writing %s failed", tmp);
        goto out;
    }
    fclose(f);
    f = NULL;
    if (rename(tmp, path) != 0)
        rc = ct__error(CT_EIO, "trainer_save: renaming %s to %s failed", tmp, path);
out:
    if (f)
        fclose(f);
    if (rc < 0)
        unlink(tmp);
    free(buf);
    ct__ckpt_plan_free(&p);
    return rc;
}

int trainer_restore(trainer *t, const char *path)
{
    if (!t || !path)
        return ct__error(CT_EINVAL, "trainer_restore: %s is NULL", !t ? "t" : "path");
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct__error(CT_ENOENT, "trainer_restore: cannot open %s", path);
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    int rc = 0;
    do {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap);
            if (!b) {
                rc = ct__error(CT_ENOMEM, "trainer_restore: out of memory");
                goto out;
            }
            buf = b;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    if (ferror(f)) {
        rc = ct__error(CT_EIO, "trainer_restore: reading %s failed", path);
        goto out;
    }
    /* check it fully (into the driver's state) before it becomes the checkpoint */
    if ((rc = ct__ckpt_load(&t->local, &t->spec, buf, len)) < 0) {
        rc = ct__trainer_error_prefix(rc, "trainer_restore: %s", path);
        char msg[800];
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        rewind_to_checkpoint(t); /* a load that failed half-way must not leave a mix */
        ct__error(rc, "%s", msg);
        goto out;
    }
    ct_object_id id;
    if ((rc = ct_put(buf, len, &(ct_put_opts){.replicas = 2}, &id)) < 0) {
        rc = ct__trainer_error_prefix(rc, "trainer_restore: storing %s", path);
        goto out;
    }
    end_group(t, NULL, 0, -1, 0, NULL); /* its state is not the restored one */
    if (t->has_ckpt)
        ct_free(&t->ckpt);
    t->ckpt = id;
    t->has_ckpt = true;
    t->stats.epoch = t->local.epoch;
    t->stats.steps = t->local.step;
out:
    free(buf);
    fclose(f);
    return rc;
}

ct_module *trainer_get_model(trainer *t)
{
    return t ? t->local.model : NULL;
}

int trainer_replica_info_get(trainer *t, int i, trainer_replica_info *info)
{
    if (!t || !info)
        return ct__error(CT_EINVAL, "trainer_replica_info_get: NULL argument");
    if (i < 0 || i >= t->world)
        return ct__error(CT_ERANGE, "trainer_replica_info_get: replica %d of %d", i, t->world);
    info->pid = ct_actor_pid(t->actors[i]);
    snprintf(info->node_id, sizeof info->node_id, "%s", ct_actor_node(t->actors[i]));
    snprintf(info->actor_id, sizeof info->actor_id, "%s", ct_actor_id(t->actors[i]));
    return 0;
}

int trainer_get_stats(trainer *t, trainer_stats *st)
{
    if (!t || !st)
        return ct__error(CT_EINVAL, "trainer_get_stats: NULL argument");
    *st = t->stats;
    return 0;
}

void trainer_shutdown(trainer **tp)
{
    if (!tp || !*tp)
        return;
    trainer *t = *tp;
    end_group(t, NULL, 0, -1, 0, NULL);
    ct__progress_free(&t->progress);
    if (t->has_ckpt)
        ct_free(&t->ckpt);
    ct__trainer_state_free(&t->local);
    free(t);
    *tp = NULL;
}
