/* trainer/collective/tcp.c — the TCP ring among node leaders (every rank in the flat layout;
 * hier.c drives the leaders for the hierarchical allreduce through ct__tcp_step).
 *
 * Each leader listens on an ephemeral port, publishes "host:port" under <group>/tcp/<node>,
 * connects to the next node's leader and accepts the previous one (a hello carrying the group
 * hash and node index rejects strays). Sockets are non-blocking with TCP_NODELAY and 4 MiB
 * buffers; every transfer is one loop that sends to next and receives from prev at once,
 * sleeping in poll() (with the abort eventfd) only when neither can move, until the deadline.
 *
 * allreduce of (N-1) * bytes <= 64 KiB: ring allgather of the whole buffers, then each leader sums
 * them in node order (N-1 steps: one round trip for two nodes). Larger: ring reduce-scatter (N-1
 * steps; received bytes are added in as they arrive, so receiving and reducing overlap) then ring
 * allgather (N-1 steps), N = number of nodes, buffer split into N near-equal segments (any length
 * works; segments may be empty). reduce-scatter (ZeRO, one rank per node): the allreduce's
 * reduce-scatter, then one step hands each segment to its node, so the bits are the allreduce's.
 * allgatherv: the allgather's ring over per-rank blocks of any length. broadcast: a pipelined chain
 * from the root's node (each leader forwards bytes as they come). Not for ranks on the same node:
 * those use shm.c. */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/auth.h"
#include "common/common.h"
#include "common/fault.h"
#include "internal.h"
#include "common/env.h"

#define HELLO_MAGIC 0x63745243u /* "ctRC" */
#define SOCK_BUF (4 * 1024 * 1024)
#define REDUCE_GRAIN (64 * 1024) /* bytes received before adding them in */
#define STAGE (256 * 1024)       /* receive staging for reductions: stays in cache */
#define MAX_IOV 64

struct hello {
    uint32_t magic;
    int32_t node;
    uint64_t group_hash;
};

/* the ring's socket buffers: SOCK_BUF, or $CT_COLL_TCP_BUF_KB (0: the kernel's autotuning) */
static int sock_buf(void)
{
    const char *env = ct__env(CT__ENV_COLL_TCP_BUF_KB);
    return env ? atoi(env) * 1024 : SOCK_BUF;
}

/* an accepted link: as ct__tcp_connect sets a dialled one, and non-blocking (io_all polls) */
static void tune(int fd)
{
    int one = 1, sz = sock_buf();
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sz > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int ms_left(int64_t deadline)
{
    int64_t ms = (deadline - ct__now_ns() + 999999) / 1000000;
    return ms < 0 ? 0 : ms > 100 ? 100 : (int)ms;
}

/* Blocking-with-deadline exact read/write on a non-blocking socket (setup only). */
static int io_all(int fd, void *p, size_t n, int writing, int64_t deadline)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = writing ? send(fd, (char *)p + done, n - done, MSG_NOSIGNAL)
                            : recv(fd, (char *)p + done, n - done, 0);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k == 0)
            return CT_ECONNRESET;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
        if (ct__now_ns() >= deadline)
            return CT_ETIMEDOUT;
        struct pollfd pf = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        poll(&pf, 1, ms_left(deadline));
    }
    return 0;
}

/* The ring's own hello to next: which node and group this connection is. */
static int send_hello(ct_comm *c, const char *peer, int64_t deadline)
{
    struct hello h = {HELLO_MAGIC, c->node, c->group_hash};
    int rc = io_all(c->fd_next, &h, sizeof h, 1, deadline);
    if (rc < 0)
        ct__error(rc, "collective: hello to %s: %s", peer, ct_strerror(rc));
    return rc;
}

