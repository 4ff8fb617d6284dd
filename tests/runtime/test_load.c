/* tests/runtime/test_load.c — no false deaths under load. 4 CPU-bound processes per core run for
 * CT_LOAD_SECONDS (default 60; ctest label "load") beside a real ct-head (default failure
 * detector) and two ct-nodes, while actors on both nodes call each other's neighbours and put
 * and get 256 MiB objects across the nodes (every byte checked against its pattern), and the
 * driver puts some of its own. Asserted: no node is declared dead (no NODE_DEAD event, no
 * "dead:" line in the head's log), every object arrives whole, every call answers in order,
 * both nodes are alive at the end. Nothing this test started is left running.
 * CT_LOAD_DASHBOARD_PORT=N starts the head with its HTTP endpoint on port N; the lines "load:
 * window starts/ends (head pid P)" bound the load (bench/dashboard_overhead uses both). */
#include "harness.h"
#include "classes.h"
#include "objclasses.h"
#include "ct/ct.h"

#define OBJ_SIZE (256ull << 20)
#define MAX_HOGS 48

/* ct-head with its stderr (its log) in path; with the HTTP endpoint on dashboard_port when that
 * is not NULL (bench/dashboard_overhead scrapes it). */
static pid_t start_head_logged(char *addr, size_t cap, const char *path, const char *dashboard_port)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -1;
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (getppid() != me || fd < 0)
            _exit(1);
        dup2(fd, 2);
        dup2(p[1], 1);
        /* the default failure detector (heartbeat 100 ms, silent nodes dead after 10 s) */
        char *argv[] = {(char *)h_bin("ct-head"), "--port", "0", NULL, NULL, NULL};
        if (dashboard_port) {
            argv[3] = "--dashboard-port";
            argv[4] = (char *)dashboard_port;
        }
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    char line[120];
    int rc = pid > 0 ? h_read_line(p[0], line, sizeof line, 30000) : -1;
    close(p[0]);
    if (rc || strncmp(line, "listening on ", 13))
        return -1;
    snprintf(addr, cap, "%s", line + 13);
    return pid;
}

static pid_t start_hog(void)
{
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        for (volatile unsigned long i = 0;; i++)
            ;
    }
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    return pid;
}

static int wait_joined(char *id, int timeout_ms)
{
    ct_event ev;
    double until = h_now_ms() + timeout_ms;
    while (h_now_ms() < until)
        if (!ct_events_next(&ev, 200) && ev.type == CT_EVENT_NODE_JOINED) {
            snprintf(id, 32, "%s", ev.node_id);
            return 0;
        }
    return -1;
}

/* An actor put of OBJ_SIZE bytes of pattern seed: 0 and *id, or the error. */
static int put_on(ct_actor *a, uint32_t seed, ct_object_id *id)
{
    obj_put_args pa = {.size = OBJ_SIZE, .replicas = 1, .seed = seed};
    void *res = NULL;
    size_t n = 0;
    int rc = ct_actor_call(a, "put", &pa, sizeof pa, &res, &n, 120000);
    if (!rc && n == sizeof *id)
        memcpy(id, res, sizeof *id);
    else if (!rc)
        rc = CT_EPROTO;
    free(res);
    return rc;
}

/* Calls counter c "add" 1 and checks that it answers *expect + 1. */
static void call_counter(ct_actor *c, long *expect)
{
    long d = 1, *v = NULL;
    size_t n = 0;
    CHECK_OK(ct_actor_call(c, "add", &d, sizeof d, (void **)&v, &n, 60000));
    CHECK_EQ_INT(v && n == sizeof *v ? *v : -1, *expect + 1);
    if (v && n == sizeof *v)
        *expect = *v;
    free(v);
}

