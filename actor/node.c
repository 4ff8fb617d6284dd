/* actor/node.c — the node daemon's loop (ct__node_run) and its one handler table: each message
 * kind the node takes from its head is a row {body case, check of the message's own fields,
 * handler}, and the loop runs the check, then the handler; a message kind is added there and
 * nowhere else. The loop polls the head's socket, the children's exits (SIGCHLD through a
 * signalfd, reaped here), the zygotes' sockets and starting stderr pipes, the head's death
 * watch and the parent's watch fd; it heartbeats, retires idle zygotes, and hands queued starts
 * to the zygotes after each step.
 *
 * Process tree: node -> zygote (the driver's executable exec'd in zygote mode, once per
 * executable+argv) -> actor. The zygote clones each actor with CLONE_PARENT, so actors are the
 * node's children: the node reaps them and sees their exit status, and an actor's
 * PR_SET_PDEATHSIG fires when the node dies. Every exit is reported to the head at once.
 *
 * The rows' handlers live by subject, sharing node_shared.h: node_start.c (StartActor),
 * node_actors.c (KillActor; the local actor table), node_zygote.c (JobEnded; the zygotes),
 * node_head.c (the head's answers; registration, heartbeats, head loss, resume, rejoin, drain),
 * and objnode.c (the object store's orders, runtime.h); node_gpus.c and node_stderr.c serve
 * them.
 *
 * A detached node (ct__node_new_detached, runtime.h) runs the same table on bytes, without a
 * head or processes: fuzz/fuzz_node.c drives it.
 *
 * Not in here: the zygote and actor loops (worker.c), scheduling (head). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "actor/node_shared.h"
#include "common/auth.h"
#include "common/env.h"

/* ---- the handler table ---- */

/* Every message the node handles: {body case, check of its own fields (or NULL), handler}. A
 * message kind is added here and nowhere else; the others (Ok answers to pings, a late reply)
 * are dropped. */
static const struct {
    Ct__Envelope__BodyCase body;
    ct__node_check *check;
    ct__node_handler *fn;
} handlers[] = {
    /* actors (node_start.c, node_actors.c), zygotes (node_zygote.c) */
    {CT__ENVELOPE__BODY_START_ACTOR, ct__node_check_start_actor, ct__node_on_start_actor},
    {CT__ENVELOPE__BODY_KILL_ACTOR, ct__node_check_kill_actor, ct__node_on_kill_actor},
    {CT__ENVELOPE__BODY_JOB_ENDED, ct__node_check_job_ended, ct__node_on_job_ended},
    /* the head's answers (node_head.c) */
    {CT__ENVELOPE__BODY_DRAIN_REPLY, NULL, ct__node_on_drain_reply},
    {CT__ENVELOPE__BODY_HEARTBEAT_PERIOD, NULL, ct__node_on_heartbeat_period},
    {CT__ENVELOPE__BODY_ERROR, NULL, ct__node_on_error},
    /* the object store's orders (objnode.c) */
    {CT__ENVELOPE__BODY_OBJ_PULL, ct__objnode_check_pull, ct__objnode_on_pull},
    {CT__ENVELOPE__BODY_OBJ_DELETE, ct__objnode_check_delete, ct__objnode_on_delete},
};

/* Handles one envelope from the head (borrowed): its row's check, then its handler. */
static void on_head(nodest *n, Ct__Envelope *e)
{
    for (size_t i = 0; i < CT_ARRAY_LEN(handlers); i++)
        if (handlers[i].body == e->body_case) {
            if (!handlers[i].check || handlers[i].check(n, e))
                handlers[i].fn(n, e);
            return;
        }
}

/* ---- the loop ---- */

/* Every child that ended: a zygote (retired or not) or an actor (or one whose pid its zygote
 * has not told yet). */
static void reap(nodest *n)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        if (!ct__node_zygote_exited(n, pid, status))
            ct__node_actor_exited(n, pid, status);
}

/* Frees the tables (their zygotes and actors ended: _zygotes_end, _actors_end). */
static void free_tables(nodest *n)
{
    ct__node_drop_starts(n);
    free(n->q);
    free(n->ix);
    free(n->a);
}

