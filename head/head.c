/* head/head.c — the control plane: node table, actor table, scheduler (PACK / SPREAD, queue
 * while nothing fits), placement groups (all-or-nothing bundles), KV with waiting gets,
 * heartbeat failure detection and event pushes, all in one single-threaded ZeroMQ ROUTER loop.
 *
 * Not in here: method calls (drivers talk to actors directly), process spawning (actor/node.c),
 * bulk data. Tables are plain arrays scanned linearly: clusters have tens of nodes and
 * thousands of actors, and every scan is O(n) in memory. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>
#include "common/common.h"
#include "head/head.h"
#include "proto/msg.h"

#define MAX_RES 16
#define ID_LEN 32

/* A resource vector: name -> amount. */
typedef struct res {
    int n;
    char name[MAX_RES][32];
    double amt[MAX_RES];
} res;

enum { A_PENDING, A_STARTING, A_ALIVE, A_DEAD };
static const char *actor_state_names[] = {"PENDING", "STARTING", "ALIVE", "DEAD"};
enum { PG_PENDING, PG_READY, PG_REMOVED };

typedef struct node {
    char id[ID_LEN];
    ct__rid rid;
    char host[64];
    int pid;
    res total, free;
    int64_t last_hb; /* ct__now_ms */
    bool alive;
    int nactors;
} node;

typedef struct actor {
    char id[ID_LEN];
    char cls[64];
    int node; /* -1 until placed */
    int pid;
    int state;
    char addr[128];
    res need;
    int strategy;
    int pg, bundle; /* -1: none / bundle chosen when placed */
    int want_bundle;
    ct__rid owner;
    char owner_name[64];
    uint64_t create_req; /* 0 once answered */
    int64_t create_deadline;
    Ct__Envelope *req; /* the create request, kept until the node is asked to start it */
    int exit_status, term_signal;
} actor;

typedef struct bundle {
    res need, free;
    int node;
} bundle;

typedef struct pgroup {
    char id[ID_LEN];
    int strategy;
    int state;
    int nb;
    bundle *b;
} pgroup;

enum { W_KV, W_PG };
typedef struct waiter {
    int kind;
    ct__rid rid;
    uint64_t req_id;
    int64_t deadline; /* ct__now_ms */
    char *key;        /* W_KV */
    int pg;           /* W_PG */
} waiter;

typedef struct kv {
    char *key;
    void *val;
    size_t len;
} kv;

typedef struct sub {
    ct__rid rid;
    uint32_t mask;
} sub;

typedef struct driver {
    char name[64];
    int64_t last_hb;
} driver;

typedef struct head {
    void *ctx, *sock;
    driver *drivers;
    int ndrivers;
    int hb_ms, dead_ms;
    int64_t last_check_ms; /* when check_heartbeats last ran */
    node *nodes;
    int nnodes;
    actor *actors;
    int nactors, cap_actors;
    pgroup *pgs;
    int npgs;
    waiter *w;
    int nw;
    kv *kv;
    int nkv;
    sub *subs;
    int nsubs;
    uint64_t seq;
} head;

/* extension handlers (head.h), registered before serving */
#define MAX_EXT 32
static struct {
    int body_case;
    ct__head_handler fn;
    void *user;
} ext[MAX_EXT];
static int next_ext;
static struct {
    ct__head_node_hook fn;
    void *user;
} node_hooks[MAX_EXT];
static int nnode_hooks;

int ct__head_add_handler(int body_case, ct__head_handler fn, void *user)
{
    for (int i = 0; i < next_ext; i++)
        if (ext[i].body_case == body_case)
            return ct__error(CT_EEXIST, "head: body case %d already has a handler", body_case);
    if (next_ext == MAX_EXT || !fn)
        return ct__error(next_ext == MAX_EXT ? CT_ENOSPC : CT_EINVAL,
                         "head: cannot add a handler for body case %d", body_case);
    ext[next_ext].body_case = body_case;
    ext[next_ext].fn = fn;
    ext[next_ext++].user = user;
    return 0;
}

static struct {
    ct__head_tick_hook fn;
    void *user;
} tick_hooks[MAX_EXT];
static int ntick_hooks;

int ct__head_add_tick_hook(ct__head_tick_hook fn, void *user)
{
    if (ntick_hooks == MAX_EXT || !fn)
        return ct__error(CT_ENOSPC, "head: cannot add a tick hook");
    tick_hooks[ntick_hooks].fn = fn;
    tick_hooks[ntick_hooks++].user = user;
    return 0;
}

int ct__head_add_node_dead_hook(ct__head_node_hook fn, void *user)
{
    if (nnode_hooks == MAX_EXT || !fn)
        return ct__error(CT_EINVAL, "head: cannot add a node-dead hook");
    node_hooks[nnode_hooks].fn = fn;
    node_hooks[nnode_hooks++].user = user;
    return 0;
}

static volatile sig_atomic_t head_stop;
static void on_term(int sig)
{
    (void)sig;
    head_stop = 1;
}

/* ---- helpers ---- */

static bool rid_eq(const ct__rid *a, const ct__rid *b)
{
    return a->len == b->len && !memcmp(a->id, b->id, a->len);
}

static void res_from_pb(res *r, Ct__Resource **pb, size_t n)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n && r->n < MAX_RES; i++) {
        if (!pb[i]->name || !*pb[i]->name || pb[i]->amount == 0)
            continue;
        snprintf(r->name[r->n], sizeof r->name[0], "%s", pb[i]->name);
        r->amt[r->n++] = pb[i]->amount;
    }
}

static double res_get(const res *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->name[i], name))
            return r->amt[i];
    return 0;
}

static bool res_fits(const res *have, const res *need)
{
    for (int i = 0; i < need->n; i++)
        if (res_get(have, need->name[i]) + 1e-9 < need->amt[i])
            return false;
    return true;
}

/* have -= need (sign 1) or have += need (sign -1); names absent from have are ignored. */
static void res_sub(res *have, const res *need, double sign)
{
    for (int i = 0; i < need->n; i++)
        for (int j = 0; j < have->n; j++)
            if (!strcmp(have->name[j], need->name[i]))
                have->amt[j] -= sign * need->amt[i];
}

static double res_sum(const res *r)
{
    double s = 0;
    for (int i = 0; i < r->n; i++)
        s += r->amt[i];
    return s;
}

