/* head/loop.c — the control plane's loop: one single-threaded ZeroMQ ROUTER, one handler table
 * (each message kind: its handler and its token rule, checked here before the handler runs),
 * and the timers (heartbeats, waits past their deadline, forgetting the dead). The loop calls
 * down into the files by subject (nodes.c, actors.c, pgroups.c, kv.c, events.c, status.c,
 * objdir.c, train.c; head_internal.h lists them), which answer through reply.c and never call
 * back up into the loop.
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
 *   it (the rule at ct__head_on_kv_put, kv.c); an object is freed by its job (objdir.c).
 *   Reads (status, KV gets, object locations and fetches, events) are open to every peer.
 * The handler table below says for each message which of these it needs (RULE_*: open, a job
 * token, a live node's token, either); the loop refuses what lacks it, and the handler checks
 * the rest (that the node is the one named, that the job owns what it changes).
 * Bounded input. A message is at most HEAD_MAX_MSG bytes and may cost at most DECODE_MAX
 * bytes when decoded (less when small); a peer has at most HEAD_RCVHWM messages queued;
 * every table has a limit (MAX_*, and h->lim's: ct-head --max-*); resource amounts are finite and
 * in [0, MAX_AMOUNT]; dead nodes and actors are forgotten GONE_AFTER_MS after they died. A refusal
 * is an Error to the sender naming the field, and a log line (ct__head_refuse: a flood is counted,
 * not logged).
 *
 * Not in here: method calls (drivers talk to actors directly), process spawning
 * (actor/node_zygote.c), bulk data. Tables are plain arrays; what every message looks up (a node
 * by id or token, an object by id, an actor by id) goes through an index (index.h) or a binary
 * search, so that a message costs O(1) at 10,000 nodes; scans are left to timers and to events
 * that change a whole table (a node's death, a placement). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>
#include "common/auth.h"
#include "common/common.h"
#include "head/head_internal.h"
#include "head/http.h"
#include "head/watch.h"
#include "proto/msg.h"

/* Set by SIGTERM/SIGINT, which the kernel may deliver to any thread (libzmq's I/O threads
 * too): an atomic, not a volatile sig_atomic_t, which is safe only within one thread (the data
 * race ThreadSanitizer reported in actor/node_head.c's). Lock-free, so async-signal-safe. */
static atomic_int head_stop;
static void on_term(int sig)
{
    (void)sig;
    head_stop = 1;
}

/* ---- the handler table ---- */

static void on_ping(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    (void)f;
    ct__head_ok(h, rid, e->req_id);
}

static void on_error(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    (void)h, (void)rid, (void)f;
    CT_LOG(CT_LOG_WARN, "head", "error from %s: %s", e->sender,
           e->error->message ? e->error->message : "");
}

/* Every message the head handles: {body case, check of its own fields (or NULL), token rule,
 * the field a refusal of the rule names, handler}. A message kind is added here and nowhere
 * else. */
