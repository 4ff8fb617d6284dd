/* tests/trainer/test_cpu_binding.c — each replica gets CPUs of its own (trainer/train/
 * cpu_binding.c). A head and two ct-nodes of one CPU each, so that the two replicas of a group
 * are on different nodes of one kernel (the case a node id alone would get wrong). Before it
 * starts them, the test narrows its own CPU mask to 2 CPUs, which the nodes and their replicas
 * inherit, so that 2 replicas fill them on any machine. A train step reads, in the replica,
 * sched_getaffinity of every thread of its process and leaves the CPU list of its own thread,
 * and whether all threads agree, in the KV.
 *   (a) by default: each replica's threads are all bound to one CPU (cpus_per_replica 1), the
 *       two CPUs differ and both are among the test's 2;
 *   (b) with trainer_opts.no_cpu_binding: every thread keeps the test's 2 CPUs;
 *   (c) first, when the machine has 3 CPUs or more: two nodes kept to 3 CPUs, whose 2
 *       replicas do not fill them, and nothing is bound (those nodes are then stopped).
 * On a machine with one CPU only, nothing is bound in (a) either. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* */
#include "tt.h"

#include <dirent.h>
#include <sched.h>

/* "0,3" for the CPUs of set */
static void cpu_list(const cpu_set_t *set, char *out, size_t cap)
{
    out[0] = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set)) {
            size_t len = strlen(out);
            snprintf(out + len, cap - len, "%s%d", len ? "," : "", c);
        }
}

/* Leaves "<this thread's CPU list> <1: every thread has the same> <threads>" under
 * tt/cpus/<rank>, at each epoch's first step; then the built-in step. */
static int affinity_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    if (trainer_step_index(s) == 0) {
        cpu_set_t mine, other;
        int same = sched_getaffinity(0, sizeof mine, &mine) == 0, threads = 0;
        DIR *d = opendir("/proc/self/task");
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (e->d_name[0] != '.') {
                threads++;
                same = same && sched_getaffinity(atoi(e->d_name), sizeof other, &other) == 0 &&
                       CPU_EQUAL(&mine, &other);
            }
        if (d)
            closedir(d);
        char list[512], key[64], val[600];
        cpu_list(&mine, list, sizeof list);
        snprintf(key, sizeof key, "tt/cpus/%d", trainer_ctx_rank(trainer_step_ctx(s)));
        snprintf(val, sizeof val, "%s %d %d", list, same && d != NULL, threads);
        int rc = ct_kv_put(key, val, strlen(val) + 1);
        if (rc < 0)
            return rc;
    }
    return trainer_builtin_train_step(s, b, out);
}

/* Keeps this process (and what it starts) to the first n CPUs of its affinity mask; returns
 * how many it keeps. */
static int keep_cpus(const cpu_set_t *all, int n)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int kept = 0;
    for (int c = 0; c < CPU_SETSIZE && kept < n; c++)
        if (CPU_ISSET(c, all)) {
            CPU_SET(c, &set);
            kept++;
        }
    return sched_setaffinity(0, sizeof set, &set) == 0 ? kept : -1;
}

/* Trains one epoch and reads each rank's report into lists[rank] (CPU list), same[rank]. */
static int train_and_read(bool no_binding, char lists[2][512], int same[2])
{
    trainer *t = NULL;
    trainer_stats st = {0};
    int rc = trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "adam",
                                            .config = "n=1000",
                                            .num_replicas = 2,
                                            .epochs = 1,
                                            .train_step = "affinity_step",
                                            .no_cpu_binding = no_binding},
                            &t);
    if (rc == 0)
        rc = trainer_train(t, .max_retries = 0, .stats = &st);
    if (rc < 0)
        fprintf(stderr, "training: %s\n", ct_last_error());
    trainer_shutdown(&t);
    for (int r = 0; r < 2 && rc == 0; r++) {
        char key[64];
        void *v = NULL;
        size_t len = 0;
        snprintf(key, sizeof key, "tt/cpus/%d", r);
        if ((rc = ct_kv_get(key, &v, &len, 1000)) < 0)
            break;
        int threads = 0;
        lists[r][0] = 0;
        if (sscanf(v, "%511s %d %d", lists[r], &same[r], &threads) != 3)
            rc = CT_EINVAL;
        printf("%s rank %d: CPUs %s, all %d threads alike: %s\n",
               no_binding ? "no_cpu_binding" : "default", r, lists[r], threads,
               same[r] ? "yes" : "no");
        free(v);
        ct_kv_del(key);
    }
    return rc;
}

