/* trainer/pipeline/p2p.c — point-to-point tensor links between pipeline stages (p2p.h).
 *
 * One blocking TCP socket per link. Setup: listen, publish, connect upward (to higher stages),
 * accept from below; connections only go upward, so the stages cannot wait on each other in a
 * circle. A message is a header (magic, tag, dims, bytes) and the f32 payload; the link's reader
 * thread reads messages whole and appends them to the link's queue, and recv takes the one with
 * its tag. Sends hold the link's send lock and use SO_SNDTIMEO, so a stopped peer (not a dead
 * one: that resets the socket) fails the send at the timeout instead of hanging. */
#define _GNU_SOURCE /* accept4 */
#include "p2p.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/common.h"
#include "common/env.h"
#include "ct/nn.h"

#define HELLO_MAGIC 0x63745032u /* "ctP2" */
#define MSG_MAGIC 0x6374504du   /* "ctPM" */
#define MAX_DIMS 8
#define SOCK_BUF (4 * 1024 * 1024)

struct hello {
    uint32_t magic;
    int32_t stage;
    uint64_t group_hash;
};

struct header {
    uint32_t magic;
    uint32_t ndim;
    uint64_t tag;
    int64_t shape[MAX_DIMS];
    uint64_t bytes;
};

typedef struct msg {
    struct msg *next;
    uint64_t tag;
    ct_tensor *t;
} msg;

typedef struct p2p_link {
    int peer, fd;
    pthread_t reader;
    bool reader_started;
    pthread_mutex_t send_mu;
    /* guarded by the p2p's mu: */
    msg *head, *tail;
    int err; /* the reader's end: CT_EDEAD for a closed link, else the error */
} p2p_link;

struct ct__p2p {
    int me, nlinks;
    p2p_link *links;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t sent, received;
};

static void set_timeout(int fd, int opt, int timeout_ms)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

static void tune(int fd, int timeout_ms)
{
    int one = 1, sz = SOCK_BUF;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    set_timeout(fd, SO_SNDTIMEO, timeout_ms);
}

/* exact read or write on a blocking socket; CT_EDEAD when the peer closed it */
static int io_all(int fd, void *p, size_t n, bool writing)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = writing ? send(fd, (char *)p + done, n - done, MSG_NOSIGNAL)
                            : recv(fd, (char *)p + done, n - done, 0);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0 || errno == ECONNRESET || errno == EPIPE)
            return CT_EDEAD;
        return errno == EAGAIN || errno == EWOULDBLOCK ? CT_ETIMEDOUT : -errno;
    }
    return 0;
}

static p2p_link *link_of(ct__p2p *p, int peer)
{
    for (int i = 0; i < p->nlinks; i++)
        if (p->links[i].peer == peer)
            return &p->links[i];
    return NULL;
}

static void *reader_main(void *arg)
{
    void **a = arg;
    ct__p2p *p = a[0];
    p2p_link *l = a[1];
    free(arg);
    int rc = 0;
    for (;;) {
        struct header h;
        ct_tensor *t = NULL;
        if ((rc = io_all(l->fd, &h, sizeof h, false)) < 0)
            break;
        int64_t numel = 1;
        for (uint32_t d = 0; d < h.ndim && d < MAX_DIMS; d++)
            numel *= h.shape[d];
        if (h.magic != MSG_MAGIC || h.ndim > MAX_DIMS || numel < 0 ||
            h.bytes != (uint64_t)numel * sizeof(float)) {
            rc = ct__error(CT_EPROTO, "pipeline p2p: a bad message from stage %d", l->peer);
            break;
        }
        if (!(t = ct_tensor_new(CT_F32, (int)h.ndim, h.shape))) {
            rc = CT_ENOMEM;
            break;
        }
        if ((rc = io_all(l->fd, ct_tensor_data(t), h.bytes, false)) < 0) {
            ct_tensor_release(&t);
            break;
        }
        msg *m = malloc(sizeof *m);
        if (!m) {
            ct_tensor_release(&t);
            rc = CT_ENOMEM;
            break;
        }
        *m = (msg){.tag = h.tag, .t = t};
        p->received += sizeof h + h.bytes;
        pthread_mutex_lock(&p->mu);
        if (l->tail)
            l->tail->next = m;
        else
            l->head = m;
        l->tail = m;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    l->err = rc < 0 ? rc : CT_EDEAD;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int ms_until(int64_t deadline)
{
    int64_t ms = (deadline - ct__now_ns()) / 1000000;
    return ms < 1 ? 1 : ms > 1 << 30 ? 1 << 30 : (int)ms;
}

/* listens on this host; its "host:port" into addr */
static int listen_here(char *addr, size_t cap, int *out)
{
    char myhost[256];
    ct__listen_host(myhost, sizeof myhost);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof sa;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(myhost, NULL, &hints, &ai) || !ai)
        return ct__error(CT_EINVAL, "pipeline p2p: host '%s' has no IPv4 address", myhost);
    sa.sin_addr = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
    freeaddrinfo(ai);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ct__error(-errno, "pipeline p2p: socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        int rc = ct__error(-errno, "pipeline p2p: listen on %s: %s", myhost, strerror(errno));
        close(fd);
        return rc;
    }
    snprintf(addr, cap, "%s:%d", myhost, ntohs(sa.sin_port));
    *out = fd;
    return 0;
}

/* accepts one authenticated stage of this group before the deadline: its fd and stage */
static int accept_one(int lfd, uint64_t ghash, int64_t deadline, int timeout_ms, int *fd_out,
                      int *stage_out)
{
    for (;;) {
        set_timeout(lfd, SO_RCVTIMEO, ms_until(deadline));
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            return ct__error(errno == EAGAIN || errno == EWOULDBLOCK ? CT_ETIMEDOUT : -errno,
                             "pipeline p2p: accept: %s", strerror(errno));
        }
        tune(fd, timeout_ms);
        set_timeout(fd, SO_RCVTIMEO, ms_until(deadline));
        struct hello h;
        if (ct__auth_accept(fd, ms_until(deadline)) == 0 && io_all(fd, &h, sizeof h, false) == 0 &&
            h.magic == HELLO_MAGIC && h.group_hash == ghash) {
            set_timeout(fd, SO_RCVTIMEO, 0); /* the reader waits as long as the link lives */
            *fd_out = fd;
            *stage_out = h.stage;
            return 0;
        }
        close(fd); /* a stray, or another group's: wait for ours */
        if (ct__now_ns() >= deadline)
            return ct__error(CT_ETIMEDOUT, "pipeline p2p: no stage of this group connected");
    }
}

