/* trainer/collective/hier.c — the hierarchical allreduce and reduce-scatter: shared memory inside
 * each node, a TCP ring among one leader per node, with the flat ring's bits.
 *
 * The flat ring (every rank a member, in node order: comm.c's by_pos, tcp.c) sums element e of
 * rank s's chunk (ct_comm_chunk) as a chain that starts at rank s and goes up the node order,
 * wrapping: ((x_s + x_next) + ...), then divides. In node order a node's ranks are in a row, so
 * the chain passes through them in a row, and a node leader that holds its ranks' buffers can
 * add them in the chain's order itself. Group g is the chunks of node g's ranks (pieces of the
 * buffer: apart when a node's ranks are not consecutive).
 *
 *   1. local rank 0 gathers its node's buffers over shared memory (x_0 .. x_L-1 of the node);
 *   2. each leader starts its own group: chunk of local rank i = x_i + ... + x_L-1;
 *   3. N-1 ring steps: a leader receives group g's partial from the previous leader and adds
 *      all its ranks in order (p + x_0) + x_1 ...; then sends it on (each step in 1 MiB parts,
 *      each added in as it arrives while the next one fills the socket buffers);
 *   4. one more step brings group g back to leader g, which adds the chain's head x_0 .. x_i-1
 *      for the chunks of its ranks i > 0 (chunk 0's chain was complete) and divides: leader g
 *      now holds its group's final values (the reduce-scatter stops here, and hands each rank
 *      its chunk over shared memory);
 *   5. the allreduce's ring allgather of the groups among the leaders (tcp.c), then a shared
 *      memory broadcast from each leader.
 *
 * Small messages ((world - 1) * bytes <= CT__TCP_SMALL_BYTES, as the flat ring decides): the
 * leaders gather every rank's buffer and sum them in node order, as the flat ring does.
 * The TCP traffic is the leader ring's: 2N - 1 steps of about L / world of the buffer each, against
 * the flat ring's 2W - 2 steps of 1 / world with W ranks on the network. Memory: a leader holds
 * L + 1 copies of the buffer (its ranks' and a receive stage), W copies for small messages. */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "common/common.h"
#include "internal.h"

#define PIECE_BYTES (1024 * 1024) /* a step's parts: added in while the next part arrives */

/* node g's ranks: by_pos[first .. first + n) */
static void node_ranks(const ct_comm *c, int g, int *first, int *n)
{
    *first = c->node_first[g];
    *n = c->node_first[g + 1] - *first;
}

/* group g (the chunks of node g's ranks, in node order) as pieces of buf; its element count */
static size_t group_iov(const ct_comm *c, float *buf, size_t count, int g, struct iovec *iov)
{
    int first, n;
    size_t off, len, total = 0;
    node_ranks(c, g, &first, &n);
    for (int i = 0; i < n; i++) {
        ct_comm_chunk(count, c->world, c->by_pos[first + i], &off, &len);
        iov[i] = (struct iovec){buf + off, len * sizeof(float)};
        total += len;
    }
    return total;
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

/* Small messages, at a leader: every rank's buffer, summed in node order into buf. */
static int leader_small(ct_comm *c, float *buf, size_t count, float div, int64_t dl)
{
    float *all = c->hbuf; /* [world][count] by rank; this node's ranks gathered already */
    const float *srcs[c->world];
    int rc = ct__tcp_allgather(c, all, count * sizeof(float), dl);
    if (rc < 0)
        return rc;
    for (int p = 0; p < c->world; p++)
        srcs[p] = all + (size_t)c->by_pos[p] * count;
    ct__reduce_sum(buf, srcs, c->world, count, div);
    return 0;
}

/* the elements [a, b) of v[0..n) read one after another, as at most n pieces in out */
static int window(const struct iovec *v, int n, size_t a, size_t b, struct iovec *out)
{
    int k = 0;
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        size_t l = v[i].iov_len / sizeof(float);
        size_t s = a > pos ? a : pos, e = b < pos + l ? b : pos + l;
        if (s < e)
            out[k++] = (struct iovec){(float *)v[i].iov_base + (s - pos), (e - s) * sizeof(float)};
        pos += l;
    }
    return k;
}

/* A leader's work for one step. */
struct pass {
    float *buf;
    size_t count;
    const float *xs;         /* the node's ranks' buffers */
    int nl;                  /* how many */
    float *stage;            /* room for the largest group */
    struct iovec *iov, *win; /* room for two groups' pieces, and for one */
    int pieces;              /* every leader cuts a group into this many parts */
};

/* One ring step: group sg's chunks go to the next leader while group rg's come from the
 * previous one, in P->pieces parts (both ends cut a group alike); each part received is added in
 * at once while the next fills the socket buffers. home (rg is this node's group, step 4): chunk
 * i gets the chain's head x_0 .. x_i-1 and is divided; else every rank of the node is added. */
