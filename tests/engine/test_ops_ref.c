/* tests/engine/test_ops_ref.c — every op's forward and backward against PyTorch reference values
 * (ref/ops.bin from make_reference.py): output and every input gradient within 1e-4 relative
 * (to the tensor's largest magnitude). Also checks batch-norm running statistics. */
#include "tests/engine/testutil.h"

#define TOL 1e-4

int ct__cpu_blocked_fmt(void); /* trainer/cpu/cpu.h (internal) */

typedef ct_tensor *(*op_fn)(ct_tensor **in);

static ref_file R;

static ct_tensor *f_linear(ct_tensor **in)
{
    return ct_nn_linear(in[0], in[1], in[2]);
}
static ct_tensor *f_linear_nobias(ct_tensor **in)
{
    return ct_nn_linear(in[0], in[1], NULL);
}
static ct_tensor *f_matmul(ct_tensor **in)
{
    return ct_nn_matmul(in[0], in[1]);
}
static ct_tensor *f_linear_shared(ct_tensor **in)
{
    ct_tensor *a = ct_nn_linear(in[0], in[2], in[3]), *b = ct_nn_linear(in[1], in[2], in[3]);
    ct_tensor *y = ct_nn_add(a, b);
    ct_tensor_release(&a);
    ct_tensor_release(&b);
    return y;
}
static ct_tensor *f_conv(ct_tensor **in)
{
    ct_conv_opts o = {.stride = {2, 2}, .padding = {1, 1}};
    return ct_nn_conv2d(in[0], in[1], in[2], &o);
}
static ct_tensor *f_conv_dil(ct_tensor **in)
{
    ct_conv_opts o = {.padding = {2, 2}, .dilation = {2, 2}};
    return ct_nn_conv2d(in[0], in[1], NULL, &o);
}
static ct_tensor *f_convt(ct_tensor **in)
{
    ct_conv_opts o = {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}};
    return ct_nn_conv_transpose2d(in[0], in[1], in[2], &o);
}
static ct_tensor *bn_rm, *bn_rv;
static ct_tensor *f_bn_train(ct_tensor **in)
{
    return ct_nn_batch_norm(in[0], in[1], in[2], bn_rm, bn_rv, true, 0.1f, 1e-5f);
}
static ct_tensor *f_bn_eval(ct_tensor **in)
{
    return ct_nn_batch_norm(in[0], in[1], in[2], bn_rm, bn_rv, false, 0.1f, 1e-5f);
}
static ct_tensor *f_maxpool(ct_tensor **in)
{
    return ct_nn_max_pool2d(in[0], 2, 2, 0);
}
static ct_tensor *f_maxpool_pad(ct_tensor **in)
{
    return ct_nn_max_pool2d(in[0], 3, 2, 1);
}
static ct_tensor *f_avgpool(ct_tensor **in)
{
    return ct_nn_avg_pool2d(in[0], 2, 2, 0, true);
}
static ct_tensor *f_avgpool_pad(ct_tensor **in)
{
    return ct_nn_avg_pool2d(in[0], 3, 2, 1, true);
}
static ct_tensor *f_avgpool_excl(ct_tensor **in)
{
    return ct_nn_avg_pool2d(in[0], 3, 2, 1, false);
}
static ct_tensor *f_apool(ct_tensor **in)
{
    return ct_nn_adaptive_avg_pool2d(in[0], 3, 3);
}
static ct_tensor *f_apool1(ct_tensor **in)
{
    return ct_nn_adaptive_avg_pool2d(in[0], 1, 1);
}
static ct_tensor *f_relu(ct_tensor **in)
{
    return ct_nn_relu(in[0]);
}
static ct_tensor *f_lrelu(ct_tensor **in)
{
    return ct_nn_leaky_relu(in[0], 0.1f);
}
static ct_tensor *f_elu(ct_tensor **in)
{
    return ct_nn_elu(in[0], 1.0f);
}
static ct_tensor *f_tanh(ct_tensor **in)
{
    return ct_nn_tanh(in[0]);
}
static ct_tensor *f_sigmoid(ct_tensor **in)
{
    return ct_nn_sigmoid(in[0]);
}
static ct_tensor *f_softmax(ct_tensor **in)
{
    return ct_nn_softmax(in[0]);
}
static ct_tensor *f_log_softmax(ct_tensor **in)
{
    return ct_nn_log_softmax(in[0]);
}
static ct_tensor *f_add(ct_tensor **in)
{
    return ct_nn_add(in[0], in[1]);
}
static ct_tensor *f_flatten(ct_tensor **in)
{
    return ct_nn_flatten(in[0]);
}
static ct_tensor *f_sum(ct_tensor **in)
{
    return ct_nn_sum(in[0]);
}
static ct_tensor *f_ce(ct_tensor **in)
{
    return ct_nn_cross_entropy(in[0], in[1], 0.0f);
}
static ct_tensor *f_ce_ls(ct_tensor **in)
{
    return ct_nn_cross_entropy(in[0], in[1], 0.1f);
}
static ct_tensor *f_nll(ct_tensor **in)
{
    return ct_nn_nll_loss(in[0], in[1]);
}
static ct_tensor *f_mse(ct_tensor **in)
{
    return ct_nn_mse_loss(in[0], in[1]);
}
static ct_tensor *f_l1(ct_tensor **in)
{
    return ct_nn_l1_loss(in[0], in[1]);
}
static ct_tensor *f_bce(ct_tensor **in)
{
    return ct_nn_bce_loss(in[0], in[1]);
}
static ct_tensor *f_bce_logits(ct_tensor **in)
{
    return ct_nn_bce_with_logits_loss(in[0], in[1]);
}

