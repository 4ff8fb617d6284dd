/* head/head.c — the control plane: node table, actor table, scheduler (PACK / SPREAD, queue
 * while nothing fits), placement groups (all-or-nothing bundles), KV with waiting gets,
 * heartbeat failure detection and event pushes, all in one single-threaded ZeroMQ ROUTER loop.
 *
 * Authority. Only holders of the cluster secret get through the port (CURVE, common/auth.h);
 * among them, what a message may do rests on the token it carries (Envelope.token):
 * - Nodes. RegisterNode gives the node a random id ("node-" and 12 hex digits, node_id_new) and
 *   a random secret. A message that speaks for node N (heartbeat; actor ready, start failed,
 *   exited; the object directory's node reports) must carry N's token, from whichever of N's
 *   connections it comes. Orders go to the routing id that registered N, moved only by a
 *   main-socket heartbeat with the token (a reconnect). One node per connection.
 * - Jobs. A job is a driver and the actors it created (and theirs): the driver draws a token at
 *   ct_init and its actors inherit it (StartActor.job_token). Messages that create or change
 *   shared state (actors, placement groups, KV, objects, driver heartbeats) must carry one.
 *   An actor is killed by its job or reported (ready, failed, exited) by the node hosting it;
 *   a placement group is used and removed by its job; a KV key is changed by the job that wrote
 *   it (the rule at on_kv_put); an object is freed by its job (objdir.c). Reads (status, KV
 *   gets, object locations and fetches, events) are open to every peer.
 * Bounded input. A message is at most HEAD_MAX_MSG bytes and may cost at most DECODE_MAX
 * bytes when decoded (less when small); a peer has at most HEAD_RCVHWM messages queued;
 * every table has a limit (MAX_*); resource amounts are finite and in [0, MAX_AMOUNT]; dead
 * nodes and actors are forgotten GONE_AFTER_MS after they died. A refusal is an Error to the
 * sender naming the field, and a log line (ct__head_refuse: a flood is counted, not logged).
 *
 * Not in here: method calls (drivers talk to actors directly), process spawning (actor/node.c),
 * bulk data. Tables are plain arrays scanned linearly: clusters have tens of nodes and
 * thousands of actors, and every scan is O(n) in memory. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>
#include "common/auth.h"
#include "common/common.h"
#include "head/head.h"
#include "head/watch.h"
#include "proto/msg.h"

#define MAX_RES 16
#define ID_LEN 32
#define NODE_ID_HEX 12 /* random hex digits in a node id: "node-" and 12, 18 bytes with the NUL */
#define TOK_SIZE (CT_TOKEN_LEN + 1)
/* "not yours": a negated errno like ct/error.h's codes (which has no CT_EPERM yet) */
#define HEAD_EPERM (-EPERM)

/* Limits on what peers can make the head hold, generous for real clusters (tens of nodes,
 * thousands of actors) and small enough that no flood exhausts the head: every table full
 * (objdir.c's included) takes about 500 MB. Each is refused with an Error naming the field. */
#define HEAD_MAX_MSG (2 << 20)      /* bytes in one message (ZMQ_MAXMSGSIZE: the peer is cut off) */
#define HEAD_RCVHWM 100             /* messages queued per peer; then TCP pushes back (no loss) */
#define HEAD_SNDHWM 100000          /* messages queued to one peer; then they are dropped */
#define DECODE_FLOOR (256 << 10)    /* what decoding a message of n bytes may allocate: */
#define DECODE_MULT 8               /* min(DECODE_MAX, DECODE_FLOOR + DECODE_MULT * n) bytes */
#define DECODE_MAX (1 << 20)        /* (proto/msg.h); room for the largest KV value */
#define MAX_NODES 1024              /* live, and dead ones not yet forgotten */
#define MAX_ACTORS 65536            /* live, and dead ones not yet forgotten */
#define MAX_PENDING 16384           /* creations waiting for room (each keeps its request) */
#define MAX_PENDING_MEM (128 << 20) /* their requests' memory */
#define MAX_ARGV 1024               /* create_actor.argv entries */
#define MAX_PATH 4096               /* create_actor.exe_path bytes */
#define MAX_PGS 4096                /* placement groups, removed ones included until freed */
#define MAX_BUNDLES 4096            /* bundles in one group */
#define MAX_BUNDLES_ALL 16384       /* bundles in all groups */
#define MAX_KV 65536                /* keys */
#define MAX_KV_KEY 4096             /* bytes in a key */
#define MAX_KV_VALUE (512 << 10)    /* bytes in a value */
#define MAX_KV_BYTES (128 << 20)    /* keys and values in all */
#define MAX_WAITERS 16384           /* KV gets and placement group waits waiting */
#define MAX_SUBS 4096               /* event subscribers */
#define MAX_DRIVERS 4096            /* heartbeating drivers */
#define MAX_AMOUNT 1e9              /* largest amount of one resource */
#define GONE_AFTER_MS 60000         /* dead nodes and actors are listed this long */
#define HEAD_HB_MS 100              /* default heartbeat period */
#define HEAD_DEAD_MS 10000          /* default silence before a node or driver is dead */
#define REFUSALS_LOGGED 20          /* refusals logged per second; the rest are counted */

/* A resource vector: name -> amount. */
typedef struct res {
    int n;
    char name[MAX_RES][32];
    double amt[MAX_RES];
} res;

enum { A_PENDING, A_STARTING, A_ALIVE, A_DEAD };
static const char *actor_state_names[] = {"PENDING", "STARTING", "ALIVE", "DEAD"};
/* PG_FREE: an unused slot (a removed group no actor refers to any more) */
enum { PG_PENDING, PG_READY, PG_REMOVED, PG_FREE };

typedef struct node {
    char id[ID_LEN];
    char token[TOK_SIZE]; /* its secret: a message that speaks for it carries it */
    ct__rid rid;          /* its main connection: where its orders go */
    char host[64];
    int pid;
    res total, free;
    int64_t silent;        /* ms of silence counted against it (check_heartbeats) */
    int64_t dead_at;       /* when it was declared dead */
    char ticket[TOK_SIZE]; /* its death-watch ticket, until its connection says hello */
    uint64_t watch;        /* its death-watch connection (head/watch.h); 0: none */
    bool used;             /* the slot holds a node, alive or dead but not yet forgotten */
    bool alive;
    int nactors;
} node;

typedef struct actor {
    char id[ID_LEN];
    uint64_t seq; /* N of its id "actor-N"; the table is kept sorted by it */
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
    char job[TOK_SIZE];  /* the job that created it: it may kill it */
    uint64_t create_req; /* 0 once answered */
    int64_t create_deadline;
    Ct__Envelope *req; /* the create request, kept until the node is asked to start it */
    size_t req_bytes;  /* its memory (estimated), counted in pending_bytes */
    int exit_status, term_signal;
    int64_t dead_at;
} actor;

typedef struct bundle {
    res need, free;
    int node;
    int pick; /* place_pg's choice, before it commits */
} bundle;

