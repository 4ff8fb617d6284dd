/* head/watch.c — the head's death-watch port (head/watch.h says why and the wire): accepts
 * connections, runs the raw-port challenge-response as the server step by step (never blocking
 * the head's loop), reads each hello, and reports the end of every connection that said one.
 * Connections sit in one epoll set, whose fd the head's loop polls beside its ZeroMQ socket.
 *
 * Bounded: at most MAX_UNBOUND connections between accept and hello (each for at most
 * HELLO_MS), at most MAX_CONNS in all; past that new connections are closed at once.
 *
 * Not in here: what a ticket names, and what a death means (loop.c). */
#define _GNU_SOURCE
#include "head/watch.h"
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include "common/auth.h"
#include "common/common.h"

#define MAX_CONNS 8192  /* a head's nodes and drivers (head_internal.h: 1024 + 4096), and room */
#define MAX_UNBOUND 256 /* connections that have not said hello yet */
#define HELLO_MS 10000  /* the time a connection has to authenticate and say hello */
#define BATCH 64        /* epoll events handled per ct__watch_poll */
#define BACKLOG 4096    /* connections waiting for accept (a whole cluster registering at once) */

enum { S_FREE, S_C1, S_C2, S_HELLO, S_BOUND };

typedef struct wconn {
    int fd;
    int state;
    uint64_t id;
    int64_t deadline; /* unbound: dropped at this time */
    size_t got;       /* bytes of the current step in buf */
    bool leaving;     /* bound: it sent CT__WATCH_LEAVING (its close is on purpose) */
    uint8_t buf[CT__WATCH_HELLO_LEN > CT_AUTH_C1_LEN ? CT__WATCH_HELLO_LEN : CT_AUTH_C1_LEN];
    uint8_t auth[CT_AUTH_STATE_LEN];
} wconn;

struct ct__watch {
    int lfd, ep, port;
    wconn *c;
    int nc, cap; /* slots in use or freed (S_FREE), allocated */
    int live, unbound;
    uint64_t next_id;
};

int ct__watch_port(const ct__watch *w)
{
    return w ? w->port : 0;
}

int ct__watch_fd(const ct__watch *w)
{
    return w ? w->ep : -1;
}

ct__watch *ct__watch_new(const char *host, int port)
{
    ct__watch *w = calloc(1, sizeof *w);
    if (!w) {
        ct__error(CT_ENOMEM, "watch: out of memory");
        return NULL;
    }
    w->lfd = w->ep = -1;
    w->next_id = 1;
    bool any = !host || !*host || !strcmp(host, "*");
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(any ? NULL : host, ps, &hints, &ai);
    if (gai) {
        ct__error(CT_EINVAL, "watch: cannot listen on %s: %s", host, gai_strerror(gai));
        goto err;
    }
    w->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (w->lfd >= 0)
        setsockopt(w->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    if (w->lfd < 0 || bind(w->lfd, ai->ai_addr, ai->ai_addrlen) || listen(w->lfd, BACKLOG) ||
        getsockname(w->lfd, (struct sockaddr *)&sa, &salen)) {
        ct__error(-errno, "watch: cannot listen on %s:%d: %s", any ? "*" : host, port,
                  strerror(errno));
        goto err;
    }
    w->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                             : ((struct sockaddr_in *)&sa)->sin_port);
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (w->ep < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, w->lfd, &ev)) {
        ct__error(-errno, "watch: epoll: %s", strerror(errno));
        goto err;
    }
    freeaddrinfo(ai);
    return w;
err:
    if (ai)
        freeaddrinfo(ai);
    ct__watch_destroy(&w);
    return NULL;
}

/* Forgets slot i and closes its connection. */
static void drop(ct__watch *w, int i)
{
    wconn *c = &w->c[i];
    if (c->state == S_FREE)
        return;
    if (c->state != S_BOUND)
        w->unbound--;
    w->live--;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    memset(c, 0, sizeof *c);
    c->state = S_FREE;
    c->fd = -1;
}

/* A slot for a new connection, or -1 at the limits. */
static int slot(ct__watch *w)
{
    if (w->live >= MAX_CONNS || w->unbound >= MAX_UNBOUND)
        return -1;
    for (int i = 0; i < w->nc; i++)
        if (w->c[i].state == S_FREE)
            return i;
    if (w->nc == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        wconn *nc = realloc(w->c, cap * sizeof *nc);
        if (!nc)
            return -1;
        w->c = nc;
        w->cap = cap;
    }
    w->c[w->nc].state = S_FREE;
    return w->nc++;
}

