/* actor/simnodes.c — ct-simnodes: N simulated nodes in one process, for tests and benchmarks of
 * the head at scale (tests/scale, bench/scale). Each simulated node is a real node to the head:
 * its own ZeroMQ DEALER with the cluster's CURVE keys (common/auth.h, the handshake and ZAP
 * check of every ct-node), a RegisterNode with its resources, heartbeats at the period the head
 * gives and later changes (HeartbeatPeriod; by default the main socket's and the liveness
 * thread's, both on its one socket, as many messages as a ct-node sends), its store announced
 * (ObjNodeInfo and ObjAdded of
 * --objects ids), optionally its death-watch connection (--watch: one more descriptor a node).
 * It answers StartActor with ActorReady at once, and KillActor with ActorExited: an actor is a
 * record (id, job), no process is started.
 *
 * Calls: every simulated actor's address is the one ZMTP listener of this process (actor/zmtp.c,
 * the server a real actor runs, with the cluster secret's challenge-response), served by one
 * thread of its own, so a driver reaches a simulated actor as a real one (ct_actor_call: one
 * connection per handle to the address ActorReady gave). It answers Call "echo" with its
 * arguments, any other method with an Error (CT_ENOENT, "call.method: a simulated actor has no
 * method 'M'"), any other body with an Error (CT_EPROTO), as worker.c's actor does. A Call names
 * no actor and every simulated actor shares the address, so they are one class with no state: a
 * call cannot tell which one it reached, and a killed one's address still answers (the driver
 * learns the death from the head).
 *
 * Why a program of its own and not ct-node --simulate: the node daemon is one node per process
 * around its zygotes, signalfd, liveness thread and store shard; a simulated node shares none of
 * that but the messages, and a second loop and handler table inside the daemon would put test
 * code on its production path. This file has its own small table, in node.c's shape.
 *
 * The loop: every socket's ZMQ_FD in one epoll set (level-triggered: a readable one is drained
 * until EAGAIN, which rearms it), so a turn costs what arrived, not N; heartbeats go out spread
 * over the period (node i at phase i/N). Descriptors: two per node (its socket's mailbox and its
 * TCP connection), three with --watch; the process raises RLIMIT_NOFILE to its hard limit.
 *
 * A head that does not know a node (restarted) refuses its heartbeat: the node registers again
 * under its id and token with its actors, and announces its store again, as ct-node's resume.
 *
 * Output (stdout, one line each): "registered N" once all are; at SIGTERM/SIGINT a last line
 * "simnodes nodes=N registered=R starts=S kills=K refused_heartbeats=F resumed=M errors=E
 * rss_kb=X base_rss_kb=Y heartbeat_ms=P heartbeat_ms_min=Q period_changes=C calls=L
 * call_errors=U" (calls: Calls answered with their arguments; call_errors: calls refused, an
 * unknown method or not a Call; P, Q: the
 * longest and shortest period the registered nodes hold; refused_heartbeats: the head did not know
 * a node, a false death when the head did not restart; resumed: registrations again that the head
 * answered). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sodium.h>
#include <unistd.h>
#include <zmq.h>
#include "actor/runtime.h"
#include "actor/zmtp.h"
#include "common/auth.h"
#include "common/common.h"
#include "proto/msg.h"

/* What a re-registration tells a restarted head of an actor (RegisterNode.actors). */
typedef struct simactor {
    char id[32];
    char job[CT_TOKEN_LEN + 1];
    char pg[32];
    int bundle;
    double cpu, gpu;
} simactor;

typedef struct simnode {
    void *sock;
    char id[32], token[CT_TOKEN_LEN + 1];
    int watch_fd;
    bool registered;
    bool forgotten;   /* a head that does not know it (restarted) refused its heartbeat: resume */
    int64_t resuming; /* when its resume went out, until answered (no heartbeats meanwhile) */
    int64_t next_hb;
    int hb_ms; /* the period the head gave it (RegisterNodeReply, HeartbeatPeriod) */
    simactor *a;
    int na, cap;
} simnode;

