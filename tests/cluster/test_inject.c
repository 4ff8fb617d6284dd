/* tests/cluster/test_inject.c — a cluster YAML's values are data, never code or options (the
 * [security] issue), through the ctup binary:
 *  - auth.ssh_user "-oProxyCommand=touch MARKER" is refused at parse time (exit 2,
 *    file:line:col) and no ssh runs at all. The fake ssh/scp on PATH do what OpenSSH does with
 *    such an argument before `--` or the host: run the ProxyCommand (so without the fix the
 *    marker appears);
 *  - a spill_dir with shell syntax ("; touch MARKER", "&>MARKER&#") is refused the same way and
 *    nothing starts (no state file);
 *  - a spill directory that does not exist is made (mode 700) by `up` on the local provider and
 *    the node runs with it; one that cannot be made fails `up`, which stops the head.
 * Markers live in the test's private directory; every process ctup starts is in a state file,
 * killed by pid at exit (ctup_test.h), and down is checked to stop each one. */
#define _GNU_SOURCE
#include <sys/stat.h>
#include "ctup_test.h"

/* ssh and scp as OpenSSH parses them: options up to `--` or the first operand; -oOPT or -o OPT,
 * and a ProxyCommand option runs its command through sh. Every call is logged; then "connection
 * refused" (255): the tests here never need a remote side. */
static const char fake_ssh[] =
    "#!/bin/sh\n"
    "echo \"$0 $*\" >>\"$FAKE_SSH_LOG\"\n"
    "while [ $# -gt 0 ]; do\n"
    "  case \"$1\" in\n"
    "  --) break;;\n"
    "  -oProxyCommand=*) sh -c \"${1#-oProxyCommand=}\";;\n"
    "  -o) case \"$2\" in ProxyCommand=*) sh -c \"${2#ProxyCommand=}\";; esac; shift;;\n"
    "  -p|-P|-i|-l|-F|-J) shift;;\n"
    "  -*) ;;\n"
    "  *) break;;\n"
    "  esac\n"
    "  shift\n"
    "done\n"
    "exit 255\n";

