/* tests/trainer/test_early_stop.c — early stopping, the best checkpoint and what a checkpoint
 * directory keeps (issue 39, items 6, 7, 9), on 2 replicas of the MLP on "synthetic" data
 * (320 training samples, batches of 20 per replica: 8 optimizer steps an epoch).
 *
 * The validate step reports a loss of |step - 6| + 1 (step: optimizer steps done), so the best
 * validation is step 6's whatever the weights; the train step writes, in each replica, the
 * optimizer steps it has done to a file of its rank.
 *   1. validation every 2 steps, on_validate stopping at step 14 (mid-epoch 1), restore_best,
 *      a checkpoint directory with the default retention: on_validate saw steps 2, 4, ..., 14
 *      and no more; both replicas stopped at step 14; the directory keeps the newest 3
 *      (steps 10, 12, 14) plus the best (step 6), its index names 14 the latest and 6 the best;
 *      the driver's model equals the step-6 file's weights (and not step 14's);
 *   2. a new trainer resumes from that directory: the run log's line names the checkpoint of
 *      step 14 and the step; it trains to step 16 (both replicas); the directory then keeps
 *      steps 12, 14, 16 and still 6;
 *   3. keep-all (TRAINER_KEEP_ALL) keeps every checkpoint; checkpoint_num_best < 0 keeps no
 *      best (only the newest 3); restore_best without any score fails at once with CT_EINVAL;
 *   4. token targets (the built-in "text" data and "gpt"): the validation record in
 *      metrics.jsonl carries val_perplexity = exp(val_loss) and no accuracy, and so do the
 *      stats. */
#include "tt.h"

#include <fcntl.h>
#include <sys/stat.h>

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (tol))) {                                                           \
            fprintf(stderr, "%s:%d: %s = %.17g, expected %.17g\n", __FILE__, __LINE__, #a, a_,     \
                    b_);                                                                           \
            h_failures++;                                                                          \
        }                                                                                          \
    } while (0)

/* every replica: the steps it has done, into <trace_dir>/rank<r> (overwritten each step) */
static int trace_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int rc = trainer_builtin_train_step(s, b, out);
    trainer_ctx *ctx = trainer_step_ctx(s);
    const char *dir = trainer_config_str(ctx, "trace_dir", "");
    if (rc == 0 && dir[0] && trainer_step_sync(s)) {
        char path[600], buf[32];
        snprintf(path, sizeof path, "%s/rank%d", dir, trainer_ctx_rank(ctx));
        int n = snprintf(buf, sizeof buf, "%lld\n", (long long)trainer_step_count(s) + 1);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, buf, (size_t)n) != n)
            rc = CT_EIO;
        if (fd >= 0)
            close(fd);
    }
    return rc;
}

/* a validation loss of |step - 6| + 1 per sample: the best is step 6's */
static int shaped_val(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int64_t step = trainer_step_count(s);
    out->loss_sum = (double)(llabs(step - 6) + 1) * (double)b->n;
    out->samples = b->n;
    return 0;
}

typedef struct seen {
    int n;
    int64_t steps[32];
    double loss[32];
    int64_t stop_at;
} seen;

static int on_val(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    seen *s = user;
    if (s->n < 32) {
        s->steps[s->n] = st->val_step;
        s->loss[s->n++] = st->val_loss;
    }
    return s->stop_at && st->val_step == s->stop_at ? CT_ECANCELED : 0;
}

static long long rank_steps(const char *dir, int rank)
{
    char path[600];
    snprintf(path, sizeof path, "%s/rank%d", dir, rank);
    char *txt = tt_read_file(path, NULL);
    long long v = txt ? atoll(txt) : -1;
    free(txt);
    return v;
}

static trainer *make(const char *trace, int64_t epochs)
{
    char cfg[700];
    snprintf(cfg, sizeof cfg, "n=400,trace_dir=%s", trace);
    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "sgd",
                                            .config = cfg,
                                            .train_step = "trace",
                                            .validate_step = "shaped",
                                            .num_replicas = 2,
                                            .batch_size = 20,
                                            .epochs = epochs,
                                            .seed = 5},
                            &t));
    return t;
}

/* The weights of checkpoint file path, through a trainer that restores it. */
static float *file_weights(const char *trace, const char *path, int64_t *n)
{
    trainer *t = make(trace, 4);
    float *w = NULL;
    if (t && trainer_restore(t, path) == 0)
        w = tt_weights(trainer_get_model(t), n);
    CHECK(w != NULL);
    trainer_shutdown(&t);
    return w;
}

/* Runs trainer_train with stderr in err_path. */
static int train_logged(trainer *t, const trainer_train_opts *o, const char *err_path)
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO), fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    close(fd);
    int rc = trainer_train_with(t, o);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    return rc;
}

