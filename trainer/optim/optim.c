/* trainer/optim/optim.c — SGD, Adam and AdamW over borrowed f32 parameter arrays, with PyTorch
 * 1.13's exact update rules (torch.optim.*, single-tensor path) and a named state dict.
 *
 * The element updates are the backends' (the table's sgd_step / adam_step: trainer/cpu/optim_cpu.c,
 * trainer/cuda/optim.cu), on the device the parameters live on (ct_param_ref.device), where the
 * state arrays live too; a state dict holds host copies of them.
 * Not here: schedulers (sched.c), tensors, foreach variants.
 *
 * Layout: params[] in group order (group g owns params[first .. first+count)); per parameter
 * state arrays of numel floats, allocated on the parameter's first step:
 *   SGD:  buf = momentum_buffer (momentum != 0 only)
 *   Adam: buf = exp_avg, sq = exp_avg_sq, mx = max_exp_avg_sq (amsgrad only), step.
 * Arithmetic mirrors ATen's float kernels: hyper-parameters are doubles (Python floats) that are
 * rounded to float where ATen rounds them, and each tensor op is rounded as ATen rounds it. */
#define _GNU_SOURCE /* asprintf */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/optim.h"
#include "trainer/backend/backend.h"
#include "trainer/cpu/vecmath.h" /* ct__sumsq8 */
#include "trainer/optim/optim_internal.h"

enum kind { K_SGD, K_ADAM, K_ADAMW };

typedef struct group {
    double lr, momentum, dampening, weight_decay, beta1, beta2, eps;
    bool nesterov, amsgrad, maximize;
    bool has_initial_lr;
    double initial_lr;
    int first, count;
} group;

typedef struct pstate {
    char *name;
    float *value, *grad;
    int64_t numel;
    int64_t lo, sn; /* the shard this optimizer steps: elements [lo, lo + sn) (0, numel: all) */
    int group;
    bool has_state;
    double step;
    const ct__backend *bk; /* the device of value, grad and the state arrays */
    float *buf;            /* momentum_buffer (SGD) or exp_avg (Adam) */
    float *sq;             /* exp_avg_sq */
    float *mx;             /* max_exp_avg_sq */
    float *host[3];        /* host copies of buf, sq, mx for a state dict (devices only) */
} pstate;

struct ct_optim {
    enum kind kind;
    group *groups;
    int ngroups;
    pstate *p;
    int nparams;
    /* the last state dict: entries and the names they point at */
    ct_state_entry *entries;
    char **names;
    int nentries;
};

static const char *kind_name[] = {"sgd", "adam", "adamw"};

/* Resolves a "zero means default" field: 0.0 -> def, -0.0 (CT_ZERO) -> 0.0, else v. */
static double dflt(double v, double def)
{
    if (v == 0.0)
        return signbit(v) ? 0.0 : def;
    return v;
}

int ct_sgd_opts_check(const ct_sgd_opts *opts)
{
    if (!opts)
        return 0;
    if (!(opts->lr >= 0.0))
        return ct__error(CT_EINVAL, "sgd: lr = %g: must be >= 0", opts->lr);
    if (!(opts->momentum >= 0.0))
        return ct__error(CT_EINVAL, "sgd: momentum = %g: must be >= 0", opts->momentum);
    if (!(opts->dampening >= 0.0))
        return ct__error(CT_EINVAL, "sgd: dampening = %g: must be >= 0", opts->dampening);
    if (!(opts->weight_decay >= 0.0))
        return ct__error(CT_EINVAL, "sgd: weight_decay = %g: must be >= 0", opts->weight_decay);
    if (opts->nesterov && (opts->momentum <= 0.0 || opts->dampening != 0.0))
        return ct__error(CT_EINVAL,
                         "sgd: nesterov needs momentum > 0 and dampening = 0 "
                         "(momentum = %g, dampening = %g)",
                         opts->momentum, opts->dampening);
    return 0;
}

int ct_adam_opts_check(const ct_adam_opts *opts)
{
    if (!opts)
        return 0;
    if (!(opts->lr >= 0.0))
        return ct__error(CT_EINVAL, "adam: lr = %g: must be >= 0", opts->lr);
    if (!(opts->eps >= 0.0))
        return ct__error(CT_EINVAL, "adam: eps = %g: must be >= 0", opts->eps);
    if (!(opts->beta1 >= 0.0 && opts->beta1 < 1.0))
        return ct__error(CT_EINVAL, "adam: beta1 = %g: must be in [0, 1)", opts->beta1);
    if (!(opts->beta2 >= 0.0 && opts->beta2 < 1.0))
        return ct__error(CT_EINVAL, "adam: beta2 = %g: must be in [0, 1)", opts->beta2);
    if (!(opts->weight_decay >= 0.0))
        return ct__error(CT_EINVAL, "adam: weight_decay = %g: must be >= 0", opts->weight_decay);
    return 0;
}