typedef struct pgroup {
    char id[ID_LEN];
    char job[TOK_SIZE]; /* the job that created it: it may use and remove it */
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
    char job[TOK_SIZE]; /* the job that may change it; "" released (on_kv_put) */
} kv;

typedef struct sub {
    ct__rid rid;
    uint32_t mask;
    char job[TOK_SIZE]; /* the subscriber's job ("" none): dropped when its driver is gone */
} sub;

typedef struct driver {
    char name[64];
    char job[TOK_SIZE];
    int64_t silent;        /* ms of silence counted against it (check_heartbeats) */
    char ticket[TOK_SIZE]; /* its death-watch ticket, until its connection says hello */
    uint64_t watch;        /* its death-watch connection; 0: none */
} driver;

typedef struct head {
    void *ctx, *sock;
    bool zap;         /* a ZAP handler runs in ctx (stopped before ctx ends) */
    ct__watch *watch; /* the death-watch port (NULL: none, heartbeats only) */
    driver *drivers;
    int ndrivers;
    int hb_ms, dead_ms;
    int64_t last_check_ms; /* when check_heartbeats last ran */
    node *nodes;
    int nnodes, cap_nodes; /* slots ever used (free ones: !used), allocated */
    res *frees;            /* place_pg's scratch, cap_nodes each */
    int *load;
    actor *actors;
    int nactors, cap_actors;
    int npending;         /* actors waiting for room (holding their request) */
    size_t pending_bytes; /* those requests' memory */
    pgroup *pgs;
    int npgs, cap_pgs;
    int nbundles; /* in all group slots */
    waiter *w;
    int nw, cap_w;
    kv *kv;
    int nkv, cap_kv;
    size_t kv_bytes; /* keys and values */
    sub *subs;
    int nsubs;
    uint64_t actor_seq, pg_seq; /* the N of the next "actor-N", "pg-N" (node ids are random) */
    int64_t last_gc;
    int64_t refuse_window;              /* ct__head_refuse's rate limit: this second's start, */
    int refuse_logged, refuse_unlogged; /* lines logged in it, refusals not logged */
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

/* Set by SIGTERM/SIGINT, which the kernel may deliver to any thread (libzmq's I/O threads
 * too): an atomic, not a volatile sig_atomic_t, which is safe only within one thread (the data
 * race ThreadSanitizer reported in actor/node.c). Lock-free, so async-signal-safe. */
static atomic_int head_stop;
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

/* Checks a resource list from a peer, named list in messages: at most MAX_RES entries, names
 * of 1..31 bytes, each once, amounts finite and in [0, MAX_AMOUNT] (NaN passes every `< 0`
 * test and stays in the tables for good; a negative amount adds free capacity). Returns 0, or
 * CT_EINVAL with the offending field in field[] and why in msg[]. */
static int res_check(Ct__Resource **r, size_t n, const char *list, char *field, size_t fcap,
                     char *msg, size_t mcap)
{
    if (n > MAX_RES) {
        snprintf(field, fcap, "%s", list);
        snprintf(msg, mcap, "%s: %zu entries, at most %d", list, n, MAX_RES);
        return CT_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = r[i]->name ? r[i]->name : "";
        double v = r[i]->amount;
        size_t len = strlen(name);
        if (!len || len >= sizeof((res *)0)->name[0]) {
            snprintf(field, fcap, "%s[%zu].name", list, i);
            snprintf(msg, mcap, "%s: empty or longer than %zu bytes", field,
                     sizeof((res *)0)->name[0] - 1);
            return CT_EINVAL;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(name, r[j]->name)) {
                snprintf(field, fcap, "%s[%zu].name", list, i);
                snprintf(msg, mcap, "%s: %s is listed twice", field, name);
                return CT_EINVAL;
            }
        if (!isfinite(v) || v < 0 || v > MAX_AMOUNT) {
            snprintf(field, fcap, "%s[%zu].amount", list, i);
            snprintf(msg, mcap, "%s (%s): %g is not a finite number in [0, %g]", field, name, v,
                     MAX_AMOUNT);
            return CT_EINVAL;
        }
    }
    return 0;
}

/* r must have passed res_check. */
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

/* A peer's string made fit for a log line: printable ASCII, at most cap - 1 bytes. */
static const char *printable(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < cap; i++)
        buf[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
    buf[i] = 0;
    return buf;
}

/* Logs how many refusals the last second did not log. */
static void flush_refusals(head *h)
{
    if (h->refuse_unlogged)
        CT_LOG(CT_LOG_WARN, "head", "refused %d more messages (not logged one by one)",
               h->refuse_unlogged);
    h->refuse_window = ct__now_ms();
    h->refuse_logged = h->refuse_unlogged = 0;
}

void ct__head_refuse(ct__head *h, const ct__rid *rid, const Ct__Envelope *e, int code,
                     const char *field, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rid && rid->len)
        ct__msg_send_error(h->sock, rid, e ? e->req_id : 0, "head", code, field ? field : "", "%s",
                           msg);
    if (ct__now_ms() - h->refuse_window >= 1000)
        flush_refusals(h);
    if (h->refuse_logged == REFUSALS_LOGGED) {
        h->refuse_unlogged++;
        return;
    }
    h->refuse_logged++;
    char who[80], text[600];
    CT_LOG(CT_LOG_WARN, "head", "refused %s from %s: %s",
           e ? ct__msg_body_name(e->body_case) : "a message",
           printable(e && e->sender && *e->sender ? e->sender : "(unnamed peer)", who, sizeof who),
           printable(msg, text, sizeof text));
}

const char *ct__head_job(ct__head *h, const ct__rid *rid, const Ct__Envelope *e)
{
    if (ct__token_valid(e->token))
        return e->token;
    ct__head_refuse(h, rid, e, HEAD_EPERM, "token",
                    "token: %s creates or changes shared state and needs a job token",
                    ct__msg_body_name(e->body_case));
    return NULL;
}

bool ct__head_may_change(const char *owner, const char *job)
{
    return !owner[0] || ct__token_eq(owner, job);
}

/* Whether e speaks for node slot ni: a live node, and e carries its token. */
static bool node_speaks(head *h, int ni, const Ct__Envelope *e)
{
    return ni >= 0 && ni < h->nnodes && h->nodes[ni].used && h->nodes[ni].alive &&
           ct__token_eq(e->token, h->nodes[ni].token);
}

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

/* Frees a's create request (placed, or dead) and takes it off the pending count. */
static void drop_req(head *h, actor *a)
{
    if (!a->req)
        return;
    ct__msg_free(a->req);
    a->req = NULL;
    h->npending--;
    h->pending_bytes -= a->req_bytes;
}

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
    a->dead_at = ct__now_ms();
    drop_req(h, a);
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

/* ids are "actor-N" with N = seq, and the table is sorted by seq (appended in creation order,
 * forget_dead keeps the order): a binary search. */
