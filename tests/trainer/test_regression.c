/* tests/trainer/test_regression.c — data beyond labels, through the whole trainer (2 replicas
 * of an embedded cluster):
 *   targets: linear regression y = 3 x1 - 2 x2 + 0.5 + noise on f32 targets with the built-in
 *     "mse" loss: the learned weights are the coefficients; validation reports the loss and no
 *     accuracy; a multi-label set with "bce_with_logits" trains too.
 *   shard: the same from a CSV that each replica reads in its own shard: each reads far less
 *     than the file (bytes counted by ct_dataset_open_csv_shard, put in the KV), the shards
 *     add up to the file's records, and two runs with one seed give the same weights.
 *   plateau: the built-in "plateau" on train_loss, and a plateau scheduler of the user's on
 *     val_loss with validation every 3 steps and every epoch: the lr every rank used (a step
 *     metric) and the driver's scheduler after each epoch's checkpoint are those of a plateau
 *     scheduler replayed here on the values on_epoch / on_validate got; the validations come
 *     at the steps asked. Errors: a val_* plateau without validation; a bad mode.
 *   resume: validation every 3 steps and a checkpoint every 4 (checkpoint_dir), with each
 *     plateau (val_loss; train_loss): a new trainer resumed from a checkpoint within an epoch
 *     (step 24 of epoch 2, also a validation's; step 32 of epoch 3, whose whole mean loss the
 *     scheduler must step on) ends with the undisturbed run's weights, lr and last checkpoint
 *     (scheduler state included) bit for bit, and reports the same validations after that
 *     step, no others. */
#include "tt.h"

#include "ct/data.h"

#define NREG 512
static char csv_path[300];

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}
static double uniform(uint64_t *s)
{
    return (double)(lcg(s) % 1000000) / 1000000.0;
}

/* x uniform in [-1, 1]^2, y = 3 x1 - 2 x2 + 0.5 + noise in [-0.01, 0.01] */
static void make_points(float *x, float *y, int n)
{
    uint64_t s = 7;
    for (int i = 0; i < n; i++) {
        x[2 * i] = (float)(2 * uniform(&s) - 1);
        x[2 * i + 1] = (float)(2 * uniform(&s) - 1);
        y[i] = 3 * x[2 * i] - 2 * x[2 * i + 1] + 0.5f + (float)(0.02 * uniform(&s) - 0.01);
    }
}

static ct_module *linear(trainer_ctx *ctx)
{
    (void)ctx;
    return CT_SEQUENTIAL(ct_nn_linear_new(2, 1, true));
}

/* "points": in memory, last 64 for validation */
static int points(trainer_ctx *ctx, trainer_data *d)
{
    (void)ctx;
    static float x[2 * NREG], y[NREG];
    make_points(x, y, NREG);
    const int64_t shape[1] = {2}, tshape[1] = {1};
    int rc = ct_dataset_from_f32_targets(x, y, NREG, 1, shape, 1, tshape, &d->keep[0]);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], 0, NREG - 64, &d->train);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], NREG - 64, 64, &d->val);
    return rc;
}

/* "csv_shard": this rank's shard of the CSV (config "csv"); the bytes it read and its records
 * in the KV */
static int csv_shard(trainer_ctx *ctx, trainer_data *d)
{
    int64_t bytes = 0;
    int rank = trainer_ctx_rank(ctx), world = trainer_ctx_world_size(ctx);
    const char *path = trainer_config_str(ctx, "csv", "");
    int rc = ct_dataset_open_csv_shard(path, &(ct_csv_opts){.label_column = -1, .targets = 1}, rank,
                                       world, &d->train, &bytes);
    if (rc == 0 && !trainer_ctx_is_driver(ctx)) {
        char key[64], val[64];
        snprintf(key, sizeof key, "tt/shard/%d", rank);
        snprintf(val, sizeof val, "%lld %lld", (long long)bytes,
                 (long long)ct_dataset_length(d->train));
        rc = ct_kv_put(key, val, strlen(val) + 1);
    }
    d->sharded = true;
    return rc;
}