/* Fills g's hyper-parameters from opts (NULL: defaults); checks them. */
static int group_from_opts(enum kind kind, const void *opts, group *g)
{
    memset(g, 0, sizeof *g);
    if (kind == K_SGD) {
        ct_sgd_opts d = {0};
        const ct_sgd_opts *s = opts ? opts : &d;
        int rc = ct_sgd_opts_check(s);
        if (rc)
            return rc;
        g->lr = dflt(s->lr, 1e-3);
        g->momentum = s->momentum;
        g->dampening = s->dampening;
        g->nesterov = s->nesterov;
        g->weight_decay = s->weight_decay;
        g->maximize = s->maximize;
    } else {
        ct_adam_opts d = {0};
        const ct_adam_opts *a = opts ? opts : &d;
        int rc = ct_adam_opts_check(a);
        if (rc)
            return rc;
        g->lr = dflt(a->lr, 1e-3);
        g->beta1 = dflt(a->beta1, 0.9);
        g->beta2 = dflt(a->beta2, 0.999);
        g->eps = dflt(a->eps, 1e-8);
        g->weight_decay = dflt(a->weight_decay, kind == K_ADAMW ? 1e-2 : 0.0);
        g->amsgrad = a->amsgrad;
        g->maximize = a->maximize;
    }
    return 0;
}

static int check_params(const ct_optim *o, const ct_param_ref *params, int n)
{
    if (n < 0 || (n > 0 && !params))
        return ct__error(CT_EINVAL, "optim: params: %d parameters at %p", n, (void *)params);
    for (int i = 0; i < n; i++) {
        const ct_param_ref *r = &params[i];
        if (!r->name || !r->name[0])
            return ct__error(CT_EINVAL, "optim: params[%d].name is empty", i);
        if (r->numel < 0 || (r->numel > 0 && !r->value))
            return ct__error(CT_EINVAL, "optim: params[%d] '%s': numel %lld with value %p", i,
                             r->name, (long long)r->numel, (void *)r->value);
        for (int j = 0; j < i; j++)
            if (!strcmp(params[j].name, r->name))
                return ct__error(CT_EINVAL, "optim: params[%d].name '%s' is not unique", i,
                                 r->name);
        for (int j = 0; o && j < o->nparams; j++)
            if (!strcmp(o->p[j].name, r->name))
                return ct__error(CT_EINVAL,
                                 "optim: params[%d].name '%s' is already in the optimizer", i,
                                 r->name);
    }
    return 0;
}

static int add_group(ct_optim *o, const ct_param_ref *params, int n, const void *opts)
{
    group g;
    int rc = group_from_opts(o->kind, opts, &g);
    if (rc)
        return rc;
    if ((rc = check_params(o, params, n)))
        return rc;
    group *ng = realloc(o->groups, (size_t)(o->ngroups + 1) * sizeof *ng);
    if (!ng)
        return ct__error(CT_ENOMEM, "optim: out of memory");
    o->groups = ng;
    pstate *np = realloc(o->p, (size_t)(o->nparams + n + 1) * sizeof *np);
    if (!np)
        return ct__error(CT_ENOMEM, "optim: out of memory");
    o->p = np;
    int first = o->nparams;
    for (int i = 0; i < n; i++) {
        pstate *p = &o->p[first + i];
        memset(p, 0, sizeof *p);
        p->name = strdup(params[i].name);
        if (!p->name) {
            for (int j = 0; j < i; j++)
                free(o->p[first + j].name);
            return ct__error(CT_ENOMEM, "optim: out of memory");
        }
        p->value = params[i].value;
        p->grad = params[i].grad;
        p->numel = params[i].numel;
        p->sn = p->numel;
        p->group = o->ngroups;
        if (!(p->bk = ct__backend_of(params[i].device))) {
            for (int j = 0; j <= i; j++)
                free(o->p[first + j].name);
            return CT_ENOSYS; /* ct__backend_of said which device and why */
        }
    }
    g.first = first;
    g.count = n;
    o->groups[o->ngroups++] = g;
    o->nparams += n;
    return o->ngroups - 1;
}

static ct_optim *optim_new(enum kind kind, const ct_param_ref *params, int n, const void *opts)
{
    ct_optim *o = calloc(1, sizeof *o);
    if (!o) {
        ct__error(CT_ENOMEM, "optim: out of memory");
        return NULL;
    }
    o->kind = kind;
    if (add_group(o, params, n, opts) < 0)
        goto err;
    return o;
err:
    ct_optim_destroy(&o);
    return NULL;
}

ct_optim *ct_optim_sgd_new(const ct_param_ref *params, int n, const ct_sgd_opts *opts)
{
    return optim_new(K_SGD, params, n, opts);
}

ct_optim *ct_optim_adam_new(const ct_param_ref *params, int n, const ct_adam_opts *opts)
{
    return optim_new(K_ADAM, params, n, opts);
}

ct_optim *ct_optim_adamw_new(const ct_param_ref *params, int n, const ct_adam_opts *opts)
{
    return optim_new(K_ADAMW, params, n, opts);
}

int ct_optim_add_group(ct_optim *o, const ct_param_ref *params, int n, const void *opts)
{
    if (!o)
        return ct__error(CT_EINVAL, "optim_add_group: optimizer is NULL");
    return add_group(o, params, n, opts);
}

static void free_entries(ct_optim *o)
{
    for (int i = 0; i < o->nentries; i++)
        free(o->names[i]);
    free(o->names);
    free(o->entries);
    o->names = NULL;
    o->entries = NULL;
    o->nentries = 0;
}

static void free_state(pstate *p)
{
    p->bk->free(p->buf);
    p->bk->free(p->sq);
    p->bk->free(p->mx);
    for (int k = 0; k < 3; k++) {
        free(p->host[k]);
        p->host[k] = NULL;
    }
    p->buf = p->sq = p->mx = NULL;
    p->has_state = false;
    p->step = 0;
}

