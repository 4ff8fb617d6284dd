/* examples/resnet50_model.h — the PyTorch tutorial's model-parallel ResNet-50, from ct modules:
 * torchvision's Bottleneck and the [3, 4, 6, 3] stages, split as the tutorial splits it:
 *
 *   seq1 = conv1 (7x7/2), bn1, relu, maxpool (3/2), layer1, layer2      -> one device
 *   seq2 = layer3, layer4, avgpool; fc                                  -> another
 *   x = fc(flatten(seq2(seq1(x).to(second))))
 *
 * Stage widths w, 2w, 4w, 8w (torchvision: w = 64), expansion 4, so fc takes 32w features.
 * Header-only (static functions), example code: the engine's test (tests/engine/
 * test_model_parallel.c) and examples/model_parallel.c use it. The modules are children of one
 * Sequential (root: names, placement, parameters, checkpoints); the forward is written out
 * here, as the tutorial's forward is. */
#ifndef CT_EXAMPLES_RESNET50_MODEL_H
#define CT_EXAMPLES_RESNET50_MODEL_H

#include <stdio.h>
#include <string.h>

#include "ct/nn.h"

/* Bottleneck: conv1x1-bn-relu, conv3x3 (stride)-bn-relu, conv1x1 (x4)-bn, plus the input
 * (through downsample = conv1x1 (stride)-bn where the shape changes), then relu. */
typedef struct rn50_block {
    ct_module *conv1, *bn1, *conv2, *bn2, *conv3, *bn3, *down;
} rn50_block;

typedef struct rn50 {
    ct_module *root; /* owns everything: seq1, seq2, fc */
    ct_module *seq1, *seq2, *fc;
    ct_module *stem[4]; /* conv1, bn1, relu, maxpool */
    rn50_block blocks[16];
    int nblocks, split_after; /* blocks in seq1: layer1's and layer2's */
    ct_module *avgpool;
} rn50;

/* How the activation crosses from seq1 to seq2: takes h, returns h on device `to` (NULL on
 * failure); NULL: it does not cross (one device). */
typedef ct_tensor *(*rn50_cross_fn)(ct_tensor *h, ct_device to);

static ct_module *rn50_named(ct_module *m, const char *name)
{
    return ct_module_set_name(m, name);
}

static ct_module *rn50_bottleneck(rn50_block *b, int64_t in, int64_t width, int stride)
{
    ct_conv_opts one = {0}, three = {.stride = {stride, stride}, .padding = {1, 1}};
    ct_conv_opts down = {.stride = {stride, stride}};
    b->conv1 = rn50_named(ct_nn_conv2d_new(in, width, 1, &one, false), "conv1");
    b->bn1 = rn50_named(ct_nn_batchnorm2d_new(width), "bn1");
    b->conv2 = rn50_named(ct_nn_conv2d_new(width, width, 3, &three, false), "conv2");
    b->bn2 = rn50_named(ct_nn_batchnorm2d_new(width), "bn2");
    b->conv3 = rn50_named(ct_nn_conv2d_new(width, 4 * width, 1, &one, false), "conv3");
    b->bn3 = rn50_named(ct_nn_batchnorm2d_new(4 * width), "bn3");
    b->down = NULL;
    if (stride != 1 || in != 4 * width)
        b->down = rn50_named(CT_SEQUENTIAL(ct_nn_conv2d_new(in, 4 * width, 1, &down, false),
                                           ct_nn_batchnorm2d_new(4 * width)),
                             "downsample");
    ct_module *kids[7] = {b->conv1, b->bn1, b->conv2, b->bn2, b->conv3, b->bn3, b->down};
    return ct_nn_sequential_new(b->down ? 7 : 6, kids);
}

/* a stage of n blocks; *in: its input channels, then its output's */
static ct_module *rn50_layer(rn50 *r, const char *name, int64_t *in, int64_t width, int n,
                             int stride)
{
    ct_module *kids[6];
    for (int i = 0; i < n; i++) {
        char bn[8];
        snprintf(bn, sizeof bn, "%d", i);
        kids[i] =
            rn50_named(rn50_bottleneck(&r->blocks[r->nblocks++], *in, width, i ? 1 : stride), bn);
        *in = 4 * width;
    }
    return rn50_named(ct_nn_sequential_new(n, kids), name);
}

/* Builds r on the CPU (ct_nn_manual_seed decides the weights); r->root NULL when out of memory.
 * width: torchvision's 64, or less. */
