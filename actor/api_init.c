/* actor/api_init.c — ct_init and ct_shutdown: the cluster's secret, the head's address (or an
 * embedded cluster), the job token, the first ping; the driver's liveness (a heartbeat thread
 * with a socket of its own, and its death-watch connection, head/watch.h). Not in here: the
 * transport and an actor's lazy attach to the head (api_transport.c), the embedded cluster
 * (api_embedded.c), ct_serve_if_worker (worker.c). */
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>
#include "actor/api_internal.h"
#include "actor/runtime.h"
#include "actor/zmtp.h"
#include "common/auth.h"
#include "common/common.h"
#include "common/env.h"
#include "head/head.h"
#include "head/watch.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"
#include "proto/msg.h"

/* ---- init / shutdown ---- */

/* A restarted head (its death-watch connection ended): asks it for a new death-watch ticket
 * (Heartbeat.watch, req_id) once a second until a WatchTicket answers, then dials it. */
static void ask_watch(void *s, uint64_t req)
{
    Ct__Envelope e;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__env_init(&e, req, ct__client.sender, 0);
    hb.driver = 1;
    hb.watch = 1;
    e.token = ct__client.job;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    ct__msg_send(s, NULL, &e, ZMQ_DONTWAIT);
}

/* Heartbeats this driver to the head every 100 ms, so that the head kills its actors when
 * the driver dies (also with an external cluster). Runs until hb_stop[1] is closed. It also
 * watches the head's death-watch connection: when it ends (the head died; ctup's supervisor
 * starts another on the same address), the thread gets a ticket from the new head and dials
 * it, and has the API thread subscribe again (ct__client.resub): the driver's job goes on
 * (the head learns it from these heartbeats and from the nodes' re-registration). */
