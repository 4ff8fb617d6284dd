/* trainer/collective/nccl.c — the NCCL backend (built only when CT_HAVE_CUDA).
 *
 * Rank 0 creates the unique id and publishes it under <group>/nccl/id; every rank builds a
 * non-blocking communicator (ncclConfig_t.blocking = 0). Each call enqueues the NCCL op on the
 * stream, waits until NCCL has it enqueued (ncclCommGetAsyncError leaves ncclInProgress: a
 * non-blocking communicator may still be enqueueing it when the call returns), records one of
 * the communicator's op events after it and hands the op to the communicator's watchdog
 * (watchdog.c): its thread polls the event (cudaEventQuery) and ncclCommGetAsyncError until the
 * op completes, an async error appears, the deadline passes or ct_comm_abort() is called; in the
 * last three cases it calls ncclCommAbort (abort_hung) and breaks the communicator, naming the
 * op. The blocking calls (allreduce, broadcast, allgather, barrier) then wait for the watchdog's
 * verdict; allreduce_many_async (the bucketer's device path) returns at once, and the stream's
 * later work is what waits. The event, not the stream: the caller may share the stream, and
 * work queued there after the op is not the op's. Recovery is a new communicator from a new
 * group id (a new unique id). The barrier is a one-float allreduce on a scratch float made with
 * the communicator (cudaMalloc and cudaFree synchronize the device, which a barrier per step
 * must not). Buffers are device memory. g->mu keeps the watchdog's abort off an enqueue in
 * progress. Not thread-safe beyond what ct/collective.h promises. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "common/common.h"
#include "internal.h"

#define OPS 64 /* ops in flight at once (each holds an event until the watchdog sees it done) */

struct nccl_op {
    ct_comm *c;
    cudaEvent_t ev; /* recorded after the op */
    bool busy;
    char what[160];
};

struct ct__nccl {
    pthread_mutex_t mu; /* comm and ops[].busy */
    ncclComm_t comm;
    cudaStream_t stream;
    int own_stream;
    int device;
    cudaEvent_t done; /* init: unused; kept for the setup's error paths */
    struct nccl_op ops[OPS];
    float *scratch; /* the barrier's device float (0) */
};

static int nccl_err(ncclResult_t r, const char *what)
{
    return ct__error(CT_ENCCL, "collective: %s: %s", what, ncclGetErrorString(r));
}

/* Waits until the communicator's pending work is enqueued (init: done), polling
 * ncclCommGetAsyncError (it leaves ncclInProgress within the enqueue; never for an op's
 * completion), until the deadline or ct_comm_abort(). g->mu held by the caller for ops. */
static int enqueued(ct_comm *c, int64_t deadline, const char *what)
{
    struct ct__nccl *g = c->nccl;
    for (unsigned spins = 0;; spins++) {
        ncclResult_t ar = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(g->comm, &ar);
        if (r != ncclSuccess)
            ar = r;
        if (ar == ncclSuccess)
            return 0;
        if (ar != ncclInProgress) {
            ncclCommAbort(g->comm);
            g->comm = NULL;
            return nccl_err(ar, what);
        }
        int st = ct__comm_aborted(c);
        if (st || ct__now_ns() >= deadline) {
            ncclCommAbort(g->comm);
            g->comm = NULL;
            if (st)
                return ct__error(st, "collective: %s: aborted", what);
            return ct__error(CT_ETIMEDOUT, "collective: %s: timed out; communicator aborted", what);
        }
        if (spins > 1000)
            usleep(50);
    }
}

/* The watchdog's poll of an op (watchdog.c): 1 done, 0 not yet, < 0 failed. Never blocks
 * beyond g->mu, which an enqueue holds only while NCCL enqueues. */