static void perplexity(const char *base)
{
    char text[600], logdir[600], cfg[900], path[700];
    snprintf(text, sizeof text, "%s/text.txt", base);
    snprintf(logdir, sizeof logdir, "%s/gpt-log", base);
    FILE *f = fopen(text, "w");
    uint64_t s = 7;
    for (int i = 0; f && i < 6000; i++) /* words of a small alphabet: something to learn */
        fputc(i % 7 == 6 ? ' ' : "abcdefgh"[tt_rng(&s) % 8], f);
    CHECK(f && fclose(f) == 0);
    snprintf(cfg, sizeof cfg,
             "text_file=%s,n_layer=1,n_head=2,n_embd=16,block_size=16,vocab_size=256", text);
    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "gpt",
                                            .data = "text",
                                            .optimizer = "adamw",
                                            .config = cfg,
                                            .num_replicas = 1,
                                            .batch_size = 16,
                                            .epochs = 1},
                            &t));
    if (!t)
        return;
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .validate_every_epoch = true, .log_dir = logdir,
                           .progress = TRAINER_PROGRESS_OFF, .stats = &st));
    trainer_shutdown(&t);
    printf("text: val_loss %.6f val_perplexity %.6f val_accuracy %g\n", st.val_loss,
           st.val_perplexity, st.val_accuracy);
    CHECK(st.val_samples > 0 && st.val_loss > 0);
    CHECK_NEAR(st.val_perplexity, exp(st.val_loss), 1e-9 * exp(st.val_loss));
    snprintf(path, sizeof path, "%s/metrics.jsonl", logdir);
    char *log = tt_read_file(path, NULL), *val = log ? strstr(log, "\"type\":\"val\"") : NULL;
    CHECK(val != NULL);
    if (!val) {
        free(log);
        return;
    }
    char *end = strchr(val, '\n');
    if (end)
        *end = 0;
    printf("val record: %s\n", val);
    const char *pl = strstr(val, "\"val_perplexity\":"), *vl = strstr(val, "\"val_loss\":");
    CHECK(pl && vl);
    if (pl && vl) {
        double p = atof(pl + strlen("\"val_perplexity\":")), l = atof(vl + strlen("\"val_loss\":"));
        CHECK_NEAR(p, exp(l), 1e-6 * exp(l));
        CHECK_NEAR(p, st.val_perplexity, 1e-6 * p);
    }
    CHECK(strstr(val, "val_accuracy") == NULL); /* tokens: no accuracy of 0 */
    free(log);
}

