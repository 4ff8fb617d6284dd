/* trainer/collective/comm.c — the communicator: argument checks, topology (which ranks share
 * a node), and the hierarchical composition of the ring backend's transports:
 *
 *   one node: shm; one rank per node, or flat (opts.topology): the TCP ring of all ranks;
 *   several ranks on some of several nodes: hier.c (shm gather to each node's leader -> TCP
 *   ring among the leaders -> shm broadcast; flat with opts.topology), with the flat ring's bits
 *
 * and broadcast, allgather as shm inside each node around a TCP step among the leaders. A
 * failure's bookkeeping (status, abort) is comm_fail.c's. It is not a transport: bytes move in
 * shm.c and tcp.c (and nccl.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "common/common.h"
#include "internal.h"
#include "trainer/backend/cudalib.h"

#define DEFAULT_TIMEOUT_MS 60000

int64_t ct__comm_deadline(const ct_comm *c, int timeout_ms)
{
    int t = timeout_ms > 0 ? timeout_ms : c->timeout_ms;
    return ct__now_ns() + (int64_t)t * 1000000;
}

/* Finishes a call: a failure breaks the communicator; the returned code is the first error
 * (so a call that saw a shut-down socket after an abort reports CT_ECANCELED). */
static int finish(ct_comm *c, int rc)
{
    if (rc >= 0)
        return 0;
    int st = ct__comm_fail(c, rc);
    if (st != rc)
        ct__error(st, "collective: communicator %s is broken (%s)", c->group, ct_strerror(st));
    return st;
}

static _Thread_local bool runs_async; /* ct__comm_async_thread */

void ct__comm_async_thread(bool on)
{
    runs_async = on;
}

void ct__comm_async_queued(ct_comm *c)
{
    pthread_mutex_lock(&c->async_mu);
    c->async_pending++;
    pthread_mutex_unlock(&c->async_mu);
}

void ct__comm_async_ran(ct_comm *c)
{
    pthread_mutex_lock(&c->async_mu);
    c->async_pending--;
    pthread_cond_broadcast(&c->async_cv);
    pthread_mutex_unlock(&c->async_mu);
}

/* A call waits for the ops queued before it (their own deadlines and the watchdog end them). */
static int check_usable(ct_comm *c)
{
    if (!runs_async) {
        pthread_mutex_lock(&c->async_mu);
        while (c->async_pending > 0)
            pthread_cond_wait(&c->async_cv, &c->async_mu);
        pthread_mutex_unlock(&c->async_mu);
    }
    int st = ct__comm_aborted(c);
    if (st)
        return ct__error(st, "collective: communicator %s is %s", c->group,
                         st == CT_ECANCELED ? "aborted" : "broken by an earlier failure");
    return 0;
}

/* ---- topology --------------------------------------------------------------------------- */

static int exchange_nodes(ct_comm *c, const ct_comm_opts *o, int64_t deadline)
{
    int rc = 0;
    char key[512], self[256];
    char **ids = calloc((size_t)c->world, sizeof *ids);
    c->node_of = calloc((size_t)c->world, sizeof *c->node_of);
    c->leader_of = calloc((size_t)c->world, sizeof *c->leader_of);
    c->local_ranks = calloc((size_t)c->world, sizeof *c->local_ranks);
    if (!ids || !c->node_of || !c->leader_of || !c->local_ranks) {
        rc = ct__error(CT_ENOMEM, "collective: topology tables");
        goto out;
    }
    if (o->node_id)
        snprintf(self, sizeof self, "n:%s", o->node_id);
    else
        snprintf(self, sizeof self, "rank:%d", c->rank);
    snprintf(key, sizeof key, "%s/node/%d", c->group, c->rank);
    rc = o->rendezvous->put(o->rendezvous->ctx, key, self, strlen(self));
    if (rc < 0)
        goto out;
    for (int r = 0; r < c->world; r++) {
        snprintf(key, sizeof key, "%s/node/%d", c->group, r);
        rc = ct__rdv_get_str(o->rendezvous, key, &ids[r], deadline);
        if (rc < 0) {
            ct__error(rc, "collective: rank %d waiting for rank %d of group %s (key %s): %s",
                      c->rank, r, c->group, key, ct_strerror(rc));
            goto out;
        }
    }
    c->nnodes = 0;
    for (int r = 0; r < c->world; r++) {
        int n = -1;
        for (int q = 0; q < r; q++)
            if (strcmp(ids[q], ids[r]) == 0) {
                n = c->node_of[q];
                break;
            }
        if (n < 0) {
            n = c->nnodes++;
            c->leader_of[n] = r;
        }
        c->node_of[r] = n;
    }
    c->node = c->node_of[c->rank];
    c->local_size = 0;
    for (int r = 0; r < c->world; r++)
        if (c->node_of[r] == c->node) {
            if (r == c->rank)
                c->local_rank = c->local_size;
            c->local_ranks[c->local_size++] = r;
        }
out:
    if (ids)
        for (int r = 0; r < c->world; r++)
            free(ids[r]);
    free(ids);
    return rc;
}