static void res_fmt(const res *r, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < r->n && off < cap; i++)
        off += snprintf(buf + off, cap - off, "%s%s=%g", i ? "," : "", r->name[i], r->amt[i]);
    if (!r->n)
        snprintf(buf, cap, "(none)");
}

/* Protobuf views of a res; pointers into r, valid while r lives. */
typedef struct res_pb {
    Ct__Resource r[MAX_RES];
    Ct__Resource *p[MAX_RES];
} res_pb;
static void res_to_pb(res *r, res_pb *o)
{
    for (int i = 0; i < r->n; i++) {
        ct__resource__init(&o->r[i]);
        o->r[i].name = r->name[i];
        o->r[i].amount = r->amt[i];
        o->p[i] = &o->r[i];
    }
}

static int send_env(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    int rc = ct__msg_send(h->sock, rid, e, ZMQ_DONTWAIT);
    if (rc)
        CT_LOG(CT_LOG_WARN, "head", "send %s: %s", ct__msg_body_name(e->body_case),
               ct_last_error());
    return rc;
}

static void reply_ok(head *h, const ct__rid *rid, uint64_t req)
{
    Ct__Envelope e;
    Ct__Ok ok = CT__OK__INIT;
    ct__env_init(&e, req, "head", 0);
    e.body_case = CT__ENVELOPE__BODY_OK;
    e.ok = &ok;
    send_env(h, rid, &e);
}

#define REPLY_ERR(h, rid, req, code, field, ...)                                                   \
    ct__msg_send_error((h)->sock, (rid), (req), "head", (code), (field), __VA_ARGS__)

/* ---- events ---- */

static void push_event(head *h, Ct__Event *ev, const ct__rid *owner)
{
    Ct__Envelope e;
    ct__env_init(&e, 0, "head", 0);
    e.body_case = CT__ENVELOPE__BODY_EVENT;
    e.event = ev;
    bool owner_sent = false;
    for (int i = 0; i < h->nsubs; i++) {
        if (!(h->subs[i].mask & (1u << ev->type)))
            continue;
        if (owner && rid_eq(owner, &h->subs[i].rid))
            owner_sent = true;
        send_env(h, &h->subs[i].rid, &e);
    }
    if (owner && owner->len && !owner_sent)
        send_env(h, owner, &e);
}

/* ---- actors ---- */

static void release_actor_resources(head *h, actor *a)
{
    if (a->node < 0 || a->state == A_PENDING)
        return;
    if (a->pg >= 0 && a->bundle >= 0) {
        /* back into its bundle, if the bundle is still reserved where the actor ran */
        pgroup *g = &h->pgs[a->pg];
        if (g->state != PG_REMOVED && g->b[a->bundle].node == a->node)
            res_sub(&g->b[a->bundle].free, &a->need, -1);
    } else if (a->pg < 0)
        res_sub(&h->nodes[a->node].free, &a->need, -1);
    h->nodes[a->node].nactors--;
}

static void answer_create_error(head *h, actor *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void answer_create_error(head *h, actor *a, int code, const char *fmt, ...)
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
static void actor_dead(head *h, actor *a, int pid, int status, int sig, const char *reason)
{
    if (a->state == A_DEAD)
        return;
    release_actor_resources(h, a);
    a->state = A_DEAD;
    a->exit_status = status;
    a->term_signal = sig;
    if (pid)
        a->pid = pid;
    ct__msg_free(a->req);
    a->req = NULL;
    answer_create_error(h, a, CT_EDEAD, "actor %s (%s) died while starting: %s", a->id, a->cls,
                        reason);
    Ct__Event ev = CT__EVENT__INIT;
    ev.type = CT__EVENT_TYPE__ACTOR_DEAD;
    ev.actor_id = a->id;
    ev.node_id = a->node >= 0 ? h->nodes[a->node].id : "";
    ev.pid = a->pid;
    ev.exit_status = status;
    ev.term_signal = sig;
    ev.reason = (char *)reason;
    push_event(h, &ev, &a->owner);
    CT_LOG(CT_LOG_INFO, "head", "actor %s dead: %s", a->id, reason);
}

static actor *find_actor(head *h, const char *id)
{
    /* ids are "actor-N": index N-1 */
    if (id && !strncmp(id, "actor-", 6)) {
        long i = strtol(id + 6, NULL, 10) - 1;
        if (i >= 0 && i < h->nactors && !strcmp(h->actors[i].id, id))
            return &h->actors[i];
    }
    return NULL;
}

static int find_node(head *h, const char *id)
{
    for (int i = 0; i < h->nnodes; i++)
        if (!strcmp(h->nodes[i].id, id))
            return i;
    return -1;
}

/* Picks a node for need: PACK takes the fitting node with the least free capacity left,
 * SPREAD the one with the fewest actors (then the most free). -1 when none fits. */
static int pick_node(head *h, const res *need, int strategy, const res *frees, const int *load)
{
    int best = -1;
    for (int i = 0; i < h->nnodes; i++) {
        if (!h->nodes[i].alive || !res_fits(&frees[i], need))
            continue;
        if (best < 0) {
            best = i;
            continue;
        }
        if (strategy == CT__STRATEGY__SPREAD) {
            if (load[i] < load[best] ||
                (load[i] == load[best] && res_sum(&frees[i]) > res_sum(&frees[best])))
                best = i;
        } else if (res_sum(&frees[i]) < res_sum(&frees[best])) {
            best = i;
        }
    }
    return best;
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
            ct__objdir_holders(c->exe_object_id.data, c->exe_object_id.len, holders, 16);
        s.exe_holders = holders;
    }
    e.body_case = CT__ENVELOPE__BODY_START_ACTOR;
    e.start_actor = &s;
    send_env(h, &n->rid, &e);
    a->state = A_STARTING;
    n->nactors++;
    ct__msg_free(a->req);
    a->req = NULL;
}

