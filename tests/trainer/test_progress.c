/* tests/trainer/test_progress.c — seeing a run (trainer.h, "Seeing a run"): 2 replicas of the
 * 784-64-10 MLP on the synthetic blobs (800 training samples, batch 50: 8 steps per epoch),
 * SGD with StepLR (gamma 0.5 per epoch), a train step that measures the gradient norm and adds
 * 11 named metrics (more than the old limit of 4), validation every epoch:
 *   (a) trainer_train for 2 epochs with log_dir and log_every_steps = 4 (stderr to a file):
 *       metrics.jsonl has one step record per optimizer step (epoch, batch, step 1..16, loss,
 *       samples 100, lr 0.05 then 0.025, grad_norm equal to the step's "gn" metric, step_s and
 *       wait_s for both ranks, the 11 metrics), an epoch record per epoch whose train_loss is
 *       trainer_stats' and equals the samples-weighted mean of its step records' losses, a
 *       validation record per epoch; trainer_stats.metrics has the 11 metrics, each the
 *       weighted mean of the last epoch's step records; stderr has the 4 plain lines;
 *   (b) a second trainer_train to epoch 3 with the same log_dir and progress ON: the records
 *       continue in the same files (steps 17..24), the live line ("\r\033[K" + "epoch 3/3
 *       step") was drawn; a trainer_validate afterwards adds its val record;
 *   (b2) a third trainer_train (epoch 4) into another log_dir: its 8 step records are there;
 *   (c) tests/trainer/check_tensorboard.py reads the event file with TensorBoard's
 *       EventAccumulator and compares every tag and value with metrics.jsonl (skipped, exit 77,
 *       when the tensorboard package is missing; the C checks above still ran);
 *   (d) bad options are refused naming them; a metric name with a blank is refused;
 *   (e) with gradient accumulation (2 batches per step) one record per optimizer step, each
 *       covering both batches (200 samples), their mean loss trainer_stats'; flops_per_sample
 *       given, each record's mfu_pct is its rate's share of the 2 replicas' FP32 peak ((a)'s
 *       records, without it, have none);
 *   (f) replica 1 killed in epoch 1 (the probe loss of tt.h), one retry: the retried epoch's
 *       8 records follow the at most 2 the lost group sent, and give trainer_stats' loss;
 *   (g) epochs in segments with in-line validation: a checkpoint every 3 steps (checkpoint_dir),
 *       validation every 4 steps and every epoch (each validation ends a segment too, with a
 *       checkpoint), on_validate stopping at step 4's: the log has steps 1..4 once each (the
 *       stop is at that step) and the val record of step 4; a fresh trainer resumed from the
 *       directory (checkpoint of step 4, within epoch 0) logs steps 5..16 once each in order
 * (batch, epoch, lr of StepLR's epochs right) and val records at steps 8, 12, 16 only (the epochs'
 * own validations fall on those steps), the last one trainer_stats' val_*; TensorBoard's reader
 * agrees with it ((c)). */
#include "tt.h"

#include <dirent.h>
#include <fcntl.h>

#define CFG "lr=0.05,step_size=1,gamma=0.5"
#define NMETRICS 11
#define MFU_FLOPS 2.5e6 /* (e)'s flops_per_sample */

double ct__cpu_peak_flops_per_core(void); /* trainer/cpu/peak.c (internal) */

/* The built-in step with the gradient norm measured (not clipped) and named metrics. */
static int metered_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);
    ct_tensor *loss = y ? trainer_step_loss(s)(y, b->y) : NULL;
    double norm = 0;
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    if (rc == 0)
        rc = trainer_step_clip_grad_norm(s, 0, &norm);
    if (rc == 0)
        rc = trainer_step_optimizer(s);
    if (rc == 0)
        rc = trainer_step_metric(s, "gn", norm);
    for (int k = 0; rc == 0 && k < NMETRICS - 1; k++) {
        char name[16];
        snprintf(name, sizeof name, "m%d", k);
        /* differs per rank and per batch: the averages are over samples of both ranks */
        rc = trainer_step_metric(s, name,
                                 k + 0.01 * (double)trainer_step_index(s) +
                                     0.5 * trainer_ctx_rank(trainer_step_ctx(s)));
    }
    if (rc == 0 && trainer_step_index(s) == 0) { /* the replica's answer, for the test */
        char v[16];
        snprintf(v, sizeof v, "%d", trainer_step_metric(s, "has blank", 1));
        ct_kv_put("tt/bad_name_rc", v, strlen(v) + 1);
    }
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&y);
    return rc;
}

