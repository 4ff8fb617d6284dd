/* actor/api_transport.c — the driver's connection to the head: one process-wide DEALER
 * (requests, replies by request id, pushed events) and the actor handles' sockets. No
 * background thread: whoever waits (a future, an event, a head request) polls both kinds of
 * socket, so a death event reaches a pending call at once. One mutex serializes the API's
 * state, but waiting calls release it while they sleep (ct__client_sleep), and head replies are
 * filed by request id into whichever thread waits for them (hwait): several threads may wait
 * at once. An actor attaches (ct__client_attach) and connects on first use. Not in here: what the
 * messages say (api_init.c, api_actors.c, api_cluster.c, api_objects.c). */
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
#include "actor/api_internal.h"
#include "actor/runtime.h"
#include "actor/zmtp.h"
#include "common/auth.h"
#include "common/common.h"
#include "head/head.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"
#include "proto/msg.h"

/* Longest single sleep in ct__client_sleep: a backstop only, wake-ups come from fds and kicks. */
#define SLEEP_BACKSTOP_MS 100

struct ct__client_state ct__client = {.mu = PTHREAD_MUTEX_INITIALIZER,
                                      .watch_wr = -1,
                                      .hb_stop = {-1, -1},
                                      .head_fd = -1,
                                      .death_fd = -1};

void ct__client_wait_add(hwait *w)
{
    w->next = ct__client.waits;
    ct__client.waits = w;
}