/* Tries to place one pending actor. Returns true when placed. */
static bool place_actor(head *h, actor *a)
{
    if (a->pg >= 0) {
        pgroup *g = &h->pgs[a->pg];
        if (g->state == PG_REMOVED) {
            answer_create_error(h, a, CT_ENOENT, "placement group %s was removed", g->id);
            actor_dead(h, a, 0, 0, 0, "placement group removed");
            return false;
        }
        /* any reserved bundle will do, even while others of the group are being re-placed */
        for (int b = 0; b < g->nb; b++) {
            if (a->want_bundle >= 0 && b != a->want_bundle)
                continue;
            if (g->b[b].node < 0 || !h->nodes[g->b[b].node].alive ||
                !res_fits(&g->b[b].free, &a->need))
                continue;
            res_sub(&g->b[b].free, &a->need, 1);
            a->bundle = b;
            a->node = g->b[b].node;
            start_on_node(h, a);
            return true;
        }
        return false;
    }
    res frees[h->nnodes ? h->nnodes : 1];
    int load[h->nnodes ? h->nnodes : 1];
    for (int i = 0; i < h->nnodes; i++) {
        frees[i] = h->nodes[i].free;
        load[i] = h->nodes[i].nactors;
    }
    int n = pick_node(h, &a->need, a->strategy, frees, load);
    if (n < 0)
        return false;
    res_sub(&h->nodes[n].free, &a->need, 1);
    a->node = n;
    start_on_node(h, a);
    return true;
}

/* ---- placement groups ---- */

/* Reserves every unplaced bundle or none of them (all of a new group; after a node died,
 * the bundles that were on it). */
static bool place_pg(head *h, pgroup *g)
{
    if (g->state != PG_PENDING)
        return false;
    res frees[h->nnodes ? h->nnodes : 1];
    int load[h->nnodes ? h->nnodes : 1];
    for (int i = 0; i < h->nnodes; i++) {
        frees[i] = h->nodes[i].free;
        load[i] = 0;
    }
    int where[g->nb];
    for (int b = 0; b < g->nb; b++)
        if (g->b[b].node >= 0)
            load[g->b[b].node]++;
    for (int b = 0; b < g->nb; b++) {
        where[b] = g->b[b].node;
        if (where[b] >= 0)
            continue;
        int n = pick_node(h, &g->b[b].need, g->strategy, frees, load);
        if (n < 0)
            return false;
        res_sub(&frees[n], &g->b[b].need, 1);
        load[n]++;
        where[b] = n;
    }
    for (int b = 0; b < g->nb; b++) {
        if (g->b[b].node >= 0)
            continue;
        g->b[b].node = where[b];
        g->b[b].free = g->b[b].need;
        res_sub(&h->nodes[where[b]].free, &g->b[b].need, 1);
    }
    g->state = PG_READY;
    CT_LOG(CT_LOG_INFO, "head", "placement group %s ready", g->id);
    /* answer waiters */
    for (int i = 0; i < h->nw; i++) {
        if (h->w[i].kind == W_PG && &h->pgs[h->w[i].pg] == g) {
            reply_ok(h, &h->w[i].rid, h->w[i].req_id);
            h->w[i] = h->w[--h->nw];
            i--;
        }
    }
    return true;
}

/* Runs the scheduler: pending placement groups first (they were asked for first as a whole),
 * then pending actors in creation order. */
static void schedule(head *h)
{
    for (int i = 0; i < h->npgs; i++)
        place_pg(h, &h->pgs[i]);
    for (int i = 0; i < h->nactors; i++)
        if (h->actors[i].state == A_PENDING)
            place_actor(h, &h->actors[i]);
}

/* ---- nodes ---- */

static void node_dead(head *h, int ni, const char *reason)
{
    node *n = &h->nodes[ni];
    if (!n->alive)
        return;
    n->alive = false;
    CT_LOG(CT_LOG_WARN, "head", "node %s dead: %s", n->id, reason);
    for (int i = 0; i < h->nactors; i++) {
        actor *a = &h->actors[i];
        if (a->node == ni && a->state != A_DEAD && a->state != A_PENDING) {
            char why[96];
            snprintf(why, sizeof why, "node %s dead", n->id);
            actor_dead(h, a, 0, 0, 0, why);
        }
    }
    /* bundles reserved there are lost: their groups go back to pending and get those bundles
     * re-placed (all together) when room appears; the other bundles stay where they are */
    for (int i = 0; i < h->npgs; i++) {
        pgroup *g = &h->pgs[i];
        if (g->state == PG_REMOVED)
            continue;
        for (int b = 0; b < g->nb; b++)
            if (g->b[b].node == ni) {
                g->b[b].node = -1;
                g->state = PG_PENDING;
            }
        if (g->state == PG_PENDING)
            CT_LOG(CT_LOG_INFO, "head", "placement group %s lost bundles on %s", g->id, n->id);
    }
    for (int i = 0; i < nnode_hooks; i++)
        node_hooks[i].fn(h, n->id, node_hooks[i].user);
    Ct__Event ev = CT__EVENT__INIT;
    ev.type = CT__EVENT_TYPE__NODE_DEAD;
    ev.node_id = n->id;
    ev.pid = n->pid;
    ev.reason = (char *)reason;
    push_event(h, &ev, NULL);
    schedule(h);
}

static void driver_gone(head *h, int di);
static void dispatch(head *h, const ct__rid *rid, Ct__Envelope *e, bool *keep);

/* Handles what is waiting on the head socket, at most 1000 messages (so timers still run). */
static void drain(head *h)
{
    for (int k = 0; k < 1000; k++) {
        ct__rid rid;
        Ct__Envelope *e = NULL;
        int mr = ct__msg_recv(h->sock, &rid, &e, ZMQ_DONTWAIT, "head");
        if (mr == CT_ETIMEDOUT)
            break;
        if (mr == CT_EZMQ) {
            CT_LOG(CT_LOG_WARN, "head", "%s", ct_last_error());
            break;
        }
        if (mr == CT_EPROTO) {
            CT_LOG(CT_LOG_WARN, "head", "refused a message: %s", ct_last_error());
            if (rid.len)
                ct__msg_send_error(h->sock, &rid, e ? e->req_id : 0, "head", CT_EPROTO, "", "%s",
                                   ct_last_error());
            ct__msg_free(e);
            continue;
        }
        bool keep = false;
        dispatch(h, &rid, e, &keep);
        if (!keep)
            ct__msg_free(e);
    }
}

