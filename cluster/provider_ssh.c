/* cluster/provider_ssh.c — the `ssh` provider's transport: a host's script runs as
 *   ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o ConnectTimeout=10
 *       -p PORT [-o UserKnownHostsFile=FILE] [-o IdentitiesOnly=yes -i KEY] -- USER@HOST SCRIPT
 * and the binaries go over with
 *   scp -q -o BatchMode=yes ... -P PORT [-i KEY] -- BIN/ct-head BIN/ct-node
 *       USER@HOST:DIR/bin/.incoming/
 * `ssh` and `scp` are looked up on PATH (a test puts fakes there). The remote hosts need the same
 * shared libraries as this one (libzmq, libprotobuf-c, ...): the binaries are copied, not the
 * libraries.
 *
 * No value from the YAML can become an ssh/scp option: `--` ends the options before the host
 * and file arguments, the key is the argument of -i, and user, host and paths were checked at
 * parse time (yaml_config.c; user and host are checked again here, the host may come from a
 * state file).
 *
 * YAML: provider {type: ssh, head_ip, worker_ips} (both required), auth.ssh_user (required),
 * auth.ssh_private_key / ssh_port / ssh_known_hosts; the head listens on 0.0.0.0:6380 unless
 * ct.head_bind / ct.head_port say otherwise.
 *
 * Not in here: the scripts (provider.c), the local transport (provider_local.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cluster/cluster.h"
#include "cluster/provider.h"
#include "common/common.h"
#include "common/env.h"

/* Copies s into store at *used; returns the copy or NULL when store is full. */
static char *keep(char *store, size_t cap, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static char *keep(char *store, size_t cap, size_t *used, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(store + *used, cap - *used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap - *used)
        return NULL;
    char *s = store + *used;
    *used += (size_t)n + 1;
    return s;
}

/* ~/x -> $HOME/x for the local key path (ssh -i does not see a shell). */
static void expand_home(char *out, size_t cap, const char *p)
{
    const char *home = ct__env(CT__ENV_HOME);
    if (p[0] == '~' && p[1] == '/' && home)
        snprintf(out, cap, "%s/%s", home, p + 2);
    else
        snprintf(out, cap, "%s", p);
}

/* This provider's own fields (its parse made them). */
static const ct__ssh_conf *auth(const ct_cluster_config *cfg)
{
    return cfg->provider_conf;
}

/* The common options of ssh (port_flag "-p") and scp ("-P"), at most COMMON_OPTS_MAX entries
 * (max must be at least that). Returns argc or < 0. */
#define COMMON_OPTS_MAX 14
static int common_opts(const ct_cluster_config *cfg, const char *port_flag, char **argv, int max,
                       char *store, size_t cap, size_t *used)
{
    static const char *const opts[] = {"BatchMode=yes", "StrictHostKeyChecking=accept-new",
                                       "ConnectTimeout=10"};
    const ct__ssh_conf *a = auth(cfg);
    int n = 0;
    if (max < COMMON_OPTS_MAX)
        return ct__error(CT_EINVAL, "ssh: argv too small");
    for (size_t i = 0; i < CT_ARRAY_LEN(opts); i++) {
        argv[n++] = "-o";
        argv[n++] = (char *)opts[i];
    }
    argv[n++] = (char *)port_flag;
    if (!(argv[n++] = keep(store, cap, used, "%d", a->port)))
        return ct__error(CT_ERANGE, "ssh command line too long");
    if (a->known_hosts) {
        char k[4096];
        expand_home(k, sizeof k, a->known_hosts);
        argv[n++] = "-o";
        if (!(argv[n++] = keep(store, cap, used, "UserKnownHostsFile=%s", k)))
            return ct__error(CT_ERANGE, "ssh command line too long");
    }
    if (a->key) {
        char k[4096];
        expand_home(k, sizeof k, a->key);
        /* only this key: an agent's or ~/.ssh's other keys would be offered first, and a
         * server stops after MaxAuthTries (6) failed ones */
        argv[n++] = "-o";
        argv[n++] = "IdentitiesOnly=yes";
        argv[n++] = "-i";
        if (!(argv[n++] = keep(store, cap, used, "%s", k)))
            return ct__error(CT_ERANGE, "ssh command line too long");
    }
    return n;
}

/* USER@HOST must name a login and a host, nothing an ssh or scp could read otherwise. */
static int check_login(const ct_cluster_config *cfg, const char *host)
{
    const char *user = auth(cfg)->user;
    if (!user || !ct__shell_safe_word(user) || strchr(user, '@'))
        return ct__error(CT_EINVAL, "ssh user '%s': not a user name", user ? user : "(none)");
    if (!ct__shell_safe_word(host) || strpbrk(host, "@/"))
        return ct__error(CT_EINVAL, "ssh host '%s': not a host name or address", host);
    return 0;
}

static int ssh_argv(const ct_cluster_config *cfg, const char *host, const char *script, char **argv,
                    int max_argv, char *store, size_t cap)
{
    size_t used = 0;
    if (max_argv < COMMON_OPTS_MAX + 5) /* ssh, the options, --, USER@HOST, SCRIPT, NULL */
        return ct__error(CT_EINVAL, "ct__ssh_argv: argv too small");
    int rc = check_login(cfg, host);
    if (rc)
        return rc;
    argv[0] = "ssh";
    int n = common_opts(cfg, "-p", argv + 1, max_argv - 5, store, cap, &used);
    if (n < 0)
        return n;
    n++;
    argv[n++] = "--";
    if (!(argv[n++] = keep(store, cap, &used, "%s@%s", auth(cfg)->user, host)))
        return ct__error(CT_ERANGE, "ssh command line too long");
    argv[n++] = (char *)script;
    argv[n] = NULL;
    return 0;
}

static int bin_dir(const ct_cluster_config *cfg, char *out, size_t cap)
{
    int n = cfg->copy_binaries || !cfg->bin_dir ? snprintf(out, cap, "%s/bin", cfg->remote_dir)
                                                : snprintf(out, cap, "%s", cfg->bin_dir);
    return n < 0 || (size_t)n >= cap ? ct__error(CT_ERANGE, "bin_dir path too long") : 0;
}

/* Copies ct-head and ct-node from ct.bin_dir (default: next to ctup) to REMOTE_DIR/bin on each
 * of hosts[0..n) (scp into bin/.incoming, then mv: a running binary is replaced, not
 * overwritten). */
static int copy_binaries(const ct_cluster_config *cfg, const char *const *hosts, int nh)
{
    char local[4096], remote[4096], script[8192], store[8192];
    /* the local binaries: ct.bin_dir or next to ctup */
    int rc = ct__local_bin_dir(cfg, local, sizeof local);
    if (rc)
        return rc;
    snprintf(remote, sizeof remote, "%s/bin", cfg->remote_dir);
    /* scp resolves a relative remote path against the home directory */
    const char *scp_dir = !strncmp(remote, "~/", 2) ? remote + 2 : remote;
    for (int h = 0; h < nh; h++) {
        char q[4200] = "";
        if (!strncmp(remote, "~/", 2)) {
            snprintf(q, sizeof q, "\"$HOME\"/");
            rc = ct__shell_quote(q, sizeof q, remote + 2);
        } else {
            rc = ct__shell_quote(q, sizeof q, remote);
        }
        if (rc)
            return rc;
        snprintf(script, sizeof script, "mkdir -p -- %s/.incoming", q);
        char *argv[40];
        if ((rc = ssh_argv(cfg, hosts[h], script, argv, 40, store, sizeof store)))
            return rc;
        fprintf(stderr, "ctup: copying ct-head, ct-node to %s:%s\n", hosts[h], remote);
        if ((rc = ct__cluster_run(argv, NULL, 0)))
            return rc < 0 ? rc
                          : ct__error(CT_EIO, "ssh %s: mkdir %s failed (exit %d)", hosts[h], remote,
                                      rc);
        size_t used = 0;
        argv[0] = "scp";
        argv[1] = "-q";
        int n = common_opts(cfg, "-P", argv + 2, 30, store, sizeof store, &used);
        if (n < 0)
            return n;
        n += 2;
        argv[n++] = "--";
        if (!(argv[n++] = keep(store, sizeof store, &used, "%s/ct-head", local)) ||
            !(argv[n++] = keep(store, sizeof store, &used, "%s/ct-node", local)) ||
            !(argv[n++] =
                  keep(store, sizeof store, &used,
                       strchr(hosts[h], ':') ? "%s@[%s]:%s/.incoming/" : "%s@%s:%s/.incoming/",
                       auth(cfg)->user, hosts[h], scp_dir)))
            return ct__error(CT_ERANGE, "scp command line too long");
        argv[n] = NULL;
        if ((rc = ct__cluster_run(argv, NULL, 0)))
            return rc < 0 ? rc : ct__error(CT_EIO, "scp to %s failed (exit %d)", hosts[h], rc);
        snprintf(script, sizeof script,
                 "mv -f -- %s/.incoming/ct-head %s/.incoming/ct-node %s/ && chmod 755 -- "
                 "%s/ct-head %s/ct-node",
                 q, q, q, q, q);
        if ((rc = ssh_argv(cfg, hosts[h], script, argv, 40, store, sizeof store)))
            return rc;
        if ((rc = ct__cluster_run(argv, NULL, 0)))
            return rc < 0 ? rc
                          : ct__error(CT_EIO,
                                      "ssh %s: installing the binaries failed "
                                      "(exit %d)",
                                      hosts[h], rc);
    }
    return 0;
}

/* Copies this host's secret file to <remote_dir>/secrets/<name>.secret on each host. */
static int copy_secret(const ct_cluster_config *cfg, const char *const *hosts, int nh,
                       const char *local_secret)
{
    char dir[4096], q[4200], file[4400], script[9000], store[8192];
    int n = snprintf(dir, sizeof dir, "%s/secrets", cfg->remote_dir);
    if (n < 0 || (size_t)n >= sizeof dir)
        return ct__error(CT_ERANGE, "remote_dir path too long");
    const char *scp_dir = !strncmp(dir, "~/", 2) ? dir + 2 : dir; /* scp: relative to home */
    q[0] = 0;
    int rc = !strncmp(dir, "~/", 2)
                 ? (snprintf(q, sizeof q, "\"$HOME\"/"), ct__shell_quote(q, sizeof q, dir + 2))
                 : ct__shell_quote(q, sizeof q, dir);
    if (rc)
        return rc;
    snprintf(file, sizeof file, "%s/", q);
    if ((rc = ct__shell_quote(file, sizeof file, cfg->cluster_name)))
        return rc;
    for (int h = 0; h < nh; h++) {
        /* a directory only this user can enter, and no old file whose mode scp would keep */
        snprintf(script, sizeof script,
                 "umask 077 && mkdir -p -- %s && chmod 700 -- %s && rm -f -- %s.secret", q, q,
                 file);
        char *argv[40];
        if ((rc = ssh_argv(cfg, hosts[h], script, argv, 40, store, sizeof store)))
            return rc;
        fprintf(stderr, "ctup: copying the cluster secret to %s:%s\n", hosts[h], dir);
        if ((rc = ct__cluster_run(argv, NULL, 0)))
            return rc < 0
                       ? rc
                       : ct__error(CT_EIO, "ssh %s: mkdir %s failed (exit %d)", hosts[h], dir, rc);
        size_t used = 0;
        argv[0] = "scp";
        argv[1] = "-q";
        argv[2] = "-p"; /* keeps 0600 */
        int k = common_opts(cfg, "-P", argv + 3, 30, store, sizeof store, &used);
        if (k < 0)
            return k;
        k += 3;
        argv[k++] = "--";
        argv[k++] = (char *)local_secret;
        if (!(argv[k++] =
                  keep(store, sizeof store, &used,
                       strchr(hosts[h], ':') ? "%s@[%s]:%s/%s.secret" : "%s@%s:%s/%s.secret",
                       auth(cfg)->user, hosts[h], scp_dir, cfg->cluster_name)))
            return ct__error(CT_ERANGE, "scp command line too long");
        argv[k] = NULL;
        if ((rc = ct__cluster_run(argv, NULL, 0)))
            return rc < 0 ? rc
                          : ct__error(CT_EIO, "scp of the secret to %s failed (exit %d)", hosts[h],
                                      rc);
    }
    return 0;
}

static int secret_path(const ct_cluster_config *cfg, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/secrets/%s.secret", cfg->remote_dir, cfg->cluster_name);
    return n < 0 || (size_t)n >= cap ? ct__error(CT_ERANGE, "secret path too long") : 0;
}

static int log_dir(const ct_cluster_config *cfg, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/logs/%s", cfg->remote_dir, cfg->cluster_name);
    return n < 0 || (size_t)n >= cap ? ct__error(CT_ERANGE, "log path too long") : 0;
}

static int prepare(const ct_cluster_config *cfg, const char *const *hosts, int nh,
                   ct_cluster_state *st)
{
    char local_secret[4096];
    int rc = 0;
    if (cfg->copy_binaries && (rc = copy_binaries(cfg, hosts, nh)))
        return rc;
    if ((rc = ct_cluster_secret_path(cfg->cluster_name, local_secret, sizeof local_secret)))
        return rc;
    st->secret_copied = true; /* from here the hosts' files are this start's */
    return copy_secret(cfg, hosts, nh, local_secret);
}

static int parse(ct__cfg_parser *p, yaml_node_t *prov, yaml_node_t *root, ct_cluster_config *c,
                 ct__cfg_workers *w)
{
    yaml_node_t *v, *k;
    int rc;
    if (!(v = ct__cfg_get(p, prov, "head_ip", NULL)))
        return ct__cfg_err(p, prov, "provider: missing required key 'head_ip' (type ssh)");
    if ((rc = ct__cfg_host(p, v, "provider.head_ip", &c->head_ip)))
        return rc;
    if (ct__cfg_get(p, prov, "num_workers", &k))
        return ct__cfg_err(p, k,
                           "provider.num_workers is for type local; list the hosts in worker_ips");
    yaml_node_t *wips = ct__cfg_get(p, prov, "worker_ips", NULL);
    if (!wips)
        return ct__cfg_err(p, prov, "provider: missing required key 'worker_ips' (type ssh)");
    if ((rc = ct__cfg_host_list(p, wips, "provider.worker_ips", &w->worker_hosts, &w->n_workers)))
        return rc;
    w->where = wips;
    w->hint = "provider.worker_ips";
    c->head_port = 6380;
    if (!(c->head_bind = strdup("0.0.0.0")))
        return ct__error(CT_ENOMEM, "out of memory");
    ct__ssh_conf *a = calloc(1, sizeof *a);
    if (!(c->provider_conf = a))
        return ct__error(CT_ENOMEM, "out of memory");
    return ct__ssh_auth_parse(p, root, "ssh", true, a);
}

static void free_conf(void *conf)
{
    ct__ssh_conf_free(conf);
    free(conf);
}

static const char *const keys[] = {"head_ip", "worker_ips", "num_workers", NULL};

const ct_cluster_provider ct__provider_ssh = {
    .name = "ssh",
    .keys = keys,
    .parse = parse,
    .free_conf = free_conf,
    .start = ct__hosts_start,
    .wait = ct__hosts_wait,
    .running = ct__hosts_running,
    .stop = ct__hosts_stop,
    .remove_secret = ct__hosts_remove_secret,
    .status = ct__hosts_status,
    .exec = ct__hosts_exec,
    .log_where = ct__hosts_log_where,
    .argv = ssh_argv,
    .bin_dir = bin_dir,
    .log_dir = log_dir,
    .secret_path = secret_path,
    .prepare = prepare,
    .exec_in_home = true,
};
