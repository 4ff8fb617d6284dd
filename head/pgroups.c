/* head/pgroups.c — placement groups: all-or-nothing bundles a job reserves (placed by the
 * scheduler, actors.c), waits for them, their removal (their actors with them), and loaded
 * groups' bundles reserved again when their node comes back. Not here: the groups' slots
 * (slots.c). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

/* pg_create's own fields: the bundles, the strategy (run before the token rule) */
bool ct__head_check_pg_create(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__PgCreate *p = e->pg_create;
    char field[96], msg[300];
    if (p->n_bundles == 0 || p->n_bundles > MAX_BUNDLES) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "pg_create.bundles",
                        "pg_create.bundles: %zu bundles (want 1..%d)", p->n_bundles, MAX_BUNDLES);
        return false;
    }
    if (p->strategy != CT__STRATEGY__PACK && p->strategy != CT__STRATEGY__SPREAD) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "pg_create.strategy",
                        "pg_create.strategy: %d is neither PACK nor SPREAD", (int)p->strategy);
        return false;
    }
    for (size_t i = 0; i < p->n_bundles; i++) {
        char list[64];
        snprintf(list, sizeof list, "pg_create.bundles[%zu].resources", i);
        if (ct__rv_check(p->bundles[i]->resources, p->bundles[i]->n_resources, list, field,
                         sizeof field, msg, sizeof msg)) {
            ct__head_refuse(h, rid, e, CT_EINVAL, field, "%s", msg);
            return false;
        }
    }
    return true;
}

void ct__head_on_pg_create(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    Ct__PgCreate *p = e->pg_create;
    const char *job = f->job; /* RULE_JOB */
    int gi = ct__head_pg_slot(h, (int)p->n_bundles);
    bundle *b = gi >= 0 ? calloc(p->n_bundles, sizeof *b) : NULL;
    if (!b) {
        if (gi == CT_ENOSPC)
            ct__head_refuse(h, rid, e, CT_ENOSPC, "pg_create",
                            "pg_create: the head has %d groups and %d bundles (at most %d and "
                            "%d)",
                            h->npgs, h->nbundles, h->lim.pgs, 4 * h->lim.pgs);
        else
            REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    pgroup *g = &h->pgs[gi];
    memset(g, 0, sizeof *g);
    snprintf(g->id, sizeof g->id, "pg-%llu", (unsigned long long)++h->pg_seq);
    if (ct__head_pg_named(h, gi)) {
        g->state = PG_FREE;
        free(b);
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    snprintf(g->job, sizeof g->job, "%s", job);
    g->strategy = p->strategy;
    g->nb = (int)p->n_bundles;
    g->b = b;
    h->nbundles += g->nb;
    for (int i = 0; i < g->nb; i++) {
        ct__rv_from_pb(&b[i].need, p->bundles[i]->resources, p->bundles[i]->n_resources);
        b[i].node = -1;
    }
    g->state = PG_PENDING;
    ct__head_state_pg(h, g);
    Ct__Envelope o;
    Ct__PgCreateReply r = CT__PG_CREATE_REPLY__INIT;
    ct__env_init(&o, e->req_id, "head", 0);
    r.pg_id = g->id;
    o.body_case = CT__ENVELOPE__BODY_PG_CREATE_REPLY;
    o.pg_create_reply = &r;
    ct__head_send(h, rid, &o);
    if (!ct__head_place_pg(h, g))
        CT_LOG(CT_LOG_INFO, "head", "placement group %s pending", g->id);
}

/* A live group's slot (pending or ready) by id, -1. */
static int find_pg(head *h, const char *id)
{
    int i = id ? ct__head_find_pg(h, id, strlen(id)) : -1;
    return i >= 0 && (h->pgs[i].state == PG_PENDING || h->pgs[i].state == PG_READY) ? i : -1;
}

void ct__head_on_pg_wait(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    int i = find_pg(h, e->pg_wait->pg_id);
    if (i < 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "pg_wait.pg_id", "pg_wait.pg_id: no group %s",
                  e->pg_wait->pg_id);
        return;
    }
    if (h->pgs[i].state == PG_READY) {
        ct__head_ok(h, rid, e->req_id);
        return;
    }
    if (e->pg_wait->wait_ms <= 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ETIMEDOUT, "", "placement group %s is pending",
                  h->pgs[i].id);
        return;
    }
    waiter w = {.kind = W_PG,
                .rid = *rid,
                .req_id = e->req_id,
                .deadline = ct__now_ms() + e->pg_wait->wait_ms,
                .pg = i};
    int rc = ct__head_add_waiter(h, &w);
    if (rc)
        ct__head_refuse_waiter(h, rid, e, rc, "pg_wait.wait_ms");
}

