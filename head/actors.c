/* head/actors.c — the actor table and the scheduler: creation requests (queued while nothing
 * fits, until their deadline), placement on nodes (PACK / SPREAD) and in placement groups'
 * bundles, the nodes' reports (ready, start failed, exited), kills, an actor's death told to its
 * owner and subscribers. Not in here: the groups' own table (pgroups.c), process spawning
 * (actor/node_start.c, node_zygote.c). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

/* Frees a's create request (placed, or dead) and takes it off the pending count. */
void ct__head_drop_req(head *h, actor *a)
{
    if (!a->req)
        return;
    ct__msg_free(a->req);
    a->req = NULL;
    h->npending--;
    h->pending_bytes -= a->req_bytes;
}

/* ---- each node's list of its live actors (node.first_actor, actor.node_prev/next) ---- */

/* Actor slot ai (placed: a->node set) onto its node's list. */
static void actor_link(head *h, int ai)
{
    actor *a = &h->actors[ai];
    node *n = &h->nodes[a->node];
    a->node_prev = 0;
    a->node_next = n->first_actor;
    if (n->first_actor)
        h->actors[n->first_actor - 1].node_prev = ai + 1;
    n->first_actor = ai + 1;
}

/* Actor a off its node's list (no-op when not on one: pending, dead). */
static void actor_unlink(head *h, actor *a)
{
    if (a->node < 0 || (a->state != A_STARTING && a->state != A_ALIVE))
        return;
    if (a->node_prev)
        h->actors[a->node_prev - 1].node_next = a->node_next;
    else
        h->nodes[a->node].first_actor = a->node_next;
    if (a->node_next)
        h->actors[a->node_next - 1].node_prev = a->node_prev;
    a->node_prev = a->node_next = 0;
}

static int by_slot(const void *x, const void *y)
{
    return *(const int *)x - *(const int *)y;
}

int ct__head_node_actors(head *h, int ni, int **out)
{
    int k = 0;
    *out = NULL;
    for (int s = h->nodes[ni].first_actor; s; s = h->actors[s - 1].node_next)
        k++;
    if (!k || !(*out = malloc(k * sizeof **out)))
        return 0;
    k = 0;
    for (int s = h->nodes[ni].first_actor; s; s = h->actors[s - 1].node_next)
        (*out)[k++] = s - 1;
    qsort(*out, k, sizeof **out, by_slot);
    return k;
}

static void release_actor_resources(head *h, actor *a)
{
    if (a->node < 0 || a->state == A_PENDING)
        return;
    if (h->nodes[a->node].alive) /* a dead node's room (its death) places nothing */
        h->room = true;
    if (a->pg >= 0 && a->bundle >= 0) {
        /* back into its bundle, if the bundle is still reserved where the actor ran */
        pgroup *g = &h->pgs[a->pg];
        if (g->state != PG_REMOVED && g->b[a->bundle].node == a->node)
            ct__rv_sub(&g->b[a->bundle].free, &a->need, -1);
    } else if (a->pg < 0)
        ct__rv_sub(&h->nodes[a->node].free, &a->need, -1);
    h->nodes[a->node].nactors--;
}

