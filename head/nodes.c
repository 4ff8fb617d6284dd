/* head/nodes.c — nodes and drivers: registration (random ids and tokens; a node that outlived
 * a head registers again under its id with its actors, resume_node), heartbeats, the
 * death watch's verdicts (head/watch.h), silence counted against silent hosts, a node declared
 * dead (its actors lost, its bundles re-placed), the heartbeat period sized for the cluster
 * (ct__head_scale_heartbeat), a driver gone (its job's actors killed, its KV keys released).
 * Not in here: what runs on the nodes (actors.c), their objects (objdir.c). */
#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

static void driver_gone(head *h, int di, const char *why);

/* Node ni was told to stop (SIGTERM) and asks to drain: nothing more is placed there, the
 * subscribers hear NODE_DRAINING, and the node learns whether to wait for its actors: it
 * does when a job that subscribed to NODE_DRAINING has actors there (that job saves its work,
 * then ends them: the trainer checkpoints at its next step boundary), else it stops now. */
static void node_draining(head *h, int ni, const ct__rid *rid, uint64_t req)
{
    node *n = &h->nodes[ni];
    if (!n->draining) {
        n->draining = true;
        CT_LOG(CT_LOG_INFO, "head", "node %s draining (told to stop): no new actors there", n->id);
        Ct__Event ev = CT__EVENT__INIT;
        ev.type = CT__EVENT_TYPE__NODE_DRAINING;
        ev.node_id = n->id;
        ev.pid = n->pid;
        ev.reason = "told to stop (SIGTERM)";
        ct__head_push_event(h, &ev, NULL);
    }
    bool wait = false;
    for (int q = h->nodes[ni].first_actor; q && !wait; q = h->actors[q - 1].node_next) {
        const actor *a = &h->actors[q - 1]; /* its live actors (its list) */
        for (int s = 0; s < h->nsubs && !wait; s++)
            wait = (h->subs[s].mask & (1u << CT__EVENT_TYPE__NODE_DRAINING)) &&
                   ct__token_eq(h->subs[s].job, a->job);
    }
    Ct__Envelope o;
    Ct__DrainReply dr = CT__DRAIN_REPLY__INIT;
    ct__env_init(&o, req, "head", 0);
    dr.wait = wait;
    o.body_case = CT__ENVELOPE__BODY_DRAIN_REPLY;
    o.drain_reply = &dr;
    ct__head_send(h, rid, &o);
}

/* Node ni (its id and token set) into the indexes. 0 or CT_ENOMEM (then in neither). */
static int node_index(head *h, int ni)
{
    node *n = &h->nodes[ni];
    if (ct__index_put(&h->node_ids, n->id, strlen(n->id), ni))
        return CT_ENOMEM;
    if (ct__index_put(&h->node_tokens, n->token, strlen(n->token), ni)) {
        ct__index_del(h->node_ids, n->id, strlen(n->id));
        return CT_ENOMEM;
    }
    return 0;
}

static void node_dead(head *h, int ni, const char *reason)
{
    node *n = &h->nodes[ni];
    if (!n->alive)
        return;
    n->alive = false;
    n->dead_at = ct__now_ms();
    CT_LOG(CT_LOG_WARN, "head", "node %s dead: %s", n->id, reason);
    /* a node declared dead while its process lives (a silent host that wakes up) learns it at
     * once from this byte, kills its actors and registers again as a new node (actor/node_head.c);
     * its ticket stays, so that a hello still on its way gets the same answer */
    ct__watch_close(h->watch, n->watch, CT__WATCH_DEAD);
    n->watch = 0;
    /* its live actors (its list: what it held, not the whole table), in creation order */
    int *held, nheld = ct__head_node_actors(h, ni, &held);
    char why[96];
    snprintf(why, sizeof why, "node %s dead", n->id);
    for (int k = 0; k < nheld; k++)
        ct__head_actor_dead(h, &h->actors[held[k]], 0, 0, 0, why);
    free(held);
    /* out of memory for the list's copy: the table read instead */
    for (int i = 0; h->nodes[ni].first_actor && i < h->nactors; i++) {
        actor *a = &h->actors[i];
        if (a->node == ni && a->state != A_DEAD && a->state != A_PENDING)
            ct__head_actor_dead(h, a, 0, 0, 0, why);
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
        if (g->state == PG_PENDING) {
            CT_LOG(CT_LOG_INFO, "head", "placement group %s lost bundles on %s", g->id, n->id);
            ct__head_state_pg(h, g);
        }
    }
    ct__objdir_node_dead(h, n->id);
    Ct__Event ev = CT__EVENT__INIT;
    ev.type = CT__EVENT_TYPE__NODE_DEAD;
    ev.node_id = n->id;
    ev.pid = n->pid;
    ev.reason = (char *)reason;
    ct__head_push_event(h, &ev, NULL);
    ct__head_schedule(h);
}

