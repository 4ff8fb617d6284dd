/* tests/objectstore/test_transfer.c — three nodes (processes) on 127.0.0.1, each with its own
 * shard and transfer server: a 256 MiB object created on A is pulled to C with identical
 * bytes; then odd sizes and chunk sizes, an object C already has, an id nobody has, and a
 * holder that is not there at all. */
#include <zmq.h>

#include "tests/objectstore/os_node.h"

#define MB (1ull << 20)

static unsigned char buf_small[300000];

int main(void)
{
    os_purge_stale();
    os_node a = {0}, b = {0};
    ct_store *c = NULL;
    ct_xfer_server *csrv = NULL;
    ct_store_view v = {0};
    char cname[64], prefix[96];
    snprintf(cname, sizeof cname, "ostest-xC-%d", (int)getpid());
    os_obj objs_a[] = {{1, 11, 256 * MB}, {2, 22, 4 * MB + 17}, {3, 33, 0}};
    os_obj objs_b[] = {{4, 44, 1000}};
    CHECK_EQ(os_node_start(&a, "xA", objs_a, 3, 300 * MB, 0), 0);
    CHECK_EQ(os_node_start(&b, "xB", objs_b, 1, 16 * MB, 0), 0);
    c = ct_store_new(&(ct_store_opts){.name = cname, .memory_cap = 300 * MB});
    CHECK(c);
    csrv = ct_xfer_server_new(c, NULL);
    CHECK(csrv);

    /* 1. 256 MiB from A to C. */
    ct_object_id id;
    os_id(&id, 1);
    const char *ha[] = {a.endpoint};
    ct_xfer_pull_stats st;
    int64_t t0 = ct__now_ns();
    CHECK_EQ(ct_xfer_pull(c, &id, ha, 1, NULL, &st), 0);
    double secs = (ct__now_ns() - t0) / 1e9;
    printf("pulled 256 MiB in %.3f s: %.2f GB/s\n", secs, 256.0 * MB / secs / 1e9);
    CHECK_EQ(st.size, 256 * MB);
    CHECK_EQ(st.chunks, 64);
    CHECK_EQ(st.chunks_from[0], 64);
    CHECK_EQ(st.crc_failures, 0);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK_EQ(v.size, 256 * MB);
    CHECK(os_verify(v.data, v.size, 11));
    ct_store_release(c, &v);
    /* Already here: nothing to do. */
    CHECK_EQ(ct_xfer_pull(c, &id, ha, 1, NULL, &st), 0);
    CHECK_EQ(st.chunks, 0);

    /* 2. Odd size, odd chunk size, small window; and an empty object. */
    os_id(&id, 2);
    CHECK_EQ(
        ct_xfer_pull(c, &id, ha, 1, &(ct_xfer_pull_opts){.chunk_size = 1000003, .window = 3}, &st),
        0);
    CHECK_EQ(st.chunks, 5);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK_EQ(v.size, 4 * MB + 17);
    CHECK(os_verify(v.data, v.size, 22));
    ct_store_release(c, &v);
    os_id(&id, 3);
    CHECK_EQ(ct_xfer_pull(c, &id, ha, 1, NULL, &st), 0);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK_EQ(v.size, 0);
    ct_store_release(c, &v);

    /* 3. Holder list: A lacks object 4, B has it. */
    os_id(&id, 4);
    const char *hab[] = {a.endpoint, b.endpoint};
    CHECK_EQ(ct_xfer_pull(c, &id, hab, 2, NULL, &st), 0);
    CHECK_EQ(st.last_holder, 1);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK(os_verify(v.data, v.size, 44));
    ct_store_release(c, &v);

    /* 4. Nobody has it: CT_ENOENT, nothing left behind in C. */
    os_id(&id, 77);
    CHECK_EQ(ct_xfer_pull(c, &id, hab, 2, NULL, &st), CT_ENOENT);
    CHECK(strstr(ct_last_error(), "no object"));
    CHECK(!ct_store_contains(c, &id));

    /* 5. A holder that does not exist: times out, then the next holder serves. */
    os_id(&id, 4);
    CHECK_EQ(ct_store_delete(c, &id), 0);
    const char *hdead[] = {"tcp://127.0.0.1:1", b.endpoint};
    int64_t t1 = ct__now_ms();
    CHECK_EQ(ct_xfer_pull(c, &id, hdead, 2, &(ct_xfer_pull_opts){.timeout_ms = 1000}, &st), 0);
    CHECK(ct__now_ms() - t1 >= 1000);
    CHECK_EQ(st.holder_failures, 1);
    CHECK_EQ(ct_xfer_pull(c, &id, NULL, 0, NULL, NULL), 0); /* present: fine without holders */
    os_id(&id, 78);
    CHECK_EQ(ct_xfer_pull(c, &id, hdead, 1, &(ct_xfer_pull_opts){.timeout_ms = 100}, &st),
             CT_ERETRY);
    CHECK(strstr(ct_last_error(), "no reply for 100 ms"));
    CHECK_EQ(ct_xfer_pull(c, &id, NULL, 0, NULL, NULL), CT_ENOENT);

    /* 6. C serves what it pulled: B pulls... we act as a 4th client against C's server. */
    ct_store *d = NULL;
    char dname[64];
    snprintf(dname, sizeof dname, "ostest-xD-%d", (int)getpid());
    d = ct_store_new(&(ct_store_opts){.name = dname, .memory_cap = 8 * MB});
    CHECK(d);
    os_id(&id, 2);
    const char *hc[] = {ct_xfer_server_endpoint(csrv)};
    int r = ct_xfer_pull(d, &id, hc, 1, NULL, &st);
    if (r == 0 && ct_store_get(d, &id, &v) == 0) {
        r = os_verify(v.data, v.size, 22) ? 0 : -1;
        ct_store_release(d, &v);
    }
    ct_store_destroy(&d);
    CHECK_EQ(r, 0);

    /* 7. Server and pull sharing one ZeroMQ context (as ct-node would): destroying the server
     * right after a pull must not leave chunks pointing into a destroyed store. */
    {
        void *zctx = zmq_ctx_new();
        ct_store *e = ct_store_new(&(ct_store_opts){.name = dname, .memory_cap = 8 * MB});
        CHECK(zctx && e);
        os_fill(buf_small, sizeof buf_small, 55);
        os_id(&id, 55);
        CHECK_EQ(ct_store_put(e, &id, buf_small, sizeof buf_small), 0);
        ct_xfer_server *esrv = ct_xfer_server_new(e, &(ct_xfer_server_opts){.zmq_ctx = zctx});
        CHECK(esrv);
        const char *he[] = {ct_xfer_server_endpoint(esrv)};
        r = ct_xfer_pull(c, &id, he, 1,
                         &(ct_xfer_pull_opts){.zmq_ctx = zctx, .chunk_size = 4096, .window = 64},
                         &st);
        ct_xfer_server_destroy(&esrv);
        ct_store_destroy(&e);
        zmq_ctx_term(zctx);
        CHECK_EQ(r, 0);
        CHECK_EQ(ct_store_get(c, &id, &v), 0);
        CHECK(os_verify(v.data, v.size, 55));
        ct_store_release(c, &v);
    }

    ct_xfer_server_destroy(&csrv);
    ct_store_destroy(&c);
    os_node_stop(&a);
    os_node_stop(&b);
    snprintf(prefix, sizeof prefix, "ct.ostest-x");
    for (int i = 0; i < 4; i++) {
        char pfx[96];
        snprintf(pfx, sizeof pfx, "ct.ostest-x%c-%d.", "ABCD"[i], (int)getpid());
        CHECK_EQ(os_shm_count(pfx), 0);
    }
    printf("ok\n");
    return 0;
fail:
    os_kill_all();
    ct_xfer_server_destroy(&csrv);
    ct_store_destroy(&c);
    ct_store_purge(a.name);
    ct_store_purge(b.name);
    return 1;
}
