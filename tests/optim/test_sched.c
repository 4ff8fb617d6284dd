/* tests/optim/test_sched.c — LR schedulers against PyTorch 1.13 (ref/sched.txt: the lrs of two
 * SGD groups, 0.1 and 0.05, after creation and after each of 30 steps), state-dict round trips
 * in the middle of a schedule, option errors, and two schedulers chained on one optimizer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/error.h"
#include "ct/optim.h"
#include "tests/optim/ref.h"

enum { STEPS = 30 };

typedef struct scase {
    const char *name;
    ct_sched *(*make)(ct_optim *o);
    int plateau;
} scase;

static ct_sched *mk_steplr(ct_optim *o)
{
    return ct_sched_steplr_new(o, &(ct_steplr_opts){.step_size = 7, .gamma = 0.5});
}
static ct_sched *mk_multistep(ct_optim *o)
{
    return ct_sched_multistep_new(
        o, &(ct_multistep_opts){.milestones = {5, 12, 12, 20}, .num_milestones = 4, .gamma = 0.3});
}
static ct_sched *mk_exponential(ct_optim *o)
{
    return ct_sched_exponential_new(o, &(ct_exponential_opts){.gamma = 0.9});
}
static ct_sched *mk_cosine(ct_optim *o)
{
    return ct_sched_cosine_new(o, &(ct_cosine_opts){.t_max = 10, .eta_min = 0.001});
}
static ct_sched *mk_cosine7(ct_optim *o)
{
    return ct_sched_cosine_new(o, &(ct_cosine_opts){.t_max = 7});
}
static ct_sched *mk_linear(ct_optim *o)
{
    return ct_sched_linear_new(
        o, &(ct_linear_opts){.start_factor = 0.25, .end_factor = 1.0, .total_iters = 8});
}
static ct_sched *mk_linear_down(ct_optim *o)
{
    return ct_sched_linear_new(
        o, &(ct_linear_opts){.start_factor = 1.0, .end_factor = 0.1, .total_iters = 10});
}
/* SequentialLR: children are created first (each steps once), then the sequence, as in torch */
static ct_sched *mk_seq_warm_cos(ct_optim *o)
{
    ct_sched *c[2];
    c[0] = ct_sched_linear_new(
        o, &(ct_linear_opts){.start_factor = 0.1, .end_factor = 1.0, .total_iters = 5});
    c[1] = ct_sched_cosine_new(o, &(ct_cosine_opts){.t_max = 20, .eta_min = 1e-4});
    ct_sched *s = ct_sched_sequential_new(o, c, 2, (int[]){5});
    CHECK(c[0] == NULL && c[1] == NULL); /* ownership taken */
    return s;
}
static ct_sched *mk_seq4(ct_optim *o)
{
    ct_sched *c[4];
    c[0] = ct_sched_exponential_new(o, &(ct_exponential_opts){.gamma = 0.9});
    c[1] = ct_sched_steplr_new(o, &(ct_steplr_opts){.step_size = 3, .gamma = 0.5});
    c[2] = ct_sched_multistep_new(
        o, &(ct_multistep_opts){.milestones = {2, 4}, .num_milestones = 2, .gamma = 0.5});
    c[3] = ct_sched_linear_new(o, &(ct_linear_opts){.start_factor = 0.5, .total_iters = 4});
    return ct_sched_sequential_new(o, c, 4, (int[]){4, 10, 16});
}
static ct_sched *mk_plateau_min(ct_optim *o)
{
    return ct_sched_plateau_new(
        o,
        &(ct_plateau_opts){
            .mode = CT_PLATEAU_MIN, .factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.004});
}
static ct_sched *mk_plateau_max_abs(ct_optim *o)
{
    return ct_sched_plateau_new(o, &(ct_plateau_opts){.mode = CT_PLATEAU_MAX,
                                                      .factor = 0.3,
                                                      .patience = CT_PATIENCE_ZERO,
                                                      .threshold = 0.05,
                                                      .threshold_mode = CT_THRESHOLD_ABS});
}

static ct_sched *mk_plateau_max_rel(ct_optim *o)
{
    return ct_sched_plateau_new(o, &(ct_plateau_opts){.mode = CT_PLATEAU_MAX,
                                                      .factor = 0.5,
                                                      .patience = 1,
                                                      .threshold = 0.1,
                                                      .threshold_mode = CT_THRESHOLD_REL,
                                                      .cooldown = 2});
}
static ct_sched *mk_plateau_min_abs_eps(ct_optim *o)
{
    return ct_sched_plateau_new(o, &(ct_plateau_opts){.mode = CT_PLATEAU_MIN,
                                                      .factor = 0.1,
                                                      .patience = 1,
                                                      .threshold = 0.02,
                                                      .threshold_mode = CT_THRESHOLD_ABS,
                                                      .eps = 0.01});
}

