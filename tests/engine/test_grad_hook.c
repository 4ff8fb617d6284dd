/* tests/engine/test_grad_hook.c — gradient-ready hooks (ct_tensor_on_grad_ready,
 * ct_module_on_grad_ready), single process:
 *   - a small CNN: every parameter fires exactly once per backward, before backward returns,
 *     in exactly decreasing parameter order; the gradient seen at fire time is final (equal,
 *     bit for bit, to the gradient after backward) and plain contiguous f32 in the flat
 *     buffer; gradients are bit-identical to a backward without hooks; a second pass fires
 *     again; hooks removed: nothing fires; a parameter that outlives its destroyed module
 *     fires nothing (no stale pointer into the module);
 *   - tensor level: a leaf used by two ops fires once, after the second use's backward; a leaf
 *     off the loss path fires with a zero-filled gradient; an unused leaf never fires; a
 *     non-leaf is refused; a failing hook's code comes back from backward after every other
 *     hook ran. */
#include "ct/optim.h"
#include "tests/engine/testutil.h"

#define MAXP 32

typedef struct rec {
    int order[4 * MAXP], n;
    int count[MAXP];
    bool backward_returned;
    bool late;   /* a hook fired after backward returned */
    float *snap; /* per parameter: gradient copied at fire time (flat layout) */
    const ct_param_ref *refs;
    float *flat_g;
} rec;

static int on_param(int i, void *user)
{
    rec *r = user;
    if (r->backward_returned)
        r->late = true;
    if (i >= 0 && i < MAXP)
        r->count[i]++;
    if (r->n < 4 * MAXP)
        r->order[r->n++] = i;
    if (r->snap) {
        const ct_param_ref *p = &r->refs[i];
        memcpy(r->snap + (p->grad - r->flat_g), p->grad, (size_t)p->numel * sizeof(float));
    }
    return 0;
}

static ct_module *small_cnn(void)
{
    ct_conv_opts p1 = {.padding = {1, 1}};
    return CT_SEQUENTIAL(ct_nn_conv2d_new(1, 16, 3, &p1, true), ct_nn_batchnorm2d_new(16),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 0, 0),
                         ct_nn_conv2d_new(16, 16, 3, &p1, true), ct_nn_relu_new(),
                         ct_nn_flatten_new(), ct_nn_linear_new(16 * 6 * 6, 32, true),
                         ct_nn_relu_new(), ct_nn_linear_new(32, 10, true));
}

/* loss of the CNN on a fixed batch; backward; returns 0 */
static int step(ct_module *net, ct_tensor *x, ct_tensor *y)
{
    ct_module_zero_grad(net);
    ct_tensor *logits = ct_module_forward(net, x);
    ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, y, 0.0f) : NULL;
    int rc = loss ? ct_tensor_backward(loss, NULL) : CT_EINVAL;
    ct_tensor_release(&loss);
    ct_tensor_release(&logits);
    return rc;
}