static actor *find_actor(head *h, const char *id)
{
    if (!id || strncmp(id, "actor-", 6) || id[6] < '1' || id[6] > '9')
        return NULL;
    char *end;
    unsigned long long seq = strtoull(id + 6, &end, 10);
    if (*end)
        return NULL;
    int lo = 0, hi = h->nactors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (h->actors[mid].seq == seq)
            return !strcmp(h->actors[mid].id, id) ? &h->actors[mid] : NULL;
        if (h->actors[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

static int find_node(head *h, const char *id)
{
    for (int i = 0; id && i < h->nnodes; i++)
        if (h->nodes[i].used && !strcmp(h->nodes[i].id, id))
            return i;
    return -1;
}

/* Whether e comes from the node hosting a (which alone reports its start and end). */
static bool from_host(head *h, const actor *a, const Ct__Envelope *e)
{
    return a->node >= 0 && node_speaks(h, a->node, e);
}

/* Picks a node for need: PACK takes the fitting node with the least free capacity left,
 * SPREAD the one with the fewest actors (then the most free). frees / load: a tentative view
 * (place_pg), NULL for the nodes' own. -1 when none fits. */
static int pick_node(head *h, const res *need, int strategy, const res *frees, const int *load)
{
    int best = -1, best_load = 0;
    double best_sum = 0;
    for (int i = 0; i < h->nnodes; i++) {
        const res *f = frees ? &frees[i] : &h->nodes[i].free;
        int l = load ? load[i] : h->nodes[i].nactors;
        if (!h->nodes[i].alive || !res_fits(f, need))
            continue;
        double sum = res_sum(f);
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
    s.job_token = a->job;
    /* the head only counts GPUs; the node chooses which devices the actor sees */
    s.gpus = res_get(&a->need, "GPU");
    e.body_case = CT__ENVELOPE__BODY_START_ACTOR;
    e.start_actor = &s;
    send_env(h, &n->rid, &e);
    a->state = A_STARTING;
    n->nactors++;
    drop_req(h, a);
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
    int n = pick_node(h, &a->need, a->strategy, NULL, NULL);
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
    if (g->state != PG_PENDING || !h->nnodes)
        return false;
    /* a tentative copy of the nodes' free resources (scratch sized with the node table: no
     * stack arrays sized by what peers send) */
    res *frees = h->frees;
    int *load = h->load;
    for (int i = 0; i < h->nnodes; i++) {
        frees[i] = h->nodes[i].free;
        load[i] = 0;
    }
    for (int b = 0; b < g->nb; b++)
        if (g->b[b].node >= 0)
            load[g->b[b].node]++;
    for (int b = 0; b < g->nb; b++) {
        g->b[b].pick = g->b[b].node;
        if (g->b[b].pick >= 0)
            continue;
        int n = pick_node(h, &g->b[b].need, g->strategy, frees, load);
        if (n < 0)
            return false;
        res_sub(&frees[n], &g->b[b].need, 1);
        load[n]++;
        g->b[b].pick = n;
    }
    for (int b = 0; b < g->nb; b++) {
        if (g->b[b].node >= 0)
            continue;
        g->b[b].node = g->b[b].pick;
        g->b[b].free = g->b[b].need;
        res_sub(&h->nodes[g->b[b].node].free, &g->b[b].need, 1);
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
    n->dead_at = ct__now_ms();
    CT_LOG(CT_LOG_WARN, "head", "node %s dead: %s", n->id, reason);
    /* a node declared dead while its process lives (a silent host that wakes up) learns it at
     * once from this byte, kills its actors and registers again as a new node (actor/node.c);
     * its ticket stays, so that a hello still on its way gets the same answer */
    ct__watch_close(h->watch, n->watch, CT__WATCH_DEAD);
    n->watch = 0;
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

/* Forgets dead node ni (its slot serves a new node): dead actors it hosted keep no node. */
static void forget_node(head *h, int ni)
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
    memset(&h->nodes[ni], 0, sizeof h->nodes[ni]);
}

/* A slot for a new node: a free one, a new one, or (all MAX_NODES taken) the slot of the node
 * dead the longest, forgotten early. The slot index, or CT_ENOSPC (all alive) / CT_ENOMEM. */
static int node_slot(head *h)
{
    for (int i = 0; i < h->nnodes; i++)
        if (!h->nodes[i].used)
            return i;
    if (h->nnodes < MAX_NODES) {
        if (h->nnodes == h->cap_nodes) {
            int cap = h->cap_nodes ? 2 * h->cap_nodes : 16;
            cap = cap < MAX_NODES ? cap : MAX_NODES;
            node *nn = realloc(h->nodes, cap * sizeof *nn);
            if (!nn)
                return CT_ENOMEM;
            h->nodes = nn;
            res *nf = realloc(h->frees, cap * sizeof *nf);
            if (!nf)
                return CT_ENOMEM;
            h->frees = nf;
            int *nl = realloc(h->load, cap * sizeof *nl);
            if (!nl)
                return CT_ENOMEM;
            h->load = nl;
            h->cap_nodes = cap;
        }
        memset(&h->nodes[h->nnodes], 0, sizeof h->nodes[0]);
        return h->nnodes++;
    }
    int old = -1;
    for (int i = 0; i < h->nnodes; i++)
        if (!h->nodes[i].alive && (old < 0 || h->nodes[i].dead_at < h->nodes[old].dead_at))
            old = i;
    if (old < 0)
        return CT_ENOSPC;
    forget_node(h, old);
    return old;
}

/* Frees the slots of removed placement groups no actor refers to any more. */
static void free_removed_pgs(head *h)
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
        h->nbundles -= g->nb;
        free(g->b);
        memset(g, 0, sizeof *g);
        g->state = PG_FREE;
    }
    free(used);
}

/* Forgets the actors and nodes dead for max_age ms or longer (GONE_AFTER_MS each second; 0
 * when the actor table is full), then frees what only they kept: removed groups. */
static void forget_dead(head *h, int64_t max_age)
{
    int64_t now = ct__now_ms();
    int k = 0;
    for (int i = 0; i < h->nactors; i++) {
        if (h->actors[i].state == A_DEAD && now - h->actors[i].dead_at >= max_age)
            continue;
        if (k != i)
            h->actors[k] = h->actors[i];
        k++;
    }
    h->nactors = k;
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].used && !h->nodes[i].alive && now - h->nodes[i].dead_at >= max_age)
            forget_node(h, i);
    free_removed_pgs(h);
}

static void driver_gone(head *h, int di, const char *why);
static void dispatch(head *h, const ct__rid *rid, Ct__Envelope *e, bool *keep);

static const ct__msg_limits decode_lim = {DECODE_FLOOR, DECODE_MULT, DECODE_MAX};

/* One received message from rid: mr is its decode's result (0 or CT_EPROTO, e possibly set
 * either way). Refused or dispatched; takes e. */
static void handle(head *h, const ct__rid *rid, int mr, Ct__Envelope *e)
{
    if (mr == CT_EPROTO) {
        ct__head_refuse(h, rid, e, CT_EPROTO, "envelope", "%s", ct_last_error());
        ct__msg_free(e);
        return;
    }
    bool keep = false;
    dispatch(h, rid, e, &keep);
    if (!keep)
        ct__msg_free(e);
}

/* Handles what is waiting on the head socket, at most 1000 messages (so timers still run). */
static void drain(head *h)
{
    for (int k = 0; k < 1000; k++) {
        ct__rid rid;
        rid.len = 0;
        Ct__Envelope *e = NULL;
        int mr = ct__msg_recv_lim(h->sock, &rid, &e, ZMQ_DONTWAIT, "head", &decode_lim);
        if (mr == CT_ETIMEDOUT)
            break;
        if (mr == CT_EZMQ) {
            CT_LOG(CT_LOG_WARN, "head", "%s", ct_last_error());
            break;
        }
        handle(h, &rid, mr, e);
    }
}

/* Whether some node or driver has been silent for longer than dead_ms. */
static bool any_overdue(head *h)
{
    for (int i = 0; i < h->ndrivers; i++)
        if (h->drivers[i].silent > h->dead_ms)
            return true;
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].alive && h->nodes[i].silent > h->dead_ms)
            return true;
    return false;
}