/* "multilabel": 3 labels, label k on when x_k > 0 */
static ct_module *ml_model(trainer_ctx *ctx)
{
    (void)ctx;
    return CT_SEQUENTIAL(ct_nn_linear_new(3, 3, true));
}
static int multilabel(trainer_ctx *ctx, trainer_data *d)
{
    (void)ctx;
    static float x[3 * 256], y[3 * 256];
    uint64_t s = 11;
    for (int i = 0; i < 3 * 256; i++) {
        x[i] = (float)(2 * uniform(&s) - 1);
        y[i] = x[i] > 0 ? 1.0f : 0.0f;
    }
    const int64_t shape[1] = {3};
    int rc = ct_dataset_from_f32_targets(x, y, 256, 1, shape, 1, shape, &d->keep[0]);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], 0, 192, &d->train);
    if (rc == 0)
        rc = ct_dataset_subset(d->keep[0], 192, 64, &d->val);
    return rc;
}

/* a train step that reports the lr the update used as metric "lr" */
static int lr_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int rc = trainer_step_metric(s, "lr", ct_optim_get_lr(trainer_step_optim(s), 0));
    return rc == 0 ? trainer_builtin_train_step(s, b, out) : rc;
}

/* the user's plateau scheduler; in the driver it is the driver's (checkpointed) scheduler */
static ct_sched *driver_sched;
static const ct_plateau_opts user_plateau = {
    .factor = 0.5, .patience = CT_PATIENCE_ZERO, .threshold = 0.3, .cooldown = 1};
static ct_sched *my_plateau(trainer_ctx *ctx, ct_optim *o)
{
    ct_sched *s = ct_sched_plateau_new(o, &user_plateau);
    if (trainer_ctx_is_driver(ctx))
        driver_sched = s;
    return s;
}

/* weight i of the linear layer; i = 2: its bias */
static double weight(trainer *t, int i)
{
    const ct_param_ref *ps;
    int np;
    if (ct_module_params(trainer_get_model(t), &ps, &np) < 0 || np != 2)
        return NAN;
    return i < 2 ? ps[0].value[i] : ps[1].value[0];
}

static trainer *make(const char *data, const char *loss, const char *sched, const char *cfg,
                     const char *step, int64_t epochs)
{
    trainer *t = NULL;
    int rc = trainer_create(&(trainer_opts){.model = !strcmp(data, "multilabel") ? "ml" : "lin",
                                            .data = data,
                                            .optimizer = "sgd",
                                            .loss = loss,
                                            .scheduler = sched,
                                            .train_step = step,
                                            .config = cfg,
                                            .num_replicas = 2,
                                            .batch_size = 16,
                                            .epochs = epochs,
                                            .seed = 5},
                            &t);
    if (rc < 0) {
        fprintf(stderr, "trainer_create (%s): %s\n", data, ct_last_error());
        h_failures++;
    }
    return t;
}

static void check_coefficients(trainer *t, const char *what)
{
    double w1 = weight(t, 0), w2 = weight(t, 1), b = weight(t, 2);
    printf("%s: learned w = [%.4f, %.4f], b = %.4f\n", what, w1, w2, b);
    CHECK(fabs(w1 - 3) < 0.02 && fabs(w2 + 2) < 0.02 && fabs(b - 0.5) < 0.02);
}

static void test_targets(void)
{
    trainer *t = make("points", "mse", NULL, "lr=0.1", NULL, 6);
    trainer_stats st = {0};
    if (!t)
        return;
    CHECK_OK(trainer_train(t, .validate_every_epoch = true, .stats = &st));
    CHECK(st.weights_agree);
    CHECK_EQ_INT(st.val_samples, 64);
    CHECK(st.val_accuracy == 0); /* no top-1 for f32 targets */
    CHECK(st.val_loss < 1e-3);   /* noise variance is 3.3e-5 */
    CHECK(st.train_loss < 1e-3);
    check_coefficients(t, "targets");
    trainer_shutdown(&t);

    /* multi-label with bce_with_logits: the loss falls well below log 2 */
    t = make("multilabel", "bce_with_logits", NULL, "lr=0.5", NULL, 5);
    if (!t)
        return;
    CHECK_OK(trainer_train(t, .validate_every_epoch = true, .stats = &st));
    printf("multilabel: train loss %.4f, val loss %.4f\n", st.train_loss, st.val_loss);
    CHECK(st.val_loss < 0.6 && st.weights_agree); /* log 2 = 0.693 at the start */
    trainer_shutdown(&t);
}