static void test_module(void)
{
    int64_t xs[4] = {8, 1, 12, 12}, ys[1] = {8};
    ct_tensor *x = ct_tensor_new(CT_F32, 4, xs), *y = ct_tensor_new(CT_I64, 1, ys);
    float *xp = ct_tensor_f32(x);
    for (int i = 0; i < 8 * 144; i++)
        xp[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < 8; i++)
        ((int64_t *)ct_tensor_data(y))[i] = (i * 3) % 10;

    ct_nn_manual_seed(7);
    ct_module *net = small_cnn();
    const ct_param_ref *refs;
    int np;
    float *flat_v, *flat_g;
    int64_t numel;
    CHECK(net && ct_module_params(net, &refs, &np) == 0, "build");
    CHECK(np == 10 && np <= MAXP, "10 parameters, got %d", np);
    ct_module_flat(net, &flat_v, &flat_g, &numel);

    /* without hooks */
    CHECK(step(net, x, y) == 0, "backward without hooks");
    float *plain = malloc((size_t)numel * sizeof(float));
    float *snap = calloc((size_t)numel, sizeof(float));
    memcpy(plain, flat_g, (size_t)numel * sizeof(float));

    rec r = {.snap = snap, .refs = refs, .flat_g = flat_g};
    CHECK(ct_module_on_grad_ready(net, on_param, &r) == 0, "register");
    for (int pass = 0; pass < 2; pass++) {
        memset(r.count, 0, sizeof r.count);
        r.n = 0;
        r.backward_returned = false;
        CHECK(step(net, x, y) == 0, "backward with hooks");
        r.backward_returned = true;
        for (int i = 0; i < np; i++)
            CHECK(r.count[i] == 1, "pass %d: parameter %d (%s) fired %d times", pass, i,
                  refs[i].name, r.count[i]);
        CHECK(r.n == np, "pass %d: %d hooks fired, want %d", pass, r.n, np);
        for (int k = 0; k < r.n && k < np; k++)
            CHECK(r.order[k] == np - 1 - k, "pass %d: hook %d was parameter %d, want %d", pass, k,
                  r.order[k], np - 1 - k);
        /* final at fire time, and identical to the run without hooks */
        for (int i = 0; i < np; i++) {
            const ct_param_ref *p = &refs[i];
            int64_t off = p->grad - flat_g;
            CHECK(memcmp(snap + off, p->grad, (size_t)p->numel * sizeof(float)) == 0,
                  "%s: gradient changed after its hook fired", p->name);
            for (int64_t j = 0; j < p->numel; j++)
                if (p->grad[j] != plain[off + j]) {
                    CHECK(0, "%s[%lld] = %.9g with hooks, %.9g without", p->name, (long long)j,
                          p->grad[j], plain[off + j]);
                    break;
                }
        }
    }
    CHECK(!r.late, "a hook fired after backward returned");
    /* the parameters' gradient tensors are plain contiguous views of the flat buffer */
    const ct_named_tensor *sd;
    int nsd;
    ct_module_state_dict(net, &sd, &nsd);
    for (int i = 0; i < nsd; i++) {
        ct_tensor *g = ct_tensor_grad(sd[i].tensor);
        if (!ct_tensor_requires_grad(sd[i].tensor))
            continue;
        CHECK(g && ct_tensor_is_contiguous(g) && ct_tensor_is_plain(g) &&
                  ct_tensor_dtype(g) == CT_F32,
              "%s: gradient not plain contiguous f32", sd[i].name);
    }
    /* removed: nothing fires */
    CHECK(ct_module_on_grad_ready(net, NULL, NULL) == 0, "remove");
    r.n = 0;
    CHECK(step(net, x, y) == 0, "backward after removal");
    CHECK(r.n == 0, "%d hooks fired after removal", r.n);
    /* a parameter that outlives its module keeps no hook into the freed module */
    CHECK(ct_module_on_grad_ready(net, on_param, &r) == 0, "register again");
    ct_tensor *w0 = ct_tensor_retain(sd[0].tensor);
    ct_module_destroy(&net);
    r.n = 0;
    ct_tensor *s0 = ct_nn_sum(w0);
    CHECK(s0 && ct_tensor_backward(s0, NULL) == 0, "backward on a surviving parameter");
    CHECK(r.n == 0, "%d hooks fired after the module was destroyed", r.n);
    ct_tensor_release(&s0);
    ct_tensor_release(&w0);
    free(plain);
    free(snap);
    ct_tensor_release(&x);
    ct_tensor_release(&y);
}

/* ---- tensor level ---- */

typedef struct tlog {
    const char *names[16];
    float grad0[16]; /* first gradient element at fire time */
    bool grad_null[16];
    int n;
    int fail_on; /* index in firing order that returns CT_EIO, -1 none */
} tlog;

static int on_leaf(ct_tensor *t, void *user)
{
    tlog *l = ((void **)user)[0];
    const char *name = ((void **)user)[1];
    ct_tensor *g = ct_tensor_grad(t);
    int k = l->n++;
    l->names[k] = name;
    l->grad_null[k] = g == NULL;
    l->grad0[k] = g ? ct_tensor_f32(g)[0] : 0.0f;
    return k == l->fail_on ? CT_EIO : 0;
}

