/* tests/runtime/test_objspill.c — the object store over its memory cap, through the runtime API
 * on an embedded cluster whose node has a 64 MiB shard: 10 objects of 16 MiB are put while a
 * view of the first stays pinned; the pinned bytes never change (not evicted), the shard spills
 * to its node's directory, and every object reads back identical through ct_get. An object
 * larger than the shard is refused with CT_ENOSPC; an empty object round-trips; ct_wait counts
 * ready objects; the zero-copy put (ct_object_create/seal/abort) works. */
#include "harness.h"
#include "objclasses.h"
#include <dirent.h>
#include <sys/stat.h>
#include "ct/ct.h"

/* Files in the spill dir of the node this process embedded (its child). */
static int node_pid;
static int spill_files(void)
{
    DIR *d = opendir("/tmp");
    struct dirent *de;
    int files = -1;
    while (d && (de = readdir(d))) {
        int pid = 0;
        if (sscanf(de->d_name, "ct-node.%d", &pid) != 1)
            continue;
        char p[300];
        snprintf(p, sizeof p, "/proc/%d/stat", pid);
        FILE *f = fopen(p, "r");
        int ppid = 0;
        if (f) {
            char buf[512];
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = 0;
            char *rp = strrchr(buf, ')');
            if (rp)
                sscanf(rp + 2, "%*c %d", &ppid);
            fclose(f);
        }
        if (ppid != getpid())
            continue;
        node_pid = pid;
        snprintf(p, sizeof p, "/tmp/%s/ct.node.%d", de->d_name, pid);
        DIR *s = opendir(p);
        files = 0;
        struct dirent *e;
        while (s && (e = readdir(s)))
            files += e->d_name[0] != '.';
        if (s)
            closedir(s);
    }
    if (d)
        closedir(d);
    return files;
}

int main(void)
{
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.store_memory = 64ull << 20}));
    enum { N = 10 };
    const uint64_t size = 16ull << 20;
    uint8_t *buf = malloc(size);
    ct_object_id ids[N];
    ct_object_view pinned;
    for (int i = 0; i < N; i++) {
        obj_pattern(buf, size, 100 + i);
        CHECK_OK(ct_put(buf, size, NULL, &ids[i]));
        if (i == 0)
            CHECK_OK(ct_get(&ids[0], 0, &pinned));
    }
    CHECK_EQ_INT(pinned.size, size);
    CHECK_EQ_INT(pinned.data ? obj_check(pinned.data, pinned.size, 100) : -2, -1);
    int files = spill_files();
    CHECK(files >= 4); /* 160 MiB into 64 MiB, one pinned: at least 6 on disk at the end */
    fprintf(stderr, "spill files: %d\n", files);
    for (int i = 0; i < N; i++) {
        ct_object_view v;
        int rc = ct_get(&ids[i], 0, &v);
        CHECK_OK(rc);
        if (rc)
            continue;
        CHECK_EQ_INT(v.size, size);
        int64_t bad = obj_check(v.data, v.size, 100 + i);
        if (bad != -1)
            fprintf(stderr, "object %d differs at %lld\n", i, (long long)bad);
        CHECK_EQ_INT(bad, -1);
        ct_object_release(&v);
    }
    CHECK_EQ_INT(obj_check(pinned.data, pinned.size, 100), -1);
    ct_object_release(&pinned);
    CHECK_EQ_INT(ct_wait(ids, N, N, 1000), N);

    /* bigger than the whole shard: refused, nothing lost */
    uint8_t *huge = calloc(1, 80ull << 20);
    ct_object_id hid;
    CHECK_EQ_INT(ct_put(huge, 80ull << 20, NULL, &hid), CT_ENOSPC);
    fprintf(stderr, "80 MiB into 64 MiB: %s\n", ct_last_error());
    free(huge);
    ct_object_view v;
    CHECK_OK(ct_get(&ids[N - 1], 0, &v));
    ct_object_release(&v);

    /* zero-copy put: write into the shard, seal; an aborted one never appears */
    ct_object_id zc, ab;
    void *w = NULL;
    CHECK_OK(ct_object_create(1 << 20, &zc, &w));
    if (w)
        obj_pattern(w, 1 << 20, 77);
    CHECK_EQ_INT(ct_wait(&zc, 1, 1, 0), CT_ETIMEDOUT); /* not visible before the seal */
    CHECK_OK(ct_object_seal(&zc, NULL));
    CHECK_OK(ct_get(&zc, 0, &v));
    CHECK_EQ_INT(v.size, 1 << 20);
    CHECK_EQ_INT(v.data ? obj_check(v.data, v.size, 77) : -2, -1);
    ct_object_release(&v);
    CHECK_OK(ct_object_create(4096, &ab, &w));
    CHECK_OK(ct_object_abort(&ab));
    CHECK_EQ_INT(ct_get(&ab, 0, &v), CT_ENOENT);
    CHECK_OK(ct_free(&zc));

    /* empty object */
    ct_object_id e;
    CHECK_OK(ct_put(NULL, 0, NULL, &e));
    CHECK_OK(ct_get(&e, 0, &v));
    CHECK_EQ_INT(v.size, 0);
    ct_object_release(&v);
    CHECK_EQ_INT(ct_wait(&e, 1, 1, 0), 1);
    ct_object_id missing;
    memset(&missing, 7, sizeof missing);
    ct_object_id two[2] = {e, missing};
    CHECK_EQ_INT(ct_wait(two, 2, 2, 100), CT_ETIMEDOUT);
    CHECK_EQ_INT(ct_wait(two, 2, 1, 100), 1);
    CHECK_EQ_INT(ct_wait(two, 2, 3, 100), CT_EINVAL);
    for (int i = 0; i < N; i++)
        CHECK_OK(ct_free(&ids[i]));
    free(buf);
    ct_shutdown();
    /* the node removed its shard and directory */
    char p[96];
    struct stat st;
    CHECK(node_pid > 0 && !h_node_dir_exists(node_pid));
    snprintf(p, sizeof p, "/dev/shm/ct.node.%d.arena", node_pid);
    CHECK(stat(p, &st) != 0);
    if (h_failures)
        fprintf(stderr, "test_objspill: %d failures\n", h_failures);
    return h_failures ? 1 : 0;
}
