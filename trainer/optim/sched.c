/* trainer/optim/sched.c — learning-rate schedulers with PyTorch 1.13's exact arithmetic
 * (torch.optim.lr_scheduler: the recursive get_lr() forms, evaluated in double in the same
 * order as Python), and their state dicts.
 *
 * Not here: SequentialLR/ChainedScheduler (two schedulers on one optimizer chain anyway, since
 * every form here is recursive on the current lr), epoch arguments to step (deprecated).
 *
 * State: last_epoch starts at -1; creation records initial_lr in the optimizer's groups, takes
 * base_lrs from it and steps once (last_epoch 0), as _LRScheduler.__init__ does.
 * ReduceLROnPlateau is not an _LRScheduler in 1.13: it starts at last_epoch 0 and never
 * touches initial_lr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/optim.h"
#include "trainer/optim/optim_internal.h"

enum skind { S_STEP, S_MULTI, S_EXP, S_COS, S_LIN, S_PLAT, S_SEQ };
static const char *skind_name[] = {"steplr", "multistep", "exponential", "cosine",
                                   "linear", "plateau",   "sequential"};

/* Everything but the per-group arrays is plain data, so a struct copy is a snapshot. */
typedef struct sched_vals {
    int last_epoch, step_count;
    int step_size;
    double gamma;
    int milestones[CT_SCHED_MAX_MILESTONES], nmilestones;
    int t_max;
    double eta_min;
    double start_factor, end_factor;
    int total_iters;
    int mode, threshold_mode, patience, cooldown, cooldown_counter, num_bad_epochs;
    double factor, threshold, eps, best;
} sched_vals;

struct ct_sched {
    enum skind kind;
    ct_optim *o;
    int ngroups;
    sched_vals v;
    double *base_lrs, *last_lr, *min_lrs; /* (ngroups) each, one allocation */
    ct_sched **children;                  /* sequential: owned, v.nmilestones + 1 of them */
    int nchildren;
    /* the last state dict */
    ct_state_entry *entries;
    char **names;
    int nentries;
    char milestones_str[CT_SCHED_MAX_MILESTONES * 12 + 1];
};

static double dflt(double v, double def)
{
    if (v == 0.0)
        return signbit(v) ? 0.0 : def;
    return v;
}

static ct_sched *sched_alloc(enum skind kind, ct_optim *o)
{
    if (!o) {
        ct__error(CT_EINVAL, "sched %s: optimizer is NULL", skind_name[kind]);
        return NULL;
    }
    ct_sched *s = calloc(1, sizeof *s);
    int ng = ct_optim_num_groups(o);
    double *arr = calloc((size_t)(3 * ng + 1), sizeof *arr);
    if (!s || !arr) {
        free(s);
        free(arr);
        ct__error(CT_ENOMEM, "sched: out of memory");
        return NULL;
    }
    s->kind = kind;
    s->o = o;
    s->ngroups = ng;
    s->base_lrs = arr;
    s->last_lr = arr + ng;
    s->min_lrs = arr + 2 * ng;
    s->v.last_epoch = -1;
    return s;
}

/* The lr group g gets at s->v.last_epoch, from its current lr (torch's get_lr()). */
static double get_lr(const ct_sched *s, int g, double lr)
{
    const sched_vals *v = &s->v;
    int e = v->last_epoch;
    double base = s->base_lrs[g];
    switch (s->kind) {
    case S_STEP:
        if (e == 0 || e % v->step_size != 0)
            return lr;
        return lr * v->gamma;
    case S_MULTI: {
        int count = 0;
        for (int i = 0; i < v->nmilestones; i++)
            count += v->milestones[i] == e;
        if (!count)
            return lr;
        return lr * pow(v->gamma, count);
    }
    case S_EXP:
        if (e == 0)
            return lr;
        return lr * v->gamma;
    case S_COS: {
        double T = v->t_max;
        if (e == 0)
            return lr;
        if (v->step_count == 1 && e > 0)
            return v->eta_min + (base - v->eta_min) * (1 + cos(e * M_PI / T)) / 2;
        if ((e - 1 - v->t_max) % (2 * v->t_max) == 0)
            return lr + (base - v->eta_min) * (1 - cos(M_PI / T)) / 2;
        return (1 + cos(M_PI * e / T)) / (1 + cos(M_PI * (e - 1) / T)) * (lr - v->eta_min) +
               v->eta_min;
    }
    case S_LIN:
        if (e == 0)
            return lr * v->start_factor;
        if (e > v->total_iters)
            return lr;
        return lr * (1. + (v->end_factor - v->start_factor) /
                              (v->total_iters * v->start_factor +
                               (e - 1) * (v->end_factor - v->start_factor)));
    case S_PLAT:
    case S_SEQ:
        break;
    }
    return lr;
}

