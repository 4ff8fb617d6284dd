/* tests/head/test_dashboard.c — the head's HTTP endpoint (head/http.c, head/metrics.c) with
 * real parts: a ct-head started with --dashboard-port, ct-nodes, a trainer job, and Debian's
 * Prometheus. One mode per run (argv[1]):
 *   prometheus  a Prometheus of the test's own (its binary, a config and data in a temporary
 *               directory, 1 s scrapes, killed by pid) scrapes a head with 2 nodes while a
 *               2-replica job trains; the test asks Prometheus's HTTP API (/api/v1/query) that
 *               ct_train_step rises, that the alive node count is 2 and then 1 once the node of
 *               the replica that is not the driver's is killed (SIGKILL by pid), and that
 *               ct_train_retries_total counts that death as node_lost (recovery "restart").
 *               Skips (77) without prometheus.
 *   prometheus_live  the same under the default recovery, "live": the death is counted by
 *               ct_train_live_recoveries_total, and no retry.
 *               Both: ct_train_val_loss is the trainer's last validation loss, and the surviving
 *               node's ct_node_cpu_utilization (0..1), memory, heartbeat age and draining 0.
 *   prometheus_nodes  one node with a 64 MiB shard and a spill directory: 96 MiB put there;
 *               Prometheus sees ct_node_object_store_spilled_bytes/_objects and
 *               _arena_used_bytes in range, ct_node_object_store_used_bytes all of it, the CPU
 *               fraction, ct_node_memory_total_bytes equal to this host's MemTotal (used plus
 *               available), the GPU metrics absent without NVML (present with); a second
 *               node with a stand-in NVML (fake_nvml.c, by LD_LIBRARY_PATH) shows its 2 GPUs'
 *               memory and the one utilisation reported; and
 *               ct_node_draining 0, then 1 after a SIGTERM while an actor of this job runs
 *               there (and ct_cluster_nodes{state="draining"} 1).
 *   access      the endpoint bound to 0.0.0.0: a loopback request is served without a token;
 *               one from another address (a network namespace with a veth pair when root can
 *               make one, else this host's own non-loopback address) is refused (403) without
 *               the token or with a wrong one, and served with it. Skips (77) with neither.
 *   hostile     while slowloris connections are held open, oversized headers, bad paths,
 *               other methods, garbage and more connections than the limit come in, the head
 *               keeps serving its node (an actor call, a KV round trip, the node alive) and a
 *               normal /metrics request succeeds (and /api/..., and the dashboard page at /);
 *               a TrainReport with a histogram is shown (cumulative buckets, +Inf, sum) and
 *               malformed ones (bounds out of order, counts above the count, an infinite
 *               ETA, a live recovery's words with a control byte, a heal's too long) are
 *               refused: no trace of them in /metrics; three live recoveries and a heal in
 *               one report are an event each (the newest's words, "the newest of 3") and
 *               counted in /metrics.
 *   browser     Debian's chromium, headless (--dump-dom, its scripts given 10 s of virtual
 *               time; in a process group of its own, killed whole), loads the dashboard page
 *               of a head with 2 nodes after a 2-replica job lost a node (SIGKILL) and
 *               retried: the DOM holds the job's row at its last step with its retry's reason
 *               and a loss curve of at least 5 points, the killed node's death event with a
 *               reason, and the retry event; `ctup status` shows the job's row (step,
 *               epochs, loss, ETA, retries). Skips (77) without chromium.
 *   browser_live  the same under the default recovery, "live", and a third node started
 *               after the kill: no retry; a replacement heals there from the survivor; the
 *               job's row says "live 1; healed 1", the live-recovery event names the killed
 *               node and the survivor that went on, the heal event the new node, the serving
 *               rank and the world 2 again; ctup status's retries column "0 live=1 healed=1";
 *               /metrics ct_train_live_recoveries_total{ct_job} and ct_train_heals_total 1.
 *   restart     a head under its supervisor (ct-head --supervise) with a node is killed
 *               (SIGKILL): once it serves again on its ports, chromium finds the restart
 *               event with its reason (the signal) and the node, registered again, alive.
 *   restart_live  a dashboard page stays open in chromium (the DevTools protocol: a WebSocket,
 *               Runtime.evaluate) while a supervised head is stopped (SIGSTOP: the page says
 *               it is away), killed (SIGKILL) in a 1-replica job's epoch 2 and started again;
 *               never reloaded, the page shows the restart event, says it is connected again,
 *               and the job's row and loss curve reach the job's last step, past the step of
 *               the kill, with more points.
 *               Skips (77) without chromium.
 * No timing is asserted. */
#include "tests/trainer/tt.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "actor/runtime.h"
#include "common/auth.h"
#include "tests/head/endpoint.h"
#include "tests/runtime/classes.h"

/* ---- prometheus ---- */

static char tmp_dir[64];
static pid_t prom_pid = -1;

static void remove_tree(const char *dir)
{
    char cmd[256];
    if (dir[0] && !strncmp(dir, "/tmp/ct-test-prom.", 18)) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", dir);
    }
}

static void prom_cleanup(void)
{
    if (getpid() != h_owner)
        return;
    if (prom_pid > 0) {
        kill(prom_pid, SIGKILL);
        waitpid(prom_pid, NULL, 0);
        prom_pid = -1;
    }
    remove_tree(tmp_dir);
}

static const char *find_prometheus(void)
{
    static char path[PATH_MAX];
    const char *dirs[] = {"/usr/bin", "/usr/local/bin", "/bin"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        snprintf(path, sizeof path, "%s/prometheus", dirs[i]);
        if (access(path, X_OK) == 0)
            return path;
    }
    return NULL;
}

static int prom_port;

/* Starts Prometheus scraping 127.0.0.1:target every second; 0 once its API answers. */
static int start_prometheus(const char *bin, int target)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ct-test-prom.XXXXXX");
    if (!mkdtemp(tmp_dir))
        return -1;
    char cfg[128], data[128], log[128], listen[64];
    snprintf(cfg, sizeof cfg, "%s/prometheus.yml", tmp_dir);
    snprintf(data, sizeof data, "--storage.tsdb.path=%s/data", tmp_dir);
    snprintf(log, sizeof log, "%s/prometheus.log", tmp_dir);
    FILE *f = fopen(cfg, "w");
    if (!f)
        return -1;
    fprintf(f,
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: ct\n    static_configs:\n"
            "      - targets: ['127.0.0.1:%d']\n",
            target);
    fclose(f);
    prom_port = free_port();
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", prom_port);
    char cfgarg[160];
    snprintf(cfgarg, sizeof cfgarg, "--config.file=%s", cfg);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(bin, bin, cfgarg, data, listen, "--log.level=warn", (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return -1;
    prom_pid = pid;
    char body[256];
    for (double until = h_now_ms() + 30000; h_now_ms() < until; usleep(200000))
        if (http_get("127.0.0.1", prom_port, "/-/ready", NULL, body, sizeof body) == 200)
            return 0;
    fprintf(stderr, "prometheus did not get ready (log: %s)\n", log);
    return -1;
}

/* Prometheus's answer to an instant query (its JSON) into out; the first sample's value, NAN
 * when the result is empty or the query failed. */
static double prom_query(const char *q, char *out, size_t cap)
{
    char path[1024] = "/api/v1/query?query=";
    size_t n = strlen(path);
    for (const unsigned char *p = (const unsigned char *)q; *p && n + 4 < sizeof path; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '_' || *p == '.' || *p == '-')
            path[n++] = (char)*p;
        else
            n += (size_t)snprintf(path + n, sizeof path - n, "%%%02X", *p);
    }
    path[n] = 0;
    out[0] = 0;
    if (http_get("127.0.0.1", prom_port, path, NULL, out, cap) != 200)
        return NAN;
    const char *v = strstr(out, "\"value\":[");
    v = v ? strstr(v, ",\"") : NULL;
    return v ? strtod(v + 2, NULL) : NAN;
}

/* Polls query q until cond(value) holds (30 s at most); the last value. */
static double prom_wait(const char *q, bool (*cond)(double, double), double arg, char *out,
                        size_t cap)
{
    double v = NAN;
    for (double until = h_now_ms() + 30000; h_now_ms() < until; usleep(250000))
        if (cond((v = prom_query(q, out, cap)), arg))
            break;
    return v;
}
static bool eq(double v, double want)
{
    return v == want;
}
static bool gt(double v, double than)
{
    return v > than;
}

typedef struct scenario {
    pid_t node_pid[2];
    char node_id[2][32];
    const char *addr;
    bool killed;
    int killed_k; /* node_pid/node_id index of the node killed */
    double step_seen[8];
    int nseen;
    bool heal; /* a node joins after the kill: a replacement fits there and heals */
    pid_t new_pid;
    char new_id[32];
} scenario;

/* Connects to the head at s->addr, starts 2 nodes there (s->node_pid, node_id) and creates a
 * 2-replica job of 3 epochs in *t: recovery "restart" (a death is a retry), or the default,
 * live. 0, or -1 (a failure counted). */
