/* tests/runtime/test_cluster.c — a head and 3 nodes with different resources on loopback:
 * 6 actors placed by their needs, method calls return the right values, a 7th actor queues
 * while nothing fits, a placement group that does not fit stays pending and becomes ready
 * (and takes an actor) when a 4th node with room joins; ctup status shows all of it; every
 * process is gone afterwards. */
#include "harness.h"
#include "classes.h"
#include "ct/ct.h"

static char *where(ct_actor *a)
{
    char *w = NULL;
    size_t n;
    if (ct_actor_call(a, "where", NULL, 0, (void **)&w, &n, 3000))
        return strdup("?");
    return w;
}

int main(void)
{
    register_test_classes();
    ct_serve_if_worker(); /* actor processes stop here */
    h_init();
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    /* node 1: 5 CPUs; node 2: 2 CPUs + 2 GPUs; node 3: 2 CPUs + disk=1. Started one at a time,
     * so that each one's (random) id is known from its NODE_JOINED event. */
    pid_t nodes[4] = {0};
    char ids[4][32] = {"", "", "", ""};
    ct_init_opts io = {.address = addr};
    CHECK_OK(ct_init(&io));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    const char *args[3][4] = {{"--cpus", "5", "--gpus", "0"},
                              {"--cpus", "2", "--gpus", "2"},
                              {"--cpus", "2", "--resources", "disk=1"}};
    for (int i = 0; i < 3; i++) {
        nodes[i] = h_start_node(addr, args[i][0], args[i][1], args[i][2], args[i][3],
                                i == 2 ? "--gpus" : NULL, "0");
        ct_event ev;
        CHECK_OK(ct_events_next(&ev, 5000));
        CHECK_EQ_INT(ev.type, CT_EVENT_NODE_JOINED);
        CHECK_EQ_INT(ev.pid, nodes[i]);
        snprintf(ids[i], sizeof ids[i], "%s", ev.node_id);
    }
    double total, free_cpu;
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK_EQ_INT((int)total, 9);

    ct_resources need[7] = {
        {.cpu = 1, .gpu = 1},                /* -> node 2 */
        {.cpu = 1, .gpu = 1},                /* -> node 2 */
        {.cpu = 1, .custom = {{"disk", 1}}}, /* -> node 3 */
        {.cpu = 4},                          /* -> node 1 (only one with 4) */
        {.cpu = 1},                          /* node 1 or node 3 */
        {.cpu = 1},                          /* the other one */
        {.cpu = 1, .timeout_ms = 1500},      /* nothing left: times out */
    };
    const char *expect[7] = {ids[1], ids[1], ids[2], ids[0], NULL, NULL, NULL};
    ct_actor *a[7] = {0};
    ct_actor *in_pg = NULL; /* here, not below: the gotos to done jump over the code below */
    for (int i = 0; i < 6; i++) {
        long start = 1000 * (i + 1);
        CHECK_OK(ct_actor_create("Counter", &need[i], &start, sizeof start, &a[i]));
        if (!a[i])
            goto done;
        char *w = where(a[i]);
        CHECK_STR(w, ct_actor_node(a[i]));
        if (expect[i])
            CHECK_STR(w, expect[i]);
        free(w);
    }
    CHECK(strcmp(ct_actor_node(a[4]), ct_actor_node(a[5])) != 0);
    CHECK(!strcmp(ct_actor_node(a[4]), ids[0]) || !strcmp(ct_actor_node(a[4]), ids[2]));
    /* every actor keeps its own state */
    for (int i = 0; i < 6; i++) {
        long d = i + 1, *v = NULL;
        size_t n = 0;
        CHECK_OK(ct_actor_call(a[i], "add", &d, sizeof d, (void **)&v, &n, 3000));
        CHECK_EQ_INT(n, sizeof(long));
        CHECK_EQ_INT(v ? *v : -1, 1000 * (i + 1) + i + 1);
        free(v);
    }
    /* CPUs are all taken: the 7th waits in the queue, then fails at its deadline */
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK_EQ_INT((int)free_cpu, 0);
    double t0 = h_now_ms();
    int rc = ct_actor_create("Counter", &need[6], NULL, 0, &a[6]);
    CHECK_EQ_INT(rc, CT_ETIMEDOUT);
    CHECK(h_now_ms() - t0 >= 1400);

    /* a placement group of 2 x {CPU 2} does not fit: pending until node 4 (4 CPUs) joins */
    ct_placement_group *pg = NULL;
    ct_bundle b[2] = {{.cpu = 2}, {.cpu = 2}};
    CHECK_OK(ct_placement_group_create(b, 2, CT_PACK, &pg));
    CHECK_EQ_INT(ct_placement_group_wait(pg, 300), CT_ETIMEDOUT);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s status --address %s", h_bin("ctup"), addr);
    char *out = h_capture(cmd);
    char pgpend[96];
    snprintf(pgpend, sizeof pgpend, "%-10s PENDING", ct_placement_group_id(pg));
    CHECK(out && strstr(out, pgpend));
    free(out);
    nodes[3] = h_start_node(addr, "--cpus", "4", "--gpus", "0", NULL, NULL);
    t0 = h_now_ms();
    CHECK_OK(ct_placement_group_wait(pg, 5000));
    CHECK(h_now_ms() - t0 < 3000);
    {
        ct_event ev;
        CHECK_OK(ct_events_next(&ev, 5000));
        CHECK_EQ_INT(ev.pid, nodes[3]);
        snprintf(ids[3], sizeof ids[3], "%s", ev.node_id);
    }
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 2, .pg = pg, .bundle = 1}, NULL, 0,
                             &in_pg));
    if (in_pg) {
        char *w = where(in_pg);
        CHECK_STR(w, ids[3]);
        free(w);
    }
    /* the group holds node 4's CPUs: an actor outside it cannot have them */
    CHECK_EQ_INT(
        ct_actor_create("Counter", &(ct_resources){.cpu = 1, .timeout_ms = 300}, NULL, 0, &a[6]),
        CT_ETIMEDOUT);

    /* ctup status: nodes with resources and state, actors with class, node, pid, state */
    out = h_capture(cmd);
    CHECK(out != NULL);
    if (out) {
        CHECK(strstr(out, "4 nodes (4 alive)") != NULL);
        CHECK(strstr(out, "CPU=0/5") != NULL);
        CHECK(strstr(out, "GPU=0/2") != NULL);
        CHECK(strstr(out, "disk=0/1") != NULL);
        char pgline[96];
        snprintf(pgline, sizeof pgline, "%-10s READY    %s,%s", ct_placement_group_id(pg), ids[3],
                 ids[3]);
        CHECK(strstr(out, pgline) != NULL);
        for (int i = 0; i < 6; i++) {
            char line[200];
            snprintf(line, sizeof line, "%-10s %-16s %-17s %-8d %s", ct_actor_id(a[i]), "Counter",
                     ct_actor_node(a[i]), ct_actor_pid(a[i]), "ALIVE");
            if (!strstr(out, line)) {
                fprintf(stderr, "ctup status lacks '%s':\n%s", line, out);
                h_failures++;
            }
        }
        CHECK(strstr(out, "DEAD") != NULL); /* the timed-out creations */
        /* each live node's object store: transfer address, no objects yet */
        for (int i = 0; i < 4; i++) {
            char line[160];
            snprintf(line, sizeof line, "\n%-17s tcp://", ids[i]);
            CHECK(strstr(out, line) != NULL);
        }
    }
    free(out);
    /* bad arguments are refused with the field named */
    CHECK_EQ_INT(ct_actor_create("Nope", NULL, NULL, 0, &a[6]), CT_ENOENT);
    CHECK(strstr(ct_last_error(), "Nope") != NULL);
    rc = ct_actor_create("Broken", NULL, NULL, 0, &a[6]);
    CHECK(rc != 0);
    CHECK(strstr(ct_last_error(), "Broken.create failed") != NULL);
    CHECK_OK(ct_placement_group_remove(&pg));

done:;
    pid_t pids[8];
    int np = 0;
    for (int i = 0; i < 6; i++)
        if (a[i])
            pids[np++] = ct_actor_pid(a[i]);
    if (in_pg)
        pids[np++] = ct_actor_pid(in_pg);
    ct_actor_release(&in_pg);
    ct_shutdown();
    h_kill_all();
    for (int i = 0; i < 4; i++)
        CHECK(nodes[i] <= 0 || h_gone(nodes[i]));
    for (int i = 0; i < np; i++)
        if (!h_wait_gone(pids[i], 3000)) {
            fprintf(stderr, "actor pid %d still running\n", (int)pids[i]);
            h_failures++;
        }
    CHECK_EQ_INT(h_leftovers(3000), 0);
    if (h_failures)
        fprintf(stderr, "test_cluster: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
