/* tests/engine/test_tensor.c — tensors (dtypes, shapes, views, refcounts, arenas) and the
 * autograd tape (accumulation, zero_grad, no-grad mode, a tensor used twice), ReLU at NaN, +-inf
 * and -0, plus the oneDNN primitive cache (a second call with the same shape creates nothing). */
#include "tests/engine/testutil.h"

int64_t ct__cpu_primitives_created(void); /* trainer/cpu/cpu.h (internal) */

static void test_basics(void)
{
    CHECK(ct_dtype_size(CT_F32) == 4 && ct_dtype_size(CT_F16) == 2 && ct_dtype_size(CT_BF16) == 2 &&
              ct_dtype_size(CT_I32) == 4 && ct_dtype_size(CT_I64) == 8 && ct_dtype_size(CT_U8) == 1,
          "dtype sizes");
    int64_t shape[5] = {2, 3, 4, 5, 6};
    ct_tensor *t = ct_tensor_new(CT_F32, 5, shape);
    CHECK(t != NULL, "5-d tensor");
    CHECK(ct_tensor_numel(t) == 720, "numel %lld", (long long)ct_tensor_numel(t));
    CHECK(ct_tensor_strides(t)[0] == 360 && ct_tensor_strides(t)[4] == 1, "strides %lld %lld",
          (long long)ct_tensor_strides(t)[0], (long long)ct_tensor_strides(t)[4]);
    CHECK(ct_tensor_device(t) == CT_CPU, "device");
    CHECK(ct_tensor_f32(t)[719] == 0.0f, "zero-filled");
    int64_t six[6] = {1, 1, 1, 1, 1, 1};
    CHECK(ct_tensor_new(CT_F32, 6, six) == NULL, "6 dims refused");
    int64_t neg[1] = {-1};
    CHECK(ct_tensor_new(CT_F32, 1, neg) == NULL, "negative dim refused");
    CHECK(strstr(ct_last_error(), "negative") != NULL, "message: %s", ct_last_error());

    /* views share storage and keep it alive */
    int64_t vs[2] = {6, 120};
    ct_tensor *v = ct_tensor_view(t, 2, vs);
    ct_tensor_f32(v)[5] = 3.0f;
    CHECK(ct_tensor_f32(t)[5] == 3.0f, "view writes through");
    ct_tensor_release(&t);
    CHECK(t == NULL, "release nulls");
    CHECK(ct_tensor_f32(v)[5] == 3.0f, "view keeps storage alive");
    int64_t bad[1] = {7};
    CHECK(ct_tensor_view(v, 1, bad) == NULL, "view with wrong numel refused");
    ct_tensor *rows = ct_tensor_narrow0(v, 2, 3);
    CHECK(ct_tensor_dim(rows, 0) == 3 && ct_tensor_f32(rows) == ct_tensor_f32(v) + 240,
          "narrow0 offset");
    ct_tensor_release(&rows);
    ct_tensor_release(&v);
    ct_tensor_release(&v); /* NULL: no-op */

    for (int dt = CT_F32; dt <= CT_U8; dt++) {
        int64_t s[2] = {3, 2};
        ct_tensor *x = ct_tensor_new((ct_dtype)dt, 2, s);
        CHECK(x && ct_tensor_dtype(x) == (ct_dtype)dt, "dtype %d", dt);
        ct_tensor *c = ct_tensor_clone(x);
        CHECK(c && memcmp(ct_tensor_data(c), ct_tensor_data(x), 6 * ct_dtype_size(dt)) == 0,
              "clone %s", ct_dtype_name((ct_dtype)dt));
        ct_tensor_release(&c);
        ct_tensor_release(&x);
    }
}