void ct_optim_destroy(ct_optim **op)
{
    if (!op || !*op)
        return;
    ct_optim *o = *op;
    for (int i = 0; i < o->nparams; i++) {
        free_state(&o->p[i]);
        free(o->p[i].name);
    }
    free(o->p);
    free(o->groups);
    free_entries(o);
    free(o);
    *op = NULL;
}

/* *a = zeroed state for p on its device, unless it exists */
static int state_array(pstate *p, float **a)
{
    size_t bytes = (size_t)(p->sn ? p->sn : 1) * sizeof(float);
    void *m = NULL;
    if (*a)
        return 0;
    if (p->bk->alloc(&m, bytes) < 0 || p->bk->zero(m, bytes) < 0) {
        p->bk->free(m);
        return ct__error(CT_ENOMEM, "optim: out of %s memory for the state of '%s' (%lld floats)",
                         p->bk->name, p->name, (long long)p->sn);
    }
    *a = m;
    return 0;
}

/* Allocates p's state arrays for the current hyper-parameters (zeroed). */
static int alloc_state(ct_optim *o, pstate *p)
{
    const group *gr = &o->groups[p->group];
    int rc = 0;
    if (o->kind == K_SGD)
        return gr->momentum != 0.0 ? state_array(p, &p->buf) : 0;
    if ((rc = state_array(p, &p->buf)) < 0 || (rc = state_array(p, &p->sq)) < 0)
        return rc;
    return gr->amsgrad ? state_array(p, &p->mx) : 0;
}

int ct_optim_step(ct_optim *o)
{
    if (!o)
        return ct__error(CT_EINVAL, "optim_step: optimizer is NULL");
    for (int i = 0; i < o->nparams; i++) {
        pstate *p = &o->p[i];
        const group *gr = &o->groups[p->group];
        if (!p->grad)
            continue;
        int rc = alloc_state(o, p);
        if (rc)
            return rc;
        if (o->kind == K_SGD) {
            /* torch creates the momentum buffer from the gradient on the first step with
             * momentum; a buffer restored from a state dict counts as existing. */
            ct__sgd_h h = {.lr = gr->lr,
                           .momentum = gr->momentum,
                           .dampening = gr->dampening,
                           .weight_decay = gr->weight_decay,
                           .nesterov = gr->nesterov,
                           .maximize = gr->maximize,
                           .first = !p->has_state};
            if ((rc = CT__BK_CALL(p->bk, sgd_step, p->value + p->lo, p->grad + p->lo, p->buf, p->sn,
                                  &h)) < 0)
                return rc;
            if (gr->momentum != 0.0)
                p->has_state = true;
        } else {
            if (gr->amsgrad && !p->mx)
                return ct__error(CT_EINVAL, "optim: '%s' has no max_exp_avg_sq", p->name);
            ct__adam_h h = {.lr = gr->lr,
                            .beta1 = gr->beta1,
                            .beta2 = gr->beta2,
                            .eps = gr->eps,
                            .weight_decay = gr->weight_decay,
                            .amsgrad = gr->amsgrad,
                            .maximize = gr->maximize,
                            .decoupled = o->kind == K_ADAMW,
                            .step = p->step + 1.0};
            if ((rc = CT__BK_CALL(p->bk, adam_step, p->value + p->lo, p->grad + p->lo, p->buf,
                                  p->sq, p->mx, p->sn, &h)) < 0)
                return rc;
            p->step += 1.0;
            p->has_state = true;
        }
    }
    return 0;
}

void ct_optim_zero_grad(ct_optim *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->nparams; i++)
        if (o->p[i].grad && o->p[i].numel)
            o->p[i].bk->zero(o->p[i].grad, (size_t)o->p[i].numel * sizeof(float));
}

/* clip_grad_norm (L2) where the gradients live on a device: each parameter's norm by the
 * backend's norm2 into one device array, ONE download of them all, the total on the host as on
 * the CPU (the same per-parameter floats, added in the same order), then the backend's scale. */
static int clip_norm_device(ct_optim *o, double max_norm, double norm_type, double *total_norm)
{
    const ct__backend *bk = o->p[0].bk;
    for (int i = 0; i < o->nparams; i++)
        if (o->p[i].bk != bk)
            return ct__error(CT_EINVAL,
                             "optim_clip_grad_norm: parameters on devices %s and %s: move the "
                             "model to one device",
                             bk->name, o->p[i].bk->name);
    if (norm_type != 2.0)
        return ct__error(CT_ENOSYS,
                         "optim_clip_grad_norm: norm_type %g is not implemented on device %s "
                         "(2 is)",
                         norm_type, bk->name);
    float *dn = NULL, *hn = malloc(sizeof *hn * (size_t)(o->nparams ? o->nparams : 1));
    int rc = hn ? CT__BK_CALL(bk, alloc, (void **)&dn, sizeof *dn * (size_t)(o->nparams + 1))
                : ct__error(CT_ENOMEM, "optim_clip_grad_norm");
    for (int i = 0; rc == 0 && i < o->nparams; i++)
        rc = o->p[i].grad && o->p[i].numel
                 ? CT__BK_CALL(bk, norm2, o->p[i].numel, o->p[i].grad, dn + i)
                 : CT__BK_CALL(bk, fill, 1, 0.0f, dn + i);
    if (rc == 0)
        rc = bk->download(hn, dn, sizeof *hn * (size_t)o->nparams);
    if (rc == 0) {
        double acc = 0.0;
        for (int i = 0; i < o->nparams; i++)
            if (o->p[i].grad)
                acc += (double)hn[i] * hn[i];
        float total = (float)sqrt(acc);
        if (total_norm)
            *total_norm = total;
        float coef = (float)max_norm / (total + 1e-6f);
        for (int i = 0; rc == 0 && coef < 1.0f && i < o->nparams; i++)
            if (o->p[i].grad && o->p[i].numel)
                rc = CT__BK_CALL(bk, scale, o->p[i].numel, coef, o->p[i].grad);
    }
    if (dn)
        bk->free(dn);
    free(hn);
    return rc;
}

