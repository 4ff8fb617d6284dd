/* actor/node_start.c — starting actors: StartActor from the head, the start queue, and the
 * zygotes' records of each start (spawned, ready, failed).
 *
 * Creation is the hot path (thousands of actors at once): a new executable gets one zygote per
 * CPU (at most 4) at once, so bursts fork on every core; start requests wait in a FIFO and go to
 * the least busy zygote, at most ZYG_INFLIGHT each, never blocking on its socket (a node blocked
 * there deadlocked with a zygote blocked sending back, and missed its heartbeats). The floor
 * under all this is fork itself (page tables and VMAs of every mapped library:
 * bench/actor_calls/fork_floor.c). Actors report ready/failed over the zygote's socketpair and
 * the node forwards that to the head (so an actor needs no head connection to start).
 *
 * Not in here: the zygote processes (node_zygote.c), the actor table (node_actors.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "actor/node_shared.h"
#include "common/fault.h"

/* Drops the oldest queued request. */
static void qreq_pop(nodest *n)
{
    free(n->q[n->qh].buf);
    free(n->q[n->qh].key);
    if (++n->qh == n->qn)
        n->qh = n->qn = 0;
}

/* Oldest first, each to the least busy zygote of its executable while one has fewer than
 * ZYG_INFLIGHT outstanding and its socket takes it without blocking. A request whose executable
 * has no zygote left fails. */
