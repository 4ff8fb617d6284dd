/* tests/objectstore/test_fuzz.c — bad input to a transfer port: unknown ids, out-of-range
 * offsets and sizes, wrong id lengths, another protocol version, extra frames and undecodable
 * bytes each get an ObjXfer error reply with the right code; oversized messages, random
 * frames and raw random bytes on the TCP port are dropped; the holder process stays alive
 * and serves a normal pull afterwards. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>

#include "common/auth.h"
#include "ct.pb-c.h"
#include "proto/msg.h"
#include "tests/objectstore/os_node.h"

#define MB (1ull << 20)

static void *dealer;

/* Sends frames, waits for one reply; returns the error code in it (0 for a non-error reply,
 * 1 for no reply within wait_ms). */
static int ask(const void *const *frames, const size_t *lens, int n, int wait_ms, char *msg,
               size_t msglen)
{
    for (int i = 0; i < n; i++)
        zmq_send(dealer, frames[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0);
    zmq_pollitem_t it = {dealer, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, wait_ms) <= 0)
        return 1;
    zmq_msg_t m;
    zmq_msg_init(&m);
    zmq_msg_recv(&m, dealer, 0);
    int more = zmq_msg_more(&m);
    Ct__ObjXfer *r = ct__obj_xfer__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
    zmq_msg_close(&m);
    while (more) {
        zmq_msg_init(&m);
        zmq_msg_recv(&m, dealer, 0);
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    if (!r)
        return 2;
    int code = r->body_case == CT__OBJ_XFER__BODY_ERROR ? r->error->code : 0;
    if (msg)
        snprintf(msg, msglen, "%s",
                 r->body_case == CT__OBJ_XFER__BODY_ERROR && r->error->message ? r->error->message
                                                                               : "");
    ct__obj_xfer__free_unpacked(r, NULL);
    return code;
}

static int ask_msg(Ct__ObjXfer *x, char *msg, size_t msglen)
{
    uint8_t buf[256];
    size_t n = ct__obj_xfer__pack(x, buf);
    const void *f[] = {buf};
    size_t l[] = {n};
    return ask(f, l, 1, 2000, msg, msglen);
}

static Ct__ObjXfer chunk_req(Ct__ObjChunk *c, const ct_object_id *id, size_t idlen, uint64_t off,
                             uint64_t size)
{
    Ct__ObjXfer x = CT__OBJ_XFER__INIT;
    ct__obj_chunk__init(c);
    c->object_id.data = (uint8_t *)id->b;
    c->object_id.len = idlen;
    c->offset = off;
    c->size = size;
    x.major = CT_PROTO_MAJOR;
    x.req_id = 7;
    x.sender = "fuzz";
    x.body_case = CT__OBJ_XFER__BODY_CHUNK;
    x.chunk = c;
    return x;
}

static int raw_tcp_garbage(const char *endpoint, const unsigned char *bytes, size_t n)
{
    const char *colon = strrchr(endpoint, ':');
    if (!colon)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    ssize_t w = send(fd, bytes, n, MSG_NOSIGNAL);
    (void)w;
    usleep(1000);
    close(fd);
    return 0;
}

int main(void)
{
    os_purge_stale();
    os_node a = {0};
    ct_store *c = NULL;
    void *ctx = zmq_ctx_new();
    char msg[512];
    unsigned char *rnd = malloc(1 << 17);
    os_obj obj[] = {{1, 3, 5 * MB}};
    CHECK(ctx && rnd);
    os_fill(rnd, 1 << 17, 1234);
    CHECK_EQ(os_node_start(&a, "zA", obj, 1, 16 * MB, 0), 0);
    dealer = zmq_socket(ctx, ZMQ_DEALER);
    ct__auth_zmq_client(dealer); /* the cluster's CURVE keys (common/auth.h) */
    int zero = 0;
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof zero);
    CHECK_EQ(zmq_connect(dealer, a.endpoint), 0);

    ct_object_id id, unknown;
    os_id(&id, 1);
    os_id(&unknown, 999);
    Ct__ObjChunk ch;
    Ct__ObjXfer x;

    /* Unknown id: stat and chunk. */
    Ct__ObjStat sq = CT__OBJ_STAT__INIT;
    sq.object_id.data = unknown.b;
    sq.object_id.len = 20;
    Ct__ObjXfer xs = CT__OBJ_XFER__INIT;
    xs.major = CT_PROTO_MAJOR;
    xs.body_case = CT__OBJ_XFER__BODY_STAT;
    xs.stat = &sq;
    CHECK_EQ(ask_msg(&xs, msg, sizeof msg), CT_ENOENT);
    CHECK(strstr(msg, "has no object"));
    x = chunk_req(&ch, &unknown, 20, 0, 100);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_ENOENT);
    /* Good request for reference. */
    x = chunk_req(&ch, &id, 20, 5 * MB - 100, 100);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), 0);
    /* Out of range: past the end, overlapping the end, too big, empty, overflowing. */
    x = chunk_req(&ch, &id, 20, 5 * MB + 1, 1);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_ERANGE);
    CHECK(strstr(msg, "out of range"));
    x = chunk_req(&ch, &id, 20, 5 * MB - 100, 101);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_ERANGE);
    x = chunk_req(&ch, &id, 20, 0, 65 * MB);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_ERANGE);
    x = chunk_req(&ch, &id, 20, 0, 0);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_ERANGE);
    x = chunk_req(&ch, &id, 20, UINT64_MAX - 10, 100);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_ERANGE);
    /* Clipped probes (sent before the size is known): past the end is an empty reply, a
     * zero size is still an error. */
    x = chunk_req(&ch, &id, 20, 5 * MB - 100, 4 * MB);
    ch.clip = 1;
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), 0);
    x = chunk_req(&ch, &id, 20, 100 * MB, 4 * MB);
    ch.clip = 1;
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), 0);
    x = chunk_req(&ch, &id, 20, 0, 0);
    ch.clip = 1;
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_ERANGE);
    x = chunk_req(&ch, &id, 20, 0, 65 * MB);
    ch.clip = 1;
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_ERANGE);
    /* Wrong id length. */
    x = chunk_req(&ch, &id, 5, 0, 100);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_EINVAL);
    CHECK(strstr(msg, "object_id"));
    /* Another major version. */
    x = chunk_req(&ch, &id, 20, 0, 100);
    x.major = 99;
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), CT_EPROTO);
    CHECK(strstr(msg, "protocol version 99"));
    /* No body. */
    Ct__ObjXfer empty = CT__OBJ_XFER__INIT;
    empty.major = CT_PROTO_MAJOR;
    CHECK_EQ(ask_msg(&empty, msg, sizeof msg), CT_EPROTO);
    /* Undecodable bytes; an empty frame; extra frames. */
    {
        const void *f[] = {"\xff\xff\xff\xff garbage"};
        size_t l[] = {13};
        CHECK_EQ(ask(f, l, 1, 2000, msg, sizeof msg), CT_EPROTO);
        CHECK(strstr(msg, "undecodable"));
        const void *f0[] = {""};
        size_t l0[] = {0};
        CHECK_EQ(ask(f0, l0, 1, 2000, msg, sizeof msg), CT_EPROTO);
        uint8_t buf[256];
        x = chunk_req(&ch, &id, 20, 0, 100);
        size_t n = ct__obj_xfer__pack(&x, buf);
        const void *f2[] = {buf, "extra", "more"};
        size_t l2[] = {n, 5, 4};
        CHECK_EQ(ask(f2, l2, 3, 2000, msg, sizeof msg), CT_EPROTO);
        CHECK(strstr(msg, "extra frames"));
    }
    /* 2000 random frames: every one answered or dropped, none kills the server. */
    int answered = 0;
    for (int i = 0; i < 2000; i++) {
        const void *f[] = {rnd + (i * 37) % 60000};
        size_t l[] = {(size_t)(i * 7919) % 300};
        int r = ask(f, l, 1, 1000, NULL, 0);
        answered += r != 1;
    }
    printf("random frames answered: %d of 2000\n", answered);
    CHECK(answered > 1900);
    /* An oversized message: ZeroMQ drops it and closes that connection. */
    {
        void *big = zmq_socket(ctx, ZMQ_DEALER);
        ct__auth_zmq_client(big); /* the cluster's CURVE keys (common/auth.h) */
        zmq_setsockopt(big, ZMQ_LINGER, &zero, sizeof zero);
        zmq_connect(big, a.endpoint);
        zmq_send(big, rnd, 1 << 17, 0);
        usleep(50000);
        zmq_close(big);
    }
    /* Raw random bytes on the TCP port, and a ZeroMQ greeting cut short. */
    for (int i = 0; i < 50; i++)
        CHECK_EQ(raw_tcp_garbage(a.endpoint, rnd + i * 1000, 1 + (size_t)i * 97), 0);
    CHECK_EQ(
        raw_tcp_garbage(a.endpoint, (const unsigned char *)"\xff\0\0\0\0\0\0\0\x01\x7f\x03", 11),
        0);

    /* Still alive and serving. */
    CHECK_EQ(waitpid(a.pid, NULL, WNOHANG), 0);
    x = chunk_req(&ch, &id, 20, 0, 100);
    CHECK_EQ(ask_msg(&x, msg, sizeof msg), 0);
    char cname[64];
    snprintf(cname, sizeof cname, "ostest-zC-%d", (int)getpid());
    c = ct_store_new(&(ct_store_opts){.name = cname, .memory_cap = 16 * MB});
    CHECK(c);
    const char *holders[] = {a.endpoint};
    CHECK_EQ(ct_xfer_pull(c, &id, holders, 1, NULL, NULL), 0);
    ct_store_view v;
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK(os_verify(v.data, v.size, 3));
    ct_store_release(c, &v);

    ct_store_destroy(&c);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
    os_node_stop(&a);
    char pfx[96];
    snprintf(pfx, sizeof pfx, "ct.ostest-zA-%d.", (int)getpid());
    CHECK_EQ(os_shm_count(pfx), 0);
    free(rnd);
    printf("ok\n");
    return 0;
fail:
    os_kill_all();
    ct_store_destroy(&c);
    ct_store_purge(a.name);
    return 1;
}
