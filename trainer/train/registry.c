/* trainer/train/registry.c — the process-wide creator registry, the creator context with its
 * "key=value,..." config, and building a replica's objects (hook, data, models, optimizers,
 * losses, scheduler) from registered names (model, optimizer and loss: comma-separated lists). Not
 * here: the actor, the driver, checkpoints. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actor/runtime.h"
#include "common/common.h"
#include "ct/nn.h"
#include "internal.h"

#define TR_MAX_ENTRIES 64
#define TR_MAX_LATE 16

typedef struct entry {
    char name[TR_NAME_MAX];
    void *fn;
    char keys[TR_LIST_MAX]; /* a step's config keys (trainer_register_step_keys); "" none */
} entry;

/* The registry: one of the two mutable globals STYLE.md allows. Written before ct_init. */
static entry reg[TR_NKINDS][TR_MAX_ENTRIES];
static int nreg[TR_NKINDS];
/* names refused because they came after ct_init, so that trainer_create can say why */
static struct {
    tr_kind kind;
    char name[TR_NAME_MAX];
} late[TR_MAX_LATE];
static int nlate;

static const char *kind_names[TR_NKINDS] = {"model",      "data",         "optimizer",
                                            "loss",       "scheduler",    "initialization_hook",
                                            "train_step", "validate_step"};

const char *ct__trainer_kind_name(tr_kind kind)
{
    return kind >= 0 && kind < TR_NKINDS ? kind_names[kind] : "?";
}

static int reg_add(tr_kind kind, const char *name, void *fn)
{
    if (!name || !*name || !fn)
        return ct__error(CT_EINVAL, "trainer_register_%s: %s is NULL or empty",
                         ct__trainer_kind_name(kind), !fn ? "fn" : "name");
    if (strlen(name) >= TR_NAME_MAX)
        return ct__error(CT_EINVAL, "trainer_register_%s: name \"%s\" longer than %d bytes",
                         ct__trainer_kind_name(kind), name, TR_NAME_MAX - 1);
    for (int i = 0; i < nreg[kind]; i++)
        if (!strcmp(reg[kind][i].name, name))
            return ct__error(CT_EEXIST, "trainer_register_%s: \"%s\" is already registered",
                             ct__trainer_kind_name(kind), name);
    /* A replica is this program run again up to ct_init, where it starts serving: it never
     * sees a later registration, and would fail to find the name. */
    if (ct__registration_closed()) {
        if (nlate < TR_MAX_LATE) {
            late[nlate].kind = kind;
            snprintf(late[nlate++].name, TR_NAME_MAX, "%s", name);
        }
        return ct__error(CT_EINVAL,
                         "trainer_register_%s(\"%s\"): called after ct_init(); register every "
                         "creator and step before ct_init() (replicas run the program only up "
                         "to ct_init(), so they would never see this one)",
                         ct__trainer_kind_name(kind), name);
    }
    if (nreg[kind] == TR_MAX_ENTRIES)
        return ct__error(CT_ENOSPC, "trainer_register_%s: more than %d names",
                         ct__trainer_kind_name(kind), TR_MAX_ENTRIES);
    snprintf(reg[kind][nreg[kind]].name, TR_NAME_MAX, "%s", name);
    reg[kind][nreg[kind]].keys[0] = 0;
    reg[kind][nreg[kind]++].fn = fn;
    return 0;
}

