/* bench/objectstore/bench_objectstore_rt.c — the object store through the runtime API (ct.h) on
 * a ctup-less cluster this program starts itself: ct-head and two ct-node processes on loopback
 * (from the directory of this binary). Measures, per object size: local ct_put (copy into the
 * driver's node shard + directory registration), local ct_get (pin + read every byte +
 * release), and node-to-node ct_get: an actor on the second node gets an object the driver put
 * on the first (directory lookup, pull into its shard, pin), timed inside the actor; and a
 * memcpy of the same size right after each put, so the put can be compared with memcpy
 * measured under the same load.
 *
 * Two node-to-node rows per size, because they can differ by 2x: "cold" gets pull into a
 * range of the destination's arena that it never used before (the objects are kept until the
 * cold round ends, so each lands in a new range), measured first. Fresh shared-memory pages
 * must be allocated and zeroed by the kernel (~1.5 GB/s here); ct-node keeps up to 256 MiB of
 * them populated ahead of use by a background thread (CT_STORE_POPULATE_AHEAD_MB=0 turns that
 * off, to see the raw first-touch cost), so the cold row shows what a burst of new objects
 * gets. Then the "warm" steady state (rt_remote_get_<n>MiB, labelled warm): each object is
 * freed after its get, so the next pull reuses pages the destination already has, as in a
 * node that keeps receiving objects.
 *
 * With BENCH_NODE_CPUSETS="0:1" each node runs on its own CPU (ct-node --cpuset), like two
 * machines; by default the two nodes, the driver and the actor share every CPU, and on 2 vCPUs
 * the scheduler then often puts a transfer's sender and receiver on one CPU (half the speed).
 *
 * Usage: bench_objectstore_rt [sizes in MiB, default "1 64"]. Medians; one "key=value" line per
 * figure. Not a test: no assertions beyond failing on errors. Kills what it starts. */
#define _GNU_SOURCE
#include "bench/bench_cluster.h"

#define MB (1ull << 20)

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t read_all(const void *p, uint64_t n)
{
    const uint64_t *q = p;
    uint64_t s0 = 0, s1 = 0;
    for (uint64_t i = 0; i + 2 <= n / 8; i += 2) {
        s0 += q[i];
        s1 += q[i + 1];
    }
    return s0 ^ s1;
}

static volatile uint64_t sink;

/* Actor method: ct_get of the id in args, timed; returns the ns as int64. */
static int fetch(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state;
    ct_object_id id;
    if (ct_object_id_from_args(args, len, 0, &id))
        return CT_EINVAL;
    int64_t t0 = ct__now_ns();
    ct_object_view v;
    int rc = ct_get(&id, 30000, &v);
    int64_t dt = ct__now_ns() - t0;
    if (rc)
        return rc;
    ct_object_release(&v);
    int64_t *r = malloc(sizeof *r);
    if (!r)
        return CT_ENOMEM;
    *r = dt;
    *res = r;
    *rlen = sizeof *r;
    return 0;
}

