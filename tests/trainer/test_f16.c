/* tests/trainer/test_f16.c — precision f16 with the built-in train step on the checking device
 * (its autocast rounds the operands of matrix products to f16, as a GPU's kernels read them),
 * through the loss scaler every replica keeps (torch.cuda.amp.GradScaler's rules).
 *
 * "train": 2 replicas, accumulate 2, 3 epochs: the loss falls, the replicas' weights agree,
 * every group of 2 batches is a step, and the scale is 65536 halved once per skipped step
 * (growth_interval 2000 is never reached). Also: a bad scaler key, and a scaler key without
 * f16 (nothing reads it), are refused.
 * "overflow": init scale 2^26: the first steps' scaled gradients overflow f16 (inf), so those
 * steps are skipped and the scale backs off until they fit; then it trains (growth_interval 4
 * grows it again). A custom step around the built-in one records each step's scale before and
 * after (trainer_step_scaler) in the KV; the test replays GradScaler's rules over the
 * recorded skips (a skip: the scale went down) on both ranks, which must agree: every scale
 * and the skipped count in the stats (and the run log's epoch record) must be what the rules
 * give, the first 3 steps skipped.
 * "resume": the overflow run with a checkpoint every 5 steps, uninterrupted, against the same
 * run resumed from its step-5 checkpoint (mid-epoch, the scaler mid-way): bit-identical
 * weights, the same skipped count and scale. Then an f32 run's checkpoint (no scaler in it, as
 * every checkpoint before f16) resumed with f16: it loads with a fresh scaler (init 2^26: the
 * first step skips again). */
#include "tt.h"

#include <dirent.h>

#define STEPS_PER_EPOCH 8 /* 1024 samples, 2 replicas, batch 64 */

/* the built-in step; records "<scale before> <scale after>" under tt/f16/<rank>/<step> */
static int trace_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_grad_scaler *sc = trainer_step_scaler(s);
    if (!sc)
        return CT_EINVAL;
    float before = ct_grad_scaler_scale(sc);
    long long step = (long long)trainer_step_count(s);
    int rc = trainer_builtin_train_step(s, b, out);
    if (rc == 0 && trainer_step_sync(s)) {
        char key[64], val[64];
        snprintf(key, sizeof key, "tt/f16/%d/%lld", trainer_ctx_rank(trainer_step_ctx(s)), step);
        snprintf(val, sizeof val, "%.9g %.9g", (double)before, (double)ct_grad_scaler_scale(sc));
        rc = ct_kv_put(key, val, strlen(val) + 1);
    }
    return rc;
}

static double losses[8];
static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    (void)user;
    if (st->epoch >= 1 && st->epoch <= 8)
        losses[st->epoch - 1] = st->train_loss;
    return 0;
}

/* a trainer on the checking device: 2 replicas, the MLP, Adam; extra: more config */
static trainer *make(const char *precision, const char *extra, const char *step, int accumulate,
                     int64_t epochs)
{
    char cfg[300];
    snprintf(cfg, sizeof cfg, "limit=1024,val_limit=64,lr=2e-3,precision=%s%s%s", precision,
             extra[0] ? "," : "", extra);
    trainer *t = NULL;
    if (trainer_create(&(trainer_opts){.model = "mlp",
                                       .data = "fashion_mnist",
                                       .optimizer = "adam",
                                       .train_step = step,
                                       .config = cfg,
                                       .num_replicas = 2,
                                       .batch_size = 64,
                                       .accumulate = accumulate,
                                       .epochs = epochs,
                                       .seed = 7,
                                       .device = "checkdev"},
                       &t) < 0)
        fprintf(stderr, "trainer_create (%s, %s): %s\n", precision, extra, ct_last_error());
    return t;
}

static void refused(const char *cfg, const char *want)
{
    trainer *t = (trainer *)1;
    char c[200];
    snprintf(c, sizeof c, "limit=256,val_limit=10,%s", cfg);
    int rc = trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .config = c,
                                            .num_replicas = 2,
                                            .device = "checkdev"},
                            &t);
    CHECK_EQ_INT(rc, CT_EINVAL);
    CHECK(t == NULL);
    if (!strstr(ct_last_error(), want)) {
        fprintf(stderr, "message \"%s\" lacks \"%s\"\n", ct_last_error(), want);
        h_failures++;
    }
}

