/* tests/embed/cluster_app.c — a training program built outside ct's build, against the installed
 * headers and libct.so found through pkg-config alone, and run against a cluster of ct-head and
 * ct-nodes started by hand (test_cluster.sh): ct_init(NULL) attaches through $CT_ADDRESS and
 * $CT_SECRET_FILE. It trains a 784-32-10 MLP on synthetic blobs (class c: features k with
 * k % 10 == c raised) with 2 replicas for 2 epochs, and prints one line:
 *   "cluster ok epochs=E retries=R agree=A val_accuracy=V"        exit 0
 *   "cluster failed rc=<name> retries=R: <message>"               exit 3
 * (1 with the reason on stderr when ct_init or trainer_create fails). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "ct/ct.h"
#include "ct/trainer.h"

static ct_module *mlp(trainer_ctx *ctx)
{
    (void)ctx;
    return CT_SEQUENTIAL(ct_nn_flatten_new(), ct_nn_linear_new(784, 32, true), ct_nn_relu_new(),
                         ct_nn_linear_new(32, 10, true));
}

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

/* n samples (config "n"), the last fifth for validation */
static int blobs(trainer_ctx *ctx, trainer_data *d)
{
    int64_t n = trainer_config_int(ctx, "n", 600), f = 784;
    float *x = malloc(sizeof(float) * (size_t)(n * f));
    int64_t *y = malloc(sizeof(int64_t) * (size_t)n);
    uint64_t s = 7;
    int rc = x && y ? 0 : CT_ENOMEM;
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        y[i] = (int64_t)(rng(&s) % 10);
        for (int64_t k = 0; k < f; k++)
            x[i * f + k] =
                (float)((rng(&s) % 1000) / 1000.0 - 0.5) + (k % 10 == y[i] ? 1.0f : 0.0f);
    }
    int64_t shape[1] = {f}, nv = n / 5;
    if (rc == 0)
        rc = ct_dataset_from_f32(x, y, n, 1, shape, &d->keep[0]);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], 0, n - nv, &d->train);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], n - nv, nv, &d->val);
    free(x);
    free(y);
    return rc;
}

int main(void)
{
    trainer_register_model("app_mlp", mlp);
    trainer_register_data("app_blobs", blobs);
    if (ct_init(NULL)) {
        fprintf(stderr, "ct_init: %s\n", ct_last_error());
        return 1;
    }
    trainer *t = NULL;
    if (trainer_create(&(trainer_opts){.model = "app_mlp",
                                       .data = "app_blobs",
                                       .optimizer = "sgd",
                                       .config = "n=600,lr=0.1",
                                       .num_replicas = 2,
                                       .batch_size = 32,
                                       .epochs = 2,
                                       .seed = 3},
                       &t) < 0) {
        fprintf(stderr, "trainer_create: %s\n", ct_last_error());
        ct_shutdown();
        return 1;
    }
    trainer_stats st = {0};
    int rc = trainer_train(t, .max_retries = 2, .validate_every_epoch = true,
                           .progress = TRAINER_PROGRESS_OFF, .stats = &st);
    trainer_get_stats(t, &st);
    if (rc < 0)
        printf("cluster failed rc=%s retries=%d: %s\n", ct_strerror(rc), st.retries_used,
               ct_last_error());
    else
        printf("cluster ok epochs=%lld retries=%d agree=%d val_accuracy=%.3f\n",
               (long long)st.epoch, st.retries_used, (int)st.weights_agree, st.val_accuracy);
    fflush(stdout);
    trainer_shutdown(&t);
    ct_shutdown();
    return rc < 0 ? 3 : 0;
}