int ct__trainer_not_registered(tr_kind kind, const char *name, const char *what)
{
    const char *k = ct__trainer_kind_name(kind);
    for (int i = 0; i < nlate; i++)
        if (late[i].kind == kind && !strcmp(late[i].name, name))
            return ct__error(CT_ENOTREG,
                             "%s: %s \"%s\" was registered after ct_init() (and refused): "
                             "call trainer_register_%s before ct_init()",
                             what, k, name, k);
    char list[1024] = "";
    size_t n = 0;
    for (int i = 0; i < nreg[kind] && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"", n ? ", " : "",
                              reg[kind][i].name);
    for (int i = 0; ct__trainer_builtin_name(kind, i) && n < sizeof list; i++) {
        const char *b = ct__trainer_builtin_name(kind, i);
        bool shadowed = false;
        for (int j = 0; j < nreg[kind] && !shadowed; j++)
            shadowed = !strcmp(reg[kind][j].name, b);
        if (!shadowed)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"", n ? ", " : "", b);
    }
    return ct__error(CT_ENOTREG, "%s: no %s named \"%s\" is registered (%s%s)", what, k, name,
                     n ? "registered: " : "none is", n ? list : "; trainer_register_* adds one");
}

int trainer_register_step_keys(const char *step, const char *keys)
{
    char names[TR_MAX_KEYS][TR_NAME_MAX];
    int found = 0;
    if (!step || !keys || !*keys)
        return ct__error(CT_EINVAL, "trainer_register_step_keys: %s is NULL or empty",
                         !step ? "step" : "keys");
    if (strlen(keys) >= TR_LIST_MAX)
        return ct__error(CT_EINVAL, "trainer_register_step_keys(\"%s\"): keys longer than %d bytes",
                         step, TR_LIST_MAX - 1);
    int n = ct__trainer_split_names(keys, names, TR_MAX_KEYS, "trainer_register_step_keys: keys");
    if (n < 0)
        return n;
    for (tr_kind kind = TR_TRAIN_STEP; kind <= TR_VAL_STEP; kind++)
        for (int i = 0; i < nreg[kind]; i++)
            if (!strcmp(reg[kind][i].name, step)) {
                snprintf(reg[kind][i].keys, TR_LIST_MAX, "%s", keys);
                found++;
            }
    if (!found)
        return ct__error(CT_ENOTREG,
                         "trainer_register_step_keys: no train or validate step named \"%s\" is "
                         "registered (register the step first)",
                         step);
    return 0;
}

const char *ct__trainer_step_keys(tr_kind kind, const char *step)
{
    for (int i = 0; step && i < nreg[kind]; i++)
        if (!strcmp(reg[kind][i].name, step))
            return reg[kind][i].keys;
    return "";
}

void *ct__trainer_lookup(tr_kind kind, const char *name)
{
    if (!name || kind < 0 || kind >= TR_NKINDS)
        return NULL;
    for (int i = 0; i < nreg[kind]; i++)
        if (!strcmp(reg[kind][i].name, name))
            return reg[kind][i].fn;
    return ct__trainer_builtin(kind, name);
}

int ct__trainer_split_names(const char *list, char names[][TR_NAME_MAX], int cap, const char *what)
{
    int n = 0;
    const char *p = list ? list : "";
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        if (len == 0 || len >= TR_NAME_MAX)
            return ct__error(CT_EINVAL, "%s \"%s\": %s name", what, list ? list : "",
                             len ? "a too long" : "an empty");
        if (n == cap)
            return ct__error(CT_EINVAL, "%s \"%s\": more than %d names", what, list, cap);
        memcpy(names[n], p, len);
        names[n++][len] = 0;
        if (!end)
            return n;
        p = end + 1;
    }
}

int trainer_register_model(const char *name, trainer_model_creator fn)
{
    return reg_add(TR_MODEL, name, (void *)fn);
}
int trainer_register_data(const char *name, trainer_data_creator fn)
{
    return reg_add(TR_DATA, name, (void *)fn);
}
int trainer_register_optimizer(const char *name, trainer_optimizer_creator fn)
{
    return reg_add(TR_OPTIM, name, (void *)fn);
}
int trainer_register_loss(const char *name, trainer_loss_creator fn)
{
    return reg_add(TR_LOSS, name, (void *)fn);
}
int trainer_register_scheduler(const char *name, trainer_scheduler_creator fn)
{
    return reg_add(TR_SCHED, name, (void *)fn);
}
int trainer_register_hook(const char *name, trainer_hook fn)
{
    return reg_add(TR_HOOK, name, (void *)fn);
}
int trainer_register_train_step(const char *name, trainer_step_fn fn)
{
    return reg_add(TR_TRAIN_STEP, name, (void *)fn);
}
int trainer_register_validate_step(const char *name, trainer_step_fn fn)
{
    return reg_add(TR_VAL_STEP, name, (void *)fn);
}