static void test_tensor_level(void)
{
    int64_t s[1] = {3};
    float av[3] = {1, -2, 3}, bv[3] = {0.5f, 0.5f, 0.5f};
    ct_tensor *a = ct_tensor_from_f32(1, s, av), *b = ct_tensor_from_f32(1, s, bv);
    ct_tensor *c = ct_tensor_from_f32(1, s, bv), *u = ct_tensor_from_f32(1, s, bv);
    ct_tensor_set_requires_grad(a, true);
    ct_tensor_set_requires_grad(b, true);
    ct_tensor_set_requires_grad(c, true);
    ct_tensor_set_requires_grad(u, true);
    tlog l = {.fail_on = -1};
    void *ua[2] = {&l, "a"}, *ub[2] = {&l, "b"}, *uc[2] = {&l, "c"}, *uu[2] = {&l, "u"};
    CHECK(ct_tensor_on_grad_ready(a, on_leaf, ua) == 0, "hook a");
    CHECK(ct_tensor_on_grad_ready(b, on_leaf, ub) == 0, "hook b");
    CHECK(ct_tensor_on_grad_ready(c, on_leaf, uc) == 0, "hook c");
    CHECK(ct_tensor_on_grad_ready(u, on_leaf, uu) == 0, "hook u");
    CHECK(ct_tensor_on_grad_ready(NULL, on_leaf, ua) == CT_EINVAL, "NULL refused");

    for (int round = 0; round < 2; round++) {
        l.n = 0;
        l.fail_on = round == 1 ? 0 : -1;
        ct_tensor_zero_grad(a);
        ct_tensor_zero_grad(b);
        /* loss = sum(relu(a + b) + a) + 0 * ...: a is used twice (add, then add again later);
         * c goes into an op whose output is not used by the loss (off the path) */
        ct_tensor *h = ct_nn_add(a, b);  /* node 0: a, b */
        ct_tensor *side = ct_nn_relu(c); /* node 1: c (dead end) */
        ct_tensor *r = ct_nn_relu(h);    /* node 2 */
        ct_tensor *r2 = ct_nn_add(r, a); /* node 3: a again */
        ct_tensor *loss = ct_nn_sum(r2); /* node 4 */
        if (round == 0)
            CHECK(ct_tensor_on_grad_ready(r, on_leaf, ua) == CT_EINVAL, "non-leaf refused");
        int rc = ct_tensor_backward(loss, NULL);
        if (round == 0)
            CHECK(rc == 0, "backward rc %d", rc);
        else
            CHECK(rc == CT_EIO, "failing hook: backward rc %d, want CT_EIO", rc);
        /* walk: node 4, 3, 2, 1 (skipped: c's only user -> c fires), 0 (b then a) */
        const char *want[3] = {"c", "b", "a"};
        CHECK(l.n == 3, "round %d: %d hooks fired, want 3 (u unused never fires)", round, l.n);
        for (int k = 0; k < 3 && k < l.n; k++)
            CHECK(strcmp(l.names[k], want[k]) == 0, "round %d: hook %d is %s, want %s", round, k,
                  l.names[k], want[k]);
        /* a's gradient at fire time is final: relu'(a+b) + 1 = 2 for a[0] = 1 */
        CHECK(l.n == 3 && l.grad0[2] == 2.0f, "a's grad at fire %g, want 2", l.grad0[2]);
        CHECK(l.n == 3 && l.grad0[1] == 1.0f, "b's grad at fire %g, want 1", l.grad0[1]);
        /* c: no gradient buffer yet in round 0 */
        CHECK(l.grad_null[0] == (round == 0), "round %d: c's gradient %s", round,
              l.grad_null[0] ? "NULL" : "present");
        ct_tensor_release(&loss);
        ct_tensor_release(&r2);
        ct_tensor_release(&r);
        ct_tensor_release(&side);
        ct_tensor_release(&h);
        if (round == 0) { /* give c a gradient buffer holding garbage-free zeros next round */
            ct_tensor *cs = ct_nn_sum(c);
            ct_tensor_on_grad_ready(c, NULL, NULL);
            ct_tensor_backward(cs, NULL);
            ct_tensor_release(&cs);
            ct_tensor_zero_grad(c);
            ct_tensor_on_grad_ready(c, on_leaf, uc);
        } else {
            CHECK(ct_tensor_f32(ct_tensor_grad(c))[0] == 0.0f, "c off the path: grad %g",
                  ct_tensor_f32(ct_tensor_grad(c))[0]);
        }
    }
    ct_tensor_release(&a);
    ct_tensor_release(&b);
    ct_tensor_release(&c);
    ct_tensor_release(&u);
}

int main(void)
{
    test_module();
    test_tensor_level();
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    fprintf(stderr, "grad_hook: ok\n");
    return 0;
}
