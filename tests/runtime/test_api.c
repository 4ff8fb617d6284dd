/* tests/runtime/test_api.c — the public API on an embedded cluster (ct_init(NULL)): sync and
 * async calls with values checked, method errors and unknown methods, timeouts, KV (put, get,
 * get-with-wait across processes, delete, from inside an actor), self ids, the cluster's
 * resources in all and per node (ct_cluster_nodes), bad arguments; a
 * driver that crashes takes its embedded head, node and actors with it; ct_shutdown leaves no
 * process behind. */
#include "harness.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "classes.h"
#include "ct/ct.h"

/* Children of this process (all threads), into out; returns the count. */
static int my_children(pid_t *out, int cap)
{
    int n = 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int pid;
    while (n < cap && fscanf(f, "%d", &pid) == 1)
        out[n++] = pid;
    fclose(f);
    return n;
}

/* A driver that dies by SIGKILL with an embedded cluster and an actor running. */
static void crash_case(void)
{
    int p[2];
    if (pipe(p))
        return;
    pid_t me = getpid();
    pid_t child = fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* dies with the test, also when the test is killed */
        if (getppid() != me)
            _exit(1);
        close(p[0]);
        if (ct_init(NULL))
            _exit(1);
        ct_actor *a = NULL;
        if (ct_actor_create("Counter", NULL, NULL, 0, &a))
            _exit(1);
        pid_t pids[8];
        int n = my_children(pids, 6);
        pids[n++] = ct_actor_pid(a);
        if (write(p[1], pids, n * sizeof(pid_t)) < 0)
            _exit(1);
        raise(SIGKILL);
    }
    close(p[1]);
    pid_t pids[8];
    ssize_t got = 0, r;
    while ((r = read(p[0], (char *)pids + got, sizeof pids - got)) > 0)
        got += r;
    close(p[0]);
    int status;
    waitpid(child, &status, 0);
    CHECK(WIFSIGNALED(status));
    int n = (int)(got / sizeof(pid_t));
    CHECK_EQ_INT(n, 3); /* head, node, actor */
    for (int i = 0; i < n; i++)
        if (!h_wait_gone(pids[i], 3000)) {
            fprintf(stderr, "pid %d outlived its crashed driver\n", (int)pids[i]);
            h_failures++;
        }
}