/* _LRScheduler.step() without an epoch. */
static void lr_step(ct_sched *s)
{
    s->v.step_count++;
    s->v.last_epoch++;
    int ng = s->ngroups;
    double vals[ng > 0 ? ng : 1];
    for (int g = 0; g < ng; g++)
        vals[g] = get_lr(s, g, ct_optim_get_lr(s->o, g));
    for (int g = 0; g < ng; g++) {
        /* a schedule can only go negative through a bad option; keep lr legal */
        double lr = vals[g] >= 0.0 ? vals[g] : 0.0;
        ct_optim_set_lr(s->o, g, lr);
        s->last_lr[g] = lr;
    }
}

/* torch's _get_closed_form_lr(): the lr of group g at s->v.last_epoch from base_lrs. */
static double closed_form_lr(const ct_sched *s, int g)
{
    const sched_vals *v = &s->v;
    int e = v->last_epoch;
    double base = s->base_lrs[g];
    switch (s->kind) {
    case S_STEP: {
        int q = e / v->step_size; /* Python's // floors */
        if (e % v->step_size != 0 && e < 0)
            q--;
        return base * pow(v->gamma, q);
    }
    case S_MULTI: {
        int count = 0; /* bisect_right over the sorted milestones: how many are <= e */
        for (int i = 0; i < v->nmilestones; i++)
            count += v->milestones[i] <= e;
        return base * pow(v->gamma, count);
    }
    case S_EXP:
        return base * pow(v->gamma, e);
    case S_COS:
        return v->eta_min + (base - v->eta_min) * (1 + cos(M_PI * e / v->t_max)) / 2;
    case S_LIN:
        return base *
               (v->start_factor + (v->end_factor - v->start_factor) *
                                      (e < v->total_iters ? e : v->total_iters) / v->total_iters);
    default:
        return ct_optim_get_lr(s->o, g);
    }
}

/* _LRScheduler.step(epoch): jumps to epoch with the closed form (SequentialLR uses epoch 0). */
static void lr_step_epoch(ct_sched *s, int epoch)
{
    s->v.step_count++;
    s->v.last_epoch = epoch;
    for (int g = 0; g < s->ngroups; g++) {
        double lr = closed_form_lr(s, g);
        lr = lr >= 0.0 ? lr : 0.0;
        ct_optim_set_lr(s->o, g, lr);
        s->last_lr[g] = lr;
    }
}

static ct_sched *lr_sched_start(ct_sched *s)
{
    for (int g = 0; g < s->ngroups; g++)
        s->base_lrs[g] = ct__optim_initial_lr(s->o, g);
    s->v.last_epoch = -1;
    s->v.step_count = 0;
    lr_step(s);
    return s;
}

static ct_sched *fail(ct_sched *s, int code, const char *fmt, const char *kind, double val)
{
    if (s) {
        free(s->base_lrs);
        free(s);
    }
    ct__error(code, fmt, kind, val);
    return NULL;
}

ct_sched *ct_sched_steplr_new(ct_optim *o, const ct_steplr_opts *opts)
{
    if (!opts || opts->step_size < 1)
        return fail(NULL, CT_EINVAL, "sched %s: step_size = %g: must be >= 1", "steplr",
                    opts ? opts->step_size : 0);
    ct_sched *s = sched_alloc(S_STEP, o);
    if (!s)
        return NULL;
    s->v.step_size = opts->step_size;
    s->v.gamma = dflt(opts->gamma, 0.1);
    return lr_sched_start(s);
}

ct_sched *ct_sched_multistep_new(ct_optim *o, const ct_multistep_opts *opts)
{
    ct_multistep_opts d = {0};
    if (!opts)
        opts = &d;
    if (opts->num_milestones < 0 || opts->num_milestones > CT_SCHED_MAX_MILESTONES)
        return fail(NULL, CT_EINVAL, "sched %s: num_milestones = %g: must be in [0, 32]",
                    "multistep", opts->num_milestones);
    ct_sched *s = sched_alloc(S_MULTI, o);
    if (!s)
        return NULL;
    s->v.nmilestones = opts->num_milestones;
    memcpy(s->v.milestones, opts->milestones, sizeof s->v.milestones);
    s->v.gamma = dflt(opts->gamma, 0.1);
    return lr_sched_start(s);
}

ct_sched *ct_sched_exponential_new(ct_optim *o, const ct_exponential_opts *opts)
{
    if (!opts || !(opts->gamma > 0.0))
        return fail(NULL, CT_EINVAL, "sched %s: gamma = %g: must be > 0", "exponential",
                    opts ? opts->gamma : 0.0);
    ct_sched *s = sched_alloc(S_EXP, o);
    if (!s)
        return NULL;
    s->v.gamma = opts->gamma;
    return lr_sched_start(s);
}

