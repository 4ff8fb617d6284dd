/* tests/runtime/test_gpu_assign.c — each actor a node starts gets a CUDA_VISIBLE_DEVICES of its
 * own (actor/node_gpus.c chooses, the zygote's child sets it):
 *   1. a node with --gpus 2: two 1-GPU actors see "0" and "1" (one each), an actor with no GPU
 *      demand sees "" (every GPU hidden);
 *   2. the 1-GPU actor on "1" killed: the next 1-GPU actor gets "1", the index it freed;
 *   3. both GPU actors gone: two 0.5-GPU actors share index "0" (the head packs them onto one
 *      GPU's worth of its count, so the node packs them onto one GPU);
 *   4. a node started with CUDA_VISIBLE_DEVICES=5,7 and --gpus 2: its 1-GPU actors see "5" and
 *      "7", the physical devices the node was given.
 * Each node has a custom resource of its own (n1, n2) so that an actor lands on the one meant. No
 * GPU is needed: nothing here initializes CUDA. */
#include "harness.h" /* first: it defines _GNU_SOURCE */
#include "classes.h"
#include "ct/ct.h"

/* Starts a node with --gpus 2 and custom resource name=100, waits for it to join. */
static pid_t start_node(const char *addr, const char *name)
{
    char res[32];
    snprintf(res, sizeof res, "%s=100", name);
    pid_t pid = h_start_node(addr, "--cpus", "8", "--gpus", "2", "--resources", res);
    ct_event ev = {0};
    int rc;
    do /* the deaths of this driver's actors come to it as events too */
        rc = ct_events_next(&ev, 5000);
    while (!rc && ev.type == CT_EVENT_ACTOR_DEAD);
    CHECK_OK(rc);
    CHECK_EQ_INT(ev.type, CT_EVENT_NODE_JOINED);
    CHECK_EQ_INT(ev.pid, pid);
    return pid;
}

/* Creates a Counter on the node with custom resource name, needing gpu GPUs; its
 * CUDA_VISIBLE_DEVICES in out ("(error)" when it could not be asked). The actor, or NULL. */
static ct_actor *start(const char *name, double gpu, char *out, size_t cap)
{
    ct_resources res = {.cpu = 0.5, .gpu = gpu, .custom = {{name, 1}}, .timeout_ms = 10000};
    ct_actor *a = NULL;
    char *v = NULL;
    size_t n = 0;
    snprintf(out, cap, "(error)");
    CHECK_OK(ct_actor_create("Counter", &res, NULL, 0, &a));
    if (a) {
        CHECK_OK(ct_actor_call(a, "cuda", NULL, 0, (void **)&v, &n, 3000));
        if (v && n && !v[n - 1])
            snprintf(out, cap, "%s", v);
    }
    free(v);
    return a;
}

/* Kills a and waits until the runtime knows it died (the node has reaped it by then). */
static void kill_and_wait(ct_actor *a)
{
    if (!a)
        return;
    CHECK_OK(ct_actor_kill(a));
    double until = h_now_ms() + 5000;
    while (!ct_actor_is_dead(a) && h_now_ms() < until)
        usleep(5000);
    CHECK(ct_actor_is_dead(a));
}

/* Whether s is one of a, b. */
static bool one_of(const char *s, const char *a, const char *b)
{
    return !strcmp(s, a) || !strcmp(s, b);
}

#define NA 9

int main(void)
{
    register_test_classes();
    ct_serve_if_worker(); /* actor processes stop here */
    h_init();
    unsetenv("CUDA_VISIBLE_DEVICES"); /* node 1 must number its GPUs 0, 1 on any machine */
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    ct_actor *a[NA] = {0};
    char v[NA][64];

    /* 1: two 1-GPU actors and one without GPUs on a 2-GPU node */
    start_node(addr, "n1");
    a[0] = start("n1", 1, v[0], sizeof v[0]);
    a[1] = start("n1", 1, v[1], sizeof v[1]);
    a[2] = start("n1", 0, v[2], sizeof v[2]);
    CHECK(one_of(v[0], "0", "1"));
    CHECK(one_of(v[1], "0", "1"));
    CHECK(strcmp(v[0], v[1]) != 0);
    CHECK_STR(v[2], "");

    /* 2: the index a killed actor held goes to the next one; the one holding "1" goes, so that
     * a node that lost track (and shared the least used index, "0") fails here */
    int k = !strcmp(v[1], "1");
    kill_and_wait(a[k]);
    a[3] = start("n1", 1, v[3], sizeof v[3]);
    CHECK_STR(v[3], "1");

    /* 3: fractional demands share one GPU */
    kill_and_wait(a[1 - k]);
    kill_and_wait(a[3]);
    a[4] = start("n1", 0.5, v[4], sizeof v[4]);
    a[5] = start("n1", 0.5, v[5], sizeof v[5]);
    CHECK_STR(v[4], "0");
    CHECK_STR(v[5], "0");

    /* 4: the node's own CUDA_VISIBLE_DEVICES names the devices (only its environment) */
    setenv("CUDA_VISIBLE_DEVICES", "5,7", 1);
    start_node(addr, "n2");
    unsetenv("CUDA_VISIBLE_DEVICES");
    a[6] = start("n2", 1, v[6], sizeof v[6]);
    a[7] = start("n2", 1, v[7], sizeof v[7]);
    a[8] = start("n2", 0, v[8], sizeof v[8]);
    CHECK(one_of(v[6], "5", "7"));
    CHECK(one_of(v[7], "5", "7"));
    CHECK(strcmp(v[6], v[7]) != 0);
    CHECK_STR(v[8], "");

    return h_finish_actors(a, NA, "test_gpu_assign");
}