void ct__client_wait_remove(hwait *w)
{
    for (hwait **p = &ct__client.waits; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
}

/* Threads sleeping in ct__client_sleep, each with its own eventfd: a thread that files a reply,
 * completes a future or queues an event for others kicks them (ct__client_kick). */
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

void ct__client_kick(void)
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
 * left (ct__client_drain files replies and kicks; ct__client_send checks ZMQ_EVENTS and kicks), so
 * the sleep needs no short slices; it is still cut at SLEEP_BACKSTOP_MS in case an edge is lost
 * some other way. fd (an actor's plain TCP socket) and the kick wake at once. This is what
 * lets long waits (futures, KV, events, object fetches) run in several threads at once. */

void ct__client_sleep_fds(const int *fds, int nfds, int64_t ms)
{
    struct pollfd p[SLEEP_MAX_FDS + 2];
    int n = 0;
    sleeper me = {.fd = my_kick_fd()};
    if (ct__client.head_fd >= 0)
        p[n++] = (struct pollfd){ct__client.head_fd, POLLIN, 0};
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

void ct__client_sleep(int fd, int64_t ms)
{
    ct__client_sleep_fds(&fd, 1, ms);
}

/* Sends e on the head socket (lock held). zmq_send also processes the socket's pending
 * commands, which can consume the ZMQ_FD edge of a reply that arrived for a thread asleep in
 * ct__client_sleep; when input is left waiting, kick the sleepers so they drain it. */
int ct__client_send(Ct__Envelope *e)
{
    e->token = ct__client.job;
    int rc = ct__msg_send(ct__client.head, NULL, e, 0);
    int ev = 0;
    size_t el = sizeof ev;
    if (sleepers && zmq_getsockopt(ct__client.head, ZMQ_EVENTS, &ev, &el) == 0 && (ev & ZMQ_POLLIN))
        ct__client_kick();
    return rc;
}

/* A head socket's options: unbounded queues (replies are awaited), a bounded frame size, and
 * the cluster's CURVE client keys. */
int ct__client_sock_opts(void *s)
{
    int zero = 0;
    int64_t maxmsg = 1LL << 30; /* never trust a peer's claimed frame size */
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    return ct__auth_zmq_client(s);
}

/* A new DEALER to ct__client.addr in ct__client.head (and its ZMQ_FD). Lock held. */
static int open_head_socket(void)
{
    ct__client.head = zmq_socket(ct__client.ctx, ZMQ_DEALER);
    if (!ct__client.head)
        return ct__error(CT_EZMQ, "ct_init: zmq_socket: %s", zmq_strerror(errno));
    int rc = ct__client_sock_opts(ct__client.head);
    if (rc)
        return rc;
    char ep[200];
    snprintf(ep, sizeof ep, "tcp://%s", ct__client.addr);
    if (zmq_connect(ct__client.head, ep) != 0)
        return ct__error(CT_EINVAL, "ct_init: head address '%s': %s", ct__client.addr,
                         zmq_strerror(errno));
    size_t fl = sizeof ct__client.head_fd;
    if (zmq_getsockopt(ct__client.head, ZMQ_FD, &ct__client.head_fd, &fl) != 0)
        ct__client.head_fd = -1;
    return 0;
}

int ct__client_connect(const char *addr, const char *sender)
{
    snprintf(ct__client.addr, sizeof ct__client.addr, "%s", addr);
    snprintf(ct__client.sender, sizeof ct__client.sender, "%s", sender);
    if (!ct__client.ctx)
        ct__client.ctx = zmq_ctx_new();
    if (!ct__client.ctx)
        return ct__error(CT_EZMQ, "ct_init: zmq_ctx_new: %s", zmq_strerror(errno));
    ct__client.head_lost_seen = atomic_load(&ct__client.head_lost);
    return open_head_socket();
}

/* The head died (its death watch ended; ctup's supervisor starts another on the same address):
 * requests it took with it get no answer. Everything the old socket still holds is read
 * first (drain, before this); then the socket is replaced, which drops what it had not sent
 * yet, and every request still unanswered goes out again on the new one, with its id: the new
 * head gets each exactly once, when it listens. (A request that the old head carried out but
 * whose reply was lost runs twice: KV puts, gets and waits, placement waits and object calls
 * may; an actor creation is not resent, it times out.) Lock held. */
static void replace_head_socket(void)
{
    ct__client.head_lost_seen = atomic_load(&ct__client.head_lost);
    zmq_close(ct__client.head);
    ct__client.head = NULL;
    ct__client.head_fd = -1;
    if (open_head_socket()) {
        CT_LOG(CT_LOG_ERROR, "driver", "a new head connection: %s", ct_last_error());
        return;
    }
    int n = 0;
    for (hwait *w = ct__client.waits; w; w = w->next)
        if (w->req && !w->slots[0] && !ct__msg_send(ct__client.head, NULL, w->req, 0))
            n++;
    if (n)
        CT_LOG(CT_LOG_INFO, "driver", "the head died: %d requests sent again for its successor", n);
    ct__client_kick();
}

void ct__client_close(void)
{
    if (ct__client.death_fd >= 0) /* the head sees this driver gone at once */
        close(ct__client.death_fd);
    ct__client.death_fd = -1;
    if (ct__client.head)
        zmq_close(ct__client.head);
    ct__client.head = NULL;
    ct__client.head_fd = -1;
    if (ct__client.ctx)
        zmq_ctx_term(ct__client.ctx);
    ct__client.ctx = NULL;
}

/* ---- incoming messages ---- */

void ct__future_complete(ct_future *f, int rc, const void *res, size_t len, const char *err)
{
    if (f->done)
        return;
    f->done = true;
    ct__client_kick();
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

void ct__actor_mark_dead(ct_actor *a, const char *why)
{
    a->dead = true;
    char msg[256];
    snprintf(msg, sizeof msg, "actor %s died: %s", a->id, why);
    while (a->pending)
        ct__future_complete(a->pending, CT_EDEAD, NULL, 0, msg);
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
        for (int i = 0; i < ct__client.nowned; i++)
            if (!strcmp(ct__client.owned[i], e.actor_id)) {
                memcpy(ct__client.owned[i], ct__client.owned[--ct__client.nowned],
                       sizeof ct__client.owned[0]);
                mine = true; /* created here, even if its handle was released */
                break;
            }
    if (e.type == CT_EVENT_ACTOR_DEAD)
        for (ct_actor *a = ct__client.actors; a; a = a->next)
            if (!strcmp(a->id, e.actor_id)) {
                mine = true;
                if (!a->dead)
                    ct__actor_mark_dead(a, e.reason);
            }
    if (!mine && !(ct__client.sub_mask & (1u << e.type)))
        return;
    if (ct__client.qn == EVQ) { /* full: drop the oldest */
        ct__client.qh = (ct__client.qh + 1) % EVQ;
        ct__client.qn--;
    }
    ct__client.q[(ct__client.qh + ct__client.qn) % EVQ] = e;
    ct__client.qn++;
    ct__client_kick();
}

/* Reads everything waiting on the head socket. Replies to request ids lo..hi land in
 * slots[id - lo] (caller frees); events are handled; stale replies dropped. */
static void read_head(uint64_t lo, uint64_t hi, Ct__Envelope **slots)
{
    for (;;) {
        Ct__Envelope *e;
        int rc = ct__msg_recv(ct__client.head, NULL, &e, ZMQ_DONTWAIT, "driver");
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
            hwait *w = ct__client.waits;
            while (w && !(e->req_id >= w->lo && e->req_id <= w->hi && !w->slots[e->req_id - w->lo]))
                w = w->next;
            if (w) {
                w->slots[e->req_id - w->lo] = e;
                ct__client_kick();
            } else {
                ct__msg_free(e);
            }
        }
    }
}

/* read_head, after replacing the socket of a head that died (replace_head_socket) and
 * subscribing again to a restarted one. */
void ct__client_drain(uint64_t lo, uint64_t hi, Ct__Envelope **slots)
{
    if (ct__client.head && ct__client.head_lost_seen != atomic_load(&ct__client.head_lost)) {
        read_head(lo, hi, slots); /* replies that made it before the head died */
        replace_head_socket();
    }
    if (atomic_exchange(&ct__client.resub, 0) && ct__client.sub_mask && ct__client.head) {
        /* a restarted head (api_init.c's heartbeat thread) knows no subscription: the events
         * go on; its Ok is a stale reply, dropped below */
        Ct__Envelope e;
        Ct__Subscribe s = CT__SUBSCRIBE__INIT;
        ct__env_init(&e, ++ct__client.next_req, ct__client.sender, 5000);
        s.mask = ct__client.sub_mask;
        e.body_case = CT__ENVELOPE__BODY_SUBSCRIBE;
        e.subscribe = &s;
        if (ct__client_send(&e))
            CT_LOG(CT_LOG_WARN, "driver", "subscribing again: %s", ct_last_error());
    }
    if (ct__client.head)
        read_head(lo, hi, slots);
}

void ct__actor_drain(ct_actor *a)
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
                ct__future_complete(f, 0, e->call_reply->result.data, e->call_reply->result.len,
                                    NULL);
            else if (e->body_case == CT__ENVELOPE__BODY_ERROR)
                ct__future_complete(f, e->error->code < 0 ? e->error->code : CT_EPROTO, NULL, 0,
                                    e->error->message);
            else
                ct__future_complete(f, CT_EPROTO, NULL, 0, "unexpected reply body");
            break;
        }
        ct__msg_free(e);
    }
    ct__zconn_compact(&a->zc);
    if (lost) /* the actor's process is gone: its socket closed */
        ct__actor_mark_dead(a, "connection to the actor lost");
}

