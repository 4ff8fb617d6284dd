/* cluster/ctup.c — ctup, the cluster launcher (the CLI; the work is in the other cluster/
 * files: each command calls the table of the file's provider, cluster/provider.h):
 *   ctup up CLUSTER.yaml          start the head and the nodes, wait until every node has
 *                                 registered, print the address (export CT_ADDRESS=...
 *                                 CT_SECRET_FILE=...)
 *   ctup CLUSTER.yaml             the same as `ctup up CLUSTER.yaml` (like `ray up`)
 *   ctup down CLUSTER.yaml        stop every process `up` started (by recorded pid + start time)
 *   ctup status CLUSTER.yaml      the head's tables (nodes, stores, actors, placement groups)
 *   ctup status --address H:P     the same for any head
 *   ctup dashboard CLUSTER.yaml [--file-sd FILE]   the dashboard's URL with its token (and a
 *                                 Prometheus file_sd target list written to FILE)
 *   ctup submit CLUSTER.yaml PROGRAM [ARGS]   run a driver here with CT_ADDRESS and
 *                                             CT_SECRET_FILE set
 *   ctup exec CLUSTER.yaml CMD...             run a shell command on the head's host
 *   ctup secret FILE              write a new cluster secret (for hand-started ct-head/ct-node)
 * `up` writes a new cluster secret beside the state (ssh: copied to every host) for every start;
 * `down` removes it, and so does a failed `up` (with the state and lock file it made).
 * Exit codes: 0 ok, 1 failed, 2 usage or configuration error; submit and exec forward the
 * program's. Not in here: YAML parsing, providers, the state file. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>
#include "cluster/cluster.h"
#include "cluster/provider.h"
#include "common/auth.h"
#include "common/common.h"
#include "common/env.h"
#include "proto/msg.h"

/* The commands: how each is called and what it does (for --help and usage errors). */
static const struct {
    const char *name, *args, *what;
} cmds[] = {
    {"status", "[CLUSTER.yaml | --address H:P] [--timeout-ms N]",
     "print the cluster's nodes, object stores, actors and placement groups\n"
     "           (--address: any head; default $CT_ADDRESS; --timeout-ms: default 3000)"},
    {"dashboard", "CLUSTER.yaml [--file-sd FILE]",
     "print the head's dashboard URL with its token (ct.dashboard_port must be set);\n"
     "           --file-sd: also write a Prometheus file_sd target list to FILE"},
    {"up", "CLUSTER.yaml",
     "start the cluster the file describes (head, then one ct-node per worker),\n"
     "           wait until every node has registered, print its address"},
    {"down", "CLUSTER.yaml", "stop every process of the cluster (idempotent)"},
    {"submit", "CLUSTER.yaml PROGRAM [ARGS...]",
     "run a driver program with CT_ADDRESS set (here; slurm: in the job's\n"
     "           allocation); exits with its code"},
    {"exec", "CLUSTER.yaml CMD...", "run a shell command on the head's host with CT_ADDRESS set"},
    {"secret", "FILE",
     "write a new random cluster secret to FILE (mode 0600; for ct-head/ct-node\n"
     "           --secret-file and CT_SECRET_FILE; ctup up makes its own)"},
};
#define N_CMDS (int)(sizeof cmds / sizeof cmds[0])
static const char state_note[] =
    "Providers (provider.type): local (this host), ssh (hosts you log into), slurm (one Slurm\n"
    "job; ctup submit then runs the driver in its allocation with srun --overlap).\n"
    "State: $CT_STATE_DIR or ~/.ct/clusters/<cluster_name>.state (logs and the cluster's\n"
    "secret, <cluster_name>.secret, beside it; a new secret at every up).\n";

/* The YAML reference (cluster/README.md): installed beside ctup (CT_DOC_FROM_BIN, relative to
 * ctup's folder: ../share/doc/ct/ctup.md) or, for a ctup in its build tree, in the sources it
 * was built from. */