int ct_optim_clip_grad_norm(ct_optim *o, double max_norm, double norm_type, double *total_norm)
{
    if (!o)
        return ct__error(CT_EINVAL, "optim_clip_grad_norm: optimizer is NULL");
    if (norm_type == 0.0)
        norm_type = 2.0;
    if (!(max_norm >= 0.0))
        return ct__error(CT_EINVAL, "optim_clip_grad_norm: max_norm = %g: must be >= 0", max_norm);
    if (!(norm_type > 0.0))
        return ct__error(CT_EINVAL, "optim_clip_grad_norm: norm_type = %g: must be > 0", norm_type);
    for (int i = 0; i < o->nparams; i++)
        if (o->p[i].bk->device != CT_CPU)
            return clip_norm_device(o, max_norm, norm_type, total_norm);
    /* torch: norm of the per-parameter norms; in double, rounded to float as torch's f32 */
    const bool inf = isinf(norm_type);
    double acc = 0.0;
    for (int i = 0; i < o->nparams; i++) {
        const float *g = o->p[i].grad;
        if (!g)
            continue;
        double pn = 0.0;
        if (norm_type == 2.0) /* the common case, in 8 partial sums */
            pn = ct__sumsq8(g, o->p[i].numel);
        else
            for (int64_t k = 0; k < o->p[i].numel; k++) {
                double a = fabs((double)g[k]);
                if (inf)
                    pn = a > pn ? a : pn;
                else if (norm_type == 1.0)
                    pn += a;
                else
                    pn += pow(a, norm_type);
            }
        if (inf) {
            acc = pn > acc ? pn : acc;
        } else {
            /* each parameter's norm is a float tensor in torch, then the norms are normed */
            float pnf = (float)(norm_type == 2.0   ? sqrt(pn)
                                : norm_type == 1.0 ? pn
                                                   : pow(pn, 1.0 / norm_type));
            acc += norm_type == 2.0   ? (double)pnf * pnf
                   : norm_type == 1.0 ? pnf
                                      : pow(pnf, norm_type);
        }
    }
    float total = (float)(inf                ? acc
                          : norm_type == 2.0 ? sqrt(acc)
                          : norm_type == 1.0 ? acc
                                             : pow(acc, 1.0 / norm_type));
    if (total_norm)
        *total_norm = total;
    float coef = (float)max_norm / (total + 1e-6f);
    if (coef < 1.0f)
        for (int i = 0; i < o->nparams; i++) {
            float *restrict g = o->p[i].grad;
            if (!g)
                continue;
            for (int64_t k = 0; k < o->p[i].numel; k++)
                g[k] *= coef;
        }
    return 0;
}

int ct__optim_shard_sumsq(ct_optim *o, double *sums)
{
    for (int i = 0; i < o->nparams; i++)
        if (o->p[i].bk->device != CT_CPU)
            return ct__backend_missing(o->p[i].bk, "a sharded clip_grad_norm");
    for (int i = 0; i < o->nparams; i++) {
        const float *g = o->p[i].grad;
        sums[i] = g ? ct__sumsq8(g + o->p[i].lo, o->p[i].sn) : 0.0;
    }
    return 0;
}

int ct__optim_clip_sumsq(ct_optim *o, const double *sums, double max_norm, double *total_norm)
{
    if (!(max_norm >= 0.0))
        return ct__error(CT_EINVAL, "optim_clip_grad_norm: max_norm = %g: must be >= 0", max_norm);
    double acc = 0.0; /* as ct_optim_clip_grad_norm's L2 norm: per-parameter norms in float */
    for (int i = 0; i < o->nparams; i++)
        if (o->p[i].grad) {
            float pnf = (float)sqrt(sums[i]);
            acc += (double)pnf * pnf;
        }
    float total = (float)sqrt(acc);
    if (total_norm)
        *total_norm = total;
    float coef = (float)max_norm / (total + 1e-6f);
    if (coef < 1.0f)
        for (int i = 0; i < o->nparams; i++) {
            float *restrict g = o->p[i].grad;
            for (int64_t k = 0; g && k < o->p[i].sn; k++)
                g[o->p[i].lo + k] *= coef;
        }
    return 0;
}

int ct_optim_clip_grad_value(ct_optim *o, double clip)
{
    if (!o || !(clip >= 0.0))
        return ct__error(CT_EINVAL, "optim_clip_grad_value: clip = %g: must be >= 0", clip);
    for (int i = 0; i < o->nparams; i++)
        if (o->p[i].bk->device != CT_CPU)
            return ct__backend_missing(o->p[i].bk, "clip_grad_value");
    const float c = (float)clip;
    for (int i = 0; i < o->nparams; i++) {
        float *restrict g = o->p[i].grad;
        if (!g)
            continue;
        for (int64_t k = 0; k < o->p[i].numel; k++)
            g[k] = g[k] < -c ? -c : g[k] > c ? c : g[k];
    }
    return 0;
}

