/* objectstore/transfer.h — node-to-node object transfer: a chunk server per shard and a pull
 * client that copies an object from a list of holders into a local shard.
 *
 *     ct_xfer_server *srv = ct_xfer_server_new(store, &(ct_xfer_server_opts){0});
 *     const char *ep = ct_xfer_server_endpoint(srv);     // "tcp://127.0.0.1:40123"
 *     ...on another node...
 *     const char *holders[] = {ep_a, ep_b};
 *     int rc = ct_xfer_pull(store_c, &id, holders, 2, &(ct_xfer_pull_opts){0}, &stats);
 *
 * Wire (proto/ct.proto, section "object store"): the server is a ZeroMQ ROUTER; a request is
 * one packed ObjXfer frame (ObjStat or ObjChunk); a chunk reply is an ObjXfer frame with
 * ObjChunkReply (offset, size, CRC-32C) followed by one raw frame with the bytes, sent
 * zero-copy from the holder's arena (the object stays pinned until ZeroMQ has sent it).
 * Errors come back as ObjXfer.error: CT_ENOENT unknown id, CT_ERANGE offset/size out of range,
 * CT_EPROTO undecodable request or another major version. The server keeps serving after
 * any input; messages over 64 KiB are dropped by ZeroMQ (requests are a few dozen bytes).
 *
 * Data port (the fast path, objectstore/xfer_data.h): the server also listens on a plain TCP
 * port, advertised in its ObjStat replies. A pull asks the size with ObjStat, creates the
 * object unsealed in the local shard, opens one TCP connection to the holder's data port and
 * keeps `window` chunk requests queued on it; each chunk is recv()d straight into the shard's
 * shared memory and checksummed per 256 KiB piece as it lands; the holder sendfile()s from its
 * arena. CRC failures, holder errors, timeouts and failover work as below. A holder that
 * advertises no port (or whose port cannot be reached) is served with ZeroMQ chunks:
 *
 * The pull starts with `window` "clipped" chunk requests (ObjChunk.clip: valid before the size
 * is known; the replies say the object's size), creates the object unsealed in the local shard
 * on the first reply, then keeps `window` chunk requests in flight; a small object thus takes
 * one round trip (ObjStat is served for size queries). Each reply's bytes are checked against
 * its CRC while being copied straight into the shard's shared memory. A chunk whose CRC fails
 * is requested again. If a holder answers an error, or nothing for timeout_ms, the pull moves
 * to the next holder and fetches only the chunks still missing. It seals on completion and
 * aborts (removes the partial object) on failure. A half-pulled object is never visible.
 *
 * A driver with no shard on its host uses the same machinery without a shard: ct_xfer_pull_mem
 * pulls into a private buffer, ct_xfer_push uploads to a node's data port (xfer_data.h).
 *
 * Not here: finding holders (the head's object directory), replication policy.
 * Threads: the server runs its own thread and is otherwise not thread-safe (create/destroy
 * from one thread). ct_xfer_pull is reentrant: concurrent pulls from several threads are fine
 * (into the same shard too, for different ids). */
#ifndef CT_OBJECTSTORE_TRANSFER_H
#define CT_OBJECTSTORE_TRANSFER_H

#include <stdint.h>

#include "objectstore/store.h"

#define CT_XFER_DEFAULT_CHUNK (4ull << 20)
#define CT_XFER_MAX_CHUNK (64ull << 20)
#define CT_XFER_MAX_PUT (64ull << 30) /* an upload's size limit (also the shard's memory) */

typedef struct ct_xfer_server ct_xfer_server;

typedef struct ct_xfer_server_opts {
    const char *bind;   /* ZeroMQ endpoint to bind; NULL = "tcp://127.0.0.1:*" */
    const char *sender; /* name put in replies (the node id); NULL = the store's name */
    void *zmq_ctx;      /* ZeroMQ context to use (borrowed); NULL = own context */
    int delay_ms;       /* test hook: sleep this long before each chunk reply */
} ct_xfer_server_opts;

typedef struct ct_xfer_server_stats {
    uint64_t requests; /* messages received */
    uint64_t chunks;   /* chunk replies sent */
    uint64_t bytes;    /* chunk bytes sent */
    uint64_t errors;   /* error replies sent or messages dropped */
    uint64_t bytes_in; /* bytes of uploads sealed (data port, CT_XD_FLAG_PUT) */
} ct_xfer_server_stats;

/* Binds and starts serving store's sealed objects. store is borrowed and must outlive the
 * server. Returns an owned server or NULL (ct_last_error()). */
ct_xfer_server *ct_xfer_server_new(ct_store *store, const ct_xfer_server_opts *opts);

/* The bound endpoint, with the real port ("tcp://127.0.0.1:40123"); borrowed while srv lives. */
const char *ct_xfer_server_endpoint(const ct_xfer_server *srv);
/* The server's raw TCP data port (what its ObjStat replies advertise); 0 when it has none. */
uint16_t ct_xfer_server_data_port(const ct_xfer_server *srv);

