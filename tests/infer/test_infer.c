/* tests/infer/test_infer.c — using a trained model (ct/infer.h) and strict loading (ct/nn.h):
 *   - greedy ct_gpt_generate equals a hand loop of argmaxes over the model's logits (the
 *     context cropped to block_size), in eval mode from a model left in train mode, whose mode
 *     and autograd's setting come back; on the checking device too;
 *   - sampling with a seed repeats, another seed differs, top_k 1 is greedy, top_k 3 draws only
 *     among each step's 3 largest logits, and a temperature of 1 does draw other tokens;
 *   - ct_module_predict on a batch equals forward per sample (a GPT and an MLP with dropout),
 *     on the CPU and on the checking device; the thread rule and the caller's threads restored;
 *   - ct_module_from_checkpoint rebuilds the model (same logits, bit for bit) from a
 *     checkpoint written by the trainer's own codec (ckpt.c, with AdamW state), from a file
 *     and from a checkpoint directory, for the built-in "gpt" and a registered creator;
 *   - a 4-layer checkpoint into a 2-layer GPT, a wider one, a shallower one fail with CT_EINVAL
 *     naming the first mismatch and leave the model unchanged; the non-strict load takes the
 *     common part.
 * Modes for tests/infer/test_sample_install.sh: --write-ckpt PATH (a byte-level GPT's
 * checkpoint), --greedy PATH PROMPT N (prompt and N argmax tokens by the hand loop, as bytes). */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct/error.h"
#include "ct/infer.h"
#include "ct/optim.h"
#include "ct/trainer.h"
#include "trainer/cpu/cpu.h"
#include "trainer/nn/nn_impl.h"
#include "trainer/train/internal.h"

#include "../engine/testutil.h"

#define V 23
static const ct_gpt_config tiny = {
    .n_layer = 2, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab_size = V, .dropout = 0.1f};

/* The last position's logits of the model on ids[len - t, len), t = min(len, block): row (V).
 * The model must be in eval mode. */
static int last_logits(ct_module *m, const int32_t *ids, int64_t len, int64_t block, float *row,
                       int64_t v)
{
    int64_t t = len < block ? len : block, shape[2] = {1, t};
    ct_tensor *idx = ct_tensor_new(CT_I64, 2, shape);
    for (int64_t i = 0; i < t; i++)
        ((int64_t *)ct_tensor_data(idx))[i] = ids[len - t + i];
    bool g = ct_autograd_set_enabled(false);
    ct_tensor *y = ct_module_forward(m, idx);
    ct_autograd_set_enabled(g);
    int rc = y ? 0 : -1;
    if (y)
        memcpy(row, ct_tensor_f32(y) + (t - 1) * v, sizeof(float) * (size_t)v);
    ct_tensor_release(&y);
    ct_tensor_release(&idx);
    return rc;
}

static int32_t argmax(const float *row, int64_t v)
{
    int32_t b = 0;
    for (int32_t i = 1; i < v; i++)
        if (row[i] > row[b])
            b = i;
    return b;
}

/* nanoGPT's generate with argmax, by hand: ids holds the prompt (np) and gets n more */
static int hand_greedy(ct_module *m, int32_t *ids, int64_t np, int64_t n, int64_t block, int64_t v)
{
    float *row = malloc(sizeof(float) * (size_t)v);
    int rc = 0;
    for (int64_t k = 0; k < n && rc == 0; k++)
        if ((rc = last_logits(m, ids, np + k, block, row, v)) == 0)
            ids[np + k] = argmax(row, v);
    free(row);
    return rc;
}