ct_sched *ct_sched_cosine_new(ct_optim *o, const ct_cosine_opts *opts)
{
    if (!opts || opts->t_max < 1)
        return fail(NULL, CT_EINVAL, "sched %s: t_max = %g: must be >= 1", "cosine",
                    opts ? opts->t_max : 0);
    if (!(opts->eta_min >= 0.0))
        return fail(NULL, CT_EINVAL, "sched %s: eta_min = %g: must be >= 0", "cosine",
                    opts->eta_min);
    ct_sched *s = sched_alloc(S_COS, o);
    if (!s)
        return NULL;
    s->v.t_max = opts->t_max;
    s->v.eta_min = opts->eta_min;
    return lr_sched_start(s);
}

ct_sched *ct_sched_linear_new(ct_optim *o, const ct_linear_opts *opts)
{
    ct_linear_opts d = {0};
    if (!opts)
        opts = &d;
    double sf = dflt(opts->start_factor, 1.0 / 3), ef = dflt(opts->end_factor, 1.0);
    int total = opts->total_iters ? opts->total_iters : 5;
    if (!(sf > 0.0 && sf <= 1.0))
        return fail(NULL, CT_EINVAL, "sched %s: start_factor = %g: must be in (0, 1]", "linear",
                    sf);
    if (!(ef >= 0.0 && ef <= 1.0))
        return fail(NULL, CT_EINVAL, "sched %s: end_factor = %g: must be in [0, 1]", "linear", ef);
    if (total < 1)
        return fail(NULL, CT_EINVAL, "sched %s: total_iters = %g: must be >= 1", "linear", total);
    ct_sched *s = sched_alloc(S_LIN, o);
    if (!s)
        return NULL;
    s->v.start_factor = sf;
    s->v.end_factor = ef;
    s->v.total_iters = total;
    return lr_sched_start(s);
}

ct_sched *ct_sched_plateau_new(ct_optim *o, const ct_plateau_opts *opts)
{
    ct_plateau_opts d = {0};
    if (!opts)
        opts = &d;
    double factor = dflt(opts->factor, 0.1), threshold = dflt(opts->threshold, 1e-4);
    int patience = opts->patience == CT_PATIENCE_ZERO ? 0 : opts->patience ? opts->patience : 10;
    if (!(factor < 1.0 && factor >= 0.0))
        return fail(NULL, CT_EINVAL, "sched %s: factor = %g: must be in [0, 1)", "plateau", factor);
    if (patience < 0)
        return fail(NULL, CT_EINVAL, "sched %s: patience = %g: must be >= 0", "plateau",
                    opts->patience);
    if (opts->cooldown < 0)
        return fail(NULL, CT_EINVAL, "sched %s: cooldown = %g: must be >= 0", "plateau",
                    opts->cooldown);
    if (!(threshold >= 0.0))
        return fail(NULL, CT_EINVAL, "sched %s: threshold = %g: must be >= 0", "plateau",
                    threshold);
    if (!(opts->min_lr >= 0.0))
        return fail(NULL, CT_EINVAL, "sched %s: min_lr = %g: must be >= 0", "plateau",
                    opts->min_lr);
    if ((unsigned)opts->mode > CT_PLATEAU_MAX)
        return fail(NULL, CT_EINVAL, "sched %s: mode = %g: must be min or max", "plateau",
                    opts->mode);
    if ((unsigned)opts->threshold_mode > CT_THRESHOLD_ABS)
        return fail(NULL, CT_EINVAL, "sched %s: threshold_mode = %g: must be rel or abs", "plateau",
                    opts->threshold_mode);
    ct_sched *s = sched_alloc(S_PLAT, o);
    if (!s)
        return NULL;
    sched_vals *v = &s->v;
    v->mode = opts->mode;
    v->threshold_mode = opts->threshold_mode;
    v->factor = factor;
    v->patience = patience;
    v->threshold = threshold;
    v->cooldown = opts->cooldown;
    v->eps = dflt(opts->eps, 1e-8);
    v->last_epoch = 0;
    v->best = v->mode == CT_PLATEAU_MIN ? INFINITY : -INFINITY;
    for (int g = 0; g < s->ngroups; g++) {
        s->min_lrs[g] = opts->min_lr;
        s->last_lr[g] = ct_optim_get_lr(o, g);
    }
    return s;
}

static void free_entries(ct_sched *s)
{
    for (int i = 0; i < s->nentries; i++)
        free(s->names[i]);
    free(s->names);
    free(s->entries);
    s->names = NULL;
    s->entries = NULL;
    s->nentries = 0;
}

