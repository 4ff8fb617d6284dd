/* tests/engine/test_modules.c — modules against PyTorch: a composite net using every module
 * kind is built in ct, loaded (strict) from the torch state dict in ref/modules.bin — which
 * checks every dotted name and shape — then forward, parameter gradients, running stats after
 * one training forward and the eval-mode output are compared within 1e-4. Also: default
 * initialisation ranges, flat parameter buffers, state-dict load errors, safetensors round trip. */
#include <unistd.h>

#include "ct/optim.h"
#include "tests/engine/testutil.h"

static ct_module *conv_bn(int cin, int cout)
{
    ct_conv_opts o = {.padding = {1, 1}};
    return CT_SEQUENTIAL(ct_module_set_name(ct_nn_conv2d_new(cin, cout, 3, &o, false), "conv"),
                         ct_module_set_name(ct_nn_batchnorm2d_new(cout), "bn"),
                         ct_module_set_name(ct_nn_relu_new(), "relu"));
}

static ct_module *composite(void)
{
    ct_conv_opts p1 = {.padding = {1, 1}};
    ct_conv_opts tr = {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}};
    return CT_SEQUENTIAL(
        ct_nn_conv2d_new(2, 4, 3, &p1, true), ct_nn_batchnorm2d_new(4), ct_nn_leaky_relu_new(0.1f),
        CT_RESIDUAL(conv_bn(4, 4), conv_bn(4, 4)), ct_nn_maxpool2d_new(2, 0, 0),
        ct_nn_conv_transpose2d_new(4, 3, 3, &tr, true), ct_nn_elu_new(1.0f),
        ct_nn_avgpool2d_new(2, 0, 0), ct_nn_adaptive_avgpool2d_new(2, 2), ct_nn_flatten_new(),
        ct_nn_linear_new(12, 8, true), ct_nn_batchnorm1d_new(8), ct_nn_tanh_new(),
        ct_nn_dropout_new(0.0f), ct_nn_linear_new(8, 5, true), ct_nn_sigmoid_new());
}

/* The reference state dict as entries named without the "sd." prefix. */
static int ref_sd(ref_file *r, const char *prefix, ct_named_tensor *out, int max)
{
    int n = 0;
    size_t pl = strlen(prefix);
    for (int i = 0; i < r->n && n < max; i++)
        if (strncmp(r->v[i].name, prefix, pl) == 0)
            out[n++] = (ct_named_tensor){r->v[i].name + pl, r->v[i].t};
    return n;
}