/* ---- reading metrics.jsonl (the lines ct writes: no nesting but "metrics" and arrays) ---- */

/* The number after "key": in line; NAN when absent or null. */
static double jget(const char *line, const char *key)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return NAN;
    p += strlen(pat);
    if (!strncmp(p, "null", 4))
        return NAN;
    return strtod(p, NULL);
}

/* The array after "key":[ into out (at most cap); the count, or -1. */
static int jarr(const char *line, const char *key, double *out, int cap)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":[", key);
    const char *p = strstr(line, pat);
    if (!p)
        return -1;
    p += strlen(pat);
    int n = 0;
    while (*p && *p != ']') {
        char *end;
        double v = strtod(p, &end);
        if (end == p)
            return -1;
        if (n < cap)
            out[n] = v;
        n++;
        p = end;
        if (*p == ',')
            p++;
    }
    return n;
}

static bool is_type(const char *line, const char *type)
{
    char pat[40];
    snprintf(pat, sizeof pat, "{\"type\":\"%s\"", type);
    return !strncmp(line, pat, strlen(pat));
}

static bool near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b));
}

#define CHECK_NEAR(a, b, rel)                                                                      \
    do {                                                                                           \
        double _a = (a), _b = (b);                                                                 \
        if (!near(_a, _b, rel)) {                                                                  \
            fprintf(stderr, "%s:%d: %s ~ %s failed: %.17g vs %.17g\n", __FILE__, __LINE__, #a, #b, \
                    _a, _b);                                                                       \
            h_failures++;                                                                          \
        }                                                                                          \
    } while (0)

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; text && (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* (g): on_validate keeps the steps of the first 4 validations (user: int64_t[4]); the first
 * run stops at the first. */
static int record_val(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    int64_t *steps = user;
    for (int k = 0; k < 4; k++)
        if (!steps[k]) {
            steps[k] = st->val_step;
            break;
        }
    return 0;
}

static int stop_at_val4(trainer *t, const trainer_stats *st, void *user)
{
    record_val(t, st, user);
    return st->val_step == 4 ? CT_EINVAL : 0;
}

/* Runs trainer_train with stderr in err_path. */
static int train_to(trainer *t, int64_t epochs, const char *dir, int progress, int every,
                    const char *err_path, trainer_stats *st)
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO), fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    close(fd);
    int rc = trainer_train(t, .epochs = epochs, .stats = st, .validate_every_epoch = true,
                           .log_dir = dir, .progress = progress, .log_every_steps = every,
                           .report_ms = 20);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    return rc;
}

/* (a), (b): the step records of one epoch, checked; returns the samples-weighted mean loss and
 * fills the per-metric weighted means of the epoch. */
static double check_epoch(char **lines, int nlines, int64_t epoch, int64_t first_step, double lr,
                          double *mean_metric)
{
    double loss_sum = 0, samples = 0, msum[NMETRICS] = {0};
    int n = 0;
    for (int i = 0; i < nlines; i++) {
        const char *l = lines[i];
        if (!is_type(l, "step") || jget(l, "epoch") != (double)epoch)
            continue;
        n++;
        CHECK_EQ_INT(jget(l, "batch"), n);
        CHECK_EQ_INT(jget(l, "batches"), 8);
        CHECK_EQ_INT(jget(l, "step"), first_step + n - 1);
        CHECK_EQ_INT(jget(l, "samples"), 100);
        CHECK_NEAR(jget(l, "lr"), lr, 1e-15);
        double loss = jget(l, "loss"), gn = jget(l, "grad_norm");
        CHECK(loss > 0 && loss < 10);
        CHECK(gn > 0);
        CHECK_NEAR(jget(l, "gn"), gn, 1e-12); /* the step's metric, averaged over ranks */
        CHECK(jget(l, "wall_time") > 1.6e9);
        CHECK(jget(l, "samples_per_s") > 0);
        CHECK(isnan(jget(l, "mfu_pct"))); /* not asked for */
        double ss[4], ws[4];
        CHECK_EQ_INT(jarr(l, "step_s", ss, 4), 2);
        CHECK_EQ_INT(jarr(l, "wait_s", ws, 4), 2);
        for (int r = 0; r < 2; r++)
            CHECK(ss[r] > 0 && ws[r] >= 0 && ws[r] <= ss[r]);
        /* m<k> of the step: k + 0.01 * (batch - 1) + 0.5 * mean rank (equal batches) */
        for (int k = 0; k < NMETRICS - 1; k++) {
            char name[16];
            snprintf(name, sizeof name, "m%d", k);
            double m = jget(l, name);
            CHECK_NEAR(m, k + 0.01 * (double)(n - 1) + 0.25, 1e-12);
            msum[k] += m * 100;
        }
        msum[NMETRICS - 1] += gn * 100;
        loss_sum += loss * 100;
        samples += 100;
    }
    CHECK_EQ_INT(n, 8);
    for (int k = 0; k < NMETRICS; k++)
        mean_metric[k] = samples > 0 ? msum[k] / samples : NAN;
    return samples > 0 ? loss_sum / samples : NAN;
}

