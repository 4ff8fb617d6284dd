/* objectstore/xfer_data.c — the transfer server's plain-TCP data port (wire in xfer_data.h):
 * a listening socket polled by the transfer server's thread, one thread per connection that
 * serves chunk requests in order straight from the pinned arena, and the puller's connect.
 *
 * Per request the connection thread pins the object (ct_store_get), sends the reply header,
 * computes the chunk's CRC-32C and sendfile()s it from the arena's shm file in one call (pages
 * go by reference; a spilled object, mapped from its file, is send()'t by 256 KiB pieces
 * instead, each checksummed just before; CT_XFER_NO_SENDFILE=1 forces send()), then the
 * trailer. The pin is kept until the socket's queue no longer holds the chunk's bytes
 * (SIOCOUTQ), so they cannot change while the kernel still reads them. A peer that vanishes makes
 * the send fail (EPIPE; SIGPIPE is blocked in these threads) and the thread ends, dropping its
 * pins.
 *
 * Uploads (CT_XD_FLAG_PUT, serve_put) are received on the same connection threads straight
 * into an unsealed object, checked per chunk and sealed; ct_xfer_push is their client.
 *
 * Not here: the puller's receive loop (transfer.c) and the ZeroMQ control requests. */
#define _GNU_SOURCE
#include "objectstore/xfer_data.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/common.h"
#include "common/env.h"
#include "common/fault.h"
#include "objectstore/crc32c.h"

#define IDLE_MS 60000 /* a connection with no request for this long is closed */
#define AUTH_MS 10000 /* a new connection's challenge-response must be done by then */

typedef struct dconn {
    struct ct__xdata_server *xs;
    int fd;
    pthread_t th;
    int done; /* __atomic: the thread has finished; join and close */
    struct dconn *next;
} dconn;

struct ct__xdata_server {
    ct_store *store;
    int lfd;
    uint16_t port;
    int delay_ms;
    int no_sendfile; /* CT_XFER_NO_SENDFILE set: copy with send() instead */
    char sender[128];
    ct_xfer_server_stats *st;
    pthread_mutex_t mu;
    dconn *conns; /* guarded by mu */
    int nconns;
};

static void stat_add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

/* Splits "tcp://HOST:PORT" (HOST may be "[v6]") into host (no brackets). 0 or CT_EINVAL. */
static int endpoint_host(const char *ep, char *host, size_t hostlen)
{
    if (!ep || strncmp(ep, "tcp://", 6))
        return CT_EINVAL;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || colon == h)
        return CT_EINVAL;
    size_t n = (size_t)(colon - h);
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n + 1 > hostlen)
        return CT_EINVAL;
    memcpy(host, h, n);
    host[n] = 0;
    if (!strcmp(host, "*"))
        snprintf(host, hostlen, "0.0.0.0");
    return 0;
}

int ct__xdata_send_all(int fd, const void *buf, size_t n, int more)
{
    return ct__send_all(fd, buf, n, more ? MSG_MORE : 0, 0) ? CT_EIO : 0;
}

int ct__xdata_recv_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t k = recv(fd, p, n, MSG_WAITALL);
        if (k == 0)
            return CT_EIO;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? CT_ETIMEDOUT : CT_EIO;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_status(int fd, int status, uint64_t off, uint64_t size, uint64_t osize)
{
    ct_xd_rep r = {CT_XD_REP_MAGIC, status, off, size, osize};
    return ct__xdata_send_all(fd, &r, sizeof r, 0);
}

/* Chunks sent with sendfile() stay pinned until the socket has no unacknowledged bytes of
 * theirs: the kernel sends the arena's pages by reference, so the bytes must not change under
 * it (a delete + a new object in the same range would). Kept per connection, oldest first. */
#define MAX_HELD 32
typedef struct held {
    ct_store_view v[MAX_HELD];
    uint64_t end[MAX_HELD]; /* bytes written to the socket when the chunk's send finished */
    int n;
    uint64_t written; /* bytes written to the socket so far */
} held;

