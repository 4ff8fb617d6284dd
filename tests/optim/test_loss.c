/* tests/optim/test_loss.c — loss kernels. `test_loss ref`: forward values and input gradients
 * against PyTorch 1.13 (ref/loss.txt) for every reduction and option, with backward checked to
 * accumulate. `test_loss fd`: backward against central finite differences of forward.
 * `test_loss errors`: argument checks name the culprit and write nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/error.h"
#include "ct/loss.h"
#include "tests/optim/ref.h"

enum { K_CE, K_NLL, K_MSE, K_L1, K_BCE, K_BCEL };

typedef struct data {
    float *x;            /* input (N*C) */
    const int64_t *cls;  /* class targets (N) */
    const float *t;      /* float targets (N*C) */
    const float *weight; /* ce/nll class weights (C) or bce element weights (N*C) */
    const float *pos_weight;
    int64_t n, c;
} data;

typedef struct variant {
    const char *name;
    double ls;
    int use_weight, ignore2, use_pos_weight;
} variant;

static ct_ce_opts ce_opts(const variant *v, const data *d, ct_reduction r)
{
    return (ct_ce_opts){.reduction = r,
                        .label_smoothing = v->ls,
                        .weight = v->use_weight ? d->weight : NULL,
                        .use_ignore_index = v->ignore2,
                        .ignore_index = 2};
}

static ct_bce_opts bce_opts(const variant *v, const data *d, ct_reduction r)
{
    return (ct_bce_opts){.reduction = r,
                         .weight = v->use_weight ? d->weight : NULL,
                         .pos_weight = v->use_pos_weight ? d->pos_weight : NULL};
}

static int64_t out_len(int kind, const data *d, ct_reduction r)
{
    if (r != CT_REDUCTION_NONE)
        return 1;
    return kind == K_CE || kind == K_NLL ? d->n : d->n * d->c;
}

static int fwd(int kind, const variant *v, const data *d, ct_reduction r, float *out)
{
    ct_ce_opts co = ce_opts(v, d, r);
    ct_bce_opts bo = bce_opts(v, d, r);
    switch (kind) {
    case K_CE:
        return ct_loss_cross_entropy_forward(d->x, d->cls, d->n, d->c, &co, out);
    case K_NLL:
        return ct_loss_nll_forward(d->x, d->cls, d->n, d->c, &co, out);
    case K_MSE:
        return ct_loss_mse_forward(d->x, d->t, d->n * d->c, r, out);
    case K_L1:
        return ct_loss_l1_forward(d->x, d->t, d->n * d->c, r, out);
    case K_BCE:
        return ct_loss_bce_forward(d->x, d->t, d->n, d->c, &bo, out);
    default:
        return ct_loss_bce_with_logits_forward(d->x, d->t, d->n, d->c, &bo, out);
    }
}

static int bwd(int kind, const variant *v, const data *d, ct_reduction r, const float *gout,
               float *grad)
{
    ct_ce_opts co = ce_opts(v, d, r);
    ct_bce_opts bo = bce_opts(v, d, r);
    switch (kind) {
    case K_CE:
        return ct_loss_cross_entropy_backward(d->x, d->cls, d->n, d->c, &co, gout, grad);
    case K_NLL:
        return ct_loss_nll_backward(d->x, d->cls, d->n, d->c, &co, gout, grad);
    case K_MSE:
        return ct_loss_mse_backward(d->x, d->t, d->n * d->c, r, gout, grad);
    case K_L1:
        return ct_loss_l1_backward(d->x, d->t, d->n * d->c, r, gout, grad);
    case K_BCE:
        return ct_loss_bce_backward(d->x, d->t, d->n, d->c, &bo, gout, grad);
    default:
        return ct_loss_bce_with_logits_backward(d->x, d->t, d->n, d->c, &bo, gout, grad);
    }
}

static const char *kind_key[] = {"ce", "nll", "mse", "l1", "bce", "bcel"};
static const char *red_name[] = {"mean", "sum", "none"};

