/* tests/engine/test_ops_fd.c — every op's backward against central finite differences.
 *
 * L = sum(op(inputs) * R) for a fixed random R; each input element is moved by +-eps (1e-3)
 * with the forward in f32 and L summed in double. Tolerance |fd - autograd| <= 1e-3 + 1e-2 |ag|:
 * f32 rounding of L (~1e-6 relative) divided by 2 eps gives ~1e-3 of noise, so wrong gradients
 * (errors of order 1) are caught. Inputs of kinked ops (relu, max pool) are kept away from the
 * kinks by more than eps. */
#include "tests/engine/testutil.h"

#define EPS 1e-3
#define ATOL 1e-3
#define RTOL 1e-2

typedef struct cfg {
    ct_conv_opts conv;
    int k, s, p;
    bool incl;
    float alpha;
    ct_tensor *rm, *rv, *target;
    bool training;
} cfg;

static ct_tensor *f_linear(ct_tensor **in, void *c)
{
    return ct_nn_linear(in[0], in[1], in[2]);
}
static ct_tensor *f_matmul(ct_tensor **in, void *c)
{
    return ct_nn_matmul(in[0], in[1]);
}
static ct_tensor *f_conv(ct_tensor **in, void *c)
{
    return ct_nn_conv2d(in[0], in[1], in[2], &((cfg *)c)->conv);
}
static ct_tensor *f_convt(ct_tensor **in, void *c)
{
    return ct_nn_conv_transpose2d(in[0], in[1], in[2], &((cfg *)c)->conv);
}
static ct_tensor *f_bn(ct_tensor **in, void *c)
{
    cfg *g = c;
    return ct_nn_batch_norm(in[0], in[1], in[2], g->rm, g->rv, g->training, 0.1f, 1e-5f);
}
static ct_tensor *f_bn_relu(ct_tensor **in, void *c)
{
    cfg *g = c;
    return ct_nn_batch_norm_relu(in[0], in[1], in[2], g->rm, g->rv, g->training, 0.1f, 1e-5f);
}
static ct_tensor *f_maxpool(ct_tensor **in, void *c)
{
    cfg *g = c;
    return ct_nn_max_pool2d(in[0], g->k, g->s, g->p);
}
static ct_tensor *f_avgpool(ct_tensor **in, void *c)
{
    cfg *g = c;
    return ct_nn_avg_pool2d(in[0], g->k, g->s, g->p, g->incl);
}
static ct_tensor *f_apool(ct_tensor **in, void *c)
{
    return ct_nn_adaptive_avg_pool2d(in[0], 3, 2);
}
static ct_tensor *f_relu(ct_tensor **in, void *c)
{
    return ct_nn_relu(in[0]);
}
static ct_tensor *f_lrelu(ct_tensor **in, void *c)
{
    return ct_nn_leaky_relu(in[0], 0.2f);
}
static ct_tensor *f_elu(ct_tensor **in, void *c)
{
    return ct_nn_elu(in[0], 1.0f);
}
static ct_tensor *f_tanh(ct_tensor **in, void *c)
{
    return ct_nn_tanh(in[0]);
}
static ct_tensor *f_sigmoid(ct_tensor **in, void *c)
{
    return ct_nn_sigmoid(in[0]);
}
static ct_tensor *f_softmax(ct_tensor **in, void *c)
{
    return ct_nn_softmax(in[0]);
}
static ct_tensor *f_log_softmax(ct_tensor **in, void *c)
{
    return ct_nn_log_softmax(in[0]);
}
static ct_tensor *f_add(ct_tensor **in, void *c)
{
    return ct_nn_add(in[0], in[1]);
}
static ct_tensor *f_sum(ct_tensor **in, void *c)
{
    return ct_nn_sum(in[0]);
}
static ct_tensor *f_flatten(ct_tensor **in, void *c)
{
    return ct_nn_flatten(in[0]);
}
/* dropout with a fixed mask: reseed before each call so every evaluation draws the same mask */
static ct_tensor *f_dropout(ct_tensor **in, void *c)
{
    ct_nn_manual_seed(5);
    return ct_nn_dropout(in[0], 0.3f, true);
}
static ct_tensor *f_ce(ct_tensor **in, void *c)
{
    return ct_nn_cross_entropy(in[0], ((cfg *)c)->target, 0.1f);
}
static ct_tensor *f_nll(ct_tensor **in, void *c)
{
    return ct_nn_nll_loss(in[0], ((cfg *)c)->target);
}
static ct_tensor *f_mse(ct_tensor **in, void *c)
{
    return ct_nn_mse_loss(in[0], ((cfg *)c)->target);
}
static ct_tensor *f_l1(ct_tensor **in, void *c)
{
    return ct_nn_l1_loss(in[0], ((cfg *)c)->target);
}
static ct_tensor *f_bce(ct_tensor **in, void *c)
{
    return ct_nn_bce_loss(in[0], ((cfg *)c)->target);
}
static ct_tensor *f_bcel(ct_tensor **in, void *c)
{
    return ct_nn_bce_with_logits_loss(in[0], ((cfg *)c)->target);
}