/* Releases the pins whose bytes have left the socket (all of them when force). */
static void held_release(ct__xdata_server *xs, int fd, held *h, int force)
{
    int outq = 0;
    if (!force && ioctl(fd, SIOCOUTQ, &outq) != 0)
        outq = 0;
    uint64_t gone = h->written - (uint64_t)outq;
    int k = 0;
    while (k < h->n && (force || h->end[k] <= gone))
        ct_store_release(xs->store, &h->v[k++]);
    memmove(h->v, h->v + k, (size_t)(h->n - k) * sizeof h->v[0]);
    memmove(h->end, h->end + k, (size_t)(h->n - k) * sizeof h->end[0]);
    h->n -= k;
}

static int sendfile_all(int fd, int in, uint64_t off, size_t n)
{
    off_t o = (off_t)off;
    while (n) {
        ssize_t k = sendfile(fd, in, &o, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        n -= (size_t)k;
    }
    return 0;
}

/* Receives an upload's chunks into buf (size bytes), each followed by its trailer, checking
 * CRC-32C per piece as it lands. 0, CT_EIO (the peer went away or stalled) or CT_EPROTO (a
 * checksum or trailer that does not match; *bad_off is the first such chunk's offset). After a
 * bad chunk the rest is still read (and dropped with the object), so that the client, still
 * sending, is not cut off by a reset and reads the refusal. */
static int recv_upload(int fd, unsigned char *buf, uint64_t size, uint64_t *bad_off)
{
    int rc = 0;
    for (uint64_t off = 0; off < size; off += CT_XFER_DEFAULT_CHUNK) {
        uint64_t len = size - off < CT_XFER_DEFAULT_CHUNK ? size - off : CT_XFER_DEFAULT_CHUNK;
        uint32_t crc = 0, end[2];
        for (uint64_t done = 0; done < len;) {
            size_t n = len - done < CT_XD_PIECE ? (size_t)(len - done) : CT_XD_PIECE;
            if (ct__xdata_recv_all(fd, buf + off + done, n))
                return CT_EIO;
            crc = ct__crc32c(crc, buf + off + done, n);
            done += n;
        }
        if (ct__xdata_recv_all(fd, end, sizeof end))
            return CT_EIO;
        if (!rc && (end[0] != crc || end[1] != CT_XD_END_MAGIC)) {
            *bad_off = off;
            rc = CT_EPROTO;
        }
    }
    return rc;
}

/* Serves an upload (CT_XD_FLAG_PUT): checks it, creates the object unsealed, answers "go",
 * receives and checks the bytes, seals (the shard's on_event hook then reports the node as a
 * holder to the head, as for any seal) and answers again. 0 to go on, -1 to close. */
static int serve_put(ct__xdata_server *xs, int fd, const ct_xd_req *rq)
{
    ct_object_id id;
    memcpy(id.b, rq->id, CT_OBJECT_ID_LEN);
    ct_store_stats ss;
    ct_store_get_stats(xs->store, &ss);
    uint64_t size = rq->size,
             limit = ss.memory_cap < CT_XFER_MAX_PUT ? ss.memory_cap : CT_XFER_MAX_PUT;
    int status = 0;
    void *buf = NULL;
    if (rq->offset)
        status = CT_EPROTO;
    else if (size > limit)
        status = CT_ENOSPC; /* the reply's object_size says the limit */
    else if (ct_store_contains(xs->store, &id))
        status = CT_EEXIST;
    else if ((status = ct_store_create(xs->store, &id, size, &buf)) == CT_EEXIST)
        status = CT_EBUSY; /* unsealed: another upload or pull of it is being written */
    if (status) {
        stat_add(&xs->st->errors, 1);
        send_status(fd, status, 0, size, limit);
        return status == CT_EEXIST ? 0 : -1;
    }
    if (send_status(fd, 0, 0, size, limit)) {
        ct_store_abort(xs->store, &id);
        return -1;
    }
    uint64_t bad = 0;
    int rc = recv_upload(fd, buf, size, &bad);
    if (!rc)
        rc = ct_store_seal(xs->store, &id);
    else
        ct_store_abort(xs->store, &id);
    if (rc) {
        stat_add(&xs->st->errors, 1);
        if (rc == CT_EPROTO)
            CT_LOG(CT_LOG_WARN, "xfer", "%s: upload: chunk at %llu failed its checksum", xs->sender,
                   (unsigned long long)bad);
        if (rc != CT_EIO)
            send_status(fd, rc, bad, size, limit);
        return -1;
    }
    stat_add(&xs->st->bytes_in, size);
    return send_status(fd, 0, 0, size, size) ? -1 : 0;
}

/* Serves one request. 0 to go on, -1 to close the connection. */
static int serve_req(ct__xdata_server *xs, int fd, const ct_xd_req *rq, held *h)
{
    stat_add(&xs->st->requests, 1);
    if (rq->magic == CT_XD_REQ_MAGIC && rq->flags == CT_XD_FLAG_PUT && !rq->pad)
        return serve_put(xs, fd, rq);
    if (rq->magic != CT_XD_REQ_MAGIC || rq->flags || rq->pad) {
        stat_add(&xs->st->errors, 1);
        send_status(fd, CT_EPROTO, 0, 0, 0);
        return -1;
    }
    ct_object_id id;
    memcpy(id.b, rq->id, CT_OBJECT_ID_LEN);
    ct_store_view v = {0};
    if (ct_store_get(xs->store, &id, &v)) {
        stat_add(&xs->st->errors, 1);
        send_status(fd, CT_ENOENT, rq->offset, 0, 0);
        return -1;
    }
    uint64_t off = rq->offset, len = rq->size, osize = v.size;
    int rc = -1, afd = -1;
    uint64_t aoff = 0;
    if (len > CT_XFER_MAX_CHUNK || off > osize || len > osize - off || (!len && osize)) {
        stat_add(&xs->st->errors, 1);
        send_status(fd, CT_ERANGE, off, len, osize);
        goto out;
    }
    if (xs->delay_ms)
        usleep((useconds_t)xs->delay_ms * 1000);
    if (send_status(fd, 0, off, len, osize))
        goto out;
    h->written += sizeof(ct_xd_rep);
    int use_file = len && !xs->no_sendfile && !ct__store_view_file(xs->store, &v, &afd, &aoff);
    const unsigned char *p = (const unsigned char *)v.data + (len ? off : 0);
    uint32_t crc = 0;
    /* sendfile() does not read the bytes in user space, so there is no cache to keep warm:
     * checksum the whole chunk, then hand it to the kernel in one call (fewer, larger
     * segments; measured 20-50% faster on loopback than 256 KiB pieces). send() goes by
     * pieces, each checksummed just before its copy. */
    size_t piece = use_file ? (size_t)len : CT_XD_PIECE;
    for (uint64_t done = 0; done < len;) {
        size_t n = len - done < piece ? (size_t)(len - done) : piece;
        crc = ct__crc32c(crc, p + done, n);
        if (use_file ? sendfile_all(fd, afd, aoff + off + done, n)
                     : ct__xdata_send_all(fd, p + done, n, 1))
            goto out;
        done += n;
    }
    uint32_t end[2] = {crc, CT_XD_END_MAGIC};
    if (ct__xdata_send_all(fd, end, sizeof end, 0))
        goto out;
    h->written += len + sizeof end;
    stat_add(&xs->st->chunks, 1);
    stat_add(&xs->st->bytes, len);
    rc = 0;
    if (use_file) {
        if (h->n == MAX_HELD)
            held_release(xs, fd, h, 1);
        h->v[h->n] = v;
        h->end[h->n++] = h->written;
        held_release(xs, fd, h, 0);
        return rc;
    }
out:
    ct_store_release(xs->store, &v);
    return rc;
}

int ct__xdata_serve_bytes(ct__xdata_server *xs, int fd, const uint8_t *data, size_t len)
{
    held h = {0};
    int rc = 0;
    for (size_t at = 0; len - at >= sizeof(ct_xd_req) && !rc; at += sizeof(ct_xd_req)) {
        ct_xd_req rq;
        memcpy(&rq, data + at, sizeof rq); /* the wire's bytes may be unaligned */
        if (serve_req(xs, fd, &rq, &h))
            rc = CT_EPROTO;
    }
    held_release(xs, fd, &h, 1);
    return rc;
}

static void *conn_thread(void *arg)
{
    dconn *c = arg;
    held h = {0};
    int idle = 0;
    ct__log_set_who(c->xs->sender);
    /* sendfile() has no MSG_NOSIGNAL: a reader that went away would raise SIGPIPE and kill
     * the node. Blocked here, it stays pending on this thread (dropped when it exits) and
     * sendfile() fails with EPIPE instead. */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    /* nothing is read from a peer that has not proved it holds the cluster secret */
    if (ct__auth_accept(c->fd, AUTH_MS)) {
        CT_LOG(CT_LOG_WARN, "xfer", "%s: data port: %s", c->xs->sender, ct_last_error());
        stat_add(&c->xs->st->errors, 1);
        goto out;
    }
    for (;;) {
        /* While pins wait for their bytes to leave, look again every millisecond. */
        struct pollfd pfd = {c->fd, POLLIN, 0};
        int r = poll(&pfd, 1, h.n ? 1 : IDLE_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || (r == 0 && !h.n) || (r == 0 && (idle += 1) >= IDLE_MS))
            break; /* idle or error */
        if (r == 0) {
            held_release(c->xs, c->fd, &h, 0);
            continue;
        }
        idle = 0;
        ct_xd_req rq;
        if (ct__xdata_recv_all(c->fd, &rq, sizeof rq))
            break; /* EOF, a cut connection, or a partial request that stalled */
        if (serve_req(c->xs, c->fd, &rq, &h))
            break;
    }
out:
    shutdown(c->fd, SHUT_RDWR);
    held_release(c->xs, c->fd, &h, 1); /* cut: whatever was queued is dropped */
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Joins and frees finished connections (all of them when all is set, after cutting them). */
static void reap(ct__xdata_server *xs, int all)
{
    pthread_mutex_lock(&xs->mu);
    if (all)
        for (dconn *c = xs->conns; c; c = c->next)
            shutdown(c->fd, SHUT_RDWR);
    dconn **pp = &xs->conns;
    while (*pp) {
        dconn *c = *pp;
        if (all || __atomic_load_n(&c->done, __ATOMIC_ACQUIRE)) {
            *pp = c->next;
            pthread_join(c->th, NULL);
            close(c->fd);
            free(c);
            xs->nconns--;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&xs->mu);
}

void ct__xdata_server_accept(ct__xdata_server *xs)
{
    if (!xs)
        return;
    reap(xs, 0);
    for (;;) {
        int fd = accept4(xs->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            break; /* EAGAIN (non-blocking listener) or a transient error */
        if (xs->nconns >= CT_XD_MAX_CONNS) {
            CT_LOG(CT_LOG_WARN, "xfer", "%s: %d data connections open, refusing one", xs->sender,
                   xs->nconns);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int bufsz = CT_XD_SOCKBUF;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
        /* A request must arrive whole within this time once it started; a reader that stops
         * reading makes send() give up after it too (the pin is then released). */
        struct timeval tv = {IDLE_MS / 1000, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        dconn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->xs = xs;
        c->fd = fd;
        pthread_mutex_lock(&xs->mu);
        if (pthread_create(&c->th, NULL, conn_thread, c) != 0) {
            pthread_mutex_unlock(&xs->mu);
            close(fd);
            free(c);
            continue;
        }
        c->next = xs->conns;
        xs->conns = c;
        xs->nconns++;
        pthread_mutex_unlock(&xs->mu);
    }
}

ct__xdata_server *ct__xdata_server_new(ct_store *store, const char *zmq_endpoint,
                                       const char *sender, int delay_ms,
                                       ct_xfer_server_stats *stats)
{
    char host[200];
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICHOST, .ai_socktype = SOCK_STREAM},
                    *ai = NULL;
    ct__xdata_server *xs = NULL;
    int fd = -1;
    if (endpoint_host(zmq_endpoint, host, sizeof host)) {
        CT_LOG(CT_LOG_WARN, "xfer", "%s: no data port for endpoint %s", sender, zmq_endpoint);
        return NULL;
    }
    int gai = getaddrinfo(host, "0", &hints, &ai);
    if (gai) {
        CT_LOG(CT_LOG_WARN, "xfer", "%s: no data port on %s: %s", sender, host, gai_strerror(gai));
        return NULL;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64) ||
        getsockname(fd, (struct sockaddr *)&sa, &salen)) {
        CT_LOG(CT_LOG_WARN, "xfer", "%s: no data port on %s: %s", sender, host, strerror(errno));
        goto err;
    }
    xs = calloc(1, sizeof *xs);
    if (!xs)
        goto err;
    xs->store = store;
    xs->lfd = fd;
    xs->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                              : ((struct sockaddr_in *)&sa)->sin_port);
    xs->delay_ms = delay_ms;
    xs->no_sendfile = ct__env(CT__ENV_XFER_NO_SENDFILE) != NULL;
    xs->st = stats;
    snprintf(xs->sender, sizeof xs->sender, "%s", sender);
    pthread_mutex_init(&xs->mu, NULL);
    freeaddrinfo(ai);
    return xs;
err:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return NULL;
}

int ct__xdata_server_fd(const ct__xdata_server *xs)
{
    return xs ? xs->lfd : -1;
}

uint16_t ct__xdata_server_port(const ct__xdata_server *xs)
{
    return xs ? xs->port : 0;
}

void ct__xdata_server_destroy(ct__xdata_server **xsp)
{
    if (!xsp || !*xsp)
        return;
    ct__xdata_server *xs = *xsp;
    close(xs->lfd);
    reap(xs, 1);
    pthread_mutex_destroy(&xs->mu);
    free(xs);
    *xsp = NULL;
}

int ct__xdata_connect(const char *zmq_endpoint, uint16_t port, int timeout_ms)
{
    char host[200], ps[16];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int fd = -1, rc;
    if (endpoint_host(zmq_endpoint, host, sizeof host))
        return ct__error(CT_EINVAL, "data port: cannot parse endpoint %s", zmq_endpoint);
    snprintf(ps, sizeof ps, "%u", (unsigned)port);
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai)
        return ct__error(CT_EINVAL, "data port: %s: %s", host, gai_strerror(gai));
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        rc = ct__error(-errno, "data port: socket: %s", strerror(errno));
        goto err;
    }
    int bufsz = CT_XD_SOCKBUF; /* before connect, so the window scale fits it */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
        rc = ct__error(-errno, "data port %s:%s: connect: %s", host, ps, strerror(errno));
        goto err;
    }
    struct pollfd pfd = {fd, POLLOUT, 0};
    int r;
    do
        r = poll(&pfd, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) || soerr) {
        rc = ct__error(r == 0 ? CT_ETIMEDOUT : CT_EIO, "data port %s:%s: connect: %s", host, ps,
                       r == 0 ? "timed out" : strerror(soerr ? soerr : errno));
        goto err;
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if ((rc = ct__auth_connect(fd, timeout_ms))) {
        rc = ct__error(rc, "data port %s:%s: %s", host, ps, ct_last_error());
        goto err;
    }
    freeaddrinfo(ai);
    return fd;
err:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

/* One upload attempt on a fresh connection (corrupt: test hook, the CRC of chunk corrupt,
 * 1-based, is sent wrong). 0, or a CT_E* code with the message set. */
static int push_once(const char *ep, uint16_t port, const ct_object_id *id, const void *data,
                     uint64_t size, int timeout_ms, uint64_t corrupt)
{
    int fd = ct__xdata_connect(ep, port, timeout_ms);
    if (fd < 0)
        return fd;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int bufsz = CT_XD_SOCKBUF;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
    ct_xd_req rq = {CT_XD_REQ_MAGIC, CT_XD_FLAG_PUT, {0}, 0, 0, size};
    memcpy(rq.id, id->b, CT_OBJECT_ID_LEN);
    ct_xd_rep rp;
    int rc = ct__xdata_send_all(fd, &rq, sizeof rq, 0);
    if (!rc)
        rc = ct__xdata_recv_all(fd, &rp, sizeof rp);
    if (rc) {
        rc = ct__error(rc, "upload to %s (data port %u): no answer: %s", ep, (unsigned)port,
                       ct_strerror(rc));
        goto out;
    }
    if (rp.magic != CT_XD_REP_MAGIC) {
        rc = ct__error(CT_EPROTO, "upload to %s: not a data port's answer", ep);
        goto out;
    }
    if (rp.status) {
        rc = rp.status;
        if (rc == CT_ENOSPC)
            rc = ct__error(rc, "upload to %s refused: %llu bytes, over its limit of %llu", ep,
                           (unsigned long long)size, (unsigned long long)rp.object_size);
        else if (rc == CT_EEXIST)
            rc = ct__error(rc, "upload to %s: it holds the object already", ep);
        else
            rc = ct__error(rc, "upload to %s refused: %s", ep, ct_strerror(rc));
        goto out;
    }
    const unsigned char *p = data;
    bool answered = false; /* the server answered (refused a chunk) before all was sent */
    for (uint64_t off = 0, k = 1; off < size && !answered; off += CT_XFER_DEFAULT_CHUNK, k++) {
        uint64_t len = size - off < CT_XFER_DEFAULT_CHUNK ? size - off : CT_XFER_DEFAULT_CHUNK;
        uint32_t end[2] = {ct__crc32c(0, p + off, len), CT_XD_END_MAGIC};
        if (k == corrupt)
            end[0] ^= 1;
        if ((rc = ct__xdata_send_all(fd, p + off, len, 1)) ||
            (rc = ct__xdata_send_all(fd, end, sizeof end, 0))) {
            /* the server may have refused an earlier chunk and closed while this one was on
             * its way: its answer, when it came, says why */
            struct timeval brief = {2, 0};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &brief, sizeof brief);
            answered =
                !ct__xdata_recv_all(fd, &rp, sizeof rp) && rp.magic == CT_XD_REP_MAGIC && rp.status;
            if (!answered) {
                rc = ct__error(rc, "upload to %s: sending: %s", ep, ct_strerror(rc));
                goto out;
            }
        }
    }
    if (!answered &&
        ((rc = ct__xdata_recv_all(fd, &rp, sizeof rp)) || rp.magic != CT_XD_REP_MAGIC)) {
        rc = ct__error(rc ? rc : CT_EPROTO, "upload to %s: no answer after the bytes", ep);
        goto out;
    }
    if (rp.status)
        rc = ct__error(rp.status, "upload to %s: %s at offset %llu", ep,
                       rp.status == CT_EPROTO ? "checksum mismatch" : ct_strerror(rp.status),
                       (unsigned long long)rp.offset);
out:
    close(fd);
    return rc;
}

int ct_xfer_push(const char *holder, uint16_t data_port, const ct_object_id *id, const void *data,
                 uint64_t size, int timeout_ms)
{
    if (!holder || !id || (size && !data) || !data_port)
        return ct__error(CT_EINVAL, "ct_xfer_push: %s",
                         !data_port ? "no data port" : "NULL argument");
    if (timeout_ms <= 0)
        timeout_ms = 60000;
    uint64_t corrupt = (uint64_t)ct__fault_num(CT__FAULT_XFER_CORRUPT_PUT);
    int rc = CT_EIO;
    for (int attempt = 0; attempt < 3; attempt++) {
        rc = push_once(holder, data_port, id, data, size, timeout_ms, attempt ? 0 : corrupt);
        if (rc != CT_EPROTO) /* a damaged chunk: the server dropped the object, send it again */
            break;
        CT_LOG(CT_LOG_INFO, "xfer", "%s; sending it again", ct_last_error());
    }
    return rc;
}