/* Whether some node or driver has been silent for longer than dead_ms. */
static bool any_overdue(head *h, int64_t now)
{
    for (int i = 0; i < h->ndrivers; i++)
        if (now - h->drivers[i].last_hb > h->dead_ms)
            return true;
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].alive && now - h->nodes[i].last_hb > h->dead_ms)
            return true;
    return false;
}

/* The failure detector. Silence only counts while the head itself was running: when its own
 * checks were apart by much more than a heartbeat period (the head was descheduled or its
 * machine starved), everyone is credited with that gap. And before anyone is declared dead,
 * the head waits up to one heartbeat period for heartbeats already on their way (ZeroMQ's I/O
 * thread may still hold them after such a gap). Measured need: under a fully loaded 2-core
 * machine, live nodes were declared dead with their heartbeats queued at the head. */
static void check_heartbeats(head *h)
{
    int64_t now = ct__now_ms();
    int64_t gap = h->last_check_ms ? now - h->last_check_ms : 0;
    h->last_check_ms = now;
    if (gap > 3 * (int64_t)h->hb_ms) {
        int64_t credit = gap - h->hb_ms;
        CT_LOG(CT_LOG_INFO, "head", "failure detector paused %lld ms; not counted as silence",
               (long long)gap);
        for (int i = 0; i < h->ndrivers; i++)
            h->drivers[i].last_hb += credit;
        for (int i = 0; i < h->nnodes; i++)
            h->nodes[i].last_hb += credit;
    }
    if (!any_overdue(h, now))
        return;
    zmq_pollitem_t it = {h->sock, 0, ZMQ_POLLIN, 0};
    int64_t until = now + h->hb_ms;
    for (int64_t left = h->hb_ms; left > 0; left = until - ct__now_ms()) {
        if (zmq_poll(&it, 1, left) <= 0)
            break;
        drain(h);
    }
    now = ct__now_ms();
    h->last_check_ms = now;
    for (int i = h->ndrivers - 1; i >= 0; i--)
        if (now - h->drivers[i].last_hb > h->dead_ms)
            driver_gone(h, i);
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].alive && now - h->nodes[i].last_hb > h->dead_ms) {
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %lld ms",
                     (long long)(now - h->nodes[i].last_hb));
            node_dead(h, i, why);
        }
}

/* ---- handlers ---- */

static void on_register_node(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__RegisterNode *r = e->register_node;
    if (!r->host || !*r->host) {
        REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "register_node.host", "register_node.host: empty");
        return;
    }
    for (size_t i = 0; i < r->n_resources; i++)
        if (r->resources[i]->amount < 0 || !r->resources[i]->name || !*r->resources[i]->name) {
            REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "register_node.resources",
                      "register_node.resources[%zu]: empty name or negative amount", i);
            return;
        }
    node *nn = realloc(h->nodes, (h->nnodes + 1) * sizeof *nn);
    if (!nn) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    h->nodes = nn;
    node *n = &h->nodes[h->nnodes++];
    memset(n, 0, sizeof *n);
    snprintf(n->id, sizeof n->id, "node-%d", h->nnodes);
    n->rid = *rid;
    snprintf(n->host, sizeof n->host, "%s", r->host);
    n->pid = r->pid;
    res_from_pb(&n->total, r->resources, r->n_resources);
    n->free = n->total;
    n->last_hb = ct__now_ms();
    n->alive = true;

    Ct__Envelope o;
    Ct__RegisterNodeReply rr = CT__REGISTER_NODE_REPLY__INIT;
    ct__env_init(&o, e->req_id, "head", 0);
    rr.node_id = n->id;
    rr.heartbeat_ms = h->hb_ms;
    o.body_case = CT__ENVELOPE__BODY_REGISTER_NODE_REPLY;
    o.register_node_reply = &rr;
    send_env(h, rid, &o);
    char buf[256];
    res_fmt(&n->total, buf, sizeof buf);
    CT_LOG(CT_LOG_INFO, "head", "node %s joined from %s: %s", n->id, n->host, buf);

    Ct__Event ev = CT__EVENT__INIT;
    ev.type = CT__EVENT_TYPE__NODE_JOINED;
    ev.node_id = n->id;
    ev.pid = n->pid;
    push_event(h, &ev, NULL);
    schedule(h);
}

static void on_driver_heartbeat(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    const char *name = e->sender ? e->sender : "";
    if (!*name || strlen(name) >= sizeof h->drivers[0].name) {
        REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "sender", "driver heartbeat: bad sender name");
        return;
    }
    for (int i = 0; i < h->ndrivers; i++)
        if (!strcmp(h->drivers[i].name, name)) {
            h->drivers[i].last_hb = ct__now_ms();
            return;
        }
    driver *nd = realloc(h->drivers, (h->ndrivers + 1) * sizeof *nd);
    if (!nd)
        return;
    h->drivers = nd;
    snprintf(h->drivers[h->ndrivers].name, sizeof nd->name, "%s", name);
    h->drivers[h->ndrivers++].last_hb = ct__now_ms();
    CT_LOG(CT_LOG_INFO, "head", "driver %s attached", name);
}

static void kill_on_node(head *h, actor *a)
{
    Ct__Envelope o;
    Ct__KillActor k = CT__KILL_ACTOR__INIT;
    ct__env_init(&o, 0, "head", 0);
    k.actor_id = a->id;
    o.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    o.kill_actor = &k;
    send_env(h, &h->nodes[a->node].rid, &o);
}

/* A driver stopped heartbeating: its actors go with it (as in Ray, actors die with their
 * owner), so a crashed driver leaves nothing running on the cluster. */
static void driver_gone(head *h, int di)
{
    CT_LOG(CT_LOG_WARN, "head", "driver %s gone: killing its actors", h->drivers[di].name);
    for (int i = 0; i < h->nactors; i++) {
        actor *a = &h->actors[i];
        if (strcmp(a->owner_name, h->drivers[di].name) || a->state == A_DEAD)
            continue;
        if (a->state == A_PENDING)
            actor_dead(h, a, 0, 0, 0, "its driver is gone");
        else
            kill_on_node(h, a);
    }
    h->drivers[di] = h->drivers[--h->ndrivers];
}