static const char *yaml_reference(char *out, size_t cap)
{
    char self[PATH_MAX], path[PATH_MAX + 64];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    char *slash = k > 0 ? (self[k] = 0, strrchr(self, '/')) : NULL;
    if (slash) {
        *slash = 0;
        snprintf(path, sizeof path, "%s/%s/ctup.md", self, CT_DOC_FROM_BIN);
        if (access(path, R_OK) == 0 && realpath(path, out))
            return out;
    }
    snprintf(out, cap, "%s/cluster/README.md", CT_SOURCE_DIR);
    if (access(out, R_OK) == 0)
        return out;
    snprintf(out, cap, "%s", slash ? path : "share/doc/ct/ctup.md (not found)");
    return out;
}

/* The lines under every usage: where the state is, where the YAML is explained. */
static void notes(FILE *f)
{
    char ref[PATH_MAX + 64];
    fprintf(f, "%sYAML reference: %s\n", state_note, yaml_reference(ref, sizeof ref));
}

static void usage(FILE *f)
{
    for (int i = 0; i < N_CMDS; i++)
        fprintf(f, "%s ctup %s %s\n", i ? "      " : "usage:", cmds[i].name, cmds[i].args);
    fprintf(f, "       ctup CLUSTER.yaml   (the same as ctup up CLUSTER.yaml)\n");
    for (int i = 0; i < N_CMDS; i++)
        fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].what);
    fprintf(f, "'ctup COMMAND --help' shows one command.\n");
    notes(f);
}

/* Usage of command c alone: to stdout for --help, to stderr after a usage error. */
static void cmd_usage(const char *c, FILE *f)
{
    for (int i = 0; i < N_CMDS; i++)
        if (!strcmp(cmds[i].name, c)) {
            fprintf(f, "usage: ctup %s %s\n  %-8s %s\n", c, cmds[i].args, c, cmds[i].what);
            notes(f);
        }
}