void ct__head_create_error(head *h, actor *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ct__head_create_error(head *h, actor *a, int code, const char *fmt, ...)
{
    if (!a->create_req)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    REPLY_ERR(h, &a->owner, a->create_req, code, "", "%s", msg);
    a->create_req = 0;
}

/* Marks an actor dead, frees its resources, tells its owner and subscribers. */
void ct__head_actor_dead(head *h, actor *a, int pid, int status, int sig, const char *reason)
{
    if (a->state == A_DEAD)
        return;
    release_actor_resources(h, a);
    actor_unlink(h, a);
    a->state = A_DEAD;
    a->exit_status = status;
    a->term_signal = sig;
    if (pid)
        a->pid = pid;
    a->dead_at = ct__now_ms();
    ct__head_drop_req(h, a);
    ct__head_create_error(h, a, CT_EDEAD, "actor %s (%s) died while starting: %s", a->id, a->cls,
                          reason);
    Ct__Event ev = CT__EVENT__INIT;
    ev.type = CT__EVENT_TYPE__ACTOR_DEAD;
    ev.actor_id = a->id;
    ev.node_id = a->node >= 0 ? h->nodes[a->node].id : "";
    ev.pid = a->pid;
    ev.exit_status = status;
    ev.term_signal = sig;
    ev.reason = (char *)reason;
    ct__head_push_event(h, &ev, &a->owner);
    CT_LOG(CT_LOG_INFO, "head", "actor %s dead: %s", a->id, reason);
}

/* The id index (index.h): a table kept sorted by seq (a binary search) took an O(n) move for
 * each actor a node gave back to a restarted head, O(n^2) for 50,000. */
static actor *find_actor(head *h, const char *id)
{
    int i = id ? ct__index_get(h->actor_ids, id, strlen(id)) : -1;
    return i >= 0 && i < h->nactors && !strcmp(h->actors[i].id, id) ? &h->actors[i] : NULL;
}

/* Whether the message comes from the node hosting a (which alone reports its start and end):
 * it carries that live node's token (f->node, found by the loop). */
static bool from_host(const actor *a, const ct__head_from *f)
{
    return a->node >= 0 && a->node == f->node;
}

/* Picks a node for need: PACK takes the fitting node with the least free capacity left,
 * SPREAD the one with the fewest actors (then the most free). frees / load: a tentative view
 * (place_pg: node i's entries where load[i] >= 0, else the node's own free and no load), NULL
 * for the nodes' own. -1 when none fits. */
static int pick_node(head *h, const res *need, int strategy, const res *frees, const int *load)
{
    int best = -1, best_load = 0;
    double best_sum = 0;
    for (int i = 0; i < h->nnodes; i++) {
        bool tentative = load && load[i] >= 0;
        const res *f = tentative ? &frees[i] : &h->nodes[i].free;
        int l = load ? (tentative ? load[i] : 0) : h->nodes[i].nactors;
        if (!h->nodes[i].alive || h->nodes[i].draining || !ct__rv_fits(f, need))
            continue;
        double sum = ct__rv_sum(f);
        bool better = best < 0 || (strategy == CT__STRATEGY__SPREAD
                                       ? l < best_load || (l == best_load && sum > best_sum)
                                       : sum < best_sum);
        if (better) {
            best = i;
            best_load = l;
            best_sum = sum;
        }
    }
    return best;
}

/* ---- one scheduler pass (ct__head_schedule): what it learned, so that waiting actors do not
 * each scan every node ----
 * A pass only takes resources (placements; nothing is freed, no node joins, dies or drains
 * until it ends), which makes two facts hold until its end:
 * - a need that fitted no node (a miss) still fits none, nor does any need at least as large in
 *   each of the miss's resources: such an actor or bundle is not looked for;
 * - PACK's pick for a need stays the same node while that node still fits the need and no other
 *   node changed: it only lost free capacity (its sum fell), so it stays the smallest fitting.
 *   The pass's last pick is kept (need, node); any other placement on a node replaces it.
 * Both give the pick that pick_node's full scan would give (behaviour unchanged). Measured need:
 * with 10,000 actors waiting on 2,000 full nodes, each node's death cost the head 150 ms of CPU
 * (each waiting actor scanned every node), and each node that joined as much again. */
#define PASS_MISSES 8
typedef struct sched_pass {
    int nmiss;
    res miss[PASS_MISSES]; /* needs that fitted no node in this pass */
    int last;              /* the node of the pass's last PACK pick (for last_need); -1 none */
    res last_need;
} sched_pass;

/* Whether need is at least one of the pass's misses in every resource of that miss (fits none). */
static bool pass_missed(const sched_pass *p, const res *need)
{
    for (int i = 0; p && i < p->nmiss; i++) {
        bool covers = true;
        for (int r = 0; r < p->miss[i].n && covers; r++)
            covers = ct__rv_get(need, p->miss[i].name[r]) >= p->miss[i].amt[r];
        if (covers)
            return true;
    }
    return false;
}

static void pass_miss(sched_pass *p, const res *need)
{
    if (p && p->nmiss < PASS_MISSES)
        p->miss[p->nmiss++] = *need;
}

static bool rv_same(const res *a, const res *b)
{
    if (a->n != b->n)
        return false;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->name[i], b->name[i]) || a->amt[i] != b->amt[i])
            return false;
    return true;
}

/* A node for actor a (not in a group) in pass p (NULL: outside a pass): the pass's last PACK
 * pick when that still holds (see above), else pick_node's. -1 when none fits. */