static void test_greedy(void)
{
    ct_nn_manual_seed(1);
    ct_module *m = ct_nn_gpt_new(&tiny);
    int32_t prompt[3] = {3, 7, 1}, out[12], want[15];
    ct_module_train(m, true);
    CHECK(ct_autograd_enabled(), "autograd on before");
    /* 3 + 12 tokens > block_size 8: the context is cropped */
    int rc = ct_gpt_generate(m, prompt, 3, 12, 0.0f, 0, 0, out);
    CHECK(rc == 0, "generate rc %d", rc);
    CHECK(ct_module_is_training(m), "train mode restored");
    CHECK(ct_autograd_enabled(), "autograd restored");
    ct_module_train(m, false);
    memcpy(want, prompt, sizeof prompt);
    CHECK(hand_greedy(m, want, 3, 12, tiny.block_size, V) == 0, "hand loop");
    int same = 0;
    for (int i = 0; i < 12; i++)
        same += out[i] == want[3 + i];
    CHECK(same == 12, "greedy: %d of 12 tokens equal the hand loop's argmax (first: %d vs %d)",
          same, out[0], want[3]);
    /* the same from the model on the checking device (inputs go there, one row comes back) */
    ct_nn_manual_seed(1);
    ct_module *d = ct_nn_gpt_new(&tiny);
    rc = d ? ct_module_to(d, CT_CHECKDEV) : -1;
    CHECK(rc == 0, "gpt to checkdev");
    int32_t dout[12] = {0};
    rc = rc == 0 ? ct_gpt_generate(d, prompt, 3, 12, 0.0f, 0, 0, dout) : rc;
    CHECK(rc == 0 && memcmp(dout, out, sizeof out) == 0, "greedy on checkdev: rc %d, [0] %d vs %d",
          rc, dout[0], out[0]);
    ct_module_destroy(&d);
    /* errors */
    int32_t bad[1] = {V};
    rc = ct_gpt_generate(m, bad, 1, 2, 0.0f, 0, 0, out);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "prompt[0] = 23"), "bad id: %d", rc);
    rc = ct_gpt_generate(m, prompt, 3, 2, -1.0f, 0, 0, out);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "temperature"), "bad temperature: %d", rc);
    rc = ct_gpt_generate(m, prompt, 0, 2, 0.0f, 0, 0, out);
    CHECK(rc == CT_EINVAL, "empty prompt: %d", rc);
    ct_module *lin = CT_SEQUENTIAL(ct_nn_linear_new(3, 3, true));
    rc = ct_gpt_generate(lin, prompt, 3, 2, 0.0f, 0, 0, out);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "not a GPT"), "not a GPT: %d", rc);
    ct_module_destroy(&lin);
    ct_module_destroy(&m);
}

static void test_sampling(void)
{
    ct_nn_manual_seed(2);
    ct_module *m = ct_nn_gpt_new(&tiny);
    int32_t prompt[2] = {5, 9}, a[30], b[30], c[30], g[12], k1[12];
    CHECK(ct_gpt_generate(m, prompt, 2, 30, 1.0f, 0, 42, a) == 0, "sample a");
    CHECK(ct_gpt_generate(m, prompt, 2, 30, 1.0f, 0, 42, b) == 0, "sample b");
    CHECK(ct_gpt_generate(m, prompt, 2, 30, 1.0f, 0, 43, c) == 0, "sample c");
    CHECK(memcmp(a, b, sizeof a) == 0, "one seed, two sequences");
    CHECK(memcmp(a, c, sizeof a) != 0, "seeds 42 and 43 gave the same 30 tokens");
    CHECK(ct_gpt_generate(m, prompt, 2, 12, 0.0f, 0, 0, g) == 0, "greedy");
    CHECK(ct_gpt_generate(m, prompt, 2, 12, 0.8f, 1, 5, k1) == 0, "top_k 1");
    CHECK(memcmp(g, k1, sizeof g) == 0, "top_k 1 differs from greedy: [0] %d vs %d", k1[0], g[0]);
    /* each draw among its step's 3 largest logits; at temperature 1 some draws are not the
     * argmax (the tiny model's logits are nearly flat) */
    int32_t t3[40], ids[42] = {5, 9};
    CHECK(ct_gpt_generate(m, prompt, 2, 40, 2.0f, 3, 9, t3) == 0, "top_k 3");
    ct_module_train(m, false);
    float row[V];
    int outside = 0, not_argmax_3 = 0, not_argmax_a = 0;
    for (int k = 0; k < 40; k++) {
        last_logits(m, ids, 2 + k, tiny.block_size, row, V);
        int above = 0; /* logits larger than the drawn one's */
        for (int i = 0; i < V; i++)
            above += row[i] > row[t3[k]];
        outside += above >= 3;
        not_argmax_3 += above > 0;
        ids[2 + k] = t3[k];
    }
    CHECK(outside == 0, "top_k 3: %d of 40 draws outside the 3 largest logits", outside);
    CHECK(not_argmax_3 > 0, "top_k 3 at temperature 2 drew only argmaxes");
    ids[0] = 5, ids[1] = 9;
    for (int k = 0; k < 30; k++) {
        last_logits(m, ids, 2 + k, tiny.block_size, row, V);
        not_argmax_a += a[k] != argmax(row, V);
        ids[2 + k] = a[k];
    }
    CHECK(not_argmax_a > 5, "temperature 1: only %d of 30 draws differ from the argmax",
          not_argmax_a);
    ct_module_destroy(&m);
}

