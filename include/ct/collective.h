/* ct/collective.h — collective communication between the replicas of a training group.
 *
 * A communicator (ct_comm) joins `world_size` processes that each call ct_comm_new() with the
 * same group id and their own rank. Ranks meet through a pluggable rendezvous (a key-value
 * store: the head's KV in a cluster, a directory for standalone use and tests). Backends:
 *   - CT_COMM_RING (CPU, f32): shared memory between ranks with the same node id, TCP between
 *     nodes; hierarchical (reduce inside the node, ring across node leaders, then broadcast).
 *   - CT_COMM_NCCL (CUDA buffers; f32, f16, bf16): built only when CUDA and NCCL are found,
 *     otherwise ct_comm_new() returns CT_ENOSYS.
 *
 * Worked example (two processes, one per rank):
 *
 *     ct_rendezvous *rdv = ct_rendezvous_file_new("/tmp/rdv");      // same dir on all ranks
 *     ct_comm *c = NULL;
 *     int rc = ct_comm_new(&(ct_comm_opts){.rendezvous = rdv, .group_id = "job1-try0",
 *                                          .rank = r, .world_size = 2, .node_id = "hostA"}, &c);
 *     float g[1000];  ...
 *     rc = ct_comm_allreduce(c, g, 1000, CT_F32, CT_COMM_AVG, 0);   // 0: default timeout
 *     ct_comm_destroy(&c);
 *     ct_rendezvous_file_destroy(&rdv);
 *
 * Failure model: every call has a deadline. When a peer dies (its TCP socket closes, or its
 * process is gone from the shared-memory group) the call fails promptly with CT_ECONNRESET;
 * when a peer hangs, it fails with CT_ETIMEDOUT at the deadline; ct_comm_abort() (from any
 * thread) makes pending and future calls fail with CT_ECANCELED at once. After any failure the
 * communicator is broken: every later call returns the same error, and its peers see it leave
 * (CT_ECONNRESET) instead of waiting for their own deadlines. Destroy it and create a new one
 * with a new group id among the survivors.
 *
 * Rendezvous keys written per group: <group>/node/<rank> (node id), <group>/shm/<node> (shm
 * segment name), <group>/tcp/<node> ("host:port" of the node leader), <group>/nccl/id.
 *
 * Threads: collective calls on one communicator must come from one thread at a time (as with
 * NCCL/Gloo, all ranks must issue the same calls in the same order). ct_comm_abort() is
 * thread-safe and async-signal-unsafe. ct_comm_destroy() must not race a pending call (abort
 * first, let the call return, then destroy). Different communicators are independent.
 */
#ifndef CT_COLLECTIVE_H
#define CT_COLLECTIVE_H

#include <stddef.h>
#include <stdbool.h>
#include "ct/dtype.h"
#include "ct/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- rendezvous ------------------------------------------------------------------------ */

/* A key-value store the ranks meet through. put() stores a copy of value under key (keys are
 * written once); get() waits until the key exists or timeout_ms passes (CT_ETIMEDOUT) and
 * returns a malloc'ed copy the caller frees. Both return 0 or a negative CT_E* code and must
 * be callable from any thread. */
typedef struct ct_rendezvous {
    int (*put)(void *ctx, const char *key, const void *value, size_t len);
    int (*get)(void *ctx, const char *key, void **value, size_t *len, int timeout_ms);
    void *ctx;
} ct_rendezvous;

/* A rendezvous over a directory shared by the ranks (like torch's FileStore): each key is a
 * file written atomically (temporary file + rename). The directory is created if missing.
 * Returns an owned object or NULL (ct_last_error() says why). Thread-safe. */
ct_rendezvous *ct_rendezvous_file_new(const char *dir);
void ct_rendezvous_file_destroy(ct_rendezvous **rdv);

/* A rendezvous over the head's KV (ct_kv_put / ct_kv_get of ct/ct.h): what replicas in a
 * cluster use. Keys are stored as prefix + key (prefix may be NULL). Needs ct_init() in the
 * calling process. Returns an owned object or NULL (ct_last_error() says why). Thread-safe
 * as far as the runtime's KV calls are. */