static void on_heartbeat(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    if (e->heartbeat->driver) {
        on_driver_heartbeat(h, rid, e);
        return;
    }
    int i = find_node(h, e->heartbeat->node_id ? e->heartbeat->node_id : "");
    if (i < 0 || !h->nodes[i].alive) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "heartbeat.node_id",
                  "heartbeat.node_id: %s is not a live node", e->heartbeat->node_id);
        return;
    }
    h->nodes[i].last_hb = ct__now_ms();
    if (!e->heartbeat->liveness_only)
        h->nodes[i].rid = *rid; /* the node's main socket: where its orders go */
}

static void on_create_actor(head *h, const ct__rid *rid, Ct__Envelope *e, bool *keep)
{
    Ct__CreateActor *c = e->create_actor;
    const char *bad = NULL;
    if (!c->class_name || !*c->class_name)
        bad = "create_actor.class_name";
    else if (strlen(c->class_name) >= sizeof h->actors[0].cls)
        bad = "create_actor.class_name";
    else if (!c->exe_path || !*c->exe_path)
        bad = "create_actor.exe_path";
    if (bad) {
        REPLY_ERR(h, rid, e->req_id, CT_EINVAL, bad, "%s: empty or too long", bad);
        return;
    }
    for (size_t i = 0; i < c->n_resources; i++)
        if (c->resources[i]->amount < 0) {
            REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "create_actor.resources",
                      "create_actor.resources[%zu] (%s): negative amount", i,
                      c->resources[i]->name);
            return;
        }
    int pg = -1;
    if (c->pg_id && *c->pg_id) {
        for (int i = 0; i < h->npgs; i++)
            if (!strcmp(h->pgs[i].id, c->pg_id))
                pg = i;
        if (pg < 0 || h->pgs[pg].state == PG_REMOVED) {
            REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "create_actor.pg_id",
                      "create_actor.pg_id: no placement group %s", c->pg_id);
            return;
        }
        if (c->bundle_index >= h->pgs[pg].nb) {
            REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "create_actor.bundle_index",
                      "create_actor.bundle_index: %d, group %s has %d bundles", c->bundle_index,
                      c->pg_id, h->pgs[pg].nb);
            return;
        }
    }
    if (h->nactors == h->cap_actors) {
        int cap = h->cap_actors ? h->cap_actors * 2 : 256;
        actor *na = realloc(h->actors, cap * sizeof *na);
        if (!na) {
            REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
            return;
        }
        h->actors = na;
        h->cap_actors = cap;
    }
    actor *a = &h->actors[h->nactors++];
    memset(a, 0, sizeof *a);
    snprintf(a->id, sizeof a->id, "actor-%d", h->nactors);
    snprintf(a->cls, sizeof a->cls, "%s", c->class_name);
    a->node = -1;
    a->pg = pg;
    a->bundle = -1;
    a->want_bundle = pg >= 0 ? c->bundle_index : -1;
    a->strategy = c->strategy;
    res_from_pb(&a->need, c->resources, c->n_resources);
    a->owner = *rid;
    snprintf(a->owner_name, sizeof a->owner_name, "%s", e->sender);
    a->create_req = e->req_id;
    a->create_deadline = e->deadline_ms;
    a->req = e;
    *keep = true;
    a->state = A_PENDING;
    if (!place_actor(h, a)) {
        char buf[256];
        res_fmt(&a->need, buf, sizeof buf);
        CT_LOG(CT_LOG_INFO, "head", "actor %s (%s) queued: no node has %s free", a->id, a->cls,
               buf);
    }
}

static void on_actor_ready(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__ActorReady *r = e->actor_ready;
    actor *a = find_actor(h, r->actor_id);
    if (!a) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "actor_ready.actor_id",
                  "actor_ready.actor_id: no actor %s", r->actor_id);
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
        send_env(h, &a->owner, &o);
        a->create_req = 0;
    }
}

static void on_start_failed(head *h, Ct__Envelope *e)
{
    actor *a = find_actor(h, e->start_failed->actor_id);
    if (!a)
        return;
    char why[600];
    snprintf(why, sizeof why, "start failed: %s", e->start_failed->reason);
    answer_create_error(h, a, CT_EINVAL, "actor %s (%s): %s", a->id, a->cls, why);
    actor_dead(h, a, 0, 0, 0, why);
}

static void on_actor_exited(head *h, Ct__Envelope *e)
{
    Ct__ActorExited *x = e->actor_exited;
    actor *a = find_actor(h, x->actor_id);
    if (!a)
        return;
    char why[96];
    if (x->term_signal)
        snprintf(why, sizeof why, "killed by signal %d", x->term_signal);
    else
        snprintf(why, sizeof why, "exited with status %d", x->exit_status);
    actor_dead(h, a, x->pid, x->exit_status, x->term_signal, why);
    schedule(h);
}

static void on_kill_actor(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    actor *a = find_actor(h, e->kill_actor->actor_id);
    if (!a) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "kill_actor.actor_id",
                  "kill_actor.actor_id: no actor %s", e->kill_actor->actor_id);
        return;
    }
    if (a->state == A_PENDING) {
        answer_create_error(h, a, CT_ECANCELED, "actor %s killed before it started", a->id);
        actor_dead(h, a, 0, 0, 0, "killed before start");
    } else if (a->state != A_DEAD) {
        Ct__Envelope o;
        Ct__KillActor k = CT__KILL_ACTOR__INIT;
        ct__env_init(&o, 0, "head", 0);
        k.actor_id = a->id;
        o.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
        o.kill_actor = &k;
        send_env(h, &h->nodes[a->node].rid, &o);
    }
    reply_ok(h, rid, e->req_id);
}

static kv *kv_find(head *h, const char *key)
{
    for (int i = 0; i < h->nkv; i++)
        if (!strcmp(h->kv[i].key, key))
            return &h->kv[i];
    return NULL;
}

static void reply_kv(head *h, const ct__rid *rid, uint64_t req, kv *k)
{
    Ct__Envelope o;
    Ct__KvGetReply r = CT__KV_GET_REPLY__INIT;
    ct__env_init(&o, req, "head", 0);
    r.value.data = k->val;
    r.value.len = k->len;
    o.body_case = CT__ENVELOPE__BODY_KV_GET_REPLY;
    o.kv_get_reply = &r;
    send_env(h, rid, &o);
}