static const variant ce_variants[] = {{"plain", 0, 0, 0, 0},
                                      {"ls", 0.1, 0, 0, 0},
                                      {"ign", 0, 0, 1, 0},
                                      {"w", 0, 1, 0, 0},
                                      {"wlsign", 0.2, 1, 1, 0}};
static const variant nll_variants[] = {
    {"plain", 0, 0, 0, 0}, {"w", 0, 1, 0, 0}, {"ign", 0, 0, 1, 0}};
static const variant el_variants[] = {{"", 0, 0, 0, 0}};
static const variant bce_variants[] = {{"plain", 0, 0, 0, 0}, {"w", 0, 1, 0, 0}};
static const variant bcel_variants[] = {
    {"plain", 0, 0, 0, 0}, {"pw", 0, 0, 0, 1}, {"w", 0, 1, 0, 0}, {"pww", 0, 1, 0, 1}};

static void variants_of(int kind, const variant **vs, int *nv)
{
    switch (kind) {
    case K_CE:
        *vs = ce_variants, *nv = 5;
        break;
    case K_NLL:
        *vs = nll_variants, *nv = 3;
        break;
    case K_MSE:
    case K_L1:
        *vs = el_variants, *nv = 1;
        break;
    case K_BCE:
        *vs = bce_variants, *nv = 2;
        break;
    default:
        *vs = bcel_variants, *nv = 4;
    }
}

static float *to_f(const double *v, int n)
{
    float *f = malloc((size_t)n * sizeof *f + 1);
    for (int i = 0; i < n; i++)
        f[i] = (float)v[i];
    return f;
}

/* ---- against PyTorch ------------------------------------------------------------------------ */

static void check_case(const ref_file *r, int kind, const variant *v, const data *d)
{
    for (int ri = 0; ri < 3; ri++) {
        ct_reduction red = (ct_reduction)ri;
        char key[128], k2[160];
        if (v->name[0])
            snprintf(key, sizeof key, "%s.%s.%s", kind_key[kind], v->name, red_name[ri]);
        else
            snprintf(key, sizeof key, "%s.%s", kind_key[kind], red_name[ri]);
        int before = g_failures;
        int64_t no = out_len(kind, d, red), ni = d->n * d->c;
        float *out = calloc((size_t)no, sizeof *out);
        float *grad = calloc((size_t)ni, sizeof *grad);
        snprintf(k2, sizeof k2, "%s.out", key);
        const double *want_out = ref_get(r, k2, (int)no);
        snprintf(k2, sizeof k2, "%s.gout", key);
        float *gout = to_f(ref_get(r, k2, (int)no), (int)no);
        snprintf(k2, sizeof k2, "%s.grad", key);
        const double *want_grad = ref_get(r, k2, (int)ni);
        CHECK_EQ_INT(fwd(kind, v, d, red, out), 0);
        snprintf(k2, sizeof k2, "%s.out", key);
        for (int64_t i = 0; i < no; i++)
            check_close(k2, (int)i, out[i], want_out[i], 1e-5, 1e-6);
        /* backward accumulates: start from a known pattern and subtract it */
        for (int64_t i = 0; i < ni; i++)
            grad[i] = 0.125f * (float)(i % 5);
        CHECK_EQ_INT(bwd(kind, v, d, red, gout, grad), 0);
        snprintf(k2, sizeof k2, "%s.grad", key);
        for (int64_t i = 0; i < ni; i++)
            check_close(k2, (int)i, grad[i] - 0.125f * (float)(i % 5), want_grad[i], 1e-5, 1e-6);
        if (g_failures == before)
            printf("ok %s: forward and backward match PyTorch\n", key);
        free(out);
        free(grad);
        free(gout);
    }
}

