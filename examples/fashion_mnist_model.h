/* examples/fashion_mnist_model.h — what the Fashion-MNIST examples share: the models, the
 * pixel normalisation and the test-set accuracy. Header-only (static functions), example code.
 *
 * The CNN: Conv2d(1,32,3,pad 1)-BatchNorm2d-ReLU-MaxPool2d(2), Conv2d(32,64,3,pad 1)-
 * BatchNorm2d-ReLU-MaxPool2d(2), Flatten, Linear(3136,128)-ReLU-Dropout(0.25), Linear(128,10).
 * The MLP: 784-256-128-10. The tiny MLP ("tiny"): 64-128-64-10 on the 8x8 images of
 * fmnist_downsample8. Pixels are scaled to [0,1], then normalised with mean 0.2860 and
 * std 0.3530. */
#ifndef CT_EXAMPLES_FASHION_MNIST_MODEL_H
#define CT_EXAMPLES_FASHION_MNIST_MODEL_H

#include <string.h>

#include "ct/data.h"
#include "ct/error.h"
#include "ct/metrics.h"
#include "ct/nn.h"
#include "ct/tensor.h"

static const float fmnist_mean[] = {0.2860f}, fmnist_std[] = {0.3530f};

/* "cnn", "mlp" or "tiny"; an owned module or NULL. */
__attribute__((unused)) static ct_module *fmnist_make_model(const char *name)
{
    if (!strcmp(name, "tiny"))
        return CT_SEQUENTIAL(ct_nn_flatten_new(), ct_nn_linear_new(64, 128, true), ct_nn_relu_new(),
                             ct_nn_linear_new(128, 64, true), ct_nn_relu_new(),
                             ct_nn_linear_new(64, 10, true));
    if (!strcmp(name, "mlp"))
        return CT_SEQUENTIAL(ct_nn_flatten_new(), ct_nn_linear_new(784, 256, true),
                             ct_nn_relu_new(), ct_nn_linear_new(256, 128, true), ct_nn_relu_new(),
                             ct_nn_linear_new(128, 10, true));
    ct_conv_opts p1 = {.padding = {1, 1}};
    return CT_SEQUENTIAL(ct_nn_conv2d_new(1, 32, 3, &p1, true), ct_nn_batchnorm2d_new(32),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 0, 0),
                         ct_nn_conv2d_new(32, 64, 3, &p1, true), ct_nn_batchnorm2d_new(64),
                         ct_nn_relu_new(), ct_nn_maxpool2d_new(2, 0, 0), ct_nn_flatten_new(),
                         ct_nn_linear_new(3136, 128, true), ct_nn_relu_new(),
                         ct_nn_dropout_new(0.25f), ct_nn_linear_new(128, 10, true));
}

/* out (8,8) from a 28x28 image in (pixels in [0,1]): the central 24x24 averaged over 3x3
 * blocks. bench/ddp_throughput/ref_torch.py downsamples the same way. */
__attribute__((unused)) static void fmnist_downsample8(const float *in, float *out)
{
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            float s = 0;
            for (int u = 0; u < 3; u++)
                for (int v = 0; v < 3; v++)
                    s += in[(2 + 3 * i + u) * 28 + 2 + 3 * j + v];
            out[i * 8 + j] = s / 9.0f;
        }
}

/* Top-1 accuracy of net on test (eval mode, no grad; train mode restored after) into *acc.
 * Returns 0 or a CT_E* code. */
__attribute__((unused)) static int fmnist_test_accuracy(ct_module *net, ct_dataset *test,
                                                        double *acc)
{
    ct_loader *ld = NULL;
    int rc = ct_loader_new(test,
                           &(ct_loader_opts){.batch_size = 500,
                                             .prefetch = 2,
                                             .transform = {.mean = fmnist_mean, .std = fmnist_std}},
                           &ld);
    if (rc < 0)
        return rc;
    ct_module_train(net, false);
    bool was_enabled = ct_autograd_set_enabled(false);
    int64_t correct = 0, total = 0;
    ct_batch b;
    while ((rc = ct_loader_next(ld, &b)) > 0) {
        int64_t xs[4] = {b.n, b.shape[0], b.shape[1], b.shape[2]}, hits = 0;
        ct_tensor *x = ct_tensor_wrap(CT_F32, 4, xs, (void *)b.x);
        ct_tensor *logits = x ? ct_module_forward(net, x) : NULL;
        rc = logits ? ct_metrics_topk_correct(ct_tensor_f32(logits), b.y, b.n, 10, 1, &hits)
                    : CT_EINVAL;
        correct += hits;
        total += b.n;
        ct_tensor_release(&logits);
        ct_tensor_release(&x);
        if (rc < 0)
            break;
    }
    ct_autograd_set_enabled(was_enabled);
    ct_module_train(net, true);
    ct_loader_destroy(&ld);
    *acc = total ? (double)correct / (double)total : 0.0;
    return rc < 0 ? rc : 0;
}

#endif
