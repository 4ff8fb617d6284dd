/* tests/engine/test_no_ref_kernels.c — no oneDNN reference kernel runs when the CNN of
 * examples/fashion_mnist_model.h (batch 64, 1x28x28) or ResNet9 (batch 32, 3x32x32) trains:
 * two training steps (forward, cross-entropy, backward, Adam) and one eval forward each, then
 * every cached primitive's implementation name (impl_info_str) is read and none may be a
 * reference one ("ref:any", "bnorm_ref:any", ...). ctest runs it natively and under
 * ONEDNN_MAX_CPU_ISA=AVX2, where an AVX-512 host behaves like an AVX2-only one; there the test
 * also checks that oneDNN did cap its ISA. Not here: numerics (test_ops_ref, test_train). */
#include <oneapi/dnnl/dnnl.h>

#include "ct/optim.h"
#include "examples/fashion_mnist_model.h"
#include "examples/resnet9_model.h"
#include "tests/engine/testutil.h"
#include "trainer/cpu/cpu.h"

static void train_two_steps(const char *name, ct_module *net, int64_t batch, int64_t c, int64_t hw)
{
    CHECK(net != NULL, "%s: model", name);
    if (!net)
        return;
    const ct_param_ref *ps;
    int np;
    CHECK(ct_module_params(net, &ps, &np) == 0, "%s: params", name);
    ct_optim *o = ct_optim_adam_new(ps, np, &(ct_adam_opts){.lr = 1e-3});
    int64_t xshape[4] = {batch, c, hw, hw}, yshape[1] = {batch};
    ct_tensor *x = ct_tensor_new(CT_F32, 4, xshape), *y = ct_tensor_new(CT_I64, 1, yshape);
    float *xv = ct_tensor_f32(x);
    int64_t *yv = ct_tensor_data(y);
    for (int64_t i = 0; i < batch * c * hw * hw; i++)
        xv[i] = (float)((i * 7919) % 255) / 255.0f - 0.5f;
    for (int64_t i = 0; i < batch; i++)
        yv[i] = i % 10;
    for (int step = 0; step < 2; step++) {
        ct_module_zero_grad(net);
        ct_tensor *logits = ct_module_forward(net, x);
        ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, y, 0.0f) : NULL;
        CHECK(loss && isfinite(ct_tensor_item(loss)), "%s: step %d loss", name, step);
        CHECK(loss && ct_tensor_backward(loss, NULL) == 0, "%s: step %d backward", name, step);
        CHECK(o && ct_optim_step(o) == 0, "%s: step %d optimizer", name, step);
        ct_tensor_release(&loss);
        ct_tensor_release(&logits);
    }
    ct_module_train(net, false); /* the validation step */
    bool was = ct_autograd_set_enabled(false);
    ct_tensor *logits = ct_module_forward(net, x);
    CHECK(logits != NULL, "%s: eval forward", name);
    ct_tensor_release(&logits);
    ct_autograd_set_enabled(was);
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    ct_optim_destroy(&o);
    ct_module_destroy(&net);
}

typedef struct tally {
    int total, ref;
} tally;

static void check_impl(const char *op, const char *impl, void *arg)
{
    tally *t = arg;
    t->total++;
    if (ct__cpu_impl_is_ref(impl)) {
        t->ref++;
        fprintf(stderr, "FAIL: %s runs the reference kernel %s\n", op, impl);
    }
}

int main(void)
{
    CHECK(ct__cpu_impl_is_ref("ref:any") && ct__cpu_impl_is_ref("bnorm_ref:any") &&
              ct__cpu_impl_is_ref("gemm:ref") && !ct__cpu_impl_is_ref("jit:avx2") &&
              !ct__cpu_impl_is_ref("x64:gemm:jit") && !ct__cpu_impl_is_ref("bnorm_jit:avx2"),
          "reference names recognised");
    ct_nn_set_threads(2);
    ct_nn_manual_seed(0);
    train_two_steps("cnn", fmnist_make_model("cnn"), 64, 1, 28);
    train_two_steps("resnet9", resnet9_make_model(), 32, 3, 32);

    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (cap && strcasecmp(cap, "AVX2") == 0)
        CHECK(isa == dnnl_cpu_isa_avx2, "ONEDNN_MAX_CPU_ISA=AVX2 but oneDNN runs ISA %#x",
              (unsigned)isa);
    tally t = {0};
    ct__cpu_each_impl(check_impl, &t);
    CHECK(t.total > 20, "only %d primitives seen", t.total);
    CHECK(t.ref == 0, "%d of %d primitives are reference kernels", t.ref, t.total);
    printf("isa=%#x activation layout=%s primitives=%d reference=%d\n", (unsigned)isa,
           ct__cpu_blocked_fmt() == CT__FMT_BLK16  ? "nChw16c"
           : ct__cpu_blocked_fmt() == CT__FMT_BLK8 ? "nChw8c"
                                                   : "nchw",
           t.total, t.ref);
    return g_fail ? 1 : 0;
}
