/* tests/objectstore/test_client.c — another process maps objects zero-copy: a forked child
 * opens the shard by name, reads an object through the shared arena (checked to be a mapping
 * of /dev/shm, not a copy), writes one back; a killed child's pins are dropped. */
#include <poll.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "tests/objectstore/os_test.h"
#include "objectstore/store.h"
#include "objectstore/store_wire.h"

#define MB (1u << 20)

/* 1 if addr lies in a mapping of a /dev/shm file whose name contains what. */
static int mapped_from(const void *addr, const char *what)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int r = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (unsigned long)addr >= lo &&
            (unsigned long)addr < hi)
            r = strstr(line, "/dev/shm/") && strstr(line, what);
    }
    if (f)
        fclose(f);
    return r;
}

static int child_reader(const char *name, int hold_pipe)
{
    ct_store_client *c = ct_store_client_new(name);
    ct_store_view v = {0};
    ct_object_id id, mine, missing;
    os_id(&id, 1);
    os_id(&mine, 2);
    os_id(&missing, 3);
    if (!c)
        return fprintf(stderr, "child: %s\n", ct_last_error()), 10;
    if (ct_store_client_get(c, &id, &v))
        return fprintf(stderr, "child get: %s\n", ct_last_error()), 11;
    if (v.size != 5 * MB || !os_verify(v.data, v.size, 1))
        return 12;
    char arena[96];
    snprintf(arena, sizeof arena, "ct.%s.arena", name);
    if (!mapped_from(v.data, arena))
        return fprintf(stderr, "child: view is not a mapping of %s\n", arena), 13;
    if (ct_store_client_get(c, &missing, &v) != CT_ENOENT)
        return 14;
    if (ct_store_client_contains(c, &id) != 1 || ct_store_client_contains(c, &missing) != 0)
        return 15;
    /* Write an object for the parent. */
    void *p;
    if (ct_store_client_create(c, &mine, MB, &p))
        return fprintf(stderr, "child create: %s\n", ct_last_error()), 16;
    os_fill(p, MB, 2);
    if (ct_store_client_seal(c, &mine))
        return 17;
    if (hold_pipe >= 0) {
        /* Hold a pin and an unsealed object, tell the parent, wait to be killed. */
        ct_store_view held;
        if (ct_store_client_get(c, &id, &held) || ct_store_client_create(c, &missing, MB, &p))
            return 18;
        char b = 'r';
        if (write(hold_pipe, &b, 1) != 1)
            return 19;
        for (;;)
            pause();
    }
    ct_store_client_release(c, &v);
    ct_store_client_destroy(&c);
    return 0;
}

static int n_sealed, n_deleted;

static void on_event(void *arg, int event, const ct_object_id *id, uint64_t size)
{
    __atomic_fetch_add(&n_sealed, event == CT_STORE_SEALED, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&n_deleted, event == CT_STORE_DELETED, __ATOMIC_SEQ_CST);
}

static int pins_of(ct_store *s, const ct_object_id *id)
{
    ct_store_entry *e = NULL;
    size_t n = 0;
    int r = -1;
    if (ct_store_list(s, &e, &n))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!memcmp(e[i].id.b, id->b, CT_OBJECT_ID_LEN))
            r = e[i].pins;
    free(e);
    return r;
}