static int start_job(scenario *s, bool live, trainer **t)
{
    CHECK_OK(ct_init(&(ct_init_opts){.address = s->addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    for (int i = 0; i < 2; i++)
        if ((s->node_pid[i] = tt_start_node_joined(s->addr, s->node_id[i], sizeof s->node_id[0])) <
            0) {
            h_failures++;
            return -1;
        }
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .config = "limit=2048,val_limit=200",
                                            .num_replicas = 2,
                                            .epochs = 3,
                                            .seed = 3,
                                            .recovery = live ? NULL : "restart"},
                            t));
    return *t ? 0 : -1;
}

static int kill_replica_node(trainer *t, const trainer_stats *st, scenario *s);

static int prom_on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    scenario *s = user;
    static char out[1 << 16];
    /* the head heard of this epoch's end (a forced report) and Prometheus scraped it */
    double v = prom_wait("max(ct_train_step)", gt, (double)st->steps - 1, out, sizeof out);
    printf("epoch %lld: steps %lld; Prometheus: ct_train_step %g\n", (long long)st->epoch,
           (long long)st->steps, v);
    CHECK(v >= (double)st->steps);
    if (s->nseen < 8)
        s->step_seen[s->nseen++] = v;
    if (st->epoch != 1 || s->killed)
        return 0;
    v = prom_wait("ct_cluster_nodes{state=\"alive\"}", eq, 2, out, sizeof out);
    printf("Prometheus: alive nodes %g before the kill\n", v);
    CHECK_EQ_INT(v, 2);
    int rc = kill_replica_node(t, st, s);
    if (rc)
        return rc;
    v = prom_wait("ct_cluster_nodes{state=\"alive\"}", eq, 1, out, sizeof out);
    printf("Prometheus: alive nodes %g after the kill\n", v);
    CHECK_EQ_INT(v, 1);
    return 0;
}

/* Kills (SIGKILL) the node of a replica that is not on the driver's node, and waits for the
 * replica to go with it. 0, or CT_EINVAL when every replica is on the driver's node. */
static int kill_replica_node(trainer *t, const trainer_stats *st, scenario *s)
{
    const char *mine = ct_object_node();
    for (int i = 0; i < st->replicas && !s->killed; i++) {
        trainer_replica_info info;
        if (trainer_replica_info_get(t, i, &info) < 0 || !strcmp(info.node_id, mine))
            continue;
        for (int k = 0; k < 2; k++)
            if (!strcmp(s->node_id[k], info.node_id)) {
                printf("killing %s (pid %d), which runs replica %d\n", info.node_id,
                       (int)s->node_pid[k], i);
                kill(s->node_pid[k], SIGKILL);
                s->killed = true;
                s->killed_k = k;
                /* the replica goes with its node: wait for it, so the next epoch runs into
                 * the loss (as trainer_node_loss does) */
                for (double until = h_now_ms() + 3000; h_now_ms() < until; usleep(2000))
                    if (kill(info.pid, 0) != 0)
                        break;
            }
    }
    if (!s->killed) {
        fprintf(stderr, "no replica on a node other than the driver's (%s)\n", mine);
        return CT_EINVAL;
    }
    return 0;
}

/* live: the default recovery (the death is a live recovery, counted as such); else
 * "restart" (a retry, counted by reason). */
static int run_prometheus(bool live)
{
    const char *bin = find_prometheus();
    if (!bin) {
        printf("SKIP: no prometheus binary (scripts/install-deps.sh installs Debian's)\n");
        return 77;
    }
    h_init();
    atexit(prom_cleanup);
    char addr[128], log_dir[128] = "";
    int dport = free_port();
    scenario s = {.addr = addr};
    trainer *t = NULL;
    if (start_dash_head((dash_head){.port = dport}, addr, sizeof addr) < 0)
        return 1;
    if (start_prometheus(bin, dport) < 0) {
        h_failures++;
        goto out;
    }
    if (start_job(&s, live, &t))
        goto out;
    /* the run log is on (a log_dir): the head hears of every step, not only of epochs */
    snprintf(log_dir, sizeof log_dir, "%s/run", tmp_dir);
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .max_retries = 2, .on_epoch = prom_on_epoch, .user = &s, .stats = &st,
                           .log_dir = log_dir, .progress = TRAINER_PROGRESS_OFF,
                           .validate_every_epoch = true));
    CHECK(s.killed);
    CHECK_EQ_INT(st.retries_used, live ? 0 : 1);
    CHECK_EQ_INT(st.live_recoveries, live ? 1 : 0);
    /* ct_train_step rose from epoch to epoch */
    CHECK(s.nseen >= 2);
    for (int i = 1; i < s.nseen; i++)
        CHECK(s.step_seen[i] > s.step_seen[i - 1]);
    static char out[1 << 16];
    double v;
    if (live) { /* the death is a live recovery: counted, with no retry */
        v = prom_wait("sum(ct_train_live_recoveries_total)", eq, 1, out, sizeof out);
        printf("Prometheus: live recoveries %g\n", v);
        CHECK_EQ_INT(v, 1);
        prom_query("ct_train_retries_total", out, sizeof out);
        printf("Prometheus: %s\n", out);
        CHECK(strstr(out, "node_lost") == NULL);
    } else {
        v = prom_wait("sum(ct_train_retries_total)", eq, 1, out, sizeof out);
        printf("Prometheus: retries %g\n", v);
        CHECK_EQ_INT(v, 1);
        v = prom_query("ct_train_retries_total", out, sizeof out);
        printf("Prometheus: %s\n", out);
        CHECK(strstr(out, "\"reason\":\"node_lost\"") != NULL);
        v = prom_query("sum(ct_train_live_recoveries_total)", out, sizeof out);
        CHECK_EQ_INT(v, 0);
    }
    v = prom_wait("max(ct_train_done)", eq, 1, out, sizeof out);
    CHECK_EQ_INT(v, 1);
    /* the training job's label is ct_job: Prometheus keeps "job" for its scrape job and would
     * have renamed ours to exported_job */
    prom_query("ct_train_step", out, sizeof out);
    CHECK(strstr(out, "\"ct_job\":") != NULL && strstr(out, "exported_job") == NULL);
    CHECK(strstr(out, "\"job\":\"ct\"") != NULL);
    /* the histograms: every step observed (step, allreduce, data wait), each checkpoint */
    const char *hists[] = {"step", "allreduce", "data_wait", "checkpoint"};
    for (int i = 0; i < 4; i++) {
        char q[160];
        double want = i < 3 ? 5 : 1;
        snprintf(q, sizeof q, "sum(ct_train_%s_seconds_count)", hists[i]);
        double n = prom_wait(q, gt, want - 1, out, sizeof out);
        snprintf(q, sizeof q, "sum(ct_train_%s_seconds_bucket{le=\"+Inf\"})", hists[i]);
        double inf = prom_query(q, out, sizeof out);
        snprintf(q, sizeof q, "histogram_quantile(0.5, sum by (le) (ct_train_%s_seconds_bucket))",
                 hists[i]);
        double median = prom_query(q, out, sizeof out);
        printf("Prometheus: ct_train_%s_seconds: %g observations, median %g s\n", hists[i], n,
               median);
        CHECK(n >= want);
        CHECK(inf == n);
        CHECK(median >= 0 && median <= 60);
    }
    v = prom_query("max(ct_train_last_checkpoint_step)", out, sizeof out);
    printf("Prometheus: last checkpoint at step %g (trainer: %lld steps)\n", v,
           (long long)st.steps);
    CHECK(v > 0 && v <= (double)st.steps);
    /* the validation loss the trainer ended with */
    v = prom_wait("max(ct_train_val_loss)", eq, st.val_loss, out, sizeof out);
    printf("Prometheus: ct_train_val_loss %.17g (trainer: %.17g)\n", v, st.val_loss);
    CHECK(isfinite(v) && v > 0 && fabs(v - st.val_loss) <= 1e-9 * fabs(st.val_loss));
    /* the surviving node, as it measured itself: CPU, memory, heartbeat, not draining */
    v = prom_query("count(ct_node_cpu_utilization >= 0 <= 1)", out, sizeof out);
    printf("Prometheus: nodes with a CPU fraction in 0..1: %g\n", v);
    CHECK_EQ_INT(v, 1);
    v = prom_query("count(ct_node_memory_used_bytes > 0)", out, sizeof out);
    CHECK_EQ_INT(v, 1);
    v = prom_query("max(ct_node_heartbeat_age_seconds)", out, sizeof out);
    printf("Prometheus: heartbeat age %g s\n", v);
    CHECK(v >= 0 && v < 10); /* under --dead-after-ms: it is alive */
    v = prom_query("sum(ct_node_draining)", out, sizeof out);
    CHECK_EQ_INT(v, 0);
out:
    trainer_shutdown(&t);
    ct_shutdown();
    h_kill_all();
    prom_cleanup();
    return h_failures ? 1 : 0;
}

/* MemTotal of this host in bytes (/proc/meminfo), 0 when unread. */
static double host_mem_total(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f) && sscanf(line, "MemTotal: %llu kB", &kb) != 1)
        ;
    if (f)
        fclose(f);
    return (double)kb * 1024;
}