typedef struct sim {
    const char *head;
    int nodes, cpus, gpus, objects;
    bool watch, one_heartbeat;
    void *ctx;
    int ep;
    simnode *n;
    int hb_ms;                 /* the period a node takes when the head gives none */
    int nregistered, nrefused; /* registrations answered: taken, refused */
    uint64_t starts, kills, refused_hb, errors;
    uint64_t resumed;        /* registrations again under the node's id, after a head restart */
    uint64_t period_changes; /* HeartbeatPeriod messages that changed a node's period */
    char host[64];
    char call_ep[64]; /* every simulated actor's address: the calls thread's listener */
} sim;

/* The calls thread's: the listener and what it answered (read by main at the end). */
typedef struct sim_calls {
    ct__zmtp *z;
    atomic_ullong answered, refused;
} sim_calls;

#define JOINING 256 /* registrations unanswered at a time */

static volatile sig_atomic_t stop;
static sim_calls calls;
static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* Sends e for node i (with its token once it has one); never blocks. */
static void send_as(sim *s, int i, Ct__Envelope *e)
{
    e->token = s->n[i].token[0] ? s->n[i].token : NULL;
    if (ct__msg_send(s->n[i].sock, NULL, e, ZMQ_DONTWAIT))
        s->errors++;
}

static void send_register(sim *s, int i, bool resume)
{
    Ct__Resource r[2], *rp[2];
    const char *names[2] = {"CPU", "GPU"};
    double amts[2] = {s->cpus, s->gpus};
    for (int k = 0; k < 2; k++) {
        ct__resource__init(&r[k]);
        r[k].name = (char *)names[k];
        r[k].amount = amts[k];
        rp[k] = &r[k];
    }
    Ct__Envelope e;
    Ct__RegisterNode reg = CT__REGISTER_NODE__INIT;
    ct__env_init(&e, 1, "simnode", 0);
    reg.host = s->host;
    reg.n_resources = 2;
    reg.resources = rp;
    reg.pid = getpid();
    e.body_case = CT__ENVELOPE__BODY_REGISTER_NODE;
    e.register_node = &reg;
    simnode *n = &s->n[i];
    Ct__ResumedActor *ra = NULL, **rap = NULL;
    Ct__Resource *rr = NULL, **rrp = NULL;
    if (resume) { /* again under its id and token, with its actors (as ct-node's resume) */
        reg.node_id = n->id;
        reg.node_token = n->token;
        ra = calloc(n->na + 1, sizeof *ra);
        rap = calloc(n->na + 1, sizeof *rap);
        rr = calloc(2 * (n->na + 1), sizeof *rr);
        rrp = calloc(2 * (n->na + 1), sizeof *rrp);
        for (int k = 0; ra && rap && rr && rrp && k < n->na; k++) {
            simactor *a = &n->a[k];
            ct__resumed_actor__init(&ra[k]);
            ra[k].actor_id = a->id;
            ra[k].class_name = "Sim";
            ra[k].job_token = a->job;
            ra[k].pid = getpid();
            ra[k].address = s->call_ep;
            ra[k].pg_id = a->pg;
            ra[k].bundle_index = a->bundle;
            double amt[2] = {a->cpu, a->gpu};
            for (int q = 0; q < 2; q++) {
                ct__resource__init(&rr[2 * k + q]);
                rr[2 * k + q].name = (char *)names[q];
                rr[2 * k + q].amount = amt[q];
                rrp[2 * k + q] = &rr[2 * k + q];
            }
            ra[k].n_resources = 2;
            ra[k].resources = &rrp[2 * k];
            rap[k] = &ra[k];
            reg.n_actors = k + 1;
        }
        reg.actors = rap;
    }
    send_as(s, i, &e);
    free(ra);
    free(rap);
    free(rr);
    free(rrp);
}