void ct_xfer_server_get_stats(ct_xfer_server *srv, ct_xfer_server_stats *st); /* thread-safe */

/* Stops the thread and closes the socket; replies not yet sent are dropped. Accepts NULL;
 * sets *srv to NULL. */
void ct_xfer_server_destroy(ct_xfer_server **srv);

typedef struct ct_xfer_pull_opts {
    uint64_t chunk_size; /* bytes per chunk; 0 = 4 MiB; at most CT_XFER_MAX_CHUNK */
    int window;          /* chunks in flight; 0 = 8 */
    int timeout_ms;      /* silence from a holder before trying the next one; 0 = 5000 */
    int max_retries;     /* CRC failures of one chunk before giving up a holder; 0 = 3 */
    void *zmq_ctx;       /* ZeroMQ context (borrowed); NULL = a context for this call */
    /* Test hook: flip one byte of the corrupt_chunk-th chunk received (1-based) before it is
     * checked. 0 = off; when 0, the test fault xfer_corrupt_chunk is used (common/fault.h). */
    int corrupt_chunk;
    int total_timeout_ms; /* the whole pull, all holders; 0 = no limit (CT_ETIMEDOUT) */
    /* Called after each good chunk, on the calling thread (holder is an index in holders).
     * Returning nonzero cancels the pull: CT_ECANCELED, the partial object is removed. */
    int (*on_chunk)(void *arg, int holder, uint64_t chunks_done, uint64_t nchunks);
    void *arg;
    /* Chunks as ZeroMQ messages even when the holder has a data port (the older, slower
     * path; kept for holders without one, and tested). */
    int zmq_only;
    /* What the caller may already know from the head's directory: the object's size
     * (size_known set) and each holder's data port (data_ports parallel to holders, borrowed,
     * 0 = unknown). With both for a holder, the pull skips the ZeroMQ connection and ObjStat
     * round trip and connects the holder's data port at once (~0.5 ms less per pull here);
     * if that port cannot be reached it goes on the ZeroMQ way. A wrong size fails that
     * holder like any mismatched reply (CT_EPROTO in the reasons). */
    int size_known;
    uint64_t size;
    const uint16_t *data_ports;
} ct_xfer_pull_opts;

typedef struct ct_xfer_pull_stats {
    uint64_t size;            /* object size */
    uint64_t chunks;          /* chunks in the object */
    uint64_t crc_failures;    /* chunks whose checksum failed (each was fetched again) */
    uint64_t holder_failures; /* holders given up (timeout, error, too many bad chunks) */
    int last_holder;          /* index of the holder that sent the last chunk, -1 if none */
    uint64_t chunks_from[8];  /* good chunks per holder index (first 8 holders) */
} ct_xfer_pull_stats;

/* Pulls object id from the first holder that has it into dst and seals it there. Returns 0
 * (also when dst already has it sealed), CT_ENOENT if no holder has it, CT_ERETRY if every
 * holder failed (ct_last_error() lists why), CT_ETIMEDOUT past total_timeout_ms, CT_ECANCELED
 * when on_chunk asked, CT_ENOSPC / CT_EEXIST (an unsealed object of that id is being written:
 * a concurrent pull; callers dedupe pulls per id) from the shard, CT_EINVAL for bad arguments.
 * stats may be NULL. */
int ct_xfer_pull(ct_store *dst, const ct_object_id *id, const char *const *holders, int nholders,
                 const ct_xfer_pull_opts *opts, ct_xfer_pull_stats *stats);

/* The same pull into a private buffer of this process (a driver with no shard on its host):
 * *data gets a malloc'd copy of the object (caller owns; free()) and *size its size. Same
 * holders, options, checks (CRC-32C per piece, failover) and errors, less the shard's. */
int ct_xfer_pull_mem(const ct_object_id *id, const char *const *holders, int nholders,
                     const ct_xfer_pull_opts *opts, void **data, uint64_t *size,
                     ct_xfer_pull_stats *stats);

/* Uploads size bytes as object id to the node whose transfer server is holder
 * ("tcp://HOST:PORT") through its data port (xfer_data.h, CT_XD_FLAG_PUT; the connection
 * starts with the cluster's challenge-response). The node seals it in its shard and reports
 * itself as a holder to the head; registering the put (ObjPutDone) is the caller's. A chunk
 * that fails its checksum at the node makes the whole upload start again (3 tries). Returns 0,
 * CT_EEXIST (the node holds that id already), CT_ENOSPC (over the node's limit: min(its shard
 * memory, CT_XFER_MAX_PUT); the message says both numbers), CT_EBUSY (being written there),
 * CT_EACCES (handshake failed), CT_EIO / CT_ETIMEDOUT / connect errors (timeout_ms per step;
 * 0 = 60 s). Test hook: the fault xfer_corrupt_put=N (common/fault.h) sends chunk N's checksum
 * wrong on the first try. Reentrant. */
int ct_xfer_push(const char *holder, uint16_t data_port, const ct_object_id *id, const void *data,
                 uint64_t size, int timeout_ms);

#endif