/* One node with a 64 MiB shard and a spill directory, objects put past that, and an actor:
 * Prometheus sees what the node measured of itself (CPU, memory, its shard's bytes in use and
 * spilled), its heartbeat age, and draining 0, then 1 after a SIGTERM while its actor runs.
 * GPU metrics are absent where this process finds no NVML, present otherwise; a second node
 * with tests/head/fake_nvml.c as its NVML shows its GPUs as that library answers. */
static int run_prometheus_nodes(void)
{
    alarm(170);
    const char *bin = find_prometheus();
    if (!bin) {
        printf("SKIP: no prometheus binary (scripts/install-deps.sh installs Debian's)\n");
        return 77;
    }
    h_init();
    atexit(prom_cleanup);
    char addr[128], id[32] = "", spill[160];
    static char out[1 << 16];
    enum { NOBJ = 6, OBJ_BYTES = 16 << 20 };
    ct_object_id ids[NOBJ];
    int nput = 0;
    ct_actor *a = NULL;
    char *buf = NULL;
    int dport = free_port();
    if (start_dash_head((dash_head){.port = dport}, addr, sizeof addr) < 0)
        return 1;
    if (start_prometheus(bin, dport) < 0) {
        h_failures++;
        goto out;
    }
    snprintf(spill, sizeof spill, "%s/spill", tmp_dir);
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED | 1u << CT_EVENT_NODE_DRAINING));
    pid_t node = h_start_node(addr, "--cpus", "2", "--store-memory", "64M", "--spill-dir", spill);
    ct_event ev;
    for (double until = h_now_ms() + 10000; node > 0 && !id[0] && h_now_ms() < until;)
        if (ct_events_next(&ev, 200) == 0 && ev.type == CT_EVENT_NODE_JOINED)
            snprintf(id, sizeof id, "%s", ev.node_id);
    CHECK(id[0]);
    if (!id[0])
        goto out;
    /* 96 MiB into a 64 MiB shard: the oldest go to its spill directory */
    buf = malloc(OBJ_BYTES);
    CHECK(buf != NULL);
    for (int i = 0; buf && i < NOBJ; i++) {
        memset(buf, 'a' + i, OBJ_BYTES);
        int rc = ct_put(buf, OBJ_BYTES, &(ct_put_opts){.node = id}, &ids[i]);
        CHECK_OK(rc);
        if (rc)
            break;
        nput++;
    }
    double v = prom_wait("max(ct_node_object_store_spilled_bytes)", gt, 0, out, sizeof out);
    printf("Prometheus: spilled %g bytes of %d put\n", v, nput * OBJ_BYTES);
    CHECK(v >= OBJ_BYTES && v <= (double)nput * OBJ_BYTES);
    v = prom_query("max(ct_node_object_store_spilled_objects)", out, sizeof out);
    CHECK(v >= 1 && v < nput);
    v = prom_query("max(ct_node_object_store_arena_used_bytes)", out, sizeof out);
    printf("Prometheus: arena in use %g bytes\n", v);
    CHECK(v >= OBJ_BYTES && v <= 64 << 20);
    v = prom_query("max(ct_node_object_store_used_bytes)", out, sizeof out);
    CHECK_EQ_INT(v, (double)nput * OBJ_BYTES); /* the directory counts spilled ones too */
    /* the host's CPU (after two samples) and memory */
    v = prom_wait("count(ct_node_cpu_utilization >= 0 <= 1)", eq, 1, out, sizeof out);
    printf("Prometheus: %s\n", (prom_query("ct_node_cpu_utilization", out, sizeof out), out));
    CHECK_EQ_INT(v, 1);
    v = prom_query("max(ct_node_memory_total_bytes)", out, sizeof out);
    printf("Prometheus: memory total %g (this host's MemTotal %g)\n", v, host_mem_total());
    CHECK(v > 0 && v == host_mem_total());
    double used = prom_query("max(ct_node_memory_used_bytes)", out, sizeof out);
    double avail = prom_query("max(ct_node_memory_available_bytes)", out, sizeof out);
    CHECK(used > 0 && avail > 0 && used + avail == v);
    v = prom_query("max(ct_node_heartbeat_age_seconds)", out, sizeof out);
    CHECK(v >= 0 && v < 10);
    /* GPUs: only where NVML is there */
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    char q[256];
    snprintf(q, sizeof q, "count(ct_node_gpu_memory_total_bytes{node=\"%s\"})", id);
    v = prom_query(q, out, sizeof out);
    printf("Prometheus: GPUs with memory shown: %g (NVML %s here)\n", v, nvml ? "is" : "is not");
    CHECK(nvml ? v >= 1 : isnan(v));
    if (nvml)
        dlclose(nvml);
    /* a second node whose NVML is tests/head/fake_nvml.c (2 GPUs, fixed numbers): its GPUs
     * reach Prometheus, utilisation absent where the GPU does not report it */
    char fid[32] = "";
    const char *old_path = getenv("LD_LIBRARY_PATH");
    char *saved = old_path ? strdup(old_path) : NULL;
    setenv("LD_LIBRARY_PATH", CT_FAKE_NVML_DIR, 1);
    pid_t fnode = h_start_node(addr, "--cpus", "1", "--store-memory", "64M", NULL, NULL);
    if (saved)
        setenv("LD_LIBRARY_PATH", saved, 1);
    else
        unsetenv("LD_LIBRARY_PATH");
    free(saved);
    for (double until = h_now_ms() + 10000; fnode > 0 && !fid[0] && h_now_ms() < until;)
        if (ct_events_next(&ev, 200) == 0 && ev.type == CT_EVENT_NODE_JOINED)
            snprintf(fid, sizeof fid, "%s", ev.node_id);
    CHECK(fid[0]);
    snprintf(q, sizeof q, "count(ct_node_gpu_memory_total_bytes{node=\"%s\"})", fid);
    v = prom_wait(q, eq, 2, out, sizeof out);
    CHECK_EQ_INT(v, 2);
    snprintf(q, sizeof q, "ct_node_gpu_memory_used_bytes{node=\"%s\",gpu=\"1\"}", fid);
    v = prom_query(q, out, sizeof out);
    printf("Prometheus (fake NVML): GPU 1 uses %.0f bytes\n", v);
    CHECK_EQ_INT(v, (double)(1ull << 30) + 123);
    snprintf(q, sizeof q, "ct_node_gpu_memory_total_bytes{node=\"%s\",gpu=\"0\"}", fid);
    CHECK_EQ_INT(prom_query(q, out, sizeof out), (double)(80ull << 30));
    snprintf(q, sizeof q, "ct_node_gpu_utilization_percent{node=\"%s\"}", fid);
    prom_query(q, out, sizeof out);
    printf("Prometheus (fake NVML): %s\n", out);
    CHECK(strstr(out, "\"gpu\":\"0\"") && strstr(out, "\"42\"") && !strstr(out, "\"gpu\":\"1\""));
    /* draining: 0, then 1 once SIGTERM asked it to drain while an actor of this job (which
     * listens to drains) runs there */
    v = prom_query("sum(ct_node_draining)", out, sizeof out);
    CHECK_EQ_INT(v, 0);
    /* the actor goes to the first node: only it has 2 CPUs */
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 2, .bundle = -1}, NULL, 0, &a));
    void *r = NULL;
    size_t rn = 0;
    long one = 1;
    CHECK_OK(ct_actor_call(a, "add", &one, sizeof one, &r, &rn, 30000)); /* it runs */
    free(r);
    kill(node, SIGTERM);
    snprintf(q, sizeof q, "ct_node_draining{node=\"%s\"}", id);
    v = prom_wait(q, eq, 1, out, sizeof out);
    printf("Prometheus: draining %g after SIGTERM\n", v);
    CHECK_EQ_INT(v, 1);
    v = prom_query("ct_cluster_nodes{state=\"draining\"}", out, sizeof out);
    CHECK_EQ_INT(v, 1);
out:
    for (int i = 0; i < nput; i++)
        ct_free(&ids[i]);
    free(buf);
    ct_shutdown();
    h_kill_all();
    prom_cleanup();
    return h_failures ? 1 : 0;
}

/* ---- a real browser ---- */

static char br_dir[64];
static pid_t br_pid = -1; /* chromium, leader of its own process group */

static void browser_cleanup(void)
{
    if (getpid() != h_owner)
        return;
    if (br_pid > 0) {
        kill(-br_pid, SIGKILL); /* chromium and every process it started (same group) */
        waitpid(br_pid, NULL, 0);
        br_pid = -1;
    }
    char cmd[128];
    if (br_dir[0] && !strncmp(br_dir, "/tmp/ct-test-chromium.", 22)) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", br_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", br_dir);
        br_dir[0] = 0;
    }
}

