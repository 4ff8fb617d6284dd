/* trainer/collective/internal.h — what the communicator's files share: the ct_comm struct, the
 * shared-memory and TCP transports of the ring backend, and the NCCL backend's entry points.
 *
 * Not public: users include ct/collective.h only. */
#ifndef CT_COLLECTIVE_INTERNAL_H
#define CT_COLLECTIVE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include "ct/collective.h"

struct ct__shm;      /* shm.c: one node's shared segment, mapped by each of its ranks */
struct ct__nccl;     /* nccl.c */
struct ct__watchdog; /* watchdog.c */

struct ct_comm {
    int rank, world;
    ct_comm_backend backend;
    int timeout_ms;
    char *group;
    uint64_t group_hash;

    _Atomic int status; /* 0, or the error that broke the comm (CT_ECANCELED on abort) */
    int abort_fd;       /* eventfd, readable after abort: wakes poll() */

    /* topology: nodes numbered in order of their lowest rank */
    int nnodes, node; /* node count, this rank's node */
    int *node_of;     /* [world] node of each rank */
    int *leader_of;   /* [nnodes] lowest rank of each node */
    int local_rank, local_size;
    int *local_ranks; /* [local_size] ranks on this node, ascending */
    /* node order: node 0's ranks ascending, then node 1's, ... (the flat ring's order) */
    int *by_pos;     /* [world] the rank at each place */
    int *node_first; /* [nnodes + 1] node g's ranks are by_pos[node_first[g] .. node_first[g+1]) */

    struct ct__shm *shm;  /* NULL when local_size == 1 */
    int fd_next, fd_prev; /* leaders only, nnodes > 1: TCP links to next/prev node leader */

    bool hier;  /* several nodes, several ranks on some: hier.c's allreduce and reduce-scatter */
    float *tmp; /* receive staging for reductions */
    size_t tmp_cap;
    float *hbuf; /* hier.c, node leaders: the node's ranks' buffers and a receive stage */
    size_t hbuf_cap;

    struct ct__nccl *nccl;
    const struct ct__nccl_ops *nops; /* the nccl backend's calls (nccl.c), NULL for the ring */

    /* ops queued to run later on another thread (the bucketer's device buckets on the ring, as
     * host functions of a stream): a call from any other thread waits until they have run, so
     * every rank issues its collectives in the order they were queued, as on an NCCL stream */
    pthread_mutex_t async_mu;
    pthread_cond_t async_cv;
    int async_pending;

    pthread_mutex_t watch_mu;      /* guards starting the watchdog */
    struct ct__watchdog *watchdog; /* watchdog.c: NULL until the first watched op */
};

/* deadline in ct__now_ns() time for a call with timeout_ms (0: the comm's default) */
int64_t ct__comm_deadline(const ct_comm *c, int timeout_ms);

/* Marks the comm broken with err (first error wins) and returns the stored status. */
int ct__comm_fail(ct_comm *c, int err);

/* An op was queued to run later (async_pending); ran: it has run. */
void ct__comm_async_queued(ct_comm *c);
void ct__comm_async_ran(ct_comm *c);
/* the calling thread runs queued ops now: its calls do not wait for async_pending */
void ct__comm_async_thread(bool on);

/* Breaks the comm with err as ct_comm_abort does with CT_ECANCELED: calls in progress return. */
void ct__comm_break(ct_comm *c, int err);

static inline int ct__comm_aborted(const ct_comm *c)
{
    return atomic_load_explicit(&c->status, memory_order_acquire);
}

/* ---- shm.c: shared memory among the ranks of one node -------------------------------- */
int ct__shm_setup(ct_comm *c, const ct_rendezvous *rdv, int64_t deadline);
void ct__shm_destroy(ct_comm *c);
/* Marks this rank gone so peers waiting on it fail at once. */
void ct__shm_mark_failed(ct_comm *c);
/* allreduce among local ranks; result divided by div; only_leader: only local rank 0 needs
 * the result (others skip the copy out) */
int ct__shm_allreduce(ct_comm *c, float *buf, size_t count, float div, int only_leader,
                      int64_t deadline);