ct_rendezvous *ct_rendezvous_kv_new(const char *prefix);
void ct_rendezvous_kv_destroy(ct_rendezvous **rdv);

/* ---- communicator ---------------------------------------------------------------------- */

typedef struct ct_comm ct_comm;

typedef enum { CT_COMM_RING = 0, CT_COMM_NCCL = 1 } ct_comm_backend;
typedef enum { CT_COMM_SUM = 0, CT_COMM_AVG = 1 } ct_comm_op;

/* How the ring backend lays out a group that spans several nodes (opts.topology). Every rank of
 * a group must pass the same value. Across nodes both layouts give bit-identical results: each
 * element's sum is the flat ring's, a chain over the ranks in node order (node 0's ranks
 * ascending, then node 1's, ...; nodes numbered by their lowest rank) that starts at the rank
 * whose chunk (ct_comm_chunk) holds the element (when (world - 1) * bytes <= 64 KiB: all ranks
 * in node order). On one node AUTO and HIER use shared memory alone (ranks in order), FLAT the
 * TCP ring (its chain order). */
typedef enum {
    CT_COMM_TOPO_AUTO = 0, /* hierarchical (the only layout AUTO picks today) */
    CT_COMM_TOPO_FLAT,     /* every rank in one TCP ring, in node order (no shared memory) */
    CT_COMM_TOPO_HIER,     /* shared memory inside each node, a TCP ring among one leader per
                              node */
} ct_comm_topology;

typedef struct ct_comm_opts {
    const ct_rendezvous *rendezvous; /* required; borrowed during ct_comm_new() only */
    const char *group_id;      /* required; unique per communicator incarnation (e.g. "job-try3") */
    int rank;                  /* 0 .. world_size-1 */
    int world_size;            /* >= 1 */
    const char *node_id;       /* ranks with equal node ids use shared memory; NULL: own node */
    ct_comm_backend backend;   /* default CT_COMM_RING */
    int timeout_ms;            /* default for calls given timeout 0, and for setup; 0: 60000 */
    const char *host;          /* ring: address peers reach this rank at; NULL: $CT_COMM_HOST, else
                                  the first non-loopback IPv4 address, else 127.0.0.1 */
    int device;                /* nccl: CUDA device ordinal */
    void *stream;              /* nccl: cudaStream_t to run on; NULL: the communicator's own */
    ct_comm_topology topology; /* ring: flat or hierarchical across nodes; default AUTO */
} ct_comm_opts;

/* Joins the group; blocks until all world_size ranks have joined or opts->timeout_ms passes.
 * On success *out is an owned communicator; on failure *out is NULL and a CT_E* code is
 * returned (CT_EINVAL naming the bad field, CT_ETIMEDOUT, CT_ENOSYS for nccl without CUDA). */
int ct_comm_new(const ct_comm_opts *opts, ct_comm **out);

/* Frees everything (sockets, shared memory, CUDA objects). Accepts NULL; nulls the pointer. */
void ct_comm_destroy(ct_comm **comm);

/* In-place allreduce of count elements of buf (host memory for ring, device memory for nccl).
 * timeout_ms 0: the communicator's default. Every rank gets bit-identical results. */
int ct_comm_allreduce(ct_comm *comm, void *buf, size_t count, ct_dtype dtype, ct_comm_op op,
                      int timeout_ms);

/* Copies root's count elements of buf to every rank's buf. */
int ct_comm_broadcast(ct_comm *comm, void *buf, size_t count, ct_dtype dtype, int root,
                      int timeout_ms);

/* recv (world_size * count elements) gets rank r's send (count elements) at r * count.
 * send may not overlap recv, except send == recv + rank * count (in place). */
int ct_comm_allgather(ct_comm *comm, const void *send, void *recv, size_t count, ct_dtype dtype,
                      int timeout_ms);

/* ---- sharded collectives (ZeRO) --------------------------------------------------------
 * A flat buffer of count elements split into world_size chunks: rank r owns chunk r,
 * [off, off + len) of ct_comm_chunk (balanced: the first count % world_size chunks hold one
 * element more; chunks may be empty). Ring backend only (CT_ENOSYS on nccl). */