/* The store's announcements: ObjNodeInfo, then one ObjAdded per simulated object. */
static void announce_store(sim *s, int i)
{
    simnode *n = &s->n[i];
    Ct__Envelope e;
    Ct__ObjNodeInfo ni = CT__OBJ_NODE_INFO__INIT;
    ct__env_init(&e, 0, n->id, 0);
    char name[64], xfer[96];
    snprintf(name, sizeof name, "sim-%s", n->id);
    snprintf(xfer, sizeof xfer, "tcp://%s:1", s->host);
    ni.node_id = n->id;
    ni.store_name = name;
    ni.xfer_address = xfer;
    ni.memory_cap = 1 << 30;
    ni.host = s->host;
    ni.host_id = "simnodes";
    e.body_case = CT__ENVELOPE__BODY_OBJ_NODE_INFO;
    e.obj_node_info = &ni;
    send_as(s, i, &e);
    for (int k = 0; k < s->objects; k++) {
        uint8_t id[CT_OBJECT_ID_LEN];
        randombytes_buf(id, sizeof id);
        Ct__ObjAdded a = CT__OBJ_ADDED__INIT;
        ct__env_init(&e, 0, n->id, 0);
        a.node_id = n->id;
        a.object_id.data = id;
        a.object_id.len = sizeof id;
        a.size = 4096;
        e.body_case = CT__ENVELOPE__BODY_OBJ_ADDED;
        e.obj_added = &a;
        send_as(s, i, &e);
    }
}

static void send_heartbeat(sim *s, int i, bool liveness_only)
{
    Ct__Envelope e;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__env_init(&e, 0, s->n[i].id, 0);
    hb.node_id = s->n[i].id;
    hb.liveness_only = liveness_only;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    send_as(s, i, &e);
}

/* ---- the handler table: what a simulated node takes from its head ---- */

typedef void sim_handler(sim *s, int i, Ct__Envelope *e);

static void on_register_reply(sim *s, int i, Ct__Envelope *e)
{
    simnode *n = &s->n[i];
    Ct__RegisterNodeReply *r = e->register_node_reply;
    if (n->registered) { /* a resume answered: same id, store announced again */
        s->resumed++;
        n->resuming = 0;
        if (r->heartbeat_ms > 0) /* the restarted head's period */
            n->hb_ms = r->heartbeat_ms;
        announce_store(s, i);
        return;
    }
    snprintf(n->id, sizeof n->id, "%s", r->node_id);
    snprintf(n->token, sizeof n->token, "%s", r->token);
    n->registered = true;
    s->nregistered++;
    n->hb_ms = r->heartbeat_ms > 0 ? r->heartbeat_ms : s->hb_ms;
    /* spread over the period: node i at phase i/N */
    n->next_hb = ct__now_ms() + (int64_t)n->hb_ms * i / s->nodes;
    if (s->watch && r->watch_port && r->watch_ticket && *r->watch_ticket) {
        n->watch_fd = ct__watch_dial(s->head, r->watch_port, r->watch_ticket, 10000);
        if (n->watch_fd < 0) {
            CT_LOG(CT_LOG_WARN, "simnodes", "%s: no death watch: %s", n->id, ct_last_error());
            s->errors++;
        }
    }
    announce_store(s, i);
}

/* The head sized its period anew for the cluster: the node's next heartbeats keep to it, at the
 * same phase of the new period (node i at i/N). */
static void on_heartbeat_period(sim *s, int i, Ct__Envelope *e)
{
    int ms = e->heartbeat_period->heartbeat_ms;
    simnode *n = &s->n[i];
    if (ms < 1 || ms > 60000) {
        s->errors++;
        return;
    }
    if (ms != n->hb_ms) {
        n->hb_ms = ms;
        n->next_hb = ct__now_ms() + (int64_t)ms * i / s->nodes;
        s->period_changes++;
    }
}

