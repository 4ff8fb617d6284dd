/* actor/node_head.c — the node and its head: registration (as new, again under its id with
 * the actors it runs, or as new after the head declared it dead), heartbeats from the main loop
 * and from a liveness thread, the death watch, the head's silence and loss, and the drain a
 * first SIGTERM asks for (the signals' flags live here).
 *
 * Head loss: a node whose head is gone keeps its actors and objects for a grace time
 * (--head-grace-ms, default CT_NODE_HEAD_GRACE_MS, 60 s) and waits for a restarted head. The
 * main loop counts the head as heard when anything arrives on its socket, and pings it when it
 * was silent for a heartbeat period (the head answers every Ping); after 3 silent periods it
 * sends pings only. A head that does not know the node (restarted) refuses its next heartbeat:
 * the node registers again under its id and token with the actors it runs, and its shard
 * lists its objects (resume). Silent for longer than the grace time, counted only over time the
 * node itself ran (ct__node_count_silence) and checked only after the socket was drained, so
 * that a node that was itself stalled reads the answers queued meanwhile first: the node logs
 * it, SIGKILLs its actors and zygotes by pid, and ct__node_run returns CT_EDEAD (ct-node exits
 * 1).
 *
 * Death watch and rejoin: once registered, the node keeps one TCP connection to the head's
 * death-watch port (head/watch.h), so that the head sees it die at once. A node the head
 * declared dead while it lived (stopped or cut off past the head's dead-after time) hears it
 * from that connection ('D') or from the answer to its next heartbeat (then the head refuses
 * its registering again under its id): it kills its actors (the head counted them lost) and
 * zygotes, empties its store and registers again as a new node (rejoin).
 *
 * Not in here: the loop that calls these (node.c), what the head does with them (head/nodes.c). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "actor/node_shared.h"
#include "common/auth.h"
#include "head/watch.h"

/* ---- signals ---- */

/* Set by SIGTERM/SIGINT, which the kernel may deliver to any thread (libzmq's I/O threads
 * too): an atomic, not a volatile sig_atomic_t, which is safe only within one thread (a data
 * race ThreadSanitizer reported). Lock-free, so async-signal-safe. */
static atomic_int node_stop;
/* A first SIGTERM asks for a drain (ct__node_drain_step): the node's jobs may save their work
 * before its actors end. SIGINT, or a second SIGTERM, stops at once. */
static atomic_int node_terms;
static void on_term(int sig)
{
    if (sig == SIGTERM && atomic_fetch_add(&node_terms, 1) == 0)
        return;
    node_stop = 1;
}

void ct__node_catch_signals(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

bool ct__node_stop_asked(void)
{
    return node_stop;
}

bool ct__node_term_asked(void)
{
    return node_terms;
}

/* ---- registration ---- */

int ct__parse_resources(const char *s, ct_resource *out, int cap, int *n, char **store)
{
    *n = 0;
    *store = NULL;
    if (!s || !*s)
        return 0;
    char *copy = strdup(s);
    if (!copy)
        return ct__error(CT_ENOMEM, "resources: out of memory");
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        char *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : 0;
        if (!eq || eq == tok || !end || *end || end == eq + 1 || v < 0) {
            int rc = ct__error(CT_EINVAL, "resources: '%s' is not name=number (>= 0)", tok);
            free(copy);
            return rc;
        }
        if (*n == cap) {
            free(copy);
            return ct__error(CT_EINVAL, "resources: more than %d entries", cap);
        }
        *eq = 0;
        out[*n].name = tok;
        out[(*n)++].amount = v;
    }
    *store = copy;
    return 0;
}

/* Opens the death-watch connection the registration's reply offered (head/watch.h). Without
 * one the node still runs: its death is then found by heartbeats alone. */
static void watch_open(nodest *n, unsigned port, const char *ticket)
{
    if (n->watch_fd >= 0)
        close(n->watch_fd);
    n->watch_fd = -1;
    if (!port || !ticket || !*ticket)
        return;
    int fd = ct__watch_dial(n->head, port, ticket, 10000);
    if (fd < 0)
        CT_LOG(CT_LOG_WARN, "node", "no death watch (heartbeats only): %s", ct_last_error());
    n->watch_fd = fd < 0 ? -1 : fd;
}