int main(void)
{
    tt_register();
    trainer_register_train_step("trace", trace_step);
    trainer_register_step_keys("trace", "trace_dir");
    trainer_register_validate_step("shaped", shaped_val);
    ct_serve_if_worker();
    h_init();
    char base[] = "/tmp/ct-early-stop.XXXXXX", dir[600], trace[600], got[2048], path[800];
    CHECK(mkdtemp(base) != NULL);
    snprintf(dir, sizeof dir, "%s/ckpt", base);
    snprintf(trace, sizeof trace, "%s/trace", base);
    CHECK(mkdir(trace, 0755) == 0);
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));

    /* 1. stop at step 14, keep 3 + best, restore the best (step 6) */
    trainer *t = make(trace, 4);
    seen sv = {.stop_at = 14};
    trainer_stats st = {0};
    int rc = trainer_train(t, .validate_every_steps = 2, .on_validate = on_val, .user = &sv,
                           .checkpoint_dir = dir, .restore_best = true, .stats = &st);
    printf("stopped: rc %d, validations %d (last at step %lld), replicas at steps %lld and %lld, "
           "stats.steps %lld\n",
           rc, sv.n, sv.n ? (long long)sv.steps[sv.n - 1] : -1LL, rank_steps(trace, 0),
           rank_steps(trace, 1), (long long)st.steps);
    CHECK_EQ_INT(rc, CT_ECANCELED);
    CHECK_EQ_INT(sv.n, 7);
    for (int i = 0; i < sv.n && i < 7; i++) {
        CHECK_EQ_INT(sv.steps[i], 2 * (i + 1));
        CHECK_NEAR(sv.loss[i], (double)(llabs(2 * (i + 1) - 6) + 1), 1e-12);
    }
    CHECK_EQ_INT(rank_steps(trace, 0), 14); /* every replica stopped at that step */
    CHECK_EQ_INT(rank_steps(trace, 1), 14);
    CHECK_EQ_INT(st.steps, 6); /* the restored best's */
    tt_list_ckpts(dir, got, sizeof got);
    printf("kept: %s\n", got);
    CHECK_STR(got, "ckpt-epoch0000-step000006.safetensors ckpt-epoch0001-step000010.safetensors "
                   "ckpt-epoch0001-step000012.safetensors ckpt-epoch0001-step000014.safetensors");
    snprintf(path, sizeof path, "%s/index.json", dir);
    char *idx = tt_read_file(path, NULL);
    CHECK(idx && strstr(idx, "\"latest\": \"ckpt-epoch0001-step000014.safetensors\""));
    CHECK(idx && strstr(idx, "\"score_attribute\": \"val_loss\""));
    CHECK(idx && strstr(idx, "\"best\": [\"ckpt-epoch0000-step000006.safetensors\"]"));
    free(idx);
    int64_t n_model = 0, n6 = 0, n14 = 0;
    float *wm = tt_weights(trainer_get_model(t), &n_model);
    trainer_shutdown(&t);
    snprintf(path, sizeof path, "%s/ckpt-epoch0000-step000006.safetensors", dir);
    float *w6 = file_weights(trace, path, &n6);
    snprintf(path, sizeof path, "%s/ckpt-epoch0001-step000014.safetensors", dir);
    float *w14 = file_weights(trace, path, &n14);
    CHECK(wm && w6 && w14 && n_model == n6 && n6 == n14);
    if (wm && w6 && w14 && n_model == n6 && n6 == n14) {
        CHECK(memcmp(wm, w6, (size_t)n6 * sizeof *wm) == 0);  /* the best's weights */
        CHECK(memcmp(wm, w14, (size_t)n6 * sizeof *wm) != 0); /* not the last one's */
    }
    free(wm);
    free(w6);
    free(w14);

    /* 2. resume after the pruning: the latest (step 14), said in the run log; on to step 16 */
    t = make(trace, 2);
    seen sv2 = {0};
    char err[700];
    snprintf(err, sizeof err, "%s/resume.err", base);
    rc = train_logged(t,
                      &(trainer_train_opts){.validate_every_steps = 2,
                                            .on_validate = on_val,
                                            .user = &sv2,
                                            .checkpoint_dir = dir,
                                            .resume = dir,
                                            .log_every_steps = 100,
                                            .stats = &st},
                      err);
    CHECK_OK(rc);
    trainer_shutdown(&t);
    char *elog = tt_read_file(err, NULL), want[900];
    snprintf(want, sizeof want,
             "trainer: resuming from checkpoint %s/ckpt-epoch0001-step000014.safetensors: "
             "training goes on at step 14 (epoch 2, batch 6)",
             dir);
    CHECK(elog && strstr(elog, want));
    if (!elog || !strstr(elog, want))
        fprintf(stderr, "the run log lacks \"%s\":\n%s\n", want, elog ? elog : "(none)");
    free(elog);
    CHECK_EQ_INT(st.steps, 16);
    CHECK_EQ_INT(sv2.n, 1);
    CHECK_EQ_INT(sv2.steps[0], 16);
    CHECK_EQ_INT(rank_steps(trace, 0), 16);
    CHECK_EQ_INT(rank_steps(trace, 1), 16);
    tt_list_ckpts(dir, got, sizeof got);
    printf("kept after the resume: %s\n", got);
    CHECK_STR(got, "ckpt-epoch0000-step000006.safetensors ckpt-epoch0001-step000012.safetensors "
                   "ckpt-epoch0001-step000014.safetensors ckpt-epoch0002-step000016.safetensors");

    /* 3. keep all; no best; restore_best without a score */
    char all[700], nobest[700];
    snprintf(all, sizeof all, "%s/all", base);
    snprintf(nobest, sizeof nobest, "%s/nobest", base);
    t = make(trace, 1);
    CHECK_OK(trainer_train(t, .validate_every_steps = 2, .checkpoint_dir = all,
                           .checkpoint_num_to_keep = TRAINER_KEEP_ALL));
    trainer_shutdown(&t);
    tt_list_ckpts(all, got, sizeof got);
    CHECK_STR(got, "ckpt-epoch0000-step000002.safetensors ckpt-epoch0000-step000004.safetensors "
                   "ckpt-epoch0000-step000006.safetensors ckpt-epoch0001-step000008.safetensors");
    t = make(trace, 2);
    CHECK_OK(trainer_train(t, .validate_every_steps = 2, .checkpoint_dir = nobest,
                           .checkpoint_num_best = -1));
    tt_list_ckpts(nobest, got, sizeof got);
    CHECK_STR(got, "ckpt-epoch0001-step000012.safetensors ckpt-epoch0001-step000014.safetensors "
                   "ckpt-epoch0002-step000016.safetensors");
    rc = trainer_train(t, .epochs = 3, .restore_best = true);
    CHECK_EQ_INT(rc, CT_EINVAL);
    CHECK(strstr(ct_last_error(), "restore_best needs a score") != NULL);
    trainer_shutdown(&t);

    /* 4. perplexity on token targets */
    perplexity(base);

    ct_shutdown();
    if (!h_failures) {
        snprintf(path, sizeof path, "rm -rf '%s'", base);
        CHECK(system(path) == 0);
    }
    if (h_failures) {
        fprintf(stderr, "test_early_stop: %d failure(s) (files in %s)\n", h_failures, base);
        return 1;
    }
    printf("ok\n");
    return 0;
}