static void on_start_actor(sim *s, int i, Ct__Envelope *e)
{
    simnode *n = &s->n[i];
    const char *id = e->start_actor->actor_id ? e->start_actor->actor_id : "";
    if (n->na == n->cap) {
        int cap = n->cap ? 2 * n->cap : 4;
        simactor *a = realloc(n->a, cap * sizeof *a);
        if (!a) {
            s->errors++;
            return;
        }
        n->a = a;
        n->cap = cap;
    }
    simactor *sa = &n->a[n->na++];
    Ct__StartActor *st = e->start_actor;
    snprintf(sa->id, sizeof sa->id, "%s", id);
    snprintf(sa->job, sizeof sa->job, "%s", st->job_token ? st->job_token : "");
    snprintf(sa->pg, sizeof sa->pg, "%s", st->pg_id ? st->pg_id : "");
    sa->bundle = st->bundle_index;
    sa->cpu = ct__res_get(st->resources, st->n_resources, "CPU");
    sa->gpu = ct__res_get(st->resources, st->n_resources, "GPU");
    s->starts++;
    Ct__Envelope o;
    Ct__ActorReady r = CT__ACTOR_READY__INIT;
    ct__env_init(&o, 0, n->id, 0);
    r.actor_id = (char *)id;
    r.address = s->call_ep;
    r.pid = getpid();
    o.body_case = CT__ENVELOPE__BODY_ACTOR_READY;
    o.actor_ready = &r;
    send_as(s, i, &o);
}

static void on_kill_actor(sim *s, int i, Ct__Envelope *e)
{
    simnode *n = &s->n[i];
    const char *id = e->kill_actor->actor_id ? e->kill_actor->actor_id : "";
    for (int k = 0; k < n->na; k++) {
        if (strcmp(n->a[k].id, id))
            continue;
        n->a[k] = n->a[--n->na];
        s->kills++;
        Ct__Envelope o;
        Ct__ActorExited x = CT__ACTOR_EXITED__INIT;
        ct__env_init(&o, 0, n->id, 0);
        x.actor_id = (char *)id;
        x.pid = getpid();
        x.term_signal = SIGKILL;
        o.body_case = CT__ENVELOPE__BODY_ACTOR_EXITED;
        o.actor_exited = &x;
        send_as(s, i, &o);
        return;
    }
}

static void on_error(sim *s, int i, Ct__Envelope *e)
{
    const char *field = e->error->field ? e->error->field : "";
    if (!s->n[i].registered && !strncmp(field, "register_node", 13))
        s->nrefused++; /* the head's node limit, say */
    else if (!strcmp(field, "heartbeat.node_id")) {
        s->refused_hb++; /* the head does not know it: restarted, or it declared it dead */
        s->n[i].forgotten = true;
        return;
    } else
        s->errors++;
    CT_LOG(CT_LOG_WARN, "simnodes", "node %d (%s): head: %s", i, s->n[i].id,
           e->error->message ? e->error->message : "");
}

static const struct {
    Ct__Envelope__BodyCase body;
    sim_handler *fn;
} handlers[] = {
    {CT__ENVELOPE__BODY_REGISTER_NODE_REPLY, on_register_reply},
    {CT__ENVELOPE__BODY_HEARTBEAT_PERIOD, on_heartbeat_period},
    {CT__ENVELOPE__BODY_START_ACTOR, on_start_actor},
    {CT__ENVELOPE__BODY_KILL_ACTOR, on_kill_actor},
    {CT__ENVELOPE__BODY_ERROR, on_error},
    /* JobEnded (no zygotes here), ObjPull / ObjDelete (no store data), Ok: dropped */
};

/* ---- the calls thread: what every simulated actor answers ---- */

static void call_send(ct__zmtp *z, int conn, const Ct__Envelope *e)
{
    size_t n = ct__envelope__get_packed_size(e);
    uint8_t stack[4096];
    uint8_t *buf = n <= sizeof stack ? stack : malloc(n);
    if (!buf)
        return;
    ct__envelope__pack(e, buf);
    ct__zmtp_send(z, conn, buf, n);
    if (buf != stack)
        free(buf);
}

static void call_refuse(ct__zmtp *z, int conn, uint64_t req, int code, const char *msg)
{
    Ct__Envelope e;
    Ct__Error er = CT__ERROR__INIT;
    ct__env_init(&e, req, "simactor", 0);
    er.code = code;
    er.message = (char *)msg;
    er.field = "";
    e.body_case = CT__ENVELOPE__BODY_ERROR;
    e.error = &er;
    call_send(z, conn, &e);
    atomic_fetch_add(&calls.refused, 1);
}