/* 16 channels: the blocked-layout path (conv -> bn -> relu -> +conv -> max pool -> flatten) */
static ct_tensor *f_blk(ct_tensor **in, void *c)
{
    ct_conv_opts p1 = {.padding = {1, 1}};
    ct_tensor *c1 = ct_nn_conv2d(in[0], in[1], NULL, &p1);
    ct_tensor *bn = ct_nn_batch_norm(c1, NULL, NULL, NULL, NULL, true, 0.1f, 1e-5f);
    ct_tensor *h = ct_nn_elu(bn, 1.0f);
    ct_tensor *c2 = ct_nn_conv2d(h, in[2], NULL, &p1);
    ct_tensor *s = ct_nn_add(h, c2);
    ct_tensor *m = ct_nn_avg_pool2d(s, 2, 0, 0, true);
    ct_tensor *y = ct_nn_flatten(m);
    ct_tensor *all[] = {c1, bn, h, c2, s, m};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        ct_tensor_release(&all[i]);
    return y;
}

/* Moves values away from 0 by at least 0.05 (relu, leaky relu, elu kinks, l1). */
static void away_from_zero(ct_tensor *t)
{
    float *p = ct_tensor_f32(t);
    for (int64_t i = 0; i < ct_tensor_numel(t); i++)
        p[i] = p[i] >= 0 ? p[i] + 0.05f : p[i] - 0.05f;
}

static void release_all(ct_tensor **in, int n)
{
    for (int i = 0; i < n; i++)
        ct_tensor_release(&in[i]);
}

#define S(...) ((int64_t[]){__VA_ARGS__})
#define ND(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define RAND(...) rand_t(ND(__VA_ARGS__), S(__VA_ARGS__))

