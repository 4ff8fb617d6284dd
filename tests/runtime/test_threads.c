/* tests/runtime/test_threads.c — waiting calls do not block other threads' calls: while one
 * thread waits in ct_kv_get for a key that appears later, another in an actor call that would
 * sleep for minutes and a third in ct_events_next, the main thread's ct_kv_put, actor calls and
 * ct_put/ct_get all complete; then each waiter gets what it waited for, from what the main thread
 * does next. Shown by order, not by time: every waiter is still waiting when the main thread's
 * rounds are done (had a round queued behind one of them, it could not have finished first),
 * and each ends only by the main thread's later act. Embedded cluster. */
#include "harness.h"
#include <pthread.h>
#include <stdatomic.h>
#include "classes.h"
#include "ct/ct.h"

static ct_actor *sleeper, *victim;
static _Atomic bool kv_done, sleep_done, event_done;
static int rc_kv = -1, rc_sleep = -1, rc_event = -1;
static char kv_val[16];
static ct_event ev;

static void *kv_thread(void *arg)
{
    (void)arg;
    void *v = NULL;
    size_t n = 0;
    rc_kv = ct_kv_get("late", &v, &n, 120000);
    kv_done = true;
    if (!rc_kv)
        snprintf(kv_val, sizeof kv_val, "%.*s", (int)n, (char *)v);
    free(v);
    return NULL;
}

static void *sleep_thread(void *arg)
{
    (void)arg;
    int ms = 300000; /* ended by the sleeper's kill */
    rc_sleep = ct_actor_call(sleeper, "sleep", &ms, sizeof ms, NULL, NULL, 600000);
    sleep_done = true;
    return NULL;
}

static void *event_thread(void *arg)
{
    (void)arg;
    double until = h_now_ms() + 120000;
    do
        rc_event = ct_events_next(&ev, 200);
    while ((rc_event || ev.type != CT_EVENT_ACTOR_DEAD) && h_now_ms() < until);
    event_done = true;
    return NULL;
}

int main(void)
{
    register_test_classes();
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 4}));
    ct_actor *counter = NULL;
    CHECK_OK(ct_actor_create("Counter", NULL, NULL, 0, &sleeper));
    CHECK_OK(ct_actor_create("Counter", NULL, NULL, 0, &victim));
    CHECK_OK(ct_actor_create("Counter", NULL, NULL, 0, &counter));
    if (!sleeper || !victim || !counter)
        return 1;
    pthread_t th[3];
    pthread_create(&th[0], NULL, kv_thread, NULL);
    pthread_create(&th[1], NULL, sleep_thread, NULL);
    pthread_create(&th[2], NULL, event_thread, NULL);
    usleep(100000); /* all three are waiting now, or soon: the order below holds either way */
    for (int i = 0; i < 20; i++) {
        long d = 1, *res = NULL;
        size_t n = 0;
        CHECK_OK(ct_actor_call(counter, "add", &d, sizeof d, (void **)&res, &n, 2000));
        CHECK_EQ_INT(res ? *res : -1, i + 1);
        free(res);
        CHECK_OK(ct_kv_put("other", "x", 1));
        ct_object_id id;
        ct_object_view v;
        CHECK_OK(ct_put("abc", 3, NULL, &id));
        CHECK_OK(ct_get(&id, 1000, &v));
        CHECK_EQ_INT(v.size, 3);
        ct_object_release(&v);
        CHECK_OK(ct_free(&id));
    }
    /* the 20 rounds are done and no waiter has been answered: none of them held a round up */
    CHECK(!kv_done && !sleep_done && !event_done);
    CHECK_OK(ct_kv_put("late", "hello", 5));
    pthread_join(th[0], NULL);
    CHECK_OK(rc_kv);
    CHECK_STR(kv_val, "hello");
    CHECK(!sleep_done && !event_done);
    CHECK_OK(ct_actor_kill(victim));
    pthread_join(th[2], NULL);
    CHECK_OK(rc_event);
    CHECK_STR(ev.actor_id, ct_actor_id(victim));
    CHECK(!sleep_done);
    CHECK_OK(ct_actor_kill(sleeper)); /* its call, still in its sleep, fails with the death */
    pthread_join(th[1], NULL);
    CHECK_EQ_INT(rc_sleep, CT_EDEAD);
    fprintf(stderr, "every waiter outlasted the main thread's 20 rounds and ended by its act\n");
    ct_actor_release(&sleeper);
    ct_actor_release(&victim);
    ct_actor_release(&counter);
    ct_shutdown();
    CHECK_EQ_INT(h_leftovers(3000), 0);
    if (h_failures)
        fprintf(stderr, "test_threads: %d failures\n", h_failures);
    return h_failures ? 1 : 0;
}