/* Counts ms of silence against every live node and driver. */
static void count_silence(head *h, int64_t ms)
{
    for (int i = 0; i < h->ndrivers; i++)
        h->drivers[i].silent += ms;
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].alive)
            h->nodes[i].silent += ms;
}

/* The failure detector for hosts that go silent without their kernel closing anything (power
 * loss, a cut network, SIGSTOP); a process that ends is seen at once by the death watch
 * (head/watch.h), so this timeout can be long (dead_ms, default HEAD_DEAD_MS).
 * Silence counts only over time when the head itself was running and had read its queue: each
 * check (every tick, at most 20 ms apart when the head runs, after draining the socket) counts
 * the time since the previous one, but at most one heartbeat period. A head that was
 * descheduled, stopped or busy for 2 s thus blames nobody for those 2 s. Before anyone is
 * declared dead, the head waits up to one more heartbeat period for heartbeats already on their
 * way (ZeroMQ's I/O thread may still hold them after such a gap). Measured need: on a 2-core
 * machine under full load, live nodes were declared dead with their heartbeats queued at the
 * head, and a fixed 1 s bound was crossed by nodes starved for CPU. */
static void check_heartbeats(head *h)
{
    int64_t now = ct__now_ms();
    int64_t gap = h->last_check_ms ? now - h->last_check_ms : 0;
    h->last_check_ms = now;
    if (gap > 3 * (int64_t)h->hb_ms)
        CT_LOG(CT_LOG_INFO, "head", "head loop stalled %lld ms: %d ms of it counted as silence",
               (long long)gap, h->hb_ms);
    count_silence(h, gap < h->hb_ms ? gap : h->hb_ms);
    if (!any_overdue(h))
        return;
    zmq_pollitem_t it = {h->sock, 0, ZMQ_POLLIN, 0};
    int64_t until = now + h->hb_ms;
    for (int64_t left = h->hb_ms; left > 0; left = until - ct__now_ms()) {
        if (zmq_poll(&it, 1, left) <= 0)
            break;
        drain(h);
    }
    int64_t waited = ct__now_ms() - now;
    h->last_check_ms = ct__now_ms();
    count_silence(h, waited < h->hb_ms ? waited : h->hb_ms);
    for (int i = h->ndrivers - 1; i >= 0; i--)
        if (h->drivers[i].silent > h->dead_ms)
            driver_gone(h, i, "no heartbeat");
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].alive && h->nodes[i].silent > h->dead_ms) {
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %lld ms of the head's running time",
                     (long long)h->nodes[i].silent);
            node_dead(h, i, why);
        }
}

/* ---- handlers ---- */

/* A new node id into out: "node-" and NODE_ID_HEX random lower-case hex digits (libsodium),
 * none that a node in the table (live, or dead and not yet forgotten) has. Random, so that no
 * one can guess the id of a node yet to join; ids are still public (status, events, locations)
 * and no credential: the token is. 0, or CT_EIO when libsodium cannot start. */
static int node_id_new(head *h, char out[ID_LEN])
{
    static const char hx[] = "0123456789abcdef";
    if (sodium_init() < 0)
        return ct__error(CT_EIO, "head: libsodium failed to initialize");
    do {
        unsigned char b[NODE_ID_HEX / 2];
        randombytes_buf(b, sizeof b);
        int n = snprintf(out, ID_LEN, "node-");
        for (size_t i = 0; i < sizeof b; i++) {
            out[n++] = hx[b[i] >> 4];
            out[n++] = hx[b[i] & 15];
        }
        out[n] = 0;
    } while (find_node(h, out) >= 0);
    return 0;
}

static void on_register_node(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__RegisterNode *r = e->register_node;
    char field[96], msg[300];
    if (!r->host || !*r->host || strlen(r->host) >= sizeof h->nodes[0].host) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "register_node.host",
                        "register_node.host: empty or longer than %zu bytes",
                        sizeof h->nodes[0].host - 1);
        return;
    }
    if (res_check(r->resources, r->n_resources, "register_node.resources", field, sizeof field, msg,
                  sizeof msg)) {
        ct__head_refuse(h, rid, e, CT_EINVAL, field, "%s", msg);
        return;
    }
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].alive && rid_eq(&h->nodes[i].rid, rid)) {
            ct__head_refuse(h, rid, e, CT_EEXIST, "register_node",
                            "register_node: this connection registered %s already (one node "
                            "per connection)",
                            h->nodes[i].id);
            return;
        }
    int ni = node_slot(h);
    if (ni < 0) {
        ct__head_refuse(h, rid, e, ni, "register_node",
                        ni == CT_ENOSPC ? "register_node: the head has %d live nodes, its limit"
                                        : "register_node: head out of memory (%d nodes)",
                        MAX_NODES);
        return;
    }
    node *n = &h->nodes[ni];
    memset(n, 0, sizeof *n);
    if (ct__token_new(n->token) || ct__token_new(n->ticket) || node_id_new(h, n->id)) {
        REPLY_ERR(h, rid, e->req_id, CT_EIO, "", "head: %s", ct_last_error());
        return;
    }
    n->used = true;
    n->rid = *rid;
    snprintf(n->host, sizeof n->host, "%s", r->host);
    n->pid = r->pid;
    res_from_pb(&n->total, r->resources, r->n_resources);
    n->free = n->total;
    n->alive = true;

    Ct__Envelope o;
    Ct__RegisterNodeReply rr = CT__REGISTER_NODE_REPLY__INIT;
    ct__env_init(&o, e->req_id, "head", 0);
    rr.node_id = n->id;
    rr.heartbeat_ms = h->hb_ms;
    rr.token = n->token;
    rr.watch_port = ct__watch_port(h->watch);
    rr.watch_ticket = h->watch ? n->ticket : "";
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

