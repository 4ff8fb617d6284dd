/* tests/security/test_no_secret.c — only holders of the cluster secret get in (common/auth.h).
 * A real ct-head and ct-node share this test's secret; this process is a driver with a Counter
 * actor, an object and a KV key. Then probes without the secret (plain ZeroMQ, raw TCP) and
 * probes with another cluster's secret try, on every port the cluster listens on:
 * - the head: ping, register a node, heartbeat, create and kill an actor, free, locate, put
 *   and get an object, write a key: no answer at all (the CURVE handshake fails), and nothing
 *   changes (one node, the actor answers, the object is still there, no key);
 * - the node's transfer server (ZeroMQ): ObjStat gets no answer;
 * - the node's data port (raw TCP): not one byte of the object comes back, and a client with
 *   another secret is told the server is not its cluster's;
 * - the actor's call port (ZMTP): a plain ZeroMQ call gets no answer, and a client with another
 *   secret fails the handshake.
 * The driver (right secret) is served all along. */
#include "sec.h"
#include "../runtime/classes.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "ct/ct.h"
#include "objectstore/xfer_data.h"

static void obj_bytes(ProtobufCBinaryData *b, const ct_object_id *id)
{
    b->data = (uint8_t *)id->b;
    b->len = CT_OBJECT_ID_LEN;
}

/* Sends every kind of request a probe would try; returns how many answers came in 1.5 s. */
static int probe_head(const char *addr, int keys, const char *aid, const char *nid,
                      const ct_object_id *oid)
{
    peer p;
    if (peer_open_keys(&p, addr, "probe", "job", keys))
        return -1;
    Ct__Envelope e;
    Ct__Ping pg = CT__PING__INIT;
    Ct__RegisterNode rn = CT__REGISTER_NODE__INIT;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    Ct__KillActor ka = CT__KILL_ACTOR__INIT;
    Ct__ObjFree of = CT__OBJ_FREE__INIT;
    Ct__ObjLocate ol = CT__OBJ_LOCATE__INIT;
    Ct__ObjPutDone op = CT__OBJ_PUT_DONE__INIT;
    Ct__ObjFetch fe = CT__OBJ_FETCH__INIT;
    Ct__KvPut kp = CT__KV_PUT__INIT;
    Ct__Resource cpu = CT__RESOURCE__INIT, *res[] = {&cpu};
    cpu.name = "CPU";
    cpu.amount = 64;
    rn.host = "127.0.0.1";
    rn.n_resources = 1;
    rn.resources = res;
    hb.node_id = (char *)nid;
    ka.actor_id = (char *)aid;
    obj_bytes(&of.object_id, oid);
    ProtobufCBinaryData lid;
    obj_bytes(&lid, oid);
    ol.n_object_ids = 1;
    ol.object_ids = &lid;
    obj_bytes(&op.object_id, oid);
    op.size = 8;
    op.node_id = (char *)nid;
    obj_bytes(&fe.object_id, oid);
    fe.node_id = (char *)nid;
    kp.key = "probe/key";
    kp.value.data = (uint8_t *)"x";
    kp.value.len = 1;
    struct {
        int body;
        void *msg;
    } tries[] = {{CT__ENVELOPE__BODY_PING, &pg},         {CT__ENVELOPE__BODY_REGISTER_NODE, &rn},
                 {CT__ENVELOPE__BODY_HEARTBEAT, &hb},    {CT__ENVELOPE__BODY_KILL_ACTOR, &ka},
                 {CT__ENVELOPE__BODY_OBJ_FREE, &of},     {CT__ENVELOPE__BODY_OBJ_LOCATE, &ol},
                 {CT__ENVELOPE__BODY_OBJ_PUT_DONE, &op}, {CT__ENVELOPE__BODY_OBJ_FETCH, &fe},
                 {CT__ENVELOPE__BODY_KV_PUT, &kp}};
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        ct__envelope__init(&e);
        e.body_case = tries[i].body;
        e.ping = tries[i].msg; /* the oneof's members share their storage */
        peer_send(&p, &e);
    }
    create_msg cm; /* a CreateActor too (sec.h's builder) */
    peer_send(&p, create_actor_msg(&cm, "Counter", "CPU", 1));
    int answers = 0;
    Ct__Envelope *r;
    while ((r = peer_wait(&p, 0, 0, 1500))) {
        fprintf(stderr, "probe (keys %d) got %s\n", keys, ct__msg_body_name(r->body_case));
        answers++;
        ct__msg_free(r);
    }
    peer_close(&p);
    return answers;
}