static bool is_help(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

/* Checks the arguments of up/down/submit/exec: argv[2] is --help (prints the command's usage,
 * *rc = 0), an option (none are known: *rc = 2), or missing (*rc = 2). Returns true when the
 * command should not run, with its exit code in *rc. */
static bool cmd_args_done(const char *c, int argc, char **argv, int min_argc, int *rc)
{
    if (argc > 2 && is_help(argv[2])) {
        cmd_usage(c, stdout);
        *rc = 0;
        return true;
    }
    if (argc > 2 && argv[2][0] == '-') {
        fprintf(stderr, "ctup %s: unknown option '%s' (see ctup %s --help)\n", c, argv[2], c);
        *rc = 2;
        return true;
    }
    if (argc < min_argc) {
        fprintf(stderr, "ctup %s: ", c);
        cmd_usage(c, stderr);
        *rc = 2;
        return true;
    }
    return false;
}

/* "1h02m", "3m05s", "12s"; "-" when unknown. */
static void fmt_eta(char *buf, size_t cap, double s)
{
    if (!(s >= 0) || s > 1e9) {
        snprintf(buf, cap, "-");
        return;
    }
    long v = (long)(s + 0.5);
    if (v >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", v / 3600, v / 60 % 60);
    else if (v >= 60)
        snprintf(buf, cap, "%ldm%02lds", v / 60, v % 60);
    else
        snprintf(buf, cap, "%lds", v);
}

/* "reason=count,..." of a job's retries or drains. */
static void print_reasons(Ct__TrainRetries *const *l, size_t n)
{
    for (size_t k = 0; k < n; k++)
        printf("%s%s=%llu", k ? "," : "", l[k]->reason, (unsigned long long)l[k]->count);
}

/* The training jobs' progress (TrainReport rows of the status reply). */
static void print_jobs(const Ct__StatusReply *r)
{
    printf("%-24s %-8s %-6s %-10s %-10s %-10s %-8s %-8s %s\n", "JOB", "STEP", "EPOCH", "LOSS",
           "VAL LOSS", "SAMPLES/S", "REPLICAS", "ETA", "RETRIES");
    for (size_t i = 0; i < r->n_train; i++) {
        const Ct__TrainReport *t = r->train[i];
        char loss[32] = "-", val[32] = "-", eta[48];
        if (isfinite(t->loss))
            snprintf(loss, sizeof loss, "%.4g", t->loss);
        if (isfinite(t->val_loss))
            snprintf(val, sizeof val, "%.4g", t->val_loss);
        if (t->done)
            snprintf(eta, sizeof eta, "done");
        else
            fmt_eta(eta, sizeof eta, t->eta_seconds);
        /* the epoch a job trains is 0-based on the wire; people count from 1, of the epochs */
        long long ep = (long long)t->epoch + 1;
        char epoch[48];
        if (t->epochs > 0)
            snprintf(epoch, sizeof epoch, "%lld/%lld", ep < t->epochs ? ep : (long long)t->epochs,
                     (long long)t->epochs);
        else
            snprintf(epoch, sizeof epoch, "%lld", ep);
        printf("%-24s %-8lld %-6s %-10s %-10s %-10.1f %-8d %-8s", t->job, (long long)t->step, epoch,
               loss, val, t->samples_per_second, t->replicas_alive, eta);
        print_reasons(t->retries, t->n_retries);
        printf("%s", t->n_retries ? "" : "0");
        if (t->live_recoveries) /* replicas lost without a retry: the survivors went on */
            printf(" live=%llu", (unsigned long long)t->live_recoveries);
        if (t->heals)
            printf(" healed=%llu", (unsigned long long)t->heals);
        if (t->drains && t->n_drains_by_reason) { /* groups a drain ended: no retry spent */
            printf(" (drains ");
            print_reasons(t->drains_by_reason, t->n_drains_by_reason);
            printf(")");
        } else if (t->drains) {
            printf(" (drains %llu)", (unsigned long long)t->drains);
        }
        printf("\n");
    }
}

static void print_status(const char *addr, const Ct__StatusReply *r)
{
    size_t alive = 0;
    for (size_t i = 0; i < r->n_nodes; i++)
        alive += r->nodes[i]->alive;
    printf("head %s: %zu nodes (%zu alive), %zu actors\n", addr, r->n_nodes, alive, r->n_actors);
    printf("%-17s %-16s %-6s %-8s %s\n", "NODE", "HOST", "STATE", "PID", "RESOURCES (free/total)");
    for (size_t i = 0; i < r->n_nodes; i++) {
        Ct__NodeInfo *n = r->nodes[i];
        printf("%-17s %-16s %-6s %-8d", n->node_id, n->host, n->alive ? "ALIVE" : "DEAD", n->pid);
        for (size_t j = 0; j < n->n_total; j++)
            printf(" %s=%g/%g", n->total[j]->name,
                   ct__res_get(n->free, n->n_free, n->total[j]->name), n->total[j]->amount);
        printf("\n");
    }
    printf("%-17s %-24s %-10s %-12s %s\n", "STORE", "TRANSFER", "OBJECTS", "USED MiB",
           "CAPACITY MiB");
    for (size_t i = 0; i < r->n_nodes; i++) {
        Ct__NodeInfo *n = r->nodes[i];
        if (!n->alive || !*n->xfer_address)
            continue;
        printf("%-17s %-24s %-10llu %-12.1f %.1f\n", n->node_id, n->xfer_address,
               (unsigned long long)n->store_objects, (double)n->store_bytes / (1 << 20),
               (double)n->store_capacity / (1 << 20));
    }
    printf("%-10s %-16s %-17s %-8s %s\n", "ACTOR", "CLASS", "NODE", "PID", "STATE");
    for (size_t i = 0; i < r->n_actors; i++) {
        Ct__ActorInfo *a = r->actors[i];
        printf("%-10s %-16s %-17s %-8d %s\n", a->actor_id, a->class_name,
               *a->node_id ? a->node_id : "-", a->pid, a->state);
    }
    if (r->n_train)
        print_jobs(r);
    if (r->n_pgs) {
        printf("%-10s %-8s %s\n", "GROUP", "STATE", "BUNDLE NODES");
        for (size_t i = 0; i < r->n_pgs; i++) {
            Ct__PgInfo *g = r->pgs[i];
            printf("%-10s %-8s", g->pg_id, g->state);
            for (size_t j = 0; j < g->n_bundle_nodes; j++)
                printf("%s%s", j ? "," : " ", *g->bundle_nodes[j] ? g->bundle_nodes[j] : "-");
            printf("\n");
        }
    }
}

static int status_at(const char *addr, int timeout_ms)
{
    Ct__Envelope *rep = NULL;
    if (ct__cluster_query_status(addr, timeout_ms, &rep)) {
        fprintf(stderr, "ctup: %s\n", ct_last_error());
        return 1;
    }
    print_status(addr, rep->status_reply);
    ct__msg_free(rep);
    return 0;
}

/* Loads the config and the state of its cluster. need_state: a missing state is an error
 * (exit 1) rather than *have_state = false. Returns 0 or the exit code. */
static int load(const char *path, ct_cluster_config **cfg, ct_cluster_state *st, bool need_state,
                bool *have_state)
{
    if (ct_cluster_config_load(path, cfg)) {
        fprintf(stderr, "ctup: %s\n", ct_last_error());
        return 2;
    }
    int rc = ct_cluster_state_read((*cfg)->cluster_name, st);
    if (have_state)
        *have_state = rc == 0;
    if (rc == CT_ENOENT && !need_state)
        return 0;
    if (rc) {
        if (rc == CT_ENOENT)
            fprintf(stderr, "ctup: cluster '%s' is not up (run 'ctup up %s')\n",
                    (*cfg)->cluster_name, path);
        else
            fprintf(stderr, "ctup: %s\n", ct_last_error());
        ct_cluster_config_destroy(cfg);
        return 1;
    }
    if (need_state && !st->address[0]) {
        fprintf(stderr,
                "ctup: cluster '%s' has no head address in its state (a failed up?); "
                "run 'ctup down %s'\n",
                (*cfg)->cluster_name, path);
        ct_cluster_config_destroy(cfg);
        return 1;
    }
    return 0;
}

/* A fresh secret for a cluster being started (the last start's is replaced: restarting is how
 * a secret is rotated), loaded in this process too for the registration wait. *made: the file
 * is this start's (a failed up removes it). */
static int new_secret(const char *cluster_name, bool *made)
{
    char path[4096];
    int rc = ct_cluster_secret_path(cluster_name, path, sizeof path);
    if (rc)
        return rc;
    if (unlink(path) != 0 && errno != ENOENT)
        return ct__error(-errno, "cannot replace the old secret %s: %s", path, strerror(errno));
    if ((rc = ct__secret_file_create(path)))
        return rc;
    *made = true;
    return ct__auth_off() ? 0 : ct__auth_load(path);
}

/* Loads the secret of a started cluster (for status). */
static int cluster_secret(const char *cluster_name)
{
    char path[4096];
    int rc = ct_cluster_secret_path(cluster_name, path, sizeof path);
    return rc ? rc : ct__auth_off() ? 0 : ct__auth_load(path);
}

static int cmd_up(const char *path)
{
    ct_cluster_config *cfg = NULL;
    ct_cluster_state st;
    bool have;
    int64_t t0 = ct__now_ms();
    int rc = load(path, &cfg, &st, false, &have), lock = -1;
    if (rc)
        return rc;
    if (ct_cluster_lock(cfg->cluster_name, &lock)) {
        fprintf(stderr, "ctup: %s\n", ct_last_error());
        ct_cluster_config_destroy(&cfg);
        return 1;
    }
    /* read again under the lock: another up may have finished meanwhile */
    have = ct_cluster_state_read(cfg->cluster_name, &st) == 0;
    if (have) {
        int running = cfg->provider->running(cfg, &st, path);
        if (running < 0)
            fprintf(stderr, "ctup: cannot tell whether cluster '%s' still runs: %s\n",
                    cfg->cluster_name, ct_last_error());
        if (running != 0) {
            ct_cluster_unlock(cfg->cluster_name, &lock);
            ct_cluster_config_destroy(&cfg);
            return 1;
        }
        fprintf(stderr, "ctup: cluster '%s': no process of its last start runs; starting anew\n",
                cfg->cluster_name);
    }
    memset(&st, 0, sizeof st);
    snprintf(st.cluster_name, sizeof st.cluster_name, "%s", cfg->cluster_name);
    char abs[PATH_MAX];
    snprintf(st.config_path, sizeof st.config_path, "%s", realpath(path, abs) ? abs : path);
    snprintf(st.provider, sizeof st.provider, "%s", cfg->provider->name);
    bool made_secret = false;
    char secret[4096];
    if ((rc = ct_cluster_state_write(&st)) || (rc = new_secret(cfg->cluster_name, &made_secret)) ||
        (rc = cfg->provider->start(cfg, &st)) || (rc = cfg->provider->wait(cfg, &st)) ||
        (rc = ct_cluster_secret_path(cfg->cluster_name, secret, sizeof secret))) {
        fprintf(stderr, "ctup: up failed: %s\n", ct_last_error());
        int n;
        if (st.n_procs || st.job[0]) {
            fprintf(stderr, "ctup: stopping what was started\n");
            cfg->provider->stop(cfg, &st, &n);
        }
        /* what this up made goes (state, secret, lock); the logs stay, for the message above */
        if (st.secret_copied && cfg->provider->remove_secret && cfg->provider->remove_secret(cfg))
            fprintf(stderr, "ctup: %s\n", ct_last_error());
        ct_cluster_state_remove(cfg->cluster_name);
        if (made_secret && !ct_cluster_secret_path(cfg->cluster_name, secret, sizeof secret))
            unlink(secret);
        ct_cluster_unlock(cfg->cluster_name, &lock);
        ct_cluster_config_destroy(&cfg);
        return 1;
    }
    ct_cluster_unlock(cfg->cluster_name, &lock);
    char logs[4200] = "";
    cfg->provider->log_where(cfg, &st, logs, sizeof logs);
    printf("cluster '%s' is up: head %s, %d node%s registered (%.2f s)\n", cfg->cluster_name,
           st.address, cfg->n_nodes, cfg->n_nodes == 1 ? "" : "s", (ct__now_ms() - t0) / 1000.0);
    /* both, for a driver started by hand (ctup submit sets them itself) */
    printf("  export CT_ADDRESS=%s CT_SECRET_FILE=", st.address);
    if (ct__shell_safe_word(secret)) {
        printf("%s\n", secret);
    } else {
        char q[8200] = "";
        ct__shell_quote(q, sizeof q, secret);
        printf("%s\n", q);
    }
    printf("  ctup status %s    ctup submit %s PROGRAM    ctup down %s\n", path, path, path);
    printf("  logs: %s\n", logs);
    ct_cluster_config_destroy(&cfg);
    return 0;
}

static int cmd_down(const char *path)
{
    ct_cluster_config *cfg = NULL;
    ct_cluster_state st;
    bool have;
    int rc = load(path, &cfg, &st, false, &have), lock = -1;
    if (rc)
        return rc;
    if (ct_cluster_lock(cfg->cluster_name, &lock)) {
        fprintf(stderr, "ctup: %s\n", ct_last_error());
        ct_cluster_config_destroy(&cfg);
        return 1;
    }
    have = ct_cluster_state_read(cfg->cluster_name, &st) == 0;
    if (!have) {
        printf("cluster '%s' is not running (no state): nothing to stop\n", cfg->cluster_name);
        ct_cluster_unlock(cfg->cluster_name, &lock);
        ct_cluster_config_destroy(&cfg);
        return 0;
    }
    int n = 0;
    rc = cfg->provider->stop(cfg, &st, &n);
    if (rc) {
        fprintf(stderr,
                "ctup: down: some processes could not be stopped; the state is kept (run "
                "'ctup down %s' again)\n",
                path);
        ct_cluster_unlock(cfg->cluster_name, &lock);
        ct_cluster_config_destroy(&cfg);
        return 1;
    }
    ct_cluster_state_remove(cfg->cluster_name);
    char secret[4096];
    if (!ct_cluster_secret_path(cfg->cluster_name, secret, sizeof secret))
        unlink(secret);
    /* the hosts' copies (ssh); best effort */
    if (cfg->provider->remove_secret && cfg->provider->remove_secret(cfg))
        fprintf(stderr, "ctup: %s\n", ct_last_error());
    printf("cluster '%s' is down (%d of %d processes were running and are stopped)\n",
           cfg->cluster_name, n, st.n_procs > n ? st.n_procs : n);
    ct_cluster_unlock(cfg->cluster_name, &lock);
    ct_cluster_config_destroy(&cfg);
    return 0;
}

static int cmd_status(int argc, char **argv)
{
    const char *addr = ct__env(CT__ENV_ADDRESS), *file = NULL;
    int timeout = 3000;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (is_help(a)) {
            cmd_usage("status", stdout);
            return 0;
        } else if (!strcmp(a, "--address") || !strcmp(a, "--timeout-ms")) {
            if (!v) {
                fprintf(stderr, "ctup status: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--address")) {
                addr = v;
            } else if ((timeout = atoi(v)) <= 0) {
                fprintf(stderr, "ctup status: --timeout-ms: '%s' is not a positive integer\n", v);
                return 2;
            }
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "ctup status: unknown option '%s' (see ctup status --help)\n", a);
            return 2;
        } else if (!file) {
            file = a;
        } else {
            fprintf(stderr, "ctup status: one CLUSTER.yaml only ('%s' and '%s')\n", file, a);
            return 2;
        }
    }
    if (file) {
        ct_cluster_config *cfg = NULL;
        ct_cluster_state st;
        int rc = load(file, &cfg, &st, true, NULL);
        if (rc)
            return rc;
        printf("cluster '%s' (%s provider, %d processes started by ctup)\n", cfg->cluster_name,
               st.provider, st.n_procs);
        rc = cluster_secret(cfg->cluster_name);
        if (rc)
            fprintf(stderr, "ctup status: %s\n", ct_last_error());
        else
            rc = status_at(st.address, timeout);
        /* the provider's view beside the head's (slurm: the job's state); with no head, what
         * still runs of what ctup started */
        int prc = cfg->provider->status(cfg, &st, rc == 0);
        if (!rc)
            rc = prc;
        ct_cluster_config_destroy(&cfg);
        return rc;
    }
    if (!addr || !strchr(addr, ':')) {
        fprintf(stderr, "ctup status: --address H:P is required (or CT_ADDRESS, or a "
                        "CLUSTER.yaml)\n");
        return 2;
    }
    if (!ct__auth_off() && ct__auth_load(NULL)) {
        fprintf(stderr, "ctup status: %s\n", ct_last_error());
        return 2;
    }
    return status_at(addr, timeout);
}

