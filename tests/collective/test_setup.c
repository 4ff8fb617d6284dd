/* tests/collective/test_setup.c — everything around a communicator's data path: the file
 * rendezvous (put/get, keys with '/', waiting, timeout), argument checks (CT_EINVAL naming the
 * field), a rank that never shows up (CT_ETIMEDOUT at the setup timeout), junk connections on
 * a leader's port during setup (refused; the group still forms), world size 1, and abort before
 * any call. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "harness.h"

static int test_rendezvous(void)
{
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    CHECK(rdv);
    CHECK_RC(rdv->put(rdv->ctx, "g/a/b", "hello", 5));
    void *v = NULL;
    size_t len = 0;
    CHECK_RC(rdv->get(rdv->ctx, "g/a/b", &v, &len, 10));
    CHECK(len == 5 && memcmp(v, "hello", 5) == 0);
    free(v);
    long long t0 = t_now_ms();
    int rc = rdv->get(rdv->ctx, "g/missing", &v, &len, 200);
    long long dt = t_now_ms() - t0;
    if (rc != CT_ETIMEDOUT || dt < 190 || dt > 1500) {
        fprintf(stderr, "get of a missing key: rc %d after %lld ms, want CT_ETIMEDOUT at 200\n", rc,
                dt);
        return 1;
    }
    CHECK(strstr(ct_last_error(), "g/missing") != NULL);
    CHECK(rdv->put(rdv->ctx, "", "x", 1) == CT_EINVAL);
    CHECK(ct_rendezvous_file_new("") == NULL);
    ct_rendezvous_file_destroy(&rdv);
    CHECK(rdv == NULL);
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

static int test_args(void)
{
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    ct_comm *c = (ct_comm *)1;
    CHECK(ct_comm_new(&(ct_comm_opts){.group_id = "x", .world_size = 1}, &c) == CT_EINVAL);
    CHECK(c == NULL && strstr(ct_last_error(), "rendezvous"));
    CHECK(ct_comm_new(&(ct_comm_opts){.rendezvous = rdv, .world_size = 1}, &c) == CT_EINVAL);
    CHECK(strstr(ct_last_error(), "group_id"));
    CHECK(
        ct_comm_new(&(ct_comm_opts){.rendezvous = rdv, .group_id = "x", .rank = 2, .world_size = 2},
                    &c) == CT_EINVAL);
    CHECK(strstr(ct_last_error(), "rank"));
    CHECK(ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                      .group_id = "x",
                                      .world_size = 1,
                                      .backend = (ct_comm_backend)7},
                      &c) == CT_EINVAL);
    CHECK(strstr(ct_last_error(), "backend"));
    CHECK(ct_comm_new(NULL, &c) == CT_EINVAL);
    /* world size 1: every call is a local no-op that succeeds */
    CHECK_RC(
        ct_comm_new(&(ct_comm_opts){.rendezvous = rdv, .group_id = "solo", .world_size = 1}, &c));
    float v[3] = {1, 2, 3}, all[3];
    CHECK_RC(ct_comm_allreduce(c, v, 3, CT_F32, CT_COMM_AVG, 0));
    CHECK(v[0] == 1 && v[2] == 3);
    CHECK_RC(ct_comm_broadcast(c, v, 3, CT_F32, 0, 0));
    CHECK_RC(ct_comm_allgather(c, v, all, 3, CT_F32, 0));
    CHECK(memcmp(v, all, sizeof v) == 0);
    CHECK_RC(ct_comm_barrier(c, 0));
    CHECK(ct_comm_broadcast(c, v, 3, CT_F32, 1, 0) == CT_EINVAL);
    CHECK(ct_comm_allreduce(c, NULL, 3, CT_F32, CT_COMM_SUM, 0) == CT_EINVAL);
    CHECK(ct_comm_allreduce(c, v, 3, CT_F32, (ct_comm_op)9, 0) == CT_EINVAL);
    /* abort before any call: every later call is canceled */
    ct_comm_abort(c);
    CHECK(ct_comm_status(c) == CT_ECANCELED);
    CHECK(ct_comm_allreduce(c, v, 3, CT_F32, CT_COMM_SUM, 0) == CT_ECANCELED);
    CHECK(ct_comm_barrier(c, 0) == CT_ECANCELED);
    ct_comm_abort(c); /* twice is fine */
    ct_comm_destroy(&c);
    CHECK(c == NULL);
    ct_comm_destroy(&c);
    ct_comm_abort(NULL);
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