/* Sends an ObjStat of oid on p (a peer of a transfer server). */
static void send_stat(peer *p, const ct_object_id *oid)
{
    Ct__ObjXfer x = CT__OBJ_XFER__INIT;
    Ct__ObjStat st = CT__OBJ_STAT__INIT;
    obj_bytes(&st.object_id, oid);
    x.major = CT_PROTO_MAJOR;
    x.req_id = 1;
    x.sender = p->name;
    x.body_case = CT__OBJ_XFER__BODY_STAT;
    x.stat = &st;
    uint8_t buf[128];
    size_t n = ct__obj_xfer__pack(&x, buf);
    zmq_send(p->s, buf, n, 0);
}

/* An ObjStat to the transfer server at xfer with keys; 1 when anything answered in 1 s. */
static int probe_xfer(const char *xfer, int keys, const ct_object_id *oid)
{
    peer p;
    if (peer_open_keys(&p, xfer + 6 /* tcp:// */, "probe", NULL, keys))
        return -1;
    send_stat(&p, oid);
    zmq_pollitem_t it = {p.s, 0, ZMQ_POLLIN, 0};
    int got = zmq_poll(&it, 1, 1000) == 1;
    peer_close(&p);
    return got;
}

/* The data port of the transfer server at xfer, asked with this process's secret. */
static int data_port(const char *xfer, const ct_object_id *oid)
{
    peer p;
    if (peer_open_keys(&p, xfer + 6, "driver", NULL, KEYS_CLUSTER))
        return -1;
    send_stat(&p, oid);
    int port = -1;
    zmq_pollitem_t it = {p.s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 3000) == 1) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, p.s, 0);
        Ct__ObjXfer *r = ct__obj_xfer__unpack(NULL, zmq_msg_size(&m), zmq_msg_data(&m));
        zmq_msg_close(&m);
        if (r && r->body_case == CT__OBJ_XFER__BODY_STAT_REPLY)
            port = (int)r->stat_reply->data_port;
        if (r)
            ct__obj_xfer__free_unpacked(r, NULL);
    }
    peer_close(&p);
    return port;
}

static int dial(const char *host, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Bytes the peer sends back within 2 s (until it closes), at most cap. */
static ssize_t drain(int fd, uint8_t *buf, size_t cap)
{
    size_t n = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + n, cap - n, 0);
        if (k <= 0)
            return (ssize_t)n;
        n += (size_t)k;
        if (n == cap)
            return (ssize_t)n;
    }
}

/* The data port: a chunk request without the handshake, and with another cluster's secret. */
static void probe_data_port(int port, const ct_object_id *oid)
{
    ct_xd_req rq = {.magic = CT_XD_REQ_MAGIC, .offset = 0, .size = 8};
    memcpy(rq.id, oid->b, CT_OBJECT_ID_LEN);
    uint8_t got[256];
    /* no secret: the request is not a greeting; the port closes without a byte */
    int fd = dial("127.0.0.1", port);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(send(fd, &rq, sizeof rq, MSG_NOSIGNAL) == (ssize_t)sizeof rq);
        CHECK_EQ_INT(drain(fd, got, sizeof got), 0);
        close(fd);
    }
    /* another secret: the server's answer does not check out for the client... */
    ct__auth_set(s_other);
    fd = dial("127.0.0.1", port);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_EQ_INT(ct__auth_connect(fd, 3000), CT_EACCES);
        close(fd);
    }
    /* ...and a client that goes on anyway, with a proof of the other secret, gets nothing */
    uint8_t c1[CT_AUTH_C1_LEN], s1[CT_AUTH_S1_LEN], st[CT_AUTH_STATE_LEN], c2[CT_AUTH_C2_LEN];
    fd = dial("127.0.0.1", port);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_OK(ct__auth_client_start(c1, st));
        CHECK(send(fd, c1, sizeof c1, MSG_NOSIGNAL) == (ssize_t)sizeof c1);
        CHECK_EQ_INT(drain(fd, s1, sizeof s1), (ssize_t)sizeof s1);
        CHECK_EQ_INT(ct__auth_client_finish(st, s1, c2), CT_EACCES);
        memset(c2, 0x5a, sizeof c2);
        CHECK(send(fd, c2, sizeof c2, MSG_NOSIGNAL) == (ssize_t)sizeof c2);
        send(fd, &rq, sizeof rq, MSG_NOSIGNAL);
        CHECK_EQ_INT(drain(fd, got, sizeof got), 0);
        close(fd);
    }
    CHECK_OK(ct__auth_load(NULL));
}

