/* cluster/provider.c — the list of providers (ct__cluster_provider_find), and what the two
 * providers that reach hosts through a shell share: every action on a host is a small POSIX sh
 * script, run through the provider's transport (its table's argv: local: /bin/sh -c SCRIPT;
 * ssh: ssh ... SCRIPT, see provider_local.c / provider_ssh.c). So the local provider and the
 * ssh provider run the same scripts, and a test with a fake `ssh` on PATH exercises the ssh
 * path on this host. The slurm provider (provider_slurm.c) uses none of the scripts.
 *
 * A daemon (ct-head, ct-node, or the user's start commands, the last of which is exec'd) is
 * started detached: `nohup setsid sh -c CMDS >LOG 2>&1 </dev/null &`, then the script prints
 * "PID STARTTIME" (STARTTIME: field 22 of /proc/PID/stat, which tells a reused pid apart).
 * Stopping checks that start time again before each signal.
 *
 * Values from the YAML are data, never code: each one reaches a script either single-quoted
 * (ct__shell_quote) or, where it must stay one unquoted word (a ct-node argument, which
 * $CT_NODE_ARGS word-splits), checked here again with ct__shell_safe_word after yaml_config.c
 * checked it at parse time. Only setup and start commands are shell code, by design.
 *
 * Not in here: YAML (yaml_config.c), the state file (state.c), the CLI (ctup.c). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cluster/cluster.h"
#include "cluster/provider.h"
#include "common/common.h"

/* Appends printf output to buf (cap). Returns 0 or CT_ERANGE. */
int ct__cat(char *buf, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= cap - n)
        return ct__error(CT_ERANGE, "a command line or script longer than %zu bytes", cap);
    return 0;
}

int ct__shell_quote(char *buf, size_t cap, const char *s)
{
    int rc = ct__cat(buf, cap, "'");
    for (const char *c = s; !rc && *c; c++)
        rc = *c == '\'' ? ct__cat(buf, cap, "'\\''") : ct__cat(buf, cap, "%c", *c);
    return rc ? rc : ct__cat(buf, cap, "'");
}

bool ct__shell_safe_word(const char *s)
{
    return s && *s && *s != '-' && strspn(s, CT_CLUSTER_SAFE_CHARS) == strlen(s);
}

int ct__cluster_head_flags(const ct_cluster_config *cfg, char *buf, size_t cap)
{
    /* the optional ones: a row each, {flag, value}, passed when set (> 0) */
    const struct {
        const char *flag;
        int v;
    } rows[] = {{"--heartbeat-rate", cfg->heartbeat_rate},
                {"--max-nodes", cfg->max_nodes},
                {"--max-actors", cfg->max_actors},
                {"--max-placement-groups", cfg->max_placement_groups},
                {"--max-objects", cfg->max_objects},
                {"--max-kv-keys", cfg->max_kv_keys},
                {"--max-subscribers", cfg->max_subscribers}};
    int rc = ct__cat(buf, cap, " --port %d --heartbeat-ms %d --dead-after-ms %d", cfg->head_port,
                     cfg->heartbeat_ms, cfg->dead_after_ms);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0] && !rc; i++)
        if (rows[i].v > 0)
            rc = ct__cat(buf, cap, " %s %d", rows[i].flag, rows[i].v);
    return rc;
}

/* Appends " flag value" to a ct-node/ct-head argument string, value checked to be one safe
 * word (see the file comment). Returns 0, CT_EINVAL or CT_ERANGE. */
static int arg_word(char *buf, size_t cap, const char *flag, const char *value)
{
    if (!ct__shell_safe_word(value))
        return ct__error(CT_EINVAL,
                         "%s '%s': only letters, digits and _ . , / + : @ = - "
                         "(not starting with '-')",
                         flag, value);
    return ct__cat(buf, cap, " %s %s", flag, value);
}

/* A path for the remote shell: "~/x" becomes "$HOME"/'x' so that the shell expands it. */
static int shell_path(char *buf, size_t cap, const char *path)
{
    if (!strcmp(path, "~"))
        return ct__cat(buf, cap, "\"$HOME\"");
    if (!strncmp(path, "~/", 2)) {
        int rc = ct__cat(buf, cap, "\"$HOME\"/");
        return rc ? rc : ct__shell_quote(buf, cap, path + 2);
    }
    return ct__shell_quote(buf, cap, path);
}