/* A slot for a new node: a free one, a new one, or (all h->lim.nodes taken) the slot of the node
 * dead the longest, forgotten early. The slot index, or CT_ENOSPC (all alive) / CT_ENOMEM. */
static int node_slot(head *h)
{
    for (int i = h->node_free_hint; i < h->nnodes; i++)
        if (!h->nodes[i].used)
            return i;
    h->node_free_hint = h->nnodes; /* none free below: registering N nodes is O(N), not O(N^2) */
    if (h->nnodes < h->lim.nodes) {
        if (h->nnodes == h->cap_nodes) {
            int cap = h->cap_nodes ? 2 * h->cap_nodes : 16;
            cap = cap < h->lim.nodes ? cap : h->lim.nodes;
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
            for (int i = h->cap_nodes; i < cap; i++)
                h->load[i] = -1; /* place_pg's view: untouched */
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
    ct__head_forget_node(h, old);
    return old;
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
 * check (every quarter period, at ticks at most 20 ms apart when the head runs, after draining
 * the socket) counts the time since the previous one, but at most one heartbeat period. A head
 * that was descheduled, stopped or busy for 2 s thus blames nobody for those 2 s. Before anyone is
 * declared dead, the head waits up to one more heartbeat period for heartbeats already on their
 * way (ZeroMQ's I/O thread may still hold them after such a gap). Measured need: on a 2-core
 * machine under full load, live nodes were declared dead with their heartbeats queued at the
 * head, and a fixed 1 s bound was crossed by nodes starved for CPU.
 * count_silence counts the time since the previous check and says whether someone is overdue;
 * the loop then reads the socket for up to one period (loop.c) and end_silent counts that wait
 * and declares the silent gone. */
bool ct__head_count_silence(head *h, int64_t now)
{
    int64_t gap = h->last_check_ms ? now - h->last_check_ms : 0;
    if (h->last_check_ms && gap < h->hb_ms / 4)
        return false; /* each check reads every node: at 10,000 nodes, every 20 ms cost 15% of the
                         head */
    h->last_check_ms = now;
    if (gap > 3 * (int64_t)h->hb_ms)
        CT_LOG(CT_LOG_INFO, "head", "head loop stalled %lld ms: %d ms of it counted as silence",
               (long long)gap, h->hb_ms);
    count_silence(h, gap < h->hb_ms ? gap : h->hb_ms);
    return any_overdue(h);
}

void ct__head_end_silent(head *h, int64_t waited)
{
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

/* A new node id into out: "node-" and NODE_ID_HEX random lower-case hex digits (libsodium),
 * none that a node in the table (live, or dead and not yet forgotten) has. Random, so that no
 * one can guess the id of a node yet to join; ids are still public (status, events, locations)
 * and no credential: the token is. 0, or CT_EIO when libsodium cannot start. */
static int node_id_new(head *h, char out[ID_LEN])
{
    if (sodium_init() < 0)
        return ct__error(CT_EIO, "head: libsodium failed to initialize");
    do {
        unsigned char b[NODE_ID_HEX / 2];
        randombytes_buf(b, sizeof b);
        int n = snprintf(out, ID_LEN, "node-");
        ct__hex(out + n, b, sizeof b);
    } while (ct__head_find_node(h, out) >= 0);
    return 0;
}

/* ---- the heartbeat period: sized for the cluster ----
 * Each live node sends HEAD_HB_MSGS heartbeats a period (ct-node: its main loop's and its
 * liveness thread's), and each costs the head a CURVE decryption, a decode and a lookup (about
 * 2 to 7 us on this project's 2-core machines, mostly libzmq, libsodium and the kernel). The
 * period in force is therefore the configured one (--heartbeat-ms: the floor) doubled until the
 * live nodes send at most h->hb_rate heartbeats a second (--heartbeat-rate, YAML
 * ct.heartbeat_rate; default HEAD_HB_RATE, 20,000): 100 ms up to 1,000 nodes, 200 ms up to 2,000,
 * 1.6 s at 10,000. A head with more CPU to spare takes a higher rate (hung hosts found sooner),
 * a busier or slower one a lower rate. The dead-after time follows: the configured one, and at
 * least HEAD_DEAD_PERIODS periods once the period grew. A new node is given the period in force
 * when it registers (grown for it at once); the others are told a new one (HeartbeatPeriod) within
 * a second. The period shrinks again, with hysteresis, when the nodes would fit half of it twice
 * over. Deaths of processes are still seen at once by the death watch (head/watch.h): the
 * period bounds only how soon a hung or cut-off host is found. */

/* The period (ms) for nlive nodes: the floor doubled until their heartbeats fit the rate. */
static int period_for(const head *h, int nlive)
{
    int64_t p = h->hb_floor_ms;
    while ((int64_t)nlive * HEAD_HB_MSGS * 1000 > (int64_t)h->hb_rate * p && 2 * p <= 60000)
        p *= 2;
    return (int)p;
}

/* Puts period p in force, with its dead-after time. */
static void set_period(head *h, int p, int nlive)
{
    if (p == h->hb_ms)
        return;
    int dead = h->dead_floor_ms;
    if (p > h->hb_floor_ms && dead < HEAD_DEAD_PERIODS * p)
        dead = HEAD_DEAD_PERIODS * p;
    CT_LOG(CT_LOG_INFO, "head", "%d live nodes: heartbeat period %d ms (was %d), dead after %d ms",
           nlive, p, h->hb_ms, dead);
    h->hb_ms = p;
    h->dead_ms = dead;
}

void ct__head_scale_heartbeat(head *h)
{
    int nlive = 0;
    for (int i = 0; i < h->nnodes; i++)
        nlive += h->nodes[i].alive;
    int p = period_for(h, nlive);
    if (p > h->hb_ms || (p < h->hb_ms && period_for(h, 2 * nlive) < h->hb_ms))
        set_period(h, p, nlive);
    for (int i = 0; i < h->nnodes; i++) {
        node *n = &h->nodes[i];
        if (!n->alive || n->hb_told == h->hb_ms)
            continue;
        Ct__Envelope o;
        Ct__HeartbeatPeriod hp = CT__HEARTBEAT_PERIOD__INIT;
        ct__env_init(&o, 0, "head", 0);
        hp.heartbeat_ms = h->hb_ms;
        o.body_case = CT__ENVELOPE__BODY_HEARTBEAT_PERIOD;
        o.heartbeat_period = &hp;
        if (ct__head_send(h, &n->rid, &o) == 0) /* else told again a second later */
            n->hb_told = h->hb_ms;
    }
}

static void register_reply(head *h, const ct__rid *rid, uint64_t req, node *n)
{
    /* the slots in use (live nodes and the dead not yet forgotten): an upper bound, in O(1) */
    int p = period_for(h, h->nnodes);
    if (p > h->hb_ms)
        set_period(h, p, h->nnodes);
    n->hb_told = h->hb_ms;
    Ct__Envelope o;
    Ct__RegisterNodeReply rr = CT__REGISTER_NODE_REPLY__INIT;
    ct__env_init(&o, req, "head", 0);
    rr.node_id = n->id;
    rr.heartbeat_ms = h->hb_ms;
    rr.token = n->token;
    rr.watch_port = ct__watch_port(h->watch);
    rr.watch_ticket = h->watch ? n->ticket : "";
    o.body_case = CT__ENVELOPE__BODY_REGISTER_NODE_REPLY;
    o.register_node_reply = &rr;
    ct__head_send(h, rid, &o);
}

/* Whether id is a node id this head could have given: "node-" and NODE_ID_HEX hex digits. */
static bool node_id_ok(const char *id)
{
    if (strncmp(id, "node-", 5) || strlen(id) != 5 + NODE_ID_HEX)
        return false;
    for (int i = 5; id[i]; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return false;
    return true;
}

/* A node that outlived its head (or that thought so: a head stalled past the node's patience)
 * registers again with its id, token and actors (RegisterNode.node_id, 1.4). The node this head
 * knows alive under that id and token: the same node, answered as before (a new watch ticket).
 * An id this head does not know (it restarted): the node is taken back under its id and token
 * and its actors into the actor table, their resources taken from the node's free ones; its
 * objects follow (ObjNodeInfo, ObjAdded). An id this head declared dead, or a wrong token:
 * refused (field register_node.node_id), and the node rejoins as a new one. */
/* A job whose actors a re-registering node runs, and whose driver this head has not heard: a
 * driver without a name is followed for it, so that the job ends (its actors killed) when no
 * driver of it heartbeats within the dead-after time (it died while the head was away); the
 * first heartbeat of the job's driver takes the entry over (on_driver_heartbeat). */
void ct__head_expect_job(head *h, const char *job, bool attached)
{
    if (!attached) { /* a job that ended (state.c's replay): its keys were released */
        for (int i = 0; i < h->nkv; i++)
            if (ct__token_eq(h->kv[i].job, job))
                h->kv[i].job[0] = 0;
        for (int i = 0; i < h->ndrivers; i++)
            if (!h->drivers[i].name[0] && ct__token_eq(h->drivers[i].job, job))
                h->drivers[i--] = h->drivers[--h->ndrivers];
        return;
    }
    for (int i = 0; i < h->ndrivers; i++)
        if (ct__token_eq(h->drivers[i].job, job))
            return;
    if (h->ndrivers == MAX_DRIVERS)
        return;
    driver *nd = realloc(h->drivers, (h->ndrivers + 1) * sizeof *nd);
    if (!nd)
        return;
    h->drivers = nd;
    driver *d = &h->drivers[h->ndrivers++];
    memset(d, 0, sizeof *d);
    snprintf(d->job, sizeof d->job, "%s", job);
}

static void resume_node(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__RegisterNode *r = e->register_node;
    int ni = ct__head_find_node(h, r->node_id);
    if (ni >= 0) {
        node *n = &h->nodes[ni];
        if (!n->alive || !r->node_token || !ct__token_eq(n->token, r->node_token)) {
            ct__head_refuse(h, rid, e, CT_EDEAD, "register_node.node_id",
                            "register_node.node_id: %s %s", n->id,
                            n->alive ? "is another node's (wrong token)"
                                     : "was declared dead: register as a new node");
            return;
        }
        if (h->watch && ct__token_new(n->ticket)) {
            REPLY_ERR(h, rid, e->req_id, CT_EIO, "", "head: %s", ct_last_error());
            return;
        }
        n->rid = *rid;
        n->silent = 0;
        register_reply(h, rid, e->req_id, n);
        CT_LOG(CT_LOG_INFO, "head", "node %s registered again (known here)", n->id);
        return;
    }
    if (!node_id_ok(r->node_id) || !r->node_token || !ct__token_valid(r->node_token)) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "register_node.node_id",
                        "register_node.node_id: '%.40s' or its token is malformed", r->node_id);
        return;
    }
    char field[96], msg[300];
    for (size_t i = 0; i < r->n_actors; i++) {
        Ct__ResumedActor *a = r->actors[i];
        if (!a->actor_id || !a->class_name || strlen(a->class_name) >= 64 || !a->job_token ||
            !ct__token_valid(a->job_token) || (a->address && strlen(a->address) >= 128)) {
            ct__head_refuse(h, rid, e, CT_EINVAL, "register_node.actors",
                            "register_node.actors[%zu]: malformed", i);
            return;
        }
        if (ct__rv_check(a->resources, a->n_resources, "register_node.actors.resources", field,
                         sizeof field, msg, sizeof msg)) {
            ct__head_refuse(h, rid, e, CT_EINVAL, field, "%s", msg);
            return;
        }
    }
    ni = node_slot(h);
    if (ni < 0) {
        ct__head_refuse(h, rid, e, ni, "register_node", "register_node: no room for node %s",
                        r->node_id);
        return;
    }
    node *n = &h->nodes[ni];
    memset(n, 0, sizeof *n);
    if (ct__token_new(n->ticket)) {
        REPLY_ERR(h, rid, e->req_id, CT_EIO, "", "head: %s", ct_last_error());
        return;
    }
    snprintf(n->id, sizeof n->id, "%s", r->node_id);
    snprintf(n->token, sizeof n->token, "%s", r->node_token);
    if (node_index(h, ni)) {
        memset(n, 0, sizeof *n);
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    n->used = true;
    n->rid = *rid;
    snprintf(n->host, sizeof n->host, "%s", r->host);
    n->pid = r->pid;
    ct__rv_from_pb(&n->total, r->resources, r->n_resources);
    n->free = n->total;
    n->alive = true;
    h->room = true;
    ct__head_pg_node_back(h, ni); /* its groups' bundles, before the actors inside them */
    int kept = 0;
    for (size_t i = 0; i < r->n_actors; i++)
        if (ct__head_resume_actor(h, ni, r->actors[i]) == 0) {
            kept++;
            ct__head_expect_job(h, r->actors[i]->job_token, true);
        }
    register_reply(h, rid, e->req_id, n);
    CT_LOG(CT_LOG_INFO, "head", "node %s registered again from %s with %d of its %zu actors", n->id,
           n->host, kept, r->n_actors);
    Ct__Event ev = CT__EVENT__INIT;
    ev.type = CT__EVENT_TYPE__NODE_JOINED;
    ev.node_id = n->id;
    ev.pid = n->pid;
    ct__head_push_event(h, &ev, NULL);
    ct__head_schedule(h);
}

void ct__head_on_register_node(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    Ct__RegisterNode *r = e->register_node;
    char field[96], msg[300];
    if (!r->host || !*r->host || strlen(r->host) >= sizeof h->nodes[0].host) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "register_node.host",
                        "register_node.host: empty or longer than %zu bytes",
                        sizeof h->nodes[0].host - 1);
        return;
    }
    if (ct__rv_check(r->resources, r->n_resources, "register_node.resources", field, sizeof field,
                     msg, sizeof msg)) {
        ct__head_refuse(h, rid, e, CT_EINVAL, field, "%s", msg);
        return;
    }
    if (r->node_id && *r->node_id) {
        resume_node(h, rid, e);
        return;
    }
    for (int i = 0; i < h->nnodes; i++)
        if (h->nodes[i].alive && ct__rid_eq(&h->nodes[i].rid, rid)) {
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
                        h->lim.nodes);
        return;
    }
    node *n = &h->nodes[ni];
    memset(n, 0, sizeof *n);
    if (ct__token_new(n->token) || ct__token_new(n->ticket) || node_id_new(h, n->id)) {
        REPLY_ERR(h, rid, e->req_id, CT_EIO, "", "head: %s", ct_last_error());
        return;
    }
    if (node_index(h, ni)) {
        memset(n, 0, sizeof *n);
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        return;
    }
    n->used = true;
    n->rid = *rid;
    snprintf(n->host, sizeof n->host, "%s", r->host);
    n->pid = r->pid;
    ct__rv_from_pb(&n->total, r->resources, r->n_resources);
    n->free = n->total;
    n->alive = true;
    h->room = true;
    register_reply(h, rid, e->req_id, n);
    char buf[256];
    ct__rv_fmt(&n->total, buf, sizeof buf);
    CT_LOG(CT_LOG_INFO, "head", "node %s joined from %s: %s", n->id, n->host, buf);

    Ct__Event ev = CT__EVENT__INIT;
    ev.type = CT__EVENT_TYPE__NODE_JOINED;
    ev.node_id = n->id;
    ev.pid = n->pid;
    ct__head_push_event(h, &ev, NULL);
    ct__head_schedule(h);
}

/* A driver is its sender name and its job token: a heartbeat under another job's name is
 * another driver (one that stops would otherwise take that job's actors with it). */
static void on_driver_heartbeat(head *h, const ct__rid *rid, Ct__Envelope *e,
                                const ct__head_from *f)
{
    const char *name = e->sender ? e->sender : "";
    if (!*name || strlen(name) >= sizeof h->drivers[0].name) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "sender",
                        "driver heartbeat: sender name empty or longer than 63 bytes");
        return;
    }
    const char *job = f->job; /* RULE_TOKEN */
    driver *d = NULL;
    for (int i = 0; i < h->ndrivers && !d; i++)
        if (!strcmp(h->drivers[i].name, name) && ct__token_eq(h->drivers[i].job, job))
            d = &h->drivers[i];
    for (int i = 0; i < h->ndrivers && !d; i++) /* a job a node told of (expect_job) */
        if (!h->drivers[i].name[0] && ct__token_eq(h->drivers[i].job, job)) {
            d = &h->drivers[i];
            snprintf(d->name, sizeof d->name, "%s", name);
            CT_LOG(CT_LOG_INFO, "head", "driver %s attached again", name);
        }
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
        ct__head_state_job(h, job, true);
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
    ct__head_send(h, rid, &o);
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
    h->jobs_ended++;
    ct__head_train_job_gone(h, d->job);
    for (int i = 0; i < h->nactors; i++) {
        actor *a = &h->actors[i];
        if (!ct__token_eq(a->job, d->job) || a->state == A_DEAD)
            continue;
        if (a->state == A_PENDING)
            ct__head_actor_dead(h, a, 0, 0, 0, "its driver is gone");
        else
            ct__head_kill_on_node(h, a);
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
        ct__head_send(h, &h->nodes[ni].rid, &o);
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
    ct__head_state_job(h, d->job, false);
    h->drivers[di] = h->drivers[--h->ndrivers];
}

/* ---- the death watch (head/watch.h) ---- */

/* Connection conn presented ticket: it now stands for the live node or driver that holds the
 * ticket (which is then spent). A node declared dead before its hello came is told so ('D'); a
 * ticket nobody holds is refused. */
void ct__head_watch_hello(void *user, uint64_t conn, const char *ticket)
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

/* The connection of a node or driver ended: its kernel closed it, so its process is gone; left:
 * it said so first (a driver's ct_shutdown: its job ends as a leave, without a warning). */
void ct__head_watch_closed(void *user, uint64_t conn, bool left)
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
            driver_gone(h, i, left ? "left (ct_shutdown)" : "its process ended");
            return;
        }
}