/* A driver is its sender name and its job token: a heartbeat under another job's name is
 * another driver (one that stops would otherwise take that job's actors with it). */
static void on_driver_heartbeat(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    const char *name = e->sender ? e->sender : "";
    if (!*name || strlen(name) >= sizeof h->drivers[0].name) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "sender",
                        "driver heartbeat: sender name empty or longer than 63 bytes");
        return;
    }
    const char *job = ct__head_job(h, rid, e);
    if (!job)
        return;
    driver *d = NULL;
    for (int i = 0; i < h->ndrivers && !d; i++)
        if (!strcmp(h->drivers[i].name, name) && ct__token_eq(h->drivers[i].job, job))
            d = &h->drivers[i];
    if (!d) {
        if (e->heartbeat->leaving)
            return; /* a driver unknown here (it never heartbeat before) leaves nothing behind */
        if (h->ndrivers == MAX_DRIVERS) {
            ct__head_refuse(h, rid, e, CT_ENOSPC, "heartbeat.driver",
                            "driver heartbeat: the head follows %d drivers, its limit",
                            MAX_DRIVERS);
            return;
        }
        driver *nd = realloc(h->drivers, (h->ndrivers + 1) * sizeof *nd);
        if (!nd)
            return;
        h->drivers = nd;
        d = &h->drivers[h->ndrivers++];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "%s", name);
        snprintf(d->job, sizeof d->job, "%s", job);
        CT_LOG(CT_LOG_INFO, "head", "driver %s attached", name);
    }
    d->silent = 0;
    if (e->heartbeat->leaving) { /* ct_shutdown: its job ends now */
        driver_gone(h, (int)(d - h->drivers), "left (ct_shutdown)");
        return;
    }
    if (!e->heartbeat->watch)
        return;
    /* a death-watch ticket (ct_init asks once): a new one replaces one not yet used */
    Ct__Envelope o;
    Ct__WatchTicket wt = CT__WATCH_TICKET__INIT;
    if (h->watch && ct__token_new(d->ticket)) {
        REPLY_ERR(h, rid, e->req_id, CT_EIO, "", "head: %s", ct_last_error());
        return;
    }
    ct__env_init(&o, e->req_id, "head", 0);
    wt.port = ct__watch_port(h->watch);
    wt.ticket = h->watch ? d->ticket : "";
    o.body_case = CT__ENVELOPE__BODY_WATCH_TICKET;
    o.watch_ticket = &wt;
    send_env(h, rid, &o);
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

/* A driver stopped heartbeating, its process ended, or it left (ct_shutdown's last heartbeat
 * says so): its job's actors go with it (as in Ray, actors die with their owner), those it
 * created and those they created in turn (all carry the job's token), so a crashed driver
 * leaves nothing running on the cluster; the nodes that hosted them end the job's zygotes
 * (JobEnded). */
static void driver_gone(head *h, int di, const char *why)
{
    driver *d = &h->drivers[di];
    CT_LOG(strncmp(why, "left", 4) ? CT_LOG_WARN : CT_LOG_INFO, "head",
           "driver %s gone (%s): killing its job's actors", d->name, why);
    for (int i = 0; i < h->nactors; i++) {
        actor *a = &h->actors[i];
        if (!ct__token_eq(a->job, d->job) || a->state == A_DEAD)
            continue;
        if (a->state == A_PENDING)
            actor_dead(h, a, 0, 0, 0, "its driver is gone");
        else
            kill_on_node(h, a);
    }
    /* the nodes that hosted its actors (dead ones too, until forgotten) end its zygotes */
    bool *hosted = calloc(h->nnodes ? h->nnodes : 1, sizeof *hosted);
    for (int i = 0; hosted && i < h->nactors; i++)
        if (h->actors[i].node >= 0 && ct__token_eq(h->actors[i].job, d->job))
            hosted[h->actors[i].node] = true;
    for (int ni = 0; hosted && ni < h->nnodes; ni++) {
        if (!hosted[ni] || !h->nodes[ni].used || !h->nodes[ni].alive)
            continue;
        Ct__Envelope o;
        Ct__JobEnded j = CT__JOB_ENDED__INIT;
        ct__env_init(&o, 0, "head", 0);
        j.job_token = d->job;
        o.body_case = CT__ENVELOPE__BODY_JOB_ENDED;
        o.job_ended = &j;
        send_env(h, &h->nodes[ni].rid, &o);
    }
    free(hosted);
    /* its KV keys are released (on_kv_put), its subscriptions dropped */
    for (int i = 0; i < h->nkv; i++)
        if (ct__token_eq(h->kv[i].job, d->job))
            h->kv[i].job[0] = 0;
    for (int i = 0; i < h->nsubs; i++)
        if (ct__token_eq(h->subs[i].job, d->job))
            h->subs[i--] = h->subs[--h->nsubs];
    ct__watch_close(h->watch, d->watch, 0);
    h->drivers[di] = h->drivers[--h->ndrivers];
}

/* ---- the death watch (head/watch.h) ---- */

/* Connection conn presented ticket: it now stands for the live node or driver that holds the
 * ticket (which is then spent). A node declared dead before its hello came is told so ('D'); a
 * ticket nobody holds is refused. */
static void on_watch_hello(void *user, uint64_t conn, const char *ticket)
{
    head *h = user;
    for (int i = 0; i < h->nnodes; i++) {
        node *n = &h->nodes[i];
        if (!n->used || !n->ticket[0] || !ct__token_eq(n->ticket, ticket))
            continue;
        if (!n->alive) {
            ct__watch_close(h->watch, conn, CT__WATCH_DEAD);
            return;
        }
        ct__watch_close(h->watch, n->watch, 0); /* none: a ticket is good once */
        n->watch = conn;
        n->ticket[0] = 0;
        CT_LOG(CT_LOG_DEBUG, "head", "node %s: death watch on", n->id);
        return;
    }
    for (int i = 0; i < h->ndrivers; i++) {
        driver *d = &h->drivers[i];
        if (!d->ticket[0] || !ct__token_eq(d->ticket, ticket))
            continue;
        ct__watch_close(h->watch, d->watch, 0); /* an older one of the same driver */
        d->watch = conn;
        d->ticket[0] = 0;
        CT_LOG(CT_LOG_DEBUG, "head", "driver %s: death watch on", d->name);
        return;
    }
    ct__head_refuse(h, NULL, NULL, HEAD_EPERM, "watch_ticket",
                    "watch: a connection presented a ticket the head did not give out");
    ct__watch_close(h->watch, conn, 0);
}

/* The connection of a node or driver ended: its kernel closed it, so its process is gone. */
static void on_watch_closed(void *user, uint64_t conn)
{
    head *h = user;
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].used && h->nodes[i].watch == conn) {
            h->nodes[i].watch = 0;
            node_dead(h, i, "its process ended (death-watch connection closed)");
            return;
        }
    for (int i = 0; i < h->ndrivers; i++)
        if (h->drivers[i].watch == conn) {
            h->drivers[i].watch = 0;
            driver_gone(h, i, "its process ended");
            return;
        }
}