void ct_sched_destroy(ct_sched **sp)
{
    if (!sp || !*sp)
        return;
    for (int i = 0; i < (*sp)->nchildren; i++)
        ct_sched_destroy(&(*sp)->children[i]);
    free((*sp)->children);
    free_entries(*sp);
    free((*sp)->base_lrs);
    free(*sp);
    *sp = NULL;
}

ct_sched *ct_sched_sequential_new(ct_optim *o, ct_sched **scheds, int n, const int *milestones)
{
    ct_sched *s = NULL;
    if (!scheds || n < 1 || n > CT_SCHED_MAX_MILESTONES + 1 || (n > 1 && !milestones)) {
        ct__error(CT_EINVAL, "sched sequential: %d schedulers (need 1 to %d, and n-1 milestones)",
                  n, CT_SCHED_MAX_MILESTONES + 1);
        goto err;
    }
    for (int i = 0; i < n; i++) {
        if (!scheds[i] || scheds[i]->o != o) {
            ct__error(CT_EINVAL, "sched sequential: schedulers[%d] is %s", i,
                      scheds[i] ? "over another optimizer" : "NULL");
            goto err;
        }
        if (scheds[i]->kind == S_PLAT || scheds[i]->kind == S_SEQ) {
            ct__error(CT_EINVAL, "sched sequential: schedulers[%d] is a %s scheduler", i,
                      skind_name[scheds[i]->kind]);
            goto err;
        }
        for (int j = 0; j < i; j++)
            if (scheds[j] == scheds[i]) {
                ct__error(CT_EINVAL, "sched sequential: schedulers[%d] is schedulers[%d]", i, j);
                goto err;
            }
    }
    for (int i = 1; i < n - 1; i++)
        if (milestones[i] < milestones[i - 1]) {
            ct__error(CT_EINVAL, "sched sequential: milestones[%d] = %d: not sorted", i,
                      milestones[i]);
            goto err;
        }
    if (!(s = sched_alloc(S_SEQ, o)) || !(s->children = calloc((size_t)n, sizeof *s->children))) {
        ct__error(CT_ENOMEM, "sched sequential: out of memory");
        goto err;
    }
    s->nchildren = n;
    s->v.nmilestones = n - 1;
    for (int i = 0; i < n; i++) {
        s->children[i] = scheds[i];
        scheds[i] = NULL;
        if (i < n - 1)
            s->v.milestones[i] = milestones[i];
    }
    /* SequentialLR.__init__: lr back to initial_lr, undo each child's initial step, then the
     * first child's initial step alone */
    for (int g = 0; g < s->ngroups; g++)
        ct_optim_set_lr(o, g, ct__optim_initial_lr(o, g));
    for (int i = 0; i < n; i++)
        s->children[i]->v.last_epoch--;
    s->children[0]->v.step_count = 0;
    lr_step(s->children[0]);
    s->v.last_epoch = 0;
    memcpy(s->last_lr, s->children[0]->last_lr, (size_t)s->ngroups * sizeof(double));
    return s;
err:
    if (s) {
        free(s->children);
        s->children = NULL;
        ct_sched_destroy(&s);
    }
    for (int i = 0; scheds && i < n; i++)
        ct_sched_destroy(&scheds[i]);
    return NULL;
}

ct_sched *ct_sched_warmup_cosine_new(ct_optim *o, const ct_warmup_cosine_opts *opts)
{
    if (!opts || opts->warmup_steps < 1)
        return fail(NULL, CT_EINVAL, "sched %s: warmup_steps = %g: must be >= 1", "warmup_cosine",
                    opts ? opts->warmup_steps : 0);
    if (opts->total_steps <= opts->warmup_steps)
        return fail(NULL, CT_EINVAL, "sched %s: total_steps = %g: must be > warmup_steps",
                    "warmup_cosine", opts->total_steps);
    /* in torch's order: both children created (each steps once), then the sequence; each
     * child checks its own options; sequential_new takes them, also on failure */
    ct_sched *c[2];
    c[0] = ct_sched_linear_new(o, &(ct_linear_opts){.start_factor = opts->start_factor,
                                                    .end_factor = 1.0,
                                                    .total_iters = opts->warmup_steps});
    c[1] = c[0] ? ct_sched_cosine_new(
                      o, &(ct_cosine_opts){.t_max = opts->total_steps - opts->warmup_steps,
                                           .eta_min = opts->eta_min})
                : NULL;
    if (!c[1]) {
        ct_sched_destroy(&c[0]);
        return NULL;
    }
    return ct_sched_sequential_new(o, c, 2, &opts->warmup_steps);
}

