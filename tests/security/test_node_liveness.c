/* tests/security/test_node_liveness.c — nothing outlives what it belongs to. A real ct-head and
 * ct-node; drivers are this executable started again (CT_TEST_ROLE=driver), which create a
 * Spawner actor, have it create a Counter actor of its own, print both pids and wait:
 * 1. Orphans: the driver is SIGKILLed; its actor and the actor that actor created are both gone
 *    within a few seconds of the head's dead-after time (1 s).
 * 2. Head loss: the head is SIGKILLed; the node (--head-dead-after-ms 1000) kills its actors
 *    and exits with status 1 within a few seconds, and the actors are gone. */
#include "sec.h"
#include "../runtime/classes.h"
#include "ct/ct.h"

static ct_actor *s_child; /* the Spawner's own actor */

/* Spawner.spawn: creates a Counter, returns {own pid, the Counter's pid}. */
static int spawner_spawn(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state, (void)args, (void)len;
    int rc = ct_actor_create("Counter", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, &s_child);
    if (rc)
        return rc;
    long *pid = NULL;
    size_t n = 0;
    if ((rc = ct_actor_call(s_child, "pid", NULL, 0, (void **)&pid, &n, 5000)))
        return rc;
    long *out = malloc(2 * sizeof *out);
    if (!out || n != sizeof *pid) {
        free(pid);
        free(out);
        return CT_ENOMEM;
    }
    out[0] = getpid();
    out[1] = *pid;
    free(pid);
    *res = out;
    *rlen = 2 * sizeof *out;
    return 0;
}

/* The driver: prints "pids A B" (A the Spawner's, B its Counter's) and waits to be killed. */
static int driver_main(void)
{
    ct_actor *a = NULL;
    long *pids = NULL;
    size_t n = 0;
    if (ct_init(NULL) ||
        ct_actor_create("Spawner", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, &a) ||
        ct_actor_call(a, "spawn", NULL, 0, (void **)&pids, &n, 10000) || n != 2 * sizeof(long)) {
        fprintf(stderr, "driver: %s\n", ct_last_error());
        return 1;
    }
    printf("pids %ld %ld\n", pids[0], pids[1]);
    fflush(stdout);
    for (;;)
        pause();
}

/* Starts a driver against addr; fills its actors' pids. The driver's pid, or -1. */
static pid_t start_driver(const char *addr, pid_t *pa, pid_t *pb)
{
    setenv("CT_TEST_ROLE", "driver", 1);
    setenv("CT_ADDRESS", addr, 1);
    char *argv[] = {(char *)h_bin("test_security_node_liveness"), NULL};
    int fd = -1;
    pid_t pid = h_spawn(argv, &fd);
    unsetenv("CT_TEST_ROLE");
    unsetenv("CT_ADDRESS");
    char line[128];
    long a = 0, b = 0;
    if (pid < 0 || h_read_line(fd, line, sizeof line, 20000) ||
        sscanf(line, "pids %ld %ld", &a, &b) != 2 || a <= 0 || b <= 0) {
        fprintf(stderr, "the driver did not report its actors' pids\n");
        h_failures++;
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    *pa = (pid_t)a;
    *pb = (pid_t)b;
    return pid;
}

int main(void)
{
    register_test_classes();
    ct_actor_class_register("Spawner", &(ct_actor_class){.methods = {{"spawn", spawner_spawn}}});
    ct_serve_if_worker();
    const char *role = getenv("CT_TEST_ROLE");
    if (role && !strcmp(role, "driver"))
        return driver_main();
    h_init();
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    pid_t node = h_start_node(addr, "--cpus", "4", "--head-dead-after-ms", "1000", NULL, NULL);

    /* 1. the driver dies: its actor and its actor's actor go */
    pid_t pa = 0, pb = 0;
    pid_t drv = start_driver(addr, &pa, &pb);
    if (drv > 0) {
        CHECK(!h_gone(pa) && !h_gone(pb));
        h_reap(drv, SIGKILL, 5000);
        double t0 = h_now_ms();
        CHECK(h_wait_gone(pa, 5000));
        CHECK(h_wait_gone(pb, 5000));
        printf("orphans: actors gone %.0f ms after the driver was killed\n", h_now_ms() - t0);
    }

    /* 2. the head dies: the node kills its actors and exits 1 */
    drv = start_driver(addr, &pa, &pb);
    if (drv > 0) {
        CHECK(!h_gone(pa) && !h_gone(pb));
        double t0 = h_now_ms();
        h_reap(head, SIGKILL, 5000);
        head = -1;
        int st = h_reap(node, 0, 5000);
        CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1);
        if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 1)
            fprintf(stderr, "node: wait status 0x%x\n", st);
        CHECK(h_wait_gone(pa, 2000));
        CHECK(h_wait_gone(pb, 2000));
        printf("head loss: node and actors gone %.0f ms after the head was killed\n",
               h_now_ms() - t0);
        h_reap(drv, SIGKILL, 5000);
    }
    CHECK_EQ_INT(h_leftovers(2000), 0);
    return sec_finish("security_node_liveness", head);
}
