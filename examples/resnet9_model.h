/* examples/resnet9_model.h — the ResNet9 used by the training benchmark and the engine's kernel
 * tests: conv-bn-relu blocks with two residual pairs, base width 16, on (3,32,32) inputs
 * (CIFAR-10's shape), 10 classes. Header-only (static functions), example code. With base
 * width w (16 here; bench/gpu_train uses 64, the DAWNBench model):
 *
 *   conv_bn(3,w) conv_bn(w,2w)+pool  res[conv_bn(2w,2w) conv_bn(2w,2w)]
 *   conv_bn(2w,4w)+pool conv_bn(4w,8w)+pool  res[conv_bn(8w,8w) conv_bn(8w,8w)]
 *   MaxPool2d(4) Flatten Dropout(0.2) Linear(8w,10)
 * conv_bn = Conv2d(3x3, pad 1, no bias)-BatchNorm2d-ReLU [-MaxPool2d(2)]. */
#ifndef CT_EXAMPLES_RESNET9_MODEL_H
#define CT_EXAMPLES_RESNET9_MODEL_H

#include "ct/nn.h"

static ct_module *resnet9_conv_bn(int cin, int cout, bool pool)
{
    ct_conv_opts p1 = {.padding = {1, 1}};
    if (pool)
        return CT_SEQUENTIAL(ct_nn_conv2d_new(cin, cout, 3, &p1, false),
                             ct_nn_batchnorm2d_new(cout), ct_nn_relu_new(),
                             ct_nn_maxpool2d_new(2, 0, 0));
    return CT_SEQUENTIAL(ct_nn_conv2d_new(cin, cout, 3, &p1, false), ct_nn_batchnorm2d_new(cout),
                         ct_nn_relu_new());
}

/* An owned module or NULL; widths w, 2w, 4w, 8w (the DAWNBench ResNet9 has w = 64). */
__attribute__((unused)) static ct_module *resnet9_make_model_width(int w)
{
    return CT_SEQUENTIAL(
        resnet9_conv_bn(3, w, false), resnet9_conv_bn(w, 2 * w, true),
        CT_RESIDUAL(resnet9_conv_bn(2 * w, 2 * w, false), resnet9_conv_bn(2 * w, 2 * w, false)),
        resnet9_conv_bn(2 * w, 4 * w, true), resnet9_conv_bn(4 * w, 8 * w, true),
        CT_RESIDUAL(resnet9_conv_bn(8 * w, 8 * w, false), resnet9_conv_bn(8 * w, 8 * w, false)),
        ct_nn_maxpool2d_new(4, 0, 0), ct_nn_flatten_new(), ct_nn_dropout_new(0.2f),
        ct_nn_linear_new(8 * w, 10, true));
}

/* The base-width-16 model of the CPU benchmarks and tests. */
__attribute__((unused)) static ct_module *resnet9_make_model(void)
{
    return resnet9_make_model_width(16);
}

#endif