static void mode_train(void)
{
    refused("precision=f16,scaler_backoff_factor=2",
            "\"scaler_backoff_factor\": must be in (0, 1)");
    refused("precision=f16,scaler_growth_interval=0", "\"scaler_growth_interval\"");
    refused("precision=bf16,scaler_init_scale=8", "\"scaler_init_scale\"");
    trainer *t = make("f16", "", NULL, 2, 3);
    CHECK(t != NULL);
    if (!t)
        return;
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .max_retries = 0, .on_epoch = on_epoch, .stats = &st));
    printf("f16, accumulate 2: losses %.4f %.4f %.4f, scale %g, %lld skipped\n", losses[0],
           losses[1], losses[2], st.loss_scale, (long long)st.skipped_steps);
    CHECK_EQ_INT(st.epoch, 3);
    CHECK_EQ_INT(st.steps, 3 * STEPS_PER_EPOCH / 2);
    CHECK(st.weights_agree);
    CHECK(losses[0] > 0 && losses[2] < 0.9 * losses[0]);
    CHECK(st.skipped_steps >= 0 && st.skipped_steps < st.steps / 2);
    CHECK(st.loss_scale == ldexp(65536.0, -(int)st.skipped_steps));
    trainer_shutdown(&t);
}

/* replays GradScaler over the recorded steps of both ranks; returns the skipped count */
static int64_t replay(int64_t steps, double init, int interval, double *final)
{
    double scale = init;
    int tracker = 0;
    int64_t skipped = 0, first_good = -1;
    for (int64_t i = 0; i < steps; i++) {
        double b[2] = {0}, a[2] = {0};
        for (int r = 0; r < 2; r++) {
            char key[64];
            void *v = NULL;
            size_t n = 0;
            snprintf(key, sizeof key, "tt/f16/%d/%lld", r, (long long)i);
            if (ct_kv_get(key, &v, &n, 5000) < 0 || sscanf(v, "%lf %lf", &b[r], &a[r]) != 2) {
                fprintf(stderr, "no record %s\n", key);
                h_failures++;
            }
            free(v);
        }
        if (b[0] != b[1] || a[0] != a[1]) {
            fprintf(stderr, "step %lld: rank 0 scale %g -> %g, rank 1 %g -> %g\n", (long long)i,
                    b[0], a[0], b[1], a[1]);
            h_failures++;
        }
        bool skip = a[0] < b[0];
        if (b[0] != scale) {
            fprintf(stderr, "step %lld: scale %g, GradScaler's %g\n", (long long)i, b[0], scale);
            h_failures++;
        }
        if (skip) {
            scale *= 0.5;
            tracker = 0;
            skipped++;
        } else if (++tracker == interval) {
            scale *= 2;
            tracker = 0;
        }
        if (!skip && first_good < 0)
            first_good = i;
        if (a[0] != scale) {
            fprintf(stderr, "step %lld: scale after %g, GradScaler's %g\n", (long long)i, a[0],
                    scale);
            h_failures++;
        }
        printf("step %lld: scale %g%s\n", (long long)i, b[0], skip ? " (skipped)" : "");
    }
    /* 2^26, 2^25, 2^24 times gradients of about 1/64 are far beyond f16's 65504 */
    CHECK(first_good >= 3);
    CHECK(steps - skipped >= steps / 2); /* then it trains */
    *final = scale;
    return skipped;
}

#define OVERFLOW_KEYS "scaler_init_scale=67108864,scaler_growth_interval=4"