int main(void)
{
    cfg c = {0};
    ct_tensor *in[4];

    in[0] = RAND(3, 4), in[1] = RAND(5, 4), in[2] = RAND(5);
    fd_check("linear", f_linear, in, 3, 7, &c, EPS, ATOL, RTOL);
    release_all(in, 3);

    in[0] = RAND(3, 4), in[1] = RAND(4, 2);
    fd_check("matmul", f_matmul, in, 2, 3, &c, EPS, ATOL, RTOL);
    release_all(in, 2);

    c.conv = (ct_conv_opts){.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}};
    in[0] = RAND(2, 2, 5, 6), in[1] = RAND(3, 2, 3, 2), in[2] = RAND(3);
    fd_check("conv2d", f_conv, in, 3, 7, &c, EPS, ATOL, RTOL);
    release_all(in, 3);

    c.conv = (ct_conv_opts){.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 0}};
    in[0] = RAND(2, 2, 3, 4), in[1] = RAND(2, 3, 3, 3), in[2] = RAND(3);
    fd_check("conv_transpose2d", f_convt, in, 3, 7, &c, EPS, ATOL, RTOL);
    release_all(in, 3);

    c.training = true;
    in[0] = RAND(3, 2, 3, 3), in[1] = RAND(2), in[2] = RAND(2);
    fd_check("batch_norm train 2d", f_bn, in, 3, 7, &c, EPS, ATOL, RTOL);
    release_all(in, 3);
    in[0] = RAND(5, 3), in[1] = RAND(3), in[2] = RAND(3);
    fd_check("batch_norm train 1d", f_bn, in, 3, 7, &c, EPS, ATOL, RTOL);
    release_all(in, 3);
    c.training = false;
    c.rm = RAND(2), c.rv = RAND(2);
    float *rv = ct_tensor_f32(c.rv);
    rv[0] = 1.5f, rv[1] = 0.7f;
    in[0] = RAND(3, 2, 3, 3), in[1] = RAND(2), in[2] = RAND(2);
    fd_check("batch_norm eval", f_bn, in, 3, 7, &c, EPS, ATOL, RTOL);
    fd_check("batch_norm_relu eval", f_bn_relu, in, 3, 7, &c, EPS, ATOL, RTOL);
    c.training = true;
    fd_check("batch_norm_relu train", f_bn_relu, in, 3, 7, &c, EPS, ATOL, RTOL);
    c.training = false;
    release_all(in, 3);
    ct_tensor_release(&c.rm);
    ct_tensor_release(&c.rv);

    /* distinct values 0.01 apart (> 2 eps) in a shuffled order: no ties in max pooling */
    in[0] = ct_tensor_new(CT_F32, 4, S(2, 2, 6, 6));
    float *x = ct_tensor_f32(in[0]);
    for (int i = 0; i < 144; i++)
        x[i] = (float)((i * 37) % 144) * 0.01f;
    c.k = 2, c.s = 2, c.p = 0;
    fd_check("max_pool2d k2", f_maxpool, in, 1, 1, &c, EPS, ATOL, RTOL);
    c.k = 3, c.s = 2, c.p = 1;
    fd_check("max_pool2d k3 p1", f_maxpool, in, 1, 1, &c, EPS, ATOL, RTOL);
    c.incl = true;
    fd_check("avg_pool2d incl", f_avgpool, in, 1, 1, &c, EPS, ATOL, RTOL);
    c.incl = false;
    fd_check("avg_pool2d excl", f_avgpool, in, 1, 1, &c, EPS, ATOL, RTOL);
    release_all(in, 1);
    in[0] = RAND(2, 2, 7, 5);
    fd_check("adaptive_avg_pool2d", f_apool, in, 1, 1, &c, EPS, ATOL, RTOL);
    release_all(in, 1);

    in[0] = RAND(3, 7);
    away_from_zero(in[0]);
    fd_check("relu", f_relu, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("leaky_relu", f_lrelu, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("elu", f_elu, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("tanh", f_tanh, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("sigmoid", f_sigmoid, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("softmax", f_softmax, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("log_softmax", f_log_softmax, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("sum", f_sum, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("dropout", f_dropout, in, 1, 1, &c, EPS, ATOL, RTOL);
    in[1] = RAND(3, 7);
    fd_check("add", f_add, in, 2, 3, &c, EPS, ATOL, RTOL);
    release_all(in, 2);
    in[0] = RAND(2, 3, 2, 2);
    fd_check("flatten", f_flatten, in, 1, 1, &c, EPS, ATOL, RTOL);
    release_all(in, 1);

    in[0] = RAND(2, 2, 4, 4), in[1] = RAND(16, 2, 3, 3), in[2] = RAND(16, 16, 3, 3);
    /* 512 outputs through batch norm: f32 rounding of L is larger, so a larger step */
    fd_check("blocked chain (16 channels)", f_blk, in, 3, 7, &c, 1e-2, 3e-3, RTOL);
    release_all(in, 3);

    /* losses: targets */
    c.target = ct_tensor_new(CT_I64, 1, S(4));
    int64_t *tg = ct_tensor_data(c.target);
    tg[0] = 2, tg[1] = 0, tg[2] = 4, tg[3] = 1;
    in[0] = RAND(4, 5);
    fd_check("cross_entropy ls 0.1", f_ce, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("nll_loss", f_nll, in, 1, 1, &c, EPS, ATOL, RTOL);
    ct_tensor_release(&c.target);
    c.target = RAND(4, 5);
    fd_check("mse_loss", f_mse, in, 1, 1, &c, EPS, ATOL, RTOL);
    fd_check("bce_with_logits", f_bcel, in, 1, 1, &c, EPS, ATOL, RTOL);
    /* l1: keep input - target away from 0 */
    float *ip = ct_tensor_f32(in[0]), *tp = ct_tensor_f32(c.target);
    for (int i = 0; i < 20; i++)
        ip[i] = tp[i] + (i % 2 ? 0.3f : -0.2f) * (1 + fabsf(ip[i]));
    fd_check("l1_loss", f_l1, in, 1, 1, &c, EPS, ATOL, RTOL);
    for (int i = 0; i < 20; i++) {
        ip[i] = 0.1f + 0.8f * (0.5f + 0.5f * fd_rand());
        tp[i] = 0.5f + 0.5f * fd_rand();
    }
    fd_check("bce", f_bce, in, 1, 1, &c, EPS, ATOL, RTOL);
    release_all(in, 1);
    ct_tensor_release(&c.target);

    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    printf("engine ops vs finite differences: all passed\n");
    return 0;
}