int ct__shm_broadcast(ct_comm *c, void *buf, size_t bytes, int root_local, int64_t deadline);
/* each local rank's block (bytes) goes to recv + rank * bytes on every local rank */
int ct__shm_allgather(ct_comm *c, const void *send, void *recv, size_t bytes, int64_t deadline);
int ct__shm_barrier(ct_comm *c, int64_t deadline);
/* local rank i's bytes of send go to recv + i * bytes on local rank 0 (by_rank: recv + its rank
 * * bytes); the others' recv is unused */
int ct__shm_gather(ct_comm *c, const void *send, void *recv, size_t bytes, bool by_rank,
                   int64_t deadline);
/* reduce-scatter among local ranks (one node): every rank copies buf in, then reduces only
 * [lo, lo + len) of it (its chunk) from all slots, as ct__shm_allreduce sums (same bits) */
int ct__shm_reduce_scatter(ct_comm *c, float *buf, size_t count, float div, size_t lo, size_t len,
                           int64_t deadline);
/* in-place allgather among local ranks: rank r's block is bytes [off[r], off[r] + len[r]) of buf
 * (off, len indexed by world rank) */
int ct__shm_allgatherv(ct_comm *c, void *buf, const size_t *off, const size_t *len,
                       int64_t deadline);

/* ---- tcp.c: ring among node leaders -------------------------------------------------- */
/* the allreduce gathers whole buffers and sums them in rank order while (world - 1) * bytes stays
 * under this (the flat ring's rule; hier.c follows it so both give the same bits) */
#define CT__TCP_SMALL_BYTES (64 * 1024)
int ct__tcp_setup(ct_comm *c, const ct_rendezvous *rdv, const char *host, int64_t deadline);
void ct__tcp_destroy(ct_comm *c);
/* one rank per node (or flat): the ring's segment j is the chunk of node j's rank */
int ct__tcp_allreduce(ct_comm *c, float *buf, size_t count, float div, int64_t deadline);
int ct__tcp_broadcast(ct_comm *c, void *buf, size_t bytes, int root_node, int64_t deadline);
/* node blocks: recv + r * bytes for every rank r; this node's blocks are filled already */
int ct__tcp_allgather(ct_comm *c, void *recv, size_t bytes, int64_t deadline);
/* one rank per node (or flat): reduce-scatter of the ranks' chunks (ct_comm_chunk), with
 * ct__tcp_allreduce's arithmetic: its reduce-scatter phase, then one step hands segment j to node
 * j (a small buffer: the allreduce itself) */
int ct__tcp_reduce_scatter(ct_comm *c, float *buf, size_t count, float div, int64_t deadline);
/* in place: rank r's block is bytes [off[r], off[r] + len[r]) of buf; this node's are filled */
int ct__tcp_allgatherv(ct_comm *c, void *buf, const size_t *off, const size_t *len,
                       int64_t deadline);

/* one ring step: the sn pieces of send to the next leader while rbytes from the previous one
 * land in recv (send and recv may not overlap) */
struct iovec;
int ct__tcp_step(ct_comm *c, const struct iovec *send, int sn, void *recv, size_t rbytes,
                 int64_t deadline);

/* ---- hier.c: the hierarchical allreduce and reduce-scatter (c->hier) --------------------- */
/* every rank of the group calls these; the bits are the flat ring's (ct/collective.h) */
int ct__hier_allreduce(ct_comm *c, float *buf, size_t count, float div, int64_t deadline);
/* on return this rank's chunk (ct_comm_chunk) of buf holds its sum; the rest is unspecified */
int ct__hier_reduce_scatter(ct_comm *c, float *buf, size_t count, float div, int64_t deadline);

/* ---- reduce.c ----------------------------------------------------------------------------- */
/* dst[i] = (sum_k srcs[k][i]) / div in the order of srcs (dst may alias srcs[k]) */
void ct__reduce_sum(float *dst, const float *const *srcs, int nsrc, size_t n, float div);
/* dst[i] += src[i] */
void ct__reduce_add(float *dst, const float *src, size_t n);
void ct__divide(float *dst, size_t n, float div);

/* ---- nccl.c (ct_nccl, part of the CUDA code: see ct__cuda_lib in trainer/backend/backend.h) -- */
/* NCCL's communicator as a table: comm.c calls it through c->nops, which it takes from
 * ct__cuda_lib_get() (linked in, or loaded from libct_cuda.so by libct.so) */