void ct__node_feed_zygotes(nodest *n)
{
    while (n->qh < n->qn) {
        qreq *qr = &n->q[n->qh];
        int ai = ct__node_actor_find(n, qr->id);
        if (ai < 0) { /* gone meanwhile */
            qreq_pop(n);
            continue;
        }
        int zi = -1;
        for (int i = 0; i < n->nz; i++)
            if (n->z[i].keylen == qr->keylen && !memcmp(n->z[i].key, qr->key, qr->keylen) &&
                (zi < 0 || n->z[i].outstanding < n->z[zi].outstanding))
                zi = i;
        if (zi < 0) {
            ct__node_report_start_failed(n, qr->id, "the zygote process died", false);
            ct__node_actor_remove(n, ai);
            qreq_pop(n);
            continue;
        }
        zygote *z = &n->z[zi];
        if (z->outstanding >= ZYG_INFLIGHT)
            return; /* its SPAWNED records call again */
        ssize_t w = send(z->fd, qr->buf, qr->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return; /* its SPAWNED records, or the next turn of the loop, call again */
        /* it died: its end (ct__node_zygote_gone) fails or moves what waits, saying why */
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
            return;
        if (w != (ssize_t)qr->len) {
            char why[200];
            snprintf(why, sizeof why, "node: zygote %d: %s", (int)z->pid,
                     w < 0 ? strerror(errno) : "short send");
            ct__node_report_start_failed(n, qr->id, why, false);
            ct__node_actor_remove(n, ai);
            qreq_pop(n);
            continue;
        }
        z->outstanding++;
        z->last_used = ct__now_ms();
        n->a[ai].zyg_pid = z->pid;
        qreq_pop(n);
    }
}

void ct__node_drop_starts(nodest *n)
{
    while (n->qh < n->qn)
        qreq_pop(n);
}

/* Refused (StartFailed) when the ids or the arguments do not fit a start request (ct__zreq). */
bool ct__node_check_start_actor(nodest *n, const Ct__Envelope *e)
{
    const Ct__StartActor *s = e->start_actor;
    char why[512];
    if (!s->actor_id || strlen(s->actor_id) >= 32 || !s->class_name || strlen(s->class_name) >= 64)
        ct__error(CT_EINVAL, "start_actor: bad actor_id or class_name");
    else if (s->args.len > CT_ZYGOTE_MAX_ARGS)
        ct__error(CT_EINVAL, "start_actor.args: %zu bytes, at most %d", s->args.len,
                  CT_ZYGOTE_MAX_ARGS);
    else
        return true;
    snprintf(why, sizeof why, "%s", ct_last_error());
    ct__node_report_start_failed(n, s->actor_id ? s->actor_id : "", why, false);
    return false;
}

/* A zygote for key: the least busy one of this executable; another one (up to one per CPU, at
 * most 4) when all are busy, so that bursts of creations fork in parallel. Its index, or the
 * error of the spawn when there was none. */
static int find_zygote(nodest *n, Ct__StartActor *s, const char *exe, int exe_fd, const char *key,
                       size_t kl)
{
    int zi = -1, same = 0;
    for (int i = 0; i < n->nz; i++)
        if (n->z[i].keylen == kl && !memcmp(n->z[i].key, key, kl)) {
            same++;
            if (zi < 0 || n->z[i].outstanding < n->z[zi].outstanding)
                zi = i;
        }
    /* sysconf reads /sys on every call: once per node */
    static long ncpu;
    if (!ncpu)
        ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int max_same = ncpu < 1 ? 1 : ncpu > 4 ? 4 : (int)ncpu;
    if (zi < 0 || (n->z[zi].outstanding > 0 && same < max_same && n->nz < n->max_zyg)) {
        int nzi = ct__node_zygote_spawn(n, s, exe, exe_fd, key, kl, zi < 0);
        if (nzi >= 0)
            zi = nzi;
        else if (zi < 0)
            return nzi;
        /* a new executable: its sibling zygotes start now, while this one is loading, so that
         * a burst of creations does not pay for their exec and dynamic linking */
        for (same++; same < max_same && n->nz < n->max_zyg; same++)
            if (ct__node_zygote_spawn(n, s, exe, exe_fd, key, kl, false) < 0)
                break;
    }
    return zi;
}

/* Queues s's start request for a zygote of key; *req: the request (its cuda_devices still to
 * fill). 0 or CT_ENOMEM. */
static int queue_push(nodest *n, const Ct__StartActor *s, const char *key, size_t kl,
                      ct__zreq **req)
{
    if (n->qn == n->qcap && n->qh > 0) { /* compact before growing */
        memmove(n->q, n->q + n->qh, (n->qn - n->qh) * sizeof *n->q);
        n->qn -= n->qh;
        n->qh = 0;
    }
    qreq *q = n->qn < n->qcap ? n->q : ct__node_grow(n->q, &n->qcap, sizeof *q, 64);
    if (!q)
        return CT_ENOMEM;
    n->q = q;
    size_t len = sizeof(ct__zreq) + s->args.len;
    char *buf = malloc(len);
    char *kcopy = malloc(kl);
    if (!buf || !kcopy) {
        free(buf);
        free(kcopy);
        return ct__error(CT_ENOMEM, "node: out of memory");
    }
    ct__zreq *r = (ct__zreq *)buf;
    memset(r, 0, sizeof *r);
    snprintf(r->actor_id, sizeof r->actor_id, "%s", s->actor_id);
    snprintf(r->cls, sizeof r->cls, "%s", s->class_name);
    r->args_len = (unsigned)s->args.len;
    if (s->args.len)
        memcpy(buf + sizeof *r, s->args.data, s->args.len);
    memcpy(kcopy, key, kl);
    qreq *qr = &n->q[n->qn++];
    qr->buf = buf;
    qr->len = len;
    qr->key = kcopy;
    qr->keylen = kl;
    snprintf(qr->id, sizeof qr->id, "%s", s->actor_id);
    *req = r;
    return 0;
}

/* The executable (the cached copy of a shipped one) and its zygote, then the request queued and
 * the actor in the table; a failure is told to the head (StartFailed). */
void ct__node_on_start_actor(nodest *n, Ct__Envelope *e)
{
    Ct__StartActor *s = e->start_actor;
    char key[4096];
    size_t kl = 0;
    int rc = 0;
    bool permanent = false; /* the executable cannot run here */
    char why[512];
    char cached[512];
    const char *exe = s->exe_path ? s->exe_path : "";
    int exe_fd = -1; /* code shipping: the cached copy, checked, that the zygotes exec */
    /* Test hook: a main loop busy this long per start (as a slow code fetch would keep it);
     * the liveness thread must keep the node alive meanwhile. */
    long stall_ms = ct__fault_num(CT__FAULT_NODE_START_STALL_MS);
    if (stall_ms > 0)
        usleep((useconds_t)stall_ms * 1000);
    if (s->exe_object_id.len) {
        /* code shipping: run the node's cached copy of the driver's executable */
        rc = n->detached
                 ? ct__error(CT_EPROTO, "node: no code shipping in a detached node")
                 : ct__objnode_exe(s->exe_object_id.data, s->exe_object_id.len, s->exe_holders,
                                   s->n_exe_holders, cached, sizeof cached, &exe_fd);
        if (!rc)
            exe = cached;
        else if (rc != CT_EPROTO && access(exe, X_OK) == 0) /* e.g. every holder died */
            CT_LOG(CT_LOG_WARN, "node", "shipped executable unavailable (%s); running %s",
                   ct_last_error(), exe);
        else
            goto fail;
        rc = 0;
    }
    /* the job token first (a long argv may be cut off the key): jobs never share a zygote */
    kl += snprintf(key, sizeof key, "%s", s->job_token ? s->job_token : "") + 1;
    kl += snprintf(key + kl, sizeof key - kl, "%s", exe) + 1;
    for (size_t i = 0; i < s->n_argv && kl < sizeof key; i++)
        kl += snprintf(key + kl, sizeof key - kl, "%s", s->argv[i]) + 1;
    if (kl > sizeof key)
        kl = sizeof key;
    if ((rc = find_zygote(n, s, exe, exe_fd, key, kl)) < 0) {
        permanent = rc == CT_ENOENT; /* ct__node_zygote_spawn's access(exe, X_OK) */
        goto fail;
    }
    ct__zreq *r = NULL;
    if ((rc = ct__node_actor_room(n)) || (rc = queue_push(n, s, key, kl, &r)))
        goto fail;
    nactor *a = ct__node_actor_add(n, s);
    ct__node_gpu_take(n, a, s->gpus, r->cuda_devices, sizeof r->cuda_devices);
    if (exe_fd >= 0)
        close(exe_fd);
    return;
fail:
    if (exe_fd >= 0)
        close(exe_fd);
    snprintf(why, sizeof why, "%s", ct_last_error());
    ct__node_report_start_failed(n, s->actor_id ? s->actor_id : "", why, permanent);
}

/* Receives one record from a zygote's socket; the descriptor that came with it (an actor's
 * stderr memfd) in *efd, -1 for none. */
static ssize_t recv_rep(int fd, ct__zrep *r, int *efd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } c;
    struct iovec io = {r, sizeof *r};
    struct msghdr m = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
    *efd = -1;
    ssize_t got = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    for (struct cmsghdr *h = got >= 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
            h->cmsg_len >= CMSG_LEN(sizeof(int)) && *efd < 0)
            memcpy(efd, CMSG_DATA(h), sizeof *efd);
    return got;
}

