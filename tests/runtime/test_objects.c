/* tests/runtime/test_objects.c — the object store in a running cluster: a head and 3 ct-node
 * processes (A, B, C), each with its own shard. A 256 MiB object put on A is read on C with
 * identical bytes (C pulls it; C's pulls run with a corrupted chunk, the test fault
 * xfer_corrupt_chunk=2, that is detected and fetched again); an object put on A with replicas=2
 * (copy on B) is still readable from C after A is killed with SIGKILL, and the head has C make the
 * lost second copy without being asked; the directory follows; unknown ids, wrong id sizes and
 * malformed requests get clear errors and the nodes keep serving; freed objects are gone from every
 * node; two actors on C getting one object at once cause one pull; nodes leave nothing in /dev/shm
 * or /tmp. */
#include "harness.h"
#include "common/auth.h"
#include "classes.h"
#include "objclasses.h"
#include <sys/stat.h>
#include <zmq.h>
#include "ct/ct.h"
#include "objectstore/store.h"
#include "proto/msg.h"

static pid_t start_node_env(const char *addr, const char *res, const char *log)
{
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        if (log) {
            setenv("CT_TEST_FAULTS", "xfer_corrupt_chunk=2", 1);
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd >= 0)
                dup2(fd, 2);
        }
        char *argv[] = {
            (char *)h_bin("ct-node"), "--head", (char *)addr, "--resources", (char *)res,
            "--store-memory",         "1G",     NULL};
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    return pid;
}

static int wait_event(ct_event_type type, char *node, int timeout_ms)
{
    ct_event ev;
    double until = h_now_ms() + timeout_ms;
    while (h_now_ms() < until)
        if (!ct_events_next(&ev, 200) && ev.type == type) {
            if (node)
                snprintf(node, 32, "%s", ev.node_id);
            return 0;
        }
    return -1;
}

static ct_actor *actor_on(const char *res)
{
    ct_resources r = {.bundle = -1, .timeout_ms = 20000};
    r.custom[0].name = res;
    r.custom[0].amount = 1;
    ct_actor *a = NULL;
    CHECK_OK(ct_actor_create("ObjActor", &r, NULL, 0, &a));
    return a;
}

static int put_on(ct_actor *a, uint64_t size, int replicas, uint32_t seed, const char *pref,
                  ct_object_id *id)
{
    obj_put_args pa = {.size = size, .replicas = replicas, .seed = seed};
    snprintf(pa.node, sizeof pa.node, "%s", pref ? pref : "");
    void *res = NULL;
    size_t n = 0;
    int rc = ct_actor_call(a, "put", &pa, sizeof pa, &res, &n, 60000);
    if (!rc && n == sizeof *id)
        memcpy(id, res, sizeof *id);
    else if (!rc)
        rc = CT_EPROTO;
    free(res);
    return rc;
}

static obj_get_reply get_on(ct_actor *a, const ct_object_id *id, uint32_t seed)
{
    obj_get_args ga = {.id = *id, .seed = seed, .timeout_ms = 30000};
    obj_get_reply r = {.rc = CT_EPROTO, .mismatch = -2};
    void *res = NULL;
    size_t n = 0;
    int rc = ct_actor_call(a, "get", &ga, sizeof ga, &res, &n, 90000);
    if (rc)
        r.rc = rc;
    else if (n == sizeof r)
        memcpy(&r, res, sizeof r);
    free(res);
    return r;
}

static int holders(const ct_object_id *id, char (*nodes)[32])
{
    int n = -1;
    if (ct_object_nodes(id, nodes, 8, &n, NULL))
        return -1;
    return n;
}

static int has(char (*nodes)[32], int n, const char *node)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(nodes[i], node))
            return 1;
    return 0;
}

/* The holders of id once they are want in number and include a and b (when given), else as
 * they are after 10 s. A node reports what its shard gained (ObjAdded, ObjPullDone) after the
 * shard has it, so a read right after a get, a put or a copy may come before the report. */
static int holders_wait(const ct_object_id *id, char (*nodes)[32], int want, const char *a,
                        const char *b)
{
    double until = h_now_ms() + 10000;
    for (;;) {
        int n = holders(id, nodes);
        if ((n == want && (!a || has(nodes, n, a)) && (!b || has(nodes, n, b))) ||
            h_now_ms() > until)
            return n;
        usleep(10000);
    }
}

/* 1 when the shard of node pid has id sealed (asked over its unix socket). */
static int store_has(pid_t pid, const ct_object_id *id)
{
    char name[64];
    snprintf(name, sizeof name, "node.%d", (int)pid);
    ct_store_client *c = ct_store_client_new(name);
    if (!c)
        return -1;
    int r = ct_store_client_contains(c, id);
    ct_store_client_destroy(&c);
    return r;
}

