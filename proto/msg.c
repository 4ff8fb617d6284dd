/* proto/msg.c — framing, version check and error replies over ZeroMQ (see msg.h).
 * Not in here: any socket's lifetime or any handler. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>
#include "common/common.h"
#include "proto/msg.h"

int64_t ct__deadline_ms(int timeout_ms)
{
    if (timeout_ms <= 0)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
}

int64_t ct__deadline_left(int64_t deadline_ms)
{
    if (deadline_ms <= 0)
        return INT32_MAX;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return deadline_ms - ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

void ct__env_init(Ct__Envelope *e, uint64_t req_id, const char *sender, int timeout_ms)
{
    ct__envelope__init(e);
    e->major = CT_PROTO_MAJOR;
    e->minor = CT_PROTO_MINOR;
    e->req_id = req_id;
    e->sender = (char *)(sender ? sender : "");
    e->deadline_ms = ct__deadline_ms(timeout_ms);
}

static void free_zmsg(void *data, void *hint)
{
    (void)hint;
    CT__TSAN_ACQUIRE(data); /* ZeroMQ's I/O thread frees what the sender packed */
    free(data);
}

int ct__msg_send(void *sock, const ct__rid *rid, const Ct__Envelope *e, int flags)
{
    size_t n = ct__envelope__get_packed_size(e);
    zmq_msg_t m;
    if (n <= 512) {
        if (zmq_msg_init_size(&m, n) != 0)
            return ct__error(CT_ENOMEM, "msg: zmq_msg_init_size(%zu) failed", n);
        ct__envelope__pack(e, zmq_msg_data(&m));
    } else {
        uint8_t *buf = malloc(n);
        if (!buf)
            return ct__error(CT_ENOMEM, "msg: out of memory packing %zu bytes", n);
        ct__envelope__pack(e, buf);
        CT__TSAN_RELEASE(buf);
        zmq_msg_init_data(&m, buf, n, free_zmsg, NULL);
    }
    if (rid && zmq_send(sock, rid->id, rid->len, ZMQ_SNDMORE | flags) < 0) {
        int err = errno;
        zmq_msg_close(&m);
        if (err == EAGAIN)
            return ct__error(CT_ETIMEDOUT, "msg: send would block");
        return ct__error(CT_EZMQ, "msg: send routing id: %s", zmq_strerror(err));
    }
    if (zmq_msg_send(&m, sock, flags) < 0) {
        int err = errno;
        zmq_msg_close(&m);
        if (err == EAGAIN)
            return ct__error(CT_ETIMEDOUT, "msg: send would block");
        return ct__error(CT_EZMQ, "msg: send: %s", zmq_strerror(err));
    }
    return 0;
}

/* Discards the rest of a multipart message. */
static void drain(void *sock)
{
    int more = 0;
    size_t sz = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, 0);
        zmq_msg_close(&m);
        sz = sizeof more;
    }
}

int ct__msg_recv(void *sock, ct__rid *rid, Ct__Envelope **out, int flags, const char *role)
{
    return ct__msg_recv_lim(sock, rid, out, flags, role, NULL);
}

int ct__msg_recv_lim(void *sock, ct__rid *rid, Ct__Envelope **out, int flags, const char *role,
                     const ct__msg_limits *lim)
{
    *out = NULL;
    if (rid) {
        int n = zmq_recv(sock, rid->id, sizeof rid->id, flags);
        if (n < 0) {
            if (errno == EAGAIN)
                return ct__error(CT_ETIMEDOUT, "msg: nothing to receive");
            return ct__error(CT_EZMQ, "msg: recv routing id: %s", zmq_strerror(errno));
        }
        rid->len = (size_t)n > sizeof rid->id ? sizeof rid->id : (size_t)n;
        int more = 0;
        size_t sz = sizeof more;
        zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &sz);
        if (!more)
            return ct__error(CT_EPROTO, "msg: %s got a message without payload frame", role);
        flags &= ~ZMQ_DONTWAIT; /* the rest of a multipart message is already here */
    }
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, flags) < 0) {
        int err = errno;
        zmq_msg_close(&m);
        if (err == EAGAIN)
            return ct__error(CT_ETIMEDOUT, "msg: nothing to receive");
        return ct__error(CT_EZMQ, "msg: recv: %s", zmq_strerror(err));
    }
    int rc = 0;
    if (zmq_msg_more(&m)) {
        drain(sock);
        rc = ct__error(CT_EPROTO, "msg: %s got a message with more than one payload frame", role);
        goto out;
    }
    rc = ct__msg_decode_lim(zmq_msg_data(&m), zmq_msg_size(&m), out, role, lim);
