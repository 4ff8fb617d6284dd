/* tests/trainer/test_bad_input.c — trainer_create refuses bad input with a message that names
 * it, and starts nothing: an unknown creator name (CT_ENOTREG, the registered names listed), a
 * missing required option, a config key no creator reads, a value that does not parse, a
 * malformed pair, a bad device name or devices_per_replica (more than 1 on the CPU, or past the
 * last index), a bad pipeline_stages, micro_batches or schedule (and a pipeline of a model
 * other than a GPT: CT_ENOSYS), a
 * precision that is not f32/bf16/f16 or that this CPU has no kernels for, a
 * creator that fails, use_gpu without a CUDA backend, elastic bounds out of order, a name
 * registered twice or after ct_init (refused at the registration, and named by trainer_create),
 * data whose samples the model does not take or an output the loss does not take (CT_ERANGE naming
 * the shapes), NULL arguments. After each, *out is NULL and every CPU of the embedded cluster is
 * still free. Last, the good options work, with a user-written data creator and an initialization
 * hook that runs in every replica; and a trainer that asks for 3 replicas on 2 CPUs trains with 2
 * and says so in a warning. */
#include "tt.h"

/* OPTS(...) overrides defaults with designated initializers, on purpose */
#pragma GCC diagnostic ignored "-Woverride-init"

static ct_module *broken_model(trainer_ctx *ctx)
{
    if (trainer_config_int(ctx, "hidden", 0) <= 0)
        trainer_ctx_fail(ctx, "config key \"hidden\" must be > 0");
    return NULL;
}

