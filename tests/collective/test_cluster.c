/* tests/collective/test_cluster.c — collectives between real actors of an embedded cluster,
 * meeting through the head's KV (ct_rendezvous_kv_new): the path the trainer's replicas take.
 * 3 replica actors join a group, allreduce and broadcast; then one is killed with SIGKILL in
 * the middle of a stream of 16 MiB allreduces and the survivors' calls must fail within 1 s of
 * the kill; then the survivors form a new group and allreduce again. Run once with every rank
 * on the node's shared memory ("shm") and once with every rank its own TCP endpoint ("tcp"). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct/collective.h"
#include "ct/ct.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
#define CHECK_RC(expr)                                                                             \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "%s:%d: %s = %d (%s): %s\n", __FILE__, __LINE__, #expr, rc_,           \
                    ct_strerror(rc_), ct_last_error());                                            \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* ---- the replica actor ---- */

typedef struct join_args {
    char group[64];
    int rank, world;
    int tcp; /* 1: every rank its own node id, so all links are TCP */
} join_args;

typedef struct replica {
    ct_rendezvous *rdv;
    ct_comm *comm;
    int rank, world;
} replica;

static int replica_new(const void *args, size_t len, void **state)
{
    replica *r = calloc(1, sizeof *r);
    if (!r)
        return CT_ENOMEM;
    r->rdv = ct_rendezvous_kv_new("test/");
    *state = r;
    return r->rdv ? 0 : CT_ENOMEM;
}

static void replica_free(void *state)
{
    replica *r = state;
    ct_comm_destroy(&r->comm);
    ct_rendezvous_kv_destroy(&r->rdv);
    free(r);
}

static int replica_join(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    const join_args *a = args;
    if (len != sizeof *a)
        return CT_EINVAL;
    ct_comm_destroy(&r->comm);
    r->rank = a->rank;
    r->world = a->world;
    return ct_comm_new(&(ct_comm_opts){.rendezvous = r->rdv,
                                       .group_id = a->group,
                                       .rank = a->rank,
                                       .world_size = a->world,
                                       .node_id = a->tcp ? ct_self_actor_id() : ct_self_node_id(),
                                       .timeout_ms = 20000},
                       &r->comm);
}

/* allreduce(SUM) of n floats with x[i] = (rank + 1) * (i % 13); result: the number of wrong
 * elements (0 when every element equals sum_r (r + 1) * (i % 13)) */
static int replica_allreduce(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    size_t n = *(const size_t *)args;
    float *x = malloc(n * sizeof *x);
    if (!x)
        return CT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((r->rank + 1) * (int)(i % 13));
    int rc = ct_comm_allreduce(r->comm, x, n, CT_F32, CT_COMM_SUM, 10000);
    long wrong = 0;
    float ranks_sum = (float)(r->world * (r->world + 1) / 2);
    for (size_t i = 0; rc == 0 && i < n; i++)
        wrong += x[i] != ranks_sum * (float)(i % 13);
    free(x);
    if (rc)
        return rc;
    *res = malloc(sizeof wrong);
    memcpy(*res, &wrong, sizeof wrong);
    *rlen = sizeof wrong;
    return 0;
}

/* broadcast from the rank given: result is the received value */
static int replica_broadcast(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    int root = *(const int *)args;
    float v = r->rank == root ? 42.5f + (float)root : -1.0f;
    int rc = ct_comm_broadcast(r->comm, &v, 1, CT_F32, root, 10000);
    if (rc)
        return rc;
    *res = malloc(sizeof v);
    memcpy(*res, &v, sizeof v);
    *rlen = sizeof v;
    return 0;
}

