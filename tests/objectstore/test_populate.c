/* tests/objectstore/test_populate.c — opts.populate_ahead: the shard's warming thread keeps
 * shared-memory pages allocated past the highest range used (the arena's shm file's allocated
 * blocks tell), follows the high-water mark as objects are created, never goes past the cap,
 * leaves objects intact, and stops cleanly when the shard is destroyed mid-warming. Not here:
 * the speed gain (bench/objectstore). */
#include <sys/stat.h>

#include "objectstore/store.h"
#include "os_test.h"

#define MB (1ull << 20)

/* Bytes of the shard's arena that tmpfs has allocated. */
static uint64_t arena_allocated(const char *name)
{
    char path[128];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm/ct.%s.arena", name);
    return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

/* Waits up to 5 s for at least want bytes allocated; returns what was allocated last. */
static uint64_t wait_allocated(const char *name, uint64_t want)
{
    uint64_t got = 0;
    for (int i = 0; i < 500 && (got = arena_allocated(name)) < want; i++)
        usleep(10000);
    return got;
}

int main(void)
{
    int rc = 1;
    char name[64];
    snprintf(name, sizeof name, "test_populate.%d", (int)getpid());
    ct_store *s = ct_store_new(
        &(ct_store_opts){.name = name, .memory_cap = 64 * MB, .populate_ahead = 16 * MB});
    unsigned char *src = malloc(24 * MB);
    CHECK(s && src);
    /* warmed ahead from the start: [0, 16 MiB) */
    uint64_t got = wait_allocated(name, 16 * MB);
    if (got < 16 * MB || got > 20 * MB) {
        fprintf(stderr, "start: %llu bytes allocated, want 16 MiB (+ at most a step)\n",
                (unsigned long long)got);
        goto fail;
    }
    /* a 24 MiB object moves the mark: [0, 24 + 16 MiB) */
    for (uint64_t i = 0; i < 24 * MB; i++)
        src[i] = (unsigned char)(i * 7 + (i >> 16));
    ct_object_id a = {{1}}, b = {{2}};
    CHECK_EQ(ct_store_put(s, &a, src, 24 * MB), 0);
    got = wait_allocated(name, 40 * MB);
    if (got < 40 * MB) {
        fprintf(stderr, "after 24 MiB: %llu bytes allocated, want 40 MiB\n",
                (unsigned long long)got);
        goto fail;
    }
    /* up to the cap and no further */
    CHECK_EQ(ct_store_put(s, &b, src, 24 * MB), 0);
    got = wait_allocated(name, 64 * MB);
    CHECK_EQ(got, 64 * MB);
    usleep(50000);
    CHECK_EQ(arena_allocated(name), 64 * MB);
    ct_store_view v = {0};
    CHECK_EQ(ct_store_get(s, &a, &v), 0);
    CHECK_EQ(v.size, 24 * MB);
    CHECK(!memcmp(v.data, src, 24 * MB));
    ct_store_release(s, &v);
    ct_store_destroy(&s);
    /* destroyed while warming a large reserve: returns promptly, nothing left behind */
    s = ct_store_new(
        &(ct_store_opts){.name = name, .memory_cap = 1024 * MB, .populate_ahead = 1024 * MB});
    CHECK(s);
    usleep(1000);
    int64_t t0 = ct__now_ms();
    ct_store_destroy(&s);
    int64_t dt = ct__now_ms() - t0;
    if (dt > 2000) {
        fprintf(stderr, "destroy while warming took %lld ms\n", (long long)dt);
        goto fail;
    }
    CHECK_EQ(arena_allocated(name), 0);
    rc = 0;
    printf("populate_ahead: ok\n");
fail:
    ct_store_destroy(&s);
    free(src);
    return rc;
}
