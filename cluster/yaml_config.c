/* cluster/yaml_config.c — reads a cluster YAML file (libyaml's document API) into a
 * ct_cluster_config and checks it: unknown keys (with a "did you mean"), duplicate keys, wrong
 * types, missing required keys, bad IPs, counts that do not add up. Every message names the
 * file, line and column (1-based) of the offending node: "c.yaml:7:3: unknown key ...". A
 * resource name one edit from CPU, GPU or memory is accepted with a warning (cfg->warnings).
 *
 * Every value that reaches a shell script or an ssh/scp/ct-node argv is data and is checked here
 * against a strict pattern, so that it can be neither code nor an option: hosts (IP or DNS
 * name), the ssh user ([a-z_][a-z0-9_-]*), paths (absolute, or ~/ where a shell or ctup expands
 * it, of CT_CLUSTER_SAFE_CHARS), names, numbers and sizes. provider.c quotes them as well. Only
 * setup_commands and the start commands are shell code, written by the cluster's owner.
 *
 * The `provider:` section is the provider's (its table's parse, in provider_TYPE.c, with the
 * ct__cfg_* helpers defined here); this file finds the table by provider.type and does the
 * rest, the same for every provider.
 *
 * Not in here: starting anything (provider*.c), the state file (state.c). The accepted keys
 * are listed in cluster.h. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "cluster/cluster.h"
#include "cluster/provider.h"
#include "common/common.h"

struct ct__cfg_parser {
    const char *file;
    yaml_document_t *doc;
    ct_cluster_config *cfg;
};
typedef struct ct__cfg_parser parser;

static int perr(parser *p, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records "file:line:col: message" (position of node n, or 1:1) and returns CT_EINVAL. */
static int perr(parser *p, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t line = n ? n->start_mark.line + 1 : 1, col = n ? n->start_mark.column + 1 : 1;
    return ct__error(CT_EINVAL, "%s:%zu:%zu: %s", p->file, line, col, msg);
}

int ct__cfg_err(parser *p, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t line = n ? n->start_mark.line + 1 : 1, col = n ? n->start_mark.column + 1 : 1;
    return ct__error(CT_EINVAL, "%s:%zu:%zu: %s", p->file, line, col, msg);
}

/* A warning at node n: "file:line:col: message", logged and kept in the config. */
static void pwarn(parser *p, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pwarn(parser *p, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[768], line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "%s:%zu:%zu: %s", p->file, n->start_mark.line + 1,
             n->start_mark.column + 1, msg);
    CT_LOG(CT_LOG_WARN, "ctup", "%s", line);
    ct_cluster_config *c = p->cfg;
    if (c->n_warnings < CT_CLUSTER_MAX_WARNINGS && (c->warnings[c->n_warnings] = strdup(line)))
        c->n_warnings++;
}

static const char *kind_name(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a list";
    default:
        return "a scalar";
    }
}

