/* tests/trainer/test_multi_model.c — several models per trainer (include/ct/trainer.h "Several
 * models"). Trains examples/dcgan_model.h's DCGAN (generator model 0, discriminator model 1,
 * a custom step alternating their optimizers) 2 epochs on 1024 Fashion-MNIST samples with 2
 * replicas and checks: each optimizer step changed every parameter of its own model and none of
 * the other's (the step's "update_violations" metric, 0 in every epoch), every parameter of
 * both models changed over the run, both losses finite in every epoch, the replicas' weights
 * agree, and trainer_save writes both models and optimizers with their prefixes ("m0.",
 * "m1.", "optim0.", "optim1.", nothing else), which a second trainer restores exactly. Also:
 * a single-model checkpoint's keys are unchanged (no prefixes), trainer_create refuses bad
 * lists / the built-in step / accumulation with several models, and a step that reduces one
 * model twice fails with a message naming it. */
#include "tt.h"

#include "examples/dcgan_model.h"

/* The tensor names of a saved checkpoint, in header order, into names (each "name\n"). Returns
 * the count, or -1. The header is ct's: "<name>":{"dtype":... for every tensor. */
static int tensor_names(const char *path, char *names, size_t cap)
{
    size_t len = 0;
    char *b = tt_read_file(path, &len);
    if (!b || len < 8)
        return -1;
    uint64_t hl;
    memcpy(&hl, b, 8);
    if (hl + 8 > len) {
        free(b);
        return -1;
    }
    b[8 + hl] = 0;
    const char *h = b + 8;
    int n = 0;
    names[0] = 0;
    for (const char *p = strstr(h, "\":{\"dtype\""); p; p = strstr(p + 1, "\":{\"dtype\"")) {
        const char *q = p - 1;
        while (q > h && *q != '"')
            q--;
        size_t used = strlen(names);
        snprintf(names + used, cap - used, "%.*s\n", (int)(p - q - 1), q + 1);
        n++;
    }
    free(b);
    return n;
}

/* ---- a step that breaks the rule: model 1 reduced twice ---- */
static int twice_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        ct_tensor *y = ct_module_forward(trainer_step_model_at(s, 1), b->x);
        ct_tensor *loss = y ? trainer_step_loss_at(s, 1)(y, b->y) : NULL;
        rc = loss ? trainer_step_backward_model(s, 1, loss) : CT_EINVAL;
        ct_tensor_release(&loss);
        ct_tensor_release(&y);
    }
    out->samples = b->n;
    return rc;
}

/* ---- the DCGAN's epochs ---- */
typedef struct seen {
    int epochs, finite, violations_ok;
} seen;

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t;
    seen *s = user;
    double ld = trainer_stats_metric(st, false, "loss_d", NAN),
           lg = trainer_stats_metric(st, false, "loss_g", NAN),
           v = trainer_stats_metric(st, false, "update_violations", -1);
    printf("epoch %lld: loss_d=%.4f loss_g=%.4f update_violations=%g\n", (long long)st->epoch, ld,
           lg, v);
    s->epochs++;
    s->finite += isfinite(ld) && isfinite(lg) && ld > 0 && lg > 0;
    s->violations_ok += v == 0;
    return 0;
}

static void check_all_changed(ct_module *m, const float *before, const char *what)
{
    int bad = dcgan_violations(m, before, true);
    if (bad) {
        fprintf(stderr, "%s: %d parameters did not change over training\n", what, bad);
        h_failures++;
    }
}

static void compare_modules(ct_module *a, ct_module *b)
{
    const ct_named_tensor *sa, *sb;
    int na = 0, nb = 0;
    CHECK_OK(ct_module_state_dict(a, &sa, &na));
    CHECK_OK(ct_module_state_dict(b, &sb, &nb));
    CHECK_EQ_INT(na, nb);
    for (int i = 0; i < na && i < nb; i++) {
        size_t bytes =
            (size_t)ct_tensor_numel(sa[i].tensor) * ct_dtype_size(ct_tensor_dtype(sa[i].tensor));
        if (strcmp(sa[i].name, sb[i].name) ||
            memcmp(ct_tensor_data(sa[i].tensor), ct_tensor_data(sb[i].tensor), bytes)) {
            fprintf(stderr, "state entry %s differs after restore\n", sa[i].name);
            h_failures++;
        }
    }
}