int main(void)
{
    os_purge_stale();
    char name[64], prefix[96];
    snprintf(name, sizeof name, "ostest-client-%d", (int)getpid());
    snprintf(prefix, sizeof prefix, "ct.%s.", name);
    unsigned char *buf = malloc(5 * MB);
    ct_store *s =
        ct_store_new(&(ct_store_opts){.name = name, .memory_cap = 32 * MB, .on_event = on_event});
    ct_store_view v = {0};
    int pfd[2] = {-1, -1};
    char *dir = NULL;
    ct_object_id id, mine, missing;
    os_id(&id, 1);
    os_id(&mine, 2);
    os_id(&missing, 3);
    CHECK(s && buf);
    CHECK(ct_store_client_new("ostest-no-such-store") == NULL);
    os_fill(buf, 5 * MB, 1);
    CHECK_EQ(ct_store_put(s, &id, buf, 5 * MB), 0);

    /* 1. Child reads zero-copy and writes one object. */
    pid_t c1 = os_fork();
    CHECK(c1 >= 0);
    if (c1 == 0)
        _exit(child_reader(name, -1));
    CHECK_EQ(os_wait(c1), 0);
    CHECK_EQ(__atomic_load_n(&n_sealed, __ATOMIC_SEQ_CST),
             2); /* the parent's put and the child's object */
    CHECK_EQ(ct_store_get(s, &mine, &v), 0);
    CHECK(os_verify(v.data, v.size, 2));
    ct_store_release(s, &v);
    CHECK_EQ(ct_store_delete(s, &mine), 0);

    /* 2. A child killed while holding a pin and an unsealed object: both are dropped. */
    CHECK_EQ(pipe(pfd), 0);
    pid_t c2 = os_fork();
    CHECK(c2 >= 0);
    if (c2 == 0)
        _exit(child_reader(name, pfd[1]));
    char b;
    CHECK_EQ(read(pfd[0], &b, 1), 1);
    CHECK_EQ(pins_of(s, &id), 2); /* the child's first view and `held` */
    CHECK(ct_store_contains(s, &mine));
    os_kill(c2);
    int pins = -1;
    for (int i = 0; i < 1000 && (pins = pins_of(s, &id)) != 0; i++)
        usleep(5000);
    CHECK_EQ(pins, 0);
    CHECK(!ct_store_contains(s, &missing));
    void *p;
    CHECK_EQ(ct_store_create(s, &missing, 10, &p), 0); /* the id is free again */

    /* 2b. Random datagrams on the shard's socket: answered or dropped, the shard keeps
     * serving and keeps every object; what the garbage created is discarded on disconnect. */
    {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int len = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "ct-store.%s", name);
        int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        CHECK(fd >= 0);
        CHECK_EQ(connect(fd, (struct sockaddr *)&sa,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)),
                 0);
        unsigned char junk[700], rep[1024];
        for (int i = 0; i < 3000; i++) {
            os_fill(junk, sizeof junk, 5000 + i);
            size_t n = (size_t)(i * 131) % sizeof junk;
            if (i % 3 == 0) { /* a well-sized request with a random op, id and size */
                ct__store_req rq;
                memcpy(&rq, junk, sizeof rq);
                rq.op = (uint32_t)(i % 12);
                rq.size = i % 2 ? 0 : rq.size >> 24; /* 0 .. or at most 1 TiB */
                if (i % 5 == 0 && rq.op != CT__STORE_OP_DELETE)
                    rq.id = id; /* sometimes the real object */
                memcpy(junk, &rq, sizeof rq);
                n = sizeof rq;
            }
            if (send(fd, junk, n, MSG_NOSIGNAL) < 0)
                break;
            struct pollfd pp = {.fd = fd, .events = POLLIN};
            while (poll(&pp, 1, 0) > 0 && recv(fd, rep, sizeof rep, 0) > 0)
                ;
        }
        close(fd);
        CHECK_EQ(ct_store_get(s, &id, &v), 0);
        CHECK(os_verify(v.data, v.size, 1));
        ct_store_release(s, &v);
        ct_store_client *cc = ct_store_client_new(name);
        CHECK(cc);
        CHECK_EQ(ct_store_client_contains(cc, &id), 1);
        ct_store_client_destroy(&cc);
    }

    /* 3. A spilled object that cannot come back into memory (everything else is pinned) is
     * read by the client from its spill file. */
    {
        ct_store_destroy(&s);
        dir = os_tmpdir("client");
        CHECK(dir);
        s = ct_store_new(&(ct_store_opts){.name = name, .memory_cap = 2 * MB, .spill_dir = dir});
        CHECK(s);
        ct_object_id k[3];
        ct_store_view pin[2];
        for (int i = 0; i < 3; i++) {
            os_id(&k[i], 10 + i);
            os_fill(buf, MB, 10 + i);
            CHECK_EQ(ct_store_put(s, &k[i], buf, MB), 0); /* k[0] spills at the third */
        }
        CHECK_EQ(ct_store_get(s, &k[1], &pin[0]), 0);
        CHECK_EQ(ct_store_get(s, &k[2], &pin[1]), 0);
        pid_t c3 = os_fork();
        CHECK(c3 >= 0);
        if (c3 == 0) {
            ct_store_client *cc = ct_store_client_new(name);
            ct_store_view cv;
            if (!cc || ct_store_client_get(cc, &k[0], &cv))
                _exit(20);
            if (cv.size != MB || !os_verify(cv.data, cv.size, 10))
                _exit(21);
            if (mapped_from(cv.data, "arena")) /* must be the spill file */
                _exit(22);
            ct_store_client_release(cc, &cv);
            ct_store_client_destroy(&cc);
            _exit(0);
        }
        CHECK_EQ(os_wait(c3), 0);
        ct_store_release(s, &pin[0]);
        ct_store_release(s, &pin[1]);
    }

    /* 4. A shard that went away: the client reports it. */
    ct_store_client *c = ct_store_client_new(name);
    CHECK(c);
    ct_store_destroy(&s);
    CHECK_EQ(ct_store_client_get(c, &id, &v), CT_ECONNRESET);
    ct_store_client_destroy(&c);

    CHECK_EQ(os_shm_count(prefix), 0);
    os_rmdir(dir);
    close(pfd[0]);
    close(pfd[1]);
    free(buf);
    printf("ok\n");
    return 0;
fail:
    os_kill_all();
    ct_store_destroy(&s);
    os_rmdir(dir);
    free(buf);
    return 1;
}