static yaml_node_t *node_at(parser *p, int id)
{
    return yaml_document_get_node(p->doc, id);
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* Ray keys that have no meaning in ct: refused by name rather than as typos. */
static const char *const ray_only[] = {"docker",
                                       "file_mounts",
                                       "cluster_synced_files",
                                       "file_mounts_sync_continuously",
                                       "rsync_exclude",
                                       "rsync_filter",
                                       "initialization_commands",
                                       "idle_timeout_minutes",
                                       "upscaling_speed",
                                       "head_start_ray_commands_extra",
                                       "min_workers",
                                       NULL};

/* The keys of the `ct:` section, and of a node type (available_node_types.NAME). */
static const char *const ct_keys[] = {"head_port",      "heartbeat_ms",         "heartbeat_rate",
                                      "dead_after_ms",  "store_memory",         "spill_dir",
                                      "bin_dir",        "remote_dir",           "copy_binaries",
                                      "head_runs_node", "start_timeout_s",      "head_bind",
                                      "head_grace_ms",  "dashboard_port",       "max_nodes",
                                      "max_actors",     "max_placement_groups", "max_objects",
                                      "max_kv_keys",    "max_subscribers",      NULL};
static const char *const type_keys[] = {
    "resources",    "min_workers", "max_workers",           "node_config",
    "store_memory", "spill_dir",   "worker_setup_commands", NULL};

static bool listed(const char *const *keys, const char *key)
{
    for (int i = 0; keys[i]; i++)
        if (!strcmp(keys[i], key))
            return true;
    return false;
}

/* The section a key unknown at the top level belongs in ("provider:", "ct:", a node type's),
 * or NULL when it is known nowhere. */
static const char *home_of(const char *key)
{
    if (ct__cluster_provider_has_key(key))
        return "provider:";
    if (listed(ct_keys, key))
        return "ct:";
    if (listed(type_keys, key))
        return "available_node_types.<type>:";
    return NULL;
}

/* Checks that map is a mapping whose keys are scalars, unique, and in allowed (NULL-ended).
 * section names the mapping in messages ("" for the top level). */
static int check_keys(parser *p, yaml_node_t *map, const char *section, const char *const *allowed)
{
    if (map->type != YAML_MAPPING_NODE)
        return perr(p, map, "%s must be a mapping, not %s", section, kind_name(map));
    for (yaml_node_pair_t *kv = map->data.mapping.pairs.start; kv < map->data.mapping.pairs.top;
         kv++) {
        yaml_node_t *k = node_at(p, kv->key);
        const char *ks = scalar(k);
        if (!ks)
            return perr(p, k, "keys must be scalars, not %s", kind_name(k));
        for (yaml_node_pair_t *prev = map->data.mapping.pairs.start; prev < kv; prev++) {
            yaml_node_t *pk = node_at(p, prev->key);
            if (scalar(pk) && !strcmp(scalar(pk), ks))
                return perr(p, k, "duplicate key '%s' (first at line %zu)", ks,
                            pk->start_mark.line + 1);
        }
        bool ok = false;
        for (int i = 0; allowed[i] && !ok; i++)
            ok = !strcmp(allowed[i], ks);
        if (ok)
            continue;
        const char *in = *section ? " in " : "";
        if (!*section)
            for (int i = 0; ray_only[i]; i++)
                if (!strcmp(ray_only[i], ks))
                    return perr(p, k, "key '%s' (Ray) is not supported by ctup", ks);
        /* a key of another section at the top level: say where it goes, not a near name */
        const char *home = !*section ? home_of(ks) : NULL;
        if (home)
            return perr(p, k, "key '%s' belongs in the %s section, not at the top level", ks, home);
        const char *best = NULL;
        int bd = 99;
        for (int i = 0; allowed[i]; i++) {
            int d = ct__edit_distance(ks, allowed[i]);
            if (d < bd)
                bd = d, best = allowed[i];
        }
        if (best && bd <= ct__edit_limit(ks))
            return perr(p, k, "unknown key '%s'%s%s (did you mean '%s'?)", ks, in, section, best);
        return perr(p, k, "unknown key '%s'%s%s", ks, in, section);
    }
    return 0;
}

/* Value node of key in a mapping (already checked), or NULL. *key_node gets the key. */
static yaml_node_t *get(parser *p, yaml_node_t *map, const char *key, yaml_node_t **key_node)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *kv = map->data.mapping.pairs.start; kv < map->data.mapping.pairs.top;
         kv++) {
        yaml_node_t *k = node_at(p, kv->key);
        if (scalar(k) && !strcmp(scalar(k), key)) {
            if (key_node)
                *key_node = k;
            return node_at(p, kv->value);
        }
    }
    return NULL;
}

static int get_str(parser *p, yaml_node_t *v, const char *name, char **out)
{
    const char *s = scalar(v);
    if (!s)
        return perr(p, v, "%s must be a string, not %s", name, kind_name(v));
    if (!*s)
        return perr(p, v, "%s has no value", name);
    free(*out);
    if (!(*out = strdup(s)))
        return ct__error(CT_ENOMEM, "out of memory");
    return 0;
}

static int get_int(parser *p, yaml_node_t *v, const char *name, long lo, long hi, int *out)
{
    const char *s = scalar(v);
    char *end = NULL;
    errno = 0;
    long x = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || x < lo || x > hi) {
        if (!s)
            return perr(p, v, "%s must be an integer in [%ld, %ld], not %s", name, lo, hi,
                        kind_name(v));
        return perr(p, v, "%s must be an integer in [%ld, %ld], got '%s'", name, lo, hi, s);
    }
    *out = (int)x;
    return 0;
}

static int get_num(parser *p, yaml_node_t *v, const char *name, double *out)
{
    const char *s = scalar(v);
    char *end = NULL;
    double x = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || !(x >= 0) || x > 1e12) {
        if (!s)
            return perr(p, v, "%s must be a number >= 0, not %s", name, kind_name(v));
        return perr(p, v, "%s must be a number >= 0, got '%s'", name, s);
    }
    *out = x;
    return 0;
}

static int get_bool(parser *p, yaml_node_t *v, const char *name, bool *out)
{
    const char *s = scalar(v);
    static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "on", "On", NULL};
    static const char *const f[] = {"false", "False", "FALSE", "no", "No", "off", "Off", NULL};
    for (int i = 0; s && t[i]; i++)
        if (!strcmp(s, t[i]))
            return *out = true, 0;
    for (int i = 0; s && f[i]; i++)
        if (!strcmp(s, f[i]))
            return *out = false, 0;
    if (!s)
        return perr(p, v, "%s must be true or false, not %s", name, kind_name(v));
    return perr(p, v, "%s must be true or false, got '%s'", name, s);
}