int ct__tcp_setup(ct_comm *c, const ct_rendezvous *rdv, const char *host, int64_t deadline)
{
    int rc = 0, lfd = -1;
    char key[512], addr[320], myhost[256], *peer = NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof sa;
    int n = c->nnodes, next = (c->node + 1) % n, prev = (c->node + n - 1) % n;

    if (host && *host)
        snprintf(myhost, sizeof myhost, "%s", host);
    else
        ct__listen_host(myhost, sizeof myhost);
    /* listen on the address peers are told, not on every interface */
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(myhost, NULL, &hints, &ai) || !ai)
        return ct__error(CT_EINVAL, "collective: host '%s' has no IPv4 address", myhost);
    sa.sin_addr = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
    freeaddrinfo(ai);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        return ct__error(-errno, "collective: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 64) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0) {
        rc = ct__error(-errno, "collective: listen: %s", strerror(errno));
        goto out;
    }
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    snprintf(addr, sizeof addr, "%s:%d", myhost, ntohs(sa.sin_port));
    snprintf(key, sizeof key, "%s/tcp/%d", c->group, c->node);
    if ((rc = rdv->put(rdv->ctx, key, addr, strlen(addr))) < 0)
        goto out;

    long delay_ms = ct__fault_num(CT__FAULT_COLL_CONNECT_DELAY_MS);
    if (delay_ms > 0)
        usleep((useconds_t)delay_ms * 1000);
    snprintf(key, sizeof key, "%s/tcp/%d", c->group, next);
    if ((rc = ct__rdv_get_str(rdv, key, &peer, deadline)) < 0) {
        ct__error(rc, "collective: rank %d waiting for key %s: %s", c->rank, key, ct_strerror(rc));
        goto out;
    }
    if ((rc = ct__tcp_connect(peer, sock_buf(), deadline, "collective", &c->fd_next)) < 0)
        goto out;
    fcntl(c->fd_next, F_SETFL, fcntl(c->fd_next, F_GETFL) | O_NONBLOCK);
    /* Both ends of each link prove that they hold the cluster secret (common/auth.h). Every
     * rank is the client of next and the server of prev, and the ring is a circle: so each step
     * only waits for what a peer sends without waiting itself. C1 to next now; then, per
     * accepted connection, C1 in and S1 out; S1 from next, C2 and the ring hello to next (once);
     * C2 and the ring hello from prev. */
    uint8_t c1[CT_AUTH_C1_LEN], cst[CT_AUTH_STATE_LEN];
    bool client_done = ct__auth_off();
    if (!client_done && ((rc = ct__auth_client_start(c1, cst)) ||
                         (rc = io_all(c->fd_next, c1, sizeof c1, 1, deadline)) < 0)) {
        ct__error(rc, "collective: handshake with %s: %s", peer, ct_strerror(rc));
        goto out;
    }
    if (client_done && (rc = send_hello(c, peer, deadline)) < 0)
        goto out;
    while (c->fd_prev < 0) {
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        if (ct__now_ns() >= deadline) {
            rc = ct__error(CT_ETIMEDOUT, "collective: rank %d: node %d's leader never connected",
                           c->rank, prev);
            goto out;
        }
        if (poll(&pf, 1, ms_left(deadline)) <= 0)
            continue;
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        tune(fd);
        struct hello in;
        int64_t hd =
            ct__now_ns() + 2000000000ll < deadline ? ct__now_ns() + 2000000000ll : deadline;
        uint8_t c1in[CT_AUTH_C1_LEN], s1out[CT_AUTH_S1_LEN], sst[CT_AUTH_STATE_LEN];
        if (!ct__auth_off() &&
            (io_all(fd, c1in, sizeof c1in, 0, hd) || ct__auth_server_answer(c1in, s1out, sst) ||
             io_all(fd, s1out, sizeof s1out, 1, hd))) {
            CT_LOG(CT_LOG_WARN, "collective",
                   "rank %d: refused a connection that failed the "
                   "handshake",
                   c->rank);
            close(fd);
            continue;
        }
        if (!client_done) {
            uint8_t s1[CT_AUTH_S1_LEN], c2[CT_AUTH_C2_LEN];
            if ((rc = io_all(c->fd_next, s1, sizeof s1, 0, deadline)) < 0 ||
                (rc = ct__auth_client_finish(cst, s1, c2)) ||
                (rc = io_all(c->fd_next, c2, sizeof c2, 1, deadline)) < 0) {
                ct__error(rc,
                          "collective: rank %d: %s failed the handshake (%s): not this "
                          "cluster's secret?",
                          c->rank, peer, ct_strerror(rc));
                close(fd);
                goto out;
            }
            client_done = true;
            if ((rc = send_hello(c, peer, deadline)) < 0) {
                close(fd);
                goto out;
            }
        }
        uint8_t c2in[CT_AUTH_C2_LEN];
        if (!ct__auth_off() &&
            (io_all(fd, c2in, sizeof c2in, 0, hd) || ct__auth_server_check(sst, c2in))) {
            CT_LOG(CT_LOG_WARN, "collective",
                   "rank %d: refused a peer without this cluster's "
                   "secret",
                   c->rank);
            close(fd);
            continue;
        }
        if (io_all(fd, &in, sizeof in, 0, hd) == 0 && in.magic == HELLO_MAGIC &&
            in.group_hash == c->group_hash && in.node == prev) {
            c->fd_prev = fd;
        } else {
            CT_LOG(CT_LOG_WARN, "collective", "rank %d: refused a stray connection", c->rank);
            close(fd);
        }
    }