int ct__cluster_run(char *const argv[], char *out, size_t cap)
{
    int p[2] = {-1, -1};
    if (out && pipe2(p, O_CLOEXEC))
        return ct__error(-errno, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        if (out)
            close(p[0]), close(p[1]);
        return ct__error(-e, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        dup2(out ? p[1] : 2, 1);
        /* no descriptor of ctup (or of whoever started ctup) leaks into a daemon */
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], argv);
        fprintf(stderr, "ctup: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    size_t n = 0;
    if (out) {
        close(p[1]);
        ssize_t r;
        char sink[512];
        while ((r = read(p[0], n + 1 < cap ? out + n : sink,
                         n + 1 < cap ? cap - 1 - n : sizeof sink)) != 0) {
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                break;
            if (n + 1 < cap)
                n += (size_t)r;
        }
        out[n] = 0;
        close(p[0]);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return ct__error(-errno, "waitpid: %s", strerror(errno));
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

/* `st VAR` sets VAR to the fields of /proc/$p/stat after the command name (state first). */
#define STAT_FN "st() { sed 's/.*) //' /proc/$p/stat 2>/dev/null; }; "

int ct__cluster_start_script(char *buf, size_t cap, const char *log_path, const char *env_assign,
                             char *const *cmds, int n_cmds, const char *default_cmd,
                             const char *make_dir)
{
    char inner[16384] = "";
    int rc = 0;
    if (cmds && n_cmds > 0) {
        for (int i = 0; i < n_cmds - 1 && !rc; i++)
            rc = ct__cat(inner, sizeof inner, "%s\n", cmds[i]);
        if (!rc)
            rc = ct__cat(inner, sizeof inner, "exec %s\n", cmds[n_cmds - 1]);
    } else {
        rc = ct__cat(inner, sizeof inner, "exec %s\n", default_cmd);
    }
    buf[0] = 0;
    if (!rc && make_dir) {
        rc = ct__cat(buf, cap, "mkdir -p -m 700 -- ");
        if (!rc)
            rc = ct__shell_quote(buf, cap, make_dir);
        if (!rc)
            rc = ct__cat(buf, cap, " || exit 1; ");
    }
    /* the last run's log moves aside first: the wait for "listening on" must not read it */
    if (!rc)
        rc = ct__cat(buf, cap, "mv -f -- ");
    if (!rc)
        rc = shell_path(buf, cap, log_path);
    if (!rc)
        rc = ct__cat(buf, cap, " ");
    if (!rc)
        rc = shell_path(buf, cap, log_path);
    if (!rc)
        rc = ct__cat(buf, cap, ".1 2>/dev/null; ");
    if (!rc)
        rc = ct__cat(buf, cap, "%snohup setsid sh -c ", env_assign ? env_assign : "");
    if (!rc)
        rc = ct__shell_quote(buf, cap, inner);
    if (!rc)
        rc = ct__cat(buf, cap, " >");
    if (!rc)
        rc = shell_path(buf, cap, log_path);
    if (!rc)
        rc = ct__cat(buf, cap,
                     " 2>&1 </dev/null & p=$!; " STAT_FN "echo \"$p $(st | cut -d' ' -f20)\"\n");
    return rc;
}

int ct__cluster_stop_script(char *buf, size_t cap, pid_t pid, unsigned long long start_time)
{
    buf[0] = 0;
    return ct__cat(
        buf, cap,
        "p=%d; s=%llu; " STAT_FN "same() { f=$(st); [ -n \"$f\" ] && [ \"${f%%%% *}\" != Z ] && "
        "[ \"$(echo \"$f\" | cut -d' ' -f20)\" = \"$s\" ]; }; "
        "f=$(st); if [ -z \"$f\" ] || [ \"${f%%%% *}\" = Z ]; then echo gone; exit 0; fi; "
        "if ! same; then echo other; exit 0; fi; "
        "kill -TERM $p 2>/dev/null; i=0; "
        "while [ $i -lt 60 ]; do same || { echo stopped; exit 0; }; sleep 0.05; "
        "i=$((i+1)); done; "
        "same && kill -KILL $p 2>/dev/null; echo killed\n",
        (int)pid, start_time);
}

int ct__cluster_alive_script(char *buf, size_t cap, pid_t pid, unsigned long long start_time)
{
    buf[0] = 0;
    return ct__cat(buf, cap,
                   "p=%d; s=%llu; " STAT_FN "f=$(st); "
                   "if [ -n \"$f\" ] && [ \"${f%%%% *}\" != Z ] && "
                   "[ \"$(echo \"$f\" | cut -d' ' -f20)\" = \"$s\" ]; then echo alive; "
                   "else echo gone; fi\n",
                   (int)pid, start_time);
}

static const ct_cluster_provider *const providers[] = {&ct__provider_local, &ct__provider_ssh,
                                                       &ct__provider_slurm};

const ct_cluster_provider *ct__cluster_provider_find(const char *name)
{
    for (size_t i = 0; name && i < CT_ARRAY_LEN(providers); i++)
        if (!strcmp(providers[i]->name, name))
            return providers[i];
    return NULL;
}

bool ct__cluster_provider_has_key(const char *key)
{
    for (size_t i = 0; key && i < CT_ARRAY_LEN(providers); i++)
        for (int k = 0; providers[i]->keys && providers[i]->keys[k]; k++)
            if (!strcmp(providers[i]->keys[k], key))
                return true;
    return key && !strcmp(key, "type");
}

const char *ct__cluster_provider_names(char *buf, size_t cap)
{
    size_t n = CT_ARRAY_LEN(providers), used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && used < cap; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        int k = snprintf(buf + used, cap - used, "%s%s", sep, providers[i]->name);
        used += k > 0 ? (size_t)k : 0;
    }
    return buf;
}

/* Runs script on host through the provider's transport; stdout into out (may be NULL: then
 * it goes to stderr). Returns the exit status or < 0. */
int ct__hosts_run(const ct_cluster_config *cfg, const char *host, const char *script, char *out,
                  size_t cap)
{
    char *argv[32];
    char store[32768];
    int rc = cfg->provider->argv(cfg, host, script, argv, 32, store, sizeof store);
    if (rc)
        return rc;
    CT_LOG(CT_LOG_DEBUG, "ctup", "on %s: %s", host, script);
    return ct__cluster_run(argv, out, cap);
}

/* Hosts in the order they are first named: the head's, then the workers'. Local: one. */
static int distinct_hosts(const ct_cluster_config *cfg, const char **hosts, int cap)
{
    int n = 0;
    hosts[n++] = cfg->head_ip;
    if (cfg->provider->one_host)
        return n;
    for (int i = 0; i < cfg->n_nodes && n < cap; i++) {
        bool seen = false;
        for (int j = 0; j < n && !seen; j++)
            seen = !strcmp(hosts[j], cfg->nodes[i].host);
        if (!seen)
            hosts[n++] = cfg->nodes[i].host;
    }
    return n;
}

static int run_setup(const ct_cluster_config *cfg, const char *host, char **cmds, int n,
                     const char *what)
{
    for (int i = 0; i < n; i++) {
        char script[16384] = "CT_CLUSTER_NAME=";
        int rc = ct__shell_quote(script, sizeof script, cfg->cluster_name);
        if (!rc)
            rc = ct__cat(script, sizeof script, "; export CT_CLUSTER_NAME; cd; %s\n", cmds[i]);
        if (rc)
            return rc;
        fprintf(stderr, "ctup: %s on %s: %s\n", what, host, cmds[i]);
        rc = ct__hosts_run(cfg, host, script, NULL, 0);
        if (rc < 0)
            return rc;
        if (rc > 0)
            return ct__error(CT_EIO, "%s[%d] on %s exited with %d: %s", what, i, host, rc, cmds[i]);
    }
    return 0;
}

/* Is s an IPv4/IPv6 literal (ct-node --host takes an address, not a name)? */
static bool is_ip(const char *s)
{
    unsigned char b[16];
    return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

/* The head's state directory on its host (ct-head --state-dir: head.wal, head/state.c):
 * LOG_DIR/head-state, beside the head's log. up names it for the supervised head, so that the
 * cluster owns it: without one, the supervisor makes a private directory in /tmp that only its
 * own normal end removes, and a supervisor killed outright (kill -9, a test's timeout) left it
 * behind, one per up. up removes the last cluster's before the head starts (a new cluster
 * must not load an old cluster's state; the supervisor's private one was fresh each time),
 * down removes it after the head has stopped (remove_head_state). */
static int head_state_dir(const ct_cluster_config *cfg, char *out, size_t cap)
{
    char logdir[4096];
    int rc = cfg->provider->log_dir(cfg, logdir, sizeof logdir);
    if (rc)
        return rc;
    int n = snprintf(out, cap, "%s/head-state", logdir);
    return n < 0 || (size_t)n >= cap ? ct__error(CT_ERANGE, "head state path too long") : 0;
}

/* Removes the head's state directory on host: the files ct-head writes there, then the
 * directory when that leaves it empty. Returns 0 when no state file is left, the script's exit
 * status when one is (rm failed), or < 0. */
static int remove_head_state(const ct_cluster_config *cfg, const char *host)
{
    char dir[4200], script[8800] = "d=";
    int rc = head_state_dir(cfg, dir, sizeof dir);
    if (!rc)
        rc = shell_path(script, sizeof script, dir);
    if (!rc)
        rc = ct__cat(script, sizeof script,
                     "; rm -f -- \"$d/head.wal\" \"$d/head.wal.new\" || exit 1; "
                     "rmdir -- \"$d\" 2>/dev/null; exit 0\n");
    return rc ? rc : ct__hosts_run(cfg, host, script, NULL, 0);
}

/* Starts one daemon on host (first creating make_dir when not NULL); fills proc (pid, start
 * time). When listen is not NULL, waits (on the host) up to the start timeout for
 * "listening on H:P" in the log and copies H:P to listen; a daemon that exits before that
 * fails at once, with its exit status (the script's `wait`: it is the script's child) and the
 * last lines of its log. */
static int start_daemon(const ct_cluster_config *cfg, const char *host, const char *role,
                        const char *env_assign, char *const *cmds, int n_cmds,
                        const char *default_cmd, const char *make_dir, ct_cluster_proc *proc,
                        char *listen, size_t listen_cap)
{
    char logdir[4096], log[4300], script[40000], out[4096];
    int rc = cfg->provider->log_dir(cfg, logdir, sizeof logdir);
    if (rc)
        return rc;
    snprintf(log, sizeof log, "%s/%s.log", logdir, role);
    script[0] = 0;
    if ((rc = ct__cat(script, sizeof script, "mkdir -p -- ")) ||
        (rc = shell_path(script, sizeof script, logdir)) ||
        (rc = ct__cat(script, sizeof script, " && cd && ")))
        return rc;
    size_t head_len = strlen(script);
    if ((rc = ct__cluster_start_script(script + head_len, sizeof script - head_len, log, env_assign,
                                       cmds, n_cmds, default_cmd, make_dir)))
        return rc;
    if (listen) {
        char wait[2048] = "";
        int tries = cfg->start_timeout_s * 20;
        if ((rc = ct__cat(wait, sizeof wait,
                          "i=0; while [ $i -lt %d ]; do grep -q '^listening on ' ", tries)) ||
            (rc = shell_path(wait, sizeof wait, log)) ||
            (rc = ct__cat(wait, sizeof wait,
                          " && break; f=$(st); [ -n \"$f\" ] && [ \"${f%%%% *}\" != Z ] || break; "
                          "sleep 0.05; i=$((i+1)); done; grep -m1 '^listening on ' ")) ||
            (rc = shell_path(wait, sizeof wait, log)) ||
            (rc = ct__cat(wait, sizeof wait,
                          " || { f=$(st); if [ -z \"$f\" ] || [ \"${f%%%% *}\" = Z ]; then "
                          "wait $p; echo \"exited $?\"; fi; }\n")) ||
            (rc = ct__cat(script, sizeof script, "%s", wait)))
            return rc;
    }
    rc = ct__hosts_run(cfg, host, script, out, sizeof out);
    if (rc < 0)
        return rc;
    int pid = 0, got = 0;
    unsigned long long start = 0;
    if (rc == 0)
        got = sscanf(out, "%d %llu", &pid, &start);
    const char *l = listen ? strstr(out, "listening on ") : NULL;
    const char *ex = listen ? strstr(out, "\nexited ") : NULL;
    /* no start time: the daemon was gone (and reaped) before the script read it */
    if (pid <= 0 || !(got == 2 || (got == 1 && ex && !l)))
        return ct__error(CT_EIO, "%s on %s did not start (exit %d, output '%.200s'); see %s", role,
                         host, rc, out, log);
    if (got == 2) {
        snprintf(proc->role, sizeof proc->role, "%s", role);
        snprintf(proc->host, sizeof proc->host, "%s", host);
        proc->pid = pid;
        proc->start_time = start;
    }
    if (listen) {
        if (!l) {
            char tail[1024] = "";
            char t[4400] = "tail -n 5 ";
            if (!shell_path(t, sizeof t, log))
                ct__hosts_run(cfg, host, t, tail, sizeof tail);
            if (ex) /* it ended before it listened: say so now, not at the timeout */
                return ct__error(CT_EIO,
                                 "%s on %s (pid %d) exited with status %d before it was "
                                 "listening; %s says:\n%s",
                                 role, host, pid, atoi(ex + 8), log, tail);
            return ct__error(CT_EIO,
                             "%s on %s (pid %d) did not print 'listening on' within %d s; "
                             "%s says:\n%s",
                             role, host, pid, cfg->start_timeout_s, log, tail);
        }
        l += strlen("listening on ");
        size_t n = strcspn(l, "\r\n");
        snprintf(listen, listen_cap, "%.*s", (int)n, l);
    }
    return 0;
}

int ct__hosts_start(const ct_cluster_config *cfg, ct_cluster_state *st)
{
    const char *hosts[CT_CLUSTER_MAX_NODES + 1];
    int nh = distinct_hosts(cfg, hosts, CT_CLUSTER_MAX_NODES + 1), rc = 0;
    char bin[4096], cmd[8192], env[8192], listen[300];

    /* 1. setup commands (and the binaries for ssh) */
    for (int i = 0; i < nh; i++) {
        if ((rc = run_setup(cfg, hosts[i], cfg->setup, cfg->n_setup, "setup_commands")))
            return rc;
        bool is_head = !strcmp(hosts[i], cfg->head_ip), is_worker = false;
        for (int j = 0; j < cfg->n_nodes; j++)
            is_worker |= !strcmp(hosts[i], cfg->nodes[j].host);
        if (is_head && (rc = run_setup(cfg, hosts[i], cfg->head_setup, cfg->n_head_setup,
                                       "head_setup_commands")))
            return rc;
        if ((is_worker || cfg->provider->one_host) &&
            (rc = run_setup(cfg, hosts[i], cfg->worker_setup, cfg->n_worker_setup,
                            "worker_setup_commands")))
            return rc;
    }
    /* ssh: the binaries and the secret go to the hosts */
    if (cfg->provider->prepare && (rc = cfg->provider->prepare(cfg, hosts, nh, st)))
        return rc;
    if ((rc = cfg->provider->bin_dir(cfg, bin, sizeof bin)))
        return rc;
    /* the cluster secret, where the daemons read it (CT_SECRET_FILE in their environment) */
    char secret[4096];
    if ((rc = cfg->provider->secret_path(cfg, secret, sizeof secret)))
        return rc;

    /* 2. the head, under its supervisor, with the cluster's state directory; what the last
     * cluster of this name left there goes first (head_state_dir) */
    char head_args[512] = "", state_dir[4200];
    if ((rc = head_state_dir(cfg, state_dir, sizeof state_dir)))
        return rc;
    rc = remove_head_state(cfg, cfg->head_ip);
    if (rc)
        return rc < 0 ? rc
                      : ct__error(CT_EIO, "cannot remove the last head state in %s on %s (exit %d)",
                                  state_dir, cfg->head_ip, rc);
    /* --state-dir last: its value is a path for the host's shell (shell_path: "~/x" becomes
     * "$HOME"/'x', expanded where the script runs, as for CT_BIN_DIR), appended to the command
     * and to CT_HEAD_ARGS each after head_args, so that a user's start command that changes
     * directory first gets an absolute path too */
    if ((rc = arg_word(head_args, sizeof head_args, "--host", cfg->head_bind)) ||
        (rc = ct__cluster_head_flags(cfg, head_args, sizeof head_args)) ||
        /* the head's read-only HTTP endpoint, on 127.0.0.1 (an ssh tunnel reaches it) */
        (cfg->dashboard_port > 0 && (rc = ct__cat(head_args, sizeof head_args,
                                                  " --dashboard-port %d", cfg->dashboard_port))) ||
        (rc = ct__cat(head_args, sizeof head_args, " --supervise --state-dir ")))
        return rc;
    env[0] = cmd[0] = 0;
    if ((rc = ct__cat(env, sizeof env, "CT_CLUSTER_NAME=")) ||
        (rc = ct__shell_quote(env, sizeof env, cfg->cluster_name)) ||
        (rc = ct__cat(env, sizeof env, " CT_SECRET_FILE=")) ||
        (rc = shell_path(env, sizeof env, secret)) ||
        (rc = ct__cat(env, sizeof env, " CT_BIN_DIR=")) ||
        (rc = shell_path(env, sizeof env, bin)) ||
        (rc = ct__cat(env, sizeof env, " CT_HEAD_PORT=%d CT_HEAD_ARGS=", cfg->head_port)) ||
        (rc = ct__shell_quote(env, sizeof env, head_args + 1)) ||
        (rc = shell_path(env, sizeof env, state_dir)) || (rc = ct__cat(env, sizeof env, " ")) ||
        (rc = shell_path(cmd, sizeof cmd, bin)) ||
        (rc = ct__cat(cmd, sizeof cmd, "/ct-head%s", head_args)) ||
        (rc = shell_path(cmd, sizeof cmd, state_dir)))
        return rc;
    ct_cluster_proc *hp = &st->procs[st->n_procs];
    memset(hp, 0, sizeof *hp);
    fprintf(stderr, "ctup: starting the head on %s\n", cfg->head_ip);
    rc = start_daemon(cfg, cfg->head_ip, "head", env, cfg->head_start, cfg->n_head_start, cmd, NULL,
                      hp, listen, sizeof listen);
    if (hp->pid > 0) /* started, even if it then failed: it is ctup's to stop */
        st->n_procs++;
    else if (rc) /* gone before its pid was read: no stop (down, a failed up) will clean up */
        remove_head_state(cfg, cfg->head_ip);
    if (rc)
        return rc;
    /* the head may print its bind address (0.0.0.0): others reach it at head_ip */
    const char *colon = strrchr(listen, ':');
    int port = colon ? atoi(colon + 1) : 0;
    if (port <= 0) {
        rc = ct__error(CT_EIO, "the head printed 'listening on %s': no port", listen);
        goto out;
    }
    if (strchr(cfg->head_ip, ':'))
        snprintf(st->address, sizeof st->address, "[%s]:%d", cfg->head_ip, port);
    else
        snprintf(st->address, sizeof st->address, "%s:%d", cfg->head_ip, port);
    if ((rc = ct_cluster_state_write(st)))
        goto out;

    /* 3. the nodes */
    for (int i = 0; i < cfg->n_nodes; i++) {
        const ct_cluster_node *n = &cfg->nodes[i];
        char args[4096] = "", role[32];
        snprintf(role, sizeof role, "node-%d", i + 1);
        if (is_ip(n->host) && (rc = arg_word(args, sizeof args, "--host", n->host)))
            goto out;
        if (n->cpus >= 0 && (rc = ct__cat(args, sizeof args, " --cpus %g", n->cpus)))
            goto out;
        if (n->gpus >= 0 && (rc = ct__cat(args, sizeof args, " --gpus %g", n->gpus)))
            goto out;
        for (int j = 0; j < n->n_custom && !rc; j++) {
            if (!ct__shell_safe_word(n->custom_name[j]) || strpbrk(n->custom_name[j], ",="))
                rc = ct__error(CT_EINVAL, "resource name '%s': not a name", n->custom_name[j]);
            else
                rc = ct__cat(args, sizeof args, "%s%s=%g", j ? "," : " --resources ",
                             n->custom_name[j], n->custom_amount[j]);
        }
        if (rc)
            goto out;
        if (n->store_memory &&
            (rc = arg_word(args, sizeof args, "--store-memory", n->store_memory)))
            goto out;
        if (n->spill_dir && (rc = arg_word(args, sizeof args, "--spill-dir", n->spill_dir)))
            goto out;
        if (cfg->head_grace_ms > 0 && cfg->head_grace_ms != 60000 && /* else the default */
            (rc = ct__cat(args, sizeof args, " --head-grace-ms %d", cfg->head_grace_ms)))
            goto out;
        env[0] = cmd[0] = 0;
        if ((rc = ct__cat(env, sizeof env, "CT_CLUSTER_NAME=")) ||
            (rc = ct__shell_quote(env, sizeof env, cfg->cluster_name)) ||
            (rc = ct__cat(env, sizeof env, " CT_SECRET_FILE=")) ||
            (rc = shell_path(env, sizeof env, secret)) ||
            (rc = ct__cat(env, sizeof env, " CT_BIN_DIR=")) ||
            (rc = shell_path(env, sizeof env, bin)) ||
            (rc = ct__cat(env, sizeof env, " CT_HEAD_ADDRESS=")) ||
            (rc = ct__shell_quote(env, sizeof env, st->address)) ||
            (rc = ct__cat(env, sizeof env, " CT_NODE_ARGS=")) ||
            (rc = ct__shell_quote(env, sizeof env, args + (args[0] == ' '))) ||
            (rc = ct__cat(env, sizeof env, " ")) || (rc = shell_path(cmd, sizeof cmd, bin)) ||
            (rc = ct__cat(cmd, sizeof cmd, "/ct-node --head ")) ||
            (rc = ct__shell_quote(cmd, sizeof cmd, st->address)) || /* "[::1]:P" is a glob */
            (rc = ct__cat(cmd, sizeof cmd, "%s", args)))
            goto out;
        fprintf(stderr, "ctup: starting %s on %s:%s\n", role, n->host, args);
        memset(&st->procs[st->n_procs], 0, sizeof st->procs[0]);
        rc = start_daemon(cfg, n->host, role, env, cfg->worker_start, cfg->n_worker_start, cmd,
                          n->spill_dir, &st->procs[st->n_procs], NULL, 0);
        if (st->procs[st->n_procs].pid > 0)
            st->n_procs++;
        if (rc)
            goto out;
        if ((rc = ct_cluster_state_write(st)))
            goto out;
    }
out:
    return rc;
}

/* 1 when the recorded process still runs (same pid, same start time), 0 when not, < 0 error. */
static int proc_alive(const ct_cluster_config *cfg, const ct_cluster_proc *p)
{
    char script[1024], out[64];
    int rc = ct__cluster_alive_script(script, sizeof script, p->pid, p->start_time);
    if (!rc)
        rc = ct__hosts_run(cfg, p->host, script, out, sizeof out);
    if (rc)
        return rc < 0 ? rc
                      : ct__error(CT_EIO, "cannot ask %s about pid %d (exit %d)", p->host,
                                  (int)p->pid, rc);
    return !strncmp(out, "alive", 5);
}

/* After a node has stopped (or was found gone): on its host, `ct-node --purge PID` removes
 * what a killed node leaves (shard in /dev/shm, node directory, spill files: else they stay
 * until the next node starts there), and the spill directory its start script made is removed
 * when empty. Best effort: down is about processes, and an older ct-node lacks --purge. */
static void cleanup_node(const ct_cluster_config *cfg, const ct_cluster_proc *p)
{
    int idx = 0;
    if (sscanf(p->role, "node-%d", &idx) != 1)
        return;
    char bin[4096], script[8192] = "";
    int rc = cfg->provider->bin_dir(cfg, bin, sizeof bin);
    if (!rc)
        rc = shell_path(script, sizeof script, bin);
    if (!rc)
        rc = ct__cat(script, sizeof script, "/ct-node --purge %d >/dev/null 2>&1", (int)p->pid);
    /* the node's spill directory, from the file (its nodes are in the order up started them) */
    const char *spill = idx >= 1 && idx <= cfg->n_nodes ? cfg->nodes[idx - 1].spill_dir : NULL;
    if (!rc && spill && !strcmp(cfg->nodes[idx - 1].host, p->host)) {
        rc = ct__cat(script, sizeof script, "; rmdir -- ");
        if (!rc)
            rc = ct__shell_quote(script, sizeof script, spill);
        if (!rc)
            rc = ct__cat(script, sizeof script, " 2>/dev/null");
    }
    if (!rc)
        rc = ct__cat(script, sizeof script, "; true\n");
    if (!rc)
        ct__hosts_run(cfg, p->host, script, NULL, 0);
}

int ct__hosts_stop(const ct_cluster_config *cfg, const ct_cluster_state *st, int *n_stopped)
{
    int first = 0;
    *n_stopped = 0;
    /* nodes first (they would report the head gone), head last */
    for (int i = st->n_procs - 1; i >= 0; i--) {
        const ct_cluster_proc *p = &st->procs[i];
        char script[2048], out[64] = "";
        int rc = ct__cluster_stop_script(script, sizeof script, p->pid, p->start_time);
        if (!rc)
            rc = ct__hosts_run(cfg, p->host, script, out, sizeof out);
        if (rc) {
            if (rc > 0)
                rc = ct__error(CT_EIO, "cannot stop %s (pid %d on %s): exit %d", p->role,
                               (int)p->pid, p->host, rc);
            fprintf(stderr, "ctup: %s\n", ct_last_error());
            if (!first)
                first = rc;
            continue;
        }
        out[strcspn(out, "\n")] = 0;
        if (strcmp(out, "other"))
            cleanup_node(cfg, p);
        /* the head's state, also when the head was found gone (a supervisor killed outright
         * leaves it); best effort, as for a node */
        if (strcmp(out, "other") && !strcmp(p->role, "head"))
            remove_head_state(cfg, p->host);
        if (!strcmp(out, "stopped") || !strcmp(out, "killed")) {
            (*n_stopped)++;
            fprintf(stderr, "ctup: %s (pid %d on %s) %s\n", p->role, (int)p->pid, p->host, out);
        } else if (!strcmp(out, "other")) {
            fprintf(stderr, "ctup: %s: pid %d on %s is now another process; left alone\n", p->role,
                    (int)p->pid, p->host);
        } else {
            fprintf(stderr, "ctup: %s (pid %d on %s) was not running\n", p->role, (int)p->pid,
                    p->host);
        }
    }
    return first;
}

int ct__hosts_remove_secret(const ct_cluster_config *cfg)
{
    const char *hosts[CT_CLUSTER_MAX_NODES + 1];
    int nh = distinct_hosts(cfg, hosts, CT_CLUSTER_MAX_NODES + 1), first = 0;
    char secret[4096], script[8400] = "rm -f -- ";
    int rc = cfg->provider->secret_path(cfg, secret, sizeof secret);
    if (!rc)
        rc = shell_path(script, sizeof script, secret);
    if (rc)
        return rc;
    for (int i = 0; i < nh; i++) {
        rc = ct__hosts_run(cfg, hosts[i], script, NULL, 0);
        if (rc > 0)
            rc =
                ct__error(CT_EIO, "cannot remove the cluster secret on %s (exit %d)", hosts[i], rc);
        if (rc && !first)
            first = rc;
    }
    return first;
}

int ct__hosts_exec(const ct_cluster_config *cfg, const ct_cluster_state *st, const char *cmd)
{
    char script[32768] = "CT_ADDRESS=", secret[4096];
    int rc = ct__shell_quote(script, sizeof script, st->address);
    if (!rc)
        rc = cfg->provider->secret_path(cfg, secret, sizeof secret);
    if (!rc)
        rc = ct__cat(script, sizeof script, "; CT_SECRET_FILE=");
    if (!rc)
        rc = shell_path(script, sizeof script, secret);
    if (!rc)
        rc = ct__cat(script, sizeof script, "; export CT_ADDRESS CT_SECRET_FILE; ");
    if (!rc && cfg->provider->exec_in_home)
        rc = ct__cat(script, sizeof script, "cd; ");
    if (!rc)
        rc = ct__cat(script, sizeof script, "%s", cmd);
    if (rc)
        return rc;
    char *argv[32];
    char store[40000];
    if ((rc = cfg->provider->argv(cfg, cfg->head_ip, script, argv, 32, store, sizeof store)))
        return rc;
    /* the command's stdout is the user's: let it through */
    pid_t pid = fork();
    if (pid < 0)
        return ct__error(-errno, "fork: %s", strerror(errno));
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        execvp(argv[0], argv);
        fprintf(stderr, "ctup: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return ct__error(-errno, "waitpid: %s", strerror(errno));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The last `lines` lines of p's log on its host, into out ("" when there is none). */
static int log_tail(const ct_cluster_config *cfg, const ct_cluster_proc *p, int lines, char *out,
                    size_t cap)
{
    char dir[4096], script[8400];
    out[0] = 0;
    int rc = cfg->provider->log_dir(cfg, dir, sizeof dir);
    if (rc)
        return rc;
    snprintf(script, sizeof script, "tail -n %d ", lines);
    char log[4400];
    snprintf(log, sizeof log, "%s/%s.log", dir, p->role);
    if ((rc = shell_path(script, sizeof script, log)) ||
        (rc = ct__cat(script, sizeof script, " 2>/dev/null")))
        return rc;
    rc = ct__hosts_run(cfg, p->host, script, out, cap);
    return rc < 0 ? rc : 0;
}

int ct__hosts_wait(const ct_cluster_config *cfg, const ct_cluster_state *st)
{
    int64_t t0 = ct__now_ms(), deadline = t0 + cfg->start_timeout_s * 1000LL, next_check = t0 + 500;
    int want = st->n_procs - 1, have = 0;
    pid_t pids[CT_CLUSTER_MAX_PROCS];
    for (int i = 1; i < st->n_procs; i++)
        pids[i - 1] = st->procs[i].pid;
    for (;;) {
        int n = ct__cluster_alive_nodes(st->address, 1000, pids, want);
        if (n >= 0 && (have = n) == want)
            return 0;
        int64_t now = ct__now_ms();
        if (now >= next_check) {
            next_check = now + 1000;
            for (int i = 0; i < st->n_procs; i++)
                if (proc_alive(cfg, &st->procs[i]) == 0) {
                    char tail[2048], dir[4096] = "";
                    log_tail(cfg, &st->procs[i], 5, tail, sizeof tail);
                    cfg->provider->log_dir(cfg, dir, sizeof dir);
                    return ct__error(CT_EDEAD,
                                     "%s (pid %d on %s) exited during start; %s/%s.log "
                                     "says:\n%s",
                                     st->procs[i].role, (int)st->procs[i].pid, st->procs[i].host,
                                     dir, st->procs[i].role, tail);
                }
        }
        if (now >= deadline)
            return ct__error(CT_ETIMEDOUT,
                             "%d of %d nodes registered with the head within %d s "
                             "(ct.start_timeout_s)",
                             have, want, cfg->start_timeout_s);
        usleep(20000);
    }
}

int ct__hosts_running(const ct_cluster_config *cfg, const ct_cluster_state *st, const char *path)
{
    int alive = 0;
    for (int i = 0; i < st->n_procs; i++)
        if (proc_alive(cfg, &st->procs[i]) == 1 && !alive++)
            fprintf(stderr,
                    "ctup: cluster '%s' is already up (head %s; %s pid %d on %s runs); run "
                    "'ctup down %s' first\n",
                    cfg->cluster_name, st->address[0] ? st->address : "?", st->procs[i].role,
                    (int)st->procs[i].pid, st->procs[i].host, path);
    return alive > 0;
}

int ct__hosts_status(const ct_cluster_config *cfg, const ct_cluster_state *st, bool head_ok)
{
    if (head_ok)
        return 0;
    /* no head: say what still runs of what ctup started */
    printf("%-10s %-16s %-8s %s\n", "PROCESS", "HOST", "PID", "STATE");
    for (int i = 0; i < st->n_procs; i++) {
        int alive = proc_alive(cfg, &st->procs[i]);
        printf("%-10s %-16s %-8d %s\n", st->procs[i].role, st->procs[i].host, (int)st->procs[i].pid,
               alive == 1   ? "running"
               : alive == 0 ? "gone"
                            : "?");
    }
    return 1;
}

int ct__hosts_log_where(const ct_cluster_config *cfg, const ct_cluster_state *st, char *out,
                        size_t cap)
{
    (void)st;
    char dir[4096];
    int rc = cfg->provider->log_dir(cfg, dir, sizeof dir);
    if (!rc)
        snprintf(out, cap, "%s%s", cfg->provider->one_host ? "" : "(on each host) ", dir);
    return rc;
}
