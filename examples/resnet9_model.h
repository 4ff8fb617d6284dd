/* examples/resnet9_model.h — the ResNet9 used by the training benchmark and the engine's kernel
 * tests: conv-bn-relu blocks with two residual pairs, base width 16, on (3,32,32) inputs
 * (CIFAR-10's shape), 10 classes. Header-only (a static function), example code.
 *
 *   conv_bn(3,16) conv_bn(16,32)+pool  res[conv_bn(32,32) conv_bn(32,32)]
 *   conv_bn(32,64)+pool conv_bn(64,128)+pool  res[conv_bn(128,128) conv_bn(128,128)]
 *   MaxPool2d(4) Flatten Dropout(0.2) Linear(128,10)
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

/* An owned module or NULL. */
__attribute__((unused)) static ct_module *resnet9_make_model(void)
{
    return CT_SEQUENTIAL(
        resnet9_conv_bn(3, 16, false), resnet9_conv_bn(16, 32, true),
        CT_RESIDUAL(resnet9_conv_bn(32, 32, false), resnet9_conv_bn(32, 32, false)),
        resnet9_conv_bn(32, 64, true), resnet9_conv_bn(64, 128, true),
        CT_RESIDUAL(resnet9_conv_bn(128, 128, false), resnet9_conv_bn(128, 128, false)),
        ct_nn_maxpool2d_new(4, 0, 0), ct_nn_flatten_new(), ct_nn_dropout_new(0.2f),
        ct_nn_linear_new(128, 10, true));
}

#endif