out:
    if (lfd >= 0)
        close(lfd);
    free(peer);
    return rc;
}

void ct__tcp_destroy(ct_comm *c)
{
    if (c->fd_next >= 0)
        close(c->fd_next);
    if (c->fd_prev >= 0)
        close(c->fd_prev);
    c->fd_next = c->fd_prev = -1;
}

/* One transfer step: send siov (to next) while receiving riov (from prev).
 * fwd: send no further than received so far (siov and riov describe the same bytes).
 * red: instead of riov, red_len bytes are received into the small staging buffer c->tmp
 *      (STAGE bytes, stays in cache) and added into red as they arrive. */
struct xfer {
    const struct iovec *siov, *riov;
    int sn, rn;
    int fwd;
    float *red;
    size_t red_len;
};

static size_t iov_total(const struct iovec *v, int n)
{
    size_t t = 0;
    for (int i = 0; i < n; i++)
        t += v[i].iov_len;
    return t;
}

/* the part of v from byte off to byte end, as at most MAX_IOV entries in out */
static int iov_window(const struct iovec *v, int n, size_t off, size_t end, struct iovec *out)
{
    int k = 0;
    size_t pos = 0;
    for (int i = 0; i < n && k < MAX_IOV && pos < end; i++) {
        size_t a = pos, b = pos + v[i].iov_len;
        pos = b;
        if (b <= off)
            continue;
        size_t s = off > a ? off - a : 0;
        size_t e = (end < b ? end : b) - a;
        if (e > s) {
            out[k].iov_base = (char *)v[i].iov_base + s;
            out[k].iov_len = e - s;
            k++;
        }
    }
    return k;
}

static int peer_error(ct_comm *c, const char *what, int err)
{
    int st = ct__comm_aborted(c);
    if (st)
        return ct__error(st, "collective: rank %d: %s", c->rank,
                         st == CT_ECANCELED ? "aborted" : "failed");
    return ct__error(CT_ECONNRESET, "collective: rank %d: %s %s node: %s", c->rank, what,
                     what[0] == 's' ? "next" : "previous", err ? strerror(err) : "closed");
}

static int run_xfer(ct_comm *c, const struct xfer *x, int64_t deadline)
{
    size_t slen = iov_total(x->siov, x->sn);
    size_t rlen = x->red ? x->red_len : iov_total(x->riov, x->rn);
    size_t sdone = 0, rdone = 0, red_done = 0;
    char *stage = (char *)c->tmp;
    struct iovec w[MAX_IOV];
    while (sdone < slen || rdone < rlen) {
        int progress = 0;
        size_t limit = x->fwd ? rdone : slen;
        if (sdone < limit) {
            struct msghdr m = {.msg_iov = w};
            m.msg_iovlen = (size_t)iov_window(x->siov, x->sn, sdone, limit, w);
            ssize_t k = sendmsg(c->fd_next, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k > 0) {
                sdone += (size_t)k;
                progress = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                return peer_error(c, "send to", errno);
            }
        }
        if (rdone < rlen) {
            struct msghdr m = {.msg_iov = w};
            if (x->red) { /* into the stage, after what is waiting to be added */
                size_t used = rdone - red_done, room = STAGE - used;
                w[0].iov_base = stage + used;
                w[0].iov_len = rlen - rdone < room ? rlen - rdone : room;
                m.msg_iovlen = 1;
            } else {
                m.msg_iovlen = (size_t)iov_window(x->riov, x->rn, rdone, rlen, w);
            }
            ssize_t k = recvmsg(c->fd_prev, &m, MSG_DONTWAIT);
            if (k > 0) {
                rdone += (size_t)k;
                progress = 1;
            } else if (k == 0) {
                return peer_error(c, "receive from", 0);
            } else if (errno != EAGAIN && errno != EINTR) {
                return peer_error(c, "receive from", errno);
            }
            if (x->red) {
                size_t used = rdone - red_done, whole = used / sizeof(float) * sizeof(float);
                if (whole >= REDUCE_GRAIN || rdone == rlen || used == STAGE) {
                    ct__reduce_add(x->red + red_done / sizeof(float), (const float *)stage,
                                   whole / sizeof(float));
                    red_done += whole;
                    if (used > whole) /* a float split across two reads */
                        memmove(stage, stage + whole, used - whole);
                }
            }
        }
        if (progress)
            continue;
        int st = ct__comm_aborted(c);
        if (st)
            return ct__error(st, "collective: rank %d: %s", c->rank,
                             st == CT_ECANCELED ? "aborted" : "failed");
        if (ct__now_ns() >= deadline)
            return ct__error(CT_ETIMEDOUT,
                             "collective: rank %d: TCP step timed out (sent "
                             "%zu/%zu, received %zu/%zu bytes)",
                             c->rank, sdone, slen, rdone, rlen);
        struct pollfd pf[3];
        int np = 0;
        pf[np++] = (struct pollfd){.fd = c->abort_fd, .events = POLLIN};
        if (sdone < limit)
            pf[np++] = (struct pollfd){.fd = c->fd_next, .events = POLLOUT};
        if (rdone < rlen)
            pf[np++] = (struct pollfd){.fd = c->fd_prev, .events = POLLIN};
        poll(pf, (nfds_t)np, ms_left(deadline));
    }
    return 0;
}

