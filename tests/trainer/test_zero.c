/* tests/trainer/test_zero.c — ZeRO-1 (trainer_opts.zero_stage = 1): the optimizer state sharded
 * over 2 replicas gives the run without it, bit for bit.
 *
 * A 784-63-33-10 MLP on 400 synthetic samples, 2 epochs, AdamW with weight decay on the matrices
 * only (two param groups), tiny buckets (a packed one of two gradients, single gradients of odd
 * lengths: chunks of uneven length, a chunk boundary inside a gradient), and a train step that
 * clips the gradients' norm to 0.1 (so clipping acts): once without ZeRO, once with it. Expected:
 *   - the same final weights, bit for bit (each rank's chunk of a bucket is reduced with the
 *     allreduce's arithmetic, AdamW is elementwise, and the clipping norm comes out the same);
 *   - the same clipping norms (the "grad_norm" metric) and training losses;
 *   - half the optimizer-state bytes per replica (trainer_stats.optim_state_bytes, within a
 *     few floats: chunks of odd lengths);
 *   - the checkpoint files the two runs wrote are the same bytes (the ZeRO run gathers its shards);
 *   - the ZeRO run's epoch-1 checkpoint resumed without ZeRO, and the plain run's resumed with
 *     ZeRO, both end with the plain run's weights;
 *   - with gradient accumulation (2 batches a step) too;
 *   - config key "zero=2" and ZeRO on the checking device are refused, naming why. */
#include "tt.h"

#include <dirent.h>

/* odd sizes: buckets of 104 bytes hold (10 + 330), 33, 2079, 63 and 49392 floats */
static ct_module *tz_mlp(trainer_ctx *ctx)
{
    (void)ctx;
    return CT_SEQUENTIAL(ct_nn_flatten_new(), ct_nn_linear_new(784, 63, true), ct_nn_relu_new(),
                         ct_nn_linear_new(63, 33, true), ct_nn_relu_new(),
                         ct_nn_linear_new(33, 10, true));
}

/* tt_clip_step with the norm clipped to 0.1 */
static int clip_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    return tt_clip_step(s, b, out, 0.1);
}

static trainer *make(int zero, int accumulate)
{
    trainer *t = NULL;
    if (trainer_create(&(trainer_opts){.model = "tz_mlp",
                                       .data = "synthetic",
                                       .optimizer = "adamw",
                                       .train_step = "tz_clip",
                                       .config = "n=500,lr=3e-3,weight_decay=0.1,"
                                                 "decay_matrices_only=1",
                                       .num_replicas = 2,
                                       .batch_size = 40,
                                       .bucket_mb = 0.0001, /* 104 bytes: 5 buckets */
                                       .epochs = 2,
                                       .seed = 7,
                                       .accumulate = accumulate,
                                       .zero_stage = zero},
                       &t) < 0)
        fprintf(stderr, "trainer_create (zero %d): %s\n", zero, ct_last_error());
    return t;
}

