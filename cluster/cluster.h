/* cluster/cluster.h — ctup's pieces: the cluster YAML (yaml_config.c), the state file of a
 * running cluster (state.c) and the providers that start and stop its processes
 * (provider.h: one table per provider; provider.c: the host scripts local and ssh share;
 * provider_local.c: this host; provider_ssh.c: remote hosts; provider_slurm.c: a Slurm job).
 *
 * Not public API (no include/ct/ header): only ctup links these. Nothing here is thread-safe;
 * ctup is single-threaded. Errors: functions return 0 or a negative CT_E* code and leave the
 * message for ct_last_error(); configuration errors read "FILE:LINE:COL: message".
 *
 * The YAML (keys follow Ray's cluster YAML where the meaning is the same; `ct:` holds ct's own):
 *
 *   cluster_name: demo                 # required; [A-Za-z0-9_.-]
 *   max_workers: 2                     # optional upper bound on the worker count
 *   provider:
 *     type: local                      # required: local | ssh | slurm
 *     head_ip: 127.0.0.1               # ssh: required; local: default 127.0.0.1
 *     worker_ips: [127.0.0.1, ...]     # one node per entry (ssh: required)
 *     num_workers: 2                   # local only: node count when worker_ips is absent
 *     # slurm: partition, nodes, time, account, cpus_per_node, gpus_per_node, sbatch_args
 *   auth: {ssh_user: u, ssh_private_key: ~/.ssh/id, ssh_port: 22,      # ssh only
 *          ssh_known_hosts: ~/.ssh/known_hosts}   # ssh's UserKnownHostsFile (default: ssh's)
 *   setup_commands: [..]               # on every host before start (head_/worker_ variants)
 *   head_start_ray_commands: [..]      # or head_start_commands; the last one becomes the head
 *   worker_start_ray_commands: [..]    # or worker_start_commands; the last one becomes the node
 *   head_node_type: head               # names an entry of available_node_types
 *   available_node_types:
 *     worker: {resources: {CPU: 2, GPU: 0, disk: 1}, min_workers: 2, max_workers: 2,
 *              store_memory: 256M, spill_dir: /tmp/spill}
 *   ct: {head_port: 0, heartbeat_ms: 100, dead_after_ms: 10000, store_memory: 256M,
 *        spill_dir: DIR, bin_dir: DIR, remote_dir: ~/.ct, copy_binaries: true,
 *        head_runs_node: false, start_timeout_s: 30, head_bind: 127.0.0.1,
 *        head_grace_ms: 60000, dashboard_port: 0,   # the head's /metrics port (0: none;
 *                                                   local and ssh providers)
 *        heartbeat_rate: 20000, max_nodes: 10000, ...}   # ct-head --heartbeat-rate, --max-*
 *
 * Values that reach a script or an argv are data and are checked at parse time: hosts are IPs
 * or DNS names, ssh_user is [a-z_][a-z0-9_-]*, paths are absolute (key, known_hosts, bin_dir,
 * remote_dir also ~/...) of CT_CLUSTER_SAFE_CHARS. Each node's spill directory (SPILL_ROOT/NAME-N)
 * is made by its start script. Only setup and start commands are shell code. */
#ifndef CT_CLUSTER_H
#define CT_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CT_CLUSTER_MAX_NODES 256
#define CT_CLUSTER_MAX_RES 16
#define CT_CLUSTER_MAX_WARNINGS 16

struct ct_cluster_provider; /* cluster/provider.h */

/* One node to start: where, and what it offers (-1: let ct-node detect). */
typedef struct {
    char *host;      /* IP or host name (local: 127.0.0.1) */
    char *type_name; /* the available_node_types entry, or NULL */
    double cpus, gpus;
    int n_custom;
    char *custom_name[CT_CLUSTER_MAX_RES];
    double custom_amount[CT_CLUSTER_MAX_RES];
    char *store_memory; /* "256M" or NULL */
    char *spill_dir;    /* per-node directory (already made unique), or NULL */
} ct_cluster_node;

/* A parsed cluster file. Owns every string; free with ct_cluster_config_destroy. */
typedef struct {
    char *path; /* as given */
    char *cluster_name;
    const struct ct_cluster_provider *provider; /* the table of provider.type */
    char *head_ip;   /* NULL where the provider picks the head's host (slurm) */
    int max_workers; /* -1: unset */
    /* the provider's own fields (provider.h: ct__ssh_conf, ct__slurm_conf), which its parse
     * makes and its free_conf frees; NULL: none */
    void *provider_conf;
    char **setup, **head_setup, **worker_setup;
    int n_setup, n_head_setup, n_worker_setup;
    char **head_start, **worker_start; /* NULL: the default command */
    int n_head_start, n_worker_start;
    int head_port, heartbeat_ms, dead_after_ms, start_timeout_s;
    int dashboard_port; /* ct-head --dashboard-port (its HTTP endpoint, head/http.h); 0: none */
    int head_grace_ms;  /* nodes keep their actors this long while the head is gone */
    /* the head's table limits (ct-head --max-*, head/head.h ct_head_limits); 0: its default */
    int max_nodes, max_actors, max_placement_groups, max_objects, max_kv_keys, max_subscribers;
    int heartbeat_rate; /* ct-head --heartbeat-rate (heartbeats a second); 0: its default */
    char *head_bind;    /* the head's --host (default: 127.0.0.1 local, 0.0.0.0 ssh) */
    char *bin_dir;      /* where ct-head/ct-node are here (default: next to ctup) */
    char *remote_dir;   /* ssh: where binaries and logs go on a host (default ~/.ct) */
    bool copy_binaries;
    bool head_runs_node;
    ct_cluster_node nodes[CT_CLUSTER_MAX_NODES]; /* the worker nodes, then the head's if any */
    int n_nodes;
    /* "file:line:col: ..." of what is accepted but likely a mistake (a resource name one edit
     * from a built-in one); each also logged as a warning */
    char *warnings[CT_CLUSTER_MAX_WARNINGS];
    int n_warnings;
} ct_cluster_config;