static int shm_exists(pid_t pid)
{
    char p[96];
    snprintf(p, sizeof p, "/dev/shm/ct.node.%d.arena", (int)pid);
    struct stat st;
    return stat(p, &st) == 0 || h_node_dir_exists(pid);
}

/* One raw request to the head; returns the reply (caller frees) or NULL. */
static Ct__Envelope *raw_head(void *ctx, const char *addr, Ct__Envelope *e)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    ct__auth_zmq_client(s); /* the cluster's CURVE keys (common/auth.h) */
    int zero = 0, to = 3000;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", addr);
    zmq_connect(s, ep);
    Ct__Envelope *rep = NULL;
    if (!ct__msg_send(s, NULL, e, 0))
        ct__msg_recv(s, NULL, &rep, 0, "test");
    zmq_close(s);
    return rep;
}

static void error_cases(const char *addr, const char *node_c, ct_actor *c,
                        const ct_object_id *known, uint32_t seed)
{
    ct_object_id unknown;
    memset(&unknown, 0x5a, sizeof unknown);
    ct_object_view v;
    double t0 = h_now_ms();
    CHECK_EQ_INT(ct_get(&unknown, 0, &v), CT_ENOENT);
    CHECK(strstr(ct_last_error(), "unknown id") != NULL);
    CHECK(h_now_ms() - t0 < 2000);
    CHECK_EQ_INT(ct_get(&unknown, 300, &v), CT_ETIMEDOUT);
    CHECK(strstr(ct_last_error(), "no node holds it") != NULL);
    CHECK_EQ_INT(ct_free(&unknown), CT_ENOENT);
    CHECK_EQ_INT(ct_object_nodes(&unknown, NULL, 0, NULL, NULL), CT_ENOENT);
    uint8_t args[30] = {0};
    ct_object_id id;
    CHECK_EQ_INT(ct_object_id_from_args(args, sizeof args, 1, &id), CT_EINVAL);
    CHECK_OK(ct_object_id_from_args(args, sizeof args, 0, &id));

    /* raw requests: a 7-byte id, and the transfer server asked out of range and garbage */
    void *ctx = zmq_ctx_new();
    Ct__Envelope e, *rep;
    Ct__ObjFetch f = CT__OBJ_FETCH__INIT;
    uint8_t seven[7] = {1, 2, 3, 4, 5, 6, 7};
    ct__env_init(&e, 1, "test", 3000);
    f.object_id.data = seven;
    f.object_id.len = 7;
    f.node_id = (char *)node_c;
    e.body_case = CT__ENVELOPE__BODY_OBJ_FETCH;
    e.obj_fetch = &f;
    rep = raw_head(ctx, addr, &e);
    CHECK(rep && rep->body_case == CT__ENVELOPE__BODY_ERROR);
    if (rep && rep->body_case == CT__ENVELOPE__BODY_ERROR) {
        CHECK_EQ_INT(rep->error->code, CT_EINVAL);
        CHECK_STR(rep->error->field, "obj_fetch.object_id");
    }
    ct__msg_free(rep);
    Ct__ObjNodes q = CT__OBJ_NODES__INIT;
    ct__env_init(&e, 2, "test", 3000);
    e.body_case = CT__ENVELOPE__BODY_OBJ_NODES;
    e.obj_nodes = &q;
    rep = raw_head(ctx, addr, &e);
    CHECK(rep && rep->body_case == CT__ENVELOPE__BODY_OBJ_NODES_REPLY);
    const char *xfer = NULL;
    for (size_t i = 0; rep && rep->body_case == CT__ENVELOPE__BODY_OBJ_NODES_REPLY &&
                       i < rep->obj_nodes_reply->n_nodes;
         i++)
        if (!strcmp(rep->obj_nodes_reply->nodes[i]->node_id, node_c))
            xfer = rep->obj_nodes_reply->nodes[i]->xfer_address;
    CHECK(xfer != NULL);
    if (xfer) {
        void *s = zmq_socket(ctx, ZMQ_DEALER);
        ct__auth_zmq_client(s); /* the cluster's CURVE keys (common/auth.h) */
        int zero = 0, to = 3000;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
        zmq_connect(s, xfer);
        zmq_send(s, "garbage!", 8, 0); /* dropped (or refused), the server goes on */
        Ct__ObjXfer x = CT__OBJ_XFER__INIT;
        Ct__ObjChunk ch = CT__OBJ_CHUNK__INIT;
        x.major = CT_PROTO_MAJOR;
        x.req_id = 7;
        x.sender = "test";
        ch.object_id.data = (uint8_t *)known->b;
        ch.object_id.len = 20;
        ch.offset = 1ull << 40; /* past the end */
        ch.size = 4096;
        x.body_case = CT__OBJ_XFER__BODY_CHUNK;
        x.chunk = &ch;
        uint8_t buf[256];
        size_t n = ct__obj_xfer__pack(&x, buf);
        zmq_send(s, buf, n, 0);
        int code = 0;
        for (int k = 0; k < 3 && !code; k++) {
            int r = zmq_recv(s, buf, sizeof buf, 0);
            if (r < 0)
                break;
            Ct__ObjXfer *rx = ct__obj_xfer__unpack(NULL, r, buf);
            if (rx && rx->req_id == 7 && rx->body_case == CT__OBJ_XFER__BODY_ERROR)
                code = rx->error->code;
            if (rx)
                ct__obj_xfer__free_unpacked(rx, NULL);
        }
        CHECK_EQ_INT(code, CT_ERANGE);
        zmq_close(s);
    }
    ct__msg_free(rep);
    zmq_ctx_term(ctx);
    /* the node still serves: C reads the known object again */
    obj_get_reply r = get_on(c, known, seed);
    CHECK_EQ_INT(r.rc, 0);
    CHECK_EQ_INT(r.mismatch, -1);
}

