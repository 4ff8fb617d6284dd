/* tests/trainer/test_ckpt.c — trainer_save / trainer_restore round trip and the file format.
 * Trains 2 epochs of a small MLP (Adam + StepLR) with 2 replicas on an embedded cluster,
 * saves, restores into a second trainer and checks that weights, optimizer state, scheduler
 * state, epoch and step are identical, and that saving again gives the same bytes. Then
 * /usr/bin/python3 reads the file with json + struct only (check_safetensors.py: header,
 * offsets, dtypes, metadata) and reports a weight sum we compare with ours. Also: restoring a
 * file made with another model name, a truncated file, and a corrupt header all fail with
 * messages that name the problem, and leave the trainer usable. */
#include "tt.h"

#define DATA_CFG "limit=2048,val_limit=1000,lr=2e-3,step_size=1,gamma=0.5"

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static trainer *make(const char *model)
{
    trainer *t = NULL;
    int rc = trainer_create(&(trainer_opts){.model = model,
                                            .data = "fashion_mnist",
                                            .optimizer = "adam",
                                            .scheduler = "steplr",
                                            .config = DATA_CFG,
                                            .num_replicas = 2,
                                            .batch_size = 64,
                                            .epochs = 2,
                                            .seed = 7},
                            &t);
    if (rc)
        fprintf(stderr, "trainer_create: %s\n", ct_last_error());
    return t;
}

/* The optimizer's state entries of t's driver model are not public; compare through the
 * checkpoint bytes instead (save of each) and the module state dicts directly. */
static void compare_modules(ct_module *a, ct_module *b)
{
    const ct_named_tensor *sa, *sb;
    int na = 0, nb = 0;
    CHECK_OK(ct_module_state_dict(a, &sa, &na));
    CHECK_OK(ct_module_state_dict(b, &sb, &nb));
    CHECK_EQ_INT(na, nb);
    for (int i = 0; i < na && i < nb; i++) {
        CHECK_STR(sa[i].name, sb[i].name);
        size_t bytes =
            (size_t)ct_tensor_numel(sa[i].tensor) * ct_dtype_size(ct_tensor_dtype(sa[i].tensor));
        if (memcmp(ct_tensor_data(sa[i].tensor), ct_tensor_data(sb[i].tensor), bytes)) {
            fprintf(stderr, "state entry %s differs after restore\n", sa[i].name);
            h_failures++;
        }
    }
}

