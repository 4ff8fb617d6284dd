/* objectstore/transfer.c — chunk server (ROUTER thread) and pull client (DEALER, pipelined).
 *
 * Server: one thread, one ROUTER socket, plus an inproc PAIR on which destroy says "stop".
 * Each chunk request pins the object (ct_store_get), computes the chunk's CRC-32C from shared
 * memory, and sends the bytes with zmq_msg_init_data: ZeroMQ calls chunk_free from its I/O
 * thread once the bytes are on the wire, which unpins. Nothing is copied in user space.
 *
 * Data port: a plain-TCP listener (xfer_data.c) polled by the same thread; its connections
 * run on threads of their own. The ObjStat reply advertises its port.
 *
 * Client: see transfer.h for the protocol. With a data port, pull_data() receives chunks
 * straight into the unsealed object; otherwise (or with opts.zmq_only) the ZeroMQ path below. Per
 * chunk it keeps a state (missing, in flight, done) and the req_id of its outstanding request; a
 * reply is accepted only if its req_id and offset match, so stale replies from an earlier holder or
 * a re-request are ignored. Bytes go from the ZeroMQ message into the unsealed object with one pass
 * that copies and checksums.
 *
 * Not here: holder discovery, retries across pulls, replication. */
#define _GNU_SOURCE
#include "objectstore/transfer.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "common/auth.h"
#include "common/common.h"
#include "common/fault.h"
#include "objectstore/crc32c.h"
#include "objectstore/xfer_data.h"
#include "proto/msg.h"

#define MAX_REQUEST_BYTES 65536

struct ct_xfer_server {
    ct_store *store;
    void *ctx;
    int own_ctx;
    int zap; /* a ZAP handler reference on ctx (auth.h) */
    void *router;
    void *pipe_main, *pipe_thread;
    pthread_t thread;
    int thread_started;
    char endpoint[256];
    char sender[128];
    int delay_ms;
    int outstanding;         /* zero-copy chunks not yet released by ZeroMQ (__atomic) */
    ct__xdata_server *xd;    /* the plain-TCP data port, or NULL (ZeroMQ chunks only) */
    ct_xfer_server_stats st; /* updated with __atomic */
};

typedef struct pinned_chunk {
    ct_store *store;
    ct_store_view view;
    int *outstanding; /* the server's count of chunks ZeroMQ still holds */
} pinned_chunk;

/* Called by ZeroMQ (its I/O thread, or zmq_close) when a chunk's bytes are no longer needed. */
static void chunk_free(void *data, void *hint)
{
    pinned_chunk *pc = hint;
    CT__TSAN_ACQUIRE(pc); /* filled by the server thread, freed here by ZeroMQ's I/O thread */
    ct_store_release(pc->store, &pc->view);
    __atomic_fetch_sub(pc->outstanding, 1, __ATOMIC_RELEASE);
    free(pc);
}

static void stat_add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

/* Sends [rid][packed header][data?]. data_msg (may be NULL) is consumed. */
static int send_reply(ct_xfer_server *srv, zmq_msg_t *rid, const Ct__ObjXfer *h,
                      zmq_msg_t *data_msg)
{
    size_t n = ct__obj_xfer__get_packed_size(h);
    zmq_msg_t hm;
    int rc = 0;
    if (zmq_msg_init_size(&hm, n) != 0) {
        if (data_msg)
            zmq_msg_close(data_msg);
        return CT_ENOMEM;
    }
    ct__obj_xfer__pack(h, zmq_msg_data(&hm));
    zmq_msg_t r;
    zmq_msg_init(&r);
    zmq_msg_copy(&r, rid);
    if (zmq_msg_send(&r, srv->router, ZMQ_SNDMORE) < 0 ||
        zmq_msg_send(&hm, srv->router, data_msg ? ZMQ_SNDMORE : 0) < 0 ||
        (data_msg && zmq_msg_send(data_msg, srv->router, 0) < 0)) {
        rc = CT_EZMQ;
        CT_LOG(CT_LOG_WARN, "xfer", "%s: reply not sent: %s", srv->sender,
               zmq_strerror(zmq_errno()));
    }
    zmq_msg_close(&r);
    zmq_msg_close(&hm);
    if (data_msg)
        zmq_msg_close(data_msg);
    return rc;
}