/* Parses and checks the file at path. On success *out is an owned config. On failure *out is
 * NULL and ct_last_error() reads "path:line:col: what is wrong". */
int ct_cluster_config_load(const char *path, ct_cluster_config **out);
/* Same from a string (name is used in messages). */
int ct_cluster_config_parse(const char *name, const char *text, size_t len,
                            ct_cluster_config **out);
void ct_cluster_config_destroy(ct_cluster_config **cfg);

/* ---- state of a started cluster: $CT_STATE_DIR or ~/.ct/clusters, file <name>.state ---- */

#define CT_CLUSTER_MAX_PROCS (CT_CLUSTER_MAX_NODES + 1)

typedef struct {
    char role[32];  /* "head", "node-1", ... */
    char host[256]; /* where it runs */
    pid_t pid;
    unsigned long long start_time; /* /proc/PID/stat field 22: tells a reused pid apart */
} ct_cluster_proc;

typedef struct {
    char cluster_name[128];
    char config_path[4096];
    char provider[16];
    char address[300]; /* head H:P, "" until known */
    ct_cluster_proc procs[CT_CLUSTER_MAX_PROCS];
    int n_procs;
    char job[32];       /* slurm: the job id, "" before sbatch answered */
    char job_host[256]; /* slurm: the node that runs the head, "" until known */
    bool secret_copied; /* ssh: this start is copying the secret to the hosts (not in the file) */
} ct_cluster_state;

/* Directory of state files (created on demand); returns 0 or CT_E*. */
int ct_cluster_state_dir(char *out, size_t cap);
/* Path of the state file and of the per-cluster log directory. */
int ct_cluster_state_path(const char *cluster_name, char *out, size_t cap);
int ct_cluster_log_dir(const char *cluster_name, char *out, size_t cap);
/* The cluster secret's file on this host, beside the state: <state dir>/<name>.secret (0600;
 * `ctup up` writes a new one for every start, `ctup down` removes it). */
int ct_cluster_secret_path(const char *cluster_name, char *out, size_t cap);
/* Reads the state; CT_ENOENT when there is none. */
int ct_cluster_state_read(const char *cluster_name, ct_cluster_state *st);
/* Writes it atomically (temp file + rename). */
int ct_cluster_state_write(const ct_cluster_state *st);
int ct_cluster_state_remove(const char *cluster_name);

/* Takes <state dir>/<name>.lock (flock, not blocking) for the length of an up or down, so
 * two ctups cannot start or stop the same cluster at once: CT_EBUSY when another holds it.
 * *fd is the descriptor to hand to ct_cluster_unlock, which removes the file (the lock also
 * ends with the process; the file then stays until the next up or down of the name). */
int ct_cluster_lock(const char *cluster_name, int *fd);
void ct_cluster_unlock(const char *cluster_name, int *fd);
/* mkdir -p with mode 0700 for each directory it makes; existing ones are left as they are. */
int ct__cluster_mkdir_p(const char *path);

/* ---- shared by the providers (provider.c); the providers themselves: provider.h ---- */

/* Runs argv, stdout captured into out (NUL-terminated, may be NULL), stderr passed through.
 * Returns the exit status (0-255, 128+signal) or < 0 when it could not run. */
int ct__cluster_run(char *const argv[], char *out, size_t cap);
/* Appends s to buf (cap bytes) single-quoted for sh ('it'\''s'): the one quoting function for
 * a data value in a script. Returns 0 or CT_ERANGE. */
int ct__shell_quote(char *buf, size_t cap, const char *s);
/* The characters a data value may have where it is pasted into a script or argv unquoted (node
 * arguments, which $CT_NODE_ARGS word-splits): letters, digits and _ . , / + : @ = -. */
#define CT_CLUSTER_SAFE_CHARS                                                                      \
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.,/+:@=-"
/* true when s is not empty, does not start with '-' and has only CT_CLUSTER_SAFE_CHARS: sh reads
 * it as one word, and no tool reads it as an option. */
bool ct__shell_safe_word(const char *s);
/* Builds the shell script that starts one daemon detached on its host (setsid + nohup, log
 * file, stdin from /dev/null) and prints "PID STARTTIME". cmds are the user's start commands
 * (the last one is exec'd) or NULL for default_cmd. env_assign is prepended ("A=1 B=2 ", values
 * quoted by the caller). make_dir (a node's spill directory, or NULL) is created first
 * (mkdir -p -m 700); when that fails the script exits 1 and starts nothing. */
int ct__cluster_start_script(char *buf, size_t cap, const char *log_path, const char *env_assign,
                             char *const *cmds, int n_cmds, const char *default_cmd,
                             const char *make_dir);
/* Shell script that stops pid if its start time still is start_time; prints "stopped",
 * "gone" or "other". */
int ct__cluster_stop_script(char *buf, size_t cap, pid_t pid, unsigned long long start_time);
/* Shell script that prints "alive" or "gone" for pid + start time. */
int ct__cluster_alive_script(char *buf, size_t cap, pid_t pid, unsigned long long start_time);
/* The local transport (provider_local.c): argv = {"/bin/sh", "-c", script}; ct-head/ct-node
 * next to ctup or in ct.bin_dir (checked to be there). */
int ct__local_argv(const ct_cluster_config *cfg, const char *host, const char *script, char **argv,
                   int max_argv, char *store, size_t cap);
int ct__local_bin_dir(const ct_cluster_config *cfg, char *out, size_t cap);

#endif
