/* cluster/provider_local.c — the `local` provider's transport: a host's script runs as
 * /bin/sh -c SCRIPT on this machine, and ct-head / ct-node are taken from ct.bin_dir or from
 * the directory ctup itself lives in (build/bin). Every node is its own process with its own
 * object store shard, spill directory and ports (ct-node picks free ones).
 *
 * YAML: provider {type: local, head_ip (default 127.0.0.1), worker_ips | num_workers}; auth
 * is accepted and unused.
 *
 * Not in here: the scripts themselves (provider.c), ssh (provider_ssh.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cluster/cluster.h"
#include "cluster/provider.h"
#include "common/common.h"
#include "common/env.h"

int ct__local_argv(const ct_cluster_config *cfg, const char *host, const char *script, char **argv,
                   int max_argv, char *store, size_t cap)
{
    (void)cfg, (void)host, (void)store, (void)cap;
    if (max_argv < 4)
        return ct__error(CT_EINVAL, "ct__local_argv: argv too small");
    argv[0] = "/bin/sh";
    argv[1] = "-c";
    argv[2] = (char *)script;
    argv[3] = NULL;
    return 0;
}

int ct__local_bin_dir(const ct_cluster_config *cfg, char *out, size_t cap)
{
    int n;
    const char *home = ct__env(CT__ENV_HOME);
    if (cfg->bin_dir && !strncmp(cfg->bin_dir, "~/", 2) && home) {
        n = snprintf(out, cap, "%s/%s", home, cfg->bin_dir + 2); /* no shell to expand ~ here */
    } else if (cfg->bin_dir) {
        n = snprintf(out, cap, "%s", cfg->bin_dir);
    } else {
        char self[PATH_MAX];
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k <= 0)
            return ct__error(-errno, "readlink /proc/self/exe: %s", strerror(errno));
        self[k] = 0;
        n = snprintf(out, cap, "%s", dirname(self));
    }
    if (n < 0 || (size_t)n >= cap)
        return ct__error(CT_ERANGE, "bin_dir path too long");
    for (int i = 0; i < 2; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", out, i ? "ct-node" : "ct-head");
        if (access(p, X_OK))
            return ct__error(CT_ENOENT,
                             "%s: %s (set ct.bin_dir to the folder with ct-head and "
                             "ct-node)",
                             p, strerror(errno));
    }
    return 0;
}

static int secret_path(const ct_cluster_config *cfg, char *out, size_t cap)
{
    return ct_cluster_secret_path(cfg->cluster_name, out, cap);
}

static int log_dir(const ct_cluster_config *cfg, char *out, size_t cap)
{
    return ct_cluster_log_dir(cfg->cluster_name, out, cap);
}

static int parse(ct__cfg_parser *p, yaml_node_t *prov, yaml_node_t *root, ct_cluster_config *c,
                 ct__cfg_workers *w)
{
    yaml_node_t *v, *k;
    int rc = 0;
    if ((v = ct__cfg_get(p, prov, "head_ip", NULL)))
        rc = ct__cfg_host(p, v, "provider.head_ip", &c->head_ip);
    else if (!(c->head_ip = strdup("127.0.0.1")))
        rc = ct__error(CT_ENOMEM, "out of memory");
    if (rc)
        return rc;
    yaml_node_t *wips = ct__cfg_get(p, prov, "worker_ips", NULL);
    if (wips &&
        (rc = ct__cfg_host_list(p, wips, "provider.worker_ips", &w->worker_hosts, &w->n_workers)))
        return rc;
    if ((v = ct__cfg_get(p, prov, "num_workers", &k))) {
        if (wips)
            return ct__cfg_err(p, k, "provider: give worker_ips or num_workers, not both");
        if ((rc = ct__cfg_int(p, v, "provider.num_workers", 0, CT_CLUSTER_MAX_NODES - 1,
                              &w->n_workers)))
            return rc;
    }
    w->where = wips ? wips : prov;
    w->hint = "provider.worker_ips, provider.num_workers";
    c->head_port = 0;
    if (!(c->head_bind = strdup(c->head_ip))) /* ct.head_bind may replace it */
        return ct__error(CT_ENOMEM, "out of memory");
    /* an auth section (Ray's local provider has one) is checked, not used: this host needs
     * no login */
    ct__ssh_conf a = {0};
    rc = ct__ssh_auth_parse(p, root, "local", false, &a);
    ct__ssh_conf_free(&a);
    return rc;
}

static const char *const keys[] = {"head_ip", "worker_ips", "num_workers", NULL};

const ct_cluster_provider ct__provider_local = {
    .name = "local",
    .keys = keys,
    .parse = parse,
    .start = ct__hosts_start,
    .wait = ct__hosts_wait,
    .running = ct__hosts_running,
    .stop = ct__hosts_stop,
    .status = ct__hosts_status,
    .exec = ct__hosts_exec,
    .log_where = ct__hosts_log_where,
    .one_host = true,
    .argv = ct__local_argv,
    .bin_dir = ct__local_bin_dir,
    .log_dir = log_dir,
    .secret_path = secret_path,
};
