/* tests/objectstore/test_dataport.c — the transfer server's plain-TCP data port (wire in
 * objectstore/xfer_data.h): ObjStat advertises it; good requests, pipelined, get their bytes
 * and a CRC-32C trailer in order; an unknown id, out-of-range offsets and sizes, a chunk over
 * the maximum, bad magic, random bytes, a half request and more connections than the server
 * takes each get the right error or a closed connection, readers that vanish mid-chunk do
 * not kill the holder, and it keeps serving; a pull over the data port and one over ZeroMQ
 * chunks (zmq_only) give identical objects, also with a chunk damaged in transit (detected by
 * its CRC, fetched again); a pull told the size and data port beforehand never uses ZeroMQ, a
 * wrong size fails cleanly and an unreachable data port falls back to ZeroMQ; a holder that answers
 * chunks too slowly on the data port times out and the next holder serves; a server destroyed with
 * a connection open cuts and joins it. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>

#include "common/auth.h"
#include "ct.pb-c.h"
#include "objectstore/crc32c.h"
#include "objectstore/xfer_data.h"
#include "proto/msg.h"
#include "tests/objectstore/os_node.h"

#define MB (1ull << 20)
#define OSIZE (5 * MB + 7)
/* The slow holder's case: the pull's timeout, the slow holder's delay before each chunk, and
 * the bound on the pull (under the delay: the slow chunk was not waited for). `make tsan` runs
 * instrumented holders several times slower on a loaded machine, where a live holder's first
 * chunk took over 300 ms: there they are 4 times as long. */
#if defined(__SANITIZE_THREAD__)
#define SLOW_SCALE 4
#else
#define SLOW_SCALE 1
#endif
#define SLOW_TIMEOUT_MS (300 * SLOW_SCALE)
#define SLOW_DELAY_MS (1500 * SLOW_SCALE)
#define SLOW_BOUND_MS (1400 * SLOW_SCALE)

/* A loopback TCP port nobody listens on (bound, then closed). */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    close(fd);
    return ntohs(sa.sin_port);
}

/* ObjStat over ZeroMQ; returns the advertised data port (0 if none, -1 on no reply). */
static int stat_port(void *ctx, const char *ep, const ct_object_id *id, uint64_t *size)
{
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    ct__auth_zmq_client(d); /* the cluster's CURVE keys (common/auth.h) */
    int zero = 0, port = -1;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(d, ep);
    Ct__ObjXfer x = CT__OBJ_XFER__INIT;
    Ct__ObjStat st = CT__OBJ_STAT__INIT;
    st.object_id.data = (uint8_t *)id->b;
    st.object_id.len = CT_OBJECT_ID_LEN;
    x.major = CT_PROTO_MAJOR;
    x.req_id = 1;
    x.sender = "test";
    x.body_case = CT__OBJ_XFER__BODY_STAT;
    x.stat = &st;
    uint8_t buf[128];
    size_t n = ct__obj_xfer__pack(&x, buf);
    zmq_send(d, buf, n, 0);
    zmq_pollitem_t it = {d, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 2000) == 1) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, d, 0);
        Ct__ObjXfer *r = ct__obj_xfer__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        zmq_msg_close(&m);
        if (r && r->body_case == CT__OBJ_XFER__BODY_STAT_REPLY) {
            *size = r->stat_reply->size;
            port = (int)r->stat_reply->data_port;
        }
        if (r)
            ct__obj_xfer__free_unpacked(r, NULL);
    }
    zmq_close(d);
    return port;
}

static int dial(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (ct__auth_connect(fd, 5000)) { /* the port answers only holders of the secret */
        close(fd);
        return -1;
    }
    return fd;
}

