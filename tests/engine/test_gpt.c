/* tests/engine/test_gpt.c — the GPT modules against nanoGPT's model in PyTorch 1.13
 * (ref/transformer.bin, "gpt.*", from make_reference.py): the same parameter names in the same
 * order as torch's state dict less the tied lm_head.weight, a strict load of torch's weights,
 * then logits, cross-entropy loss and every parameter's gradient (the tied embedding's: both
 * uses summed) within 1e-4, on the CPU and on the checking device. A safetensors checkpoint
 * holds the tied tensor once. */
#define _DEFAULT_SOURCE /* mkstemp */
#include <unistd.h>

#include "tests/engine/testutil.h"

#define TOL 1e-4

static ref_file R;

static const ct_gpt_config CFG = {
    .n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = 11, .dropout = 0.0f};

static ct_tensor *on_cpu(const ct_tensor *t)
{
    return t ? ct_tensor_to(t, CT_CPU) : NULL;
}

/* torch's state dict, in its order, as entries */
static int torch_sd(ct_named_tensor *e, int max)
{
    int n = 0;
    for (int i = 0; i < R.n && n < max; i++)
        if (strncmp(R.v[i].name, "gpt.sd.", 7) == 0)
            e[n++] = (ct_named_tensor){R.v[i].name + 7, R.v[i].t};
    return n;
}

static void test_on(ct_device dev)
{
    const char *dn = dev == CT_CPU ? "cpu" : "checkdev";
    ct_module *m = ct_nn_gpt_new(&CFG);
    CHECK(m != NULL, "gpt_new: %s", ct_last_error());
    if (!m)
        return;
    ct_named_tensor sd[64];
    int n = torch_sd(sd, 64), nmine = 0;
    const ct_named_tensor *mine;
    ct_module_state_dict(m, &mine, &nmine);
    CHECK(nmine == n, "ct's state dict has %d keys, torch's %d", nmine, n);
    for (int i = 0; i < n && i < nmine; i++)
        CHECK(strcmp(mine[i].name, sd[i].name) == 0, "key %d: ct '%s', torch '%s'", i, mine[i].name,
              sd[i].name);
    CHECK(ct_module_load_state_dict(m, sd, n, true) == 0, "strict load: %s", ct_last_error());
    CHECK(ct_module_num_params(m) ==
              11 * 16 + 8 * 16 + 2 * (4 * 16 + 48 * 17 + 16 * 17 + 64 * 17 + 16 * 65) + 2 * 16,
          "parameters: %lld", (long long)ct_module_num_params(m));
    if (dev != CT_CPU)
        CHECK(ct_module_to(m, dev) == 0, "module_to %s: %s", dn, ct_last_error());
    ct_module_zero_grad(m);
    ct_module_state_dict(m, &mine, &nmine); /* the tensors as they are now (on dev) */
    ct_tensor *idx = ct_tensor_to(ref_must(&R, "gpt.idx"), dev),
              *tgt = ct_tensor_to(ref_must(&R, "gpt.targets"), dev);
    ct_tensor *logits = ct_module_forward(m, idx);
    ct_tensor *loss = logits ? ct_nn_cross_entropy(logits, tgt, 0.0f) : NULL;
    char what[160];
    ct_tensor *lc = on_cpu(logits), *lossc = on_cpu(loss);
    snprintf(what, sizeof what, "gpt on %s: logits", dn);
    close_t(what, lc, ref_must(&R, "gpt.logits"), TOL);
    snprintf(what, sizeof what, "gpt on %s: loss", dn);
    close_t(what, lossc, ref_must(&R, "gpt.loss"), TOL);
    int rc = loss ? ct_tensor_backward(loss, NULL) : -1;
    CHECK(rc == 0, "gpt on %s: backward: %s", dn, ct_last_error());
    int compared = 0;
    for (int i = 0; i < nmine && rc == 0; i++) {
        char key[200];
        snprintf(key, sizeof key, "gpt.grad.%s", mine[i].name);
        ct_tensor *gc = on_cpu(ct_tensor_grad(mine[i].tensor));
        snprintf(what, sizeof what, "gpt on %s: gradient of %s", dn, mine[i].name);
        close_t(what, gc, ref_must(&R, key), TOL);
        compared++;
        ct_tensor_release(&gc);
    }
    CHECK(rc != 0 || compared == n, "gpt on %s: %d gradients compared of %d", dn, compared, n);
    /* token ids carried as floats (a text dataset's samples) give the same logits */
    ct_tensor *ih = ct_tensor_clone(ref_must(&R, "gpt.idx")), *fh = NULL;
    int64_t ni = ct_tensor_numel(ih);
    fh = ct_tensor_new(CT_F32, 2, ct_tensor_shape(ih));
    for (int64_t i = 0; i < ni; i++)
        ct_tensor_f32(fh)[i] = (float)((int64_t *)ct_tensor_data(ih))[i];
    ct_tensor *fd = ct_tensor_to(fh, dev), *lf = ct_module_forward(m, fd), *lfc = on_cpu(lf);
    snprintf(what, sizeof what, "gpt on %s: logits from f32 token ids", dn);
    close_t(what, lfc, ref_must(&R, "gpt.logits"), TOL);
    ct_autograd_clear_tape();
    ct_tensor *more[] = {ih, fh, fd, lf, lfc};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        ct_tensor_release(&more[i]);
    ct_tensor *all[] = {idx, tgt, logits, loss, lc, lossc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ct_tensor_release(&all[i]);
    ct_module_destroy(&m);
}

/* the checkpoint has transformer.wte.weight once and no lm_head */
static void test_checkpoint(void)
{
    ct_module *m = ct_nn_gpt_new(&CFG);
    char path[] = "/tmp/ct-gpt-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && m, "setup");
    if (fd < 0 || !m)
        return;
    close(fd);
    CHECK(ct_module_save(m, path) == 0, "save: %s", ct_last_error());
    FILE *f = fopen(path, "rb");
    uint64_t hl = 0;
    char *hdr = NULL;
    if (f && fread(&hl, 8, 1, f) == 1 && hl < (1 << 20) && (hdr = calloc(1, hl + 1)) &&
        fread(hdr, 1, hl, f) == hl) {
        int wte = 0;
        for (char *p = hdr; (p = strstr(p, "\"transformer.wte.weight\"")); p++)
            wte++;
        CHECK(wte == 1, "transformer.wte.weight %d times in the header", wte);
        CHECK(!strstr(hdr, "lm_head"), "an lm_head entry in the header");
    } else {
        CHECK(0, "cannot read the safetensors header of %s", path);
    }
    free(hdr);
    if (f)
        fclose(f);
    ct_module *m2 = ct_nn_gpt_new(&CFG);
    CHECK(m2 && ct_module_load(m2, path) == 0, "load back: %s", ct_last_error());
    unlink(path);
    ct_module_destroy(&m);
    ct_module_destroy(&m2);
}

int main(int argc, char **argv)
{
    R = ref_load(ref_dir(argc, argv), "transformer.bin");
    test_on(CT_CPU);
    test_on(CT_CHECKDEV);
    test_checkpoint();
    ref_free(&R);
    if (g_fail) {
        fprintf(stderr, "%d failure(s)\n", g_fail);
        return 1;
    }
    printf("GPT vs nanoGPT in PyTorch (cpu, checkdev), tied checkpoint: ok\n");
    return 0;
}