static int pick_in_pass(head *h, sched_pass *p, const actor *a)
{
    if (p && pass_missed(p, &a->need))
        return -1;
    if (p && p->last >= 0 && a->strategy == CT__STRATEGY__PACK &&
        rv_same(&p->last_need, &a->need) && ct__rv_fits(&h->nodes[p->last].free, &a->need))
        return p->last;
    int n = pick_node(h, &a->need, a->strategy, NULL, NULL);
    if (n < 0)
        pass_miss(p, &a->need);
    else if (p) { /* the pick's node is about to change: a kept pick elsewhere no longer holds */
        p->last = a->strategy == CT__STRATEGY__PACK ? n : -1;
        p->last_need = a->need;
    }
    return n;
}

static void start_on_node(head *h, actor *a)
{
    node *n = &h->nodes[a->node];
    Ct__CreateActor *c = a->req->create_actor;
    Ct__Envelope e;
    Ct__StartActor s = CT__START_ACTOR__INIT;
    ct__env_init(&e, 0, "head", 0);
    s.actor_id = a->id;
    s.class_name = a->cls;
    s.args = c->args;
    s.exe_path = c->exe_path;
    s.n_argv = c->n_argv;
    s.argv = c->argv;
    char *holders[16];
    if (c->exe_object_id.len) {
        s.exe_object_id = c->exe_object_id;
        s.n_exe_holders =
            ct__objdir_holders(h, c->exe_object_id.data, c->exe_object_id.len, holders, 16);
        s.exe_holders = holders;
    }
    s.job_token = a->job;
    res_pb need;
    ct__rv_to_pb(&a->need, &need);
    s.n_resources = a->need.n;
    s.resources = need.p;
    s.pg_id = a->pg >= 0 ? h->pgs[a->pg].id : "";
    s.bundle_index = a->bundle;
    /* the head only counts GPUs; the node chooses which devices the actor sees */
    s.gpus = ct__rv_get(&a->need, "GPU");
    e.body_case = CT__ENVELOPE__BODY_START_ACTOR;
    e.start_actor = &s;
    ct__head_send(h, &n->rid, &e);
    a->state = A_STARTING;
    actor_link(h, (int)(a - h->actors));
    n->nactors++;
    ct__head_drop_req(h, a);
}

/* Tries to place one pending actor (in scheduler pass p; NULL: outside one). Returns true when
 * placed. */
static bool place_actor(head *h, actor *a, sched_pass *p)
{
    if (a->pg >= 0) {
        pgroup *g = &h->pgs[a->pg];
        if (g->state == PG_REMOVED) {
            ct__head_create_error(h, a, CT_ENOENT, "placement group %s was removed", g->id);
            ct__head_actor_dead(h, a, 0, 0, 0, "placement group removed");
            return false;
        }
        /* any reserved bundle will do, even while others of the group are being re-placed */
        for (int b = 0; b < g->nb; b++) {
            if (a->want_bundle >= 0 && b != a->want_bundle)
                continue;
            if (g->b[b].node < 0 || !h->nodes[g->b[b].node].alive ||
                !ct__rv_fits(&g->b[b].free, &a->need))
                continue;
            ct__rv_sub(&g->b[b].free, &a->need, 1);
            a->bundle = b;
            a->node = g->b[b].node;
            start_on_node(h, a);
            return true;
        }
        return false;
    }
    int n = pick_in_pass(h, p, a);
    if (n < 0)
        return false;
    ct__rv_sub(&h->nodes[n].free, &a->need, 1);
    a->node = n;
    start_on_node(h, a);
    return true;
}

/* Node i in place_pg's tentative view: its free resources copied there once. i. */
static int touch(head *h, int i)
{
    if (h->load[i] < 0) {
        h->frees[i] = h->nodes[i].free;
        h->load[i] = 0;
    }
    return i;
}

/* Reserves every unplaced bundle or none of them (all of a new group; after a node died,
 * the bundles that were on it), in scheduler pass p (NULL: outside one). The tentative view
 * holds no less than the nodes' own free resources, and before the first pick exactly them: a
 * bundle whose need the pass missed fits nowhere, and the first unplaced bundle's miss is one. */