/* Flat or hierarchical (opts.topology, ct/collective.h). Both order the ranks by node (node 0's
 * ranks ascending, then node 1's, ...: by_pos). Flat: every rank its own node for the transports,
 * in that order (one TCP ring of all ranks, no shared memory). */
static int choose_layout(ct_comm *c, ct_comm_topology topo)
{
    int p = 0;
    c->by_pos = malloc(sizeof(int) * (size_t)c->world);
    c->node_first = malloc(sizeof(int) * (size_t)(c->world + 1));
    if (!c->by_pos || !c->node_first)
        return ct__error(CT_ENOMEM, "collective: topology tables");
    for (int g = 0; g < c->nnodes; g++) {
        c->node_first[g] = p;
        for (int r = 0; r < c->world; r++)
            if (c->node_of[r] == g)
                c->by_pos[p++] = r;
    }
    c->node_first[c->nnodes] = p;
    if (topo == CT_COMM_TOPO_FLAT) {
        for (p = 0; p < c->world; p++) {
            c->node_of[c->by_pos[p]] = p;
            c->leader_of[p] = c->by_pos[p];
            c->node_first[p] = p;
        }
        c->node_first[c->world] = c->world;
        c->nnodes = c->world;
        c->node = c->node_of[c->rank];
        c->local_rank = 0;
        c->local_size = 1;
        c->local_ranks[0] = c->rank;
    }
    c->hier = c->nnodes > 1 && c->nnodes < c->world;
    return 0;
}

int ct_comm_new(const ct_comm_opts *o, ct_comm **out)
{
    int rc = 0;
    ct_comm *c = NULL;
    if (!out)
        return ct__error(CT_EINVAL, "ct_comm_new: out is NULL");
    *out = NULL;
    if (!o || !o->rendezvous || !o->rendezvous->put || !o->rendezvous->get)
        return ct__error(CT_EINVAL, "ct_comm_new: opts.rendezvous is missing");
    if (!o->group_id || !*o->group_id || strlen(o->group_id) > 200)
        return ct__error(CT_EINVAL, "ct_comm_new: opts.group_id must be 1..200 characters");
    if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
        return ct__error(CT_EINVAL, "ct_comm_new: opts.rank %d not in [0, world_size %d)", o->rank,
                         o->world_size);
    if (o->backend != CT_COMM_RING && o->backend != CT_COMM_NCCL)
        return ct__error(CT_EINVAL, "ct_comm_new: opts.backend %d unknown", (int)o->backend);
    if (o->timeout_ms < 0)
        return ct__error(CT_EINVAL, "ct_comm_new: opts.timeout_ms %d < 0", o->timeout_ms);
    if (o->topology != CT_COMM_TOPO_AUTO && o->topology != CT_COMM_TOPO_FLAT &&
        o->topology != CT_COMM_TOPO_HIER)
        return ct__error(CT_EINVAL, "ct_comm_new: opts.topology %d unknown", (int)o->topology);
    if (o->node_id && strlen(o->node_id) > 200)
        return ct__error(CT_EINVAL, "ct_comm_new: opts.node_id longer than 200 characters");

    c = calloc(1, sizeof *c);
    if (!c)
        return ct__error(CT_ENOMEM, "ct_comm_new: communicator");
    c->rank = o->rank;
    c->world = o->world_size;
    c->backend = o->backend;
    c->timeout_ms = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    c->fd_next = c->fd_prev = c->abort_fd = -1;
    pthread_mutex_init(&c->watch_mu, NULL);
    pthread_mutex_init(&c->async_mu, NULL);
    pthread_cond_init(&c->async_cv, NULL);
    c->group = strdup(o->group_id);
    if (!c->group) {
        rc = ct__error(CT_ENOMEM, "ct_comm_new: group id");
        goto err;
    }
    c->group_hash = ct__fnv1a64(c->group, strlen(c->group));
    c->abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->abort_fd < 0) {
        rc = ct__error(-errno, "ct_comm_new: eventfd: %s", strerror(errno));
        goto err;
    }
    int64_t deadline = ct__comm_deadline(c, 0);

    if (o->backend == CT_COMM_NCCL) {
        /* NCCL is part of ct's CUDA code: linked in, or loaded now by libct.so */
        const ct__cuda_lib *lib = ct__cuda_lib_get();
        if (!lib) {
            rc = ct__error(CT_ENOSYS, "ct_comm_new: backend nccl: %s", ct_last_error());
            goto err;
        }
        c->nops = lib->nccl;
        rc = c->nops->setup(c, o, deadline);
        if (rc < 0)
            goto err;
    } else {
        rc = exchange_nodes(c, o, deadline);
        if (rc == 0)
            rc = choose_layout(c, o->topology);
        if (rc < 0)
            goto err;
        if (c->local_size > 1) {
            rc = ct__shm_setup(c, o->rendezvous, deadline);
            if (rc < 0)
                goto err;
        }
        if (c->nnodes > 1 && c->local_rank == 0) {
            rc = ct__tcp_setup(c, o->rendezvous, o->host, deadline);
            if (rc < 0)
                goto err;
        }
    }
    CT_LOG(CT_LOG_DEBUG, "collective", "rank %d/%d: group %s up: %d node(s), %d local%s", c->rank,
           c->world, c->group, c->nnodes, c->local_size, c->hier ? ", hierarchical" : "");
    *out = c;
    return 0;