int ct__tcp_step(ct_comm *c, const struct iovec *send, int sn, void *recv, size_t rbytes,
                 int64_t deadline)
{
    struct iovec rv = {recv, rbytes};
    struct xfer x = {.siov = send, .sn = sn, .riov = &rv, .rn = 1};
    return run_xfer(c, &x, deadline);
}

static int ensure_tmp(ct_comm *c, size_t n)
{
    if (c->tmp_cap >= n)
        return 0;
    float *t = realloc(c->tmp, n * sizeof(float));
    if (!t)
        return ct__error(CT_ENOMEM, "collective: %zu-float staging buffer", n);
    c->tmp = t;
    c->tmp_cap = n;
    return 0;
}

/* segment i of the ring: the chunk (ct_comm_chunk) of member i's rank. The allreduce and the
 * reduce-scatter run here only when every node has one rank (one rank per node, or flat), so
 * the ring's members are ranks, in node order (comm.c's choose_layout). */
static void seg(const ct_comm *c, size_t count, int i, size_t *off, size_t *len)
{
    ct_comm_chunk(count, c->world, c->leader_of[i], off, len);
}

/* Small messages: a ring allgather of the whole buffers (N-1 steps instead of 2(N-1): one
 * round trip for two nodes), then every leader sums the N copies in node order itself, so all
 * get identical bits. */
static int small_allreduce(ct_comm *c, float *buf, size_t count, float div, int64_t deadline)
{
    int n = c->nnodes, j = c->node, rc;
    if ((rc = ensure_tmp(c, count * (size_t)n)) < 0)
        return rc;
    const float *srcs[n];
    for (int i = 0; i < n; i++)
        srcs[i] = c->tmp + (size_t)i * count;
    memcpy(c->tmp + (size_t)j * count, buf, count * sizeof(float));
    for (int s = 0; s < n - 1; s++) {
        int sb = (j - s + n) % n, rb = (j - s - 1 + n) % n;
        struct iovec sv = {(void *)srcs[sb], count * sizeof(float)};
        struct iovec rv = {(void *)srcs[rb], count * sizeof(float)};
        struct xfer x = {.siov = &sv, .sn = 1, .riov = &rv, .rn = 1};
        if ((rc = run_xfer(c, &x, deadline)) < 0)
            return rc;
    }
    ct__reduce_sum(buf, srcs, n, count, div);
    return 0;
}

/* The ring's reduce-scatter: N-1 steps, after which node j holds segment j + 1 reduced and
 * divided by div (what both the allreduce and the reduce-scatter start with). */
static int ring_reduce_scatter(ct_comm *c, float *buf, size_t count, float div, int64_t deadline)
{
    int n = c->nnodes, j = c->node, rc;
    size_t so, sl, ro, rl;
    if ((rc = ensure_tmp(c, STAGE / sizeof(float))) < 0)
        return rc;
    for (int s = 0; s < n - 1; s++) {
        seg(c, count, (j - s + n) % n, &so, &sl);
        seg(c, count, (j - s - 1 + 2 * n) % n, &ro, &rl);
        struct iovec sv = {buf + so, sl * sizeof(float)};
        struct xfer x = {.siov = &sv, .sn = 1, .red = buf + ro, .red_len = rl * sizeof(float)};
        if ((rc = run_xfer(c, &x, deadline)) < 0)
            return rc;
    }
    if (div != 1.0f) {
        seg(c, count, (j + 1) % n, &so, &sl);
        ct__divide(buf + so, sl, div);
    }
    return 0;
}