/* As a new node, or (resume) again under n's id and token with the actors it runs
 * (RegisterNode.node_id, 1.4), when a head that does not know it (restarted) answered its
 * heartbeat; the heartbeat period the head gives in n->hb_ms (100 ms when it gives none). 0;
 * CT_EDEAD when the head refused the resume (it declared this node dead: the caller rejoins as
 * new); another CT_E* code when it got no answer. */
int ct__node_register(nodest *n, bool resume)
{
    const ct_node_opts *o = n->o;
    ct_resource custom[32];
    int nc = 0;
    char *store = NULL;
    int rc = ct__parse_resources(o->resources, custom, 32, &nc, &store);
    if (rc)
        return rc;
    Ct__Resource r[34];
    Ct__Resource *rp[34];
    int nr = 0;
    /* detected: the CPUs this process may run on (a cpuset, --cpuset, taskset), else online */
    cpu_set_t mine;
    double cpus = o->cpus >= 0 ? o->cpus
                  : sched_getaffinity(0, sizeof mine, &mine) == 0
                      ? (double)CPU_COUNT(&mine)
                      : (double)sysconf(_SC_NPROCESSORS_ONLN);
    double gpus =
        ct__node_gpu_setup(n, o->gpus >= 0 ? o->gpus : (double)ct__gpu_count(), o->gpus < 0);
    const char *names[2] = {"CPU", "GPU"};
    double amts[2] = {cpus, gpus};
    for (int i = 0; i < 2; i++) {
        ct__resource__init(&r[nr]);
        r[nr].name = (char *)names[i];
        r[nr].amount = amts[i];
        rp[nr] = &r[nr];
        nr++;
    }
    for (int i = 0; i < nc; i++) {
        ct__resource__init(&r[nr]);
        r[nr].name = (char *)custom[i].name;
        r[nr].amount = custom[i].amount;
        rp[nr] = &r[nr];
        nr++;
    }
    Ct__Envelope e;
    Ct__RegisterNode reg = CT__REGISTER_NODE__INIT;
    ct__env_init(&e, ++n->req, "node", 10000);
    reg.host = n->host;
    reg.n_resources = nr;
    reg.resources = rp;
    reg.pid = getpid();
    e.body_case = CT__ENVELOPE__BODY_REGISTER_NODE;
    e.register_node = &reg;
    Ct__ResumedActor *ra = NULL, **rap = NULL;
    Ct__Resource *rr = NULL, **rrp = NULL;
    if (resume) {
        reg.node_id = n->id;
        reg.node_token = n->token;
        ra = calloc(n->na + 1, sizeof *ra);
        rap = calloc(n->na + 1, sizeof *rap);
        rr = calloc(16 * (n->na + 1), sizeof *rr);
        rrp = calloc(16 * (n->na + 1), sizeof *rrp);
        if (!ra || !rap || !rr || !rrp) {
            rc = ct__error(CT_ENOMEM, "node: out of memory");
            goto sent;
        }
        for (int i = 0; i < n->na; i++) {
            nactor *a = &n->a[i];
            if (a->kill_pending || !a->job[0])
                continue;
            Ct__ResumedActor *x = &ra[reg.n_actors];
            ct__resumed_actor__init(x);
            x->actor_id = a->id;
            x->class_name = a->cls;
            x->job_token = a->job;
            x->pid = a->pid;
            x->address = a->addr;
            x->pg_id = a->pg;
            x->bundle_index = a->bundle;
            x->resources = &rrp[16 * i];
            for (int k = 0; k < a->nres; k++) {
                ct__resource__init(&rr[16 * i + k]);
                rr[16 * i + k].name = a->rname[k];
                rr[16 * i + k].amount = a->ramt[k];
                rrp[16 * i + k] = &rr[16 * i + k];
            }
            x->n_resources = a->nres;
            rap[reg.n_actors++] = x;
        }
        reg.actors = rap;
    }
    rc = ct__msg_send(n->sock, NULL, &e, 0);
sent:
    free(ra);
    free(rap);
    free(rr);
    free(rrp);
    free(store);
    if (rc)
        return rc;
    int64_t until = ct__now_ms() + 10000;
    for (;;) {
        int64_t left = until - ct__now_ms();
        zmq_pollitem_t it = {n->sock, 0, ZMQ_POLLIN, 0};
        if (left <= 0 || node_stop || node_terms)
            return ct__error(CT_ETIMEDOUT,
                             "node: head %s did not answer registration (is it up, and does "
                             "it hold this node's cluster secret?)",
                             n->head);
        /* slices of 100 ms: a SIGTERM run by another thread interrupts no poll here */
        if (zmq_poll(&it, 1, left < 100 ? left : 100) <= 0)
            continue;
        Ct__Envelope *rep;
        rc = ct__msg_recv(n->sock, NULL, &rep, 0, "node");
        if (rc) {
            ct__msg_free(rep);
            return rc;
        }
        if (rep->req_id != n->req) {
            ct__msg_free(rep);
            continue;
        }
        bool refused = resume && rep->body_case == CT__ENVELOPE__BODY_ERROR && rep->error->field &&
                       !strcmp(rep->error->field, "register_node.node_id");
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_REGISTER_NODE_REPLY, "register_node");
        if (refused)
            rc = CT_EDEAD;
        if (!rc && resume && strcmp(n->id, rep->register_node_reply->node_id)) {
            rc = ct__error(CT_EPROTO, "node: the head gave %s a new id when it registered again",
                           n->id);
        } else if (!rc) {
            snprintf(n->id, sizeof n->id, "%s", rep->register_node_reply->node_id);
            snprintf(n->token, sizeof n->token, "%s", rep->register_node_reply->token);
            n->hb_ms = rep->register_node_reply->heartbeat_ms > 0
                           ? rep->register_node_reply->heartbeat_ms
                           : 100;
            atomic_store(&n->live.hb_ms, n->hb_ms); /* a resume: its thread runs already */
            watch_open(n, rep->register_node_reply->watch_port,
                       rep->register_node_reply->watch_ticket);
        }
        ct__msg_free(rep);
        return rc;
    }
}