/* max |a - b| over n floats */
static double maxdiff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

static void test_predict(void)
{
    /* a GPT: (4, 6) ids -> (24, V); sample i alone -> (6, V) */
    ct_nn_manual_seed(3);
    ct_module *g = ct_nn_gpt_new(&tiny);
    int64_t xs[2] = {4, 6}, one[2] = {1, 6};
    ct_tensor *x = ct_tensor_new(CT_I64, 2, xs);
    for (int i = 0; i < 24; i++)
        ((int64_t *)ct_tensor_data(x))[i] = (i * 7 + 3) % V;
    ct_module_train(g, true);
    ct_tensor *y = NULL, *y2 = NULL;
    CHECK(ct_module_predict(g, x, &y) == 0, "predict gpt");
    CHECK(ct_module_is_training(g) && ct_autograd_enabled(), "mode and autograd restored");
    CHECK(y && ct_tensor_dim(y, 0) == 24 && ct_tensor_dim(y, 1) == V, "gpt logits (24, V)");
    CHECK(ct_module_predict(g, x, &y2) == 0 && y && y2 &&
              memcmp(ct_tensor_f32(y), ct_tensor_f32(y2), sizeof(float) * 24 * V) == 0,
          "predict is deterministic (eval: no dropout)");
    ct_module_train(g, false);
    for (int s = 0; s < 4 && y; s++) {
        ct_tensor *xi = ct_tensor_new(CT_I64, 2, one);
        memcpy(ct_tensor_data(xi), (int64_t *)ct_tensor_data(x) + s * 6, sizeof(int64_t) * 6);
        bool prev = ct_autograd_set_enabled(false);
        ct_tensor *yi = ct_module_forward(g, xi);
        ct_autograd_set_enabled(prev);
        double d = yi ? maxdiff(ct_tensor_f32(y) + s * 6 * V, ct_tensor_f32(yi), 6 * V) : 1e9;
        CHECK(d <= 1e-5, "gpt sample %d: batched vs alone differ by %g", s, d);
        ct_tensor_release(&yi);
        ct_tensor_release(&xi);
    }
    ct_tensor_release(&y);
    ct_tensor_release(&y2);
    ct_tensor_release(&x);
    ct_module_destroy(&g);

    /* an MLP with dropout: (9, 5) -> (9, 3), on the CPU and on the checking device */
    ct_module *mlp[2];
    for (int k = 0; k < 2; k++) {
        ct_nn_manual_seed(4);
        mlp[k] = CT_SEQUENTIAL(ct_nn_linear_new(5, 7, true), ct_nn_relu_new(),
                               ct_nn_dropout_new(0.5f), ct_nn_linear_new(7, 3, true));
    }
    CHECK(ct_module_to(mlp[1], CT_CHECKDEV) == 0, "mlp to checkdev");
    int64_t ms[2] = {9, 5}, ms1[2] = {1, 5};
    float xv[45];
    for (int i = 0; i < 45; i++)
        xv[i] = sinf((float)i);
    x = ct_tensor_from_f32(2, ms, xv);
    ct_tensor *yd = NULL, *yh = NULL;
    CHECK(ct_module_predict(mlp[0], x, &y) == 0, "predict mlp");
    CHECK(ct_module_predict(mlp[1], x, &yd) == 0, "predict mlp on checkdev");
    CHECK(yd && ct_tensor_device(yd) == CT_CHECKDEV, "output on the model's device");
    yh = yd ? ct_tensor_to(yd, CT_CPU) : NULL;
    CHECK(y && yh && maxdiff(ct_tensor_f32(y), ct_tensor_f32(yh), 27) <= 1e-6,
          "checkdev's predict differs from the CPU's");
    ct_module_train(mlp[0], false);
    for (int s = 0; s < 9 && y; s++) {
        ct_tensor *xi = ct_tensor_from_f32(2, ms1, xv + s * 5);
        bool prev = ct_autograd_set_enabled(false);
        ct_tensor *yi = ct_module_forward(mlp[0], xi);
        ct_autograd_set_enabled(prev);
        double d = yi ? maxdiff(ct_tensor_f32(y) + s * 3, ct_tensor_f32(yi), 3) : 1e9;
        CHECK(d <= 1e-6, "mlp sample %d: batched vs alone differ by %g", s, d);
        ct_tensor_release(&yi);
        ct_tensor_release(&xi);
    }
    ct_tensor_release(&y);
    ct_tensor_release(&yd);
    ct_tensor_release(&yh);
    ct_tensor_release(&x);
    ct_module_destroy(&mlp[0]);
    ct_module_destroy(&mlp[1]);
    CHECK(ct_module_predict(NULL, NULL, &y) == CT_EINVAL && y == NULL, "NULL model");
}