/* A size like ct-node's --store-memory: bytes, or a number with K/M/G; at least 1M. */
static int get_size(parser *p, yaml_node_t *v, const char *name, char **out)
{
    const char *s = scalar(v);
    uint64_t bytes;
    if (!s || ct__parse_size(s, &bytes))
        return perr(p, v, "%s must be a size of at least 1M (e.g. 512M), got %s%s%s", name,
                    s ? "'" : "", s ? s : kind_name(v), s ? "'" : "");
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)bytes);
    free(*out);
    return (*out = strdup(buf)) ? 0 : ct__error(CT_ENOMEM, "out of memory");
}

/* A list of non-empty strings. */
static int get_str_list(parser *p, yaml_node_t *v, const char *name, char ***out, int *n)
{
    if (v->type != YAML_SEQUENCE_NODE)
        return perr(p, v, "%s must be a list of strings, not %s", name, kind_name(v));
    int cnt = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    char **a = calloc(cnt + 1, sizeof *a);
    if (!a)
        return ct__error(CT_ENOMEM, "out of memory");
    for (int i = 0; i < cnt; i++) {
        yaml_node_t *it = node_at(p, v->data.sequence.items.start[i]);
        char what[96];
        snprintf(what, sizeof what, "%s[%d]", name, i);
        int rc = get_str(p, it, what, &a[i]);
        if (rc) {
            for (int j = 0; j < i; j++)
                free(a[j]);
            free(a);
            return rc;
        }
    }
    *out = a;
    *n = cnt;
    return 0;
}

/* An IPv4/IPv6 address or a DNS host name. */
static bool valid_host(const char *s)
{
    unsigned char buf[16];
    if (inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1)
        return true;
    size_t n = strlen(s);
    if (n == 0 || n > 253 || strspn(s, "0123456789.") == n)
        return false; /* all digits and dots but not an IPv4 address */
    const char *lab = s;
    for (const char *c = s;; c++) {
        if (*c == '.' || !*c) {
            if (c == lab || c - lab > 63 || *lab == '-' || c[-1] == '-')
                return false;
            if (!*c)
                return true;
            lab = c + 1;
        } else if (!isalnum((unsigned char)*c) && *c != '-') {
            return false;
        }
    }
}

static int get_host(parser *p, yaml_node_t *v, const char *name, char **out)
{
    int rc = get_str(p, v, name, out);
    if (!rc && !valid_host(*out))
        rc = perr(p, v, "%s: '%s' is not an IP address or host name", name, *out);
    return rc;
}