static int op_poll(void *ctx)
{
    struct nccl_op *op = ctx;
    ct_comm *c = op->c;
    struct ct__nccl *g = c->nccl;
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    int st = ct__comm_aborted(c);
    ncclResult_t ar = ncclSuccess;
    if (!g->comm) {
        rc = ct__error(st ? st : CT_ENCCL, "collective: %s: communicator was aborted", op->what);
    } else if (st) {
        ncclCommAbort(g->comm);
        g->comm = NULL;
        rc = ct__error(st, "collective: %s: aborted", op->what);
    } else {
        ncclResult_t r = ncclCommGetAsyncError(g->comm, &ar);
        if (r != ncclSuccess)
            ar = r;
        if (ar != ncclSuccess && ar != ncclInProgress) {
            ncclCommAbort(g->comm);
            g->comm = NULL;
            rc = ct__error(CT_ENCCL, "collective: %s: %s", op->what, ncclGetErrorString(ar));
        } else {
            cudaSetDevice(g->device); /* the watchdog's thread: the event's device */
            cudaError_t ce = cudaEventQuery(op->ev);
            /* not-ready is no error, and an error is reported here: neither is for a later
             * launch check to see */
            (void)cudaGetLastError();
            if (ce == cudaSuccess) {
                rc = 1;
            } else if (ce != cudaErrorNotReady) {
                ncclCommAbort(g->comm);
                g->comm = NULL;
                rc = ct__error(CT_ECUDA, "collective: %s: %s", op->what, cudaGetErrorString(ce));
            }
        }
    }
    if (rc != 0)
        op->busy = false;
    pthread_mutex_unlock(&g->mu);
    if (rc < 0)
        ct__comm_fail(c, rc);
    return rc;
}

/* the watchdog's, when an op's deadline passed: abort, and free every op's event */
static void nccl_abort_hung(ct_comm *c)
{
    struct ct__nccl *g = c->nccl;
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    if (g->comm) {
        ncclCommAbort(g->comm);
        g->comm = NULL;
    }
    for (int i = 0; i < OPS; i++)
        g->ops[i].busy = false;
    pthread_mutex_unlock(&g->mu);
}

int ct__nccl_setup(ct_comm *c, const ct_comm_opts *o, int64_t deadline)
{
    int rc = 0;
    char key[512];
    ncclUniqueId id;
    void *v = NULL;
    size_t len = 0;
    struct ct__nccl *g = calloc(1, sizeof *g);
    if (!g)
        return ct__error(CT_ENOMEM, "collective: nccl state");
    pthread_mutex_init(&g->mu, NULL);
    c->nccl = g;
    g->device = o->device;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
        return ct__error(CT_ENOSYS, "collective: nccl backend: no CUDA device");
    if (o->device < 0 || o->device >= ndev)
        return ct__error(CT_EINVAL, "collective: opts.device %d not in [0, %d)", o->device, ndev);
    if (cudaSetDevice(o->device) != cudaSuccess)
        return ct__error(CT_ECUDA, "collective: cudaSetDevice(%d)", o->device);
    if (o->stream) {
        g->stream = (cudaStream_t)o->stream;
    } else {
        if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess)
            return ct__error(CT_ECUDA, "collective: cudaStreamCreate");
        g->own_stream = 1;
    }
    /* ct__nccl_destroy frees what is made here when a later step fails */
    cudaError_t ce = cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming);
    for (int i = 0; ce == cudaSuccess && i < OPS; i++) {
        g->ops[i].c = c;
        ce = cudaEventCreateWithFlags(&g->ops[i].ev, cudaEventDisableTiming);
    }
    if (ce != cudaSuccess)
        return ct__error(CT_ECUDA, "collective: cudaEventCreateWithFlags: %s",
                         cudaGetErrorString(ce));
    if ((ce = cudaMalloc((void **)&g->scratch, sizeof(float))) != cudaSuccess ||
        (ce = cudaMemsetAsync(g->scratch, 0, sizeof(float), g->stream)) != cudaSuccess) {
        (void)cudaGetLastError();
        return ct__error(ce == cudaErrorMemoryAllocation ? CT_ENOMEM : CT_ECUDA,
                         "collective: barrier scratch (cudaMalloc, cudaMemsetAsync): %s",
                         cudaGetErrorString(ce));
    }
    snprintf(key, sizeof key, "%s/nccl/id", c->group);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            return nccl_err(r, "ncclGetUniqueId");
        if ((rc = o->rendezvous->put(o->rendezvous->ctx, key, &id, sizeof id)) < 0)
            return rc;
    } else {
        int64_t left = (deadline - ct__now_ns()) / 1000000;
        rc = o->rendezvous->get(o->rendezvous->ctx, key, &v, &len, left > 0 ? (int)left : 1);
        if (rc < 0)
            return rc;
        if (len != sizeof id) {
            free(v);
            return ct__error(CT_EPROTO, "collective: %s holds %zu bytes, not %zu", key, len,
                             sizeof id);
        }
        memcpy(&id, v, sizeof id);
        free(v);
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&g->comm, c->world, id, c->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_err(r, "ncclCommInitRankConfig");
    return enqueued(c, deadline, "ncclCommInitRankConfig");
}