int ct_optim_set_param_ptrs(ct_optim *o, int i, float *value, float *grad)
{
    if (!o || i < 0 || i >= o->nparams)
        return ct__error(CT_EINVAL, "optim_set_param_ptrs: index %d out of range", i);
    if (o->p[i].numel > 0 && !value)
        return ct__error(CT_EINVAL, "optim_set_param_ptrs: '%s': value is NULL", o->p[i].name);
    o->p[i].value = value;
    o->p[i].grad = grad;
    return 0;
}

int ct_optim_set_shard(ct_optim *o, int i, int64_t lo, int64_t n)
{
    if (!o || i < 0 || i >= o->nparams)
        return ct__error(CT_EINVAL, "optim_set_shard: index %d out of range", i);
    pstate *p = &o->p[i];
    if (lo < 0 || n < 0 || lo + n > p->numel)
        return ct__error(CT_EINVAL,
                         "optim_set_shard: '%s': [%lld, %lld) not within its %lld elements",
                         p->name, (long long)lo, (long long)(lo + n), (long long)p->numel);
    if (lo == p->lo && n == p->sn)
        return 0;
    /* existing state (e.g. a full checkpoint's): keep the new shard's part of the old one */
    float **arr[3] = {&p->buf, &p->sq, &p->mx};
    float *fresh[3] = {NULL, NULL, NULL};
    int64_t old_lo = p->lo, old_sn = p->sn;
    p->sn = n;
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        if (!*arr[k])
            continue;
        if (lo < old_lo || lo + n > old_lo + old_sn)
            rc = ct__error(CT_EINVAL,
                           "optim_set_shard: '%s': state of [%lld, %lld) lacks [%lld, %lld)",
                           p->name, (long long)old_lo, (long long)(old_lo + old_sn), (long long)lo,
                           (long long)(lo + n));
        else if ((rc = state_array(p, &fresh[k])) == 0 && n)
            rc = p->bk->copy(fresh[k], *arr[k] + (lo - old_lo), (size_t)n * sizeof(float));
    }
    if (rc < 0) {
        p->sn = old_sn;
        for (int k = 0; k < 3; k++)
            p->bk->free(fresh[k]);
        return rc;
    }
    for (int k = 0; k < 3; k++) {
        if (!*arr[k])
            continue;
        p->bk->free(*arr[k]);
        *arr[k] = fresh[k];
        free(p->host[k]);
        p->host[k] = NULL;
    }
    p->lo = lo;
    return 0;
}

int ct_optim_find_param(const ct_optim *o, const float *value)
{
    for (int i = 0; o && value && i < o->nparams; i++)
        if (o->p[i].value == value)
            return i;
    return -1;
}

int64_t ct_optim_state_bytes(const ct_optim *o)
{
    int64_t b = 0;
    for (int i = 0; o && i < o->nparams; i++) {
        const pstate *p = &o->p[i];
        b += (int64_t)((p->buf != NULL) + (p->sq != NULL) + (p->mx != NULL)) * p->sn *
             (int64_t)sizeof(float);
    }
    return b;
}

int ct_optim_num_params(const ct_optim *o)
{
    return o ? o->nparams : 0;
}

int ct_optim_num_groups(const ct_optim *o)
{
    return o ? o->ngroups : 0;
}

const char *ct_optim_kind(const ct_optim *o)
{
    return o ? kind_name[o->kind] : "";
}

double ct_optim_get_lr(const ct_optim *o, int g)
{
    if (!o || g < 0 || g >= o->ngroups)
        return NAN;
    return o->groups[g].lr;
}

int ct_optim_set_lr(ct_optim *o, int g, double lr)
{
    if (!o || g >= o->ngroups)
        return ct__error(CT_EINVAL, "optim_set_lr: group %d out of range", g);
    if (!(lr >= 0.0))
        return ct__error(CT_EINVAL, "optim_set_lr: lr = %g: must be >= 0", lr);
    for (int i = 0; i < o->ngroups; i++)
        if (g < 0 || i == g)
            o->groups[i].lr = lr;
    return 0;
}

double ct__optim_initial_lr(ct_optim *o, int g)
{
    group *gr = &o->groups[g];
    if (!gr->has_initial_lr) {
        gr->has_initial_lr = true;
        gr->initial_lr = gr->lr;
    }
    return gr->initial_lr;
}

/* ---- state dict ----------------------------------------------------------------------------- */

/* Group hyper-parameters by name: which kinds have them, and where they live. */
typedef struct hyper {
    const char *name;
    unsigned kinds; /* bit per enum kind */
    size_t off;     /* offset of a double, or of a bool when is_bool */
    bool is_bool;
} hyper;

#define SGD_ (1u << K_SGD)
#define ADAM_ ((1u << K_ADAM) | (1u << K_ADAMW))
static const hyper hypers[] = {
    {"lr", SGD_ | ADAM_, offsetof(group, lr), false},
    {"momentum", SGD_, offsetof(group, momentum), false},
    {"dampening", SGD_, offsetof(group, dampening), false},
    {"nesterov", SGD_, offsetof(group, nesterov), true},
    {"weight_decay", SGD_ | ADAM_, offsetof(group, weight_decay), false},
    {"beta1", ADAM_, offsetof(group, beta1), false},
    {"beta2", ADAM_, offsetof(group, beta2), false},
    {"eps", ADAM_, offsetof(group, eps), false},
    {"amsgrad", ADAM_, offsetof(group, amsgrad), true},
    {"maximize", SGD_ | ADAM_, offsetof(group, maximize), true},
    {"initial_lr", SGD_ | ADAM_, offsetof(group, initial_lr), false},
};
#define INITIAL_LR_IDX 10

