/* tests/runtime/test_fuzz.c — hostile input on the head's port: random bytes over raw TCP,
 * random payload frames, truncated envelopes, extra frames and a wrong protocol major version.
 * Each gets an error reply or is dropped, and the head keeps serving (a ping is answered after
 * every round, and its process is alive at the end). */
#include "harness.h"
#include "common/auth.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>
#include "ct/ct.h"
#include "common/common.h"
#include "proto/msg.h"

static unsigned long long rng = 88172645463325252ull;
static unsigned rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)rng;
}

/* Receives one reply within timeout_ms. */
static Ct__Envelope *recv_reply(void *s, int timeout_ms)
{
    zmq_pollitem_t it = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return NULL;
    Ct__Envelope *e = NULL;
    if (ct__msg_recv(s, NULL, &e, 0, "fuzzer")) {
        ct__msg_free(e);
        return NULL;
    }
    return e;
}

static int ping(void *s)
{
    Ct__Envelope e, *r;
    Ct__Ping p = CT__PING__INIT;
    ct__env_init(&e, 777, "fuzzer", 2000);
    e.body_case = CT__ENVELOPE__BODY_PING;
    e.ping = &p;
    if (ct__msg_send(s, NULL, &e, 0))
        return -1;
    for (int i = 0; i < 100; i++) { /* skip error replies still in flight */
        if (!(r = recv_reply(s, 2000)))
            return -1;
        int ok = r->req_id == 777 && r->body_case == CT__ENVELOPE__BODY_OK;
        ct__msg_free(r);
        if (ok)
            return 0;
    }
    return -1;
}

static void drain(void *s)
{
    Ct__Envelope *r;
    while ((r = recv_reply(s, 50)))
        ct__msg_free(r);
}

