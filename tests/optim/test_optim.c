/* tests/optim/test_optim.c — SGD/Adam/AdamW against PyTorch 1.13 (ref/optim.txt: 10 steps of
 * given gradients per case, parameters after each step), option checks, lr get/set, zero_grad.
 * Parameters: w (3,4) and b (5), flattened as one vector of 17 in the reference file. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ct/error.h"
#include "ct/optim.h"
#include "tests/optim/ref.h"

enum { NW = 12, NB = 5, NP = NW + NB, STEPS = 10 };

typedef struct ocase {
    const char *name;
    int kind; /* 0 sgd, 1 adam, 2 adamw */
    ct_sgd_opts sgd;
    ct_adam_opts adam;
    int two_groups; /* b in a second group with lr * 0.1 */
} ocase;

static const ocase cases[] = {
    {"sgd_plain", 0, {.lr = 0.1}},
    {"sgd_mom", 0, {.lr = 0.1, .momentum = 0.9}},
    {"sgd_damp", 0, {.lr = 0.05, .momentum = 0.8, .dampening = 0.5}},
    {"sgd_nesterov", 0, {.lr = 0.1, .momentum = 0.9, .nesterov = true}},
    {"sgd_wd", 0, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}},
    {"sgd_max", 0, {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .maximize = true}},
    {"sgd_groups", 0, {.lr = 0.1, .momentum = 0.9}, .two_groups = 1},
    {"adam_default", 1, .adam = {.lr = 1e-2}},
    {"adam_wd", 1, .adam = {.lr = 1e-2, .weight_decay = 0.1}},
    {"adam_amsgrad", 1, .adam = {.lr = 1e-2, .amsgrad = true}},
    {"adam_betas", 1, .adam = {.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6}},
    {"adam_max", 1, .adam = {.lr = 1e-2, .maximize = true}},
    {"adam_groups", 1, .adam = {.lr = 1e-2}, .two_groups = 1},
    {"adamw_default", 2, .adam = {.lr = 1e-2}},
    {"adamw_wd", 2, .adam = {.lr = 1e-2, .weight_decay = 0.1}},
    {"adamw_amsgrad", 2, .adam = {.lr = 1e-2, .weight_decay = 0.05, .amsgrad = true}},
};

static ct_optim *make(const ocase *c, float *val, float *grad)
{
    ct_param_ref ps[2] = {{"w", val, grad, NW}, {"b", val + NW, grad + NW, NB}};
    int n = c->two_groups ? 1 : 2;
    ct_optim *o = c->kind == 0   ? ct_optim_sgd_new(ps, n, &c->sgd)
                  : c->kind == 1 ? ct_optim_adam_new(ps, n, &c->adam)
                                 : ct_optim_adamw_new(ps, n, &c->adam);
    if (o && c->two_groups) {
        ct_sgd_opts s = c->sgd;
        ct_adam_opts a = c->adam;
        s.lr *= 0.1;
        a.lr *= 0.1;
        int g = ct_optim_add_group(o, &ps[1], 1, c->kind == 0 ? (const void *)&s : &a);
        CHECK_EQ_INT(g, 1);
    }
    return o;
}

static void test_reference(void)
{
    ref_file *r = ref_load("optim.txt");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ocase *c = &cases[ci];
        char key[128];
        float val[NP], grad[NP];
        snprintf(key, sizeof key, "%s.init", c->name);
        const double *init = ref_get(r, key, NP);
        for (int i = 0; i < NP; i++)
            val[i] = (float)init[i];
        ct_optim *o = make(c, val, grad);
        if (!o) {
            fprintf(stderr, "FAIL %s: create: %s\n", c->name, ct_last_error());
            g_failures++;
            continue;
        }
        int before = g_failures;
        for (int k = 0; k < STEPS && g_failures == before; k++) {
            snprintf(key, sizeof key, "%s.grad.%d", c->name, k);
            const double *g = ref_get(r, key, NP);
            for (int i = 0; i < NP; i++)
                grad[i] = (float)g[i];
            CHECK_EQ_INT(ct_optim_step(o), 0);
            snprintf(key, sizeof key, "%s.after.%d", c->name, k);
            const double *want = ref_get(r, key, NP);
            for (int i = 0; i < NP; i++)
                check_close(key, i, val[i], want[i], 1e-5, 1e-6);
        }
        if (g_failures == before)
            printf("ok %s: %d steps match PyTorch\n", c->name, STEPS);
        ct_optim_destroy(&o);
        CHECK(o == NULL);
    }
    ref_free(r);
}