err:
    ct_comm_destroy(&c);
    return rc;
}

void ct_comm_destroy(ct_comm **pc)
{
    if (!pc || !*pc)
        return;
    ct_comm *c = *pc;
    ct__watch_stop(c); /* before the backend it may poll or abort goes */
    if (c->nccl)
        c->nops->destroy(c);
    ct__tcp_destroy(c);
    ct__shm_destroy(c);
    if (c->abort_fd >= 0)
        close(c->abort_fd);
    free(c->tmp);
    free(c->hbuf);
    free(c->by_pos);
    free(c->node_first);
    free(c->node_of);
    free(c->leader_of);
    free(c->local_ranks);
    free(c->group);
    pthread_mutex_destroy(&c->watch_mu);
    pthread_mutex_destroy(&c->async_mu);
    pthread_cond_destroy(&c->async_cv);
    free(c);
    *pc = NULL;
}

int ct_comm_rank(const ct_comm *c)
{
    return c ? c->rank : -1;
}

int ct_comm_world_size(const ct_comm *c)
{
    return c ? c->world : 0;
}

/* ---- collectives ----------------------------------------------------------------------- */

static int ring_allreduce(ct_comm *c, float *buf, size_t count, float div, int64_t dl)
{
    if (c->nnodes == 1)
        return ct__shm_allreduce(c, buf, count, div, 0, dl);
    if (c->hier)
        return ct__hier_allreduce(c, buf, count, div, dl);
    return ct__tcp_allreduce(c, buf, count, div, dl); /* one rank per node */
}

int ct_comm_allreduce(ct_comm *c, void *buf, size_t count, ct_dtype dt, ct_comm_op op,
                      int timeout_ms)
{
    if (!c || (!buf && count))
        return ct__error(CT_EINVAL, "ct_comm_allreduce: comm or buf is NULL");
    if (op != CT_COMM_SUM && op != CT_COMM_AVG)
        return ct__error(CT_EINVAL, "ct_comm_allreduce: op %d unknown", (int)op);
    if (dt != CT_F32 && dt != CT_F16 && dt != CT_BF16)
        return ct__error(CT_EINVAL, "ct_comm_allreduce: dtype %d unknown", (int)dt);
    int rc = check_usable(c);
    if (rc < 0)
        return rc;
    int64_t dl = ct__comm_deadline(c, timeout_ms);
    if (c->nops)
        return finish(c, c->nops->allreduce(c, buf, count, dt, op, dl));
    if (dt != CT_F32)
        return ct__error(CT_EINVAL, "ct_comm_allreduce: dtype %s needs the nccl backend",
                         dt == CT_F16 ? "f16" : "bf16");
    if (count == 0 || c->world == 1) {
        if (op == CT_COMM_AVG && c->world > 1)
            ct__divide(buf, count, (float)c->world);
        return 0;
    }
    float div = op == CT_COMM_AVG ? (float)c->world : 1.0f; /* AVG divides, as DDP does */
    return finish(c, ring_allreduce(c, buf, count, div, dl));
}