static void on_heartbeat(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    if (e->heartbeat->driver) {
        on_driver_heartbeat(h, rid, e);
        return;
    }
    int i = find_node(h, e->heartbeat->node_id);
    if (i < 0 || !h->nodes[i].alive) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "heartbeat.node_id",
                  "heartbeat.node_id: %s is not a live node", e->heartbeat->node_id);
        return;
    }
    node *n = &h->nodes[i];
    if (!node_speaks(h, i, e)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "heartbeat.node_id",
                        "heartbeat.node_id: %s: the message does not carry that node's token",
                        n->id);
        return;
    }
    n->silent = 0;
    if (!e->heartbeat->liveness_only && !rid_eq(&n->rid, rid)) {
        n->rid = *rid; /* the node's main socket reconnected: its orders go there now */
        CT_LOG(CT_LOG_INFO, "head", "node %s: new connection", n->id);
    }
}

static void on_create_actor(head *h, const ct__rid *rid, Ct__Envelope *e, bool *keep)
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
        return;
    }
    if (c->n_argv > MAX_ARGV) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "create_actor.argv",
                        "create_actor.argv: %zu entries, at most %d", c->n_argv, MAX_ARGV);
        return;
    }
    if (c->exe_object_id.len && c->exe_object_id.len != 20) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "create_actor.exe_object_id",
                        "create_actor.exe_object_id: %zu bytes, an object id has 20",
                        c->exe_object_id.len);
        return;
    }
    if (c->strategy != CT__STRATEGY__PACK && c->strategy != CT__STRATEGY__SPREAD) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "create_actor.strategy",
                        "create_actor.strategy: %d is neither PACK nor SPREAD", (int)c->strategy);
        return;
    }
    if (c->bundle_index < -1) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "create_actor.bundle_index",
                        "create_actor.bundle_index: %d (want -1 for any, or a bundle)",
                        c->bundle_index);
        return;
    }
    if (res_check(c->resources, c->n_resources, "create_actor.resources", field, sizeof field, msg,
                  sizeof msg)) {
        ct__head_refuse(h, rid, e, CT_EINVAL, field, "%s", msg);
        return;
    }
    const char *job = ct__head_job(h, rid, e);
    if (!job)
        return;
    int pg = -1;
    if (c->pg_id && *c->pg_id) {
        for (int i = 0; i < h->npgs; i++)
            if (h->pgs[i].state != PG_FREE && !strcmp(h->pgs[i].id, c->pg_id))
                pg = i;
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
    if (h->nactors == MAX_ACTORS)
        forget_dead(h, 0);
    if (h->nactors == MAX_ACTORS) {
        ct__head_refuse(h, rid, e, CT_ENOSPC, "create_actor",
                        "create_actor: the head has %d live actors, its limit", MAX_ACTORS);
        return;
    }
    if (h->nactors == h->cap_actors) {
        int cap = h->cap_actors ? h->cap_actors * 2 : 256;
        cap = cap < MAX_ACTORS ? cap : MAX_ACTORS;
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
    a->seq = ++h->actor_seq;
    snprintf(a->id, sizeof a->id, "actor-%llu", (unsigned long long)a->seq);
    snprintf(a->cls, sizeof a->cls, "%s", c->class_name);
    a->node = -1;
    a->pg = pg;
    a->bundle = -1;
    a->want_bundle = pg >= 0 ? c->bundle_index : -1;
    a->strategy = c->strategy;
    res_from_pb(&a->need, c->resources, c->n_resources);
    a->owner = *rid;
    snprintf(a->owner_name, sizeof a->owner_name, "%s", e->sender);
    snprintf(a->job, sizeof a->job, "%s", job);
    a->create_req = e->req_id;
    a->create_deadline = e->deadline_ms;
    a->req = e;
    a->req_bytes = bytes;
    h->npending++;
    h->pending_bytes += bytes;
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
    if (!from_host(h, a, e)) {
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
        send_env(h, &a->owner, &o);
        a->create_req = 0;
    }
}

static void on_start_failed(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    actor *a = find_actor(h, e->start_failed->actor_id);
    if (!a)
        return;
    if (!from_host(h, a, e)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "start_failed.actor_id",
                        "start_failed.actor_id: only the node hosting %s reports its start", a->id);
        return;
    }
    char why[600];
    snprintf(why, sizeof why, "start failed: %s", e->start_failed->reason);
    answer_create_error(h, a, e->start_failed->permanent ? CT_ESTART : CT_EINVAL,
                        "actor %s (%s): %s", a->id, a->cls, why);
    actor_dead(h, a, 0, 0, 0, why);
}

static void on_actor_exited(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__ActorExited *x = e->actor_exited;
    actor *a = find_actor(h, x->actor_id);
    if (!a)
        return;
    if (!from_host(h, a, e)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "actor_exited.actor_id",
                        "actor_exited.actor_id: only the node hosting %s reports its end", a->id);
        return;
    }
    char why[420];
    int k = x->term_signal ? snprintf(why, sizeof why, "killed by signal %d", x->term_signal)
                           : snprintf(why, sizeof why, "exited with status %d", x->exit_status);
    if (x->stderr_tail && *x->stderr_tail) /* it died before serving: what it wrote last */
        snprintf(why + k, sizeof why - k, "; its stderr: %.360s", x->stderr_tail);
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
    if (!from_host(h, a, e)) { /* else its job */
        const char *job = ct__head_job(h, rid, e);
        if (!job)
            return;
        if (!ct__head_may_change(a->job, job)) {
            ct__head_refuse(h, rid, e, HEAD_EPERM, "kill_actor.actor_id",
                            "kill_actor.actor_id: actor %s belongs to another job", a->id);
            return;
        }
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

static void kv_remove(head *h, kv *k)
{
    h->kv_bytes -= strlen(k->key) + 1 + k->len;
    free(k->key);
    free(k->val);
    *k = h->kv[--h->nkv];
}

/* KV ownership. A key belongs to the job that created it (Envelope.token: a driver's token,
 * which the actors it created share). Every peer may read any key and wait for it; only the
 * owning job may overwrite or delete it, so one job cannot move another's rendezvous addresses
 * or error reports. When the owning job's driver is gone (its heartbeats stopped, driver_gone)
 * its keys are released: they stay readable, any job may change them, and the next job that
 * writes one owns it. */
static void on_kv_put(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__KvPut *p = e->kv_put;
    if (!p->key || !*p->key || strlen(p->key) >= MAX_KV_KEY) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "kv_put.key",
                        "kv_put.key: empty or longer than %d bytes", MAX_KV_KEY - 1);
        return;
    }
    if (p->value.len > MAX_KV_VALUE) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "kv_put.value", "kv_put.value: %zu bytes, at most %d",
                        p->value.len, MAX_KV_VALUE);
        return;
    }
    const char *job = ct__head_job(h, rid, e);
    if (!job)
        return;
    kv *k = kv_find(h, p->key);
    if (k && !ct__head_may_change(k->job, job)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "kv_put.key",
                        "kv_put.key: %.200s belongs to another job", p->key);
        return;
    }
    size_t klen = strlen(p->key) + 1;
    size_t after = h->kv_bytes + p->value.len + (k ? 0 : klen) - (k ? k->len : 0);
    if ((!k && h->nkv == MAX_KV) || after > MAX_KV_BYTES) {
        ct__head_refuse(h, rid, e, CT_ENOSPC, "kv_put",
                        "kv_put: the KV holds %d keys and %zu bytes (at most %d and %d)", h->nkv,
                        h->kv_bytes, MAX_KV, MAX_KV_BYTES);
        return;
    }
    void *val = malloc(p->value.len ? p->value.len : 1);
    if (!val) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "kv_put.value", "kv_put.value: out of memory");
        return;
    }
    if (p->value.len) /* an empty value has data NULL (found by fuzz/fuzz_envelope.c) */
        memcpy(val, p->value.data, p->value.len);
    if (!k) {
        if (h->nkv == h->cap_kv) {
            int cap = h->cap_kv ? 2 * h->cap_kv : 64;
            kv *nk = realloc(h->kv, cap * sizeof *nk);
            if (nk) {
                h->kv = nk;
                h->cap_kv = cap;
            }
        }
        char *key = h->nkv < h->cap_kv ? strdup(p->key) : NULL;
        if (!key) {
            free(val);
            REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "kv_put", "kv_put: out of memory");
            return;
        }
        k = &h->kv[h->nkv++];
        k->key = key;
        k->val = NULL;
        k->len = 0;
        h->kv_bytes += klen;
    }
    free(k->val);
    h->kv_bytes += p->value.len - k->len;
    k->val = val;
    k->len = p->value.len;
    snprintf(k->job, sizeof k->job, "%s", job); /* a released key is taken over */
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