static int start_reader(ct__p2p *p, p2p_link *l)
{
    void **a = malloc(2 * sizeof *a);
    if (!a)
        return CT_ENOMEM;
    a[0] = p;
    a[1] = l;
    if (pthread_create(&l->reader, NULL, reader_main, a) != 0) {
        free(a);
        return ct__error(CT_ENOMEM, "pipeline p2p: cannot start a reader thread");
    }
    l->reader_started = true;
    return 0;
}

int ct__p2p_open(const ct_rendezvous *rdv, const char *group, int me, const int *peers, int npeers,
                 int timeout_ms, ct__p2p **out)
{
    if (!rdv || !group || !out || npeers < 0 || (npeers && !peers) || timeout_ms <= 0)
        return ct__error(CT_EINVAL, "pipeline p2p: bad arguments");
    *out = NULL;
    ct__p2p *p = calloc(1, sizeof *p);
    if (!p || !(p->links = calloc((size_t)(npeers ? npeers : 1), sizeof *p->links))) {
        free(p);
        return ct__error(CT_ENOMEM, "pipeline p2p: out of memory");
    }
    p->me = me;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 0; i < npeers; i++) {
        p->links[i] = (p2p_link){.peer = peers[i], .fd = -1};
        pthread_mutex_init(&p->links[i].send_mu, NULL);
    }
    p->nlinks = npeers;
    uint64_t ghash = ct__fnv1a64(group, strlen(group));
    int64_t deadline = ct__now_ns() + (int64_t)timeout_ms * 1000000;
    char key[256], addr[300];
    int lfd = -1, rc = listen_here(addr, sizeof addr, &lfd);
    snprintf(key, sizeof key, "%s/p2p/%d", group, me);
    if (rc == 0 && (rc = rdv->put(rdv->ctx, key, addr, strlen(addr) + 1)) < 0)
        ct__error(rc, "pipeline p2p: publishing %s: %s", key, ct_strerror(rc));
    for (int i = 0; i < npeers && rc == 0; i++) { /* upward: connect */
        p2p_link *l = &p->links[i];
        if (l->peer < me)
            continue;
        void *v = NULL;
        size_t len = 0;
        snprintf(key, sizeof key, "%s/p2p/%d", group, l->peer);
        if ((rc = rdv->get(rdv->ctx, key, &v, &len, ms_until(deadline))) < 0) {
            ct__error(rc, "pipeline p2p: stage %d's address (%s): %s", l->peer, key,
                      ct_strerror(rc));
            break;
        }
        char peer_addr[300];
        snprintf(peer_addr, sizeof peer_addr, "%.*s", (int)len, (char *)v);
        free(v);
        struct hello h = {HELLO_MAGIC, me, ghash};
        if ((rc = ct__tcp_connect(peer_addr, SOCK_BUF, deadline, "pipeline p2p", &l->fd)) < 0)
            break;
        set_timeout(l->fd, SO_SNDTIMEO, timeout_ms);
        if ((rc = ct__auth_connect(l->fd, ms_until(deadline))) == 0 &&
            (rc = io_all(l->fd, &h, sizeof h, true)) < 0)
            ct__error(rc, "pipeline p2p: hello to stage %d at %s: %s", l->peer, peer_addr,
                      ct_strerror(rc));
    }
    for (int i = 0; i < npeers && rc == 0; i++) { /* from below: accept, in any order */
        if (p->links[i].peer > me)
            continue;
        int fd = -1, stage = -1;
        if ((rc = accept_one(lfd, ghash, deadline, timeout_ms, &fd, &stage)) < 0)
            break;
        p2p_link *l = link_of(p, stage);
        if (!l || l->peer > me || l->fd >= 0) {
            close(fd);
            rc = ct__error(CT_EPROTO, "pipeline p2p: stage %d connected to stage %d unasked", stage,
                           me);
            break;
        }
        l->fd = fd;
    }
    if (lfd >= 0)
        close(lfd);
    for (int i = 0; i < npeers && rc == 0; i++)
        rc = start_reader(p, &p->links[i]);
    if (rc < 0) {
        ct__p2p_close(&p);
        return rc;
    }
    *out = p;
    return 0;
}

