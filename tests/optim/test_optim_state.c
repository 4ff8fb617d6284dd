/* tests/optim/test_optim_state.c — optimizer state dicts: 5 steps, save, load into a fresh
 * optimizer, 5 more steps == 10 uninterrupted steps (bit for bit), for SGD+momentum (two groups),
 * Nesterov, Adam (amsgrad) and AdamW; and the load errors (missing, unexpected, mismatched
 * size, wrong type) that leave the optimizer unchanged. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/error.h"
#include "ct/optim.h"
#include "tests/optim/ref.h"

enum { NW = 12, NB = 5, NP = NW + NB };

/* A deep copy of a state dict, as a checkpoint would hold it. */
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
        if (e[i].kind == CT_STATE_TENSOR) {
            float *d = malloc((size_t)e[i].numel * sizeof *d + 1);
            memcpy(d, e[i].data, (size_t)e[i].numel * sizeof *d);
            s.e[i].data = d;
        }
        if (e[i].kind == CT_STATE_STRING)
            s.e[i].str = strdup(e[i].str);
    }
    return s;
}

static void saved_free(saved *s)
{
    for (int i = 0; i < s->n; i++) {
        free((void *)s->e[i].name);
        free((void *)s->e[i].data);
        free((void *)s->e[i].str);
    }
    free(s->e);
}

static int find(const saved *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->e[i].name, name))
            return i;
    return -1;
}

/* Deterministic pseudo-random gradient for step k. */
static void fill_grad(float *g, int k)
{
    unsigned x = 2654435761u * (unsigned)(k + 1);
    for (int i = 0; i < NP; i++) {
        x = x * 1103515245u + 12345u;
        g[i] = ((float)((x >> 9) & 0xffff) / 65536.0f - 0.5f) * (k % 3 == 2 ? 10.0f : 1.0f);
    }
}

typedef ct_optim *(*maker)(float *v, float *g);

static ct_optim *mk_sgd(float *v, float *g)
{
    ct_param_ref ps[2] = {{"w", v, g, NW}, {"b", v + NW, g + NW, NB}};
    ct_optim *o = ct_optim_sgd_new(ps, 1, &(ct_sgd_opts){.lr = 0.1, .momentum = 0.9});
    ct_optim_add_group(o, &ps[1], 1,
                       &(ct_sgd_opts){.lr = 0.02, .momentum = 0.5, .weight_decay = 0.1});
    return o;
}

static ct_optim *mk_nesterov(float *v, float *g)
{
    ct_param_ref ps[2] = {{"w", v, g, NW}, {"b", v + NW, g + NW, NB}};
    return ct_optim_sgd_new(ps, 2, &(ct_sgd_opts){.lr = 0.1, .momentum = 0.9, .nesterov = true});
}

static ct_optim *mk_adam(float *v, float *g)
{
    ct_param_ref ps[2] = {{"w", v, g, NW}, {"b", v + NW, g + NW, NB}};
    return ct_optim_adam_new(ps, 2, &(ct_adam_opts){.lr = 1e-2, .amsgrad = true});
}

static ct_optim *mk_adamw(float *v, float *g)
{
    ct_param_ref ps[2] = {{"w", v, g, NW}, {"b", v + NW, g + NW, NB}};
    return ct_optim_adamw_new(ps, 2, &(ct_adam_opts){.lr = 1e-2, .weight_decay = 0.1});
}

static void init_vals(float *v)
{
    for (int i = 0; i < NP; i++)
        v[i] = sinf((float)i);
}

static void round_trip(const char *name, maker mk, const char *piece)
{
    float v1[NP], g1[NP], v2[NP], g2[NP];
    init_vals(v1);
    init_vals(v2);
    ct_optim *a = mk(v1, g1);
    ct_optim *b = mk(v2, g2);
    CHECK(a && b);
    /* uninterrupted: 10 steps on a */
    for (int k = 0; k < 10; k++) {
        fill_grad(g1, k);
        ct_optim_step(a);
    }
    /* interrupted: 5 steps on b, save, load into a fresh c over the same arrays */
    for (int k = 0; k < 5; k++) {
        fill_grad(g2, k);
        ct_optim_step(b);
    }
    const ct_state_entry *e;
    int n;
    CHECK_EQ_INT(ct_optim_state_dict(b, &e, &n), 0);
    saved s = save(e, n);
    ct_optim_destroy(&b);
    CHECK(find(&s, piece) >= 0);
    CHECK(find(&s, "type") >= 0);
    ct_optim *c = mk(v2, g2);
    /* before load the hyper-parameters differ on purpose: load restores them */
    ct_optim_set_lr(c, -1, 123.0);
    CHECK_EQ_INT(ct_optim_load_state_dict(c, s.e, s.n), 0);
    for (int k = 5; k < 10; k++) {
        fill_grad(g2, k);
        ct_optim_step(c);
    }
    int bad = 0;
    for (int i = 0; i < NP; i++)
        if (memcmp(&v1[i], &v2[i], sizeof(float))) {
            fprintf(stderr, "FAIL %s round trip [%d]: got %.9g, want %.9g\n", name, i, v2[i],
                    v1[i]);
            bad = 1;
        }
    g_failures += bad;
    /* the state dicts agree too */
    const ct_state_entry *ea, *ec;
    int na, nc;
    CHECK_EQ_INT(ct_optim_state_dict(a, &ea, &na), 0);
    CHECK_EQ_INT(ct_optim_state_dict(c, &ec, &nc), 0);
    CHECK_EQ_INT(na, nc);
    for (int i = 0; i < na && i < nc; i++) {
        CHECK(!strcmp(ea[i].name, ec[i].name));
        if (ea[i].kind == CT_STATE_TENSOR)
            CHECK(!memcmp(ea[i].data, ec[i].data, (size_t)ea[i].numel * sizeof(float)));
        else if (ea[i].kind == CT_STATE_SCALAR)
            CHECK(ea[i].scalar == ec[i].scalar);
    }
    if (!bad)
        printf("ok %s: save after 5 + load + 5 == 10 steps (%d entries)\n", name, s.n);
    saved_free(&s);
    ct_optim_destroy(&a);
    ct_optim_destroy(&c);
}

