/* examples/actors.c — a small runnable actor demo: an embedded cluster (ct_init(NULL)), two
 * Counter actors, sync and async calls, a KV round trip, then kill one and watch its death
 * event. Not a test: it prints what happens. Run: build/bin/actors */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ct/ct.h"

static int counter_new(const void *args, size_t len, void **state)
{
    long *c = calloc(1, sizeof *c);
    if (!c)
        return CT_ENOMEM;
    if (len == sizeof *c)
        memcpy(c, args, sizeof *c); /* start value */
    *state = c;
    return 0;
}

static int counter_add(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    long *c = state, d = 1;
    if (len == sizeof d)
        memcpy(&d, args, sizeof d);
    *c += d;
    if (!(*res = malloc(sizeof *c)))
        return CT_ENOMEM;
    memcpy(*res, c, sizeof *c);
    *rlen = sizeof *c;
    return 0;
}

static int counter_where(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    char buf[96];
    int n = snprintf(buf, sizeof buf, "%s on %s", ct_self_actor_id(), ct_self_node_id());
    *res = strdup(buf);
    *rlen = (size_t)n + 1;
    return *res ? 0 : CT_ENOMEM;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: actors\n"
               "  starts an embedded cluster (or joins $CT_ADDRESS), two Counter actors, calls\n"
               "  them, kills one and prints its death event; takes no options\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "actors: unknown option '%s' (it takes none; see --help)\n", argv[1]);
        return 2;
    }
    ct_actor_class_register("Counter",
                            &(ct_actor_class){
                                .create = counter_new,
                                .destroy = free,
                                .methods = {{"add", counter_add}, {"where", counter_where}},
                            });
    if (ct_init(NULL)) { /* in an actor process this serves and never returns */
        fprintf(stderr, "ct_init: %s\n", ct_last_error());
        return 1;
    }
    printf("head at %s\n", ct_head_address());
    long start = 100;
    ct_actor *a = NULL, *b = NULL;
    if (ct_actor_create("Counter", &(ct_resources){.cpu = 0.5}, &start, sizeof start, &a) ||
        ct_actor_create("Counter", NULL, NULL, 0, &b)) {
        fprintf(stderr, "create: %s\n", ct_last_error());
        ct_shutdown();
        return 1;
    }
    char *where = NULL;
    size_t n;
    ct_actor_call(a, "where", NULL, 0, (void **)&where, &n, 2000);
    printf("actor a: %s (pid %d)\n", where ? where : "?", ct_actor_pid(a));
    free(where);
    long five = 5, *v = NULL;
    ct_actor_call(a, "add", &five, sizeof five, (void **)&v, &n, 2000);
    printf("a.add(5) = %ld\n", v ? *v : -1);
    free(v);
    ct_future *f[10];
    for (int i = 0; i < 10; i++)
        ct_actor_call_async(b, "add", NULL, 0, &f[i]);
    for (int i = 0; i < 10; i++) {
        v = NULL;
        ct_future_wait(f[i], 2000, (void **)&v, &n);
        if (i == 9)
            printf("b after 10 async adds = %ld\n", v ? *v : -1);
        free(v);
        ct_future_destroy(&f[i]);
    }
    ct_kv_put("greeting", "hello", 6);
    char *val = NULL;
    if (!ct_kv_get("greeting", (void **)&val, &n, 1000))
        printf("kv greeting = %s\n", val);
    free(val);
    ct_actor_kill(b);
    ct_event ev;
    if (!ct_events_next(&ev, 2000))
        printf("event: actor %s dead (signal %d)\n", ev.actor_id, ev.term_signal);
    ct_actor_release(&a);
    ct_actor_release(&b);
    ct_shutdown();
    return 0;
}
