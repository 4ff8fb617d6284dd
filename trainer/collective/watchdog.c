/* trainer/collective/watchdog.c — a communicator's watchdog: one thread per communicator (started
 * at its first watched op) that enforces the deadlines of the collectives in flight, so that no
 * compute thread has to poll or block for them.
 *
 * An op is watched from ct__watch_begin to its end. It ends either when the thread that runs it
 * says so (ct__watch_end: the ring's allreduce of a device bucket, run on a stream's host
 * function), or when its poll function says it is done (the NCCL backend: an event recorded
 * after the op on the NCCL stream, and ncclCommGetAsyncError). When an op's deadline passes
 * first, the watchdog calls the backend's abort hook (ncclCommAbort), breaks the communicator as
 * ct_comm_abort does (so the ring's call in progress returns), and keeps a message naming the op
 * that hung: the op's own end or wait (ct__watch_end, ct__watch_wait) then fails with it, and so
 * does ct__watch_error, which reports the first such failure of ops nobody waits for (the
 * bucketer's, at its next finish). A polled op that fails is reported the same way. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "internal.h"

#define SLOTS 64
#define POLL_NS (200 * 1000) /* how often polled ops are asked while any is in flight */

struct slot {
    bool used, ended, waited; /* waited: someone will ct__watch_wait (or end) it */
    char what[160];
    int64_t start, deadline;
    int (*poll)(void *ctx);
    void *ctx;
    int rc; /* when ended: 0 or the failure, with msg */
    char msg[400];
};

struct ct__watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a slot began or ended, or stop */
    pthread_t thread;
    bool stop;
    struct slot s[SLOTS];
    int err; /* the first failure of an op nobody waits for, and its message */
    char msg[400];
};

static void timespec_at(struct timespec *ts, int64_t ns)
{
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

/* ends slot k with rc (the lock held); an op nobody waits for keeps its failure for
 * ct__watch_error */
static void end_locked(struct ct__watchdog *w, int k, int rc, const char *msg)
{
    struct slot *s = &w->s[k];
    s->ended = true;
    s->rc = rc;
    snprintf(s->msg, sizeof s->msg, "%s", rc < 0 ? msg : "");
    if (!s->waited) {
        if (rc < 0 && !w->err) {
            w->err = rc;
            snprintf(w->msg, sizeof w->msg, "%s", s->msg);
        }
        s->used = false;
    }
    pthread_cond_broadcast(&w->cv);
}

static void *watch_thread(void *arg)
{
    ct_comm *c = arg;
    struct ct__watchdog *w = c->watchdog;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        int64_t now = ct__now_ns(), next = now + 1000000000;
        for (int k = 0; k < SLOTS; k++) {
            struct slot *s = &w->s[k];
            if (!s->used || s->ended)
                continue;
            if (s->poll) {
                int r = s->poll(s->ctx); /* nccl.c's: never blocks */
                if (r != 0) {
                    end_locked(w, k, r < 0 ? r : 0, ct_last_error());
                    continue;
                }
                if (next > now + POLL_NS)
                    next = now + POLL_NS;
            }
            if (now >= s->deadline) {
                char msg[sizeof s->msg];
                snprintf(msg, sizeof msg,
                         "collective watchdog: %s did not complete in %lld ms on rank %d of "
                         "group %s; communicator aborted",
                         s->what, (long long)((now - s->start) / 1000000), c->rank, c->group);
                CT_LOG(CT_LOG_WARN, "collective", "%s", msg);
                if (c->nops && c->nops->abort_hung)
                    c->nops->abort_hung(c);
                ct__comm_break(c, CT_ETIMEDOUT); /* the ring's call in progress returns */
                end_locked(w, k, CT_ETIMEDOUT, msg);
                continue;
            }
            if (s->deadline < next)
                next = s->deadline;
        }
        struct timespec ts;
        timespec_at(&ts, next);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int start(ct_comm *c)
{
    struct ct__watchdog *w = calloc(1, sizeof *w);
    if (!w)
        return ct__error(CT_ENOMEM, "collective watchdog: out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* ct__now_ns's clock */
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->watchdog = w;
    if (pthread_create(&w->thread, NULL, watch_thread, c) != 0) {
        c->watchdog = NULL;
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return ct__error(CT_ENOMEM, "collective watchdog: pthread_create");
    }
    return 0;
}

int ct__watch_begin(ct_comm *c, const char *what, int64_t deadline, int (*poll)(void *ctx),
                    void *ctx, bool waited)
{
    pthread_mutex_lock(&c->watch_mu);
    int rc = c->watchdog ? 0 : start(c);
    pthread_mutex_unlock(&c->watch_mu);
    if (rc < 0)
        return rc;
    struct ct__watchdog *w = c->watchdog;
    pthread_mutex_lock(&w->mu);
    int k;
    for (;;) { /* a free slot: at most SLOTS ops in flight, the next waits for one to end */
        for (k = 0; k < SLOTS && w->s[k].used; k++)
            ;
        if (k < SLOTS || w->stop)
            break;
        pthread_cond_wait(&w->cv, &w->mu);
    }
    if (k == SLOTS) {
        pthread_mutex_unlock(&w->mu);
        return ct__error(CT_ECANCELED, "collective watchdog: stopped");
    }
    struct slot *s = &w->s[k];
    memset(s, 0, sizeof *s);
    s->used = true;
    s->waited = waited;
    snprintf(s->what, sizeof s->what, "%s", what);
    s->start = ct__now_ns();
    s->deadline = deadline;
    s->poll = poll;
    s->ctx = ctx;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return k;
}

/* the slot's outcome, freeing it (lock held) */
static int take_locked(struct ct__watchdog *w, int k, int rc)
{
    struct slot *s = &w->s[k];
    int out = s->rc < 0 ? ct__error(s->rc, "%s", s->msg) : rc;
    s->used = false;
    pthread_cond_broadcast(&w->cv);
    return out;
}

int ct__watch_end(ct_comm *c, int ticket, int rc)
{
    struct ct__watchdog *w = c->watchdog;
    pthread_mutex_lock(&w->mu);
    if (!w->s[ticket].ended)
        end_locked(w, ticket, rc, rc < 0 ? ct_last_error() : "");
    /* timed out first: the watchdog's verdict names the op, not the ring's CT_ECANCELED */
    int out = take_locked(w, ticket, rc);
    pthread_mutex_unlock(&w->mu);
    return out;
}

int ct__watch_wait(ct_comm *c, int ticket)
{
    struct ct__watchdog *w = c->watchdog;
    pthread_mutex_lock(&w->mu);
    while (!w->s[ticket].ended)
        pthread_cond_wait(&w->cv, &w->mu);
    int out = take_locked(w, ticket, 0);
    pthread_mutex_unlock(&w->mu);
    return out;
}

int ct__watch_error(ct_comm *c)
{
    struct ct__watchdog *w = c->watchdog;
    if (!w)
        return 0;
    pthread_mutex_lock(&w->mu);
    int err = w->err;
    int out = err ? ct__error(err, "%s", w->msg) : 0;
    pthread_mutex_unlock(&w->mu);
    return out;
}

void ct__watch_stop(ct_comm *c)
{
    struct ct__watchdog *w = c->watchdog;
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    c->watchdog = NULL;
}