static ct_tensor *f_blk_chain(ct_tensor **in)
{
    ct_conv_opts p1 = {.padding = {1, 1}};
    ct_tensor *c1 = ct_nn_conv2d(in[0], in[1], in[2], &p1);
    ct_tensor *bn = ct_nn_batch_norm(c1, in[3], in[4], NULL, NULL, true, 0.1f, 1e-5f);
    ct_tensor *h = ct_nn_relu(bn);
    ct_tensor *c2 = ct_nn_conv2d(h, in[5], NULL, &p1);
    ct_tensor *s = ct_nn_add(h, c2);
    ct_tensor *t = ct_nn_tanh(s);
    ct_tensor *a = ct_nn_avg_pool2d(t, 1, 1, 0, true);
    ct_tensor *m = ct_nn_max_pool2d(a, 2, 0, 0);
    CHECK(m && !ct_tensor_is_plain(m) == (ct__cpu_blocked_fmt() != 0),
          "16-channel activations blocked when the CPU has a fast blocked layout");
    ct_tensor *y = ct_nn_flatten(m);
    ct_tensor *all[] = {c1, bn, h, c2, s, t, a, m};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        ct_tensor_release(&all[i]);
    return y;
}

/* Runs one case: inputs name.in0.., output name.out, upstream name.gy, grads name.g<i>. */
static void run_case(const char *name, op_fn fn)
{
    char key[160];
    ct_tensor *in[6] = {0};
    int nin = 0;
    for (; nin < 6; nin++) {
        snprintf(key, sizeof(key), "%s.in%d", name, nin);
        ct_tensor *t = ref_get(&R, key);
        if (!t)
            break;
        in[nin] = ct_tensor_clone(t);
        snprintf(key, sizeof(key), "%s.g%d", name, nin);
        if (ref_get(&R, key))
            ct_tensor_set_requires_grad(in[nin], true);
    }
    ct_tensor *y = fn(in);
    char what[200];
    snprintf(what, sizeof(what), "%s forward", name);
    snprintf(key, sizeof(key), "%s.out", name);
    close_t(what, y, ref_must(&R, key), TOL);
    if (y) {
        snprintf(key, sizeof(key), "%s.gy", name);
        int rc = ct_tensor_backward(y, ref_must(&R, key));
        CHECK(rc == 0, "%s: backward rc %d", name, rc);
    }
    for (int i = 0; i < nin; i++) {
        snprintf(key, sizeof(key), "%s.g%d", name, i);
        ct_tensor *want = ref_get(&R, key);
        if (want)
            close_t(key, ct_tensor_grad(in[i]), want, TOL);
    }
    ct_tensor_release(&y);
    for (int i = 0; i < nin; i++)
        ct_tensor_release(&in[i]);
}

