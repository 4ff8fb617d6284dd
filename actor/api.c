/* actor/api.c — libct's public runtime API (include/ct/ct.h): init and the embedded cluster,
 * the class registry, actor handles, direct calls and futures, events, placement groups, KV.
 *
 * One process-wide client: a DEALER to the head (requests, replies by request id, pushed
 * events) and one DEALER per actor handle (calls go straight to the actor). No background
 * thread: whoever waits (a future, an event, a head request) polls both kinds of socket, so a
 * death event reaches a pending call at once. One mutex serializes the API's state, but waiting
 * calls release it while they sleep (sleep_unlocked), and head replies are filed by request id
 * into whichever thread waits for them (hwait): several threads may wait at once.
 * Objects: through the shard of this process's node (ct_store_client), or, in a driver whose
 * host has no node, through the nodes' data ports (put_remote / get_remote; the lock is
 * released while bytes move).
 * Not in here: the head (head/), node (node.c), the actor's serve loop (worker.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>
#include "actor/runtime.h"
#include "actor/zmtp.h"
#include "common/auth.h"
#include "common/common.h"
#include "head/head.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"
#include "proto/msg.h"

/* ---- class registry (written before ct_init, read-only after) ---- */

#define MAX_CLASSES 128
/* Longest single sleep in sleep_unlocked: a backstop only, wake-ups come from fds and kicks. */
#define SLEEP_BACKSTOP_MS 100

/* How long a waiting call reads its actor's socket before it sleeps (see wait_locked). */
#define CALL_SPIN_NS 50000
#define HANDSHAKE_MS 60000 /* an actor's create may run this long before it answers */
static struct {
    char name[64];
    ct_actor_class cls;
} classes[MAX_CLASSES];
static int nclasses;

int ct_actor_class_register(const char *name, const ct_actor_class *cls)
{
    if (!name || !*name || strlen(name) >= sizeof classes[0].name)
        return ct__error(CT_EINVAL, "ct_actor_class_register: name empty or longer than 63");
    if (!cls)
        return ct__error(CT_EINVAL, "ct_actor_class_register(%s): cls is NULL", name);
    if (ct__class_find(name))
        return ct__error(CT_EEXIST, "ct_actor_class_register: %s already registered", name);
    if (nclasses == MAX_CLASSES)
        return ct__error(CT_ENOSPC, "ct_actor_class_register: more than %d classes", MAX_CLASSES);
    snprintf(classes[nclasses].name, sizeof classes[0].name, "%s", name);
    classes[nclasses++].cls = *cls;
    return 0;
}

const ct_actor_class *ct__class_find(const char *name)
{
    for (int i = 0; i < nclasses; i++)
        if (!strcmp(classes[i].name, name))
            return &classes[i].cls;
    return NULL;
}

/* ---- client state ---- */

struct ct_future {
    ct_actor *a;
    uint64_t req;
    bool done;
    int rc;
    void *res;
    size_t len;
    char err[256];
    ct_future *next, *prev;
};

struct ct_actor {
    char id[32], node[32], addr[160];
    int pid;
    ct__zconn zc; /* ZMTP connection to the actor (zmtp.c), no libzmq involved */
    bool dead;
    ct_future *pending;
    ct_actor *next, *prev;
};

struct ct_placement_group {
    char id[32];
};

/* An object a remote driver is creating (ct_object_create): its bytes until the seal. */
struct rbuf {
    ct_object_id id;
    void *data;
    size_t len;
    struct rbuf *next;
};

#define EVQ 1024
static struct {
    pthread_mutex_t mu;
    bool inited;
    bool lazy; /* an actor: connect to the head on first use */
    void *ctx, *head;
    char addr[160];
    char sender[64];
    char job[CT_TOKEN_LEN + 1]; /* this job's token: every message to the head carries it */
    char self_actor[32], self_node[32];
    uint64_t next_req;
    unsigned sub_mask;
    pid_t head_pid, node_pid;
    int watch_wr;
    pthread_t hb_thread; /* driver liveness heartbeats (own socket: sockets are per thread) */
    int hb_stop[2];      /* pipe: closing [1] stops the thread */
    bool hb_running;
    int head_fd;         /* ZMQ_FD of head (edge-triggered), for waiting without the lock */
    int death_fd;        /* the head's death watch (head/watch.h): open while this driver lives */
    struct hwait *waits; /* requests waiting for head replies (any thread) */
    ct_event q[EVQ];
    int qh, qn;
    ct_actor *actors;
    char (*owned)[32]; /* ids of the actors this process created and not yet seen dead */
    int nowned, capowned;
    char exe[PATH_MAX];
    char *cmdline;
    size_t cmdline_len;
    /* object store: this process's node shard, found on first use */
    ct_store_client *store;
    ct_store_client *old_stores[8]; /* clients of nodes that went away: kept mapped (views and
                                       buffers of other threads may still point into them) */
    int nold;
    char store_node[32];
    /* a remote driver: no node on this host (host ids differ, or CT_REMOTE_DRIVER=1), so
     * objects go to and come from nodes' data ports; created objects wait here until sealed */
    bool remote;
    struct rbuf *creating;
    char emb_node[32];   /* the embedded node's id */
    ct_object_id exe_id; /* code shipping: SHA-1 of /proc/self/exe */
    int exe_state;       /* 0 not tried, 1 in the store, -1 could not */
} C = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .watch_wr = -1,
       .hb_stop = {-1, -1},
       .head_fd = -1,
       .death_fd = -1};

#define LOCK() pthread_mutex_lock(&C.mu)
#define UNLOCK() pthread_mutex_unlock(&C.mu)

/* A thread waiting for head replies to request ids lo..hi (into slots[id - lo]). Whichever
 * thread reads the head socket files replies into the waiter they belong to. */
typedef struct hwait {
    uint64_t lo, hi;
    Ct__Envelope **slots;
    struct hwait *next;
} hwait;

static void waits_add(hwait *w)
{
    w->next = C.waits;
    C.waits = w;
}

static void waits_remove(hwait *w)
{
    for (hwait **p = &C.waits; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
}

/* Threads sleeping in sleep_unlocked, each with its own eventfd: a thread that files a reply,
 * completes a future or queues an event for others kicks them (kick_sleepers). */
typedef struct sleeper {
    int fd;
    struct sleeper *next;
} sleeper;
static sleeper *sleepers;
static pthread_key_t kick_key;
static pthread_once_t kick_once = PTHREAD_ONCE_INIT;

static void kick_close(void *p)
{
    close((int)(intptr_t)p - 1);
}

static void kick_init(void)
{
    pthread_key_create(&kick_key, kick_close);
}

static int my_kick_fd(void)
{
    pthread_once(&kick_once, kick_init);
    intptr_t v = (intptr_t)pthread_getspecific(kick_key);
    if (v)
        return (int)v - 1;
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd >= 0)
        pthread_setspecific(kick_key, (void *)(intptr_t)(fd + 1));
    return fd;
}

static void kick_sleepers(void)
{
    uint64_t one = 1;
    for (sleeper *s = sleepers; s; s = s->next)
        if (write(s->fd, &one, sizeof one) < 0) {
            /* full counter: it is readable anyway */
        }
}

/* Called with the lock held; releases it while sleeping until the head socket (or fd, when
 * >= 0) may have input or another thread kicks this one, at most ms. The head socket's ZMQ_FD
 * is edge-triggered: a thread that touches the socket while another sleeps may consume the
 * edge of a message meant for the sleeper. Every such touch is followed by a kick when input is
 * left (drain_head files replies and kicks; head_send checks ZMQ_EVENTS and kicks), so the
 * sleep needs no short slices; it is still cut at SLEEP_BACKSTOP_MS in case an edge is lost
 * some other way. fd (an actor's plain TCP socket) and the kick wake at once. This is what
 * lets long waits (futures, KV, events, object fetches) run in several threads at once. */
#define SLEEP_MAX_FDS 64
static void sleep_unlocked_fds(const int *fds, int nfds, int64_t ms)
{
    struct pollfd p[SLEEP_MAX_FDS + 2];
    int n = 0;
    sleeper me = {.fd = my_kick_fd()};
    if (C.head_fd >= 0)
        p[n++] = (struct pollfd){C.head_fd, POLLIN, 0};
    for (int i = 0; i < nfds && i < SLEEP_MAX_FDS; i++)
        if (fds[i] >= 0)
            p[n++] = (struct pollfd){fds[i], POLLIN, 0};
    int ki = -1;
    if (me.fd >= 0) {
        ki = n;
        p[n++] = (struct pollfd){me.fd, POLLIN, 0};
        me.next = sleepers;
        sleepers = &me;
    }
    UNLOCK();
    poll(p, n, ms > SLEEP_BACKSTOP_MS ? SLEEP_BACKSTOP_MS : ms < 0 ? 0 : (int)ms);
    LOCK();
    if (ki >= 0) {
        for (sleeper **q = &sleepers; *q; q = &(*q)->next)
            if (*q == &me) {
                *q = me.next;
                break;
            }
        uint64_t v;
        if (p[ki].revents && read(me.fd, &v, sizeof v) < 0) {
            /* kicked and reset by nobody else: nothing to do */
        }
    }
}

static void sleep_unlocked(int fd, int64_t ms)
{
    sleep_unlocked_fds(&fd, 1, ms);
}

/* Sends e on the head socket (lock held). zmq_send also processes the socket's pending
 * commands, which can consume the ZMQ_FD edge of a reply that arrived for a thread asleep in
 * sleep_unlocked; when input is left waiting, kick the sleepers so they drain it. */
static int head_send(Ct__Envelope *e)
{
    e->token = C.job;
    int rc = ct__msg_send(C.head, NULL, e, 0);
    int ev = 0;
    size_t el = sizeof ev;
    if (sleepers && zmq_getsockopt(C.head, ZMQ_EVENTS, &ev, &el) == 0 && (ev & ZMQ_POLLIN))
        kick_sleepers();
    return rc;
}

/* A head socket's options: unbounded queues (replies are awaited), a bounded frame size, and
 * the cluster's CURVE client keys. */
static int set_opts(void *s)
{
    int zero = 0;
    int64_t maxmsg = 1LL << 30; /* never trust a peer's claimed frame size */
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    return ct__auth_zmq_client(s);
}

