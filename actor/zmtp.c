/* actor/zmtp.c — a minimal ZMTP 3.0 peer (see zmtp.h).
 *
 * Wire (RFC 23/ZMTP): a 64-byte greeting each way (signature FF 00*8 7F, version 3.0,
 * mechanism "NULL", as-server, filler), then each side sends a READY command with its
 * Socket-Type, then frames: flags (bit0 MORE, bit1 LONG, bit2 COMMAND), size (1 byte, or
 * 8 bytes big-endian when LONG), body.
 *
 * Before the greeting, both sides prove that they hold the cluster secret (common/auth.h's
 * C1/S1/C2): the client sends C1 at connect; the server answers S1; the client checks it and
 * sends C2 and its greeting; the server checks C2 and sends its greeting. The client holds back
 * what it queued (the first calls) until S1 checked out. Both ends run it inside the same
 * event-driven parser, so a busy actor never blocks its caller's connect. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "actor/zmtp.h"
#include "common/auth.h"
#include "common/common.h"

#define MAX_FRAME (1ULL << 30)

/* S_GREETING must stay 0 (a zeroed connection expects the greeting). S_SAUTH1 / S_SAUTH2: a
 * server waiting for C1 / C2; S_CWAIT: a client waiting for S1 (its output held back). */
enum { S_GREETING, S_HANDSHAKE, S_READY, S_SAUTH1, S_SAUTH2, S_CWAIT };

struct ct__zmtp {
    int lfd;
    ct__zconn *c;
    int nc, capc;
    int next; /* round-robin start */
};

/* All of data to the (non-blocking) socket, waiting up to 10 s at a time for room: 0, or
 * CT_ECONNRESET. */
static int write_all(int fd, const void *data, size_t len)
{
    return ct__send_all(fd, data, len, 0, 10000) ? CT_ECONNRESET : 0;
}

/* Greeting and READY for socket type "ROUTER" or "DEALER" (both 6 letters). */
static int hello(int fd, const char *type)
{
    uint8_t g[64 + 30] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0, 'N', 'U', 'L', 'L'};
    static const uint8_t ready[] = {0x04, 28,  5,   'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c',
                                    'k',  'e', 't', '-', 'T', 'y', 'p', 'e', 0,  0,   0,   6};
    memcpy(g + 64, ready, sizeof ready);
    memcpy(g + 64 + sizeof ready, type, 6);
    return write_all(fd, g, sizeof g);
}

int ct__zconn_start(ct__zconn *c, int fd, bool server)
{
    int rc;
    if (ct__auth_off()) {
        rc = hello(fd, server ? "ROUTER" : "DEALER");
        c->state = S_GREETING;
    } else if (server) {
        rc = 0;
        c->state = S_SAUTH1; /* the greeting follows C2 (parse) */
    } else {
        uint8_t c1[CT_AUTH_C1_LEN];
        if (!(rc = ct__auth_client_start(c1, c->auth)))
            rc = write_all(fd, c1, sizeof c1);
        c->state = S_CWAIT; /* the greeting follows the server's answer (parse) */
    }
    c->fd = rc ? -1 : fd;
    return rc;
}

int ct__zconn_connect(ct__zconn *c, const char *endpoint)
{
    memset(c, 0, sizeof *c);
    c->fd = -1;
    char host[128];
    const char *p = strncmp(endpoint, "tcp://", 6) ? endpoint : endpoint + 6;
    const char *colon = strrchr(p, ':');
    if (!colon || (size_t)(colon - p) >= sizeof host)
        return ct__error(CT_EINVAL, "zmtp: endpoint '%s' is not tcp://host:port", endpoint);
    memcpy(host, p, colon - p);
    host[colon - p] = 0;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &ai) || !ai)
        return ct__error(CT_EINVAL, "zmtp: cannot resolve %s", endpoint);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = 0;
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        rc = ct__error(CT_ECONNRESET, "zmtp: connect %s: %s", endpoint, strerror(errno));
        goto out;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if ((rc = ct__zconn_start(c, fd, false))) {
        rc = ct__error(rc, "zmtp: handshake with %s failed", endpoint);
        goto out;
    }
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

int ct__zconn_fill(ct__zconn *c)
{
    for (;;) {
        if (c->cap - c->len < 4096) {
            size_t cap = c->cap ? 2 * c->cap : 8192;
            uint8_t *nb = realloc(c->buf, cap);
            if (!nb)
                return CT_ECONNRESET;
            c->buf = nb;
            c->cap = cap;
        }
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r > 0) {
            c->len += (size_t)r;
            if (c->len < c->cap)
                return 0; /* short read: the socket is drained */
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 && errno == EAGAIN ? 0 : CT_ECONNRESET;
    }
}

/* Parses one frame; 0 when incomplete, -1 when malformed, else the frame's total size. */
static long long frame(const uint8_t *b, size_t n, int *flags, const uint8_t **body, size_t *blen)
{
    if (n < 2)
        return 0;
    *flags = b[0];
    if (b[0] & 0xF8)
        return -1;
    size_t hdr = 2, sz = b[1];
    if (b[0] & 2) {
        if (n < 9)
            return 0;
        uint64_t v = 0;
        for (int i = 1; i <= 8; i++)
            v = v << 8 | b[i];
        if (v > MAX_FRAME)
            return -1;
        hdr = 9;
        sz = (size_t)v;
    }
    if (n - hdr < sz)
        return 0;
    *body = b + hdr;
    *blen = sz;
    return (long long)(hdr + sz);
}