static void test_arena(void)
{
    ct_arena *a = ct_arena_new(4096);
    int64_t s1[2] = {3, 5}, s2[1] = {7};
    ct_tensor *x = ct_arena_alloc(a, CT_F32, 2, s1);
    ct_tensor *y = ct_arena_alloc(a, CT_I64, 1, s2);
    CHECK(x && y, "arena allocs");
    CHECK((char *)ct_tensor_data(x) == (char *)ct_arena_data(a), "first at start");
    CHECK((char *)ct_tensor_data(y) == (char *)ct_arena_data(a) + 64, "second 64-aligned: %td",
          (char *)ct_tensor_data(y) - (char *)ct_arena_data(a));
    int64_t big[1] = {10000};
    CHECK(ct_arena_alloc(a, CT_F32, 1, big) == NULL, "arena overflow refused");
    ct_arena_destroy(&a);
    CHECK(a == NULL, "arena destroy nulls");
    ct_tensor_f32(x)[0] = 1.0f; /* storage still alive via x */
    ct_tensor_release(&x);
    ct_tensor_release(&y);
}

static void test_autograd(void)
{
    int64_t s[1] = {4};
    float xv[4] = {-1.0f, 2.0f, -3.0f, 4.0f};
    ct_tensor *x = ct_tensor_from_f32(1, s, xv);
    ct_tensor_set_requires_grad(x, true);
    /* y = sum(relu(x) + x): x used twice -> grad = (x>0) + 1 */
    for (int rep = 0; rep < 2; rep++) {
        ct_tensor *r = ct_nn_relu(x), *a = ct_nn_add(r, x), *l = ct_nn_sum(a);
        CHECK(ct_tensor_item(l) == 8.0f, "sum %g", ct_tensor_item(l));
        CHECK(ct_tensor_backward(l, NULL) == 0, "backward");
        ct_tensor_release(&l);
        ct_tensor_release(&a);
        ct_tensor_release(&r);
    }
    const float *g = ct_tensor_f32(ct_tensor_grad(x));
    float want[4] = {2, 4, 2, 4}; /* two backward passes accumulate */
    for (int i = 0; i < 4; i++)
        CHECK(g[i] == want[i], "grad[%d] = %g, want %g", i, g[i], want[i]);
    ct_tensor_zero_grad(x);
    CHECK(g[1] == 0.0f, "zero_grad %g", g[1]);

    /* no-grad mode: nothing recorded, output does not require grad */
    bool prev = ct_autograd_set_enabled(false);
    CHECK(prev, "grad mode on by default");
    ct_tensor *r = ct_nn_relu(x);
    CHECK(!ct_tensor_requires_grad(r), "no-grad output requires no grad");
    CHECK(ct_tensor_backward(r, NULL) < 0, "backward without graph fails");
    ct_tensor_release(&r);
    ct_autograd_set_enabled(true);

    /* backward of a non-scalar needs grad_out */
    r = ct_nn_relu(x);
    CHECK(ct_tensor_backward(r, NULL) == CT_EINVAL, "non-scalar without grad_out refused");
    ct_tensor_release(&r);
    ct_tensor_release(&x);
}

/* Gradients passed on without a copy (reshape and add hand their output's gradient to an input
 * an op made): y = reshape(relu(x)); z = y + y, then + r where r = relu(x) again through two
 * reshapes, so one buffer would serve two sums if a pass went wrong. d sum(z) / dx = 3 (x > 0). */
static void test_grad_pass(void)
{
    int64_t s[1] = {4}, s2[2] = {2, 2};
    float xv[4] = {1, -1, 2, 3};
    ct_tensor *x = ct_tensor_from_f32(1, s, xv);
    ct_tensor_set_requires_grad(x, true);
    ct_tensor *r = ct_nn_relu(x), *y = ct_nn_reshape(r, 2, s2), *yy = ct_nn_add(y, y);
    ct_tensor *r1 = ct_nn_reshape(r, 1, s), *r2 = ct_nn_reshape(r1, 2, s2);
    ct_tensor *z = ct_nn_add(yy, r2), *l = ct_nn_sum(z);
    CHECK(l && ct_tensor_item(l) == 18.0f, "sum %g", l ? ct_tensor_item(l) : -1.0f);
    CHECK(ct_tensor_backward(l, NULL) == 0, "backward");
    const float *g = ct_tensor_f32(ct_tensor_grad(x));
    float want[4] = {3, 0, 3, 3};
    for (int i = 0; i < 4; i++)
        CHECK(g[i] == want[i], "pass grad[%d] = %g, want %g", i, g[i], want[i]);
    ct_tensor *ts[8] = {l, z, r2, r1, yy, y, r, x};
    for (int i = 0; i < 8; i++)
        ct_tensor_release(&ts[i]);
}