/* A login name as useradd takes it: [a-z_][a-z0-9_-]*, at most 32 characters. */
static bool valid_user(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 32 && (islower((unsigned char)s[0]) || s[0] == '_') &&
           strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

static int get_user(parser *p, yaml_node_t *v, const char *name, char **out)
{
    int rc = get_str(p, v, name, out);
    if (!rc && !valid_user(*out))
        rc = perr(p, v, "%s: '%s' is not a user name ([a-z_][a-z0-9_-]*, at most 32 characters)",
                  name, *out);
    return rc;
}

/* A path that is one word for sh and never an option: absolute, or "~" / "~/..." when home is
 * true, of CT_CLUSTER_SAFE_CHARS, at most 1024 characters. */
static bool valid_path(const char *s, bool home)
{
    if (strlen(s) > 1024)
        return false;
    if (home && (!strcmp(s, "~") || !strncmp(s, "~/", 2)))
        s++;
    return !*s || (s[0] == '/' && ct__shell_safe_word(s));
}

static int get_path(parser *p, yaml_node_t *v, const char *name, bool home, char **out)
{
    int rc = get_str(p, v, name, out);
    if (!rc && !valid_path(*out, home))
        rc = perr(p, v,
                  "%s: '%s' must be an absolute path%s of letters, digits and _ . , / + : @ = - "
                  "(at most 1024)",
                  name, *out, home ? " (or ~/path)" : "");
    return rc;
}

/* ---- the helpers a provider parses its section with (provider.h) ---- */

yaml_node_t *ct__cfg_get(parser *p, yaml_node_t *map, const char *key, yaml_node_t **key_node)
{
    return get(p, map, key, key_node);
}

int ct__cfg_keys(parser *p, yaml_node_t *map, const char *section, const char *const *allowed)
{
    return check_keys(p, map, section, allowed);
}

int ct__cfg_str(parser *p, yaml_node_t *v, const char *name, char **out)
{
    return get_str(p, v, name, out);
}

int ct__cfg_int(parser *p, yaml_node_t *v, const char *name, long lo, long hi, int *out)
{
    return get_int(p, v, name, lo, hi, out);
}

int ct__cfg_host(parser *p, yaml_node_t *v, const char *name, char **out)
{
    return get_host(p, v, name, out);
}

int ct__cfg_user(parser *p, yaml_node_t *v, const char *name, char **out)
{
    return get_user(p, v, name, out);
}

int ct__cfg_path(parser *p, yaml_node_t *v, const char *name, bool home, char **out)
{
    return get_path(p, v, name, home, out);
}

int ct__cfg_str_list(parser *p, yaml_node_t *v, const char *name, char ***out, int *n)
{
    return get_str_list(p, v, name, out, n);
}

yaml_node_t *ct__cfg_item(parser *p, yaml_node_t *seq, int i)
{
    return node_at(p, seq->data.sequence.items.start[i]);
}

static void free_list(char **a)
{
    for (int i = 0; a && a[i]; i++)
        free(a[i]);
    free(a);
}

int ct__cfg_host_list(parser *p, yaml_node_t *v, const char *name, char ***out, int *n)
{
    int rc = get_str_list(p, v, name, out, n);
    if (rc)
        return rc;
    for (int i = 0; i < *n; i++)
        if (!valid_host((*out)[i])) {
            rc = perr(p, node_at(p, v->data.sequence.items.start[i]),
                      "%s[%d]: '%s' is not an IP address or host name", name, i, (*out)[i]);
            break;
        }
    if (!rc && *n > CT_CLUSTER_MAX_NODES - 1)
        rc = perr(p, v, "%s: more than %d entries", name, CT_CLUSTER_MAX_NODES - 1);
    if (rc) {
        free_list(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- node types ---- */

typedef struct {
    const char *name;
    yaml_node_t *key, *val;
    int min_workers, max_workers; /* max -1: unbounded */
    ct_cluster_node res;          /* resources, store_memory, spill_dir (host unset) */
} node_type;

static bool valid_name(const char *s)
{
    return *s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-:") ==
                     strlen(s);
}

static int parse_resources(parser *p, yaml_node_t *v, const char *type, ct_cluster_node *n)
{
    char sect[160];
    snprintf(sect, sizeof sect, "available_node_types.%s.resources", type);
    if (v->type != YAML_MAPPING_NODE)
        return perr(p, v, "%s must be a mapping, not %s", sect, kind_name(v));
    for (yaml_node_pair_t *kv = v->data.mapping.pairs.start; kv < v->data.mapping.pairs.top; kv++) {
        yaml_node_t *k = node_at(p, kv->key), *val = node_at(p, kv->value);
        const char *ks = scalar(k);
        if (!ks || !valid_name(ks) || ks[0] == '-')
            return perr(p, k,
                        "%s: resource names are [A-Za-z0-9_.:-], not starting with '-', got %s",
                        sect, ks ? ks : kind_name(k));
        for (yaml_node_pair_t *prev = v->data.mapping.pairs.start; prev < kv; prev++)
            if (scalar(node_at(p, prev->key)) && !strcmp(scalar(node_at(p, prev->key)), ks))
                return perr(p, k, "duplicate key '%s' (first at line %zu)", ks,
                            node_at(p, prev->key)->start_mark.line + 1);
        char what[200];
        snprintf(what, sizeof what, "%s.%s", sect, ks);
        double x = 0;
        int rc = get_num(p, val, what, &x);
        if (rc)
            return rc;
        if (!strcmp(ks, "CPU") || !strcmp(ks, "cpus") || !strcmp(ks, "cpu")) {
            n->cpus = x;
        } else if (!strcmp(ks, "GPU") || !strcmp(ks, "gpus") || !strcmp(ks, "gpu")) {
            n->gpus = x;
        } else {
            /* "CPUs", "Gpu", "Memroy": a custom resource nothing asks for, while the node
             * offers the CPUs or GPUs it detects: a likely typo (case differences count).
             * "memory" is Ray's name that requests use (a custom resource in ct). */
            static const char *const builtin[] = {"CPU", "GPU", "memory"};
            const char *near = NULL;
            int nd = 2;
            for (size_t i = 0; i < CT_ARRAY_LEN(builtin); i++) {
                int d = strcmp(ks, builtin[i]) ? ct__edit_distance(ks, builtin[i]) : 99;
                if (d < nd)
                    nd = d, near = builtin[i];
            }
            if (near)
                pwarn(p, k,
                      "%s: resource '%s' becomes a custom resource of that name (did you mean "
                      "'%s'?)",
                      sect, ks, near);
            if (n->n_custom == CT_CLUSTER_MAX_RES)
                return perr(p, k, "%s: more than %d custom resources", sect, CT_CLUSTER_MAX_RES);
            n->custom_name[n->n_custom] = strdup(ks);
            n->custom_amount[n->n_custom++] = x;
        }
    }
    return 0;
}

static void node_free(ct_cluster_node *n)
{
    free(n->host);
    free(n->type_name);
    free(n->store_memory);
    free(n->spill_dir);
    for (int i = 0; i < n->n_custom; i++)
        free(n->custom_name[i]);
    memset(n, 0, sizeof *n);
}

static int parse_type(parser *p, node_type *t)
{
    char sect[160];
    snprintf(sect, sizeof sect, "available_node_types.%s", t->name);
    int rc = check_keys(p, t->val, sect, type_keys);
    if (rc)
        return rc;
    t->res.cpus = t->res.gpus = -1;
    t->max_workers = -1;
    yaml_node_t *v;
    char what[200];
    if ((v = get(p, t->val, "resources", NULL)) && (rc = parse_resources(p, v, t->name, &t->res)))
        return rc;
    snprintf(what, sizeof what, "%s.min_workers", sect);
    if ((v = get(p, t->val, "min_workers", NULL)) &&
        (rc = get_int(p, v, what, 0, CT_CLUSTER_MAX_NODES, &t->min_workers)))
        return rc;
    snprintf(what, sizeof what, "%s.max_workers", sect);
    if ((v = get(p, t->val, "max_workers", NULL)) &&
        (rc = get_int(p, v, what, 0, CT_CLUSTER_MAX_NODES, &t->max_workers)))
        return rc;
    if (t->max_workers >= 0 && t->min_workers > t->max_workers)
        return perr(p, v, "%s: max_workers %d is below min_workers %d", sect, t->max_workers,
                    t->min_workers);
    snprintf(what, sizeof what, "%s.store_memory", sect);
    if ((v = get(p, t->val, "store_memory", NULL)) &&
        (rc = get_size(p, v, what, &t->res.store_memory)))
        return rc;
    snprintf(what, sizeof what, "%s.spill_dir", sect);
    if ((v = get(p, t->val, "spill_dir", NULL)) &&
        (rc = get_path(p, v, what, false, &t->res.spill_dir)))
        return rc;
    if ((v = get(p, t->val, "node_config", NULL)) && v->type != YAML_MAPPING_NODE)
        return perr(p, v, "%s.node_config must be a mapping, not %s", sect, kind_name(v));
    return 0;
}

/* Copies type resources into a node to start. */
static int node_from_type(ct_cluster_node *dst, const node_type *t, const char *host,
                          const char *store_memory, const char *spill_root, const char *cluster,
                          int index)
{
    dst->cpus = t ? t->res.cpus : -1;
    dst->gpus = t ? t->res.gpus : -1;
    dst->host = strdup(host);
    dst->type_name = t ? strdup(t->name) : NULL;
    for (int i = 0; t && i < t->res.n_custom; i++) {
        dst->custom_name[i] = strdup(t->res.custom_name[i]);
        dst->custom_amount[i] = t->res.custom_amount[i];
        dst->n_custom++;
    }
    const char *sm = t && t->res.store_memory ? t->res.store_memory : store_memory;
    const char *sd = t && t->res.spill_dir ? t->res.spill_dir : spill_root;
    dst->store_memory = sm ? strdup(sm) : NULL;
    if (sd && asprintf(&dst->spill_dir, "%s/%s-%d", sd, cluster, index) < 0)
        dst->spill_dir = NULL;
    return dst->host ? 0 : ct__error(CT_ENOMEM, "out of memory");
}

static int parse_root(parser *p, yaml_node_t *root)
{
    ct_cluster_config *c = p->cfg;
    static const char *const top[] = {"cluster_name",
                                      "max_workers",
                                      "provider",
                                      "auth",
                                      "setup_commands",
                                      "head_setup_commands",
                                      "worker_setup_commands",
                                      "head_start_ray_commands",
                                      "worker_start_ray_commands",
                                      "head_start_commands",
                                      "worker_start_commands",
                                      "head_node_type",
                                      "available_node_types",
                                      "ct",
                                      NULL};
    const char *prov_keys[16] = {"type"};
    ct__cfg_workers w = {.n_workers = -1};
    node_type types[32];
    int n_types = 0, rc = 0;
    char *store_memory = NULL, *spill_root = NULL, *head_type_name = NULL;
    yaml_node_t *v, *k, *prov, *max_node = NULL;
    char names[256];
    memset(types, 0, sizeof types);

    if (root->type != YAML_MAPPING_NODE) {
        rc = perr(p, root, "the file must be a mapping (cluster_name, provider, ...), not %s",
                  kind_name(root));
        goto out;
    }
    if ((rc = check_keys(p, root, "", top)))
        goto out;
    if (!(v = get(p, root, "cluster_name", NULL))) {
        rc = perr(p, root, "missing required key 'cluster_name'");
        goto out;
    }
    if ((rc = get_str(p, v, "cluster_name", &c->cluster_name)))
        goto out;
    if (!valid_name(c->cluster_name) || strchr(c->cluster_name, ':') || c->cluster_name[0] == '.' ||
        c->cluster_name[0] == '-' || strlen(c->cluster_name) > 100) {
        rc = perr(p, v,
                  "cluster_name: '%s' must be 1-100 of [A-Za-z0-9_.-], not starting with '.' or "
                  "'-'",
                  c->cluster_name);
        goto out;
    }
    c->max_workers = -1;
    if ((max_node = get(p, root, "max_workers", NULL)) &&
        (rc = get_int(p, max_node, "max_workers", 0, CT_CLUSTER_MAX_NODES, &c->max_workers)))
        goto out;

    /* provider */
    if (!(prov = get(p, root, "provider", NULL))) {
        rc = perr(p, root, "missing required key 'provider'");
        goto out;
    }
    if (prov->type != YAML_MAPPING_NODE) {
        rc = perr(p, prov, "provider must be a mapping, not %s", kind_name(prov));
        goto out;
    }
    if (!(v = get(p, prov, "type", NULL))) {
        rc = perr(p, prov, "provider: missing required key 'type' (%s)",
                  ct__cluster_provider_names(names, sizeof names));
        goto out;
    }
    const char *ty = scalar(v);
    if (!(c->provider = ct__cluster_provider_find(ty))) {
        rc = perr(p, v, "provider.type must be %s, got %s%s%s",
                  ct__cluster_provider_names(names, sizeof names), ty ? "'" : "",
                  ty ? ty : kind_name(v), ty ? "'" : "");
        goto out;
    }
    for (int i = 0; c->provider->keys[i] && i < 14; i++)
        prov_keys[i + 1] = c->provider->keys[i];
    if ((rc = check_keys(p, prov, "provider", prov_keys)) ||
        (rc = c->provider->parse(p, prov, root, c, &w)))
        goto out;
    char **worker_ips = w.worker_hosts;
    int n_worker_ips = w.n_workers;

    /* commands */
    struct {
        const char *key;
        char ***dst;
        int *n;
    } lists[] = {
        {"setup_commands", &c->setup, &c->n_setup},
        {"head_setup_commands", &c->head_setup, &c->n_head_setup},
        {"worker_setup_commands", &c->worker_setup, &c->n_worker_setup},
        {"head_start_ray_commands", &c->head_start, &c->n_head_start},
        {"worker_start_ray_commands", &c->worker_start, &c->n_worker_start},
        {"head_start_commands", &c->head_start, &c->n_head_start},
        {"worker_start_commands", &c->worker_start, &c->n_worker_start},
    };
    for (size_t i = 0; i < CT_ARRAY_LEN(lists); i++) {
        if (!(v = get(p, root, lists[i].key, &k)))
            continue;
        if (*lists[i].dst) {
            rc = perr(p, k,
                      "%s: the start commands are already given (ray and ct names are "
                      "the same key)",
                      lists[i].key);
            goto out;
        }
        if ((rc = get_str_list(p, v, lists[i].key, lists[i].dst, lists[i].n)))
            goto out;
        if (i >= 3 && *lists[i].n == 0) {
            rc = perr(p, v, "%s: empty (leave the key out for the default command)", lists[i].key);
            goto out;
        }
    }

    /* ct (the provider's parse has set its defaults of head_port and head_bind) */
    c->heartbeat_ms = 100;
    c->dead_after_ms = 10000;
    c->head_grace_ms = 60000;
    c->start_timeout_s = 30;
    c->copy_binaries = true;
    yaml_node_t *ctn = get(p, root, "ct", NULL);
    if (ctn) {
        if ((rc = check_keys(p, ctn, "ct", ct_keys)))
            goto out;
        struct {
            const char *key;
            int *dst;
            long lo, hi;
        } ints[] = {{"head_port", &c->head_port, 0, 65535},
                    {"heartbeat_ms", &c->heartbeat_ms, 1, 60000},
                    {"heartbeat_rate", &c->heartbeat_rate, 1, 10000000},
                    {"dead_after_ms", &c->dead_after_ms, 1, 3600000},
                    {"head_grace_ms", &c->head_grace_ms, 1, 3600000},
                    {"start_timeout_s", &c->start_timeout_s, 1, 3600},
                    {"dashboard_port", &c->dashboard_port, 0, 65535},
                    {"max_nodes", &c->max_nodes, 1, 1 << 24},
                    {"max_actors", &c->max_actors, 1, 1 << 24},
                    {"max_placement_groups", &c->max_placement_groups, 1, 1 << 24},
                    {"max_objects", &c->max_objects, 1, 1 << 24},
                    {"max_kv_keys", &c->max_kv_keys, 1, 1 << 24},
                    {"max_subscribers", &c->max_subscribers, 1, 1 << 24}};
        for (size_t i = 0; i < CT_ARRAY_LEN(ints); i++) {
            char what[64];
            snprintf(what, sizeof what, "ct.%s", ints[i].key);
            if ((v = get(p, ctn, ints[i].key, NULL)) &&
                (rc = get_int(p, v, what, ints[i].lo, ints[i].hi, ints[i].dst)))
                goto out;
        }
        if ((v = get(p, ctn, "store_memory", NULL)) &&
            (rc = get_size(p, v, "ct.store_memory", &store_memory)))
            goto out;
        if ((v = get(p, ctn, "spill_dir", NULL)) &&
            (rc = get_path(p, v, "ct.spill_dir", false, &spill_root)))
            goto out;
        if ((v = get(p, ctn, "bin_dir", NULL)) &&
            (rc = get_path(p, v, "ct.bin_dir", true, &c->bin_dir)))
            goto out;
        if ((v = get(p, ctn, "remote_dir", NULL)) &&
            (rc = get_path(p, v, "ct.remote_dir", true, &c->remote_dir)))
            goto out;
        if ((v = get(p, ctn, "head_bind", NULL)) &&
            (rc = get_host(p, v, "ct.head_bind", &c->head_bind)))
            goto out;
        if ((v = get(p, ctn, "copy_binaries", NULL)) &&
            (rc = get_bool(p, v, "ct.copy_binaries", &c->copy_binaries)))
            goto out;
        if ((v = get(p, ctn, "head_runs_node", NULL)) &&
            (rc = get_bool(p, v, "ct.head_runs_node", &c->head_runs_node)))
            goto out;
    }
    if (!c->remote_dir && !(c->remote_dir = strdup("~/.ct"))) {
        rc = ct__error(CT_ENOMEM, "out of memory");
        goto out;
    }

    /* node types */
    yaml_node_t *head_type_node = get(p, root, "head_node_type", NULL);
    if (head_type_node && (rc = get_str(p, head_type_node, "head_node_type", &head_type_name)))
        goto out;
    yaml_node_t *ant = get(p, root, "available_node_types", NULL);
    if (ant) {
        if (ant->type != YAML_MAPPING_NODE) {
            rc = perr(p, ant, "available_node_types must be a mapping, not %s", kind_name(ant));
            goto out;
        }
        for (yaml_node_pair_t *kv = ant->data.mapping.pairs.start; kv < ant->data.mapping.pairs.top;
             kv++) {
            yaml_node_t *tk = node_at(p, kv->key);
            const char *tn = scalar(tk);
            if (!tn || !valid_name(tn)) {
                rc = perr(p, tk, "available_node_types: type names are [A-Za-z0-9_.:-], got %s",
                          tn ? tn : kind_name(tk));
                goto out;
            }
            for (int j = 0; j < n_types; j++)
                if (!strcmp(types[j].name, tn)) {
                    rc = perr(p, tk, "duplicate key '%s' (first at line %zu)", tn,
                              types[j].key->start_mark.line + 1);
                    goto out;
                }
            if (n_types == (int)CT_ARRAY_LEN(types)) {
                rc = perr(p, tk, "available_node_types: more than %d types",
                          (int)CT_ARRAY_LEN(types));
                goto out;
            }
            types[n_types] = (node_type){.name = tn, .key = tk, .val = node_at(p, kv->value)};
            if ((rc = parse_type(p, &types[n_types++])))
                goto out;
        }
    }
    node_type *head_t = NULL;
    if (head_type_name) {
        for (int j = 0; j < n_types; j++)
            if (!strcmp(types[j].name, head_type_name))
                head_t = &types[j];
        if (!head_t) {
            rc = perr(p, head_type_node, "head_node_type: '%s' is not in available_node_types",
                      head_type_name);
            goto out;
        }
    }
    /* workers: each worker type gets its min_workers, the rest fill types in order up to their
     * max_workers; with no count given (local), the sum of min_workers */
    int sum_min = 0;
    for (int j = 0; j < n_types; j++)
        if (&types[j] != head_t)
            sum_min += types[j].min_workers;
    int n_workers = n_worker_ips >= 0 ? n_worker_ips : sum_min;
    if (n_workers < sum_min) {
        rc = perr(p, w.where ? w.where : prov,
                  "the node types ask for %d workers (min_workers), the provider gives %d", sum_min,
                  n_workers);
        goto out;
    }
    if (c->max_workers >= 0 && n_workers > c->max_workers) {
        rc = perr(p, max_node, "max_workers is %d but the provider gives %d workers",
                  c->max_workers, n_workers);
        goto out;
    }
    if (n_workers == 0 && !c->head_runs_node) {
        rc = perr(p, prov, "no nodes to start: give %s, min_workers, or ct.head_runs_node: true",
                  w.hint ? w.hint : "provider.nodes");
        goto out;
    }
    int assigned[32] = {0}, left = n_workers - sum_min;
    for (int j = 0; j < n_types; j++) {
        if (&types[j] == head_t)
            continue;
        assigned[j] = types[j].min_workers;
        int room = types[j].max_workers < 0 ? left : types[j].max_workers - assigned[j];
        int take = room < left ? room : left;
        assigned[j] += take;
        left -= take;
    }
    bool any_worker_type = false;
    for (int j = 0; j < n_types; j++)
        any_worker_type |= &types[j] != head_t;
    if (left > 0 && any_worker_type) {
        rc = perr(p, ant,
                  "the provider gives %d workers but the node types' max_workers allow "
                  "%d",
                  n_workers, n_workers - left);
        goto out;
    }
    int idx = 0;
    for (int j = 0; j <= n_types && idx < n_workers; j++) {
        node_type *t = j < n_types ? &types[j] : NULL;
        if (t == head_t && t)
            continue;
        int cnt = t ? assigned[j] : n_workers - idx; /* no worker type: detected resources */
        for (int m = 0; m < cnt && idx < n_workers; m++, idx++) {
            /* no host: the provider places the nodes (slurm) */
            const char *host = worker_ips ? worker_ips[idx] : c->head_ip ? c->head_ip : "-";
            if ((rc = node_from_type(&c->nodes[c->n_nodes], t, host, store_memory, spill_root,
                                     c->cluster_name, idx + 1)))
                goto out;
            c->n_nodes++;
        }
    }
    if (c->provider->check && (rc = c->provider->check(p, root, c)))
        goto out;
    if (c->head_runs_node) {
        if ((rc = node_from_type(&c->nodes[c->n_nodes], head_t, c->head_ip, store_memory,
                                 spill_root, c->cluster_name, c->n_nodes + 1)))
            goto out;
        c->n_nodes++;
    }
out:
    for (int j = 0; j < n_types; j++)
        node_free(&types[j].res);
    free_list(w.worker_hosts);
    free(store_memory);
    free(spill_root);
    free(head_type_name);
    return rc;
}

int ct_cluster_config_parse(const char *name, const char *text, size_t len, ct_cluster_config **out)
{
    if (!name || !text || !out)
        return ct__error(CT_EINVAL, "ct_cluster_config_parse: NULL argument");
    *out = NULL;
    yaml_parser_t yp;
    yaml_document_t doc;
    bool have_doc = false;
    int rc = 0;
    ct_cluster_config *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(name))) {
        free(c);
        return ct__error(CT_ENOMEM, "out of memory");
    }
    if (!yaml_parser_initialize(&yp)) {
        rc = ct__error(CT_ENOMEM, "%s: cannot initialize the YAML parser", name);
        goto out_noparser;
    }
    yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
    if (!yaml_parser_load(&yp, &doc)) {
        size_t line = yp.problem_mark.line + 1, col = yp.problem_mark.column + 1;
        rc = ct__error(CT_EINVAL, "%s:%zu:%zu: YAML syntax error: %s%s%s", name, line, col,
                       yp.problem ? yp.problem : "unknown", yp.context ? " " : "",
                       yp.context ? yp.context : "");
        goto out;
    }
    have_doc = true;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    parser p = {.file = name, .doc = &doc, .cfg = c};
    if (!root) {
        rc = perr(&p, NULL, "empty file (expected a mapping with cluster_name and provider)");
        goto out;
    }
    rc = parse_root(&p, root);
out:
    if (have_doc)
        yaml_document_delete(&doc);
    yaml_parser_delete(&yp);
out_noparser:
    if (rc)
        ct_cluster_config_destroy(&c);
    *out = c;
    return rc;
}

int ct_cluster_config_load(const char *path, ct_cluster_config **out)
{
    if (!path || !out)
        return ct__error(CT_EINVAL, "ct_cluster_config_load: NULL argument");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct__error(-errno, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    int rc = 0;
    do {
        if (n + 4096 > cap) {
            char *nb = realloc(buf, cap = cap * 2 + 8192);
            if (!nb) {
                rc = ct__error(CT_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = nb;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0 && n < (1 << 24));
    if (ferror(f)) {
        rc = ct__error(CT_EIO, "%s: read error", path);
        goto out;
    }
    rc = ct_cluster_config_parse(path, buf, n, out);
out:
    free(buf);
    fclose(f);
    return rc;
}

void ct_cluster_config_destroy(ct_cluster_config **cfg)
{
    if (!cfg || !*cfg)
        return;
    ct_cluster_config *c = *cfg;
    char **lists[] = {c->setup, c->head_setup, c->worker_setup, c->head_start, c->worker_start};
    for (size_t i = 0; i < CT_ARRAY_LEN(lists); i++) {
        for (int j = 0; lists[i] && lists[i][j]; j++)
            free(lists[i][j]);
        free(lists[i]);
    }
    for (int i = 0; i < c->n_nodes; i++)
        node_free(&c->nodes[i]);
    free(c->path);
    free(c->cluster_name);
    free(c->head_ip);
    if (c->provider && c->provider->free_conf)
        c->provider->free_conf(c->provider_conf);
    free(c->head_bind);
    free(c->bin_dir);
    free(c->remote_dir);
    for (int i = 0; i < c->n_warnings; i++)
        free(c->warnings[i]);
    free(c);
    *cfg = NULL;
}