static void test_shard(void)
{
    /* the CSV: header, NREG points */
    static float x[2 * NREG], y[NREG];
    make_points(x, y, NREG);
    FILE *f = fopen(csv_path, "w");
    fprintf(f, "x1,x2,y\n");
    for (int i = 0; i < NREG; i++)
        fprintf(f, "%.7g,%.7g,%.7g\n", x[2 * i], x[2 * i + 1], y[i]);
    long size = ftell(f);
    fclose(f);
    float *first = NULL;
    for (int run = 0; run < 2; run++) {
        char cfg[400];
        snprintf(cfg, sizeof cfg, "lr=0.1,csv=%s", csv_path);
        trainer *t = make("csv_shard", "mse", NULL, cfg, NULL, 6);
        trainer_stats st = {0};
        if (!t)
            return;
        CHECK_OK(trainer_train(t, .stats = &st));
        CHECK(st.weights_agree);
        check_coefficients(t, "shard");
        int64_t records = 0;
        for (int r = 0; r < 2; r++) {
            char key[64];
            snprintf(key, sizeof key, "tt/shard/%d", r);
            void *v = NULL;
            size_t n = 0;
            long long bytes = 0, count = 0;
            CHECK_OK(ct_kv_get(key, &v, &n, 0));
            if (v && sscanf(v, "%lld %lld", &bytes, &count) == 2) {
                printf("rank %d read %lld of %ld bytes, %lld records\n", r, bytes, size, count);
                /* its half of the file, a byte before it and two 256-byte reads: the file's
                 * first line and the end of its last line */
                CHECK(bytes <= size / 2 + 1 + 2 * 256 + 1);
                records += count;
            } else {
                h_failures++;
            }
            free(v);
        }
        CHECK_EQ_INT(records, NREG);
        /* determinism: the same seed, the same weights bit for bit */
        int64_t n = 0;
        float *w = tt_weights(trainer_get_model(t), &n);
        if (run == 0)
            first = w;
        else {
            CHECK(w && first && memcmp(w, first, (size_t)n * sizeof *w) == 0);
            free(w);
        }
        trainer_shutdown(&t);
    }
    free(first);
}

/* ---- plateau ---- */

typedef struct record {
    double train_loss[16], lr[16];
    int nepochs;
    double val_loss[64];
    int64_t val_step[64], val_epoch[64];
    int nvals;
    int bad; /* driver scheduler mismatches */
    ct_sched *replay;
    ct_optim *replay_opt;
} record;

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    record *r = user;
    r->train_loss[r->nepochs] = st->train_loss;
    r->lr[r->nepochs++] = trainer_stats_metric(st, false, "lr", NAN);
    /* the driver's scheduler, as the epoch's checkpoint left it, is the replay's */
    if (driver_sched && r->replay &&
        ct_sched_get_last_lr(driver_sched, 0) != ct_sched_get_last_lr(r->replay, 0)) {
        fprintf(stderr, "epoch %d: driver's plateau lr %.17g, replayed %.17g\n", r->nepochs,
                ct_sched_get_last_lr(driver_sched, 0), ct_sched_get_last_lr(r->replay, 0));
        r->bad++;
    }
    return 0;
}

static int on_validate(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    record *r = user;
    if (r->nvals < 64) {
        r->val_loss[r->nvals] = st->val_loss;
        r->val_step[r->nvals] = st->val_step;
        r->val_epoch[r->nvals] = st->val_epoch;
        if (r->replay)
            ct_sched_step_metric(r->replay, st->val_loss);
        r->nvals++;
    }
    return 0;
}

static ct_sched *new_replay(ct_optim **o, const ct_plateau_opts *po)
{
    static float p, g;
    static ct_param_ref ref = {"p", &p, &g, 1};
    *o = ct_optim_sgd_new(&ref, 1, &(ct_sgd_opts){.lr = 0.1});
    return ct_sched_plateau_new(*o, po);
}