int ct__p2p_send(ct__p2p *p, int peer, uint64_t tag, ct_tensor *t)
{
    p2p_link *l = p ? link_of(p, peer) : NULL;
    if (!l || !t || ct_tensor_ndim(t) > MAX_DIMS || ct_tensor_dtype(t) != CT_F32)
        return ct__error(CT_EINVAL, "pipeline p2p: no link to stage %d, or not an f32 tensor",
                         peer);
    /* plain row-major bytes on the host */
    ct_tensor *plain = ct_nn_to_plain(t);
    ct_tensor *host = plain ? ct_tensor_to(plain, CT_CPU) : NULL;
    ct_tensor_release(&plain);
    if (!host)
        return CT_ENOMEM; /* the copy said why */
    struct header h = {.magic = MSG_MAGIC, .ndim = (uint32_t)ct_tensor_ndim(host), .tag = tag};
    for (int d = 0; d < ct_tensor_ndim(host); d++)
        h.shape[d] = ct_tensor_dim(host, d);
    h.bytes = (uint64_t)ct_tensor_numel(host) * sizeof(float);
    pthread_mutex_lock(&l->send_mu);
    int rc = io_all(l->fd, &h, sizeof h, true);
    if (rc == 0)
        rc = io_all(l->fd, ct_tensor_data(host), h.bytes, true);
    pthread_mutex_unlock(&l->send_mu);
    ct_tensor_release(&host);
    if (rc < 0)
        return ct__error(rc, "pipeline p2p: send to stage %d: %s", peer, ct_strerror(rc));
    p->sent += sizeof h + h.bytes;
    return 0;
}

int ct__p2p_recv(ct__p2p *p, int peer, uint64_t tag, int timeout_ms, ct_tensor **out)
{
    p2p_link *l = p ? link_of(p, peer) : NULL;
    if (!l || !out)
        return ct__error(CT_EINVAL, "pipeline p2p: no link to stage %d", peer);
    *out = NULL;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        msg *prev = NULL, *m = l->head;
        while (m && m->tag != tag) {
            prev = m;
            m = m->next;
        }
        if (m) {
            if (prev)
                prev->next = m->next;
            else
                l->head = m->next;
            if (l->tail == m)
                l->tail = prev;
            *out = m->t;
            free(m);
            break;
        }
        if (l->err) {
            rc = l->err;
            break;
        }
        if (pthread_cond_timedwait(&p->cv, &p->mu, &until) == ETIMEDOUT) {
            rc = CT_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == CT_EDEAD)
        return ct__error(rc, "pipeline p2p: stage %d's link closed (the stage died or ended)",
                         peer);
    if (rc < 0)
        return ct__error(rc, "pipeline p2p: receiving from stage %d: %s", peer, ct_strerror(rc));
    return 0;
}

void ct__p2p_bytes(const ct__p2p *p, uint64_t *sent, uint64_t *received)
{
    *sent = p ? p->sent : 0;
    *received = p ? p->received : 0;
}

void ct__p2p_close(ct__p2p **pp)
{
    if (!pp || !*pp)
        return;
    ct__p2p *p = *pp;
    for (int i = 0; i < p->nlinks; i++)
        if (p->links[i].fd >= 0)
            shutdown(p->links[i].fd, SHUT_RDWR); /* ends the reader's recv */
    for (int i = 0; i < p->nlinks; i++) {
        p2p_link *l = &p->links[i];
        if (l->reader_started)
            pthread_join(l->reader, NULL);
        if (l->fd >= 0)
            close(l->fd);
        while (l->head) {
            msg *m = l->head;
            l->head = m->next;
            ct_tensor_release(&m->t);
            free(m);
        }
        pthread_mutex_destroy(&l->send_mu);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->links);
    free(p);
    *pp = NULL;
}
