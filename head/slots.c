/* head/slots.c — the slots of the head's tables: a node or a group found by id (through the
 * indexes, index.h), a new group's slot, slots freed (removed groups no actor refers to), and
 * the dead forgotten (actors and nodes dead for long, and what only they kept). Table
 * bookkeeping only: nothing here replies, schedules or calls into the handlers. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"

/* ---- nodes ---- */

int ct__head_find_node(head *h, const char *id)
{
    int i = id ? ct__index_get(h->node_ids, id, strlen(id)) : -1;
    return i >= 0 && h->nodes[i].used && !strcmp(h->nodes[i].id, id) ? i : -1;
}

/* Forgets dead node ni (its slot serves a new node): dead actors it hosted keep no node. */
void ct__head_forget_node(head *h, int ni)
{
    for (int i = 0; i < h->nactors; i++)
        if (h->actors[i].node == ni)
            h->actors[i].node = -1;
    for (int i = 0; i < h->npgs; i++)
        for (int b = 0; b < h->pgs[i].nb; b++)
            if (h->pgs[i].b[b].node == ni)
                h->pgs[i].b[b].node = -1;
    CT_LOG(CT_LOG_INFO, "head", "forgot dead node %s", h->nodes[ni].id);
    ct__watch_close(h->watch, h->nodes[ni].watch, 0);
    ct__index_del(h->node_ids, h->nodes[ni].id, strlen(h->nodes[ni].id));
    ct__index_del(h->node_tokens, h->nodes[ni].token, strlen(h->nodes[ni].token));
    memset(&h->nodes[ni], 0, sizeof h->nodes[ni]);
    if (ni < h->node_free_hint)
        h->node_free_hint = ni;
}

/* ---- placement groups ---- */

/* A slot for a new group of nb bundles: a free one or a new one, after freeing removed groups
 * when the head's limits would be passed (h->lim.pgs groups, 4 bundles a group in all). The slot,
 * CT_ENOSPC or CT_ENOMEM. */
int ct__head_pg_slot(head *h, int nb)
{
    if (h->nbundles + nb > 4 * h->lim.pgs || h->npgs == h->lim.pgs)
        ct__head_free_removed_pgs(h);
    if (h->nbundles + nb > 4 * h->lim.pgs)
        return CT_ENOSPC;
    for (int i = h->pg_free_hint; i < h->npgs; i++)
        if (h->pgs[i].state == PG_FREE)
            return h->pg_free_hint = i;
    h->pg_free_hint = h->npgs; /* none free below: creating G groups is O(G), not O(G^2) */
    if (h->npgs == h->lim.pgs)
        return CT_ENOSPC;
    if (h->npgs == h->cap_pgs) {
        int cap = h->cap_pgs ? 2 * h->cap_pgs : 16;
        cap = cap < h->lim.pgs ? cap : h->lim.pgs;
        pgroup *ng = realloc(h->pgs, cap * sizeof *ng);
        if (!ng)
            return CT_ENOMEM;
        h->pgs = ng;
        h->cap_pgs = cap;
    }
    h->pgs[h->npgs].state = PG_FREE;
    return h->npgs++;
}

int ct__head_find_pg(head *h, const char *id, size_t n)
{
    int i = id ? ct__index_get(h->pg_ids, id, n) : -1;
    return i >= 0 && i < h->npgs && h->pgs[i].state != PG_FREE && strlen(h->pgs[i].id) == n &&
                   !memcmp(h->pgs[i].id, id, n)
               ? i
               : -1;
}

int ct__head_pg_named(head *h, int gi)
{
    return ct__index_put(&h->pg_ids, h->pgs[gi].id, strlen(h->pgs[gi].id), gi);
}

void ct__head_pg_freed(head *h, int gi)
{
    pgroup *g = &h->pgs[gi];
    h->nbundles -= g->nb;
    free(g->b);
    ct__index_del(h->pg_ids, g->id, strlen(g->id));
    memset(g, 0, sizeof *g);
    g->state = PG_FREE;
    if (gi < h->pg_free_hint)
        h->pg_free_hint = gi;
}

/* Frees the slots of removed placement groups no actor refers to any more. */
void ct__head_free_removed_pgs(head *h)
{
    unsigned char *used = calloc(h->npgs ? h->npgs : 1, 1);
    if (!used)
        return;
    for (int i = 0; i < h->nactors; i++)
        if (h->actors[i].pg >= 0)
            used[h->actors[i].pg] = 1;
    for (int i = 0; i < h->npgs; i++) {
        pgroup *g = &h->pgs[i];
        if (g->state != PG_REMOVED || used[i])
            continue;
        ct__head_pg_freed(h, i);
    }
    free(used);
}

/* ---- the dead ---- */

/* The actor at slot from now stands at slot ai: its neighbours on its node's list (actors.c
 * keeps the list) point at its new slot. */
static void actor_moved(head *h, int from, int ai)
{
    actor *a = &h->actors[ai];
    if (a->node < 0 || (a->state != A_STARTING && a->state != A_ALIVE) || from == ai)
        return;
    if (a->node_prev)
        h->actors[a->node_prev - 1].node_next = ai + 1;
    else
        h->nodes[a->node].first_actor = ai + 1;
    if (a->node_next)
        h->actors[a->node_next - 1].node_prev = ai + 1;
}

/* Forgets the actors and nodes dead for max_age ms or longer (GONE_AFTER_MS each second; 0
 * when the actor table is full), then frees what only they kept: removed groups. */
void ct__head_forget_dead(head *h, int64_t max_age)
{
    int64_t now = ct__now_ms();
    int k = 0;
    for (int i = 0; i < h->nactors; i++) {
        actor *a = &h->actors[i];
        if (a->state == A_DEAD && now - a->dead_at >= max_age) {
            ct__index_del(h->actor_ids, a->id, strlen(a->id));
            continue;
        }
        if (k != i) { /* its index entry follows it (a key the index has: no allocation), and
                         its node list's links */
            h->actors[k] = *a;
            ct__index_put(&h->actor_ids, h->actors[k].id, strlen(h->actors[k].id), k);
            actor_moved(h, i, k);
        }
        k++;
    }
    h->nactors = k;
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].used && !h->nodes[i].alive && now - h->nodes[i].dead_at >= max_age)
            ct__head_forget_node(h, i);
    ct__head_free_removed_pgs(h);
}