/* trains from checkpoint file ckpt to epoch 2 (ZeRO or not) and returns the weights */
static float *resume_from(int zero, const char *ckpt, int64_t *n)
{
    trainer *t = make(zero, 1);
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

int main(void)
{
    tt_register();
    trainer_register_model("tz_mlp", tz_mlp);
    trainer_register_train_step("tz_clip", clip_step);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    char d0[] = "/tmp/ct-zero0-XXXXXX", d1[] = "/tmp/ct-zero1-XXXXXX";
    CHECK(mkdtemp(d0) && mkdtemp(d1));
    int64_t n[4] = {0};
    float *w[4] = {NULL};
    trainer_stats st[2] = {{0}};
    const char *dirs[2] = {d0, d1};
    for (int z = 0; z < 2; z++) {
        trainer *t = make(z, 1);
        CHECK(t != NULL);
        if (!t)
            goto out;
        CHECK_OK(trainer_train(t, .max_retries = 0, .checkpoint_dir = dirs[z], .stats = &st[z]));
        CHECK_EQ_INT(st[z].epoch, 2);
        CHECK(st[z].weights_agree);
        w[z] = tt_weights(trainer_get_model(t), &n[z]);
        trainer_shutdown(&t);
    }
    double g0 = trainer_stats_metric(&st[0], false, "grad_norm", -1),
           g1 = trainer_stats_metric(&st[1], false, "grad_norm", -2);
    printf("without ZeRO: loss %.9g, grad_norm %.9g, optimizer state %lld bytes per replica\n",
           st[0].train_loss, g0, (long long)st[0].optim_state_bytes);
    printf("with ZeRO-1:  loss %.9g, grad_norm %.9g, optimizer state %lld bytes per replica\n",
           st[1].train_loss, g1, (long long)st[1].optim_state_bytes);
    tt_same_weights(w[0], w[1], n[0], n[1], "ZeRO-1 vs without");
    CHECK(st[0].train_loss == st[1].train_loss);
    CHECK(g0 == g1 && g0 > 0.1); /* clipping acted */
    /* AdamW: exp_avg and exp_avg_sq for each of the MLP's 51907 weights; ZeRO: half of them
     * on the larger replica, plus a float per odd bucket and moment (rank 0's longer chunks) */
    CHECK_EQ_INT(st[0].optim_state_bytes, 2 * 51907 * (int64_t)sizeof(float));
    CHECK_EQ_INT(st[1].optim_state_bytes, 2 * (51907 + 3) / 2 * (int64_t)sizeof(float));
    CHECK(st[1].optim_state_bytes >= st[0].optim_state_bytes / 2);
    CHECK(st[1].optim_state_bytes <= st[0].optim_state_bytes / 2 + 64);
    CHECK(tt_same_files(d0, d1, "between the runs without and with ZeRO") == 2);

    /* ZeRO's checkpoint resumed without it, the plain one with it */
    char c0[700], c1[700];
    if (tt_epoch1_file(d1, c1, sizeof c1))
        w[2] = resume_from(0, c1, &n[2]);
    tt_same_weights(w[0], w[2], n[0], n[2], "ZeRO-1's epoch-1 checkpoint resumed without ZeRO");
    if (tt_epoch1_file(d0, c0, sizeof c0))
        w[3] = resume_from(1, c0, &n[3]);
    tt_same_weights(w[0], w[3], n[0], n[3], "the plain epoch-1 checkpoint resumed with ZeRO-1");

    /* gradient accumulation (2 batches a step: the first only adds up locally, the second
     * reduce-scatters the sum) gives the same weights with and without ZeRO */
    int64_t na[2] = {0};
    float *wa[2] = {NULL};
    for (int z = 0; z < 2; z++) {
        trainer *t = make(z, 2);
        CHECK(t != NULL);
        if (t)
            CHECK_OK(trainer_train(t, .max_retries = 0));
        wa[z] = t ? tt_weights(trainer_get_model(t), &na[z]) : NULL;
        trainer_shutdown(&t);
    }
    tt_same_weights(wa[0], wa[1], na[0], na[1], "ZeRO-1 vs without, accumulating 2 batches");
    /* and accumulation did something: 2 batches of 40 per step are not 1 */
    CHECK(w[0] && wa[0] && na[0] == n[0] && memcmp(w[0], wa[0], (size_t)n[0] * sizeof(float)));
    free(wa[0]);
    free(wa[1]);

    /* bad input: config key "zero" out of range; ZeRO on the checking device */
    trainer *bad = NULL;
    CHECK_EQ_INT(trainer_create(&(trainer_opts){.model = "tz_mlp",
                                                .data = "synthetic",
                                                .optimizer = "adamw",
                                                .config = "n=100,zero=2"},
                                &bad),
                 CT_EINVAL);
    CHECK(strstr(ct_last_error(), "\"zero\"") != NULL);
    CHECK_EQ_INT(trainer_create(&(trainer_opts){.model = "tz_mlp",
                                                .data = "synthetic",
                                                .optimizer = "adamw",
                                                .config = "n=100",
                                                .device = "checkdev",
                                                .zero_stage = 1},
                                &bad),
                 CT_ENOSYS);
    CHECK(strstr(ct_last_error(), "ZeRO") != NULL);
    CHECK(bad == NULL);
out:
    for (int i = 0; i < 4; i++)
        free(w[i]);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", d0, d1);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s, %s\n", d0, d1);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_zero: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
