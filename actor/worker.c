/* actor/worker.c — the zygote and the actor process.
 *
 * The zygote is the driver's executable exec'd by a node with CT_MODE=zygote: main() runs up to
 * ct_init()/ct_serve_if_worker() (so every class is registered; ct_serve_if_worker is at the
 * end of this file, and closes registration in every other process), then it loops here reading
 * start requests and creating one actor per request with clone(CLONE_PARENT), so the actor is
 * the node's child: the node reaps it and sees its exit status. The zygote stays single-threaded
 * and never touches ZeroMQ, so fork is safe and cheap.
 *
 * Each actor's listener (a ZMTP ROUTER on an ephemeral port of the node's host) is made by the
 * zygote just before the fork, so the zygote knows the address: for a class without create the
 * zygote's SPAWNED record (pid + address) tells the node the actor serves; otherwise the actor
 * reports ready (or why it failed) after create. The node tells the head (ActorReady). The
 * actor then answers Call envelopes in order on one thread. The node execs the zygote with
 * LD_BIND_NOW (unless set already), so actors do not resolve symbols lazily, one COW'd GOT page
 * at a time. The zygote names itself "ct-zygote" and each actor "ct-actor" (comm); the
 * zygote's stderr is the node's pipe until it serves, an actor's a memfd while its create runs
 * (node.c quotes them when they die there). Not in here: spawning policy (node.c), the driver
 * side of calls (api_actors.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "actor/runtime.h"
#include "actor/zmtp.h"
#include "common/auth.h"
#include "common/common.h"
#include "proto/msg.h"

typedef struct actor_env {
    const char *head, *node_id, *host;
    pid_t node_pid;
    int fd;       /* the node's socketpair, for the one readiness record */
    int keep_err; /* while create runs, stderr is a memfd the node holds too; this is the real one
                   */
} actor_env;

/* The end of create: what it wrote to stderr (the memfd) goes to the real stderr, which is put
 * back. The node, which holds the memfd too, quotes it only when the actor dies before its
 * record. */
static void stderr_back(actor_env *env)
{
    if (env->keep_err < 0)
        return;
    char buf[4096];
    ssize_t k;
    for (off_t off = 0; (k = pread(STDERR_FILENO, buf, sizeof buf, off)) > 0; off += k)
        if (write(env->keep_err, buf, k) != k)
            break;
    dup2(env->keep_err, STDERR_FILENO);
    close(env->keep_err);
    env->keep_err = -1;
}

/* Sends this actor's one record to the node and closes the socketpair. */
static void report(actor_env *env, const char *actor_id, int kind, const char *text)
{
    stderr_back(env);
    ct__zrep r;
    memset(&r, 0, sizeof r);
    snprintf(r.actor_id, sizeof r.actor_id, "%s", actor_id);
    r.pid = getpid();
    r.kind = kind;
    snprintf(r.text, sizeof r.text, "%s", text);
    if (send(env->fd, &r, sizeof r, MSG_NOSIGNAL) != sizeof r)
        CT_LOG(CT_LOG_ERROR, "actor", "cannot report to the node: %s", strerror(errno));
    close(env->fd);
}

static void start_failed(actor_env *env, const char *actor_id, const char *reason)
{
    report(env, actor_id, CT_ZREP_FAILED, reason);
}

/* Packs e and sends it to conn. */
static void send_env(ct__zmtp *z, int conn, const Ct__Envelope *e)
{
    size_t n = ct__envelope__get_packed_size(e);
    uint8_t stack[4096];
    uint8_t *buf = n <= sizeof stack ? stack : malloc(n);
    if (!buf) {
        CT_LOG(CT_LOG_ERROR, "actor", "out of memory packing a %zu-byte reply", n);
        return;
    }
    ct__envelope__pack(e, buf);
    ct__zmtp_send(z, conn, buf, n);
    if (buf != stack)
        free(buf);
}