int ct__tcp_reduce_scatter(ct_comm *c, float *buf, size_t count, float div, int64_t deadline)
{
    int n = c->nnodes, j = c->node, rc;
    size_t so, sl, ro, rl;
    if (count * sizeof(float) * (size_t)(n - 1) <=
        CT__TCP_SMALL_BYTES) /* as the allreduce decides */
        return small_allreduce(c, buf, count, div, deadline);
    if ((rc = ring_reduce_scatter(c, buf, count, div, deadline)) < 0)
        return rc;
    seg(c, count, (j + 1) % n, &so, &sl); /* mine is at node j - 1: one more step */
    seg(c, count, j, &ro, &rl);
    struct iovec sv = {buf + so, sl * sizeof(float)}, rv = {buf + ro, rl * sizeof(float)};
    struct xfer x = {.siov = &sv, .sn = 1, .riov = &rv, .rn = 1};
    return run_xfer(c, &x, deadline);
}

int ct__tcp_allreduce(ct_comm *c, float *buf, size_t count, float div, int64_t deadline)
{
    int n = c->nnodes, j = c->node, rc;
    size_t so, sl, ro, rl;
    if (count * sizeof(float) * (size_t)(n - 1) <= CT__TCP_SMALL_BYTES) /* bytes sent per leader */
        return small_allreduce(c, buf, count, div, deadline);
    if ((rc = ring_reduce_scatter(c, buf, count, div, deadline)) < 0)
        return rc;
    for (int s = 0; s < n - 1; s++) {
        seg(c, count, (j + 1 - s + n) % n, &so, &sl);
        seg(c, count, (j - s + n) % n, &ro, &rl);
        struct iovec sv = {buf + so, sl * sizeof(float)}, rv = {buf + ro, rl * sizeof(float)};
        struct xfer x = {.siov = &sv, .sn = 1, .riov = &rv, .rn = 1};
        if ((rc = run_xfer(c, &x, deadline)) < 0)
            return rc;
    }
    return 0;
}

int ct__tcp_broadcast(ct_comm *c, void *buf, size_t bytes, int root_node, int64_t deadline)
{
    int n = c->nnodes, p = (c->node - root_node + n) % n;
    struct iovec v = {buf, bytes};
    struct xfer x = {.siov = &v, .riov = &v, .fwd = 1};
    x.sn = p < n - 1;
    x.rn = p > 0;
    if (p == 0)
        x.fwd = 0;
    return run_xfer(c, &x, deadline);
}

int ct__tcp_allgatherv(ct_comm *c, void *buf, const size_t *off, const size_t *len,
                       int64_t deadline)
{
    int n = c->nnodes, j = c->node, rc = 0;
    struct iovec *sv = malloc(sizeof *sv * (size_t)c->world);
    struct iovec *rv = malloc(sizeof *rv * (size_t)c->world);
    if (!sv || !rv) {
        rc = ct__error(CT_ENOMEM, "collective: iovecs");
        goto out;
    }
    for (int s = 0; s < n - 1 && rc == 0; s++) {
        int sg = (j - s + n) % n, rg = (j - s - 1 + n) % n, ns = 0, nr = 0;
        for (int r = 0; r < c->world; r++) {
            struct iovec v = {(char *)buf + off[r], len[r]};
            if (c->node_of[r] == sg)
                sv[ns++] = v;
            if (c->node_of[r] == rg)
                rv[nr++] = v;
        }
        struct xfer x = {.siov = sv, .sn = ns, .riov = rv, .rn = nr};
        rc = run_xfer(c, &x, deadline);
    }
out:
    free(sv);
    free(rv);
    return rc;
}

int ct__tcp_allgather(ct_comm *c, void *recv, size_t bytes, int64_t deadline)
{
    size_t *off = malloc(sizeof *off * 2 * (size_t)c->world);
    if (!off)
        return ct__error(CT_ENOMEM, "collective: allgather blocks");
    size_t *len = off + c->world;
    for (int r = 0; r < c->world; r++) {
        off[r] = (size_t)r * bytes;
        len[r] = bytes;
    }
    int rc = ct__tcp_allgatherv(c, recv, off, len, deadline);
    free(off);
    return rc;
}