/* Starts two ct-nodes of one CPU each (they inherit this process's CPUs) into pids. */
static int start_two_nodes(const char *addr, pid_t pids[2])
{
    char id[128];
    for (int i = 0; i < 2; i++)
        if ((pids[i] = tt_start_node_joined(addr, id, sizeof id)) < 0)
            return -1;
    return 0;
}

int main(void)
{
    tt_register();
    trainer_register_train_step("affinity_step", affinity_step);
    ct_serve_if_worker();
    h_init();
    char addr[128], lists[2][512], set_list[512];
    int same[2] = {0, 0};
    pid_t nodes[2];
    cpu_set_t all, set;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
    int machine = CPU_COUNT(&all);
    if (h_start_head(addr, sizeof addr, "100", "10000") < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));

    /* (c) */
    if (machine >= 3) {
        CHECK(keep_cpus(&all, 3) == 3 && sched_getaffinity(0, sizeof set, &set) == 0);
        cpu_list(&set, set_list, sizeof set_list);
        printf("(c) the nodes keep to CPUs %s\n", set_list);
        if (start_two_nodes(addr, nodes) < 0 || train_and_read(false, lists, same) < 0) {
            h_failures++;
            goto out;
        }
        CHECK(same[0] && same[1]);
        CHECK(!strcmp(lists[0], set_list) && !strcmp(lists[1], set_list));
        for (int i = 0; i < 2; i++)
            CHECK(h_reap(nodes[i], SIGTERM, 10000) >= 0);
        CHECK(tt_wait_total_cpus(0, 10000));
    } else {
        printf("(c) skipped: %d CPU(s) on this machine\n", machine);
    }

    int ncpus = keep_cpus(&all, 2);
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    cpu_list(&set, set_list, sizeof set_list);
    printf("(a), (b): the nodes keep to CPUs %s (%d of %d)\n", set_list, ncpus, machine);
    if (start_two_nodes(addr, nodes) < 0) {
        h_failures++;
        goto out;
    }

    /* (a) */
    if (train_and_read(false, lists, same) == 0) {
        CHECK(same[0] && same[1]);
        if (ncpus == 2) {
            int c0 = atoi(lists[0]), c1 = atoi(lists[1]);
            CHECK(!strchr(lists[0], ',') && !strchr(lists[0], '-'));
            CHECK(!strchr(lists[1], ',') && !strchr(lists[1], '-'));
            CHECK(c0 != c1);
            CHECK(CPU_ISSET(c0, &set) && CPU_ISSET(c1, &set));
        } else {
            CHECK(!strcmp(lists[0], set_list) && !strcmp(lists[1], set_list));
        }
    } else {
        h_failures++;
    }

    /* (b) */
    if (train_and_read(true, lists, same) == 0) {
        CHECK(same[0] && same[1]);
        CHECK(!strcmp(lists[0], set_list));
        CHECK(!strcmp(lists[1], set_list));
    } else {
        h_failures++;
    }
out:
    ct_shutdown();
    if (h_failures) {
        fprintf(stderr, "test_cpu_binding: %d failure(s)\n", h_failures);
        return 1;
    }
    printf("test_cpu_binding: ok\n");
    return 0;
}
