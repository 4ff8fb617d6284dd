/* tests/runtime/test_spawn.c — bursts of actor creation on an embedded cluster: many actors
 * created at once with ct_actor_create_many, each with its own arguments bytes (60 KiB, so the
 * start requests fill the node -> zygote socket buffers: a node that blocked on them used to
 * deadlock with its zygotes and miss its heartbeats). Checks: every actor serves and answers with
 * its own state, pids are distinct, a kill -9 of one in the crowd still gives its death event
 * from the node's death watch (it carries the signal; a node stalled by the burst would send
 * none; the time it took is printed, not asserted), a second burst after the first works, a burst
 * of a class without create (readiness told by the zygote) serves, and ct_shutdown leaves no
 * process behind. Not here: placement and resources (test_cluster.c), failure detection
 * (test_failure.c). */
#include "harness.h"
#include "classes.h"
#include "ct/ct.h"

#if defined(__SANITIZE_ADDRESS__)
#define BURST 300 /* ASan processes fork slowly */
#else
#define BURST 600
#endif
#define DEATH_WAIT_MS 20000 /* a death event that never comes; not a speed limit */

/* Creates n Counter actors with 60 KiB of args each (Counter keeps its count at 0 unless the
 * args are exactly 8 bytes, so every actor starts from 0). */
static int burst(int n, ct_actor **out)
{
    static char args[60 * 1024];
    memset(args, 'x', sizeof args);
    double t0 = h_now_ms();
    int rc = ct_actor_create_many("Counter", &(ct_resources){.bundle = -1, .timeout_ms = 60000},
                                  args, sizeof args, n, out);
    fprintf(stderr, "test_spawn: %d actors in %.0f ms\n", n, h_now_ms() - t0);
    return rc;
}

/* A class without create: the zygote's SPAWNED record is its readiness (worker.c). Each of n
 * answers "pid" with its own pid; a kill -9 of one gives its death event within 200 ms. */
static void plain_burst(int n)
{
    ct_actor **p = calloc(n, sizeof *p);
    if (!p)
        return;
    CHECK_OK(ct_actor_create_many("Plain", NULL, NULL, 0, n, p));
    int bad = 0;
    for (int i = 0; i < n && p[i]; i++) {
        void *res = NULL;
        size_t len = 0;
        long v = -1;
        int rc = ct_actor_call(p[i], "pid", NULL, 0, &res, &len, 10000);
        if (!rc && len == sizeof v)
            memcpy(&v, res, sizeof v);
        if (rc || v != ct_actor_pid(p[i])) {
            if (bad++ < 5)
                fprintf(stderr, "test_spawn: Plain %d: rc %d pid %ld, handle says %d\n", i, rc, v,
                        ct_actor_pid(p[i]));
        }
        free(res);
    }
    CHECK_EQ_INT(bad, 0);
    if (p[n - 1]) {
        pid_t vp = ct_actor_pid(p[n - 1]);
        double t0 = h_now_ms();
        CHECK_EQ_INT(kill(vp, SIGKILL), 0);
        ct_event ev;
        int got = 0;
        while (!got && h_now_ms() - t0 < DEATH_WAIT_MS)
            if (!ct_events_next(&ev, 100))
                got = ev.type == CT_EVENT_ACTOR_DEAD && ev.pid == vp;
        CHECK(got);
        CHECK_EQ_INT(got ? ev.term_signal : 0, SIGKILL);
        fprintf(stderr, "test_spawn: death event in the second burst after %.0f ms\n",
                h_now_ms() - t0);
    }
    for (int i = 0; i < n; i++)
        ct_actor_release(&p[i]);
    free(p);
}

