/* tests/objectstore/test_failover.c — an object held by A and B; A is killed with SIGKILL in
 * the middle of C's pull (from the pull's progress callback), and C completes the missing
 * chunks from B with identical bytes. A serves slowly (a test hook) so the pull is surely
 * in flight when A dies. */
#include "tests/objectstore/os_node.h"

#define MB (1ull << 20)

typedef struct kill_ctx {
    os_node *victim;
    uint64_t at;
    uint64_t killed_at;
} kill_ctx;

static int on_chunk(void *arg, int holder, uint64_t done, uint64_t n)
{
    kill_ctx *k = arg;
    if (holder == 0 && done == k->at && k->victim->pid > 0) {
        os_node_stop(k->victim); /* SIGKILL + reap + purge its shm */
        k->killed_at = done;
    }
    return 0;
}

static int cancel_at_2(void *arg, int holder, uint64_t done, uint64_t n)
{
    return done == 2;
}

int main(void)
{
    os_purge_stale();
    os_node a = {0}, b = {0};
    ct_store *c = NULL;
    ct_store_view v = {0};
    char cname[64];
    snprintf(cname, sizeof cname, "ostest-fC-%d", (int)getpid());
    os_obj obj[] = {{1, 5, 64 * MB + 12345}};
    CHECK_EQ(os_node_start(&a, "fA", obj, 1, 80 * MB, 20), 0);
    CHECK_EQ(os_node_start(&b, "fB", obj, 1, 80 * MB, 0), 0);
    c = ct_store_new(&(ct_store_opts){.name = cname, .memory_cap = 80 * MB});
    CHECK(c);

    ct_object_id id;
    os_id(&id, 1);
    const char *holders[] = {a.endpoint, b.endpoint};
    ct_xfer_pull_stats st;

    /* The whole pull has a deadline (A serves a chunk per 20 ms: 33 chunks take > 600 ms). */
    int64_t t0 = ct__now_ms();
    CHECK_EQ(ct_xfer_pull(c, &id, holders, 1,
                          &(ct_xfer_pull_opts){.chunk_size = 2 * MB, .total_timeout_ms = 150}, &st),
             CT_ETIMEDOUT);
    CHECK(ct__now_ms() - t0 < 1000);
    CHECK(strstr(ct_last_error(), "not done after 150 ms"));
    CHECK(!ct_store_contains(c, &id));
    /* The progress callback cancels. */
    CHECK_EQ(ct_xfer_pull(c, &id, holders, 2,
                          &(ct_xfer_pull_opts){.chunk_size = 2 * MB, .on_chunk = cancel_at_2}, &st),
             CT_ECANCELED);
    CHECK(!ct_store_contains(c, &id));
    uint64_t sz;
    CHECK_EQ(ct_store_size(c, &id, &sz), CT_ENOENT);

    kill_ctx k = {.victim = &a, .at = 4};
    CHECK_EQ(ct_xfer_pull(c, &id, holders, 2,
                          &(ct_xfer_pull_opts){.chunk_size = 2 * MB,
                                               .window = 4,
                                               .timeout_ms = 1000,
                                               .on_chunk = on_chunk,
                                               .arg = &k},
                          &st),
             0);
    CHECK_EQ(k.killed_at, 4);
    CHECK_EQ(st.chunks, 33);
    CHECK_EQ(st.holder_failures, 1);
    CHECK_EQ(st.last_holder, 1);
    CHECK(st.chunks_from[0] >= 4);
    CHECK(st.chunks_from[1] >= 1);
    CHECK_EQ(st.chunks_from[0] + st.chunks_from[1], 33);
    printf("chunks from A %llu, from B %llu\n", (unsigned long long)st.chunks_from[0],
           (unsigned long long)st.chunks_from[1]);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK_EQ(v.size, 64 * MB + 12345);
    CHECK(os_verify(v.data, v.size, 5));
    ct_store_release(c, &v);

    /* Both holders dead: the pull fails, and no partial object is visible in C. */
    ct_object_id id2;
    os_id(&id2, 2);
    os_node_stop(&b);
    CHECK_EQ(ct_xfer_pull(c, &id2, holders, 2, &(ct_xfer_pull_opts){.timeout_ms = 100}, &st),
             CT_ERETRY);
    CHECK(!ct_store_contains(c, &id2));

    ct_store_destroy(&c);
    char pfx[96];
    for (int i = 0; i < 3; i++) {
        snprintf(pfx, sizeof pfx, "ct.ostest-f%c-%d.", "ABC"[i], (int)getpid());
        CHECK_EQ(os_shm_count(pfx), 0);
    }
    printf("ok\n");
    return 0;
fail:
    os_kill_all();
    ct_store_destroy(&c);
    ct_store_purge(a.name);
    ct_store_purge(b.name);
    return 1;
}