/* The local address that routes to the head's host. */
static void detect_host(const char *head, char *out, size_t cap)
{
    snprintf(out, cap, "127.0.0.1");
    char h[128];
    snprintf(h, sizeof h, "%s", head);
    char *colon = strrchr(h, ':');
    if (!colon)
        return;
    *colon = 0;
    if (!strncmp(h, "127.", 4) || !strcmp(h, "localhost"))
        return;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
    if (getaddrinfo(h, colon + 1, &hints, &ai) || !ai)
        return;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (s >= 0 && !connect(s, ai->ai_addr, ai->ai_addrlen) &&
        !getsockname(s, (struct sockaddr *)&me, &len))
        inet_ntop(AF_INET, &me.sin_addr, out, cap);
    if (s >= 0)
        close(s);
    freeaddrinfo(ai);
}

int ct__node_run(const ct_node_opts *o)
{
    nodest n = {.watch_fd = -1, .hb_ms = 100};
    int rc = 0, sfd = -1;
    n.o = o;
    if (!o->head || !strchr(o->head, ':'))
        return ct__error(CT_EINVAL, "node: head address '%s' is not host:port",
                         o->head ? o->head : "");
    snprintf(n.head, sizeof n.head, "%s", o->head);
    /* a spill dir the node may not trust: refused before it registers */
    if (o->spill_dir && *o->spill_dir && (rc = ct__objnode_check_dir(o->spill_dir)))
        return rc;
    /* zygotes kept at once (one per executable, up to one per CPU each); CT_MAX_ZYGOTES lowers
     * it (tests) */
    const char *mz = ct__env(CT__ENV_MAX_ZYGOTES);
    n.max_zyg = mz && atoi(mz) > 0 && atoi(mz) < MAX_ZYG ? atoi(mz) : MAX_ZYG;
    /* a zygote idle this long with no actor here ends (JobEnded ends most sooner); default
     * 10 min, CT_ZYGOTE_IDLE_MS sets it (tests) */
    const char *zi_ms = ct__env(CT__ENV_ZYGOTE_IDLE_MS);
    n.zyg_idle_ms = zi_ms && atoi(zi_ms) > 0 ? atoi(zi_ms) : 600000;
    if (o->host && *o->host)
        snprintf(n.host, sizeof n.host, "%s", o->host);
    else
        detect_host(o->head, n.host, sizeof n.host);
    ct__log_set_who("node");
    ct__node_catch_signals();
    /* SIGCHLD arrives through a signalfd; block it before any thread exists */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    n.ctx = zmq_ctx_new();
    n.sock = n.ctx ? zmq_socket(n.ctx, ZMQ_DEALER) : NULL;
    if (!n.sock || sfd < 0) {
        rc = ct__error(CT_EZMQ, "node: cannot create socket: %s", zmq_strerror(errno));
        goto out;
    }
    int zero = 0;
    zmq_setsockopt(n.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(n.sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(n.sock, ZMQ_RCVHWM, &zero, sizeof zero);
    if ((rc = ct__auth_zmq_client(n.sock)))
        goto out;
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", o->head);
    if (zmq_connect(n.sock, ep) != 0) {
        rc = ct__error(CT_EINVAL, "node: head address %s: %s", o->head, zmq_strerror(errno));
        goto out;
    }
    if ((rc = ct__node_register(&n, false))) {
        /* SIGTERM while registering: a stop (exit 0) */
        if (ct__node_stop_asked() || ct__node_term_asked())
            rc = 0;
        goto out;
    }
    ct__log_set_who(n.id);
    CT_LOG(CT_LOG_INFO, "node", "registered as %s, actors bind %s", n.id, n.host);
    if ((rc = ct__node_store_start(&n)))
        goto out;
    if (o->ready_fd >= 0) {
        char line[64];
        int len = snprintf(line, sizeof line, "registered %s\n", n.id);
        if (write(o->ready_fd, line, len) != len)
            CT_LOG(CT_LOG_WARN, "node", "cannot report readiness");
    }
    ct__node_live_start(&n);
    int64_t next_hb = ct__now_ms() + n.hb_ms;
    n.silent = 0;
    n.last_count = ct__now_ms();
    int dead_ms = o->head_dead_ms > 0 ? o->head_dead_ms : CT_NODE_HEAD_GRACE_MS;
    int64_t next_idle = ct__now_ms() + 1000;
    while (!ct__node_stop_asked()) {
        if (ct__node_term_asked() && ct__node_drain_step(&n, o->drain_ms))
            break;
        if (n.declared_dead || n.forgotten) {
            rc = n.declared_dead ? ct__node_rejoin(&n) : ct__node_resume(&n);
            n.declared_dead = n.forgotten = false;
            if (rc)
                break;
            next_hb = n.last_count = ct__now_ms();
            n.silent = 0;
        }
        if (ct__now_ms() >= next_idle) { /* here: it changes the zygote table polled below */
            ct__node_retire_idle(&n);
            next_idle = ct__now_ms() + 1000;
        }
        zmq_pollitem_t it[4 + 2 * MAX_ZYG];
        int ni = 0;
        it[ni++] = (zmq_pollitem_t){n.sock, 0, ZMQ_POLLIN, 0};
        it[ni++] = (zmq_pollitem_t){NULL, sfd, ZMQ_POLLIN, 0};
        int watch_i = -1, dw_i = -1;
        if (o->watch_fd >= 0) {
            watch_i = ni;
            it[ni++] = (zmq_pollitem_t){NULL, o->watch_fd, ZMQ_POLLIN, 0};
        }
        if (n.watch_fd >= 0) {
            dw_i = ni;
            it[ni++] = (zmq_pollitem_t){NULL, n.watch_fd, ZMQ_POLLIN, 0};
        }
        int z0 = ni, nz = n.nz;
        for (int i = 0; i < nz; i++)
            it[ni++] = (zmq_pollitem_t){NULL, n.z[i].fd, ZMQ_POLLIN, 0};
        int e0 = ni, eidx[MAX_ZYG], ne = 0; /* starting zygotes' stderr pipes */
        for (int i = 0; i < nz; i++)
            if (n.z[i].err_fd >= 0) {
                eidx[ne++] = i;
                it[ni++] = (zmq_pollitem_t){NULL, n.z[i].err_fd, ZMQ_POLLIN, 0};
            }
        int64_t wait = next_hb - ct__now_ms();
        int r = zmq_poll(it, ni, wait < 0 ? 0 : wait);
        if (r < 0 && errno != EINTR) {
            rc = ct__error(CT_EZMQ, "node: poll: %s", zmq_strerror(errno));
            break;
        }
        ct__node_count_silence(&n);
        if (ct__now_ms() >= next_hb) {
            /* a head silent for 3 periods (gone, or restarting) gets pings only: heartbeats
             * queued meanwhile would each be refused by a restarted head */
            if (n.silent < 3 * n.hb_ms)
                ct__node_heartbeat(&n);
            if (n.silent >= n.hb_ms)
                ct__node_ping_head(&n);
            next_hb = ct__now_ms() + n.hb_ms;
        }
        if (r <= 0) {
            ct__node_feed_zygotes(&n);
            if (ct__node_head_lost(&n, dead_ms)) { /* nothing was queued: poll said so */
                rc = CT_EDEAD;
                break;
            }
            continue;
        }
        if (watch_i >= 0 && it[watch_i].revents) {
            CT_LOG(CT_LOG_INFO, "node", "parent gone, exiting");
            break;
        }
        /* stderr first: a zygote's death report quotes it (no zygote leaves the table here) */
        for (int k = 0; k < ne; k++)
            if (it[e0 + k].revents)
                ct__node_zygote_stderr(&n.z[eidx[k]]);
        if (dw_i >= 0 && it[dw_i].revents) {
            ct__node_watch_read(&n);
            if (n.declared_dead)
                continue;
        }
        /* zygote replies before reaping, so that pids are known when exits are read */
        for (int i = nz - 1; i >= 0; i--)
            if (it[z0 + i].revents)
                ct__node_zygote_records(&n, i);
        ct__node_feed_zygotes(&n);
        if (it[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si)
                ;
            reap(&n);
        }
        for (int k = 0; k < 1000; k++) {
            Ct__Envelope *e;
            int mr = ct__msg_recv(n.sock, NULL, &e, ZMQ_DONTWAIT, "node");
            if (mr == CT_ETIMEDOUT)
                break;
            n.silent = 0;
            if (mr) {
                CT_LOG(CT_LOG_WARN, "node", "%s", ct_last_error());
                ct__msg_free(e);
                if (mr == CT_EZMQ)
                    break;
                continue;
            }
            on_head(&n, e);
            ct__msg_free(e);
            if (n.forgotten)
                break;
        }
        ct__node_feed_zygotes(&n);
        if (!ct__node_stop_asked() && ct__node_head_lost(&n, dead_ms)) {
            rc = CT_EDEAD;
            break;
        }
    }
    ct__node_live_stop(&n);
out:;
    char why[512] = ""; /* the cleanup below may set other errors */
    if (rc)
        snprintf(why, sizeof why, "%s", ct_last_error());
    ct__node_actors_end(&n, NULL, 0);
    ct__node_zygotes_end(&n, NULL, 0);
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    ct__objnode_stop();
    ct__node_stats_close(&n);
    free_tables(&n);
    if (sfd >= 0)
        close(sfd);
    if (n.watch_fd >= 0)
        close(n.watch_fd);
    if (n.sock)
        zmq_close(n.sock);
    if (n.ctx)
        zmq_ctx_term(n.ctx);
    return rc ? ct__error(rc, "%s", why) : 0;
}

/* ---- detached mode (fuzz/fuzz_node.c): the table without sockets to a head or processes ---- */

ct__node *ct__node_new_detached(void *sock)
{
    nodest *n = calloc(1, sizeof *n);
    if (!n) {
        ct__error(CT_ENOMEM, "node: out of memory");
        return NULL;
    }
    n->detached = true;
    n->sock = sock;
    n->watch_fd = -1;
    n->max_zyg = 4;
    n->zyg_idle_ms = 600000;
    snprintf(n->id, sizeof n->id, "detached");
    snprintf(n->host, sizeof n->host, "127.0.0.1");
    snprintf(n->head, sizeof n->head, "127.0.0.1:1");
    return n;
}

int ct__node_handle_bytes(ct__node *n, const uint8_t *data, size_t len)
{
    Ct__Envelope *e = NULL;
    int rc = ct__msg_decode(data, len, &e, "node");
    if (!rc) {
        n->forgotten = false;
        on_head(n, e);
        rc = n->forgotten ? CT_EDEAD : 0;
        ct__node_feed_zygotes(n);
    }
    ct__msg_free(e);
    return rc;
}

int ct__node_zygote_bytes(ct__node *n, int zi, const uint8_t *data, size_t len)
{
    if (zi < 0 || zi >= n->nz)
        return ct__error(CT_EINVAL, "node: no zygote %d (%d running)", zi, n->nz);
    uint8_t sink[sizeof(ct__zreq) + CT_ZYGOTE_MAX_ARGS];
    while (recv(n->z[zi].peer_fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
        ; /* the start requests the node sent this zygote */
    if (len && send(n->z[zi].peer_fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)len)
        return ct__error(CT_EIO, "node: zygote %d: send: %s", zi, strerror(errno));
    ct__node_zygote_records(n, zi);
    ct__node_feed_zygotes(n);
    return 0;
}

int ct__node_zygotes(const ct__node *n)
{
    return n->nz;
}

void ct__node_destroy_detached(ct__node **np)
{
    nodest *n = np ? *np : NULL;
    if (!n)
        return;
    ct__node_actors_end(n, NULL, 0);
    ct__node_zygotes_end(n, NULL, 0);
    free_tables(n);
    free(n);
    *np = NULL;
}