/* A model for 3 features: the data's samples have 784. */
static ct_module *lin3_model(trainer_ctx *ctx)
{
    (void)ctx;
    return ct_nn_linear_new(3, 10, true);
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
    trainer_register_model("lin3", lin3_model);
    if (!getenv("CT_MODE")) /* the driver only: its replicas (actor mode) lack the name */
        trainer_register_model("driver_only", tt_mlp);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));

    /* an unknown name: its own code, and the names there are */
    expect(OPTS(.model = "nope"), CT_ENOTREG, "opts.model: no model named \"nope\"",
           "registered: \"mlp\", \"cnn\", \"broken\", \"lin3\"");
    expect(OPTS(.optimizer = "adamm"), CT_ENOTREG, "\"adamm\"",
           "registered: \"adam\", \"adamw\", \"sgd\"");
    expect(OPTS(.scheduler = "warp"), CT_ENOTREG, "opts.scheduler", "\"warp\"");
    expect(OPTS(.loss = "hinge"), CT_ENOTREG, "opts.loss", "\"cross_entropy\"");
    expect(OPTS(.initialization_hook = "setup_gpu"), CT_ENOTREG, "opts.initialization_hook",
           "registered: \"tt_hook\"");
    CHECK_STR(ct_strerror(CT_ENOTREG), "name not registered");
    /* a creator registered after ct_init: refused there (replicas would never see it; they
     * died of SIGSEGV on the missing name), and trainer_create says why the name is missing */
    CHECK_EQ_INT(trainer_register_model("late", tt_mlp), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "trainer_register_model(\"late\"): called after ct_init()"));
    expect(OPTS(.model = "late"), CT_ENOTREG, "model \"late\" was registered after ct_init()",
           "before ct_init()");
    /* a name only the driver registered: the replicas fail their setup naming it (they died
     * of SIGSEGV calling the missing creator), at once: the same on any node, no retry spent */
    trainer *t = NULL;
    trainer_stats st0 = {0};
    CHECK_OK(
        trainer_create(OPTS(.model = "driver_only", .data = "synthetic", .config = "n=50"), &t));
    CHECK_EQ_INT(t ? trainer_train(t, .max_retries = 3, .stats = &st0) : 0, CT_ENOTREG);
    CHECK_EQ_INT(st0.retries_used, 0);
    CHECK(strstr(ct_last_error(), "not retried") != NULL);
    if (!strstr(ct_last_error(), "no model named \"driver_only\" is registered") ||
        !strstr(ct_last_error(), "registered before ct_init(), in every process")) {
        fprintf(stderr, "message \"%s\" does not name the missing creator\n", ct_last_error());
        h_failures++;
    }
    trainer_shutdown(&t);
    /* shapes: one sample through the model and the loss at create time */
    expect(OPTS(.model = "lin3", .data = "synthetic", .config = "n=50"), CT_ERANGE,
           "opts.model \"lin3\" does not take the samples of opts.data \"synthetic\": a batch "
           "x (1, 784)",
           "x (1,784) vs weight (10,3)");
    expect(OPTS(.loss = "mse", .data = "synthetic", .config = "n=50"), CT_ERANGE,
           "opts.loss \"mse\" does not take the output (1, 10) of opts.model \"mlp\"",
           "labels (1)");
    expect(OPTS(.data = NULL), CT_EINVAL, "opts.data is required", NULL);
    expect(OPTS(.optimizer = NULL), CT_EINVAL, "opts.optimizer is required", NULL);
    expect(OPTS(.config = "limit=256,lrr=0.1"), CT_EINVAL, "\"lrr\"", "not read");
    /* a typo gets the nearest key a creator asked for (present or not) */
    expect(OPTS(.config = "limit=256,val_limt=100"), CT_EINVAL, "\"val_limt\"",
           "did you mean \"val_limit\"?");
    expect(OPTS(.model = "gpt", .config = "limit=256,n_embed=32"), CT_EINVAL, "\"n_embed\"",
           "did you mean \"n_embd\"?");
    expect(OPTS(.config = "limit=256,frobnicate=1"), CT_EINVAL, "\"frobnicate\"", "a typo?");
    expect(OPTS(.config = "limit=256,lr=fast"), CT_EINVAL, "\"lr\"", "\"fast\" is not a number");
    expect(OPTS(.config = "limit=256,lr"), CT_EINVAL, "\"lr\"", "not key=value");
    expect(OPTS(.config = "lr=1,lr=2"), CT_EINVAL, "\"lr\"", "twice");
    expect(OPTS(.config = "limit=256,precision=half"), CT_EINVAL, "\"precision\"", "\"half\"");
    expect(OPTS(.config = "limit=256,comm_topology=tree"), CT_EINVAL, "\"comm_topology\"",
           "\"tree\"");
    /* f16 on CPU replicas: this CPU's oneDNN has no f16 kernels (none has, in oneDNN 2.x) */
    expect(OPTS(.config = "limit=256,precision=f16"), CT_ENOSYS, "\"precision\" = f16",
           "AVX512_FP16");
    /* the loss scaler's keys are read only with f16 */
    expect(OPTS(.config = "limit=256,scaler_init_scale=1024"), CT_EINVAL, "\"scaler_init_scale\"",
           "not read");
    expect(OPTS(.config = "limit=256,beta1=1.5"), CT_EINVAL, "beta1", NULL);
    expect(OPTS(.model = "broken"), CT_EINVAL, "model creator \"broken\"", "\"hidden\" must be");
    expect(OPTS(.num_replicas = -1), CT_EINVAL, "opts.num_replicas", NULL);
    expect(OPTS(.batch_size = -5), CT_EINVAL, "opts.batch_size", NULL);
    /* elastic bounds: min_replicas <= num_replicas (2) <= max_replicas */
    expect(OPTS(.min_replicas = 3), CT_EINVAL, "min_replicas 3 <= num_replicas 2", NULL);
    expect(OPTS(.max_replicas = 1), CT_EINVAL, "num_replicas 2 <= max_replicas 1", NULL);
    expect(OPTS(.max_replicas = 2000), CT_EINVAL, "opts.max_replicas 2000", NULL);
    expect(OPTS(.use_gpu = true), CT_ENOSYS, "use_gpu", NULL);
    expect(OPTS(.device = "tpu"), CT_EINVAL, "opts.device \"tpu\"", "\"checkdev\"");
    /* recovery: "live" or "restart", as an option or a config key */
    expect(OPTS(.recovery = "fast"), CT_EINVAL, "opts.recovery \"fast\"", "\"restart\"");
    expect(OPTS(.config = "limit=256,val_limit=10,recovery=later"), CT_EINVAL,
           "config key \"recovery\" = \"later\"", "not \"live\" or \"restart\"");
    expect(OPTS(.device = "cuda:9"), CT_EINVAL, "opts.device \"cuda:9\"", "\"checkdev:N\"");
    expect(OPTS(.device = "cpu:1"), CT_EINVAL, "opts.device \"cpu:1\"", "\"cuda:N\"");
    expect(OPTS(.config = "limit=256,devices_per_replica=0"), CT_EINVAL,
           "\"devices_per_replica\" = \"0\"", "from 1 to 4");
    expect(OPTS(.config = "limit=256,devices_per_replica=two"), CT_EINVAL,
           "\"devices_per_replica\" = \"two\"", NULL);
    expect(OPTS(.config = "limit=256,devices_per_replica=2"), CT_EINVAL,
           "\"devices_per_replica\" = 2 needs opts.device", NULL);
    expect(OPTS(.device = "checkdev:3", .config = "limit=256,devices_per_replica=2"), CT_EINVAL,
           "past the last index", NULL);
    expect(OPTS(.use_gpu = true, .device = "checkdev"), CT_EINVAL, "use_gpu with opts.device",
           NULL);
    /* the pipeline keys, checked by name; a pipeline of a model it cannot split: CT_ENOSYS */
    expect(OPTS(.config = "limit=256,val_limit=10,pipeline_stages=0"), CT_EINVAL,
           "\"pipeline_stages\" = 0", "from 1 to 1024");
    expect(OPTS(.config = "limit=256,val_limit=10,pipeline_stages=two"), CT_EINVAL,
           "\"pipeline_stages\": \"two\" is not an integer", NULL);
    expect(OPTS(.batch_size = 64, .config = "limit=256,val_limit=10,micro_batches=65"), CT_EINVAL,
           "\"micro_batches\" = 65", "batch size, 64");
    expect(OPTS(.config = "limit=256,val_limit=10,schedule=zb"), CT_EINVAL, "\"schedule\" = \"zb\"",
           "\"gpipe\", \"1f1b\"");
    expect(OPTS(.config = "limit=256,val_limit=10,pipeline_stage=2"), CT_EINVAL,
           "did you mean \"pipeline_stages\"", NULL);
    expect(OPTS(.config = "limit=256,val_limit=10,pipeline_stages=2,micro_batches=4"), CT_ENOSYS,
           "\"pipeline_stages\" = 2", "a model other than one GPT");
    {
        trainer *t = NULL;
        CHECK_OK(trainer_create(OPTS(.config =
                                         "limit=256,val_limit=10,pipeline_stages=1,micro_batches=1,"
                                         "schedule=gpipe"),
                                &t));
        trainer_shutdown(&t);
    }
    expect(OPTS(.config = "limit=256,data_dir=/nonexistent"), CT_ENOENT, "data creator",
           "/nonexistent");
    expect(NULL, CT_EINVAL, "opts", NULL);

    CHECK_EQ_INT(trainer_register_model("mlp", tt_mlp), CT_EEXIST);
    CHECK(strstr(ct_last_error(), "\"mlp\"") != NULL);
    CHECK_EQ_INT(trainer_register_model("", tt_mlp), CT_EINVAL);
    CHECK_EQ_INT(trainer_train(NULL), CT_EINVAL);
    CHECK_EQ_INT(trainer_validate(NULL, NULL), CT_EINVAL);

    /* the good options work, so the failures above were about what they changed */
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

    /* 3 replicas asked, 2 CPUs: it trains with 2, and a warning says so (and how to insist) */
    CHECK_OK(trainer_create(OPTS(.data = "synthetic", .config = "n=200", .num_replicas = 3), &t));
    char log[] = "/tmp/ct-bad-input.XXXXXX";
    int fd = mkstemp(log), saved = dup(STDERR_FILENO);
    CHECK(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    int rc = t ? trainer_train(t, .stats = &st) : CT_EINVAL;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fd);
    CHECK_OK(rc);
    CHECK_EQ_INT(st.replicas, 2);
    char *text = tt_read_file(log, NULL);
    const char *want = "training with 2 replicas of the 3 asked (num_replicas): only 2 fit";
    if (!text || !strstr(text, "WARN") || !strstr(text, want) ||
        !strstr(text, "set min_replicas = 3 to wait")) {
        fprintf(stderr, "the log lacks \"%s\":\n%s\n", want, text ? text : "(none)");
        h_failures++;
    }
    free(text);
    unlink(log);
    trainer_shutdown(&t);
    ct_shutdown();
    if (h_failures)
        fprintf(stderr, "test_bad_input: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