static const scase cases[] = {
    {"steplr", mk_steplr, 0},
    {"multistep", mk_multistep, 0},
    {"exponential", mk_exponential, 0},
    {"cosine", mk_cosine, 0},
    {"cosine7", mk_cosine7, 0},
    {"linear", mk_linear, 0},
    {"linear_down", mk_linear_down, 0},
    {"seq_warm_cos", mk_seq_warm_cos, 0},
    {"seq4", mk_seq4, 0},
    {"plateau_min", mk_plateau_min, 1},
    {"plateau_max_abs", mk_plateau_max_abs, 1},
    {"plateau_max_rel", mk_plateau_max_rel, 1},
    {"plateau_min_abs_eps", mk_plateau_min_abs_eps, 1},
};

static float p0[2], g0[2], p1[2], g1[2];

static ct_optim *mk_optim(void)
{
    ct_param_ref a = {"p0", p0, g0, 2}, b = {"p1", p1, g1, 2};
    ct_optim *o = ct_optim_sgd_new(&a, 1, &(ct_sgd_opts){.lr = 0.1});
    ct_optim_add_group(o, &b, 1, &(ct_sgd_opts){.lr = 0.05});
    return o;
}

static void check_lrs(const ref_file *r, const char *name, int k, ct_optim *o, ct_sched *s)
{
    char key[128];
    snprintf(key, sizeof key, "%s.lr.%d", name, k);
    const double *want = ref_get(r, key, 2);
    for (int g = 0; g < 2; g++) {
        check_close(key, g, ct_optim_get_lr(o, g), want[g], 1e-13, 0);
        check_close(key, g, ct_sched_get_last_lr(s, g), want[g], 1e-13, 0);
    }
}

/* A deep copy of a state dict. */
typedef struct saved {
    ct_state_entry *e;
    int n;
} saved;

static saved save(const ct_state_entry *e, int n)
{
    saved s = {calloc((size_t)n + 1, sizeof *s.e), n};
    for (int i = 0; i < n; i++) {
        s.e[i] = e[i];
        s.e[i].name = strdup(e[i].name);
        s.e[i].str = e[i].kind == CT_STATE_STRING ? strdup(e[i].str) : NULL;
        s.e[i].data = NULL; /* scheduler and SGD-without-momentum state: no tensors */
    }
    return s;
}

static void saved_free(saved *s)
{
    for (int i = 0; i < s->n; i++) {
        free((void *)s->e[i].name);
        free((void *)s->e[i].str);
    }
    free(s->e);
}

static void test_reference(const ref_file *r)
{
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const scase *c = &cases[ci];
        int before = g_failures;
        ct_optim *o = mk_optim();
        ct_sched *s = c->make(o);
        if (!s) {
            fprintf(stderr, "FAIL %s: create: %s\n", c->name, ct_last_error());
            g_failures++;
            ct_optim_destroy(&o);
            continue;
        }
        CHECK(!strncmp(ct_sched_kind(s), c->name, 3));
        const double *metric = NULL;
        if (c->plateau) {
            char key[128];
            snprintf(key, sizeof key, "%s.metric", c->name);
            metric = ref_get(r, key, STEPS);
        }
        check_lrs(r, c->name, 0, o, s);
        for (int k = 1; k <= STEPS; k++) {
            ct_optim_step(o);
            CHECK_EQ_INT(c->plateau ? ct_sched_step_metric(s, metric[k - 1]) : ct_sched_step(s), 0);
            check_lrs(r, c->name, k, o, s);
        }
        CHECK_EQ_INT(ct_sched_last_epoch(s), STEPS);
        /* the wrong step function is refused */
        CHECK_EQ_INT(c->plateau ? ct_sched_step(s) : ct_sched_step_metric(s, 1.0), CT_EINVAL);
        ct_sched_destroy(&s);
        CHECK(s == NULL);
        ct_optim_destroy(&o);
        if (g_failures == before)
            printf("ok %s: %d steps match PyTorch\n", c->name, STEPS);
    }
}