static void test_plateau(void)
{
    /* built-in, on the train loss: the lr of epoch e is the replay's after e-1 losses */
    trainer *t = make("points", "mse", "plateau",
                      "lr=0.1,plateau_metric=train_loss,factor=0.5,patience=0,threshold=0.1,"
                      "threshold_mode=abs,cooldown=0,min_lr=0.01",
                      "lr", 6);
    record rec = {0};
    if (!t)
        return;
    CHECK_OK(trainer_train(t, .on_epoch = on_epoch, .user = &rec));
    CHECK_EQ_INT(rec.nepochs, 6);
    ct_optim *o = NULL;
    ct_sched *s = new_replay(&o, &(ct_plateau_opts){.factor = 0.5,
                                                    .patience = CT_PATIENCE_ZERO,
                                                    .threshold = 0.1,
                                                    .threshold_mode = CT_THRESHOLD_ABS,
                                                    .min_lr = 0.01});
    int changes = 0;
    for (int e = 0; e < rec.nepochs; e++) {
        double want = ct_optim_get_lr(o, 0);
        printf("plateau(train_loss) epoch %d: loss %.6g lr %.6g (replay %.6g)\n", e + 1,
               rec.train_loss[e], rec.lr[e], want);
        CHECK(fabs(rec.lr[e] - want) <= 1e-12 * want);
        changes += e > 0 && rec.lr[e] != rec.lr[e - 1];
        ct_sched_step_metric(s, rec.train_loss[e]);
    }
    CHECK(changes >= 2); /* the test can tell a stepping scheduler from a constant lr */
    ct_sched_destroy(&s);
    ct_optim_destroy(&o);
    trainer_shutdown(&t);

    /* the user's plateau scheduler on val_loss, validating every 3 steps and every epoch:
     * 448 / 2 / 16 = 14 steps per epoch: steps 3, 6, 9, 12 and the epoch's end */
    t = make("points", "mse", "my_plateau", "lr=0.1", "lr", 3);
    if (!t)
        return;
    CHECK(driver_sched != NULL); /* on_epoch compares with it */
    record r2 = {0};
    r2.replay = new_replay(&r2.replay_opt, &user_plateau);
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .validate_every_steps = 3, .validate_every_epoch = true,
                           .on_validate = on_validate, .on_epoch = on_epoch, .user = &r2,
                           .stats = &st));
    CHECK_EQ_INT(r2.bad, 0);
    /* steps are counted over the run: multiples of 3, and each epoch's end (14, 28, 42) unless
     * it is one */
    int64_t want[64];
    int nwant = 0;
    for (int64_t e = 0; e < 3; e++) {
        for (int64_t k = 14 * e + 1; k <= 14 * (e + 1); k++)
            if (k % 3 == 0 || k == 14 * (e + 1)) {
                r2.val_epoch[nwant] -= e; /* 0 when right */
                want[nwant++] = k;
            }
    }
    CHECK_EQ_INT(r2.nvals, nwant);
    CHECK_EQ_INT(nwant, 16);
    for (int i = 0; i < r2.nvals && i < nwant; i++) {
        CHECK_EQ_INT(r2.val_step[i], want[i]);
        CHECK_EQ_INT(r2.val_epoch[i], 0);
    }
    CHECK(st.val_step == 42 && st.val_epoch == 2);
    CHECK(ct_sched_get_last_lr(r2.replay, 0) < 0.1); /* it did reduce */
    printf("plateau(val_loss): %d validations, final lr %.6g\n", r2.nvals,
           ct_sched_get_last_lr(r2.replay, 0));
    ct_sched_destroy(&r2.replay);
    ct_optim_destroy(&r2.replay_opt);
    trainer_shutdown(&t);

    /* errors */
    t = make("points", "mse", "plateau", "lr=0.1", NULL, 1);
    if (t) {
        CHECK_EQ_INT(trainer_train(t), CT_EINVAL);
        CHECK(strstr(ct_last_error(), "validate_every_epoch or validate_every_steps") != NULL);
        trainer_shutdown(&t);
    }
    trainer *bad = NULL;
    CHECK_EQ_INT(trainer_create(&(trainer_opts){.model = "lin",
                                                .data = "points",
                                                .optimizer = "sgd",
                                                .loss = "mse",
                                                .scheduler = "plateau",
                                                .config = "mode=maximum"},
                                &bad),
                 CT_EINVAL);
    CHECK(strstr(ct_last_error(), "\"mode\"") != NULL);
}

/* ---- resume within an epoch, with validations and a plateau scheduler ---- */

typedef struct run_out {
    float *w;
    int64_t n;
    double lr;
    record rec;
} run_out;

