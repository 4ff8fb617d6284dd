/* cluster/provider_slurm.c — the `slurm` provider: a cluster is one Slurm job.
 *
 * `ctup up` writes a batch script (LOGDIR/job.sh) and submits it with sbatch: --nodes N,
 * --ntasks-per-node 1, --cpus-per-task / --gpus-per-node / --partition / --time / --account
 * from the YAML, then sbatch_args. The script runs on the allocation's first node: setup
 * commands, ct-head (bound to ct.head_bind, default 0.0.0.0, on a free port unless
 * ct.head_port; not under `ct-head --supervise` and without --state-dir, unlike provider.c's
 * head: the job ends when its head does, so there is no head state to keep or remove), then
 * one step per node (`srun --overlap --nodes 1 --nodelist NODE`, named ct-node-NODE) that
 * execs ct-node with --cpus $SLURM_CPUS_ON_NODE and --gpus $SLURM_GPUS_ON_NODE: what the
 * allocation has. A node step that ends while the job runs (a scancel of the step, a crash) is
 * started again on its node. The head's address (the node's NodeAddr and the port) goes to
 * LOGDIR/head-JOB.address, which ctup waits for; then ctup waits until every node has joined
 * the head, or until the job ends (refused, failed, cancelled): it says which.
 *
 * Files: LOGDIR and the secret are under ctup's state directory ($CT_STATE_DIR or
 * ~/.ct/clusters), which the nodes must see at the same path (the home directory of a Slurm
 * cluster is shared). The cluster secret is such a 0600 file: the script holds its path only,
 * so the secret is in no command line, job environment or batch script (docs/SECURITY.md).
 *
 * `ctup down` writes LOGDIR/stop-JOB (no more restarts), sends SIGTERM to the job's steps (the
 * nodes stop as for any down), then scancels the job (the script's trap stops the head) and
 * waits until Slurm has ended it. A job that Slurm ends itself (time limit, preemption) goes
 * the same way: every process gets SIGTERM first; `ctup status` says the job ended and how,
 * and `ctup up` starts a new one. `ctup submit` runs the driver in the allocation, on the
 * head's node (`srun --overlap --jobid JOB`); exec the same with `sh -c`.
 *
 * The Slurm commands (sbatch, squeue, scancel, srun, scontrol) are looked up on PATH and read
 * their configuration as they do for the user (SLURM_CONF, /etc/slurm). Values from the YAML are
 * single-quoted in the script, or checked to be one word (yaml parse, below).
 *
 * Not in here: the host scripts of local and ssh (provider.c), the YAML's shared keys. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cluster/cluster.h"
#include "cluster/provider.h"
#include "common/common.h"

/* Appends "name='value'\n" to buf. */
static int assign(char *buf, size_t cap, const char *name, const char *value)
{
    int rc = ct__cat(buf, cap, "%s=", name);
    if (!rc)
        rc = ct__shell_quote(buf, cap, value);
    return rc ? rc : ct__cat(buf, cap, "\n");
}

/* ---- asking Slurm ---- */

/* The job's state ("RUNNING", "PENDING", ...; "" when Slurm no longer knows it), the reason
 * it waits or ended, and the node that runs its batch script. Returns 0, or < 0 when squeue
 * could not answer (no slurmctld): that is not an ended job. */
static int job_state(const char *job, char *state, size_t scap, char *reason, size_t rcap,
                     char *host, size_t hcap)
{
    char out[1024] = "";
    char *argv[] = {"/bin/sh", "-c", "squeue -h -t all -j \"$0\" -o '%T|%r|%B' 2>&1", (char *)job,
                    NULL};
    int rc = ct__cluster_run(argv, out, sizeof out);
    if (rc < 0)
        return rc;
    state[0] = 0;
    if (reason)
        reason[0] = 0;
    if (host)
        host[0] = 0;
    char *a = out, *b = strchr(a, '|');
    if (!b) {
        /* an id Slurm has forgotten (the job ended more than MinJobAge ago) */
        if (strstr(out, "Invalid job id") || (rc == 0 && !out[0]))
            return 0;
        out[strcspn(out, "\n")] = 0;
        return ct__error(CT_EIO, "squeue about job %s: exit %d: %s", job, rc, out);
    }
    *b++ = 0;
    char *c = strchr(b, '|');
    if (c)
        *c++ = 0;
    snprintf(state, scap, "%s", a);
    if (reason)
        snprintf(reason, rcap, "%s", b);
    if (host && c)
        snprintf(host, hcap, "%.*s", (int)strcspn(c, "\n"), c);
    return 0;
}

