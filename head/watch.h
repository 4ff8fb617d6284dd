/* head/watch.h — the head's death watch (internal): a plain TCP port on which every node and
 * every driver keeps one connection open for as long as its process lives.
 *
 * Why. When a process ends, by exit, crash or kill -9, its kernel closes its sockets at once, so
 * the head reads EOF (or a reset) on that connection within a round trip: a death is seen with
 * no timeout at all, and never wrongly, because a live process never closes this connection
 * (a node or driver leaving on purpose is gone too). Heartbeats remain, for hosts that go
 * silent without their kernel closing anything (power loss, a cut network, SIGSTOP).
 *
 * Why not ZeroMQ. The head's ROUTER hides connections: ZMQ_ROUTER_NOTIFY is draft API (absent
 * from Debian's libzmq 4.3.4), and a socket monitor's ZMQ_EVENT_DISCONNECTED names only a file
 * descriptor, which would have to be mapped to a peer through deprecated ZMQ_SRCFD message
 * properties, racing with fd reuse; and ZeroMQ reconnects under the hood. A connection of our
 * own has one meaning: its end is its owner's end.
 *
 * Wire (client first, like every raw port of ct):
 *   client -> head   the raw-port challenge-response (common/auth.h; nothing when CT_AUTH=off)
 *   client -> head   "CTW1" and the 32-hex-digit ticket the head gave it over ZeroMQ
 *                    (RegisterNodeReply.watch_ticket, WatchTicket.ticket): 36 bytes
 *   then the client keeps the connection open while it lives, sending nothing more but, right
 *   before it closes it on purpose (ct_shutdown), one byte 'L': the close is a leave, not a
 *   death (a driver's job then ends without a warning; TCP delivers the byte before the end); the
 * head sends nothing, except one byte 'D' ("you were declared dead: register again") right before
 *   it closes the connection of a node it declared dead. A ticket is good for one connection.
 *
 * Not thread-safe: the head's thread only. */
#ifndef CT_HEAD_WATCH_H
#define CT_HEAD_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#define CT__WATCH_MAGIC "CTW1"
#define CT__WATCH_HELLO_LEN 36 /* magic + CT_TOKEN_LEN hex digits */
#define CT__WATCH_DEAD 'D'     /* head -> node: declared dead, register again */
#define CT__WATCH_LEAVING 'L'  /* client -> head: the close that follows is on purpose */

typedef struct ct__watch ct__watch;

/* Listens on host (as the head binds it: an address, a name, or "*" / "0.0.0.0" for all) at
 * port (0: ephemeral). NULL, with the reason in ct_last_error(), when it cannot. */
ct__watch *ct__watch_new(const char *host, int port);
/* The port it listens on; the epoll fd that is readable when ct__watch_poll has work. */
int ct__watch_port(const ct__watch *w);
int ct__watch_fd(const ct__watch *w);

/* What ct__watch_poll reports. hello: connection conn (ids from 1, never reused) presented
 * ticket (a NUL-terminated copy; the callee decides, and may ct__watch_close it). closed: a
 * connection that had said hello ended, by EOF or error: its owner's process is gone; left:
 * it sent CT__WATCH_LEAVING first (it left on purpose). The connection is already forgotten
 * when closed runs. */
typedef struct ct__watch_cb {
    void (*hello)(void *user, uint64_t conn, const char *ticket);
    void (*closed)(void *user, uint64_t conn, bool left);
    void *user;
} ct__watch_cb;

/* Accepts, authenticates and reads what is ready, without blocking; drops connections that did
 * not finish their hello within 10 s. Calls cb for each hello and each end. */
void ct__watch_poll(ct__watch *w, const ct__watch_cb *cb);
/* Closes connection conn (0 or unknown: nothing), first sending byte unless it is 0. No
 * closed callback follows. */
void ct__watch_close(ct__watch *w, uint64_t conn, char byte);
/* Closes every connection and the port; accepts NULL, clears *w. */
void ct__watch_destroy(ct__watch **w);

#endif