static int connect_head(const char *addr, const char *sender)
{
    snprintf(C.addr, sizeof C.addr, "%s", addr);
    snprintf(C.sender, sizeof C.sender, "%s", sender);
    if (!C.ctx)
        C.ctx = zmq_ctx_new();
    if (!C.ctx)
        return ct__error(CT_EZMQ, "ct_init: zmq_ctx_new: %s", zmq_strerror(errno));
    C.head = zmq_socket(C.ctx, ZMQ_DEALER);
    if (!C.head)
        return ct__error(CT_EZMQ, "ct_init: zmq_socket: %s", zmq_strerror(errno));
    int rc = set_opts(C.head);
    if (rc)
        return rc;
    char ep[200];
    snprintf(ep, sizeof ep, "tcp://%s", addr);
    if (zmq_connect(C.head, ep) != 0)
        return ct__error(CT_EINVAL, "ct_init: head address '%s': %s", addr, zmq_strerror(errno));
    size_t fl = sizeof C.head_fd;
    if (zmq_getsockopt(C.head, ZMQ_FD, &C.head_fd, &fl) != 0)
        C.head_fd = -1;
    return 0;
}

static void close_all(void)
{
    if (C.death_fd >= 0) /* the head sees this driver gone at once */
        close(C.death_fd);
    C.death_fd = -1;
    if (C.head)
        zmq_close(C.head);
    C.head = NULL;
    C.head_fd = -1;
    if (C.ctx)
        zmq_ctx_term(C.ctx);
    C.ctx = NULL;
}

/* ---- incoming messages ---- */

static void complete(ct_future *f, int rc, const void *res, size_t len, const char *err)
{
    if (f->done)
        return;
    f->done = true;
    kick_sleepers();
    f->rc = rc;
    if (!rc && len) {
        f->res = malloc(len);
        if (f->res) {
            memcpy(f->res, res, len);
            f->len = len;
        } else {
            f->rc = CT_ENOMEM;
        }
    }
    if (err)
        snprintf(f->err, sizeof f->err, "%s", err);
    if (f->a) {
        if (f->prev)
            f->prev->next = f->next;
        else
            f->a->pending = f->next;
        if (f->next)
            f->next->prev = f->prev;
        f->next = f->prev = NULL;
    }
}

static void mark_dead(ct_actor *a, const char *why)
{
    a->dead = true;
    char msg[256];
    snprintf(msg, sizeof msg, "actor %s died: %s", a->id, why);
    while (a->pending)
        complete(a->pending, CT_EDEAD, NULL, 0, msg);
}

static void on_event(Ct__Event *ev)
{
    ct_event e = {0};
    e.type = (ct_event_type)ev->type;
    snprintf(e.node_id, sizeof e.node_id, "%s", ev->node_id ? ev->node_id : "");
    snprintf(e.actor_id, sizeof e.actor_id, "%s", ev->actor_id ? ev->actor_id : "");
    snprintf(e.reason, sizeof e.reason, "%s", ev->reason ? ev->reason : "");
    e.pid = ev->pid;
    e.exit_status = ev->exit_status;
    e.term_signal = ev->term_signal;
    e.received_ns = ct__now_ns();
    bool mine = false;
    if (e.type == CT_EVENT_ACTOR_DEAD)
        for (int i = 0; i < C.nowned; i++)
            if (!strcmp(C.owned[i], e.actor_id)) {
                memcpy(C.owned[i], C.owned[--C.nowned], sizeof C.owned[0]);
                mine = true; /* created here, even if its handle was released */
                break;
            }
    if (e.type == CT_EVENT_ACTOR_DEAD)
        for (ct_actor *a = C.actors; a; a = a->next)
            if (!strcmp(a->id, e.actor_id)) {
                mine = true;
                if (!a->dead)
                    mark_dead(a, e.reason);
            }
    if (!mine && !(C.sub_mask & (1u << e.type)))
        return;
    if (C.qn == EVQ) { /* full: drop the oldest */
        C.qh = (C.qh + 1) % EVQ;
        C.qn--;
    }
    C.q[(C.qh + C.qn) % EVQ] = e;
    C.qn++;
    kick_sleepers();
}

/* Reads everything waiting on the head socket. Replies to request ids lo..hi land in
 * slots[id - lo] (caller frees); events are handled; stale replies dropped. */
static void drain_head(uint64_t lo, uint64_t hi, Ct__Envelope **slots)
{
    for (;;) {
        Ct__Envelope *e;
        int rc = ct__msg_recv(C.head, NULL, &e, ZMQ_DONTWAIT, "driver");
        if (rc == CT_ETIMEDOUT || rc == CT_EZMQ)
            return;
        if (rc) {
            CT_LOG(CT_LOG_WARN, "client", "%s", ct_last_error());
            ct__msg_free(e);
            continue;
        }
        if (e->body_case == CT__ENVELOPE__BODY_EVENT && e->req_id == 0) {
            on_event(e->event);
            ct__msg_free(e);
        } else if (slots && lo && e->req_id >= lo && e->req_id <= hi && !slots[e->req_id - lo]) {
            slots[e->req_id - lo] = e;
        } else {
            hwait *w = C.waits;
            while (w && !(e->req_id >= w->lo && e->req_id <= w->hi && !w->slots[e->req_id - w->lo]))
                w = w->next;
            if (w) {
                w->slots[e->req_id - w->lo] = e;
                kick_sleepers();
            } else {
                ct__msg_free(e);
            }
        }
    }
}

static void drain_actor(ct_actor *a)
{
    if (a->dead || a->zc.fd < 0)
        return;
    bool lost = ct__zconn_fill(&a->zc) != 0;
    for (;;) {
        const uint8_t *data;
        size_t len;
        int r = ct__zconn_parse(&a->zc, &data, &len);
        if (r == 0)
            break;
        if (r < 0) {
            lost = true;
            break;
        }
        if (r == 2)
            continue;
        Ct__Envelope *e;
        if (ct__msg_decode(data, len, &e, "driver")) {
            ct__msg_free(e);
            continue;
        }
        for (ct_future *f = a->pending; f; f = f->next) {
            if (f->req != e->req_id)
                continue;
            if (e->body_case == CT__ENVELOPE__BODY_CALL_REPLY)
                complete(f, 0, e->call_reply->result.data, e->call_reply->result.len, NULL);
            else if (e->body_case == CT__ENVELOPE__BODY_ERROR)
                complete(f, e->error->code < 0 ? e->error->code : CT_EPROTO, NULL, 0,
                         e->error->message);
            else
                complete(f, CT_EPROTO, NULL, 0, "unexpected reply body");
            break;
        }
        ct__msg_free(e);
    }
    ct__zconn_compact(&a->zc);
    if (lost) /* the actor's process is gone: its socket closed */
        mark_dead(a, "connection to the actor lost");
}

/* The head connection; an actor makes it on first use. Lock held. */
static int ensure_head(void)
{
    if (!C.head && C.inited && C.lazy) {
        char addr[sizeof C.addr], sender[sizeof C.sender];
        snprintf(addr, sizeof addr, "%s", C.addr);
        snprintf(sender, sizeof sender, "%s", C.sender);
        int rc = connect_head(addr, sender);
        if (rc)
            return rc;
    }
    if (!C.head)
        return ct__error(CT_EINVAL, "ct: not initialized (call ct_init first)");
    return 0;
}

/* Sends req to the head and waits for its reply (timeout_ms <= 0: forever). Caller holds the
 * lock, which is released while waiting (other threads' calls go on), and frees *rep. */
static int head_request(Ct__Envelope *req, Ct__Envelope **rep, int timeout_ms)
{
    *rep = NULL;
    int rc = ensure_head();
    if (rc)
        return rc;
    req->req_id = ++C.next_req;
    rc = head_send(req);
    if (rc)
        return rc;
    hwait w = {.lo = req->req_id, .hi = req->req_id, .slots = rep};
    waits_add(&w);
    int64_t until = timeout_ms > 0 ? ct__now_ms() + timeout_ms : INT64_MAX;
    for (;;) {
        if (!C.head) {
            rc = ct__error(CT_ECANCELED, "ct_shutdown while waiting for the head");
            break;
        }
        drain_head(0, 0, NULL);
        if (*rep)
            break;
        int64_t left = until - ct__now_ms();
        if (left <= 0) {
            rc = ct__error(CT_ETIMEDOUT, "head %s did not answer %s within %d ms", C.addr,
                           ct__msg_body_name(req->body_case), timeout_ms);
            break;
        }
        sleep_unlocked(-1, left);
    }
    waits_remove(&w);
    return rc;
}

/* ---- init / shutdown ---- */

static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    int64_t until = ct__now_ms() + timeout_ms;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = until - ct__now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return CT_ETIMEDOUT;
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            return CT_EIO;
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = 0;
    return 0;
}

/* Starts the embedded head and node as forked children that die with this process. */
static int start_embedded(const ct_init_opts *o, int timeout_ms, char *addr, size_t cap)
{
    int watch[2], ready[2], rc = 0;
    char line[150];
    if (pipe2(watch, O_CLOEXEC) || pipe2(ready, O_CLOEXEC))
        return ct__error(-errno, "ct_init: pipe: %s", strerror(errno));
    pid_t me = getpid();
    for (int which = 0; which < 2; which++) {
        pid_t pid = fork();
        if (pid < 0) {
            rc = ct__error(-errno, "ct_init: fork: %s", strerror(errno));
            goto out;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != me)
                _exit(1);
            close(watch[1]);
            close(ready[0]);
            prctl(PR_SET_NAME, which ? "ct-node" : "ct-head"); /* as the daemons show in ps */
            int r;
            if (which == 0) {
                ct_head_opts ho = {.host = "127.0.0.1",
                                   .heartbeat_ms = o->heartbeat_ms,
                                   .dead_after_ms = o->dead_after_ms,
                                   .ready_fd = ready[1],
                                   .watch_fd = watch[0]};
                r = ct__head_run(&ho);
            } else {
                ct_node_opts no = {.head = addr,
                                   .cpus = o->cpus > 0 ? o->cpus : -1,
                                   .gpus = o->gpus > 0 ? o->gpus : 0,
                                   .resources = o->resources,
                                   .store_memory = o->store_memory,
                                   .watch_fd = watch[0],
                                   .ready_fd = ready[1]};
                r = ct__node_run(&no);
            }
            if (r)
                CT_LOG(CT_LOG_ERROR, which ? "node" : "head", "%s", ct_last_error());
            _exit(r ? 1 : 0);
        }
        if (which == 0)
            C.head_pid = pid;
        else
            C.node_pid = pid;
        if ((rc = read_line(ready[0], line, sizeof line, timeout_ms))) {
            rc = ct__error(rc, "ct_init: the embedded %s did not start", which ? "node" : "head");
            goto out;
        }
        if (which == 1 && !strncmp(line, "registered ", 11))
            snprintf(C.emb_node, sizeof C.emb_node, "%.31s", line + 11);
        if (which == 0) {
            if (strncmp(line, "listening on ", 13)) {
                rc = ct__error(CT_EPROTO, "ct_init: embedded head said '%s'", line);
                goto out;
            }
            snprintf(addr, cap, "%s", line + 13);
        }
    }