static void *hb_main(void *arg)
{
    (void)arg;
    void *s = zmq_socket(ct__client.ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    if (ct__client_sock_opts(s)) {
        CT_LOG(CT_LOG_ERROR, "driver", "heartbeats: %s", ct_last_error());
        zmq_close(s);
        return NULL;
    }
    char ep[200];
    snprintf(ep, sizeof ep, "tcp://%s", ct__client.addr);
    zmq_connect(s, ep);
    int wfd = ct__client.death_fd; /* set before this thread started; ct_shutdown closes it */
    int own = -1;                  /* a watch connection this thread dialed to a new head */
    bool gone = false;             /* the head's watch connection ended */
    int64_t gone_ms = 0;           /* ... at this time */
    uint64_t wreq = 0;
    int64_t next_ask = 0;
    for (;;) {
        Ct__Envelope e;
        Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
        ct__env_init(&e, 0, ct__client.sender, 0);
        hb.driver = 1;
        e.token = ct__client.job;
        e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
        e.heartbeat = &hb;
        ct__msg_send(s, NULL, &e, ZMQ_DONTWAIT);
        if (gone && ct__now_ms() >= next_ask) {
            ask_watch(s, ++wreq);
            next_ask = ct__now_ms() + 1000;
        }
        /* replies are errors, but for a WatchTicket asked of a restarted head */
        Ct__Envelope *r;
        for (int k = 0; k < 100; k++) {
            int mr = ct__msg_recv(s, NULL, &r, ZMQ_DONTWAIT, "driver");
            if (mr == CT_ETIMEDOUT || mr == CT_EZMQ)
                break;
            if (!mr && gone && r->body_case == CT__ENVELOPE__BODY_WATCH_TICKET &&
                r->req_id == wreq && r->watch_ticket->port) {
                int fd = ct__watch_dial(ct__client.addr, r->watch_ticket->port,
                                        r->watch_ticket->ticket, 2000);
                if (fd >= 0) {
                    if (own >= 0)
                        close(own);
                    own = wfd = fd;
                    gone = false;
                    atomic_store(&ct__client.resub, 1); /* at the API's next drain */
                    /* at the level of the "waiting" line, so that whoever saw it sees this */
                    CT_LOG(CT_LOG_WARN, "driver",
                           "head is back after %.1f s: death watch and subscriptions renewed",
                           (ct__now_ms() - gone_ms) / 1e3);
                }
            }
            ct__msg_free(r);
        }
        struct pollfd p[2] = {{ct__client.hb_stop[0], POLLIN, 0}, {wfd, POLLIN, 0}};
        if (poll(p, !gone && wfd >= 0 ? 2 : 1, 100) < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            break;
        if (!gone && wfd >= 0 && p[1].revents) {
            char b;
            ssize_t got = recv(wfd, &b, 1, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                gone = true;
                gone_ms = ct__now_ms();
                atomic_fetch_add(&ct__client.head_lost, 1); /* the API thread's next drain */
                next_ask = ct__now_ms() + 100;
                CT_LOG(CT_LOG_WARN, "driver",
                       "the head's death-watch connection ended: waiting for a restarted head");
            }
        }
    }
    if (own >= 0) { /* a leave, not a death (head/watch.h) */
        send(own, (char[]){CT__WATCH_LEAVING}, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        close(own);
    }
    /* ct_shutdown: the last one says the driver leaves, so its job ends at once (its actors,
     * KV keys and the nodes' zygotes); a moment to deliver it */
    Ct__Envelope e;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__env_init(&e, 0, ct__client.sender, 0);
    hb.driver = 1;
    hb.leaving = 1;
    e.token = ct__client.job;
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
    ct__env_init(&e, 0, ct__client.sender, timeout_ms);
    hb.driver = 1;
    hb.watch = 1;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    int rc = ct__client_request(&e, &rep, timeout_ms);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_WATCH_TICKET, "heartbeat.watch");
    if (!rc && rep->watch_ticket->port) {
        int fd = ct__watch_dial(ct__client.addr, rep->watch_ticket->port, rep->watch_ticket->ticket,
                                timeout_ms);
        rc = fd < 0 ? fd : 0;
        ct__client.death_fd = fd < 0 ? -1 : fd;
    }
    if (rc)
        CT_LOG(CT_LOG_WARN, "driver", "no death watch (heartbeats only): %s", ct_last_error());
    ct__msg_free(rep);
}

static int start_heartbeats(void)
{
    if (pipe2(ct__client.hb_stop, O_CLOEXEC))
        return ct__error(-errno, "ct_init: pipe: %s", strerror(errno));
    if (pthread_create(&ct__client.hb_thread, NULL, hb_main, NULL)) {
        close(ct__client.hb_stop[0]);
        close(ct__client.hb_stop[1]);
        ct__client.hb_stop[0] = ct__client.hb_stop[1] = -1;
        return ct__error(CT_ENOMEM, "ct_init: cannot start the heartbeat thread");
    }
    ct__client.hb_running = true;
    return 0;
}

static void stop_heartbeats(void)
{
    if (!ct__client.hb_running)
        return;
    close(ct__client.hb_stop[1]);
    pthread_join(ct__client.hb_thread, NULL);
    close(ct__client.hb_stop[0]);
    ct__client.hb_stop[0] = ct__client.hb_stop[1] = -1;
    ct__client.hb_running = false;
}

int ct_init(const ct_init_opts *opts)
{
    ct_serve_if_worker();
    ct_init_opts o = opts ? *opts : (ct_init_opts){0};
    int timeout = o.timeout_ms > 0 ? o.timeout_ms : 10000;
    LOCK();
    int rc = 0;
    if (ct__client.inited) {
        rc = ct__error(CT_EEXIST, "ct_init: already initialized (call ct_shutdown first)");
        goto out;
    }
    signal(SIGPIPE, SIG_IGN);
    if ((rc = ct__client_read_self()))
        goto out;
    const char *addr = o.address && *o.address ? o.address : ct__env(CT__ENV_ADDRESS);
    const char *secret_file =
        o.secret_file && *o.secret_file ? o.secret_file : ct__env(CT__ENV_SECRET_FILE);
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
        if ((rc = ct__embedded_start(&o, timeout, buf, sizeof buf)))
            goto fail;
        addr = buf;
    }
    char sender[64], host[40] = "";
    gethostname(host, sizeof host - 1);
    snprintf(sender, sizeof sender, "driver-%s-%d", host, (int)getpid());
    if ((rc = ct__token_new(ct__client.job))) /* a new job: its actors inherit the token */
        goto fail;
    if ((rc = ct__client_connect(addr, sender)))
        goto fail;
    /* the head must answer a ping: fails fast on a wrong address */
    Ct__Envelope e, *rep;
    Ct__Ping ping = CT__PING__INIT;
    ct__env_init(&e, 0, ct__client.sender, timeout);
    e.body_case = CT__ENVELOPE__BODY_PING;
    e.ping = &ping;
    if ((rc = ct__client_request(&e, &rep, timeout))) {
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
    ct__client.inited = true;
    goto out;
fail:
    ct__client_close();
    ct__embedded_stop();
    free(ct__client.cmdline);
    ct__client.cmdline = NULL;
out:
    UNLOCK();
    return rc;
}

const char *ct_head_address(void)
{
    return ct__client.addr;
}

const char *ct_self_actor_id(void)
{
    return ct__client.self_actor;
}

const char *ct_self_node_id(void)
{
    return ct__client.self_node;
}

static int kill_request(const char *id, uint64_t *req)
{
    Ct__Envelope e;
    Ct__KillActor k = CT__KILL_ACTOR__INIT;
    ct__env_init(&e, ++ct__client.next_req, ct__client.sender, 5000);
    k.actor_id = (char *)id;
    e.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    e.kill_actor = &k;
    *req = e.req_id;
    return ct__client_send(&e);
}

void ct_shutdown(void)
{
    LOCK();
    if (ct__client.inited && ct__client.head) {
        /* kill what this driver created; wait a moment for the head to take the orders */
        uint64_t last = 0;
        ct__client_drain(0, 0, NULL);
        for (int i = 0; i < ct__client.nowned; i++)
            kill_request(ct__client.owned[i], &last);
        if (last) {
            Ct__Envelope *rep = NULL;
            int64_t until = ct__now_ms() + 1000;
            while (!rep && ct__now_ms() < until) {
                zmq_pollitem_t it = {ct__client.head, 0, ZMQ_POLLIN, 0};
                zmq_poll(&it, 1, 50);
                ct__client_drain(last, last, &rep);
            }
            ct__msg_free(rep);
        }
    }
    while (ct__client.actors)
        ct__actor_free(ct__client.actors);
    ct__objects_reset();
    /* the death watch's close that follows is a leave: said on it, so that the head, which may
     * see the close before the last heartbeat's "leaving", ends the job without a warning */
    if (ct__client.inited && ct__client.death_fd >= 0)
        send(ct__client.death_fd, (char[]){CT__WATCH_LEAVING}, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    stop_heartbeats();
    ct__client_close();
    ct__embedded_stop();
    free(ct__client.cmdline);
    ct__client.cmdline = NULL;
    free(ct__client.owned);
    ct__client.owned = NULL;
    ct__client.nowned = ct__client.capowned = 0;
    ct__client.inited = false;
    ct__client.qn = ct__client.qh = 0;
    ct__client.sub_mask = 0;
    ct__client.addr[0] = 0;
    UNLOCK();
}