/* The head's host, from its address "H:P" ("[v6]:P"). */
static void head_host(const char *addr, char *host, size_t cap)
{
    const char *colon = strrchr(addr, ':');
    size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
        addr++;
        n -= 2;
    }
    snprintf(host, cap, "%.*s", (int)(n < cap ? n : cap - 1), addr);
}

/* Writes a Prometheus file_sd target list for the head's /metrics (atomically: FILE.tmp, then
 * rename, as file_sd wants). 0, or 1 with the reason printed. */
static int write_file_sd(const char *path, const char *target, const char *cluster)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "ctup dashboard: --file-sd %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    fprintf(f, "[\n  {\"targets\": [\"%s\"], \"labels\": {\"ct_cluster\": \"%s\"}}\n]\n", target,
            cluster);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "ctup dashboard: --file-sd %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
}

static int cmd_dashboard(int argc, char **argv)
{
    const char *file = NULL, *sd = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            cmd_usage("dashboard", stdout);
            return 0;
        } else if (!strcmp(a, "--file-sd")) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "ctup dashboard: --file-sd needs a file name\n");
                return 2;
            }
            sd = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "ctup dashboard: unknown option '%s' (see ctup dashboard --help)\n", a);
            return 2;
        } else if (!file) {
            file = a;
        } else {
            fprintf(stderr, "ctup dashboard: one CLUSTER.yaml only ('%s' and '%s')\n", file, a);
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "ctup dashboard: ");
        cmd_usage("dashboard", stderr);
        return 2;
    }
    ct_cluster_config *cfg = NULL;
    ct_cluster_state st;
    int rc = load(file, &cfg, &st, true, NULL);
    if (rc)
        return rc;
    if (cfg->dashboard_port <= 0) {
        fprintf(stderr,
                "ctup dashboard: %s: ct.dashboard_port is not set: the head serves no "
                "dashboard (set it, then ctup down and up)\n",
                file);
        ct_cluster_config_destroy(&cfg);
        return 2;
    }
    char tok[CT_DASH_TOKEN_LEN + 1], host[256], target[300];
    if (cluster_secret(cfg->cluster_name) || ct__auth_dashboard_token(tok)) {
        fprintf(stderr, "ctup dashboard: %s\n", ct_last_error());
        ct_cluster_config_destroy(&cfg);
        return 1;
    }
    head_host(st.address, host, sizeof host);
    /* the head binds its endpoint to 127.0.0.1 (head/http.h): it is reached on the head's
     * host, or through a tunnel to it */
    snprintf(target, sizeof target, "127.0.0.1:%d", cfg->dashboard_port);
    printf("http://%s/#token=%s\n", target, tok);
    printf("  the head's dashboard (on the head's host, %s: it listens on 127.0.0.1 only; from\n"
           "  another machine: ssh -N -L %d:127.0.0.1:%d %s, then open the URL there)\n",
           host, cfg->dashboard_port, cfg->dashboard_port, host);
    printf("  Prometheus: http://%s/metrics (from loopback no token is needed; from elsewhere\n"
           "  the header Authorization: Bearer %s)\n",
           target, tok);
    if (sd) {
        rc = write_file_sd(sd, target, cfg->cluster_name);
        if (!rc)
            printf("  file_sd targets written to %s\n", sd);
    }
    ct_cluster_config_destroy(&cfg);
    return rc;
}