int main(int argc, char **argv)
{
    ct_actor_class cls = {.methods = {{"fetch", fetch}}};
    ct_actor_class_register("Fetcher", &cls);
    ct_serve_if_worker();
    uint64_t sizes[8] = {1 * MB, 64 * MB};
    int nsizes = 2;
    if (argc > 1) {
        nsizes = 0;
        for (int i = 1; i < argc && nsizes < 8; i++)
            sizes[nsizes++] = strtoull(argv[i], NULL, 10) * MB;
    }
    char addr[128];
    if (bc_start_head("bench_objectstore_rt", addr, sizeof addr) < 0)
        return 1;
    const char *tags[2] = {"first=1", "second=1"};
    for (int i = 0; i < 2; i++) {
        /* BENCH_NODE_CPUSETS="0:1": node i runs on the i-th CPU list (ct-node --cpuset), as
         * two machines would each have their own CPUs; unset: both share every CPU. */
        char sets[64] = "", *set = NULL;
        const char *env = getenv("BENCH_NODE_CPUSETS");
        if (env) {
            snprintf(sets, sizeof sets, "%s", env);
            set = strtok(sets, ":");
            for (int k = 0; k < i && set; k++)
                set = strtok(NULL, ":");
        }
        char *nargs[] = {"--resources", (char *)tags[i], set ? "--cpuset" : NULL, set, NULL};
        if (bc_start_node("bench_objectstore_rt", addr, nargs, 5000) < 0)
            return 1;
    }
    /* The driver's puts go to the first shard the head lists, which need not be the node
     * started first: bind it with a tiny put, then place the fetcher on the other node. */
    ct_object_id probe;
    if (ct_put("x", 1, NULL, &probe))
        return fprintf(stderr, "ct_put: %s\n", ct_last_error()), 1;
    ct_free(&probe);
    ct_actor *a = NULL;
    for (int i = 1; i >= 0 && !a; i--) {
        ct_resources r = {.bundle = -1, .custom = {{i ? "second" : "first", 1}}};
        if (ct_actor_create("Fetcher", &r, NULL, 0, &a))
            return fprintf(stderr, "actor: %s\n", ct_last_error()), 1;
        if (!strcmp(ct_actor_node(a), ct_object_node())) {
            ct_actor_kill(a);
            ct_actor_release(&a);
        }
    }
    if (!a)
        return fprintf(stderr, "no node other than the driver's shard\n"), 1;
    uint64_t maxsz = 0;
    for (int i = 0; i < nsizes; i++)
        maxsz = sizes[i] > maxsz ? sizes[i] : maxsz;
    unsigned char *src = malloc(maxsz), *dst = malloc(maxsz);
    if (!src || !dst)
        return fprintf(stderr, "out of memory\n"), 1;
    for (uint64_t i = 0; i < maxsz; i++)
        src[i] = (unsigned char)(i * 131 + (i >> 12));
    memset(dst, 1, maxsz);
    double t[64], tg[64], tp[64], tm[64], tc[64];
    for (int s = 0; s < nsizes; s++) {
        uint64_t sz = sizes[s];
        int reps = sz >= 64 * MB ? 10 : 40;
        /* Cold round: every get pulls into a never-used range of the destination (objects
         * kept until the round ends). The first get is not counted (actor warm-up). */
        int creps = sz >= 64 * MB ? 4 : 8;
        ct_object_id cold[16];
        for (int rep = 0; rep <= creps; rep++) {
            if (ct_put(src, sz, NULL, &cold[rep]))
                return fprintf(stderr, "ct_put: %s\n", ct_last_error()), 1;
            int64_t *ns = NULL;
            size_t len = 0;
            if (ct_actor_call(a, "fetch", &cold[rep], sizeof cold[rep], (void **)&ns, &len,
                              60000) ||
                len != sizeof *ns)
                return fprintf(stderr, "fetch: %s\n", ct_last_error()), 1;
            if (rep)
                tc[rep - 1] = sz / (*ns / 1e9) / 1e9;
            free(ns);
        }
        for (int rep = 0; rep <= creps; rep++)
            ct_free(&cold[rep]);
        for (int rep = 0; rep <= reps; rep++) {
            ct_object_id id;
            int64_t t0 = ct__now_ns();
            if (ct_put(src, sz, NULL, &id))
                return fprintf(stderr, "ct_put: %s\n", ct_last_error()), 1;
            int64_t t1 = ct__now_ns();
            ct_object_view v;
            if (ct_get(&id, 0, &v))
                return fprintf(stderr, "ct_get: %s\n", ct_last_error()), 1;
            sink += read_all(v.data, v.size);
            ct_object_release(&v);
            int64_t t2 = ct__now_ns();
            /* memcpy of the same size right after, in this process: the put's physical limit
             * under the same machine load (the machine is shared, its speed drifts). */
            memcpy(dst, src, sz);
            int64_t t3 = ct__now_ns();
            sink += dst[sz / 2];
            int64_t *ns = NULL;
            size_t len = 0;
            if (ct_actor_call(a, "fetch", &id, sizeof id, (void **)&ns, &len, 60000) ||
                len != sizeof *ns)
                return fprintf(stderr, "fetch: %s\n", ct_last_error()), 1;
            if (rep) {
                t[rep - 1] = sz / ((t1 - t0) / 1e9) / 1e9;
                tg[rep - 1] = sz / ((t2 - t1) / 1e9) / 1e9;
                tp[rep - 1] = sz / (*ns / 1e9) / 1e9;
                tm[rep - 1] = sz / ((t3 - t2) / 1e9) / 1e9;
            }
            free(ns);
            ct_free(&id);
        }
        printf("rt_put_%lluMiB=%.2f GB/s\n", (unsigned long long)(sz / MB), median(t, reps));
        printf("rt_get_read_%lluMiB=%.2f GB/s\n", (unsigned long long)(sz / MB), median(tg, reps));
        printf("rt_remote_get_cold_%lluMiB=%.2f GB/s (cold: never-used destination range)\n",
               (unsigned long long)(sz / MB), median(tc, creps));
        printf("rt_remote_get_%lluMiB=%.2f GB/s (warm: destination pages reused)\n",
               (unsigned long long)(sz / MB), median(tp, reps));
        printf("rt_memcpy_%lluMiB=%.2f GB/s\n", (unsigned long long)(sz / MB), median(tm, reps));
        fflush(stdout);
    }
    free(src);
    free(dst);
    ct_actor_release(&a);
    ct_shutdown();
    bc_kill_all();
    return 0;
}
