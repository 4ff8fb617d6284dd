/* tests/trainer/test_custom_step.c — custom train and validate steps (trainer_opts.train_step /
 * .validate_step), on an embedded cluster with 2 replicas, the 784-64-10 MLP, 2 epochs of 2048
 * Fashion-MNIST samples:
 *   (a) a train step that re-implements the built-in (forward, loss, trainer_step_backward,
 *       trainer_step_optimizer) ends with weights bit-identical to the built-in step's;
 *   (b) a step with global gradient-norm clipping (max_norm from the config, read by the
 *       step and declared with trainer_register_step_keys; undeclared, the key is refused
 *       naming that function) keeps the replicas' weights equal, ends with weights different
 *       from the unclipped run, and its "grad_norm" metric in trainer_stats equals the mean
 *       the step's own independent norm computation (torch's: per-parameter norms rounded to
 *       f32, then their norm, over the synced gradients before clipping) left in the KV for
 *       each rank;
 *   (c) a validate step with a "top2" metric (ct_metrics_topk_correct): trainer_validate's
 *       val_metrics "top2" and val_accuracy, over both replicas' halves (500 samples), equal
 *       the values this test computes on the driver's model over the whole validation set;
 *   (d) unknown step names are refused by trainer_create naming the field and the name, with
 *       nothing started; a step that never calls trainer_step_backward, or calls it twice,
 *       fails the training with a message that says so (within seconds, no hang), also when only
 *       rank 1 breaks the rule while rank 0 waits in the gradient collective; a step that
 *       skips the optimizer on odd batches makes half the optimizer steps, replicas agreeing;
 *   (e) kill -9 of replica 1 in the middle of epoch 2 (the probe loss of tt.h) with the custom
 *       step: retries_used 1 and final weights bit-identical to the undisturbed custom run. */
#include "tt.h"

#include <pthread.h>

#include "ct/data.h"
#include "ct/metrics.h"

#define BASE "limit=2048,val_limit=500,lr=2e-3,step_size=1,gamma=0.5,probe_step=%d"

/* (a), (e): the built-in, written by a user */
static int reimpl_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x); /* (N,10) */
    ct_tensor *loss = y ? trainer_step_loss(s)(y, b->y) : NULL;    /* () */
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    if (rc == 0)
        rc = trainer_step_optimizer(s);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&y);
    return rc;
}

/* (b): clipping; the step reads max_norm (declared with trainer_register_step_keys, so the
 * driver's check-run, where steps do not run, counts it as read). */

static double gn_sum, gn_weight; /* this replica's own norms this epoch, times batch size */

static int clip_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);
    ct_tensor *loss = y ? trainer_step_loss(s)(y, b->y) : NULL;
    double norm = 0, mine = 0;
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    if (rc == 0) { /* the independent computation, from the same (synced) gradients */
        const ct_param_ref *ps;
        int np;
        rc = ct_module_params(trainer_step_model(s), &ps, &np);
        for (int i = 0; rc == 0 && i < np; i++) { /* torch: the norm of per-parameter f32 norms */
            double pn = 0;
            for (int64_t k = 0; k < ps[i].numel; k++)
                pn += (double)ps[i].grad[k] * (double)ps[i].grad[k];
            float pnf = (float)sqrt(pn);
            mine += (double)pnf * pnf;
        }
        mine = (float)sqrt(mine);
    }
    if (rc == 0)
        rc = trainer_step_clip_grad_norm(
            s, trainer_config_double(trainer_step_ctx(s), "max_norm", 1.0), &norm);
    if (rc == 0)
        rc = trainer_step_metric(s, "grad_norm", norm);
    if (rc == 0)
        rc = trainer_step_optimizer(s);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->samples = b->n;
        if (trainer_step_index(s) == 0)
            gn_sum = gn_weight = 0;
        gn_sum += mine * (double)b->n;
        gn_weight += (double)b->n;
        char key[64], val[96];
        snprintf(key, sizeof key, "tt/gn/%d/%lld", trainer_ctx_rank(trainer_step_ctx(s)),
                 (long long)trainer_step_epoch(s));
        snprintf(val, sizeof val, "%.17g %.17g", gn_sum, gn_weight);
        rc = ct_kv_put(key, val, strlen(val) + 1);
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&y);
    return rc;
}

