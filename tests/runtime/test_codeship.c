/* tests/runtime/test_codeship.c — code shipping: a driver copied to a temp dir unlinks its own
 * executable after ct_init and before creating actors; two nodes whose working directories
 * differ from the driver's (and from each other's) still start its actors, from their cached
 * copy of the executable that the driver put into the object store (one node has it locally,
 * the other pulls it), and the actors answer. Every process and temp file is gone afterwards. */
#include "harness.h"
#include "classes.h"
#include <sys/stat.h>
#include "ct/ct.h"

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "codeship child: " __VA_ARGS__);                                           \
        fprintf(stderr, "\n");                                                                     \
        failures++;                                                                                \
    } while (0)

/* The copied driver: attach (CT_ADDRESS), unlink itself, create actors, call them. */
static int child_main(void)
{
    int failures = 0;
    if (ct_init(NULL)) {
        FAIL("ct_init: %s", ct_last_error());
        return 1;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    if (unlink(self) != 0)
        FAIL("unlink %s: %s", self, strerror(errno));
    *strrchr(self, '/') = 0;
    rmdir(self);
    struct stat st;
    if (stat(self, &st) == 0)
        FAIL("%s still exists", self);
    ct_actor *a[2] = {NULL, NULL};
    ct_resources r = {.cpu = 1, .strategy = CT_SPREAD, .bundle = -1, .timeout_ms = 20000};
    for (int i = 0; i < 2; i++)
        if (ct_actor_create("Counter", &r, NULL, 0, &a[i]))
            FAIL("create %d: %s", i, ct_last_error());
    if (a[0] && a[1] && !strcmp(ct_actor_node(a[0]), ct_actor_node(a[1])))
        FAIL("both actors on %s", ct_actor_node(a[0]));
    for (int i = 0; i < 2 && a[i]; i++) {
        long d = 40 + i, *res = NULL;
        size_t len = 0;
        if (ct_actor_call(a[i], "add", &d, sizeof d, (void **)&res, &len, 10000))
            FAIL("call %d: %s", i, ct_last_error());
        else if (len != sizeof(long) || *res != 40 + i)
            FAIL("actor %d answered %ld, expected %d", i, res ? *res : -1, 40 + i);
        free(res);
        /* it runs the node's cached copy */
        char path[64], exe[PATH_MAX];
        snprintf(path, sizeof path, "/proc/%d/exe", ct_actor_pid(a[i]));
        ssize_t k = readlink(path, exe, sizeof exe - 1);
        exe[k > 0 ? k : 0] = 0;
        if (strncmp(exe, "/tmp/ct-node.", 13) || !strstr(exe, "/exe/"))
            FAIL("actor %d runs '%s', not a node's cached copy", i, exe);
    }
    for (int i = 0; i < 2; i++)
        ct_actor_release(&a[i]);
    ct_shutdown();
    return failures ? 1 : 0;
}

static pid_t spawn_in(const char *dir, char *const argv[], const char *addr)
{
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me || chdir(dir) != 0)
            _exit(1);
        if (addr)
            setenv("CT_ADDRESS", addr, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid > 0 && h_nprocs < H_MAX_PROCS)
        h_procs[h_nprocs++] = pid;
    return pid;
}

static int copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[1 << 16];
    size_t n;
    int rc = in && out ? 0 : -1;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = -1;
    if (in)
        fclose(in);
    if (out && fclose(out))
        rc = -1;
    return rc ? rc : chmod(to, 0755);
}

int main(int argc, char **argv)
{
    register_test_classes();
    ct_serve_if_worker();
    if (argc > 1 && !strcmp(argv[1], "--child"))
        return child_main();
    h_init();
    char addr[128], dirs[3][64];
    for (int i = 0; i < 3; i++) {
        snprintf(dirs[i], sizeof dirs[i], "/tmp/ct-codeship.%d.%d", (int)getpid(), i);
        mkdir(dirs[i], 0700);
    }
    /* deaths come from the death watch; the heartbeat timeout (default 10 s) judges only silent
     * hosts: a 1 s one was crossed by live nodes starved of CPU beside 8 busy processes */
    pid_t head = h_start_head(addr, sizeof addr, "100", "10000");
    if (head < 0)
        return 1;
    pid_t nodes[2];
    for (int i = 0; i < 2; i++) {
        char *nargv[] = {(char *)h_bin("ct-node"), "--head", addr, "--cpus", "1", NULL};
        nodes[i] = spawn_in(dirs[i], nargv, NULL);
    }
    char drv[128];
    snprintf(drv, sizeof drv, "%s/driver", dirs[2]);
    CHECK_OK(copy_file("/proc/self/exe", drv));
    /* both nodes registered (the child's SPREAD needs both): asked, not slept for */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "%s status --address %s", h_bin("ctup"), addr);
    for (double t = h_now_ms() + 20000; h_now_ms() < t; usleep(50000)) {
        char *out = h_capture(cmd);
        bool both = out && strstr(out, "2 nodes (2 alive)");
        free(out);
        if (both)
            break;
    }
    char *cargv[] = {drv, "--child", NULL};
    pid_t child = spawn_in(dirs[2], cargv, addr);
    int status = -1;
    double until = h_now_ms() + 60000;
    while (waitpid(child, &status, WNOHANG) == 0 && h_now_ms() < until)
        usleep(10000);
    CHECK(WIFEXITED(status));
    CHECK_EQ_INT(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
    struct stat st;
    CHECK(stat(drv, &st) != 0); /* the child did unlink itself */
    for (int i = 0; i < 2; i++) {
        kill(nodes[i], SIGTERM);
        CHECK(h_wait_gone(nodes[i], 5000));
        waitpid(nodes[i], NULL, 0);
        char p[64];
        CHECK(!h_node_dir_exists(nodes[i]));
        snprintf(p, sizeof p, "/dev/shm/ct.node.%d.arena", (int)nodes[i]);
        CHECK(stat(p, &st) != 0);
    }
    h_kill_all();
    for (int i = 0; i < 3; i++) {
        unlink(drv);
        rmdir(dirs[i]);
    }
    if (h_failures)
        fprintf(stderr, "test_codeship: %d failures\n", h_failures);
    return h_failures ? 1 : 0;
}