static const char *find_chromium(void)
{
    static char path[PATH_MAX];
    const char *names[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                           "/usr/local/bin/chromium"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (access(names[i], X_OK) == 0)
            return snprintf(path, sizeof path, "%s", names[i]), path;
    return NULL;
}

/* Loads url in headless chromium, letting its scripts run (10 s of virtual time), and reads
 * the DOM it prints into a malloc'd string (NULL on failure). Chromium runs in a process group
 * of its own, killed whole when it is done or after 90 s. */
static char *chromium_dump(const char *bin, const char *url)
{
    char out[128], err[128], prof[128];
    snprintf(out, sizeof out, "%s/dom.html", br_dir);
    snprintf(err, sizeof err, "%s/chromium.log", br_dir);
    snprintf(prof, sizeof prof, "--user-data-dir=%s/profile", br_dir);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(err, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fo < 0 || fe < 0)
            _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        /* as root chromium refuses to start with its sandbox: a test browser on a page of
         * our own goes without it */
        execl(bin, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-dev-shm-usage", "--disable-extensions", "--disable-background-networking",
              "--disable-sync", "--metrics-recording-only", "--no-default-browser-check", prof,
              "--virtual-time-budget=10000", "--dump-dom", url, (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return NULL;
    setpgid(pid, pid); /* both sides, so the group exists before either looks */
    br_pid = pid;
    int status = -1;
    for (double until = h_now_ms() + 90000; h_now_ms() < until; usleep(100000))
        if (waitpid(pid, &status, WNOHANG) == pid) {
            br_pid = -1;
            break;
        }
    kill(-pid, SIGKILL); /* what it left behind (its zygote, crashpad), or itself on timeout */
    if (br_pid > 0) {
        fprintf(stderr, "chromium did not finish in 90 s (log: %s)\n", err);
        waitpid(pid, NULL, 0);
        br_pid = -1;
        return NULL;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "chromium failed (status 0x%x; log: %s)\n", status, err);
        char *log = tt_read_file(err, NULL);
        if (log)
            fprintf(stderr, "%.4000s\n", log);
        free(log);
        return NULL;
    }
    return tt_read_file(out, NULL);
}

/* The value of attribute attr="..." in the first tag at or after p that has one (before the
 * tag closes): its digits as a number, -1 when none. */
static long attr_num(const char *p, const char *attr)
{
    char key[64];
    snprintf(key, sizeof key, "%s=\"", attr);
    const char *a = p ? strstr(p, key) : NULL;
    return a ? strtol(a + strlen(key), NULL, 10) : -1;
}

/* The text of the table row that starts at p (up to its </tr>) into buf. */
static void row_text(const char *p, char *buf, size_t cap)
{
    const char *end = p ? strstr(p, "</tr>") : NULL;
    size_t n = end ? (size_t)(end - p) : 0;
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p ? p : "");
}

/* The ETA column of the job's row in `ctup status --address addr` into eta ("" when none). */
static void ctup_eta(const char *addr, char *eta, size_t cap)
{
    char cmd[PATH_MAX + 200];
    snprintf(cmd, sizeof cmd, "%s status --address %s", h_bin("ctup"), addr);
    char *out = h_capture(cmd);
    const char *row = out ? strstr(out, "\ndriver-") : NULL;
    char e[32] = "";
    if (row)
        sscanf(row + 1, "%*s %*s %*s %*s %*s %*s %*s %31s", e);
    snprintf(eta, cap, "%s", e);
    free(out);
}

static int browser_on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    scenario *s = user;
    if (st->epoch == 1 && !s->killed) { /* mid-run, ctup status estimates the time left */
        char eta[32] = "";
        for (double until = h_now_ms() + 10000; h_now_ms() < until; usleep(100000)) {
            ctup_eta(s->addr, eta, sizeof eta);
            if (eta[0] && strcmp(eta, "-"))
                break;
        }
        printf("ctup status after epoch 1: ETA %s\n", eta);
        CHECK(eta[0] && strcmp(eta, "-") && strcmp(eta, "done") && strchr(eta, 's'));
    }
    if (st->epoch != 1 || s->killed)
        return 0;
    int rc = kill_replica_node(t, st, s);
    if (rc == 0 && s->heal) { /* a node comes back: at a later step boundary a replacement
                               * fits there and heals from the survivor */
        s->new_pid = tt_start_node_joined(s->addr, s->new_id, sizeof s->new_id);
        CHECK(s->new_pid > 0);
    }
    return rc;
}

/* live: the default recovery (the survivor goes on, a live recovery to show); else "restart"
 * (a retry to show). */
static int run_browser(bool live)
{
    const char *bin = find_chromium();
    if (!bin) {
        printf("SKIP: no chromium (scripts/install-deps.sh installs Debian's)\n");
        return 77;
    }
    h_init();
    alarm(240);
    atexit(browser_cleanup);
    snprintf(br_dir, sizeof br_dir, "/tmp/ct-test-chromium.XXXXXX");
    if (!mkdtemp(br_dir)) {
        br_dir[0] = 0;
        return 1;
    }
    char addr[128], log_dir[128], url[96];
    int dport = free_port();
    scenario s = {.addr = addr, .heal = live};
    trainer *t = NULL;
    char *dom = NULL;
    if (start_dash_head((dash_head){.port = dport}, addr, sizeof addr) < 0)
        return 1;
    if (start_job(&s, live, &t))
        goto out;
    snprintf(log_dir, sizeof log_dir, "%s/run", br_dir); /* the head hears of every step */
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .max_retries = 2, .on_epoch = browser_on_epoch, .user = &s,
                           .stats = &st, .log_dir = log_dir, .progress = TRAINER_PROGRESS_OFF));
    CHECK(s.killed);
    printf("trainer: %d retries, %d live recoveries, %d heals, %lld steps\n", st.retries_used,
           st.live_recoveries, st.heals, (long long)st.steps);
    CHECK_EQ_INT(st.retries_used, live ? 0 : 1);
    CHECK_EQ_INT(st.live_recoveries, live ? 1 : 0);
    CHECK_EQ_INT(st.heals, live ? 1 : 0);
    if (!s.killed)
        goto out;
    /* the head's pages are rendered every PUBLISH_MS: wait until they show the end */
    static char body[1 << 20];
    bool ready = false;
    for (double until = h_now_ms() + 20000; h_now_ms() < until && !ready; usleep(200000))
        ready = http_get("127.0.0.1", dport, "/api/jobs", NULL, body, sizeof body) == 200 &&
                strstr(body, "\"done\":true") != NULL;
    CHECK(ready);
    /* ctup status shows the job's progress: its row in the JOBS table */
    char cmd[PATH_MAX + 200];
    snprintf(cmd, sizeof cmd, "%s status --address %s", h_bin("ctup"), addr);
    char *status = h_capture(cmd);
    printf("%s", status ? status : "(no ctup status output)\n");
    const char *jobs = status ? strstr(status, "\nJOB ") : NULL;
    CHECK(jobs && strstr(jobs, "ETA") && strstr(jobs, "SAMPLES/S"));
    const char *jrow = jobs ? strstr(jobs, "\ndriver-") : NULL;
    long long jstep = -1;
    char jname[64] = "", jepoch[32] = "", jloss[32] = "", jeta[32] = "", jretries[64] = "";
    if (jrow)
        sscanf(jrow + 1, "%63s %lld %31s %31s %*s %*s %*s %31s %63s", jname, &jstep, jepoch, jloss,
               jeta, jretries);
    printf("ctup status: job %s step %lld epoch %s loss %s eta %s retries %s\n", jname, jstep,
           jepoch, jloss, jeta, jretries);
    CHECK_EQ_INT(jstep, st.steps);
    CHECK(!strcmp(jepoch, "3/3"));
    CHECK(strtod(jloss, NULL) > 0);
    CHECK(!strcmp(jeta, "done"));
    CHECK(!strcmp(jretries, live ? "0" : "node_lost=1"));
    if (live) { /* the retries column goes on: live=1 (and healed=N when a replacement fit) */
        char line[512] = "";
        sscanf(jrow ? jrow + 1 : "", "%511[^\n]", line);
        CHECK(strstr(line, " live=1") != NULL);
        CHECK(strstr(line, " healed=1") != NULL);
    }
    free(status);
    /* /metrics counts it: ct_train_live_recoveries_total (and heals) with the job's label */
    CHECK_EQ_INT(http_get("127.0.0.1", dport, "/metrics", NULL, body, sizeof body), 200);
    char series[160];
    snprintf(series, sizeof series, "ct_train_live_recoveries_total{ct_job=\"%s\"}", jname);
    printf("/metrics: %s %g\n", series, metric(body, series));
    CHECK(metric(body, series) == (live ? 1 : 0));
    snprintf(series, sizeof series, "ct_train_heals_total{ct_job=\"%s\"}", jname);
    printf("/metrics: %s %g\n", series, metric(body, series));
    CHECK(metric(body, series) == st.heals);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", dport);
    printf("chromium %s --headless --dump-dom %s\n", bin, url);
    dom = chromium_dump(bin, url);
    CHECK(dom != NULL);
    if (!dom)
        goto out;
    printf("DOM: %zu bytes\n", strlen(dom));
    char row[4096];
    /* the job's row, at its last step, with its loss curve */
    const char *job = strstr(dom, "<tr class=\"job\"");
    CHECK(job != NULL);
    row_text(job, row, sizeof row);
    printf("job row: %.600s\n", row);
    long step = attr_num(job, "data-step"), points = attr_num(job, "data-points");
    printf("job row: step %ld (trainer: %lld), loss curve of %ld points\n", step,
           (long long)st.steps, points);
    CHECK_EQ_INT(step, st.steps);
    CHECK(points >= 5);
    if (live) /* no retry; the live recovery and the heal said in the row */
        CHECK(job && strstr(row, "live 1; healed 1") != NULL && strstr(row, "node_lost") == NULL);
    else /* its retries, with the reason */
        CHECK(job && strstr(row, "node_lost 1") != NULL);
    /* the node's death, with its reason, and the retry it cost */
    const char *dead = NULL;
    for (const char *p = dom; (p = strstr(p, "<tr class=\"event node_dead\"")); p++)
        if (row_text(p, row, sizeof row), strstr(row, s.node_id[s.killed_k])) {
            dead = p;
            break;
        }
    CHECK(dead != NULL);
    if (dead) {
        printf("death event: %.600s\n", row);
        /* a reason is given: the td after the node id is not empty */
        const char *id = strstr(row, s.node_id[s.killed_k]);
        CHECK(id && strstr(id, "</td><td>") && strstr(id, "</td><td>")[9] != '<');
    }
    const char *retry = strstr(dom, "<tr class=\"event retry\"");
    CHECK(live ? retry == NULL : retry != NULL);
    if (retry) {
        row_text(retry, row, sizeof row);
        printf("retry event: %.600s\n", row);
        CHECK(strstr(row, "node_lost") != NULL);
    }
    /* the live recovery, in the driver's words: which replica, its node, the survivors */
    const char *lr = strstr(dom, "<tr class=\"event live_recovery\"");
    CHECK(live ? lr != NULL : lr == NULL);
    if (lr) {
        row_text(lr, row, sizeof row);
        printf("live recovery event: %.600s\n", row);
        CHECK(strstr(row, s.node_id[s.killed_k]) != NULL && strstr(row, " died; ") != NULL &&
              strstr(row, "1 survivor goes on live from step ") != NULL);
    }
    const char *heal = strstr(dom, "<tr class=\"event heal\"");
    CHECK(st.heals ? heal != NULL : heal == NULL);
    if (heal) {
        row_text(heal, row, sizeof row);
        printf("heal event: %.600s\n", row);
        CHECK(strstr(row, s.new_id) != NULL && strstr(row, "healed from rank 0 in ") != NULL &&
              strstr(row, "; world 2 again") != NULL);
    }
    /* the nodes: one alive, the killed one dead (listed for a while after) */
    CHECK(strstr(dom, "<tr class=\"node ALIVE\"") != NULL);
    CHECK(strstr(dom, "connected") != NULL);