static void test_create_errors(void)
{
    trainer *t = NULL;
    trainer_opts o = {
        .model = "mlp,mlp", .data = "synthetic", .optimizer = "adam", .config = "n=200"};
    CHECK_EQ_INT(trainer_create(&o, &t), CT_EINVAL); /* the built-in step */
    CHECK(strstr(ct_last_error(), "opts.train_step") != NULL);
    o.train_step = "twice";
    o.accumulate = 2;
    CHECK_EQ_INT(trainer_create(&o, &t), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "opts.accumulate") != NULL);
    o.accumulate = 0;
    o.optimizer = "adam,adam,adam";
    CHECK_EQ_INT(trainer_create(&o, &t), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "opts.optimizer") != NULL);
    o.optimizer = "adam";
    o.model = "mlp,nosuch";
    CHECK_EQ_INT(trainer_create(&o, &t), CT_ENOTREG);
    CHECK(strstr(ct_last_error(), "\"nosuch\"") != NULL);
    o.model = "mlp,";
    CHECK_EQ_INT(trainer_create(&o, &t), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "empty name") != NULL);
    CHECK(t == NULL);
}

/* A single-model trainer's checkpoint keys, exactly as before models could be several. */
static void test_single_model_keys(const char *dir)
{
    trainer *t = NULL;
    char path[256], names[4096];
    snprintf(path, sizeof path, "%s/single.safetensors", dir);
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp",
                                            .data = "synthetic",
                                            .optimizer = "adam",
                                            .scheduler = "steplr",
                                            .config = "n=200",
                                            .num_replicas = 1},
                            &t));
    if (!t)
        return;
    CHECK_OK(trainer_train(t)); /* Adam's state tensors exist after its first step */
    CHECK_EQ_INT(trainer_num_models(t), 1);
    CHECK(trainer_get_model_at(t, 0) == trainer_get_model(t));
    CHECK(trainer_get_model_at(t, 1) == NULL);
    CHECK_OK(trainer_save(t, path));
    int n = tensor_names(path, names, sizeof names);
    printf("single-model checkpoint tensors:\n%s", names);
    CHECK_EQ_INT(n, 12);
    CHECK_STR(names, "1.weight\n1.bias\n3.weight\n3.bias\n"
                     "optim.1.weight.exp_avg\noptim.1.weight.exp_avg_sq\n"
                     "optim.1.bias.exp_avg\noptim.1.bias.exp_avg_sq\n"
                     "optim.3.weight.exp_avg\noptim.3.weight.exp_avg_sq\n"
                     "optim.3.bias.exp_avg\noptim.3.bias.exp_avg_sq\n");
    size_t len = 0;
    char *b = tt_read_file(path, &len);
    /* the optimizer's other state: unprefixed keys */
    CHECK(b &&
          strstr(b + 8,
                 "\"optimizer_state\":\"{\\\"type\\\":\\\"adam\\\",\\\"param_groups.0.lr\\\":"));
    free(b);
    trainer_shutdown(&t);
    unlink(path);
}

static void test_twice(void)
{
    trainer *t = NULL;
    CHECK_OK(trainer_create(&(trainer_opts){.model = "mlp,mlp",
                                            .data = "synthetic",
                                            .optimizer = "sgd",
                                            .train_step = "twice",
                                            .config = "n=200",
                                            .num_replicas = 1},
                            &t));
    if (!t)
        return;
    CHECK_EQ_INT(trainer_num_models(t), 2);
    CHECK(trainer_get_model_at(t, 1) != NULL && trainer_get_model_at(t, 1) != trainer_get_model(t));
    int rc = trainer_train(t, .max_retries = 0);
    CHECK(rc < 0);
    printf("twice: %s\n", ct_last_error());
    CHECK(strstr(ct_last_error(), "model 1 reduced twice") != NULL);
    trainer_shutdown(&t);
}

