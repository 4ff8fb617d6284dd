/* trainer/collective/hier.c — the hierarchical allreduce and reduce-scatter: shared memory inside
 * each node, a TCP ring among one leader per node, with the flat ring's bits.
 *
 * The flat ring (every rank a member, tcp.c) sums element e of chunk s (ct_comm_chunk over the
 * world) as a chain that starts at rank s and goes up the ranks, wrapping: ((x_s + x_s+1) + ...)
 * + x_s-1, then divides. Here each node's ranks are consecutive (comm.c picks this layout only
 * then), so that chain passes through the ranks of one node in a row, and a node leader that
 * holds its ranks' buffers can add them in the chain's order itself. Group g is the chunks of
 * node g's ranks, one range of the buffer.
 *
 *   1. local rank 0 gathers its node's buffers over shared memory (x_0 .. x_L-1 of the node);
 *   2. each leader starts its own group: chunk of local rank i = x_i + ... + x_L-1;
 *   3. N-1 ring steps: a leader receives group g's partial from the previous leader and adds
 *      all its ranks in order (p + x_0) + x_1 ...; then sends it on;
 *   4. one more step brings group g back to leader g, which adds the chain's head x_0 .. x_i-1
 *      for the chunks of its ranks i > 0 (chunk 0's chain was complete) and divides: leader g
 *      now holds its group's final values (the reduce-scatter stops here, and hands each rank
 *      its group over shared memory);
 *   5. the allreduce's ring allgather of the groups among the leaders (tcp.c), then a shared
 *      memory broadcast from each leader.
 *
 * Small messages ((world - 1) * bytes <= CT__TCP_SMALL_BYTES, as the flat ring decides): the
 * leaders gather every rank's buffer and sum ranks 0, 1, ... in order, as the flat ring does.
 * The TCP traffic is the leader ring's: 2N - 1 steps of about L / world of the buffer each, against
 * the flat ring's 2W - 2 steps of 1 / world with W ranks on the network. Memory: a leader holds
 * L + 1 copies of the buffer (its ranks' and a receive stage), W copies for small messages. */
#include <string.h>
#include <stdlib.h>

#include "common/common.h"
#include "internal.h"

/* the ranks of node g: [first, first + n) */
static void node_ranks(const ct_comm *c, int g, int *first, int *n)
{
    *first = c->leader_of[g];
    *n = (g + 1 < c->nnodes ? c->leader_of[g + 1] : c->world) - *first;
}

/* the elements of group g (the chunks of node g's ranks): [off, off + len) */
static void group_range(const ct_comm *c, size_t count, int g, size_t *off, size_t *len)
{
    int first, n;
    size_t lo, l, hi;
    node_ranks(c, g, &first, &n);
    ct_comm_chunk(count, c->world, first, off, &l);
    ct_comm_chunk(count, c->world, first + n - 1, &lo, &l);
    hi = lo + l;
    *len = hi - *off;
}

static int ensure_hbuf(ct_comm *c, size_t n)
{
    if (c->hbuf_cap >= n)
        return 0;
    float *t = realloc(c->hbuf, n * sizeof(float));
    if (!t)
        return ct__error(CT_ENOMEM, "collective: %zu-float buffer for the node's ranks", n);
    c->hbuf = t;
    c->hbuf_cap = n;
    return 0;
}

/* dst[0..n) = fold of nsrc sources, each src_base[k] + at (k = first .. first + nsrc - 1),
 * after head (NULL: none) */
static void fold(float *dst, const float *head, const float *xs, size_t count, int first, int nsrc,
                 size_t at, size_t n, float div)
{
    const float *srcs[nsrc + 1];
    int k = 0;
    if (head)
        srcs[k++] = head;
    for (int i = 0; i < nsrc; i++)
        srcs[k++] = xs + (size_t)(first + i) * count + at;
    ct__reduce_sum(dst, srcs, k, n, div);
}

/* Small messages, at a leader: every rank's buffer, summed in rank order into buf. */
static int leader_small(ct_comm *c, float *buf, size_t count, float div, int64_t dl)
{
    float *all = c->hbuf; /* [world][count]; this node's ranks gathered at their place */
    int rc = ct__tcp_allgather(c, all, count * sizeof(float), dl);
    if (rc < 0)
        return rc;
    fold(buf, NULL, all, count, 0, c->world, 0, count, div);
    return 0;
}

/* Steps 2-4 at a leader: on return buf holds this node's group, final. xs: the node's ranks'
 * buffers, stage: room for the largest group. */