/* CT_ENOSPC when MAX_WAITERS wait already, CT_ENOMEM. */
static int add_waiter(head *h, waiter *w)
{
    if (h->nw == MAX_WAITERS)
        return CT_ENOSPC;
    if (h->nw == h->cap_w) {
        int cap = h->cap_w ? 2 * h->cap_w : 64;
        waiter *nw = realloc(h->w, cap * sizeof *nw);
        if (!nw)
            return CT_ENOMEM;
        h->w = nw;
        h->cap_w = cap;
    }
    h->w[h->nw++] = *w;
    return 0;
}

static void refuse_waiter(head *h, const ct__rid *rid, Ct__Envelope *e, int rc, const char *field)
{
    if (rc == CT_ENOSPC)
        ct__head_refuse(h, rid, e, rc, field, "%s: %d requests wait already, the head's limit",
                        field, MAX_WAITERS);
    else
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
}

static void on_kv_get(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__KvGet *g = e->kv_get;
    if (!g->key || !*g->key || strlen(g->key) >= MAX_KV_KEY) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "kv_get.key",
                        "kv_get.key: empty or longer than %d bytes", MAX_KV_KEY - 1);
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
    int rc = w.key ? add_waiter(h, &w) : CT_ENOMEM;
    if (rc) {
        free(w.key);
        refuse_waiter(h, rid, e, rc, "kv_get.wait_ms");
    }
}

static void on_kv_del(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    kv *k = kv_find(h, e->kv_del->key ? e->kv_del->key : "");
    if (!k) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "kv_del.key", "kv_del.key: no key %.200s",
                  e->kv_del->key);
        return;
    }
    const char *job = ct__head_job(h, rid, e);
    if (!job)
        return;
    if (!ct__head_may_change(k->job, job)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "kv_del.key",
                        "kv_del.key: %.200s belongs to another job", k->key);
        return;
    }
    kv_remove(h, k);
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
    if (h->nsubs == MAX_SUBS) {
        ct__head_refuse(h, rid, e, CT_ENOSPC, "subscribe",
                        "subscribe: %d peers subscribe already, the head's limit", MAX_SUBS);
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
    reply_ok(h, rid, e->req_id);
}

/* A slot for a new group of nb bundles: a free one or a new one, after freeing removed groups
 * when MAX_PGS or MAX_BUNDLES_ALL would be passed. The slot, CT_ENOSPC or CT_ENOMEM. */
static int pg_slot(head *h, int nb)
{
    if (h->nbundles + nb > MAX_BUNDLES_ALL || h->npgs == MAX_PGS)
        free_removed_pgs(h);
    if (h->nbundles + nb > MAX_BUNDLES_ALL)
        return CT_ENOSPC;
    for (int i = 0; i < h->npgs; i++)
        if (h->pgs[i].state == PG_FREE)
            return i;
    if (h->npgs == MAX_PGS)
        return CT_ENOSPC;
    if (h->npgs == h->cap_pgs) {
        int cap = h->cap_pgs ? 2 * h->cap_pgs : 16;
        cap = cap < MAX_PGS ? cap : MAX_PGS;
        pgroup *ng = realloc(h->pgs, cap * sizeof *ng);
        if (!ng)
            return CT_ENOMEM;
        h->pgs = ng;
        h->cap_pgs = cap;
    }
    h->pgs[h->npgs].state = PG_FREE;
    return h->npgs++;
}