/* Loads s with entry `drop` removed (or modified by fn) and expects rc + a message naming it. */
static void expect_load_error(ct_optim *o, saved *s, int rc_want, const char *needle)
{
    float snapshot_lr = (float)ct_optim_get_lr(o, 0);
    int rc = ct_optim_load_state_dict(o, s->e, s->n);
    CHECK_EQ_INT(rc, rc_want);
    CHECK_MSG(needle);
    CHECK((float)ct_optim_get_lr(o, 0) == snapshot_lr);
}

static void errors(void)
{
    float v[NP], g[NP];
    init_vals(v);
    ct_optim *o = mk_adam(v, g);
    for (int k = 0; k < 3; k++) {
        fill_grad(g, k);
        ct_optim_step(o);
    }
    const ct_state_entry *e;
    int n;
    CHECK_EQ_INT(ct_optim_state_dict(o, &e, &n), 0);
    saved s = save(e, n);
    float vsave[NP];
    memcpy(vsave, v, sizeof v);
    ct_optim *fresh = mk_adam(v, g);
    ct_optim_set_lr(fresh, 0, 0.5);

    /* missing piece of a parameter's state */
    int i = find(&s, "w.exp_avg_sq");
    CHECK(i >= 0);
    ct_state_entry keep = s.e[i];
    s.e[i] = s.e[s.n - 1];
    s.n--;
    expect_load_error(fresh, &s, CT_EINVAL, "w.exp_avg_sq");
    s.n++;
    s.e[s.n - 1] = s.e[i];
    s.e[i] = keep;

    /* wrong size */
    i = find(&s, "b.exp_avg");
    s.e[i].numel = 4;
    expect_load_error(fresh, &s, CT_ERANGE, "b.exp_avg");
    s.e[i].numel = NB;

    /* unexpected name */
    i = find(&s, "w.exp_avg");
    const char *nm = s.e[i].name;
    s.e[i].name = "nosuch.exp_avg";
    expect_load_error(fresh, &s, CT_EINVAL, "nosuch.exp_avg");
    s.e[i].name = nm;

    /* unknown hyper-parameter, group out of range */
    i = find(&s, "param_groups.0.eps");
    nm = s.e[i].name;
    s.e[i].name = "param_groups.0.epsilon";
    expect_load_error(fresh, &s, CT_EINVAL, "epsilon");
    s.e[i].name = "param_groups.3.eps";
    expect_load_error(fresh, &s, CT_EINVAL, "param_groups.3.eps");
    s.e[i].name = nm;

    /* missing lr */
    i = find(&s, "param_groups.0.lr");
    nm = s.e[i].name;
    s.e[i].name = "param_groups.0.initial_lr";
    expect_load_error(fresh, &s, CT_EINVAL, "param_groups.0.lr");
    s.e[i].name = nm;

    /* type mismatch: an Adam dict into SGD */
    ct_optim *sgd = mk_sgd(v, g);
    expect_load_error(sgd, &s, CT_EINVAL, "type");
    ct_optim_destroy(&sgd);

    /* and after all that the intact dict loads */
    CHECK_EQ_INT(ct_optim_load_state_dict(fresh, s.e, s.n), 0);
    check_close("lr after load", 0, ct_optim_get_lr(fresh, 0), 1e-2, 0, 0);
    CHECK(!memcmp(v, vsave, sizeof v)); /* loading never touches parameters */
    printf("ok load errors name the entry and leave the optimizer unchanged\n");
    saved_free(&s);
    ct_optim_destroy(&o);
    ct_optim_destroy(&fresh);
}

int main(void)
{
    round_trip("sgd_groups", mk_sgd, "w.momentum_buffer");
    round_trip("sgd_nesterov", mk_nesterov, "b.momentum_buffer");
    round_trip("adam_amsgrad", mk_adam, "w.max_exp_avg_sq");
    round_trip("adamw", mk_adamw, "b.step");
    errors();
    if (g_failures) {
        fprintf(stderr, "%d failure(s)\n", g_failures);
        return 1;
    }
    printf("all optim state tests passed\n");
    return 0;
}