static void test_threads(void)
{
    ct_nn_set_threads(2);
    CHECK(ct__infer_threads(1000) == 1, "small forward: %d threads", ct__infer_threads(1000));
    CHECK(ct__infer_threads(CT__INFER_WORK_PER_THREAD) == 2, "2^27: %d",
          ct__infer_threads(CT__INFER_WORK_PER_THREAD));
    CHECK(ct__infer_threads((int64_t)1 << 40) == 2, "big forward capped at the caller's 2: %d",
          ct__infer_threads((int64_t)1 << 40));
    ct_module *m = ct_nn_gpt_new(&tiny);
    int32_t p[1] = {1}, o[4];
    CHECK(ct_gpt_generate(m, p, 1, 4, 0.0f, 0, 0, o) == 0, "generate");
    CHECK(ct__cpu_threads() == 2, "caller's threads after generate: %d", ct__cpu_threads());
    ct_module_destroy(&m);
    ct_nn_set_threads(1);
}

/* ---- checkpoints written by the trainer's codec ---- */

static ct_module *make_tiny_mlp(trainer_ctx *ctx)
{
    int64_t h = trainer_config_int(ctx, "hidden", 4);
    return CT_SEQUENTIAL(ct_nn_linear_new(6, h, true), ct_nn_relu_new(),
                         ct_nn_linear_new(h, 2, true));
}

/* Builds model `model` from config as a replica does, takes one AdamW step on the sum of its
 * output on x (so the checkpoint holds optimizer tensors), and writes the trainer's checkpoint
 * of it (ckpt.c) to path. *st keeps the objects (ct__trainer_state_free). */
static int write_ckpt(const char *model, const char *config, ct_tensor *x, const char *path,
                      tr_state *st)
{
    tr_spec spec = {.seed = 3, .batch = 2, .epochs = 1};
    snprintf(spec.model, sizeof spec.model, "%s", model);
    snprintf(spec.optimizer, sizeof spec.optimizer, "adamw");
    snprintf(spec.loss, sizeof spec.loss, "cross_entropy");
    snprintf(spec.config, sizeof spec.config, "%s", config);
    trainer_ctx ctx;
    int rc = ct__trainer_ctx_init(&ctx, config, 0, 1, spec.seed, 0, 1, true);
    if (rc == 0) {
        rc = ct__trainer_state_build(&spec, &ctx, false, st);
        ct__trainer_ctx_free(&ctx);
    }
    if (rc < 0)
        return rc;
    ct_tensor *y = ct_module_forward(st->models[0], x), *l = y ? ct_nn_sum(y) : NULL;
    rc = l ? ct_tensor_backward(l, NULL) : -1;
    if (rc == 0)
        rc = ct_optim_step(st->optims[0]);
    ct_tensor_release(&l);
    ct_tensor_release(&y);
    tr_ckpt_plan *plan = NULL;
    if (rc == 0 && (rc = ct__ckpt_plan(st, &spec, 1, NULL, &plan)) == 0) {
        size_t n = ct__ckpt_size(plan);
        void *buf = malloc(n);
        ct__ckpt_write(plan, buf);
        FILE *f = fopen(path, "wb");
        rc = f && fwrite(buf, 1, n, f) == n ? 0 : -1;
        if (f)
            fclose(f);
        free(buf);
    }
    ct__ckpt_plan_free(&plan);
    return rc;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(p, 1, n, f);
        fclose(f);
    }
}

