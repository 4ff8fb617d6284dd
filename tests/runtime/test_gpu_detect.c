/* tests/runtime/test_gpu_detect.c — ct-node counts its GPUs with NVML loaded by dlopen
 * (actor/gpu_detect.c) and serves whatever NVML says:
 *   1. no --gpus, no driver on this machine: the node registers 0 GPUs and an actor placed on it
 *      answers a call (the 0 is checked only where this process cannot load libnvidia-ml.so.1);
 *   2. a fake libnvidia-ml.so.1 (fake_nvml.c, found through LD_LIBRARY_PATH) counting 3 GPUs:
 *      the node registers 3, calls init, count, shutdown in that order, and takes a 3-GPU actor;
 *   3. the fake's nvmlInit_v2 failing: 0 GPUs, no further NVML call, and the node still serves;
 *   4. --gpus 2 beside the fake counting 3: the explicit count wins, NVML is not asked.
 * Each node has a custom resource of its own (n1..n4) so that an actor lands on the one meant. */
#include "harness.h" /* first: it defines _GNU_SOURCE */
#include "classes.h"
#include "ct/ct.h"

#include <dlfcn.h>

static char logdir[64];

/* The NVML calls the fake logged for node k ("" when none), in buf. */
static const char *nvml_calls(int k, char *buf, size_t cap)
{
    char path[96];
    snprintf(path, sizeof path, "%s/nvml%d.log", logdir, k);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
    return buf;
}

static void rm_logs(void)
{
    if (getpid() != h_owner || !logdir[0])
        return;
    char path[96];
    for (int k = 1; k <= 4; k++) {
        snprintf(path, sizeof path, "%s/nvml%d.log", logdir, k);
        unlink(path);
    }
    rmdir(logdir);
}

/* Starts node k with the fake NVML in reach (count: what it reports; init_rc: what its init
 * returns), waits for it to join; its id in id. The fake is only in this node's environment. */
static pid_t start_node(const char *addr, int k, const char *count, const char *init_rc,
                        const char *gpus, char *id, size_t cap)
{
    char res[16], log[96];
    snprintf(res, sizeof res, "n%d=1", k);
    snprintf(log, sizeof log, "%s/nvml%d.log", logdir, k);
    const char *was = getenv("LD_LIBRARY_PATH");
    char *old = was ? strdup(was) : NULL, path[PATH_MAX];
    if (count) { /* the fake first, before any real library on the path */
        snprintf(path, sizeof path, "%s%s%s", FAKE_NVML_DIR, old ? ":" : "", old ? old : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        setenv("CT_TEST_NVML_COUNT", count, 1);
        setenv("CT_TEST_NVML_INIT_RC", init_rc, 1);
        setenv("CT_TEST_NVML_LOG", log, 1);
    }
    pid_t pid = h_start_node(addr, "--cpus", "2", "--resources", res, gpus ? "--gpus" : NULL, gpus);
    if (old)
        setenv("LD_LIBRARY_PATH", old, 1);
    else
        unsetenv("LD_LIBRARY_PATH");
    free(old);
    unsetenv("CT_TEST_NVML_COUNT");
    unsetenv("CT_TEST_NVML_INIT_RC");
    unsetenv("CT_TEST_NVML_LOG");
    ct_event ev = {0};
    CHECK_OK(ct_events_next(&ev, 5000));
    CHECK_EQ_INT(ev.type, CT_EVENT_NODE_JOINED);
    CHECK_EQ_INT(ev.pid, pid);
    snprintf(id, cap, "%s", ev.node_id);
    return pid;
}

/* Creates a Counter needing res, checks it runs on node id and adds; the actor, or NULL. */
static ct_actor *serves_on(ct_resources *res, const char *id)
{
    ct_actor *a = NULL;
    long start = 40, one = 2, *v = NULL;
    size_t n = 0;
    res->timeout_ms = 10000;
    CHECK_OK(ct_actor_create("Counter", res, &start, sizeof start, &a));
    if (!a)
        return NULL;
    char *w = NULL;
    CHECK_OK(ct_actor_call(a, "where", NULL, 0, (void **)&w, &n, 3000));
    CHECK_STR(w, id);
    free(w);
    CHECK_OK(ct_actor_call(a, "add", &one, sizeof one, (void **)&v, &n, 3000));
    CHECK_EQ_INT(n, sizeof(long));
    CHECK_EQ_INT(v ? *v : -1, 42);
    free(v);
    return a;
}

int main(void)
{
    register_test_classes();
    ct_serve_if_worker(); /* actor processes stop here */
    h_init();
    snprintf(logdir, sizeof logdir, "/tmp/ct-test-nvml.XXXXXX");
    if (!mkdtemp(logdir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    atexit(rm_logs);
    /* a machine with the driver counts its own GPUs in case 1: what it counts is not known */
    void *real = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    bool no_driver = !real;
    if (real)
        dlclose(real);
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    char ids[4][32] = {"", "", "", ""}, calls[256];
    ct_actor *a[4] = {0};
    double total = -1, free_gpu = -1;

    /* 1: no --gpus, no driver */
    start_node(addr, 1, NULL, NULL, NULL, ids[0], sizeof ids[0]);
    CHECK_OK(ct_cluster_resources("GPU", &total, &free_gpu));
    if (no_driver)
        CHECK_EQ_INT((long long)total, 0);
    else
        fprintf(stderr, "libnvidia-ml.so.1 loads here: node 1 counted %g GPUs (not checked)\n",
                total);
    double base = total;
    a[0] = serves_on(&(ct_resources){.cpu = 1, .custom = {{"n1", 1}}}, ids[0]);

    /* 2: the fake counts 3 */
    start_node(addr, 2, "3", "0", NULL, ids[1], sizeof ids[1]);
    CHECK_OK(ct_cluster_resources("GPU", &total, &free_gpu));
    CHECK_EQ_INT((long long)(total - base), 3);
    CHECK_STR(nvml_calls(2, calls, sizeof calls), "init\ncount\nshutdown\n");
    a[1] = serves_on(&(ct_resources){.cpu = 1, .gpu = 3}, ids[1]);

    /* 3: the fake's init fails (9: NVML_ERROR_DRIVER_NOT_LOADED) */
    start_node(addr, 3, "3", "9", NULL, ids[2], sizeof ids[2]);
    CHECK_OK(ct_cluster_resources("GPU", &total, &free_gpu));
    CHECK_EQ_INT((long long)(total - base), 3);
    CHECK_STR(nvml_calls(3, calls, sizeof calls), "init\n");
    a[2] = serves_on(&(ct_resources){.cpu = 1, .custom = {{"n3", 1}}}, ids[2]);

    /* 4: --gpus 2 is taken as given */
    start_node(addr, 4, "3", "0", "2", ids[3], sizeof ids[3]);
    CHECK_OK(ct_cluster_resources("GPU", &total, &free_gpu));
    CHECK_EQ_INT((long long)(total - base), 5);
    CHECK_STR(nvml_calls(4, calls, sizeof calls), "");
    a[3] = serves_on(&(ct_resources){.cpu = 1, .gpu = 2, .custom = {{"n4", 1}}}, ids[3]);

    return h_finish_actors(a, 4, "test_gpu_detect");
}