static double hyper_get(const group *g, const hyper *h)
{
    const char *base = (const char *)g + h->off;
    return h->is_bool ? (double)*(const bool *)base : *(const double *)base;
}

static void hyper_set(group *g, const hyper *h, double v)
{
    if (h == &hypers[INITIAL_LR_IDX])
        g->has_initial_lr = true;
    char *base = (char *)g + h->off;
    if (h->is_bool)
        *(bool *)base = v != 0.0;
    else
        *(double *)base = v;
}

/* Per-parameter state pieces. */
enum { PS_MOM = 1, PS_STEP = 2, PS_AVG = 4, PS_SQ = 8, PS_MX = 16 };
static const struct {
    const char *suffix;
    int bit;
    bool tensor;
} pieces[] = {
    {".momentum_buffer", PS_MOM, true}, {".step", PS_STEP, false},
    {".exp_avg", PS_AVG, true},         {".exp_avg_sq", PS_SQ, true},
    {".max_exp_avg_sq", PS_MX, true},
};

/* data[] (as ct_optim_state_dict lays it out) := host copies of p's device arrays */
static int host_copies(pstate *p, const float **data)
{
    float *dev[3] = {p->buf, p->sq, p->mx};
    size_t bytes = (size_t)p->sn * sizeof(float);
    for (int k = 0; k < 3; k++) {
        if (!dev[k])
            continue;
        if (!p->host[k] && !(p->host[k] = malloc(bytes ? bytes : 1)))
            return ct__error(CT_ENOMEM, "optim_state_dict: out of memory");
        int rc = p->bk->download(p->host[k], dev[k], bytes);
        if (rc < 0)
            return rc;
    }
    data[0] = data[2] = p->host[0];
    data[3] = p->host[1];
    data[4] = p->host[2];
    return 0;
}

static int push(ct_optim *o, int *cap, char *name, ct_state_entry e)
{
    if (!name)
        return ct__error(CT_ENOMEM, "optim_state_dict: out of memory");
    if (o->nentries == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        ct_state_entry *ne = realloc(o->entries, (size_t)nc * sizeof *ne);
        if (ne)
            o->entries = ne;
        char **nn = realloc(o->names, (size_t)nc * sizeof *nn);
        if (nn)
            o->names = nn;
        if (!ne || !nn) {
            free(name);
            return ct__error(CT_ENOMEM, "optim_state_dict: out of memory");
        }
        *cap = nc;
    }
    e.name = name;
    o->names[o->nentries] = name;
    o->entries[o->nentries++] = e;
    return 0;
}

int ct_optim_state_dict(ct_optim *o, const ct_state_entry **entries, int *n)
{
    if (!o || !entries || !n)
        return ct__error(CT_EINVAL, "optim_state_dict: NULL argument");
    free_entries(o);
    int cap = 0, rc;
    if ((rc = push(o, &cap, strdup("type"),
                   (ct_state_entry){.kind = CT_STATE_STRING, .str = kind_name[o->kind]})))
        goto err;
    for (int g = 0; g < o->ngroups; g++) {
        for (size_t h = 0; h < CT_ARRAY_LEN(hypers); h++) {
            if (!(hypers[h].kinds & (1u << o->kind)))
                continue;
            if (h == INITIAL_LR_IDX && !o->groups[g].has_initial_lr)
                continue;
            char *name = NULL;
            if (asprintf(&name, "param_groups.%d.%s", g, hypers[h].name) < 0)
                name = NULL;
            if ((rc = push(o, &cap, name,
                           (ct_state_entry){.kind = CT_STATE_SCALAR,
                                            .scalar = hyper_get(&o->groups[g], &hypers[h])})))
                goto err;
        }
    }
    for (int i = 0; i < o->nparams; i++) {
        pstate *p = &o->p[i];
        if (!p->has_state)
            continue;
        const float *data[] = {p->buf, NULL, p->buf, p->sq, p->mx};
        if (p->bk->device != CT_CPU && (rc = host_copies(p, data)) < 0)
            goto err;
        for (size_t k = 0; k < CT_ARRAY_LEN(pieces); k++) {
            bool is_sgd_piece = pieces[k].bit == PS_MOM;
            if (is_sgd_piece != (o->kind == K_SGD) || (pieces[k].tensor && !data[k]))
                continue;
            char *name = NULL;
            if (asprintf(&name, "%s%s", p->name, pieces[k].suffix) < 0)
                name = NULL;
            ct_state_entry e = {.kind = pieces[k].tensor ? CT_STATE_TENSOR : CT_STATE_SCALAR};
            if (pieces[k].tensor) {
                e.data = data[k];
                e.numel = p->sn;
            } else {
                e.scalar = p->step;
            }
            if ((rc = push(o, &cap, name, e)))
                goto err;
        }
    }
    *entries = o->entries;
    *n = o->nentries;
    return 0;
err:
    free_entries(o);
    return rc;
}

static int find_param(const ct_optim *o, const char *name, size_t len)
{
    for (int i = 0; i < o->nparams; i++)
        if (strlen(o->p[i].name) == len && !strncmp(o->p[i].name, name, len))
            return i;
    return -1;
}