/* forward in eval mode without the tape, a host copy */
static ct_tensor *eval(ct_module *m, ct_tensor *x)
{
    ct_tensor *y = NULL;
    return ct_module_predict(m, x, &y) == 0 ? y : NULL;
}

static bool same_bits(ct_tensor *a, ct_tensor *b)
{
    return a && b && ct_tensor_numel(a) == ct_tensor_numel(b) &&
           memcmp(ct_tensor_f32(a), ct_tensor_f32(b), sizeof(float) * (size_t)ct_tensor_numel(a)) ==
               0;
}

#define GPT_CFG "n_head=2,n_embd=32,block_size=16,vocab_size=40,dropout=0.1,lr=1e-3"

static void test_from_checkpoint(const char *dir)
{
    char path[512], cdir[512], plain[512];
    snprintf(path, sizeof path, "%s/gpt.safetensors", dir);
    snprintf(cdir, sizeof cdir, "%s/ckdir", dir);
    snprintf(plain, sizeof plain, "%s/plain.safetensors", dir);
    int64_t xs[2] = {2, 10};
    ct_tensor *x = ct_tensor_new(CT_I64, 2, xs);
    for (int i = 0; i < 20; i++)
        ((int64_t *)ct_tensor_data(x))[i] = (i * 11 + 1) % 40;
    tr_state st = {0};
    int rc = write_ckpt("gpt", "n_layer=2," GPT_CFG ",text_file=/nonexistent", x, path, &st);
    CHECK(rc == 0, "write the checkpoint: %d", rc);
    if (rc < 0)
        return;
    size_t len = 0;
    char *bytes = read_all(path, &len);
    CHECK(bytes && memmem(bytes, len, "\"optim.", 7) && memmem(bytes, len, "\"ct-checkpoint\"", 15),
          "the file is a trainer checkpoint with optimizer tensors");
    ct_tensor *want = eval(st.models[0], x);
    ct_module *m = NULL;
    rc = ct_module_from_checkpoint(path, &m);
    CHECK(rc == 0 && m, "from_checkpoint: %d", rc);
    ct_gpt_config c = {0};
    CHECK(m && ct_nn_gpt_config(m, &c) == 0 && c.n_layer == 2 && c.n_head == 2 && c.n_embd == 32 &&
              c.block_size == 16 && c.vocab_size == 40 && fabsf(c.dropout - 0.1f) < 1e-7f,
          "config from the metadata: %d %d %lld %lld %lld %g", c.n_layer, c.n_head,
          (long long)c.n_embd, (long long)c.block_size, (long long)c.vocab_size, c.dropout);
    ct_tensor *got = m ? eval(m, x) : NULL;
    CHECK(same_bits(want, got), "rebuilt model's logits differ from the trained model's");
    ct_tensor_release(&got);
    ct_module_destroy(&m);
    /* from a checkpoint directory: its latest */
    tr_ckptdir *d = NULL;
    char name[TR_CKPT_NAME_MAX];
    CHECK(ct__ckptdir_open(cdir, 0, 0, NULL, false, &d) == 0 &&
              ct__ckptdir_add(d, bytes, len, 1, 0, 1, NAN, NULL, name, sizeof name) == 0,
          "checkpoint dir");
    ct__ckptdir_free(&d);
    rc = ct_module_from_checkpoint(cdir, &m);
    got = rc == 0 ? eval(m, x) : NULL;
    CHECK(rc == 0 && same_bits(want, got), "from the directory: %d", rc);
    ct_tensor_release(&got);
    /* ct_module_load of the checkpoint: strict, the optimizer's entries skipped */
    ct_nn_manual_seed(99);
    ct_module *g = ct_nn_gpt_new(&c);
    rc = ct_module_load(g, path);
    got = rc == 0 ? eval(g, x) : NULL;
    CHECK(rc == 0 && same_bits(want, got), "ct_module_load of a checkpoint: %d", rc);
    ct_tensor_release(&got);
    /* a ct_module_save file has no metadata */
    CHECK(ct_module_save(g, plain) == 0, "save");
    ct_module *p = NULL;
    rc = ct_module_from_checkpoint(plain, &p);
    CHECK(rc == CT_EINVAL && !p && strstr(ct_last_error(), "no trainer metadata"), "plain file: %d",
          rc);
    rc = ct_module_from_checkpoint("/nonexistent/ck.safetensors", &p);
    CHECK(rc == CT_ENOENT && !p, "missing file: %d", rc);
    ct_module_destroy(&g);
    ct_module_destroy(&m);
    ct_tensor_release(&want);
    ct__trainer_state_free(&st);
    free(bytes);

    /* a registered creator with its own key; the name changed in the file: not registered */
    int64_t ms[2] = {3, 6};
    ct_tensor *xm = ct_tensor_new(CT_F32, 2, ms);
    for (int i = 0; i < 18; i++)
        ct_tensor_f32(xm)[i] = cosf((float)i);
    rc = write_ckpt("tiny_mlp", "hidden=5,lr=1e-2", xm, path, &st);
    CHECK(rc == 0, "mlp checkpoint: %d", rc);
    want = rc == 0 ? eval(st.models[0], xm) : NULL;
    rc = ct_module_from_checkpoint(path, &m);
    got = rc == 0 ? eval(m, xm) : NULL;
    CHECK(rc == 0 && same_bits(want, got) && ct_module_num_params(m) == 6 * 5 + 5 + 5 * 2 + 2,
          "registered creator with hidden=5: %d", rc);
    ct_tensor_release(&got);
    ct_module_destroy(&m);
    bytes = read_all(path, &len);
    char *at = bytes ? memmem(bytes, len, "\"tiny_mlp\"", 10) : NULL;
    CHECK(at != NULL, "model name in the metadata");
    if (at) {
        memcpy(at, "\"tiny_mlq\"", 10);
        write_all(path, bytes, len);
        rc = ct_module_from_checkpoint(path, &m);
        CHECK(rc == CT_ENOTREG && !m && strstr(ct_last_error(), "tiny_mlq") &&
                  strstr(ct_last_error(), "\"tiny_mlp\""),
              "unregistered creator: %d", rc);
    }
    free(bytes);
    ct_tensor_release(&want);
    ct_tensor_release(&xm);
    ct__trainer_state_free(&st);
    ct_tensor_release(&x);
}