static int leader_reduce(ct_comm *c, float *buf, size_t count, float div, const float *xs,
                         float *stage, int64_t dl)
{
    int n = c->nnodes, m = c->node, first, nl, rc;
    size_t so, sl, ro, rl;
    node_ranks(c, m, &first, &nl);
    for (int i = 0; i < nl; i++) { /* step 2: chunk of local rank i starts with x_i */
        ct_comm_chunk(count, c->world, first + i, &so, &sl);
        fold(buf + so, NULL, xs, count, i, nl - i, so, sl, 1.0f);
    }
    for (int t = 0; t < n - 1; t++) { /* step 3 */
        group_range(c, count, (m - t + n) % n, &so, &sl);
        group_range(c, count, (m - t - 1 + n) % n, &ro, &rl);
        rc = ct__tcp_step(c, buf + so, sl * sizeof(float), stage, rl * sizeof(float), dl);
        if (rc < 0)
            return rc;
        fold(buf + ro, stage, xs, count, 0, nl, ro, rl, 1.0f);
    }
    /* step 4: group m + 1 goes home, group m comes back */
    group_range(c, count, (m + 1) % n, &so, &sl);
    group_range(c, count, m, &ro, &rl);
    rc = ct__tcp_step(c, buf + so, sl * sizeof(float), stage, rl * sizeof(float), dl);
    if (rc < 0)
        return rc;
    for (int i = 0; i < nl; i++) {
        size_t co, cl;
        ct_comm_chunk(count, c->world, first + i, &co, &cl);
        fold(buf + co, stage + (co - ro), xs, count, 0, i, co, cl, div);
    }
    return 0;
}

/* Steps 1-4; on return a leader's buf holds its group (or, small, everything) final. */
static int reduce_to_leaders(ct_comm *c, float *buf, size_t count, float div, int *small,
                             int64_t dl)
{
    size_t bytes = count * sizeof(float), most = 0, off, len;
    int rc = 0, first, nl;
    node_ranks(c, c->node, &first, &nl);
    *small = bytes * (size_t)(c->world - 1) <= CT__TCP_SMALL_BYTES;
    for (int g = 0; g < c->nnodes; g++) {
        group_range(c, count, g, &off, &len);
        most = len > most ? len : most;
    }
    if (c->local_rank == 0) {
        size_t need = *small ? count * (size_t)c->world : count * (size_t)nl + most;
        if ((rc = ensure_hbuf(c, need)) < 0)
            return rc;
    }
    if (c->local_rank != 0) /* gives its buffer to the leader */
        return ct__shm_gather(c, buf, NULL, bytes, dl);
    float *xs = c->hbuf + (*small ? (size_t)first * count : 0);
    if (c->local_size > 1)
        rc = ct__shm_gather(c, buf, xs, bytes, dl);
    else
        memcpy(xs, buf, bytes);
    if (rc < 0)
        return rc;
    if (*small)
        return leader_small(c, buf, count, div, dl);
    return leader_reduce(c, buf, count, div, xs, c->hbuf + (size_t)nl * count, dl);
}

int ct__hier_allreduce(ct_comm *c, float *buf, size_t count, float div, int64_t dl)
{
    int small, rc = reduce_to_leaders(c, buf, count, div, &small, dl);
    if (rc < 0)
        return rc;
    if (c->local_rank == 0 && !small) { /* step 5: the groups go round the leaders */
        size_t *off = malloc(sizeof *off * 2 * (size_t)c->world);
        if (!off)
            return ct__error(CT_ENOMEM, "collective: chunk table");
        size_t *len = off + c->world;
        for (int r = 0; r < c->world; r++) {
            ct_comm_chunk(count, c->world, r, &off[r], &len[r]);
            off[r] *= sizeof(float);
            len[r] *= sizeof(float);
        }
        rc = ct__tcp_allgatherv(c, buf, off, len, dl);
        free(off);
        if (rc < 0)
            return rc;
    }
    if (c->local_size > 1)
        rc = ct__shm_broadcast(c, buf, count * sizeof(float), 0, dl);
    return rc;
}

int ct__hier_reduce_scatter(ct_comm *c, float *buf, size_t count, float div, int64_t dl)
{
    int small, rc = reduce_to_leaders(c, buf, count, div, &small, dl);
    if (rc < 0 || c->local_size == 1)
        return rc;
    size_t off = 0, len = count; /* small: the leader has everything; else its group */
    if (!small)
        group_range(c, count, c->node, &off, &len);
    return ct__shm_broadcast(c, buf + off, len * sizeof(float), 0, dl);
}