out:
    if (h_failures && dom)
        fprintf(stderr, "the DOM chromium saw:\n%.20000s\n", dom);
    free(dom);
    trainer_shutdown(&t);
    ct_shutdown();
    h_kill_all();
    browser_cleanup();
    return h_failures ? 1 : 0;
}

/* ---- across a head restart ---- */

/* The first child of pid (/proc/PID/task/PID/children), or -1. */
static pid_t child_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    int c = -1;
    if (f) {
        if (fscanf(f, "%d", &c) != 1)
            c = -1;
        fclose(f);
    }
    return c;
}

static int run_restart(void)
{
    const char *bin = find_chromium();
    if (!bin) {
        printf("SKIP: no chromium (scripts/install-deps.sh installs Debian's)\n");
        return 77;
    }
    h_init();
    atexit(browser_cleanup);
    snprintf(br_dir, sizeof br_dir, "/tmp/ct-test-chromium.XXXXXX");
    if (!mkdtemp(br_dir)) {
        br_dir[0] = 0;
        return 1;
    }
    static char body[1 << 20];
    char addr[160], url[96], id[32];
    int dport = free_port();
    pid_t sup = start_dash_head((dash_head){.port = dport, .supervise = true}, addr, sizeof addr);
    if (sup < 0)
        return 1;
    char *dom = NULL;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    if (tt_start_node_joined(addr, id, sizeof id) < 0) {
        h_failures++;
        goto out;
    }
    int code = -1;
    for (double until = h_now_ms() + 10000; h_now_ms() < until && code != 200; usleep(100000))
        code = http_get("127.0.0.1", dport, "/api/nodes", NULL, body, sizeof body);
    CHECK_EQ_INT(code, 200);
    pid_t head = child_of(sup);
    CHECK(head > 0);
    if (head <= 0)
        goto out;
    printf("killing the head (pid %d; its supervisor %d)\n", (int)head, (int)sup);
    kill(head, SIGKILL);
    /* the supervisor starts it again on the same ports; the node registers again */
    bool back = false;
    for (double until = h_now_ms() + 30000; h_now_ms() < until && !back; usleep(200000))
        back = http_get("127.0.0.1", dport, "/api/events", NULL, body, sizeof body) == 200 &&
               strstr(body, "\"kind\":\"head_restarted\"") != NULL &&
               http_get("127.0.0.1", dport, "/api/nodes", NULL, body, sizeof body) == 200 &&
               strstr(body, id) != NULL;
    CHECK(back);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", dport);
    dom = chromium_dump(bin, url);
    CHECK(dom != NULL);
    if (!dom)
        goto out;
    char row[4096];
    const char *ev = strstr(dom, "<tr class=\"event head_restarted\"");
    CHECK(ev != NULL);
    row_text(ev, row, sizeof row);
    printf("restart event: %.600s\n", row);
    /* its reason: how the head before ended */
    CHECK(ev && strstr(row, "killed by signal 9") != NULL);
    const char *nrow = strstr(dom, "<tr class=\"node ALIVE\"");
    CHECK(nrow && (row_text(nrow, row, sizeof row), strstr(row, id) != NULL));
    CHECK(strstr(dom, "connected") != NULL);
out:
    if (h_failures && dom)
        fprintf(stderr, "the DOM chromium saw:\n%.20000s\n", dom);
    free(dom);
    ct_shutdown();
    h_kill_all();
    browser_cleanup();
    return h_failures ? 1 : 0;
}

/* ---- a page left open across a head restart (the DevTools protocol) ---- */

/* Chromium, headless, with its DevTools port open on url; the port (from DevToolsActivePort in
 * its profile), or -1. Its process group is killed by browser_cleanup. */
static int chromium_open(const char *bin, const char *url)
{
    char err[128], prof[128], portfile[160];
    snprintf(err, sizeof err, "%s/chromium.log", br_dir);
    snprintf(prof, sizeof prof, "--user-data-dir=%s/profile", br_dir);
    snprintf(portfile, sizeof portfile, "%s/profile/DevToolsActivePort", br_dir);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fe = open(err, O_WRONLY | O_CREAT | O_APPEND, 0600);
        int fn = open("/dev/null", O_WRONLY);
        if (fe < 0 || fn < 0)
            _exit(126);
        dup2(fn, 1);
        dup2(fe, 2);
        execl(bin, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--disable-dev-shm-usage", "--disable-extensions", "--disable-background-networking",
              "--disable-sync", "--metrics-recording-only", "--no-default-browser-check",
              "--disable-background-timer-throttling", "--disable-renderer-backgrounding", prof,
              "--remote-debugging-port=0", url, (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return -1;
    setpgid(pid, pid);
    br_pid = pid;
    for (double until = h_now_ms() + 60000; h_now_ms() < until; usleep(200000)) {
        int port = -1;
        FILE *f = fopen(portfile, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1)
                port = -1;
            fclose(f);
        }
        if (port > 0)
            return port;
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            br_pid = -1;
            break;
        }
    }
    fprintf(stderr, "chromium gave no DevTools port (log: %s)\n", err);
    return -1;
}

/* A WebSocket (RFC 6455) to the page's DevTools endpoint: the socket, or -1. */
static int devtools_connect(int port)
{
    static char list[1 << 16];
    char path[256] = "";
    for (double until = h_now_ms() + 30000; h_now_ms() < until && !path[0]; usleep(200000)) {
        if (http_get("127.0.0.1", port, "/json/list", NULL, list, sizeof list) != 200)
            continue;
        /* the page's entry (its type, then its debugger URL, whose host is what we sent) */
        const char *p = strstr(list, "\"type\": \"page\"");
        const char *w = p ? strstr(p, "\"webSocketDebuggerUrl\"") : NULL;
        const char *slash = w ? strstr(w, "/devtools/page/") : NULL;
        if (slash)
            sscanf(slash, "%255[^\"]", path);
    }
    if (!path[0]) {
        fprintf(stderr, "DevTools lists no page: %.2000s\n", list);
        return -1;
    }
    int fd = dial("127.0.0.1", port);
    char req[512], resp[1024];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\n\r\n",
                     path, port);
    if (fd < 0 || !send_all(fd, req, (size_t)n))
        goto fail;
    size_t got = 0; /* the answer's headers, byte by byte: the frames follow them */
    while (got + 1 < sizeof resp && (got < 4 || memcmp(resp + got - 4, "\r\n\r\n", 4)))
        if (recv(fd, resp + got++, 1, 0) != 1)
            goto fail;
    resp[got] = 0;
    if (strncmp(resp, "HTTP/1.1 101", 12)) {
        fprintf(stderr, "DevTools refused the WebSocket: %s\n", resp);
        goto fail;
    }
    return fd;
fail:
    if (fd >= 0)
        close(fd);
    return -1;
}