/* One step of the challenge-response (auth.h) on the n bytes at b: 1 when it moved on, 0 when
 * more bytes are needed, -1 when the peer failed it. */
static int auth_step(ct__zconn *c, const uint8_t *b, size_t n)
{
    uint8_t out[CT_AUTH_S1_LEN];
    if (c->state == S_SAUTH1) {
        if (n < CT_AUTH_C1_LEN)
            return 0;
        if (ct__auth_server_answer(b, out, c->auth)) {
            CT_LOG(CT_LOG_WARN, "zmtp", "refused a caller that does not speak ct's handshake");
            return -1;
        }
        c->consumed += CT_AUTH_C1_LEN;
        c->state = S_SAUTH2;
        return write_all(c->fd, out, CT_AUTH_S1_LEN) ? -1 : 1;
    }
    if (c->state == S_SAUTH2) {
        if (n < CT_AUTH_C2_LEN)
            return 0;
        if (ct__auth_server_check(c->auth, b)) {
            CT_LOG(CT_LOG_WARN, "zmtp", "refused a caller without this cluster's secret");
            return -1;
        }
        c->consumed += CT_AUTH_C2_LEN;
        c->state = S_GREETING;
        return hello(c->fd, "ROUTER") ? -1 : 1;
    }
    if (n < CT_AUTH_S1_LEN) /* S_CWAIT */
        return 0;
    if (ct__auth_client_finish(c->auth, b, out)) {
        CT_LOG(CT_LOG_WARN, "zmtp", "the actor does not hold this cluster's secret");
        return -1;
    }
    c->consumed += CT_AUTH_S1_LEN;
    c->state = S_GREETING;
    if (write_all(c->fd, out, CT_AUTH_C2_LEN) || hello(c->fd, "DEALER"))
        return -1;
    return ct__zconn_flush(c) ? -1 : 1; /* the calls held back */
}

int ct__zconn_parse(ct__zconn *c, const uint8_t **data, size_t *len)
{
    for (;;) {
        size_t n = c->len - c->consumed;
        if (!n) /* every state needs more; buf is still NULL before the first fill */
            return 0;
        uint8_t *b = c->buf + c->consumed;
        if (c->state >= S_SAUTH1) {
            int r = auth_step(c, b, n);
            if (r <= 0)
                return r;
            continue;
        }
        if (c->state == S_GREETING) {
            if (n < 64)
                return n >= 1 && b[0] != 0xFF ? -1 : 0;
            if (b[9] != 0x7F || b[10] < 3 || memcmp(b + 12, "NULL", 5))
                return -1;
            c->consumed += 64;
            c->state = S_HANDSHAKE;
            continue;
        }
        int flags;
        const uint8_t *body;
        size_t blen;
        long long t = frame(b, n, &flags, &body, &blen);
        if (t <= 0)
            return (int)t;
        c->consumed += (size_t)t;
        if (flags & 4) { /* command */
            if (c->state == S_HANDSHAKE) {
                if (blen < 6 || body[0] != 5 || memcmp(body + 1, "READY", 5))
                    return -1;
                c->state = S_READY;
            } else if (blen >= 5 && body[0] == 4 && !memcmp(body + 1, "PING", 4)) {
                /* PING ttl(2) context: answer PONG context */
                uint8_t pong[7 + 16] = {0x04, 0, 4, 'P', 'O', 'N', 'G'};
                size_t ctx = blen > 7 ? blen - 7 : 0;
                ctx = ctx > 16 ? 16 : ctx;
                memcpy(pong + 7, body + 7, ctx);
                pong[1] = (uint8_t)(5 + ctx);
                write_all(c->fd, pong, 7 + ctx);
            }
            continue;
        }
        if (c->state != S_READY)
            return -1;
        if (flags & 1) {
            c->multi = true;
            continue;
        }
        if (c->multi) {
            c->multi = false;
            return 2;
        }
        *data = body;
        *len = blen;
        return 1;
    }
}

void ct__zconn_compact(ct__zconn *c)
{
    if (c->consumed) {
        memmove(c->buf, c->buf + c->consumed, c->len - c->consumed);
        c->len -= c->consumed;
        c->consumed = 0;
    }
}

bool ct__zconn_held(const ct__zconn *c)
{
    return c->state == S_CWAIT;
}

int ct__zconn_flush(ct__zconn *c)
{
    if (!c->olen || ct__zconn_held(c))
        return 0; /* nothing, or held back until the server proved itself */
    int rc = write_all(c->fd, c->out, c->olen);
    c->olen = 0;
    return rc;
}