/* A state in which the job still holds or waits for its allocation. */
static bool job_alive(const char *s)
{
    static const char *const live[] = {"PENDING",   "CONFIGURING", "RUNNING",
                                       "SUSPENDED", "REQUEUED",    "RESIZING",
                                       "SIGNALING", "COMPLETING",  "STAGE_OUT"};
    for (size_t i = 0; i < CT_ARRAY_LEN(live); i++)
        if (!strcmp(s, live[i]))
            return true;
    return false;
}

static const char *shown(const char *state)
{
    return *state ? state : "no longer known to Slurm";
}

static int run_quiet(char *const argv[])
{
    int rc = ct__cluster_run(argv, NULL, 0);
    if (rc < 0)
        return rc;
    return rc ? ct__error(CT_EIO, "%s exited with %d", argv[0], rc) : 0;
}

/* LOGDIR/<name> for this cluster (made when missing). */
static int log_file(const ct_cluster_config *cfg, const char *name, char *out, size_t cap)
{
    char dir[4000];
    int rc = ct_cluster_log_dir(cfg->cluster_name, dir, sizeof dir);
    if (rc)
        return rc;
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= cap ? ct__error(CT_ERANGE, "log path too long") : 0;
}

/* ---- the batch script ---- */

int ct__slurm_batch_script(const ct_cluster_config *cfg, char *buf, size_t cap)
{
    char logs[4096], secret[4096], bin[4096], head_flags[512] = "";
    int rc;
    if ((rc = ct_cluster_log_dir(cfg->cluster_name, logs, sizeof logs)) ||
        (rc = ct__cluster_head_flags(cfg, head_flags, sizeof head_flags)) ||
        (rc = ct_cluster_secret_path(cfg->cluster_name, secret, sizeof secret)) ||
        (rc = ct__local_bin_dir(cfg, bin, sizeof bin)))
        return rc;
    buf[0] = 0;
    if ((rc =
             ct__cat(buf, cap,
                     "#!/bin/sh\n"
                     "# written by `ctup up` for each start of this cluster; Slurm runs it on the\n"
                     "# allocation's first node. The cluster secret is read from the 0600 file\n"
                     "# CT_SECRET_FILE names: it is in no argv, environment or script.\n")) ||
        (rc = assign(buf, cap, "CT_CLUSTER_NAME", cfg->cluster_name)) ||
        (rc = assign(buf, cap, "CT_SECRET_FILE", secret)) ||
        (rc = ct__cat(buf, cap, "export CT_CLUSTER_NAME CT_SECRET_FILE\n")) ||
        (rc = assign(buf, cap, "bin", bin)) || (rc = assign(buf, cap, "logs", logs)) ||
        (rc = assign(buf, cap, "bind", cfg->head_bind)))
        return rc;
    /* per-node ct-node arguments: store size, spill directory (by node index) */
    const ct_cluster_node *n0 = &cfg->nodes[0];
    if ((rc = assign(buf, cap, "store", n0->store_memory ? n0->store_memory : "")))
        return rc;
    if ((rc = ct__cat(buf, cap, "spill_of() { case $1 in\n")))
        return rc;
    for (int i = 0; i < cfg->n_nodes && !rc; i++)
        if (cfg->nodes[i].spill_dir) {
            rc = ct__cat(buf, cap, "  %d) echo ", i + 1);
            if (!rc)
                rc = ct__shell_quote(buf, cap, cfg->nodes[i].spill_dir);
            if (!rc)
                rc = ct__cat(buf, cap, " ;;\n");
        }
    if (rc || (rc = ct__cat(buf, cap, "esac; }\n")))
        return rc;
    if ((rc =
             ct__cat(buf, cap,
                     "job=$SLURM_JOB_ID\n"
                     "stop=\"$logs/stop-$job\"\n"
                     "head=''\n"
                     "# Slurm ends the job (scancel, time limit, preemption): the head stops too\n"
                     "down() {\n"
                     "  : >\"$stop\"\n"
                     "  echo \"ctup: the job ends (SIGTERM): stopping ct-head and the nodes\" >&2\n"
                     "  [ -z \"$head\" ] || { kill -TERM \"$head\" 2>/dev/null; wait \"$head\"; "
                     "echo \"ctup: ct-head exited with status $?\" >&2; }\n"
                     "  wait; exit 0\n"
                     "}\n"
                     "trap down TERM INT\n"
                     "cd\n")))
        return rc;
    char **lists[] = {cfg->setup, cfg->head_setup};
    int counts[] = {cfg->n_setup, cfg->n_head_setup};
    const char *names[] = {"setup_commands", "head_setup_commands"};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < counts[l]; i++)
            if ((rc = ct__cat(buf, cap,
                              "{\n%s\n} || { echo \"ctup: %s[%d] failed with $?\" >&2; exit 1; }\n",
                              lists[l][i], names[l], i)))
                return rc;
    /* the worker setup commands run in each node's step, before ct-node */
    char wsetup[16384] = "";
    for (int i = 0; i < cfg->n_worker_setup && !rc; i++)
        rc = ct__cat(wsetup, sizeof wsetup, "%s || exit 1\n", cfg->worker_setup[i]);
    if (rc || (rc = assign(buf, cap, "worker_setup", wsetup)))
        return rc;
    return ct__cat(
        buf, cap,
        "host=$(scontrol show node \"$SLURMD_NODENAME\" 2>/dev/null | "
        "sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
        "[ -n \"$host\" ] || host=$(hostname)\n"
        "mv -f \"$logs/head.log\" \"$logs/head.log.1\" 2>/dev/null\n"
        "\"$bin/ct-head\" --host \"$bind\"%s >\"$logs/head.log\" 2>&1 &\n"
        "head=$!\n"
        "until grep -q '^listening on ' \"$logs/head.log\" 2>/dev/null; do\n"
        "  if ! kill -0 \"$head\" 2>/dev/null; then wait \"$head\"; rc=$?\n"
        "    echo \"ctup: ct-head exited with status $rc before it listened\" >&2; "
        "tail -n 5 \"$logs/head.log\" >&2; exit 1; fi\n"
        "  sleep 0.1\n"
        "done\n"
        "port=$(sed -n 's/^listening on .*:\\([0-9]*\\)$/\\1/p' \"$logs/head.log\" | head -n 1)\n"
        "case $host in *:*) address=\"[$host]:$port\" ;; *) address=\"$host:$port\" ;; esac\n"
        "# one step per node, started again when it ends while the job runs\n"
        "node() {\n"
        "  while [ ! -e \"$stop\" ]; do\n"
        "    srun --overlap --nodes=1 --ntasks=1 --nodelist=\"$1\" --job-name=\"ct-node-$1\" \\\n"
        "      sh -c \"$worker_setup\"'\n"
        "        [ -z \"$3\" ] || mkdir -p -m 700 -- \"$3\" || exit 1\n"
        "        exec \"$bin/ct-node\" --head \"$1\" --cpus \"$SLURM_CPUS_ON_NODE\" "
        "--gpus \"${SLURM_GPUS_ON_NODE:-0}\" ${2:+--store-memory \"$2\"} "
        "${3:+--spill-dir \"$3\"}' \\\n"
        "      ct-node \"$address\" \"$store\" \"$(spill_of \"$2\")\" </dev/null "
        ">>\"$logs/node-$2.log\" 2>&1\n"
        "    [ -e \"$stop\" ] && break\n"
        "    echo \"ctup: the ct-node step on $1 ended; starting it again\" "
        ">>\"$logs/node-$2.log\"\n"
        "    sleep 1\n"
        "  done\n"
        "}\n"
        "export bin\n"
        "i=0\n"
        "for n in $(scontrol show hostnames \"$SLURM_JOB_NODELIST\"); do\n"
        "  i=$((i + 1)); node \"$n\" \"$i\" &\n"
        "done\n"
        "echo \"$address\" >\"$logs/head-$job.address.tmp\" && "
        "mv -f \"$logs/head-$job.address.tmp\" \"$logs/head-$job.address\"\n"
        "wait \"$head\"\n"
        "rc=$?\n"
        ": >\"$stop\"\n"
        "echo \"ctup: ct-head exited with status $rc\" >&2\n"
        "exit $rc\n",
        head_flags);
}

