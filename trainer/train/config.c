/* trainer/train/config.c — the creator context (trainer_ctx) and its "key=value,..." config:
 * parsing it, the typed reads creators and steps make (trainer_config_*, which remember each key
 * asked for), the check that every key was read (with a "did you mean"), the context's
 * accessors (trainer_ctx_*), and data paths made absolute for replicas. Not here: the registry
 * of creators and building objects from them (registry.c). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "internal.h"

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

int ct__trainer_ctx_init(trainer_ctx *ctx, const char *config, int rank, int world, uint64_t seed,
                         int64_t start_epoch, int64_t epochs, bool driver)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->rank = rank;
    ctx->world = world;
    ctx->seed = seed;
    ctx->start_epoch = start_epoch;
    ctx->epochs = epochs;
    ctx->driver = driver;
    ctx->config = config ? config : "";
    char *copy = strdup(ctx->config), *save = NULL;
    int rc = 0;
    if (!copy)
        return ct__error(CT_ENOMEM, "trainer config: out of memory");
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *pair = trim(tok);
        if (!*pair)
            continue;
        char *eq = strchr(pair, '=');
        if (!eq) {
            rc = ct__error(CT_EINVAL, "trainer config: \"%s\" is not key=value", pair);
            goto out;
        }
        *eq = 0;
        char *k = trim(pair), *v = trim(eq + 1);
        if (!*k || strlen(k) >= TR_NAME_MAX) {
            rc = ct__error(CT_EINVAL, "trainer config: empty or too long key in \"%s=%s\"", k, v);
            goto out;
        }
        for (int i = 0; i < ctx->nkeys; i++)
            if (!strcmp(ctx->keys[i], k)) {
                rc = ct__error(CT_EINVAL, "trainer config: key \"%s\" given twice", k);
                goto out;
            }
        if (ctx->nkeys == TR_MAX_KEYS) {
            rc = ct__error(CT_EINVAL, "trainer config: more than %d keys", TR_MAX_KEYS);
            goto out;
        }
        snprintf(ctx->keys[ctx->nkeys], TR_NAME_MAX, "%s", k);
        if (!(ctx->vals[ctx->nkeys++] = strdup(v))) {
            rc = ct__error(CT_ENOMEM, "trainer config: out of memory");
            goto out;
        }
    }
    /* "devices_per_replica": how many devices each replica's model spans (trainer_ctx_device) */
    ctx->ndevices = 1;
    for (int i = 0; i < ctx->nkeys; i++)
        if (!strcmp(ctx->keys[i], "devices_per_replica")) {
            char *end;
            long k = strtol(ctx->vals[i], &end, 10);
            ctx->used[i] = true;
            if (end == ctx->vals[i] || *end || k < 1 || k > CT_MAX_DEVICE_INDEX) {
                rc = ct__error(CT_EINVAL,
                               "trainer config: key \"devices_per_replica\" = \"%s\": not an "
                               "integer from 1 to %d",
                               ctx->vals[i], CT_MAX_DEVICE_INDEX);
                goto out;
            }
            ctx->ndevices = (int)k;
        }
    /* "precision": the engine's, read here so every ctx knows it (trainer_ctx_precision) */
    for (int i = 0; i < ctx->nkeys; i++)
        if (!strcmp(ctx->keys[i], "precision")) {
            ctx->used[i] = true;
            if (ct_precision_parse(ctx->vals[i], &ctx->precision) < 0) {
                rc = ct__error(CT_EINVAL, "trainer config: key \"precision\": %s", ct_last_error());
                goto out;
            }
        }
out:
    free(copy);
    if (rc)
        ct__trainer_ctx_free(ctx);
    return rc;
}

void ct__trainer_ctx_free(trainer_ctx *ctx)
{
    for (int i = 0; i < ctx->nkeys; i++)
        free(ctx->vals[i]);
    ctx->nkeys = 0;
}

int ct__trainer_ctx_check(trainer_ctx *ctx, bool check_unused)
{
    if (ctx->err[0])
        return ct__error(CT_EINVAL, "%s", ctx->err);
    for (int i = 0; check_unused && i < ctx->nkeys; i++) {
        if (ctx->used[i])
            continue;
        /* the nearest key something asked for: the likely intended one */
        const char *near = NULL;
        int bd = 99;
        for (int k = 0; k < ctx->nasked; k++) {
            int d = ct__edit_distance(ctx->keys[i], ctx->asked[k]);
            if (d < bd) {
                bd = d;
                near = ctx->asked[k];
            }
        }
        if (near && bd <= ct__edit_limit(ctx->keys[i]))
            return ct__error(CT_EINVAL,
                             "trainer config: key \"%s\" is not read by any creator or chosen "
                             "step: did you mean \"%s\"?",
                             ctx->keys[i], near);
        return ct__error(CT_EINVAL,
                         "trainer config: key \"%s\" is not read by any creator or chosen step "
                         "(a typo? a key a custom step reads is declared with "
                         "trainer_register_step_keys)",
                         ctx->keys[i]);
    }
    return 0;
}

