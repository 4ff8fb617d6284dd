/* actor/zmtp.h — a minimal single-threaded ZMTP 3.0 server (NULL mechanism, ROUTER socket
 * type) for the actor's call socket: drivers keep using libzmq DEALER sockets, while the actor
 * reads and answers calls with plain syscalls on its own thread. That removes libzmq's two
 * threads from every actor (faster creation) and the I/O-thread hand-offs from each call
 * (lower latency).
 *
 * Not a general ZeroMQ peer: no security mechanisms, no heartbeats (PING is answered), one
 * peer per connection, messages of exactly one frame (others are reported as CT_EPROTO).
 * Not thread-safe: one thread owns a server. */
#ifndef CT_ACTOR_ZMTP_H
#define CT_ACTOR_ZMTP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ct__zmtp ct__zmtp;

/* Listens on host, an ephemeral port; *endpoint gets "tcp://host:port". */
int ct__zmtp_listen(const char *host, char *endpoint, size_t cap, ct__zmtp **out);

/* Blocks until a complete message arrives. Returns 0 with *data and *len (borrowed until the next
 * call) and *conn for the reply; CT_EPROTO with *conn when a peer sent a multi-frame message
 * (answer it with an error); never returns for other failures of one peer (it drops that
 * connection). CT_EIO when polling itself fails. */
int ct__zmtp_next(ct__zmtp *s, int *conn, const uint8_t **data, size_t *len);

/* Queues one single-frame message for conn; queued replies are written in one go before
 * ct__zmtp_next waits for input (or at once past 64 KiB). A vanished peer is ignored. */
int ct__zmtp_send(ct__zmtp *s, int conn, const void *data, size_t len);

void ct__zmtp_destroy(ct__zmtp **s);

#endif
