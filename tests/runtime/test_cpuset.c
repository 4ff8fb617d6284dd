/* tests/runtime/test_cpuset.c — ct-node --cpuset: a node started with --cpuset 0 (no --cpus)
 * offers 1 CPU, and the actors it starts may run on CPU 0 only (/proc/PID/status); a second
 * node on --cpuset 1 brings the cluster to 2 CPUs; a malformed list is refused with exit 2 and
 * the option named. Skipped (77) on a machine with one CPU. */
#include "harness.h"
#include "classes.h"
#include "ct/ct.h"

static void allowed_list(int pid, char *out, size_t cap)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    out[0] = 0;
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            sscanf(line + 18, " %63s", out);
            (void)cap;
        }
    if (f)
        fclose(f);
}

int main(void)
{
    register_test_classes();
    ct_serve_if_worker();
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        return 77;
    h_init();
    char addr[128];
    pid_t head = h_start_head(addr, sizeof addr, "100", "1000");
    if (head < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    ct_event ev;
    h_start_node(addr, "--cpuset", "0", NULL, NULL, NULL, NULL);
    CHECK_OK(ct_events_next(&ev, 5000));
    double total = 0, free_cpu = 0;
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK_EQ_INT((int)total, 1);
    ct_actor *a = NULL;
    CHECK_OK(ct_actor_create("Counter", NULL, NULL, 0, &a));
    char list[64] = "";
    if (a) {
        allowed_list(ct_actor_pid(a), list, sizeof list);
        CHECK_STR(list, "0");
        fprintf(stderr, "actor %d may run on CPUs %s\n", ct_actor_pid(a), list);
    }
    h_start_node(addr, "--cpuset", "1", NULL, NULL, NULL, NULL);
    CHECK_OK(ct_events_next(&ev, 5000));
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK_EQ_INT((int)total, 2);
    /* a malformed list: exit 2, the option named */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s --head %s --cpuset 3-1 2>&1; echo rc=$?", h_bin("ct-node"), addr);
    char *out = h_capture(cmd);
    CHECK(out && strstr(out, "--cpuset") && strstr(out, "rc=2"));
    free(out);
    ct_actor_release(&a);
    ct_shutdown();
    h_kill_all();
    CHECK_EQ_INT(h_leftovers(3000), 0);
    if (h_failures)
        fprintf(stderr, "test_cpuset: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