static void seq_step(ct_sched *s)
{
    int e = ++s->v.last_epoch, idx = 0;
    while (idx < s->v.nmilestones && s->v.milestones[idx] <= e)
        idx++; /* bisect_right */
    ct_sched *c = s->children[idx];
    if (idx > 0 && s->v.milestones[idx - 1] == e)
        lr_step_epoch(c, 0);
    else
        lr_step(c);
    memcpy(s->last_lr, c->last_lr, (size_t)s->ngroups * sizeof(double));
}

int ct_sched_step(ct_sched *s)
{
    if (!s)
        return ct__error(CT_EINVAL, "sched_step: scheduler is NULL");
    if (s->kind == S_PLAT)
        return ct__error(CT_EINVAL, "sched_step: a plateau scheduler needs "
                                    "ct_sched_step_metric()");
    if (s->kind == S_SEQ)
        seq_step(s);
    else
        lr_step(s);
    return 0;
}

static bool is_better(const sched_vals *v, double a, double best)
{
    if (v->mode == CT_PLATEAU_MIN && v->threshold_mode == CT_THRESHOLD_REL)
        return a < best * (1. - v->threshold);
    if (v->mode == CT_PLATEAU_MIN)
        return a < best - v->threshold;
    if (v->threshold_mode == CT_THRESHOLD_REL)
        return a > best * (v->threshold + 1.);
    return a > best + v->threshold;
}

int ct_sched_step_metric(ct_sched *s, double metric)
{
    if (!s)
        return ct__error(CT_EINVAL, "sched_step_metric: scheduler is NULL");
    if (s->kind != S_PLAT)
        return ct__error(CT_EINVAL,
                         "sched_step_metric: a %s scheduler takes no metric; use "
                         "ct_sched_step()",
                         skind_name[s->kind]);
    sched_vals *v = &s->v;
    v->last_epoch++;
    if (is_better(v, metric, v->best)) {
        v->best = metric;
        v->num_bad_epochs = 0;
    } else {
        v->num_bad_epochs++;
    }
    if (v->cooldown_counter > 0) {
        v->cooldown_counter--;
        v->num_bad_epochs = 0; /* bad epochs in cooldown do not count */
    }
    if (v->num_bad_epochs > v->patience) {
        for (int g = 0; g < s->ngroups; g++) {
            double old_lr = ct_optim_get_lr(s->o, g);
            double new_lr = fmax(old_lr * v->factor, s->min_lrs[g]);
            if (old_lr - new_lr > v->eps)
                ct_optim_set_lr(s->o, g, new_lr);
        }
        v->cooldown_counter = v->cooldown;
        v->num_bad_epochs = 0;
    }
    for (int g = 0; g < s->ngroups; g++)
        s->last_lr[g] = ct_optim_get_lr(s->o, g);
    return 0;
}

double ct_sched_get_last_lr(const ct_sched *s, int g)
{
    if (!s || g < 0 || g >= s->ngroups)
        return NAN;
    return s->last_lr[g];
}

const char *ct_sched_kind(const ct_sched *s)
{
    return s ? skind_name[s->kind] : "";
}

int ct_sched_last_epoch(const ct_sched *s)
{
    return s ? s->v.last_epoch : 0;
}

/* ---- state dict ----------------------------------------------------------------------------
 * One table of fields per kind, pointing into a sched_vals and the group arrays; the same table
 * writes entries and reads them back (into a scratch copy first, so a bad dict changes nothing).
 */

enum ftype { F_INT, F_DBL, F_MILESTONES, F_MODE, F_TMODE };
typedef struct field {
    char name[48];
    enum ftype type;
    void *ptr;
} field;

#define MAX_FIELDS 24

static int add_field(field *f, int *n, const char *name, enum ftype t, void *ptr)
{
    if (*n >= MAX_FIELDS)
        return 0;
    snprintf(f[*n].name, sizeof f[*n].name, "%s", name);
    f[*n].type = t;
    f[*n].ptr = ptr;
    (*n)++;
    return 0;
}

