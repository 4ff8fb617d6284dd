/* tests/objectstore/test_spill.c — the memory cap: over-cap puts spill LRU objects to disk and
 * every object reads back identical; pinned objects are never evicted; CT_ENOSPC when all is
 * pinned, with nothing lost; a spilled object that cannot be restored is read from its file. */
#include <sys/stat.h>

#include "tests/objectstore/os_test.h"
#include "objectstore/store.h"

#define MB (1u << 20)

static int entry_spilled(ct_store *s, const ct_object_id *id)
{
    ct_store_entry *e = NULL;
    size_t n = 0;
    int r = -1;
    if (ct_store_list(s, &e, &n))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!memcmp(e[i].id.b, id->b, CT_OBJECT_ID_LEN))
            r = e[i].spilled;
    free(e);
    return r;
}

static int count_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

int main(void)
{
    os_purge_stale();
    char name[64], prefix[96];
    snprintf(name, sizeof name, "ostest-spill-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "ct.%s.", name);
    char *dir = os_tmpdir("spill");
    char sub[512], stale[600];
    ct_store *s = NULL, *ns = NULL;
    ct_store_view pin[4] = {{0}}, v = {0};
    unsigned char *buf = malloc(MB);
    ct_object_id id[20];
    CHECK(dir && buf);
    /* A stale file from a killed predecessor of the same name is cleared at start. */
    snprintf(sub, sizeof sub, "%s/ct.%s", dir, name);
    CHECK_EQ(mkdir(sub, 0700), 0);
    snprintf(stale, sizeof stale, "%s/0123456789012345678901234567890123456789", sub);
    FILE *f = fopen(stale, "w");
    CHECK(f);
    fclose(f);
    s = ct_store_new(&(ct_store_opts){.name = name, .memory_cap = 8 * MB, .spill_dir = dir});
    CHECK(s);
    CHECK_EQ(count_files(sub), 0);

    /* 1. 20 MiB of objects into an 8 MiB store: spills, all read back identical. */
    for (int i = 0; i < 20; i++) {
        os_id(&id[i], 100 + i);
        os_fill(buf, MB - 7 * i, 100 + i);
        CHECK_EQ(ct_store_put(s, &id[i], buf, MB - 7 * i), 0);
    }
    ct_store_stats st;
    ct_store_get_stats(s, &st);
    CHECK(st.spill_count >= 12);
    CHECK(st.memory_used <= 8 * MB);
    CHECK_EQ(st.objects, 20);
    CHECK_EQ(entry_spilled(s, &id[0]), 1);  /* oldest went first */
    CHECK_EQ(entry_spilled(s, &id[19]), 0); /* newest stays */
    CHECK_EQ(count_files(sub), (int)st.spilled);
    /* spilled_bytes: the sizes of the objects on disk (object i is MB - 7 i bytes) */
    uint64_t on_disk = 0;
    for (int i = 0; i < 20; i++)
        if (entry_spilled(s, &id[i]) == 1)
            on_disk += MB - 7 * i;
    CHECK_EQ(st.spilled_bytes, on_disk);
    CHECK(st.spilled_bytes > 0);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 20; i++) {
            CHECK_EQ(ct_store_get(s, &id[i], &v), 0);
            CHECK_EQ(v.size, MB - 7 * i);
            if (!os_verify(v.data, v.size, 100 + i)) {
                fprintf(stderr, "object %d differs after spill/restore\n", i);
                goto fail;
            }
            ct_store_release(s, &v);
        }
    }
    ct_store_get_stats(s, &st);
    CHECK(st.restore_count >= 20);

    /* 2. Pinned objects are never evicted, however many puts follow. */
    for (int k = 0; k < 2; k++)
        CHECK_EQ(ct_store_get(s, &id[k], &pin[k]), 0);
    const void *where0 = pin[0].data;
    for (int r = 0; r < 3; r++) {
        for (int i = 2; i < 20; i++) {
            CHECK_EQ(ct_store_get(s, &id[i], &v), 0); /* restores, evicting others */
            ct_store_release(s, &v);
        }
    }
    CHECK_EQ(entry_spilled(s, &id[0]), 0);
    CHECK_EQ(entry_spilled(s, &id[1]), 0);
    CHECK(pin[0].data == where0);
    CHECK(os_verify(pin[0].data, pin[0].size, 100));
    CHECK(os_verify(pin[1].data, pin[1].size, 101));
    /* A pinned object cannot be restored over; a spilled one that cannot fit is mapped from
     * its file: pin 8 objects worth the whole cap, then read a spilled one. */
    for (int k = 0; k < 2; k++)
        ct_store_release(s, &pin[k]);
    ct_store_destroy(&s);
    CHECK_EQ(count_files(dir), 0); /* destroy removes its spill files and directory */

    /* 3. Everything pinned: create fails with CT_ENOSPC and nothing is lost. */
    s = ct_store_new(&(ct_store_opts){.name = name, .memory_cap = 4 * MB, .spill_dir = dir});
    CHECK(s);
    for (int k = 0; k < 5; k++) {
        os_fill(buf, MB, 200 + k);
        CHECK_EQ(ct_store_put(s, &id[k], buf, MB), 0); /* object 0 spills on the 5th put */
    }
    CHECK_EQ(entry_spilled(s, &id[0]), 1);
    for (int k = 0; k < 4; k++)
        CHECK_EQ(ct_store_get(s, &id[k + 1], &pin[k]), 0);
    void *p;
    CHECK_EQ(ct_store_create(s, &id[10], MB, &p), CT_ENOSPC);
    CHECK(strstr(ct_last_error(), "do not fit"));
    ct_store_get_stats(s, &st);
    CHECK_EQ(st.spilled, 1);
    /* The spilled object cannot come back into memory: its view maps the file. */
    CHECK_EQ(ct_store_get(s, &id[0], &v), 0);
    CHECK(os_verify(v.data, v.size, 200));
    CHECK_EQ(entry_spilled(s, &id[0]), 1);
    ct_store_release(s, &v);
    for (int k = 0; k < 4; k++) {
        CHECK(os_verify(pin[k].data, pin[k].size, 201 + k));
        ct_store_release(s, &pin[k]);
    }
    /* Unpinned again: the create succeeds by spilling. */
    CHECK_EQ(ct_store_create(s, &id[10], MB, &p), 0);
    CHECK_EQ(ct_store_abort(s, &id[10]), 0);
    /* Delete of a spilled object removes its file. */
    CHECK_EQ(ct_store_delete(s, &id[0]), 0);
    ct_store_get_stats(s, &st);
    CHECK_EQ(count_files(sub), (int)st.spilled);
    ct_store_destroy(&s);

    /* 4. No spill dir: over-cap create fails, nothing evicted. */
    ns = ct_store_new(&(ct_store_opts){.name = name, .memory_cap = 2 * MB});
    CHECK(ns);
    CHECK_EQ(ct_store_put(ns, &id[0], buf, MB), 0);
    CHECK_EQ(ct_store_put(ns, &id[1], buf, MB), 0);
    CHECK_EQ(ct_store_put(ns, &id[2], buf, MB), CT_ENOSPC);
    CHECK(strstr(ct_last_error(), "no spill_dir"));
    CHECK(ct_store_contains(ns, &id[0]) && ct_store_contains(ns, &id[1]));
    ct_store_destroy(&ns);

    CHECK_EQ(os_shm_count(prefix), 0);
    os_rmdir(dir);
    free(buf);
    printf("ok\n");
    return 0;
fail:
    ct_store_destroy(&s);
    ct_store_destroy(&ns);
    os_rmdir(dir);
    free(buf);
    return 1;
}
