/* bench/train_throughput/train_bench.c — ct's side of the training-throughput benchmark.
 *
 *   train_bench CONFIG STEPS THREADS       CONFIG: cnn | mlp | resnet9 | tiny
 * The mirror of ref_torch.py: same model, batch, Adam (lr 1e-3), data held in memory as
 * pre-normalised batches (Fashion-MNIST for cnn/mlp; random data for resnet9/tiny). Times STEPS
 * training steps after 5 warm-up steps and prints `samples_per_s=<x> peak_rss_kb=<y>`.
 * Not a test: it checks only that the loss stays finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ct/data.h"
#include "ct/error.h"
#include "ct/nn.h"
#include "ct/optim.h"
#include "ct/tensor.h"
#include "examples/fashion_mnist_model.h"
#include "examples/resnet9_model.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ct_module *make_model(const char *cfg, int64_t *batch, int64_t *in_shape, int *in_nd)
{
    if (!strcmp(cfg, "cnn") || !strcmp(cfg, "mlp")) {
        *batch = 64;
        *in_nd = 3;
        in_shape[0] = 1, in_shape[1] = 28, in_shape[2] = 28;
        return fmnist_make_model(cfg); /* exactly the examples' models */
    }
    if (!strcmp(cfg, "resnet9")) {
        *batch = 32;
        *in_nd = 3;
        in_shape[0] = 3, in_shape[1] = 32, in_shape[2] = 32;
        return resnet9_make_model();
    }
    *batch = 32;
    *in_nd = 1;
    in_shape[0] = 64;
    return CT_SEQUENTIAL(ct_nn_linear_new(64, 128, true), ct_nn_relu_new(),
                         ct_nn_linear_new(128, 64, true), ct_nn_relu_new(),
                         ct_nn_linear_new(64, 10, true));
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s cnn|mlp|resnet9|tiny STEPS THREADS\n", argv[0]);
        return 2;
    }
    const char *cfg = argv[1];
    int steps = atoi(argv[2]), threads = atoi(argv[3]), status = 1;
    ct_nn_set_threads(threads);
    ct_nn_manual_seed(0);
    int64_t batch, in_shape[3];
    int in_nd;
    ct_module *net = make_model(cfg, &batch, in_shape, &in_nd);
    ct_dataset *ds = NULL;
    ct_optim *o = NULL;
    float *xs = NULL;
    int64_t *ys = NULL;
    if (!net)
        goto fail;
    int64_t per = 1;
    for (int i = 0; i < in_nd; i++)
        per *= in_shape[i];
    int64_t nb;
    if (!strcmp(cfg, "cnn") || !strcmp(cfg, "mlp")) {
        if (ct_dataset_open_mnist(NULL, true, &ds) < 0)
            goto fail;
        nb = ct_dataset_length(ds) / batch;
    } else {
        nb = 50;
    }
    xs = malloc((size_t)(nb * batch * per) * sizeof(float));
    ys = malloc((size_t)(nb * batch) * sizeof(int64_t));
    if (!xs || !ys)
        goto fail;
    /* batches: dataset order shuffled by a fixed stride permutation, pixels normalised */
    for (int64_t i = 0; i < nb * batch; i++) {
        if (ds) {
            int64_t src = (i * 7919) % ct_dataset_length(ds);
            if (ct_dataset_get(ds, src, xs + i * per, ys + i) < 0)
                goto fail;
            for (int64_t j = 0; j < per; j++)
                xs[i * per + j] = (xs[i * per + j] - 0.2860f) / 0.3530f;
        } else {
            for (int64_t j = 0; j < per; j++)
                xs[i * per + j] = 2.0f * ((float)rand() / (float)RAND_MAX) - 1.0f;
            ys[i] = rand() % 10;
        }
    }
    ct_dataset_destroy(&ds);
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(net, &ps, &np) < 0)
        goto fail;
    o = ct_optim_adam_new(ps, np, &(ct_adam_opts){.lr = 1e-3});
    if (!o)
        goto fail;
    double t0 = 0;
    float last = 0;
    for (int s = 0; s < steps + 5; s++) {
        if (s == 5)
            t0 = now_s();
        int64_t b = s % nb;
        int64_t xshape[4] = {batch, in_shape[0], in_shape[1], in_shape[2]}, yshape[1] = {batch};
        ct_tensor *x = ct_tensor_wrap(CT_F32, in_nd + 1, xshape, xs + b * batch * per);
        ct_tensor *y = ct_tensor_wrap(CT_I64, 1, yshape, ys + b * batch);
        ct_module_zero_grad(net);
        ct_tensor *logits = ct_module_forward(net, x);
        ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, y, 0.0f) : NULL;
        int rc = loss ? ct_tensor_backward(loss, NULL) : -1;
        if (rc == 0)
            rc = ct_optim_step(o);
        last = loss ? ct_tensor_item(loss) : NAN;
        ct_tensor_release(&loss);
        ct_tensor_release(&logits);
        ct_tensor_release(&x);
        ct_tensor_release(&y);
        if (rc < 0 || !isfinite(last))
            goto fail;
    }
    double dt = now_s() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("samples_per_s=%.1f peak_rss_kb=%ld loss=%.4f\n", (double)steps * batch / dt,
           ru.ru_maxrss, last);
    status = 0;
    goto out;
fail:
    fprintf(stderr, "train_bench %s: %s\n", cfg, ct_last_error());
out:
    free(xs);
    free(ys);
    ct_optim_destroy(&o);
    ct_module_destroy(&net);
    ct_dataset_destroy(&ds);
    return status;
}