static const struct {
    Ct__Envelope__BodyCase body;
    ct__head_check *check;
    int rule;
    const char *field;
    ct__head_handler *fn;
} handlers[] = {
    {CT__ENVELOPE__BODY_PING, NULL, RULE_OPEN, "", on_ping},
    {CT__ENVELOPE__BODY_ERROR, NULL, RULE_OPEN, "", on_error},
    {CT__ENVELOPE__BODY_STATUS, NULL, RULE_OPEN, "", ct__head_on_status},
    /* nodes and drivers (nodes.c) */
    {CT__ENVELOPE__BODY_REGISTER_NODE, NULL, RULE_OPEN, "", ct__head_on_register_node},
    {CT__ENVELOPE__BODY_HEARTBEAT, NULL, RULE_TOKEN, "heartbeat.node_id", ct__head_on_heartbeat},
    /* actors (actors.c) */
    {CT__ENVELOPE__BODY_CREATE_ACTOR, ct__head_check_create_actor, RULE_JOB, "token",
     ct__head_on_create_actor},
    {CT__ENVELOPE__BODY_ACTOR_READY, NULL, RULE_NODE, "actor_ready.actor_id",
     ct__head_on_actor_ready},
    {CT__ENVELOPE__BODY_START_FAILED, NULL, RULE_NODE, "start_failed.actor_id",
     ct__head_on_start_failed},
    {CT__ENVELOPE__BODY_ACTOR_EXITED, NULL, RULE_NODE, "actor_exited.actor_id",
     ct__head_on_actor_exited},
    {CT__ENVELOPE__BODY_KILL_ACTOR, NULL, RULE_TOKEN, "token", ct__head_on_kill_actor},
    /* KV (kv.c), events (events.c), placement groups (pgroups.c) */
    {CT__ENVELOPE__BODY_KV_PUT, ct__head_check_kv_put, RULE_JOB, "token", ct__head_on_kv_put},
    {CT__ENVELOPE__BODY_KV_GET, NULL, RULE_OPEN, "", ct__head_on_kv_get},
    {CT__ENVELOPE__BODY_KV_DEL, NULL, RULE_JOB, "token", ct__head_on_kv_del},
    {CT__ENVELOPE__BODY_SUBSCRIBE, NULL, RULE_OPEN, "", ct__head_on_subscribe},
    {CT__ENVELOPE__BODY_PG_CREATE, ct__head_check_pg_create, RULE_JOB, "token",
     ct__head_on_pg_create},
    {CT__ENVELOPE__BODY_PG_WAIT, NULL, RULE_OPEN, "", ct__head_on_pg_wait},
    {CT__ENVELOPE__BODY_PG_REMOVE, NULL, RULE_JOB, "token", ct__head_on_pg_remove},
    /* training jobs' progress, for the metrics (train.c) */
    {CT__ENVELOPE__BODY_TRAIN_REPORT, ct__head_check_train_report, RULE_JOB, "token",
     ct__head_on_train_report},
    /* the object directory (objdir.c) */
    {CT__ENVELOPE__BODY_OBJ_NODE_INFO, NULL, RULE_NODE, "obj_node_info.node_id",
     ct__objdir_on_node_info},
    {CT__ENVELOPE__BODY_OBJ_ADDED, NULL, RULE_NODE, "obj_added.node_id", ct__objdir_on_added},
    {CT__ENVELOPE__BODY_OBJ_REMOVED, NULL, RULE_NODE, "obj_removed.node_id", ct__objdir_on_removed},
    {CT__ENVELOPE__BODY_OBJ_PULL_DONE, NULL, RULE_NODE, "obj_pull_done.node_id",
     ct__objdir_on_pull_done},
    {CT__ENVELOPE__BODY_OBJ_PUT_DONE, ct__objdir_check_put_done, RULE_JOB, "token",
     ct__objdir_on_put_done},
    {CT__ENVELOPE__BODY_OBJ_FETCH, NULL, RULE_OPEN, "", ct__objdir_on_fetch},
    {CT__ENVELOPE__BODY_OBJ_LOCATE, NULL, RULE_OPEN, "", ct__objdir_on_locate},
    {CT__ENVELOPE__BODY_OBJ_FREE, ct__objdir_check_free, RULE_JOB, "token", ct__objdir_on_free},
    {CT__ENVELOPE__BODY_OBJ_NODES, NULL, RULE_OPEN, "", ct__objdir_on_nodes},
};

/* The slot of the live node whose token tok is, -1 when none. */
static int node_of_token(head *h, const char *tok)
{
    int i = tok ? ct__index_get(h->node_tokens, tok, strlen(tok)) : -1;
    /* both well-formed (dispatch checked tok): compared in constant time, not validated again */
    return i >= 0 && h->nodes[i].used && h->nodes[i].alive &&
                   !sodium_memcmp(tok, h->nodes[i].token, CT_TOKEN_LEN + 1)
               ? i
               : -1;
}

/* Whether e passes rule (RULE_*); fills f. A refusal is sent when it does not. */
static bool rule_passes(head *h, const ct__rid *rid, const Ct__Envelope *e, int rule,
                        const char *field, ct__head_from *f)
{
    f->job = e->token && *e->token ? e->token : NULL; /* well-formed: dispatch checked it */
    /* which node speaks: only where a rule or a handler asks (the token index, index.h) */
    f->node = f->job && (rule == RULE_NODE || rule == RULE_TOKEN) ? node_of_token(h, f->job) : -1;
    f->node_id = f->node >= 0 ? h->nodes[f->node].id : NULL;
    const char *what = ct__msg_body_name(e->body_case);
    if (rule == RULE_JOB && !f->job)
        ct__head_refuse(h, rid, e, HEAD_EPERM, field,
                        "%s: %s creates or changes shared state and needs a job token", field,
                        what);
    else if (rule == RULE_NODE && f->node < 0)
        ct__head_refuse(h, rid, e, HEAD_EPERM, field,
                        "%s: %s does not carry the token of a live node (a node speaks only for "
                        "itself and for the actors it is hosting)",
                        field, what);
    else if (rule == RULE_TOKEN && !f->job)
        ct__head_refuse(h, rid, e, HEAD_EPERM, field,
                        "%s: %s needs a token: its job's or its node's", field, what);
    else
        return true;
    return false;
}