static __attribute__((unused)) void rn50_build(rn50 *r, int64_t width, int classes)
{
    memset(r, 0, sizeof *r);
    ct_conv_opts c1 = {.stride = {2, 2}, .padding = {3, 3}};
    r->stem[0] = rn50_named(ct_nn_conv2d_new(3, width, 7, &c1, false), "conv1");
    r->stem[1] = rn50_named(ct_nn_batchnorm2d_new(width), "bn1");
    r->stem[2] = rn50_named(ct_nn_relu_new(), "relu");
    r->stem[3] = rn50_named(ct_nn_maxpool2d_new(3, 2, 1), "maxpool");
    int64_t in = width;
    ct_module *l1 = rn50_layer(r, "layer1", &in, width, 3, 1);
    ct_module *l2 = rn50_layer(r, "layer2", &in, 2 * width, 4, 2);
    r->split_after = r->nblocks;
    ct_module *l3 = rn50_layer(r, "layer3", &in, 4 * width, 6, 2);
    ct_module *l4 = rn50_layer(r, "layer4", &in, 8 * width, 3, 2);
    r->avgpool = rn50_named(ct_nn_adaptive_avgpool2d_new(1, 1), "avgpool");
    r->seq1 =
        rn50_named(CT_SEQUENTIAL(r->stem[0], r->stem[1], r->stem[2], r->stem[3], l1, l2), "seq1");
    r->seq2 = rn50_named(CT_SEQUENTIAL(l3, l4, r->avgpool), "seq2");
    r->fc = rn50_named(ct_nn_linear_new(in, classes, true), "fc");
    r->root = CT_SEQUENTIAL(r->seq1, r->seq2, r->fc);
}

/* Places seq1 on first, seq2 and fc on second (the same device: the whole model there). */
static __attribute__((unused)) int rn50_place(rn50 *r, ct_device first, ct_device second)
{
    int rc = ct_module_to(r->root, first);
    if (rc == 0 && second != first && (rc = ct_module_to(r->seq2, second)) == 0)
        rc = ct_module_to(r->fc, second);
    return rc;
}

/* Takes x, returns one new reference: m(x). */
static ct_tensor *rn50_fwd(ct_module *m, ct_tensor *x)
{
    ct_tensor *y = x ? ct_module_forward(m, x) : NULL;
    ct_tensor_release(&x);
    return y;
}

static ct_tensor *rn50_relu_take(ct_tensor *x)
{
    ct_tensor *y = x ? ct_nn_relu(x) : NULL;
    ct_tensor_release(&x);
    return y;
}

static ct_tensor *rn50_block_forward(const rn50_block *b, ct_tensor *x)
{
    ct_tensor *id = b->down ? ct_module_forward(b->down, x) : ct_tensor_retain(x);
    ct_tensor *y = rn50_fwd(b->bn1, ct_module_forward(b->conv1, x));
    y = rn50_fwd(b->bn3,
                 rn50_fwd(b->conv3, rn50_fwd(b->bn2, rn50_fwd(b->conv2, rn50_relu_take(y)))));
    ct_tensor *s = y && id ? ct_nn_add(y, id) : NULL;
    ct_tensor_release(&y);
    ct_tensor_release(&id);
    return rn50_relu_take(s);
}

/* The tutorial's ct_tensor_to crossing (differentiable, ordered by events). */
static __attribute__((unused)) ct_tensor *rn50_cross_to(ct_tensor *h, ct_device to)
{
    ct_tensor *c = h ? ct_tensor_to(h, to) : NULL;
    ct_tensor_release(&h);
    return c;
}

/* Logits (N, classes) of x (N, 3, H, W) on seq1's device, on fc's; seq1's output crosses to
 * `second` through cross (NULL: not moved). New reference, or NULL (ct_last_error). */
static __attribute__((unused)) ct_tensor *rn50_forward(rn50 *r, ct_tensor *x, ct_device second,
                                                       rn50_cross_fn cross)
{
    ct_tensor *h = ct_tensor_retain(x);
    for (int i = 0; i < 4; i++)
        h = rn50_fwd(r->stem[i], h);
    for (int i = 0; i < r->nblocks; i++) {
        if (i == r->split_after && cross) /* seq1(x).to(second) */
            h = cross(h, second);
        ct_tensor *y = h ? rn50_block_forward(&r->blocks[i], h) : NULL;
        ct_tensor_release(&h);
        h = y;
    }
    h = rn50_fwd(r->avgpool, h);
    ct_tensor *f = h ? ct_nn_flatten(h) : NULL;
    ct_tensor_release(&h);
    return rn50_fwd(r->fc, f);
}

#endif