/* Splits text into lines in place; the count. */
static int split_lines(char *text, char **lines, int cap)
{
    int n = 0;
    for (char *p = text, *nl; p && *p && n < cap; p = nl + 1) {
        if (!(nl = strchr(p, '\n')))
            break;
        *nl = 0;
        lines[n++] = p;
    }
    return n;
}

int main(void)
{
    tt_register();
    trainer_register_train_step("metered", metered_step);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    char dir[] = "/tmp/ct-progress.XXXXXX", logdir[200], path[300], err1[300], err2[300];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(logdir, sizeof logdir, "%s/run/a", dir); /* two levels created by trainer_train */
    snprintf(err1, sizeof err1, "%s/stderr1", dir);
    snprintf(err2, sizeof err2, "%s/stderr2", dir);

    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "sgd",
                                            .scheduler = "steplr",
                                            .train_step = "metered",
                                            .config = CFG,
                                            .num_replicas = 2,
                                            .batch_size = 50,
                                            .epochs = 3,
                                            .seed = 3},
                            &t));
    if (!t) {
        ct_shutdown();
        return 1;
    }
    /* (d) bad options */
    CHECK_EQ_INT(trainer_train(t, .progress = 7), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "progress") != NULL);
    CHECK_EQ_INT(trainer_train(t, .log_every_steps = -1), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "log_every_steps") != NULL);
    CHECK_EQ_INT(trainer_train(t, .flops_per_sample = -1), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "flops_per_sample") != NULL);

    /* (a) */
    trainer_stats st = {0}, st3 = {0}, stv = {0};
    CHECK_OK(train_to(t, 2, logdir, TRAINER_PROGRESS_OFF, 4, err1, &st));
    CHECK_EQ_INT(st.epoch, 2);
    CHECK_EQ_INT(st.steps, 16);
    CHECK_EQ_INT(st.nmetrics, NMETRICS);
    /* (b) */
    CHECK_OK(train_to(t, 3, logdir, TRAINER_PROGRESS_ON, 0, err2, &st3));
    CHECK_EQ_INT(st3.steps, 24);
    CHECK_OK(trainer_validate(t, &stv));
    /* (b2) one more epoch into another log_dir, same group: its records land there */
    char logdir_b[200], err3[300];
    trainer_stats st4 = {0};
    snprintf(logdir_b, sizeof logdir_b, "%s/other", dir);
    snprintf(err3, sizeof err3, "%s/stderr3", dir);
    CHECK_OK(train_to(t, 4, logdir_b, TRAINER_PROGRESS_OFF, 0, err3, &st4));
    trainer_shutdown(&t);
    snprintf(path, sizeof path, "%s/metrics.jsonl", logdir_b);
    char *textb = tt_read_file(path, NULL);
    static char *lines_b[64];
    int nb = split_lines(textb, lines_b, 64);
    double mean_b[NMETRICS];
    CHECK_NEAR(check_epoch(lines_b, nb, 3, 25, 0.00625, mean_b), st4.train_loss, 1e-12);
    CHECK_EQ_INT(nb, 8 + 2); /* 8 steps, the epoch, its validation */
    free(textb);

    snprintf(path, sizeof path, "%s/metrics.jsonl", logdir);
    char *text = tt_read_file(path, NULL);
    CHECK(text != NULL);
    static char *lines[256];
    int nlines = split_lines(text, lines, 256);
    int nstep = 0, nepoch = 0, nval = 0;
    for (int i = 0; i < nlines; i++) {
        nstep += is_type(lines[i], "step");
        nepoch += is_type(lines[i], "epoch");
        nval += is_type(lines[i], "val");
    }
    CHECK_EQ_INT(nstep, 24);
    CHECK_EQ_INT(nepoch, 3);
    CHECK_EQ_INT(nval, 4); /* every epoch, then trainer_validate */
    double mean[3][NMETRICS];
    double lr[3] = {0.05, 0.025, 0.0125};
    for (int e = 0; e < 3; e++) {
        double ml = check_epoch(lines, nlines, e, 1 + 8 * e, lr[e], mean[e]);
        const trainer_stats *se = e == 1 ? &st : e == 2 ? &st3 : NULL;
        for (int i = 0; i < nlines; i++) /* the epoch record */
            if (is_type(lines[i], "epoch") && jget(lines[i], "epoch") == e) {
                CHECK_NEAR(jget(lines[i], "train_loss"), ml, 1e-12);
                CHECK_EQ_INT(jget(lines[i], "step"), 8 * (e + 1));
                if (se) {
                    CHECK(jget(lines[i], "train_loss") == se->train_loss);
                    CHECK(jget(lines[i], "samples_per_s") == se->samples_per_s);
                }
            }
        if (se) {
            printf("epoch %d: train_loss %.6f, step records' mean %.6f\n", e, se->train_loss, ml);
            CHECK_NEAR(se->train_loss, ml, 1e-12);
            for (int k = 0; k < NMETRICS; k++) {
                char name[16];
                snprintf(name, sizeof name, k < NMETRICS - 1 ? "m%d" : "gn", k);
                CHECK_NEAR(trainer_stats_metric(se, false, name, NAN), mean[e][k], 1e-12);
            }
        }
    }
    const char *last_val = NULL;
    for (int i = 0; i < nlines; i++)
        if (is_type(lines[i], "val"))
            last_val = lines[i];
    CHECK(last_val != NULL);
    if (last_val) {
        CHECK(jget(last_val, "val_loss") == stv.val_loss);
        CHECK(jget(last_val, "val_accuracy") == stv.val_accuracy);
        CHECK_EQ_INT(jget(last_val, "val_samples"), 200);
        CHECK_EQ_INT(jget(last_val, "epoch"), 2);
    }
    void *v = NULL;
    size_t vn = 0;
    CHECK_OK(ct_kv_get("tt/bad_name_rc", &v, &vn, 1000));
    CHECK_EQ_INT(v ? atoi(v) : 0, CT_EINVAL);
    free(v);

    /* the lines on stderr */
    char *e1 = tt_read_file(err1, NULL), *e2 = tt_read_file(err2, NULL);
    CHECK_EQ_INT(count(e1, "trainer: epoch 1/2 step 4/8"), 1);
    CHECK_EQ_INT(count(e1, "trainer: epoch 2/2 step 8/8"), 1);
    CHECK_EQ_INT(count(e1, "\r"), 0);
    /* the 4 plain lines, no others (other log lines may say "step" too) */
    CHECK_EQ_INT(count(e1, "samples/s | ETA"), 4);
    CHECK_EQ_INT(count(e1, "trainer: epoch 2/2: loss"), 1);
    CHECK(count(e2, "\r\033[Kepoch 3/3 step ") >= 1);
    CHECK_EQ_INT(count(e2, "epoch 3/3: loss"), 1);
    if (h_failures) {
        fprintf(stderr, "--- stderr of (a):\n%s--- of (b):\n%s---\n", e1 ? e1 : "", e2 ? e2 : "");
        fprintf(stderr, "--- metrics.jsonl, first lines:\n");
        for (int i = 0; i < nlines && i < 3; i++)
            fprintf(stderr, "%s\n", lines[i]);
    }
    free(e1);
    free(e2);
    free(text);

    /* (e) accumulation (2 batches per step): one record per optimizer step, covering both
     * batches of both ranks; the built-in step measures no gradient norm */
    char logdir2[200];
    snprintf(logdir2, sizeof logdir2, "%s/acc", dir);
    double peak = ct__cpu_peak_flops_per_core(); /* FP32 FLOP/s of one core: 1 to 1000 G */
    CHECK(peak > 1e9 && peak < 1e12);
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "sgd",
                                            .config = "lr=0.05",
                                            .num_replicas = 2,
                                            .batch_size = 50,
                                            .accumulate = 2,
                                            .epochs = 1,
                                            .seed = 3},
                            &t));
    trainer_stats sa = {0};
    if (t)
        CHECK_OK(trainer_train(t, .stats = &sa, .log_dir = logdir2,
                               .progress = TRAINER_PROGRESS_OFF, .flops_per_sample = MFU_FLOPS));
    trainer_shutdown(&t);
    CHECK_EQ_INT(sa.steps, 4);
    snprintf(path, sizeof path, "%s/metrics.jsonl", logdir2);
    char *text2 = tt_read_file(path, NULL);
    int n2 = split_lines(text2, lines, 256), nrec = 0;
    double acc_loss = 0;
    for (int i = 0; i < n2; i++) {
        if (!is_type(lines[i], "step"))
            continue;
        nrec++;
        CHECK_EQ_INT(jget(lines[i], "step"), nrec);
        CHECK_EQ_INT(jget(lines[i], "batch"), 2 * nrec);
        CHECK_EQ_INT(jget(lines[i], "samples"), 200);
        CHECK(isnan(jget(lines[i], "grad_norm")));
        /* MFU of 2 replicas of one CPU each: rate x flops / the replicas' peaks, each
         * replica's one core of this CPU, measured in the replica (a loop timed best of 12:
         * within a factor of 2 of this process's measure even on a busy machine) */
        double peaks = jget(lines[i], "peak_flops");
        CHECK(peaks > 2 * peak / 2 && peaks < 2 * peak * 2);
        CHECK_NEAR(jget(lines[i], "mfu_pct"),
                   100 * jget(lines[i], "samples_per_s") * MFU_FLOPS / peaks, 1e-9);
        acc_loss += jget(lines[i], "loss") * 200;
    }
    CHECK_EQ_INT(nrec, 4);
    CHECK_NEAR(acc_loss / 800, sa.train_loss, 1e-12);
    free(text2);

    /* (f) replica 1 killed at its 11th step (epoch 1, batch 3): the retried epoch's 8 records
     * follow whatever the lost group sent of it; its epoch record's loss is theirs */
    char logdir3[200];
    snprintf(logdir3, sizeof logdir3, "%s/retry", dir);
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "sgd",
                                            .loss = "probe",
                                            .config = "lr=0.05,probe_step=11,probe_action=die",
                                            .num_replicas = 2,
                                            .batch_size = 50,
                                            .epochs = 2,
                                            .seed = 3,
                                            .recovery = "restart"},
                            &t));
    trainer_stats sr = {0};
    if (t)
        CHECK_OK(trainer_train(t, .stats = &sr, .max_retries = 1, .log_dir = logdir3,
                               .progress = TRAINER_PROGRESS_OFF));
    trainer_shutdown(&t);
    CHECK_EQ_INT(sr.retries_used, 1);
    CHECK_EQ_INT(sr.steps, 16);
    snprintf(path, sizeof path, "%s/metrics.jsonl", logdir3);
    char *text3 = tt_read_file(path, NULL);
    int n3 = split_lines(text3, lines, 256), nepochs = 0, first = -1, last = -1;
    for (int i = 0; i < n3; i++) {
        nepochs += is_type(lines[i], "epoch");
        if (is_type(lines[i], "step") && jget(lines[i], "epoch") == 1) {
            if (first < 0)
                first = i;
            last = i;
        }
    }
    CHECK_EQ_INT(nepochs, 2);
    int lost = last - first + 1 - 8; /* records of the lost group's epoch 1 */
    printf("retry: %d step records of the lost group's epoch 1\n", lost);
    CHECK(lost >= 0 && lost <= 2);
    double retry_loss = 0;
    for (int i = last - 7, b = 1; first >= 0 && i <= last; i++, b++) {
        CHECK_EQ_INT(jget(lines[i], "batch"), b);
        CHECK_EQ_INT(jget(lines[i], "step"), 8 + b);
        retry_loss += jget(lines[i], "loss") * 100 / 800;
    }
    CHECK_NEAR(retry_loss, sr.train_loss, 1e-12);
    free(text3);

    /* (g) segments, in-line validation, a stop and a resume */
    char logdir4[200], logdir5[200], ckdir[200];
    snprintf(logdir4, sizeof logdir4, "%s/seg", dir);
    snprintf(logdir5, sizeof logdir5, "%s/seg-resumed", dir);
    snprintf(ckdir, sizeof ckdir, "%s/seg-ckpt", dir);
    int64_t seg_val_steps[2][4] = {{0}}; /* per run: the steps on_validate saw */
    trainer_stats sg = {0};
    for (int run = 0; run < 2; run++) {
        CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                                .data = "synthetic",
                                                .optimizer = "sgd",
                                                .scheduler = "steplr",
                                                .config = CFG,
                                                .num_replicas = 2,
                                                .batch_size = 50,
                                                .epochs = 2,
                                                .seed = 3},
                                &t));
        if (!t)
            break;
        int rc = trainer_train(
            t, .stats = &sg, .checkpoint_every_steps = 3, .checkpoint_dir = ckdir,
            .resume = run ? ckdir : NULL, .validate_every_steps = 4, .validate_every_epoch = true,
            .on_validate = run ? record_val : stop_at_val4, .user = seg_val_steps[run],
            .log_dir = run ? logdir5 : logdir4, .progress = TRAINER_PROGRESS_OFF, .report_ms = 20);
        trainer_shutdown(&t);
        if (run == 0) {
            CHECK(rc < 0);
            CHECK_EQ_INT(seg_val_steps[0][0], 4);
        } else {
            CHECK_OK(rc);
            CHECK_EQ_INT(sg.steps, 16);
        }
    }
    for (int run = 0; run < 2; run++) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", run ? logdir5 : logdir4);
        char *text4 = tt_read_file(path, NULL);
        int n4 = split_lines(text4, lines, 256), want = run ? 5 : 1, nval = 0;
        int64_t vsteps[8] = {0};
        const char *last_val = NULL;
        for (int i = 0; i < n4; i++) {
            if (is_type(lines[i], "val") && nval < 8) {
                vsteps[nval++] = (int64_t)jget(lines[i], "step");
                CHECK_EQ_INT(jget(lines[i], "epoch"), (jget(lines[i], "step") - 1) / 8);
                CHECK_EQ_INT(jget(lines[i], "val_samples"), 200);
                last_val = lines[i];
            }
            if (!is_type(lines[i], "step"))
                continue;
            int64_t e = (want - 1) / 8;
            CHECK_EQ_INT(jget(lines[i], "step"), want); /* each once, in order */
            CHECK_EQ_INT(jget(lines[i], "epoch"), e);
            CHECK_EQ_INT(jget(lines[i], "batch"), want - 8 * e);
            CHECK(jget(lines[i], "lr") == (e ? 0.025 : 0.05));
            want++;
        }
        CHECK_EQ_INT(want, run ? 17 : 5);
        printf("segments run %d: step records to %d, %d val records\n", run, want - 1, nval);
        if (run == 0) {
            CHECK_EQ_INT(nval, 1);
            CHECK_EQ_INT(vsteps[0], 4);
        } else {
            CHECK_EQ_INT(nval, 3);
            CHECK_EQ_INT(vsteps[0], 8);
            CHECK_EQ_INT(vsteps[1], 12);
            CHECK_EQ_INT(vsteps[2], 16);
            for (int k = 0; k < 3; k++)
                CHECK_EQ_INT(seg_val_steps[1][k], vsteps[k]);
            CHECK(last_val && jget(last_val, "val_loss") == sg.val_loss);
        }
        free(text4);
    }

    /* (c) TensorBoard reads the event file; same values as metrics.jsonl (and (g)'s resumed
     * run's, with validations during training) */
    char cmd[800];
    int py = 0;
    for (int k = 0; k < 2 && py != 77; k++) {
        snprintf(cmd, sizeof cmd, "python3 %s/check_tensorboard.py %s", CT_TEST_SRC_DIR,
                 k ? logdir5 : logdir);
        int st_py = system(cmd);
        py = WIFEXITED(st_py) ? WEXITSTATUS(st_py) : -1;
        if (py != 0 && py != 77) {
            fprintf(stderr, "check_tensorboard.py %s failed (exit %d)\n", k ? logdir5 : logdir, py);
            h_failures++;
        }
    }
    ct_shutdown();
    if (!h_failures) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
    if (h_failures) {
        fprintf(stderr, "test_progress: %d failure(s) (files in %s)\n", h_failures, dir);
        return 1;
    }
    if (py == 77) {
        printf("C checks passed; TensorBoard check skipped (no tensorboard package: python3 -m "
               "pip install tensorboard)\n");
        return 77;
    }
    printf("ok\n");
    return 0;
}