/* One message from a caller: a Call "echo" answered with its arguments, anything else refused
 * with the error a real actor gives (worker.c's actor_main). */
static void call_answer(ct__zmtp *z, int conn, const uint8_t *data, size_t len)
{
    Ct__Envelope *in;
    int rc = ct__msg_decode(data, len, &in, "actor");
    if (rc) {
        call_refuse(z, conn, in ? in->req_id : 0, rc, ct_last_error());
        ct__msg_free(in);
        return;
    }
    char msg[200];
    const char *m =
        in->body_case == CT__ENVELOPE__BODY_CALL && in->call->method ? in->call->method : "";
    if (in->body_case != CT__ENVELOPE__BODY_CALL) {
        snprintf(msg, sizeof msg, "an actor does not handle %s", ct__msg_body_name(in->body_case));
        call_refuse(z, conn, in->req_id, CT_EPROTO, msg);
    } else if (strcmp(m, "echo")) {
        snprintf(msg, sizeof msg,
                 "call.method: a simulated actor has no method '%s' (it answers 'echo')", m);
        call_refuse(z, conn, in->req_id, CT_ENOENT, msg);
    } else {
        Ct__Envelope o;
        Ct__CallReply cr = CT__CALL_REPLY__INIT;
        ct__env_init(&o, in->req_id, "simactor", 0);
        cr.result = in->call->args;
        o.body_case = CT__ENVELOPE__BODY_CALL_REPLY;
        o.call_reply = &cr;
        call_send(z, conn, &o);
        atomic_fetch_add(&calls.answered, 1);
    }
    ct__msg_free(in);
}

/* Serves every simulated actor's calls until stop (looked at every 200 ms). */
static void *calls_main(void *arg)
{
    (void)arg;
    while (!stop) {
        int conn;
        const uint8_t *data;
        size_t len;
        int rc = ct__zmtp_next_within(calls.z, &conn, &data, &len, 200);
        if (rc == CT_ETIMEDOUT)
            continue;
        if (rc == CT_EPROTO) {
            call_refuse(calls.z, conn, 0, CT_EPROTO, "an actor takes one-frame messages");
            continue;
        }
        if (rc) {
            CT_LOG(CT_LOG_ERROR, "simnodes", "calls: %s", ct_last_error());
            break;
        }
        call_answer(calls.z, conn, data, len);
    }
    return NULL;
}

/* Reads everything queued on node i's socket. */
static void drain(sim *s, int i)
{
    while (s->n[i].sock) { /* none yet: not opened (the first turns run while nodes open) */
        Ct__Envelope *e = NULL;
        int rc = ct__msg_recv(s->n[i].sock, NULL, &e, ZMQ_DONTWAIT, "node");
        if (rc == CT_ETIMEDOUT)
            return;
        if (rc) {
            s->errors++;
            ct__msg_free(e);
            if (rc == CT_EZMQ)
                return;
            continue;
        }
        for (size_t k = 0; k < CT_ARRAY_LEN(handlers); k++)
            if (handlers[k].body == e->body_case)
                handlers[k].fn(s, i, e);
        ct__msg_free(e);
    }
}

static int open_node(sim *s, int i)
{
    simnode *n = &s->n[i];
    n->watch_fd = -1;
    n->sock = zmq_socket(s->ctx, ZMQ_DEALER);
    if (!n->sock)
        return ct__error(CT_EZMQ, "simnodes: socket %d: %s (descriptors: RLIMIT_NOFILE?)", i,
                         zmq_strerror(errno));
    int zero = 0;
    zmq_setsockopt(n->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(n->sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(n->sock, ZMQ_RCVHWM, &zero, sizeof zero);
    int rc = ct__auth_zmq_client(n->sock);
    if (rc)
        return rc;
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", s->head);
    if (zmq_connect(n->sock, ep))
        return ct__error(CT_EINVAL, "simnodes: head %s: %s", s->head, zmq_strerror(errno));
    int fd;
    size_t len = sizeof fd;
    zmq_getsockopt(n->sock, ZMQ_FD, &fd, &len);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev))
        return ct__error(CT_EIO, "simnodes: epoll: %s", strerror(errno));
    return 0;
}

