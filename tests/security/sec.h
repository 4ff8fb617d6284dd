/* tests/security/sec.h — helpers for the head's security tests: raw ZeroMQ peers that speak
 * ct's protocol with protobuf-c and no client library in between, so that a test sends exactly
 * what a hostile peer would (another node's id, another job's key, NaN, a 2 MB message) and
 * asserts the head's answer. Processes are started and reaped by tests/runtime/harness.h
 * (PR_SET_PDEATHSIG, killed by pid at exit and on fatal signals).
 *
 * A peer is one DEALER with its own routing id; it sends its token (a job's, a node's or none)
 * in every envelope. Header-only: each test is one executable. */
#ifndef CT_TESTS_SECURITY_SEC_H
#define CT_TESTS_SECURITY_SEC_H

#include "../runtime/harness.h"
#include "common/auth.h"
#include <zmq.h>
#include "common/common.h"
#include "ct/ct.h"
#include "proto/msg.h"

#define EPERM_ (-EPERM) /* the head's "not yours" */

typedef struct peer {
    void *s;
    uint64_t req;
    char token[CT_TOKEN_LEN + 1]; /* sent in every envelope; "" none */
    char name[32];
} peer;

static void *s_ctx;

/* Which CURVE keys a peer uses: the cluster's (this process's secret), none (plain ZMTP), or
 * those of another cluster's secret (KEYS_OTHER: s_other, then this process's is reloaded from
 * $CT_SECRET_FILE). */