/* allreduces 16 MiB until a call fails; returns that error as the result (an int) */
static int replica_stream(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    size_t n = 4u << 20;
    float *x = calloc(n, sizeof *x);
    if (!x)
        return CT_ENOMEM;
    int rc = 0;
    for (int i = 0; i < 100000 && rc == 0; i++)
        rc = ct_comm_allreduce(r->comm, x, n, CT_F32, CT_COMM_SUM, 5000);
    free(x);
    *res = malloc(sizeof rc);
    memcpy(*res, &rc, sizeof rc);
    *rlen = sizeof rc;
    return 0;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* calls method on actors[0..n) at once with the same args; every call must succeed and its
 * result, if want_long >= 0, be a long equal to it */
static int call_all(ct_actor **actors, int n, const char *method, const void *args, size_t len,
                    void **results)
{
    ct_future *f[8] = {0};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = ct_actor_call_async(actors[i], method, len ? (const char *)args + i * len : NULL, len,
                                 &f[i]);
    for (int i = 0; i < n; i++) {
        size_t rlen = 0;
        int w = f[i] ? ct_future_wait(f[i], 30000, results ? &results[i] : NULL, &rlen) : rc;
        if (w && !rc) {
            fprintf(stderr, "%s on replica %d: %s: %s\n", method, i, ct_strerror(w),
                    ct_last_error());
            rc = w;
        }
        ct_future_destroy(&f[i]);
    }
    return rc;
}

static int join_group(ct_actor **actors, int n, const char *group, int tcp)
{
    join_args a[8];
    for (int i = 0; i < n; i++) {
        memset(&a[i], 0, sizeof a[i]);
        snprintf(a[i].group, sizeof a[i].group, "%s", group);
        a[i].rank = i;
        a[i].world = n;
        a[i].tcp = tcp;
    }
    return call_all(actors, n, "join", a, sizeof a[0], NULL);
}

static int check_allreduce(ct_actor **actors, int n, size_t count)
{
    size_t args[8];
    void *res[8] = {0};
    for (int i = 0; i < n; i++)
        args[i] = count;
    int rc = call_all(actors, n, "allreduce", args, sizeof args[0], res);
    for (int i = 0; i < n; i++) {
        if (rc == 0 && *(long *)res[i] != 0) {
            fprintf(stderr, "allreduce of %zu on replica %d: %ld wrong elements\n", count, i,
                    *(long *)res[i]);
            rc = 1;
        }
        free(res[i]);
    }
    return rc;
}

int main(int argc, char **argv)
{
    ct_actor_class_register("Replica",
                            &(ct_actor_class){.create = replica_new,
                                              .destroy = replica_free,
                                              .methods = {{"join", replica_join},
                                                          {"allreduce", replica_allreduce},
                                                          {"broadcast", replica_broadcast},
                                                          {"stream", replica_stream}}});
    int tcp = argc > 1 && !strcmp(argv[1], "tcp");
    const char *mode = tcp ? "tcp" : "shm";
    ct_actor *actors[3] = {0};
    ct_future *f[3] = {0};
    int status = 1;
    CHECK_RC(ct_init(&(ct_init_opts){.cpus = 4}));
    CHECK_RC(ct_actor_create_many("Replica", &(ct_resources){.cpu = 1}, NULL, 0, 3, actors));

    /* a group of 3: allreduce of several lengths, broadcast from each root */
    char group[64];
    snprintf(group, sizeof group, "%s-try0", mode);
    CHECK_RC(join_group(actors, 3, group, tcp));
    size_t counts[] = {1, 7, 1000, 1000000};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        CHECK_RC(check_allreduce(actors, 3, counts[k]));
    for (int root = 0; root < 3; root++) {
        int roots[3] = {root, root, root};
        void *res[3] = {0};
        int rc = call_all(actors, 3, "broadcast", roots, sizeof roots[0], res);
        for (int i = 0; i < 3; i++) {
            if (rc == 0 && *(float *)res[i] != 42.5f + (float)root) {
                fprintf(stderr, "broadcast from %d: replica %d got %g\n", root, i,
                        *(float *)res[i]);
                rc = 1;
            }
            free(res[i]);
        }
        CHECK_RC(rc);
    }
    printf("%s: 3 replicas joined through the head's KV; allreduce and broadcast correct\n", mode);

    /* kill replica 2 while all three stream 16 MiB allreduces: the survivors fail fast */
    for (int i = 0; i < 3; i++)
        CHECK_RC(ct_actor_call_async(actors[i], "stream", NULL, 0, &f[i]));
    usleep(300 * 1000);
    long long t_kill = now_ms();
    CHECK(kill(ct_actor_pid(actors[2]), SIGKILL) == 0);
    for (int i = 0; i < 2; i++) {
        void *res = NULL;
        size_t rlen = 0;
        CHECK_RC(ct_future_wait(f[i], 5000, &res, &rlen));
        long long took = now_ms() - t_kill;
        int err = *(int *)res;
        free(res);
        printf("%s: survivor %d: allreduce failed with '%s' %lld ms after the kill\n", mode, i,
               ct_strerror(err), took);
        CHECK(err != 0);
        CHECK(took < 1000);
    }
    CHECK(ct_future_wait(f[2], 5000, NULL, NULL) == CT_EDEAD);

    /* the survivors form a new group and go on */
    snprintf(group, sizeof group, "%s-try1", mode);
    CHECK_RC(join_group(actors, 2, group, tcp));
    CHECK_RC(check_allreduce(actors, 2, 1000000));
    printf("%s: 2 survivors regrouped; allreduce correct\n", mode);
    status = 0;
fail:
    for (int i = 0; i < 3; i++) {
        ct_future_destroy(&f[i]);
        ct_actor_release(&actors[i]);
    }
    ct_shutdown();
    printf("%s\n", status ? "FAILED" : "passed");
    return status;
}