/* One turn: what arrived, then the heartbeats due; every socket read once a second (the ZMQ_FD
 * of a socket signals only what follows a read that found nothing). */
static void turn(sim *s, int timeout_ms)
{
    static int64_t last_sweep;
    if (ct__now_ms() - last_sweep >= 1000) {
        for (int i = 0; i < s->nodes; i++)
            drain(s, i);
        last_sweep = ct__now_ms();
    }
    struct epoll_event ev[256];
    int k = epoll_wait(s->ep, ev, 256, timeout_ms);
    for (int j = 0; j < k; j++)
        drain(s, (int)ev[j].data.u32);
    int64_t now = ct__now_ms();
    for (int i = 0; i < s->nodes; i++) {
        simnode *n = &s->n[i];
        if (!n->registered || now < n->next_hb)
            continue;
        if (n->resuming && now - n->resuming < 10000) {
            /* its resume is not answered yet: ct-node waits for it too */
        } else if (n->forgotten) {
            n->forgotten = false;
            n->resuming = now;
            send_register(s, i, true);
        } else {
            send_heartbeat(s, i, false);
            if (!s->one_heartbeat)
                send_heartbeat(s, i, true);
        }
        n->next_hb += n->hb_ms;
        if (n->next_hb <= now)
            n->next_hb = now + n->hb_ms;
        drain(s, i); /* a send may have taken the socket's readiness signal */
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ct-simnodes --head H:P --nodes N [--cpus C] [--gpus G] [--objects K]\n"
               "                   [--watch] [--one-heartbeat] [--secret-file F]\n"
               "  N simulated nodes in this process, each a registered node of the head at H:P\n"
               "  --cpus C, --gpus G  each node's resources (default 4, 0)\n"
               "  --objects K         objects each node announces (default 1)\n"
               "  --watch             each node keeps a death-watch connection (one more fd)\n"
               "  --one-heartbeat     one heartbeat a period (ct-node sends two: main, liveness)\n"
               "prints \"registered N\" once all are, and counters at SIGTERM.\n");
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > hi) {
        fprintf(stderr, "ct-simnodes: %s: '%s' is not an integer in [%d, %d]\n", flag, v ? v : "",
                lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int main(int argc, char **argv)
{
    sim s = {.nodes = 0, .cpus = 4, .gpus = 0, .objects = 1, .hb_ms = 100};
    const char *secret_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--head") && v) {
            s.head = v, i++;
        } else if (!strcmp(a, "--secret-file") && v) {
            secret_file = v, i++;
        } else if (!strcmp(a, "--nodes")) {
            bad = parse_int(a, v, 1, 1000000, &s.nodes), i++;
        } else if (!strcmp(a, "--cpus")) {
            bad = parse_int(a, v, 0, 1 << 20, &s.cpus), i++;
        } else if (!strcmp(a, "--gpus")) {
            bad = parse_int(a, v, 0, 1 << 20, &s.gpus), i++;
        } else if (!strcmp(a, "--objects")) {
            bad = parse_int(a, v, 0, 1 << 20, &s.objects), i++;
        } else if (!strcmp(a, "--watch")) {
            s.watch = true;
        } else if (!strcmp(a, "--one-heartbeat")) {
            s.one_heartbeat = true;
        } else {
            fprintf(stderr, "ct-simnodes: unknown argument or missing value '%s' (see --help)\n",
                    a);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (!s.head || !strchr(s.head, ':') || !s.nodes) {
        fprintf(stderr, "ct-simnodes: --head H:P and --nodes N are required (see --help)\n");
        return 2;
    }
    if (!ct__auth_off() && ct__auth_load(secret_file)) {
        fprintf(stderr, "ct-simnodes: %s\n", ct_last_error());
        return 2;
    }
    snprintf(s.host, sizeof s.host, "127.0.0.1");
    ct__log_set_who("simnodes");
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    long base_kb = rss_kb();
    int rc = 0;
    /* the calls thread, its signals blocked so SIGTERM reaches the main loop */
    pthread_t calls_thread;
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigaddset(&term, SIGINT);
    if (ct__zmtp_listen(s.host, s.call_ep, sizeof s.call_ep, &calls.z)) {
        fprintf(stderr, "ct-simnodes: the actors' call listener: %s\n", ct_last_error());
        return 1;
    }
    pthread_sigmask(SIG_BLOCK, &term, &old);
    int thread_rc = pthread_create(&calls_thread, NULL, calls_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (thread_rc) {
        fprintf(stderr, "ct-simnodes: the calls thread: %s\n", strerror(thread_rc));
        return 1;
    }
    s.n = calloc(s.nodes, sizeof *s.n);
    s.ctx = zmq_ctx_new();
    s.ep = epoll_create1(EPOLL_CLOEXEC);
    if (!s.n || !s.ctx || s.ep < 0) {
        fprintf(stderr, "ct-simnodes: out of memory\n");
        return 1;
    }
    zmq_ctx_set(s.ctx, ZMQ_MAX_SOCKETS, s.nodes + 16);
    /* a read that finds nothing arms the socket's ZMQ_FD (an unread pipe signals nothing) */
    /* registrations: at most JOINING unanswered at a time, the nodes registered so far
     * heartbeating meanwhile, as real ones do; every reply within 120 s and 30 ms a node.
     * Opening all at once queued the registered nodes' heartbeats behind thousands of CURVE
     * handshakes in this process's one I/O thread: at 10,000 nodes on a loaded 2-core machine
     * the first nodes went silent for 10 s and were declared dead. */
    int64_t until = ct__now_ms() + 120000 + 30LL * s.nodes;
    int opened = 0;
    while (!stop && !rc && s.nregistered + s.nrefused < s.nodes && ct__now_ms() < until) {
        while (!rc && opened < s.nodes && opened - s.nregistered - s.nrefused < JOINING)
            if (!(rc = open_node(&s, opened))) {
                send_register(&s, opened, false);
                drain(&s, opened++);
            }
        turn(&s, 10);
    }
    if (rc) {
        fprintf(stderr, "ct-simnodes: %s\n", ct_last_error());
        goto out;
    }
    if (s.nregistered < s.nodes) {
        fprintf(stderr, "ct-simnodes: %d of %d nodes registered (%d refused)\n", s.nregistered,
                s.nodes, s.nrefused);
        rc = 1;
        goto out;
    }
    printf("registered %d\n", s.nodes);
    fflush(stdout);
    while (!stop)
        turn(&s, 2);
out:
    int hb_max = 0, hb_min = 0;
    for (int i = 0; i < s.nodes; i++) {
        hb_max = s.n[i].hb_ms > hb_max ? s.n[i].hb_ms : hb_max;
        if (s.n[i].registered && (!hb_min || s.n[i].hb_ms < hb_min))
            hb_min = s.n[i].hb_ms;
    }
    printf("simnodes nodes=%d registered=%d starts=%llu kills=%llu refused_heartbeats=%llu "
           "resumed=%llu errors=%llu rss_kb=%ld base_rss_kb=%ld heartbeat_ms=%d "
           "heartbeat_ms_min=%d period_changes=%llu calls=%llu call_errors=%llu\n",
           s.nodes, s.nregistered, (unsigned long long)s.starts, (unsigned long long)s.kills,
           (unsigned long long)s.refused_hb, (unsigned long long)s.resumed,
           (unsigned long long)s.errors, rss_kb(), base_kb, hb_max, hb_min,
           (unsigned long long)s.period_changes, (unsigned long long)atomic_load(&calls.answered),
           (unsigned long long)atomic_load(&calls.refused));
    fflush(stdout);
    stop = 1;
    pthread_join(calls_thread, NULL);
    ct__zmtp_destroy(&calls.z);
    for (int i = 0; i < s.nodes; i++) {
        if (s.n[i].sock)
            zmq_close(s.n[i].sock);
        if (s.n[i].sock && s.n[i].watch_fd >= 0)
            close(s.n[i].watch_fd);
        free(s.n[i].a);
    }
    free(s.n);
    close(s.ep);
    zmq_ctx_term(s.ctx);
    return rc;
}