static void on_kv_put(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__KvPut *p = e->kv_put;
    if (!p->key || !*p->key) {
        REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "kv_put.key", "kv_put.key: empty");
        return;
    }
    kv *k = kv_find(h, p->key);
    void *val = malloc(p->value.len ? p->value.len : 1);
    if (!val) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "kv_put.value", "kv_put.value: out of memory");
        return;
    }
    memcpy(val, p->value.data, p->value.len);
    if (!k) {
        kv *nk = realloc(h->kv, (h->nkv + 1) * sizeof *nk);
        char *key = strdup(p->key);
        if (!nk || !key) {
            if (nk)
                h->kv = nk;
            free(key);
            free(val);
            REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "kv_put", "kv_put: out of memory");
            return;
        }
        h->kv = nk;
        k = &h->kv[h->nkv++];
        k->key = key;
        k->val = NULL;
    }
    free(k->val);
    k->val = val;
    k->len = p->value.len;
    reply_ok(h, rid, e->req_id);
    for (int i = 0; i < h->nw; i++) {
        if (h->w[i].kind == W_KV && !strcmp(h->w[i].key, k->key)) {
            reply_kv(h, &h->w[i].rid, h->w[i].req_id, k);
            free(h->w[i].key);
            h->w[i] = h->w[--h->nw];
            i--;
        }
    }
}

static int add_waiter(head *h, waiter *w)
{
    waiter *nw = realloc(h->w, (h->nw + 1) * sizeof *nw);
    if (!nw)
        return CT_ENOMEM;
    h->w = nw;
    h->w[h->nw++] = *w;
    return 0;
}

static void on_kv_get(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__KvGet *g = e->kv_get;
    if (!g->key || !*g->key) {
        REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "kv_get.key", "kv_get.key: empty");
        return;
    }
    kv *k = kv_find(h, g->key);
    if (k) {
        reply_kv(h, rid, e->req_id, k);
        return;
    }
    if (g->wait_ms <= 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "kv_get.key", "kv_get.key: no key %s", g->key);
        return;
    }
    waiter w = {.kind = W_KV,
                .rid = *rid,
                .req_id = e->req_id,
                .deadline = ct__now_ms() + g->wait_ms,
                .key = strdup(g->key)};
    if (!w.key || add_waiter(h, &w)) {
        free(w.key);
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
    }
}

static void on_kv_del(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    kv *k = kv_find(h, e->kv_del->key ? e->kv_del->key : "");
    if (!k) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "kv_del.key", "kv_del.key: no key %s",
                  e->kv_del->key);
        return;
    }
    free(k->key);
    free(k->val);
    *k = h->kv[--h->nkv];
    reply_ok(h, rid, e->req_id);
}

static void on_subscribe(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    for (int i = 0; i < h->nsubs; i++)
        if (rid_eq(&h->subs[i].rid, rid)) {
            h->subs[i].mask = e->subscribe->mask;
            reply_ok(h, rid, e->req_id);
            return;
        }
    sub *ns = realloc(h->subs, (h->nsubs + 1) * sizeof *ns);
    if (!ns) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    h->subs = ns;
    h->subs[h->nsubs].rid = *rid;
    h->subs[h->nsubs++].mask = e->subscribe->mask;
    reply_ok(h, rid, e->req_id);
}

static void on_pg_create(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__PgCreate *p = e->pg_create;
    if (p->n_bundles == 0 || p->n_bundles > 4096) {
        REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "pg_create.bundles",
                  "pg_create.bundles: %zu bundles (want 1..4096)", p->n_bundles);
        return;
    }
    pgroup *ng = realloc(h->pgs, (h->npgs + 1) * sizeof *ng);
    bundle *b = calloc(p->n_bundles, sizeof *b);
    if (!ng || !b) {
        if (ng)
            h->pgs = ng;
        free(b);
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    h->pgs = ng;
    pgroup *g = &h->pgs[h->npgs++];
    memset(g, 0, sizeof *g);
    snprintf(g->id, sizeof g->id, "pg-%d", h->npgs);
    g->strategy = p->strategy;
    g->nb = (int)p->n_bundles;
    g->b = b;
    for (int i = 0; i < g->nb; i++) {
        res_from_pb(&b[i].need, p->bundles[i]->resources, p->bundles[i]->n_resources);
        b[i].node = -1;
    }
    g->state = PG_PENDING;
    Ct__Envelope o;
    Ct__PgCreateReply r = CT__PG_CREATE_REPLY__INIT;
    ct__env_init(&o, e->req_id, "head", 0);
    r.pg_id = g->id;
    o.body_case = CT__ENVELOPE__BODY_PG_CREATE_REPLY;
    o.pg_create_reply = &r;
    send_env(h, rid, &o);
    if (!place_pg(h, g))
        CT_LOG(CT_LOG_INFO, "head", "placement group %s pending", g->id);
}

static int find_pg(head *h, const char *id)
{
    for (int i = 0; i < h->npgs; i++)
        if (id && !strcmp(h->pgs[i].id, id) && h->pgs[i].state != PG_REMOVED)
            return i;
    return -1;
}

static void on_pg_wait(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    int i = find_pg(h, e->pg_wait->pg_id);
    if (i < 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "pg_wait.pg_id", "pg_wait.pg_id: no group %s",
                  e->pg_wait->pg_id);
        return;
    }
    if (h->pgs[i].state == PG_READY) {
        reply_ok(h, rid, e->req_id);
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
    if (add_waiter(h, &w))
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
}

static void on_pg_remove(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    int i = find_pg(h, e->pg_remove->pg_id);
    if (i < 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "pg_remove.pg_id", "pg_remove.pg_id: no group %s",
                  e->pg_remove->pg_id);
        return;
    }
    pgroup *g = &h->pgs[i];
    /* actors inside the group go with it (as in Ray) */
    for (int j = 0; j < h->nactors; j++) {
        actor *a = &h->actors[j];
        if (a->pg != i || a->state == A_DEAD)
            continue;
        if (a->state == A_PENDING) {
            answer_create_error(h, a, CT_ECANCELED, "placement group %s removed", g->id);
            actor_dead(h, a, 0, 0, 0, "placement group removed");
            continue;
        }
        Ct__Envelope o;
        Ct__KillActor k = CT__KILL_ACTOR__INIT;
        ct__env_init(&o, 0, "head", 0);
        k.actor_id = a->id;
        o.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
        o.kill_actor = &k;
        send_env(h, &h->nodes[a->node].rid, &o);
    }
    for (int b = 0; b < g->nb; b++)
        if (g->b[b].node >= 0)
            res_sub(&h->nodes[g->b[b].node].free, &g->b[b].need, -1);
    g->state = PG_REMOVED;
    for (int j = 0; j < h->nw; j++)
        if (h->w[j].kind == W_PG && h->w[j].pg == i) {
            REPLY_ERR(h, &h->w[j].rid, h->w[j].req_id, CT_ECANCELED, "",
                      "placement group %s removed", g->id);
            h->w[j] = h->w[--h->nw];
            j--;
        }
    reply_ok(h, rid, e->req_id);
    schedule(h);
}

