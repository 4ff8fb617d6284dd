/* objectstore/xfer_data.c — the transfer server's plain-TCP data port (wire in xfer_data.h):
 * a listening socket polled by the transfer server's thread, one thread per connection that
 * serves chunk requests in order straight from the pinned arena, and the puller's connect.
 *
 * Per request the connection thread pins the object (ct_store_get), sends the reply header,
 * then for each 256 KiB piece computes the CRC-32C and send()s the piece (the checksum pass
 * leaves it in cache for the kernel's copy), then the trailer, and unpins. Nothing is copied in
 * user space. A peer that vanishes makes send() fail (MSG_NOSIGNAL) and the thread ends.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/common.h"
#include "objectstore/crc32c.h"

#define IDLE_MS 60000 /* a connection with no request for this long is closed */

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

static int send_all(int fd, const void *buf, size_t n, int more)
{
    const char *p = buf;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Reads exactly n bytes. 0, or -1 on EOF, error or SO_RCVTIMEO expiry. */
static int recv_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t k = recv(fd, p, n, MSG_WAITALL);
        if (k == 0)
            return -1;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_status(int fd, int status, uint64_t off, uint64_t size, uint64_t osize)
{
    ct_xd_rep r = {CT_XD_REP_MAGIC, status, off, size, osize};
    return send_all(fd, &r, sizeof r, 0);
}

/* Serves one request. 0 to go on, -1 to close the connection. */
static int serve_req(ct__xdata_server *xs, int fd, const ct_xd_req *rq)
{
    stat_add(&xs->st->requests, 1);
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
    int rc = -1;
    if (len > CT_XFER_MAX_CHUNK || off > osize || len > osize - off || (!len && osize)) {
        stat_add(&xs->st->errors, 1);
        send_status(fd, CT_ERANGE, off, len, osize);
        goto out;
    }
    if (xs->delay_ms)
        usleep((useconds_t)xs->delay_ms * 1000);
    if (send_status(fd, 0, off, len, osize))
        goto out;
    const unsigned char *p = (const unsigned char *)v.data + (len ? off : 0);
    uint32_t crc = 0;
    for (uint64_t done = 0; done < len;) {
        size_t n = len - done < CT_XD_PIECE ? (size_t)(len - done) : CT_XD_PIECE;
        crc = ct__crc32c(crc, p + done, n);
        if (send_all(fd, p + done, n, 1))
            goto out;
        done += n;
    }
    uint32_t end[2] = {crc, CT_XD_END_MAGIC};
    if (send_all(fd, end, sizeof end, 0))
        goto out;
    stat_add(&xs->st->chunks, 1);
    stat_add(&xs->st->bytes, len);
    rc = 0;
out:
    ct_store_release(xs->store, &v);
    return rc;
}

static void *conn_thread(void *arg)
{
    dconn *c = arg;
    ct__log_set_who(c->xs->sender);
    for (;;) {
        struct pollfd pfd = {c->fd, POLLIN, 0};
        int r = poll(&pfd, 1, IDLE_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* idle or error */
        ct_xd_req rq;
        if (recv_all(c->fd, &rq, sizeof rq))
            break; /* EOF, a cut connection, or a partial request that stalled */
        if (serve_req(c->xs, c->fd, &rq))
            break;
    }
    shutdown(c->fd, SHUT_RDWR);
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
    freeaddrinfo(ai);
    return fd;
err:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}