static int rd(int fd, void *buf, size_t n) /* 0, or -1 on EOF/error/timeout */
{
    char *p = buf;
    while (n) {
        ssize_t k = recv(fd, p, n, 0);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static ct_xd_req req(const ct_object_id *id, uint64_t off, uint64_t size)
{
    ct_xd_req r = {.magic = CT_XD_REQ_MAGIC, .offset = off, .size = size};
    memcpy(r.id, id->b, CT_OBJECT_ID_LEN);
    return r;
}

/* Sends one request on a fresh connection, returns the reply status (1 = no reply). The
 * connection is closed by the server after an error: *closed says whether it was. */
static int ask_one(int port, const void *rq, size_t n, int *closed)
{
    int fd = dial(port);
    if (fd < 0)
        return 2;
    send(fd, rq, n, MSG_NOSIGNAL);
    ct_xd_rep r;
    int st = rd(fd, &r, sizeof r) || r.magic != CT_XD_REP_MAGIC ? 1 : r.status;
    char b;
    *closed = recv(fd, &b, 1, 0) == 0;
    close(fd);
    return st;
}

int main(void)
{
    os_purge_stale();
    os_node a = {0}, slow = {0};
    ct_store *c = NULL, *e = NULL;
    ct_xfer_server *esrv = NULL;
    void *ctx = zmq_ctx_new();
    unsigned char *want = malloc(OSIZE), *got = malloc(4 * MB);
    int fds[CT_XD_MAX_CONNS + 8];
    int nfds = 0;
    char cname[64];
    snprintf(cname, sizeof cname, "ostest-dC-%d", (int)getpid());
    os_obj obj[] = {{1, 3, OSIZE}};
    CHECK(ctx && want && got);
    os_fill(want, OSIZE, 3);
    CHECK_EQ(os_node_start(&a, "dA", obj, 1, 16 * MB, 0), 0);
    ct_object_id id, unknown;
    os_id(&id, 1);
    os_id(&unknown, 999);

    /* ObjStat advertises the port. */
    uint64_t size = 0;
    int port = stat_port(ctx, a.endpoint, &id, &size);
    CHECK(port > 0);
    CHECK_EQ(size, OSIZE);

    /* Three pipelined requests in one send; replies in order, bytes and CRCs right. */
    int fd = dial(port);
    CHECK(fd >= 0);
    ct_xd_req three[3] = {req(&id, 4 * MB, OSIZE - 4 * MB), req(&id, 0, 1 * MB),
                          req(&id, 1 * MB, 3 * MB)};
    CHECK_EQ(send(fd, three, sizeof three, MSG_NOSIGNAL), (ssize_t)sizeof three);
    for (int i = 0; i < 3; i++) {
        ct_xd_rep r;
        uint32_t end[2];
        CHECK_EQ(rd(fd, &r, sizeof r), 0);
        CHECK_EQ(r.magic, CT_XD_REP_MAGIC);
        CHECK_EQ(r.status, 0);
        CHECK_EQ(r.offset, three[i].offset);
        CHECK_EQ(r.size, three[i].size);
        CHECK_EQ(r.object_size, OSIZE);
        CHECK_EQ(rd(fd, got, r.size), 0);
        CHECK_EQ(rd(fd, end, sizeof end), 0);
        CHECK_EQ(end[1], CT_XD_END_MAGIC);
        CHECK_EQ(end[0], ct__crc32c(0, want + r.offset, r.size));
        CHECK(memcmp(got, want + r.offset, r.size) == 0);
    }
    close(fd);

    /* Bad requests: each gets its error, then the connection is closed. */
    int closed;
    ct_xd_req r = req(&unknown, 0, 1 * MB);
    CHECK_EQ(ask_one(port, &r, sizeof r, &closed), CT_ENOENT);
    CHECK(closed);
    r = req(&id, OSIZE - 10, 11); /* past the end */
    CHECK_EQ(ask_one(port, &r, sizeof r, &closed), CT_ERANGE);
    CHECK(closed);
    r = req(&id, OSIZE + 1, 0); /* offset past the end */
    CHECK_EQ(ask_one(port, &r, sizeof r, &closed), CT_ERANGE);
    r = req(&id, UINT64_MAX - 5, 10); /* wraps */
    CHECK_EQ(ask_one(port, &r, sizeof r, &closed), CT_ERANGE);
    r = req(&id, 0, 0); /* empty chunk of a non-empty object */
    CHECK_EQ(ask_one(port, &r, sizeof r, &closed), CT_ERANGE);
    r = req(&id, 0, CT_XFER_MAX_CHUNK + 1);
    CHECK_EQ(ask_one(port, &r, sizeof r, &closed), CT_ERANGE);
    r = req(&id, 0, 1 * MB);
    r.magic ^= 1;
    CHECK_EQ(ask_one(port, &r, sizeof r, &closed), CT_EPROTO);
    CHECK(closed);
    r = req(&id, 0, 1 * MB);
    r.pad = 7;
    CHECK_EQ(ask_one(port, &r, sizeof r, &closed), CT_EPROTO);

    /* Random bytes: CT_EPROTO; a half request, a connection closed at once: still serving. */
    unsigned char *rnd = malloc(1 << 17);
    CHECK(rnd);
    os_fill(rnd, 1 << 17, 77);
    CHECK_EQ(ask_one(port, rnd, 1 << 17, &closed), CT_EPROTO);
    CHECK(closed);
    free(rnd);
    fd = dial(port);
    CHECK(fd >= 0);
    send(fd, &r, 20, MSG_NOSIGNAL);
    close(fd);
    fd = dial(port);
    CHECK(fd >= 0);
    close(fd);

    /* Readers that go away mid-chunk (the holder's sendfile() then meets a closed socket, which
     * must not raise SIGPIPE in it): the holder keeps serving. */
    for (int i = 0; i < 3; i++) {
        fd = dial(port);
        CHECK(fd >= 0);
        r = req(&id, 0, 4 * MB);
        send(fd, &r, sizeof r, MSG_NOSIGNAL);
        ct_xd_rep rr;
        CHECK_EQ(rd(fd, &rr, sizeof rr), 0);
        close(fd);
    }
    usleep(50 * 1000);
    CHECK_EQ(stat_port(ctx, a.endpoint, &id, &size), port);

    /* More connections than the server takes: the extra ones are closed (before the handshake
     * ends, so dial fails for them); the rest work. */
    int refused = 0;
    for (int i = 0; i < CT_XD_MAX_CONNS + 8; i++) {
        int fd1 = dial(port);
        if (fd1 < 0)
            refused++;
        else
            fds[nfds++] = fd1;
    }
    usleep(200 * 1000);
    for (int i = 0; i < nfds; i++) {
        char b;
        struct timeval tv = {0, 1000};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        refused += recv(fds[i], &b, 1, 0) == 0;
    }
    CHECK(refused >= 8);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    nfds = 0;
    usleep(100 * 1000);

    /* Pulls over the data port and over ZeroMQ chunks give the same object. */
    c = ct_store_new(&(ct_store_opts){.name = cname, .memory_cap = 64 * MB});
    CHECK(c);
    const char *ha[] = {a.endpoint};
    ct_xfer_pull_stats st;
    ct_store_view v = {0};
    for (int k = 0; k < 4; k++) { /* each path, then each with a chunk damaged in transit */
        int zmq_only = k & 1, corrupt = k >> 1 ? 2 : 0;
        CHECK_EQ(ct_xfer_pull(c, &id, ha, 1,
                              &(ct_xfer_pull_opts){.chunk_size = 1 * MB,
                                                   .window = 3,
                                                   .zmq_only = zmq_only,
                                                   .corrupt_chunk = corrupt},
                              &st),
                 0);
        CHECK_EQ(st.crc_failures, corrupt ? 1 : 0);
        CHECK_EQ(st.chunks, 6);
        CHECK_EQ(st.chunks_from[0], 6);
        CHECK_EQ(ct_store_get(c, &id, &v), 0);
        CHECK_EQ(v.size, OSIZE);
        CHECK(memcmp(v.data, want, OSIZE) == 0);
        ct_store_release(c, &v);
        CHECK_EQ(ct_store_delete(c, &id), 0);
    }

    /* Direct pulls, with the size and data port known beforehand (what the head's pull order
     * carries): the ZeroMQ endpoint is never used (a dead one is given and the pull works);
     * a wrong size fails that holder and leaves nothing; an unreachable data port falls back
     * to ZeroMQ. */
    uint64_t dsize = 0;
    int dport = stat_port(ctx, a.endpoint, &id, &dsize);
    CHECK(dport > 0);
    CHECK_EQ(dsize, OSIZE);
    char deadzmq[64];
    snprintf(deadzmq, sizeof deadzmq, "tcp://127.0.0.1:%d", dead_port());
    const char *hd[] = {deadzmq};
    uint16_t dports[] = {(uint16_t)dport};
    CHECK_EQ(ct_xfer_pull(c, &id, hd, 1,
                          &(ct_xfer_pull_opts){.chunk_size = 1 * MB,
                                               .timeout_ms = 500,
                                               .size_known = 1,
                                               .size = OSIZE,
                                               .data_ports = dports},
                          &st),
             0);
    CHECK_EQ(st.chunks, 6);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK(memcmp(v.data, want, OSIZE) == 0);
    ct_store_release(c, &v);
    CHECK_EQ(ct_store_delete(c, &id), 0);
    CHECK_EQ(ct_xfer_pull(
                 c, &id, hd, 1,
                 &(ct_xfer_pull_opts){
                     .timeout_ms = 500, .size_known = 1, .size = OSIZE + 1, .data_ports = dports},
                 &st),
             CT_ERETRY);
    CHECK(strstr(ct_last_error(), "want"));
    CHECK(!ct_store_contains(c, &id));
    uint16_t noports[] = {(uint16_t)dead_port()};
    CHECK_EQ(
        ct_xfer_pull(c, &id, ha, 1,
                     &(ct_xfer_pull_opts){
                         .timeout_ms = 500, .size_known = 1, .size = OSIZE, .data_ports = noports},
                     &st),
        0);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK(memcmp(v.data, want, OSIZE) == 0);
    ct_store_release(c, &v);
    CHECK_EQ(ct_store_delete(c, &id), 0);

    /* A holder whose chunks come too slowly (its size answer is quick): the data connection
     * times out after timeout_ms and the next holder serves the rest. */
    CHECK_EQ(os_node_start(&slow, "dS", obj, 1, 16 * MB, SLOW_DELAY_MS), 0);
    const char *hsa[] = {slow.endpoint, a.endpoint};
    int64_t t0 = ct__now_ms();
    CHECK_EQ(ct_xfer_pull(c, &id, hsa, 2, &(ct_xfer_pull_opts){.timeout_ms = SLOW_TIMEOUT_MS}, &st),
             0);
    CHECK(ct__now_ms() - t0 < SLOW_BOUND_MS);
    CHECK_EQ(st.holder_failures, 1);
    CHECK_EQ(st.last_holder, 1);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK(memcmp(v.data, want, OSIZE) == 0);
    ct_store_release(c, &v);
    CHECK_EQ(ct_store_delete(c, &id), 0);
    /* Alone, the slow holder fails the pull with the reason, and nothing partial is left. */
    CHECK_EQ(ct_xfer_pull(c, &id, hsa, 1, &(ct_xfer_pull_opts){.timeout_ms = SLOW_TIMEOUT_MS}, &st),
             CT_ERETRY);
    char why[64];
    snprintf(why, sizeof why, "no reply for %d ms", SLOW_TIMEOUT_MS);
    CHECK(strstr(ct_last_error(), why));
    CHECK(!ct_store_contains(c, &id));

    /* An in-process server destroyed while a data connection is open with a chunk unread: its
     * thread is cut and joined and its pins dropped, so the shard can go (ASan: no leaks). */
    char ename[64];
    snprintf(ename, sizeof ename, "ostest-dE-%d", (int)getpid());
    e = ct_store_new(&(ct_store_opts){.name = ename, .memory_cap = 16 * MB});
    CHECK(e);
    CHECK_EQ(ct_store_put(e, &id, want, OSIZE), 0);
    esrv = ct_xfer_server_new(e, NULL);
    CHECK(esrv);
    const char *he[] = {ct_xfer_server_endpoint(esrv)};
    CHECK_EQ(ct_xfer_pull(c, &id, he, 1, NULL, &st), 0);
    CHECK_EQ(ct_store_get(c, &id, &v), 0);
    CHECK(memcmp(v.data, want, OSIZE) == 0);
    ct_store_release(c, &v);
    int eport = stat_port(ctx, he[0], &id, &size);
    CHECK(eport > 0);
    fd = dial(eport);
    CHECK(fd >= 0);
    r = req(&id, 0, 1 * MB);
    send(fd, &r, sizeof r, MSG_NOSIGNAL);
    ct_xd_rep er;
    CHECK_EQ(rd(fd, &er, sizeof er), 0);
    CHECK_EQ(er.status, 0);
    ct_xfer_server_destroy(&esrv);
    CHECK(!esrv);
    close(fd);
    ct_store_destroy(&e);

    ct_store_destroy(&c);
    os_node_stop(&slow);
    os_node_stop(&a);
    zmq_ctx_term(ctx);
    free(want);
    free(got);
    printf("ok\n");
    return 0;
fail:
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    os_kill_all();
    ct_xfer_server_destroy(&esrv);
    ct_store_destroy(&e);
    ct_store_destroy(&c);
    ct_store_purge(a.name);
    ct_store_purge(slow.name);
    if (ctx)
        zmq_ctx_term(ctx);
    free(want);
    free(got);
    return 1;
}
