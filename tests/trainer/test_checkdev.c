/* tests/trainer/test_checkdev.c — training on the checking device (trainer_opts.device =
 * "checkdev"): its results are the CPU's, bit for bit.
 *
 * "same" (default): a 2-replica run of the MLP on 512 Fashion-MNIST images, 2 epochs, Adam with
 * StepLR, small buckets (2 per step), and a train step that clips the gradients' norm, on
 * the CPU and then on the checking device (model, gradients and optimizer state on the device,
 * gradients averaged in buckets over the CPU ring while backward runs): the final weights are
 * bit-identical, the losses, the clipping norms and the validations (each epoch's end) equal,
 * and the checkpoint files the two runs wrote are the same bytes. Then each run's epoch-1
 * checkpoint is resumed on the other device (the CPU's on the checking device, the checking
 * device's on the CPU) and trained to epoch 2: both end with the CPU run's weights. "kill": on the
 * checking device with recovery "restart", replica 1 is parked in epoch 2 and killed by pid
 * (SIGKILL); the group restarts from the epoch-1 checkpoint in the store and ends with the CPU
 * run's weights, one retry used. "bf16": the built-in steps with precision=bf16 on the checking
 * device (autocast's reference there: operands rounded to bf16, f32 kernels) against f32: the
 * losses differ (it was applied) by under 5%, and the replicas' weights agree. */
#include "tt.h"

#include <dirent.h>
#include <pthread.h>

/* tt_clip_step with the norm clipped to 0.5 */
static int clip_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    return tt_clip_step(s, b, out, 0.5);
}

static trainer *make(const char *device, int probe_step)
{
    char cfg[200];
    snprintf(cfg, sizeof cfg, "limit=512,val_limit=128,lr=2e-3,step_size=1,gamma=0.5,probe_step=%d",
             probe_step);
    trainer *t = NULL;
    if (trainer_create(&(trainer_opts){.model = "mlp",
                                       .data = "fashion_mnist",
                                       .optimizer = "adam",
                                       .loss = "probe",
                                       .scheduler = "steplr",
                                       .train_step = "tt_clip",
                                       .config = cfg,
                                       .num_replicas = 2,
                                       .batch_size = 64,
                                       .bucket_mb = 0.001, /* 2 buckets a step */
                                       .epochs = 2,
                                       .seed = 5,
                                       .device = device,
                                       /* kill: the restart's path on the device (live
                                        * recovery's: test_live_recovery checkdev) */
                                       .recovery = probe_step ? "restart" : NULL},
                       &t) < 0)
        fprintf(stderr, "trainer_create (%s): %s\n", device, ct_last_error());
    return t;
}

/* "bf16": the built-in steps on the checking device with precision f32 and bf16 */
static int run_precision(const char *precision, trainer_stats *st)
{
    char cfg[200];
    snprintf(cfg, sizeof cfg, "limit=512,val_limit=128,lr=2e-3,precision=%s", precision);
    trainer *t = NULL;
    int rc = trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .config = cfg,
                                            .num_replicas = 2,
                                            .batch_size = 64,
                                            .epochs = 2,
                                            .seed = 5,
                                            .device = "checkdev"},
                            &t);
    if (rc == 0)
        rc = trainer_train(t, .max_retries = 0, .validate_every_epoch = true, .stats = st);
    if (rc < 0)
        fprintf(stderr, "precision %s: %s\n", precision, ct_last_error());
    trainer_shutdown(&t);
    return rc;
}