static bool recv_all(int fd, void *p, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

/* Runs expression js in the page (Runtime.evaluate) and copies the string it returns into out
 * (JSON escapes left as they are); false when no answer came. */
static bool devtools_eval(int fd, const char *js, char *out, size_t cap)
{
    static int next_id = 1;
    int id = next_id++;
    static char msg[8192];
    size_t n = (size_t)snprintf(msg, sizeof msg,
                                "{\"id\":%d,\"method\":\"Runtime.evaluate\",\"params\":{"
                                "\"expression\":\"%s\",\"returnByValue\":true}}",
                                id, js);
    /* a client frame: FIN + text, masked (key 0: the payload as it is), 16-bit length */
    unsigned char hdr[8] = {0x81, 0x80 | 126, (unsigned char)(n >> 8), (unsigned char)n, 0, 0,
                            0,    0};
    if (!send_all(fd, (const char *)hdr, sizeof hdr) || !send_all(fd, msg, n))
        return false;
    static char frame[1 << 20];
    char want[32];
    snprintf(want, sizeof want, "{\"id\":%d,", id);
    for (int frames = 0; frames < 10000; frames++) { /* events may come first: skip them */
        unsigned char h2[2];
        uint64_t len;
        if (!recv_all(fd, h2, 2))
            return false;
        len = h2[1] & 0x7f;
        if (len == 126) {
            unsigned char l[2];
            if (!recv_all(fd, l, 2))
                return false;
            len = (uint64_t)l[0] << 8 | l[1];
        } else if (len == 127) {
            unsigned char l[8];
            if (!recv_all(fd, l, 8))
                return false;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | l[i];
        }
        if (len >= sizeof frame)
            return false;
        if (!recv_all(fd, frame, (size_t)len))
            return false;
        frame[len] = 0;
        if (strncmp(frame, want, strlen(want)))
            continue;
        const char *v = strstr(frame, "\"value\":\"");
        if (!v)
            fprintf(stderr, "DevTools: %.2000s\n", frame);
        snprintf(out, cap, "%s", v ? v + 9 : "");
        char *q = strchr(out, '"');
        if (q)
            *q = 0;
        return v != NULL;
    }
    return false;
}

/* What the open page shows, as one string (no quotes in the expression: it travels inside a
 * JSON string): "class of #status|job row's data-step|its loss curve's points|the newest step
 * of its curve|head_restarted events|whether #status says the head is back" */
#define PAGE_STATE_JS                                                                              \
    "(function(){var r=document.querySelector('tr.job');"                                          \
    "var sv=r?r.querySelector('svg.loss'):null;var k=r?r.getAttribute('data-job'):'';"             \
    "var c=curves[k];var top=c&&c.size?Math.max.apply(null,Array.from(c.keys())):-1;"              \
    "var s=document.getElementById('status');"                                                     \
    "return [s.className,r?r.getAttribute('data-step'):-1,sv?sv.getAttribute('data-points'):-1,"   \
    "top,document.querySelectorAll('tr.event.head_restarted').length,"                             \
    "s.textContent.indexOf('head is back after')===0?1:0].join('|');})()"

typedef struct page_state {
    char status[16];
    long step, points, top, restarts, back;
} page_state;

static bool page_state_get(int fd, page_state *ps)
{
    char out[256];
    memset(ps, 0, sizeof *ps);
    if (!devtools_eval(fd, PAGE_STATE_JS, out, sizeof out))
        return false;
    return sscanf(out, "%15[^|]|%ld|%ld|%ld|%ld|%ld", ps->status, &ps->step, &ps->points, &ps->top,
                  &ps->restarts, &ps->back) == 6;
}

typedef struct restart_live {
    pid_t sup;
    int devtools;
    bool killed;
    page_state before;
    bool saw_away; /* the page said the head was away while it was */
} restart_live;

/* After epoch 2: the open page shows the job; the head is stopped (SIGSTOP), the page says it
 * is away (it is not reloaded), and the head is killed. */
static int restart_on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    restart_live *r = user;
    if (st->epoch != 2 || r->killed)
        return 0;
    /* (the steps' points of the epoch that just ended come with the next reports, sent while
     * training goes on: the earlier epochs' are there) */
    page_state ps = {0};
    for (double until = h_now_ms() + 30000; h_now_ms() < until; usleep(250000))
        if (page_state_get(r->devtools, &ps) && ps.step >= st->steps && ps.points >= 2)
            break;
    printf("page before the kill: status %s, step %ld (trainer: %lld), %ld points\n", ps.status,
           ps.step, (long long)st->steps, ps.points);
    CHECK(!strcmp(ps.status, "ok") && ps.step >= st->steps && ps.points >= 2);
    r->before = ps;
    pid_t head = child_of(r->sup);
    CHECK(head > 0);
    if (head <= 0)
        return CT_EINVAL;
    /* stopped first, so that the page sees it away (its poll gets no answer in 5 s) however
     * quick the supervisor's restart is; then killed (SIGKILL) */
    printf("stopping, then killing the head (pid %d; its supervisor %d)\n", (int)head, (int)r->sup);
    kill(head, SIGSTOP);
    for (double until = h_now_ms() + 30000; h_now_ms() < until && !r->saw_away; usleep(200000))
        r->saw_away = page_state_get(r->devtools, &ps) && !strcmp(ps.status, "away");
    kill(head, SIGKILL);
    r->killed = true;
    printf("page while the head was stopped: %s\n", r->saw_away ? "away" : ps.status);
    CHECK(r->saw_away);
    return 0;
}

/* A dashboard page stays open in chromium while a supervised head is killed (SIGKILL) during a
 * training job and started again: without a reload the page shows the restart event, says the
 * head is back, and the job's row and loss curve go on past the step of the kill to the
 * job's last step. */
static int run_restart_live(void)
{
    const char *bin = find_chromium();
    if (!bin) {
        printf("SKIP: no chromium (scripts/install-deps.sh installs Debian's)\n");
        return 77;
    }
    h_init();
    alarm(230);
    atexit(browser_cleanup);
    snprintf(br_dir, sizeof br_dir, "/tmp/ct-test-chromium.XXXXXX");
    if (!mkdtemp(br_dir)) {
        br_dir[0] = 0;
        return 1;
    }
    char addr[160], url[96], id[32], log_dir[160];
    int dport = free_port();
    restart_live r = {.devtools = -1};
    trainer *t = NULL;
    r.sup = start_dash_head((dash_head){.port = dport, .supervise = true}, addr, sizeof addr);
    if (r.sup < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED));
    if (tt_start_node_joined(addr, id, sizeof id) < 0) {
        h_failures++;
        goto out;
    }
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", dport);
    int dt = chromium_open(bin, url);
    CHECK(dt > 0);
    if (dt <= 0 || (r.devtools = devtools_connect(dt)) < 0) {
        h_failures++;
        goto out;
    }
    page_state ps;
    CHECK(page_state_get(r.devtools, &ps));
    printf("page opened: status %s\n", ps.status);
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .config = "limit=2048,val_limit=200",
                                            .num_replicas = 1,
                                            .epochs = 5,
                                            .seed = 3},
                            &t));
    if (!t)
        goto out;
    snprintf(log_dir, sizeof log_dir, "%s/run", br_dir); /* the head hears of every step */
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .max_retries = 2, .on_epoch = restart_on_epoch, .user = &r,
                           .stats = &st, .log_dir = log_dir, .progress = TRAINER_PROGRESS_OFF));
    CHECK(r.killed);
    printf("trainer: %lld steps, %d retries\n", (long long)st.steps, st.retries_used);
    /* the same page, never reloaded: the job's last step, its curve past the kill */
    bool said_back = false; /* "head is back after X s" stands until the next poll: seen or not */
    for (double until = h_now_ms() + 30000; h_now_ms() < until; usleep(250000)) {
        bool got = page_state_get(r.devtools, &ps);
        said_back |= got && ps.back;
        if (got && ps.step == st.steps && ps.top == st.steps && ps.restarts >= 1 &&
            !strcmp(ps.status, "ok"))
            break;
    }
    printf("page after the restart: status %s (\"head is back\" seen: %d), step %ld, curve to step "
           "%ld of %ld "
           "points (before the kill: step %ld, %ld points), %ld restart events\n",
           ps.status, said_back, ps.step, ps.top, ps.points, r.before.step, r.before.points,
           ps.restarts);
    CHECK(!strcmp(ps.status, "ok"));
    CHECK_EQ_INT(ps.step, st.steps);
    CHECK(ps.step > r.before.step);
    CHECK_EQ_INT(ps.top, st.steps);
    CHECK(ps.points > r.before.points);
    CHECK(ps.restarts >= 1);
out:
    if (r.devtools >= 0)
        close(r.devtools);
    trainer_shutdown(&t);
    ct_shutdown();
    h_kill_all();
    browser_cleanup();
    return h_failures ? 1 : 0;
}

/* ---- access ---- */

static char ns_name[32];

static void ns_cleanup(void)
{
    char cmd[96];
    if (getpid() != h_owner || !ns_name[0])
        return;
    snprintf(cmd, sizeof cmd, "ip netns del %s 2>/dev/null", ns_name);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot delete network namespace %s\n", ns_name);
    ns_name[0] = 0;
}