/* 12 steps, checkpoint optimizer + scheduler, rebuild both, load, go on to 30 == reference. */
static void test_round_trip(const ref_file *r)
{
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const scase *c = &cases[ci];
        int before = g_failures;
        const double *metric = NULL;
        if (c->plateau) {
            char key[128];
            snprintf(key, sizeof key, "%s.metric", c->name);
            metric = ref_get(r, key, STEPS);
        }
        ct_optim *o = mk_optim();
        ct_sched *s = c->make(o);
        for (int k = 1; k <= 12; k++)
            c->plateau ? ct_sched_step_metric(s, metric[k - 1]) : ct_sched_step(s);
        const ct_state_entry *e;
        int n;
        CHECK_EQ_INT(ct_optim_state_dict(o, &e, &n), 0);
        saved so = save(e, n);
        CHECK_EQ_INT(ct_sched_state_dict(s, &e, &n), 0);
        saved ss = save(e, n);
        ct_sched_destroy(&s);
        ct_optim_destroy(&o);

        o = mk_optim();
        s = c->make(o); /* steps once on creation, as in PyTorch; the loads below undo it */
        CHECK_EQ_INT(ct_optim_load_state_dict(o, so.e, so.n), 0);
        int rc = ct_sched_load_state_dict(s, ss.e, ss.n);
        CHECK_EQ_INT(rc, 0);
        if (rc)
            fprintf(stderr, "  %s: %s\n", c->name, ct_last_error());
        CHECK_EQ_INT(ct_sched_last_epoch(s), 12);
        check_lrs(r, c->name, 12, o, s);
        for (int k = 13; k <= STEPS; k++) {
            c->plateau ? ct_sched_step_metric(s, metric[k - 1]) : ct_sched_step(s);
            check_lrs(r, c->name, k, o, s);
        }
        /* errors: missing entry, unexpected entry, other type */
        ss.n--;
        const char *last = ss.e[ss.n].name;
        CHECK_EQ_INT(ct_sched_load_state_dict(s, ss.e, ss.n), CT_EINVAL);
        if (!strncmp(last, "schedulers.", 11)) { /* a child's entry: named within the child */
            CHECK_MSG(strchr(last + 11, '.') + 1);
            CHECK_MSG("schedulers.");
        } else {
            CHECK_MSG(last);
        }
        ss.n++;
        const char *nm = ss.e[1].name;
        ss.e[1].name = "bogus";
        CHECK_EQ_INT(ct_sched_load_state_dict(s, ss.e, ss.n), CT_EINVAL);
        ss.e[1].name = nm;
        CHECK_EQ_INT(ct_sched_last_epoch(s), STEPS); /* unchanged by the failed loads */
        ct_sched *other = c->plateau ? mk_steplr(o) : mk_plateau_min(o);
        CHECK_EQ_INT(ct_sched_load_state_dict(other, ss.e, ss.n), CT_EINVAL);
        CHECK_MSG("type");
        ct_sched_destroy(&other);
        saved_free(&so);
        saved_free(&ss);
        ct_sched_destroy(&s);
        ct_optim_destroy(&o);
        if (g_failures == before)
            printf("ok %s: state dict round trip at step 12\n", c->name);
    }
}

static void test_errors(void)
{
    ct_optim *o = mk_optim();
    CHECK(ct_sched_steplr_new(o, &(ct_steplr_opts){.step_size = 0}) == NULL);
    CHECK_MSG("step_size");
    CHECK(ct_sched_exponential_new(o, &(ct_exponential_opts){.gamma = -1}) == NULL);
    CHECK_MSG("gamma");
    CHECK(ct_sched_cosine_new(o, &(ct_cosine_opts){.t_max = 0}) == NULL);
    CHECK_MSG("t_max");
    CHECK(ct_sched_linear_new(o, &(ct_linear_opts){.start_factor = 1.5}) == NULL);
    CHECK_MSG("start_factor");
    CHECK(ct_sched_linear_new(o, &(ct_linear_opts){.end_factor = 2}) == NULL);
    CHECK_MSG("end_factor");
    CHECK(ct_sched_plateau_new(o, &(ct_plateau_opts){.factor = 1.0}) == NULL);
    CHECK_MSG("factor");
    CHECK(ct_sched_plateau_new(o, &(ct_plateau_opts){.min_lr = -1}) == NULL);
    CHECK_MSG("min_lr");
    CHECK(ct_sched_multistep_new(o, &(ct_multistep_opts){.num_milestones = 99}) == NULL);
    CHECK_MSG("num_milestones");
    CHECK(ct_sched_steplr_new(NULL, &(ct_steplr_opts){.step_size = 1}) == NULL);
    /* sequential: a plateau child, a child over another optimizer, unsorted milestones; the
     * children are destroyed either way (ASan checks) */
    ct_sched *c[2] = {mk_steplr(o), mk_plateau_min(o)};
    CHECK(ct_sched_sequential_new(o, c, 2, (int[]){3}) == NULL);
    CHECK_MSG("schedulers[1]");
    CHECK(c[0] == NULL && c[1] == NULL);
    ct_optim *o2 = mk_optim();
    c[0] = mk_steplr(o);
    c[1] = mk_steplr(o2);
    CHECK(ct_sched_sequential_new(o, c, 2, (int[]){3}) == NULL);
    CHECK_MSG("another optimizer");
    ct_sched *c3[3] = {mk_steplr(o), mk_steplr(o), mk_steplr(o)};
    CHECK(ct_sched_sequential_new(o, c3, 3, (int[]){5, 2}) == NULL);
    CHECK_MSG("milestones[1]");
    ct_optim_destroy(&o2);
    ct_optim_set_lr(o, 0, 0.1);
    /* failed creations did not touch the lr */
    check_close("lr untouched", 0, ct_optim_get_lr(o, 0), 0.1, 0, 0);
    ct_sched_destroy(NULL);
    ct_optim_destroy(&o);
}