out:
    zmq_msg_close(&m);
    return rc;
}

/* protobuf-c's allocator for one decode: malloc, up to cap bytes in all (never freed back
 * during a decode, so used only grows). Plain malloc/free underneath: what it returns is freed
 * by ct__msg_free like any unpacked envelope. */
typedef struct capped {
    size_t used, cap;
    bool over;
} capped;

static void *capped_alloc(void *data, size_t n)
{
    capped *c = data;
    if (n > c->cap - c->used) {
        c->over = true;
        return NULL;
    }
    c->used += n;
    return malloc(n ? n : 1);
}

static void capped_free(void *data, void *p)
{
    (void)data;
    free(p);
}

int ct__msg_decode(const void *data, size_t len, Ct__Envelope **out, const char *role)
{
    return ct__msg_decode_lim(data, len, out, role, NULL);
}

int ct__msg_decode_lim(const void *data, size_t len, Ct__Envelope **out, const char *role,
                       const ct__msg_limits *lim)
{
    static const ct__msg_limits def = {CT_MSG_DECODE_FLOOR, CT_MSG_DECODE_MULT, 0};
    *out = NULL;
    if (!lim)
        lim = &def;
    capped c = {.cap = lim->floor};
    if (lim->mult && len > (SIZE_MAX - c.cap) / lim->mult)
        c.cap = SIZE_MAX;
    else
        c.cap += lim->mult * len;
    if (lim->max && c.cap > lim->max)
        c.cap = lim->max;
    ProtobufCAllocator a = {.alloc = capped_alloc, .free = capped_free, .allocator_data = &c};
    Ct__Envelope *e = ct__envelope__unpack(&a, len, data);
    if (!e && c.over)
        return ct__error(CT_EPROTO,
                         "msg: %s refused %zu bytes: decoding them would take more than %zu "
                         "bytes of memory",
                         role, len, c.cap);
    if (!e)
        return ct__error(CT_EPROTO, "msg: %s got %zu bytes that do not decode as an Envelope", role,
                         len);
    *out = e;
    if (e->major != CT_PROTO_MAJOR)
        return ct__error(CT_EPROTO, "protocol version %u.x from %s, this %s speaks %d.x", e->major,
                         e->sender && *e->sender ? e->sender : "(unnamed peer)", role,
                         CT_PROTO_MAJOR);
    return 0;
}

void ct__msg_free(Ct__Envelope *e)
{
    if (e)
        ct__envelope__free_unpacked(e, NULL);
}

int ct__msg_send_error(void *sock, const ct__rid *rid, uint64_t req_id, const char *sender,
                       int code, const char *field, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    Ct__Envelope e;
    Ct__Error er = CT__ERROR__INIT;
    ct__env_init(&e, req_id, sender, 0);
    er.code = code;
    er.message = msg;
    er.field = (char *)(field ? field : "");
    e.body_case = CT__ENVELOPE__BODY_ERROR;
    e.error = &er;
    return ct__msg_send(sock, rid, &e, ZMQ_DONTWAIT);
}

const char *ct__msg_body_name(Ct__Envelope__BodyCase c)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(&ct__envelope__descriptor, (unsigned)c);
    return f ? f->name : "(no body)";
}

int ct__msg_expect(const Ct__Envelope *e, Ct__Envelope__BodyCase want, const char *what)
{
    if (e->body_case == want)
        return 0;
    if (e->body_case == CT__ENVELOPE__BODY_ERROR && e->error) {
        int code = e->error->code < 0 ? e->error->code : CT_EPROTO;
        return ct__error(code, "%s", e->error->message ? e->error->message : "error");
    }
    return ct__error(CT_EPROTO, "%s: expected %s, got %s from %s", what, ct__msg_body_name(want),
                     ct__msg_body_name(e->body_case), e->sender);
}

double ct__res_get(Ct__Resource *const *r, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (r[i]->name && !strcmp(r[i]->name, name))
            return r[i]->amount;
    return 0;
}