static void test_options(void)
{
    float v[4] = {0}, g[4] = {0};
    ct_param_ref p = {"p", v, g, 4};
    ct_optim *o;
    o = ct_optim_sgd_new(&p, 1, &(ct_sgd_opts){.lr = -0.1});
    CHECK(o == NULL);
    CHECK_MSG("lr");
    CHECK_EQ_INT(ct_sgd_opts_check(&(ct_sgd_opts){.lr = -1}), CT_EINVAL);
    CHECK_EQ_INT(ct_sgd_opts_check(&(ct_sgd_opts){.momentum = -1}), CT_EINVAL);
    CHECK_MSG("momentum");
    CHECK_EQ_INT(ct_sgd_opts_check(&(ct_sgd_opts){.weight_decay = -1}), CT_EINVAL);
    CHECK_MSG("weight_decay");
    CHECK_EQ_INT(ct_sgd_opts_check(&(ct_sgd_opts){.nesterov = true}), CT_EINVAL);
    CHECK_MSG("nesterov");
    CHECK_EQ_INT(
        ct_sgd_opts_check(&(ct_sgd_opts){.nesterov = true, .momentum = 0.9, .dampening = 0.1}),
        CT_EINVAL);
    CHECK_EQ_INT(ct_adam_opts_check(&(ct_adam_opts){.lr = -1e-3}), CT_EINVAL);
    CHECK_MSG("lr");
    CHECK_EQ_INT(ct_adam_opts_check(&(ct_adam_opts){.beta1 = 1.0}), CT_EINVAL);
    CHECK_MSG("beta1");
    CHECK_EQ_INT(ct_adam_opts_check(&(ct_adam_opts){.beta2 = -0.5}), CT_EINVAL);
    CHECK_MSG("beta2");
    CHECK_EQ_INT(ct_adam_opts_check(&(ct_adam_opts){.eps = -1}), CT_EINVAL);
    CHECK_MSG("eps");
    CHECK_EQ_INT(ct_adam_opts_check(&(ct_adam_opts){.weight_decay = -1}), CT_EINVAL);
    CHECK_MSG("weight_decay");
    o = ct_optim_adamw_new(&p, 1, &(ct_adam_opts){.beta2 = 1.5});
    CHECK(o == NULL);
    CHECK_MSG("beta2");
    /* duplicate names, bad numel */
    ct_param_ref two[2] = {{"p", v, g, 2}, {"p", v + 2, g + 2, 2}};
    o = ct_optim_sgd_new(two, 2, NULL);
    CHECK(o == NULL);
    CHECK_MSG("not unique");
    o = ct_optim_sgd_new(&(ct_param_ref){"q", NULL, g, 3}, 1, NULL);
    CHECK(o == NULL);
    CHECK_MSG("params[0]");
    /* add_group with a name already there */
    o = ct_optim_adam_new(&p, 1, NULL);
    CHECK(o != NULL);
    CHECK(ct_optim_add_group(o, &p, 1, NULL) == CT_EINVAL);
    CHECK_MSG("already");
    CHECK(ct_optim_add_group(o, &(ct_param_ref){"q", v, g, 4}, 1, &(ct_adam_opts){.beta1 = 2}) ==
          CT_EINVAL);
    CHECK_MSG("beta1");
    CHECK_EQ_INT(ct_optim_num_groups(o), 1);
    ct_optim_destroy(&o);
    ct_optim_destroy(&o); /* NULL is fine */
    ct_optim_destroy(NULL);
}