int main(void)
{
    tt_register();
    trainer_register_model("mlp2", tt_mlp); /* same shapes, another name */
    ct_serve_if_worker();
    h_init();
    CHECK_OK(ct_init(&(ct_init_opts){.cpus = 2}));
    char dir[] = "/tmp/ct-trainer-ckpt-XXXXXX", a[200], b[200], bad[200];
    if (!mkdtemp(dir))
        return 1;
    snprintf(a, sizeof a, "%s/a.safetensors", dir);
    snprintf(b, sizeof b, "%s/b.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);

    trainer *t1 = make("mlp"), *t2 = make("mlp"), *t3 = make("mlp2");
    CHECK(t1 && t2 && t3);
    if (!t1 || !t2 || !t3)
        goto out;
    trainer_stats st1 = {0}, st2 = {0};
    CHECK_OK(trainer_train(t1, .stats = &st1));
    CHECK_EQ_INT(st1.epoch, 2);
    CHECK_EQ_INT(st1.steps, 2 * 16); /* 2048 / 2 replicas / 64 */
    CHECK(st1.weights_agree);
    CHECK_OK(trainer_save(t1, a));

    /* restore into a fresh trainer: identical state, identical bytes when saved again */
    CHECK_OK(trainer_restore(t2, a));
    CHECK_OK(trainer_get_stats(t2, &st2));
    CHECK_EQ_INT(st2.epoch, 2);
    CHECK_EQ_INT(st2.steps, 32);
    compare_modules(trainer_get_model(t1), trainer_get_model(t2));
    CHECK_OK(trainer_save(t2, b));
    size_t la = 0, lb = 0;
    char *ba = tt_read_file(a, &la), *bb = tt_read_file(b, &lb);
    CHECK(ba && bb);
    CHECK_EQ_INT(la, lb);
    CHECK(ba && bb && la == lb && memcmp(ba, bb, la) == 0);
    /* optimizer and scheduler state are in the bytes: Adam's exp_avg tensors and the step
     * counts, StepLR's last_epoch and lr after 2 epochs of gamma 0.5 */
    CHECK(ba && strstr(ba + 8, "\"optim.1.weight.exp_avg_sq\""));
    CHECK(ba && strstr(ba + 8, "\\\"last_epoch\\\":2"));
    CHECK(ba && strstr(ba + 8, "\\\"param_groups.0.lr\\\":0.0005"));

    /* another tool reads the file as is: python with json + struct only */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/check_safetensors.py %s", CT_TEST_SRC_DIR, a);
    char *py = h_capture(cmd);
    double py_sum = NAN, c_sum = 0;
    long long py_epoch = -1, py_n = -1;
    if (!py ||
        sscanf(py, "ok tensors=%lld epoch=%lld sum_first=%lf", &py_n, &py_epoch, &py_sum) != 3) {
        fprintf(stderr, "check_safetensors.py said: %s\n", py ? py : "(nothing)");
        h_failures++;
    }
    free(py);
    const ct_named_tensor *sd;
    int nsd;
    CHECK_OK(ct_module_state_dict(trainer_get_model(t1), &sd, &nsd));
    for (int64_t i = 0; i < ct_tensor_numel(sd[0].tensor); i++)
        c_sum += ct_tensor_f32(sd[0].tensor)[i];
    CHECK_EQ_INT(py_epoch, 2);
    CHECK_EQ_INT(py_n, 4 + 8); /* 4 model tensors + exp_avg / exp_avg_sq of each */
    if (!(fabs(py_sum - c_sum) <= 1e-6 * (1 + fabs(c_sum)))) {
        fprintf(stderr, "sum of the first tensor: python %.9g vs C %.9g\n", py_sum, c_sum);
        h_failures++;
    }

    /* wrong files: the messages name the problem; t1 keeps its state */
    int rc = trainer_restore(t3, a);
    CHECK_EQ_INT(rc, CT_EINVAL);
    CHECK(strstr(ct_last_error(), "model \"mlp\"") && strstr(ct_last_error(), "\"mlp2\""));
    if (ba && la > 100) {
        CHECK_OK(write_file(bad, ba, la - 100));
        rc = trainer_restore(t1, bad);
        CHECK(rc < 0);
        CHECK(strstr(ct_last_error(), "offsets") || strstr(ct_last_error(), "past the end"));
        memcpy(ba + 8, "[", 1); /* the header is no longer an object */
        CHECK_OK(write_file(bad, ba, la));
        rc = trainer_restore(t1, bad);
        CHECK_EQ_INT(rc, CT_EINVAL);
        CHECK(strstr(ct_last_error(), "not a JSON object") != NULL);
        CHECK_OK(trainer_save(t1, b));
        free(bb);
        bb = tt_read_file(b, &lb);
        ba = ba ? (memcpy(ba + 8, "{", 1), ba) : ba;
        CHECK(bb && lb == la && memcmp(ba, bb, la) == 0);
    }
    /* a restored trainer trains on from epoch 2 (t1's group gives its CPUs back first) */
    trainer_shutdown(&t1);
    CHECK_OK(trainer_train(t2, .epochs = 3, .stats = &st2));
    CHECK_EQ_INT(st2.epoch, 3);
    CHECK_EQ_INT(st2.steps, 48);

    free(ba);
    free(bb);
out:
    trainer_shutdown(&t1);
    trainer_shutdown(&t2);
    trainer_shutdown(&t3);
    ct_shutdown();
    unlink(a);
    unlink(b);
    unlink(bad);
    rmdir(dir);
    if (h_failures)
        fprintf(stderr, "test_ckpt: %d failure(s)\n", h_failures);
    return h_failures ? 1 : 0;
}
