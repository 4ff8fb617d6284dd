/* head/events.c — event pushes (node joined, node dead, actor dead) to subscribers, and an
 * actor's death to its owner even when it did not subscribe. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

void ct__head_push_event(head *h, Ct__Event *ev, const ct__rid *owner)
{
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
