/* bench/gpu_train/gpu_bench.c — ct's side of bench/gpu_train: training steps on a GPU.
 *
 *   gpu_bench CONFIG BATCH STEPS [WIDTH] [PRECISION]   CONFIG: resnet9 | mlp
 * PRECISION: f32 (default) or bf16 / f16: forward and loss under ct_autocast_push (matrix
 * products and convolutions in that type, f32 master weights); f16 adds a ct_grad_scaler.
 * resnet9: ResNet9 of base width WIDTH (default 64) on random 3x32x32 data; mlp: 784-256-128-10
 * on random rows. The model is built on the CPU and moved with ct_module_to; 8 batches live on
 * the GPU (the reference's best case: no loader); Adam (lr 1e-3). After 5 warm-up steps, STEPS
 * steps are timed; the loss is read back once, at the end (reading it every step would wait for
 * the GPU every step, which the reference does not do either). Prints
 *   samples_per_s=<x> peak_alloc_mb=<y> device_mallocs_after_step2=<n> loss=<l>
 * peak_alloc_mb is the caching allocator's peak of bytes handed out; device_mallocs_after_step2
 * counts cudaMalloc calls after the second step (0: the steady state reuses its blocks).
 * Exits 77 without a GPU. CT_BENCH_DEVICE=checkdev runs the same loop on the checking device
 * (to try the program without a GPU; the allocator figures are then 0). Not a test. */
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
        fprintf(stderr, "usage: %s resnet9|mlp BATCH STEPS [WIDTH] [f32|bf16|f16]\n", argv[0]);
        return 2;
    }
    const char *cfg = argv[1];
    int64_t batch = atoll(argv[2]);
    int steps = atoi(argv[3]), width = argc > 4 ? atoi(argv[4]) : 64, status = 1;
    enum { NB = 8 };
    ct_dtype prec = CT_F32;
    if (argc > 5 && ct_precision_parse(argv[5], &prec) < 0) {
        fprintf(stderr, "gpu_bench: %s\n", ct_last_error());
        return 2;
    }
    ct_grad_scaler *scaler = NULL;
    ct_nn_manual_seed(0);
    bool resnet = !strcmp(cfg, "resnet9");
    const char *devname = getenv("CT_BENCH_DEVICE");
    ct_device dev = devname && !strcmp(devname, "checkdev") ? CT_CHECKDEV : CT_CUDA;
    ct_module *net = resnet ? resnet9_make_model_width(width)
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
    int64_t xshape[4] = {batch, 3, 32, 32}, mshape[2] = {batch, 784}, yshape[1] = {batch};
    for (int b = 0; b < NB; b++) {
        ct_tensor *x = resnet ? ct_tensor_new(CT_F32, 4, xshape) : ct_tensor_new(CT_F32, 2, mshape);
        ct_tensor *y = ct_tensor_new(CT_I64, 1, yshape);
        if (!x || !y)
            goto fail;
        float *px = ct_tensor_f32(x);
        for (int64_t i = 0; i < ct_tensor_numel(x); i++)
            px[i] = 2.0f * ((float)rand() / (float)RAND_MAX) - 1.0f;
        int64_t *py = ct_tensor_data(y);
        for (int64_t i = 0; i < batch; i++)
            py[i] = rand() % 10;
        xs[b] = ct_tensor_to(x, dev);
        ys[b] = ct_tensor_to(y, dev);
        ct_tensor_release(&x);
        ct_tensor_release(&y);
        if (!xs[b] || !ys[b])
            goto fail;
    }
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(net, &ps, &np) < 0 ||
        !(o = ct_optim_adam_new(ps, np, &(ct_adam_opts){.lr = 1e-3})))
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
        if (rc < 0)
            goto fail;
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