static int test_ref(void)
{
    ref_file *r = ref_load("loss.txt");
    int64_t cls[6];
    const double *tc = ref_get(r, "ce.target", 6);
    for (int i = 0; i < 6; i++)
        cls[i] = (int64_t)tc[i];
    float *ce_w = to_f(ref_get(r, "ce.weight", 5), 5);
    float *logits = to_f(ref_get(r, "ce.logits", 30), 30);
    float *logp = to_f(ref_get(r, "nll.logp", 30), 30);
    float *el_x = to_f(ref_get(r, "el.input", 20), 20);
    float *el_t = to_f(ref_get(r, "el.target", 20), 20);
    float *bx = to_f(ref_get(r, "bce.input", 12), 12);
    float *bt = to_f(ref_get(r, "bce.target", 12), 12);
    float *bw = to_f(ref_get(r, "bce.weight", 12), 12);
    float *zx = to_f(ref_get(r, "bcel.input", 12), 12);
    float *pw = to_f(ref_get(r, "bcel.pos_weight", 3), 3);
    data d[6] = {
        [K_CE] = {.x = logits, .cls = cls, .weight = ce_w, .n = 6, .c = 5},
        [K_NLL] = {.x = logp, .cls = cls, .weight = ce_w, .n = 6, .c = 5},
        [K_MSE] = {.x = el_x, .t = el_t, .n = 4, .c = 5},
        [K_L1] = {.x = el_x, .t = el_t, .n = 4, .c = 5},
        [K_BCE] = {.x = bx, .t = bt, .weight = bw, .n = 4, .c = 3},
        [K_BCEL] = {.x = zx, .t = bt, .weight = bw, .pos_weight = pw, .n = 4, .c = 3},
    };
    for (int k = 0; k < 6; k++) {
        const variant *vs;
        int nv;
        variants_of(k, &vs, &nv);
        for (int i = 0; i < nv; i++)
            check_case(r, k, &vs[i], &d[k]);
    }
    /* the L1 tie has gradient 0, as sign(0) */
    float g0 = 0, one = 1;
    CHECK_EQ_INT(ct_loss_l1_backward(el_x, el_t, 1, CT_REDUCTION_SUM, &one, &g0), 0);
    CHECK(g0 == 0.0f);
    free(ce_w), free(logits), free(logp), free(el_x), free(el_t), free(bx), free(bt), free(bw);
    free(zx), free(pw);
    ref_free(r);
    return 0;
}

/* ---- finite differences ---------------------------------------------------------------------- */

static unsigned rng_state = 12345u;
static float frand(void) /* uniform [0, 1) */
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 16777216.0f;
}

static void fd_case(int kind, const variant *v, data *d, ct_reduction red, double h)
{
    int64_t no = out_len(kind, d, red), ni = d->n * d->c;
    float *gout = malloc((size_t)no * sizeof *gout);
    float *grad = calloc((size_t)ni, sizeof *grad);
    float *op = malloc((size_t)no * sizeof *op), *om = malloc((size_t)no * sizeof *om);
    for (int64_t i = 0; i < no; i++)
        gout[i] = 0.5f + frand();
    CHECK_EQ_INT(bwd(kind, v, d, red, gout, grad), 0);
    int before = g_failures;
    char what[96];
    snprintf(what, sizeof what, "fd %s.%s.%s", kind_key[kind], v->name, red_name[red]);
    double maxerr = 0;
    for (int64_t j = 0; j < ni; j++) {
        float keep = d->x[j];
        d->x[j] = (float)(keep + h);
        double hp = (double)d->x[j] - keep; /* the step actually taken in float */
        fwd(kind, v, d, red, op);
        d->x[j] = (float)(keep - h);
        double hm = keep - (double)d->x[j];
        fwd(kind, v, d, red, om);
        d->x[j] = keep;
        double num = 0;
        for (int64_t k = 0; k < no; k++)
            num += (double)gout[k] * ((double)op[k] - om[k]);
        num /= hp + hm;
        check_close(what, (int)j, grad[j], num, 5e-3, 5e-4);
        maxerr = fmax(maxerr, fabs(grad[j] - num));
    }
    if (g_failures == before)
        printf("ok %s: backward == finite differences (max abs err %.2g)\n", what, maxerr);
    free(gout), free(grad), free(op), free(om);
}

