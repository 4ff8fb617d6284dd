/* tests/runtime/objclasses.h — the actor class the object-store runtime tests share: ObjActor
 * puts a deterministic pattern (ct_put) and reads objects by id (ct_get), checking every byte.
 * Header-only. */
#ifndef CT_TESTS_RUNTIME_OBJCLASSES_H
#define CT_TESTS_RUNTIME_OBJCLASSES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ct/ct.h"

/* Byte i of pattern seed: cheap, position-dependent, seed-dependent. */
static inline void obj_pattern(uint8_t *p, uint64_t n, uint32_t seed)
{
    uint64_t *w = (uint64_t *)p, x = 0x9E3779B97F4A7C15ull * (seed + 1);
    uint64_t nw = n / 8;
    for (uint64_t i = 0; i < nw; i++)
        w[i] = x ^ (i * 0xBF58476D1CE4E5B9ull);
    for (uint64_t i = nw * 8; i < n; i++)
        p[i] = (uint8_t)(i * 31 + seed);
}

/* -1 when p[0..n) is pattern seed, else the first differing offset. */
static inline int64_t obj_check(const uint8_t *p, uint64_t n, uint32_t seed)
{
    uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
    uint64_t nw = n / 8;
    const uint64_t *w = (const uint64_t *)p;
    for (uint64_t i = 0; i < nw; i++)
        if (w[i] != (x ^ (i * 0xBF58476D1CE4E5B9ull)))
            return (int64_t)i * 8;
    for (uint64_t i = nw * 8; i < n; i++)
        if (p[i] != (uint8_t)(i * 31 + seed))
            return (int64_t)i;
    return -1;
}

typedef struct obj_put_args {
    uint64_t size;
    int32_t replicas;
    uint32_t seed;
    char node[32]; /* preferred node, "" none */
} obj_put_args;

typedef struct obj_get_args {
    ct_object_id id;
    uint32_t seed;
    int32_t timeout_ms;
} obj_get_args;

typedef struct obj_get_reply {
    int32_t rc;
    int64_t mismatch; /* -1 when identical */
    uint64_t size;
    char node[32]; /* the node whose shard served it */
} obj_get_reply;

static int objactor_put(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state;
    obj_put_args a;
    if (len != sizeof a)
        return CT_EINVAL;
    memcpy(&a, args, sizeof a);
    uint8_t *buf = malloc(a.size ? a.size : 1);
    if (!buf)
        return CT_ENOMEM;
    obj_pattern(buf, a.size, a.seed);
    ct_object_id *id = malloc(sizeof *id);
    ct_put_opts o = {.replicas = a.replicas, .node = a.node[0] ? a.node : NULL};
    int rc = id ? ct_put(buf, a.size, &o, id) : CT_ENOMEM;
    free(buf);
    if (rc) {
        free(id);
        return rc;
    }
    *res = id;
    *rlen = sizeof *id;
    return 0;
}

static int objactor_get(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state;
    obj_get_args a;
    if (len != sizeof a)
        return CT_EINVAL;
    memcpy(&a, args, sizeof a);
    obj_get_reply *r = calloc(1, sizeof *r);
    if (!r)
        return CT_ENOMEM;
    ct_object_view v;
    r->rc = ct_get(&a.id, a.timeout_ms, &v);
    r->mismatch = -2;
    if (!r->rc) {
        r->size = v.size;
        r->mismatch = obj_check(v.data, v.size, a.seed);
        ct_object_release(&v);
    }
    snprintf(r->node, sizeof r->node, "%s", ct_object_node());
    *res = r;
    *rlen = sizeof *r;
    return 0;
}

static inline void register_obj_classes(void)
{
    ct_actor_class c = {.methods = {{"put", objactor_put}, {"get", objactor_get}}};
    ct_actor_class_register("ObjActor", &c);
}

#endif