/* ---- the loop ---- */

static const ct__msg_limits decode_lim = {DECODE_FLOOR, DECODE_MULT, DECODE_MAX};

/* Handles one received envelope: the table's handler, once the envelope passed the checks
 * every message gets (a well-formed token, a deadline not passed), its row's check and token
 * rule.
 * Sets *keep when the handler took ownership of e. */
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
    for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++) {
        if (handlers[i].body != e->body_case)
            continue;
        ct__head_from f = {.node = -1};
        if (handlers[i].check && !handlers[i].check(h, rid, e))
            return;
        if (rule_passes(h, rid, e, handlers[i].rule, handlers[i].field, &f)) {
            handlers[i].fn(h, rid, e, &f);
            *keep = f.keep;
        }
        return;
    }
    REPLY_ERR(h, rid, e->req_id, CT_EPROTO, "body", "the head does not handle %s",
              ct__msg_body_name(e->body_case));
}

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
void ct__head_drain(head *h)
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

/* Heartbeats (nodes.c has the failure detector): silence is counted; before anyone is declared
 * dead, the loop reads what waits on the socket for up to one heartbeat period (heartbeats
 * already on their way), then the silent are declared gone. */
static void check_heartbeats(head *h)
{
    int64_t now = ct__now_ms();
    if (!ct__head_count_silence(h, now))
        return;
    zmq_pollitem_t it = {h->sock, 0, ZMQ_POLLIN, 0};
    int64_t until = now + h->hb_ms;
    for (int64_t left = h->hb_ms; left > 0; left = until - ct__now_ms()) {
        if (zmq_poll(&it, 1, left) <= 0)
            break;
        ct__head_drain(h);
    }
    ct__head_end_silent(h, ct__now_ms() - now);
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
    /* creations past their deadline: a scan of the actor table, so only while some wait and at
     * most every DEADLINE_SCAN_MS (every 20 ms tick, over 50,000 actors of which 10,000 waited,
     * it took a quarter of a head's samples at 10,000 nodes) */
    if (!h->npending || now - h->last_deadline_scan < DEADLINE_SCAN_MS)
        return;
    h->last_deadline_scan = now;
    for (int i = 0; i < h->nactors; i++) {
        actor *a = &h->actors[i];
        if (a->state == A_PENDING && a->create_deadline &&
            ct__deadline_left(a->create_deadline) < 0) {
            char buf[256];
            ct__rv_fmt(&a->need, buf, sizeof buf);
            ct__head_create_error(h, a, CT_ETIMEDOUT, "actor %s (%s): no node had %s free in time",
                                  a->id, a->cls, buf);
            ct__head_actor_dead(h, a, 0, 0, 0, "not scheduled before its deadline");
        }
    }
}

/* Renders the HTTP endpoint's pages from the tables and hands them to its thread: the HTTP
 * thread never reads the tables, so a slow client never holds the loop. */
static void publish(head *h)
{
    char *pages[CT_PAGES] = {0};
    ct__head_render(h, pages);
    ct__http_publish(h->http, pages);
    h->last_publish = ct__now_ms();
}

static void head_free(head *h)
{
    for (int i = 0; i < h->nactors; i++)
        ct__head_drop_req(h, &h->actors[i]);
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
    ct__index_free(&h->node_ids);
    ct__index_free(&h->node_tokens);
    free(h->frees);
    free(h->load);
    free(h->actors);
    ct__index_free(&h->actor_ids);
    ct__index_free(&h->pg_ids);
    free(h->pgs);
    free(h->w);
    free(h->kv);
    free(h->subs);
    for (int i = 0; i < h->ntrain; i++)
        free(h->train[i].pts);
    free(h->train);
    free(h->evlog);
    ct__http_destroy(&h->http);
    ct__watch_destroy(&h->watch);
    ct__objdir_free(&h->od);
    ct__head_state_close(h);
    if (h->sock)
        zmq_close(h->sock);
    if (h->zap)
        ct__auth_zap_stop(h->ctx);
    if (h->ctx)
        zmq_ctx_term(h->ctx);
}