static bool place_pg(head *h, pgroup *g, sched_pass *p)
{
    if (g->state != PG_PENDING || !h->nnodes)
        return false;
    for (int b = 0; b < g->nb; b++) /* loaded (state.c): waits for its node to come back */
        if (g->b[b].node < 0 && g->b[b].want[0])
            return false;
    /* a tentative view of the nodes' free resources (scratch sized with the node table: no
     * stack arrays sized by what peers send), copied only for the nodes this group touches
     * (load[i] >= 0; -1 elsewhere, between calls too): a copy of every node's made each group
     * cost 6 MB of copying at 10,000 nodes */
    res *frees = h->frees;
    int *load = h->load;
    for (int b = 0; b < g->nb; b++)
        if (g->b[b].node >= 0)
            load[touch(h, g->b[b].node)]++;
    bool placed = true, picked = false;
    for (int b = 0; b < g->nb; b++) {
        g->b[b].pick = g->b[b].node;
        if (g->b[b].pick >= 0)
            continue;
        int n = pass_missed(p, &g->b[b].need)
                    ? -1
                    : pick_node(h, &g->b[b].need, g->strategy, frees, load);
        if (n < 0) {
            if (!picked && !pass_missed(p, &g->b[b].need))
                pass_miss(p, &g->b[b].need);
            placed = false;
            break;
        }
        picked = true;
        ct__rv_sub(&frees[touch(h, n)], &g->b[b].need, 1);
        load[n]++;
        g->b[b].pick = n;
    }
    for (int b = 0; b < g->nb; b++) { /* the view back to untouched */
        if (g->b[b].node >= 0)
            load[g->b[b].node] = -1;
        if (g->b[b].pick >= 0)
            load[g->b[b].pick] = -1;
    }
    if (!placed)
        return false;
    for (int b = 0; b < g->nb; b++) {
        if (g->b[b].node >= 0)
            continue;
        g->b[b].node = g->b[b].pick;
        g->b[b].free = g->b[b].need;
        ct__rv_sub(&h->nodes[g->b[b].node].free, &g->b[b].need, 1);
    }
    h->room = true; /* its bundles: actors of the group may fit now */
    if (p)          /* nodes changed: the pass's kept pick no longer holds */
        p->last = -1;
    g->state = PG_READY;
    ct__head_state_pg(h, g);
    CT_LOG(CT_LOG_INFO, "head", "placement group %s ready", g->id);
    /* answer waiters */
    for (int i = 0; i < h->nw; i++) {
        if (h->w[i].kind == W_PG && &h->pgs[h->w[i].pg] == g) {
            ct__head_ok(h, &h->w[i].rid, h->w[i].req_id);
            h->w[i] = h->w[--h->nw];
            i--;
        }
    }
    return true;
}

bool ct__head_place_pg(head *h, pgroup *g)
{
    return place_pg(h, g, NULL);
}

/* Runs the scheduler: pending placement groups first (they were asked for first as a whole),
 * then pending actors in creation order, in one pass (sched_pass); the actors only when room
 * may have come since the last pass (h->room: a death, which frees nothing, reads no actor). */
void ct__head_schedule(head *h)
{
    sched_pass p = {.nmiss = 0, .last = -1};
    for (int i = 0; i < h->npgs; i++)
        place_pg(h, &h->pgs[i], &p);
    if (!h->room)
        return;
    h->room = false; /* placing only takes: nothing below sets it again */
    for (int i = 0; h->npending && i < h->nactors; i++) /* none waiting: no scan (a join) */
        if (h->actors[i].state == A_PENDING)
            place_actor(h, &h->actors[i], &p);
}

void ct__head_kill_on_node(head *h, actor *a)
{
    Ct__Envelope o;
    Ct__KillActor k = CT__KILL_ACTOR__INIT;
    ct__env_init(&o, 0, "head", 0);
    k.actor_id = a->id;
    o.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    o.kill_actor = &k;
    ct__head_send(h, &h->nodes[a->node].rid, &o);
}

/* create_actor's own fields: the class, the executable, argv, the strategy, the bundle index,
 * the resources (the handler table runs it before the token rule) */
