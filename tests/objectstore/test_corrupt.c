/* tests/objectstore/test_corrupt.c — a chunk damaged in transit (the pull's test hook flips a
 * byte of the N-th chunk received) fails its CRC-32C, is fetched again, and the object arrives
 * identical; the same through the test fault xfer_corrupt_chunk (CT_TEST_FAULTS, common/fault.h).
 */
#include "tests/objectstore/os_node.h"

#define MB (1ull << 20)

int main(void)
{
#ifndef CT_FAULTS
    return 77; /* it arms test faults (common/fault.h): a build with CT_FAULTS runs it */
#endif
    os_purge_stale();
    os_node a = {0};
    ct_store *c = NULL;
    ct_store_view v = {0};
    char cname[64];
    snprintf(cname, sizeof cname, "ostest-cC-%d", (int)getpid());
    os_obj obj[] = {{1, 9, 16 * MB + 3}, {2, 10, 3 * MB}};
    CHECK_EQ(os_node_start(&a, "cA", obj, 2, 32 * MB, 0), 0);
    c = ct_store_new(&(ct_store_opts){.name = cname, .memory_cap = 64 * MB});
    CHECK(c);
    ct_object_id id;
    os_id(&id, 1);
    const char *holders[] = {a.endpoint};
    ct_xfer_pull_stats st;

    CHECK_EQ(ct_xfer_pull(c, &id, holders, 1,
                          &(ct_xfer_pull_opts){.chunk_size = 1 * MB, .corrupt_chunk = 3}, &st),
             0);
    CHECK_EQ(st.crc_failures, 1);
    CHECK_EQ(st.chunks, 17);
    CHECK_EQ(st.chunks_from[0], 17);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK(os_verify(v.data, v.size, 9));
    ct_store_release(c, &v);

    /* Same through the environment. */
    os_id(&id, 2);
    setenv("CT_TEST_FAULTS", "xfer_corrupt_chunk=1", 1);
    CHECK_EQ(ct_xfer_pull(c, &id, holders, 1, &(ct_xfer_pull_opts){.chunk_size = 1 * MB}, &st), 0);
    unsetenv("CT_TEST_FAULTS");
    CHECK_EQ(st.crc_failures, 1);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK(os_verify(v.data, v.size, 10));
    ct_store_release(c, &v);

    /* Without the hook: no failures. */
    CHECK_EQ(ct_store_delete(c, &id), 0);
    CHECK_EQ(ct_xfer_pull(c, &id, holders, 1, NULL, &st), 0);
    CHECK_EQ(st.crc_failures, 0);

    ct_store_destroy(&c);
    os_node_stop(&a);
    char pfx[96];
    snprintf(pfx, sizeof pfx, "ct.ostest-cA-%d.", (int)getpid());
    CHECK_EQ(os_shm_count(pfx), 0);
    snprintf(pfx, sizeof pfx, "ct.%s.", cname);
    CHECK_EQ(os_shm_count(pfx), 0);
    printf("ok\n");
    return 0;
fail:
    os_kill_all();
    ct_store_destroy(&c);
    ct_store_purge(a.name);
    return 1;
}
