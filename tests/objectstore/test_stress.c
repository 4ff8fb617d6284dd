/* tests/objectstore/test_stress.c — four threads put, get (checking every byte), delete and
 * abort random objects in a shard whose cap forces constant spilling and restoring, while a
 * fifth reads through a ct_store_client. Checks that no read ever sees wrong bytes, that
 * accounting returns to zero, and that no spill file or shm segment is left. */
#include <pthread.h>

#include "tests/objectstore/os_test.h"
#include "objectstore/store.h"

#define NKEYS 48
#define OPS 400

static ct_store *store;
static char store_name[64];
static int failed;

static uint64_t size_of(uint64_t key)
{
    return 4096 + (key * 2654435761u) % (1536 * 1024);
}

static void *worker(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 7919 + 1;
    for (int i = 0; i < OPS && !failed; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        uint64_t key = rng % NKEYS, sz = size_of(key);
        ct_object_id id;
        os_id(&id, key);
        int op = (int)((rng >> 32) % 10);
        if (op < 4) { /* put: the bytes of key are always os_fill(key) */
            void *p;
            int rc = ct_store_create(store, &id, sz, &p);
            if (rc == 0) {
                os_fill(p, sz, key);
                if ((rng >> 40) % 8 == 0)
                    rc = ct_store_abort(store, &id);
                else
                    rc = ct_store_seal(store, &id);
                if (rc) {
                    fprintf(stderr, "seal/abort: %s\n", ct_last_error());
                    failed = 1;
                }
            } else if (rc != CT_EEXIST && rc != CT_ENOSPC) {
                fprintf(stderr, "create: %d %s\n", rc, ct_last_error());
                failed = 1;
            }
        } else if (op < 8) {
            ct_store_view v;
            int rc = ct_store_get(store, &id, &v);
            if (rc == 0) {
                if (v.size != sz || !os_verify(v.data, v.size, key)) {
                    fprintf(stderr, "object %llu: wrong bytes\n", (unsigned long long)key);
                    failed = 1;
                }
                ct_store_release(store, &v);
            } else if (rc != CT_ENOENT) {
                fprintf(stderr, "get: %d %s\n", rc, ct_last_error());
                failed = 1;
            }
        } else {
            int rc = ct_store_delete(store, &id);
            if (rc && rc != CT_ENOENT && rc != CT_EBUSY) {
                fprintf(stderr, "delete: %s\n", ct_last_error());
                failed = 1;
            }
        }
    }
    return NULL;
}

static void *client_reader(void *arg)
{
    ct_store_client *c = ct_store_client_new(store_name);
    if (!c) {
        failed = 1;
        return NULL;
    }
    for (int i = 0; i < OPS && !failed; i++) {
        uint64_t key = (uint64_t)i * 7 % NKEYS;
        ct_object_id id;
        os_id(&id, key);
        ct_store_view v;
        int rc = ct_store_client_get(c, &id, &v);
        if (rc == 0) {
            if (v.size != size_of(key) || !os_verify(v.data, v.size, key)) {
                fprintf(stderr, "client: object %llu: wrong bytes\n", (unsigned long long)key);
                failed = 1;
            }
            ct_store_client_release(c, &v);
        } else if (rc != CT_ENOENT) {
            fprintf(stderr, "client get: %d %s\n", rc, ct_last_error());
            failed = 1;
        }
    }
    ct_store_client_destroy(&c);
    return NULL;
}

int main(void)
{
    os_purge_stale();
    char prefix[96];
    snprintf(store_name, sizeof store_name, "ostest-stress-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "ct.%s.", store_name);
    char *dir = os_tmpdir("stress");
    pthread_t th[5];
    CHECK(dir);
    store = ct_store_new(
        &(ct_store_opts){.name = store_name, .memory_cap = 12 << 20, .spill_dir = dir});
    CHECK(store);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)), 0);
    CHECK_EQ(pthread_create(&th[4], NULL, client_reader, NULL), 0);
    for (int i = 0; i < 5; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ(failed, 0);
    ct_store_stats st;
    ct_store_get_stats(store, &st);
    printf("spills %llu, restores %llu, objects %llu\n", (unsigned long long)st.spill_count,
           (unsigned long long)st.restore_count, (unsigned long long)st.objects);
    CHECK(st.spill_count > 0);
    /* Everything left reads back; then delete all: memory back to zero, no spill files. */
    for (uint64_t k = 0; k < NKEYS; k++) {
        ct_object_id id;
        os_id(&id, k);
        ct_store_view v;
        if (ct_store_get(store, &id, &v) == 0) {
            CHECK(os_verify(v.data, v.size, k));
            ct_store_release(store, &v);
        }
        ct_store_delete(store, &id);
    }
    ct_store_get_stats(store, &st);
    CHECK_EQ(st.memory_used, 0);
    CHECK_EQ(st.objects, 0);
    ct_store_destroy(&store);
    CHECK_EQ(os_shm_count(prefix), 0);
    CHECK_EQ(rmdir(dir), 0); /* empty: no spill file left */
    free(dir);
    printf("ok\n");
    return 0;
fail:
    ct_store_destroy(&store);
    os_rmdir(dir);
    return 1;
}
