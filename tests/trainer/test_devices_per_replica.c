/* tests/trainer/test_devices_per_replica.c — data parallel over model-parallel replicas
 * (issue 40): config key devices_per_replica = 2 on the checking device.
 *
 * The model creator "split_mlp" puts a 784-64-10 MLP (no BatchNorm, no Dropout) across the
 * replica's devices: Flatten, Linear(784, 64), ReLU on trainer_ctx_device(ctx, 0); then the
 * activation moves (ct_nn_to_device_new) to the last device, where Linear(64, 10) runs, and
 * the logits move back to the first, where the loss and the labels are. In the replicas of
 * run A that is checkdev:0 and checkdev:1, so each replica's gradients sit on two devices and
 * are bucketed and averaged on each (ct_bucketer_opts.devices); the creator fails a replica
 * that is not given 2 devices. Run A: 2 replicas x 2 checking devices, batch 32 per replica,
 * plain SGD, 2 epochs of 256 Fashion-MNIST images. Run B: 1 replica on the CPU (both
 * "devices" the CPU), batch 64, the same model, seed and data: DistributedSampler's arithmetic
 * gives run A's two replicas, per step, the two halves of run B's batch, so the weights must
 * agree to 1e-5. Run C (must differ, so the comparison can fail): run B with batch 32. (Not
 * the "synthetic" data: its samples depend on the group's size.) */
#include "tt.h"

#define CFG_A "limit=256,val_limit=16,lr=0.5,devices_per_replica=2"
#define CFG_B "limit=256,val_limit=16,lr=0.5"

static ct_module *split_mlp(trainer_ctx *ctx)
{
    int k = trainer_ctx_num_devices(ctx);
    ct_device first = trainer_ctx_device(ctx, 0), last = trainer_ctx_device(ctx, k - 1);
    if (!trainer_ctx_is_driver(ctx) && first != CT_CPU && (k != 2 || first == last)) {
        trainer_ctx_fail(ctx, "split_mlp: %d devices (want 2)", k);
        return NULL;
    }
    ct_module *a =
        CT_SEQUENTIAL(ct_nn_flatten_new(), ct_nn_linear_new(784, 64, true), ct_nn_relu_new());
    ct_module *b = CT_SEQUENTIAL(ct_nn_to_device_new(last), ct_nn_linear_new(64, 10, true),
                                 ct_nn_to_device_new(first));
    if (a && b && (ct_module_to(a, first) < 0 || ct_module_to(b, last) < 0)) {
        ct_module_destroy(&a);
        ct_module_destroy(&b);
    }
    return CT_SEQUENTIAL(a, b);
}

static float *train(const char *device, const char *cfg, int replicas, int64_t batch, int64_t *n,
                    int64_t *steps)
{
    trainer *t = NULL;
    trainer_stats st = {0};
    float *w = NULL;
    int rc = trainer_create(&(trainer_opts){.model = "split_mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "sgd",
                                            .config = cfg,
                                            .num_replicas = replicas,
                                            .batch_size = batch,
                                            .bucket_mb = 0.01, /* several buckets a device */
                                            .epochs = 2,
                                            .seed = 5,
                                            .device = device},
                            &t);
    if (rc < 0) {
        fprintf(stderr, "trainer_create (%s): %s\n", cfg, ct_last_error());
        h_failures++;
        return NULL;
    }
    rc = trainer_train(t, .max_retries = 0, .stats = &st);
    CHECK_OK(rc);
    if (rc < 0)
        fprintf(stderr, "trainer_train (%s): %s\n", cfg, ct_last_error());
    CHECK_EQ_INT(st.epoch, 2);
    CHECK(st.weights_agree);
    *steps = st.steps;
    w = tt_weights(trainer_get_model(t), n);
    trainer_shutdown(&t);
    return w;
}

int main(void)
{
    tt_register();
    trainer_register_model("split_mlp", split_mlp);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    int64_t na = 0, nb = 0, nc = 0, sa = 0, sb = 0, sc = 0;
    float *wa = train("checkdev", CFG_A, 2, 32, &na, &sa); /* 2 replicas x 2 devices */
    float *wb = train("cpu", CFG_B, 1, 64, &nb, &sb);      /* 1 replica, twice the batch */
    float *wc = train("cpu", CFG_B, 1, 32, &nc, &sc);      /* half the batch: must differ */
    CHECK(wa && wb && wc);
    CHECK_EQ_INT(sa, 8);
    CHECK_EQ_INT(sb, 8);
    CHECK_EQ_INT(sc, 16);
    if (wa && wb && wc && na == nb && na == nc) {
        double d = tt_max_abs_diff(wa, wb, na), dc = tt_max_abs_diff(wc, wb, na);
        printf("max |w(2 replicas x 2 checkdevs, batch 32) - w(1 replica, batch 64)| = %.3g; "
               "1 replica batch 32: %.3g\n",
               d, dc);
        CHECK(d <= 1e-5);
        CHECK(dc > 1e-3);
    } else {
        h_failures++;
    }
    free(wa);
    free(wb);
    free(wc);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_devices_per_replica: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