/* The node's shard and transfer server (objnode.c), told to the head on the node's own
 * connection. */
int ct__node_store_start(nodest *n)
{
    ct__objnode_opts so = {.node_id = n->id,
                           .token = n->token,
                           .head_sock = n->sock,
                           .head = n->head,
                           .host = n->host,
                           .memory = n->o->store_memory,
                           .spill_dir = n->o->spill_dir};
    return ct__objnode_start(&so);
}

/* ---- heartbeats, the head's silence ---- */

/* A heartbeat from the main loop (req 0), or the drain's (draining: req 1, answered DrainReply). */
static int send_heartbeat(nodest *n, uint64_t req, bool draining)
{
    Ct__Envelope e;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__env_init(&e, req, n->id, 0);
    hb.node_id = n->id;
    hb.draining = draining;
    node_stats_msg st;
    if (!req && ct__node_stats_sample(n, &st)) /* the periodic ones, at most once a second */
        hb.stats = &st.stats;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    return ct__node_send_head(n, &e);
}

void ct__node_heartbeat(nodest *n)
{
    send_heartbeat(n, 0, false);
}

/* Asks the head for an answer (Ok), so that a quiet head is heard from. */
/* Asks the head for an answer (Ok), so that a quiet head is heard from. */
void ct__node_ping_head(nodest *n)
{
    Ct__Envelope e;
    Ct__Ping pg = CT__PING__INIT;
    ct__env_init(&e, 0, n->id, 0);
    e.body_case = CT__ENVELOPE__BODY_PING;
    e.ping = &pg;
    ct__node_send_head(n, &e);
}

/* The head's silence (n->silent, ms; reset when anything arrives from it) counts only over time
 * this node ran its loop: each count adds the time since the previous one, but at most one
 * heartbeat period. A turn of the loop takes at most that (its poll's timeout) when the node
 * runs; what a turn took beyond it (the node stopped, starved, or busy in a handler such as a
 * code fetch) is not the head's silence. */
void ct__node_count_silence(nodest *n)
{
    int64_t now = ct__now_ms(), d = now - n->last_count;
    n->silent += d < n->hb_ms ? d : n->hb_ms;
    n->last_count = now;
}

/* Whether the head has been silent for longer than dead_ms (the caller drained the socket),
 * counting only the node's running time (ct__node_count_silence). */
bool ct__node_head_lost(nodest *n, int dead_ms)
{
    ct__node_count_silence(n);
    int64_t silent = n->silent;
    if (silent <= dead_ms)
        return false;
    ct__error(CT_EDEAD,
              "node: the head %s did not answer for %lld ms of this node's running time "
              "(its grace time, --head-dead-after-ms, is %d ms): "
              "killing the node's actors and exiting",
              n->head, (long long)silent, dead_ms);
    CT_LOG(CT_LOG_ERROR, "node", "%s", ct_last_error());
    return true;
}