static int cmd_submit(int argc, char **argv)
{
    int rc;
    if (cmd_args_done("submit", argc, argv, 4, &rc))
        return rc;
    ct_cluster_config *cfg = NULL;
    ct_cluster_state st;
    rc = load(argv[2], &cfg, &st, true, NULL);
    if (rc)
        return rc;
    char secret[4096], store[8192];
    /* where the driver runs: here, or through the provider (slurm: srun --overlap) */
    char *words[32 + 256];
    int n_pre = 0;
    rc = ct_cluster_secret_path(cfg->cluster_name, secret, sizeof secret);
    if (!rc && cfg->provider->driver_prefix)
        rc = n_pre = cfg->provider->driver_prefix(cfg, &st, words, 32, store, sizeof store);
    ct_cluster_config_destroy(&cfg);
    if (rc < 0) {
        fprintf(stderr, "ctup submit: %s\n", ct_last_error());
        return 1;
    }
    if (argc - 3 > 256) {
        fprintf(stderr, "ctup submit: more than 256 program arguments\n");
        return 1;
    }
    for (int i = 3; i <= argc; i++)
        words[n_pre + i - 3] = argv[i]; /* argv[argc] is NULL */
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ctup submit: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        setenv("CT_ADDRESS", st.address, 1);
        setenv("CT_SECRET_FILE", secret, 1);
        signal(SIGPIPE, SIG_DFL);
        execvp(words[0], words);
        fprintf(stderr, "ctup submit: cannot run %s: %s\n", words[0], strerror(errno));
        _exit(127);
    }
    /* ^C goes to the driver (same process group); ctup waits for it */
    signal(SIGINT, SIG_IGN);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    fprintf(stderr, "ctup submit: %s killed by signal %d\n", argv[3], WTERMSIG(status));
    return 128 + WTERMSIG(status);
}