int ct_optim_load_state_dict(ct_optim *o, const ct_state_entry *entries, int n)
{
    int rc = 0;
    int *mask = NULL;
    group *ng = NULL;
    float **fresh = NULL; /* newly allocated arrays: 3 per parameter */
    if (!o || n < 0 || (n > 0 && !entries))
        return ct__error(CT_EINVAL, "optim_load_state_dict: NULL argument");
    mask = calloc((size_t)o->nparams + 1, sizeof *mask);
    ng = malloc((size_t)o->ngroups * sizeof *ng + 1);
    fresh = calloc((size_t)o->nparams * 3 + 1, sizeof *fresh);
    if (!mask || !ng || !fresh) {
        rc = ct__error(CT_ENOMEM, "optim_load_state_dict: out of memory");
        goto out;
    }
    memcpy(ng, o->groups, (size_t)o->ngroups * sizeof *ng);
    bool have_type = false;
    unsigned char *have_lr = (unsigned char *)calloc((size_t)o->ngroups + 1, 1);
    if (!have_lr) {
        rc = ct__error(CT_ENOMEM, "optim_load_state_dict: out of memory");
        goto out;
    }
    /* Pass 1: validate every entry, collect hyper-parameters into ng. */
    for (int e = 0; e < n && !rc; e++) {
        const ct_state_entry *en = &entries[e];
        const char *name = en->name ? en->name : "";
        if (!strcmp(name, "type")) {
            if (en->kind != CT_STATE_STRING || !en->str || strcmp(en->str, kind_name[o->kind]))
                rc = ct__error(CT_EINVAL, "optim state 'type' is '%s', this optimizer is '%s'",
                               en->kind == CT_STATE_STRING && en->str ? en->str : "?",
                               kind_name[o->kind]);
            have_type = true;
            continue;
        }
        int g, off = 0;
        if (sscanf(name, "param_groups.%d.%n", &g, &off) == 1 && off > 0) {
            const char *hn = name + off;
            if (g < 0 || g >= o->ngroups) {
                rc = ct__error(CT_EINVAL,
                               "optim state '%s': group %d, this optimizer has %d group(s)", name,
                               g, o->ngroups);
                break;
            }
            size_t h = 0;
            for (; h < CT_ARRAY_LEN(hypers); h++)
                if ((hypers[h].kinds & (1u << o->kind)) && !strcmp(hypers[h].name, hn))
                    break;
            if (h == CT_ARRAY_LEN(hypers)) {
                rc = ct__error(CT_EINVAL, "optim state '%s': unknown hyper-parameter '%s' for %s",
                               name, hn, kind_name[o->kind]);
                break;
            }
            if (en->kind != CT_STATE_SCALAR) {
                rc = ct__error(CT_EINVAL, "optim state '%s': expected a scalar", name);
                break;
            }
            if (h == 0)
                have_lr[g] = 1;
            hyper_set(&ng[g], &hypers[h], en->scalar);
            continue;
        }
        /* "<param><suffix>": try each suffix (longest match wins: exp_avg vs exp_avg_sq). */
        size_t len = strlen(name);
        int pi = -1, k = -1;
        for (size_t s = 0; s < CT_ARRAY_LEN(pieces); s++) {
            size_t sl = strlen(pieces[s].suffix);
            if (len > sl && !strcmp(name + len - sl, pieces[s].suffix)) {
                int cand = find_param(o, name, len - sl);
                if (cand >= 0) {
                    pi = cand;
                    k = (int)s;
                }
            }
        }
        bool valid_piece =
            k >= 0 && (o->kind == K_SGD ? pieces[k].bit == PS_MOM : pieces[k].bit != PS_MOM);
        if (pi < 0 || !valid_piece) {
            rc = ct__error(CT_EINVAL,
                           "optim state '%s': unexpected entry (no such parameter "
                           "state in this %s optimizer)",
                           name, kind_name[o->kind]);
            break;
        }
        if (mask[pi] & pieces[k].bit) {
            rc = ct__error(CT_EINVAL, "optim state '%s': duplicate entry", name);
            break;
        }
        mask[pi] |= pieces[k].bit;
        if (pieces[k].tensor) {
            if (en->kind != CT_STATE_TENSOR || (en->numel > 0 && !en->data)) {
                rc = ct__error(CT_EINVAL, "optim state '%s': expected an f32 tensor", name);
                break;
            }
            if (en->numel != o->p[pi].numel) {
                rc = ct__error(CT_ERANGE, "optim state '%s': %lld elements, parameter has %lld",
                               name, (long long)en->numel, (long long)o->p[pi].numel);
                break;
            }
        } else if (en->kind != CT_STATE_SCALAR || !(en->scalar >= 0.0)) {
            rc = ct__error(CT_EINVAL, "optim state '%s': expected a scalar >= 0", name);
            break;
        }
    }
    if (!rc && !have_type)
        rc = ct__error(CT_EINVAL, "optim state: missing entry 'type'");
    for (int g = 0; !rc && g < o->ngroups; g++)
        if (!have_lr[g])
            rc = ct__error(CT_EINVAL, "optim state: missing entry 'param_groups.%d.lr'", g);
    free(have_lr);
    for (int g = 0; !rc && g < o->ngroups; g++) {
        if (!(ng[g].lr >= 0.0))
            rc = ct__error(CT_EINVAL, "optim state 'param_groups.%d.lr' = %g: must be >= 0", g,
                           ng[g].lr);
        else if (o->kind != K_SGD &&
                 !(ng[g].beta1 >= 0 && ng[g].beta1 < 1 && ng[g].beta2 >= 0 && ng[g].beta2 < 1))
            rc = ct__error(CT_EINVAL, "optim state 'param_groups.%d': betas out of [0, 1)", g);
    }
    /* Completeness: a parameter's state is all there or absent. */
    for (int i = 0; !rc && i < o->nparams; i++) {
        if (!mask[i])
            continue;
        const pstate *p = &o->p[i];
        if (o->kind == K_SGD)
            continue; /* only one piece */
        int need = PS_STEP | PS_AVG | PS_SQ | (ng[p->group].amsgrad ? PS_MX : 0);
        int miss = need & ~mask[i];
        if (miss) {
            const char *what = "";
            for (size_t s = 0; s < CT_ARRAY_LEN(pieces); s++)
                if (miss & pieces[s].bit) {
                    what = pieces[s].suffix;
                    break;
                }
            rc = ct__error(CT_EINVAL, "optim state: missing entry '%s%s'", p->name, what);
        }
    }
    if (rc)
        goto out;
    /* Pass 2: allocate what is missing (nothing changed yet if this fails). */
    for (int i = 0; i < o->nparams; i++) {
        pstate *p = &o->p[i];
        bool need[3] = {(mask[i] & (PS_MOM | PS_AVG)) && !p->buf, (mask[i] & PS_SQ) && !p->sq,
                        (mask[i] & PS_MX) && !p->mx};
        for (int k = 0; k < 3; k++)
            if (need[k] && (rc = state_array(p, &fresh[i * 3 + k])) < 0)
                goto out;
    }
    /* Pass 3: commit. */
    memcpy(o->groups, ng, (size_t)o->ngroups * sizeof *ng);
    for (int i = 0; i < o->nparams; i++) {
        pstate *p = &o->p[i];
        if (!mask[i]) {
            free_state(p);
            continue;
        }
        if (fresh[i * 3])
            p->buf = fresh[i * 3];
        if (fresh[i * 3 + 1])
            p->sq = fresh[i * 3 + 1];
        if (fresh[i * 3 + 2])
            p->mx = fresh[i * 3 + 2];
        fresh[i * 3] = fresh[i * 3 + 1] = fresh[i * 3 + 2] = NULL;
        p->has_state = true;
    }
    for (int e = 0; e < n && rc == 0; e++) {
        const ct_state_entry *en = &entries[e];
        const char *name = en->name;
        size_t len = strlen(name);
        for (size_t s = 0; s < CT_ARRAY_LEN(pieces); s++) {
            size_t sl = strlen(pieces[s].suffix);
            if (len <= sl || strcmp(name + len - sl, pieces[s].suffix))
                continue;
            int pi = find_param(o, name, len - sl);
            if (pi < 0)
                continue;
            pstate *p = &o->p[pi];
            size_t bytes = (size_t)p->sn * sizeof(float);
            const float *src = en->data + p->lo; /* a shard: its part of the full tensor */
            switch (pieces[s].bit) {
            case PS_MOM:
            case PS_AVG:
                rc = bytes ? p->bk->upload(p->buf, src, bytes) : 0;
                break;
            case PS_SQ:
                rc = bytes ? p->bk->upload(p->sq, src, bytes) : 0;
                break;
            case PS_MX:
                rc = bytes ? p->bk->upload(p->mx, src, bytes) : 0;
                break;
            case PS_STEP:
                p->step = en->scalar;
                break;
            }
        }
    }
out:
    if (fresh)
        for (int i = 0; i < o->nparams * 3; i++)
            if (fresh[i])
                o->p[i / 3].bk->free(fresh[i]);
    free(fresh);
    free(mask);
    free(ng);
    return rc;
}