/* Names in t_dir that start with "pwned" (a marker, also "pwned-user@127.0.0.1"), 0 if none. */
static int markers(void)
{
    int n = 0;
    DIR *d = opendir(t_dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (!strncmp(de->d_name, "pwned", 5)) {
            fprintf(stderr, "marker %s/%s exists: a YAML value was run\n", t_dir, de->d_name);
            n++;
        }
    if (d)
        closedir(d);
    return n;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

int main(void)
{
    t_init();
    char path[512], log[400], yaml[2048], name[64], want[1024], *out = NULL;
    snprintf(path, sizeof path, "%s/fakebin", t_dir);
    mkdir(path, 0700);
    chmod(t_write("fakebin/ssh", fake_ssh), 0755);
    chmod(t_write("fakebin/scp", fake_ssh), 0755);
    char newpath[4096];
    snprintf(newpath, sizeof newpath, "%s:%s", path, getenv("PATH") ? getenv("PATH") : "/usr/bin");
    setenv("PATH", newpath, 1);
    snprintf(log, sizeof log, "%s/ssh.log", t_dir);
    setenv("FAKE_SSH_LOG", log, 1);
    snprintf(name, sizeof name, "t-inject-%d", (int)getpid());
    ct_cluster_state st;

    /* 1. ssh_user as an ssh option: refused where it is written, and no ssh runs */
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s-user\n"
             "provider:\n  type: ssh\n  head_ip: 127.0.0.1\n  worker_ips: [127.0.0.1]\n"
             "auth:\n  ssh_user: \"-oProxyCommand=touch %s/pwned-user\"\n",
             name, t_dir);
    const char *cfg = t_write("user.yaml", yaml);
    snprintf(want, sizeof want,
             "%s:7:13: auth.ssh_user: '-oProxyCommand=touch %s/pwned-user' is not a user name", cfg,
             t_dir);
    T_EXPECT(2, NEEDLES(want), "up %s", cfg);
    CHECK_EQ_INT(file_size(log), -1); /* ssh and scp never ran */
    CHECK_EQ_INT(markers(), 0);
    snprintf(want, sizeof want, "%s-user", name);
    CHECK_EQ_INT(ct_cluster_state_read(want, &st), CT_ENOENT);

    /* 2. a spill_dir with shell syntax: refused, nothing starts (local provider) */
    const char *spills[] = {"/tmp/x; touch %s/pwned-spill-1", "/tmp/x&>%s/pwned-spill-2&#"};
    for (int i = 0; i < 2; i++) {
        char dir[600];
        snprintf(dir, sizeof dir, spills[i], t_dir);
        snprintf(yaml, sizeof yaml,
                 "cluster_name: %s-spill\n"
                 "provider: {type: local, num_workers: 1}\n"
                 "ct:\n  start_timeout_s: 10\n  spill_dir: \"%s\"\n",
                 name, dir);
        cfg = t_write("spill.yaml", yaml);
        snprintf(want, sizeof want, "%s:5:14: ct.spill_dir: '%s' must be an absolute path", cfg,
                 dir);
        T_EXPECT(2, NEEDLES(want), "up %s", cfg);
        CHECK_EQ_INT(markers(), 0);
        snprintf(want, sizeof want, "%s-spill", name);
        if (ct_cluster_state_read(want, &st) != CT_ENOENT) {
            fprintf(stderr, "spill_dir '%s': up started processes\n", dir);
            h_failures++;
            T_EXPECT(0, NULL, "down %s", cfg);
        }
    }

    /* 3. a spill directory that does not exist yet is made by up, and the node runs with it */
    char root[600], spill[700];
    snprintf(root, sizeof root, "%s/new/spill", t_dir);
    snprintf(spill, sizeof spill, "%s/%s-1", root, name);
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s\n"
             "provider: {type: local, num_workers: 1}\n"
             "available_node_types:\n  w: {resources: {CPU: 1}, store_memory: 64M}\n"
             "ct: {spill_dir: %s, heartbeat_ms: 100, dead_after_ms: 3000, start_timeout_s: 15}\n",
             name, root);
    cfg = t_write("ok.yaml", yaml);
    struct stat sb;
    CHECK(stat(root, &sb) != 0);
    snprintf(want, sizeof want, "cluster '%s' is up: head 127.0.0.1:", name);
    T_EXPECT(0, NEEDLES(want, "--spill-dir ", spill), "up %s", cfg);
    CHECK(stat(spill, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK_EQ_INT(sb.st_mode & 0777, 0700);
    CHECK_OK(ct_cluster_state_read(name, &st));
    CHECK_EQ_INT(st.n_procs, 2);
    if (st.n_procs == 2) {
        CHECK_STR(t_comm(st.procs[1].pid), "ct-node");
        CHECK_EQ_INT(t_start_time(st.procs[1].pid), st.procs[1].start_time);
        char cmdline[4096] = "", p[64];
        snprintf(p, sizeof p, "/proc/%d/cmdline", (int)st.procs[1].pid);
        FILE *f = fopen(p, "r");
        size_t n = f ? fread(cmdline, 1, sizeof cmdline - 1, f) : 0;
        if (f)
            fclose(f);
        for (size_t i = 0; i < n; i++)
            cmdline[i] = cmdline[i] ? cmdline[i] : ' ';
        cmdline[n] = 0;
        snprintf(want, sizeof want, " --spill-dir %s", spill);
        if (!strstr(cmdline, want)) {
            fprintf(stderr, "node's command line '%s' lacks '%s'\n", cmdline, want);
            h_failures++;
        }
    }
    T_EXPECT(0, NEEDLES("(1 alive)", "CPU=1/1"), "status %s", cfg);
    T_EXPECT(0, NEEDLES("is down (2 of 2 processes were running and are stopped)"), "down %s", cfg);
    for (int i = 0; i < st.n_procs; i++)
        CHECK(h_wait_gone(st.procs[i].pid, 3000));

    /* 4. a spill directory that cannot be made fails up before the node starts; the head stops */
    snprintf(yaml, sizeof yaml,
             "cluster_name: %s-nodir\n"
             "provider: {type: local, num_workers: 1}\n"
             "ct: {spill_dir: /proc/ct-no-such-dir, start_timeout_s: 10}\n",
             name);
    cfg = t_write("nodir.yaml", yaml);
    t_ctup(&out, "up %s", cfg);
    const char *hp = out ? strstr(out, "head (pid ") : NULL;
    int head_pid = hp ? atoi(hp + 10) : 0;
    if (head_pid > 0 && t_nextra < 32)
        t_extra[t_nextra++] = head_pid;
    snprintf(want, sizeof want, "/proc/ct-no-such-dir/%s-nodir-1", name);
    if (!out || !strstr(out, "mkdir") || !strstr(out, want) ||
        !strstr(out, "node-1 on 127.0.0.1 did not start (exit 1") || head_pid <= 0 ||
        !strstr(hp, ") stopped")) {
        fprintf(stderr, "up with a spill dir that cannot be made: output:\n%s\n", out ? out : "");
        h_failures++;
    }
    free(out);
    if (head_pid > 0)
        CHECK(h_wait_gone(head_pid, 3000));
    snprintf(want, sizeof want, "%s-nodir", name);
    CHECK_EQ_INT(ct_cluster_state_read(want, &st), CT_ENOENT);

    CHECK_EQ_INT(markers(), 0);
    if (h_failures)
        fprintf(stderr, "test_inject: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
