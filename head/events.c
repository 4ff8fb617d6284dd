/* head/events.c — event pushes (node joined, node dead, actor dead, node draining) to
 * subscribers, and an actor's death to its owner even when it did not subscribe; and the ring
 * of recent events the dashboard lists (/api/events, metrics.c): every pushed event, plus what
 * other files note (a training job's retries, drains, live recoveries and heals, train.c; the
 * head's restart, loop.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

void ct__head_note(head *h, const char *kind, const char *subject, const char *fmt, ...)
{
    if (!h->evlog && !(h->evlog = calloc(HEAD_EVENTS, sizeof *h->evlog)))
        return;
    head_event *e = &h->evlog[h->evseq % HEAD_EVENTS];
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    e->seq = ++h->evseq;
    e->wall_ms = (int64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->subject, sizeof e->subject, "%s", subject ? subject : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->reason, sizeof e->reason, fmt, ap);
    va_end(ap);
}

/* The ring's line for a pushed event. */
static void note_event(head *h, const Ct__Event *ev)
{
    static const char *kind[] = {
        [CT__EVENT_TYPE__NODE_JOINED] = "node_joined",
        [CT__EVENT_TYPE__NODE_DEAD] = "node_dead",
        [CT__EVENT_TYPE__ACTOR_DEAD] = "actor_dead",
        [CT__EVENT_TYPE__NODE_DRAINING] = "node_draining",
    };
    if (ev->type <= 0 || (size_t)ev->type >= sizeof kind / sizeof kind[0] || !kind[ev->type])
        return;
    const char *reason = ev->reason && *ev->reason ? ev->reason : "";
    if (ev->type == CT__EVENT_TYPE__ACTOR_DEAD)
        ct__head_note(h, kind[ev->type], ev->actor_id, "%s%s%s (pid %d, on node %s)", reason,
                      ev->term_signal ? ", signal " : "",
                      ev->term_signal ? strsignal(ev->term_signal) : "", (int)ev->pid,
                      ev->node_id && *ev->node_id ? ev->node_id : "none");
    else if (ev->type == CT__EVENT_TYPE__NODE_JOINED)
        ct__head_note(h, kind[ev->type], ev->node_id, "registered (pid %d)", (int)ev->pid);
    else
        ct__head_note(h, kind[ev->type], ev->node_id, "%s (pid %d)", reason, (int)ev->pid);
}

void ct__head_push_event(head *h, Ct__Event *ev, const ct__rid *owner)
{
    note_event(h, ev);
    Ct__Envelope e;
    ct__env_init(&e, 0, "head", 0);
    e.body_case = CT__ENVELOPE__BODY_EVENT;
    e.event = ev;
    bool owner_sent = false;
    for (int i = 0; i < h->nsubs; i++) {
        if (!(h->subs[i].mask & (1u << ev->type)))
            continue;
        if (owner && ct__rid_eq(owner, &h->subs[i].rid))
            owner_sent = true;
        ct__head_send(h, &h->subs[i].rid, &e);
    }
    if (owner && owner->len && !owner_sent)
        ct__head_send(h, owner, &e);
}

void ct__head_on_subscribe(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    for (int i = 0; i < h->nsubs; i++)
        if (ct__rid_eq(&h->subs[i].rid, rid)) {
            h->subs[i].mask = e->subscribe->mask;
            ct__head_ok(h, rid, e->req_id);
            return;
        }
    if (h->nsubs == h->lim.subscribers) {
        ct__head_refuse(h, rid, e, CT_ENOSPC, "subscribe",
                        "subscribe: %d peers subscribe already, the head's limit",
                        h->lim.subscribers);
        return;
    }
    sub *ns = realloc(h->subs, (h->nsubs + 1) * sizeof *ns);
    if (!ns) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    h->subs = ns;
    h->subs[h->nsubs].rid = *rid;
    snprintf(h->subs[h->nsubs].job, sizeof ns->job, "%s",
             ct__token_valid(e->token) ? e->token : "");
    h->subs[h->nsubs++].mask = e->subscribe->mask;
    ct__head_ok(h, rid, e->req_id);
}
