/* tests/cluster/test_ssh.c — the ssh provider, end to end on this host: a fake `ssh` and `scp`
 * on PATH log their argv and run the remote command here (HOME is a private directory, as a
 * remote home would be). Checks the exact ssh/scp command lines (options, port, key, `--`, then
 * user@host), that the copied binaries are what runs, that each node's spill directory is made
 * (mode 700) by its start script, exec on the head, and down by recorded pid, which removes the
 * hosts' copies of the secret too and the head's state directory (in the log directory, ~/...:
 * "$HOME" expanded on the host, also in CT_HEAD_ARGS); an up whose head exits at once says so
 * (exit status, log) and removes the secret it copied. */
#define _GNU_SOURCE
#include <sys/stat.h>
#include "ctup_test.h"

static const char fake_ssh[] =
    "#!/bin/sh\n"
    "# fake ssh: log argv, then run the remote command here, in $HOME\n"
    "{ printf 'ssh'; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo; } >>\"$FAKE_SSH_LOG\"\n"
    "while [ $# -gt 0 ]; do case \"$1\" in -o|-p|-i|-l) shift 2;; -*) shift;; *) break;; "
    "esac; done\n"
    "shift\n"
    "cd \"$HOME\" && exec sh -c \"$*\"\n";

static const char fake_scp[] =
    "#!/bin/sh\n"
    "# fake scp: log argv, copy the files to the path after 'host:' (relative: to $HOME)\n"
    "{ printf 'scp'; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo; } >>\"$FAKE_SSH_LOG\"\n"
    "files=\n"
    "while [ $# -gt 1 ]; do case \"$1\" in -o|-P|-i) shift 2;; -*) shift;; *) files=\"$files "
    "$1\"; shift;; esac; done\n"
    "dest=${1#*:}\n"
    "case \"$dest\" in /*) ;; *) dest=\"$HOME/$dest\";; esac\n"
    "exec cp $files \"$dest\"\n";

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void expect_in(const char *hay, const char *needle, const char *what)
{
    if (!strstr(hay, needle)) {
        fprintf(stderr, "%s: missing\n  %s\n---- log:\n%s----\n", what, needle, hay);
        h_failures++;
    }
}