out:
    close(watch[0]);
    close(ready[0]);
    close(ready[1]);
    C.watch_wr = watch[1];
    return rc;
}

/* Heartbeats this driver to the head every 100 ms, so that the head kills its actors when
 * the driver dies (also with an external cluster). Runs until hb_stop[1] is closed. */
static void *hb_main(void *arg)
{
    (void)arg;
    void *s = zmq_socket(C.ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    if (set_opts(s)) {
        CT_LOG(CT_LOG_ERROR, "driver", "heartbeats: %s", ct_last_error());
        zmq_close(s);
        return NULL;
    }
    char ep[200];
    snprintf(ep, sizeof ep, "tcp://%s", C.addr);
    zmq_connect(s, ep);
    for (;;) {
        Ct__Envelope e;
        Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
        ct__env_init(&e, 0, C.sender, 0);
        hb.driver = 1;
        e.token = C.job;
        e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
        e.heartbeat = &hb;
        ct__msg_send(s, NULL, &e, ZMQ_DONTWAIT);
        /* replies (errors only) are not awaited; drop whatever came */
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&m);
        struct pollfd p = {C.hb_stop[0], POLLIN, 0};
        if (poll(&p, 1, 100) != 0)
            break;
    }
    /* ct_shutdown: the last one says the driver leaves, so its job ends at once (its actors,
     * KV keys and the nodes' zygotes); a moment to deliver it */
    Ct__Envelope e;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__env_init(&e, 0, C.sender, 0);
    hb.driver = 1;
    hb.leaving = 1;
    e.token = C.job;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    int linger = 200;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    ct__msg_send(s, NULL, &e, ZMQ_DONTWAIT);
    zmq_close(s);
    return NULL;
}

/* Opens this driver's death-watch connection (head/watch.h), so that the head sees it end at
 * once, even by kill -9, and kills its job's actors. Without one (a head with no watch port,
 * a port this host cannot reach) the driver's heartbeats still tell: only later. */
static void watch_attach(int timeout_ms)
{
    Ct__Envelope e, *rep = NULL;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__env_init(&e, 0, C.sender, timeout_ms);
    hb.driver = 1;
    hb.watch = 1;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    int rc = head_request(&e, &rep, timeout_ms);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_WATCH_TICKET, "heartbeat.watch");
    if (!rc && rep->watch_ticket->port) {
        int fd =
            ct__watch_dial(C.addr, rep->watch_ticket->port, rep->watch_ticket->ticket, timeout_ms);
        rc = fd < 0 ? fd : 0;
        C.death_fd = fd < 0 ? -1 : fd;
    }
    if (rc)
        CT_LOG(CT_LOG_WARN, "driver", "no death watch (heartbeats only): %s", ct_last_error());
    ct__msg_free(rep);
}

static int start_heartbeats(void)
{
    if (pipe2(C.hb_stop, O_CLOEXEC))
        return ct__error(-errno, "ct_init: pipe: %s", strerror(errno));
    if (pthread_create(&C.hb_thread, NULL, hb_main, NULL)) {
        close(C.hb_stop[0]);
        close(C.hb_stop[1]);
        C.hb_stop[0] = C.hb_stop[1] = -1;
        return ct__error(CT_ENOMEM, "ct_init: cannot start the heartbeat thread");
    }
    C.hb_running = true;
    return 0;
}

static void stop_heartbeats(void)
{
    if (!C.hb_running)
        return;
    close(C.hb_stop[1]);
    pthread_join(C.hb_thread, NULL);
    close(C.hb_stop[0]);
    C.hb_stop[0] = C.hb_stop[1] = -1;
    C.hb_running = false;
}

/* Ends the embedded head and node: closing the watch pipe makes them exit cleanly (the node
 * removes its shard and directory); SIGKILL after 2 s, and whatever a killed node left is
 * purged. */
static void stop_embedded(void)
{
    pid_t pids[2] = {C.node_pid, C.head_pid};
    if (C.watch_wr >= 0)
        close(C.watch_wr);
    C.watch_wr = -1;
    int64_t until = ct__now_ms() + 2000;
    for (int i = 0; i < 2; i++) {
        if (pids[i] <= 0)
            continue;
        while (waitpid(pids[i], NULL, WNOHANG) == 0) {
            if (ct__now_ms() > until) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], NULL, 0);
                break;
            }
            usleep(2000);
        }
    }
    if (C.node_pid > 0)
        ct__objnode_purge_pid(C.node_pid);
    C.node_pid = C.head_pid = 0;
    C.emb_node[0] = 0;
}

/* Set once ct_serve_if_worker (ct_init calls it) returned in this process: an actor stops
 * there, so registrations after it are not seen by this program's actors. Main thread only. */
static bool registration_closed;

bool ct__registration_closed(void)
{
    return registration_closed;
}

void ct_serve_if_worker(void)
{
    const char *mode = getenv("CT_MODE");
    if (!mode || strcmp(mode, "zygote")) {
        registration_closed = true;
        return;
    }
    const char *fd = getenv("CT_ZYGOTE_FD");
    ct__zygote_main(fd ? atoi(fd) : -1);
}

static int read_self(void)
{
    ssize_t n = readlink("/proc/self/exe", C.exe, sizeof C.exe - 1);
    if (n <= 0)
        return ct__error(CT_EIO, "ct_init: readlink /proc/self/exe: %s", strerror(errno));
    C.exe[n] = 0;
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f)
        return ct__error(CT_EIO, "ct_init: /proc/self/cmdline: %s", strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (!buf)
        return ct__error(CT_ENOMEM, "ct_init: out of memory");
    C.cmdline = buf;
    C.cmdline_len = len;
    return 0;
}

int ct_init(const ct_init_opts *opts)
{
    ct_serve_if_worker();
    ct_init_opts o = opts ? *opts : (ct_init_opts){0};
    int timeout = o.timeout_ms > 0 ? o.timeout_ms : 10000;
    LOCK();
    int rc = 0;
    if (C.inited) {
        rc = ct__error(CT_EEXIST, "ct_init: already initialized (call ct_shutdown first)");
        goto out;
    }
    signal(SIGPIPE, SIG_IGN);
    if ((rc = read_self()))
        goto out;
    const char *addr = o.address && *o.address ? o.address : getenv("CT_ADDRESS");
    const char *secret_file =
        o.secret_file && *o.secret_file ? o.secret_file : getenv("CT_SECRET_FILE");
    char buf[160];
    if (ct__auth_off()) {
        CT_LOG(CT_LOG_WARN, "driver", "CT_AUTH=off: connections are not authenticated");
    } else if (secret_file && *secret_file) {
        if ((rc = ct__auth_load(secret_file)))
            goto fail;
    } else if (addr && *addr && !ct__auth_has_secret()) {
        rc = ct__error(CT_EACCES,
                       "ct_init: the cluster at %s needs its secret: set "
                       "CT_SECRET_FILE or ct_init_opts.secret_file",
                       addr);
        goto fail;
    } else if ((rc = ct__auth_ensure())) { /* an embedded cluster: a secret of its own */
        goto fail;
    }
    if (!addr || !*addr) {
        if ((rc = start_embedded(&o, timeout, buf, sizeof buf)))
            goto fail;
        addr = buf;
    }
    char sender[64], host[40] = "";
    gethostname(host, sizeof host - 1);
    snprintf(sender, sizeof sender, "driver-%s-%d", host, (int)getpid());
    if ((rc = ct__token_new(C.job))) /* a new job: its actors inherit the token */
        goto fail;
    if ((rc = connect_head(addr, sender)))
        goto fail;
    /* the head must answer a ping: fails fast on a wrong address */
    Ct__Envelope e, *rep;
    Ct__Ping ping = CT__PING__INIT;
    ct__env_init(&e, 0, C.sender, timeout);
    e.body_case = CT__ENVELOPE__BODY_PING;
    e.ping = &ping;
    if ((rc = head_request(&e, &rep, timeout))) {
        if (rc == CT_ETIMEDOUT)
            rc = ct__error(rc,
                           "ct_init: the head at %s did not answer in %d ms (is it up, and "
                           "is this its cluster's secret?)",
                           addr, timeout);
        goto fail;
    }
    rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "ping");
    ct__msg_free(rep);
    if (rc)
        goto fail;
    watch_attach(timeout);
    if ((rc = start_heartbeats()))
        goto fail;
    C.inited = true;
    goto out;
fail:
    close_all();
    stop_embedded();
    free(C.cmdline);
    C.cmdline = NULL;
out:
    UNLOCK();
    return rc;
}

void ct__client_attach(const char *head_addr, const char *sender, const char *actor_id,
                       const char *node_id)
{
    LOCK();
    snprintf(C.self_actor, sizeof C.self_actor, "%s", actor_id ? actor_id : "");
    snprintf(C.self_node, sizeof C.self_node, "%s", node_id ? node_id : "");
    snprintf(C.addr, sizeof C.addr, "%s", head_addr);
    snprintf(C.sender, sizeof C.sender, "%s", sender);
    /* the job token, from the zygote's environment (node.c); not passed on to children */
    const char *job = getenv("CT_JOB_TOKEN");
    snprintf(C.job, sizeof C.job, "%s", ct__token_valid(job) ? job : "");
    unsetenv("CT_JOB_TOKEN");
    C.lazy = true;
    C.inited = true;
    UNLOCK();
}

const char *ct_head_address(void)
{
    return C.addr;
}

const char *ct_self_actor_id(void)
{
    return C.self_actor;
}

const char *ct_self_node_id(void)
{
    return C.self_node;
}

static void free_actor(ct_actor *a)
{
    while (a->pending) {
        ct_future *f = a->pending;
        complete(f, CT_ECANCELED, NULL, 0, "actor handle released");
        f->a = NULL;
    }
    if (a->prev)
        a->prev->next = a->next;
    else if (C.actors == a)
        C.actors = a->next;
    if (a->next)
        a->next->prev = a->prev;
    ct__zconn_close(&a->zc);
    free(a);
}

