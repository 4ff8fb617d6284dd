/* tests/engine/test_train.c — 20 training steps of a small CNN (conv-bn-relu-pool x2, linear,
 * relu, linear; 14x14 inputs, batch 16) from PyTorch's initial weights on PyTorch's batches,
 * with (a) SGD lr 0.05 momentum 0.9 and (b) Adam lr 2e-3 + MultiStepLR([6,12], 0.5) stepped
 * per step. The loss of every step must be within 1e-4 relative of PyTorch's (ref/train.bin). */
#include "ct/optim.h"
#include "tests/engine/testutil.h"

static ct_module *small_cnn(void)
{
    ct_conv_opts p1 = {.padding = {1, 1}};
    return CT_SEQUENTIAL(ct_nn_conv2d_new(1, 8, 3, &p1, true), ct_nn_batchnorm2d_new(8),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 0, 0),
                         ct_nn_conv2d_new(8, 16, 3, &p1, true), ct_nn_batchnorm2d_new(16),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 0, 0), ct_nn_flatten_new(),
                         ct_nn_linear_new(144, 32, true), ct_nn_relu_new(),
                         ct_nn_linear_new(32, 10, true));
}

static void run(ref_file *r, const char *mode)
{
    ct_module *net = small_cnn();
    ct_named_tensor sd[64];
    int n = 0;
    for (int i = 0; i < r->n; i++)
        if (strncmp(r->v[i].name, "init.", 5) == 0)
            sd[n++] = (ct_named_tensor){r->v[i].name + 5, r->v[i].t};
    CHECK(ct_module_load_state_dict(net, sd, n, true) == 0, "load init weights");
    const ct_param_ref *ps;
    int np;
    ct_module_params(net, &ps, &np);
    bool sgd = strcmp(mode, "sgd") == 0;
    ct_optim *o = sgd ? ct_optim_sgd_new(ps, np, &(ct_sgd_opts){.lr = 0.05, .momentum = 0.9})
                      : ct_optim_adam_new(ps, np, &(ct_adam_opts){.lr = 2e-3});
    CHECK(o != NULL, "optimizer");
    ct_sched *s = NULL;
    if (!sgd) {
        s = ct_sched_multistep_new(
            o, &(ct_multistep_opts){.milestones = {6, 12}, .num_milestones = 2, .gamma = 0.5});
        CHECK(s != NULL, "scheduler");
    }
    ct_tensor *xs = ref_must(r, "xs"), *ys = ref_must(r, "ys");
    char key[64];
    snprintf(key, sizeof(key), "%s.losses", mode);
    const float *want = ct_tensor_f32(ref_must(r, key));
    for (int step = 0; step < 20; step++) {
        ct_tensor *xb = ct_tensor_narrow0(xs, step, 1), *yb = ct_tensor_narrow0(ys, step, 1);
        int64_t xshape[4] = {16, 1, 14, 14}, yshape[1] = {16};
        ct_tensor *x = ct_tensor_view(xb, 4, xshape), *y = ct_tensor_view(yb, 1, yshape);
        ct_module_zero_grad(net);
        ct_tensor *logits = ct_module_forward(net, x);
        ct_tensor *loss = ct_nn_cross_entropy(logits, y, 0.0f);
        CHECK(loss != NULL, "loss at step %d", step);
        if (!loss)
            break;
        float got = ct_tensor_item(loss);
        double rel = fabs(got - want[step]) / fabs(want[step]);
        CHECK(rel <= 1e-4, "%s step %d: loss %.7f, torch %.7f (rel %.2g)", mode, step, got,
              want[step], rel);
        CHECK(ct_tensor_backward(loss, NULL) == 0, "backward");
        CHECK(ct_optim_step(o) == 0, "optim step");
        if (s)
            ct_sched_step(s);
        ct_tensor_release(&loss);
        ct_tensor_release(&logits);
        ct_tensor_release(&x);
        ct_tensor_release(&y);
        ct_tensor_release(&xb);
        ct_tensor_release(&yb);
    }
    printf("%s: step 0 loss %.6f, step 19 loss %.6f (torch %.6f)\n", mode, want[0], want[19],
           want[19]);
    ct_sched_destroy(&s);
    ct_optim_destroy(&o);
    ct_module_destroy(&net);
}

int main(int argc, char **argv)
{
    ref_file r = ref_load(ref_dir(argc, argv), "train.bin");
    run(&r, "sgd");
    run(&r, "adam");
    ref_free(&r);
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    printf("engine training vs PyTorch: all passed\n");
    return 0;
}