void ct__head_on_pg_remove(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    int i = find_pg(h, e->pg_remove->pg_id);
    if (i < 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "pg_remove.pg_id", "pg_remove.pg_id: no group %s",
                  e->pg_remove->pg_id);
        return;
    }
    pgroup *g = &h->pgs[i];
    const char *job = f->job; /* RULE_JOB */
    if (!ct__head_may_change(g->job, job)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "pg_remove.pg_id",
                        "pg_remove.pg_id: placement group %s belongs to another job", g->id);
        return;
    }
    /* actors inside the group go with it (as in Ray) */
    for (int j = 0; j < h->nactors; j++) {
        actor *a = &h->actors[j];
        if (a->pg != i || a->state == A_DEAD)
            continue;
        if (a->state == A_PENDING) {
            ct__head_create_error(h, a, CT_ECANCELED, "placement group %s removed", g->id);
            ct__head_actor_dead(h, a, 0, 0, 0, "placement group removed");
            continue;
        }
        Ct__Envelope o;
        Ct__KillActor k = CT__KILL_ACTOR__INIT;
        ct__env_init(&o, 0, "head", 0);
        k.actor_id = a->id;
        o.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
        o.kill_actor = &k;
        ct__head_send(h, &h->nodes[a->node].rid, &o);
    }
    for (int b = 0; b < g->nb; b++)
        if (g->b[b].node >= 0)
            ct__rv_sub(&h->nodes[g->b[b].node].free, &g->b[b].need, -1);
    g->state = PG_REMOVED;
    h->room = true; /* and its waiting actors are refused by the next pass */
    ct__head_state_pg(h, g);
    for (int j = 0; j < h->nw; j++)
        if (h->w[j].kind == W_PG && h->w[j].pg == i) {
            REPLY_ERR(h, &h->w[j].rid, h->w[j].req_id, CT_ECANCELED, "",
                      "placement group %s removed", g->id);
            h->w[j] = h->w[--h->nw];
            j--;
        }
    ct__head_ok(h, rid, e->req_id);
    ct__head_schedule(h);
}

/* Node ni registered again: the loaded groups' bundles that wait for it are reserved there
 * again (before its actors are taken back, which may hold them). */
void ct__head_pg_node_back(head *h, int ni)
{
    for (int i = 0; i < h->npgs; i++) {
        pgroup *g = &h->pgs[i];
        if (g->state != PG_PENDING)
            continue;
        bool waits = false;
        for (int b = 0; b < g->nb; b++) {
            bundle *x = &g->b[b];
            if (x->node < 0 && x->want[0] && !strcmp(x->want, h->nodes[ni].id)) {
                x->node = ni;
                x->want[0] = 0;
                x->free = x->need;
                ct__rv_sub(&h->nodes[ni].free, &x->need, 1);
                h->room = true;
            }
            waits |= x->node < 0;
        }
        if (!waits) {
            g->state = PG_READY;
            CT_LOG(CT_LOG_INFO, "head", "placement group %s ready again", g->id);
        }
    }
}