typedef struct ct__nccl_ops {
    int (*setup)(ct_comm *c, const ct_comm_opts *o, int64_t deadline);
    void (*destroy)(ct_comm *c);
    int (*allreduce)(ct_comm *c, void *buf, size_t count, ct_dtype dt, ct_comm_op op,
                     int64_t deadline);
    int (*allreduce_many)(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                          int64_t deadline);
    int (*broadcast)(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root, int64_t deadline);
    int (*allgather)(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                     int64_t deadline);
    int (*barrier)(ct_comm *c, int64_t deadline);
    void *(*stream)(ct_comm *c);
    /* enqueues what allreduce_many does and returns once NCCL has it on the stream: completion
     * is the watchdog's (the bucketer's device path: its stream's later work waits for it) */
    int (*allreduce_many_async)(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                                int64_t deadline, const char *what);
    /* the watchdog's: ncclCommAbort of a communicator whose op hung (from the watchdog thread) */
    void (*abort_hung)(ct_comm *c);
} ct__nccl_ops;
extern const ct__nccl_ops ct__nccl_table;

int ct__nccl_setup(ct_comm *c, const ct_comm_opts *o, int64_t deadline);
void ct__nccl_destroy(ct_comm *c);
int ct__nccl_allreduce(ct_comm *c, void *buf, size_t count, ct_dtype dt, ct_comm_op op,
                       int64_t deadline);
/* AVG allreduce of n device f32 buffers as one NCCL group (the bucketer's GPU path) */
int ct__nccl_allreduce_many(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                            int64_t deadline);
int ct__nccl_broadcast(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root,
                       int64_t deadline);
int ct__nccl_allgather(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                       int64_t deadline);
int ct__nccl_barrier(ct_comm *c, int64_t deadline);

/* comm.c: AVG allreduce of n buffers in one call; the nccl backend only (CT_ENOSYS else) */
int ct__comm_allreduce_many(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                            int timeout_ms);

/* comm.c: allreduce_many's enqueue only (see ct__nccl_ops.allreduce_many_async); what names
 * the op in the watchdog's message */
int ct__comm_allreduce_many_async(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                                  int timeout_ms, const char *what);

/* comm.c: the stream the nccl backend's collectives run on (a cudaStream_t); NULL for the ring */
void *ct__comm_stream(ct_comm *c);
void *ct__nccl_stream(ct_comm *c);

/* bucket.c, for tests only: skip the device waits (the communication stream's wait for a
 * bucket's event, and the compute stream's for the averages), so that a test shows the checking
 * device catching their absence. */
void ct__bucketer_test_skip_waits(ct_bucketer *t, bool skip);

/* ---- watchdog.c: the communicator's watchdog thread (see the file's head) ---------------- */
/* Watches an op until deadline (ct__now_ns time); what names it in the failure. poll NULL: the
 * op ends with ct__watch_end from the thread that runs it; else the watchdog asks poll(ctx) (1
 * done, 0 not yet, < 0 failed with a message), never blocking. waited: someone will
 * ct__watch_end or ct__watch_wait the ticket; else its failure is kept for ct__watch_error.
 * Returns the ticket (>= 0) or a CT_E* code. */
int ct__watch_begin(ct_comm *c, const char *what, int64_t deadline, int (*poll)(void *ctx),
                    void *ctx, bool waited);
/* the op ended with rc; returns rc, or the watchdog's failure naming the op when it hung */
int ct__watch_end(ct_comm *c, int ticket, int rc);
/* the host waits for a polled op: 0, its failure, or the watchdog's naming it */
int ct__watch_wait(ct_comm *c, int ticket);
/* the first failure of an op nobody waits for (0: none), with its message */
int ct__watch_error(ct_comm *c);
/* stops the thread (ct_comm_destroy) */
void ct__watch_stop(ct_comm *c);

/* ---- helpers ------------------------------------------------------------------------------- */
/* rendezvous get of a NUL-terminated string value; caller frees *out */
int ct__rdv_get_str(const ct_rendezvous *rdv, const char *key, char **out, int64_t deadline);

#endif