ct_head_limits ct__head_limits_or_default(ct_head_limits lim)
{
    lim.nodes = lim.nodes > 0 ? lim.nodes : CT_HEAD_DEFAULT_NODES;
    lim.actors = lim.actors > 0 ? lim.actors : CT_HEAD_DEFAULT_ACTORS;
    lim.pgs = lim.pgs > 0 ? lim.pgs : CT_HEAD_DEFAULT_PGS;
    lim.objects = lim.objects > 0 ? lim.objects : CT_HEAD_DEFAULT_OBJECTS;
    lim.kv_keys = lim.kv_keys > 0 ? lim.kv_keys : CT_HEAD_DEFAULT_KV_KEYS;
    lim.subscribers = lim.subscribers > 0 ? lim.subscribers : CT_HEAD_DEFAULT_SUBSCRIBERS;
    return lim;
}

ct__head *ct__head_new_detached(void *sock)
{
    head *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->lim = ct__head_limits_or_default((ct_head_limits){0});
    if (!(h->od = ct__objdir_new(h->lim.objects))) {
        free(h);
        return NULL;
    }
    h->sock = sock;
    h->state_fd = -1;
    h->hb_ms = h->hb_floor_ms = HEAD_HB_MS;
    h->dead_ms = h->dead_floor_ms = HEAD_DEAD_MS;
    h->hb_rate = HEAD_HB_RATE;
    h->room = true;
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
    head h = {.state_fd = -1};
    int rc = 0;
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    h.hb_ms = h.hb_floor_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : HEAD_HB_MS;
    h.dead_ms = h.dead_floor_ms = o->dead_after_ms > 0 ? o->dead_after_ms : HEAD_DEAD_MS;
    h.hb_rate = o->heartbeat_rate > 0 ? o->heartbeat_rate : HEAD_HB_RATE;
    h.room = true;
    h.lim = ct__head_limits_or_default(o->limits);
    ct__log_set_who("head");
    /* "actor-N" and "pg-N" count from the wall clock in ms times 1000, not from 1: a restarted
     * head must not give out the id of an actor that outlived the head before it (its node
     * gives it back later, RegisterNode.actors) */
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    h.actor_seq = h.pg_seq = ((uint64_t)wall.tv_sec * 1000 + wall.tv_nsec / 1000000) * 1000;
    if (!(h.od = ct__objdir_new(h.lim.objects))) {
        rc = ct__error(CT_ENOMEM, "head: out of memory");
        goto out;
    }
    if ((rc = ct__head_state_open(&h, o->state_dir)))
        goto out;
    h.started_ms = ct__now_ms();
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
    int backlog = HEAD_BACKLOG;
    zmq_setsockopt(h.sock, ZMQ_BACKLOG, &backlog, sizeof backlog);
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
    h.restarts = o->restarts;
    if (h.restarts > 0)
        ct__head_note(&h, "head_restarted", "head", "restart %d: %s", h.restarts,
                      o->restart_reason && *o->restart_reason ? o->restart_reason
                                                              : "started again by its supervisor");
    /* the read-only HTTP endpoint, on its own thread (head/http.h); pages published below */
    if (o->dashboard_port) {
        if ((rc = ct__http_new(o->dashboard_host, o->dashboard_port < 0 ? 0 : o->dashboard_port,
                               &h.http)))
            goto out;
        CT_LOG(CT_LOG_INFO, "head", "dashboard on http://%s:%d/metrics",
               o->dashboard_host && *o->dashboard_host ? o->dashboard_host : "127.0.0.1",
               ct__http_port(h.http));
        publish(&h);
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
    ct__watch_cb wcb = {ct__head_watch_hello, ct__head_watch_closed, &h};
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
        ct__head_drain(&h);
        if (it[1].revents)
            ct__watch_poll(h.watch, &wcb);
        if (ct__now_ms() >= next_tick) {
            check_heartbeats(&h);
            expire(&h);
            if (!h.waits_over && ct__now_ms() - h.started_ms >= h.dead_ms) {
                /* nodes that did not come back by now are gone: loaded groups place anew */
                h.waits_over = true;
                ct__head_state_give_up_waits(&h);
                ct__head_schedule(&h);
            }
            if (ct__now_ms() - h.last_gc >= 1000) {
                ct__head_forget_dead(&h, GONE_AFTER_MS);
                ct__head_train_forget(&h, GONE_AFTER_MS);
                ct__head_flush_refusals(&h);
                ct__head_scale_heartbeat(&h);
                h.last_gc = ct__now_ms();
            }
            ct__objdir_tick(&h);
            if (h.http && ct__now_ms() - h.last_publish >= PUBLISH_MS &&
                (ct__http_asked(h.http) || ct__now_ms() - h.last_publish >= PUBLISH_IDLE_MS))
                publish(&h);
            next_tick = ct__now_ms() + tick;
        }
    }
out:
    head_free(&h);
    return rc;
}