static void accept_all(ct__watch *w)
{
    for (int k = 0; k < BATCH; k++) {
        int fd = accept4(w->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        int i = slot(w);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)i + 1};
        if (i < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev)) {
            CT_LOG(CT_LOG_WARN, "head", "watch: connection refused (%d open, %d unbound)", w->live,
                   w->unbound);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        wconn *c = &w->c[i];
        memset(c, 0, sizeof *c);
        c->fd = fd;
        c->id = w->next_id++;
        c->state = ct__auth_off() ? S_HELLO : S_C1;
        c->deadline = ct__now_ms() + HELLO_MS;
        w->live++;
        w->unbound++;
    }
}

/* Reads what connection i has. A bound one's end is reported (cb->closed); an unbound one that
 * fails a step, or ends, is dropped quietly (a refusal is logged). */
static void serve(ct__watch *w, int i, const ct__watch_cb *cb)
{
    wconn *c = &w->c[i];
    for (;;) {
        if (c->state == S_BOUND) {
            char sink[64]; /* a bound client sends only CT__WATCH_LEAVING; the rest is dropped */
            ssize_t r = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r > 0 && memchr(sink, CT__WATCH_LEAVING, (size_t)r))
                c->leaving = true;
            if (r > 0)
                continue; /* the end may follow in the same wake-up */
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
            uint64_t id = c->id;
            bool left = c->leaving;
            drop(w, i);
            cb->closed(cb->user, id, left);
            return;
        }
        size_t need = c->state == S_C1   ? CT_AUTH_C1_LEN
                      : c->state == S_C2 ? CT_AUTH_C2_LEN
                                         : CT__WATCH_HELLO_LEN;
        ssize_t r = recv(c->fd, c->buf + c->got, need - c->got, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (r <= 0) {
            drop(w, i);
            return;
        }
        c->got += (size_t)r;
        if (c->got < need)
            continue;
        c->got = 0;
        if (c->state == S_C1) {
            uint8_t s1[CT_AUTH_S1_LEN];
            if (ct__auth_server_answer(c->buf, s1, c->auth) ||
                send(c->fd, s1, sizeof s1, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof s1) {
                CT_LOG(CT_LOG_WARN, "head", "watch: refused a connection: bad handshake");
                drop(w, i);
                return;
            }
            c->state = S_C2;
        } else if (c->state == S_C2) {
            if (ct__auth_server_check(c->auth, c->buf)) {
                CT_LOG(CT_LOG_WARN, "head", "watch: refused a connection without the secret");
                drop(w, i);
                return;
            }
            c->state = S_HELLO;
        } else {
            char ticket[CT_TOKEN_LEN + 1];
            memcpy(ticket, c->buf + 4, CT_TOKEN_LEN);
            ticket[CT_TOKEN_LEN] = 0;
            if (memcmp(c->buf, CT__WATCH_MAGIC, 4) || !ct__token_valid(ticket)) {
                CT_LOG(CT_LOG_WARN, "head", "watch: refused a connection: not a hello");
                drop(w, i);
                return;
            }
            c->state = S_BOUND;
            w->unbound--;
            cb->hello(cb->user, c->id, ticket); /* may close it: c is not used after */
            return;
        }
    }
}

void ct__watch_poll(ct__watch *w, const ct__watch_cb *cb)
{
    if (!w)
        return;
    struct epoll_event ev[BATCH];
    int n = epoll_wait(w->ep, ev, BATCH, 0);
    for (int k = 0; k < n; k++) {
        if (ev[k].data.u64 == 0) {
            accept_all(w);
            continue;
        }
        int i = (int)(ev[k].data.u64 - 1);
        /* a slot dropped (or dropped and taken again) earlier in this batch reads nothing */
        if (i < w->nc && w->c[i].state != S_FREE)
            serve(w, i, cb);
    }
    if (!w->unbound)
        return;
    int64_t now = ct__now_ms();
    for (int i = 0; i < w->nc; i++)
        if (w->c[i].state != S_FREE && w->c[i].state != S_BOUND && now > w->c[i].deadline) {
            CT_LOG(CT_LOG_WARN, "head", "watch: dropped a connection that said no hello in %d ms",
                   HELLO_MS);
            drop(w, i);
        }
}

void ct__watch_close(ct__watch *w, uint64_t conn, char byte)
{
    if (!w || !conn)
        return;
    for (int i = 0; i < w->nc; i++)
        if (w->c[i].state != S_FREE && w->c[i].id == conn) {
            if (byte && send(w->c[i].fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1)
                CT_LOG(CT_LOG_DEBUG, "head", "watch: could not tell connection %llu: %s",
                       (unsigned long long)conn, strerror(errno));
            drop(w, i);
            return;
        }
}

void ct__watch_destroy(ct__watch **wp)
{
    ct__watch *w = wp ? *wp : NULL;
    if (!w)
        return;
    for (int i = 0; i < w->nc; i++)
        drop(w, i);
    free(w->c);
    if (w->lfd >= 0)
        close(w->lfd);
    if (w->ep >= 0)
        close(w->ep);
    free(w);
    *wp = NULL;
}
