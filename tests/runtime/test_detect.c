/* tests/runtime/test_detect.c — failure detection that is fast, and never wrong about a live
 * process. A real ct-head (heartbeat 100 ms, silent nodes dead after 1.5 s) and two ct-nodes:
 * - a head stalled (SIGSTOP) for 2.5 s, longer than the dead-after time, blames nobody: no
 *   NODE_DEAD event follows its SIGCONT, and both nodes are still alive in `ctup status`;
 * - kill -9 of a node: NODE_DEAD arrives by the death watch (its reason says the process
 *   ended), long before any heartbeat timeout could fire; the time is printed, and asserted
 *   only against a generous 10 s;
 * - SIGSTOP of a node (a silent host): NODE_DEAD after the heartbeat timeout (reason: no
 *   heartbeat), its actor reported dead; after SIGCONT the same process joins again under a
 *   new node id (NODE_JOINED with its pid), the old actor's process is killed by the node, the
 *   new id is alive in `ctup status`, and actors run there, objects included (a new shard).
 * Nothing this test started is left running. */
#include "harness.h"
#include "classes.h"
#include "objclasses.h"
#include "ct/ct.h"

#define DEAD_MS "1500"

/* The next event of type (and node, when given) within timeout_ms: 0, else -1. */
static int next_event(ct_event_type type, const char *node, ct_event *ev, int timeout_ms)
{
    double until = h_now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(until - h_now_ms());
        if (left <= 0 || ct_events_next(ev, left))
            return -1;
        if (ev->type == type && (!node || !strcmp(ev->node_id, node)))
            return 0;
    }
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static char *status(const char *addr)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "%s status --address %s", h_bin("ctup"), addr);
    return h_capture(cmd);
}

/* Whether node id's row in `ctup status` says alive (the NODE table: "<id> <host> ALIVE ..."). */
static bool node_alive(const char *out, const char *id)
{
    char prefix[40];
    snprintf(prefix, sizeof prefix, "%-17s ", id);
    const char *row = out ? h_line_starting(out, prefix) : NULL;
    const char *eol = row ? strchr(row, '\n') : NULL;
    const char *alive = row ? strstr(row, " ALIVE") : NULL;
    return alive && (!eol || alive < eol);
}

