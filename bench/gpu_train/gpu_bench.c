/* bench/gpu_train/gpu_bench.c — ct's side of bench/gpu_train: training steps on a GPU.
 *
 *   gpu_bench CONFIG BATCH STEPS [SIZE] [PRECISION]   CONFIG: resnet9 | mlp | gpt
 * PRECISION: f32 (default) or bf16 / f16: forward and loss under ct_autocast_push (matrix
 * products and convolutions in that type, f32 master weights); f16 adds a ct_grad_scaler.
 * resnet9: ResNet9 of base width SIZE (default 64) on random 3x32x32 data, Adam (lr 1e-3);
 * mlp: 784-256-128-10 on random rows, Adam (lr 1e-3), SIZE unused; gpt: GPT-2 124M's shape
 * (ct_nn_gpt_new: 12 layers, 12 heads, n_embd 768, vocab 50257, dropout 0, the output layer tied
 * to the token embedding) on SIZE tokens a row (its block size; default 1024), random tokens and
 * targets, AdamW (lr 1e-3, weight decay 0.1 on every parameter, as bench/gpt_train). The model is
 * built on the CPU and moved with ct_module_to; 8 batches live on the GPU (the reference's best
 * case: no loader). After 5 warm-up steps, STEPS steps are timed; the loss is read back once, at
 * the end (reading it every step would wait for the GPU every step, which the reference does not
 * do either). Prints
 *   [tokens_per_s=<t>] samples_per_s=<x> peak_alloc_mb=<y> device_mallocs_after_step2=<n> loss=<l>
 * (tokens_per_s for gpt: BATCH * SIZE tokens a step). peak_alloc_mb is the caching allocator's
 * peak of bytes handed out; device_mallocs_after_step2 counts cudaMalloc calls after the second
 * step (0: the steady state reuses its blocks; run.sh fails a row where it is not 0). A step that
 * fails prints `gpu_bench CONFIG: step S: <ct_last_error()>` on stderr and exits 1: an op the CUDA
 * backend lacks is named there ("OP is not implemented on device cuda"). Exits 77 without a GPU.
 * CT_BENCH_DEVICE=checkdev runs the same loop on the checking device (to try the program without
 * a GPU, on small sizes; the allocator figures are then 0). Not a test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct/error.h"
#include "ct/nn.h"
#include "ct/optim.h"
#include "ct/tensor.h"
#include "examples/resnet9_model.h"
#include "trainer/cuda/cuda.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s resnet9|mlp|gpt BATCH STEPS [SIZE] [f32|bf16|f16]\n", argv[0]);
        return 2;
    }
    const char *cfg = argv[1];
    int64_t batch = atoll(argv[2]);
    int steps = atoi(argv[3]), status = 1;
    bool resnet = !strcmp(cfg, "resnet9"), gpt = !strcmp(cfg, "gpt");
    if (!resnet && !gpt && strcmp(cfg, "mlp")) {
        fprintf(stderr, "gpu_bench: unknown config '%s' (resnet9, mlp or gpt)\n", cfg);
        return 2;
    }
    /* SIZE: ResNet9's base width, the GPT's tokens a row */
    int64_t size = argc > 4 ? atoll(argv[4]) : gpt ? 1024 : 64;
    enum { NB = 8 };
    ct_dtype prec = CT_F32;
    if (argc > 5 && ct_precision_parse(argv[5], &prec) < 0) {
        fprintf(stderr, "gpu_bench: %s\n", ct_last_error());
        return 2;
    }
    ct_grad_scaler *scaler = NULL;
    ct_nn_manual_seed(0);
    const char *devname = getenv("CT_BENCH_DEVICE");
    ct_device dev = devname && !strcmp(devname, "checkdev") ? CT_CHECKDEV : CT_CUDA;
    /* GPT-2 124M's shape, as llm.c and nanoGPT train it (vocab not padded: GPT-2's own) */
    ct_gpt_config gc = {
        .n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = size, .vocab_size = 50257};
    ct_module *net = resnet ? resnet9_make_model_width((int)size)
                     : gpt  ? ct_nn_gpt_new(&gc)
                            : CT_SEQUENTIAL(ct_nn_linear_new(784, 256, true), ct_nn_relu_new(),
                                            ct_nn_linear_new(256, 128, true), ct_nn_relu_new(),
                                            ct_nn_linear_new(128, 10, true));
    ct_tensor *xs[NB] = {0}, *ys[NB] = {0};
    ct_optim *o = NULL;
    if (!net)
        goto fail;
    if (ct_module_to(net, dev) < 0) {
        printf("no GPU: %s\n", ct_last_error());
        ct_module_destroy(&net);
        return 77;
    }
    /* x: (B, 3, 32, 32) f32 | (B, 784) f32 | (B, T) i64 tokens; y: (B) | (B*T) i64 classes */
    int64_t xshape[4] = {batch, 3, 32, 32}, mshape[2] = {batch, 784}, tshape[2] = {batch, size};
    int64_t yshape[1] = {gpt ? batch * size : batch}, classes = gpt ? gc.vocab_size : 10;
    for (int b = 0; b < NB; b++) {
        ct_tensor *x = resnet ? ct_tensor_new(CT_F32, 4, xshape)
                       : gpt  ? ct_tensor_new(CT_I64, 2, tshape)
                              : ct_tensor_new(CT_F32, 2, mshape);
        ct_tensor *y = ct_tensor_new(CT_I64, 1, yshape);
        if (!x || !y)
            goto fail;
        if (gpt) {
            int64_t *px = ct_tensor_data(x);
            for (int64_t i = 0; i < ct_tensor_numel(x); i++)
                px[i] = rand() % classes;
        } else {
            float *px = ct_tensor_f32(x);
            for (int64_t i = 0; i < ct_tensor_numel(x); i++)
                px[i] = 2.0f * ((float)rand() / (float)RAND_MAX) - 1.0f;
        }
        int64_t *py = ct_tensor_data(y);
        for (int64_t i = 0; i < yshape[0]; i++)
            py[i] = rand() % classes;
        xs[b] = ct_tensor_to(x, dev);
        ys[b] = ct_tensor_to(y, dev);
        ct_tensor_release(&x);
        ct_tensor_release(&y);
        if (!xs[b] || !ys[b])
            goto fail;
    }
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(net, &ps, &np) < 0)
        goto fail;
    o = gpt ? ct_optim_adamw_new(ps, np, &(ct_adam_opts){.lr = 1e-3, .weight_decay = 0.1})
            : ct_optim_adam_new(ps, np, &(ct_adam_opts){.lr = 1e-3});
    if (!o)
        goto fail;
    if (prec == CT_F16 && !(scaler = ct_grad_scaler_new(NULL)))
        goto fail;
    ct_cuda_alloc_stats st;
    int64_t mallocs_at_2 = 0;
    double t0 = 0;
    float last = NAN;
    for (int s = 0; s < steps + 5; s++) {
        if (s == 5) {
            if (dev == CT_CUDA && ct__cuda_sync(NULL) < 0)
                goto fail;
            t0 = now_s();
        }
        ct_module_zero_grad(net);
        ct_autocast_push(prec);
        ct_tensor *logits = ct_module_forward(net, xs[s % NB]);
        ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, ys[s % NB], 0.0f) : NULL;
        ct_autocast_pop();
        int rc = -1;
        if (loss && scaler) /* f16: scaled backward; the step waits for the inf check */
            rc = ct_grad_scaler_backward(scaler, loss) || ct_grad_scaler_step(scaler, o, NULL) ||
                         ct_grad_scaler_update(scaler)
                     ? -1
                     : 0;
        else if (loss && (rc = ct_tensor_backward(loss, NULL)) == 0)
            rc = ct_optim_step(o);
        if (rc == 0 && s == steps + 4)
            last = ct_tensor_item(loss); /* waits for the GPU */
        ct_tensor_release(&loss);
        ct_tensor_release(&logits);
        if (rc < 0) {
            fprintf(stderr, "gpu_bench %s: step %d: %s\n", cfg, s, ct_last_error());
            status = 1;
            goto out;
        }
        if (s == 1) {
            ct__cuda_alloc_stats_get(&st);
            mallocs_at_2 = st.device_mallocs;
        }
    }
    double dt = now_s() - t0;
    ct__cuda_alloc_stats_get(&st);
    if (!isfinite(last)) {
        fprintf(stderr, "gpu_bench: the loss is %g\n", last);
        goto fail;
    }
    if (gpt)
        printf("tokens_per_s=%.1f ", (double)steps * batch * size / dt);
    printf("samples_per_s=%.1f peak_alloc_mb=%.1f device_mallocs_after_step2=%lld loss=%.4f\n",
           (double)steps * batch / dt, st.peak_allocated_bytes / 1048576.0,
           (long long)(st.device_mallocs - mallocs_at_2), last);
    status = 0;
    goto out;
fail:
    fprintf(stderr, "gpu_bench %s: %s\n", cfg, ct_last_error());
out:
    for (int b = 0; b < NB; b++) {
        ct_tensor_release(&xs[b]);
        ct_tensor_release(&ys[b]);
    }
    ct_grad_scaler_destroy(&scaler);
    ct_optim_destroy(&o);
    ct_module_destroy(&net);
    return status;
}