void ct__node_watch_read(nodest *n)
{
    /* 'D' when the head declared this node dead; an end without it is the head's (its silence
     * then decides, as ever) */
    char b = 0;
    ssize_t got = recv(n->watch_fd, &b, 1, MSG_DONTWAIT);
    if (got == 1 && b == CT__WATCH_DEAD) {
        n->declared_dead = true;
        return;
    }
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        CT_LOG(CT_LOG_WARN, "node", "the head closed the death-watch connection");
        close(n->watch_fd);
        n->watch_fd = -1;
    }
}

/* ---- the liveness thread (node_shared.h) ---- */

static void *liveness_main(void *arg)
{
    liveness *l = arg;
    void *s = zmq_socket(l->ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (ct__auth_zmq_client(s)) {
        CT_LOG(CT_LOG_ERROR, "node", "liveness thread: %s", ct_last_error());
        zmq_close(s);
        return NULL;
    }
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", l->head);
    zmq_connect(s, ep);
    for (;;) {
        Ct__Envelope e;
        Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
        ct__env_init(&e, 0, l->id, 0);
        hb.node_id = l->id;
        hb.liveness_only = 1;
        e.token = l->token;
        e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
        e.heartbeat = &hb;
        ct__msg_send(s, NULL, &e, ZMQ_DONTWAIT);
        zmq_msg_t m; /* replies (errors only) are the main loop's business: drop them */
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&m);
        struct pollfd p = {l->stop_fd, POLLIN, 0};
        if (poll(&p, 1, atomic_load(&l->hb_ms)) != 0)
            break;
    }
    zmq_close(s);
    return NULL;
}

/* Starts the liveness thread for n's current id and token (nothing when it cannot: the main
 * loop still heartbeats). */
void ct__node_live_start(nodest *n)
{
    liveness *l = &n->live;
    *l = (liveness){.ctx = n->ctx, .hb_ms = n->hb_ms, .stop_fd = -1, .stop = {-1, -1}};
    snprintf(l->head, sizeof l->head, "%s", n->head);
    snprintf(l->id, sizeof l->id, "%s", n->id);
    snprintf(l->token, sizeof l->token, "%s", n->token);
    if (pipe2(l->stop, O_CLOEXEC) == 0) {
        l->stop_fd = l->stop[0];
        l->on = pthread_create(&l->th, NULL, liveness_main, l) == 0;
    }
}

void ct__node_live_stop(nodest *n)
{
    liveness *l = &n->live;
    if (l->stop[1] >= 0)
        close(l->stop[1]);
    if (l->on)
        pthread_join(l->th, NULL);
    if (l->stop[0] >= 0)
        close(l->stop[0]);
    l->stop[0] = l->stop[1] = -1;
    l->on = false;
}

/* ---- resume, rejoin, drain ---- */

/* A head that does not know this node answered its heartbeat: the head restarted (or stalled
 * past the node's patience and declared it dead). The node registers again under its id and
 * token with the actors it runs, and its shard lists its objects again (ObjNodeInfo, ObjAdded):
 * the restarted head rebuilds its tables from that, and the actors never stopped. A head that
 * declared this node dead refuses: the node rejoins as a new one (ct__node_rejoin). 0, or the error
 * of a rejoin that failed (the node exits); a resume that got no answer is tried again at the next
 * refused heartbeat, until the head-dead time ends the node. */
int ct__node_resume(nodest *n)
{
    CT_LOG(CT_LOG_INFO, "node",
           "the head does not know %s (restarted?): registering again with "
           "its %d actors",
           n->id, n->na);
    int rc = ct__node_register(n, true);
    if (rc == CT_EDEAD)
        return ct__node_rejoin(n);
    if (rc) {
        CT_LOG(CT_LOG_WARN, "node", "registering again: %s", ct_last_error());
        return 0;
    }
    ct__objnode_resume();
    CT_LOG(CT_LOG_INFO, "node", "registered again as %s, %d actors kept", n->id, n->na);
    return 0;
}

/* The head declared this node dead while it lived (stopped, starved or cut off for longer than
 * the head's dead-after time): the head counted its actors as lost, so they are killed here,
 * and the node registers again as a new node (a new id, token and store; the old store's
 * objects were dropped from the head's directory). The zygotes go too: they hand the old node
 * id to the actors they fork. 0, or the registration's error (the node then exits, as when its
 * head is gone). */