int main(void)
{
    register_test_classes();
    register_obj_classes();
    ct_serve_if_worker();
    h_init();
    alarm(300);
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", DEAD_MS);
    if (head < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(CT_EVENTS_ALL));
    ct_event ev;
    char id1[32] = "", id2[32] = "";
    /* the nodes give a stalled head 10 s (their own head-dead time) */
    pid_t n1 = h_start_node(addr, "--resources", "left=4", "--head-dead-after-ms", "10000",
                            "--store-memory", "256M");
    CHECK_OK(next_event(CT_EVENT_NODE_JOINED, NULL, &ev, 10000));
    CHECK_EQ_INT(ev.pid, n1);
    snprintf(id1, sizeof id1, "%s", ev.node_id);
    pid_t n2 = h_start_node(addr, "--resources", "right=4", "--head-dead-after-ms", "10000",
                            "--store-memory", "256M");
    CHECK_OK(next_event(CT_EVENT_NODE_JOINED, NULL, &ev, 10000));
    CHECK_EQ_INT(ev.pid, n2);
    snprintf(id2, sizeof id2, "%s", ev.node_id);
    if (!h_is_node_id(id1) || !h_is_node_id(id2))
        return h_finish_actors(NULL, 0, "test_detect");

    /* 1. the head stalls for longer than the dead-after time: nobody is blamed */
    CHECK_OK(kill(head, SIGSTOP));
    usleep(2500000);
    CHECK_OK(kill(head, SIGCONT));
    usleep(1000000); /* time for a wrong verdict to show */
    int dead = 0;
    while (ct_events_next(&ev, 0) == 0)
        if (ev.type == CT_EVENT_NODE_DEAD) {
            fprintf(stderr, "after a head stall: NODE_DEAD %s (%s)\n", ev.node_id, ev.reason);
            dead++;
        }
    CHECK_EQ_INT(dead, 0);
    char *out = status(addr);
    CHECK(out && strstr(out, "2 nodes (2 alive)"));
    free(out);

    /* 2. kill -9 of node 2: seen by the death watch, at once */
    ct_actor *r = h_actor_with("Counter", "right", 20000);
    pid_t rpid = r ? ct_actor_pid(r) : 0;
    int64_t k0 = mono_ns();
    CHECK_OK(kill(n2, SIGKILL));
    CHECK_OK(next_event(CT_EVENT_NODE_DEAD, id2, &ev, 10000));
    double kill_ms = (ev.received_ns - k0) / 1e6;
    printf("node declared dead %.1f ms after kill -9 (heartbeat timeout %s ms)\n", kill_ms,
           DEAD_MS);
    CHECK(strstr(ev.reason, "process ended") != NULL);
    if (!strstr(ev.reason, "process ended"))
        fprintf(stderr, "reason: %s\n", ev.reason);
    CHECK(r && ct_actor_is_dead(r));
    CHECK(rpid > 0 && h_wait_gone(rpid, 5000));
    ct_actor_release(&r);

    /* 3. SIGSTOP of node 1 (a silent host): dead after the timeout; after SIGCONT it joins
     * again as a new node */
    ct_actor *x = h_actor_with("Counter", "left", 20000);
    pid_t xpid = x ? ct_actor_pid(x) : 0;
    CHECK(xpid > 0);
    int64_t s0 = mono_ns();
    CHECK_OK(kill(n1, SIGSTOP));
    CHECK_OK(next_event(CT_EVENT_NODE_DEAD, id1, &ev, 20000));
    double stop_ms = (ev.received_ns - s0) / 1e6;
    printf("stopped node declared dead %.0f ms after SIGSTOP (timeout %s ms)\n", stop_ms, DEAD_MS);
    CHECK(stop_ms >= atoi(DEAD_MS));
    CHECK(strstr(ev.reason, "no heartbeat") != NULL);
    CHECK(x && ct_actor_is_dead(x));
    CHECK(!h_gone(xpid)); /* the node is stopped, not its actor: it still runs */
    int64_t c0 = mono_ns();
    CHECK_OK(kill(n1, SIGCONT));
    CHECK_OK(next_event(CT_EVENT_NODE_JOINED, NULL, &ev, 20000));
    printf("node joined again %.0f ms after SIGCONT as %s (was %s)\n", (ev.received_ns - c0) / 1e6,
           ev.node_id, id1);
    CHECK_EQ_INT(ev.pid, n1);
    char id3[32];
    snprintf(id3, sizeof id3, "%s", ev.node_id);
    CHECK(h_is_node_id(id3) && strcmp(id3, id1) != 0);
    CHECK(!h_gone(n1));
    CHECK(h_wait_gone(xpid, 5000)); /* its old actor, counted lost, was killed by the node */
    ct_actor_release(&x);
    out = status(addr);
    CHECK(out && node_alive(out, id3));
    CHECK(out && !node_alive(out, id1));
    if (out && !node_alive(out, id3))
        fprintf(stderr, "%s", out);
    free(out);
    /* it runs actors, under its new id, with a working store */
    ct_actor *y = h_actor_with("Counter", "left", 20000);
    if (y) {
        char *nd = NULL;
        size_t n = 0;
        CHECK_OK(ct_actor_call(y, "where", NULL, 0, (void **)&nd, &n, 10000));
        CHECK_STR(nd, id3);
        free(nd);
        long d = 7, *v = NULL;
        CHECK_OK(ct_actor_call(y, "add", &d, sizeof d, (void **)&v, &n, 10000));
        CHECK_EQ_INT(v && n == sizeof *v ? *v : -1, 7);
        free(v);
    }
    ct_actor *o = h_actor_with("ObjActor", "left", 20000);
    if (o) {
        obj_put_args pa = {.size = 8 << 20, .replicas = 1, .seed = 5};
        void *res = NULL;
        size_t n = 0;
        CHECK_OK(ct_actor_call(o, "put", &pa, sizeof pa, &res, &n, 30000));
        obj_get_args ga = {.seed = 5, .timeout_ms = 10000};
        if (res && n == sizeof ga.id)
            memcpy(&ga.id, res, sizeof ga.id);
        free(res);
        res = NULL;
        CHECK_OK(ct_actor_call(o, "get", &ga, sizeof ga, &res, &n, 30000));
        obj_get_reply gr = {.rc = CT_EPROTO};
        if (res && n == sizeof gr)
            memcpy(&gr, res, sizeof gr);
        free(res);
        CHECK_EQ_INT(gr.rc, 0);
        CHECK_EQ_INT(gr.mismatch, -1);
        CHECK_STR(gr.node, id3);
    }
    ct_actor *all[2] = {y, o};
    return h_finish_actors(all, 2, "test_detect");
}