bool ct__head_check_create_actor(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__CreateActor *c = e->create_actor;
    char field[96], msg[300];
    const char *bad = NULL;
    if (!c->class_name || !*c->class_name)
        bad = "create_actor.class_name";
    else if (strlen(c->class_name) >= sizeof h->actors[0].cls)
        bad = "create_actor.class_name";
    else if (!c->exe_path || !*c->exe_path || strlen(c->exe_path) >= MAX_PATH)
        bad = "create_actor.exe_path";
    if (bad) {
        ct__head_refuse(h, rid, e, CT_EINVAL, bad, "%s: empty or too long", bad);
        return false;
    }
    if (c->n_argv > MAX_ARGV) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "create_actor.argv",
                        "create_actor.argv: %zu entries, at most %d", c->n_argv, MAX_ARGV);
        return false;
    }
    if (c->exe_object_id.len && c->exe_object_id.len != 20) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "create_actor.exe_object_id",
                        "create_actor.exe_object_id: %zu bytes, an object id has 20",
                        c->exe_object_id.len);
        return false;
    }
    if (c->strategy != CT__STRATEGY__PACK && c->strategy != CT__STRATEGY__SPREAD) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "create_actor.strategy",
                        "create_actor.strategy: %d is neither PACK nor SPREAD", (int)c->strategy);
        return false;
    }
    if (c->bundle_index < -1) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "create_actor.bundle_index",
                        "create_actor.bundle_index: %d (want -1 for any, or a bundle)",
                        c->bundle_index);
        return false;
    }
    if (ct__rv_check(c->resources, c->n_resources, "create_actor.resources", field, sizeof field,
                     msg, sizeof msg)) {
        ct__head_refuse(h, rid, e, CT_EINVAL, field, "%s", msg);
        return false;
    }
    return true;
}

void ct__head_on_create_actor(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    Ct__CreateActor *c = e->create_actor;
    const char *job = f->job; /* RULE_JOB */
    int pg = -1;
    if (c->pg_id && *c->pg_id) {
        pg = ct__head_find_pg(h, c->pg_id, strlen(c->pg_id));
        if (pg < 0 || h->pgs[pg].state == PG_REMOVED) {
            REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "create_actor.pg_id",
                      "create_actor.pg_id: no placement group %s", c->pg_id);
            return;
        }
        if (!ct__head_may_change(h->pgs[pg].job, job)) {
            ct__head_refuse(h, rid, e, HEAD_EPERM, "create_actor.pg_id",
                            "create_actor.pg_id: placement group %s belongs to another job",
                            c->pg_id);
            return;
        }
        if (c->bundle_index >= h->pgs[pg].nb) {
            REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "create_actor.bundle_index",
                      "create_actor.bundle_index: %d, group %s has %d bundles", c->bundle_index,
                      c->pg_id, h->pgs[pg].nb);
            return;
        }
    }
    /* what the kept request holds: its bytes, and per string and resource a pointer and a
     * heap block (an empty argv entry is 2 bytes on the wire, ~40 on the heap) */
    size_t bytes = ct__envelope__get_packed_size(e) + 1024 + 48 * c->n_argv + 128 * c->n_resources;
    if (h->npending >= MAX_PENDING || h->pending_bytes + bytes > MAX_PENDING_MEM) {
        ct__head_refuse(h, rid, e, CT_ENOSPC, "create_actor",
                        "create_actor: %d creations (%zu bytes) wait for room already, the "
                        "head's limit",
                        h->npending, h->pending_bytes);
        return;
    }
    if (h->nactors == h->lim.actors)
        ct__head_forget_dead(h, 0);
    if (h->nactors == h->lim.actors) {
        ct__head_refuse(h, rid, e, CT_ENOSPC, "create_actor",
                        "create_actor: the head has %d live actors, its limit", h->lim.actors);
        return;
    }
    if (h->nactors == h->cap_actors) {
        int cap = h->cap_actors ? h->cap_actors * 2 : 256;
        cap = cap < h->lim.actors ? cap : h->lim.actors;
        actor *na = realloc(h->actors, cap * sizeof *na);
        if (!na) {
            REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
            return;
        }
        h->actors = na;
        h->cap_actors = cap;
    }
    actor *a = &h->actors[h->nactors];
    memset(a, 0, sizeof *a);
    a->seq = ++h->actor_seq;
    snprintf(a->id, sizeof a->id, "actor-%llu", (unsigned long long)a->seq);
    if (ct__index_put(&h->actor_ids, a->id, strlen(a->id), h->nactors)) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    h->nactors++;
    snprintf(a->cls, sizeof a->cls, "%s", c->class_name);
    a->node = -1;
    a->pg = pg;
    a->bundle = -1;
    a->want_bundle = pg >= 0 ? c->bundle_index : -1;
    a->strategy = c->strategy;
    ct__rv_from_pb(&a->need, c->resources, c->n_resources);
    a->owner = *rid;
    snprintf(a->owner_name, sizeof a->owner_name, "%s", e->sender);
    snprintf(a->job, sizeof a->job, "%s", job);
    a->create_req = e->req_id;
    a->create_deadline = e->deadline_ms;
    a->req = e;
    a->req_bytes = bytes;
    h->npending++;
    h->pending_bytes += bytes;
    f->keep = true;
    a->state = A_PENDING;
    if (!place_actor(h, a, NULL)) {
        char buf[256];
        ct__rv_fmt(&a->need, buf, sizeof buf);
        CT_LOG(CT_LOG_INFO, "head", "actor %s (%s) queued: no node has %s free", a->id, a->cls,
               buf);
    }
}