static int kill_request(const char *id, uint64_t *req)
{
    Ct__Envelope e;
    Ct__KillActor k = CT__KILL_ACTOR__INIT;
    ct__env_init(&e, ++C.next_req, C.sender, 5000);
    k.actor_id = (char *)id;
    e.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    e.kill_actor = &k;
    *req = e.req_id;
    return head_send(&e);
}

void ct_shutdown(void)
{
    LOCK();
    if (C.inited && C.head) {
        /* kill what this driver created; wait a moment for the head to take the orders */
        uint64_t last = 0;
        drain_head(0, 0, NULL);
        for (int i = 0; i < C.nowned; i++)
            kill_request(C.owned[i], &last);
        if (last) {
            Ct__Envelope *rep = NULL;
            int64_t until = ct__now_ms() + 1000;
            while (!rep && ct__now_ms() < until) {
                zmq_pollitem_t it = {C.head, 0, ZMQ_POLLIN, 0};
                zmq_poll(&it, 1, 50);
                drain_head(last, last, &rep);
            }
            ct__msg_free(rep);
        }
    }
    while (C.actors)
        free_actor(C.actors);
    ct_store_client_destroy(&C.store);
    for (int i = 0; i < C.nold; i++)
        ct_store_client_destroy(&C.old_stores[i]);
    C.nold = 0;
    C.store_node[0] = 0;
    C.remote = false;
    while (C.creating) {
        struct rbuf *b = C.creating;
        C.creating = b->next;
        free(b->data);
        free(b);
    }
    C.exe_state = 0;
    stop_heartbeats();
    close_all();
    stop_embedded();
    free(C.cmdline);
    C.cmdline = NULL;
    free(C.owned);
    C.owned = NULL;
    C.nowned = C.capowned = 0;
    C.inited = false;
    C.qn = C.qh = 0;
    C.sub_mask = 0;
    C.addr[0] = 0;
    UNLOCK();
}

/* ---- actors ---- */

static int fill_res(Ct__Resource *r, Ct__Resource **rp, double cpu, double gpu,
                    const ct_resource *custom, int ncustom)
{
    int n = 0;
    if (cpu > 0) {
        ct__resource__init(&r[n]);
        r[n].name = "CPU";
        r[n].amount = cpu;
        rp[n] = &r[n];
        n++;
    }
    if (gpu > 0) {
        ct__resource__init(&r[n]);
        r[n].name = "GPU";
        r[n].amount = gpu;
        rp[n] = &r[n];
        n++;
    }
    for (int i = 0; i < ncustom && custom[i].name; i++) {
        ct__resource__init(&r[n]);
        r[n].name = (char *)custom[i].name;
        r[n].amount = custom[i].amount;
        rp[n] = &r[n];
        n++;
    }
    return n;
}

/* Checks create arguments; fills the resource list. */
static int create_check(const char *cls, const ct_resources *res, const void *args, size_t len,
                        ct_resources *r)
{
    if (!cls || !*cls)
        return ct__error(CT_EINVAL, "ct_actor_create: class name is empty");
    if (!ct__class_find(cls))
        return ct__error(CT_ENOENT, "ct_actor_create: class %s is not registered", cls);
    if (len && !args)
        return ct__error(CT_EINVAL, "ct_actor_create: args is NULL with len %zu", len);
    if (len > CT_ZYGOTE_MAX_ARGS)
        return ct__error(CT_EINVAL, "ct_actor_create: args of %zu bytes, at most %d", len,
                         CT_ZYGOTE_MAX_ARGS);
    *r = res ? *res : (ct_resources){.bundle = -1};
    if (r->cpu < 0 || r->gpu < 0)
        return ct__error(CT_EINVAL, "ct_actor_create: negative cpu or gpu");
    for (int i = 0; i < 8 && r->custom[i].name; i++)
        if (r->custom[i].amount < 0 || !*r->custom[i].name)
            return ct__error(CT_EINVAL, "ct_actor_create: custom[%d] (%s): empty or negative", i,
                             r->custom[i].name);
    return 0;
}

static void ship_exe(void);

/* Sends one CreateActor; its request id in *req. Lock held. */
static int create_send(const char *cls, const ct_resources *r, const void *args, size_t len,
                       int timeout, uint64_t *req)
{
    Ct__Resource rr[10];
    Ct__Resource *rp[10];
    int nr = fill_res(rr, rp, r->cpu, r->gpu, r->custom, 8);
    if (!C.cmdline) { /* an actor creating actors: learn its own executable now */
        int rc = read_self();
        if (rc)
            return rc;
    }
    /* argv from /proc/self/cmdline: NUL-separated */
    char *argv[256];
    size_t nargv = 0;
    for (size_t off = 0; off < C.cmdline_len && nargv < 256; off += strlen(C.cmdline + off) + 1)
        argv[nargv++] = C.cmdline + off;
    Ct__Envelope e;
    Ct__CreateActor c = CT__CREATE_ACTOR__INIT;
    ct__env_init(&e, ++C.next_req, C.sender, timeout);
    c.class_name = (char *)cls;
    c.n_resources = nr;
    c.resources = rp;
    c.args.data = (uint8_t *)args;
    c.args.len = len;
    c.exe_path = C.exe;
    c.n_argv = nargv;
    c.argv = argv;
    c.strategy = r->strategy == CT_SPREAD ? CT__STRATEGY__SPREAD : CT__STRATEGY__PACK;
    c.pg_id = r->pg ? r->pg->id : "";
    c.bundle_index = r->pg ? r->bundle : -1;
    if (C.exe_state == 1) {
        c.exe_object_id.data = C.exe_id.b;
        c.exe_object_id.len = CT_OBJECT_ID_LEN;
    }
    e.body_case = CT__ENVELOPE__BODY_CREATE_ACTOR;
    e.create_actor = &c;
    *req = e.req_id;
    return head_send(&e);
}

/* Turns a CreateActor reply into a connected handle. Lock held. */
static int create_finish(Ct__Envelope *rep, ct_actor **out)
{
    int rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY, "create_actor");
    if (rc)
        return rc;
    ct_actor *a = calloc(1, sizeof *a);
    if (!a)
        return ct__error(CT_ENOMEM, "ct_actor_create: out of memory");
    Ct__CreateActorReply *cr = rep->create_actor_reply;
    if (C.nowned == C.capowned) {
        int cap = C.capowned ? 2 * C.capowned : 64;
        char(*no)[32] = realloc(C.owned, cap * sizeof *no);
        if (!no) {
            free(a);
            return ct__error(CT_ENOMEM, "ct_actor_create: out of memory");
        }
        C.owned = no;
        C.capowned = cap;
    }
    snprintf(C.owned[C.nowned++], sizeof C.owned[0], "%s", cr->actor_id);
    snprintf(a->id, sizeof a->id, "%s", cr->actor_id);
    snprintf(a->node, sizeof a->node, "%s", cr->node_id);
    snprintf(a->addr, sizeof a->addr, "%s", cr->address);
    a->pid = cr->pid;
    if ((rc = ct__zconn_connect(&a->zc, a->addr))) {
        free(a);
        return ct__error(CT_EDEAD, "ct_actor_create: actor %s at %s: %s", cr->actor_id, cr->address,
                         ct_last_error());
    }
    a->next = C.actors;
    if (C.actors)
        C.actors->prev = a;
    C.actors = a;
    *out = a;
    return 0;
}

int ct_actor_create_many(const char *cls, const ct_resources *res, const void *args, size_t len,
                         int n, ct_actor **out)
{
    if (!out || n <= 0)
        return ct__error(CT_EINVAL, "ct_actor_create: out is NULL or n <= 0");
    memset(out, 0, n * sizeof *out);
    ct_resources r;
    int rc = create_check(cls, res, args, len, &r);
    if (rc)
        return rc;
    int timeout = r.timeout_ms > 0 ? r.timeout_ms : 30000;
    Ct__Envelope **reps = calloc(n, sizeof *reps);
    if (!reps)
        return ct__error(CT_ENOMEM, "ct_actor_create: out of memory");
    LOCK();
    uint64_t first = 0, req = 0;
    if ((rc = ensure_head()))
        goto out;
    if (!C.exe_state)
        ship_exe();
    while (C.exe_state == 2) /* another thread is shipping it */
        sleep_unlocked(-1, 5);
    for (int i = 0; i < n; i++) {
        if ((rc = create_send(cls, &r, args, len, timeout, &req)))
            goto out;
        if (i == 0)
            first = req;
    }
    /* each actor is connected as soon as its reply is in, while later ones still start, so
     * that the connects overlap the forks instead of trailing them */
    int got = 0, first_err = 0;
    char first_msg[1024] = ""; /* first_err's message (a later failure would overwrite it) */
    int64_t until = ct__now_ms() + timeout + 1000;
    hwait w = {.lo = first, .hi = req, .slots = reps};
    waits_add(&w);
    for (int scan = 0; got < n;) {
        drain_head(0, 0, NULL);
        for (int i = scan; i < n; i++)
            if (reps[i] && reps[i]->req_id) {
                int r1 = create_finish(reps[i], &out[i]);
                /* the first failure, or one that will not pass on a retry (CT_ESTART) */
                if (r1 && (!first_err || (r1 == CT_ESTART && first_err != CT_ESTART))) {
                    first_err = r1;
                    snprintf(first_msg, sizeof first_msg, "%s", ct_last_error());
                }
                reps[i]->req_id = 0; /* finished (out[i] stays NULL on failure) */
                got++;
            }
        while (scan < n && reps[scan]) /* everything before scan is finished */
            scan++;
        if (got == n)
            break;
        int64_t left = until - ct__now_ms();
        if (left <= 0 || !C.head) {
            waits_remove(&w);
            rc = ct__error(CT_ETIMEDOUT, "ct_actor_create: %d of %d actors not created in %d ms",
                           n - got, n, timeout);
            goto out;
        }
        sleep_unlocked(-1, left);
    }
    waits_remove(&w);
    rc = first_err ? ct__error(first_err, "%s", first_msg) : 0;
out:
    for (int i = 0; i < n; i++)
        ct__msg_free(reps[i]);
    free(reps);
    UNLOCK();
    return rc;
}

int ct_actor_create(const char *cls, const ct_resources *res, const void *args, size_t len,
                    ct_actor **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_actor_create: out is NULL");
    return ct_actor_create_many(cls, res, args, len, 1, out);
}

/* Completes the connection's challenge-response (zmtp.c) so that the held-back call leaves now:
 * a caller may send to several actors before it waits on any. The actor answers once its
 * create ran (its serve loop is not running before). Lock held; released while polling. */