/* ---- the table's functions ---- */

/* Reads the head's address file of the job into st->address; true once it is there. */
static bool read_address(const ct_cluster_config *cfg, ct_cluster_state *st)
{
    char name[64], path[4200];
    snprintf(name, sizeof name, "head-%s.address", st->job);
    if (log_file(cfg, name, path, sizeof path))
        return false;
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[300] = "";
    bool ok = fgets(line, sizeof line, f) && strchr(line, '\n');
    fclose(f);
    if (ok) {
        line[strcspn(line, "\n")] = 0;
        snprintf(st->address, sizeof st->address, "%s", line);
    }
    return ok && st->address[0];
}

/* The end of the job's output file, for messages. */
static void job_out_tail(const ct_cluster_config *cfg, const char *job, char *out, size_t cap)
{
    char name[64], path[4200];
    out[0] = 0;
    snprintf(name, sizeof name, "job-%s.out", job);
    if (log_file(cfg, name, path, sizeof path))
        return;
    char *argv[] = {"tail", "-n", "5", path, NULL};
    ct__cluster_run(argv, out, cap);
}

static int slurm_start(const ct_cluster_config *cfg, ct_cluster_state *st)
{
    const ct__slurm_conf *sc = cfg->provider_conf;
    static char script[65536];
    char path[4200], output[4200], out[256] = "";
    int rc;
    if ((rc = ct__slurm_batch_script(cfg, script, sizeof script)) ||
        (rc = log_file(cfg, "job.sh", path, sizeof path)) ||
        (rc = log_file(cfg, "job-%j.out", output, sizeof output)))
        return rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
    if (fd < 0)
        return ct__error(-errno, "%s: %s", path, strerror(errno));
    size_t len = strlen(script);
    bool ok = write(fd, script, len) == (ssize_t)len;
    if (close(fd) || !ok)
        return ct__error(CT_EIO, "%s: cannot write the batch script", path);

    /* sbatch's argv: ctup's options, then sbatch_args, then the script */
    char store[4096];
    size_t used = 0;
    char *argv[64 + 256];
    int n = 0;
#define ARG(...)                                                                                   \
    do {                                                                                           \
        int k_ = snprintf(store + used, sizeof store - used, __VA_ARGS__);                         \
        if (k_ < 0 || (size_t)k_ >= sizeof store - used)                                           \
            return ct__error(CT_ERANGE, "sbatch command line too long");                           \
        argv[n++] = store + used;                                                                  \
        used += (size_t)k_ + 1;                                                                    \
    } while (0)
    ARG("sbatch");
    ARG("--parsable");
    ARG("--job-name=ct-%s", cfg->cluster_name);
    ARG("--nodes=%d", sc->nodes);
    ARG("--ntasks-per-node=1");
    if (sc->cpus_per_node > 0)
        ARG("--cpus-per-task=%d", sc->cpus_per_node);
    if (sc->gpus_per_node > 0)
        ARG("--gpus-per-node=%d", sc->gpus_per_node);
    if (sc->partition)
        ARG("--partition=%s", sc->partition);
    if (sc->time)
        ARG("--time=%s", sc->time);
    if (sc->account)
        ARG("--account=%s", sc->account);
    for (int i = 0; i < sc->n_sbatch_args; i++)
        argv[n++] = sc->sbatch_args[i];
    argv[n++] = "--output";
    argv[n++] = output;
    argv[n++] = path;
    argv[n] = NULL;
#undef ARG
    fprintf(stderr, "ctup: sbatch of %s (%d node%s)\n", path, sc->nodes, sc->nodes == 1 ? "" : "s");
    rc = ct__cluster_run(argv, out, sizeof out);
    if (rc < 0)
        return rc;
    size_t idlen = strspn(out, "0123456789");
    if (rc || idlen == 0 || idlen >= sizeof st->job)
        return ct__error(CT_EIO, "Slurm refused the job: sbatch exited with %d%s%.200s", rc,
                         rc ? " (its message is above)" : ", printing ", rc ? "" : out);
    snprintf(st->job, sizeof st->job, "%.*s", (int)idlen, out);
    if ((rc = ct_cluster_state_write(st)))
        return rc;
    fprintf(stderr, "ctup: Slurm job %s submitted; waiting for it to start\n", st->job);

    /* until the script has written the head's address, or the job has ended */
    int64_t deadline = ct__now_ms() + cfg->start_timeout_s * 1000LL;
    char state[64] = "", reason[256] = "", last[64] = "";
    for (;;) {
        if ((rc = job_state(st->job, state, sizeof state, reason, sizeof reason, st->job_host,
                            sizeof st->job_host)))
            return rc;
        if (strcmp(state, last)) {
            fprintf(stderr, "ctup: Slurm job %s is %s%s%s%s\n", st->job, shown(state),
                    *reason && strcmp(reason, "None") ? " (" : "",
                    *reason && strcmp(reason, "None") ? reason : "",
                    *reason && strcmp(reason, "None") ? ")" : "");
            snprintf(last, sizeof last, "%s", state);
        }
        if (!strcmp(state, "RUNNING") && read_address(cfg, st))
            break;
        if (!job_alive(state) || !strcmp(state, "COMPLETING")) {
            char tail[2048];
            job_out_tail(cfg, st->job, tail, sizeof tail);
            return ct__error(CT_EDEAD,
                             "Slurm job %s ended (%s%s%s) before its head listened; %s says:\n%s",
                             st->job, shown(state), *reason ? ", " : "", reason, output, tail);
        }
        if (ct__now_ms() >= deadline)
            return ct__error(CT_ETIMEDOUT,
                             "Slurm job %s is still %s (reason: %s) after %d s "
                             "(ct.start_timeout_s)",
                             st->job, shown(state), *reason ? reason : "none",
                             cfg->start_timeout_s);
        usleep(200000);
    }
    fprintf(stderr, "ctup: head at %s (node %s); waiting for %d node%s\n", st->address,
            st->job_host, cfg->n_nodes, cfg->n_nodes == 1 ? "" : "s");
    return ct_cluster_state_write(st);
}