/* The head connection; an actor makes it on first use. Lock held. */
int ct__client_ensure(void)
{
    if (!ct__client.head && ct__client.inited && ct__client.lazy) {
        char addr[sizeof ct__client.addr], sender[sizeof ct__client.sender];
        snprintf(addr, sizeof addr, "%s", ct__client.addr);
        snprintf(sender, sizeof sender, "%s", ct__client.sender);
        int rc = ct__client_connect(addr, sender);
        if (rc)
            return rc;
    }
    if (!ct__client.head)
        return ct__error(CT_EINVAL, "ct: not initialized (call ct_init first)");
    return 0;
}

/* Sends req to the head and waits for its reply (timeout_ms <= 0: forever). Caller holds the
 * lock, which is released while waiting (other threads' calls go on), and frees *rep. */
int ct__client_request(Ct__Envelope *req, Ct__Envelope **rep, int timeout_ms)
{
    *rep = NULL;
    int rc = ct__client_ensure();
    if (rc)
        return rc;
    req->req_id = ++ct__client.next_req;
    rc = ct__client_send(req);
    if (rc)
        return rc;
    hwait w = {.lo = req->req_id, .hi = req->req_id, .slots = rep, .req = req};
    ct__client_wait_add(&w);
    int64_t until = timeout_ms > 0 ? ct__now_ms() + timeout_ms : INT64_MAX;
    for (;;) {
        if (!ct__client.head) {
            rc = ct__error(CT_ECANCELED, "ct_shutdown while waiting for the head");
            break;
        }
        ct__client_drain(0, 0, NULL);
        if (*rep)
            break;
        int64_t left = until - ct__now_ms();
        if (left <= 0) {
            rc = ct__error(CT_ETIMEDOUT, "head %s did not answer %s within %d ms", ct__client.addr,
                           ct__msg_body_name(req->body_case), timeout_ms);
            break;
        }
        ct__client_sleep(-1, left);
    }
    ct__client_wait_remove(&w);
    return rc;
}

void ct__client_attach(const char *head_addr, const char *sender, const char *actor_id,
                       const char *node_id)
{
    LOCK();
    snprintf(ct__client.self_actor, sizeof ct__client.self_actor, "%s", actor_id ? actor_id : "");
    snprintf(ct__client.self_node, sizeof ct__client.self_node, "%s", node_id ? node_id : "");
    snprintf(ct__client.addr, sizeof ct__client.addr, "%s", head_addr);
    snprintf(ct__client.sender, sizeof ct__client.sender, "%s", sender);
    /* the job token, from the zygote's environment (node.c); not passed on to children */
    const char *job = getenv("CT_JOB_TOKEN");
    snprintf(ct__client.job, sizeof ct__client.job, "%s", ct__token_valid(job) ? job : "");
    unsetenv("CT_JOB_TOKEN");
    ct__client.lazy = true;
    ct__client.inited = true;
    UNLOCK();
}