/* the value of state dict entry name of m, as a host copy */
static ct_tensor *entry(ct_module *m, const char *name)
{
    const ct_named_tensor *sd;
    int n;
    ct_module_state_dict(m, &sd, &n);
    for (int i = 0; i < n; i++)
        if (!strcmp(sd[i].name, name))
            return ct_tensor_to(sd[i].tensor, CT_CPU);
    return NULL;
}

static void test_mismatch(const char *dir)
{
    char p4[512], p2[512];
    snprintf(p4, sizeof p4, "%s/l4.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/l2.safetensors", dir);
    int64_t xs[2] = {1, 4};
    ct_tensor *x = ct_tensor_new(CT_I64, 2, xs);
    tr_state s4 = {0}, s2 = {0};
    CHECK(write_ckpt("gpt", "n_layer=4," GPT_CFG, x, p4, &s4) == 0, "4-layer checkpoint");
    CHECK(write_ckpt("gpt", "n_layer=2," GPT_CFG, x, p2, &s2) == 0, "2-layer checkpoint");
    ct_gpt_config c2 = {
        .n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = 40};
    ct_module *m2 = ct_nn_gpt_new(&c2);
    ct_tensor *before = entry(m2, "transformer.wte.weight");
    int rc = ct_module_load(m2, p4);
    CHECK(rc == CT_EINVAL &&
              strstr(ct_last_error(), "transformer.h.2.ln_1.weight: in the file but not in the "
                                      "model"),
          "4 layers into 2: rc %d", rc);
    ct_tensor *after = entry(m2, "transformer.wte.weight");
    CHECK(same_bits(before, after), "a failed load changed the model");
    ct_tensor_release(&after);
    /* wider */
    ct_gpt_config narrow = c2;
    narrow.n_embd = 16;
    ct_module *mn = ct_nn_gpt_new(&narrow);
    rc = ct_module_load(mn, p2);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "transformer.wte.weight: shape (40, 32) in "
                                                     "the file, (40, 16) in the model"),
          "n_embd 32 into 16: rc %d", rc);
    ct_module_destroy(&mn);
    /* shallower */
    ct_gpt_config c4 = c2;
    c4.n_layer = 4;
    ct_module *m4 = ct_nn_gpt_new(&c4);
    rc = ct_module_load(m4, p2);
    CHECK(rc == CT_EINVAL &&
              strstr(ct_last_error(), "transformer.h.2.ln_1.weight: in the model but not in the "
                                      "file"),
          "2 layers into 4: rc %d", rc);
    ct_module_destroy(&m4);
    /* not strict: the common part */
    rc = ct_module_load_file(m2, p4, false);
    ct_tensor *want = entry(s4.models[0], "transformer.h.1.mlp.c_fc.weight");
    after = entry(m2, "transformer.h.1.mlp.c_fc.weight");
    CHECK(rc == 0 && same_bits(want, after), "non-strict load: rc %d", rc);
    ct_tensor_release(&want);
    ct_tensor_release(&after);
    /* the state dict form names the same mismatch */
    const ct_named_tensor *sd4;
    int n4;
    ct_module_state_dict(s4.models[0], &sd4, &n4);
    rc = ct_module_load_state_dict(m2, sd4, n4, true);
    CHECK(rc == CT_EINVAL && strstr(ct_last_error(), "transformer.h.2.ln_1.weight: in the state "
                                                     "dict but not in the model"),
          "state dict 4 into 2: rc %d", rc);
    ct_tensor_release(&before);
    ct_module_destroy(&m2);
    ct__trainer_state_free(&s4);
    ct__trainer_state_free(&s2);
    ct_tensor_release(&x);
}

