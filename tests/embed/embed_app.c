/* tests/embed/embed_app.c — an application outside ct's build that embeds it: compiled by
 * test_embed.sh against the installed headers and libct.so found through pkg-config. It starts
 * an embedded cluster, creates an actor of its own class, calls it, moves an object through
 * the store and a value through the KV, and prints "embed ok <version>" when every value is
 * right. Exit 0 on success, 1 with the reason on stderr otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ct/ct.h"

static int square_new(const void *args, size_t len, void **state)
{
    (void)args, (void)len;
    *state = NULL;
    return 0;
}

static int square(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state;
    long x;
    if (len != sizeof x)
        return CT_EINVAL;
    memcpy(&x, args, sizeof x);
    long y = x * x;
    if (!(*res = malloc(sizeof y)))
        return CT_ENOMEM;
    memcpy(*res, &y, sizeof y);
    *rlen = sizeof y;
    return 0;
}

#define FAIL(...) (fprintf(stderr, __VA_ARGS__), fprintf(stderr, ": %s\n", ct_last_error()), 1)

int main(void)
{
    ct_actor_class_register(
        "Square", &(ct_actor_class){.create = square_new, .methods = {{"square", square}}});
    if (ct_init(NULL))
        return FAIL("ct_init");
    int rc = 1;
    ct_actor *a = NULL;
    void *res = NULL;
    size_t rlen = 0;
    long x = 12;
    ct_object_view v = {0};
    ct_object_id id;
    const char msg[] = "bytes through the store";
    if (ct_actor_create("Square", NULL, NULL, 0, &a)) {
        rc = FAIL("ct_actor_create");
        goto out;
    }
    if (ct_actor_call(a, "square", &x, sizeof x, &res, &rlen, 10000) || rlen != sizeof x ||
        *(long *)res != 144) {
        rc = FAIL("square(12) != 144");
        goto out;
    }
    if (ct_put(msg, sizeof msg, NULL, &id) || ct_get(&id, 5000, &v) || v.size != sizeof msg ||
        memcmp(v.data, msg, sizeof msg)) {
        rc = FAIL("ct_put/ct_get");
        goto out;
    }
    free(res);
    res = NULL;
    if (ct_kv_put("embed/key", "value", 5) || ct_kv_get("embed/key", &res, &rlen, 1000) ||
        rlen != 5 || memcmp(res, "value", 5)) {
        rc = FAIL("ct_kv_put/ct_kv_get");
        goto out;
    }
    printf("embed ok %s\n", ct_version());
    rc = 0;
out:
    ct_object_release(&v);
    free(res);
    ct_actor_release(&a);
    ct_shutdown();
    return rc;
}