/* trains t from checkpoint file ckpt to epoch 2 and returns the weights */
static float *resume_from(const char *device, const char *ckpt, int64_t *n)
{
    trainer *t = make(device, 0);
    CHECK(t != NULL);
    if (!t)
        return NULL;
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .resume = ckpt, .max_retries = 0, .stats = &st));
    CHECK_EQ_INT(st.epoch, 2);
    float *w = tt_weights(trainer_get_model(t), n);
    trainer_shutdown(&t);
    return w;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "same";
    tt_register();
    trainer_register_train_step("tt_clip", clip_step);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    char dcpu[] = "/tmp/ct-checkdev-cpu-XXXXXX", ddev[] = "/tmp/ct-checkdev-dev-XXXXXX";
    CHECK(mkdtemp(dcpu) && mkdtemp(ddev));
    int64_t n1 = 0, n2 = 0;
    float *w1 = NULL, *w2 = NULL;
    trainer_stats s1 = {0}, s2 = {0};

    if (!strcmp(what, "bf16")) {
        /* bf16 applied (the losses differ from f32's) and close to f32 (autocast rounds the
         * operands of the Linear layers to 8 bits of mantissa: within 5% after 2 epochs) */
        CHECK_OK(run_precision("f32", &s1));
        CHECK_OK(run_precision("bf16", &s2));
        printf("train loss f32 %.6f bf16 %.6f; val loss f32 %.6f bf16 %.6f\n", s1.train_loss,
               s2.train_loss, s1.val_loss, s2.val_loss);
        CHECK(s1.train_loss != s2.train_loss);
        CHECK(fabs(s2.train_loss - s1.train_loss) < 0.05 * s1.train_loss);
        CHECK(fabs(s2.val_loss - s1.val_loss) < 0.05 * s1.val_loss);
        CHECK(s2.weights_agree);
        CHECK_EQ_INT(s2.epoch, 2);
        goto out;
    }

    /* the CPU run */
    trainer *t = make("cpu", 0);
    CHECK(t != NULL);
    if (!t)
        goto out;
    CHECK_OK(trainer_train(t, .max_retries = 0, .checkpoint_dir = dcpu,
                           .validate_every_epoch = true, .stats = &s1));
    CHECK_EQ_INT(s1.epoch, 2);
    CHECK(s1.weights_agree);
    w1 = tt_weights(trainer_get_model(t), &n1);
    trainer_shutdown(&t);

    if (!strcmp(what, "kill")) {
        /* replica 1's 2nd step of epoch 2 (4 steps an epoch) parks it; killed there */
        t = make("checkdev", 4 + 2);
        CHECK(t != NULL);
        if (!t)
            goto out;
        ct_kv_put("tt/probe/armed", "1", 1);
        tt_killer k = {.t = t};
        pthread_t th;
        pthread_create(&th, NULL, tt_kill_probe, &k);
        CHECK_OK(trainer_train(t, .max_retries = 1, .stats = &s2));
        pthread_join(th, NULL);
        CHECK(k.killed_pid > 0);
        CHECK_EQ_INT(k.killed_pid, k.replica_pid);
        CHECK_EQ_INT(s2.retries_used, 1);
        CHECK_EQ_INT(s2.epoch, 2);
        CHECK_EQ_INT(s2.steps, s1.steps);
        CHECK(s2.weights_agree);
        CHECK(h_wait_gone(k.killed_pid, 2000));
        w2 = tt_weights(trainer_get_model(t), &n2);
        tt_same_weights(w1, w2, n1, n2, "killed replica on the checking device vs the CPU run");
        trainer_shutdown(&t);
        goto out;
    }

    /* the same run on the checking device */
    t = make("checkdev", 0);
    CHECK(t != NULL);
    if (!t)
        goto out;
    CHECK_OK(trainer_train(t, .max_retries = 0, .checkpoint_dir = ddev,
                           .validate_every_epoch = true, .stats = &s2));
    CHECK_EQ_INT(s2.epoch, 2);
    CHECK_EQ_INT(s2.steps, s1.steps);
    CHECK(s2.weights_agree);
    CHECK(s1.train_loss == s2.train_loss);
    /* validation on the device (batches uploaded, top-1 read back) */
    CHECK(s1.val_samples == 128 && s2.val_samples == 128);
    CHECK(s1.val_loss == s2.val_loss && s1.val_accuracy == s2.val_accuracy);
    double g1 = trainer_stats_metric(&s1, false, "grad_norm", -1),
           g2 = trainer_stats_metric(&s2, false, "grad_norm", -2);
    CHECK(g1 > 0 && g1 == g2);
    printf("train loss %.9g (CPU) %.9g (checkdev), mean grad norm %.9g %.9g\n", s1.train_loss,
           s2.train_loss, g1, g2);
    w2 = tt_weights(trainer_get_model(t), &n2);
    tt_same_weights(w1, w2, n1, n2, "checking device vs CPU");
    trainer_shutdown(&t);
    CHECK(tt_same_files(dcpu, ddev, "between the CPU and the checking device") >=
          2); /* epochs 1 and 2 */

    /* cross-loads: each device resumes the other's epoch-1 checkpoint */
    char p[600];
    if (tt_epoch1_file(dcpu, p, sizeof p)) {
        free(w2);
        w2 = resume_from("checkdev", p, &n2);
        tt_same_weights(w1, w2, n1, n2, "CPU checkpoint resumed on the checking device");
    } else {
        h_failures++;
    }
    if (tt_epoch1_file(ddev, p, sizeof p)) {
        free(w2);
        w2 = resume_from("cpu", p, &n2);
        tt_same_weights(w1, w2, n1, n2, "checking-device checkpoint resumed on the CPU");
    } else {
        h_failures++;
    }
out:
    free(w1);
    free(w2);
    ct_shutdown();
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dcpu, ddev);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s, %s\n", dcpu, ddev);
    if (h_failures)
        fprintf(stderr, "test_checkdev %s: %d failure(s)\n", what, h_failures);
    return h_failures ? 1 : 0;
}