static int step(ct_comm *c, const struct pass *P, int sg, int rg, int home, float div, int64_t dl)
{
    int first, sn, rn;
    node_ranks(c, sg, &first, &sn);
    node_ranks(c, rg, &first, &rn);
    struct iovec *sv = P->iov, *rv = P->iov + sn;
    size_t sl = group_iov(c, P->buf, P->count, sg, sv);
    size_t rl = group_iov(c, P->buf, P->count, rg, rv);
    for (int j = 0; j < P->pieces; j++) {
        size_t sa = sl * (size_t)j / (size_t)P->pieces,
               sb = sl * (size_t)(j + 1) / (size_t)P->pieces;
        size_t ra = rl * (size_t)j / (size_t)P->pieces,
               rb = rl * (size_t)(j + 1) / (size_t)P->pieces;
        int k = window(sv, sn, sa, sb, P->win);
        int rc = ct__tcp_step(c, P->win, k, P->stage + ra, (rb - ra) * sizeof(float), dl);
        if (rc < 0)
            return rc;
        size_t pos = 0; /* the stage holds group rg's chunks one after another */
        for (int i = 0; i < rn; i++) {
            size_t l = rv[i].iov_len / sizeof(float);
            size_t s = ra > pos ? ra : pos, e = rb < pos + l ? rb : pos + l;
            if (s < e) {
                float *d = (float *)rv[i].iov_base + (s - pos);
                fold(d, P->stage + s, P->xs, P->count, 0, home ? i : P->nl, (size_t)(d - P->buf),
                     e - s, home ? div : 1.0f);
            }
            pos += l;
        }
    }
    return 0;
}

/* Steps 2-4 at a leader: on return buf holds this node's group, final. */
static int leader_reduce(ct_comm *c, const struct pass *P, float div, int64_t dl)
{
    int n = c->nnodes, m = c->node, first, nl, rc;
    size_t off, len;
    node_ranks(c, m, &first, &nl);
    for (int i = 0; i < nl; i++) { /* step 2: chunk of local rank i starts with x_i */
        ct_comm_chunk(P->count, c->world, c->by_pos[first + i], &off, &len);
        fold(P->buf + off, NULL, P->xs, P->count, i, nl - i, off, len, 1.0f);
    }
    for (int t = 0; t < n - 1; t++) /* step 3 */
        if ((rc = step(c, P, (m - t + n) % n, (m - t - 1 + n) % n, 0, 1.0f, dl)) < 0)
            return rc;
    return step(c, P, (m + 1) % n, m, 1, div, dl); /* step 4: group m + 1 goes home, m comes */
}

/* Steps 1-4; on return a leader's buf holds its group (or, small, everything) final. */
static int reduce_to_leaders(ct_comm *c, float *buf, size_t count, float div, int *small,
                             int64_t dl)
{
    size_t bytes = count * sizeof(float), most = 0, len;
    int rc = 0, first, nl, wide = 0;
    struct iovec *iov = NULL;
    node_ranks(c, c->node, &first, &nl);
    *small = bytes * (size_t)(c->world - 1) <= CT__TCP_SMALL_BYTES;
    if (c->local_rank != 0) /* gives its buffer to the leader */
        return ct__shm_gather(c, buf, NULL, bytes, *small, dl);
    for (int g = 0; g < c->nnodes; g++) {
        int f, k;
        node_ranks(c, g, &f, &k);
        wide = k > wide ? k : wide;
        len = 0;
        for (int i = 0; i < k; i++) {
            size_t o, l;
            ct_comm_chunk(count, c->world, c->by_pos[f + i], &o, &l);
            len += l;
        }
        most = len > most ? len : most;
    }
    size_t need = *small ? count * (size_t)c->world : count * (size_t)nl + most;
    if ((rc = ensure_hbuf(c, need)) < 0)
        return rc;
    if (c->local_size > 1)
        rc = ct__shm_gather(c, buf, c->hbuf, bytes, *small, dl);
    else
        memcpy(c->hbuf + (*small ? (size_t)c->rank * count : 0), buf, bytes);
    if (rc < 0)
        return rc;
    if (*small)
        return leader_small(c, buf, count, div, dl);
    if (!(iov = malloc(sizeof *iov * 3 * (size_t)wide)))
        return ct__error(CT_ENOMEM, "collective: %d pieces", 3 * wide);
    struct pass P = {.buf = buf,
                     .count = count,
                     .xs = c->hbuf,
                     .nl = nl,
                     .stage = c->hbuf + (size_t)nl * count,
                     .iov = iov,
                     .win = iov + 2 * wide,
                     .pieces = (int)(most * sizeof(float) / PIECE_BYTES) + 1};
    rc = leader_reduce(c, &P, div, dl);
    free(iov);
    return rc;
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
    if (small) /* the leader has everything */
        return ct__shm_broadcast(c, buf, count * sizeof(float), 0, dl);
    for (int i = 0; i < c->local_size && rc == 0; i++) { /* each chunk of the node's group */
        size_t off, len;
        ct_comm_chunk(count, c->world, c->local_ranks[i], &off, &len);
        rc = ct__shm_broadcast(c, buf + off, len * sizeof(float), 0, dl);
    }
    return rc;
}
