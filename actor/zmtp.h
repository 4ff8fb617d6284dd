/* actor/zmtp.h — a minimal ZMTP 3.0 peer (NULL mechanism) for actor calls, both ends:
 * - the actor's server side (ROUTER semantics: one reply per request, per connection);
 * - the driver's client side (DEALER semantics), one connection per actor handle.
 * Both run on the caller's thread with plain syscalls: no libzmq threads per actor (faster
 * creation) and no I/O-thread hand-offs per call (lower latency). The wire is real ZMTP.
 *
 * Before the ZMTP greeting, both ends prove that they hold the cluster secret (auth.h's
 * challenge-response), so a plain libzmq DEALER can no longer call an actor (CT_AUTH=off aside).
 * Not a general ZeroMQ peer: no ZeroMQ security mechanisms, no heartbeats (a PING is answered),
 * messages of exactly one frame (a multi-frame message is reported as such). Not thread-safe:
 * each connection and server belongs to one thread at a time. */
#ifndef CT_ACTOR_ZMTP_H
#define CT_ACTOR_ZMTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One connection: read buffer with a greeting/handshake/frames state machine, and a write
 * buffer. Plain struct so it can be embedded; zero-init then ct__zconn_* it. */
typedef struct ct__zconn {
    int fd;
    int state;
    uint8_t *buf;
    size_t len, cap, consumed;
    bool multi;
    uint8_t auth[64]; /* the challenge-response's state (CT_AUTH_STATE_LEN) */
    uint8_t *out;
    size_t olen, ocap;
} ct__zconn;

/* Connects to "tcp://host:port" as a DEALER; fd is non-blocking. The challenge-response and the
 * greeting run as the caller fills and parses (what it sends meanwhile is held back). */
int ct__zconn_connect(ct__zconn *c, const char *endpoint);
/* Starts either end on a connected fd (c zero-initialised; c->fd = fd on success): a client
 * writes C1 (or, auth off, its greeting), a server waits for C1 (auth off: writes its
 * greeting). 0, or a CT_E* code with c->fd -1 (the caller keeps fd). Used by connect and the
 * accept loop, and by fuzz/fuzz_auth.c on a socketpair. */
int ct__zconn_start(ct__zconn *c, int fd, bool server);
/* Reads what the socket has. 0, or CT_ECONNRESET when the peer closed or failed. */
int ct__zconn_fill(ct__zconn *c);
/* Next complete message: 1 with *data and *len (borrowed until the next fill/compact), 2 for a
 * multi-frame message (dropped), 0 when more bytes are needed, -1 for a protocol violation. */
int ct__zconn_parse(ct__zconn *c, const uint8_t **data, size_t *len);
/* Moves unparsed bytes to the front (invalidates what parse returned). */
void ct__zconn_compact(ct__zconn *c);
/* Queues one frame; writes everything queued when flush is true or past 64 KiB. 0 or
 * CT_ECONNRESET / CT_ENOMEM. */
int ct__zconn_send(ct__zconn *c, const void *data, size_t len, bool flush);
int ct__zconn_flush(ct__zconn *c);
/* True while the client's output is held back by the challenge-response. */
bool ct__zconn_held(const ct__zconn *c);
void ct__zconn_close(ct__zconn *c);

typedef struct ct__zmtp ct__zmtp;

/* Listens on host, an ephemeral port; *endpoint gets "tcp://host:port". */
int ct__zmtp_listen(const char *host, char *endpoint, size_t cap, ct__zmtp **out);

/* Blocks until a complete message arrives. Returns 0 with *data and *len (borrowed until the
 * next call) and *conn for the reply; CT_EPROTO with *conn when a peer sent a multi-frame
 * message (answer it with an error). A peer that breaks the protocol is disconnected. CT_EIO
 * when polling itself fails. Queued replies are written before it waits. */
int ct__zmtp_next(ct__zmtp *s, int *conn, const uint8_t **data, size_t *len);
/* ct__zmtp_next, waiting at most timeout_ms (-1: no limit) when nothing is buffered:
 * CT_ETIMEDOUT when that wait (or a signal) ended with no message. A server whose thread must
 * also notice a stop (ct-simnodes' calls thread). */
int ct__zmtp_next_within(ct__zmtp *s, int *conn, const uint8_t **data, size_t *len, int timeout_ms);

/* Queues one single-frame message for conn (written before the next wait, or at once past
 * 64 KiB). A vanished peer is ignored. */
int ct__zmtp_send(ct__zmtp *s, int conn, const void *data, size_t len);

void ct__zmtp_destroy(ct__zmtp **s);

#endif
