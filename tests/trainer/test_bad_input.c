/* tests/trainer/test_bad_input.c — trainer_create refuses bad input with a message that names
 * it, and starts nothing: an unknown creator name, a missing required option, a config key no
 * creator reads, a value that does not parse, a malformed pair, a creator that fails, use_gpu
 * without a CUDA backend, elastic bounds out of order, a name registered twice, NULL
 * arguments. After each, *out is NULL
 * and every CPU of the embedded cluster is still free. Last, the good options work, with a
 * user-written data creator and an initialization hook that runs in every replica. */
#include "tt.h"

/* OPTS(...) overrides defaults with designated initializers, on purpose */
#pragma GCC diagnostic ignored "-Woverride-init"

static ct_module *broken_model(trainer_ctx *ctx)
{
    if (trainer_config_int(ctx, "hidden", 0) <= 0)
        trainer_ctx_fail(ctx, "config key \"hidden\" must be > 0");
    return NULL;
}

static void expect(const trainer_opts *o, int want_rc, const char *s1, const char *s2)
{
    trainer *t = (trainer *)1;
    int rc = trainer_create(o, &t);
    CHECK_EQ_INT(rc, want_rc);
    CHECK(t == NULL);
    const char *m = ct_last_error();
    if ((s1 && !strstr(m, s1)) || (s2 && !strstr(m, s2))) {
        fprintf(stderr, "message \"%s\" lacks \"%s\" / \"%s\"\n", m, s1, s2 ? s2 : "");
        h_failures++;
    }
    double total = 0, free_cpu = 0;
    CHECK_OK(ct_cluster_resources("CPU", &total, &free_cpu));
    CHECK(total > 0 && free_cpu == total);
    trainer_shutdown(&t);
}

#define OPTS(...)                                                                                  \
    (&(trainer_opts){.model = "mlp",                                                               \
                     .data = "fashion_mnist",                                                      \
                     .optimizer = "adam",                                                          \
                     .config = "limit=256,val_limit=10",                                           \
                     .num_replicas = 2,                                                            \
                     __VA_ARGS__})

int main(void)
{
    tt_register();
    trainer_register_model("broken", broken_model);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));

    expect(OPTS(.model = "nope"), CT_ENOENT, "opts.model", "\"nope\"");
    expect(OPTS(.optimizer = "adamm"), CT_ENOENT, "opts.optimizer", "\"adamm\"");
    expect(OPTS(.scheduler = "warp"), CT_ENOENT, "opts.scheduler", "\"warp\"");
    expect(OPTS(.loss = "hinge"), CT_ENOENT, "opts.loss", "\"hinge\"");
    expect(OPTS(.initialization_hook = "setup_gpu"), CT_ENOENT, "opts.initialization_hook",
           "\"setup_gpu\"");
    expect(OPTS(.data = NULL), CT_EINVAL, "opts.data is required", NULL);
    expect(OPTS(.optimizer = NULL), CT_EINVAL, "opts.optimizer is required", NULL);
    expect(OPTS(.config = "limit=256,lrr=0.1"), CT_EINVAL, "\"lrr\"", "not read");
    expect(OPTS(.config = "limit=256,lr=fast"), CT_EINVAL, "\"lr\"", "\"fast\" is not a number");
    expect(OPTS(.config = "limit=256,lr"), CT_EINVAL, "\"lr\"", "not key=value");
    expect(OPTS(.config = "lr=1,lr=2"), CT_EINVAL, "\"lr\"", "twice");
    expect(OPTS(.config = "limit=256,beta1=1.5"), CT_EINVAL, "beta1", NULL);
    expect(OPTS(.model = "broken"), CT_EINVAL, "model creator \"broken\"", "\"hidden\" must be");
    expect(OPTS(.num_replicas = -1), CT_EINVAL, "opts.num_replicas", NULL);
    expect(OPTS(.batch_size = -5), CT_EINVAL, "opts.batch_size", NULL);
    /* elastic bounds: min_replicas <= num_replicas (2) <= max_replicas */
    expect(OPTS(.min_replicas = 3), CT_EINVAL, "min_replicas 3 <= num_replicas 2", NULL);
    expect(OPTS(.max_replicas = 1), CT_EINVAL, "num_replicas 2 <= max_replicas 1", NULL);
    expect(OPTS(.max_replicas = 2000), CT_EINVAL, "opts.max_replicas 2000", NULL);
    expect(OPTS(.use_gpu = true), CT_ENOSYS, "use_gpu", NULL);
    expect(OPTS(.config = "limit=256,data_dir=/nonexistent"), CT_ENOENT, "data creator",
           "/nonexistent");
    expect(NULL, CT_EINVAL, "opts", NULL);

    CHECK_EQ_INT(trainer_register_model("mlp", tt_mlp), CT_EEXIST);
    CHECK(strstr(ct_last_error(), "\"mlp\"") != NULL);
    CHECK_EQ_INT(trainer_register_model("", tt_mlp), CT_EINVAL);
    CHECK_EQ_INT(trainer_train(NULL), CT_EINVAL);
    CHECK_EQ_INT(trainer_validate(NULL, NULL), CT_EINVAL);

    /* the good options work, so the failures above were about what they changed */
    trainer *t = NULL;
    CHECK_OK(trainer_create(OPTS(.epochs = 1), &t));
    CHECK(t && trainer_get_model(t));
    /* a bad wait bound or lr factor is refused before anything starts */
    CHECK_EQ_INT(trainer_train(t, .min_replicas_timeout_ms = -1), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "min_replicas_timeout_ms") != NULL);
    CHECK_EQ_INT(trainer_scale_lr(t, 0), CT_EINVAL);
    CHECK_EQ_INT(trainer_scale_lr(t, NAN), CT_EINVAL);
    CHECK_EQ_INT(trainer_scale_lr(NULL, 2), CT_EINVAL);
    trainer_shutdown(&t);
    CHECK(t == NULL);

    /* a user-written data creator and an initialization hook, run in every replica first */
    CHECK_OK(trainer_create(OPTS(.data = "synthetic", .config = "n=1000,lr=1e-3", .epochs = 2,
                                 .batch_size = 32, .initialization_hook = "tt_hook"),
                            &t));
    CHECK_EQ_INT(tt_hook_runs, 1); /* the driver's check-run */
    trainer_stats st = {0};
    if (t) {
        CHECK_OK(trainer_train(t, .validate_every_epoch = true, .stats = &st));
        CHECK_EQ_INT(st.epoch, 2);
        CHECK_EQ_INT(st.val_samples, 200);
        CHECK(st.val_accuracy > 0.9);
        printf("synthetic: val_accuracy %.3f train_loss %.4f\n", st.val_accuracy, st.train_loss);
        for (int r = 0; r < 2; r++) {
            char key[32];
            void *v = NULL;
            size_t n = 0;
            trainer_replica_info info;
            snprintf(key, sizeof key, "tt/hook/%d", r);
            CHECK_OK(ct_kv_get(key, &v, &n, 1000));
            CHECK_OK(trainer_replica_info_get(t, r, &info));
            CHECK_EQ_INT(v ? atoi(v) : -1, info.pid);
            free(v);
        }
    }
    trainer_shutdown(&t);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_bad_input: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