/* A namespace with a veth pair: this side host_ip, the namespace's side peer. 0 when made. */
static int make_netns(char *host_ip, char *peer_ip, size_t cap)
{
    if (geteuid() != 0)
        return -1;
    int k = getpid() % 250 + 1;
    snprintf(ns_name, sizeof ns_name, "ctdash%d", (int)getpid());
    snprintf(host_ip, cap, "10.213.%d.1", k);
    snprintf(peer_ip, cap, "10.213.%d.2", k);
    char cmd[768];
    snprintf(cmd, sizeof cmd,
             "ip netns add %1$s && ip link add vd%2$da type veth peer name vd%2$db && "
             "ip link set vd%2$db netns %1$s && ip addr add %3$s/30 dev vd%2$da && "
             "ip link set vd%2$da up && ip -n %1$s addr add %4$s/30 dev vd%2$db && "
             "ip -n %1$s link set vd%2$db up && ip -n %1$s link set lo up",
             ns_name, (int)getpid(), host_ip, peer_ip);
    if (system(cmd) != 0) {
        ns_cleanup();
        return -1;
    }
    return 0;
}

/* GET from inside the namespace (a child that joins it): the status code. */
static int get_from_netns(const char *ip, int port, const char *path, const char *header,
                          char *body, size_t cap)
{
    int p[2];
    if (pipe(p))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        char path_ns[96];
        snprintf(path_ns, sizeof path_ns, "/var/run/netns/%s", ns_name);
        int fd = open(path_ns, O_RDONLY);
        int code = fd >= 0 && setns(fd, CLONE_NEWNET) == 0
                       ? http_get(ip, port, path, header, body, cap)
                       : -2;
        if (write(p[1], &code, sizeof code) != sizeof code ||
            write(p[1], body, strlen(body) + 1) < 0)
            _exit(1);
        _exit(0);
    }
    close(p[1]);
    int code = -1;
    if (pid < 0 || read(p[0], &code, sizeof code) != sizeof code)
        code = -1;
    ssize_t n = read(p[0], body, cap - 1);
    body[n > 0 ? n : 0] = 0;
    close(p[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return code;
}

/* This host's first non-loopback IPv4 address that is up. */
static bool own_address(char *ip, size_t cap)
{
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs))
        return false;
    bool found = false;
    for (i = ifs; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK)) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, (socklen_t)cap);
            found = true;
        }
    freeifaddrs(ifs);
    return found;
}

static int run_access(void)
{
    h_init();
    atexit(ns_cleanup);
    char host_ip[32], peer_ip[32], addr[128];
    bool netns = make_netns(host_ip, peer_ip, sizeof host_ip) == 0;
    if (!netns && !own_address(host_ip, sizeof host_ip)) {
        printf("SKIP: no network namespace (needs root and iproute2) and no non-loopback "
               "address\n");
        return 77;
    }
    printf("non-loopback peer: %s\n",
           netns ? "a network namespace (veth pair)" : "this host's own non-loopback address");
    int dport = free_port();
    if (start_dash_head((dash_head){.port = dport, .host = "0.0.0.0"}, addr, sizeof addr) < 0)
        return 1;
    char tok[CT_DASH_TOKEN_LEN + 1], bearer[128], wrong[128], body[1 << 16];
    CHECK_OK(ct__auth_dashboard_token(tok));
    snprintf(bearer, sizeof bearer, "Authorization: Bearer %s", tok);
    snprintf(wrong, sizeof wrong, "Authorization: Bearer %064d", 0);
    /* ct-head --dashboard-token prints the same token */
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "%s --dashboard-token", h_bin("ct-head"));
    char *printed = h_capture(cmd);
    CHECK(printed && !strncmp(printed, tok, CT_DASH_TOKEN_LEN));
    free(printed);
    /* loopback: served without a token (once the first page is published) */
    int code = -1;
    for (double until = h_now_ms() + 10000; h_now_ms() < until && code != 200; usleep(100000))
        code = http_get("127.0.0.1", dport, "/metrics", NULL, body, sizeof body);
    CHECK_EQ_INT(code, 200);
    CHECK(strstr(body, "ct_cluster_nodes{state=\"alive\"} 0") != NULL);
    /* another address: refused without the token and with a wrong one, served with it */
    const char *hdr[3] = {NULL, wrong, bearer};
    int want[3] = {403, 403, 200};
    const char *paths[2] = {"/metrics", "/api/nodes"};
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 3; i++) {
            code = netns ? get_from_netns(host_ip, dport, paths[p], hdr[i], body, sizeof body)
                         : http_get(host_ip, dport, paths[p], hdr[i], body, sizeof body);
            printf("GET %s from %s %s: %d\n", paths[p], netns ? peer_ip : host_ip,
                   i == 0   ? "without a token"
                   : i == 1 ? "with a wrong token"
                            : "with the token",
                   code);
            CHECK_EQ_INT(code, want[i]);
            if (want[i] == 403)
                CHECK(strstr(body, "ct_") == NULL && strstr(body, "node") == NULL);
            else
                CHECK(p == 0 ? strstr(body, "ct_cluster_nodes") != NULL : body[0] == '[');
        }
    h_kill_all();
    ns_cleanup();
    return h_failures ? 1 : 0;
}

/* ---- hostile requests ---- */

/* A slowloris client: a request line and one header, then a header byte now and then, never
 * the end of the headers, until stop. */
typedef struct slow {
    int port, n;
    int fd[8];
    atomic_int stop;
} slow;