int ct__node_rejoin(nodest *n)
{
    CT_LOG(CT_LOG_WARN, "node",
           "the head declared %s dead: killing its %d actors, registering again", n->id, n->na);
    ct__node_live_stop(n);
    ct__objnode_stop();
    pid_t pids[256];
    int np = ct__node_actors_end(n, pids, 256);
    np += ct__node_zygotes_end(n, pids + np, 256 - np);
    ct__node_drop_starts(n);
    /* reaped here, so that their exits are not reported under the new id (the rest, if any,
     * end as unknown pids in reap) */
    int64_t until = ct__now_ms() + 2000;
    for (int i = 0; i < np; i++)
        while (waitpid(pids[i], NULL, WNOHANG) == 0 && ct__now_ms() < until)
            usleep(1000);
    ct__log_set_who("node");
    int rc = ct__node_register(n, false);
    if (rc)
        return rc;
    ct__log_set_who(n->id);
    CT_LOG(CT_LOG_INFO, "node", "registered again as %s", n->id);
    if ((rc = ct__node_store_start(n)))
        return rc;
    ct__node_live_start(n);
    return 0;
}

/* The drain a first SIGTERM asked for: the node tells the head (Heartbeat.draining), which
 * places nothing more here, pushes NODE_DRAINING, and answers whether a job that listens has
 * actors here (DrainReply.wait): then the node waits until its actors exited (the trainer
 * ends its replicas once it took a checkpoint) or drain_ms passed, else it stops at once, as
 * it does when the head does not answer within 3 s. True when the node should stop now. */
bool ct__node_drain_step(nodest *n, int drain_ms)
{
    int64_t now = ct__now_ms();
    if (n->drain == 0) {
        CT_LOG(CT_LOG_INFO, "node", "SIGTERM: draining (%d actors; a second SIGTERM stops now)",
               n->na);
        if (send_heartbeat(n, 1, true))
            return true;
        n->drain = 1;
        n->drain_asked = now;
        n->drain_until = now + (drain_ms > 0 ? drain_ms : 60000);
    }
    if (n->drain == 1 && now - n->drain_asked > 3000)
        CT_LOG(CT_LOG_WARN, "node", "draining: the head did not answer; stopping");
    if (n->drain == 2 && n->na && now >= n->drain_until)
        CT_LOG(CT_LOG_WARN, "node", "draining: %d actors still run after %d ms; stopping", n->na,
               drain_ms > 0 ? drain_ms : 60000);
    if (n->drain == 2 && !n->na)
        CT_LOG(CT_LOG_INFO, "node", "drained: its actors exited; stopping");
    return n->drain == 3 || (n->drain == 1 && now - n->drain_asked > 3000) ||
           (n->drain == 2 && (!n->na || now >= n->drain_until));
}

/* ---- the head's answers (rows of node.c's table) ---- */

void ct__node_on_error(nodest *n, Ct__Envelope *e)
{
    CT_LOG(CT_LOG_WARN, "node", "head: %s", e->error->message);
    if (e->error->field && !strcmp(e->error->field, "heartbeat.node_id"))
        n->forgotten = true;
}

/* The head sized its heartbeat period for the cluster anew (head/nodes.c): the main loop's
 * next heartbeat and the liveness thread's next one keep to it. */
void ct__node_on_heartbeat_period(nodest *n, Ct__Envelope *e)
{
    int ms = e->heartbeat_period->heartbeat_ms;
    if (ms < 1 || ms > 60000) {
        CT_LOG(CT_LOG_WARN, "node", "head: heartbeat_period.heartbeat_ms %d not in [1, 60000]", ms);
        return;
    }
    if (ms != n->hb_ms)
        CT_LOG(CT_LOG_INFO, "node", "heartbeat period %d ms (was %d)", ms, n->hb_ms);
    n->hb_ms = ms;
    atomic_store(&n->live.hb_ms, ms);
}

void ct__node_on_drain_reply(nodest *n, Ct__Envelope *e)
{
    if (n->drain != 1)
        return;
    n->drain = e->drain_reply->wait ? 2 : 3;
    if (n->drain == 2)
        CT_LOG(CT_LOG_INFO, "node",
               "draining: waiting up to %lld ms for %d actors, whose jobs save their "
               "work first",
               (long long)(n->drain_until - ct__now_ms()), n->na);
}