static int slurm_wait(const ct_cluster_config *cfg, const ct_cluster_state *st)
{
    int64_t deadline = ct__now_ms() + cfg->start_timeout_s * 1000LL, next_check = 0;
    int have = 0;
    for (;;) {
        int n = ct__cluster_alive_nodes(st->address, 1000, NULL, 0);
        if (n >= 0 && (have = n) >= cfg->n_nodes)
            return 0;
        int64_t now = ct__now_ms();
        if (now >= next_check) {
            char state[64], reason[256];
            next_check = now + 1000;
            int rc = job_state(st->job, state, sizeof state, reason, sizeof reason, NULL, 0);
            if (rc)
                return rc;
            if (strcmp(state, "RUNNING"))
                return ct__error(CT_EDEAD, "Slurm job %s ended (%s%s%s) while its nodes joined",
                                 st->job, shown(state), *reason ? ", " : "", reason);
        }
        if (now >= deadline)
            return ct__error(CT_ETIMEDOUT,
                             "%d of %d nodes joined the head within %d s (ct.start_timeout_s); "
                             "see the node-N.log files",
                             have, cfg->n_nodes, cfg->start_timeout_s);
        usleep(50000);
    }
}

static int slurm_running(const ct_cluster_config *cfg, const ct_cluster_state *st, const char *path)
{
    char state[64];
    if (!st->job[0])
        return 0;
    int rc = job_state(st->job, state, sizeof state, NULL, 0, NULL, 0);
    if (rc)
        return rc;
    if (job_alive(state)) {
        fprintf(stderr,
                "ctup: cluster '%s' is already up (Slurm job %s is %s); run 'ctup down %s' "
                "first\n",
                cfg->cluster_name, st->job, state, path);
        return 1;
    }
    fprintf(stderr, "ctup: cluster '%s': its Slurm job %s has ended (%s)\n", cfg->cluster_name,
            st->job, shown(state));
    return 0;
}