static void test_dcgan(const char *dir)
{
    char a[256], b[256], names[16384];
    snprintf(a, sizeof a, "%s/dcgan.safetensors", dir);
    snprintf(b, sizeof b, "%s/dcgan2.safetensors", dir);
    trainer_opts o = dcgan_opts("limit=1024,val_limit=100,check_updates=1", 2, 2);
    trainer *t = NULL, *t2 = NULL;
    CHECK_OK(trainer_create(&o, &t));
    CHECK_OK(trainer_create(&o, &t2));
    if (!t || !t2)
        goto out;
    CHECK_EQ_INT(trainer_num_models(t), 2);
    float *g0 = dcgan_snapshot(trainer_get_model_at(t, 0)),
          *d0 = dcgan_snapshot(trainer_get_model_at(t, 1));
    seen sn = {0};
    trainer_stats st = {0};
    CHECK_OK(trainer_train(t, .stats = &st, .on_epoch = on_epoch, .user = &sn));
    CHECK_EQ_INT(st.epoch, 2);
    CHECK_EQ_INT(st.steps, 2 * 8); /* 1024 / 2 replicas / 64: batches that updated */
    CHECK_EQ_INT(sn.epochs, 2);
    CHECK_EQ_INT(sn.finite, 2);
    CHECK_EQ_INT(sn.violations_ok, 2);
    CHECK(st.weights_agree);
    /* the driver's models hold the last checkpoint: every parameter moved */
    check_all_changed(trainer_get_model_at(t, 0), g0, "generator");
    check_all_changed(trainer_get_model_at(t, 1), d0, "discriminator");
    free(g0);
    free(d0);

    /* the checkpoint: both models and optimizers, every name prefixed */
    CHECK_OK(trainer_save(t, a));
    int n = tensor_names(a, names, sizeof names);
    const ct_named_tensor *sg, *sd;
    int ng = 0, nd = 0;
    CHECK_OK(ct_module_state_dict(trainer_get_model_at(t, 0), &sg, &ng));
    CHECK_OK(ct_module_state_dict(trainer_get_model_at(t, 1), &sd, &nd));
    int64_t pg = 0, pd = 0;
    const ct_param_ref *ps;
    int np = 0;
    CHECK_OK(ct_module_params(trainer_get_model_at(t, 0), &ps, &np));
    pg = np;
    CHECK_OK(ct_module_params(trainer_get_model_at(t, 1), &ps, &np));
    pd = np;
    CHECK_EQ_INT(n, ng + nd + 2 * pg + 2 * pd); /* + Adam's exp_avg, exp_avg_sq per parameter */
    int counts[4] = {0};
    const char *pre[4] = {"m0.", "m1.", "optim0.", "optim1."};
    for (char *line = names, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        int k = 0;
        while (k < 4 && strncmp(line, pre[k], strlen(pre[k])))
            k++;
        if (k == 4) {
            fprintf(stderr, "checkpoint entry without a model prefix: %.*s\n", (int)(nl - line),
                    line);
            h_failures++;
        } else {
            counts[k]++;
        }
    }
    CHECK_EQ_INT(counts[0], ng);
    CHECK_EQ_INT(counts[1], nd);
    CHECK_EQ_INT(counts[2], 2 * pg);
    CHECK_EQ_INT(counts[3], 2 * pd);
    CHECK(strstr(names, "m0.1.running_mean\n") && strstr(names, "m1.5.weight\n") &&
          strstr(names, "optim0.0.weight.exp_avg\n") &&
          strstr(names, "optim1.5.bias.exp_avg_sq\n"));
    size_t la = 0, lb = 0;
    char *ba = tt_read_file(a, &la);
    CHECK(ba && strstr(ba + 8, "\"model\":\"dcgan_g,dcgan_d\"") &&
          strstr(ba + 8, "\"optimizer_state\":\"{\\\"optim0.type\\\":\\\"adam\\\",") &&
          strstr(ba + 8, "\\\"optim1.param_groups.0.lr\\\":0.00020000000000000001"));
    /* python's json + struct read it as any safetensors file */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/check_safetensors.py %s", CT_TEST_SRC_DIR, a);
    char *py = h_capture(cmd);
    CHECK(py && strncmp(py, "ok tensors=", 11) == 0);
    free(py);

    /* a second trainer restores both models exactly; saving it gives the same bytes */
    CHECK_OK(trainer_restore(t2, a));
    compare_modules(trainer_get_model_at(t, 0), trainer_get_model_at(t2, 0));
    compare_modules(trainer_get_model_at(t, 1), trainer_get_model_at(t2, 1));
    CHECK_OK(trainer_save(t2, b));
    char *bb = tt_read_file(b, &lb);
    CHECK(ba && bb && la == lb && memcmp(ba, bb, la) == 0);
    free(ba);
    free(bb);
out:
    trainer_shutdown(&t);
    trainer_shutdown(&t2);
    unlink(a);
    unlink(b);
}

int main(void)
{
    tt_register();
    dcgan_register();
    trainer_register_train_step("twice", twice_step);
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    char dir[] = "/tmp/ct-trainer-multi-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_create_errors();
    test_single_model_keys(dir);
    test_twice();
    test_dcgan(dir);
    ct_shutdown();
    rmdir(dir);
    if (h_failures)
        fprintf(stderr, "test_multi_model: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
