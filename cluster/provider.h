/* cluster/provider.h — a cluster provider is one table of functions (ggml's backend, libuv's
 * per-platform files): provider_local.c, provider_ssh.c and provider_slurm.c each define one
 * and nothing else tests which provider a cluster has. ctup.c calls the table; yaml_config.c
 * finds it by `provider.type` (ct__cluster_provider_find, the one list of providers) and hands
 * it the `provider:` section.
 *
 * local and ssh share the host scripts of provider.c (detached start, pid + start time checked
 * stop) and differ in their transport (the `host` part of the table). slurm submits one batch
 * job and has no transport.
 *
 * Also here: the YAML helpers a provider parses its section with (yaml_config.c defines them),
 * so that its keys are checked like every other key ("file:line:col: message"). */
#ifndef CT_CLUSTER_PROVIDER_H
#define CT_CLUSTER_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>
#include "cluster/cluster.h"

/* ---- YAML helpers (yaml_config.c) ---- */
typedef struct ct__cfg_parser ct__cfg_parser;
/* Records "file:line:col: message" at node n and returns CT_EINVAL. */
int ct__cfg_err(ct__cfg_parser *p, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The value of key in mapping map (NULL when absent); *key_node (may be NULL) gets the key. */
yaml_node_t *ct__cfg_get(ct__cfg_parser *p, yaml_node_t *map, const char *key,
                         yaml_node_t **key_node);
/* Checks that map's keys are unique and in allowed (NULL-ended); section names it. */
int ct__cfg_keys(ct__cfg_parser *p, yaml_node_t *map, const char *section,
                 const char *const *allowed);
/* Typed values; name is the key's full name for messages. Strings are owned (*out freed
 * first). */
int ct__cfg_str(ct__cfg_parser *p, yaml_node_t *v, const char *name, char **out);
int ct__cfg_int(ct__cfg_parser *p, yaml_node_t *v, const char *name, long lo, long hi, int *out);
int ct__cfg_host(ct__cfg_parser *p, yaml_node_t *v, const char *name, char **out);
int ct__cfg_user(ct__cfg_parser *p, yaml_node_t *v, const char *name, char **out);
int ct__cfg_path(ct__cfg_parser *p, yaml_node_t *v, const char *name, bool home, char **out);
/* A list of hosts (IP addresses or DNS names), at most CT_CLUSTER_MAX_NODES - 1. */
int ct__cfg_host_list(ct__cfg_parser *p, yaml_node_t *v, const char *name, char ***out, int *n);
int ct__cfg_str_list(ct__cfg_parser *p, yaml_node_t *v, const char *name, char ***out, int *n);
/* The i-th item of a sequence node (for a message about it). */
yaml_node_t *ct__cfg_item(ct__cfg_parser *p, yaml_node_t *seq, int i);

/* ---- the providers' own fields: cfg->provider_conf, by cfg->provider ---- */
/* ssh (provider_ssh.c): the `auth:` section */
typedef struct {
    char *user, *key;  /* ssh_user, ssh_private_key (NULL: ssh's default) */
    char *known_hosts; /* ssh -o UserKnownHostsFile=, or NULL: ssh's default */
    int port;          /* ssh_port, default 22 */
} ct__ssh_conf;
/* (auth_section.c) Reads the `auth:` section into a (zeroed by the caller; its strings owned, freed
 * by ct__ssh_conf_free); required: it must be there with ssh_user (type names the provider in
 * messages). The local provider checks the section with it too. */
int ct__ssh_auth_parse(ct__cfg_parser *p, yaml_node_t *root, const char *type, bool required,
                       ct__ssh_conf *a);
void ct__ssh_conf_free(ct__ssh_conf *a);
/* slurm (provider_slurm.c): the allocation (NULL / 0: not given, Slurm's default) */
typedef struct {
    char *partition, *time, *account;
    char **sbatch_args;
    int n_sbatch_args;
    int nodes, cpus_per_node, gpus_per_node;
} ct__slurm_conf;

/* What a provider's parse gives back to the shared part of the file. */
typedef struct {
    char **worker_hosts; /* one node per entry (owned, NULL-ended), or NULL */
    int n_workers;       /* nodes to start when worker_hosts is NULL; -1: from min_workers */
    yaml_node_t *where;  /* the node to name in "the provider gives N workers" messages */
    const char *hint;    /* the keys that give workers, for "no nodes to start: give ..." */
} ct__cfg_workers;

/* ---- the table ---- */
typedef struct ct_cluster_provider {
    const char *name; /* provider.type */
    /* keys of `provider:` besides `type` (NULL-ended) */
    const char *const *keys;
    /* Reads the `provider:` section prov (and top-level keys that are its own, like auth) into
     * c and its own fields (c->provider_conf, made here: also on failure, so that free_conf
     * frees it), sets the provider's defaults (head_ip, head_port, head_bind: ct.* may
     * override them), and says which workers to start. */
    int (*parse)(ct__cfg_parser *p, yaml_node_t *prov, yaml_node_t *root, ct_cluster_config *c,
                 ct__cfg_workers *w);
    /* Frees what parse put in c->provider_conf (NULL: parse puts nothing there). */
    void (*free_conf)(void *conf);
    /* After the whole file is read: checks across sections (NULL: none). */
    int (*check)(ct__cfg_parser *p, yaml_node_t *root, const ct_cluster_config *c);

    /* Starts the cluster; records what it started in st (state file rewritten as it goes) and
     * fills st->address. Does not clean up on failure: ctup calls stop on what st lists. */
    int (*start)(const ct_cluster_config *cfg, ct_cluster_state *st);
    /* Waits until every node has joined the head, or says why not (a process that exited, a
     * job that was refused, the timeout). */
    int (*wait)(const ct_cluster_config *cfg, const ct_cluster_state *st);
    /* For `up` of a name that has a state: 1 (and a line on stderr saying what) when
     * something of that start still runs, 0 when nothing does, < 0 when it cannot tell. */
    int (*running)(const ct_cluster_config *cfg, const ct_cluster_state *st, const char *path);
    /* Stops what st lists; *n_stopped counts what was running. Returns 0 or the first error. */
    int (*stop)(const ct_cluster_config *cfg, const ct_cluster_state *st, int *n_stopped);
    /* Removes the copies of the cluster secret the provider made (NULL: none). */
    int (*remove_secret)(const ct_cluster_config *cfg);
    /* `ctup status`: prints the provider's own lines; head_ok: the head answered. Returns 0,
     * or 1 when the cluster is not running. */
    int (*status)(const ct_cluster_config *cfg, const ct_cluster_state *st, bool head_ok);
    /* `ctup submit`: the words to run before PROGRAM (words[0..n), strings in store); 0 words:
     * the driver runs here. Returns n or < 0. */
    int (*driver_prefix)(const ct_cluster_config *cfg, const ct_cluster_state *st, char **words,
                         int max, char *store, size_t cap);
    /* `ctup exec`: runs a shell command where the head runs, CT_ADDRESS set; its exit status. */
    int (*exec)(const ct_cluster_config *cfg, const ct_cluster_state *st, const char *cmd);
    /* Where the daemons' logs are, for `up`'s last line ("(on each host) DIR"). */
    int (*log_where)(const ct_cluster_config *cfg, const ct_cluster_state *st, char *out,
                     size_t cap);

    /* ---- hosts reached by a shell (local, ssh: provider.c's scripts); slurm: NULL ---- */
    /* every node runs on the head's host: setup commands run once there */
    bool one_host;
    /* the argv that runs script on host (argv points into store) */
    int (*argv)(const ct_cluster_config *cfg, const char *host, const char *script, char **argv,
                int max_argv, char *store, size_t cap);
    /* where ct-head/ct-node are on a host, where their logs go, where they read the secret */
    int (*bin_dir)(const ct_cluster_config *cfg, char *out, size_t cap);
    int (*log_dir)(const ct_cluster_config *cfg, char *out, size_t cap);
    int (*secret_path)(const ct_cluster_config *cfg, char *out, size_t cap);
    /* before the head starts: binaries and secret to the hosts (NULL: nothing to do) */
    int (*prepare)(const ct_cluster_config *cfg, const char *const *hosts, int n,
                   ct_cluster_state *st);
    /* `ctup exec` runs the command in the login's home directory (ssh) */
    bool exec_in_home;
} ct_cluster_provider;

extern const ct_cluster_provider ct__provider_local, ct__provider_ssh, ct__provider_slurm;

/* The provider of that type name, or NULL. */
const ct_cluster_provider *ct__cluster_provider_find(const char *name);
/* The providers' names from the list, for messages ("local, ssh or slurm"), into buf; buf. */
const char *ct__cluster_provider_names(char *buf, size_t cap);
/* Whether key belongs in some provider's `provider:` section ("type" included). */
bool ct__cluster_provider_has_key(const char *key);

/* The ct-head flags of the YAML's ct section, appended to buf (" --port P --heartbeat-ms N
 * --dead-after-ms N", then --heartbeat-rate and --max-* where set): every provider starts its
 * head with these (local and ssh: ct__hosts_start; slurm: its batch script). Words of digits
 * and flags only (no quoting needed). 0, or CT_ERANGE. */
int ct__cluster_head_flags(const ct_cluster_config *cfg, char *buf, size_t cap);

/* The slurm provider's batch script for cfg into buf (provider_slurm.c; `ctup up` writes it to
 * LOGDIR/job.sh and submits it). 0 or a CT_E* code. */
int ct__slurm_batch_script(const ct_cluster_config *cfg, char *buf, size_t cap);

/* Appends printf output to buf (cap; a command line, a script). 0, or CT_ERANGE. */
int ct__cat(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- shared by the shell-reached providers (provider.c) ---- */
int ct__hosts_start(const ct_cluster_config *cfg, ct_cluster_state *st);
int ct__hosts_wait(const ct_cluster_config *cfg, const ct_cluster_state *st);
int ct__hosts_running(const ct_cluster_config *cfg, const ct_cluster_state *st, const char *path);
int ct__hosts_stop(const ct_cluster_config *cfg, const ct_cluster_state *st, int *n_stopped);
int ct__hosts_status(const ct_cluster_config *cfg, const ct_cluster_state *st, bool head_ok);
int ct__hosts_exec(const ct_cluster_config *cfg, const ct_cluster_state *st, const char *cmd);
/* ssh: removes the secret's copies on every host (tries all; the first error). */
int ct__hosts_remove_secret(const ct_cluster_config *cfg);
int ct__hosts_log_where(const ct_cluster_config *cfg, const ct_cluster_state *st, char *out,
                        size_t cap);
/* Runs script on host through cfg's transport; stdout into out (NULL: to stderr). */
int ct__hosts_run(const ct_cluster_config *cfg, const char *host, const char *script, char *out,
                  size_t cap);

/* ---- the head's tables (head_query.c) ---- */
struct Ct__Envelope;
/* Asks the head at addr for its tables (the secret must be loaded); *rep owned by the caller
 * (ct__msg_free). CT_ETIMEDOUT when it does not answer within timeout_ms. */
int ct__cluster_query_status(const char *addr, int timeout_ms, struct Ct__Envelope **rep);
/* Number of alive nodes the head at address lists (pids: when not NULL, only nodes whose pid
 * is one of pids[0..n_pids)); < 0 when the head did not answer within timeout_ms. */
int ct__cluster_alive_nodes(const char *address, int timeout_ms, const pid_t *pids, int n_pids);

#endif
