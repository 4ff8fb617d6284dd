/* tests/harness/timeout_sleeper.c — the program that test_timeout_cleanup.c has killed. It
 * starts real clusters the three ways the tests do, each with actors, lists every process it
 * started, says "ready" and sleeps until it is killed:
 *   - its own ct-head and 2 ct-nodes (tests/runtime/harness.h), itself their driver, one actor
 *     on each node (the runtime tests);
 *   - this program again, as a driver with an embedded cluster (ct_init with no address), one
 *     actor (the trainer tests);
 *   - `ctup up` of a local cluster, a head and 2 detached nodes (tests/cluster/ctup_test.h),
 *     and `ctup submit` of this program as its driver, one actor on each node
 *     (cluster_trainer_e2e).
 *
 *   harness_timeout_sleeper PIDFILE       all of the above; PIDFILE gets "dir" and its private
 *                                         directory, "dir" and its secret's directory (for the
 *                                         killer to remove), one "pid start
 *                                         comm" line per process (start: /proc/PID/stat field
 *                                         22), then "end"
 *   harness_timeout_sleeper --driver N    a driver: ct_init (CT_ADDRESS, else embedded), N actors
 *                                         of 1 CPU, prints "driver ready", sleeps
 * Not a test by itself: nothing here cleans up; being killed is its purpose. */
#include "tests/cluster/ctup_test.h"
#include "tests/runtime/classes.h"

#define MAX_PROCS 8192

static pid_t all_pid[MAX_PROCS], all_ppid[MAX_PROCS];
static int n_all;

/* Snapshot of every process's parent, from /proc. */
static void read_parents(void)
{
    n_all = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d)) && n_all < MAX_PROCS) {
        int pid = atoi(de->d_name);
        char path[64], buf[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = pid > 0 ? fopen(path, "r") : NULL;
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *rp = strrchr(buf, ')');
        int ppid;
        if (rp && sscanf(rp + 1, " %*c %d", &ppid) == 1) {
            all_pid[n_all] = pid;
            all_ppid[n_all++] = ppid;
        }
    }
    if (d)
        closedir(d);
}

/* Writes root (unless skip_root) and all its descendants in the snapshot to out. */
static int write_tree(FILE *out, pid_t root, int skip_root)
{
    int n = 0;
    if (!skip_root && t_start_time(root)) {
        fprintf(out, "%d %llu %s\n", (int)root, t_start_time(root), t_comm(root));
        n++;
    }
    for (int i = 0; i < n_all; i++)
        if (all_ppid[i] == root)
            n += write_tree(out, all_pid[i], 0);
    return n;
}

/* Reads lines from fd until one starts with want; 0, or -1 on EOF or after timeout_ms. */
static int wait_line(int fd, const char *want, int timeout_ms)
{
    char line[512];
    double until = h_now_ms() + timeout_ms;
    while (h_now_ms() < until) {
        if (h_read_line(fd, line, sizeof line, (int)(until - h_now_ms())))
            return -1;
        if (!strncmp(line, want, strlen(want)))
            return 0;
    }
    return -1;
}

static int driver(int n)
{
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 1}));
    ct_actor *a[4] = {NULL};
    for (int i = 0; i < n && i < 4; i++)
        CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 1}, NULL, 0, &a[i]));
    if (h_failures)
        return 1;
    printf("driver ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    register_test_classes();
    ct_serve_if_worker();
    if (argc == 3 && !strcmp(argv[1], "--driver"))
        return driver(atoi(argv[2]));
    if (argc != 2) {
        fprintf(stderr, "usage: harness_timeout_sleeper PIDFILE | --driver N\n");
        return 2;
    }
    t_init();
    char self[PATH_MAX];
    snprintf(self, sizeof self, "%s", h_bin("harness_timeout_sleeper"));

    /* 1. a head and 2 nodes of its own, one actor on each */
    char addr[128];
    CHECK(h_start_head(addr, sizeof addr, "100", "1000") > 0);
    for (int i = 0; i < 2; i++)
        CHECK(h_start_node(addr, "--cpus", "1", "--store-memory", "64M", NULL, NULL) > 0);
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    ct_actor *a[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 1}, NULL, 0, &a[i]));

    /* 2. a driver with an embedded cluster */
    int fd = -1;
    char *embedded[] = {self, "--driver", "1", NULL};
    CHECK(h_spawn(embedded, &fd) > 0 && wait_line(fd, "driver ready", 30000) == 0);

    /* 3. ctup up, then ctup submit of a driver */
    char yaml[1024], *out = NULL;
    snprintf(yaml, sizeof yaml,
             "cluster_name: t-sleeper-%d\n"
             "provider:\n  type: local\n  worker_ips: [127.0.0.1, 127.0.0.1]\n"
             "available_node_types:\n  w: {resources: {CPU: 1}, store_memory: 64M}\n"
             "ct: {start_timeout_s: 30}\n",
             (int)getpid());
    const char *cfg = t_write("sleeper.yaml", yaml);
    int rc = t_ctup(&out, "up %s", cfg);
    if (rc != 0) {
        fprintf(stderr, "ctup up: exit %d\n%s\n", rc, out ? out : "");
        h_failures++;
    }
    free(out);
    char *submit[] = {(char *)h_bin("ctup"), "submit", (char *)cfg, self, "--driver", "2", NULL};
    CHECK(h_spawn(submit, &fd) > 0 && wait_line(fd, "driver ready", 60000) == 0);
    if (h_failures)
        return 1;

    /* every process started: this one's descendants, and the detached daemons ctup recorded
     * with theirs */
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return 1;
    fprintf(f, "dir %s\n", t_dir);
    if (h_secret_dir[0]) /* harness.h's secret: its atexit never runs here either */
        fprintf(f, "dir %s\n", h_secret_dir);
    read_parents();
    int n = write_tree(f, getpid(), 1);
    char name[64];
    snprintf(name, sizeof name, "t-sleeper-%d", (int)getpid());
    ct_cluster_state st;
    CHECK_OK(ct_cluster_state_read(name, &st));
    for (int i = 0; i < st.n_procs; i++)
        n += write_tree(f, st.procs[i].pid, 0);
    fprintf(f, "end\n");
    if (fclose(f) || rename(tmp, argv[1]))
        return 1;
    printf("ready: %d processes listed in %s\n", n, argv[1]);
    fflush(stdout);
    for (;;)
        pause();
}