static int finish_handshake(ct_actor *a, const char *method)
{
    int64_t until = ct__now_ms() + HANDSHAKE_MS;
    while (ct__zconn_held(&a->zc) && !a->dead) {
        int64_t left = until - ct__now_ms();
        if (left <= 0)
            return ct__error(CT_ETIMEDOUT,
                             "ct_actor_call(%s): actor %s did not answer the handshake in %d ms",
                             method, a->id, HANDSHAKE_MS);
        int fd = a->zc.fd;
        UNLOCK();
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, left > 100 ? 100 : (int)left);
        LOCK();
        drain_actor(a);
    }
    return a->dead ? CT_EDEAD : 0;
}

static int send_call(ct_actor *a, const char *method, const void *args, size_t len, ct_future *f)
{
    Ct__Envelope e;
    Ct__Call c = CT__CALL__INIT;
    ct__env_init(&e, ++C.next_req, C.sender, 0);
    c.method = (char *)method;
    c.args.data = (uint8_t *)args;
    c.args.len = len;
    e.body_case = CT__ENVELOPE__BODY_CALL;
    e.call = &c;
    memset(f, 0, sizeof *f);
    f->a = a;
    f->req = e.req_id;
    size_t n = ct__envelope__get_packed_size(&e);
    uint8_t stack[2048];
    uint8_t *buf = n <= sizeof stack ? stack : malloc(n);
    if (!buf)
        return ct__error(CT_ENOMEM, "ct_actor_call(%s): out of memory for %zu bytes", method, n);
    ct__envelope__pack(&e, buf);
    int rc = ct__zconn_send(&a->zc, buf, n, true);
    if (buf != stack)
        free(buf);
    if (!rc && ct__zconn_held(&a->zc) && (rc = finish_handshake(a, method)) == CT_ETIMEDOUT)
        return rc;
    if (rc) {
        mark_dead(a, "connection to the actor lost");
        return ct__error(CT_EDEAD, "ct_actor_call(%s): actor %s is gone", method, a->id);
    }
    f->next = a->pending;
    if (a->pending)
        a->pending->prev = f;
    a->pending = f;
    return 0;
}

/* Waits for f; the lock is held on entry and exit and released while sleeping. f must not be
 * destroyed meanwhile by another thread. */
static int wait_locked(ct_future *f, int timeout_ms, void **result, size_t *result_len)
{
    int64_t until = timeout_ms > 0 ? ct__now_ms() + timeout_ms : INT64_MAX;
    /* A warm actor answers in tens of microseconds, less than a sleep and wake-up costs when
     * the CPUs are idle: read its socket for a moment before sleeping. */
    for (int64_t spin_end = ct__now_ns() + CALL_SPIN_NS;
         !f->done && f->a && !f->a->dead && ct__now_ns() < spin_end;)
        drain_actor(f->a);
    while (!f->done) {
        if (!f->a)
            return ct__error(CT_ECANCELED, "ct_future_wait: the actor handle was released");
        drain_actor(f->a);
        if (f->done)
            break;
        if (C.head)
            drain_head(0, 0, NULL);
        if (f->done)
            break;
        int64_t left = until - ct__now_ms();
        if (left <= 0)
            return ct__error(CT_ETIMEDOUT, "actor %s: no reply within %d ms", f->a->id, timeout_ms);
        sleep_unlocked(f->a->zc.fd, left);
    }
    if (f->rc)
        return ct__error(f->rc, "%s", f->err[0] ? f->err : ct_strerror(f->rc));
    if (result) {
        *result = f->res;
        f->res = NULL;
    }
    if (result_len)
        *result_len = f->len;
    return 0;
}

/* The first of fs[0, n) that is done (a NULL handle counts as done), -1 when none. */
static int first_done(ct_future *const *fs, int n)
{
    for (int i = 0; i < n; i++)
        if (fs[i] && (fs[i]->done || !fs[i]->a))
            return i;
    return -1;
}

int ct_future_wait_any(ct_future *const *fs, int n, int timeout_ms)
{
    if (!fs || n < 0)
        return ct__error(CT_EINVAL, "ct_future_wait_any: %s", !fs ? "fs is NULL" : "n < 0");
    int64_t until = timeout_ms > 0 ? ct__now_ms() + timeout_ms : INT64_MAX;
    int rc;
    LOCK();
    for (;;) {
        int fds[SLEEP_MAX_FDS], nfds = 0, pending = 0;
        for (int i = 0; i < n; i++)
            if (fs[i] && fs[i]->a && !fs[i]->done) {
                drain_actor(fs[i]->a);
                pending++;
                if (nfds < SLEEP_MAX_FDS)
                    fds[nfds++] = fs[i]->a->zc.fd;
            }
        if (C.head)
            drain_head(0, 0, NULL); /* death events complete futures too */
        if ((rc = first_done(fs, n)) >= 0)
            break;
        if (!pending) {
            rc = ct__error(CT_ENOENT, "ct_future_wait_any: no future given");
            break;
        }
        int64_t left = until - ct__now_ms();
        if (left <= 0) {
            rc = ct__error(CT_ETIMEDOUT, "ct_future_wait_any: none of %d calls done within %d ms",
                           pending, timeout_ms);
            break;
        }
        sleep_unlocked_fds(fds, nfds, left);
    }
    UNLOCK();
    return rc;
}

int ct_actor_call(ct_actor *a, const char *method, const void *args, size_t len, void **result,
                  size_t *result_len, int timeout_ms)
{
    if (result)
        *result = NULL;
    if (result_len)
        *result_len = 0;
    if (!a || !method || (len && !args))
        return ct__error(CT_EINVAL, "ct_actor_call: %s is NULL",
                         !a        ? "actor"
                         : !method ? "method"
                                   : "args");
    LOCK();
    int rc;
    ct_future f;
    if (a->dead) {
        rc = ct__error(CT_EDEAD, "ct_actor_call(%s): actor %s is dead", method, a->id);
        goto out;
    }
    if ((rc = send_call(a, method, args, len, &f)))
        goto out;
    rc = wait_locked(&f, timeout_ms, result, result_len);
    if (!f.done)
        complete(&f, CT_ECANCELED, NULL, 0, NULL); /* unlink */
    free(f.res);
out:
    UNLOCK();
    return rc;
}

int ct_actor_call_async(ct_actor *a, const char *method, const void *args, size_t len,
                        ct_future **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_actor_call_async: out is NULL");
    *out = NULL;
    if (!a || !method || (len && !args))
        return ct__error(CT_EINVAL, "ct_actor_call_async: %s is NULL",
                         !a        ? "actor"
                         : !method ? "method"
                                   : "args");
    ct_future *f = malloc(sizeof *f);
    if (!f)
        return ct__error(CT_ENOMEM, "ct_actor_call_async: out of memory");
    LOCK();
    int rc = 0;
    if (a->dead) {
        rc = ct__error(CT_EDEAD, "ct_actor_call_async(%s): actor %s is dead", method, a->id);
        free(f);
        goto out;
    }
    if ((rc = send_call(a, method, args, len, f))) {
        free(f);
        goto out;
    }
    *out = f;
out:
    UNLOCK();
    return rc;
}

int ct_future_wait(ct_future *f, int timeout_ms, void **result, size_t *result_len)
{
    if (result)
        *result = NULL;
    if (result_len)
        *result_len = 0;
    if (!f)
        return ct__error(CT_EINVAL, "ct_future_wait: future is NULL");
    LOCK();
    int rc = wait_locked(f, timeout_ms, result, result_len);
    UNLOCK();
    return rc;
}

void ct_future_destroy(ct_future **pf)
{
    if (!pf || !*pf)
        return;
    ct_future *f = *pf;
    LOCK();
    if (!f->done)
        complete(f, CT_ECANCELED, NULL, 0, NULL);
    UNLOCK();
    free(f->res);
    free(f);
    *pf = NULL;
}

int ct_actor_kill(ct_actor *a)
{
    if (!a)
        return ct__error(CT_EINVAL, "ct_actor_kill: actor is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__KillActor k = CT__KILL_ACTOR__INIT;
    ct__env_init(&e, 0, C.sender, 5000);
    k.actor_id = a->id;
    e.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    e.kill_actor = &k;
    int rc = head_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "kill_actor");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

void ct_actor_release(ct_actor **pa)
{
    if (!pa || !*pa)
        return;
    LOCK();
    free_actor(*pa);
    UNLOCK();
    *pa = NULL;
}

const char *ct_actor_id(const ct_actor *a)
{
    return a ? a->id : "";
}

const char *ct_actor_node(const ct_actor *a)
{
    return a ? a->node : "";
}

const char *ct_actor_address(const ct_actor *a)
{
    return a ? a->addr : "";
}

int ct_actor_pid(const ct_actor *a)
{
    return a ? a->pid : 0;
}

int ct_actor_is_dead(const ct_actor *a)
{
    if (!a)
        return 0;
    LOCK();
    if (C.head)
        drain_head(0, 0, NULL);
    int d = a->dead;
    UNLOCK();
    return d;
}

/* ---- events ---- */

int ct_events_subscribe(unsigned mask)
{
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__Subscribe s = CT__SUBSCRIBE__INIT;
    ct__env_init(&e, 0, C.sender, 5000);
    s.mask = mask;
    e.body_case = CT__ENVELOPE__BODY_SUBSCRIBE;
    e.subscribe = &s;
    int rc = head_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "subscribe");
    if (!rc)
        C.sub_mask = mask;
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_events_next(ct_event *ev, int timeout_ms)
{
    if (!ev)
        return ct__error(CT_EINVAL, "ct_events_next: ev is NULL");
    LOCK();
    int rc = 0;
    int64_t until = ct__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        if (C.head)
            drain_head(0, 0, NULL);
        if (C.qn) {
            *ev = C.q[C.qh];
            C.qh = (C.qh + 1) % EVQ;
            C.qn--;
            break;
        }
        int64_t left = until - ct__now_ms();
        if (left <= 0 || !C.head) {
            rc = ct__error(CT_ETIMEDOUT, "ct_events_next: no event within %d ms", timeout_ms);
            break;
        }
        sleep_unlocked(-1, left);
    }
    UNLOCK();
    return rc;
}

/* ---- KV ---- */