void ct__head_on_actor_ready(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    Ct__ActorReady *r = e->actor_ready;
    actor *a = find_actor(h, r->actor_id);
    if (!a) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "actor_ready.actor_id",
                  "actor_ready.actor_id: no actor %s", r->actor_id);
        return;
    }
    if (!from_host(a, f)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "actor_ready.actor_id",
                        "actor_ready.actor_id: only the node hosting %s reports it ready", a->id);
        return;
    }
    if (a->state != A_STARTING)
        return;
    a->state = A_ALIVE;
    a->pid = r->pid;
    snprintf(a->addr, sizeof a->addr, "%s", r->address ? r->address : "");
    if (a->create_req) {
        Ct__Envelope o;
        Ct__CreateActorReply cr = CT__CREATE_ACTOR_REPLY__INIT;
        ct__env_init(&o, a->create_req, "head", 0);
        cr.actor_id = a->id;
        cr.node_id = h->nodes[a->node].id;
        cr.address = a->addr;
        cr.pid = a->pid;
        o.body_case = CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY;
        o.create_actor_reply = &cr;
        ct__head_send(h, &a->owner, &o);
        a->create_req = 0;
    }
}

void ct__head_on_start_failed(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    actor *a = find_actor(h, e->start_failed->actor_id);
    if (!a)
        return;
    if (!from_host(a, f)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "start_failed.actor_id",
                        "start_failed.actor_id: only the node hosting %s reports its start", a->id);
        return;
    }
    char why[600];
    snprintf(why, sizeof why, "start failed: %s", e->start_failed->reason);
    ct__head_create_error(h, a, e->start_failed->permanent ? CT_ESTART : CT_EINVAL,
                          "actor %s (%s): %s", a->id, a->cls, why);
    ct__head_actor_dead(h, a, 0, 0, 0, why);
}

void ct__head_on_actor_exited(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    Ct__ActorExited *x = e->actor_exited;
    actor *a = find_actor(h, x->actor_id);
    if (!a)
        return;
    if (!from_host(a, f)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "actor_exited.actor_id",
                        "actor_exited.actor_id: only the node hosting %s reports its end", a->id);
        return;
    }
    char why[420];
    int k = x->term_signal ? snprintf(why, sizeof why, "killed by signal %d", x->term_signal)
                           : snprintf(why, sizeof why, "exited with status %d", x->exit_status);
    if (x->stderr_tail && *x->stderr_tail) /* it died before serving: what it wrote last */
        snprintf(why + k, sizeof why - k, "; its stderr: %.360s", x->stderr_tail);
    ct__head_actor_dead(h, a, x->pid, x->exit_status, x->term_signal, why);
    ct__head_schedule(h);
}

void ct__head_on_kill_actor(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    actor *a = find_actor(h, e->kill_actor->actor_id);
    if (!a) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "kill_actor.actor_id",
                  "kill_actor.actor_id: no actor %s", e->kill_actor->actor_id);
        return;
    }
    if (!from_host(a, f)) { /* else its job (RULE_TOKEN: f->job is set) */
        const char *job = f->job;
        if (!ct__head_may_change(a->job, job)) {
            ct__head_refuse(h, rid, e, HEAD_EPERM, "kill_actor.actor_id",
                            "kill_actor.actor_id: actor %s belongs to another job", a->id);
            return;
        }
        /* an actor taken back from its node after a restart has no owner connection here: its
         * job's killer becomes it, so that the death it waits for reaches it (the trainer's
         * end of a group waited 10 s for deaths pushed to nobody) */
        if (!a->owner.len && ct__token_eq(a->job, job)) {
            a->owner = *rid;
            snprintf(a->owner_name, sizeof a->owner_name, "%s", e->sender ? e->sender : "");
        }
    }
    if (a->state == A_PENDING) {
        ct__head_create_error(h, a, CT_ECANCELED, "actor %s killed before it started", a->id);
        ct__head_actor_dead(h, a, 0, 0, 0, "killed before start");
    } else if (a->state != A_DEAD) {
        Ct__Envelope o;
        Ct__KillActor k = CT__KILL_ACTOR__INIT;
        ct__env_init(&o, 0, "head", 0);
        k.actor_id = a->id;
        o.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
        o.kill_actor = &k;
        ct__head_send(h, &h->nodes[a->node].rid, &o);
    }
    ct__head_ok(h, rid, e->req_id);
}

