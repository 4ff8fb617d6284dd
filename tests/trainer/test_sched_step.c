/* tests/trainer/test_sched_step.c — when the scheduler steps (trainer_opts.scheduler_step):
 * "epoch", "batch" and "manual", with the built-in "warmup_cosine" scheduler. 2 replicas of
 * the MLP on the synthetic blobs, 160 samples per replica in batches of 32: 5 batches per
 * epoch, 2 epochs. A train step records the lr each batch's update uses as the metric "lr"
 * (averaged by the driver over the last epoch's batches); the expected average comes from
 * the same scheduler run here on a one-parameter optimizer, stepped as each mode steps it:
 * after every epoch, after every optimizer step, or (manual) by the step itself after every
 * odd batch. Then "batch" with accumulate = 2 (groups 2, 2, 1: 3 optimizer steps, and 3
 * scheduler steps, per epoch). A bad scheduler_step is refused. */
#include "tt.h"

#define CFG "n=400,lr=0.1,warmup_steps=3,total_steps=9,start_factor=0.25,eta_min=0.001"
#define NB 5 /* batches per epoch */

static int lr_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int rc = trainer_step_metric(s, "lr", ct_optim_get_lr(trainer_step_optim(s), 0));
    if (rc == 0)
        rc = trainer_builtin_train_step(s, b, out);
    return rc;
}

/* manual: the step decides (here: after every odd batch) */
static int lr_manual_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int rc = lr_step(s, b, out);
    if (rc == 0 && trainer_step_index(s) % 2 == 1)
        rc = ct_sched_step(trainer_step_scheduler(s));
    return rc;
}

/* The mean over the last epoch's batches of the lr each used, with the scheduler stepped as
 * mode says (for "batch": after the last batch of each group of k). */
static double expected(const char *mode, int k)
{
    float p = 0, g = 0;
    ct_param_ref ref = {"p", &p, &g, 1};
    ct_optim *o = ct_optim_sgd_new(&ref, 1, &(ct_sgd_opts){.lr = 0.1});
    ct_sched *s = ct_sched_warmup_cosine_new(
        o, &(ct_warmup_cosine_opts){
               .warmup_steps = 3, .total_steps = 9, .start_factor = 0.25, .eta_min = 0.001});
    double sum = 0;
    for (int e = 0; e < 2; e++) {
        for (int i = 0; i < NB; i++) {
            if (e == 1)
                sum += ct_optim_get_lr(o, 0);
            bool update = (i + 1) % k == 0 || i == NB - 1;
            if ((!strcmp(mode, "batch") && update) || (!strcmp(mode, "manual") && i % 2 == 1))
                ct_sched_step(s);
        }
        if (!strcmp(mode, "epoch"))
            ct_sched_step(s);
    }
    ct_sched_destroy(&s);
    ct_optim_destroy(&o);
    return sum / NB;
}

static void run(const char *mode, int k)
{
    trainer *t = NULL;
    trainer_stats st = {0};
    int rc =
        trainer_create(&(trainer_opts){.model = "mlp",
                                       .data = "synthetic",
                                       .optimizer = "sgd",
                                       .scheduler = "warmup_cosine",
                                       .scheduler_step = mode,
                                       .train_step = !strcmp(mode, "manual") ? "lr_manual" : "lr",
                                       .config = CFG,
                                       .num_replicas = 2,
                                       .batch_size = 32,
                                       .accumulate = k,
                                       .epochs = 2,
                                       .seed = 3},
                       &t);
    if (rc < 0) {
        fprintf(stderr, "trainer_create (%s): %s\n", mode, ct_last_error());
        h_failures++;
        return;
    }
    CHECK_OK(trainer_train(t, .stats = &st));
    CHECK_EQ_INT(st.epoch, 2);
    CHECK_EQ_INT(st.steps, k > 1 ? 6 : 10);
    double got = trainer_stats_metric(&st, false, "lr", NAN), want = expected(mode, k);
    printf("%s (accumulate %d): mean lr of epoch 2 %.12g, expected %.12g\n", mode, k, got, want);
    if (!(fabs(got - want) <= 1e-12)) {
        fprintf(stderr, "scheduler_step \"%s\": lr %.17g, want %.17g\n", mode, got, want);
        h_failures++;
    }
    trainer_shutdown(&t);
}

int main(void)
{
    tt_register();
    trainer_register_train_step("lr", lr_step);
    trainer_register_train_step("lr_manual", lr_manual_step);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));

    trainer *bad = NULL;
    CHECK_EQ_INT(trainer_create(&(trainer_opts){.model = "mlp",
                                                .data = "synthetic",
                                                .optimizer = "sgd",
                                                .scheduler = "warmup_cosine",
                                                .scheduler_step = "sometimes",
                                                .config = CFG},
                                &bad),
                 CT_EINVAL);
    CHECK(bad == NULL);
    /* the three modes give three different lr sequences: each check can tell them apart */
    CHECK(fabs(expected("epoch", 1) - expected("batch", 1)) > 1e-3);
    CHECK(fabs(expected("batch", 1) - expected("manual", 1)) > 1e-3);
    CHECK(fabs(expected("batch", 1) - expected("batch", 2)) > 1e-3);

    run("epoch", 1);
    run("batch", 1);
    run("manual", 1);
    run("batch", 2);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_sched_step: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