/* Warm-up then cosine, both recursive on the current lr: they compose as in PyTorch when both
 * are stepped (ChainedScheduler). Checked against the closed form at a few points. */
static void test_defaults(void)
{
    ct_optim *o = mk_optim();
    ct_sched *lin = ct_sched_linear_new(o, NULL); /* 1/3 -> 1 over 5 */
    check_close("linear default start", 0, ct_optim_get_lr(o, 0), 0.1 / 3, 1e-15, 0);
    for (int k = 0; k < 5; k++)
        ct_sched_step(lin);
    check_close("linear default end", 0, ct_optim_get_lr(o, 0), 0.1, 1e-15, 0);
    ct_sched_destroy(&lin);
    ct_sched *m = ct_sched_multistep_new(o, NULL); /* no milestones: constant */
    for (int k = 0; k < 5; k++)
        ct_sched_step(m);
    check_close("multistep none", 0, ct_optim_get_lr(o, 0), 0.1, 1e-15, 0);
    ct_sched_destroy(&m);
    ct_optim_destroy(&o);
}

/* warmup_cosine against ref/sched_warmup.txt (torch's LinearLR + CosineAnnealingLR in a
 * SequentialLR; cases as make_reference.py's WARMUP_CASES): every step's lr of both groups,
 * 40 steps (past total_steps too), within 1e-12; then its option errors. */
static void test_warmup_cosine(void)
{
    static const struct {
        const char *name;
        ct_warmup_cosine_opts opts;
    } wc[] = {
        {"wc_4_20", {.warmup_steps = 4, .total_steps = 20, .start_factor = 0.2, .eta_min = 1e-3}},
        {"wc_1_10", {.warmup_steps = 1, .total_steps = 10}}, /* defaults: 1/3, 0 */
        {"wc_10_35",
         {.warmup_steps = 10, .total_steps = 35, .start_factor = 0.01, .eta_min = 0.02}},
    };
    ref_file *r = ref_load("sched_warmup.txt");
    for (size_t ci = 0; ci < sizeof wc / sizeof wc[0]; ci++) {
        int before = g_failures;
        ct_optim *o = mk_optim();
        ct_sched *s = ct_sched_warmup_cosine_new(o, &wc[ci].opts);
        CHECK(s != NULL);
        for (int k = 0; s && k <= 40; k++) {
            char key[128];
            if (k > 0) {
                ct_optim_step(o);
                CHECK_EQ_INT(ct_sched_step(s), 0);
            }
            snprintf(key, sizeof key, "%s.lr.%d", wc[ci].name, k);
            const double *want = ref_get(r, key, 2);
            for (int g = 0; g < 2; g++) {
                check_close(key, g, ct_optim_get_lr(o, g), want[g], 0, 1e-12);
                check_close(key, g, ct_sched_get_last_lr(s, g), want[g], 0, 1e-12);
            }
        }
        ct_sched_destroy(&s);
        ct_optim_destroy(&o);
        if (g_failures == before)
            printf("ok %s: 40 steps match PyTorch\n", wc[ci].name);
    }
    ref_free(r);
    ct_optim *o = mk_optim();
    CHECK(!ct_sched_warmup_cosine_new(o, NULL));
    CHECK(!ct_sched_warmup_cosine_new(o, &(ct_warmup_cosine_opts){.total_steps = 10}));
    CHECK(!ct_sched_warmup_cosine_new(o, &(ct_warmup_cosine_opts){5, 5, 0, 0}));
    CHECK(!ct_sched_warmup_cosine_new(o, &(ct_warmup_cosine_opts){2, 5, 1.5, 0}));
    CHECK(!ct_sched_warmup_cosine_new(o, &(ct_warmup_cosine_opts){2, 5, 0, -1}));
    CHECK(strstr(ct_last_error(), "eta_min") != NULL);
    ct_optim_destroy(&o);
}

int main(void)
{
    ref_file *r = ref_load("sched.txt");
    test_warmup_cosine();
    test_reference(r);
    test_round_trip(r);
    test_errors();
    test_defaults();
    ref_free(r);
    if (g_failures) {
        fprintf(stderr, "%d failure(s)\n", g_failures);
        return 1;
    }
    printf("all sched tests passed\n");
    return 0;
}