static void on_pg_create(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__PgCreate *p = e->pg_create;
    char field[96], msg[300];
    if (p->n_bundles == 0 || p->n_bundles > MAX_BUNDLES) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "pg_create.bundles",
                        "pg_create.bundles: %zu bundles (want 1..%d)", p->n_bundles, MAX_BUNDLES);
        return;
    }
    if (p->strategy != CT__STRATEGY__PACK && p->strategy != CT__STRATEGY__SPREAD) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "pg_create.strategy",
                        "pg_create.strategy: %d is neither PACK nor SPREAD", (int)p->strategy);
        return;
    }
    for (size_t i = 0; i < p->n_bundles; i++) {
        char list[64];
        snprintf(list, sizeof list, "pg_create.bundles[%zu].resources", i);
        if (res_check(p->bundles[i]->resources, p->bundles[i]->n_resources, list, field,
                      sizeof field, msg, sizeof msg)) {
            ct__head_refuse(h, rid, e, CT_EINVAL, field, "%s", msg);
            return;
        }
    }
    const char *job = ct__head_job(h, rid, e);
    if (!job)
        return;
    int gi = pg_slot(h, (int)p->n_bundles);
    bundle *b = gi >= 0 ? calloc(p->n_bundles, sizeof *b) : NULL;
    if (!b) {
        if (gi == CT_ENOSPC)
            ct__head_refuse(h, rid, e, CT_ENOSPC, "pg_create",
                            "pg_create: the head has %d groups and %d bundles (at most %d and "
                            "%d)",
                            h->npgs, h->nbundles, MAX_PGS, MAX_BUNDLES_ALL);
        else
            REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    pgroup *g = &h->pgs[gi];
    memset(g, 0, sizeof *g);
    snprintf(g->id, sizeof g->id, "pg-%llu", (unsigned long long)++h->pg_seq);
    snprintf(g->job, sizeof g->job, "%s", job);
    g->strategy = p->strategy;
    g->nb = (int)p->n_bundles;
    g->b = b;
    h->nbundles += g->nb;
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
        if (id && (h->pgs[i].state == PG_PENDING || h->pgs[i].state == PG_READY) &&
            !strcmp(h->pgs[i].id, id))
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
    int rc = add_waiter(h, &w);
    if (rc)
        refuse_waiter(h, rid, e, rc, "pg_wait.wait_ms");
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
    const char *job = ct__head_job(h, rid, e);
    if (!job)
        return;
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
        nbn += h->pgs[i].state != PG_FREE ? h->pgs[i].nb : 0;
    bn = calloc(nbn + 1, sizeof *bn);
    if (!ni || !nip || !tot || !fre || !ai || !aip || !pi || !pip || !bn) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        goto out;
    }
    size_t k = 0;
    for (int j = 0; j < nn; j++) {
        node *n = &h->nodes[j];
        if (!n->used)
            continue;
        size_t i = k++;
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
    nn = (int)k;
    k = 0;
    size_t kp = 0;
    for (int j = 0; j < np; j++) {
        pgroup *g = &h->pgs[j];
        if (g->state == PG_FREE)
            continue;
        size_t i = kp++;
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
    sr.n_pgs = kp;
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
    CT_LOG(CT_LOG_DEBUG, "head", "%s #%llu from %.64s", ct__msg_body_name(e->body_case),
           (unsigned long long)e->req_id, e->sender);
    if (e->token && *e->token && !ct__token_valid(e->token)) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "token", "token: not %d lower-case hex digits",
                        CT_TOKEN_LEN);
        return;
    }
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
        on_start_failed(h, rid, e);
        break;
    case CT__ENVELOPE__BODY_ACTOR_EXITED:
        on_actor_exited(h, rid, e);
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

bool ct__head_node_speaks(ct__head *h, const char *node_id, const Ct__Envelope *e)
{
    return node_speaks(h, find_node(h, node_id), e);
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
        drop_req(h, &h->actors[i]);
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
    free(h->frees);
    free(h->load);
    free(h->actors);
    free(h->pgs);
    free(h->w);
    free(h->kv);
    free(h->subs);
    ct__watch_destroy(&h->watch);
    ct__objdir_reset();
    if (h->sock)
        zmq_close(h->sock);
    if (h->zap)
        ct__auth_zap_stop(h->ctx);
    if (h->ctx)
        zmq_ctx_term(h->ctx);
}

ct__head *ct__head_new_detached(void *sock)
{
    if (ct__objdir_install())
        return NULL;
    head *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->sock = sock;
    h->hb_ms = HEAD_HB_MS;
    h->dead_ms = HEAD_DEAD_MS;
    return h;
}

int ct__head_handle_bytes(ct__head *h, const ct__rid *rid, const void *data, size_t len)
{
    Ct__Envelope *e = NULL;
    int mr = ct__msg_decode_lim(data, len, &e, "head", &decode_lim);
    handle(h, rid, mr, e);
    return mr;
}

void ct__head_destroy_detached(ct__head **hp)
{
    if (!hp || !*hp)
        return;
    (*hp)->sock = NULL; /* borrowed */
    head_free(*hp);
    free(*hp);
    *hp = NULL;
}

int ct__head_run(const ct_head_opts *o)
{
    head h = {0};
    int rc = 0;
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    h.hb_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : HEAD_HB_MS;
    h.dead_ms = o->dead_after_ms > 0 ? o->dead_after_ms : HEAD_DEAD_MS;
    ct__log_set_who("head");
    if ((rc = ct__objdir_install()))
        goto out;
    h.ctx = zmq_ctx_new();
    h.sock = h.ctx ? zmq_socket(h.ctx, ZMQ_ROUTER) : NULL;
    if (!h.sock) {
        rc = ct__error(CT_EZMQ, "head: cannot create socket: %s", zmq_strerror(errno));
        goto out;
    }
    /* only holders of the cluster secret get through the handshake (common/auth.h) */
    if ((rc = ct__auth_zmq_server(h.sock)) || (rc = ct__auth_zap_start(h.ctx)))
        goto out;
    h.zap = true;
    /* bounded input: a peer's claimed frame size is not trusted (garbage on the port made
     * libzmq allocate terabytes, found by tests/runtime/test_fuzz.c under ASan), and a peer
     * that sends faster than the head handles is no longer read (TCP pushes back) once
     * HEAD_RCVHWM of its messages wait */
    int zero = 0, rcvhwm = HEAD_RCVHWM, sndhwm = HEAD_SNDHWM;
    int64_t maxmsg = HEAD_MAX_MSG;
    zmq_setsockopt(h.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(h.sock, ZMQ_SNDHWM, &sndhwm, sizeof sndhwm);
    zmq_setsockopt(h.sock, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm);
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
    /* the death watch: without it (a bind host only ZeroMQ understands, such as an interface
     * name) deaths are still found, by heartbeats alone */
    if (!(h.watch = ct__watch_new(host, o->watch_port)))
        CT_LOG(CT_LOG_WARN, "head", "no death-watch port (deaths seen by heartbeats only): %s",
               ct_last_error());
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
    ct__watch_cb wcb = {on_watch_hello, on_watch_closed, &h};
    while (!head_stop) {
        zmq_pollitem_t it[3] = {{h.sock, 0, ZMQ_POLLIN, 0},
                                {NULL, ct__watch_fd(h.watch), ZMQ_POLLIN, 0},
                                {NULL, o->watch_fd, ZMQ_POLLIN, 0}};
        int nit = o->watch_fd >= 0 ? 3 : 2;
        int64_t wait = next_tick - ct__now_ms();
        int r = zmq_poll(it, nit, wait < 0 ? 0 : wait);
        if (r < 0 && errno != EINTR) {
            rc = ct__error(CT_EZMQ, "head: poll: %s", zmq_strerror(errno));
            break;
        }
        if (nit == 3 && (it[2].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) {
            CT_LOG(CT_LOG_INFO, "head", "parent gone, exiting");
            break;
        }
        /* messages first: what a process sent right before it died is handled before its
         * death (an actor's exit status, an object's seal) */
        drain(&h);
        if (it[1].revents)
            ct__watch_poll(h.watch, &wcb);
        if (ct__now_ms() >= next_tick) {
            check_heartbeats(&h);
            expire(&h);
            if (ct__now_ms() - h.last_gc >= 1000) {
                forget_dead(&h, GONE_AFTER_MS);
                flush_refusals(&h);
                h.last_gc = ct__now_ms();
            }
            for (int i = 0; i < ntick_hooks; i++)
                tick_hooks[i].fn(&h, tick_hooks[i].user);
            next_tick = ct__now_ms() + tick;
        }
    }
out:
    head_free(&h);
    return rc;
}