static int cmd_exec(int argc, char **argv)
{
    int rc;
    if (cmd_args_done("exec", argc, argv, 4, &rc))
        return rc;
    ct_cluster_config *cfg = NULL;
    ct_cluster_state st;
    rc = load(argv[2], &cfg, &st, true, NULL);
    if (rc)
        return rc;
    /* the words are joined like ssh joins them: `ctup exec c.yaml 'echo $CT_ADDRESS'` */
    size_t len = 1;
    for (int i = 3; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *cmd = calloc(1, len);
    if (!cmd) {
        ct_cluster_config_destroy(&cfg);
        return 1;
    }
    for (int i = 3; i < argc; i++) {
        strcat(cmd, argv[i]);
        if (i + 1 < argc)
            strcat(cmd, " ");
    }
    fflush(stdout);
    rc = cfg->provider->exec(cfg, &st, cmd);
    free(cmd);
    ct_cluster_config_destroy(&cfg);
    if (rc < 0) {
        fprintf(stderr, "ctup exec: %s\n", ct_last_error());
        return 1;
    }
    return rc;
}

static int cmd_secret(int argc, char **argv)
{
    int rc;
    if (cmd_args_done("secret", argc, argv, 3, &rc))
        return rc;
    if (argc > 3) {
        fprintf(stderr, "ctup secret: unexpected argument '%s' (one FILE only)\n", argv[3]);
        return 2;
    }
    /* ~/.ct/my.secret on a fresh machine: the missing parents are made, 0700 */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", argv[2]);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (ct__cluster_mkdir_p(dir)) {
            fprintf(stderr, "ctup secret: %s\n", ct_last_error());
            return 1;
        }
    }
    if (ct__secret_file_create(argv[2])) {
        fprintf(stderr, "ctup secret: %s\n", ct_last_error());
        return 1;
    }
    return 0;
}

