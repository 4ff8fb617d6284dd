/* tests/trainer/test_augment.c — augmentation of the built-in "fashion_mnist" data (config
 * crop_pad, hflip): training batches are cropped and flipped, validation batches never.
 * Two trainers of the same seed, the 784-64-10 MLP, 2 replicas, 256 training and 500 test
 * images, one plain and one with crop_pad=4,hflip=1: before training their validation losses
 * must be bit-equal (the same weights on the same unaugmented images); after one epoch their
 * training losses must differ (the second one trained on other pixels). Also: a crop_pad out
 * of range is refused. */
#include "tt.h"

static int run(const char *config, double *val_before, double *train_loss)
{
    trainer *t = NULL;
    trainer_stats st = {0};
    int rc = trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "sgd",
                                            .config = config,
                                            .num_replicas = 2,
                                            .batch_size = 32,
                                            .epochs = 1,
                                            .seed = 7},
                            &t);
    if (rc < 0) {
        trainer_shutdown(&t);
        return rc;
    }
    if ((rc = trainer_validate(t, &st)) == 0) {
        *val_before = st.val_loss;
        CHECK_EQ_INT(st.val_samples, 500);
        rc = trainer_train(t, .stats = &st);
        *train_loss = st.train_loss;
    }
    trainer_shutdown(&t);
    return rc;
}

int main(void)
{
    tt_register();
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    double v0 = -1, v1 = -2, l0 = -1, l1 = -1;
    CHECK_OK(run("limit=256,val_limit=500,lr=0.05", &v0, &l0));
    CHECK_OK(run("limit=256,val_limit=500,lr=0.05,crop_pad=4,hflip=1", &v1, &l1));
    printf("val_loss plain %.9g augmented %.9g; train_loss plain %.6g augmented %.6g\n", v0, v1, l0,
           l1);
    CHECK(v0 == v1);
    CHECK(v0 > 0);
    CHECK(l0 != l1);
    double a, b;
    CHECK_EQ_INT(run("limit=256,val_limit=500,crop_pad=-1", &a, &b), CT_EINVAL);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_augment: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