int ct__zconn_send(ct__zconn *c, const void *data, size_t len, bool flush)
{
    size_t need = c->olen + 9 + len;
    if (need > c->ocap) {
        size_t cap = c->ocap ? c->ocap : 16384;
        while (cap < need)
            cap *= 2;
        uint8_t *no = realloc(c->out, cap);
        if (!no)
            return ct__error(CT_ENOMEM, "zmtp: out of memory for a %zu-byte message", len);
        c->out = no;
        c->ocap = cap;
    }
    uint8_t *p = c->out + c->olen;
    if (len <= 255) {
        *p++ = 0;
        *p++ = (uint8_t)len;
    } else {
        *p++ = 2;
        uint64_t v = len;
        for (int i = 7; i >= 0; i--, v >>= 8)
            p[i] = (uint8_t)v;
        p += 8;
    }
    memcpy(p, data, len);
    c->olen = (size_t)(p - c->out) + len;
    if (flush || c->olen >= (1 << 16))
        return ct__zconn_flush(c);
    return 0;
}

void ct__zconn_close(ct__zconn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->buf);
    free(c->out);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* ---- server ---- */

static void drop(ct__zmtp *s, int i)
{
    ct__zconn_close(&s->c[i]);
    s->c[i] = s->c[--s->nc];
}

int ct__zmtp_listen(const char *host, char *endpoint, size_t cap, ct__zmtp **out)
{
    *out = NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return ct__error(CT_EINVAL, "zmtp: host '%s' is not an IPv4 address", host);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return ct__error(-errno, "zmtp: socket: %s", strerror(errno));
    socklen_t sl = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 1024) ||
        getsockname(fd, (struct sockaddr *)&sa, &sl)) {
        int rc = ct__error(-errno, "zmtp: cannot listen on %s: %s", host, strerror(errno));
        close(fd);
        return rc;
    }
    ct__zmtp *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return ct__error(CT_ENOMEM, "zmtp: out of memory");
    }
    s->lfd = fd;
    snprintf(endpoint, cap, "tcp://%s:%d", host, ntohs(sa.sin_port));
    *out = s;
    return 0;
}

static void accept_all(ct__zmtp *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (s->nc == s->capc) {
            int capc = s->capc ? 2 * s->capc : 8;
            ct__zconn *nc = realloc(s->c, capc * sizeof *nc);
            if (!nc) {
                close(fd);
                continue;
            }
            s->c = nc;
            s->capc = capc;
        }
        s->c[s->nc] = (ct__zconn){.fd = -1};
        if (ct__zconn_start(&s->c[s->nc], fd, true)) {
            close(fd);
            continue;
        }
        s->nc++;
    }
}

int ct__zmtp_next(ct__zmtp *s, int *connp, const uint8_t **data, size_t *len)
{
    return ct__zmtp_next_within(s, connp, data, len, -1);
}

int ct__zmtp_next_within(ct__zmtp *s, int *connp, const uint8_t **data, size_t *len, int timeout_ms)
{
    for (;;) {
        /* complete messages already buffered, fairly across connections */
        for (int k = 0; k < s->nc; k++) {
            int i = (s->next + k) % s->nc;
            int r = ct__zconn_parse(&s->c[i], data, len);
            if (r < 0) {
                drop(s, i);
                k = -1; /* indices moved: rescan */
                continue;
            }
            if (r > 0) {
                s->next = i + 1;
                *connp = s->c[i].fd;
                return r == 1 ? 0 : CT_EPROTO;
            }
            ct__zconn_compact(&s->c[i]);
        }
        /* everything answered so far leaves in one write per connection */
        for (int i = s->nc - 1; i >= 0; i--)
            if (ct__zconn_flush(&s->c[i]))
                drop(s, i);
        struct pollfd pf[1 + s->nc];
        pf[0] = (struct pollfd){s->lfd, POLLIN, 0};
        for (int i = 0; i < s->nc; i++)
            pf[1 + i] = (struct pollfd){s->c[i].fd, POLLIN, 0};
        int nfd = 1 + s->nc;
        int ready = poll(pf, nfd, timeout_ms);
        if (ready < 0 && errno != EINTR)
            return ct__error(CT_EIO, "zmtp: poll: %s", strerror(errno));
        if (ready < 0 && timeout_ms < 0)
            continue;
        if (ready <= 0) /* a wait of timeout_ms without a message (or a signal meanwhile) */
            return CT_ETIMEDOUT;
        for (int i = nfd - 2; i >= 0; i--)
            if (pf[1 + i].revents && ct__zconn_fill(&s->c[i]))
                drop(s, i);
        if (pf[0].revents)
            accept_all(s);
    }
}

int ct__zmtp_send(ct__zmtp *s, int fd, const void *data, size_t len)
{
    for (int i = 0; i < s->nc; i++)
        if (s->c[i].fd == fd)
            return ct__zconn_send(&s->c[i], data, len, false);
    return 0; /* the peer is gone */
}

void ct__zmtp_destroy(ct__zmtp **ps)
{
    if (!ps || !*ps)
        return;
    ct__zmtp *s = *ps;
    for (int i = 0; i < s->nc; i++)
        ct__zconn_close(&s->c[i]);
    free(s->c);
    close(s->lfd);
    free(s);
    *ps = NULL;
}