static void mode_overflow(void)
{
    trainer *t = make("f16", OVERFLOW_KEYS, "tt_f16_trace", 1, 2);
    CHECK(t != NULL);
    if (!t)
        return;
    trainer_stats st = {0};
    char dir[] = "/tmp/ct-f16-log-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_OK(trainer_train(t, .max_retries = 0, .on_epoch = on_epoch, .log_dir = dir,
                           .progress = TRAINER_PROGRESS_OFF, .stats = &st));
    CHECK_EQ_INT(st.steps, 2 * STEPS_PER_EPOCH);
    CHECK(st.weights_agree);
    double final = 0;
    int64_t skipped = replay(st.steps, 67108864.0, 4, &final);
    printf("skipped %lld (stats %lld), scale %g (stats %g); losses %.4f %.4f\n", (long long)skipped,
           (long long)st.skipped_steps, final, st.loss_scale, losses[0], losses[1]);
    CHECK_EQ_INT(st.skipped_steps, skipped);
    CHECK(st.loss_scale == final);
    CHECK(losses[1] < losses[0]);
    trainer_shutdown(&t);
    /* the run log's last epoch record has them */
    char path[600], want[96];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(want, sizeof want, "\"loss_scale\":%.17g,\"skipped_steps\":%lld", final,
             (long long)skipped);
    char *log = tt_read_file(path, NULL);
    const char *last = log ? strstr(log, "{\"type\":\"epoch\",\"epoch\":1,") : NULL;
    if (!last || !strstr(last, want)) {
        fprintf(stderr, "metrics.jsonl's epoch-2 record lacks %s:\n%s\n", want,
                last ? last : "(none)");
        h_failures++;
    }
    free(log);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    if (system(path) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* the checkpoint in dir whose name has tag ("-step000005."), into path */
static bool find_ckpt(const char *dir, const char *tag, char *path, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;
    while (d && (e = readdir(d)))
        if (!found && !strncmp(e->d_name, "ckpt-", 5) && strstr(e->d_name, tag)) {
            snprintf(path, cap, "%s/%s", dir, e->d_name);
            found = true;
        }
    if (d)
        closedir(d);
    if (!found)
        fprintf(stderr, "no checkpoint %s in %s\n", tag, dir);
    return found;
}

static float *run(const char *precision, const char *extra, int64_t epochs, const char *dir,
                  const char *resume, trainer_stats *st, int64_t *n)
{
    trainer *t = make(precision, extra, NULL, 1, epochs);
    CHECK(t != NULL);
    if (!t)
        return NULL;
    CHECK_OK(trainer_train(t, .max_retries = 0, .checkpoint_dir = dir, .resume = resume,
                           .checkpoint_every_steps = 5, .checkpoint_num_to_keep = TRAINER_KEEP_ALL,
                           .stats = st));
    CHECK_EQ_INT(st->epoch, epochs);
    CHECK(st->weights_agree);
    float *w = tt_weights(trainer_get_model(t), n);
    trainer_shutdown(&t);
    return w;
}

static void mode_resume(void)
{
    char da[] = "/tmp/ct-f16-a-XXXXXX", db[] = "/tmp/ct-f16-b-XXXXXX",
         dc[] = "/tmp/ct-f16-c-XXXXXX";
    CHECK(mkdtemp(da) && mkdtemp(db) && mkdtemp(dc));
    trainer_stats sa = {0}, sb = {0}, sc = {0};
    int64_t na = 0, nb = 0, nc = 0;
    float *wa = run("f16", OVERFLOW_KEYS, 2, da, NULL, &sa, &na);
    char p[600];
    float *wb = NULL, *wc = NULL;
    if (find_ckpt(da, "-step000005.", p, sizeof p)) {
        size_t len = 0;
        char *bytes = tt_read_file(p, &len);
        CHECK(bytes && memmem(bytes, len, "\"grad_scaler\"", 13));
        free(bytes);
        wb = run("f16", OVERFLOW_KEYS, 2, db, p, &sb, &nb);
    } else {
        h_failures++;
    }
    printf("uninterrupted: %lld skipped, scale %g; resumed at step 5: %lld skipped, scale %g\n",
           (long long)sa.skipped_steps, sa.loss_scale, (long long)sb.skipped_steps, sb.loss_scale);
    CHECK(sa.skipped_steps >= 3);
    CHECK_EQ_INT(sb.skipped_steps, sa.skipped_steps);
    CHECK(sb.loss_scale == sa.loss_scale);
    CHECK_EQ_INT(sb.steps, sa.steps);
    CHECK(wa && wb && na == nb && na > 0 && !memcmp(wa, wb, (size_t)na * sizeof(float)));
    /* a checkpoint without the scaler's entry (f32's): a fresh scaler */
    free(run("f32", "", 1, dc, NULL, &sc, &nc));
    wc = run("f16", OVERFLOW_KEYS, 2, dc, dc, &sc, &nc);
    printf("f32 checkpoint resumed with f16: %lld skipped, scale %g\n", (long long)sc.skipped_steps,
           sc.loss_scale);
    CHECK(wc != NULL);
    CHECK(sc.skipped_steps >= 3 && sc.loss_scale <= 67108864.0 / 8);
    free(wa);
    free(wb);
    free(wc);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", da, db, dc);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", cmd);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "train";
    tt_register();
    trainer_register_train_step("tt_f16_trace", trace_step);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    if (!strcmp(what, "overflow"))
        mode_overflow();
    else if (!strcmp(what, "resume"))
        mode_resume();
    else
        mode_train();
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_f16 %s: %d failure(s)\n", what, h_failures);
    return h_failures ? 1 : 0;
}
