/* proto/msg.h — the messaging layer every ct process uses: one packed Envelope per ZeroMQ
 * message, request ids, deadlines, and the protocol version check.
 *
 * Framing: a DEALER sends [payload]; a ROUTER sees [routing id][payload] and answers the same
 * way. The payload is a packed ct.Envelope (proto/ct.proto). A receiver refuses a peer of
 * another major version with "protocol version M.x from <sender>, this <role> speaks 1.x".
 * Not in here: who handles what (head/, actor/), sockets' lifetimes, threads. Functions here
 * are thread-safe as long as each socket is used by one thread at a time (ZeroMQ's rule). */
#ifndef CT_PROTO_MSG_H
#define CT_PROTO_MSG_H

#include <stddef.h>
#include <stdint.h>
#include "ct.pb-c.h"

#define CT_PROTO_MAJOR 1
/* 1.1: Envelope.token (the head refuses what lacks the right one); 1.2: StartFailed.permanent,
 * JobEnded, ActorExited.stderr_tail, Heartbeat.leaving, death-watch tickets
 * (RegisterNodeReply.watch_*, Heartbeat.watch, WatchTicket); 1.3: draining nodes
 * (Heartbeat.draining, DrainReply, NODE_DRAINING events, NodeInfo.draining); 1.4: nodes that
 * outlive their head re-register (RegisterNode.node_id/node_token/actors,
 * StartActor.resources); 1.5: HeartbeatPeriod (the head lengthens the heartbeat period as the
 * cluster grows); 1.6: TrainReport.drains_by_reason (a report without it is taken at its
 * total) */
#define CT_PROTO_MINOR 6

/* The routing id a ROUTER prefixes to each message (ZeroMQ allows up to 255 bytes). */
typedef struct ct__rid {
    unsigned char id[256];
    size_t len;
} ct__rid;

/* Absolute CLOCK_REALTIME deadline in ms for a timeout in ms (<= 0: none, returns 0). */
int64_t ct__deadline_ms(int timeout_ms);
/* Milliseconds left until deadline_ms (0 = none: returns INT32_MAX-ish); negative when past. */
int64_t ct__deadline_left(int64_t deadline_ms);

/* Fills an envelope's header: version, req_id, sender (borrowed: must outlive the send),
 * deadline from timeout_ms. The body is set by the caller (body_case + the member). */
void ct__env_init(Ct__Envelope *e, uint64_t req_id, const char *sender, int timeout_ms);

/* Packs and sends e on sock, prefixed by rid's frame when rid != NULL (ROUTER side).
 * flags: ZMQ_DONTWAIT or 0. Returns 0, CT_ENOMEM, CT_EAGAIN-like CT_ETIMEDOUT when it would
 * block with ZMQ_DONTWAIT, or CT_EZMQ (message in ct_last_error()). */
int ct__msg_send(void *sock, const ct__rid *rid, const Ct__Envelope *e, int flags);

/* Receives one message from sock (blocking unless flags has ZMQ_DONTWAIT). rid != NULL on a
 * ROUTER receives the routing id. On success *out is an envelope the caller frees with
 * ct__msg_free. Errors:
 *   CT_ETIMEDOUT   nothing to read (ZMQ_DONTWAIT)
 *   CT_EPROTO      wrong frame count, undecodable payload (*out NULL), or another major
 *                  version (*out set, so the caller can answer the sender); role names the
 *                  receiver in the message ("head", "node", "actor", "driver")
 *   CT_EZMQ        socket error. */
int ct__msg_recv(void *sock, ct__rid *rid, Ct__Envelope **out, int flags, const char *role);

/* Decodes and version-checks one payload (what ct__msg_recv does after framing); same errors
 * and *out rules as ct__msg_recv. */
int ct__msg_decode(const void *data, size_t len, Ct__Envelope **out, const char *role);

/* Memory a payload may cost when decoded: unpacking len bytes may allocate at most
 * min(max, floor + mult * len) bytes, else it is refused (CT_EPROTO, "... decoding them would
 * take ..."). protobuf-c allocates per element (and 32 bytes per field while it scans), so
 * without a cap 2 wire bytes of an empty sub-message become ~80 bytes of heap.
 * ct__msg_recv / ct__msg_decode use the defaults below, generous for clients (no max); the
 * head passes tighter limits. */
#define CT_MSG_DECODE_FLOOR ((size_t)64 << 20)
#define CT_MSG_DECODE_MULT 8
typedef struct ct__msg_limits {
    size_t floor;
    size_t mult;
    size_t max; /* 0: none */
} ct__msg_limits;
/* ct__msg_recv / ct__msg_decode with limits lim (NULL: the defaults). */
int ct__msg_recv_lim(void *sock, ct__rid *rid, Ct__Envelope **out, int flags, const char *role,
                     const ct__msg_limits *lim);
int ct__msg_decode_lim(const void *data, size_t len, Ct__Envelope **out, const char *role,
                       const ct__msg_limits *lim);

void ct__msg_free(Ct__Envelope *e);

/* Sends an Error reply (code, field, formatted message) for request req_id. */
int ct__msg_send_error(void *sock, const ct__rid *rid, uint64_t req_id, const char *sender,
                       int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* For a received reply: 0 when e carries body `want`; when it carries an Error returns its code
 * and records its message; otherwise CT_EPROTO naming what arrived instead of `what`. */
int ct__msg_expect(const Ct__Envelope *e, Ct__Envelope__BodyCase want, const char *what);

/* Name of a body case for messages ("create_actor", ...). */
const char *ct__msg_body_name(Ct__Envelope__BodyCase c);

/* Resource list helpers: look up an amount by name (0 when absent). */
double ct__res_get(Ct__Resource *const *r, size_t n, const char *name);

#endif