static int local_index(const ct_comm *c, int rank)
{
    for (int i = 0; i < c->local_size; i++)
        if (c->local_ranks[i] == rank)
            return i;
    return -1;
}

int ct_comm_broadcast(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root, int timeout_ms)
{
    if (!c || (!buf && count))
        return ct__error(CT_EINVAL, "ct_comm_broadcast: comm or buf is NULL");
    if (root < 0 || root >= c->world)
        return ct__error(CT_EINVAL, "ct_comm_broadcast: root %d not in [0, %d)", root, c->world);
    int rc = check_usable(c);
    if (rc < 0)
        return rc;
    int64_t dl = ct__comm_deadline(c, timeout_ms);
    if (c->nops)
        return finish(c, c->nops->broadcast(c, buf, count, dt, root, dl));
    size_t bytes = count * ct_dtype_size(dt);
    if (bytes == 0 || c->world == 1)
        return 0;
    int rn = c->node_of[root];
    int root_is_leader = c->leader_of[rn] == root;
    if (c->node == rn && c->local_size > 1 && !root_is_leader) {
        rc = ct__shm_broadcast(c, buf, bytes, local_index(c, root), dl);
        if (rc < 0)
            return finish(c, rc);
    }
    if (c->nnodes > 1 && c->local_rank == 0) {
        rc = ct__tcp_broadcast(c, buf, bytes, rn, dl);
        if (rc < 0)
            return finish(c, rc);
    }
    if (c->local_size > 1 && !(c->node == rn && !root_is_leader))
        rc = ct__shm_broadcast(c, buf, bytes, 0, dl);
    return finish(c, rc);
}

int ct_comm_allgather(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                      int timeout_ms)
{
    if (!c || ((!send || !recv) && count))
        return ct__error(CT_EINVAL, "ct_comm_allgather: comm, send or recv is NULL");
    int rc = check_usable(c);
    if (rc < 0)
        return rc;
    int64_t dl = ct__comm_deadline(c, timeout_ms);
    if (c->nops)
        return finish(c, c->nops->allgather(c, send, recv, count, dt, dl));
    size_t bytes = count * ct_dtype_size(dt);
    char *mine = (char *)recv + (size_t)c->rank * bytes;
    if (bytes == 0)
        return 0;
    if (c->local_size > 1) {
        rc = ct__shm_allgather(c, send, recv, bytes, dl);
        if (rc < 0)
            return finish(c, rc);
    } else if (send != mine) {
        memmove(mine, send, bytes);
    }
    if (c->nnodes > 1) {
        if (c->local_rank == 0) {
            rc = ct__tcp_allgather(c, recv, bytes, dl);
            if (rc < 0)
                return finish(c, rc);
        }
        if (c->local_size > 1)
            rc = ct__shm_broadcast(c, recv, bytes * (size_t)c->world, 0, dl);
    }
    return finish(c, rc);
}

/* ---- sharded collectives (ZeRO) ------------------------------------------------------- */

static int sharded_check(ct_comm *c, const void *buf, size_t count, const char *fn)
{
    if (!c || (!buf && count))
        return ct__error(CT_EINVAL, "%s: comm or buf is NULL", fn);
    if (c->nops)
        return ct__error(CT_ENOSYS, "%s: not implemented on the nccl backend", fn);
    return check_usable(c);
}

int ct_comm_reduce_scatter(ct_comm *c, float *buf, size_t count, ct_comm_op op, int timeout_ms)
{
    int rc = sharded_check(c, buf, count, "ct_comm_reduce_scatter");
    if (rc < 0)
        return rc;
    if (op != CT_COMM_SUM && op != CT_COMM_AVG)
        return ct__error(CT_EINVAL, "ct_comm_reduce_scatter: op %d unknown", (int)op);
    size_t lo, len;
    ct_comm_chunk(count, c->world, c->rank, &lo, &len);
    float div = op == CT_COMM_AVG ? (float)c->world : 1.0f;
    if (count == 0 || c->world == 1) {
        if (div != 1.0f)
            ct__divide(buf + lo, len, div);
        return 0;
    }
    int64_t dl = ct__comm_deadline(c, timeout_ms);
    if (c->nnodes == 1) /* one node */
        return finish(c, ct__shm_reduce_scatter(c, buf, count, div, lo, len, dl));
    if (c->nnodes == c->world) /* one rank per node, or flat */
        return finish(c, ct__tcp_reduce_scatter(c, buf, count, div, dl));
    return finish(c, ct__hier_reduce_scatter(c, buf, count, div, dl));
}