int ct_kv_put(const char *key, const void *value, size_t len)
{
    if (!key || !*key || (len && !value))
        return ct__error(CT_EINVAL, "ct_kv_put: %s",
                         !key || !*key ? "key is empty" : "value is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__KvPut p = CT__KV_PUT__INIT;
    ct__env_init(&e, 0, C.sender, 10000);
    p.key = (char *)key;
    p.value.data = (uint8_t *)value;
    p.value.len = len;
    e.body_case = CT__ENVELOPE__BODY_KV_PUT;
    e.kv_put = &p;
    int rc = head_request(&e, &rep, 10000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "kv_put");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_kv_get(const char *key, void **value, size_t *len, int timeout_ms)
{
    if (!key || !*key || !value || !len)
        return ct__error(CT_EINVAL, "ct_kv_get: %s",
                         !key || !*key ? "key is empty" : "value or len is NULL");
    *value = NULL;
    *len = 0;
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__KvGet g = CT__KV_GET__INIT;
    ct__env_init(&e, 0, C.sender, 0);
    g.key = (char *)key;
    g.wait_ms = timeout_ms > 0 ? timeout_ms : 0;
    e.body_case = CT__ENVELOPE__BODY_KV_GET;
    e.kv_get = &g;
    int rc = head_request(&e, &rep, (timeout_ms > 0 ? timeout_ms : 0) + 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_KV_GET_REPLY, "kv_get");
    if (rc == CT_ENOENT && timeout_ms > 0)
        rc = CT_ETIMEDOUT;
    if (!rc) {
        size_t n = rep->kv_get_reply->value.len;
        *value = malloc(n ? n : 1);
        if (!*value) {
            rc = ct__error(CT_ENOMEM, "ct_kv_get: out of memory");
        } else {
            memcpy(*value, rep->kv_get_reply->value.data, n);
            *len = n;
        }
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_kv_del(const char *key)
{
    if (!key || !*key)
        return ct__error(CT_EINVAL, "ct_kv_del: key is empty");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__KvDel d = CT__KV_DEL__INIT;
    ct__env_init(&e, 0, C.sender, 10000);
    d.key = (char *)key;
    e.body_case = CT__ENVELOPE__BODY_KV_DEL;
    e.kv_del = &d;
    int rc = head_request(&e, &rep, 10000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "kv_del");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

/* ---- placement groups and cluster view ---- */

int ct_placement_group_create(const ct_bundle *bundles, int n, ct_strategy strategy,
                              ct_placement_group **out)
{
    if (!out || !bundles || n <= 0 || n > 4096)
        return ct__error(CT_EINVAL, "ct_placement_group_create: need 1..4096 bundles and out");
    *out = NULL;
    Ct__Bundle *b = calloc(n, sizeof *b);
    Ct__Bundle **bp = calloc(n, sizeof *bp);
    Ct__Resource *r = calloc((size_t)n * 10, sizeof *r);
    Ct__Resource **rp = calloc((size_t)n * 10, sizeof *rp);
    ct_placement_group *pg = calloc(1, sizeof *pg);
    Ct__Envelope *rep = NULL;
    int rc = 0;
    LOCK();
    if (!b || !bp || !r || !rp || !pg) {
        rc = ct__error(CT_ENOMEM, "ct_placement_group_create: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        ct__bundle__init(&b[i]);
        b[i].n_resources =
            fill_res(r + 10 * i, rp + 10 * i, bundles[i].cpu, bundles[i].gpu, bundles[i].custom, 8);
        b[i].resources = rp + 10 * i;
        bp[i] = &b[i];
    }
    Ct__Envelope e;
    Ct__PgCreate p = CT__PG_CREATE__INIT;
    ct__env_init(&e, 0, C.sender, 10000);
    p.n_bundles = n;
    p.bundles = bp;
    p.strategy = strategy == CT_SPREAD ? CT__STRATEGY__SPREAD : CT__STRATEGY__PACK;
    e.body_case = CT__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = &p;
    if ((rc = head_request(&e, &rep, 10000)))
        goto out;
    if ((rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_PG_CREATE_REPLY, "pg_create")))
        goto out;
    snprintf(pg->id, sizeof pg->id, "%s", rep->pg_create_reply->pg_id);
    *out = pg;
    pg = NULL;
out:
    UNLOCK();
    ct__msg_free(rep);
    free(b);
    free(bp);
    free(r);
    free(rp);
    free(pg);
    return rc;
}

int ct_placement_group_wait(ct_placement_group *pg, int timeout_ms)
{
    if (!pg)
        return ct__error(CT_EINVAL, "ct_placement_group_wait: pg is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__PgWait w = CT__PG_WAIT__INIT;
    ct__env_init(&e, 0, C.sender, 0);
    w.pg_id = pg->id;
    w.wait_ms = timeout_ms > 0 ? timeout_ms : 0;
    e.body_case = CT__ENVELOPE__BODY_PG_WAIT;
    e.pg_wait = &w;
    int rc = head_request(&e, &rep, (timeout_ms > 0 ? timeout_ms : 0) + 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "pg_wait");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_placement_group_remove(ct_placement_group **ppg)
{
    if (!ppg || !*ppg)
        return ct__error(CT_EINVAL, "ct_placement_group_remove: pg is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__PgRemove r = CT__PG_REMOVE__INIT;
    ct__env_init(&e, 0, C.sender, 5000);
    r.pg_id = (*ppg)->id;
    e.body_case = CT__ENVELOPE__BODY_PG_REMOVE;
    e.pg_remove = &r;
    int rc = head_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "pg_remove");
    ct__msg_free(rep);
    UNLOCK();
    free(*ppg);
    *ppg = NULL;
    return rc;
}

const char *ct_placement_group_id(const ct_placement_group *pg)
{
    return pg ? pg->id : "";
}

int ct_cluster_resources(const char *name, double *total, double *free_amount)
{
    if (!name)
        return ct__error(CT_EINVAL, "ct_cluster_resources: name is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__Status s = CT__STATUS__INIT;
    ct__env_init(&e, 0, C.sender, 5000);
    e.body_case = CT__ENVELOPE__BODY_STATUS;
    e.status = &s;
    int rc = head_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_STATUS_REPLY, "status");
    if (!rc) {
        double t = 0, f = 0;
        for (size_t i = 0; i < rep->status_reply->n_nodes; i++) {
            Ct__NodeInfo *n = rep->status_reply->nodes[i];
            if (!n->alive)
                continue;
            t += ct__res_get(n->total, n->n_total, name);
            f += ct__res_get(n->free, n->n_free, name);
        }
        if (total)
            *total = t;
        if (free_amount)
            *free_amount = f;
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

/* ---- objects ---- */

/* The shard's node went away: keep the client mapped (until ct_shutdown) and find another. */
static void retire_store(void)
{
    if (C.nold == (int)(sizeof C.old_stores / sizeof C.old_stores[0]))
        ct_store_client_destroy(&C.old_stores[--C.nold]);
    memmove(C.old_stores + 1, C.old_stores, C.nold * sizeof C.old_stores[0]);
    C.old_stores[0] = C.store;
    C.nold++;
    C.store = NULL;
    C.store_node[0] = 0;
}

/* The head's list of live nodes with a store (ObjNodesReply). Lock held (released while
 * waiting). */
static int obj_nodes(Ct__Envelope **rep)
{
    Ct__Envelope e;
    Ct__ObjNodes q = CT__OBJ_NODES__INIT;
    ct__env_init(&e, 0, C.sender, 5000);
    e.body_case = CT__ENVELOPE__BODY_OBJ_NODES;
    e.obj_nodes = &q;
    int rc = head_request(&e, rep, 5000);
    if (!rc)
        rc = ct__msg_expect(*rep, CT__ENVELOPE__BODY_OBJ_NODES_REPLY, "obj_nodes");
    return rc;
}

/* Connects this process to the object store: its own node's shard (actors), the embedded
 * node's, else that of a node on its host (same ct__host_id: the shard's /dev/shm is ours).
 * A driver on a host with no node (or with CT_REMOTE_DRIVER=1) is a *remote driver*: it maps
 * nothing and moves objects through the nodes' data ports (put_remote, get_remote). A node
 * that has just joined registers its shard a moment later, so an empty answer is asked again
 * for up to STORE_WAIT_MS before it is an error. Lock held. */
#define STORE_WAIT_MS 2000
static int ensure_store(void)
{
    if (C.store || C.remote)
        return 0;
    int rc = ensure_head();
    if (rc)
        return rc;
    char me[128];
    ct__host_id(me, sizeof me);
    const char *ev = getenv("CT_REMOTE_DRIVER");
    int64_t until = ct__now_ms() + STORE_WAIT_MS;
    for (;;) {
        Ct__Envelope *rep = NULL;
        if ((rc = obj_nodes(&rep))) {
            ct__msg_free(rep);
            return rc;
        }
        Ct__ObjNodesReply *r = rep->obj_nodes_reply;
        const char *want = C.self_node[0] ? C.self_node : C.emb_node[0] ? C.emb_node : NULL;
        bool force_remote = !want && ev && !strcmp(ev, "1");
        int elsewhere = 0;
        char here[32] = ""; /* a node on this host whose shard could not be mapped */
        for (size_t i = 0; i < r->n_nodes && !C.store; i++) {
            Ct__ObjNodeInfo *ni = r->nodes[i];
            if (want && strcmp(ni->node_id, want))
                continue;
            /* a node that reports no host id (an older one) is tried as before */
            if (!want && (force_remote || (ni->host_id[0] && strcmp(ni->host_id, me)))) {
                elsewhere += ni->data_port != 0;
                continue;
            }
            C.store = ct_store_client_new(ni->store_name);
            if (C.store)
                snprintf(C.store_node, sizeof C.store_node, "%s", ni->node_id);
            else
                snprintf(here, sizeof here, "%s", ni->node_id);
        }
        size_t listed = r->n_nodes;
        ct__msg_free(rep);
        if (C.store || C.remote) /* ours, or another thread's while the lock was released */
            return 0;
        if (elsewhere) {
            C.remote = true;
            CT_LOG(CT_LOG_INFO, "client",
                   "%s: objects go through the data ports of the cluster's nodes",
                   force_remote ? "CT_REMOTE_DRIVER=1" : "no ct-node runs on this host");
            return 0;
        }
        if (ct__now_ms() >= until) {
            if (want)
                return ct__error(CT_ENOENT,
                                 "object store: node %s has no shard this process can reach", want);
            if (here[0])
                return ct__error(CT_ENOENT,
                                 "object store: node %s runs on this host (host id %s) but its "
                                 "shard cannot be mapped here",
                                 here, me);
            if (!listed)
                return ct__error(CT_ENOENT,
                                 "object store: the head at %s lists no ct-node with an object "
                                 "store (objects live on nodes: start a ct-node)",
                                 C.addr);
            return ct__error(CT_ENOENT,
                             "object store: no ct-node with an object store runs on this host, "
                             "and no node of the %zu the head lists has a data port to put "
                             "through",
                             listed);
        }
        sleep_unlocked(-1, 20);
    }
}

static int put_done(const ct_object_id *id, uint64_t size, const ct_put_opts *o,
                    const char *node_id)
{
    int wait = o && o->timeout_ms > 0 ? o->timeout_ms : 60000;
    Ct__Envelope e, *rep = NULL;
    Ct__ObjPutDone d = CT__OBJ_PUT_DONE__INIT;
    ct__env_init(&e, 0, C.sender, 0);
    d.object_id.data = (uint8_t *)id->b;
    d.object_id.len = CT_OBJECT_ID_LEN;
    d.size = size;
    d.node_id = (char *)node_id;
    d.replicas = o && o->replicas > 0 ? o->replicas : 1;
    d.preferred_node = (char *)(o && o->node ? o->node : "");
    d.wait_ms = wait;
    e.body_case = CT__ENVELOPE__BODY_OBJ_PUT_DONE;
    e.obj_put_done = &d;
    int rc = head_request(&e, &rep, wait + 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "obj_put_done");
    ct__msg_free(rep);
    return rc;
}

/* A remote driver's put: uploads the bytes to one node (opts.node first, then the one with the
 * most room: shard memory less what the directory lists on it; the next on a refusal), then
 * registers it there with put_done exactly as a local put does. The lock is released during
 * the upload. CT_EEXIST from the node is success when exist_ok. Lock held. */
static int put_remote(const ct_object_id *id, const void *data, size_t len, const ct_put_opts *o,
                      bool exist_ok)
{
    Ct__Envelope *rep = NULL;
    int rc = obj_nodes(&rep);
    if (rc) {
        ct__msg_free(rep);
        return rc;
    }
    Ct__ObjNodesReply *r = rep->obj_nodes_reply;
    size_t n = r->n_nodes;
    Ct__ObjNodeInfo **order = calloc(n ? n : 1, sizeof *order);
    if (!order) {
        ct__msg_free(rep);
        return ct__error(CT_ENOMEM, "ct_put: out of memory");
    }
    memcpy(order, r->nodes, n * sizeof *order);
    for (size_t i = 0; i < n; i++) /* preferred first, then most room (selection sort) */
        for (size_t j = i + 1; j < n; j++) {
            Ct__ObjNodeInfo *a = order[i], *b = order[j];
            uint64_t ra = a->memory_cap > a->bytes_held ? a->memory_cap - a->bytes_held : 0;
            uint64_t rb = b->memory_cap > b->bytes_held ? b->memory_cap - b->bytes_held : 0;
            bool pa = o && o->node && !strcmp(a->node_id, o->node);
            bool pb = o && o->node && !strcmp(b->node_id, o->node);
            if ((pb && !pa) || (pa == pb && rb > ra)) {
                order[i] = b;
                order[j] = a;
            }
        }
    char why[768] = "", node[32] = "";
    rc = CT_ENOENT;
    for (size_t i = 0; i < n && !node[0]; i++) {
        Ct__ObjNodeInfo *ni = order[i];
        size_t k = strlen(why);
        if (!ni->data_port) {
            snprintf(why + k, sizeof why - k, "%s%s: no data port", k ? "; " : "", ni->node_id);
            continue;
        }
        UNLOCK();
        rc = ct_xfer_push(ni->xfer_address, (uint16_t)ni->data_port, id, data, len, 60000);
        LOCK();
        if (!rc || (rc == CT_EEXIST && exist_ok))
            snprintf(node, sizeof node, "%s", ni->node_id);
        else
            snprintf(why + k, sizeof why - k, "%s%s: %s", k ? "; " : "", ni->node_id,
                     ct_last_error());
    }
    free(order);
    ct__msg_free(rep);
    if (!node[0])
        return ct__error(rc ? rc : CT_ENOENT, "ct_put: no node took the object (%zu bytes): %s",
                         len, n ? why : "the head lists no node with an object store");
    return put_done(id, len, o, node);
}

/* create + copy + seal in this node's shard, then register (and replicate). Lock held.
 * CT_EEXIST from the shard is success when exist_ok (content-addressed ids). */
static int put_id(const ct_object_id *id, const void *data, size_t len, const ct_put_opts *o,
                  bool exist_ok)
{
    int rc = ensure_store();
    if (rc)
        return rc;
    if (C.remote)
        return put_remote(id, data, len, o, exist_ok);
    void *p = NULL;
    rc = ct_store_client_create(C.store, id, len, &p);
    if (rc == CT_ECONNRESET) { /* the node went away: use another one */
        retire_store();
        if ((rc = ensure_store()))
            return rc;
        rc = ct_store_client_create(C.store, id, len, &p);
    }
    if (rc == CT_EEXIST && exist_ok) {
        rc = 0;
    } else if (!rc) {
        if (len)
            memcpy(p, data, len);
        rc = ct_store_client_seal(C.store, id);
        if (rc)
            ct_store_client_abort(C.store, id);
    }
    if (!rc)
        rc = put_done(id, len, o, C.store_node);
    return rc;
}

int ct_put(const void *data, size_t len, const ct_put_opts *opts, ct_object_id *id)
{
    if (!id || (len && !data))
        return ct__error(CT_EINVAL, "ct_put: %s is NULL", !id ? "id" : "data");
    if (opts && opts->replicas < 0)
        return ct__error(CT_EINVAL, "ct_put: opts.replicas %d < 0", opts->replicas);
    if (getrandom(id->b, sizeof id->b, 0) != (ssize_t)sizeof id->b)
        return ct__error(CT_EIO, "ct_put: getrandom: %s", strerror(errno));
    LOCK();
    int rc = put_id(id, data, len, opts, false);
    UNLOCK();
    return rc;
}

int ct_put_file(const char *path, const ct_put_opts *opts, ct_object_id *id)
{
    if (!path || !id)
        return ct__error(CT_EINVAL, "ct_put_file: %s is NULL", !path ? "path" : "id");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct__error(-errno, "ct_put_file: %s: %s", path, strerror(errno));
    struct stat st;
    void *m = NULL;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = ct__error(-errno, "ct_put_file: %s: %s", path, strerror(errno));
        goto out;
    }
    if (st.st_size > 0) {
        m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            m = NULL;
            rc = ct__error(-errno, "ct_put_file: mmap %s: %s", path, strerror(errno));
            goto out;
        }
    }
    rc = ct_put(m, (size_t)st.st_size, opts, id);
out:
    if (m)
        munmap(m, st.st_size);
    close(fd);
    return rc;
}

int ct_object_create(size_t len, ct_object_id *id, void **data)
{
    if (!id || !data)
        return ct__error(CT_EINVAL, "ct_object_create: %s is NULL", !id ? "id" : "data");
    *data = NULL;
    if (getrandom(id->b, sizeof id->b, 0) != (ssize_t)sizeof id->b)
        return ct__error(CT_EIO, "ct_object_create: getrandom: %s", strerror(errno));
    LOCK();
    int rc = ensure_store();
    if (!rc && C.remote) { /* a private buffer until the seal uploads it */
        struct rbuf *b = calloc(1, sizeof *b);
        if (b && !(b->data = malloc(len ? len : 1))) {
            free(b);
            b = NULL;
        }
        if (b) {
            b->id = *id;
            b->len = len;
            b->next = C.creating;
            C.creating = b;
            *data = b->data;
        } else {
            rc = ct__error(CT_ENOMEM, "ct_object_create: no memory for %zu bytes", len);
        }
        UNLOCK();
        return rc;
    }
    if (!rc)
        rc = ct_store_client_create(C.store, id, len, data);
    if (rc == CT_ECONNRESET) {
        retire_store();
        if (!(rc = ensure_store()))
            rc = ct_store_client_create(C.store, id, len, data);
    }
    UNLOCK();
    return rc;
}

/* Takes a remote driver's object being created out of the list (caller owns it), or NULL. */
static struct rbuf *take_creating(const ct_object_id *id)
{
    for (struct rbuf **pp = &C.creating; *pp; pp = &(*pp)->next)
        if (!memcmp((*pp)->id.b, id->b, CT_OBJECT_ID_LEN)) {
            struct rbuf *b = *pp;
            *pp = b->next;
            return b;
        }
    return NULL;
}

int ct_object_seal(const ct_object_id *id, const ct_put_opts *opts)
{
    if (!id)
        return ct__error(CT_EINVAL, "ct_object_seal: id is NULL");
    LOCK();
    struct rbuf *b = take_creating(id);
    if (b) {
        int rc = put_remote(id, b->data, b->len, opts, false);
        UNLOCK();
        free(b->data);
        free(b);
        return rc;
    }
    uint64_t size = 0;
    int rc = C.store ? ct_store_client_seal(C.store, id)
                     : ct__error(CT_ENOENT, "ct_object_seal: no object being created");
    if (!rc) {
        ct_store_view sv = {0};
        if (!(rc = ct_store_client_get(C.store, id, &sv))) {
            size = sv.size;
            ct_store_client_release(C.store, &sv);
        }
    }
    if (!rc)
        rc = put_done(id, size, opts, C.store_node);
    UNLOCK();
    return rc;
}

int ct_object_abort(const ct_object_id *id)
{
    if (!id)
        return ct__error(CT_EINVAL, "ct_object_abort: id is NULL");
    LOCK();
    struct rbuf *b = take_creating(id);
    if (b) {
        UNLOCK();
        free(b->data);
        free(b);
        return 0;
    }
    int rc = C.store ? ct_store_client_abort(C.store, id)
                     : ct__error(CT_ENOENT, "ct_object_abort: no object being created");
    UNLOCK();
    return rc;
}

static void to_view(const ct_store_view *sv, ct_object_view *v)
{
    v->data = sv->data;
    v->size = sv->size;
    v->id = sv->id;
    v->priv_[0] = sv->obj_;
    v->priv_[1] = sv->map_;
    v->priv_[2] = (void *)(uintptr_t)sv->maplen_;
}

static int locate(const ct_object_id *ids, int n, Ct__Envelope **rep);
static char remote_view; /* ct_object_view.priv_[0] of a remote driver's copy */

/* A remote driver's get: waits up to timeout_ms for a holder (as ObjFetch does for a node),
 * then pulls the bytes from the holders' data ports into a private buffer (the nodes' puller,
 * CRC-32C checked, failing over between holders). The lock is released during the pull.
 * Lock held. */
static int get_remote(const ct_object_id *id, int timeout_ms, ct_object_view *view)
{
    char hx[41];
    ct_object_id_hex(id, hx);
    int64_t until = ct__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        Ct__Envelope *lrep = NULL, *nrep = NULL;
        int rc = locate(id, 1, &lrep);
        Ct__ObjLocation *l = rc ? NULL : lrep->obj_locate_reply->objects[0];
        if (!rc && l->found)
            rc = obj_nodes(&nrep);
        if (!rc && l->found) {
            Ct__ObjNodesReply *r = nrep->obj_nodes_reply;
            const char *holders[16];
            uint16_t ports[16];
            int nh = 0;
            for (size_t i = 0; i < l->n_node_ids && nh < 16; i++)
                for (size_t j = 0; j < r->n_nodes; j++)
                    if (!strcmp(r->nodes[j]->node_id, l->node_ids[i])) {
                        holders[nh] = r->nodes[j]->xfer_address;
                        ports[nh++] = (uint16_t)r->nodes[j]->data_port;
                        break;
                    }
            ct_xfer_pull_opts po = {.size_known = 1, .size = l->size, .data_ports = ports};
            void *data = NULL;
            uint64_t size = 0;
            UNLOCK();
            rc = ct_xfer_pull_mem(id, holders, nh, &po, &data, &size, NULL);
            LOCK();
            if (!rc) {
                view->data = data;
                view->size = size;
                view->id = *id;
                view->priv_[0] = &remote_view;
                view->priv_[1] = data;
            }
        } else if (!rc) {
            rc = CT_ENOENT; /* not put yet */
        }
        ct__msg_free(lrep);
        ct__msg_free(nrep);
        if (rc != CT_ENOENT && rc != CT_ERETRY)
            return rc;
        if (ct__now_ms() >= until)
            return rc == CT_ENOENT ? ct__error(CT_ENOENT, "ct_get: object %s: no node holds it", hx)
                                   : rc;
        sleep_unlocked(-1, 10);
    }
}

int ct_get(const ct_object_id *id, int timeout_ms, ct_object_view *view)
{
    if (!id || !view)
        return ct__error(CT_EINVAL, "ct_get: %s is NULL", !id ? "id" : "view");
    memset(view, 0, sizeof *view);
    char hx[41];
    ct_object_id_hex(id, hx);
    LOCK();
    ct_store_view sv = {0};
    Ct__Envelope *rep = NULL;
    int rc = ensure_store();
    if (rc)
        goto out;
    if (C.remote) {
        rc = get_remote(id, timeout_ms, view);
        UNLOCK();
        return rc;
    }
    rc = ct_store_client_get(C.store, id, &sv);
    if (rc == CT_ECONNRESET) { /* the node went away: use another one */
        retire_store();
        if ((rc = ensure_store()))
            goto out;
        rc = ct_store_client_get(C.store, id, &sv);
    }
    if (rc != CT_ENOENT)
        goto out;
    /* not here: the head has this node pull it, then it is local */
    Ct__Envelope e;
    Ct__ObjFetch f = CT__OBJ_FETCH__INIT;
    ct__env_init(&e, 0, C.sender, 0);
    f.object_id.data = (uint8_t *)id->b;
    f.object_id.len = CT_OBJECT_ID_LEN;
    f.node_id = C.store_node;
    f.wait_ms = timeout_ms > 0 ? timeout_ms : 0;
    e.body_case = CT__ENVELOPE__BODY_OBJ_FETCH;
    e.obj_fetch = &f;
    rc = head_request(&e, &rep, (timeout_ms > 0 ? timeout_ms : 60000) + 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OBJ_LOCATE_REPLY, "obj_fetch");
    if (rc)
        goto out;
    rc = ct_store_client_get(C.store, id, &sv);
    if (rc == CT_ENOENT)
        rc = ct__error(CT_ENOENT, "ct_get: object %s vanished from node %s (freed?)", hx,
                       C.store_node);
out:
    ct__msg_free(rep);
    if (!rc)
        to_view(&sv, view);
    UNLOCK();
    return rc;
}

void ct_object_release(ct_object_view *v)
{
    if (!v || !v->priv_[0])
        return;
    if (v->priv_[0] == &remote_view) { /* a remote driver's own copy */
        free(v->priv_[1]);
        memset(v, 0, sizeof *v);
        return;
    }
    ct_store_view sv = {0};
    sv.data = v->data;
    sv.size = v->size;
    sv.id = v->id;
    sv.obj_ = v->priv_[0];
    sv.map_ = v->priv_[1];
    sv.maplen_ = (uint64_t)(uintptr_t)v->priv_[2];
    LOCK();
    if (C.store && sv.obj_ == (void *)C.store)
        ct_store_client_release(C.store, &sv);
    for (int i = 0; i < C.nold; i++)
        if (sv.obj_ == (void *)C.old_stores[i])
            ct_store_client_release(C.old_stores[i], &sv);
    UNLOCK();
    memset(v, 0, sizeof *v);
}

static int locate(const ct_object_id *ids, int n, Ct__Envelope **rep)
{
    ProtobufCBinaryData *b = calloc(n ? n : 1, sizeof *b);
    if (!b)
        return ct__error(CT_ENOMEM, "ct_wait: out of memory");
    for (int i = 0; i < n; i++) {
        b[i].data = (uint8_t *)ids[i].b;
        b[i].len = CT_OBJECT_ID_LEN;
    }
    Ct__Envelope e;
    Ct__ObjLocate l = CT__OBJ_LOCATE__INIT;
    ct__env_init(&e, 0, C.sender, 5000);
    l.n_object_ids = n;
    l.object_ids = b;
    e.body_case = CT__ENVELOPE__BODY_OBJ_LOCATE;
    e.obj_locate = &l;
    int rc = head_request(&e, rep, 5000);
    if (!rc)
        rc = ct__msg_expect(*rep, CT__ENVELOPE__BODY_OBJ_LOCATE_REPLY, "obj_locate");
    if (!rc && (*rep)->obj_locate_reply->n_objects != (size_t)n)
        rc = ct__error(CT_EPROTO, "obj_locate: %zu answers for %d ids",
                       (*rep)->obj_locate_reply->n_objects, n);
    free(b);
    return rc;
}

int ct_wait(const ct_object_id *ids, int n, int num_ready, int timeout_ms)
{
    if (!ids || n <= 0 || num_ready < 0 || num_ready > n)
        return ct__error(CT_EINVAL, "ct_wait: need ids, n > 0 and 0 <= num_ready <= n");
    int64_t until = ct__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        Ct__Envelope *rep = NULL;
        LOCK();
        int rc = locate(ids, n, &rep);
        UNLOCK();
        int ready = 0;
        for (int i = 0; !rc && i < n; i++)
            ready += rep->obj_locate_reply->objects[i]->found;
        ct__msg_free(rep);
        if (rc)
            return rc;
        if (ready >= num_ready)
            return ready;
        if (ct__now_ms() >= until)
            return ct__error(CT_ETIMEDOUT, "ct_wait: %d of %d objects ready, %d wanted", ready, n,
                             num_ready);
        usleep(2000);
    }
}

int ct_free(const ct_object_id *id)
{
    if (!id)
        return ct__error(CT_EINVAL, "ct_free: id is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__ObjFree f = CT__OBJ_FREE__INIT;
    ct__env_init(&e, 0, C.sender, 5000);
    f.object_id.data = (uint8_t *)id->b;
    f.object_id.len = CT_OBJECT_ID_LEN;
    e.body_case = CT__ENVELOPE__BODY_OBJ_FREE;
    e.obj_free = &f;
    int rc = head_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "obj_free");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_object_nodes(const ct_object_id *id, char (*nodes)[32], int cap, int *n, uint64_t *size)
{
    if (!id)
        return ct__error(CT_EINVAL, "ct_object_nodes: id is NULL");
    if (n)
        *n = 0;
    LOCK();
    Ct__Envelope *rep = NULL;
    int rc = locate(id, 1, &rep);
    if (!rc) {
        Ct__ObjLocation *l = rep->obj_locate_reply->objects[0];
        if (!l->found) {
            char hx[41];
            rc = ct__error(CT_ENOENT, "object %s: no node holds it", ct_object_id_hex(id, hx));
        }
        for (size_t i = 0; !rc && i < l->n_node_ids && (int)i < cap && nodes; i++)
            snprintf(nodes[i], 32, "%s", l->node_ids[i]);
        if (!rc && n)
            *n = (int)l->n_node_ids;
        if (!rc && size)
            *size = l->size;
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_object_store_nodes(void)
{
    LOCK();
    Ct__Envelope *rep = NULL;
    int rc = obj_nodes(&rep);
    if (!rc) {
        Ct__ObjNodesReply *r = rep->obj_nodes_reply;
        for (size_t i = 0; i < r->n_nodes; i++)
            rc += r->nodes[i]->xfer_address && r->nodes[i]->xfer_address[0];
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

const char *ct_object_node(void)
{
    return C.store_node;
}

int ct_object_id_from_args(const void *args, size_t len, int i, ct_object_id *id)
{
    if (!args || !id || i < 0 || (size_t)(i + 1) * CT_OBJECT_ID_LEN > len)
        return ct__error(CT_EINVAL, "ct_object_id_from_args: args of %zu bytes hold no id #%d", len,
                         i);
    memcpy(id->b, (const uint8_t *)args + (size_t)i * CT_OBJECT_ID_LEN, CT_OBJECT_ID_LEN);
    return 0;
}

/* Code shipping: puts /proc/self/exe into this node's shard under its SHA-1 (once per
 * process), so nodes start actors from their cached copy. On failure (no shard reachable)
 * actors are started from the executable's path as before. Lock held. */
static void ship_exe(void)
{
    C.exe_state = 2; /* in progress: head_request releases the lock */
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    struct stat st;
    void *m = MAP_FAILED;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0)
        goto out;
    m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        goto out;
    ct__sha1(m, st.st_size, C.exe_id.b);
    if (put_id(&C.exe_id, m, st.st_size, NULL, true)) {
        CT_LOG(CT_LOG_WARN, "client", "cannot ship the executable (actors start from %s): %s",
               C.exe, ct_last_error());
        goto out;
    }
    C.exe_state = 1;
out:
    if (C.exe_state == 2)
        C.exe_state = -1;
    if (m != MAP_FAILED)
        munmap(m, st.st_size);
    if (fd >= 0)
        close(fd);
}