#define STATS_MAX_COUNT (1ULL << 60) /* bytes or objects: more is no measurement (1 EiB) */

/* Whether NodeStats s is malformed: then the field (heartbeat.stats.X, cap bytes) and what is
 * wrong with it (why, cap bytes). Refused: a CPU fraction outside 0..1 (NaN: not known yet),
 * a count over STATS_MAX_COUNT, available memory above the total, more than NODE_GPUS GPUs, a
 * GPU index outside 0..NODE_GPUS-1 or repeated (two series of one name and labels would make
 * /metrics invalid), a GPU using more memory than it has, a utilisation outside 0..100 (NaN:
 * not sampled). */
static bool stats_bad(const Ct__NodeStats *s, char *field, char *why, size_t cap)
{
    const struct {
        const char *name;
        uint64_t v;
    } counts[] = {
        {"memory_total_bytes", s->memory_total_bytes},
        {"memory_available_bytes", s->memory_available_bytes},
        {"store_used_bytes", s->store_used_bytes},
        {"store_spilled_bytes", s->store_spilled_bytes},
        {"store_spilled_objects", s->store_spilled_objects},
    };
    if (!isnan(s->cpu_utilization) && !(s->cpu_utilization >= 0 && s->cpu_utilization <= 1)) {
        snprintf(field, cap, "heartbeat.stats.cpu_utilization");
        snprintf(why, cap, "%g is not a fraction 0..1 (NaN: not known yet)", s->cpu_utilization);
        return true;
    }
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        if (counts[c].v > STATS_MAX_COUNT) {
            snprintf(field, cap, "heartbeat.stats.%s", counts[c].name);
            snprintf(why, cap, "%llu is over 2^60", (unsigned long long)counts[c].v);
            return true;
        }
    if (s->memory_available_bytes > s->memory_total_bytes) {
        snprintf(field, cap, "heartbeat.stats.memory_available_bytes");
        snprintf(why, cap, "%llu is above memory_total_bytes %llu",
                 (unsigned long long)s->memory_available_bytes,
                 (unsigned long long)s->memory_total_bytes);
        return true;
    }
    if (s->n_gpus > NODE_GPUS) {
        snprintf(field, cap, "heartbeat.stats.gpus");
        snprintf(why, cap, "%zu GPUs, more than %d", s->n_gpus, NODE_GPUS);
        return true;
    }
    for (size_t g = 0; g < s->n_gpus; g++) {
        const Ct__GpuStats *x = s->gpus[g];
        size_t same = 0;
        while (same < g && s->gpus[same]->index != x->index)
            same++;
        const char *bad = x->index >= NODE_GPUS                          ? "index"
                          : same < g                                     ? "index"
                          : x->memory_total_bytes > STATS_MAX_COUNT      ? "memory_total_bytes"
                          : x->memory_used_bytes > x->memory_total_bytes ? "memory_used_bytes"
                          : !isnan(x->utilization_percent) &&
                                  !(x->utilization_percent >= 0 && x->utilization_percent <= 100)
                              ? "utilization_percent"
                              : NULL;
        if (!bad)
            continue;
        snprintf(field, cap, "heartbeat.stats.gpus[%zu].%s", g, bad);
        if (x->index >= NODE_GPUS)
            snprintf(why, cap, "%u is not a GPU index 0..%d", x->index, NODE_GPUS - 1);
        else if (same < g)
            snprintf(why, cap, "%u repeats gpus[%zu]'s", x->index, same);
        else if (x->memory_total_bytes > STATS_MAX_COUNT)
            snprintf(why, cap, "%llu is over 2^60", (unsigned long long)x->memory_total_bytes);
        else if (x->memory_used_bytes > x->memory_total_bytes)
            snprintf(why, cap, "%llu is above memory_total_bytes %llu",
                     (unsigned long long)x->memory_used_bytes,
                     (unsigned long long)x->memory_total_bytes);
        else
            snprintf(why, cap, "%g is not a percent 0..100 (NaN: not sampled)",
                     x->utilization_percent);
        return true;
    }
    return false;
}