void trainer_ctx_fail(trainer_ctx *ctx, const char *fmt, ...)
{
    if (!ctx || ctx->err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
}

static const char *find(trainer_ctx *ctx, const char *key)
{
    bool known = false; /* remembered as asked for (a "did you mean" candidate) */
    for (int k = 0; ctx && key && k < ctx->nasked && !known; k++)
        known = !strcmp(ctx->asked[k], key);
    if (ctx && key && !known && ctx->nasked < (int)(sizeof ctx->asked / sizeof ctx->asked[0]) &&
        strlen(key) < TR_NAME_MAX)
        snprintf(ctx->asked[ctx->nasked++], TR_NAME_MAX, "%s", key);
    for (int i = 0; ctx && key && i < ctx->nkeys; i++)
        if (!strcmp(ctx->keys[i], key)) {
            ctx->used[i] = true;
            return ctx->vals[i];
        }
    return NULL;
}

double trainer_config_double(trainer_ctx *ctx, const char *key, double def)
{
    const char *v = find(ctx, key);
    if (!v)
        return def;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end || errno) {
        trainer_ctx_fail(ctx, "trainer config: key \"%s\": \"%s\" is not a number", key, v);
        return def;
    }
    return d;
}

int64_t trainer_config_int(trainer_ctx *ctx, const char *key, int64_t def)
{
    const char *v = find(ctx, key);
    if (!v)
        return def;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno) {
        trainer_ctx_fail(ctx, "trainer config: key \"%s\": \"%s\" is not an integer", key, v);
        return def;
    }
    return x;
}

bool trainer_config_bool(trainer_ctx *ctx, const char *key, bool def)
{
    const char *v = find(ctx, key);
    if (!v)
        return def;
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"))
        return true;
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no"))
        return false;
    trainer_ctx_fail(ctx, "trainer config: key \"%s\": \"%s\" is not a boolean", key, v);
    return def;
}

const char *trainer_config_str(trainer_ctx *ctx, const char *key, const char *def)
{
    const char *v = find(ctx, key);
    return v ? v : def;
}

ct_dtype trainer_ctx_precision(const trainer_ctx *ctx)
{
    return ctx->precision;
}

int trainer_ctx_num_devices(const trainer_ctx *ctx)
{
    return ctx->ndevices;
}

ct_device trainer_ctx_device(const trainer_ctx *ctx, int i)
{
    if (i < 0 || i >= ctx->ndevices || ct_device_kind(ctx->device) == CT_CPU)
        return CT_CPU;
    return ct_device_make(ct_device_kind(ctx->device), ct_device_index(ctx->device) + i);
}

int trainer_ctx_rank(const trainer_ctx *ctx)
{
    return ctx ? ctx->rank : 0;
}
int trainer_ctx_world_size(const trainer_ctx *ctx)
{
    return ctx ? ctx->world : 1;
}
uint64_t trainer_ctx_seed(const trainer_ctx *ctx)
{
    return ctx ? ctx->seed : 0;
}
int64_t trainer_ctx_start_epoch(const trainer_ctx *ctx)
{
    return ctx ? ctx->start_epoch : 0;
}
bool trainer_ctx_is_driver(const trainer_ctx *ctx)
{
    return ctx && ctx->driver;
}
const char *trainer_ctx_config(const trainer_ctx *ctx)
{
    return ctx ? ctx->config : "";
}

/* Whether key is one of the comma-separated keys. */
static bool key_listed(const char *keys, const char *key, size_t klen)
{
    for (const char *k = keys; *k;) {
        size_t n = strcspn(k, ",");
        if (n == klen && !strncmp(k, key, klen))
            return true;
        k += n + (k[n] == ',');
    }
    return false;
}

int ct__trainer_absolute_paths(const char *config, const char *keys, char *out, size_t cap)
{
    char cwd[4096];
    size_t used = 0;
    bool have_cwd = false;
    out[0] = 0;
    for (const char *p = config ? config : ""; *p;) {
        size_t n = strcspn(p, ",");
        const char *eq = memchr(p, '=', n);
        const char *k = p, *v = eq ? eq + 1 : NULL, *end = p + n;
        while (k < (eq ? eq : end) && isspace((unsigned char)*k))
            k++;
        size_t klen = eq ? (size_t)(eq - k) : 0;
        while (klen && isspace((unsigned char)k[klen - 1]))
            klen--;
        while (v && v < end && isspace((unsigned char)*v))
            v++;
        int w;
        if (v && v < end && *v != '/' && klen && key_listed(keys, k, klen)) {
            if (!have_cwd && !getcwd(cwd, sizeof cwd))
                return ct__error(CT_EIO,
                                 "trainer_create: config key \"%.*s\": the relative path \"%.*s\" "
                                 "needs the working directory, which getcwd failed to give: %s",
                                 (int)klen, k, (int)(end - v), v, strerror(errno));
            have_cwd = true;
            size_t vlen = (size_t)(end - v);
            while (vlen >= 2 && v[0] == '.' && v[1] == '/') { /* "./x" is "x" */
                v += 2;
                vlen -= 2;
            }
            while (vlen && isspace((unsigned char)v[vlen - 1]))
                vlen--;
            w = snprintf(out + used, cap - used, "%s%.*s=%s/%.*s", used ? "," : "", (int)klen, k,
                         cwd, (int)vlen, v);
        } else {
            w = snprintf(out + used, cap - used, "%s%.*s", used ? "," : "", (int)n, p);
        }
        if (w < 0 || (size_t)w >= cap - used)
            return ct__error(CT_EINVAL,
                             "trainer_create: opts.config with its data paths made absolute is "
                             "longer than %zu bytes: give shorter paths",
                             cap - 1);
        used += (size_t)w;
        p += n + (p[n] == ',');
    }
    return 0;
}