/* rank 0 of 2 alone: rank 1 never comes */
static int lonely_rank(int rank, int world, void *arg)
{
    (void)arg;
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    ct_comm *c = NULL;
    long long t0 = t_now_ms();
    int rc = ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                         .group_id = "lonely",
                                         .rank = rank,
                                         .world_size = 2,
                                         .timeout_ms = 300},
                         &c);
    long long dt = t_now_ms() - t0;
    if (rc != CT_ETIMEDOUT || c || dt > 2000) {
        fprintf(stderr, "lonely rank: rc %d (%s) after %lld ms, want CT_ETIMEDOUT at ~300\n", rc,
                ct_last_error(), dt);
        return 1;
    }
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

static int junk_rank(int rank, int world, void *arg)
{
    (void)arg;
    if (rank == 0) /* connects late: the junk reaches rank 1's port first */
        setenv("CT_TEST_FAULTS", "coll_connect_delay_ms=500", 1);
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    char node[8];
    snprintf(node, sizeof node, "n%d", rank);
    ct_comm *c = NULL;
    CHECK_RC(ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                         .group_id = "junk",
                                         .rank = rank,
                                         .world_size = world,
                                         .node_id = node,
                                         .host = "127.0.0.1",
                                         .timeout_ms = 10000},
                         &c));
    float v[100];
    for (int i = 0; i < 100; i++)
        v[i] = (float)(i * (rank + 1));
    CHECK_RC(ct_comm_allreduce(c, v, 100, CT_F32, CT_COMM_SUM, 0));
    for (int i = 0; i < 100; i++)
        CHECK(v[i] == (float)(3 * i));
    ct_comm_destroy(&c);
    ct_rendezvous_file_destroy(&rdv);
    return 0;
}

static int send_junk(const char *hostport, const void *junk, size_t n)
{
    int port = atoi(strrchr(hostport, ':') + 1);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        perror("junk connect");
        if (fd >= 0)
            close(fd);
        return 1;
    }
    if (n && send(fd, junk, n, MSG_NOSIGNAL) != (ssize_t)n)
        perror("junk send");
    close(fd);
    return 0;
}

static int test_junk(void)
{
    pid_t pids[2] = {0};
    if (t_spawn(2, junk_rank, NULL, pids) < 0)
        return 1;
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    void *v = NULL;
    size_t len = 0;
    int bad = 0;
    if (rdv->get(rdv->ctx, "junk/tcp/1", &v, &len, 5000) == 0) {
        char addr[128];
        snprintf(addr, sizeof addr, "%.*s", (int)len, (char *)v);
        free(v);
        unsigned char bytes[64];
        for (int i = 0; i < 64; i++)
            bytes[i] = (unsigned char)(i * 37 + 11);
        bad |= send_junk(addr, bytes, sizeof bytes); /* wrong magic */
        bad |= send_junk(addr, bytes, 5);            /* short hello, then EOF */
        bad |= send_junk(addr, NULL, 0);             /* connect and close */
    } else {
        fprintf(stderr, "junk: rank 1 never published its address\n");
        bad = 1;
    }
    ct_rendezvous_file_destroy(&rdv);
    bad |= t_wait_all(2, pids, 20000, "junk");
    return bad;
}

int main(void)
{
#ifndef CT_FAULTS
    return 77; /* it arms test faults (common/fault.h): a build with CT_FAULTS runs it */
#endif
    if (t_rdv_init() < 0)
        return 1;
    int bad = test_rendezvous();
    if (!bad)
        bad = test_args();
    if (!bad)
        bad = t_run(1, lonely_rank, NULL, 10000, "lonely");
    if (!bad)
        bad = test_junk();
    t_rdv_cleanup();
    fprintf(stderr, "setup: %s\n", bad ? "FAILED" : "ok");
    return bad;
}