static void on_status(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    int nn = h->nnodes, na = h->nactors, np = h->npgs;
    Ct__NodeInfo *ni = calloc(nn + 1, sizeof *ni);
    Ct__NodeInfo **nip = calloc(nn + 1, sizeof *nip);
    res_pb *tot = calloc(nn + 1, sizeof *tot), *fre = calloc(nn + 1, sizeof *fre);
    Ct__ActorInfo *ai = calloc(na + 1, sizeof *ai);
    Ct__ActorInfo **aip = calloc(na + 1, sizeof *aip);
    Ct__PgInfo *pi = calloc(np + 1, sizeof *pi);
    Ct__PgInfo **pip = calloc(np + 1, sizeof *pip);
    char **bn = NULL;
    size_t nbn = 0;
    for (int i = 0; i < np; i++)
        nbn += h->pgs[i].nb;
    bn = calloc(nbn + 1, sizeof *bn);
    if (!ni || !nip || !tot || !fre || !ai || !aip || !pi || !pip || !bn) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        goto out;
    }
    for (int i = 0; i < nn; i++) {
        node *n = &h->nodes[i];
        ct__node_info__init(&ni[i]);
        ni[i].node_id = n->id;
        ni[i].host = n->host;
        ni[i].alive = n->alive;
        ni[i].pid = n->pid;
        res_to_pb(&n->total, &tot[i]);
        res_to_pb(&n->free, &fre[i]);
        ni[i].n_total = n->total.n;
        ni[i].total = tot[i].p;
        ni[i].n_free = n->free.n;
        ni[i].free = fre[i].p;
        const char *xa = "";
        ct__objdir_node_usage(n->id, &xa, &ni[i].store_capacity, &ni[i].store_objects,
                              &ni[i].store_bytes);
        ni[i].xfer_address = (char *)xa;
        nip[i] = &ni[i];
    }
    for (int i = 0; i < na; i++) {
        actor *a = &h->actors[i];
        ct__actor_info__init(&ai[i]);
        ai[i].actor_id = a->id;
        ai[i].class_name = a->cls;
        ai[i].node_id = a->node >= 0 ? h->nodes[a->node].id : "";
        ai[i].pid = a->pid;
        ai[i].state = (char *)actor_state_names[a->state];
        ai[i].address = a->addr;
        aip[i] = &ai[i];
    }
    size_t k = 0;
    for (int i = 0; i < np; i++) {
        pgroup *g = &h->pgs[i];
        ct__pg_info__init(&pi[i]);
        pi[i].pg_id = g->id;
        pi[i].state = g->state == PG_READY     ? "READY"
                      : g->state == PG_PENDING ? "PENDING"
                                               : "REMOVED";
        pi[i].bundle_nodes = &bn[k];
        for (int b = 0; b < g->nb; b++)
            bn[k++] = g->state != PG_REMOVED && g->b[b].node >= 0 ? h->nodes[g->b[b].node].id : "";
        pi[i].n_bundle_nodes = g->nb;
        pip[i] = &pi[i];
    }
    Ct__Envelope o;
    Ct__StatusReply sr = CT__STATUS_REPLY__INIT;
    ct__env_init(&o, e->req_id, "head", 0);
    sr.n_nodes = nn;
    sr.nodes = nip;
    sr.n_actors = na;
    sr.actors = aip;
    sr.n_pgs = np;
    sr.pgs = pip;
    o.body_case = CT__ENVELOPE__BODY_STATUS_REPLY;
    o.status_reply = &sr;
    send_env(h, rid, &o);
out:
    free(ni);
    free(nip);
    free(tot);
    free(fre);
    free(ai);
    free(aip);
    free(pi);
    free(pip);
    free(bn);
}