/* ---- the context and its config ---- */

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

static const char *find(trainer_ctx *ctx, const char *key);

void ct__trainer_ctx_use_step_keys(trainer_ctx *ctx, const tr_spec *spec)
{
    const char *lists[2] = {ct__trainer_step_keys(TR_TRAIN_STEP, spec->train_step),
                            ct__trainer_step_keys(TR_VAL_STEP, spec->validate_step)};
    char names[TR_MAX_KEYS][TR_NAME_MAX];
    for (int l = 0; l < 2; l++) {
        int n = lists[l][0] ? ct__trainer_split_names(lists[l], names, TR_MAX_KEYS, "keys") : 0;
        for (int i = 0; i < n; i++)
            find(ctx, names[i]);
    }
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

/* ---- building the objects ---- */

void ct__trainer_data_free(trainer_data *d)
{
    ct_dataset_destroy(&d->train);
    ct_dataset_destroy(&d->val);
    for (int i = 0; i < 4; i++)
        ct_dataset_destroy(&d->keep[i]);
}

void ct__trainer_state_free(tr_state *st)
{
    if (!st)
        return;
    ct_sched_destroy(&st->sched);
    ct_grad_scaler_destroy(&st->scaler);
    for (int i = 0; i < TR_MAX_MODELS; i++) {
        ct_optim_destroy(&st->optims[i]);
        if (st->models[i])
            ct_module_on_grad_ready(st->models[i], NULL, NULL);
        ct_module_destroy(&st->models[i]);
    }
    if (st->has_data)
        ct__trainer_data_free(&st->data);
    memset(st, 0, sizeof *st);
}

/* The creator's message when it left one, else ct_last_error(). */
static int creator_failed(trainer_ctx *ctx, tr_kind kind, const char *name, int rc)
{
    const char *why = ctx->err[0] ? ctx->err : ct_last_error();
    char msg[700];
    snprintf(msg, sizeof msg, "%s", why && *why ? why : "no message");
    return ct__error(rc < 0 ? rc : CT_EINVAL, "trainer: %s creator \"%s\" failed: %s",
                     ct__trainer_kind_name(kind), name, msg);
}

/* The creator of kind and name; NULL with CT_ENOTREG's message when this process lacks it (a
 * replica whose program registered it only in the driver, or after ct_init). */
static void *lookup_here(const trainer_ctx *ctx, tr_kind kind, const char *name)
{
    void *fn = ct__trainer_lookup(kind, name);
    if (!fn) {
        char what[160];
        snprintf(what, sizeof what,
                 "trainer %s %d (pid %d; creators must be registered before ct_init(), in every "
                 "process)",
                 ctx->driver ? "driver" : "replica", ctx->rank, (int)getpid());
        ct__trainer_not_registered(kind, name, what);
    }
    return fn;
}

int ct__trainer_data_build(const tr_spec *spec, trainer_ctx *ctx, trainer_data *d)
{
    memset(d, 0, sizeof *d);
    trainer_data_creator dc = (trainer_data_creator)lookup_here(ctx, TR_DATA, spec->data);
    if (!dc)
        return CT_ENOTREG;
    int rc = dc(ctx, d);
    if (rc < 0 || ctx->err[0] || !d->train) {
        rc = creator_failed(ctx, TR_DATA, spec->data, rc < 0 ? rc : CT_EINVAL);
        ct__trainer_data_free(d);
        return rc;
    }
    return 0;
}

int ct__trainer_state_build(const tr_spec *spec, trainer_ctx *ctx, bool with_data, tr_state *st)
{
    memset(st, 0, sizeof *st);
    int rc = 0;
    ctx->device = ctx->driver ? CT_CPU : (ct_device)spec->device;
    if (spec->hook[0]) {
        trainer_hook h = (trainer_hook)lookup_here(ctx, TR_HOOK, spec->hook);
        if (!h) {
            rc = CT_ENOTREG;
            goto fail;
        }
        if ((rc = h(ctx)) < 0 || ctx->err[0]) {
            rc = creator_failed(ctx, TR_HOOK, spec->hook, rc);
            goto fail;
        }
    }
    if (with_data) {
        if ((rc = ct__trainer_data_build(spec, ctx, &st->data)) < 0)
            goto fail;
        st->has_data = true;
    }
    /* the lists: n models, 1 or n optimizer names, 1 or n loss names (trainer_create checked
     * them; a replica gets the same spec) */
    char mnames[TR_MAX_MODELS][TR_NAME_MAX], onames[TR_MAX_MODELS][TR_NAME_MAX],
        lnames[TR_MAX_MODELS][TR_NAME_MAX];
    int nm = ct__trainer_split_names(spec->model, mnames, TR_MAX_MODELS, "opts.model");
    int no =
        nm < 0 ? nm
               : ct__trainer_split_names(spec->optimizer, onames, TR_MAX_MODELS, "opts.optimizer");
    int nl = no < 0 ? no : ct__trainer_split_names(spec->loss, lnames, TR_MAX_MODELS, "opts.loss");
    if ((rc = nl) < 0)
        goto fail;
    if ((no != 1 && no != nm) || (nl != 1 && nl != nm)) {
        rc = ct__error(CT_EINVAL,
                       "trainer_create: opts.%s has %d names for %d models (1 name, or one per "
                       "model)",
                       no != 1 && no != nm ? "optimizer" : "loss", no != 1 && no != nm ? no : nl,
                       nm);
        goto fail;
    }
    st->nmodels = nm;
    ct_nn_manual_seed(spec->seed);
    for (int i = 0; i < nm; i++) {
        trainer_model_creator mc = (trainer_model_creator)lookup_here(ctx, TR_MODEL, mnames[i]);
        if (!mc) {
            rc = CT_ENOTREG;
            goto fail;
        }
        if (!(st->models[i] = mc(ctx)) || ctx->err[0]) {
            rc = creator_failed(ctx, TR_MODEL, mnames[i], CT_EINVAL);
            goto fail;
        }
        /* a replica's model on its device before the optimizer sees the parameters, so that
         * its state is made there too; across devices (devices_per_replica), the creator's
         * placement stands */
        if (!ctx->driver && spec->device != CT_CPU && ctx->ndevices == 1 &&
            (rc = ct_module_to(st->models[i], (ct_device)spec->device)) < 0) {
            rc = ct__error(rc, "trainer replica %d: model \"%s\" to device: %s", ctx->rank,
                           mnames[i], ct_last_error());
            goto fail;
        }
        const ct_param_ref *ps;
        int np;
        if ((rc = ct_module_params(st->models[i], &ps, &np)) < 0)
            goto fail;
    }
    for (int i = 0; i < nm; i++) { /* optimizer i over model i */
        const char *on = onames[no == 1 ? 0 : i];
        trainer_optimizer_creator oc = (trainer_optimizer_creator)lookup_here(ctx, TR_OPTIM, on);
        if (!oc) {
            rc = CT_ENOTREG;
            goto fail;
        }
        if (!(st->optims[i] = oc(ctx, st->models[i])) || ctx->err[0]) {
            rc = creator_failed(ctx, TR_OPTIM, on, CT_EINVAL);
            goto fail;
        }
    }
    for (int i = 0; i < nm; i++) {
        const char *ln = lnames[nl == 1 ? 0 : i];
        trainer_loss_creator lc = (trainer_loss_creator)lookup_here(ctx, TR_LOSS, ln);
        if (!lc) {
            rc = CT_ENOTREG;
            goto fail;
        }
        if (i > 0 && nl == 1) { /* one loss serves all: its creator runs once */
            st->losses[i] = st->losses[0];
        } else if (!(st->losses[i] = lc(ctx)) || ctx->err[0]) {
            rc = creator_failed(ctx, TR_LOSS, ln, CT_EINVAL);
            goto fail;
        }
    }
    if (spec->scheduler[0]) {
        trainer_scheduler_creator sc =
            (trainer_scheduler_creator)lookup_here(ctx, TR_SCHED, spec->scheduler);
        if (!sc) {
            rc = CT_ENOTREG;
            goto fail;
        }
        if (!(st->sched = sc(ctx, st->optims[0])) || ctx->err[0]) {
            rc = creator_failed(ctx, TR_SCHED, spec->scheduler, CT_EINVAL);
            goto fail;
        }
        /* a plateau scheduler (built-in or a user's) steps on a value the trainer measures */
        if (!strcmp(ct_sched_kind(st->sched), "plateau")) {
            const char *m = trainer_config_str(ctx, "plateau_metric", "val_loss");
            if (!*m || strlen(m) >= TRAINER_METRIC_NAME_MAX) {
                rc = ct__error(CT_EINVAL,
                               "trainer config: key \"plateau_metric\": \"%s\" is "
                               "empty or longer than %d bytes",
                               m, TRAINER_METRIC_NAME_MAX - 1);
                goto fail;
            }
            snprintf(st->plateau_metric, sizeof st->plateau_metric, "%s", m);
        }
    }
    /* f16 with one model: the trainer's loss scaler (several models: a custom step's own) */
    if (ctx->precision == CT_F16 && nm == 1) {
        double init = trainer_config_double(ctx, "scaler_init_scale", 65536.0);
        double growth = trainer_config_double(ctx, "scaler_growth_factor", 2.0);
        double backoff = trainer_config_double(ctx, "scaler_backoff_factor", 0.5);
        int64_t interval = trainer_config_int(ctx, "scaler_growth_interval", 2000);
        const char *bad = !(init > 0 && init <= 3.4e38)           ? "init_scale"
                          : !(growth > 1 && growth <= 3.4e38)     ? "growth_factor"
                          : !(backoff > 0 && backoff < 1)         ? "backoff_factor"
                          : interval < 1 || interval > 1000000000 ? "growth_interval"
                                                                  : NULL;
        if (ctx->err[0]) {
            rc = ct__error(CT_EINVAL, "%s", ctx->err);
            goto fail;
        }
        if (bad) {
            rc = ct__error(CT_EINVAL,
                           "trainer config: key \"scaler_%s\": must be %s (the loss scaler of "
                           "precision f16)",
                           bad,
                           !strcmp(bad, "init_scale")       ? "> 0 and finite in f32"
                           : !strcmp(bad, "growth_factor")  ? "> 1 and finite in f32"
                           : !strcmp(bad, "backoff_factor") ? "in (0, 1)"
                                                            : "an integer in [1, 1e9]");
            goto fail;
        }
        st->scaler_opts = (ct_grad_scaler_opts){.init_scale = init,
                                                .growth_factor = growth,
                                                .backoff_factor = backoff,
                                                .growth_interval = (int)interval};
        if (!(st->scaler = ct_grad_scaler_new(&st->scaler_opts))) {
            rc = ct__trainer_error_prefix(CT_EINVAL, "trainer config: the loss scaler");
            goto fail;
        }
    }
    return 0;
fail:
    ct__trainer_state_free(st);
    return rc;
}

int ct__trainer_error_prefix(int rc, const char *fmt, ...)
{
    char old[700], prefix[400];
    snprintf(old, sizeof old, "%s", ct_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return ct__error(rc, "%s: %s", prefix, old);
}
