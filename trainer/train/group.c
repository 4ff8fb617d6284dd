/* trainer/train/group.c — the running group of replicas, as the driver's recovery paths share
 * it (trainer.c's restart, live.c's survivors, heal.c's newcomers): a method called on every
 * replica at once (ct__driver_call_all: the first failure ends the wait, with a grace for the
 * deaths of the same moment), the group's end (every replica killed, the head's death reports
 * awaited, what failed described for the retry counter), how many more replicas fit, what
 * on_world_size is told, the log line of a group's size, and a replacement still copying let go
 * (ct__driver_abort_heal). The driver's state (struct trainer)
 * is in driver.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "driver.h"

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

void ct__driver_abort_heal(trainer *t, const char *why)
{
    if (!t->heal_job.a)
        return;
    CT_LOG(CT_LOG_WARN, "trainer",
           "heal: the replacement copying step %lld is let go (%s); the next one starts at a "
           "later step boundary",
           (long long)t->heal_job.snap.step, why);
    ct_future_destroy(&t->heal_job.f);
    ct_actor_kill(t->heal_job.a);
    for (int64_t until = ct__now_ms() + 10000;
         !ct_actor_is_dead(t->heal_job.a) && ct__now_ms() < until;)
        usleep(2000);
    ct_actor_release(&t->heal_job.a);
    if (t->heal_job.snap.size)
        ct_free(&t->heal_job.snap.id);
    memset(&t->heal_job, 0, sizeof t->heal_job);
}

/* Ends the group: kills every replica, waits for the head to report them dead (resources free
 * again), releases the handles. With why != NULL, writes what failed: the first replica that
 * died by itself, else failed_rank's error (msg). */
