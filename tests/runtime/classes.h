/* tests/runtime/classes.h — actor classes the runtime tests share: Counter (add, where, get),
 * Sleeper (sleep ms), Failer (method errors), KvActor (ct_kv_* from inside an actor); Counter's
 * "cuda" answers the actor's CUDA_VISIBLE_DEVICES. */
#ifndef CT_TESTS_RUNTIME_CLASSES_H
#define CT_TESTS_RUNTIME_CLASSES_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ct/ct.h"

static int counter_new(const void *args, size_t len, void **state)
{
    long *c = calloc(1, sizeof *c);
    if (!c)
        return CT_ENOMEM;
    if (len == sizeof *c)
        memcpy(c, args, sizeof *c);
    *state = c;
    return 0;
}

static int reply_long(long v, void **res, size_t *rlen)
{
    if (!(*res = malloc(sizeof v)))
        return CT_ENOMEM;
    memcpy(*res, &v, sizeof v);
    *rlen = sizeof v;
    return 0;
}

static int counter_add(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    long *c = state, d = 1;
    if (len == sizeof d)
        memcpy(&d, args, sizeof d);
    *c += d;
    return reply_long(*c, res, rlen);
}

static int counter_where(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state, (void)args, (void)len;
    *res = strdup(ct_self_node_id());
    *rlen = strlen(*res) + 1;
    return 0;
}

static int counter_pid(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state, (void)args, (void)len;
    return reply_long(getpid(), res, rlen);
}

static int sleeper_sleep(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    int ms = 0;
    if (len == sizeof ms)
        memcpy(&ms, args, sizeof ms);
    usleep(ms * 1000);
    *res = NULL;
    *rlen = 0;
    return 0;
}

static int failer_fail(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state, (void)args, (void)len, (void)res, (void)rlen;
    return CT_ERANGE;
}

static int echo_bytes(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state;
    *res = NULL;
    *rlen = 0;
    if (!len)
        return 0;
    if (!(*res = malloc(len)))
        return CT_ENOMEM;
    memcpy(*res, args, len);
    *rlen = len;
    return 0;
}

/* Subscribes this actor to actor-death events (what a replica does to abort collectives). */
static int watch_deaths(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state, (void)args, (void)len, (void)res, (void)rlen;
    return ct_events_subscribe(1u << CT_EVENT_ACTOR_DEAD);
}

/* Waits (args: int ms) for the next event; returns the dead actor's id. */
static int next_death(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state;
    int ms = 1000;
    if (len == sizeof ms)
        memcpy(&ms, args, sizeof ms);
    ct_event ev;
    int rc = ct_events_next(&ev, ms);
    if (rc)
        return rc;
    *res = strdup(ev.actor_id);
    *rlen = strlen(ev.actor_id) + 1;
    return *res ? 0 : CT_ENOMEM;
}

/* The actor's CUDA_VISIBLE_DEVICES (the node sets it per actor), or "(unset)". */
static int cuda_devices(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state, (void)args, (void)len;
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    *res = strdup(v ? v : "(unset)");
    *rlen = *res ? strlen(*res) + 1 : 0;
    return *res ? 0 : CT_ENOMEM;
}

static int failer_new(const void *args, size_t len, void **state)
{
    (void)args, (void)len, (void)state;
    return CT_EINVAL; /* creation always fails */
}

/* args: "key=value": puts it, then reads it back through the head */
static int kv_put_get(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%.*s", (int)len, (const char *)args);
    char *eq = strchr(buf, '=');
    if (!eq)
        return CT_EINVAL;
    *eq = 0;
    int rc = ct_kv_put(buf, eq + 1, strlen(eq + 1) + 1);
    if (rc)
        return rc;
    return ct_kv_get(buf, res, rlen, 1000);
}

static void register_test_classes(void)
{
    ct_actor_class_register("Counter", &(ct_actor_class){.create = counter_new,
                                                         .destroy = free,
                                                         .methods = {{"add", counter_add},
                                                                     {"where", counter_where},
                                                                     {"pid", counter_pid},
                                                                     {"sleep", sleeper_sleep},
                                                                     {"fail", failer_fail},
                                                                     {"kv", kv_put_get},
                                                                     {"echo", echo_bytes},
                                                                     {"watch", watch_deaths},
                                                                     {"next_death", next_death},
                                                                     {"cuda", cuda_devices}}});
    ct_actor_class_register("Broken", &(ct_actor_class){.create = failer_new});
}

#endif
