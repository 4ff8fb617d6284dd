/* tests/trainer/test_gpt_replicas.c — a small GPT trained with DDP: the built-in "gpt" model
 * (2 layers, 2 heads, n_embd 32, block 32, dropout 0.1) and "text" data (60 kB of the King
 * James Bible from Debian's bible-kjv; skips without it), AdamW with decay on the matrices,
 * 2 replicas of an embedded cluster, 2 epochs. A custom train step (the built-in's work, then
 * the replica's flat weights written to <dump_dir>/w<rank> after every optimizer step) lets the
 * test see each replica's weights. Expected:
 *   - the loss falls: the validation loss before training is near ln 256 = 5.55 (the uniform
 *     guess of an initialised model), after 2 epochs under 3.5; epoch 2's training loss is
 *     below epoch 1's;
 *   - the two replicas end with the same weights, bit for bit, although their dropout masks
 *     differ (they apply the same averaged gradients), and these are the driver's checkpoint. */
#include "tt.h"

#include <fcntl.h>

static int dumping_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int rc = trainer_builtin_train_step(s, b, out);
    const char *dir = trainer_config_str(trainer_step_ctx(s), "dump_dir", "");
    int64_t n = 0;
    float *w = rc == 0 ? tt_weights(trainer_step_model(s), &n) : NULL;
    if (rc == 0 && !w)
        return CT_ENOMEM;
    if (w) {
        char path[300], tmp[310];
        snprintf(path, sizeof path, "%s/w%d", dir, trainer_ctx_rank(trainer_step_ctx(s)));
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        rc = f && fwrite(w, sizeof(float), (size_t)n, f) == (size_t)n ? 0 : CT_EIO;
        if (f && fclose(f) != 0)
            rc = CT_EIO;
        if (rc == 0 && rename(tmp, path) != 0)
            rc = CT_EIO;
        free(w);
    }
    return rc;
}

static double epoch_loss[3];

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t, (void)user;
    if (st->epoch >= 1 && st->epoch <= 2)
        epoch_loss[st->epoch] = st->train_loss;
    return 0;
}

int main(void)
{
    trainer_register_train_step("dumping", dumping_step);
    trainer_register_step_keys("dumping", "dump_dir");
    ct_serve_if_worker();
    h_init();
    if (system("command -v bible >/dev/null 2>&1") != 0) {
        printf("SKIP: no 'bible' (Debian's bible-kjv; scripts/install-deps.sh installs it)\n");
        return 77;
    }
    char dir[] = "/tmp/ct-gpt-replicas.XXXXXX", cmd[400], text[300], config[800];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(text, sizeof text, "%s/kjv.txt", dir);
    snprintf(cmd, sizeof cmd,
             "{ COLUMNS=80 bible Genesis1:1-Revelation22:21 || true; } | head -c 60000 > %s", text);
    CHECK_EQ_INT(system(cmd), 0);
    snprintf(config, sizeof config,
             "text_file=%s,val_fraction=0.1,n_layer=2,n_head=2,n_embd=32,block_size=32,"
             "dropout=0.1,lr=3e-3,weight_decay=0.1,beta2=0.95,decay_matrices_only=1,dump_dir=%s",
             text, dir);
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "gpt",
                                            .data = "text",
                                            .optimizer = "adamw",
                                            .loss = "cross_entropy",
                                            .train_step = "dumping",
                                            .config = config,
                                            .num_replicas = 2,
                                            .batch_size = 16,
                                            .epochs = 2,
                                            .seed = 5},
                            &t));
    trainer_stats before = {0}, st = {0};
    if (t) {
        CHECK_OK(trainer_validate(t, &before));
        CHECK_OK(trainer_train(t, .stats = &st, .on_epoch = on_epoch));
        CHECK_OK(trainer_validate(t, &st));
    }
    printf("val_loss %.4f -> %.4f; train_loss epoch 1 %.4f, epoch 2 %.4f\n", before.val_loss,
           st.val_loss, epoch_loss[1], epoch_loss[2]);
    CHECK(fabs(before.val_loss - log(256.0)) < 0.2);
    CHECK(st.val_loss < 3.5);
    CHECK(epoch_loss[2] > 0 && epoch_loss[2] < epoch_loss[1]);
    CHECK_EQ_INT(st.epoch, 2);

    /* each replica's weights after its last step, and the driver's checkpoint */
    int64_t n = 0, len[2] = {0, 0};
    float *driver = tt_weights(t ? trainer_get_model(t) : NULL, &n), *w[2];
    for (int r = 0; r < 2; r++) {
        char path[320];
        snprintf(path, sizeof path, "%s/w%d", dir, r);
        size_t bytes = 0;
        w[r] = (float *)tt_read_file(path, &bytes);
        len[r] = (int64_t)(bytes / sizeof(float));
    }
    CHECK(driver && w[0] && w[1]);
    CHECK_EQ_INT(len[0], n);
    CHECK_EQ_INT(len[1], n);
    if (driver && w[0] && w[1] && len[0] == n && len[1] == n) {
        int64_t differ = 0, differ_driver = 0;
        for (int64_t i = 0; i < n; i++) {
            differ += memcmp(&w[0][i], &w[1][i], sizeof(float)) != 0;
            differ_driver += memcmp(&w[0][i], &driver[i], sizeof(float)) != 0;
        }
        printf("%lld weights: %lld differ between the replicas, %lld from the checkpoint\n",
               (long long)n, (long long)differ, (long long)differ_driver);
        CHECK_EQ_INT(differ, 0);
        CHECK_EQ_INT(differ_driver, 0);
    }
    free(driver);
    free(w[0]);
    free(w[1]);
    trainer_shutdown(&t);
    ct_shutdown();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_INT(system(cmd), 0);
    if (h_failures)
        fprintf(stderr, "test_gpt_replicas: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