/* Fields of a scheduler of the given kind over (v, arrays); group fields are counted apart. */
static int build_fields(enum skind kind, sched_vals *v, field *f)
{
    int n = 0;
    add_field(f, &n, "last_epoch", F_INT, &v->last_epoch);
    switch (kind) {
    case S_STEP:
        add_field(f, &n, "step_size", F_INT, &v->step_size);
        add_field(f, &n, "gamma", F_DBL, &v->gamma);
        break;
    case S_MULTI:
        add_field(f, &n, "milestones", F_MILESTONES, v);
        add_field(f, &n, "gamma", F_DBL, &v->gamma);
        break;
    case S_EXP:
        add_field(f, &n, "gamma", F_DBL, &v->gamma);
        break;
    case S_COS:
        add_field(f, &n, "T_max", F_INT, &v->t_max);
        add_field(f, &n, "eta_min", F_DBL, &v->eta_min);
        break;
    case S_LIN:
        add_field(f, &n, "start_factor", F_DBL, &v->start_factor);
        add_field(f, &n, "end_factor", F_DBL, &v->end_factor);
        add_field(f, &n, "total_iters", F_INT, &v->total_iters);
        break;
    case S_SEQ:
        add_field(f, &n, "milestones", F_MILESTONES, v);
        break;
    case S_PLAT:
        add_field(f, &n, "mode", F_MODE, &v->mode);
        add_field(f, &n, "threshold_mode", F_TMODE, &v->threshold_mode);
        add_field(f, &n, "factor", F_DBL, &v->factor);
        add_field(f, &n, "patience", F_INT, &v->patience);
        add_field(f, &n, "threshold", F_DBL, &v->threshold);
        add_field(f, &n, "cooldown", F_INT, &v->cooldown);
        add_field(f, &n, "cooldown_counter", F_INT, &v->cooldown_counter);
        add_field(f, &n, "num_bad_epochs", F_INT, &v->num_bad_epochs);
        add_field(f, &n, "best", F_DBL, &v->best);
        add_field(f, &n, "eps", F_DBL, &v->eps);
        break;
    }
    if (kind != S_PLAT && kind != S_SEQ)
        add_field(f, &n, "step_count", F_INT, &v->step_count);
    return n;
}

static const char *group_arrays[] = {"base_lrs", "last_lr", "min_lrs"};

/* Which per-group arrays a kind saves: base_lrs + last_lr, or (plateau) last_lr + min_lrs. */
static bool saves_array(enum skind kind, int a)
{
    if (kind == S_SEQ)
        return a == 1;
    return kind == S_PLAT ? a != 0 : a != 2;
}

static void milestones_to_str(const sched_vals *v, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < v->nmilestones && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? "," : "", v->milestones[i]);
}

