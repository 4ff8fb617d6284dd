/* tests/cluster/test_local.c — a local cluster's life cycle through the ctup binary:
 * up (head + 2 nodes, detached, recorded in the state file; prints CT_ADDRESS and
 * CT_SECRET_FILE) -> status lists 2 nodes alive -> submit of build/bin/actors exits 0, exit
 * codes forwarded -> exec -> a second up is refused -> the head killed (kill -9) is started
 * again by its supervisor on the same port and the same nodes register again -> a node killed
 * shows DEAD -> down stops
 * every recorded pid -> down again is fine; the head's state directory is in the cluster's log
 * directory, and down removes it, also after the cluster was killed (kill -9), and a new up
 * does not load the last cluster's; then an up whose node cannot start fails and stops
 * the head it had started; a head whose port is taken fails at once with its exit status and
 * its log, and the failed up removes the state, secret and lock it made (not its logs); a YAML
 * mistake on the command line names file:line:col; `ctup secret` makes missing parent
 * directories (0700); --help names the YAML reference, in the sources or installed. */
#include "ctup_test.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* A path under the state directory, e.g. t_path("demo.lock") (static: the next call reuses
 * it). */
static const char *t_path(const char *name)
{
    static char p[600];
    snprintf(p, sizeof p, "%s/%.250s", t_state, name);
    return p;
}

static int mode_of(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (int)(sb.st_mode & 0777) : -1;
}

/* A TCP port on 127.0.0.1 that this process listens on (*fd: close it to free the port). */
static int taken_port(int *fd)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0 || bind(*fd, (struct sockaddr *)&a, sizeof a) || listen(*fd, 1) ||
        getsockname(*fd, (struct sockaddr *)&a, &len))
        return -1;
    return ntohs(a.sin_port);
}

/* The head's state directory of a cluster (its log directory's head-state), and the file in it
 * (static: the next call reuses it). */
static const char *head_state(const char *cluster, const char *file)
{
    static char p[700];
    snprintf(p, sizeof p, "%s/%.100s/head-state%s%s", t_state, cluster, file ? "/" : "",
             file ? file : "");
    return p;
}

/* Whether the file at path holds needle (binary-safe up to 64 KiB; false when unreadable). */
static bool file_has(const char *path, const char *needle)
{
    static char buf[65536];
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return memmem(buf, n, needle, strlen(needle)) != NULL;
}

/* The ct-head that supervisor pid runs (its child), or -1. */
static pid_t head_child(pid_t pid)
{
    char path[64], buf[256] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long c = -1;
    if (!fgets(buf, sizeof buf, f) || sscanf(buf, "%ld", &c) != 1)
        c = -1;
    fclose(f);
    return (pid_t)c;
}

/* The first two node ids ("node-" and 12 hex digits) in a status output, sorted. */
static void node_ids(const char *out, char ids[2][32])
{
    int n = 0;
    for (const char *p = out; p && n < 2 && (p = strstr(p, "node-")); p += 5)
        if (strspn(p + 5, "0123456789abcdef") == 12)
            snprintf(ids[n++], 32, "%.17s", p);
    if (n == 2 && strcmp(ids[0], ids[1]) > 0) {
        char t[32];
        memcpy(t, ids[0], 32);
        memcpy(ids[0], ids[1], 32);
        memcpy(ids[1], t, 32);
    }
}

