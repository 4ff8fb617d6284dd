/* tests/collective/test_hier.c — the hierarchical allreduce across 4 network namespaces x 2 ranks
 * (a bridge joins one veth per namespace, each namespace its own address: the ranks of a
 * "host" share memory, the hosts only TCP). Each rank opens two communicators, hierarchical and
 * flat (opts.topology), and for lengths 1, 7, 2339 (the small-message path), 2341, 100003 and
 * 3000017 (odd, the large path) checks, with values of mixed magnitudes so that the summation
 * order shows in the bits:
 *   - SUM and AVG allreduce: hierarchical == flat, bit for bit, and both == this test's own model
 *     of the flat ring's order (a chain from the chunk's owner rank up the ranks in node order),
 *     which differs from a plain sum in rank order on some element of the large lengths (so the
 *     check can fail);
 *   - reduce-scatter on both: this rank's chunk has the allreduce's bits;
 *   - broadcast from a rank that is not a leader, and allgather, on the hierarchical one.
 * Twice: host = rank / 2 (each host's ranks consecutive), and host = rank % 4 (spread: node order
 * 0 4 1 5 2 6 3 7, a node's chunks apart in the buffer).
 * Needs root (network namespaces, ip(8)): exits 77 saying why otherwise. Every process started
 * (namespace holders, ranks) is killed by pid at the end, also on failure. */
#define _GNU_SOURCE /* setns, unshare (netns_hosts.h) */
#include <stdint.h>

#include "harness.h"
#include "netns_hosts.h"
#include "trainer/collective/internal.h" /* ct_comm's hier flag: the layout the test expects */

#define HOSTS NETNS_HOSTS
#define PER_HOST 2
#define WORLD (HOSTS * PER_HOST)

/* How long each layout's run may take, its 8 ranks' processes included. `make tsan`'s
 * instrumented ranks are several times slower: there the 3000017 length alone outlasted 55 s on
 * a loaded machine. */
#if defined(__SANITIZE_THREAD__)
#define RUN_MS 170000
#else
#define RUN_MS 55000
#endif

static int spread; /* 0: host = rank / PER_HOST; 1: host = rank % HOSTS */

static int host_of(int rank)
{
    return spread ? rank % HOSTS : rank / PER_HOST;
}

/* the rank at place p of the node order (nodes by lowest rank, ranks ascending in a node) */
static int by_pos(int p)
{
    return spread ? (p % PER_HOST) * HOSTS + p / PER_HOST : p;
}

/* value of rank r at element i: magnitudes from 1e-3 to 1e3, so that sums round */
static float value(int r, size_t i)
{
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    static const float scale[4] = {1e-3f, 1.0f, 1e3f, 0.37f};
    return ((float)(h & 0xffffff) / 16777216.0f - 0.5f) * scale[(r + (int)(i % 3)) % 4];
}

/* The flat ring's sum of element i (tcp.c): large messages chain from the owner of i's chunk
 * up the ranks, wrapping; small ones add ranks 0, 1, ... Then / div. */
/* the chain from place start (the flat ring's sum of an element of by_pos(start)'s chunk) */
static float chain(int start, size_t i, float div)
{
    float s = value(by_pos(start), i);
    for (int k = 1; k < WORLD; k++)
        s = s + value(by_pos((start + k) % WORLD), i);
    return s / div;
}

/* want[i] for every element: the flat ring's sum (tcp.c): large messages chain from the rank
 * whose chunk holds i up the node order, wrapping; small ones add all ranks in node order */
static void model(size_t count, float div, float *want)
{
    if (count * sizeof(float) * (WORLD - 1) <= 64 * 1024) {
        for (size_t i = 0; i < count; i++)
            want[i] = chain(0, i, div);
        return;
    }
    for (int p = 0; p < WORLD; p++) {
        size_t off, len;
        ct_comm_chunk(count, WORLD, by_pos(p), &off, &len);
        for (size_t i = off; i < off + len; i++)
            want[i] = chain(p, i, div);
    }
}

static float rank_order(size_t i)
{
    float s = value(0, i);
    for (int r = 1; r < WORLD; r++)
        s += value(r, i);
    return s;
}