static int test_fd(void)
{
    enum { N = 5, C = 4 };
    float x[N * C], t[N * C], w[N * C], cw[C], pw[C];
    int64_t cls[N] = {0, 2, 3, 2, 1};
    for (int k = 0; k < 6; k++) {
        /* fresh inputs per kind, shaped for it */
        for (int i = 0; i < N * C; i++) {
            x[i] = 4.0f * frand() - 2.0f;
            t[i] = frand();
            w[i] = 0.5f + frand();
        }
        for (int j = 0; j < C; j++) {
            cw[j] = 0.5f + frand();
            pw[j] = 0.5f + 2 * frand();
        }
        double h = 1e-2;
        if (k == K_NLL)
            for (int i = 0; i < N * C; i++)
                x[i] = -0.1f - 3 * frand(); /* log-probabilities are negative */
        if (k == K_BCE) {
            for (int i = 0; i < N * C; i++)
                x[i] = 0.1f + 0.8f * frand();
            h = 1e-3;
        }
        if (k == K_L1) {
            for (int i = 0; i < N * C; i++) /* keep |x - t| >= 0.05: no kink within h */
                t[i] = x[i] + (i % 2 ? 1 : -1) * (0.05f + frand());
            h = 1e-3;
        }
        data d = {.x = x,
                  .cls = cls,
                  .t = t,
                  .weight = (k == K_CE || k == K_NLL) ? cw : w,
                  .pos_weight = pw,
                  .n = N,
                  .c = C};
        const variant *vs;
        int nv;
        variants_of(k, &vs, &nv);
        for (int i = 0; i < nv; i++)
            for (int r = 0; r < 3; r++)
                fd_case(k, &vs[i], &d, (ct_reduction)r, h);
    }
    return 0;
}

/* ---- errors ------------------------------------------------------------------------------- */