static void *slowloris(void *arg)
{
    slow *s = arg;
    for (int i = 0; i < s->n; i++) {
        s->fd[i] = dial("127.0.0.1", s->port);
        if (s->fd[i] >= 0)
            send_all(s->fd[i], "GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: ", 36);
    }
    while (!atomic_load(&s->stop)) {
        for (int i = 0; i < s->n; i++)
            if (s->fd[i] >= 0)
                send(s->fd[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        usleep(500000);
    }
    for (int i = 0; i < s->n; i++)
        if (s->fd[i] >= 0)
            close(s->fd[i]);
    return NULL;
}

/* The head still serves its node: an actor call, a KV round trip, the node's CPU counted. */
static void head_serves(ct_actor *a, int round)
{
    void *v = NULL;
    size_t n = 0;
    long one = 1;
    CHECK_OK(ct_actor_call(a, "add", &one, sizeof one, &v, &n, 10000));
    CHECK(n == sizeof(long) && v && *(long *)v == round);
    free(v);
    char key[32], val[32];
    snprintf(key, sizeof key, "hostile/%d", round);
    snprintf(val, sizeof val, "v%d", round);
    CHECK_OK(ct_kv_put(key, val, strlen(val) + 1));
    void *got = NULL;
    size_t len = 0;
    CHECK_OK(ct_kv_get(key, &got, &len, 5000));
    CHECK(got && !strcmp(got, val));
    free(got);
    double total = 0, free_cpu = 0;
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK(total == 2);
}

static int run_hostile(void)
{
    h_init();
    char addr[128], id[32];
    static char body[1 << 20];
    int dport = free_port();
    if (start_dash_head((dash_head){.port = dport}, addr, sizeof addr) < 0)
        return 1;
    CHECK_OK(ct_init(&(ct_init_opts){.address = addr}));
    CHECK_OK(ct_events_subscribe(1u << CT_EVENT_NODE_JOINED | 1u << CT_EVENT_NODE_DEAD));
    pid_t node = h_start_node(addr, "--cpus", "2", NULL, NULL, NULL, NULL);
    ct_event ev;
    id[0] = 0;
    for (double until = h_now_ms() + 10000; node > 0 && !id[0] && h_now_ms() < until;)
        if (ct_events_next(&ev, 200) == 0 && ev.type == CT_EVENT_NODE_JOINED)
            snprintf(id, sizeof id, "%s", ev.node_id);
    CHECK(id[0]);
    ct_actor *a = NULL;
    CHECK_OK(ct_actor_create("Counter", &(ct_resources){.cpu = 1, .bundle = -1}, NULL, 0, &a));
    if (!a || !id[0])
        goto out;
    head_serves(a, 1);

    slow s = {.port = dport, .n = 8};
    pthread_t th;
    pthread_create(&th, NULL, slowloris, &s);
    usleep(300000);
    /* oversized headers: refused (431 or 413), or the connection closed; never served */
    size_t big = 200 << 10;
    char *req = malloc(big + 256);
    int n = snprintf(req, 256, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-big: ");
    memset(req + n, 'a', big);
    memcpy(req + n + big, "\r\n\r\n", 5);
    int code = http_raw("127.0.0.1", dport, req, n + big + 4, body, sizeof body);
    printf("oversized headers: %d\n", code);
    CHECK(code != 200);
    /* a long URL */
    n = snprintf(req, 256, "GET /");
    memset(req + n, 'b', 64 << 10);
    n += 64 << 10;
    n += snprintf(req + n, 256, " HTTP/1.1\r\nHost: x\r\n\r\n");
    code = http_raw("127.0.0.1", dport, req, (size_t)n, body, sizeof body);
    printf("64 KiB URL: %d\n", code);
    CHECK(code != 200);
    free(req);
    /* bad paths and methods */
    const char *bad[] = {"/index.htm",
                         "/metrics/",
                         "/api",
                         "/api/",
                         "/api/tokens",
                         "/../../etc/passwd",
                         "/metrics/../api/kv",
                         "/%2e%2e/etc/passwd",
                         "//metrics"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        code = http_get("127.0.0.1", dport, bad[i], NULL, body, sizeof body);
        if (code != 404)
            printf("GET %s: %d\n", bad[i], code);
        CHECK(code == 404 || code == 400);
    }
    const char *post = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    code = http_raw("127.0.0.1", dport, post, strlen(post), body, sizeof body);
    printf("POST: %d\n", code);
    CHECK_EQ_INT(code, 405);
    const char *garbage = "\x01\x02\x03 not http at all\r\n\r\n";
    code = http_raw("127.0.0.1", dport, garbage, strlen(garbage), body, sizeof body);
    printf("garbage: %d\n", code);
    CHECK(code != 200);
    /* more connections than the limit, held open without a byte */
    int many[100], nmany = 0;
    for (int i = 0; i < 100; i++)
        if ((many[nmany] = dial("127.0.0.1", dport)) >= 0)
            nmany++;
    printf("opened %d idle connections\n", nmany);
    head_serves(a, 2);
    for (int i = 0; i < nmany; i++)
        close(many[i]);
    /* with the slowloris connections still open: the head serves, /metrics answers */
    head_serves(a, 3);
    /* the pages are at most PUBLISH_MS (0.5 s) old: wait for the node and the actor in them */
    bool seen = false;
    for (double until = h_now_ms() + 10000; h_now_ms() < until && !seen; usleep(100000)) {
        code = http_get("127.0.0.1", dport, "/metrics", NULL, body, sizeof body);
        seen = code == 200 && metric(body, "ct_cluster_nodes{state=\"alive\"}") == 1 &&
               metric(body, "ct_actors{state=\"ALIVE\",class=\"Counter\"}") == 1;
    }
    CHECK_EQ_INT(code, 200);
    if (!seen)
        fprintf(stderr, "/metrics never showed the node and the actor:\n%s\n", body);
    CHECK(seen);
    code = http_get("127.0.0.1", dport, "/api/nodes", NULL, body, sizeof body);
    CHECK_EQ_INT(code, 200);
    CHECK(strstr(body, id) != NULL);
    CHECK(strstr(body, "token") == NULL);
    code = http_get("127.0.0.1", dport, "/api/actors", NULL, body, sizeof body);
    CHECK_EQ_INT(code, 200);
    CHECK(strstr(body, "\"class\":\"Counter\"") != NULL);
    code = http_get("127.0.0.1", dport, "/api/jobs", NULL, body, sizeof body);
    CHECK_EQ_INT(code, 200);
    CHECK(body[0] == '[' && strstr(body, "\"state\":\"RUNNING\"") != NULL);
    code = http_get("127.0.0.1", dport, "/api/events", NULL, body, sizeof body);
    CHECK_EQ_INT(code, 200);
    CHECK(body[0] == '[' && strstr(body, "\"kind\":\"node_joined\"") != NULL);
    CHECK(strstr(body, id) != NULL);
    code = http_get("127.0.0.1", dport, "/", NULL, body, sizeof body);
    CHECK_EQ_INT(code, 200);
    CHECK(strstr(body, "<title>ct dashboard</title>") != NULL);
    /* TrainReports: malformed ones are refused; a good one is shown, with its histogram */
    static const double bounds[3] = {0.01, 0.1, 1}, bad_bounds[3] = {0.1, 0.01, 1};
    static const uint64_t counts[3] = {2, 1, 0}, too_many[3] = {5, 5, 5};
    struct ct__train_hist good_h = {"step", 3, bounds, counts, 4, 2.5};
    ct__train_report good = {.job = "ok-job",
                             .step = 7,
                             .loss = 0.5,
                             .mfu_pct = NAN,
                             .val_loss = NAN,
                             .eta_s = 12,
                             .epochs = 2,
                             .nhist = 1};
    good.hist[0] = good_h;
    /* the bad ones first: once the good one shows, the head (reading one connection in order)
     * has handled them */
    ct__train_report badr = good;
    badr.job = "bad-bounds";
    badr.hist[0].bounds = bad_bounds;
    CHECK_OK(ct__report_train(&badr)); /* sent; the head refuses it */
    badr = good;
    badr.job = "bad-counts";
    badr.hist[0].counts = too_many;
    CHECK_OK(ct__report_train(&badr));
    badr = good;
    badr.job = "bad-eta";
    badr.eta_s = INFINITY;
    CHECK_OK(ct__report_train(&badr));
    badr = good; /* a live recovery's words with a control byte (an escape sequence) */
    badr.job = "bad-words";
    badr.live_recoveries = 1;
    badr.live_what = "replica 1 died\x1b[2J";
    CHECK_OK(ct__report_train(&badr));
    badr = good; /* a heal's words too long */
    badr.job = "bad-heal";
    badr.heals = 1;
    char long_words[200];
    memset(long_words, 'a', sizeof long_words - 1);
    long_words[sizeof long_words - 1] = 0;
    badr.heal_what = long_words;
    CHECK_OK(ct__report_train(&badr));
    CHECK_OK(ct__report_train(&good));
    seen = false;
    for (double until = h_now_ms() + 10000; h_now_ms() < until && !seen; usleep(100000)) {
        code = http_get("127.0.0.1", dport, "/metrics", NULL, body, sizeof body);
        seen = code == 200 && metric(body, "ct_train_step{ct_job=\"ok-job\"}") == 7;
    }
    CHECK(seen);
    CHECK_EQ_INT(metric(body, "ct_train_step_seconds_bucket{ct_job=\"ok-job\",le=\"0.1\"}"), 3);
    CHECK_EQ_INT(metric(body, "ct_train_step_seconds_bucket{ct_job=\"ok-job\",le=\"+Inf\"}"), 4);
    CHECK(metric(body, "ct_train_step_seconds_sum{ct_job=\"ok-job\"}") == 2.5);
    CHECK(strstr(body, "# TYPE ct_train_step_seconds histogram") != NULL);
    CHECK(strstr(body, "bad-") == NULL);
    /* three live recoveries and a heal since the last report: an event each, the newest in
     * the driver's words and how many came at once; the counters in /metrics */
    ct__train_report more = good;
    more.live_recoveries = 3;
    more.live_what = "replica 2 (node n-x) died; 2 survivors go on live from step 7";
    more.heals = 1;
    more.heal_what = "a replacement (node n-y) healed from rank 1 in 9 ms; world 3";
    CHECK_OK(ct__report_train(&more));
    seen = false;
    for (double until = h_now_ms() + 10000; h_now_ms() < until && !seen; usleep(100000)) {
        code = http_get("127.0.0.1", dport, "/api/events", NULL, body, sizeof body);
        seen = code == 200 && strstr(body, "\"kind\":\"heal\"") != NULL;
    }
    CHECK(seen);
    CHECK(strstr(body, "\"kind\":\"live_recovery\",\"subject\":\"ok-job\",\"reason\":\"replica "
                       "2 (node n-x) died; 2 survivors go on live from step 7 (the newest of 3 "
                       "since the last report)\"") != NULL);
    CHECK(strstr(body, "\"kind\":\"heal\",\"subject\":\"ok-job\",\"reason\":\"a replacement "
                       "(node n-y) healed from rank 1 in 9 ms; world 3\"") != NULL);
    code = http_get("127.0.0.1", dport, "/metrics", NULL, body, sizeof body);
    CHECK_EQ_INT(metric(body, "ct_train_live_recoveries_total{ct_job=\"ok-job\"}"), 3);
    CHECK_EQ_INT(metric(body, "ct_train_heals_total{ct_job=\"ok-job\"}"), 1);
    atomic_store(&s.stop, 1);
    pthread_join(th, NULL);
    /* no node was declared dead meanwhile */
    while (ct_events_next(&ev, 0) == 0)
        CHECK(ev.type != CT_EVENT_NODE_DEAD);
    head_serves(a, 4);
out:
    ct_actor_release(&a);
    ct_shutdown();
    h_kill_all();
    return h_failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    tt_register();
    register_test_classes();
    ct_serve_if_worker(); /* a replica or an actor: serves here and never returns */
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "prometheus"))
        return run_prometheus(false);
    if (!strcmp(mode, "prometheus_live"))
        return run_prometheus(true);
    if (!strcmp(mode, "prometheus_nodes"))
        return run_prometheus_nodes();
    if (!strcmp(mode, "access"))
        return run_access();
    if (!strcmp(mode, "hostile"))
        return run_hostile();
    if (!strcmp(mode, "browser"))
        return run_browser(false);
    if (!strcmp(mode, "browser_live"))
        return run_browser(true);
    if (!strcmp(mode, "restart"))
        return run_restart();
    if (!strcmp(mode, "restart_live"))
        return run_restart_live();
    fprintf(stderr,
            "usage: %s prometheus|prometheus_live|prometheus_nodes|access|hostile|browser|"
            "browser_live|restart|restart_live\n",
            argv[0]);
    return 2;
}