int main(void)
{
    register_test_classes();
    register_obj_classes();
    ct_serve_if_worker();
    h_init();
    const char *env = getenv("CT_LOAD_SECONDS");
    int secs = env && atoi(env) > 0 ? atoi(env) : 60;
    alarm(secs + 300);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nhogs = ncpu > 0 ? (int)(4 * ncpu) : 8;
    nhogs = nhogs > MAX_HOGS ? MAX_HOGS : nhogs;
    for (int i = 0; i < nhogs; i++)
        CHECK(start_hog() > 0);
    fprintf(stderr, "load: %d CPU-bound processes on %ld cores for %d s\n", nhogs, ncpu, secs);

    char addr[128], log[96];
    snprintf(log, sizeof log, "/tmp/ct-test-load.%d.head.log", (int)getpid());
    /* bench/dashboard_overhead: the head with its HTTP endpoint on this port */
    pid_t head = start_head_logged(addr, sizeof addr, log, getenv("CT_LOAD_DASHBOARD_PORT"));
    CHECK(head > 0);
    if (head < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr, .timeout_ms = 30000}));
    CHECK_OK(ct_events_subscribe(CT_EVENTS_ALL));
    char ida[32] = "", idb[32] = "";
    pid_t na = h_start_node(addr, "--resources", "na=8", "--store-memory", "1G", NULL, NULL);
    CHECK_OK(wait_joined(ida, 30000));
    pid_t nb = h_start_node(addr, "--resources", "nb=8", "--store-memory", "1G", NULL, NULL);
    CHECK_OK(wait_joined(idb, 30000));
    ct_actor *oa = h_actor_with("ObjActor", "na", 60000),
             *ob = h_actor_with("ObjActor", "nb", 60000);
    ct_actor *ca = h_actor_with("Counter", "na", 60000), *cb = h_actor_with("Counter", "nb", 60000);
    ct_actor *all[4] = {oa, ob, ca, cb};
    if (!oa || !ob || !ca || !cb)
        return h_finish_actors(all, 4, "test_load");

    long va = 0, vb = 0;
    int rounds = 0, objects = 0, calls = 0;
    double worst_get = 0;
    uint8_t *mine = malloc(OBJ_SIZE);
    CHECK(mine != NULL);
    double until = h_now_ms() + secs * 1000.0;
    /* the load's window, for bench/dashboard_overhead (which measures the head's CPU in it) */
    fprintf(stderr, "load: window starts (head pid %d)\n", (int)head);
    while (h_now_ms() < until && !h_failures) {
        uint32_t seed = (uint32_t)rounds + 100;
        ct_actor *from = rounds % 2 ? ob : oa, *to = rounds % 2 ? oa : ob;
        ct_object_id id;
        /* every third round the driver puts the object itself (through its node's shard) */
        int rc;
        if (rounds % 3 == 2 && mine) {
            obj_pattern(mine, OBJ_SIZE, seed);
            rc = ct_put(mine, OBJ_SIZE, NULL, &id);
        } else {
            rc = put_on(from, seed, &id);
        }
        CHECK_OK(rc);
        if (rc)
            break;
        /* the other node pulls it and checks every byte; calls go on meanwhile */
        obj_get_args ga = {.id = id, .seed = seed, .timeout_ms = 120000};
        ct_future *f = NULL;
        double t0 = h_now_ms();
        CHECK_OK(ct_actor_call_async(to, "get", &ga, sizeof ga, &f));
        while (f && ct_future_wait_any(&f, 1, 20) == CT_ETIMEDOUT) {
            call_counter(ca, &va);
            call_counter(cb, &vb);
            calls += 2;
        }
        void *res = NULL;
        size_t n = 0;
        CHECK_OK(f ? ct_future_wait(f, 120000, &res, &n) : CT_EINVAL);
        double took = h_now_ms() - t0;
        worst_get = took > worst_get ? took : worst_get;
        ct_future_destroy(&f);
        obj_get_reply gr = {.rc = CT_EPROTO, .mismatch = -2};
        if (res && n == sizeof gr)
            memcpy(&gr, res, sizeof gr);
        free(res);
        CHECK_EQ_INT(gr.rc, 0);
        CHECK_EQ_INT(gr.size, OBJ_SIZE);
        CHECK_EQ_INT(gr.mismatch, -1);
        CHECK_STR(gr.node, rounds % 2 ? ida : idb);
        CHECK_OK(ct_free(&id));
        objects++;
        rounds++;
    }
    fprintf(stderr, "load: window ends (head pid %d)\n", (int)head);
    free(mine);
    fprintf(stderr,
            "load: %d objects of 256 MiB moved and checked, %d calls, slowest get %.0f ms\n",
            objects, calls, worst_get);
    CHECK(objects >= 1);

    /* no node was declared dead: not by an event, not in the head's log */
    ct_event ev;
    int dead = 0;
    while (ct_events_next(&ev, 0) == 0)
        if (ev.type == CT_EVENT_NODE_DEAD) {
            fprintf(stderr, "NODE_DEAD %s: %s\n", ev.node_id, ev.reason);
            dead++;
        }
    CHECK_EQ_INT(dead, 0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "grep -c ' dead: ' %s", log);
    char *out = h_capture(cmd);
    CHECK_EQ_INT(out ? atoi(out) : -1, 0);
    free(out);
    snprintf(cmd, sizeof cmd, "grep -E ' dead: |stalled' %s | head -20", log);
    out = h_capture(cmd);
    if (out && *out)
        fprintf(stderr, "head log:\n%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s status --address %s", h_bin("ctup"), addr);
    out = h_capture(cmd);
    CHECK(out && strstr(out, "2 nodes (2 alive)"));
    free(out);
    CHECK(!h_gone(na) && !h_gone(nb));
    int rc = h_finish_actors(all, 4, "test_load");
    if (!rc)
        unlink(log);
    else
        fprintf(stderr, "head log kept: %s\n", log);
    return rc;
}