static int test_errors(void)
{
    float logits[6] = {1, 2, 3, 4, 5, 6}, out[2] = {42, 42}, grad[6] = {0}, one = 1;
    int64_t bad[2] = {0, 7}, neg[2] = {-1, 0}, dflt_ign[2] = {-100, 1};
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(logits, bad, 2, 3, NULL, out), CT_EINVAL);
    CHECK_MSG("target[1] = 7");
    CHECK(out[0] == 42);
    CHECK_EQ_INT(ct_loss_cross_entropy_backward(logits, neg, 2, 3, NULL, &one, grad), CT_EINVAL);
    CHECK_MSG("target[0] = -1");
    CHECK(grad[0] == 0);
    CHECK_EQ_INT(ct_loss_nll_forward(logits, bad, 2, 3, NULL, out), CT_EINVAL);
    CHECK_MSG("target[1]");
    /* -100 is PyTorch's default ignore_index: ignored, mean over the one other row */
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(logits, dflt_ign, 2, 3, NULL, out), 0);
    float row1;
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(logits + 3, dflt_ign + 1, 1, 3, NULL, &row1), 0);
    check_close("ignore -100", 0, out[0], row1, 1e-7, 0);
    /* but not when another ignore_index is set */
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(
                     logits, dflt_ign, 2, 3,
                     &(ct_ce_opts){.use_ignore_index = true, .ignore_index = 0}, out),
                 CT_EINVAL);
    CHECK_MSG("target[0] = -100");
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(logits, bad, 2, 3,
                                               &(ct_ce_opts){.label_smoothing = 1.5}, out),
                 CT_EINVAL);
    CHECK_MSG("label_smoothing");
    int64_t okt[2] = {0, 1};
    CHECK_EQ_INT(ct_loss_nll_forward(logits, okt, 2, 3, &(ct_ce_opts){.label_smoothing = 0.1}, out),
                 CT_EINVAL);
    CHECK_MSG("label_smoothing");
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(logits, okt, 2, 3,
                                               &(ct_ce_opts){.reduction = (ct_reduction)9}, out),
                 CT_EINVAL);
    CHECK_MSG("reduction");
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(logits, okt, 2, 0, NULL, out), CT_EINVAL);
    CHECK_MSG("C=0");
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(NULL, okt, 2, 3, NULL, out), CT_EINVAL);
    CHECK_MSG("input");
    CHECK_EQ_INT(ct_loss_mse_forward(logits, NULL, 6, CT_REDUCTION_MEAN, out), CT_EINVAL);
    CHECK_MSG("target");
    CHECK_EQ_INT(ct_loss_l1_backward(logits, logits, 6, CT_REDUCTION_MEAN, NULL, grad), CT_EINVAL);
    CHECK_MSG("grad_out");
    float p[3] = {0.5f, 1.5f, 0.2f}, t[3] = {0, 1, 0};
    out[0] = 42;
    CHECK_EQ_INT(ct_loss_bce_forward(p, t, 1, 3, NULL, out), CT_EINVAL);
    CHECK_MSG("input[1] = 1.5");
    CHECK(out[0] == 42);
    CHECK_EQ_INT(ct_loss_bce_forward(p, t, 1, 3, &(ct_bce_opts){.pos_weight = t}, out), CT_EINVAL);
    CHECK_MSG("pos_weight");
    /* BCE at exactly 0 and 1 is finite (log clamped at -100), and BCE-with-logits at +-100 */
    float pe[2] = {0.0f, 1.0f}, te[2] = {1.0f, 0.0f};
    CHECK_EQ_INT(
        ct_loss_bce_forward(pe, te, 1, 2, &(ct_bce_opts){.reduction = CT_REDUCTION_SUM}, out), 0);
    check_close("bce clamp", 0, out[0], 200.0, 1e-6, 0);
    float ze[2] = {100.0f, -100.0f};
    CHECK_EQ_INT(ct_loss_bce_with_logits_forward(
                     ze, te, 1, 2, &(ct_bce_opts){.reduction = CT_REDUCTION_SUM}, out),
                 0);
    check_close("bcel stable", 0, out[0], 0.0, 0, 1e-30);
    CHECK_EQ_INT(ct_loss_bce_with_logits_forward(
                     ze, pe, 1, 2, &(ct_bce_opts){.reduction = CT_REDUCTION_SUM}, out),
                 0);
    check_close("bcel stable 2", 0, out[0], 200.0, 1e-6, 0);
    /* mean over only ignored rows is NaN, as in PyTorch; its gradient is zero */
    int64_t all_ign[2] = {2, 2};
    ct_ce_opts ign2 = {.use_ignore_index = true, .ignore_index = 2};
    CHECK_EQ_INT(ct_loss_cross_entropy_forward(logits, all_ign, 2, 3, &ign2, out), 0);
    CHECK(isnan(out[0]));
    memset(grad, 0, sizeof grad);
    CHECK_EQ_INT(ct_loss_cross_entropy_backward(logits, all_ign, 2, 3, &ign2, &one, grad), 0);
    for (int i = 0; i < 6; i++)
        CHECK(grad[i] == 0.0f);
    /* empty batch: sum is 0 */
    CHECK_EQ_INT(ct_loss_mse_forward(logits, logits, 0, CT_REDUCTION_SUM, out), 0);
    CHECK(out[0] == 0.0f);
    if (!g_failures)
        printf("ok loss errors name the argument and write nothing\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "all";
    int all = !strcmp(what, "all");
    if (all || !strcmp(what, "ref"))
        test_ref();
    if (all || !strcmp(what, "fd"))
        test_fd();
    if (all || !strcmp(what, "errors"))
        test_errors();
    if (g_failures) {
        fprintf(stderr, "%d failure(s)\n", g_failures);
        return 1;
    }
    printf("all loss tests (%s) passed\n", what);
    return 0;
}