/* At most 256 records a turn (the loop comes back). Every end of its socketpair closed: the
 * zygote is exiting, and its status is taken now. */
void ct__node_zygote_records(nodest *n, int zi)
{
    for (int k = 0; k < 256; k++) {
        ct__zrep r;
        int efd;
        ssize_t got = recv_rep(n->z[zi].fd, &r, &efd);
        if (got != sizeof r && efd >= 0)
            close(efd);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
            /* every end of its socketpair closed: the zygote is exiting; its status, now */
            int st = -1;
            pid_t pid = n->z[zi].pid;
            if (!n->detached && pid > 0) {
                ct__node_kill_pid(n, pid);
                if (waitpid(pid, &st, 0) != pid)
                    st = -1;
            }
            ct__node_zygote_gone(n, zi, st);
            return;
        }
        if (got != sizeof r)
            return;
        n->z[zi].served = true;
        r.actor_id[sizeof r.actor_id - 1] = 0;
        r.text[sizeof r.text - 1] = 0;
        if (r.kind == CT_ZREP_SPAWNED && n->z[zi].outstanding > 0)
            n->z[zi].outstanding--;
        int i = ct__node_actor_find(n, r.actor_id);
        nactor *a = i >= 0 ? &n->a[i] : NULL;
        if (a && efd >= 0 && r.kind == CT_ZREP_SPAWNED && !a->reported && a->err_fd < 0 &&
            n->nerr_fds < MAX_ERR_FDS) {
            a->err_fd = efd; /* until it reports (READY or FAILED below) */
            n->nerr_fds++;
            efd = -1;
        }
        if (efd >= 0)
            close(efd);
        if (!a)
            continue;
        if (r.kind != CT_ZREP_SPAWNED && a->err_fd >= 0) {
            close(a->err_fd); /* it reported: its stderr is its own again (worker.c) */
            a->err_fd = -1;
            n->nerr_fds--;
        }
        if (r.kind == CT_ZREP_READY) {
            a->reported = true;
            ct__node_report_ready(n, a, &r);
        } else if (r.kind == CT_ZREP_FAILED) {
            a->reported = true;
            ct__node_report_start_failed(n, a->id, r.text, false);
            ct__node_gpu_give_back(n, a); /* the head frees them now too; the process only exits */
        } else if (r.pid <= 0) {
            ct__node_report_start_failed(n, a->id, "the zygote could not fork", false);
            ct__node_actor_remove(n, i);
            continue;
        } else if (r.text[0] && !a->reported) {
            /* SPAWNED with an address: a class without create serves as soon as it runs
             * (its listener was made by the zygote): this record is its readiness too */
            a->reported = true;
            ct__node_report_ready(n, a, &r);
        }
        ct__node_actor_pid(n, i, r.pid);
    }
}