/* A heartbeat's NodeStats into n->stats; a malformed one (stats_bad) is refused, naming the
 * field, and n keeps the stats it had: the heartbeat still counts. */
static void keep_stats(head *h, const ct__rid *rid, const Ct__Envelope *e, node *n)
{
    const Ct__NodeStats *s = e->heartbeat->stats;
    char field[160], why[160];
    if (stats_bad(s, field, why, sizeof why)) {
        ct__head_refuse(h, rid, e, CT_EINVAL, field,
                        "%s: %s; node %s keeps the stats it reported before", field, why, n->id);
        return;
    }
    node_stats *k = &n->stats;
    k->known = true;
    k->cpu = s->cpu_utilization;
    k->mem_total = s->memory_total_bytes;
    k->mem_avail = s->memory_available_bytes;
    k->store_used = s->store_used_bytes;
    k->spilled_bytes = s->store_spilled_bytes;
    k->spilled_objects = s->store_spilled_objects;
    k->ngpu = (int)s->n_gpus;
    for (int g = 0; g < k->ngpu; g++)
        k->gpu[g] =
            (struct node_gpu){s->gpus[g]->index, s->gpus[g]->memory_used_bytes,
                              s->gpus[g]->memory_total_bytes, s->gpus[g]->utilization_percent};
}

