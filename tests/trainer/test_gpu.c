/* tests/trainer/test_gpu.c — trainer_train with use_gpu on a real GPU (scripts/gpu-check.sh
 * runs it on a lent machine; exits 77 where no CUDA device can be used).
 *
 * An embedded cluster with 1 GPU; one replica (it asks the head for the GPU) trains on data it
 * generates: the small CNN (BatchNorm, Dropout) on 2048 28x28 images, 2 epochs, Adam, with a
 * train step that clips the gradients' norm (the device's norm kernel), a checkpoint after each
 * epoch; then ResNet9 (width 16) on 512 CIFAR-shaped 3x32x32 images, 1 epoch, SGD. Each must
 * succeed, its loss must be finite and fall (the CNN's second epoch below its first), the weights
 * the driver loads from the GPU's checkpoint must be finite, and the CNN's losses must be close
 * to the same run's on the CPU (1e-2 relative: cuDNN and cuBLAS sum in another order). Then the
 * CNN with the built-in step in f16 (the trainer's loss scaler) and in bf16: finite, falling,
 * within 10% of the f32 run's losses. */
#include "tt.h"

#include "examples/resnet9_model.h"

#include <sys/wait.h>

/* n images of c x hw x hw: class k lights up the k-th band of rows, plus noise */
static int gen_images(trainer_ctx *ctx, trainer_data *d)
{
    int64_t n = trainer_config_int(ctx, "n", 2048), c = trainer_config_int(ctx, "c", 1),
            hw = trainer_config_int(ctx, "hw", 28), f = c * hw * hw;
    float *x = malloc(sizeof(float) * (size_t)(n * f));
    int64_t *y = malloc(sizeof(int64_t) * (size_t)n);
    uint64_t s = 7;
    int rc = x && y ? 0 : CT_ENOMEM;
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        y[i] = (int64_t)(tt_rng(&s) % 10);
        for (int64_t k = 0; k < f; k++) {
            int64_t row = (k / hw) % hw;
            x[i * f + k] =
                (float)((tt_rng(&s) % 1000) / 1000.0 - 0.5) + (row * 10 / hw == y[i] ? 1.5f : 0.0f);
        }
    }
    int64_t shape[3] = {c, hw, hw}, nv = n / 8;
    if (rc == 0)
        rc = ct_dataset_from_f32(x, y, n, 3, shape, &d->keep[0]);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], 0, n - nv, &d->train);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], n - nv, nv, &d->val);
    free(x);
    free(y);
    return rc;
}

static ct_module *resnet9(trainer_ctx *ctx)
{
    (void)ctx;
    return resnet9_make_model_width(16);
}

/* tt_clip_step with the norm clipped to 5 */
static int clip_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    return tt_clip_step(s, b, out, 5.0);
}

static bool all_finite(ct_module *m)
{
    int64_t n = 0;
    float *w = tt_weights(m, &n);
    bool ok = w && n > 0;
    for (int64_t i = 0; ok && i < n; i++)
        ok = isfinite(w[i]);
    free(w);
    return ok;
}

/* the losses of epochs 1 and 2 (on_epoch) */
static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    double *l = user;
    if (st->epoch >= 1 && st->epoch <= 2)
        l[st->epoch - 1] = st->train_loss;
    return 0;
}

/* trains and returns 0 with the first two epochs' losses (l[1] NaN with 1 epoch) */
static int train(const char *model, bool gpu, const char *cfg, const char *opt, int64_t epochs,
                 int64_t batch, const char *step, double l[2], bool *finite)
{
    trainer *t = NULL;
    int rc = trainer_create(&(trainer_opts){.model = model,
                                            .data = "images",
                                            .optimizer = opt,
                                            .config = cfg,
                                            .num_replicas = 1,
                                            .use_gpu = gpu,
                                            .batch_size = batch,
                                            .epochs = epochs,
                                            .train_step = step,
                                            .seed = 3},
                            &t);
    if (rc < 0) {
        fprintf(stderr, "trainer_create (%s, %s): %s\n", model, gpu ? "GPU" : "CPU",
                ct_last_error());
        return rc;
    }
    l[0] = l[1] = NAN;
    trainer_stats st = {0};
    rc = trainer_train(t, .max_retries = 0, .stats = &st, .on_epoch = on_epoch, .user = l);
    if (rc < 0)
        fprintf(stderr, "trainer_train (%s, %s): %s\n", model, gpu ? "GPU" : "CPU",
                ct_last_error());
    else
        printf("%s on the %s: %.1f samples/s, losses %.6g %.6g\n", model, gpu ? "GPU" : "CPU",
               st.samples_per_s, l[0], l[1]);
    *finite = all_finite(trainer_get_model(t));
    trainer_shutdown(&t);
    return rc;
}

int main(void)
{
    tt_register();
    trainer_register_model("resnet9", resnet9);
    trainer_register_data("images", gen_images);
    trainer_register_train_step("tt_clip", clip_step);
    ct_serve_if_worker();
    /* no usable CUDA device: skip (probed in a child: this process forks the embedded cluster
     * and must not have initialised CUDA) */
    pid_t probe = fork();
    if (probe == 0) {
        int64_t one = 1;
        ct_tensor *h = ct_tensor_new(CT_F32, 1, &one), *d = h ? ct_tensor_to(h, CT_CUDA) : NULL;
        if (!d)
            fprintf(stderr, "test_gpu: no CUDA device: %s\n", ct_last_error());
        _exit(d ? 0 : 77);
    }
    int ws = 0;
    if (probe < 0 || waitpid(probe, &ws, 0) != probe || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return 77;
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2, .gpus = 1}));
    double g[2], c[2], r[2];
    bool gf = false, cf = false, rf = false;
    const char *cnn_cfg = "n=2048,c=1,hw=28,lr=1e-3";
    CHECK_OK(train("cnn", true, cnn_cfg, "adam", 2, 64, "tt_clip", g, &gf));
    CHECK(isfinite(g[0]) && isfinite(g[1]) && g[1] < g[0]);
    CHECK(gf);
    CHECK_OK(train("cnn", false, cnn_cfg, "adam", 2, 64, "tt_clip", c, &cf));
    CHECK(fabs(g[0] - c[0]) <= 1e-2 * fabs(c[0]) && fabs(g[1] - c[1]) <= 1e-2 * fabs(c[1]));
    CHECK_OK(train("resnet9", true, "n=512,c=3,hw=32,lr=0.05", "sgd", 1, 128, NULL, r, &rf));
    CHECK(isfinite(r[0]) && rf);
    /* the built-in step in f16 (the trainer's loss scaler) and in bf16 on the GPU: finite,
     * falling, and near the f32 run's losses */
    const char *lowp[2] = {"n=2048,c=1,hw=28,lr=1e-3,precision=f16",
                           "n=2048,c=1,hw=28,lr=1e-3,precision=bf16"};
    for (int k = 0; k < 2; k++) {
        double lp[2];
        bool lf = false;
        CHECK_OK(train("cnn", true, lowp[k], "adam", 2, 64, NULL, lp, &lf));
        CHECK(isfinite(lp[0]) && isfinite(lp[1]) && lp[1] < lp[0] && lf);
        CHECK(fabs(lp[0] - g[0]) <= 0.1 * fabs(g[0]) && fabs(lp[1] - g[1]) <= 0.1 * fabs(g[1]));
    }
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_gpu: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