int ct_comm_allgatherv(ct_comm *c, void *buf, const size_t *counts, ct_dtype dt, int timeout_ms)
{
    if (c && !counts)
        return ct__error(CT_EINVAL, "ct_comm_allgatherv: counts is NULL");
    int rc = sharded_check(c, buf ? buf : (void *)counts, 0, "ct_comm_allgatherv");
    if (rc < 0)
        return rc;
    size_t es = ct_dtype_size(dt), total = 0;
    size_t *off = malloc(sizeof *off * 2 * (size_t)c->world);
    if (!off)
        return ct__error(CT_ENOMEM, "ct_comm_allgatherv: blocks");
    size_t *len = off + c->world;
    for (int r = 0; r < c->world; r++) {
        off[r] = total;
        len[r] = counts[r] * es;
        total += len[r];
    }
    if (total && !buf) {
        free(off);
        return ct__error(CT_EINVAL, "ct_comm_allgatherv: buf is NULL");
    }
    int64_t dl = ct__comm_deadline(c, timeout_ms);
    if (total && c->world > 1) {
        if (c->local_size > 1)
            rc = ct__shm_allgatherv(c, buf, off, len, dl);
        if (rc == 0 && c->nnodes > 1) {
            if (c->local_rank == 0)
                rc = ct__tcp_allgatherv(c, buf, off, len, dl);
            if (rc == 0 && c->local_size > 1)
                rc = ct__shm_broadcast(c, buf, total, 0, dl);
        }
    }
    free(off);
    return finish(c, rc);
}

int ct_comm_allgather_chunks(ct_comm *c, void *buf, size_t count, ct_dtype dt, int timeout_ms)
{
    int rc = sharded_check(c, buf, count, "ct_comm_allgather_chunks");
    if (rc < 0)
        return rc;
    size_t *counts = malloc(sizeof *counts * (size_t)c->world), off;
    if (!counts)
        return ct__error(CT_ENOMEM, "ct_comm_allgather_chunks: counts");
    for (int r = 0; r < c->world; r++)
        ct_comm_chunk(count, c->world, r, &off, &counts[r]);
    rc = ct_comm_allgatherv(c, buf, counts, dt, timeout_ms);
    free(counts);
    return rc;
}

int ct_comm_barrier(ct_comm *c, int timeout_ms)
{
    if (!c)
        return ct__error(CT_EINVAL, "ct_comm_barrier: comm is NULL");
    int rc = check_usable(c);
    if (rc < 0)
        return rc;
    int64_t dl = ct__comm_deadline(c, timeout_ms);
    if (c->nops)
        return finish(c, c->nops->barrier(c, dl));
    if (c->world == 1)
        return 0;
    if (c->nnodes == 1)
        return finish(c, ct__shm_barrier(c, dl));
    float one = 1.0f;
    return finish(c, ring_allreduce(c, &one, 1, 1.0f, dl));
}

int ct__comm_allreduce_many(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                            int timeout_ms)
{
    int rc = check_usable(c);
    if (rc < 0)
        return rc;
    if (c->nops)
        return finish(
            c, c->nops->allreduce_many(c, bufs, counts, n, ct__comm_deadline(c, timeout_ms)));
    return ct__error(CT_ENOSYS, "collective: grouped allreduce needs the nccl backend");
}

int ct__comm_allreduce_many_async(ct_comm *c, float *const *bufs, const size_t *counts, int n,
                                  int timeout_ms, const char *what)
{
    int rc = check_usable(c);
    if (rc < 0)
        return rc;
    if (c->nops)
        return finish(c, c->nops->allreduce_many_async(c, bufs, counts, n,
                                                       ct__comm_deadline(c, timeout_ms), what));
    return ct__error(CT_ENOSYS, "collective: grouped allreduce needs the nccl backend");
}

void *ct__comm_stream(ct_comm *c)
{
    if (c && c->nops && c->nccl)
        return c->nops->stream(c);
    return NULL;
}
