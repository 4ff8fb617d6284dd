/* objectstore/xfer_data.h — internal to objectstore/: the transfer server's plain-TCP data port,
 * over which chunk bytes travel without ZeroMQ in the way (see transfer.h for the whole
 * protocol; this header is the wire format and the server half).
 *
 * Why a second port: through ZeroMQ every chunk is received by ZeroMQ's I/O thread into a
 * fresh buffer, handed to the application thread and copied again into shared memory. On the
 * data port the puller recv()s straight into the destination shard's shared memory and
 * checksums each 256 KiB piece while it is hot in cache; the holder checksums each piece and
 * sendfile()s it from the arena's shm file, so the kernel sends the arena pages by reference:
 * on loopback the bytes are copied once in all (into the puller's shard).
 *
 * Wire (little-endian, fixed sizes; one connection per pull, requests pipelined):
 *   request  (48 bytes): u32 magic CT_XD_REQ_MAGIC, u32 flags (0), u8 id[20], u32 pad (0),
 *                        u64 offset, u64 size
 *   reply    (32 bytes): u32 magic CT_XD_REP_MAGIC, i32 status (0 or a CT_E* code),
 *                        u64 offset, u64 size, u64 object_size
 *            then, when status is 0, `size` bytes, then
 *   trailer   (8 bytes): u32 CRC-32C of those bytes, u32 magic CT_XD_END_MAGIC
 * Replies come in request order.
 *
 * Upload (flags CT_XD_FLAG_PUT, a driver with no node on its host; ct_xfer_push): offset 0,
 * size the object's size. The server answers a reply with status 0 ("send", object_size = its
 * limit) or a refusal: CT_ENOSPC over min(shard memory, CT_XFER_MAX_PUT) (object_size = that
 * limit), CT_EEXIST held already (sealed; the connection stays open), CT_EBUSY being written,
 * CT_EPROTO offset not 0. After "send" the client sends the bytes as chunks of
 * CT_XFER_DEFAULT_CHUNK (the last shorter), each followed by a trailer; the server receives
 * them straight into the unsealed object, checks each chunk's CRC-32C, seals and answers
 * status 0, or CT_EPROTO (offset = the bad chunk's) after a mismatch, having dropped the
 * object. A cut or stalled upload drops the object too: nothing half-written is ever sealed. After
 * an error reply the server closes the connection. The server checks every field (an object it
 * lacks: CT_ENOENT; a range outside the object or a chunk over CT_XFER_MAX_CHUNK: CT_ERANGE; bad
 * magic/flags/pad: CT_EPROTO), closes idle connections after 60 s and keeps serving after any
 * input.
 *
 * The port is advertised in ObjStatReply.data_port; a puller that finds none (0) uses ZeroMQ
 * chunk requests. */
#ifndef CT_OBJECTSTORE_XFER_DATA_H
#define CT_OBJECTSTORE_XFER_DATA_H

#include <stdint.h>

#include "objectstore/store.h"
#include "objectstore/transfer.h"

#define CT_XD_REQ_MAGIC 0x31525843u /* "CXR1" */
#define CT_XD_REP_MAGIC 0x31505843u /* "CXP1" */
#define CT_XD_END_MAGIC 0x31455843u /* "CXE1" */
#define CT_XD_REQ_LEN 48
#define CT_XD_REP_LEN 32
#define CT_XD_END_LEN 8
#define CT_XD_FLAG_PUT 1u        /* request flags: an upload (below) */
#define CT_XD_PIECE (256u << 10) /* checksum granularity: fits in L2 */
/* Socket buffers of a data connection (capped by net.core.[rw]mem_max): on loopback, 4 MiB
 * cut CPU per byte by ~15% against autotuning (fewer wake-ups and ACKs per chunk). */
#define CT_XD_SOCKBUF (4 << 20)
#define CT_XD_MAX_CONNS 64 /* concurrent data connections per server */

typedef struct ct_xd_req {
    uint32_t magic, flags;
    uint8_t id[CT_OBJECT_ID_LEN];
    uint32_t pad;
    uint64_t offset, size;
} ct_xd_req;

typedef struct ct_xd_rep {
    uint32_t magic;
    int32_t status;
    uint64_t offset, size, object_size;
} ct_xd_rep;

_Static_assert(sizeof(ct_xd_req) == CT_XD_REQ_LEN, "data request layout");
_Static_assert(sizeof(ct_xd_rep) == CT_XD_REP_LEN, "data reply layout");

typedef struct ct__xdata_server ct__xdata_server;

/* Listens on the host of zmq_endpoint ("tcp://HOST:PORT", as bound by the ROUTER), any port.
 * stats points at the owning server's counters (updated with __atomic; borrowed). Returns NULL
 * (and logs) when no TCP port can be had: the server then serves chunks over ZeroMQ only. */
ct__xdata_server *ct__xdata_server_new(ct_store *store, const char *zmq_endpoint,
                                       const char *sender, int delay_ms,
                                       ct_xfer_server_stats *stats);
int ct__xdata_server_fd(const ct__xdata_server *xs);        /* the listening socket */
uint16_t ct__xdata_server_port(const ct__xdata_server *xs); /* its port */
/* Accepts pending connections (call when the listening fd is readable), each served by a
 * thread of its own; reaps finished ones. Called from the server thread only. */
void ct__xdata_server_accept(ct__xdata_server *xs);
/* A connection's request path after its handshake, on bytes already read (fuzz/fuzz_dataport.c):
 * serves each whole request of data in order as a connection's thread does, replies and chunks
 * written to fd (blocking), a trailing part ignored; stops at the first request that would
 * close the connection. Every pin is released before it returns. 0, or CT_EPROTO when a request
 * closed the connection (the error reply was written). */
int ct__xdata_serve_bytes(ct__xdata_server *xs, int fd, const uint8_t *data, size_t len);
/* Closes the port, cuts every connection, joins their threads (pins are released). */
void ct__xdata_server_destroy(ct__xdata_server **xs);

/* Connects to the data port of the holder at zmq_endpoint ("tcp://HOST:PORT"). Returns a
 * blocking, connected socket or a negative CT_E* code (message in ct_last_error()). */
int ct__xdata_connect(const char *zmq_endpoint, uint16_t port, int timeout_ms);

/* Blocking I/O on a data connection, both ends. send_all writes all n bytes (more: MSG_MORE,
 * another write follows); recv_all reads exactly n. 0, CT_EIO (closed, reset, error), or for
 * recv_all CT_ETIMEDOUT when the socket's SO_RCVTIMEO expired. */
int ct__xdata_send_all(int fd, const void *buf, size_t n, int more);
int ct__xdata_recv_all(int fd, void *buf, size_t n);

#endif