static int milestones_from_str(sched_vals *v, const char *str)
{
    int n = 0;
    const char *p = str;
    while (*p) {
        char *end;
        long m = strtol(p, &end, 10);
        if (end == p || n >= CT_SCHED_MAX_MILESTONES)
            return -1;
        v->milestones[n++] = (int)m;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    v->nmilestones = n;
    return 0;
}

static int push(ct_sched *s, int *cap, const char *name, ct_state_entry e)
{
    char *nm = strdup(name);
    if (!nm)
        return ct__error(CT_ENOMEM, "sched_state_dict: out of memory");
    if (s->nentries == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        ct_state_entry *ne = realloc(s->entries, (size_t)nc * sizeof *ne);
        if (ne)
            s->entries = ne;
        char **nn = realloc(s->names, (size_t)nc * sizeof *nn);
        if (nn)
            s->names = nn;
        if (!ne || !nn) {
            free(nm);
            return ct__error(CT_ENOMEM, "sched_state_dict: out of memory");
        }
        *cap = nc;
    }
    e.name = nm;
    s->names[s->nentries] = nm;
    s->entries[s->nentries++] = e;
    return 0;
}

int ct_sched_state_dict(ct_sched *s, const ct_state_entry **entries, int *n)
{
    if (!s || !entries || !n)
        return ct__error(CT_EINVAL, "sched_state_dict: NULL argument");
    free_entries(s);
    field f[MAX_FIELDS];
    int nf = build_fields(s->kind, &s->v, f), cap = 0, rc;
    if ((rc = push(s, &cap, "type",
                   (ct_state_entry){.kind = CT_STATE_STRING, .str = skind_name[s->kind]})))
        goto err;
    for (int i = 0; i < nf; i++) {
        ct_state_entry e = {.kind = CT_STATE_SCALAR};
        switch (f[i].type) {
        case F_INT:
            e.scalar = *(int *)f[i].ptr;
            break;
        case F_DBL:
            e.scalar = *(double *)f[i].ptr;
            break;
        case F_MILESTONES:
            milestones_to_str(&s->v, s->milestones_str, sizeof s->milestones_str);
            e.kind = CT_STATE_STRING;
            e.str = s->milestones_str;
            break;
        case F_MODE:
            e.kind = CT_STATE_STRING;
            e.str = s->v.mode == CT_PLATEAU_MAX ? "max" : "min";
            break;
        case F_TMODE:
            e.kind = CT_STATE_STRING;
            e.str = s->v.threshold_mode == CT_THRESHOLD_ABS ? "abs" : "rel";
            break;
        }
        if ((rc = push(s, &cap, f[i].name, e)))
            goto err;
    }
    double *arrays[] = {s->base_lrs, s->last_lr, s->min_lrs};
    for (int a = 0; a < 3; a++) {
        if (!saves_array(s->kind, a))
            continue;
        for (int g = 0; g < s->ngroups; g++) {
            char name[48];
            snprintf(name, sizeof name, "%s.%d", group_arrays[a], g);
            if ((rc = push(s, &cap, name,
                           (ct_state_entry){.kind = CT_STATE_SCALAR, .scalar = arrays[a][g]})))
                goto err;
        }
    }
    /* sequential: each child's entries under "schedulers.<i>." (their strings stay valid: the
     * children are only reached through s) */
    for (int i = 0; i < s->nchildren; i++) {
        const ct_state_entry *ce;
        int cn;
        if ((rc = ct_sched_state_dict(s->children[i], &ce, &cn)))
            goto err;
        for (int k = 0; k < cn; k++) {
            char name[96];
            snprintf(name, sizeof name, "schedulers.%d.%s", i, ce[k].name);
            if ((rc = push(s, &cap, name, ce[k])))
                goto err;
        }
    }
    *entries = s->entries;
    *n = s->nentries;
    return 0;
err:
    free_entries(s);
    return rc;
}

static const ct_state_entry *find_entry(const ct_state_entry *e, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (e[i].name && !strcmp(e[i].name, name))
            return &e[i];
    return NULL;
}

/* Loads s's own entries (all of entries[0..n), nothing else allowed); unchanged on error. */
static int load_own(ct_sched *s, const ct_state_entry *entries, int n)
{
    sched_vals v = s->v;
    int ng = s->ngroups;
    double arr[3][ng > 0 ? ng : 1];
    field f[MAX_FIELDS];
    int nf = build_fields(s->kind, &v, f), expected = 1;
    const ct_state_entry *e = find_entry(entries, n, "type");
    if (!e)
        return ct__error(CT_EINVAL, "sched state: missing entry 'type'");
    if (e->kind != CT_STATE_STRING || !e->str || strcmp(e->str, skind_name[s->kind]))
        return ct__error(CT_EINVAL, "sched state 'type' is '%s', this scheduler is '%s'",
                         e->kind == CT_STATE_STRING && e->str ? e->str : "?", skind_name[s->kind]);
    for (int i = 0; i < nf; i++, expected++) {
        if (!(e = find_entry(entries, n, f[i].name)))
            return ct__error(CT_EINVAL, "sched state: missing entry '%s'", f[i].name);
        bool is_str = f[i].type == F_MILESTONES || f[i].type == F_MODE || f[i].type == F_TMODE;
        if (is_str != (e->kind == CT_STATE_STRING) || (is_str && !e->str) ||
            (!is_str && e->kind != CT_STATE_SCALAR))
            return ct__error(CT_EINVAL, "sched state '%s': expected a %s", f[i].name,
                             is_str ? "string" : "scalar");
        switch (f[i].type) {
        case F_INT:
            if (e->scalar != floor(e->scalar) || fabs(e->scalar) > 2147483647.0)
                return ct__error(CT_EINVAL, "sched state '%s' = %g: expected an integer", f[i].name,
                                 e->scalar);
            *(int *)f[i].ptr = (int)e->scalar;
            break;
        case F_DBL:
            *(double *)f[i].ptr = e->scalar;
            break;
        case F_MILESTONES:
            if (milestones_from_str(&v, e->str))
                return ct__error(CT_EINVAL,
                                 "sched state 'milestones' = '%s': expected up to %d "
                                 "comma-separated integers",
                                 e->str, CT_SCHED_MAX_MILESTONES);
            break;
        case F_MODE:
        case F_TMODE: {
            const char *a = f[i].type == F_MODE ? "min" : "rel";
            const char *b = f[i].type == F_MODE ? "max" : "abs";
            if (strcmp(e->str, a) && strcmp(e->str, b))
                return ct__error(CT_EINVAL, "sched state '%s' = '%s': expected '%s' or '%s'",
                                 f[i].name, e->str, a, b);
            *(int *)f[i].ptr = strcmp(e->str, a) ? 1 : 0;
            break;
        }
        }
    }
    for (int a = 0; a < 3; a++) {
        if (!saves_array(s->kind, a))
            continue;
        for (int g = 0; g < ng; g++, expected++) {
            char name[48];
            snprintf(name, sizeof name, "%s.%d", group_arrays[a], g);
            if (!(e = find_entry(entries, n, name)))
                return ct__error(CT_EINVAL, "sched state: missing entry '%s' (%d group(s))", name,
                                 ng);
            if (e->kind != CT_STATE_SCALAR)
                return ct__error(CT_EINVAL, "sched state '%s': expected a scalar", name);
            arr[a][g] = e->scalar;
        }
    }
    if (n != expected) {
        /* something else is in there: name it */
        for (int i = 0; i < n; i++) {
            const char *nm = entries[i].name ? entries[i].name : "";
            bool known = !strcmp(nm, "type");
            for (int k = 0; k < nf && !known; k++)
                known = !strcmp(nm, f[k].name);
            for (int a = 0; a < 3 && !known; a++)
                for (int g = 0; g < ng && !known; g++) {
                    char name[48];
                    snprintf(name, sizeof name, "%s.%d", group_arrays[a], g);
                    known = saves_array(s->kind, a) && !strcmp(nm, name);
                }
            if (!known)
                return ct__error(CT_EINVAL,
                                 "sched state '%s': unexpected entry for a %s "
                                 "scheduler over %d group(s)",
                                 nm, skind_name[s->kind], ng);
        }
        return ct__error(CT_EINVAL, "sched state: %d entries, expected %d (duplicates?)", n,
                         expected);
    }
    if ((s->kind == S_STEP && v.step_size < 1) || (s->kind == S_COS && v.t_max < 1) ||
        (s->kind == S_LIN && v.total_iters < 1) || v.last_epoch < -1 ||
        (s->kind == S_SEQ && v.nmilestones != s->nchildren - 1))
        return ct__error(CT_EINVAL, "sched state: bad values for a %s scheduler",
                         skind_name[s->kind]);
    s->v = v;
    double *arrays[] = {s->base_lrs, s->last_lr, s->min_lrs};
    for (int a = 0; a < 3; a++)
        if (saves_array(s->kind, a))
            memcpy(arrays[a], arr[a], (size_t)ng * sizeof(double));
    return 0;
}

typedef struct snapshot {
    sched_vals v;
    double *arr; /* 3 * ngroups */
} snapshot;

static void snap_take(const ct_sched *s, snapshot *sn)
{
    sn->v = s->v;
    memcpy(sn->arr, s->base_lrs, (size_t)(3 * s->ngroups) * sizeof(double));
}

static void snap_restore(ct_sched *s, const snapshot *sn)
{
    s->v = sn->v;
    memcpy(s->base_lrs, sn->arr, (size_t)(3 * s->ngroups) * sizeof(double));
}

int ct_sched_load_state_dict(ct_sched *s, const ct_state_entry *entries, int n)
{
    if (!s || n < 0 || (n > 0 && !entries))
        return ct__error(CT_EINVAL, "sched_load_state_dict: NULL argument");
    if (s->kind != S_SEQ)
        return load_own(s, entries, n);
    /* sequential: split entries into its own and each child's (prefix stripped), load all,
     * and put everything back if any part fails */
    int rc = 0, nc = s->nchildren, nown = 0, ng = s->ngroups;
    ct_state_entry *split = calloc((size_t)n + 1, sizeof *split);
    int *owner = calloc((size_t)n + 1, sizeof *owner);
    snapshot *snaps = calloc((size_t)nc + 1, sizeof *snaps);
    double *arrs = calloc((size_t)(3 * ng * (nc + 1)) + 1, sizeof *arrs);
    ct_state_entry *part = calloc((size_t)n + 1, sizeof *part);
    if (!split || !owner || !snaps || !arrs || !part) {
        rc = ct__error(CT_ENOMEM, "sched_load_state_dict: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const char *name = entries[i].name ? entries[i].name : "";
        int idx, off = 0;
        split[i] = entries[i];
        owner[i] = -1;
        if (sscanf(name, "schedulers.%d.%n", &idx, &off) == 1 && off > 0) {
            if (idx < 0 || idx >= nc) {
                rc = ct__error(CT_EINVAL,
                               "sched state '%s': this sequential scheduler has %d "
                               "schedulers",
                               name, nc);
                goto out;
            }
            owner[i] = idx;
            split[i].name = name + off;
        } else {
            nown++;
        }
    }
    for (int c = -1; c < nc; c++) {
        ct_sched *t = c < 0 ? s : s->children[c];
        snaps[c + 1].arr = arrs + (size_t)(3 * ng * (c + 1));
        snap_take(t, &snaps[c + 1]);
    }
    for (int c = -1; c < nc && !rc; c++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (owner[i] == c)
                part[m++] = split[i];
        if (c < 0 && m != nown)
            rc = ct__error(CT_EINVAL, "sched state: internal split error");
        else
            rc = load_own(c < 0 ? s : s->children[c], part, m);
        if (rc && c >= 0) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", ct_last_error());
            ct__error(rc, "sched state 'schedulers.%d': %s", c, msg);
        }
    }
    if (rc)
        for (int c = -1; c < nc; c++)
            snap_restore(c < 0 ? s : s->children[c], &snaps[c + 1]);
out:
    free(split);
    free(owner);
    free(snaps);
    free(arrs);
    free(part);
    return rc;
}