int main(void)
{
#ifndef CT_FAULTS
    return 77; /* it arms test faults (common/fault.h): a build with CT_FAULTS runs it */
#endif
    register_test_classes();
    register_obj_classes();
    ct_serve_if_worker();
    h_init();
    char addr[128], log[64];
    snprintf(log, sizeof log, "/tmp/ct-test-objects.%d.log", (int)getpid());
    /* the killed node is seen dead by its death-watch connection, at once; heartbeats only
     * judge silent hosts, after the default 10 s (a 1 s bound was crossed by live nodes whose
     * liveness thread was starved while pulling 256 MiB on a loaded machine) */
    pid_t head = h_start_head(addr, sizeof addr, "100", "10000");
    if (head < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe((1u << CT_EVENT_NODE_JOINED) | (1u << CT_EVENT_NODE_DEAD)));
    const char *res[3] = {"nodeA=1", "nodeB=1", "nodeC=2"};
    pid_t np[3];
    char ids[3][32];
    for (int i = 0; i < 3; i++) {
        np[i] = start_node_env(addr, res[i], i == 2 ? log : NULL);
        CHECK_EQ_INT(wait_event(CT_EVENT_NODE_JOINED, ids[i], 5000), 0);
    }
    ct_actor *a = actor_on("nodeA"), *c = actor_on("nodeC"), *c2 = actor_on("nodeC");
    if (!a || !c || !c2)
        return 1;

    /* 256 MiB put on A, read on C */
    ct_object_id big, rep2;
    const uint64_t big_size = 256ull << 20;
    double t0 = h_now_ms();
    CHECK_OK(put_on(a, big_size, 1, 11, NULL, &big));
    double t1 = h_now_ms();
    obj_get_reply r = get_on(c, &big, 11);
    double t2 = h_now_ms();
    CHECK_EQ_INT(r.rc, 0);
    CHECK_EQ_INT(r.size, big_size);
    CHECK_EQ_INT(r.mismatch, -1);
    CHECK_STR(r.node, ids[2]);
    fprintf(stderr, "256 MiB: put on A %.0f ms, get on C (pull + check) %.0f ms\n", t1 - t0,
            t2 - t1);
    char nodes[8][32];
    int nh = holders_wait(&big, nodes, 2, ids[0], ids[2]);
    CHECK_EQ_INT(nh, 2);
    CHECK(has(nodes, nh, ids[0]) && has(nodes, nh, ids[2]));
    uint64_t size = 0;
    CHECK_OK(ct_object_nodes(&big, NULL, 0, NULL, &size));
    CHECK_EQ_INT(size, big_size);
    /* the corrupted chunk of C's pull was detected and fetched again */
    char cmd[200];
    snprintf(cmd, sizeof cmd, "grep -c 'bad chunks' %s", log);
    char *out = h_capture(cmd);
    int pulls0 = out ? atoi(out) : 0;
    CHECK(pulls0 >= 1);
    free(out);

    /* two actors on C get one object at once: one pull (each pull on C logs its bad chunk) */
    ct_object_id dup;
    CHECK_OK(put_on(a, 64ull << 20, 1, 33, NULL, &dup));
    obj_get_args ga = {.id = dup, .seed = 33, .timeout_ms = 30000};
    ct_future *f1 = NULL, *f2 = NULL;
    CHECK_OK(ct_actor_call_async(c, "get", &ga, sizeof ga, &f1));
    CHECK_OK(ct_actor_call_async(c2, "get", &ga, sizeof ga, &f2));
    ct_future *fs[2] = {f1, f2};
    for (int i = 0; i < 2; i++) {
        void *res = NULL;
        size_t n = 0;
        CHECK_OK(ct_future_wait(fs[i], 60000, &res, &n));
        obj_get_reply gr = {.rc = CT_EPROTO};
        if (n == sizeof gr)
            memcpy(&gr, res, sizeof gr);
        CHECK_EQ_INT(gr.rc, 0);
        CHECK_EQ_INT(gr.mismatch, -1);
        free(res);
        ct_future_destroy(&fs[i]);
    }
    out = h_capture(cmd);
    CHECK_EQ_INT(out ? atoi(out) : 0, pulls0 + 1);
    free(out);
    CHECK_OK(ct_free(&dup));

    /* replicated put: copies on A and B */
    CHECK_OK(put_on(a, 32ull << 20, 2, 22, ids[1], &rep2));
    nh = holders_wait(&rep2, nodes, 2, ids[0], ids[1]);
    CHECK_EQ_INT(nh, 2);
    CHECK(has(nodes, nh, ids[0]) && has(nodes, nh, ids[1]));
    CHECK_EQ_INT(store_has(np[1], &rep2), 1);

    error_cases(addr, ids[2], c, &big, 11);

    /* kill -9 A: the replica on B serves C */
    kill(np[0], SIGKILL);
    char dead[32] = "";
    CHECK_EQ_INT(wait_event(CT_EVENT_NODE_DEAD, dead, 5000), 0);
    CHECK_STR(dead, ids[0]);
    /* rep2 asked for 2 copies and lost one: the head has C copy it from B, unasked */
    double until = h_now_ms() + 5000;
    while (h_now_ms() < until && !store_has(np[2], &rep2))
        usleep(10000);
    CHECK_EQ_INT(store_has(np[2], &rep2), 1);
    /* the shard has it before the head has C's report of the copy: wait for the report */
    nh = holders_wait(&rep2, nodes, 2, ids[1], ids[2]);
    CHECK_EQ_INT(nh, 2);
    CHECK(has(nodes, nh, ids[1]) && has(nodes, nh, ids[2]));
    r = get_on(c, &rep2, 22);
    CHECK_EQ_INT(r.rc, 0);
    CHECK_EQ_INT(r.size, 32ull << 20);
    CHECK_EQ_INT(r.mismatch, -1);
    nh = holders_wait(&rep2, nodes, 2, ids[1], ids[2]);
    CHECK_EQ_INT(nh, 2);
    /* the big object lost its copy on A but C's stays */
    nh = holders_wait(&big, nodes, 1, ids[2], NULL);
    CHECK_EQ_INT(nh, 1);

    /* the driver reads through its own node (B or C) too */
    ct_object_view v;
    CHECK_OK(ct_get(&rep2, 10000, &v));
    CHECK_EQ_INT(v.size, 32ull << 20);
    CHECK_EQ_INT(v.data ? obj_check(v.data, v.size, 22) : -2, -1);
    ct_object_release(&v);
    ct_object_release(&v); /* empty: no-op */

    /* free: gone from every node */
    CHECK_OK(ct_free(&big));
    CHECK_OK(ct_free(&rep2));
    CHECK_EQ_INT(ct_object_nodes(&big, NULL, 0, NULL, NULL), CT_ENOENT);
    until = h_now_ms() + 3000;
    while (h_now_ms() < until &&
           (store_has(np[1], &rep2) || store_has(np[2], &rep2) || store_has(np[2], &big)))
        usleep(10000);
    CHECK_EQ_INT(store_has(np[1], &rep2), 0);
    CHECK_EQ_INT(store_has(np[2], &rep2), 0);
    CHECK_EQ_INT(store_has(np[2], &big), 0);
    CHECK_EQ_INT(ct_get(&big, 0, &v), CT_ENOENT);

    ct_actor_release(&a);
    ct_actor_release(&c);
    ct_actor_release(&c2);
    ct_shutdown();
    /* B and C end cleanly and remove their shards; A's leftovers go with the purge */
    kill(np[1], SIGTERM);
    kill(np[2], SIGTERM);
    CHECK(h_wait_gone(np[1], 5000) && h_wait_gone(np[2], 5000));
    waitpid(np[1], NULL, 0);
    waitpid(np[2], NULL, 0);
    CHECK_EQ_INT(shm_exists(np[1]), 0);
    CHECK_EQ_INT(shm_exists(np[2]), 0);
    h_kill_all();
    CHECK_EQ_INT(shm_exists(np[0]), 0);
    CHECK_EQ_INT(h_leftovers(3000), 0);
    unlink(log);
    if (h_failures)
        fprintf(stderr, "test_objects: %d failures\n", h_failures);
    return h_failures ? 1 : 0;
}