/* Handles one received envelope; sets *keep when the handler took ownership of e. */
static void dispatch(head *h, const ct__rid *rid, Ct__Envelope *e, bool *keep)
{
    CT_LOG(CT_LOG_DEBUG, "head", "%s #%llu from %s", ct__msg_body_name(e->body_case),
           (unsigned long long)e->req_id, e->sender);
    if (e->deadline_ms && ct__deadline_left(e->deadline_ms) < 0) {
        CT_LOG(CT_LOG_DEBUG, "head", "dropped expired %s from %s", ct__msg_body_name(e->body_case),
               e->sender);
        return;
    }
    switch (e->body_case) {
    case CT__ENVELOPE__BODY_PING:
        reply_ok(h, rid, e->req_id);
        break;
    case CT__ENVELOPE__BODY_REGISTER_NODE:
        on_register_node(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_HEARTBEAT:
        on_heartbeat(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_CREATE_ACTOR:
        on_create_actor(h, rid, e, keep);
        break;
    case CT__ENVELOPE__BODY_ACTOR_READY:
        on_actor_ready(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_START_FAILED:
        on_start_failed(h, e);
        break;
    case CT__ENVELOPE__BODY_ACTOR_EXITED:
        on_actor_exited(h, e);
        break;
    case CT__ENVELOPE__BODY_KILL_ACTOR:
        on_kill_actor(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_KV_PUT:
        on_kv_put(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_KV_GET:
        on_kv_get(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_KV_DEL:
        on_kv_del(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_SUBSCRIBE:
        on_subscribe(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_PG_CREATE:
        on_pg_create(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_PG_WAIT:
        on_pg_wait(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_PG_REMOVE:
        on_pg_remove(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_STATUS:
        on_status(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_ERROR:
        CT_LOG(CT_LOG_WARN, "head", "error from %s: %s", e->sender,
               e->error->message ? e->error->message : "");
        break;
    default:
        for (int i = 0; i < next_ext; i++)
            if (ext[i].body_case == (int)e->body_case) {
                ext[i].fn(h, rid, e, ext[i].user);
                return;
            }
        REPLY_ERR(h, rid, e->req_id, CT_EPROTO, "body", "the head does not handle %s",
                  ct__msg_body_name(e->body_case));
        break;
    }
}

bool ct__head_is_node(ct__head *h, const char *node_id, const ct__rid *rid)
{
    int i = node_id ? find_node(h, node_id) : -1;
    return i >= 0 && h->nodes[i].alive && (!rid || rid_eq(rid, &h->nodes[i].rid));
}

int ct__head_send(ct__head *h, const ct__rid *rid, Ct__Envelope *e)
{
    return send_env(h, rid, e);
}

static void expire(head *h)
{
    int64_t now = ct__now_ms();
    for (int i = 0; i < h->nw; i++) {
        if (h->w[i].deadline > now)
            continue;
        if (h->w[i].kind == W_KV)
            REPLY_ERR(h, &h->w[i].rid, h->w[i].req_id, CT_ETIMEDOUT, "kv_get.key",
                      "kv_get: key %s did not appear in time", h->w[i].key);
        else
            REPLY_ERR(h, &h->w[i].rid, h->w[i].req_id, CT_ETIMEDOUT, "pg_wait",
                      "placement group %s still pending", h->pgs[h->w[i].pg].id);
        free(h->w[i].key);
        h->w[i] = h->w[--h->nw];
        i--;
    }
    for (int i = 0; i < h->nactors; i++) {
        actor *a = &h->actors[i];
        if (a->state == A_PENDING && a->create_deadline &&
            ct__deadline_left(a->create_deadline) < 0) {
            char buf[256];
            res_fmt(&a->need, buf, sizeof buf);
            answer_create_error(h, a, CT_ETIMEDOUT, "actor %s (%s): no node had %s free in time",
                                a->id, a->cls, buf);
            actor_dead(h, a, 0, 0, 0, "not scheduled before its deadline");
        }
    }
}

static void head_free(head *h)
{
    for (int i = 0; i < h->nactors; i++)
        ct__msg_free(h->actors[i].req);
    for (int i = 0; i < h->npgs; i++)
        free(h->pgs[i].b);
    for (int i = 0; i < h->nw; i++)
        free(h->w[i].key);
    for (int i = 0; i < h->nkv; i++) {
        free(h->kv[i].key);
        free(h->kv[i].val);
    }
    free(h->drivers);
    free(h->nodes);
    free(h->actors);
    free(h->pgs);
    free(h->w);
    free(h->kv);
    free(h->subs);
    ct__objdir_reset();
    if (h->sock)
        zmq_close(h->sock);
    if (h->ctx)
        zmq_ctx_term(h->ctx);
}

int ct__head_run(const ct_head_opts *o)
{
    head h = {0};
    int rc = 0;
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    h.hb_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : 100;
    h.dead_ms = o->dead_after_ms > 0 ? o->dead_after_ms : 1000;
    ct__log_set_who("head");
    if ((rc = ct__objdir_install()))
        goto out;
    h.ctx = zmq_ctx_new();
    h.sock = h.ctx ? zmq_socket(h.ctx, ZMQ_ROUTER) : NULL;
    if (!h.sock) {
        rc = ct__error(CT_EZMQ, "head: cannot create socket: %s", zmq_strerror(errno));
        goto out;
    }
    int zero = 0;
    zmq_setsockopt(h.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(h.sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(h.sock, ZMQ_RCVHWM, &zero, sizeof zero);
    /* a peer's claimed frame size is not trusted: garbage on the port must not make libzmq
     * allocate terabytes (found by tests/runtime/test_fuzz.c under ASan) */
    int64_t maxmsg = 64LL << 20;
    zmq_setsockopt(h.sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    char ep[300];
    if (o->port)
        snprintf(ep, sizeof ep, "tcp://%s:%d", host, o->port);
    else
        snprintf(ep, sizeof ep, "tcp://%s:*", host);
    if (zmq_bind(h.sock, ep) != 0) {
        rc = ct__error(CT_EZMQ, "head: cannot listen on %s: %s", ep + 6, zmq_strerror(errno));
        goto out;
    }
    size_t len = sizeof ep;
    zmq_getsockopt(h.sock, ZMQ_LAST_ENDPOINT, ep, &len);
    const char *colon = strrchr(ep, ':');
    int port = colon ? atoi(colon + 1) : o->port;
    char line[320];
    int n = snprintf(line, sizeof line, "listening on %s:%d\n", host, port);
    if (o->ready_fd >= 0) {
        if (write(o->ready_fd, line, n) != n)
            CT_LOG(CT_LOG_WARN, "head", "cannot report readiness: %s", strerror(errno));
    } else {
        fputs(line, stdout);
        fflush(stdout);
    }
    CT_LOG(CT_LOG_INFO, "head", "%.*s", n - 1, line);

    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int tick = h.hb_ms / 2 < 20 ? h.hb_ms / 2 : 20;
    if (tick < 1)
        tick = 1;
    int64_t next_tick = ct__now_ms() + tick;
    while (!head_stop) {
        zmq_pollitem_t it[2] = {{h.sock, 0, ZMQ_POLLIN, 0}, {NULL, o->watch_fd, ZMQ_POLLIN, 0}};
        int nit = o->watch_fd >= 0 ? 2 : 1;
        int64_t wait = next_tick - ct__now_ms();
        int r = zmq_poll(it, nit, wait < 0 ? 0 : wait);
        if (r < 0 && errno != EINTR) {
            rc = ct__error(CT_EZMQ, "head: poll: %s", zmq_strerror(errno));
            break;
        }
        if (nit == 2 && (it[1].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) {
            CT_LOG(CT_LOG_INFO, "head", "parent gone, exiting");
            break;
        }
        drain(&h);
        if (ct__now_ms() >= next_tick) {
            check_heartbeats(&h);
            expire(&h);
            for (int i = 0; i < ntick_hooks; i++)
                tick_hooks[i].fn(&h, tick_hooks[i].user);
            next_tick = ct__now_ms() + tick;
        }
    }
out:
    head_free(&h);
    return rc;
}