/* Per parameter, on its device: g *= inv (a buffer of inv times g, exactly torch's product),
 * then the sum of g * 0, which is 0 unless some g is inf or NaN; one float comes back. */
int ct__optim_unscale_grads(ct_optim *o, float inv_scale, bool *found_inf)
{
    /* one flag per device the gradients are on (one, but for a model across devices), set by
     * each gradient's unscale and read once: no download per parameter */
    enum { MAX_DEVICES = 8 };
    const ct__backend *bks[MAX_DEVICES];
    float *flags[MAX_DEVICES];
    int nb = 0, rc = 0;
    *found_inf = false;
    for (int i = 0; i < o->nparams && rc == 0; i++) {
        pstate *p = &o->p[i];
        if (!p->grad || p->numel == 0)
            continue;
        int k = 0;
        while (k < nb && bks[k] != p->bk)
            k++;
        if (k == nb) {
            if (nb == MAX_DEVICES) {
                rc =
                    ct__error(CT_ENOSYS, "unscale: gradients on more than %d devices", MAX_DEVICES);
                break;
            }
            void *f = NULL;
            if ((rc = p->bk->alloc(&f, sizeof(float))) < 0)
                break;
            bks[nb] = p->bk;
            flags[nb++] = f;
            if ((rc = p->bk->zero(f, sizeof(float))) < 0)
                break;
        }
        rc = CT__BK_CALL(p->bk, unscale, p->numel, inv_scale, p->grad, flags[k]);
    }
    for (int k = 0; k < nb; k++) {
        float flag = 0.0f;
        if (rc == 0)
            rc = bks[k]->download(&flag, flags[k], sizeof flag);
        bks[k]->free(flags[k]);
        if (flag != 0.0f)
            *found_inf = true;
    }
    return rc;
}