int main(void)
{
    t_init();
    char yaml[1024], name[64], *out = NULL;
    snprintf(name, sizeof name, "t-local-%d", (int)getpid());
    int dash_fd = -1, dash_port = taken_port(&dash_fd); /* a free port for the dashboard */
    close(dash_fd);
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s\n"
             "provider:\n  type: local\n  worker_ips: [127.0.0.1, 127.0.0.1]\n"
             "available_node_types:\n  w:\n    resources: {CPU: 2, disk: 1}\n"
             "    store_memory: 64M\n"
             "ct: {heartbeat_ms: 100, dead_after_ms: 3000, start_timeout_s: 15,\n"
             "     dashboard_port: %d, heartbeat_rate: 5000, max_nodes: 64}\n",
             name, dash_port);
    const char *cfg = t_write("c.yaml", yaml);

    /* up */
    double t0 = h_now_ms();
    int rc = t_ctup(&out, "up %s", cfg);
    double up_ms = h_now_ms() - t0;
    char want[2200], addr[128] = "";
    snprintf(want, sizeof want, "cluster '%s' is up: head 127.0.0.1:", name);
    const char *a = out ? strstr(out, "export CT_ADDRESS=") : NULL;
    if (rc != 0 || !strstr(out, want) || !a) {
        fprintf(stderr, "up: exit %d, output:\n%s\n", rc, out ? out : "");
        free(out);
        return 1;
    }
    sscanf(a, "export CT_ADDRESS=%127s", addr);
    /* a driver started by hand needs the secret too: the line exports both */
    char secret[PATH_MAX], export_line[PATH_MAX + 200];
    CHECK_OK(ct_cluster_secret_path(name, secret, sizeof secret));
    snprintf(export_line, sizeof export_line, "  export CT_ADDRESS=%s CT_SECRET_FILE=%s\n", addr,
             secret);
    if (!strstr(out, export_line)) {
        fprintf(stderr, "up: no line '%s' in:\n%s\n", export_line, out);
        h_failures++;
    }
    free(out);
    printf("up in %.0f ms, head %s\n", up_ms, addr);
    CHECK(strncmp(addr, "127.0.0.1:", 10) == 0 && atoi(addr + 10) > 0);

    ct_cluster_state st;
    CHECK_OK(ct_cluster_state_read(name, &st));
    CHECK_EQ_INT(st.n_procs, 3);
    CHECK_STR(st.address, addr);
    CHECK_STR(st.provider, "local");
    const char *comm[3] = {"ct-head-super", "ct-node", "ct-node"}; /* the head's supervisor */
    for (int i = 0; i < st.n_procs && i < 3; i++) {
        CHECK_STR(t_comm(st.procs[i].pid), comm[i]);
        CHECK_EQ_INT(t_start_time(st.procs[i].pid), st.procs[i].start_time);
        CHECK_EQ_INT(getsid(st.procs[i].pid), st.procs[i].pid); /* detached: own session */
    }
    CHECK_STR(st.procs[1].role, "node-1");
    /* the head got the YAML's ct flags (ct__cluster_head_flags, every provider's): its
     * supervisor's argv, which it hands its head */
    {
        char path[64], argv[4096] = "";
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)st.procs[0].pid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(argv, 1, sizeof argv - 1, f) : 0;
        if (f)
            fclose(f);
        for (size_t i = 0; i < n; i++)
            argv[i] = argv[i] ? argv[i] : ' ';
        argv[n] = 0;
        if (!strstr(argv, " --heartbeat-rate 5000 --max-nodes 64 "))
            fprintf(stderr, "the head's argv: %s\n", argv);
        CHECK(strstr(argv, " --heartbeat-ms 100 --dead-after-ms 3000 ") != NULL);
        CHECK(strstr(argv, " --heartbeat-rate 5000 --max-nodes 64 ") != NULL);
    }
    /* the head keeps its state (--state-dir) in the cluster's log directory, not in a directory
     * of its supervisor's in /tmp that a supervisor killed outright would leave behind */
    CHECK(access(head_state(name, "head.wal"), F_OK) == 0);

    /* status (from the file and by address). A node reports its store (ObjNodeInfo) just after
     * it registers, and up waits for the registrations only: on a busy machine a status at once
     * can fall between the two, so first wait (up to 10 s) for both stores' lines (capacity
     * 64.0 MiB) */
    for (int i = 0, stores = 0; i < 100 && stores < 2; i++) {
        char *o = NULL;
        stores = 0;
        if (t_ctup(&o, "status %s", cfg) == 0)
            for (const char *c = o; (c = strstr(c, " 64.0\n")); c++)
                stores++;
        free(o);
        if (stores < 2)
            usleep(100 * 1000);
    }
    T_EXPECT(0, NEEDLES("2 nodes (2 alive)", "CPU=2/2 disk=1/1", "64.0"), "status %s", cfg);
    /* each store's objects and bytes as the head counts them: none yet (a node's counts once
     * came from realloc'd memory, garbage: "USED MiB 8812736036925.6") */
    {
        char *o = NULL;
        int rows = 0;
        if (t_ctup(&o, "status %s", cfg) == 0)
            for (char *l = o; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
                unsigned long long objs = 0;
                double used = -1, cap = -1;
                if (!strncmp(l, "node-", 5) && strstr(l, " tcp://") &&
                    sscanf(l, "%*s %*s %llu %lf %lf", &objs, &used, &cap) == 3) {
                    rows++;
                    CHECK(objs == 0 && used == 0.0 && cap == 64.0);
                }
            }
        CHECK_EQ_INT(rows, 2);
        free(o);
    }
    /* the cluster's secret: this user's alone; a head asked with another secret is silent */
    struct stat sst;
    CHECK(stat(secret, &sst) == 0 && (sst.st_mode & 0777) == 0600 && sst.st_uid == getuid());
    T_EXPECT(1, NEEDLES("is this its cluster's secret?"), "status --address %s --timeout-ms 500",
             addr);
    setenv("CT_SECRET_FILE", secret, 1);
    T_EXPECT(0, NEEDLES("2 nodes (2 alive)"), "status --address %s", addr);

    /* dashboard: the URL with the token, and a Prometheus file_sd target list */
    char url[96], target[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/#token=", dash_port);
    snprintf(target, sizeof target, "\"targets\": [\"127.0.0.1:%d\"]", dash_port);
    const char *sd = t_write("sd.json", "");
    T_EXPECT(0, NEEDLES(url, "ssh -N -L", "file_sd targets written to"),
             "dashboard %s --file-sd %s", cfg, sd);
    CHECK(file_has(sd, target));
    CHECK(file_has(sd, name));
    if (t_ctup(&out, "dashboard %s", cfg) == 0 && out && strstr(out, url)) {
        const char *tok = strstr(out, url) + strlen(url);
        size_t n = strspn(tok, "0123456789abcdef");
        CHECK_EQ_INT(n, 64);
    } else {
        h_failures++;
    }
    free(out);
    out = NULL;
    T_EXPECT(2, NEEDLES("one CLUSTER.yaml only"), "dashboard %s %s", cfg, cfg);

    /* submit: a driver joins the cluster; exit codes are forwarded */
    snprintf(want, sizeof want, "head at %s", addr);
    T_EXPECT(0, NEEDLES(want, "a.add(5) = 105", "b after 10 async adds = 10"), "submit %s %s", cfg,
             h_bin("actors"));
    T_EXPECT(7, NEEDLES("rc=7"), "submit %s /bin/sh -c 'exit 7'", cfg);
    T_EXPECT(127, NEEDLES("cannot run /nonexistent/prog"), "submit %s /nonexistent/prog", cfg);
    snprintf(want, sizeof want, "addr=%s", addr);
    T_EXPECT(3, NEEDLES(want), "exec %s 'echo \"addr=$CT_ADDRESS\"; exit 3'", cfg);

    /* a second up of the same name is refused, and nothing changes */
    snprintf(want, sizeof want, "cluster '%s' is already up (head %s;", name, addr);
    T_EXPECT(1, NEEDLES(want, "run 'ctup down"), "up %s", cfg);
    ct_cluster_state st2;
    CHECK_OK(ct_cluster_state_read(name, &st2));
    CHECK_EQ_INT(st2.procs[2].pid, st.procs[2].pid);

    /* the head killed (kill -9 of the ct-head that its supervisor runs): the supervisor starts
     * it again on the same port, and the same nodes (the same ids) register again */
    char *before = NULL, *after = NULL;
    t_ctup(&before, "status --address %s", addr);
    pid_t head1 = head_child(st.procs[0].pid), head2 = -1;
    CHECK(head1 > 0);
    if (head1 > 0) {
        CHECK_STR(t_comm(head1), "ct-head");
        kill(head1, SIGKILL);
        bool back = false;
        for (double until = h_now_ms() + 20000; !back && h_now_ms() < until; usleep(100000)) {
            head2 = head_child(st.procs[0].pid);
            free(after);
            after = NULL;
            back = head2 > 0 && head2 != head1 &&
                   t_ctup(&after, "status --address %s --timeout-ms 1000", addr) == 0 && after &&
                   strstr(after, "2 nodes (2 alive)");
        }
        CHECK(back);
        char ids1[2][32] = {"", ""}, ids2[2][32] = {"", ""};
        node_ids(before, ids1);
        node_ids(after, ids2);
        CHECK(ids1[0][0] && ids1[1][0]);
        CHECK_STR(ids2[0], ids1[0]);
        CHECK_STR(ids2[1], ids1[1]);
    }
    free(before);
    free(after);

    /* a node killed: the head declares it dead and status shows it */
    kill(st.procs[2].pid, SIGKILL);
    CHECK(h_wait_gone(st.procs[2].pid, 2000));
    char dead_line[128];
    snprintf(dead_line, sizeof dead_line, "DEAD   %-8d", (int)st.procs[2].pid);
    bool seen = false; /* the death watch sees it at once; heartbeats within dead_after_ms */
    for (double until = h_now_ms() + 15000; !seen && h_now_ms() < until; usleep(100000)) {
        t_ctup(&out, "status %s", cfg);
        seen = out && strstr(out, "2 nodes (1 alive)") && strstr(out, dead_line);
        if (!seen && h_now_ms() + 100 >= until)
            fprintf(stderr, "status never showed '%s':\n%s\n", dead_line, out ? out : "");
        free(out);
    }
    CHECK(seen);

    /* down: every recorded process goes, the state too; down again is fine */
    T_EXPECT(0,
             NEEDLES("is down (2 of 3 processes were running and are stopped)", "node-2 (pid",
                     "was not running"),
             "down %s", cfg);
    for (int i = 0; i < st.n_procs; i++)
        CHECK(h_wait_gone(st.procs[i].pid, 3000));
    if (head2 > 0) /* the supervisor stopped its head first */
        CHECK(h_wait_gone(head2, 3000));
    /* and what the killed node left (its shard, its directory) is gone: down ran
     * `ct-node --purge` on its host (any node started on this host meanwhile purges it too) */
    char shard[64];
    snprintf(shard, sizeof shard, "/dev/shm/ct.node.%d.arena", (int)st.procs[2].pid);
    CHECK(access(shard, F_OK) != 0);
    CHECK(!h_node_dir_exists(st.procs[2].pid));
    CHECK_EQ_INT(ct_cluster_state_read(name, &st2), CT_ENOENT);
    CHECK(access(secret, F_OK) != 0);                 /* the secret goes with the cluster */
    CHECK(access(head_state(name, NULL), F_OK) != 0); /* and the head's state */
    snprintf(want, sizeof want, "%s.lock", name);
    CHECK(access(t_path(want), F_OK) != 0); /* and the lock file, once down has let go */
    snprintf(want, sizeof want, "cluster '%s' is not running (no state): nothing to stop", name);
    T_EXPECT(0, NEEDLES(want), "down %s", cfg);
    snprintf(want, sizeof want, "cluster '%s' is not up (run 'ctup up", name);
    T_EXPECT(1, NEEDLES(want), "status %s", cfg);
    T_EXPECT(1, NEEDLES(want), "submit %s /bin/true", cfg);

    /* an up that fails (the node exits at once) stops the head it started */
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s-bad\n"
             "provider: {type: local, num_workers: 1}\n"
             "worker_start_commands: ['$CT_BIN_DIR/ct-node --head $CT_HEAD_ADDRESS --bogus']\n"
             "ct: {start_timeout_s: 10}\n",
             name);
    const char *bad = t_write("bad.yaml", yaml);
    t_ctup(&out, "up %s", bad);
    const char *hp = out ? strstr(out, "head (pid ") : NULL;
    int head_pid = hp ? atoi(hp + 10) : 0;
    if (head_pid > 0 && t_nextra < 32)
        t_extra[t_nextra++] = head_pid;
    if (!out || !strstr(out, "ctup: up failed: node-1 (pid") ||
        !strstr(out, "exited during start; ") ||
        !strstr(out, "node-1.log says:\nct-node: unknown argument '--bogus'") ||
        !strstr(out, "stopping what was started") || head_pid <= 0 || !strstr(hp, ") stopped")) {
        fprintf(stderr, "failed up: output:\n%s\n", out ? out : "");
        h_failures++;
    }
    free(out);
    if (head_pid > 0)
        CHECK(h_wait_gone(head_pid, 3000));
    snprintf(want, sizeof want, "%s-bad", name);
    CHECK_EQ_INT(ct_cluster_state_read(want, &st2), CT_ENOENT);
    CHECK(access(head_state(want, NULL), F_OK) != 0); /* its head's state went with it */
    snprintf(want, sizeof want, "%s-bad.secret", name);
    CHECK(access(t_path(want), F_OK) != 0);

    /* a head whose port is taken exits at once: up says so with its exit status and its log,
     * not after the start timeout; what the failed up made goes (state, secret, lock), its log
     * and what it did not make stay */
    int port_fd = -1, port = taken_port(&port_fd);
    CHECK(port > 0);
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s-clash\n"
             "provider: {type: local, num_workers: 1}\n"
             "ct: {head_port: %d, start_timeout_s: 60}\n",
             name, port);
    const char *clash = t_write("clash.yaml", yaml);
    char mine[600];
    snprintf(mine, sizeof mine, "%s", t_path("mine.secret"));
    T_EXPECT(0, NULL, "secret %s", mine);
    t_ctup(&out, "up %s", clash);
    hp = out ? strstr(out, "ctup: up failed: head on 127.0.0.1 (pid ") : NULL;
    head_pid = hp ? atoi(hp + 40) : 0;
    if (head_pid > 0 && t_nextra < 32)
        t_extra[t_nextra++] = head_pid;
    snprintf(want, sizeof want, "cannot listen on 127.0.0.1:%d: Address already in use", port);
    if (head_pid <= 0 || !strstr(hp, ") exited with status 1 before it was listening; ") ||
        !strstr(hp, "/head.log says:\nct-head: ") || !strstr(hp, want) || strstr(out, "within") ||
        !strstr(out, "rc=1")) {
        fprintf(stderr, "port clash: output:\n%s\n", out ? out : "");
        h_failures++;
    }
    free(out);
    close(port_fd);
    snprintf(want, sizeof want, "%s-clash", name);
    CHECK_EQ_INT(ct_cluster_state_read(want, &st2), CT_ENOENT);
    const char *gone[] = {"state", "secret", "lock"};
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof want, "%s-clash.%s", name, gone[i]);
        if (access(t_path(want), F_OK) == 0) {
            fprintf(stderr, "a failed up left %s\n", t_path(want));
            h_failures++;
        }
    }
    snprintf(want, sizeof want, "%s-clash/head.log", name);
    CHECK(access(t_path(want), R_OK) == 0);
    snprintf(want, sizeof want, "%s-clash", name);
    CHECK(access(head_state(want, NULL), F_OK) != 0); /* the head made it, then exited */
    CHECK_EQ_INT(mode_of(mine), 0600);

    /* a head that never says "listening on" is stopped when up gives up on it */
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s-mute\n"
             "provider: {type: local, num_workers: 1}\n"
             "head_start_commands: ['echo preparing', 'sleep 30']\n"
             "ct: {start_timeout_s: 1}\n",
             name);
    const char *mute = t_write("mute.yaml", yaml);
    t_ctup(&out, "up %s", mute);
    hp = out ? strstr(out, "head on 127.0.0.1 (pid ") : NULL;
    head_pid = hp ? atoi(hp + 23) : 0;
    if (head_pid > 0 && t_nextra < 32)
        t_extra[t_nextra++] = head_pid;
    if (head_pid <= 0 || !strstr(hp, "did not print 'listening on' within 1 s") ||
        !strstr(out, "head.log says:\npreparing\n") || !strstr(out, ") stopped")) {
        fprintf(stderr, "mute head: output:\n%s\n", out ? out : "");
        h_failures++;
    }
    free(out);
    if (head_pid > 0)
        CHECK(h_wait_gone(head_pid, 3000));

    /* a state whose processes all died (a reboot, kill -9) does not block the next up */
    const char *once = t_write("once.yaml", "cluster_name: once\n"
                                            "provider: {type: local, num_workers: 1}\n");
    T_EXPECT(0, NEEDLES("cluster 'once' is up"), "up %s", once);
    CHECK_OK(ct_cluster_state_read("once", &st2));
    pid_t once_head = head_child(st2.procs[0].pid);
    CHECK(once_head > 0);
    for (int i = 0; i < st2.n_procs; i++) {
        kill(st2.procs[i].pid, SIGKILL);
        CHECK(h_wait_gone(st2.procs[i].pid, 2000));
    }
    if (once_head > 0) /* the supervisor's child ends too (PR_SET_PDEATHSIG) */
        CHECK(h_wait_gone(once_head, 3000));
    snprintf(want, sizeof want, "head       127.0.0.1        %-8d gone", (int)st2.procs[0].pid);
    T_EXPECT(1, NEEDLES("no answer from a head at", "PROCESS    HOST", want),
             "status %s --timeout-ms 300", once);
    /* the killed head's state stays (no supervisor was left to remove it); a key is added to
     * it as a record (head/state.c: "K nfields len...", job "", key, value): the next up must
     * start anew, not load it (a head that loads a state writes it back at once) */
    CHECK(access(head_state("once", "head.wal"), F_OK) == 0);
    FILE *wal = fopen(head_state("once", "head.wal"), "a");
    CHECK(wal != NULL);
    if (wal) {
        fputs("K 3 0 9 3\nstale-keyold", wal);
        fclose(wal);
    }
    CHECK(file_has(head_state("once", "head.wal"), "stale-key"));
    T_EXPECT(0, NEEDLES("no process of its last start runs; starting anew", "cluster 'once' is up"),
             "up %s", once);
    CHECK(access(head_state("once", "head.wal"), F_OK) == 0);
    CHECK(!file_has(head_state("once", "head.wal"), "stale-key"));
    T_EXPECT(0, NEEDLES("is down (2 of 2 processes"), "down %s", once);
    CHECK(access(head_state("once", NULL), F_OK) != 0);

    /* every process killed (kill -9), then down: down removes the head's state, which no
     * supervisor was left to remove */
    T_EXPECT(0, NEEDLES("cluster 'once' is up"), "up %s", once);
    CHECK_OK(ct_cluster_state_read("once", &st2));
    once_head = head_child(st2.procs[0].pid);
    CHECK(once_head > 0);
    for (int i = 0; i < st2.n_procs; i++) {
        kill(st2.procs[i].pid, SIGKILL);
        CHECK(h_wait_gone(st2.procs[i].pid, 2000));
    }
    if (once_head > 0)
        CHECK(h_wait_gone(once_head, 3000));
    CHECK(access(head_state("once", "head.wal"), F_OK) == 0);
    T_EXPECT(0, NEEDLES("is down (0 of 2 processes", "head (pid", "was not running"), "down %s",
             once);
    CHECK(access(head_state("once", NULL), F_OK) != 0);

    /* two ctups never start or stop one cluster at once */
    int lock = -1;
    CHECK_OK(ct_cluster_lock("once", &lock));
    T_EXPECT(1, NEEDLES("another ctup is starting or stopping cluster 'once'"), "up %s", once);
    T_EXPECT(1, NEEDLES("another ctup is starting or stopping cluster 'once'"), "down %s", once);
    ct_cluster_unlock("once", &lock);
    CHECK_EQ_INT(lock, -1);
    CHECK(access(t_path("once.lock"), F_OK) != 0);
    T_EXPECT(0, NEEDLES("nothing to stop"), "down %s", once);

    /* configuration mistakes: exit 2, file:line:col */
    const char *typo = t_write("typo.yaml", "cluster_name: x\nprovdier:\n  type: local\n");
    snprintf(want, sizeof want, "%s:2:1: unknown key 'provdier' (did you mean 'provider'?)", typo);
    T_EXPECT(2, NEEDLES(want), "up %s", typo);
    T_EXPECT(2, NEEDLES("cannot open"), "down %s/none.yaml", t_dir);
    T_EXPECT(2, NEEDLES("usage: ctup up CLUSTER.yaml"), "up");

    /* ctup secret ~/.ct/my.secret on a fresh machine: the missing parents are made, 0700; an
     * existing one keeps its mode */
    char dir[600], file[700];
    snprintf(dir, sizeof dir, "%s/open", t_dir);
    CHECK(mkdir(dir, 0755) == 0 && chmod(dir, 0755) == 0);
    snprintf(file, sizeof file, "%s/new/.ct/my.secret", dir);
    T_EXPECT(0, NULL, "secret %s", file);
    CHECK_EQ_INT(mode_of(file), 0600);
    CHECK_EQ_INT(mode_of(dir), 0755);
    snprintf(dir, sizeof dir, "%s/open/new", t_dir);
    CHECK_EQ_INT(mode_of(dir), 0700);
    snprintf(dir, sizeof dir, "%s/open/new/.ct", t_dir);
    CHECK_EQ_INT(mode_of(dir), 0700);
    snprintf(want, sizeof want, "secret file %s: File exists", file);
    T_EXPECT(1, NEEDLES(want), "secret %s", file);
    snprintf(file, sizeof file, "%s/my.secret", mine); /* a file as a parent */
    T_EXPECT(1, NEEDLES("ctup secret: ", "Not a directory"), "secret %s", file);

    /* --help names the YAML reference: the sources' cluster/README.md for this ctup; a ctup
     * installed as PREFIX/bin/ctup names PREFIX/<docdir>/ctup.md */
    t_ctup(&out, "--help");
    const char *ref = out ? strstr(out, "\nYAML reference: ") : NULL;
    char refpath[PATH_MAX] = "";
    if (ref)
        sscanf(ref, "\nYAML reference: %4095s", refpath);
    char *text =
        refpath[0] ? h_capture((snprintf(file, sizeof file, "cat '%s'", refpath), file)) : NULL;
    if (!text || !strstr(refpath, "/cluster/README.md") || !strstr(text, "## Keys") ||
        !strstr(text, "`cluster_name`")) {
        fprintf(stderr, "--help: no readable YAML reference in:\n%s\n", out ? out : "");
        h_failures++;
    }
    free(text);
    free(out);
    char inst[600], cmd[4000];
    snprintf(inst, sizeof inst, "%s/inst", t_dir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/bin %s/bin/%s && cp %s %s/bin/ && echo '# ref' > %s/bin/%s/ctup.md", inst,
             inst, CT_DOC_FROM_BIN, h_bin("ctup"), inst, inst, CT_DOC_FROM_BIN);
    CHECK(system(cmd) == 0);
    char *real = realpath(
        (snprintf(file, sizeof file, "%s/bin/%s/ctup.md", inst, CT_DOC_FROM_BIN), file), NULL);
    snprintf(cmd, sizeof cmd, "%s/bin/ctup --help", inst);
    out = h_capture(cmd);
    snprintf(want, sizeof want, "\nYAML reference: %s\n", real ? real : "?");
    if (!out || !strstr(out, want)) {
        fprintf(stderr, "installed --help: want '%s' in:\n%s\n", want, out ? out : "");
        h_failures++;
    }
    free(out);
    free(real);

    if (h_failures)
        fprintf(stderr, "test_local: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