int main(void)
{
    t_init();
    char path[512], home[400], log[400], yaml[2048], name[64], want[16384], *out = NULL;
    snprintf(path, sizeof path, "%s/fakebin", t_dir);
    mkdir(path, 0700);
    chmod(t_write("fakebin/ssh", fake_ssh), 0755);
    chmod(t_write("fakebin/scp", fake_scp), 0755);
    char newpath[4096];
    snprintf(newpath, sizeof newpath, "%s:%s", path, getenv("PATH") ? getenv("PATH") : "/usr/bin");
    setenv("PATH", newpath, 1);
    snprintf(home, sizeof home, "%s/home", t_dir);
    mkdir(home, 0700);
    setenv("HOME", home, 1);
    snprintf(log, sizeof log, "%s/ssh.log", t_dir);
    setenv("FAKE_SSH_LOG", log, 1);
    const char *key = t_write("id_test", "not a key\n");
    char known[512];
    snprintf(known, sizeof known, "%s/known_hosts", t_dir);

    snprintf(name, sizeof name, "t-ssh-%d", (int)getpid());
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s\n"
             "provider:\n  type: ssh\n  head_ip: 127.0.0.1\n  worker_ips: [127.0.0.1, localhost]\n"
             "auth: {ssh_user: tester, ssh_private_key: %s, ssh_port: 2222,\n"
             "       ssh_known_hosts: %s}\n"
             "setup_commands: ['echo setup-ran >> setup.txt']\n"
             "available_node_types:\n  w: {resources: {CPU: 1}, min_workers: 2}\n"
             "ct: {head_port: 0, head_bind: 127.0.0.1, heartbeat_ms: 100, dead_after_ms: 3000,\n"
             "     spill_dir: %s/spill}\n",
             name, key, known, t_dir);
    const char *cfg = t_write("s.yaml", yaml);

    int rc = t_ctup(&out, "up %s", cfg);
    const char *a = out ? strstr(out, "export CT_ADDRESS=") : NULL;
    char addr[128] = "";
    if (rc != 0 || !a) {
        fprintf(stderr, "up: exit %d, output:\n%s\n", rc, out ? out : "");
        free(out);
        char *l = slurp(log);
        fprintf(stderr, "---- ssh log:\n%s", l);
        free(l);
        return 1;
    }
    sscanf(a, "export CT_ADDRESS=%127s", addr);
    CHECK(strstr(out, "logs: (on each host) ~/.ct/logs/") != NULL);
    free(out);

    char *l = slurp(log);
    const char *opts = "[-o] [BatchMode=yes] [-o] [StrictHostKeyChecking=accept-new] [-o] "
                       "[ConnectTimeout=10]";
    /* setup on each distinct host, in $HOME */
    snprintf(want, sizeof want,
             "ssh %s [-p] [2222] [-o] [UserKnownHostsFile=%s] [-o] [IdentitiesOnly=yes] [-i] [%s] "
             "[--] [tester@127.0.0.1] [CT_CLUSTER_NAME='%s'; export "
             "CT_CLUSTER_NAME; cd; echo setup-ran >> setup.txt\n]",
             opts, known, key, name);
    expect_in(l, want, "setup on the head host");
    snprintf(want, sizeof want, "[--] [tester@localhost] [CT_CLUSTER_NAME='%s'; export", name);
    expect_in(l, want, "setup on the second host");
    char *setup = NULL;
    snprintf(path, sizeof path, "%s/setup.txt", home);
    setup = slurp(path);
    CHECK_STR(setup, "setup-ran\nsetup-ran\n");
    free(setup);
    /* binaries: mkdir, scp into .incoming, mv into place, per host */
    snprintf(want, sizeof want,
             "ssh %s [-p] [2222] [-o] [UserKnownHostsFile=%s] [-o] [IdentitiesOnly=yes] [-i] [%s] "
             "[--] [tester@127.0.0.1] [mkdir -p -- "
             "\"$HOME\"/'.ct/bin'/.incoming]",
             opts, known, key);
    expect_in(l, want, "mkdir of the binaries' folder");
    char bindir[PATH_MAX];
    snprintf(bindir, sizeof bindir, "%s", h_bin("ctup"));
    *strrchr(bindir, '/') = 0;
    snprintf(want, sizeof want,
             "scp [-q] %s [-P] [2222] [-o] [UserKnownHostsFile=%s] [-o] [IdentitiesOnly=yes] [-i] "
             "[%s] [--] [%s/ct-head] [%s/ct-node] "
             "[tester@127.0.0.1:.ct/bin/.incoming/]",
             opts, known, key, bindir, bindir);
    expect_in(l, want, "scp to the head host");
    snprintf(want, sizeof want, "[%s/ct-node] [tester@localhost:.ct/bin/.incoming/]", bindir);
    expect_in(l, want, "scp to the second host");
    expect_in(l, "[mv -f -- \"$HOME\"/'.ct/bin'/.incoming/ct-head", "install step");
    /* the cluster secret: a private folder, then scp -p of the 0600 file */
    expect_in(l, "[umask 077 && mkdir -p -- \"$HOME\"/'.ct/secrets'", "secret folder");
    char secret[PATH_MAX];
    CHECK_OK(ct_cluster_secret_path(name, secret, sizeof secret));
    snprintf(want, sizeof want,
             "scp [-q] [-p] %s [-P] [2222] [-o] [UserKnownHostsFile=%s] [-o] [IdentitiesOnly=yes] "
             "[-i] [%s] [--] [%s] [tester@127.0.0.1:.ct/secrets/%s.secret]",
             opts, known, key, secret, name);
    expect_in(l, want, "scp of the secret");
    char remote_secret[PATH_MAX];
    snprintf(remote_secret, sizeof remote_secret, "%s/.ct/secrets/%s.secret", home, name);
    CHECK(access(remote_secret, R_OK) == 0);
    /* the head and the nodes */
    expect_in(l,
              "nohup setsid sh -c 'exec \"$HOME\"/'\\''.ct/bin'\\''/ct-head --host 127.0.0.1 "
              "--port 0 --heartbeat-ms 100 --dead-after-ms 3000",
              "head start");
    /* its state directory: the log directory's, a path the host's shell expands ("~" would not
     * be, in $CT_HEAD_ARGS) */
    snprintf(want, sizeof want,
             "--dead-after-ms 3000 --supervise --state-dir \"$HOME\"/'\\''.ct/logs/%s/head-state'"
             "\\''\n' >\"$HOME\"/'.ct/logs/%s/head.log'",
             name, name);
    expect_in(l, want, "head start: --state-dir");
    snprintf(want, sizeof want,
             "CT_HEAD_ARGS='--host 127.0.0.1 --port 0 --heartbeat-ms 100 --dead-after-ms 3000 "
             "--supervise --state-dir '\"$HOME\"/'.ct/logs/%s/head-state' nohup setsid sh -c ",
             name);
    expect_in(l, want, "head start: CT_HEAD_ARGS");
    char wal[PATH_MAX];
    snprintf(wal, sizeof wal, "%s/.ct/logs/%s/head-state/head.wal", home, name);
    CHECK(access(wal, F_OK) == 0);
    /* the spill directory is made before the node starts; data values are single-quoted */
    snprintf(want, sizeof want,
             "[--] [tester@127.0.0.1] [mkdir -p -- \"$HOME\"/'.ct/logs/%s' && cd && "
             "mkdir -p -m 700 -- '%s/spill/%s-1' || exit 1; mv -f -- ",
             name, t_dir, name);
    expect_in(l, want, "node-1 spill directory");
    snprintf(want, sizeof want,
             "CT_HEAD_ADDRESS='%s' CT_NODE_ARGS='--host 127.0.0.1 --cpus 1 --spill-dir "
             "%s/spill/%s-1' nohup setsid sh -c ",
             addr, t_dir, name);
    expect_in(l, want, "node-1 environment");
    snprintf(want, sizeof want,
             "/ct-node --head '\\''%s'\\'' --host 127.0.0.1 --cpus 1 --spill-dir %s/spill/%s-1\n' "
             ">\"$HOME\"/'.ct/logs/%s/node-1.log' 2>&1 </dev/null &",
             addr, t_dir, name, name);
    expect_in(l, want, "node-1 start (with --host: an IP)");
    snprintf(want, sizeof want,
             "/ct-node --head '\\''%s'\\'' --cpus 1 --spill-dir %s/spill/%s-2\n' "
             ">\"$HOME\"/'.ct/logs/%s/node-2.log'",
             addr, t_dir, name, name);
    expect_in(l, want, "node-2 start (no --host: a host name)");
    free(l);
    for (int i = 1; i <= 2; i++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/spill/%s-%d", t_dir, name, i);
        CHECK(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
        CHECK_EQ_INT(sb.st_mode & 0777, 0700);
    }

    /* what runs is the copy */
    ct_cluster_state st;
    CHECK_OK(ct_cluster_state_read(name, &st));
    CHECK_EQ_INT(st.n_procs, 3);
    CHECK_STR(st.provider, "ssh");
    CHECK_STR(st.procs[2].host, "localhost");
    for (int i = 0; i < st.n_procs && i < 3; i++) {
        char exe[PATH_MAX] = "", link[64], wantexe[PATH_MAX];
        snprintf(link, sizeof link, "/proc/%d/exe", (int)st.procs[i].pid);
        ssize_t n = readlink(link, exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        snprintf(wantexe, sizeof wantexe, "%s/.ct/bin/%s", home, i ? "ct-node" : "ct-head");
        CHECK_STR(exe, wantexe);
        CHECK_EQ_INT(getsid(st.procs[i].pid), st.procs[i].pid);
    }
    T_EXPECT(0, NEEDLES("2 nodes (2 alive)", "CPU=1/1"), "status %s", cfg);

    /* exec runs on the head host, over ssh, with CT_ADDRESS */
    truncate(log, 0);
    snprintf(want, sizeof want, "on head: %s in %s", addr, home);
    T_EXPECT(4, NEEDLES(want), "exec %s 'echo \"on head: $CT_ADDRESS in $(pwd)\"; exit 4'", cfg);
    l = slurp(log);
    snprintf(want, sizeof want,
             "[--] [tester@127.0.0.1] [CT_ADDRESS='%s'; CT_SECRET_FILE=\"$HOME\"/'.ct/secrets/"
             "%s.secret'; export CT_ADDRESS CT_SECRET_FILE; cd; echo \"on head: $CT_ADDRESS in "
             "$(pwd)\"; exit 4]",
             addr, name);
    expect_in(l, want, "exec over ssh");
    free(l);

    /* down: one ssh per process, each checks the start time before it signals */
    truncate(log, 0);
    T_EXPECT(0, NEEDLES("is down (3 of 3 processes were running and are stopped)"), "down %s", cfg);
    for (int i = 0; i < st.n_procs; i++)
        CHECK(h_wait_gone(st.procs[i].pid, 3000));
    l = slurp(log);
    snprintf(want, sizeof want, "[--] [tester@localhost] [p=%d; s=%llu; ", (int)st.procs[2].pid,
             st.procs[2].start_time);
    expect_in(l, want, "stop of node-2 on its host");
    snprintf(want, sizeof want,
             "[--] [tester@localhost] [rm -f -- \"$HOME\"/'.ct/secrets/%s.secret']", name);
    expect_in(l, want, "the secret removed on the second host");
    snprintf(want, sizeof want,
             "[--] [tester@127.0.0.1] [d=\"$HOME\"/'.ct/logs/%s/head-state'; rm -f -- ", name);
    expect_in(l, want, "the head's state removed on its host");
    free(l);
    *strrchr(wal, '/') = 0;
    CHECK(access(wal, F_OK) != 0);
    CHECK(access(remote_secret, F_OK) != 0);
    CHECK(access(secret, F_OK) != 0);
    T_EXPECT(0, NEEDLES("nothing to stop"), "down %s", cfg);

    /* a head that exits at once (on its host, over ssh): up says so with its exit status and
     * its log, and removes the secret it copied, here and on the hosts */
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s-bad\n"
             "provider: {type: ssh, head_ip: 127.0.0.1, worker_ips: [localhost]}\n"
             "auth: {ssh_user: tester, ssh_known_hosts: %s}\n"
             "head_start_commands: ['echo no head here', 'sh -c \"exit 3\"']\n"
             "ct: {start_timeout_s: 60}\n",
             name, known);
    const char *bad = t_write("bad.yaml", yaml);
    t_ctup(&out, "up %s", bad);
    snprintf(want, sizeof want,
             ") exited with status 3 before it was listening; ~/.ct/logs/%s-bad/head.log "
             "says:\nno head here\n",
             name);
    if (!out || !strstr(out, "ctup: up failed: head on 127.0.0.1 (pid ") || !strstr(out, want) ||
        !strstr(out, "copying the cluster secret to localhost")) {
        fprintf(stderr, "failed up: want '%s' in:\n%s\n", want, out ? out : "");
        h_failures++;
    }
    free(out);
    snprintf(path, sizeof path, "%s/.ct/secrets/%s-bad.secret", home, name);
    CHECK(access(path, F_OK) != 0);
    snprintf(want, sizeof want, "%s-bad", name);
    CHECK_OK(ct_cluster_secret_path(want, secret, sizeof secret));
    CHECK(access(secret, F_OK) != 0);
    CHECK_EQ_INT(ct_cluster_state_read(want, &st), CT_ENOENT);

    if (h_failures)
        fprintf(stderr, "test_ssh: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