void ct_comm_chunk(size_t count, int world_size, int rank, size_t *off, size_t *len);

/* In-place reduce-scatter of f32 buf: on return this rank's chunk holds the reduction (SUM, or
 * AVG: the sum divided by world_size), with the very bits ct_comm_allreduce gives for those
 * elements (the same summation order). The rest of buf is unspecified. One node: each rank sums
 * only its chunk (shared memory); one rank per node (or flat): the TCP ring's reduce-scatter
 * plus one step that hands each chunk to its owner; hierarchical (several ranks on some of
 * several nodes): the leaders' reduce-scatter of the nodes' chunks, then each rank gets its chunk
 * from its leader over shared memory (no allgather among the leaders). */
int ct_comm_reduce_scatter(ct_comm *comm, float *buf, size_t count, ct_comm_op op, int timeout_ms);

/* In-place allgather of chunks: every rank's chunk of buf (ct_comm_chunk) goes to every rank. */
int ct_comm_allgather_chunks(ct_comm *comm, void *buf, size_t count, ct_dtype dtype,
                             int timeout_ms);

/* In-place allgather with per-rank counts: rank r's counts[r] elements at buf + (counts[0] +
 * ... + counts[r-1]) go to every rank. Every rank passes the same counts[world_size]. */
int ct_comm_allgatherv(ct_comm *comm, void *buf, const size_t *counts, ct_dtype dtype,
                       int timeout_ms);

/* Returns when every rank has entered the barrier. */
int ct_comm_barrier(ct_comm *comm, int timeout_ms);

/* Thread-safe, from any thread: makes every pending and future call on comm return
 * CT_ECANCELED promptly (within milliseconds). Peers blocked on this rank see it as a dead
 * peer (CT_ECONNRESET). */
void ct_comm_abort(ct_comm *comm);

int ct_comm_rank(const ct_comm *comm);
int ct_comm_world_size(const ct_comm *comm);

/* 0 while usable; else the error that broke it (CT_ECANCELED after abort). Thread-safe. */
int ct_comm_status(const ct_comm *comm);

/* ---- gradient bucketing (DDP-style) ----------------------------------------------------- */

/* A bucketer packs gradients into buckets and allreduces (AVG) each full bucket on its own
 * communication thread while the caller's backward pass continues.
 * Drive it from the engine's gradient-ready hooks (ct_module_on_grad_ready in ct/nn.h: mark
 * gradient np-1-i ready when parameter i fires), then call ct_bucketer_finish() before the
 * optimizer step; examples/ddp_fashion_mnist.c shows the dozen lines.
 *   grads[i] / counts[i]: the gradient arrays in the order backward produces them (reverse
 *   parameter order). The arrays are borrowed for the bucketer's lifetime; the caller must
 *   not touch a gradient between ct_bucketer_mark_ready() and ct_bucketer_finish().
 * Buckets: the first holds ~first_bucket_bytes, the rest ~bucket_bytes; a gradient is never
 * split. With the ring backend gradients are host arrays (a bucket is packed into one buffer,
 * reduced, unpacked); with nccl they are device arrays (a bucket is one grouped NCCL allreduce).
 * All ranks must build the same bucketer. The communicator is borrowed; the bucketer's
 * thread is the only one issuing calls on it between the first mark_ready and finish. */
typedef struct ct_bucketer ct_bucketer;