void ct__driver_end_group(trainer *t, char *why, size_t cap, int failed_rank, int failed_rc,
                          const char *msg)
{
    ct__driver_abort_heal(t, "the group ended");
    if (!t->actors)
        return;
    bool *dead_before = calloc((size_t)t->world, sizeof *dead_before);
    bool *got = calloc((size_t)t->world, sizeof *got);
    ct_event *evs = calloc((size_t)t->world, sizeof *evs);
    for (int i = 0; i < t->world; i++) {
        if (dead_before)
            dead_before[i] = ct_actor_is_dead(t->actors[i]);
        if (got && !t->actors[i]) /* never created (a failed start): no death to wait for */
            got[i] = true;
        ct_actor_kill(t->actors[i]);
    }
    int64_t t0 = ct__now_ns();
    if (got && evs)
        wait_deaths(t, evs, got, 10000);
    int unreported = 0;
    for (int i = 0; got && i < t->world; i++)
        unreported += !got[i];
    if (unreported) /* the head did not say: a stall of the whole wait (after a head restart) */
        CT_LOG(CT_LOG_WARN, "trainer",
               "group ended: the deaths of %d of %d replicas were not reported within 10 s",
               unreported, t->world);
    else
        CT_LOG(CT_LOG_DEBUG, "trainer", "group ended: deaths reported in %.1f ms",
               (ct__now_ns() - t0) / 1e6);
    if (why) {
        int first = -1;
        for (int i = 0; i < t->world && first < 0; i++)
            if (dead_before && dead_before[i])
                first = i;
        /* the reason the retry counter gives (report.c): a node lost first, whichever replica
         * saw it first */
        t->fail_reason = first >= 0 ? "replica_died" : failed_rank >= 0 ? "replica_error" : "other";
        if (first >= 0 && got && got[first])
            t->fail_reason = evs[first].term_signal ? "replica_killed" : "replica_exited";
        for (int i = 0; got && evs && i < t->world; i++)
            if (got[i] && strstr(evs[i].reason, "node") && strstr(evs[i].reason, "dead"))
                t->fail_reason = "node_lost";
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
    t->heal_to = 0; /* a group started from a checkpoint grows there (grow_at_checkpoint) */
    t->stats.replicas = 0;
    ct__report_replicas(&t->report, 0);
    free(dead_before);
    free(got);
    free(evs);
}

/* What each replica asks for and the group's bounds, as fit.c takes them. */
tr_ask ct__driver_ask(const trainer *t)
{
    return (tr_ask){.cpus = t->cpus,
                    .gpus = t->gpus,
                    .min_replicas = t->min_replicas,
                    .max_replicas = t->max_replicas};
}

/* How many replicas fit in the free resources now, besides the running group's (at most
 * max_replicas in all). */
int ct__driver_replicas_that_fit(trainer *t, int *out)
{
    tr_fit f;
    tr_ask ask = ct__driver_ask(t);
    int rc = ct__fit_count(&ask, &f);
    if (rc < 0)
        return rc;
    *out = f.now < t->max_replicas - t->world ? f.now : t->max_replicas - t->world;
    return 0;
}

/* Calls method on every replica at once with per-rank args (args + i * stride); results[i]
 * get the replies (malloc'd). On failure returns the first error and *failed its rank; once a
 * call has failed the others get at most 3 s more (a replica that hangs outside a collective
 * must not hang the driver). */
#define FAIL_GRACE_MS 1500
/* live recovery: after a death's report, how long more for the other calls (deaths reported
 * within it count: two replicas killed at once; a survivor slower than it gets its regroup
 * call after its failed call returns). It costs nothing when every call returns sooner, as the
 * survivors' do (their collective fails at once); at 20 ms, on a loaded machine, the second of
 * two deaths was reported after it in 1 of 10 runs of trainer_live_recovery_two, whose regroup
 * then failed and the group restarted */
#define LIVE_SETTLE_MS 250
#define PROGRESS_POLL_MS 100 /* reads the replicas' step records this often (progress.c) */

int ct__driver_call_all(trainer *t, const char *method, const void *args, size_t len, size_t stride,
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
            bool dead = *failed >= 0 && ct_actor_is_dead(t->actors[*failed]);
            if (dead && t->wait_all && grace_until > now + LIVE_SETTLE_MS)
                grace_until = now + LIVE_SETTLE_MS; /* other deaths of the same moment */
            if (now >= grace_until || (dead && !t->wait_all))
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

/* The stats of the driver's state (a checkpoint's): steps, the loss scaler's. */
void ct__driver_local_stats(trainer *t)
{
    t->stats.steps = t->local.step;
    t->stats.skipped_steps = t->local.skipped;
    t->stats.loss_scale = t->local.scaler ? ct_grad_scaler_scale(t->local.scaler) : 0;
}

/* Tells on_world_size that a group of n replicas is about to start, when n is another size
 * than the one last told. Returns its error, if any. */
int ct__driver_tell_world_size(trainer *t, const trainer_train_opts *o, int n)
{
    if (n == t->told_world)
        return 0;
    int old = t->told_world, rc = 0;
    CT_LOG(CT_LOG_INFO, "trainer", "world size %d -> %d at epoch %lld batch %lld (step %lld)", old,
           n, (long long)t->local.epoch, (long long)t->local.batch, (long long)t->local.step);
    ct__driver_local_stats(t); /* where the group starts (after a rewind too) */
    if (o->on_world_size && (rc = o->on_world_size(t, old, n, o->user)) < 0)
        return ct__error(rc, "trainer_train: on_world_size stopped training (%d -> %d replicas)",
                         old, n);
    t->told_world = n;
    return 0;
}

/* Logs the size of a group that started when it differs from the last one logged: a warning
 * when it is below num_replicas (or comes back from there), else at info level. */
void ct__driver_note_group_size(trainer *t, int n)
{
    if (n == t->logged_world) {
        t->shrink_why[0] = 0;
        t->shrink_live = false;
        return;
    }
    char was[32] = "";
    if (t->logged_world)
        snprintf(was, sizeof was, " (was %d)", t->logged_world);
    if (n < t->num_replicas && t->shrink_live)
        CT_LOG(CT_LOG_WARN, "trainer",
               "training with %d replica%s of the %d asked (num_replicas)%s: %s; the survivors "
               "go on, and a replacement heals from them when one fits",
               n, n == 1 ? "" : "s", t->num_replicas, was, t->shrink_why);
    else if (n < t->num_replicas && t->shrink_why[0])
        CT_LOG(CT_LOG_WARN, "trainer",
               "training with %d replica%s of the %d asked (num_replicas)%s: %s, and %d fit in "
               "the free CPUs (%.3g each) of the nodes left; set min_replicas = %d to wait for "
               "all of them",
               n, n == 1 ? "" : "s", t->num_replicas, was, t->shrink_why, n, t->cpus,
               t->num_replicas);
    else if (n < t->num_replicas)
        CT_LOG(CT_LOG_WARN, "trainer",
               "training with %d replica%s of the %d asked (num_replicas)%s: only %d fit in the "
               "free CPUs (%.3g each); set min_replicas = %d to wait for all of them",
               n, n == 1 ? "" : "s", t->num_replicas, was, n, t->cpus, t->num_replicas);
    else
        CT_LOG(t->warned_world ? CT_LOG_WARN : CT_LOG_INFO, "trainer",
               "training with %d replica%s%s", n, n == 1 ? "" : "s", was);
    t->warned_world = n < t->num_replicas;
    t->logged_world = n;
    t->shrink_why[0] = 0;
    t->shrink_live = false;
}