/* (c): loss, top-1 and a top-2 metric */
static int top2_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int64_t top1 = 0, top2 = 0;
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);
    ct_tensor *plain = y ? ct_nn_to_plain(y) : NULL; /* (N,10) */
    ct_tensor *loss = plain ? trainer_step_loss(s)(plain, b->y) : NULL;
    int rc = loss ? 0 : CT_EINVAL;
    if (rc == 0)
        rc =
            ct_metrics_topk_correct(ct_tensor_f32(plain), ct_tensor_data(b->y), b->n, 10, 1, &top1);
    if (rc == 0)
        rc =
            ct_metrics_topk_correct(ct_tensor_f32(plain), ct_tensor_data(b->y), b->n, 10, 2, &top2);
    if (rc == 0)
        rc = trainer_step_metric(s, "top2", (double)top2 / (double)b->n);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->correct = top1;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&plain);
    ct_tensor_release(&y);
    return rc;
}

/* (d): breaks the rule */
static int no_backward_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);
    (void)out;
    ct_tensor_release(&y);
    return 0;
}

/* (d): breaks the rule the other way */
static int twice_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);
    ct_tensor *loss = y ? trainer_step_loss(s)(y, b->y) : NULL;
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    if (rc == 0)
        rc = trainer_step_backward(s, loss);
    (void)out;
    ct_tensor_release(&loss);
    ct_tensor_release(&y);
    return rc;
}

/* a rank-dependent branch: rank 1 skips backward at its 3rd batch, rank 0 does not */
static int rank1_skips_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    if (trainer_ctx_rank(trainer_step_ctx(s)) == 1 && trainer_step_index(s) == 2)
        return no_backward_step(s, b, out);
    return reimpl_step(s, b, out);
}

/* skips the update on odd batches (backward still runs: gradients stay synced) */
static int skip_odd_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);
    ct_tensor *loss = y ? trainer_step_loss(s)(y, b->y) : NULL;
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    if (rc == 0 && trainer_step_index(s) % 2 == 0)
        rc = trainer_step_optimizer(s);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&y);
    return rc;
}

static trainer *make(const char *train_step, const char *validate_step, const char *hook,
                     const char *cfg)
{
    trainer *t = NULL;
    if (trainer_create(&(trainer_opts){.model = "mlp",
                                       .data = "fashion_mnist",
                                       .optimizer = "adam",
                                       .loss = "probe",
                                       .scheduler = "steplr",
                                       .initialization_hook = hook,
                                       .train_step = train_step,
                                       .validate_step = validate_step,
                                       .config = cfg,
                                       .num_replicas = 2,
                                       .batch_size = 64,
                                       .epochs = 2,
                                       .seed = 7,
                                       .recovery = "restart"},
                       &t) < 0)
        fprintf(stderr, "trainer_create: %s\n", ct_last_error());
    return t;
}

/* Trains; returns the final weights (caller frees) and fills st. */
static float *run(const char *train_step, const char *validate_step, const char *hook,
                  const char *cfg, trainer_stats *st, int64_t *n, trainer **keep)
{
    trainer *t = make(train_step, validate_step, hook, cfg);
    float *w = NULL;
    CHECK(t != NULL);
    if (!t)
        return NULL;
    CHECK_OK(trainer_train(t, .stats = st));
    CHECK_EQ_INT(st->epoch, 2);
    CHECK(st->weights_agree);
    w = tt_weights(trainer_get_model(t), n);
    if (keep)
        *keep = t;
    else
        trainer_shutdown(&t);
    return w;
}

static int64_t differing(const float *a, const float *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; a && b && i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return a && b ? d : -1;
}