int main(void)
{
    register_test_classes();
    ct_serve_if_worker();
    h_init();
    crash_case();

    /* no head at the address: a clear timeout, and ct_init can be called again */
    double t_bad = h_now_ms();
    CHECK_EQ_INT(ct_init(&(ct_init_opts){.address = "127.0.0.1:1", .timeout_ms = 300}),
                 CT_ETIMEDOUT);
    CHECK(strstr(ct_last_error(), "127.0.0.1:1") != NULL);
    CHECK(h_now_ms() - t_bad < 2000);
    unsetenv("CT_ADDRESS");
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 4, .resources = "special=2"}));
    CHECK_EQ_INT(ct_init(NULL), CT_EEXIST);
    CHECK(strncmp(ct_head_address(), "127.0.0.1:", 10) == 0);
    CHECK_STR(ct_self_actor_id(), "");
    double tot = 0, fr = 0;
    CHECK_OK(ct_cluster_resources("special", &tot, &fr));
    CHECK_EQ_INT((int)tot, 2);
    CHECK_OK(ct_cluster_resources("CPU", &tot, &fr));
    CHECK_EQ_INT((int)tot, 4);

    ct_actor *a = NULL, *b = NULL;
    long start = 40;
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 1}, &start, sizeof start, &a));
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.custom = {{"special", 2}}}, NULL, 0, &b));
    /* ct_future_wait_any: the first done call, not the first given; a dead actor's call counts
     * as done at once; a timeout when none is done; NULL entries skipped. */
    {
        ct_actor *s1 = NULL, *s2 = NULL;
        CHECK_OK(ct_actor_create("Counter", NULL, NULL, 0, &s1));
        CHECK_OK(ct_actor_create("Counter", NULL, NULL, 0, &s2));
        int slow = 10000, fast = 50;
        ct_future *fs[3] = {NULL, NULL, NULL};
        CHECK_OK(ct_actor_call_async(s1, "sleep", &slow, sizeof slow, &fs[0]));
        CHECK_OK(ct_actor_call_async(s2, "sleep", &fast, sizeof fast, &fs[2]));
        double t0 = h_now_ms();
        CHECK_EQ_INT(ct_future_wait_any(fs, 3, 5000), 2);
        CHECK_OK(ct_future_wait(fs[2], 0, NULL, NULL));
        ct_future_destroy(&fs[2]);
        CHECK_EQ_INT(ct_future_wait_any(fs, 3, 100), CT_ETIMEDOUT);
        ct_actor_kill(s1);
        CHECK_EQ_INT(ct_future_wait_any(fs, 3, 5000), 0);
        CHECK_EQ_INT(ct_future_wait(fs[0], 0, NULL, NULL), CT_EDEAD);
        CHECK(h_now_ms() - t0 < 5000); /* not the 10 s sleep */
        ct_future_destroy(&fs[0]);
        CHECK(ct_future_wait_any(fs, 3, 100) == CT_ENOENT);
        /* take s1's death event, so the checks below see only their own */
        char s1id[32];
        snprintf(s1id, sizeof s1id, "%s", ct_actor_id(s1));
        ct_event ev1;
        for (double until = h_now_ms() + 3000; h_now_ms() < until;)
            if (ct_events_next(&ev1, 100) == 0 && ev1.type == CT_EVENT_ACTOR_DEAD &&
                !strcmp(ev1.actor_id, s1id))
                break;
        ct_actor_release(&s1);
        ct_actor_release(&s2);
    }
    if (!a || !b)
        goto done;
    CHECK_OK(ct_cluster_resources("special", &tot, &fr));
    CHECK_EQ_INT((int)fr, 0);
    CHECK(h_is_node_id(ct_actor_node(a))); /* "node-" and 12 random hex digits */
    /* ct_cluster_nodes: the one node, its totals and what a (1 CPU) and b (none) left free */
    {
        ct_node_resources nr[2] = {0};
        int nn = -1;
        CHECK_OK(ct_cluster_nodes(NULL, 0, &nn));
        CHECK_EQ_INT(nn, 1);
        CHECK_OK(ct_cluster_nodes(nr, 2, &nn));
        CHECK_EQ_INT(nn, 1);
        CHECK_STR(nr[0].node_id, ct_actor_node(a));
        CHECK(nr[0].cpu_total == 4 && nr[0].cpu_free == 3);
        CHECK(nr[0].gpu_total == 0 && nr[0].gpu_free == 0);
        CHECK_EQ_INT(ct_cluster_nodes(NULL, 1, &nn), CT_EINVAL);
    }
    long two = 2, *v = NULL;
    size_t n = 0;
    CHECK_OK(ct_actor_call(a, "add", &two, sizeof two, (void **)&v, &n, 2000));
    CHECK_EQ_INT(v ? *v : -1, 42);
    free(v);

    /* async: 100 calls in flight, results in order */
    ct_future *f[100];
    for (int i = 0; i < 100; i++)
        CHECK_OK(ct_actor_call_async(b, "add", NULL, 0, &f[i]));
    for (int i = 99; i >= 0; i--) { /* waiting out of order is fine */
        v = NULL;
        CHECK_OK(ct_future_wait(f[i], 5000, (void **)&v, &n));
        CHECK_EQ_INT(v ? *v : -1, i + 1);
        free(v);
        ct_future_destroy(&f[i]);
    }
    CHECK(f[0] == NULL);

    /* errors travel back with their code and the method named */
    CHECK_EQ_INT(ct_actor_call(a, "fail", NULL, 0, NULL, NULL, 2000), CT_ERANGE);
    CHECK(strstr(ct_last_error(), "Counter.fail") != NULL);
    CHECK_EQ_INT(ct_actor_call(a, "nosuch", NULL, 0, NULL, NULL, 2000), CT_ENOENT);
    CHECK(strstr(ct_last_error(), "nosuch") != NULL);
    /* a call that outlives its timeout, then the actor still answers in order */
    int ms = 3000;
    double t0 = h_now_ms();
    CHECK_EQ_INT(ct_actor_call(a, "sleep", &ms, sizeof ms, NULL, NULL, 50), CT_ETIMEDOUT);
    CHECK(h_now_ms() - t0 < ms / 2); /* at its timeout, not at the sleep's end */
    ms = 300;
    ct_future *slow = NULL;
    CHECK_OK(ct_actor_call_async(a, "sleep", &ms, sizeof ms, &slow));
    CHECK_EQ_INT(ct_future_wait(slow, 10, NULL, NULL), CT_ETIMEDOUT);
    CHECK_OK(ct_future_wait(slow, 20000, NULL, NULL)); /* after the 3 s sleep, in order */
    ct_future_destroy(&slow);
    v = NULL;
    CHECK_OK(ct_actor_call(a, "add", NULL, 0, (void **)&v, &n, 2000));
    CHECK_EQ_INT(v ? *v : -1, 43);
    free(v);
    CHECK_EQ_INT(ct_actor_call(NULL, "add", NULL, 0, NULL, NULL, 10), CT_EINVAL);

    /* large arguments and results (long ZMTP frames both ways) */
    {
        size_t big = 3 << 20;
        unsigned char *buf = malloc(big), *back = NULL;
        for (size_t i = 0; i < big; i++)
            buf[i] = (unsigned char)(i * 7 + 3);
        CHECK_OK(ct_actor_call(a, "echo", buf, big, (void **)&back, &n, 10000));
        CHECK_EQ_INT(n, big);
        CHECK(back && !memcmp(buf, back, big));
        free(back);
        free(buf);
    }
    /* garbage on the actor's own port: that connection is dropped, the actor keeps serving */
    {
        int port = atoi(strrchr(ct_actor_address(a), ':') + 1);
        unsigned char junk[3000];
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (unsigned char)(i * 131 + 17);
        for (int round = 0; round < 5; round++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
            inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
            if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
                if (round == 1) /* a valid greeting, then a frame claiming 2^60 bytes */
                    memcpy(junk, "\xff\0\0\0\0\0\0\0\x01\x7f\x03\x00NULL", 16);
                ssize_t w = send(fd, junk, sizeof junk - round * 500, MSG_NOSIGNAL);
                (void)w;
            }
            close(fd);
        }
        v = NULL;
        CHECK_OK(ct_actor_call(a, "add", NULL, 0, (void **)&v, &n, 2000));
        CHECK_EQ_INT(v ? *v : -1, 44);
        free(v);
    }

    /* KV */
    void *val = NULL;
    CHECK_OK(ct_kv_put("k1", "v1", 3));
    CHECK_OK(ct_kv_get("k1", &val, &n, 0));
    CHECK_STR((char *)val, "v1");
    CHECK_EQ_INT(n, 3);
    free(val);
    CHECK_OK(ct_kv_put("k1", "second", 7)); /* overwrite */
    CHECK_OK(ct_kv_get("k1", &val, &n, 0));
    CHECK_STR((char *)val, "second");
    free(val);
    CHECK_OK(ct_kv_del("k1"));
    CHECK_EQ_INT(ct_kv_del("k1"), CT_ENOENT);
    t0 = h_now_ms();
    CHECK_EQ_INT(ct_kv_get("k1", &val, &n, 200), CT_ETIMEDOUT);
    CHECK(h_now_ms() - t0 >= 180);
    CHECK(val == NULL);
    CHECK_EQ_INT(ct_kv_put("", "x", 1), CT_EINVAL);
    /* get-with-wait: an actor (another process) puts the key while we wait */
    ct_future *kvf = NULL, *nap = NULL;
    ms = 150;
    CHECK_OK(ct_actor_call_async(b, "sleep", &ms, sizeof ms, &nap));
    CHECK_OK(ct_actor_call_async(b, "kv", "rendezvous=from-actor", 21, &kvf));
    ct_future_destroy(&nap);
    t0 = h_now_ms();
    val = NULL;
    CHECK_OK(ct_kv_get("rendezvous", &val, &n, 3000)); /* waits until the actor put it */
    CHECK_STR((char *)val, "from-actor");
    CHECK(h_now_ms() - t0 >= 100);
    free(val);
    val = NULL;
    CHECK_OK(ct_future_wait(kvf, 3000, &val, &n)); /* the actor read it back itself */
    CHECK_STR((char *)val, "from-actor");
    free(val);
    ct_future_destroy(&kvf);

    /* kill: the actor's death reaches us, calls fail with CT_EDEAD; another actor that
     * subscribed to deaths (as replicas do to abort collectives) sees it too */
    CHECK_OK(ct_actor_call(b, "watch", NULL, 0, NULL, NULL, 3000));
    pid_t apid = ct_actor_pid(a);
    CHECK_OK(ct_actor_kill(a));
    ct_event ev;
    CHECK_OK(ct_events_next(&ev, 2000));
    CHECK_EQ_INT(ev.type, CT_EVENT_ACTOR_DEAD);
    CHECK_STR(ev.actor_id, ct_actor_id(a));
    CHECK_EQ_INT(ev.term_signal, SIGKILL);
    CHECK_EQ_INT(ct_actor_call(a, "add", NULL, 0, NULL, NULL, 1000), CT_EDEAD);
    CHECK(h_wait_gone(apid, 1000));
    {
        char *dead_id = NULL;
        int wait_ms = 2000;
        CHECK_OK(
            ct_actor_call(b, "next_death", &wait_ms, sizeof wait_ms, (void **)&dead_id, &n, 5000));
        CHECK_STR(dead_id, ct_actor_id(a));
        free(dead_id);
    }
    /* its CPU came back */
    CHECK_OK(ct_cluster_resources("CPU", &tot, &fr));
    CHECK_EQ_INT((int)fr, 4);

done:;
    pid_t kids[8];
    int nk = my_children(kids, 8);
    CHECK_EQ_INT(nk, 2); /* embedded head and node */
    pid_t bpid = b ? ct_actor_pid(b) : 0;
    if (b)
        CHECK(h_leftovers(0) >= 2); /* the detector sees the zygote and actor b while they run */
    ct_actor_release(&a);
    ct_actor_release(&b);
    ct_shutdown();
    ct_shutdown(); /* twice is fine */
    for (int i = 0; i < nk; i++)
        CHECK(h_wait_gone(kids[i], 2000));
    if (bpid)
        CHECK(h_wait_gone(bpid, 2000));
    CHECK_EQ_INT(h_leftovers(3000), 0);
    if (h_failures)
        fprintf(stderr, "test_api: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