/* --write-ckpt PATH: a byte-level GPT (vocab 256) as the trainer writes it */
static int mode_write(const char *path)
{
    int64_t xs[2] = {1, 8};
    ct_tensor *x = ct_tensor_new(CT_I64, 2, xs);
    tr_state st = {0};
    int rc = write_ckpt("gpt", "n_layer=1,n_head=2,n_embd=32,block_size=16,vocab_size=256,lr=1e-2",
                        x, path, &st);
    ct__trainer_state_free(&st);
    ct_tensor_release(&x);
    if (rc < 0)
        fprintf(stderr, "test_infer: %s\n", ct_last_error());
    return rc < 0;
}

/* --greedy PATH PROMPT N: the prompt and N argmax tokens as bytes, then a newline */
static int mode_greedy(const char *path, const char *prompt, int n)
{
    ct_module *m = NULL;
    ct_gpt_config c;
    if (ct_module_from_checkpoint(path, &m) < 0 || ct_nn_gpt_config(m, &c) < 0) {
        fprintf(stderr, "test_infer: %s\n", ct_last_error());
        return 1;
    }
    int64_t np = (int64_t)strlen(prompt);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(np + n));
    for (int64_t i = 0; i < np; i++)
        ids[i] = (unsigned char)prompt[i];
    ct_module_train(m, false);
    int rc = hand_greedy(m, ids, np, n, c.block_size, c.vocab_size);
    for (int64_t i = 0; rc == 0 && i < np + n; i++)
        putchar(ids[i]);
    putchar('\n');
    free(ids);
    ct_module_destroy(&m);
    return rc != 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write-ckpt"))
        return mode_write(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "--greedy"))
        return mode_greedy(argv[2], argv[3], atoi(argv[4]));
    trainer_register_model("tiny_mlp", make_tiny_mlp);
    ct_nn_set_threads(1);
    char dir[] = "/tmp/ct-infer-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_greedy();
    test_sampling();
    test_predict();
    test_threads();
    test_from_checkpoint(dir);
    test_mismatch(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (g_fail) {
        fprintf(stderr, "%d checks failed\n", g_fail);
        return 1;
    }
    printf("infer: all checks passed\n");
    return 0;
}