/* (c) on the driver: top-1 and top-2 hits of model over the first 500 test images. */
static int driver_topk(ct_module *m, int64_t *top1, int64_t *top2, int64_t *total)
{
    static const float mean[] = {0.2860f}, std[] = {0.3530f};
    ct_dataset *test = NULL, *val = NULL;
    ct_loader *ld = NULL;
    int rc = ct_dataset_open_mnist(NULL, false, &test);
    if (rc == 0)
        rc = ct_dataset_subset(test, 0, 500, &val);
    if (rc == 0)
        rc = ct_loader_new(
            val, &(ct_loader_opts){.batch_size = 500, .transform = {.mean = mean, .std = std}},
            &ld);
    *top1 = *top2 = *total = 0;
    ct_module_train(m, false);
    bool was = ct_autograd_set_enabled(false);
    ct_batch b;
    while (rc == 0 && (rc = ct_loader_next(ld, &b)) > 0) {
        int64_t xs[CT_DATA_MAX_DIMS + 1] = {b.n}, h1 = 0, h2 = 0;
        for (int d = 0; d < b.ndim; d++)
            xs[d + 1] = b.shape[d];
        ct_tensor *x = ct_tensor_wrap(CT_F32, b.ndim + 1, xs, (void *)b.x);
        ct_tensor *y = x ? ct_module_forward(m, x) : NULL;
        ct_tensor *plain = y ? ct_nn_to_plain(y) : NULL;
        rc = plain ? 0 : CT_EINVAL;
        if (rc == 0)
            rc = ct_metrics_topk_correct(ct_tensor_f32(plain), b.y, b.n, 10, 1, &h1);
        if (rc == 0)
            rc = ct_metrics_topk_correct(ct_tensor_f32(plain), b.y, b.n, 10, 2, &h2);
        *top1 += h1;
        *top2 += h2;
        *total += b.n;
        ct_tensor_release(&plain);
        ct_tensor_release(&y);
        ct_tensor_release(&x);
    }
    ct_autograd_set_enabled(was);
    ct_module_train(m, true);
    ct_loader_destroy(&ld);
    ct_dataset_destroy(&val);
    ct_dataset_destroy(&test);
    return rc < 0 ? rc : 0;
}

static void expect_refused(const char *train_step, const char *validate_step, const char *field,
                           const char *name)
{
    trainer *t = (trainer *)1;
    char cfg[200];
    snprintf(cfg, sizeof cfg, BASE, 0);
    int rc = trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .loss = "probe",
                                            .train_step = train_step,
                                            .validate_step = validate_step,
                                            .config = cfg,
                                            .num_replicas = 2},
                            &t);
    CHECK_EQ_INT(rc, CT_ENOTREG);
    CHECK(t == NULL);
    const char *m = ct_last_error();
    if (!strstr(m, field) || !strstr(m, name)) {
        fprintf(stderr, "message \"%s\" lacks \"%s\" / \"%s\"\n", m, field, name);
        h_failures++;
    }
    double total = 0, free_cpu = 0;
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK(total > 0 && free_cpu == total);
}