/* ReLU at the edges of float, as PyTorch: NaN stays NaN, -inf, -0 and negatives give +0 (0 * x
 * would give NaN and -0); the gradient is +0 where y <= 0 or is NaN, even where dy is inf */
static void test_relu_edges(void)
{
    int64_t s[1] = {6};
    float xv[6] = {NAN, INFINITY, -INFINITY, -0.0f, -2.0f, 3.0f};
    float gv[6] = {1.0f, 1.0f, INFINITY, -1.0f, -INFINITY, 5.0f};
    float want_g[6] = {0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 5.0f};
    ct_tensor *x = ct_tensor_from_f32(1, s, xv), *go = ct_tensor_from_f32(1, s, gv);
    ct_tensor_set_requires_grad(x, true);
    ct_tensor *y = ct_nn_relu(x);
    CHECK(y != NULL, "relu");
    if (!y)
        return;
    const float *yv = ct_tensor_f32(y);
    CHECK(isnan(yv[0]) && yv[1] == INFINITY && yv[5] == 3.0f, "relu %g %g %g", yv[0], yv[1], yv[5]);
    for (int i = 2; i < 5; i++)
        CHECK(yv[i] == 0.0f && !signbit(yv[i]), "relu(%g) = %g, want +0", xv[i], yv[i]);
    CHECK(ct_tensor_backward(y, go) == 0, "backward");
    const float *g = ct_tensor_f32(ct_tensor_grad(x));
    for (int i = 0; i < 6; i++)
        CHECK(g[i] == want_g[i] && !signbit(g[i]), "relu grad[%d] = %g, want %g", i, g[i],
              want_g[i]);
    ct_tensor_release(&y);
    ct_tensor_release(&go);
    ct_tensor_release(&x);
}

static void test_cache(void)
{
    int64_t xs[4] = {2, 3, 9, 9}, ws[4] = {4, 3, 3, 3};
    ct_tensor *x = rand_t(4, xs), *w = rand_t(4, ws);
    ct_tensor_set_requires_grad(w, true);
    ct_tensor *y = ct_nn_conv2d(x, w, NULL, NULL);
    ct_tensor *l = ct_nn_sum(y);
    ct_tensor_backward(l, NULL);
    ct_tensor_release(&l);
    ct_tensor_release(&y);
    int64_t before = ct__cpu_primitives_created();
    for (int i = 0; i < 3; i++) {
        y = ct_nn_conv2d(x, w, NULL, NULL);
        l = ct_nn_sum(y);
        ct_tensor_backward(l, NULL);
        ct_tensor_release(&l);
        ct_tensor_release(&y);
    }
    CHECK(ct__cpu_primitives_created() == before, "primitives created on repeat: %lld -> %lld",
          (long long)before, (long long)ct__cpu_primitives_created());
    ct_tensor_release(&x);
    ct_tensor_release(&w);
}

/* devices: a copy to the checking device and back gives the same bytes; a device this program
 * cannot use (it links no CUDA backend, or the machine has no GPU) is a clear error */
static void test_devices(void)
{
    int64_t s[2] = {3, 4};
    ct_tensor *t = rand_t(2, s), *d = ct_tensor_to(t, CT_CHECKDEV);
    CHECK(d && ct_tensor_device(d) == CT_CHECKDEV, "to checkdev");
    float back[12];
    CHECK(d && ct_tensor_copy_to(d, back, sizeof back) == 0 &&
              memcmp(back, ct_tensor_f32(t), sizeof back) == 0,
          "checkdev round trip");
    CHECK(d && ct_tensor_item(d) == ct_tensor_f32(t)[0], "item on checkdev");
    ct_tensor *g = ct_tensor_to(t, CT_CUDA);
    CHECK(!g && strstr(ct_last_error(), "device cuda"), "cuda here: %s", ct_last_error());
    ct_tensor_release(&g);
    ct_tensor_release(&d);
    ct_tensor_release(&t);
}

int main(void)
{
    test_basics();
    test_arena();
    test_devices();
    test_autograd();
    test_relu_edges();
    test_grad_pass();
    test_cache();
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    printf("engine tensor/autograd: all passed\n");
    return 0;
}