/* The steps of the job whose name starts with ct-node: how many run. */
static int node_steps(const char *job)
{
    char out[4096] = "";
    char *argv[] = {"/bin/sh", "-c", "squeue -h -s -j \"$0\" -o '%j' 2>/dev/null", (char *)job,
                    NULL};
    if (ct__cluster_run(argv, out, sizeof out) < 0)
        return -1;
    int n = 0;
    for (char *l = out; (l = strstr(l, "ct-node-")); l++)
        n++;
    return n;
}

static int slurm_stop(const ct_cluster_config *cfg, const ct_cluster_state *st, int *n_stopped)
{
    char state[64], stop[4200], name[64];
    *n_stopped = 0;
    if (!st->job[0])
        return 0;
    int rc = job_state(st->job, state, sizeof state, NULL, 0, NULL, 0);
    if (rc)
        return rc;
    if (!job_alive(state)) {
        fprintf(stderr, "ctup: Slurm job %s had already ended (%s)\n", st->job, shown(state));
        return 0;
    }
    /* no more restarts of the node steps, then the nodes stop as in any down (SIGTERM) */
    snprintf(name, sizeof name, "stop-%s", st->job);
    if (!log_file(cfg, name, stop, sizeof stop)) {
        int fd = open(stop, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
    }
    char jobarg[64];
    snprintf(jobarg, sizeof jobarg, "%s", st->job);
    if (!strcmp(state, "RUNNING")) {
        char *term[] = {"scancel", "--signal=TERM", jobarg, NULL};
        if (run_quiet(term))
            fprintf(stderr, "ctup: %s\n", ct_last_error());
        int64_t until = ct__now_ms() + 10000;
        while (node_steps(st->job) > 0 && ct__now_ms() < until)
            usleep(100000);
        fprintf(stderr, "ctup: the nodes of Slurm job %s stopped\n", st->job);
    }
    char *cancel[] = {"scancel", jobarg, NULL};
    if ((rc = run_quiet(cancel)))
        return rc;
    /* Slurm ends it: the script's trap stops the head, then every step is gone */
    int64_t until = ct__now_ms() + 30000;
    do {
        if ((rc = job_state(st->job, state, sizeof state, NULL, 0, NULL, 0)))
            return rc;
        if (!job_alive(state))
            break;
        usleep(100000);
    } while (ct__now_ms() < until);
    if (job_alive(state))
        return ct__error(CT_ETIMEDOUT, "Slurm job %s is still %s 30 s after scancel", st->job,
                         state);
    unlink(stop);
    *n_stopped = cfg->n_nodes + 1;
    fprintf(stderr, "ctup: Slurm job %s cancelled (%s)\n", st->job, state);
    return 0;
}

static int slurm_status(const ct_cluster_config *cfg, const ct_cluster_state *st, bool head_ok)
{
    char state[64], reason[256], host[256];
    if (job_state(st->job, state, sizeof state, reason, sizeof reason, host, sizeof host))
        return 1;
    printf("slurm job %s: %s%s%s (head on %s)\n", st->job, shown(state),
           *reason && strcmp(reason, "None") ? ", " : "",
           *reason && strcmp(reason, "None") ? reason : "", *host ? host : st->job_host);
    if (!job_alive(state)) {
        printf("the Slurm job has ended (%s): the cluster is down; 'ctup up %s' starts it "
               "again\n",
               shown(state), cfg->path);
        return 1;
    }
    return head_ok ? 0 : 1;
}

/* srun --overlap into the job, on the head's node. */
static int slurm_prefix(const ct_cluster_config *cfg, const ct_cluster_state *st, char **words,
                        int max, char *store, size_t cap)
{
    char state[64];
    int rc = job_state(st->job, state, sizeof state, NULL, 0, NULL, 0);
    if (rc)
        return rc;
    if (strcmp(state, "RUNNING"))
        return ct__error(CT_EDEAD,
                         "the Slurm job %s of cluster '%s' is %s: the cluster is down ('ctup up "
                         "%s' starts it again)",
                         st->job, cfg->cluster_name, shown(state), cfg->path);
    if (max < 6)
        return ct__error(CT_EINVAL, "slurm_prefix: words too small");
    int n = snprintf(store, cap, "--jobid=%s%c--nodelist=%s", st->job, 0, st->job_host);
    if (n < 0 || (size_t)n >= cap)
        return ct__error(CT_ERANGE, "srun command line too long");
    words[0] = "srun";
    words[1] = "--overlap";
    words[2] = store;
    words[3] = store + strlen(store) + 1;
    n = st->job_host[0] ? 4 : 3; /* --nodelist only when the head's node is known */
    words[n++] = "--nodes=1";
    words[n++] = "--ntasks=1";
    return n;
}

static int slurm_exec(const ct_cluster_config *cfg, const ct_cluster_state *st, const char *cmd)
{
    char *words[16], store[1024], secret[4096];
    int n = slurm_prefix(cfg, st, words, 10, store, sizeof store);
    int rc = n < 0 ? n : ct_cluster_secret_path(cfg->cluster_name, secret, sizeof secret);
    if (rc < 0)
        return rc;
    words[n++] = "sh";
    words[n++] = "-c";
    words[n++] = (char *)cmd;
    words[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return ct__error(-errno, "fork: %s", strerror(errno));
    if (pid == 0) {
        setenv("CT_ADDRESS", st->address, 1);
        setenv("CT_SECRET_FILE", secret, 1);
        signal(SIGPIPE, SIG_DFL);
        execvp(words[0], words);
        fprintf(stderr, "ctup: cannot run %s: %s\n", words[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return ct__error(-errno, "waitpid: %s", strerror(errno));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int slurm_log_where(const ct_cluster_config *cfg, const ct_cluster_state *st, char *out,
                           size_t cap)
{
    char dir[4096];
    int rc = ct_cluster_log_dir(cfg->cluster_name, dir, sizeof dir);
    if (!rc)
        snprintf(out, cap, "%s (Slurm job %s, head on %s: job-%s.out, head.log, node-N.log)", dir,
                 st->job, st->job_host, st->job);
    return rc;
}

/* ---- YAML ---- */

/* A word for sbatch: letters, digits and _ . - (partition, account names). */
static bool valid_word(const char *s)
{
    return *s && *s != '-' &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") ==
               strlen(s);
}

/* Slurm's time formats: MIN, MIN:SEC, H:M:S, D-H, D-H:M, D-H:M:S ("infinite" too). */
static bool valid_time(const char *s)
{
    if (!strcmp(s, "infinite") || !strcmp(s, "UNLIMITED"))
        return true;
    size_t n = strlen(s);
    if (!n || n > 20 || strspn(s, "0123456789:-") != n)
        return false;
    const char *dash = strchr(s, '-'), *colon = strchr(s, ':');
    int colons = 0, dashes = 0;
    for (const char *c = s; *c; c++) {
        bool sep = *c == ':' || *c == '-';
        colons += *c == ':';
        dashes += *c == '-';
        /* a separator sits between digits */
        if (sep && (c == s || !strchr("0123456789", c[1]) || !c[1]))
            return false;
    }
    return colons <= 2 && dashes <= 1 && (!dash || !colon || dash < colon);
}

static int parse(ct__cfg_parser *p, yaml_node_t *prov, yaml_node_t *root, ct_cluster_config *c,
                 ct__cfg_workers *w)
{
    yaml_node_t *v;
    int rc;
    ct__slurm_conf *sc = calloc(1, sizeof *sc);
    if (!(c->provider_conf = sc))
        return ct__error(CT_ENOMEM, "out of memory");
    if (!(v = ct__cfg_get(p, prov, "nodes", NULL)))
        return ct__cfg_err(p, prov, "provider: missing required key 'nodes' (type slurm)");
    if ((rc = ct__cfg_int(p, v, "provider.nodes", 1, CT_CLUSTER_MAX_NODES - 1, &sc->nodes)))
        return rc;
    w->n_workers = sc->nodes;
    w->where = v;
    w->hint = "provider.nodes";
    struct {
        const char *key;
        char **dst;
        bool (*ok)(const char *);
        const char *rule;
    } words[] = {
        {"partition", &sc->partition, valid_word, "a name of letters, digits and _ . -"},
        {"account", &sc->account, valid_word, "a name of letters, digits and _ . -"},
        {"time", &sc->time, valid_time,
         "a Slurm time limit (MIN, H:M:S, D-H:M:S, ... or infinite)"},
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(words); i++) {
        char what[64];
        snprintf(what, sizeof what, "provider.%s", words[i].key);
        if (!(v = ct__cfg_get(p, prov, words[i].key, NULL)))
            continue;
        if ((rc = ct__cfg_str(p, v, what, words[i].dst)))
            return rc;
        if (!words[i].ok(*words[i].dst))
            return ct__cfg_err(p, v, "%s: '%s' is not %s", what, *words[i].dst, words[i].rule);
    }
    if ((v = ct__cfg_get(p, prov, "cpus_per_node", NULL)) &&
        (rc = ct__cfg_int(p, v, "provider.cpus_per_node", 1, 100000, &sc->cpus_per_node)))
        return rc;
    if ((v = ct__cfg_get(p, prov, "gpus_per_node", NULL)) &&
        (rc = ct__cfg_int(p, v, "provider.gpus_per_node", 0, 1024, &sc->gpus_per_node)))
        return rc;
    if ((v = ct__cfg_get(p, prov, "sbatch_args", NULL))) {
        if ((rc = ct__cfg_str_list(p, v, "provider.sbatch_args", &sc->sbatch_args,
                                   &sc->n_sbatch_args)))
            return rc;
        /* options only (the script is ctup's), and none that ctup sets itself */
        static const char *const own[] = {"--nodes", "-N",         "--job-name", "-J", "--output",
                                          "-o",      "--parsable", "--ntasks",   "-n", "--wrap"};
        if (sc->n_sbatch_args > 256)
            return ct__cfg_err(p, v, "provider.sbatch_args: more than 256 entries");
        for (int i = 0; i < sc->n_sbatch_args; i++) {
            const char *a = sc->sbatch_args[i];
            yaml_node_t *it = ct__cfg_item(p, v, i);
            if (a[0] != '-')
                return ct__cfg_err(p, it,
                                   "provider.sbatch_args[%d]: '%s' is not an option (the batch "
                                   "script is ctup's)",
                                   i, a);
            for (size_t j = 0; j < CT_ARRAY_LEN(own); j++) {
                size_t l = strlen(own[j]);
                if (!strncmp(a, own[j], l) && (a[l] == 0 || a[l] == '=' || own[j][1] != '-'))
                    return ct__cfg_err(p, it,
                                       "provider.sbatch_args[%d]: '%s': ctup sets %s itself "
                                       "(provider.nodes, the job name and output are ctup's)",
                                       i, a, own[j]);
            }
        }
    }
    c->head_port = 0;
    if (!(c->head_bind = strdup("0.0.0.0")))
        return ct__error(CT_ENOMEM, "out of memory");
    yaml_node_t *k;
    if (ct__cfg_get(p, root, "auth", &k))
        return ct__cfg_err(p, k, "auth: type slurm does not log in anywhere (no auth)");
    return 0;
}

static void free_conf(void *conf)
{
    ct__slurm_conf *sc = conf;
    if (!sc)
        return;
    free(sc->partition);
    free(sc->time);
    free(sc->account);
    for (int i = 0; sc->sbatch_args && sc->sbatch_args[i]; i++) /* NULL-ended */
        free(sc->sbatch_args[i]);
    free(sc->sbatch_args);
    free(sc);
}

/* The keys that have no meaning for a Slurm job (where each node runs is Slurm's choice). */
static int check(ct__cfg_parser *p, yaml_node_t *root, const ct_cluster_config *c)
{
    static const char *const no[] = {"head_node_type",          "available_node_types",
                                     "head_start_ray_commands", "worker_start_ray_commands",
                                     "head_start_commands",     "worker_start_commands"};
    yaml_node_t *k;
    for (size_t i = 0; i < CT_ARRAY_LEN(no); i++)
        if (ct__cfg_get(p, root, no[i], &k))
            return ct__cfg_err(p, k,
                               "%s: not for type slurm (every node of the allocation runs "
                               "ct-node; provider.cpus_per_node / gpus_per_node size them)",
                               no[i]);
    yaml_node_t *ctn = ct__cfg_get(p, root, "ct", NULL);
    if (c->head_runs_node && ct__cfg_get(p, ctn, "head_runs_node", &k))
        return ct__cfg_err(p, k,
                           "ct.head_runs_node: type slurm runs a node on every node of "
                           "the allocation, the head's included");
    return 0;
}

static const char *const keys[] = {"partition",     "nodes",         "time",        "account",
                                   "cpus_per_node", "gpus_per_node", "sbatch_args", NULL};

const ct_cluster_provider ct__provider_slurm = {
    .name = "slurm",
    .keys = keys,
    .parse = parse,
    .free_conf = free_conf,
    .check = check,
    .start = slurm_start,
    .wait = slurm_wait,
    .running = slurm_running,
    .stop = slurm_stop,
    .status = slurm_status,
    .driver_prefix = slurm_prefix,
    .exec = slurm_exec,
    .log_where = slurm_log_where,
};