void ct__head_on_heartbeat(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    if (e->heartbeat->driver) {
        on_driver_heartbeat(h, rid, e, f);
        return;
    }
    /* the node whose token it carries, when it names that node (one lookup, not two) */
    const char *id = e->heartbeat->node_id ? e->heartbeat->node_id : "";
    int i = f->node >= 0 && !strcmp(h->nodes[f->node].id, id) ? f->node : ct__head_find_node(h, id);
    if (i < 0 || !h->nodes[i].alive) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "heartbeat.node_id",
                  "heartbeat.node_id: %s is not a live node", e->heartbeat->node_id);
        return;
    }
    node *n = &h->nodes[i];
    if (f->node != i) { /* the loop found which live node's token e carries */
        ct__head_refuse(h, rid, e, HEAD_EPERM, "heartbeat.node_id",
                        "heartbeat.node_id: %s: the message does not carry that node's token",
                        n->id);
        return;
    }
    n->silent = 0;
    if (!e->heartbeat->liveness_only && !ct__rid_eq(&n->rid, rid)) {
        n->rid = *rid; /* the node's main socket reconnected: its orders go there now */
        CT_LOG(CT_LOG_INFO, "head", "node %s: new connection", n->id);
    }
    if (e->heartbeat->stats)
        keep_stats(h, rid, e, n);
    if (e->heartbeat->draining)
        node_draining(h, i, rid, e->req_id);
}