typedef struct ct_bucketer_opts {
    size_t first_bucket_bytes; /* 0: 1 MiB */
    size_t bucket_bytes;       /* 0: 25 MB (25 * 1024 * 1024 bytes) */
    int timeout_ms;            /* per allreduce; 0: the communicator's default */
    /* where the gradients live (ct/tensor.h): CT_CPU (0) host arrays; CT_CUDA or CT_CHECKDEV
     * device arrays, ordered with the compute stream by an event per bucket (bucket.c) */
    ct_device device;
    /* gradients on several devices (a model across devices): devices[i] is where grads[i]
     * lives (NULL: device for all); a bucket holds one device's gradients, reduced on that
     * device's own communication stream. The ring backend only (CT_ENOSYS with nccl). */
    const ct_device *devices;
    /* ZeRO-1: reduce-scatter (AVG) each bucket instead of allreducing it; this rank then holds
     * the averages only for its chunk of each bucket (ct_comm_chunk over the bucket's packed
     * gradients: ct_bucketer_shard says which part of each gradient), the rest of its gradients
     * keep local sums. Host gradients and the ring backend only (CT_ENOSYS else). */
    bool shard;
    /* Host gradients on the ring that lie in one buffer with nothing but padding between them
     * (a module's gradients: ct_module_params carves them from one buffer, 64-byte aligned): a
     * bucket whose gradients are adjacent so (fewer than 16 floats apart, no other bucket's
     * between) is allreduced in place as one array, the padding averaged with it, instead of
     * packed into a buffer and copied back (DDP's gradient_as_bucket_view). Not with shard. */
    bool in_place;
} ct_bucketer_opts;

int ct_bucketer_new(ct_comm *comm, float *const *grads, const size_t *counts, int ngrads,
                    const ct_bucketer_opts *opts, ct_bucketer **out);
void ct_bucketer_destroy(ct_bucketer **b);

/* Marks gradient i final for this step. When every gradient of a bucket (and of all earlier
 * buckets) is ready, the bucket is queued for allreduce. Returns 0, CT_EINVAL for a bad or
 * repeated index, or the error of an earlier failed bucket. No-op in no_sync mode. */
int ct_bucketer_mark_ready(ct_bucketer *b, int i);

/* Host gradients: waits until every bucket of this step is reduced and written back
 * (gradients not marked ready are marked now), then resets for the next step. Device gradients
 * (opts.device): does not block the host for the reductions: makes the compute stream wait for
 * the last bucket's averages (an event on the communication stream) and returns, so the
 * optimizer step queued next runs after them (with nccl it waits only until NCCL has every
 * bucket enqueued). Returns 0 or the first error; a failure of the communication side that comes
 * after its return (a hung allreduce the communicator's watchdog aborted, named in the message)
 * is returned by the next mark_ready, finish or ct_bucketer_wait. */
int ct_bucketer_finish(ct_bucketer *b);

/* The host waits until the communication of every finished step is done (device gradients: the
 * communication streams' done events; host gradients: nothing to wait for) and returns 0 or the
 * failure not yet reported (see ct_bucketer_finish). */
int ct_bucketer_wait(ct_bucketer *b);

/* no_sync on: gradients just accumulate locally (mark_ready and finish do nothing), as in
 * DDP's no_sync() for gradient accumulation; the next synced step reduces the accumulated
 * sum. Only between steps. */
void ct_bucketer_set_no_sync(ct_bucketer *b, bool no_sync);

/* shard mode: the part [*lo, *lo + *n) of gradient i whose average this rank owns. */
void ct_bucketer_shard(const ct_bucketer *b, int i, size_t *lo, size_t *n);

/* shard mode, between steps (after finish): vals[i] (numel counts[i], as the gradients) gets
 * every rank's owned part (ct_bucketer_shard) of it: per bucket, one allgather of chunks. For
 * ZeRO's parameters after each rank stepped its own part. Caller's thread. */
int ct_bucketer_allgather(ct_bucketer *b, float *const *vals);

/* Number of buckets, and the gradient range [first, first + n) of bucket k (for tests). */
int ct_bucketer_num_buckets(const ct_bucketer *b);
void ct_bucketer_bucket_range(const ct_bucketer *b, int k, int *first, int *n);
/* Whether bucket k is reduced where its gradients are, without packing: one gradient, or
 * opts.in_place and adjacent gradients. */
bool ct_bucketer_in_place(const ct_bucketer *b, int k);
/* Buckets of this step reduced and written back so far, [0, done). Thread-safe: once it
 * returns k, the gradients of buckets [0, k) may be read (for tests and progress). */
int ct_bucketer_buckets_done(ct_bucketer *b);

#ifdef __cplusplus
}
#endif
#endif