int main(void)
{
    register_test_classes();
    ct_actor_class_register("Plain", &(ct_actor_class){.methods = {{"pid", counter_pid}}});
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(NULL));
    /* too late: actors, this program again, stop at ct_init and would never see it */
    CHECK_EQ_INT(
        ct_actor_class_register("Late", &(ct_actor_class){.methods = {{"pid", counter_pid}}}),
        CT_EINVAL);
    CHECK(strstr(ct_last_error(), "after ct_init()") != NULL);
    ct_actor **a = calloc(BURST, sizeof *a);
    if (!a)
        return 1;
    CHECK_OK(burst(BURST, a));
    /* each serves and holds its own state: add i, twice */
    ct_future **f = calloc(BURST, sizeof *f);
    for (int i = 0; i < BURST && a[i]; i++) {
        long d = i;
        CHECK_OK(ct_actor_call_async(a[i], "add", &d, sizeof d, &f[i]));
    }
    int bad = 0;
    for (int i = 0; i < BURST && f[i]; i++) {
        void *res = NULL;
        size_t len = 0;
        int rc = ct_future_wait(f[i], 20000, &res, &len);
        long v = -1;
        if (!rc && len == sizeof v)
            memcpy(&v, res, sizeof v);
        if (rc || v != i) {
            if (bad++ < 5)
                fprintf(stderr, "test_spawn: actor %d: rc %d value %ld, expected %d\n", i, rc, v,
                        i);
        }
        free(res);
        ct_future_destroy(&f[i]);
    }
    CHECK_EQ_INT(bad, 0);
    /* distinct pids */
    int dup = 0;
    for (int i = 1; i < BURST && a[i]; i++)
        for (int j = 0; j < i; j++)
            dup += ct_actor_pid(a[i]) == ct_actor_pid(a[j]);
    CHECK_EQ_INT(dup, 0);
    /* kill -9 of one among many: its death event, from the death watch */
    int victim = BURST / 2;
    if (a[victim]) {
        pid_t vp = ct_actor_pid(a[victim]);
        double t0 = h_now_ms();
        CHECK_EQ_INT(kill(vp, SIGKILL), 0);
        ct_event ev;
        int got = 0;
        while (!got && h_now_ms() - t0 < DEATH_WAIT_MS) {
            if (ct_events_next(&ev, 100))
                continue;
            got = ev.type == CT_EVENT_ACTOR_DEAD && ev.pid == vp;
        }
        CHECK(got);
        fprintf(stderr, "test_spawn: death event after %.0f ms\n", h_now_ms() - t0);
        CHECK_EQ_INT(got ? ev.term_signal : 0, SIGKILL);
    }
    /* many deaths at once: each is found (the node's index survives removals) and reported */
    int nk = 0, seen = 0;
    pid_t killed[BURST / 12 + 1];
    for (int i = 1; i < BURST; i += 12)
        if (a[i] && i != victim && kill(ct_actor_pid(a[i]), SIGKILL) == 0)
            killed[nk++] = ct_actor_pid(a[i]);
    double tk = h_now_ms();
    while (seen < nk && h_now_ms() - tk < 5000) {
        ct_event ev;
        if (ct_events_next(&ev, 100) || ev.type != CT_EVENT_ACTOR_DEAD)
            continue;
        for (int j = 0; j < nk; j++)
            if (killed[j] == ev.pid) {
                killed[j] = -1;
                seen++;
            }
    }
    CHECK_EQ_INT(seen, nk);
    /* a second burst, while the first lives */
    ct_actor **b = calloc(BURST / 4, sizeof *b);
    CHECK_OK(burst(BURST / 4, b));
    for (int i = 0; i < BURST / 4 && b[i]; i += 37) {
        void *res = NULL;
        size_t len = 0;
        long d = 5, v = -1;
        CHECK_OK(ct_actor_call(b[i], "add", &d, sizeof d, &res, &len, 10000));
        if (len == sizeof v)
            memcpy(&v, res, sizeof v);
        CHECK_EQ_INT(v, 5);
        free(res);
    }
    plain_burst(BURST / 4);
    pid_t some = a[0] ? ct_actor_pid(a[0]) : 0;
    for (int i = 0; i < BURST; i++)
        ct_actor_release(&a[i]);
    for (int i = 0; i < BURST / 4; i++)
        ct_actor_release(&b[i]);
    free(a);
    free(b);
    free(f);
    ct_shutdown();
    if (some)
        CHECK(h_wait_gone(some, 3000));
    CHECK_EQ_INT(h_leftovers(5000), 0);
    if (h_failures)
        fprintf(stderr, "test_spawn: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
