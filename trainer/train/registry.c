/* trainer/train/registry.c — the process-wide creator registry, and building a replica's objects
 * (hook, data, models, optimizers, losses, scheduler) from registered names (model, optimizer and
 * loss: comma-separated lists). Not here: the creator context and its config (config.c), the
 * built-in creators (builtins.c), the actor, the driver, checkpoints. */
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

/* ---- the keys of the chosen steps ---- */

void ct__trainer_ctx_use_step_keys(trainer_ctx *ctx, const tr_spec *spec)
{
    const char *lists[2] = {ct__trainer_step_keys(TR_TRAIN_STEP, spec->train_step),
                            ct__trainer_step_keys(TR_VAL_STEP, spec->validate_step)};
    char names[TR_MAX_KEYS][TR_NAME_MAX];
    for (int l = 0; l < 2; l++) {
        int n = lists[l][0] ? ct__trainer_split_names(lists[l], names, TR_MAX_KEYS, "keys") : 0;
        for (int i = 0; i < n; i++)
            trainer_config_str(ctx, names[i], NULL); /* marks it read */
    }
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
