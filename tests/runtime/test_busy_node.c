/* tests/runtime/test_busy_node.c — a node whose main loop is busy longer than the head's
 * dead-after time is not declared dead: its liveness thread keeps heartbeating. The node runs
 * with the test hook node_start_stall_ms=2500 (CT_TEST_FAULTS) (each actor start stalls its main
 * loop 2.5 s, as a slow fetch of the shipped executable would), the head declares nodes dead after
 * 1 s of silence. The actor must start, answer a call, and no NODE_DEAD event may come; then kill
 * -9 of the node is still noticed within 1.5 s. Nothing this test started is left running. */
#include "harness.h"
#include "classes.h"
#include "ct/ct.h"

int main(void)
{
#ifndef CT_FAULTS
    return 77; /* it arms test faults (common/fault.h): a build with CT_FAULTS runs it */
#endif
    register_test_classes();
    ct_serve_if_worker();
    h_init();
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(CT_EVENTS_ALL));
    setenv("CT_TEST_FAULTS", "node_start_stall_ms=2500", 1);
    pid_t node = h_start_node(addr, "--cpus", "2", NULL, NULL, NULL, NULL);
    CHECK(node > 0);
    unsetenv("CT_TEST_FAULTS");
    ct_event ev;
    CHECK_OK(ct_events_next(&ev, 5000));
    CHECK_EQ_INT(ev.type, CT_EVENT_NODE_JOINED);
    double t0 = h_now_ms();
    ct_actor *a = NULL;
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.timeout_ms = 20000}, NULL, 0, &a));
    double took = h_now_ms() - t0;
    CHECK(took >= 2400); /* the stall happened */
    void *res = NULL;
    size_t len = 0;
    long d = 5;
    CHECK_OK(ct_actor_call(a, "add", &d, sizeof d, &res, &len, 5000));
    CHECK_EQ_INT(len, sizeof(long));
    if (res && len == sizeof(long))
        CHECK_EQ_INT(*(long *)res, 5);
    free(res);
    int dead_events = 0;
    while (ct_events_next(&ev, 0) == 0)
        dead_events += ev.type == CT_EVENT_NODE_DEAD;
    CHECK_EQ_INT(dead_events, 0);
    /* a node that really dies is still noticed at the usual speed */
    t0 = h_now_ms();
    kill(node, SIGKILL);
    int seen = 0;
    while (!seen && h_now_ms() - t0 < 3000)
        if (ct_events_next(&ev, 100) == 0 && ev.type == CT_EVENT_NODE_DEAD)
            seen = 1;
    CHECK(seen);
    CHECK(h_now_ms() - t0 < 1500);
    fprintf(stderr,
            "actor start with a 2.5 s stall: %.0f ms; node declared dead %.0f ms after kill -9\n",
            took, h_now_ms() - t0);
    ct_actor_release(&a);
    ct_shutdown();
    h_kill_all();
    CHECK_EQ_INT(h_leftovers(3000), 0);
    if (h_failures)
        fprintf(stderr, "test_busy_node: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