static void reply_error(ct__zmtp *z, int conn, uint64_t req, const char *who, int code,
                        const char *msg)
{
    Ct__Envelope e;
    Ct__Error er = CT__ERROR__INIT;
    ct__env_init(&e, req, who, 0);
    er.code = code;
    er.message = (char *)msg;
    er.field = "";
    e.body_case = CT__ENVELOPE__BODY_ERROR;
    e.error = &er;
    send_env(z, conn, &e);
}

/* Serves one actor; never returns. It reports to the node (ready with its address, or why it
 * failed) over the zygote's socketpair; the node tells the head. Calls arrive on a ZMTP
 * listener (zmtp.c) and run one at a time, in arrival order per caller. */
static void actor_main(actor_env *env, const char *actor_id, const char *cls_name, const void *args,
                       size_t len, ct__zmtp *z, const char *zep, bool announced)
    __attribute__((noreturn));
/* z/zep: the listener the zygote made for this actor (NULL: make one here). announced: the
 * zygote already told the node this actor serves (a class without create), so no record is
 * sent and the node's socketpair is closed at once. */
static void actor_main(actor_env *env, const char *actor_id, const char *cls_name, const void *args,
                       size_t len, ct__zmtp *z, const char *zep, bool announced)
{
    char who[64];
    snprintf(who, sizeof who, "%s", actor_id);
    ct__log_set_who(who);
    const ct_actor_class *cls = ct__class_find(cls_name);
    if (!cls) {
        char why[160];
        snprintf(why, sizeof why, "class %s is not registered in this executable", cls_name);
        start_failed(env, actor_id, why);
        _exit(2);
    }
    ct__client_attach(env->head, who, actor_id, env->node_id);
    char ep[200];
    if (announced) {
        close(env->fd);
    } else if (z) {
        snprintf(ep, sizeof ep, "%s", zep);
    } else if (ct__zmtp_listen(env->host, ep, sizeof ep, &z)) {
        start_failed(env, actor_id, ct_last_error());
        _exit(2);
    }
    void *state = NULL;
    if (cls->create) {
        int rc = cls->create(args, len, &state);
        if (rc) {
            char why[600];
            snprintf(why, sizeof why, "%s.create failed: %s: %s", cls_name, ct_strerror(rc),
                     ct_last_error());
            start_failed(env, actor_id, why);
            _exit(2);
        }
    }
    if (!announced) {
        report(env, actor_id, CT_ZREP_READY, ep);
        CT_LOG(CT_LOG_INFO, "actor", "%s serving %s at %s", actor_id, cls_name, ep);
    }
    for (;;) {
        int conn;
        const uint8_t *data;
        size_t dlen;
        int rc = ct__zmtp_next(z, &conn, &data, &dlen);
        if (rc == CT_EPROTO) {
            reply_error(z, conn, 0, who, CT_EPROTO, "an actor takes one-frame messages");
            continue;
        }
        if (rc) {
            CT_LOG(CT_LOG_ERROR, "actor", "%s", ct_last_error());
            break;
        }
        Ct__Envelope *in;
        if ((rc = ct__msg_decode(data, dlen, &in, "actor"))) {
            reply_error(z, conn, in ? in->req_id : 0, who, rc, ct_last_error());
            ct__msg_free(in);
            continue;
        }
        if (in->body_case != CT__ENVELOPE__BODY_CALL) {
            char msg[128];
            snprintf(msg, sizeof msg, "an actor does not handle %s",
                     ct__msg_body_name(in->body_case));
            reply_error(z, conn, in->req_id, who, CT_EPROTO, msg);
            ct__msg_free(in);
            continue;
        }
        const char *m = in->call->method ? in->call->method : "";
        ct_method_fn fn = NULL;
        for (int i = 0; i < CT_MAX_METHODS && cls->methods[i].name; i++)
            if (!strcmp(cls->methods[i].name, m)) {
                fn = cls->methods[i].fn;
                break;
            }
        if (!fn) {
            char msg[200];
            snprintf(msg, sizeof msg, "call.method: %s has no method '%s'", cls_name, m);
            reply_error(z, conn, in->req_id, who, CT_ENOENT, msg);
            ct__msg_free(in);
            continue;
        }
        void *res = NULL;
        size_t rlen = 0;
        ct__clear_error();
        rc = fn(state, in->call->args.data, in->call->args.len, &res, &rlen);
        if (rc) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s.%s: %s", cls_name, m,
                     *ct_last_error() ? ct_last_error() : ct_strerror(rc));
            reply_error(z, conn, in->req_id, who, rc < 0 ? rc : CT_EIO, msg);
        } else {
            Ct__Envelope o;
            Ct__CallReply cr = CT__CALL_REPLY__INIT;
            ct__env_init(&o, in->req_id, who, 0);
            cr.result.data = res;
            cr.result.len = res ? rlen : 0;
            o.body_case = CT__ENVELOPE__BODY_CALL_REPLY;
            o.call_reply = &cr;
            send_env(z, conn, &o);
        }
        free(res);
        ct__msg_free(in);
    }
    if (cls->destroy)
        cls->destroy(state);
    ct__zmtp_destroy(&z);
    _exit(0);
}