/* Is a a cluster file rather than a command (a .yaml/.yml name, or a file that exists)?
 * `ctup CLUSTER.yaml` means `ctup up CLUSTER.yaml`, as `ray up` does. */
static bool is_cluster_file(const char *a)
{
    size_t n = strlen(a);
    if ((n > 5 && !strcmp(a + n - 5, ".yaml")) || (n > 4 && !strcmp(a + n - 4, ".yml")))
        return true;
    return access(a, R_OK) == 0;
}

int main(int argc, char **argv)
{
    ct__log_init();
    ct__log_set_who("ctup");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (is_help(argv[1])) {
        usage(stdout);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    const char *c = argv[1];
    int rc;
    if (!strcmp(c, "status"))
        return cmd_status(argc, argv);
    if (!strcmp(c, "dashboard"))
        return cmd_dashboard(argc, argv);
    if (!strcmp(c, "submit"))
        return cmd_submit(argc, argv);
    if (!strcmp(c, "exec"))
        return cmd_exec(argc, argv);
    if (!strcmp(c, "secret"))
        return cmd_secret(argc, argv);
    if (!strcmp(c, "up") || !strcmp(c, "down")) {
        if (cmd_args_done(c, argc, argv, 3, &rc))
            return rc;
        if (argc > 3) {
            fprintf(stderr, "ctup %s: unexpected argument '%s' (one CLUSTER.yaml only)\n", c,
                    argv[3]);
            return 2;
        }
        return !strcmp(c, "up") ? cmd_up(argv[2]) : cmd_down(argv[2]);
    }
    if (c[0] != '-' && is_cluster_file(c)) {
        if (argc > 2) {
            fprintf(stderr,
                    "ctup: unexpected argument '%s' after %s (ctup CLUSTER.yaml is "
                    "ctup up CLUSTER.yaml)\n",
                    argv[2], c);
            return 2;
        }
        return cmd_up(c);
    }
    if (c[0] == '-')
        fprintf(stderr, "ctup: unknown option '%s' (see --help)\n", c);
    else
        fprintf(
            stderr,
            "ctup: unknown command '%s' (up, down, status, dashboard, submit, exec, secret, or a "
            "CLUSTER.yaml "
            "to start; see --help)\n",
            c);
    return 2;
}