void ct__nccl_destroy(ct_comm *c)
{
    struct ct__nccl *g = c->nccl;
    if (!g)
        return;
    if (g->comm) {
        /* a healthy comm could be finalized; abort is safe in every state and never hangs */
        ncclCommAbort(g->comm);
    }
    /* the scratch and event are of the communicator's device, which the caller's thread may
     * not have current */
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && prev != g->device)
        cudaSetDevice(g->device);
    if (g->scratch)
        cudaFree(g->scratch);
    if (g->done)
        cudaEventDestroy(g->done);
    for (int i = 0; i < OPS; i++)
        if (g->ops[i].ev)
            cudaEventDestroy(g->ops[i].ev);
    if (g->own_stream && g->stream)
        cudaStreamDestroy(g->stream);
    if (prev >= 0 && prev != g->device)
        cudaSetDevice(prev);
    (void)cudaGetLastError(); /* whatever failed here is not the next caller's error */
    pthread_mutex_destroy(&g->mu);
    free(g);
    c->nccl = NULL;
}

/* the calling thread may not be the one that built the comm (e.g. a bucketer thread); on
 * success g->mu is held until issued() */
static int use_device(ct_comm *c)
{
    if (cudaSetDevice(c->nccl->device) != cudaSuccess)
        return ct__error(CT_ECUDA, "collective: cudaSetDevice(%d)", c->nccl->device);
    pthread_mutex_lock(&c->nccl->mu);
    if (!c->nccl->comm) {
        pthread_mutex_unlock(&c->nccl->mu);
        return ct__error(CT_ENCCL, "collective: communicator was aborted");
    }
    return 0;
}

static int dtype_of(ct_dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case CT_F32:
        *out = ncclFloat32;
        return 0;
    case CT_F16:
        *out = ncclFloat16;
        return 0;
    case CT_BF16:
        *out = ncclBfloat16;
        return 0;
    case CT_I32:
        *out = ncclInt32;
        return 0;
    case CT_I64:
        *out = ncclInt64;
        return 0;
    case CT_U8:
        *out = ncclUint8;
        return 0;
    }
    return ct__error(CT_EINVAL, "collective: dtype %d unknown", (int)dt);
}

static struct nccl_op *free_op(struct ct__nccl *g)
{
    for (int i = 0; i < OPS; i++)
        if (!g->ops[i].busy)
            return &g->ops[i];
    return NULL;
}

/* After an op's enqueue (r, g->mu held, released here): waits until NCCL has it on the stream,
 * records a free op event after it and hands it to the watchdog; wait: the host then waits for
 * the watchdog's verdict (the blocking calls), else returns (allreduce_many_async). */