static void test_defaults_lr_zero_grad(void)
{
    float v[3] = {1, 2, 3}, g[3] = {1, 1, 1};
    ct_param_ref p = {"p", v, g, 3};
    ct_optim *o = ct_optim_adamw_new(&p, 1, NULL);
    CHECK(o != NULL);
    check_close("adamw default lr", 0, ct_optim_get_lr(o, 0), 1e-3, 0, 0);
    CHECK(!strcmp(ct_optim_kind(o), "adamw"));
    /* defaults are in the state dict: beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 1e-2 */
    const ct_state_entry *e;
    int n;
    CHECK_EQ_INT(ct_optim_state_dict(o, &e, &n), 0);
    const char *names[] = {"param_groups.0.beta1", "param_groups.0.beta2", "param_groups.0.eps",
                           "param_groups.0.weight_decay"};
    const double want[] = {0.9, 0.999, 1e-8, 1e-2};
    for (int k = 0; k < 4; k++) {
        int found = 0;
        for (int i = 0; i < n; i++)
            if (!strcmp(e[i].name, names[k])) {
                check_close(names[k], 0, e[i].scalar, want[k], 0, 0);
                found = 1;
            }
        CHECK(found);
    }
    CHECK_EQ_INT(ct_optim_set_lr(o, 0, 0.5), 0);
    check_close("lr", 0, ct_optim_get_lr(o, 0), 0.5, 0, 0);
    CHECK_EQ_INT(ct_optim_set_lr(o, -1, 0.25), 0);
    check_close("lr", 0, ct_optim_get_lr(o, 0), 0.25, 0, 0);
    CHECK_EQ_INT(ct_optim_set_lr(o, 0, -1), CT_EINVAL);
    CHECK_EQ_INT(ct_optim_set_lr(o, 3, 0.1), CT_EINVAL);
    CHECK(isnan(ct_optim_get_lr(o, 1)));
    ct_optim_zero_grad(o);
    for (int i = 0; i < 3; i++)
        CHECK(g[i] == 0.0f);
    ct_optim_destroy(&o);

    /* CT_ZERO gives a literal zero where 0 means default: AdamW without decay, beta1 = 0 */
    o = ct_optim_adamw_new(&p, 1, &(ct_adam_opts){.weight_decay = CT_ZERO, .beta1 = CT_ZERO});
    CHECK(o != NULL);
    CHECK_EQ_INT(ct_optim_state_dict(o, &e, &n), 0);
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, "param_groups.0.weight_decay") ||
            !strcmp(e[i].name, "param_groups.0.beta1"))
            check_close(e[i].name, 0, e[i].scalar, 0.0, 0, 0);
    ct_optim_destroy(&o);

    /* a parameter without a gradient is skipped */
    float v2[2] = {1, 1};
    ct_param_ref q[2] = {{"a", v, g, 3}, {"nograd", v2, NULL, 2}};
    g[0] = g[1] = g[2] = 1;
    o = ct_optim_sgd_new(q, 2, &(ct_sgd_opts){.lr = 0.5});
    CHECK_EQ_INT(ct_optim_step(o), 0);
    check_close("sgd v", 0, v[0], 0.5, 0, 0);
    check_close("untouched", 0, v2[0], 1.0, 0, 0);
    ct_optim_destroy(&o);
}

/* clip_grad_norm_ / clip_grad_value_ against PyTorch (ref/clip.txt). */
static void test_clip(void)
{
    ref_file *r = ref_load("clip.txt");
    const struct {
        const char *name;
        double max_norm, norm_type;
    } cs[] = {{"l2", 1.0, 2.0},
              {"l2_noclip", 100.0, 0.0 /* default: 2 */},
              {"l1", 2.0, 1.0},
              {"inf", 0.5, INFINITY},
              {"p3", 1.5, 3.0}};
    float v[NP] = {0}, g[NP];
    ct_param_ref ps[2] = {{"w", v, g, NW}, {"b", v + NW, g + NW, NB}};
    ct_optim *o = ct_optim_sgd_new(ps, 2, NULL);
    char key[64];
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int before = g_failures;
        snprintf(key, sizeof key, "%s.grad", cs[c].name);
        const double *g0 = ref_get(r, key, NP);
        for (int i = 0; i < NP; i++)
            g[i] = (float)g0[i];
        double total = 0;
        CHECK_EQ_INT(ct_optim_clip_grad_norm(o, cs[c].max_norm, cs[c].norm_type, &total), 0);
        snprintf(key, sizeof key, "%s.total", cs[c].name);
        check_close(key, 0, total, ref_get(r, key, 1)[0], 1e-6, 0);
        snprintf(key, sizeof key, "%s.after", cs[c].name);
        const double *want = ref_get(r, key, NP);
        for (int i = 0; i < NP; i++)
            check_close(key, i, g[i], want[i], 1e-6, 1e-7);
        if (g_failures == before)
            printf("ok clip_grad_norm %s matches PyTorch\n", cs[c].name);
    }
    const double *g0 = ref_get(r, "value.grad", NW), *want = ref_get(r, "value.after", NW);
    for (int i = 0; i < NP; i++)
        g[i] = i < NW ? (float)g0[i] : 0.0f;
    CHECK_EQ_INT(ct_optim_clip_grad_value(o, 0.5), 0);
    for (int i = 0; i < NW; i++)
        check_close("clip_grad_value", i, g[i], (float)want[i], 0, 0);
    CHECK_EQ_INT(ct_optim_clip_grad_norm(o, -1, 2, NULL), CT_EINVAL);
    CHECK_MSG("max_norm");
    CHECK_EQ_INT(ct_optim_clip_grad_norm(o, 1, -2, NULL), CT_EINVAL);
    CHECK_MSG("norm_type");
    CHECK_EQ_INT(ct_optim_clip_grad_value(o, -1), CT_EINVAL);
    ct_optim_destroy(&o);
    ref_free(r);
}

int main(void)
{
    test_reference();
    test_clip();
    test_options();
    test_defaults_lr_zero_grad();
    if (g_failures) {
        fprintf(stderr, "%d failure(s)\n", g_failures);
        return 1;
    }
    printf("all optim tests passed\n");
    return 0;
}