static void run_job(const char *sched, const char *cfg, const char *dir, const char *resume,
                    run_out *out)
{
    trainer *t = make("points", "mse", sched, cfg, "lr", 3);
    trainer_stats st = {0};
    if (!t)
        return;
    CHECK_OK(trainer_train(t, .validate_every_steps = 3, .validate_every_epoch = true,
                           .checkpoint_every_steps = 4, .checkpoint_dir = dir, .resume = resume,
                           .checkpoint_num_to_keep = TRAINER_KEEP_ALL, .on_validate = on_validate,
                           .on_epoch = on_epoch, .user = &out->rec, .stats = &st));
    CHECK_EQ_INT(st.steps, 42);
    out->w = tt_weights(trainer_get_model(t), &out->n);
    out->lr = trainer_stats_metric(&st, false, "lr", NAN);
    trainer_shutdown(&t);
}

static void resume_case(const char *base, const char *sched, const char *cfg, int epoch, int from)
{
    char dir[400], dir2[400], file[600], last[600], last2[600];
    snprintf(dir, sizeof dir, "%s/%s", base, sched);
    snprintf(dir2, sizeof dir2, "%s/%s-resumed", base, sched);
    /* 14 steps an epoch: a checkpoint at steps 4, 8, 12, 14, 18, 20, 24, 28, 32, ... */
    snprintf(file, sizeof file, "%s/ckpt-epoch%04d-step%06d.safetensors", dir, epoch, from);
    snprintf(last, sizeof last, "%s/ckpt-epoch0003-step000042.safetensors", dir);
    snprintf(last2, sizeof last2, "%s/ckpt-epoch0003-step000042.safetensors", dir2);
    run_out a = {0}, b = {0};
    driver_sched = NULL;
    run_job(sched, cfg, dir, NULL, &a);
    driver_sched = NULL;
    run_job(sched, cfg, dir2, file, &b);
    CHECK(a.w && b.w && a.n == b.n && memcmp(a.w, b.w, (size_t)a.n * sizeof *a.w) == 0);
    CHECK(a.lr == b.lr);
    size_t la = 0, lb = 0;
    char *ca = tt_read_file(last, &la), *cb = tt_read_file(last2, &lb);
    CHECK(ca && cb && la == lb && memcmp(ca, cb, la) == 0); /* scheduler state included */
    free(ca);
    free(cb);
    printf("resume %s from step %d: lr %.6g / %.6g, weights %s\n", sched, from, a.lr, b.lr,
           a.w && b.w && !memcmp(a.w, b.w, (size_t)a.n * sizeof *a.w) ? "bit-identical" : "DIFFER");
    /* the resumed run reports exactly the undisturbed run's validations after step `from` */
    int k = 0;
    while (k < a.rec.nvals && a.rec.val_step[k] <= from)
        k++;
    CHECK_EQ_INT(b.rec.nvals, a.rec.nvals - k);
    for (int i = 0; i < b.rec.nvals && k + i < a.rec.nvals; i++) {
        CHECK_EQ_INT(b.rec.val_step[i], a.rec.val_step[k + i]);
        CHECK(b.rec.val_loss[i] == a.rec.val_loss[k + i]);
    }
    free(a.w);
    free(b.w);
}

static void test_resume(void)
{
    char base[] = "/tmp/ct-regression-resume.XXXXXX", cmd[600];
    CHECK(mkdtemp(base) != NULL);
    resume_case(base, "my_plateau", "lr=0.1", 1, 24);
    resume_case(base, "plateau",
                "lr=0.1,plateau_metric=train_loss,factor=0.5,patience=0,threshold=0.1,"
                "threshold_mode=abs,cooldown=0,min_lr=0.01",
                2, 32);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (!h_failures && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
}

int main(void)
{
    tt_register();
    trainer_register_model("lin", linear);
    trainer_register_model("ml", ml_model);
    trainer_register_data("points", points);
    trainer_register_data("csv_shard", csv_shard);
    trainer_register_data("multilabel", multilabel);
    trainer_register_train_step("lr", lr_step);
    trainer_register_scheduler("my_plateau", my_plateau);
    snprintf(csv_path, sizeof csv_path, "/tmp/ct_test_regression_%d.csv", (int)getpid());
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    test_targets();
    test_shard();
    test_plateau();
    test_resume();
    ct_shutdown();
    unlink(csv_path);
    if (h_failures)
        fprintf(stderr, "test_regression: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