static int issued(ct_comm *c, ncclResult_t r, int64_t deadline, const char *what, bool wait)
{
    struct ct__nccl *g = c->nccl;
    int rc = 0;
    struct nccl_op *op = NULL;
    if (!g->comm) {
        rc = ct__error(CT_ENCCL, "collective: %s: communicator was aborted", what);
    } else if (r != ncclSuccess && r != ncclInProgress) {
        ncclCommAbort(g->comm);
        g->comm = NULL;
        rc = nccl_err(r, what);
    } else if ((rc = enqueued(c, deadline, what)) == 0) {
        /* all OPS events in flight: the watchdog frees one as it sees its op done (it takes
         * g->mu for that, so the wait lets go of it) */
        while (!(op = free_op(g)) && g->comm && !ct__comm_aborted(c) && ct__now_ns() < deadline) {
            pthread_mutex_unlock(&g->mu);
            usleep(100);
            pthread_mutex_lock(&g->mu);
        }
        if (!op) {
            rc = ct__error(g->comm ? CT_ETIMEDOUT : CT_ENCCL,
                           "collective: %s: %d NCCL ops still in flight (or the communicator "
                           "aborted) at its deadline",
                           what, OPS);
        } else {
            cudaError_t ce = cudaEventRecord(op->ev, g->stream);
            if (ce != cudaSuccess) {
                (void)cudaGetLastError();
                rc = ct__error(CT_ECUDA, "collective: %s: cudaEventRecord: %s", what,
                               cudaGetErrorString(ce));
            } else {
                op->busy = true;
                snprintf(op->what, sizeof op->what, "%s", what);
            }
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (rc < 0)
        return rc;
    int ticket = ct__watch_begin(c, op->what, deadline, op_poll, op, wait);
    if (ticket < 0)
        return ticket;
    return wait ? ct__watch_wait(c, ticket) : 0;
}

int ct__nccl_allreduce(ct_comm *c, void *buf, size_t count, ct_dtype dt, ct_comm_op op,
                       int64_t deadline)
{
    ncclDataType_t t = ncclFloat32;
    int rc = dtype_of(dt, &t);
    if (rc < 0 || (rc = use_device(c)) < 0)
        return rc;
    ncclResult_t r = ncclAllReduce(buf, buf, count, t, op == CT_COMM_AVG ? ncclAvg : ncclSum,
                                   c->nccl->comm, c->nccl->stream);
    return issued(c, r, deadline, "ncclAllReduce", true);
}

static int allreduce_many(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                          int64_t deadline, const char *what, bool wait)
{
    int rc = use_device(c);
    if (rc < 0)
        return rc;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < n && (r == ncclSuccess || r == ncclInProgress); i++)
        if (counts[i])
            r = ncclAllReduce(bufs[i], bufs[i], counts[i], ncclFloat32, ncclAvg, c->nccl->comm,
                              c->nccl->stream);
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress)
        r = e;
    return issued(c, r, deadline, what, wait);
}

int ct__nccl_allreduce_many(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                            int64_t deadline)
{
    return allreduce_many(c, bufs, counts, n, deadline, "grouped ncclAllReduce", true);
}

static int nccl_allreduce_many_async(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                                     int64_t deadline, const char *what)
{
    char name[200];
    snprintf(name, sizeof name, "grouped ncclAllReduce (%s)", what);
    return allreduce_many(c, bufs, counts, n, deadline, name, false);
}

int ct__nccl_broadcast(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root, int64_t deadline)
{
    ncclDataType_t t = ncclFloat32;
    int rc = dtype_of(dt, &t);
    if (rc < 0 || (rc = use_device(c)) < 0)
        return rc;
    ncclResult_t r = ncclBroadcast(buf, buf, count, t, root, c->nccl->comm, c->nccl->stream);
    return issued(c, r, deadline, "ncclBroadcast", true);
}

int ct__nccl_allgather(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                       int64_t deadline)
{
    ncclDataType_t t = ncclFloat32;
    int rc = dtype_of(dt, &t);
    if (rc < 0 || (rc = use_device(c)) < 0)
        return rc;
    ncclResult_t r = ncclAllGather(send, recv, count, t, c->nccl->comm, c->nccl->stream);
    return issued(c, r, deadline, "ncclAllGather", true);
}

int ct__nccl_barrier(ct_comm *c, int64_t deadline)
{
    /* a one-element sum of the scratch float, which stays 0 (every rank's is 0) */
    return ct__nccl_allreduce(c, c->nccl->scratch, 1, CT_F32, CT_COMM_SUM, deadline);
}

void *ct__nccl_stream(ct_comm *c)
{
    return c->nccl ? (void *)c->nccl->stream : NULL;
}

const ct__nccl_ops ct__nccl_table = {
    .setup = ct__nccl_setup,
    .destroy = ct__nccl_destroy,
    .allreduce = ct__nccl_allreduce,
    .allreduce_many = ct__nccl_allreduce_many,
    .broadcast = ct__nccl_broadcast,
    .allgather = ct__nccl_allgather,
    .barrier = ct__nccl_barrier,
    .stream = ct__nccl_stream,
    .allreduce_many_async = nccl_allreduce_many_async,
    .abort_hung = nccl_abort_hung,
};