static void reply_error(ct_xfer_server *srv, zmq_msg_t *rid, uint64_t req_id, int code,
                        const char *field, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static void reply_error(ct_xfer_server *srv, zmq_msg_t *rid, uint64_t req_id, int code,
                        const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    Ct__Error err = CT__ERROR__INIT;
    err.code = code;
    err.message = msg;
    err.field = (char *)field;
    Ct__ObjXfer h = CT__OBJ_XFER__INIT;
    h.major = CT_PROTO_MAJOR;
    h.minor = CT_PROTO_MINOR;
    h.req_id = req_id;
    h.sender = srv->sender;
    h.body_case = CT__OBJ_XFER__BODY_ERROR;
    h.error = &err;
    stat_add(&srv->st.errors, 1);
    CT_LOG(CT_LOG_DEBUG, "xfer", "%s: error reply %d: %s", srv->sender, code, msg);
    send_reply(srv, rid, &h, NULL);
}

static void serve_one(ct_xfer_server *srv, zmq_msg_t *rid, zmq_msg_t *body, int extra_frames)
{
    char hex[2 * CT_OBJECT_ID_LEN + 1];
    Ct__ObjXfer *rq =
        ct__obj_xfer__unpack(NULL, zmq_msg_size(body), (const uint8_t *)zmq_msg_data(body));
    if (!rq) {
        reply_error(srv, rid, 0, CT_EPROTO, "", "undecodable ObjXfer request (%zu bytes)",
                    zmq_msg_size(body));
        return;
    }
    uint64_t req_id = rq->req_id;
    const ProtobufCBinaryData *oid = NULL;
    if (rq->major != CT_PROTO_MAJOR) {
        reply_error(srv, rid, req_id, CT_EPROTO, "major",
                    "protocol version %u.x from %s, this node speaks %d.x", rq->major,
                    rq->sender ? rq->sender : "?", CT_PROTO_MAJOR);
        goto out;
    }
    if (extra_frames) {
        reply_error(srv, rid, req_id, CT_EPROTO, "", "request with %d unexpected extra frames",
                    extra_frames);
        goto out;
    }
    if (rq->body_case == CT__OBJ_XFER__BODY_STAT)
        oid = &rq->stat->object_id;
    else if (rq->body_case == CT__OBJ_XFER__BODY_CHUNK)
        oid = &rq->chunk->object_id;
    else {
        reply_error(srv, rid, req_id, CT_EPROTO, "body",
                    "unexpected request body %d (want stat or chunk)", (int)rq->body_case);
        goto out;
    }
    if (oid->len != CT_OBJECT_ID_LEN) {
        reply_error(srv, rid, req_id, CT_EINVAL, "object_id", "object_id of %zu bytes, want %d",
                    oid->len, CT_OBJECT_ID_LEN);
        goto out;
    }
    ct_object_id id;
    memcpy(id.b, oid->data, CT_OBJECT_ID_LEN);
    ct_object_id_hex(&id, hex);

    Ct__ObjXfer h = CT__OBJ_XFER__INIT;
    h.major = CT_PROTO_MAJOR;
    h.minor = CT_PROTO_MINOR;
    h.req_id = req_id;
    h.sender = srv->sender;
    if (rq->body_case == CT__OBJ_XFER__BODY_STAT) {
        uint64_t size;
        if (ct_store_size(srv->store, &id, &size)) {
            reply_error(srv, rid, req_id, CT_ENOENT, "object_id", "%s has no object %s",
                        srv->sender, hex);
            goto out;
        }
        Ct__ObjStatReply sr = CT__OBJ_STAT_REPLY__INIT;
        sr.size = size;
        sr.data_port = ct__xdata_server_port(srv->xd);
        h.body_case = CT__OBJ_XFER__BODY_STAT_REPLY;
        h.stat_reply = &sr;
        send_reply(srv, rid, &h, NULL);
        goto out;
    }

    /* Chunk. */
    uint64_t off = rq->chunk->offset, len = rq->chunk->size;
    pinned_chunk *pc = calloc(1, sizeof *pc);
    if (!pc) {
        reply_error(srv, rid, req_id, CT_ENOMEM, "", "%s: out of memory", srv->sender);
        goto out;
    }
    pc->store = srv->store;
    pc->outstanding = &srv->outstanding;
    if (ct_store_get(srv->store, &id, &pc->view)) {
        free(pc);
        reply_error(srv, rid, req_id, CT_ENOENT, "object_id", "%s has no object %s", srv->sender,
                    hex);
        goto out;
    }
    uint64_t osize = pc->view.size;
    int clip = rq->chunk->clip;
    if (clip && len && len <= CT_XFER_MAX_CHUNK)
        len = off >= osize ? 0 : len < osize - off ? len : osize - off;
    if (len > CT_XFER_MAX_CHUNK ||
        (!clip && (off > osize || len > osize - off || (!len && osize))) ||
        (clip && !rq->chunk->size)) {
        ct_store_release(srv->store, &pc->view);
        free(pc);
        reply_error(srv, rid, req_id, CT_ERANGE, "offset",
                    "chunk [%llu, +%llu) out of range for object %s of %llu bytes (max chunk "
                    "%llu)",
                    (unsigned long long)off, (unsigned long long)len, hex,
                    (unsigned long long)osize, (unsigned long long)CT_XFER_MAX_CHUNK);
        goto out;
    }
    if (srv->delay_ms)
        usleep((useconds_t)srv->delay_ms * 1000);
    const unsigned char *data = (const unsigned char *)pc->view.data + (len ? off : 0);
    Ct__ObjChunkReply cr = CT__OBJ_CHUNK_REPLY__INIT;
    cr.offset = off;
    cr.size = len;
    cr.crc32c = ct__crc32c(0, data, len);
    cr.object_size = osize;
    h.body_case = CT__OBJ_XFER__BODY_CHUNK_REPLY;
    h.chunk_reply = &cr;
    zmq_msg_t dm;
    CT__TSAN_RELEASE(pc);
    if (zmq_msg_init_data(&dm, (void *)data, len, chunk_free, pc) != 0) {
        ct_store_release(srv->store, &pc->view);
        free(pc);
        reply_error(srv, rid, req_id, CT_ENOMEM, "", "%s: out of memory", srv->sender);
        goto out;
    }
    /* From here ZeroMQ owns pc: chunk_free unpins once the bytes are sent (or dropped). */
    __atomic_fetch_add(&srv->outstanding, 1, __ATOMIC_RELAXED);
    if (send_reply(srv, rid, &h, &dm) == 0) {
        stat_add(&srv->st.chunks, 1);
        stat_add(&srv->st.bytes, len);
    }
out:
    ct__obj_xfer__free_unpacked(rq, NULL);
}

static void *server_thread(void *arg)
{
    ct_xfer_server *srv = arg;
    ct__log_set_who(srv->sender);
    zmq_pollitem_t items[3] = {{srv->router, 0, ZMQ_POLLIN, 0},
                               {srv->pipe_thread, 0, ZMQ_POLLIN, 0},
                               {NULL, ct__xdata_server_fd(srv->xd), ZMQ_POLLIN, 0}};
    int nitems = srv->xd ? 3 : 2;
    for (;;) {
        if (zmq_poll(items, nitems, -1) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            break;
        }
        if (items[1].revents)
            break;
        if (nitems == 3 && (items[2].revents & ZMQ_POLLIN))
            ct__xdata_server_accept(srv->xd);
        if (!(items[0].revents & ZMQ_POLLIN))
            continue;
        /* One message: [rid][body][extra...]. */
        for (int burst = 0; burst < 64; burst++) {
            zmq_msg_t rid, body, extra;
            zmq_msg_init(&rid);
            if (zmq_msg_recv(&rid, srv->router, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&rid);
                break;
            }
            stat_add(&srv->st.requests, 1);
            zmq_msg_init(&body);
            int nextra = 0, have_body = 0;
            if (zmq_msg_more(&rid) && zmq_msg_recv(&body, srv->router, 0) >= 0) {
                have_body = 1;
                int more = zmq_msg_more(&body);
                while (more) {
                    zmq_msg_init(&extra);
                    if (zmq_msg_recv(&extra, srv->router, 0) < 0) {
                        zmq_msg_close(&extra);
                        break;
                    }
                    more = zmq_msg_more(&extra);
                    zmq_msg_close(&extra);
                    nextra++;
                }
            }
            if (have_body)
                serve_one(srv, &rid, &body, nextra);
            else
                reply_error(srv, &rid, 0, CT_EPROTO, "", "empty request");
            zmq_msg_close(&body);
            zmq_msg_close(&rid);
        }
    }
    return NULL;
}

ct_xfer_server *ct_xfer_server_new(ct_store *store, const ct_xfer_server_opts *opts)
{
    static const ct_xfer_server_opts defaults;
    if (!store) {
        ct__error(CT_EINVAL, "ct_xfer_server_new: NULL store");
        return NULL;
    }
    if (!opts)
        opts = &defaults;
    ct_xfer_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        ct__error(CT_ENOMEM, "ct_xfer_server_new: out of memory");
        return NULL;
    }
    srv->store = store;
    srv->delay_ms = opts->delay_ms;
    snprintf(srv->sender, sizeof srv->sender, "%s",
             opts->sender ? opts->sender : ct_store_name(store));
    const char *bind = opts->bind ? opts->bind : "tcp://127.0.0.1:*";
    srv->ctx = opts->zmq_ctx;
    if (!srv->ctx) {
        srv->ctx = zmq_ctx_new();
        srv->own_ctx = 1;
        if (!srv->ctx) {
            ct__error(CT_EZMQ, "xfer server: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
            goto err;
        }
    }
    srv->router = zmq_socket(srv->ctx, ZMQ_ROUTER);
    int64_t maxmsg = MAX_REQUEST_BYTES;
    int zero = 0, hwm = 0;
    /* only holders of the cluster secret get through the handshake (common/auth.h) */
    if (!srv->router || ct__auth_zmq_server(srv->router) || ct__auth_zap_start(srv->ctx))
        goto err;
    srv->zap = 1;
    if (zmq_setsockopt(srv->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) ||
        zmq_setsockopt(srv->router, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(srv->router, ZMQ_SNDHWM, &hwm, sizeof hwm) ||
        zmq_bind(srv->router, bind) != 0) {
        ct__error(CT_EZMQ, "xfer server: bind %s: %s", bind, zmq_strerror(zmq_errno()));
        goto err;
    }
    size_t eplen = sizeof srv->endpoint;
    zmq_getsockopt(srv->router, ZMQ_LAST_ENDPOINT, srv->endpoint, &eplen);
    char pipe_ep[64];
    snprintf(pipe_ep, sizeof pipe_ep, "inproc://ct-xfer-stop-%p", (void *)srv);
    srv->pipe_thread = zmq_socket(srv->ctx, ZMQ_PAIR);
    srv->pipe_main = zmq_socket(srv->ctx, ZMQ_PAIR);
    if (!srv->pipe_thread || !srv->pipe_main || zmq_bind(srv->pipe_thread, pipe_ep) ||
        zmq_connect(srv->pipe_main, pipe_ep)) {
        ct__error(CT_EZMQ, "xfer server: stop pipe: %s", zmq_strerror(zmq_errno()));
        goto err;
    }
    zmq_setsockopt(srv->pipe_main, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(srv->pipe_thread, ZMQ_LINGER, &zero, sizeof zero);
    srv->xd = ct__xdata_server_new(store, srv->endpoint, srv->sender, srv->delay_ms, &srv->st);
    if (pthread_create(&srv->thread, NULL, server_thread, srv) != 0) {
        ct__error(CT_ENOMEM, "xfer server: cannot start thread");
        goto err;
    }
    srv->thread_started = 1;
    CT_LOG(CT_LOG_INFO, "xfer", "%s: serving store %s on %s", srv->sender, ct_store_name(store),
           srv->endpoint);
    return srv;
err:
    ct_xfer_server_destroy(&srv);
    return NULL;
}

const char *ct_xfer_server_endpoint(const ct_xfer_server *srv)
{
    return srv ? srv->endpoint : "";
}

uint16_t ct_xfer_server_data_port(const ct_xfer_server *srv)
{
    return srv && srv->xd ? ct__xdata_server_port(srv->xd) : 0;
}

void ct_xfer_server_get_stats(ct_xfer_server *srv, ct_xfer_server_stats *st)
{
    if (!srv || !st)
        return;
    st->requests = __atomic_load_n(&srv->st.requests, __ATOMIC_RELAXED);
    st->chunks = __atomic_load_n(&srv->st.chunks, __ATOMIC_RELAXED);
    st->bytes = __atomic_load_n(&srv->st.bytes, __ATOMIC_RELAXED);
    st->errors = __atomic_load_n(&srv->st.errors, __ATOMIC_RELAXED);
    st->bytes_in = __atomic_load_n(&srv->st.bytes_in, __ATOMIC_RELAXED);
}

void ct_xfer_server_destroy(ct_xfer_server **sp)
{
    if (!sp || !*sp)
        return;
    ct_xfer_server *srv = *sp;
    if (srv->thread_started) {
        zmq_send(srv->pipe_main, "", 0, 0);
        pthread_join(srv->thread, NULL);
    }
    ct__xdata_server_destroy(&srv->xd); /* cuts data connections, joins them, unpins */
    if (srv->pipe_main)
        zmq_close(srv->pipe_main);
    if (srv->pipe_thread)
        zmq_close(srv->pipe_thread);
    if (srv->router)
        zmq_close(srv->router);
    if (srv->zap)
        ct__auth_zap_stop(srv->ctx);
    /* zmq_ctx_term waits until queued zero-copy chunks are released (linger 0 drops them);
     * with a shared context, wait for them here: they pin objects of srv->store. */
    if (srv->own_ctx && srv->ctx)
        zmq_ctx_term(srv->ctx);
    for (int i = 0; i < 10000 && __atomic_load_n(&srv->outstanding, __ATOMIC_ACQUIRE); i++)
        usleep(1000);
    if (__atomic_load_n(&srv->outstanding, __ATOMIC_ACQUIRE)) {
        /* ZeroMQ still holds chunks after 10 s: leak srv rather than free what they point to. */
        CT_LOG(CT_LOG_ERROR, "xfer", "%s: %d chunks still queued at destroy", srv->sender,
               srv->outstanding);
        *sp = NULL;
        return;
    }
    free(srv);
    *sp = NULL;
}

/* ---- pull ---- */

enum { CH_MISSING = 0, CH_INFLIGHT = 1, CH_DONE = 2 };

/* pull_over_port has no data port to use: go the ZeroMQ way (not an error code). */
#define PULL_VIA_ZMQ 1

typedef struct pull {
    ct_store *dst; /* NULL: into a private buffer (ct_xfer_pull_mem) */
    const ct_object_id *id;
    const ct_xfer_pull_opts *o;
    ct_xfer_pull_stats *st;
    uint64_t chunk;
    int window, timeout_ms, max_retries, corrupt_chunk;
    int sized; /* size known, object created in dst */
    uint64_t size, nchunks, ndone;
    unsigned char *buf; /* the unsealed object in dst */
    uint8_t *state;     /* per chunk */
    uint64_t *req_of;   /* outstanding req_id per chunk */
    uint8_t *retries;   /* CRC failures per chunk */
    uint64_t next_req, received, inflight;
    uint64_t probe_first, probe_n; /* req_ids of the clip probes sent before the size is known */
    int64_t deadline;              /* ct__now_ms() limit for the whole pull, 0 = none */
    int expired;
    int zmq_only; /* chunks over ZeroMQ, never the data port */
    char why[1024];
} pull;

static void why_add(pull *p, int h, const char *holder, const char *msg)
{
    size_t n = strlen(p->why);
    snprintf(p->why + n, sizeof p->why - n, "%s[%d] %s: %s", n ? "; " : "", h, holder, msg);
}

static uint64_t chunk_len(const pull *p, uint64_t c)
{
    uint64_t off = c * p->chunk;
    return p->size - off < p->chunk ? p->size - off : p->chunk;
}

static int send_chunk_req(pull *p, void *sock, uint64_t c, int clip, uint64_t *req_out)
{
    Ct__ObjXfer h = CT__OBJ_XFER__INIT;
    Ct__ObjChunk ch = CT__OBJ_CHUNK__INIT;
    uint64_t req = ++p->next_req;
    h.major = CT_PROTO_MAJOR;
    h.minor = CT_PROTO_MINOR;
    h.req_id = req;
    h.sender = "pull";
    ch.object_id.data = (uint8_t *)p->id->b;
    ch.object_id.len = CT_OBJECT_ID_LEN;
    ch.offset = c * p->chunk;
    ch.size = clip ? p->chunk : chunk_len(p, c);
    ch.clip = clip;
    h.body_case = CT__OBJ_XFER__BODY_CHUNK;
    h.chunk = &ch;
    uint8_t buf[128];
    size_t n = ct__obj_xfer__get_packed_size(&h);
    if (n > sizeof buf)
        return CT_EINVAL;
    ct__obj_xfer__pack(&h, buf);
    if (zmq_send(sock, buf, n, 0) != (int)n)
        return CT_EZMQ;
    *req_out = req;
    return 0;
}

/* Fills the window with the lowest missing chunks. */
static int refill(pull *p, void *sock, uint64_t *cursor)
{
    while (*cursor < p->nchunks && p->state[*cursor] == CH_DONE)
        (*cursor)++;
    for (uint64_t c = *cursor; c < p->nchunks && p->inflight < (uint64_t)p->window; c++) {
        if (p->state[c] != CH_MISSING)
            continue;
        int rc = send_chunk_req(p, sock, c, 0, &p->req_of[c]);
        if (rc)
            return rc;
        p->state[c] = CH_INFLIGHT;
        p->inflight++;
    }
    return 0;
}

/* Receives one message: the header frame (unpacked) and the data frame, if any. Returns 0,
 * CT_ETIMEDOUT, CT_EZMQ, or CT_EPROTO (undecodable: the caller ignores it). */
static int recv_reply(void *sock, int timeout_ms, Ct__ObjXfer **hdr, zmq_msg_t *data,
                      int *have_data)
{
    *hdr = NULL;
    *have_data = 0;
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    int r = zmq_poll(&it, 1, timeout_ms);
    if (r < 0)
        return CT_EZMQ;
    if (r == 0)
        return CT_ETIMEDOUT;
    zmq_msg_t hm;
    zmq_msg_init(&hm);
    if (zmq_msg_recv(&hm, sock, 0) < 0) {
        zmq_msg_close(&hm);
        return CT_EZMQ;
    }
    int more = zmq_msg_more(&hm);
    if (more) {
        zmq_msg_recv(data, sock, 0);
        *have_data = 1;
        more = zmq_msg_more(data);
        while (more) { /* drain anything unexpected */
            zmq_msg_t x;
            zmq_msg_init(&x);
            zmq_msg_recv(&x, sock, 0);
            more = zmq_msg_more(&x);
            zmq_msg_close(&x);
        }
    }
    *hdr = ct__obj_xfer__unpack(NULL, zmq_msg_size(&hm), zmq_msg_data(&hm));
    zmq_msg_close(&hm);
    return *hdr ? 0 : CT_EPROTO;
}

/* First reply with the object's size: create the object in dst and the chunk tables, and
 * adopt the probes in flight as requests for their chunks. */
static int on_size(pull *p, uint64_t size)
{
    p->size = size;
    p->nchunks = (size + p->chunk - 1) / p->chunk;
    size_t n = p->nchunks ? p->nchunks : 1;
    p->state = calloc(n, 1);
    p->retries = calloc(n, 1);
    p->req_of = calloc(n, sizeof *p->req_of);
    if (!p->state || !p->retries || !p->req_of)
        return ct__error(CT_ENOMEM, "pull: out of memory");
    void *buf = NULL;
    int rc = p->dst ? ct_store_create(p->dst, p->id, size, &buf) : 0;
    if (rc)
        return rc;
    if (!p->dst && !(buf = malloc(size ? size : 1)))
        return ct__error(CT_ENOMEM, "pull: no memory for %llu bytes", (unsigned long long)size);
    p->buf = buf;
    p->sized = 1;
    p->inflight = 0;
    for (uint64_t c = 0; c < p->probe_n && c < p->nchunks; c++) {
        p->state[c] = CH_INFLIGHT;
        p->req_of[c] = p->probe_first + c;
        p->inflight++;
    }
    if (p->st) {
        p->st->size = size;
        p->st->chunks = p->nchunks;
    }
    return 0;
}

/* How long the next wait on holder may last: timeout_ms, cut to what is left of the whole
 * pull's deadline. 0 when the deadline has passed (p->expired is then set). */
static int next_wait(pull *p)
{
    int wait = p->timeout_ms;
    if (p->deadline) {
        int64_t left = p->deadline - ct__now_ms();
        if (left <= 0) {
            p->expired = 1;
            return 0;
        }
        wait = left < wait ? (int)left : wait;
    }
    return wait;
}

/* ObjStat over ZeroMQ: the object's size and the holder's data port (0: none advertised).
 * Returns 0, or as pull_from when the holder fails. */
static int stat_holder(pull *p, void *sock, int h, const char *holder, uint64_t *size,
                       uint16_t *port)
{
    Ct__ObjXfer q = CT__OBJ_XFER__INIT;
    Ct__ObjStat sq = CT__OBJ_STAT__INIT;
    uint64_t req = ++p->next_req;
    q.major = CT_PROTO_MAJOR;
    q.minor = CT_PROTO_MINOR;
    q.req_id = req;
    q.sender = "pull";
    sq.object_id.data = (uint8_t *)p->id->b;
    sq.object_id.len = CT_OBJECT_ID_LEN;
    q.body_case = CT__OBJ_XFER__BODY_STAT;
    q.stat = &sq;
    uint8_t buf[128];
    size_t n = ct__obj_xfer__get_packed_size(&q);
    ct__obj_xfer__pack(&q, buf);
    if (n > sizeof buf || zmq_send(sock, buf, n, 0) != (int)n) {
        why_add(p, h, holder, "cannot send");
        return CT_EZMQ;
    }
    for (;;) {
        Ct__ObjXfer *rep;
        zmq_msg_t data;
        int have_data;
        char m[160];
        int wait = next_wait(p);
        if (!wait)
            return CT_ETIMEDOUT;
        zmq_msg_init(&data);
        int rc = recv_reply(sock, wait, &rep, &data, &have_data);
        zmq_msg_close(&data);
        if (rc == CT_ETIMEDOUT && wait < p->timeout_ms)
            continue; /* next_wait ends the pull */
        if (rc == CT_ETIMEDOUT || rc == CT_EZMQ) {
            snprintf(m, sizeof m, "no reply for %d ms (size query)", p->timeout_ms);
            why_add(p, h, holder, m);
            return CT_ETIMEDOUT;
        }
        if (rc)
            continue;
        if (rep->req_id != req) {
            ct__obj_xfer__free_unpacked(rep, NULL);
            continue;
        }
        if (rep->body_case == CT__OBJ_XFER__BODY_ERROR) {
            int code = rep->error->code;
            why_add(p, h, holder, rep->error->message ? rep->error->message : "error");
            ct__obj_xfer__free_unpacked(rep, NULL);
            return code == CT_ENOENT ? CT_ENOENT : CT_EPROTO;
        }
        if (rep->body_case != CT__OBJ_XFER__BODY_STAT_REPLY) {
            ct__obj_xfer__free_unpacked(rep, NULL);
            why_add(p, h, holder, "unexpected reply to a size query");
            return CT_EPROTO;
        }
        const Ct__ObjStatReply *sr = rep->stat_reply;
        *size = sr->size;
        *port = sr->data_port <= 65535 ? (uint16_t)sr->data_port : 0;
        ct__obj_xfer__free_unpacked(rep, NULL);
        return 0;
    }
}

/* Fetches the missing chunks over the holder's data connection fd: keeps `window` requests
 * queued at the holder, receives each chunk straight into the unsealed object, checksums it
 * piece by piece as it lands. Returns like pull_from. */
static int pull_data(pull *p, int fd, int h, const char *holder)
{
    char m[200];
    uint64_t W = (uint64_t)p->window, qh = 0, qn = 0, cursor = 0;
    uint64_t *q = malloc(W * sizeof *q);
    ct_xd_req *reqs = malloc(W * sizeof *reqs);
    int rc = 0, cur_wait = -1;
    if (!q || !reqs) {
        rc = ct__error(CT_ENOMEM, "pull: out of memory");
        goto out;
    }
    while (p->ndone < p->nchunks) {
        /* Queue requests for the lowest missing chunks, in one send. */
        while (cursor < p->nchunks && p->state[cursor] == CH_DONE)
            cursor++;
        size_t nr = 0;
        for (uint64_t c = cursor; c < p->nchunks && qn < W; c++) {
            if (p->state[c] != CH_MISSING)
                continue;
            ct_xd_req *r = &reqs[nr++];
            memset(r, 0, sizeof *r);
            r->magic = CT_XD_REQ_MAGIC;
            memcpy(r->id, p->id->b, CT_OBJECT_ID_LEN);
            r->offset = c * p->chunk;
            r->size = chunk_len(p, c);
            p->state[c] = CH_INFLIGHT;
            q[(qh + qn++) % W] = c;
        }
        if (ct__xdata_send_all(fd, reqs, nr * sizeof *reqs, 0)) {
            snprintf(m, sizeof m, "data port: send: %s", strerror(errno));
            why_add(p, h, holder, m);
            rc = CT_EIO;
            goto out;
        }
        if (!qn) { /* cannot happen: a missing chunk is always requested */
            why_add(p, h, holder, "data port: nothing in flight");
            rc = CT_EPROTO;
            goto out;
        }
        int wait = next_wait(p);
        if (!wait) {
            rc = CT_ETIMEDOUT;
            goto out;
        }
        if (wait != cur_wait) {
            struct timeval tv = {wait / 1000, (wait % 1000) * 1000};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            cur_wait = wait;
        }
        uint64_t c = q[qh];
        qh = (qh + 1) % W;
        qn--;
        ct_xd_rep r;
        uint32_t end[2];
        uint64_t off = c * p->chunk, len = chunk_len(p, c);
        rc = ct__xdata_recv_all(fd, &r, sizeof r);
        if (!rc && r.magic != CT_XD_REP_MAGIC) {
            why_add(p, h, holder, "data port: bad reply header");
            rc = CT_EPROTO;
            goto out;
        }
        if (!rc && r.status) {
            snprintf(m, sizeof m, "data port: %s for chunk at %llu", ct_strerror(r.status),
                     (unsigned long long)off);
            why_add(p, h, holder, m);
            rc = r.status == CT_ENOENT ? CT_ENOENT : CT_EPROTO;
            goto out;
        }
        if (!rc && (r.offset != off || r.size != len || r.object_size != p->size)) {
            snprintf(m, sizeof m,
                     "data port: reply [%llu, +%llu) of %llu, want [%llu, +%llu) of %llu",
                     (unsigned long long)r.offset, (unsigned long long)r.size,
                     (unsigned long long)r.object_size, (unsigned long long)off,
                     (unsigned long long)len, (unsigned long long)p->size);
            why_add(p, h, holder, m);
            rc = CT_EPROTO;
            goto out;
        }
        int corrupt = ++p->received == (uint64_t)p->corrupt_chunk && len;
        uint32_t crc = 0;
        unsigned char *dst = p->buf + off;
        for (uint64_t done = 0; !rc && done < len;) {
            size_t n = len - done < CT_XD_PIECE ? (size_t)(len - done) : CT_XD_PIECE;
            rc = ct__xdata_recv_all(fd, dst + done, n);
            if (rc)
                break;
            if (corrupt && len / 2 >= done && len / 2 < done + n) {
                dst[len / 2] ^= 0x01; /* test hook: damage in transit */
                CT_LOG(CT_LOG_INFO, "xfer", "pull: test hook flipped a byte of chunk %llu",
                       (unsigned long long)c);
            }
            crc = ct__crc32c(crc, dst + done, n);
            done += n;
        }
        if (!rc)
            rc = ct__xdata_recv_all(fd, end, sizeof end);
        if (rc) {
            if (rc == CT_ETIMEDOUT && p->deadline && ct__now_ms() >= p->deadline) {
                p->expired = 1;
                goto out;
            }
            if (rc == CT_ETIMEDOUT)
                snprintf(m, sizeof m, "no reply for %d ms (%llu of %llu chunks done)",
                         p->timeout_ms, (unsigned long long)p->ndone,
                         (unsigned long long)p->nchunks);
            else
                snprintf(m, sizeof m, "data connection lost (%llu of %llu chunks done)",
                         (unsigned long long)p->ndone, (unsigned long long)p->nchunks);
            why_add(p, h, holder, m);
            goto out;
        }
        if (end[1] != CT_XD_END_MAGIC) {
            why_add(p, h, holder, "data port: bad trailer");
            rc = CT_EPROTO;
            goto out;
        }
        if (crc != end[0]) {
            if (p->st)
                p->st->crc_failures++;
            CT_LOG(CT_LOG_WARN, "xfer", "pull: chunk %llu from %s: crc %08x, want %08x; again",
                   (unsigned long long)c, holder, crc, end[0]);
            p->state[c] = CH_MISSING;
            if (++p->retries[c] > p->max_retries) {
                why_add(p, h, holder, "too many checksum failures");
                rc = CT_EIO;
                goto out;
            }
            continue;
        }
        p->state[c] = CH_DONE;
        p->ndone++;
        if (p->st) {
            p->st->last_holder = h;
            if (h < 8)
                p->st->chunks_from[h]++;
        }
        if (p->o->on_chunk && p->o->on_chunk(p->o->arg, h, p->ndone, p->nchunks)) {
            rc = CT_ECANCELED;
            goto out;
        }
    }
out:
    free(q);
    free(reqs);
    return rc;
}

/* Pulls over holder h's data port once the object's size is known (from the caller, or from
 * the holder's ObjStat): creates the object for the first holder, else checks the size is the
 * same; fetches what is missing. Returns PULL_VIA_ZMQ when there is no port or it cannot be
 * reached (the caller goes on over ZeroMQ), else like pull_from. */
static int pull_over_port(pull *p, int h, const char *holder, uint64_t size, uint16_t port)
{
    int r;
    if (!p->sized) {
        if ((r = on_size(p, size)))
            return r;
    } else if (size != p->size) {
        char m[160];
        snprintf(m, sizeof m, "object size %llu differs from %llu", (unsigned long long)size,
                 (unsigned long long)p->size);
        why_add(p, h, holder, m);
        return CT_EPROTO;
    }
    if (p->ndone == p->nchunks)
        return 0;
    for (uint64_t c = 0; c < p->nchunks; c++)
        if (p->state[c] == CH_INFLIGHT)
            p->state[c] = CH_MISSING;
    if (!port)
        return PULL_VIA_ZMQ;
    int fd = ct__xdata_connect(holder, port, p->timeout_ms);
    if (fd < 0) {
        CT_LOG(CT_LOG_WARN, "xfer", "pull: %s; chunks from %s over ZeroMQ instead", ct_last_error(),
               holder);
        return PULL_VIA_ZMQ;
    }
    r = pull_data(p, fd, h, holder);
    close(fd);
    return r;
}

/* Fetches the missing chunks from holder h. Returns 0 when every chunk is done; CT_ENOENT if
 * the holder lacks the object; an error of the local shard (stop); else the holder failed
 * (reason appended to p->why) and the next one may go on. Over the holder's data port when it
 * has one (size asked first with ObjStat), else with ZeroMQ chunk requests. */
static int pull_from(pull *p, void *sock, int h, const char *holder)
{
    uint64_t cursor = 0;
    char m[160];
    p->inflight = 0;
    if (!p->zmq_only) {
        uint64_t size;
        uint16_t port;
        int r = stat_holder(p, sock, h, holder, &size, &port);
        if (r)
            return r;
        if ((r = pull_over_port(p, h, holder, size, port)) != PULL_VIA_ZMQ)
            return r;
    }
    if (!p->sized) {
        /* Size unknown: probe the first window of chunks, clipped to the object's end. */
        p->probe_first = p->next_req + 1;
        p->probe_n = 0;
        for (int i = 0; i < p->window; i++, p->probe_n++) {
            uint64_t req;
            if (send_chunk_req(p, sock, (uint64_t)i, 1, &req)) {
                why_add(p, h, holder, "cannot send");
                return CT_EZMQ;
            }
        }
    } else {
        for (uint64_t c = 0; c < p->nchunks; c++)
            if (p->state[c] == CH_INFLIGHT)
                p->state[c] = CH_MISSING;
        if (refill(p, sock, &cursor)) {
            why_add(p, h, holder, "cannot send");
            return CT_EZMQ;
        }
    }
    while (!p->sized || p->ndone < p->nchunks) {
        Ct__ObjXfer *rep;
        zmq_msg_t data;
        int have_data;
        zmq_msg_init(&data);
        int wait = p->timeout_ms;
        if (p->deadline) {
            int64_t left = p->deadline - ct__now_ms();
            if (left <= 0) {
                zmq_msg_close(&data);
                p->expired = 1;
                return CT_ETIMEDOUT;
            }
            wait = left < wait ? (int)left : wait;
        }
        int rc = recv_reply(sock, wait, &rep, &data, &have_data);
        if (rc == CT_ETIMEDOUT && wait < p->timeout_ms) {
            zmq_msg_close(&data);
            continue; /* the deadline check above ends the pull */
        }
        if (rc == CT_ETIMEDOUT || rc == CT_EZMQ) {
            zmq_msg_close(&data);
            snprintf(m, sizeof m, "no reply for %d ms (%llu of %llu chunks done)", p->timeout_ms,
                     (unsigned long long)p->ndone, (unsigned long long)p->nchunks);
            why_add(p, h, holder, m);
            return CT_ETIMEDOUT;
        }
        if (rc) { /* undecodable: ignore, the timeout covers a lost chunk */
            zmq_msg_close(&data);
            continue;
        }
        if (rep->body_case == CT__OBJ_XFER__BODY_ERROR) {
            int code = rep->error->code;
            why_add(p, h, holder, rep->error->message ? rep->error->message : "error");
            ct__obj_xfer__free_unpacked(rep, NULL);
            zmq_msg_close(&data);
            return code == CT_ENOENT ? CT_ENOENT : CT_EPROTO;
        }
        if (rep->body_case != CT__OBJ_XFER__BODY_CHUNK_REPLY || !have_data) {
            ct__obj_xfer__free_unpacked(rep, NULL);
            zmq_msg_close(&data);
            continue;
        }
        Ct__ObjChunkReply cr = *rep->chunk_reply;
        uint64_t req_id = rep->req_id;
        ct__obj_xfer__free_unpacked(rep, NULL);
        if (!p->sized) {
            if (req_id < p->probe_first || req_id >= p->probe_first + p->probe_n) {
                zmq_msg_close(&data);
                continue;
            }
            rc = on_size(p, cr.object_size);
            if (rc) {
                zmq_msg_close(&data);
                return rc;
            }
        } else if (cr.object_size != p->size) {
            zmq_msg_close(&data);
            snprintf(m, sizeof m, "object size %llu differs from %llu",
                     (unsigned long long)cr.object_size, (unsigned long long)p->size);
            why_add(p, h, holder, m);
            return CT_EPROTO;
        }
        uint64_t c = cr.offset / p->chunk;
        if (c >= p->nchunks || cr.offset != c * p->chunk || p->state[c] != CH_INFLIGHT ||
            p->req_of[c] != req_id || cr.size != chunk_len(p, c) ||
            zmq_msg_size(&data) != cr.size) {
            zmq_msg_close(&data); /* stale, a probe past the end, or mismatched: drop */
            continue;
        }
        p->inflight--;
        unsigned char *src = zmq_msg_data(&data);
        size_t len = zmq_msg_size(&data);
        if (++p->received == (uint64_t)p->corrupt_chunk && len) {
            src[len / 2] ^= 0x01; /* test hook: damage in transit */
            CT_LOG(CT_LOG_INFO, "xfer", "pull: test hook flipped a byte of chunk %llu",
                   (unsigned long long)c);
        }
        uint32_t crc = ct__crc32c_copy(0, p->buf + c * p->chunk, src, len);
        zmq_msg_close(&data);
        if (crc != cr.crc32c) {
            if (p->st)
                p->st->crc_failures++;
            CT_LOG(CT_LOG_WARN, "xfer", "pull: chunk %llu from %s: crc %08x, want %08x; again",
                   (unsigned long long)c, holder, crc, cr.crc32c);
            p->state[c] = CH_MISSING;
            if (++p->retries[c] > p->max_retries) {
                why_add(p, h, holder, "too many checksum failures");
                return CT_EIO;
            }
        } else {
            p->state[c] = CH_DONE;
            p->ndone++;
            if (p->st) {
                p->st->last_holder = h;
                if (h < 8)
                    p->st->chunks_from[h]++;
            }
            if (p->o->on_chunk && p->o->on_chunk(p->o->arg, h, p->ndone, p->nchunks))
                return CT_ECANCELED;
        }
        if (refill(p, sock, &cursor)) {
            why_add(p, h, holder, "cannot send");
            return CT_EZMQ;
        }
    }
    return 0;
}

/* ct_xfer_pull into dst, or with dst NULL into a malloc'd buffer given to *mem. */
static int pull_any(ct_store *dst, void **mem, const ct_object_id *id, const char *const *holders,
                    int nholders, const ct_xfer_pull_opts *opts, ct_xfer_pull_stats *stats)
{
    static const ct_xfer_pull_opts defaults;
    if ((!dst && !mem) || !id || (nholders > 0 && !holders) || nholders < 0)
        return ct__error(CT_EINVAL, "ct_xfer_pull: NULL argument");
    if (!opts)
        opts = &defaults;
    if (opts->chunk_size > CT_XFER_MAX_CHUNK)
        return ct__error(CT_EINVAL, "ct_xfer_pull opts.chunk_size %llu > %llu",
                         (unsigned long long)opts->chunk_size,
                         (unsigned long long)CT_XFER_MAX_CHUNK);
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->last_holder = -1;
    }
    if (dst && ct_store_contains(dst, id))
        return 0;
    pull p = {.dst = dst, .id = id, .o = opts, .st = stats};
    p.chunk = opts->chunk_size ? opts->chunk_size : CT_XFER_DEFAULT_CHUNK;
    p.window = opts->window > 0 ? opts->window : 8;
    p.timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 5000;
    p.max_retries = opts->max_retries > 0 ? opts->max_retries : 3;
    p.corrupt_chunk = opts->corrupt_chunk;
    p.zmq_only = opts->zmq_only;
    if (!p.corrupt_chunk)
        p.corrupt_chunk = (int)ct__fault_num(CT__FAULT_XFER_CORRUPT_CHUNK);
    if (opts->total_timeout_ms > 0)
        p.deadline = ct__now_ms() + opts->total_timeout_ms;
    char hex[2 * CT_OBJECT_ID_LEN + 1];
    ct_object_id_hex(id, hex);
    int rc = 0, enoent = 0;
    void *ctx = opts->zmq_ctx ? opts->zmq_ctx : zmq_ctx_new();
    if (!ctx)
        return ct__error(CT_EZMQ, "pull: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));

    for (int h = 0; h < nholders; h++) {
        const char *holder = holders[h] ? holders[h] : "";
        int r = PULL_VIA_ZMQ;
        if (opts->size_known && opts->data_ports && opts->data_ports[h] && !p.zmq_only)
            r = pull_over_port(&p, h, holder, opts->size, opts->data_ports[h]);
        if (r == PULL_VIA_ZMQ) {
            void *sock = zmq_socket(ctx, ZMQ_DEALER);
            int zero = 0;
            if (!sock) {
                rc = ct__error(CT_EZMQ, "pull: socket: %s", zmq_strerror(zmq_errno()));
                goto out;
            }
            zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
            zmq_setsockopt(sock, ZMQ_RCVHWM, &zero, sizeof zero);
            if (ct__auth_zmq_client(sock)) {
                why_add(&p, h, holder, ct_last_error());
                r = CT_EACCES;
            } else if (zmq_connect(sock, holder) != 0) {
                why_add(&p, h, holder, zmq_strerror(zmq_errno()));
                r = CT_EZMQ;
            } else {
                r = pull_from(&p, sock, h, holder);
            }
            zmq_close(sock);
        }
        if (r == 0) {
            rc = dst ? ct_store_seal(dst, id) : 0;
            if (!dst)
                *mem = p.buf;
            goto out;
        }
        if (r == CT_ENOENT) {
            enoent++;
            continue;
        }
        if (p.expired) {
            rc = ct__error(CT_ETIMEDOUT, "pull %s: not done after %d ms (%llu of %llu chunks)", hex,
                           opts->total_timeout_ms, (unsigned long long)p.ndone,
                           (unsigned long long)p.nchunks);
            goto out;
        }
        if (r == CT_ECANCELED) {
            rc = ct__error(CT_ECANCELED, "pull %s: cancelled after %llu of %llu chunks", hex,
                           (unsigned long long)p.ndone, (unsigned long long)p.nchunks);
            goto out;
        }
        if (r != CT_ETIMEDOUT && r != CT_EPROTO && r != CT_EZMQ && r != CT_EIO) {
            rc = r; /* the local shard refused (no space, being written): no holder helps */
            goto out;
        }
        if (stats)
            stats->holder_failures++;
        CT_LOG(CT_LOG_INFO, "xfer", "pull %s: holder %s failed, %llu of %llu chunks done", hex,
               holder, (unsigned long long)p.ndone, (unsigned long long)p.nchunks);
    }
    if (enoent == nholders)
        rc = ct__error(CT_ENOENT, "pull %s: no holder has it (%s)", hex,
                       nholders ? p.why : "no holders given");
    else
        rc = ct__error(CT_ERETRY, "pull %s: every holder failed: %s", hex, p.why);
out:
    if (rc && p.sized && dst)
        ct_store_abort(dst, id);
    if (rc && p.sized && !dst)
        free(p.buf);
    free(p.state);
    free(p.retries);
    free(p.req_of);
    if (!opts->zmq_ctx)
        zmq_ctx_term(ctx);
    return rc;
}

int ct_xfer_pull(ct_store *dst, const ct_object_id *id, const char *const *holders, int nholders,
                 const ct_xfer_pull_opts *opts, ct_xfer_pull_stats *stats)
{
    if (!dst)
        return ct__error(CT_EINVAL, "ct_xfer_pull: NULL argument");
    return pull_any(dst, NULL, id, holders, nholders, opts, stats);
}

int ct_xfer_pull_mem(const ct_object_id *id, const char *const *holders, int nholders,
                     const ct_xfer_pull_opts *opts, void **data, uint64_t *size,
                     ct_xfer_pull_stats *stats)
{
    if (!data || !size)
        return ct__error(CT_EINVAL, "ct_xfer_pull_mem: NULL argument");
    *data = NULL;
    *size = 0;
    ct_xfer_pull_stats st;
    int rc = pull_any(NULL, data, id, holders, nholders, opts, stats ? stats : &st);
    if (!rc)
        *size = (stats ? stats : &st)->size;
    return rc;
}