/* The actor's call port: a plain ZeroMQ call, and a ct client with another secret. */
static void probe_actor_port(const char *where)
{
    peer p;
    CHECK_OK(peer_open_keys(&p, where + 6, "probe", NULL, KEYS_NONE));
    Ct__Envelope e;
    Ct__Call c = CT__CALL__INIT;
    long zero = 0;
    ct__envelope__init(&e);
    c.method = "add";
    c.args.data = (uint8_t *)&zero;
    c.args.len = sizeof zero;
    e.body_case = CT__ENVELOPE__BODY_CALL;
    e.call = &c;
    peer_send(&p, &e);
    Ct__Envelope *r = peer_wait(&p, 0, 0, 1000);
    CHECK(r == NULL);
    ct__msg_free(r);
    peer_close(&p);
    const char *colon = strrchr(where, ':');
    ct__auth_set(s_other);
    int fd = colon ? dial("127.0.0.1", atoi(colon + 1)) : -1;
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK_EQ_INT(ct__auth_connect(fd, 3000), CT_EACCES);
        close(fd);
    }
    CHECK_OK(ct__auth_load(NULL));
}

/* The head's view: nodes alive, and whether key exists. */
static int nodes_alive(peer *p)
{
    Ct__Envelope *r = status(p);
    int n = 0;
    for (size_t i = 0; r && i < r->status_reply->n_nodes; i++)
        n += r->status_reply->nodes[i]->alive;
    ct__msg_free(r);
    return n;
}

int main(void)
{
    register_test_classes();
    ct_serve_if_worker();
    h_init();
    char addr[128], st[16] = "", where[160] = "", xfer[200] = "";
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    h_start_node(addr, "--cpus", "4", NULL, NULL, NULL, NULL);
    ct_actor *a = NULL;
    peer me;
    CHECK_OK(peer_open(&me, addr, "me", "job"));
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, &a));
    if (!a)
        goto out;
    const char *aid = ct_actor_id(a), *nid = ct_actor_node(a);
    ct_object_id oid;
    CHECK_OK(ct_put("payload", 8, NULL, &oid));
    CHECK_OK(actor_info(&me, aid, st, where));
    Ct__Envelope *s = status(&me);
    if (s && s->status_reply->n_nodes == 1)
        snprintf(xfer, sizeof xfer, "%s", s->status_reply->nodes[0]->xfer_address);
    ct__msg_free(s);
    CHECK(!strncmp(xfer, "tcp://", 6));
    int port = data_port(xfer, &oid);
    CHECK(port > 0);

    for (int keys = KEYS_NONE; keys <= KEYS_OTHER; keys++) {
        CHECK_EQ_INT(probe_head(addr, keys, aid, nid, &oid), 0);
        CHECK_EQ_INT(probe_xfer(xfer, keys, &oid), 0);
    }
    probe_data_port(port, &oid);
    probe_actor_port(where);

    /* nothing changed, and the holder of the secret is served */
    CHECK_EQ_INT(nodes_alive(&me), 1);
    CHECK_OK(counter_answers(a));
    char holders[4][32];
    int nh = 0;
    uint64_t size = 0;
    CHECK_OK(ct_object_nodes(&oid, holders, 4, &nh, &size));
    CHECK_EQ_INT(nh, 1);
    CHECK_EQ_INT(size, 8);
    void *v = NULL;
    size_t vn = 0;
    CHECK(ct_kv_get("probe/key", &v, &vn, 200) != 0);
    free(v);
    CHECK_EQ_INT(probe_xfer(xfer, KEYS_CLUSTER, &oid), 1); /* the probes can fail */
out:
    peer_close(&me);
    ct_shutdown();
    h_kill_all();
    if (h_failures) {
        fprintf(stderr, "test_no_secret: %d failure(s)\n", h_failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