int main(int argc, char **argv)
{
    R = ref_load(ref_dir(argc, argv), "ops.bin");
    run_case("linear", f_linear);
    run_case("linear_nobias", f_linear_nobias);
    run_case("matmul", f_matmul);
    run_case("linear_blocks", f_linear);
    run_case("matmul_blocks", f_matmul);
    run_case("linear_shared", f_linear_shared);
    ct_nn_set_threads(2); /* oneDNN's kernels (where it has AVX-512: on every thread count) */
    run_case("linear_big", f_linear);
    run_case("linear_rows", f_linear);
    ct_nn_set_threads(1); /* gemm.c's (dnnl.c's gemm_here) */
    run_case("linear_big", f_linear);
    run_case("linear_rows", f_linear); /* the forward in gemm_rows.c where the CPU has AVX-512 */
    ct_nn_set_threads(0);
    run_case("conv", f_conv);
    run_case("conv_dil", f_conv_dil);
    run_case("convt", f_convt);

    bn_rm = ct_tensor_clone(ref_must(&R, "bn_train.rm0"));
    bn_rv = ct_tensor_clone(ref_must(&R, "bn_train.rv0"));
    run_case("bn_train", f_bn_train);
    close_t("bn_train running_mean", bn_rm, ref_must(&R, "bn_train.rm1"), TOL);
    close_t("bn_train running_var", bn_rv, ref_must(&R, "bn_train.rv1"), TOL);
    ct_tensor_release(&bn_rm);
    ct_tensor_release(&bn_rv);
    bn_rm = ct_tensor_clone(ref_must(&R, "bn_train.rm0"));
    bn_rv = ct_tensor_clone(ref_must(&R, "bn_train.rv0"));
    run_case("bn_eval", f_bn_eval);
    ct_tensor_release(&bn_rm);
    ct_tensor_release(&bn_rv);
    int64_t six = 6;
    bn_rm = ct_tensor_new(CT_F32, 1, &six);
    bn_rv = ct_tensor_new(CT_F32, 1, &six);
    ct_tensor_fill_f32(bn_rv, 1.0f);
    run_case("bn1d", f_bn_train);
    close_t("bn1d running_mean", bn_rm, ref_must(&R, "bn1d.rm1"), TOL);
    close_t("bn1d running_var", bn_rv, ref_must(&R, "bn1d.rv1"), TOL);
    ct_tensor_release(&bn_rm);
    ct_tensor_release(&bn_rv);

    run_case("maxpool", f_maxpool);
    run_case("maxpool_pad", f_maxpool_pad);
    run_case("avgpool", f_avgpool);
    run_case("avgpool_pad", f_avgpool_pad);
    run_case("avgpool_excl", f_avgpool_excl);
    run_case("apool", f_apool);
    run_case("apool1", f_apool1);
    run_case("relu", f_relu);
    run_case("leaky_relu", f_lrelu);
    run_case("elu", f_elu);
    run_case("tanh", f_tanh);
    run_case("sigmoid", f_sigmoid);
    run_case("softmax", f_softmax);
    run_case("log_softmax", f_log_softmax);
    run_case("add", f_add);
    run_case("flatten", f_flatten);
    run_case("sum", f_sum);
    run_case("ce", f_ce);
    run_case("ce_ls", f_ce_ls);
    run_case("nll", f_nll);
    run_case("mse", f_mse);
    run_case("l1", f_l1);
    run_case("bce", f_bce);
    run_case("bce_logits", f_bce_logits);
    run_case("blk_chain", f_blk_chain);
    ref_free(&R);
    if (g_fail) {
        fprintf(stderr, "%d check(s) failed\n", g_fail);
        return 1;
    }
    printf("engine ops vs PyTorch: all passed\n");
    return 0;
}