static int check_len(ct_comm *h, ct_comm *f, int rank, size_t len)
{
    float *a = malloc(len * sizeof(float)), *b = malloc(len * sizeof(float));
    float *want = malloc(len * sizeof(float));
    CHECK(a && b && want);
    for (int op = 0; op < 2; op++) {
        float div = op ? (float)WORLD : 1.0f;
        for (size_t i = 0; i < len; i++)
            a[i] = b[i] = value(rank, i);
        CHECK_RC(ct_comm_allreduce(h, a, len, CT_F32, op ? CT_COMM_AVG : CT_COMM_SUM, 0));
        CHECK_RC(ct_comm_allreduce(f, b, len, CT_F32, op ? CT_COMM_AVG : CT_COMM_SUM, 0));
        size_t order_differs = 0;
        model(len, div, want);
        for (size_t i = 0; i < len; i++) {
            float m = want[i];
            if (memcmp(&a[i], &b[i], sizeof(float)) || memcmp(&a[i], &m, sizeof(float))) {
                uint32_t ba, bb, bm;
                memcpy(&ba, &a[i], 4);
                memcpy(&bb, &b[i], 4);
                memcpy(&bm, &m, 4);
                fprintf(stderr,
                        "len %zu %s rank %d [%zu]: hierarchical %.9g flat %.9g model %.9g "
                        "(bits %08x %08x %08x)\n",
                        len, op ? "avg" : "sum", rank, i, a[i], b[i], m, ba, bb, bm);
                return 1;
            }
            float p = rank_order(i) / div;
            order_differs += memcmp(&p, &m, sizeof(float)) != 0;
        }
        if (len >= 100000 && order_differs == 0) {
            fprintf(stderr, "len %zu: the chain order never differs from rank order\n", len);
            return 1;
        }
        /* reduce-scatter: this rank's chunk has the allreduce's bits, on both layouts */
        size_t lo, n;
        ct_comm_chunk(len, WORLD, rank, &lo, &n);
        for (int k = 0; k < 2; k++) {
            for (size_t i = 0; i < len; i++)
                b[i] = value(rank, i);
            CHECK_RC(ct_comm_reduce_scatter(k ? f : h, b, len, op ? CT_COMM_AVG : CT_COMM_SUM, 0));
            for (size_t i = lo; i < lo + n; i++)
                if (memcmp(&a[i], &b[i], sizeof(float))) {
                    fprintf(stderr,
                            "len %zu %s rank %d: %s reduce_scatter[%zu] = %.9g, want %.9g\n", len,
                            op ? "avg" : "sum", rank, k ? "flat" : "hierarchical", i, b[i], a[i]);
                    return 1;
                }
        }
    }
    /* broadcast from rank 3 (host 1's second rank) and allgather, hierarchical */
    for (size_t i = 0; i < len; i++)
        a[i] = rank == 3 ? (float)(i % 1000) : -1.0f;
    CHECK_RC(ct_comm_broadcast(h, a, len, CT_F32, 3, 0));
    for (size_t i = 0; i < len; i++)
        CHECK(a[i] == (float)(i % 1000));
    if (len <= 100003) {
        float *all = malloc(len * WORLD * sizeof(float));
        CHECK(all);
        for (size_t i = 0; i < len; i++)
            a[i] = (float)(rank * 7 + (int)(i % 5));
        CHECK_RC(ct_comm_allgather(h, a, all, len, CT_F32, 0));
        for (int r = 0; r < WORLD; r++)
            for (size_t i = 0; i < len; i++)
                CHECK(all[(size_t)r * len + i] == (float)(r * 7 + (int)(i % 5)));
        free(all);
    }
    free(a);
    free(want);
    free(b);
    return 0;
}

static int rank_main(int rank, int world, void *arg)
{
    (void)arg;
    int host = host_of(rank);
    char node[16], addr[32];
    snprintf(node, sizeof node, "host%d", host);
    snprintf(addr, sizeof addr, "10.79.0.%d", host + 1);
    if (netns_join_host(host))
        return 1;
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    CHECK(rdv);
    ct_comm *h = NULL, *f = NULL;
    ct_comm_opts o = {.rendezvous = rdv,
                      .group_id = spread ? "hier-spread" : "hier",
                      .rank = rank,
                      .world_size = world,
                      .node_id = node,
                      .host = addr,
                      .timeout_ms = 40000,
                      .topology = CT_COMM_TOPO_AUTO};
    CHECK_RC(ct_comm_new(&o, &h));
    CHECK(h->hier && h->nnodes == HOSTS && h->local_size == PER_HOST);
    o.group_id = spread ? "flat-spread" : "flat";
    o.topology = CT_COMM_TOPO_FLAT;
    CHECK_RC(ct_comm_new(&o, &f));
    CHECK(!f->hier && f->nnodes == WORLD && f->local_size == 1);
    /* 3000017: a leader's ring step goes in 1 MiB parts (hier.c), cut inside chunks */
    size_t lens[] = {1, 7, 2339, 2341, 100003, 3000017};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        if (check_len(h, f, rank, lens[k]))
            return 1;
        if (rank == 0)
            fprintf(stderr, "%s len %zu: hierarchical == flat == model\n",
                    spread ? "spread" : "blocks", lens[k]);
    }
    ct_comm_destroy(&h);
    ct_comm_destroy(&f);
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: needs root (network namespaces for 4 simulated hosts)\n");
        return 77;
    }
    if (system("command -v ip >/dev/null 2>&1") != 0) {
        fprintf(stderr, "SKIP: no ip(8) to make the hosts' network namespaces\n");
        return 77;
    }
    /* the bridge and the veths live in a namespace of this test's own: gone when it exits */
    if (unshare(CLONE_NEWNET)) {
        fprintf(stderr, "SKIP: unshare(CLONE_NEWNET): %s\n", strerror(errno));
        return 77;
    }
    int bad = 0;
    if (netns_make_hosts() < 0) {
        fprintf(stderr, "SKIP: could not make 4 namespaces joined by a bridge (ip link)\n");
        bad = 77;
    } else if (t_rdv_init() < 0) {
        bad = 1;
    } else {
        for (spread = 0; spread < 2 && !bad; spread++) {
            long long t0 = t_now_ms();
            const char *label = spread ? "hier 4x2 spread" : "hier 4x2 blocks";
            bad = t_run(WORLD, rank_main, NULL, RUN_MS, label);
            fprintf(stderr, "%s: %s in %lld ms\n", label, bad ? "FAILED" : "ok", t_now_ms() - t0);
        }
        t_rdv_cleanup();
    }
    t_kill_all(HOSTS, netns_holders);
    return bad;
}