int main(void)
{
    h_init();
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    int port = atoi(strrchr(addr, ':') + 1);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    ct__auth_zmq_client(s); /* the cluster's CURVE keys (common/auth.h) */
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", addr);
    zmq_connect(s, ep);
    if (ping(s)) {
        fprintf(stderr, "%s:%d: the head stopped answering\n", __FILE__, __LINE__);
        h_failures++;
        goto out;
    }

    /* 1. random bytes on a raw TCP connection (not even ZMTP) */
    for (int round = 0; round < 20; round++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
            unsigned char buf[4096];
            size_t n = 1 + rnd() % sizeof buf;
            for (size_t i = 0; i < n; i++)
                buf[i] = (unsigned char)rnd();
            if (round == 0) /* a ZMTP signature, then garbage */
                memcpy(buf, "\xff\0\0\0\0\0\0\0\x01\x7f", 10);
            ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
            (void)w;
        }
        close(fd);
    }
    if (ping(s)) {
        fprintf(stderr, "%s:%d: the head stopped answering\n", __FILE__, __LINE__);
        h_failures++;
        goto out;
    }

    /* 2. random payload frames over a real ZeroMQ connection */
    int errors = 0, sent = 0;
    for (int round = 0; round < 300; round++) {
        unsigned char buf[512];
        size_t n = rnd() % sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)rnd();
        zmq_send(s, buf, n, 0);
        sent++;
    }
    Ct__Envelope *r;
    while ((r = recv_reply(s, 300))) {
        errors += r->body_case == CT__ENVELOPE__BODY_ERROR;
        ct__msg_free(r);
    }
    printf("random frames: %d sent, %d error replies\n", sent, errors);
    CHECK(errors > 0);
    if (ping(s)) {
        fprintf(stderr, "%s:%d: the head stopped answering\n", __FILE__, __LINE__);
        h_failures++;
        goto out;
    }

    /* 3. every truncation of a valid request: undecodable ones get CT_EPROTO back */
    {
        Ct__Envelope e;
        Ct__KvGet g = CT__KV_GET__INIT;
        ct__env_init(&e, 4242, "fuzzer-with-a-long-name", 5000);
        g.key = "some/rendezvous/key";
        g.wait_ms = 0;
        e.body_case = CT__ENVELOPE__BODY_KV_GET;
        e.kv_get = &g;
        size_t n = ct__envelope__get_packed_size(&e);
        unsigned char *full = malloc(n);
        ct__envelope__pack(&e, full);
        int bad = 0, bad_answered = 0, answered = 0;
        for (size_t cut = 1; cut < n; cut++) {
            Ct__Envelope *probe = ct__envelope__unpack(NULL, cut, full);
            int decodable = probe != NULL;
            ct__envelope__free_unpacked(probe, NULL);
            zmq_send(s, full, cut, 0);
            r = recv_reply(s, 1000);
            answered += r != NULL;
            if (!decodable) {
                bad++;
                if (r && r->body_case == CT__ENVELOPE__BODY_ERROR && r->error->code == CT_EPROTO &&
                    strstr(r->error->message, "decode"))
                    bad_answered++;
            }
            ct__msg_free(r);
        }
        printf("truncations: %zu, undecodable %d, answered with EPROTO %d, answered %d\n", n - 1,
               bad, bad_answered, answered);
        CHECK(bad > 0);
        CHECK_EQ_INT(bad_answered, bad);
        free(full);
    }
    if (ping(s)) {
        fprintf(stderr, "%s:%d: the head stopped answering\n", __FILE__, __LINE__);
        h_failures++;
        goto out;
    }

    /* 4. a message of three frames */
    zmq_send(s, "a", 1, ZMQ_SNDMORE);
    zmq_send(s, "b", 1, ZMQ_SNDMORE);
    zmq_send(s, "c", 1, 0);
    r = recv_reply(s, 1000);
    CHECK(r && r->body_case == CT__ENVELOPE__BODY_ERROR && r->error->code == CT_EPROTO);
    ct__msg_free(r);
    if (ping(s)) {
        fprintf(stderr, "%s:%d: the head stopped answering\n", __FILE__, __LINE__);
        h_failures++;
        goto out;
    }

    /* 5. another major version is refused with a clear message */
    {
        Ct__Envelope e;
        Ct__Ping p = CT__PING__INIT;
        ct__env_init(&e, 99, "fuzzer", 5000);
        e.major = 2;
        e.minor = 3;
        e.body_case = CT__ENVELOPE__BODY_PING;
        e.ping = &p;
        CHECK_OK(ct__msg_send(s, NULL, &e, 0));
        r = recv_reply(s, 1000);
        CHECK(r && r->body_case == CT__ENVELOPE__BODY_ERROR);
        if (r && r->body_case == CT__ENVELOPE__BODY_ERROR) {
            CHECK_EQ_INT(r->error->code, CT_EPROTO);
            CHECK_EQ_INT(r->req_id, 99);
            CHECK_STR(r->error->message, "protocol version 2.x from fuzzer, this head speaks 1.x");
        }
        ct__msg_free(r);
    }
    /* 6. well-formed but invalid requests: the error names the field */
    {
        Ct__Envelope e;
        Ct__CreateActor c = CT__CREATE_ACTOR__INIT;
        ct__env_init(&e, 100, "fuzzer", 5000);
        c.class_name = "";
        e.body_case = CT__ENVELOPE__BODY_CREATE_ACTOR;
        e.create_actor = &c;
        CHECK_OK(ct__msg_send(s, NULL, &e, 0));
        r = recv_reply(s, 1000);
        CHECK(r && r->body_case == CT__ENVELOPE__BODY_ERROR &&
              !strcmp(r->error->field, "create_actor.class_name"));
        ct__msg_free(r);
        Ct__KvPut kp = CT__KV_PUT__INIT;
        ct__env_init(&e, 101, "fuzzer", 5000);
        kp.key = "";
        e.body_case = CT__ENVELOPE__BODY_KV_PUT;
        e.kv_put = &kp;
        CHECK_OK(ct__msg_send(s, NULL, &e, 0));
        r = recv_reply(s, 1000);
        CHECK(r && r->body_case == CT__ENVELOPE__BODY_ERROR &&
              strstr(r->error->message, "kv_put.key"));
        ct__msg_free(r);
        /* an expired deadline is dropped */
        Ct__Ping p = CT__PING__INIT;
        ct__env_init(&e, 102, "fuzzer", 0);
        e.deadline_ms = ct__deadline_ms(1) - 60000;
        e.body_case = CT__ENVELOPE__BODY_PING;
        e.ping = &p;
        CHECK_OK(ct__msg_send(s, NULL, &e, 0));
        r = recv_reply(s, 300);
        CHECK(r == NULL);
        ct__msg_free(r);
    }
    drain(s);
    if (ping(s)) {
        fprintf(stderr, "%s:%d: the head stopped answering\n", __FILE__, __LINE__);
        h_failures++;
        goto out;
    }
    CHECK(!h_gone(head));
    /* and a real client still works */
    ct_init_opts io = {.address = addr};
    CHECK_OK(ct_init(&io));
    CHECK_OK(ct_kv_put("after-fuzz", "ok", 3));
    void *v = NULL;
    size_t n = 0;
    CHECK_OK(ct_kv_get("after-fuzz", &v, &n, 1000));
    CHECK_STR((char *)v, "ok");
    free(v);
    ct_shutdown();
out:
    zmq_close(s);
    zmq_ctx_term(ctx);
    h_kill_all();
    CHECK(h_gone(head));
    if (h_failures)
        fprintf(stderr, "test_fuzz: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