static void test_vs_torch(ref_file *r)
{
    ct_module *net = composite();
    CHECK(net != NULL, "composite built");
    ct_named_tensor sd[128];
    int n = ref_sd(r, "sd.", sd, 128);
    const ct_named_tensor *mine;
    int nmine;
    ct_module_state_dict(net, &mine, &nmine);
    CHECK(nmine == n, "state dict has %d keys, torch %d", nmine, n);
    for (int i = 0; i < n && i < nmine; i++)
        CHECK(strcmp(mine[i].name, sd[i].name) == 0, "key %d: %s vs torch %s", i, mine[i].name,
              sd[i].name);
    int rc = ct_module_load_state_dict(net, sd, n, true);
    CHECK(rc == 0, "strict load rc %d", rc);

    const ct_param_ref *ps;
    int np;
    CHECK(ct_module_params(net, &ps, &np) == 0, "params");
    ct_tensor *x = ct_tensor_clone(ref_must(r, "x"));
    ct_tensor *y = ct_module_forward(net, x);
    close_t("composite forward", y, ref_must(r, "y"), 1e-4);
    CHECK(y && ct_tensor_backward(y, ref_must(r, "gy")) == 0, "backward");
    for (int i = 0; i < np; i++) {
        char key[200];
        snprintf(key, sizeof(key), "grad.%s", ps[i].name);
        ct_tensor *want = ref_get(r, key);
        CHECK(want != NULL, "torch has a gradient for %s", ps[i].name);
        if (want)
            close_f32(key, ps[i].grad, ct_tensor_f32(want), ps[i].numel, 1e-4);
    }
    /* running stats after the one training forward */
    ct_module_state_dict(net, &mine, &nmine);
    for (int i = 0; i < nmine; i++) {
        if (!strstr(mine[i].name, "running"))
            continue;
        char key[200];
        snprintf(key, sizeof(key), "after.%s", mine[i].name);
        close_t(key, mine[i].tensor, ref_must(r, key), 1e-4);
    }
    ct_tensor_release(&y);
    ct_module_train(net, false);
    bool prev = ct_autograd_set_enabled(false);
    y = ct_module_forward(net, x);
    ct_autograd_set_enabled(prev);
    close_t("composite eval forward", y, ref_must(r, "y_eval"), 1e-4);
    ct_tensor_release(&y);

    /* safetensors round trip: save, perturb, load, same eval output */
    char path[] = "/tmp/ct_engine_sd_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(ct_module_save(net, path) == 0, "save");
    ct_module *net2 = composite();
    CHECK(ct_module_load(net2, path) == 0, "load");
    ct_module_train(net2, false);
    ct_autograd_set_enabled(false);
    ct_tensor *y2 = ct_module_forward(net2, x);
    ct_autograd_set_enabled(true);
    close_t("eval forward after save/load", y2, ref_must(r, "y_eval"), 1e-6);
    ct_tensor_release(&y2);
    /* a file for another model is refused with the key named */
    ct_module *other = CT_SEQUENTIAL(ct_nn_linear_new(3, 3, true));
    rc = ct_module_load(other, path);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "0.weight: shape"),
          "load into other model: rc %d, %s", rc, ct_last_error());
    ct_module_destroy(&other);
    unlink(path);
    ct_module_destroy(&net2);
    ct_tensor_release(&x);
    ct_module_destroy(&net);
    CHECK(net == NULL, "destroy nulls");
}

static void test_init_and_params(void)
{
    ct_nn_manual_seed(3);
    ct_module *m = CT_SEQUENTIAL(ct_nn_linear_new(100, 50, true), ct_nn_relu_new(),
                                 ct_nn_conv2d_new(2, 3, 5, NULL, true), ct_nn_batchnorm2d_new(3));
    CHECK(m != NULL, "built");
    const ct_param_ref *ps;
    int np;
    CHECK(ct_module_params(m, &ps, &np) == 0 && np == 6, "6 params, got %d", np);
    const char *names[6] = {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"};
    float bounds[4] = {0.1f, 0.1f, 1.0f / sqrtf(50.0f), 1.0f / sqrtf(50.0f)};
    for (int i = 0; i < np; i++) {
        CHECK(strcmp(ps[i].name, names[i]) == 0, "param %d named %s", i, ps[i].name);
        CHECK(((uintptr_t)ps[i].value % 64) == 0 && ((uintptr_t)ps[i].grad % 64) == 0,
              "%s 64-byte aligned", ps[i].name);
        if (i < 4) {
            float lo = 1e9f, hi = -1e9f;
            for (int64_t j = 0; j < ps[i].numel; j++) {
                lo = fminf(lo, ps[i].value[j]);
                hi = fmaxf(hi, ps[i].value[j]);
            }
            CHECK(lo >= -bounds[i] && hi <= bounds[i], "%s in +-%g: [%g, %g]", ps[i].name,
                  bounds[i], lo, hi);
            if (ps[i].numel > 1000)
                CHECK(hi > 0.9f * bounds[i] && lo < -0.9f * bounds[i], "%s spans range",
                      ps[i].name);
        }
    }
    CHECK(ps[4].value[0] == 1.0f && ps[5].value[2] == 0.0f, "BN weight 1, bias 0");
    float *fv, *fg;
    int64_t fn;
    CHECK(ct_module_flat(m, &fv, &fg, &fn) == 0, "flat");
    CHECK(ps[0].value == fv && ps[1].value == fv + 5008 && ps[5].grad + ps[5].numel <= fg + fn,
          "params carved from one buffer in order");
    CHECK(ct_module_num_params(m) == 5000 + 50 + 150 + 3 + 6, "num_params %lld",
          (long long)ct_module_num_params(m));

    /* gradients land in the flat buffer; zero_grad clears it */
    int64_t xs[2] = {4, 100};
    ct_tensor *x = rand_t(2, xs);
    ct_module *lin = CT_SEQUENTIAL(ct_nn_linear_new(100, 2, true));
    ct_module_params(lin, &ps, &np);
    ct_tensor *y = ct_module_forward(lin, x), *l = ct_nn_sum(y);
    ct_tensor_backward(l, NULL);
    CHECK(ps[1].grad[0] == 4.0f && ps[1].grad[1] == 4.0f, "bias grad %g", ps[1].grad[0]);
    ct_module_zero_grad(lin);
    CHECK(ps[1].grad[0] == 0.0f, "zero_grad %g", ps[1].grad[0]);
    ct_tensor_release(&l);
    ct_tensor_release(&y);
    ct_tensor_release(&x);

    /* load errors name the key */
    int64_t bad_s[2] = {3, 100};
    ct_tensor *bad = ct_tensor_new(CT_F32, 2, bad_s);
    ct_named_tensor e[1] = {{"0.weight", bad}};
    int rc = ct_module_load_state_dict(lin, e, 1, false);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "0.weight: shape (3, 100) in the state dict, "
                                                     "(2, 100) in the model"),
          "shape mismatch: %d %s", rc, ct_last_error());
    rc = ct_module_load_state_dict(lin, e, 0, true);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "0.weight: in the model but not in the state "
                                                     "dict"),
          "missing: %d %s", rc, ct_last_error());
    ct_tensor_release(&bad);
    ct_module_destroy(&lin);
    ct_module_destroy(&m);

    /* a failed child makes the container fail (and frees the others) */
    ct_module *f = CT_SEQUENTIAL(ct_nn_relu_new(), ct_nn_linear_new(0, 3, true));
    CHECK(f == NULL && strstr(ct_last_error(), "NULL"), "NULL child refused: %s", ct_last_error());
}