/* An actor that a re-registering node runs (RegisterNode.actors, nodes.c's resume_node), put
 * back into the table (appended; its id indexed) as alive on node ni, holding its resources there.
 * Its owner's connection is unknown (its create was answered by an earlier head) until its job
 * kills it (ct__head_on_kill_actor: the killer becomes its owner); until then its job's
 * subscriptions alone hear of its death. actor_seq moves past its id, so that
 * no new actor gets it. 0, or CT_EEXIST / CT_EINVAL / CT_ENOSPC / CT_ENOMEM (not taken). */
int ct__head_resume_actor(head *h, int ni, const Ct__ResumedActor *r)
{
    const char *id = r->actor_id;
    if (strncmp(id, "actor-", 6) || id[6] < '1' || id[6] > '9' || strlen(id) >= ID_LEN)
        return CT_EINVAL;
    char *end;
    unsigned long long seq = strtoull(id + 6, &end, 10);
    if (*end)
        return CT_EINVAL;
    if (find_actor(h, id)) {
        CT_LOG(CT_LOG_WARN, "head", "actor %s of node %s: the id is taken here; not taken back", id,
               h->nodes[ni].id);
        return CT_EEXIST;
    }
    if (h->nactors == h->lim.actors)
        ct__head_forget_dead(h, 0);
    if (h->nactors == h->lim.actors)
        return CT_ENOSPC;
    if (h->nactors == h->cap_actors) {
        int cap = h->cap_actors ? h->cap_actors * 2 : 256;
        cap = cap < h->lim.actors ? cap : h->lim.actors;
        actor *na = realloc(h->actors, cap * sizeof *na);
        if (!na)
            return CT_ENOMEM;
        h->actors = na;
        h->cap_actors = cap;
    }
    if (ct__index_put(&h->actor_ids, id, strlen(id), h->nactors))
        return CT_ENOMEM;
    actor *a = &h->actors[h->nactors++];
    memset(a, 0, sizeof *a);
    a->seq = seq;
    snprintf(a->id, sizeof a->id, "%s", id);
    snprintf(a->cls, sizeof a->cls, "%s", r->class_name);
    snprintf(a->job, sizeof a->job, "%s", r->job_token);
    snprintf(a->addr, sizeof a->addr, "%s", r->address ? r->address : "");
    a->node = ni;
    a->pid = r->pid;
    a->pg = a->bundle = a->want_bundle = -1;
    ct__rv_from_pb(&a->need, r->resources, r->n_resources);
    a->state = a->addr[0] ? A_ALIVE : A_STARTING;
    /* inside its group's bundle when that is reserved on this node again (state.c), else
     * straight from the node */
    int gi = r->pg_id && *r->pg_id ? ct__head_find_pg(h, r->pg_id, strlen(r->pg_id)) : -1;
    if (gi >= 0) {
        pgroup *g = &h->pgs[gi];
        if ((g->state == PG_READY || g->state == PG_PENDING) && r->bundle_index >= 0 &&
            r->bundle_index < g->nb && g->b[r->bundle_index].node == ni) {
            a->pg = gi;
            a->bundle = a->want_bundle = r->bundle_index;
            ct__rv_sub(&g->b[a->bundle].free, &a->need, 1);
        }
    }
    if (a->pg < 0)
        ct__rv_sub(&h->nodes[ni].free, &a->need, 1);
    h->nodes[ni].nactors++;
    actor_link(h, (int)(a - h->actors));
    if (h->actor_seq < seq)
        h->actor_seq = seq;
    return 0;
}
