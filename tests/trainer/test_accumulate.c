/* tests/trainer/test_accumulate.c — gradient accumulation (trainer_opts.accumulate).
 * A 784-64-10 MLP (no BatchNorm) on the synthetic blobs, 2 replicas, plain SGD (no momentum),
 * 2 epochs of 160 samples per replica: batch 64 with no accumulation (batches 64, 64, 32: 3
 * optimizer steps per epoch) against batch 16 with accumulate = 4 (10 batches in groups of
 * 4, 4 and a trailing 2: also 3 steps, each with the same samples). With the accumulated
 * gradients averaged over the group, the weights must agree within 1e-5. Batch 16 without
 * accumulation must not (it takes 10 steps an epoch): the comparison can tell them apart.
 * Also: a negative accumulate is refused. */
#include "tt.h"

#define CFG "n=400,lr=0.5"

static float *train(int64_t batch, int accumulate, int64_t *n, int64_t *steps)
{
    trainer *t = NULL;
    trainer_stats st = {0};
    float *w = NULL;
    int rc = trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "sgd",
                                            .config = CFG,
                                            .num_replicas = 2,
                                            .batch_size = batch,
                                            .accumulate = accumulate,
                                            .epochs = 2,
                                            .seed = 5},
                            &t);
    if (rc < 0) {
        fprintf(stderr, "trainer_create: %s\n", ct_last_error());
        h_failures++;
        return NULL;
    }
    CHECK_OK(trainer_train(t, .stats = &st));
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
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    int64_t n64 = 0, n16 = 0, n16p = 0, s64 = 0, s16 = 0, s16p = 0;

    trainer *bad = NULL;
    CHECK_EQ_INT(trainer_create(&(trainer_opts){.model = "mlp",
                                                .data = "synthetic",
                                                .optimizer = "sgd",
                                                .config = CFG,
                                                .accumulate = -1},
                                &bad),
                 CT_EINVAL);
    CHECK(bad == NULL);

    float *w64 = train(64, 0, &n64, &s64);    /* one batch of 64 per step */
    float *w16 = train(16, 4, &n16, &s16);    /* 4 batches of 16 per step */
    float *w16p = train(16, 1, &n16p, &s16p); /* 16 per step: must differ */
    CHECK(w64 && w16 && w16p);
    CHECK_EQ_INT(s64, 6);
    CHECK_EQ_INT(s16, 6);
    CHECK_EQ_INT(s16p, 20);
    if (w64 && w16 && w16p && n64 == n16 && n64 == n16p) {
        double d = tt_max_abs_diff(w64, w16, n64), dp = tt_max_abs_diff(w64, w16p, n64);
        printf("max |w(batch 64) - w(batch 16, accumulate 4)| = %.3g; without accumulation "
               "%.3g\n",
               d, dp);
        if (!(d <= 1e-5)) {
            fprintf(stderr, "accumulated weights differ by %.3g > 1e-5\n", d);
            h_failures++;
        }
        if (!(dp > 1e-3)) {
            fprintf(stderr,
                    "batch 16 without accumulation is within %.3g: the test cannot "
                    "tell\n",
                    dp);
            h_failures++;
        }
    } else {
        h_failures++;
    }
    free(w64);
    free(w16);
    free(w16p);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_accumulate: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