int main(void)
{
    tt_register();
    trainer_register_train_step("reimpl", reimpl_step);
    trainer_register_train_step("clip", clip_step);
    trainer_register_train_step("no_backward", no_backward_step);
    trainer_register_train_step("twice", twice_step);
    trainer_register_train_step("rank1_skips", rank1_skips_step);
    trainer_register_train_step("skip_odd", skip_odd_step);
    trainer_register_validate_step("top2", top2_step);
    trainer_register_step_keys("clip", "max_norm");
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    char cfg[200];
    snprintf(cfg, sizeof cfg, BASE, 0);
    int64_t n_a = 0, n_b = 0, n_c = 0, n_e = 0;
    trainer_stats st_a = {0}, st_b = {0}, st_c = {0}, st_e = {0};
    trainer *tb = NULL, *t = NULL;

    /* (d) first: cheap */
    expect_refused("nope", NULL, "opts.train_step", "\"nope\"");
    expect_refused(NULL, "top3", "opts.validate_step", "\"top3\"");
    expect_refused("top2", NULL, "opts.train_step", "\"top2\""); /* a validate step's name */
    CHECK_EQ_INT(trainer_register_train_step("reimpl", reimpl_step), CT_EEXIST);
    CHECK_EQ_INT(trainer_register_step_keys("nope", "max_norm"), CT_ENOTREG);
    CHECK_EQ_INT(trainer_register_step_keys("clip", ""), CT_EINVAL);
    t = make("no_backward", NULL, NULL, cfg);
    CHECK(t != NULL);
    if (t) {
        struct timespec a, z;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int rc = trainer_train(t, .max_retries = 0);
        CHECK_EQ_INT(rc, CT_ERETRY);
        if (!strstr(ct_last_error(), "without calling trainer_step_backward")) {
            fprintf(stderr, "message \"%s\" does not name the rule\n", ct_last_error());
            h_failures++;
        }
        clock_gettime(CLOCK_MONOTONIC, &z);
        int64_t ms = (z.tv_sec - a.tv_sec) * 1000 + (z.tv_nsec - a.tv_nsec) / 1000000;
        printf("(d) no backward: refused in %lld ms: %s\n", (long long)ms, ct_last_error());
        CHECK(ms < 20000);
        trainer_shutdown(&t);
    }

    t = make("rank1_skips", NULL, NULL, cfg);
    CHECK(t != NULL);
    if (t) {
        struct timespec a, z;
        clock_gettime(CLOCK_MONOTONIC, &a);
        CHECK_EQ_INT(trainer_train(t, .max_retries = 0), CT_ERETRY);
        clock_gettime(CLOCK_MONOTONIC, &z);
        int64_t ms = (z.tv_sec - a.tv_sec) * 1000 + (z.tv_nsec - a.tv_nsec) / 1000000;
        if (!strstr(ct_last_error(), "replica 1") ||
            !strstr(ct_last_error(), "without calling trainer_step_backward")) {
            fprintf(stderr, "message \"%s\" does not name replica 1 and the rule\n",
                    ct_last_error());
            h_failures++;
        }
        printf("(d) rank 1 skips backward: refused in %lld ms: %s\n", (long long)ms,
               ct_last_error());
        CHECK(ms < 20000); /* not comm_timeout_ms (60 s) */
        trainer_shutdown(&t);
    }
    t = make("twice", NULL, NULL, cfg);
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(trainer_train(t, .max_retries = 0), CT_ERETRY);
        if (!strstr(ct_last_error(), "trainer_step_backward: called twice")) {
            fprintf(stderr, "message \"%s\" does not name the rule\n", ct_last_error());
            h_failures++;
        }
        trainer_shutdown(&t);
    }
    trainer_stats st_s = {0};
    int64_t n_s = 0;
    float *w_s = run("skip_odd", NULL, NULL, cfg, &st_s, &n_s, NULL);
    CHECK_EQ_INT(st_s.steps, 16); /* 2 epochs x 16 batches, every other one updates */
    free(w_s);

    /* (a) the built-in vs the same written as a custom step */
    float *w_a = run(NULL, NULL, NULL, cfg, &st_a, &n_a, NULL);
    float *w_b = run("reimpl", "top2", NULL, cfg, &st_b, &n_b, &tb);
    CHECK_EQ_INT(n_a, n_b);
    CHECK_EQ_INT(differing(w_a, w_b, n_a), 0);
    CHECK_EQ_INT(st_a.steps, st_b.steps);
    CHECK(st_a.train_loss == st_b.train_loss);
    CHECK_EQ_INT(st_b.nmetrics, 0);
    printf("(a) built-in vs custom: %lld weights, train_loss %.9g vs %.9g\n", (long long)n_a,
           st_a.train_loss, st_b.train_loss);

    /* (c) the top2 validate step of run (b's trainer) against the driver's own count */
    if (tb) {
        trainer_stats vs = {0};
        int64_t top1 = 0, top2 = 0, total = 0;
        CHECK_OK(trainer_validate(tb, &vs));
        CHECK_OK(driver_topk(trainer_get_model(tb), &top1, &top2, &total));
        CHECK_EQ_INT(vs.val_samples, 500);
        CHECK_EQ_INT(total, 500);
        CHECK_EQ_INT(vs.val_nmetrics, 1);
        double v2 = trainer_stats_metric(&vs, true, "top2", -1);
        printf("(c) top2 %.6f (driver %.6f), top1 %.6f (driver %.6f)\n", v2,
               (double)top2 / (double)total, vs.val_accuracy, (double)top1 / (double)total);
        CHECK(fabs(v2 - (double)top2 / (double)total) < 1e-12);
        CHECK(fabs(vs.val_accuracy - (double)top1 / (double)total) < 1e-12);
        CHECK(v2 > vs.val_accuracy && v2 < 1.0);
        trainer_shutdown(&tb);
    }

    /* (b) clipping: weights agree across replicas, differ from (a), grad_norm as computed */
    char ccfg[240];
    snprintf(ccfg, sizeof ccfg, BASE ",max_norm=0.5", 0);
    trainer *tk = make("reimpl", NULL, NULL, ccfg); /* a step that declares no max_norm */
    CHECK(tk == NULL);
    if (!strstr(ct_last_error(), "\"max_norm\"") ||
        !strstr(ct_last_error(), "trainer_register_step_keys")) {
        fprintf(stderr, "message \"%s\" lacks the key or trainer_register_step_keys\n",
                ct_last_error());
        h_failures++;
    }
    trainer_shutdown(&tk);
    float *w_c = run("clip", NULL, NULL, ccfg, &st_c, &n_c, NULL);
    CHECK_EQ_INT(n_c, n_a);
    int64_t d = differing(w_a, w_c, n_a);
    CHECK(d > n_a / 2);
    double gs = 0, gw = 0;
    for (int r = 0; r < 2; r++) {
        char key[64];
        void *v = NULL;
        size_t len;
        double s1 = 0, w1 = 0;
        snprintf(key, sizeof key, "tt/gn/%d/1", r);
        CHECK_OK(ct_kv_get(key, &v, &len, 1000));
        CHECK(v && sscanf(v, "%lg %lg", &s1, &w1) == 2);
        free(v);
        gs += s1;
        gw += w1;
    }
    double gn = trainer_stats_metric(&st_c, false, "grad_norm", -1), want = gw > 0 ? gs / gw : -2;
    printf("(b) clip: grad_norm %.12g, independent %.12g; %lld of %lld weights differ from (a)\n",
           gn, want, (long long)d, (long long)n_a);
    CHECK_EQ_INT(st_c.nmetrics, 1);
    CHECK(fabs(gn - want) <= 1e-9 * want);
    CHECK(gn > 0.5 && isfinite(gn)); /* the clipping did act on most steps */

    /* (e) kill -9 of replica 1 at its 22nd step (epoch 2) with the custom step */
    char kcfg[200];
    snprintf(kcfg, sizeof kcfg, BASE, 16 + 6);
    t = make("reimpl", NULL, NULL, kcfg);
    CHECK(t != NULL);
    float *w_e = NULL;
    if (t) {
        ct_kv_put("tt/probe/armed", "1", 1);
        tt_killer k = {.t = t};
        pthread_t th;
        pthread_create(&th, NULL, tt_kill_probe, &k);
        CHECK_OK(trainer_train(t, .max_retries = 1, .stats = &st_e));
        pthread_join(th, NULL);
        CHECK(k.killed_pid > 0);
        CHECK_EQ_INT(k.killed_pid, k.replica_pid);
        CHECK(h_wait_gone(k.killed_pid, 2000));
        CHECK_EQ_INT(st_e.retries_used, 1);
        CHECK_EQ_INT(st_e.epoch, 2);
        CHECK_EQ_INT(st_e.steps, st_b.steps);
        CHECK(st_e.weights_agree);
        w_e = tt_weights(trainer_get_model(t), &n_e);
        CHECK_EQ_INT(n_e, n_b);
        CHECK_EQ_INT(differing(w_b, w_e, n_b), 0);
        printf("(e) kill -9 replica 1 (pid %d): retries_used %d, weights identical\n", k.killed_pid,
               st_e.retries_used);
        trainer_shutdown(&t);
    }
    free(w_a);
    free(w_b);
    free(w_c);
    free(w_e);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_custom_step: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