/* Dropout: train mode zeroes about p of the values and scales the rest by 1/(1-p); the gradient
 * uses the same mask; eval mode is the identity. */
static void test_dropout(void)
{
    ct_nn_manual_seed(11);
    int64_t s[2] = {100, 1000};
    ct_tensor *x = ct_tensor_new(CT_F32, 2, s);
    ct_tensor_fill_f32(x, 2.0f);
    ct_tensor_set_requires_grad(x, true);
    ct_module *d = ct_nn_dropout_new(0.25f);
    ct_tensor *y = ct_module_forward(d, x);
    ct_tensor *l = ct_nn_sum(y);
    CHECK(ct_tensor_backward(l, NULL) == 0, "dropout backward");
    const float *yp = ct_tensor_f32(y), *g = ct_tensor_f32(ct_tensor_grad(x));
    int64_t zeros = 0, bad = 0;
    for (int64_t i = 0; i < 100000; i++) {
        if (yp[i] == 0.0f)
            zeros++;
        else if (fabsf(yp[i] - 2.0f / 0.75f) > 1e-6f)
            bad++;
        if (fabsf(g[i] * 2.0f - yp[i]) > 1e-6f) /* grad = mask * scale = y / x */
            bad++;
    }
    double frac = (double)zeros / 100000.0;
    CHECK(fabs(frac - 0.25) < 0.01, "dropped fraction %.4f, want 0.25", frac);
    CHECK(bad == 0, "%lld values / gradients off the mask", (long long)bad);
    ct_tensor_release(&l);
    ct_tensor_release(&y);
    ct_module_train(d, false);
    CHECK(!ct_module_is_training(d), "eval mode");
    y = ct_module_forward(d, x);
    CHECK(y && ct_tensor_f32(y)[7] == 2.0f, "eval dropout is the identity");
    ct_tensor_release(&y);
    ct_autograd_clear_tape();
    ct_module_destroy(&d);
    ct_tensor_release(&x);
}

int main(int argc, char **argv)
{
    ref_file r = ref_load(ref_dir(argc, argv), "modules.bin");
    test_vs_torch(&r);
    test_init_and_params();
    test_dropout();
    ref_free(&r);
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    printf("engine modules: all passed\n");
    return 0;
}
