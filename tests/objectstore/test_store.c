/* tests/objectstore/test_store.c — one shard in one process: put/seal/get, unsealed objects are
 * invisible, delete while pinned, errors for bad arguments, name uniqueness, shm cleanup. */
#include "tests/objectstore/os_test.h"
#include "objectstore/store.h"

static int n_sealed, n_deleted;
static uint64_t last_size;

static void on_event(void *arg, int event, const ct_object_id *id, uint64_t size)
{
    ct_store *s = *(ct_store **)arg;
    n_sealed += event == CT_STORE_SEALED;
    n_deleted += event == CT_STORE_DELETED;
    last_size = size;
    (void)ct_store_contains(s, id); /* the callback may call back into the store */
}

int main(void)
{
    os_purge_stale();
    char name[64], prefix[96];
    snprintf(name, sizeof name, "ostest-store-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "ct.%s.", name);
    ct_store *s = NULL;
    s = ct_store_new(&(ct_store_opts){
        .name = name, .memory_cap = 64 << 20, .on_event = on_event, .event_arg = &s});
    ct_store_view v = {0}, v2 = {0};
    unsigned char *src = malloc(3 << 20);
    CHECK(s && src);
    CHECK_EQ(os_shm_count(prefix), 1);

    /* Same name while alive: refused. Bad names: refused. */
    ct_store *dup = ct_store_new(&(ct_store_opts){.name = name});
    CHECK(dup == NULL);
    CHECK(strstr(ct_last_error(), "live store"));
    CHECK(ct_store_new(&(ct_store_opts){.name = "a/b"}) == NULL);
    CHECK(ct_store_new(&(ct_store_opts){.name = ""}) == NULL);
    CHECK_EQ(ct_store_purge(name), CT_EBUSY);

    ct_object_id id, id2, missing;
    os_id(&id, 1);
    os_id(&id2, 2);
    os_id(&missing, 99);

    /* Create, not yet sealed: invisible. */
    void *p = NULL;
    CHECK_EQ(ct_store_create(s, &id, 3 << 20, &p), 0);
    os_fill(src, 3 << 20, 1);
    memcpy(p, src, (3 << 20) / 2);
    CHECK_EQ(ct_store_get(s, &id, &v), CT_ENOENT);
    CHECK(!ct_store_contains(s, &id));
    CHECK_EQ(ct_store_create(s, &id, 10, &p), CT_EEXIST);
    CHECK_EQ(ct_store_delete(s, &id), CT_EBUSY); /* only its writer may drop it */
    CHECK(strstr(ct_last_error(), "010000000000000000000000000000000000005a is being written"));
    memcpy((char *)p + (3 << 20) / 2, src + (3 << 20) / 2, (3 << 20) - (3 << 20) / 2);
    CHECK_EQ(n_sealed, 0);
    CHECK_EQ(ct_store_seal(s, &id), 0);
    CHECK_EQ(n_sealed, 1);
    CHECK_EQ(last_size, 3 << 20);
    CHECK_EQ(ct_store_seal(s, &id), CT_EINVAL);
    CHECK_EQ(n_sealed, 1);
    CHECK(ct_store_contains(s, &id));
    CHECK_EQ(ct_store_get(s, &id, &v), 0);
    CHECK_EQ(v.size, 3 << 20);
    CHECK(os_verify(v.data, v.size, 1));

    /* put + second pin of the same object. */
    os_fill(src, 12345, 2);
    CHECK_EQ(ct_store_put(s, &id2, src, 12345), 0);
    CHECK_EQ(ct_store_put(s, &id2, src, 12345), CT_EEXIST);
    CHECK_EQ(ct_store_get(s, &id2, &v2), 0);
    CHECK_EQ(v2.size, 12345);
    CHECK(os_verify(v2.data, v2.size, 2));
    uint64_t sz = 0;
    CHECK_EQ(ct_store_size(s, &id2, &sz), 0);
    CHECK_EQ(sz, 12345);
    ct_store_release(s, &v2);
    CHECK(v2.data == NULL);
    ct_store_release(s, &v2); /* empty view: no-op */

    /* Errors. */
    CHECK_EQ(ct_store_get(s, &missing, &v2), CT_ENOENT);
    CHECK(strstr(ct_last_error(), "no sealed object"));
    CHECK_EQ(ct_store_delete(s, &missing), CT_ENOENT);
    CHECK_EQ(ct_store_seal(s, &missing), CT_ENOENT);
    CHECK_EQ(ct_store_create(s, &missing, 65 << 20, &p), CT_ENOSPC);
    CHECK_EQ(ct_store_create(NULL, &missing, 1, &p), CT_EINVAL);

    /* Abort discards an unsealed object. */
    CHECK_EQ(ct_store_create(s, &missing, 100, &p), 0);
    CHECK_EQ(ct_store_abort(s, &missing), 0);
    CHECK(!ct_store_contains(s, &missing));
    CHECK_EQ(ct_store_abort(s, &id), CT_EINVAL);

    /* Empty object. */
    ct_object_id e;
    os_id(&e, 3);
    CHECK_EQ(ct_store_put(s, &e, NULL, 0), 0);
    CHECK_EQ(ct_store_get(s, &e, &v2), 0);
    CHECK_EQ(v2.size, 0);
    ct_store_release(s, &v2);

    /* List. */
    ct_store_entry *ents = NULL;
    size_t n = 0;
    CHECK_EQ(ct_store_list(s, &ents, &n), 0);
    CHECK_EQ(n, 3);
    int pinned = 0;
    for (size_t i = 0; i < n; i++)
        pinned += ents[i].pins;
    free(ents);
    CHECK_EQ(pinned, 1);

    /* Delete while pinned: gone from the index, bytes stay readable until release. */
    ct_store_stats st;
    ct_store_get_stats(s, &st);
    uint64_t used = st.memory_used;
    CHECK_EQ(n_deleted, 0);
    CHECK_EQ(ct_store_delete(s, &id), 0);
    CHECK_EQ(n_deleted, 1);
    CHECK(!ct_store_contains(s, &id));
    CHECK_EQ(ct_store_get(s, &id, &v2), CT_ENOENT);
    CHECK(os_verify(v.data, v.size, 1));
    ct_store_get_stats(s, &st);
    CHECK_EQ(st.memory_used, used);
    ct_store_release(s, &v);
    ct_store_get_stats(s, &st);
    CHECK_EQ(st.memory_used, used - (3 << 20));
    /* The id can be reused. */
    CHECK_EQ(ct_store_put(s, &id, src, 100), 0);

    ct_store_destroy(&s);
    CHECK(s == NULL);
    ct_store_destroy(&s);
    CHECK_EQ(os_shm_count(prefix), 0);
    free(src);
    printf("ok\n");
    return 0;
fail:
    ct_store_destroy(&s);
    free(src);
    return 1;
}