enum { KEYS_CLUSTER, KEYS_NONE, KEYS_OTHER };
static const uint8_t s_other[CT_SECRET_LEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

/* Connects a DEALER to addr ("host:port") with keys; token NULL: none, "job": a fresh random
 * job token, else that string as is. */
__attribute__((unused)) static int peer_open_keys(peer *p, const char *addr, const char *name,
                                                  const char *token, int keys)
{
    memset(p, 0, sizeof *p);
    if (!s_ctx) {
        s_ctx = zmq_ctx_new();
        zmq_ctx_set(s_ctx, ZMQ_MAX_SOCKETS, 4096); /* test_flood opens a thousand */
    }
    p->s = zmq_socket(s_ctx, ZMQ_DEALER);
    if (!p->s)
        return -1;
    if (keys == KEYS_OTHER)
        ct__auth_set(s_other);
    if (keys != KEYS_NONE)
        ct__auth_zmq_client(p->s); /* copies the keys: the secret may change after */
    if (keys == KEYS_OTHER && ct__auth_load(NULL))
        return -1;
    int zero = 0;
    zmq_setsockopt(p->s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(p->s, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(p->s, ZMQ_RCVHWM, &zero, sizeof zero);
    snprintf(p->name, sizeof p->name, "%s", name);
    if (token && !strcmp(token, "job"))
        ct__token_new(p->token);
    else if (token)
        snprintf(p->token, sizeof p->token, "%s", token);
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", addr);
    return zmq_connect(p->s, ep);
}

__attribute__((unused)) static int peer_open(peer *p, const char *addr, const char *name,
                                             const char *token)
{
    return peer_open_keys(p, addr, name, token, KEYS_CLUSTER);
}

__attribute__((unused)) static void peer_close(peer *p)
{
    if (p->s)
        zmq_close(p->s);
    p->s = NULL;
}

/* Sends e (its body set by the caller) with a new request id and p's token; the id. */
__attribute__((unused)) static uint64_t peer_send(peer *p, Ct__Envelope *e)
{
    e->major = CT_PROTO_MAJOR;
    e->minor = CT_PROTO_MINOR;
    e->req_id = ++p->req;
    e->sender = p->name;
    e->token = p->token;
    if (ct__msg_send(p->s, NULL, e, 0))
        fprintf(stderr, "%s: send failed: %s\n", p->name, ct_last_error());
    return e->req_id;
}

/* The next message with req_id (any when 0) or body body_case (any when 0) within timeout_ms;
 * others are dropped. NULL on timeout. The caller frees it (ct__msg_free). */
__attribute__((unused)) static Ct__Envelope *peer_wait(peer *p, uint64_t req_id, int body_case,
                                                       int timeout_ms)
{
    double until = h_now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(until - h_now_ms());
        zmq_pollitem_t it = {p->s, 0, ZMQ_POLLIN, 0};
        if (left <= 0 || zmq_poll(&it, 1, left) <= 0)
            return NULL;
        Ct__Envelope *e = NULL;
        if (ct__msg_recv(p->s, NULL, &e, 0, p->name)) {
            ct__msg_free(e);
            continue;
        }
        if ((!req_id || e->req_id == req_id) && (!body_case || (int)e->body_case == body_case))
            return e;
        ct__msg_free(e);
    }
}

/* Sends e and waits for its reply. */
__attribute__((unused)) static Ct__Envelope *peer_call(peer *p, Ct__Envelope *e, int timeout_ms)
{
    return peer_wait(p, peer_send(p, e), 0, timeout_ms);
}

/* Asserts that r is an Error with code and field (and, when want is not NULL, a message
 * containing it); prints what came instead. Frees r. */
#define CHECK_ERR(r, code, field, want) check_err((r), (code), (field), (want), __FILE__, __LINE__)
__attribute__((unused)) static void check_err(Ct__Envelope *r, int code, const char *field,
                                              const char *want, const char *file, int line)
{
    if (!r) {
        fprintf(stderr, "%s:%d: no reply (want error %d on %s)\n", file, line, code, field);
        h_failures++;
        return;
    }
    if (r->body_case != CT__ENVELOPE__BODY_ERROR) {
        fprintf(stderr, "%s:%d: got %s, want error %d on %s\n", file, line,
                ct__msg_body_name(r->body_case), code, field);
        h_failures++;
    } else if (r->error->code != code || strcmp(r->error->field, field) ||
               (want && !strstr(r->error->message, want))) {
        fprintf(stderr, "%s:%d: got error %d on '%s' (%s), want %d on '%s'%s%s\n", file, line,
                r->error->code, r->error->field, r->error->message, code, field,
                want ? " saying " : "", want ? want : "");
        h_failures++;
    }
    ct__msg_free(r);
}

/* Asserts that nothing with body bc reaches p within ms. */
#define CHECK_NOTHING(p, bc, ms)                                                                   \
    do {                                                                                           \
        Ct__Envelope *_r = peer_wait((p), 0, (bc), (ms));                                          \
        if (_r) {                                                                                  \
            fprintf(stderr, "%s:%d: %s got %s, want nothing\n", __FILE__, __LINE__, (p)->name,     \
                    ct__msg_body_name(_r->body_case));                                             \
            h_failures++;                                                                          \
        }                                                                                          \
        ct__msg_free(_r);                                                                          \
    } while (0)

/* A resource list of n entries (names[i], amounts[i]) into r / rp. */
__attribute__((unused)) static void res_list(Ct__Resource *r, Ct__Resource **rp, int n,
                                             const char *const *names, const double *amounts)
{
    for (int i = 0; i < n; i++) {
        ct__resource__init(&r[i]);
        r[i].name = (char *)names[i];
        r[i].amount = amounts[i];
        rp[i] = &r[i];
    }
}

/* A CreateActor of class cls asking for one resource (res=amount), built in m (the returned
 * envelope is valid while m is). */
typedef struct create_msg {
    Ct__Envelope e;
    Ct__CreateActor c;
    Ct__Resource r, *rp;
} create_msg;
__attribute__((unused)) static Ct__Envelope *create_actor_msg(create_msg *m, const char *cls,
                                                              const char *res, double amount)
{
    ct__create_actor__init(&m->c);
    res_list(&m->r, &m->rp, 1, &res, &amount);
    ct__envelope__init(&m->e);
    m->c.class_name = (char *)cls;
    m->c.exe_path = "/bin/true";
    m->c.n_resources = 1;
    m->c.resources = &m->rp;
    m->c.bundle_index = -1;
    m->e.body_case = CT__ENVELOPE__BODY_CREATE_ACTOR;
    m->e.create_actor = &m->c;
    return &m->e;
}

/* Sends a Heartbeat of node node_id from p (liveness_only as the liveness thread's; stats: what
 * the node measured, NULL none); the request id. */
__attribute__((unused)) static uint64_t send_heartbeat(peer *p, const char *node_id,
                                                       int liveness_only, Ct__NodeStats *stats)
{
    Ct__Envelope e;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__envelope__init(&e);
    hb.node_id = (char *)node_id;
    hb.liveness_only = liveness_only;
    hb.stats = stats;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    return peer_send(p, &e);
}

/* Sends RegisterNode of a node on host (one resource name=amount) and returns the reply. */
__attribute__((unused)) static Ct__Envelope *register_node_on(peer *p, const char *host,
                                                              const char *name, double amount)
{
    Ct__Envelope e;
    Ct__RegisterNode rn = CT__REGISTER_NODE__INIT;
    Ct__Resource r, *rp;
    res_list(&r, &rp, 1, &name, &amount);
    ct__envelope__init(&e);
    rn.host = (char *)host;
    rn.n_resources = 1;
    rn.resources = &rp;
    rn.pid = 1;
    e.body_case = CT__ENVELOPE__BODY_REGISTER_NODE;
    e.register_node = &rn;
    return peer_call(p, &e, 5000);
}

/* ... on 127.0.0.1 */
__attribute__((unused)) static Ct__Envelope *register_node(peer *p, const char *name, double amount)
{
    return register_node_on(p, "127.0.0.1", name, amount);
}

/* Makes p a (fake) node with cpus CPUs: fills id, and p's token becomes the node's. 0 or -1. */
__attribute__((unused)) static int fake_node(peer *p, double cpus, char *id, size_t cap)
{
    Ct__Envelope *r = register_node(p, "CPU", cpus);
    int rc = r && r->body_case == CT__ENVELOPE__BODY_REGISTER_NODE_REPLY ? 0 : -1;
    if (!rc) {
        snprintf(id, cap, "%s", r->register_node_reply->node_id);
        snprintf(p->token, sizeof p->token, "%s", r->register_node_reply->token);
    } else {
        fprintf(stderr, "%s: registration failed: %s\n", p->name,
                r && r->body_case == CT__ENVELOPE__BODY_ERROR ? r->error->message : "no reply");
    }
    ct__msg_free(r);
    return rc;
}

/* The head's status (caller frees), NULL when it does not answer. */
__attribute__((unused)) static Ct__Envelope *status(peer *p)
{
    Ct__Envelope e;
    Ct__Status st = CT__STATUS__INIT;
    ct__envelope__init(&e);
    e.body_case = CT__ENVELOPE__BODY_STATUS;
    e.status = &st;
    Ct__Envelope *r = peer_call(p, &e, 5000);
    if (r && r->body_case != CT__ENVELOPE__BODY_STATUS_REPLY) {
        ct__msg_free(r);
        r = NULL;
    }
    return r;
}

/* Free (or total) amount of resource res on node id from a status; -1 when absent. */
__attribute__((unused)) static double node_amount(peer *p, const char *id, const char *res,
                                                  int total)
{
    Ct__Envelope *r = status(p);
    double v = -1;
    for (size_t i = 0; r && i < r->status_reply->n_nodes; i++) {
        Ct__NodeInfo *n = r->status_reply->nodes[i];
        if (strcmp(n->node_id, id))
            continue;
        v = total ? ct__res_get(n->total, n->n_total, res) : ct__res_get(n->free, n->n_free, res);
    }
    ct__msg_free(r);
    return v;
}

/* An actor's state ("ALIVE", ...) and address from a status into state / addr; -1 if absent. */
__attribute__((unused)) static int actor_info(peer *p, const char *id, char *state, char *addr)
{
    Ct__Envelope *r = status(p);
    int rc = -1;
    for (size_t i = 0; r && i < r->status_reply->n_actors; i++) {
        Ct__ActorInfo *a = r->status_reply->actors[i];
        if (strcmp(a->actor_id, id))
            continue;
        snprintf(state, 16, "%s", a->state);
        snprintf(addr, 160, "%s", a->address);
        rc = 0;
    }
    ct__msg_free(r);
    return rc;
}

/* 0 when Counter actor a (tests/runtime/classes.h) answers add(0) within 3 s. */
__attribute__((unused)) static int counter_answers(ct_actor *a)
{
    void *res = NULL;
    size_t n = 0;
    long zero = 0;
    int rc = ct_actor_call(a, "add", &zero, sizeof zero, &res, &n, 3000);
    free(res);
    return rc;
}

/* 0 when the head answers a ping within 3 s. */
__attribute__((unused)) static int ping(peer *p)
{
    Ct__Envelope e;
    Ct__Ping pg = CT__PING__INIT;
    ct__envelope__init(&e);
    e.body_case = CT__ENVELOPE__BODY_PING;
    e.ping = &pg;
    Ct__Envelope *r = peer_call(p, &e, 3000);
    int rc = r && r->body_case == CT__ENVELOPE__BODY_OK ? 0 : -1;
    ct__msg_free(r);
    return rc;
}

/* Peak resident memory of pid in kB (VmHWM of /proc/PID/status); -1 when unreadable. */
__attribute__((unused)) static long vm_hwm_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* Ends a test: closes the peers' context, kills and reaps what it started, reports. */
__attribute__((unused)) static int sec_finish(const char *name, pid_t head)
{
    if (s_ctx)
        zmq_ctx_term(s_ctx);
    s_ctx = NULL;
    h_kill_all();
    if (head > 0)
        CHECK(h_gone(head));
    if (h_failures)
        fprintf(stderr, "%s: %d failure(s)\n", name, h_failures);
    else
        printf("%s: ok\n", name);
    return h_failures ? 1 : 0;
}

#endif
