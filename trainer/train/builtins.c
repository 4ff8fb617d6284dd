/* trainer/train/builtins.c — the creators every program has without registering them:
 * optimizers "adam", "adamw", "sgd"; losses "cross_entropy", "nll"; schedulers "steplr",
 * "multistep", "exponential", "cosine"; data "fashion_mnist". Each reads its hyper-parameters
 * from the config (keys listed in ct/trainer.h). Not here: models (the user's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "internal.h"

static ct_optim *make_adam_like(trainer_ctx *ctx, ct_module *model, bool adamw)
{
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(model, &ps, &np) < 0)
        return NULL;
    ct_adam_opts o = {
        .lr = trainer_config_double(ctx, "lr", 1e-3),
        .beta1 = trainer_config_double(ctx, "beta1", 0.9),
        .beta2 = trainer_config_double(ctx, "beta2", 0.999),
        .eps = trainer_config_double(ctx, "eps", 1e-8),
        .weight_decay = trainer_config_double(ctx, "weight_decay", adamw ? 1e-2 : 0.0),
    };
    if (o.beta1 == 0)
        o.beta1 = CT_ZERO;
    if (o.weight_decay == 0)
        o.weight_decay = CT_ZERO;
    if (ct_adam_opts_check(&o) < 0) {
        trainer_ctx_fail(ctx, "%s", ct_last_error());
        return NULL;
    }
    return adamw ? ct_optim_adamw_new(ps, np, &o) : ct_optim_adam_new(ps, np, &o);
}

static ct_optim *make_adam(trainer_ctx *ctx, ct_module *model)
{
    return make_adam_like(ctx, model, false);
}

static ct_optim *make_adamw(trainer_ctx *ctx, ct_module *model)
{
    return make_adam_like(ctx, model, true);
}

static ct_optim *make_sgd(trainer_ctx *ctx, ct_module *model)
{
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(model, &ps, &np) < 0)
        return NULL;
    ct_sgd_opts o = {.lr = trainer_config_double(ctx, "lr", 1e-2),
                     .momentum = trainer_config_double(ctx, "momentum", 0),
                     .weight_decay = trainer_config_double(ctx, "weight_decay", 0),
                     .nesterov = trainer_config_bool(ctx, "nesterov", false)};
    if (ct_sgd_opts_check(&o) < 0) {
        trainer_ctx_fail(ctx, "%s", ct_last_error());
        return NULL;
    }
    return ct_optim_sgd_new(ps, np, &o);
}

static float label_smoothing; /* per process: one trainer's loss at a time */

static ct_tensor *loss_ce(ct_tensor *out, ct_tensor *target)
{
    return ct_nn_cross_entropy(out, target, label_smoothing);
}

static trainer_loss_fn make_ce(trainer_ctx *ctx)
{
    double ls = trainer_config_double(ctx, "label_smoothing", 0);
    if (ls < 0 || ls > 1) {
        trainer_ctx_fail(ctx, "trainer config: key \"label_smoothing\": %g not in [0, 1]", ls);
        return NULL;
    }
    label_smoothing = (float)ls;
    return loss_ce;
}

static ct_tensor *loss_nll(ct_tensor *out, ct_tensor *target)
{
    return ct_nn_nll_loss(out, target);
}

static trainer_loss_fn make_nll(trainer_ctx *ctx)
{
    (void)ctx;
    return loss_nll;
}

static ct_sched *make_steplr(trainer_ctx *ctx, ct_optim *o)
{
    ct_steplr_opts so = {.step_size = (int)trainer_config_int(ctx, "step_size", 1),
                         .gamma = trainer_config_double(ctx, "gamma", 0.1)};
    return ct_sched_steplr_new(o, &so);
}

static ct_sched *make_multistep(trainer_ctx *ctx, ct_optim *o)
{
    ct_multistep_opts mo = {.gamma = trainer_config_double(ctx, "gamma", 0.1)};
    const char *ms = trainer_config_str(ctx, "milestones", "");
    for (const char *p = ms; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || mo.num_milestones == CT_SCHED_MAX_MILESTONES) {
            trainer_ctx_fail(ctx, "trainer config: key \"milestones\": \"%s\" is not n:n:...", ms);
            return NULL;
        }
        mo.milestones[mo.num_milestones++] = (int)v;
        p = *end == ':' ? end + 1 : end;
        if (*end && *end != ':') {
            trainer_ctx_fail(ctx, "trainer config: key \"milestones\": \"%s\" is not n:n:...", ms);
            return NULL;
        }
    }
    return ct_sched_multistep_new(o, &mo);
}

static ct_sched *make_exponential(trainer_ctx *ctx, ct_optim *o)
{
    return ct_sched_exponential_new(
        o, &(ct_exponential_opts){.gamma = trainer_config_double(ctx, "gamma", 0.9)});
}

static ct_sched *make_cosine(trainer_ctx *ctx, ct_optim *o)
{
    ct_cosine_opts co = {
        .t_max = (int)trainer_config_int(ctx, "t_max", ctx->epochs > 0 ? ctx->epochs : 1),
        .eta_min = trainer_config_double(ctx, "eta_min", 0)};
    return ct_sched_cosine_new(o, &co);
}

static const float fmnist_mean[] = {0.2860f}, fmnist_std[] = {0.3530f};

static int make_fashion_mnist(trainer_ctx *ctx, trainer_data *d)
{
    const char *dir = trainer_config_str(ctx, "data_dir", NULL);
    int64_t limit = trainer_config_int(ctx, "limit", 0);
    int64_t val_limit = trainer_config_int(ctx, "val_limit", 0);
    if (ctx->err[0])
        return CT_EINVAL;
    ct_dataset *train = NULL, *test = NULL;
    int rc;
    if ((rc = ct_dataset_open_mnist(dir, true, &train)) < 0)
        return rc;
    if ((rc = ct_dataset_open_mnist(dir, false, &test)) < 0) {
        ct_dataset_destroy(&train);
        return rc;
    }
    d->keep[0] = train;
    d->keep[1] = test;
    int64_t n = ct_dataset_length(train), nv = ct_dataset_length(test);
    if (limit > 0 && limit < n)
        n = limit;
    if (val_limit > 0 && val_limit < nv)
        nv = val_limit;
    if ((rc = ct_dataset_subset(train, 0, n, &d->train)) < 0 ||
        (rc = ct_dataset_subset(test, 0, nv, &d->val)) < 0)
        return rc; /* the trainer frees what was filled */
    d->transform = (ct_transform_opts){.mean = fmnist_mean, .std = fmnist_std};
    d->num_classes = 10;
    return 0;
}

typedef struct builtin {
    tr_kind kind;
    const char *name;
    void *fn;
} builtin;

static const builtin builtins[] = {
    {TR_OPTIM, "adam", (void *)make_adam},
    {TR_OPTIM, "adamw", (void *)make_adamw},
    {TR_OPTIM, "sgd", (void *)make_sgd},
    {TR_LOSS, "cross_entropy", (void *)make_ce},
    {TR_LOSS, "nll", (void *)make_nll},
    {TR_SCHED, "steplr", (void *)make_steplr},
    {TR_SCHED, "multistep", (void *)make_multistep},
    {TR_SCHED, "exponential", (void *)make_exponential},
    {TR_SCHED, "cosine", (void *)make_cosine},
    {TR_DATA, "fashion_mnist", (void *)make_fashion_mnist},
};

void *ct__trainer_builtin(tr_kind kind, const char *name)
{
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (builtins[i].kind == kind && !strcmp(builtins[i].name, name))
            return builtins[i].fn;
    return NULL;
}
