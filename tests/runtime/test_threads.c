/* tests/runtime/test_threads.c — waiting calls do not block other threads' calls: while one
 * thread waits in ct_kv_get for a key that appears later, another in a 600 ms actor call and a
 * third in ct_events_next, the main thread's ct_kv_put, actor calls and ct_put/ct_get answer in
 * milliseconds; then each waiter gets what it waited for. Embedded cluster. */
#include "harness.h"
#include <pthread.h>
#include "classes.h"
#include "ct/ct.h"

static ct_actor *sleeper, *victim;
static double t_kv, t_sleep, t_event;
static int rc_kv = -1, rc_sleep = -1, rc_event = -1;
static char kv_val[16];
static ct_event ev;
static double start;

static void *kv_thread(void *arg)
{
    (void)arg;
    void *v = NULL;
    size_t n = 0;
    rc_kv = ct_kv_get("late", &v, &n, 5000);
    t_kv = h_now_ms() - start;
    if (!rc_kv)
        snprintf(kv_val, sizeof kv_val, "%.*s", (int)n, (char *)v);
    free(v);
    return NULL;
}

static void *sleep_thread(void *arg)
{
    (void)arg;
    int ms = 600;
    rc_sleep = ct_actor_call(sleeper, "sleep", &ms, sizeof ms, NULL, NULL, 5000);
    t_sleep = h_now_ms() - start;
    return NULL;
}

static void *event_thread(void *arg)
{
    (void)arg;
    double until = h_now_ms() + 5000;
    do
        rc_event = ct_events_next(&ev, 200);
    while ((rc_event || ev.type != CT_EVENT_ACTOR_DEAD) && h_now_ms() < until);
    t_event = h_now_ms() - start;
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
    start = h_now_ms();
    pthread_t th[3];
    pthread_create(&th[0], NULL, kv_thread, NULL);
    pthread_create(&th[1], NULL, sleep_thread, NULL);
    pthread_create(&th[2], NULL, event_thread, NULL);
    usleep(100000); /* all three are waiting now */
    double worst = 0;
    for (int i = 0; i < 20; i++) {
        double t0 = h_now_ms();
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
        double dt = h_now_ms() - t0;
        worst = dt > worst ? dt : worst;
    }
    fprintf(stderr, "main thread: worst round (call + kv_put + put/get/free) %.1f ms\n", worst);
    CHECK(worst < 150);              /* blocked behind a waiter it would take hundreds of ms */
    CHECK(h_now_ms() - start < 550); /* all of it happened while the sleeper still slept */
    CHECK_OK(ct_kv_put("late", "hello", 5));
    CHECK_OK(ct_actor_kill(victim));
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CHECK_OK(rc_kv);
    CHECK_STR(kv_val, "hello");
    CHECK_OK(rc_sleep);
    CHECK(t_sleep >= 590 && t_sleep < 2000);
    CHECK_OK(rc_event);
    CHECK_STR(ev.actor_id, ct_actor_id(victim));
    CHECK(t_kv < 2000 && t_event < 3000);
    fprintf(stderr, "kv_get returned at %.0f ms, call at %.0f ms, event at %.0f ms\n", t_kv,
            t_sleep, t_event);
    ct_actor_release(&sleeper);
    ct_actor_release(&victim);
    ct_actor_release(&counter);
    ct_shutdown();
    CHECK_EQ_INT(h_leftovers(3000), 0);
    if (h_failures)
        fprintf(stderr, "test_threads: %d failures\n", h_failures);
    return h_failures ? 1 : 0;
}