/* Sends a SPAWNED record, with efd attached (SCM_RIGHTS) when >= 0. */
static int send_rep(int fd, const ct__zrep *rep, int efd)
{
    struct iovec io = {(void *)rep, sizeof *rep};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } c;
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1};
    if (efd >= 0) {
        memset(&c, 0, sizeof c);
        m.msg_control = c.buf;
        m.msg_controllen = sizeof c.buf;
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &efd, sizeof efd);
    }
    return (int)sendmsg(fd, &m, MSG_NOSIGNAL);
}

/* The zygote: reads start requests from fd, forks one actor per request; never returns. */
static __attribute__((noreturn)) void zygote_main(int fd)
{
    actor_env env = {.keep_err = -1};
    const char *s;
    env.head = getenv("CT_HEAD");
    env.node_id = getenv("CT_NODE_ID");
    env.host = getenv("CT_NODE_HOST");
    s = getenv("CT_NODE_PID");
    env.node_pid = s ? atoi(s) : getppid();
    if (!env.head || !env.node_id || !env.host) {
        fprintf(stderr, "zygote: CT_HEAD, CT_NODE_ID or CT_NODE_HOST is not set\n");
        _exit(2);
    }
    /* `ps -o comm` (and top, pgrep) tell it from the program it runs and from its actors. The
     * argv area stays the program's: its code may keep pointers into it. */
    prctl(PR_SET_NAME, "ct-zygote");
    /* private copies: the environment is cleaned for the actors' own children */
    char head[160], node_id[40], host[80];
    snprintf(head, sizeof head, "%s", env.head);
    snprintf(node_id, sizeof node_id, "%s", env.node_id);
    snprintf(host, sizeof host, "%s", env.host);
    env.head = head;
    env.node_id = node_id;
    env.host = host;
    unsetenv("CT_MODE");
    unsetenv("CT_ZYGOTE_FD");
    unsetenv("CT_HEAD");
    unsetenv("CT_NODE_HOST");
    unsetenv("CT_NODE_PID");
    /* set by the node for the zygote only (node.c), not for what actors exec */
    const char *bn = getenv("CT_ZYGOTE_BIND_NOW");
    if (bn && *bn == '1')
        unsetenv("LD_BIND_NOW");
    unsetenv("CT_ZYGOTE_BIND_NOW");
    ct__log_set_who("zygote");
    /* the cluster secret, from the node's pipe (node.c); the actors forked from here share it */
    const char *sfd = getenv("CT_SECRET_FD");
    if (!ct__auth_off() && (!sfd || ct__auth_load_fd(atoi(sfd)))) {
        CT_LOG(CT_LOG_ERROR, "zygote", "no cluster secret from the node: %s", ct_last_error());
        _exit(2);
    }
    unsetenv("CT_SECRET_FD");
    size_t cap = sizeof(ct__zreq) + CT_ZYGOTE_MAX_ARGS;
    char *buf = malloc(cap);
    if (!buf)
        _exit(2);
    /* Serving: stderr back from the node's pipe (node.c read_err, which quotes the end of what
     * came before in a start failure) to the node's own. The actors inherit that one. */
    const char *efd = getenv("CT_STDERR_FD");
    if (efd && atoi(efd) > STDERR_FILENO) {
        dup2(atoi(efd), STDERR_FILENO);
        close(atoi(efd));
    }
    unsetenv("CT_STDERR_FD");
    for (;;) {
        ssize_t n = recv(fd, buf, cap, 0);
        if (n == 0)
            _exit(0); /* the node closed its end */
        if (n < 0) {
            if (errno == EINTR)
                continue;
            _exit(2);
        }
        if ((size_t)n < sizeof(ct__zreq))
            continue;
        ct__zreq *r = (ct__zreq *)buf;
        r->actor_id[sizeof r->actor_id - 1] = 0;
        r->cls[sizeof r->cls - 1] = 0;
        r->cuda_devices[sizeof r->cuda_devices - 1] = 0;
        if (r->args_len > (size_t)n - sizeof *r)
            continue;
        ct__zrep rep;
        memset(&rep, 0, sizeof rep);
        memcpy(rep.actor_id, r->actor_id, sizeof rep.actor_id);
        rep.kind = CT_ZREP_SPAWNED;
        /* The actor's listener is made here, before the fork: the zygote then knows the
         * address, and for a class without create the SPAWNED record (pid + address) is also
         * its readiness, which spares the actor a record and the node a wake-up. */
        const ct_actor_class *cls = ct__class_find(r->cls);
        ct__zmtp *z = NULL;
        char ep[200] = "";
        if (cls && ct__zmtp_listen(env.host, ep, sizeof ep, &z))
            z = NULL; /* the actor tries again and reports why it cannot */
        bool announce = z && !cls->create && strlen(ep) < sizeof rep.text;
        /* the user's create runs before the actor serves: its stderr goes to a memfd the node
         * gets too, so that a death there is reported with its last lines (node.c) */
        int efd = cls && cls->create ? memfd_create("ct-actor-stderr", MFD_CLOEXEC) : -1;
        /* CLONE_PARENT: the actor is the node's child, not ours, so the node reaps it and its
         * PDEATHSIG follows the node; one fork instead of a double fork. The zygote is
         * single-threaded, so skipping glibc's fork handlers is safe. */
        pid_t pid = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, 0);
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != env.node_pid)
                _exit(1);
            prctl(PR_SET_NAME, "ct-actor");
            /* before any of the actor's code: CUDA reads it once, when it initializes (a
             * zygote that initialized CUDA before the fork could not hand it on anyway) */
            setenv("CUDA_VISIBLE_DEVICES", r->cuda_devices, 1);
            env.fd = fd;
            env.keep_err = -1;
            if (efd >= 0) {
                env.keep_err = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
                if (env.keep_err >= 0)
                    dup2(efd, STDERR_FILENO);
                close(efd);
            }
            actor_main(&env, r->actor_id, r->cls, buf + sizeof *r, r->args_len, z, ep, announce);
        }
        ct__zmtp_destroy(&z); /* the actor has its own copy of the listener */
        rep.pid = pid > 0 ? pid : CT_EIO;
        if (pid > 0 && announce)
            memcpy(rep.text, ep, strlen(ep) + 1);
        int sent = send_rep(fd, &rep, pid > 0 ? efd : -1);
        if (efd >= 0)
            close(efd);
        if (sent < 0)
            _exit(0);
    }
}

void ct_serve_if_worker(void)
{
    const char *mode = getenv("CT_MODE");
    if (!mode || strcmp(mode, "zygote")) {
        ct__registration_close();
        return;
    }
    const char *fd = getenv("CT_ZYGOTE_FD");
    zygote_main(fd ? atoi(fd) : -1);
}
