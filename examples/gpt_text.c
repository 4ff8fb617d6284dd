/* examples/gpt_text.c — a small GPT (nanoGPT's model, the built-in "gpt") trained on the King
 * James Bible, byte by byte or in BPE tokens, on 2 replicas with trainer_train: AdamW with weight
 * decay on the matrices only, warm-up plus cosine per step, gradient clipping by the global norm
 * (the averaged gradients are the same on every replica), checkpoints to a directory and resume.
 *
 *   gpt_text [--text FILE] [--replicas 2] [--epochs 1] [--layers 4] [--heads 4] [--embd 128]
 *            [--block 128] [--batch 16] [--lr 1e-3] [--clip 1] [--val 0.05] [--val-every 250]
 *            [--log-every 50] [--checkpoint-dir DIR] [--threads N] [--zero 0] [--vocab FILE]
 *            [--bpe-merges 256] [--log-dir DIR]
 *
 * --text (default kjv.txt) is made with Debian's bible-kjv when missing
 * (COLUMNS=80 bible Genesis1:1-Revelation22:21). The learning rate warms up over 20 steps from
 * 5% and then follows a cosine down to a tenth at the run's last step. --checkpoint-dir also
 * resumes from the directory's latest checkpoint when there is one. --log-dir writes
 * DIR/metrics.jsonl (a record per step: loss, lr, grad_norm, step_ns, and wait_ns, the time the
 * replica waited for the others) and a TensorBoard event file.
 *
 * Tokens: bytes (vocabulary 256) by default. --vocab FILE uses that BPE vocabulary file
 * (ct_tokenizer_load); when FILE is missing, --bpe-merges merges are learned from the training
 * split (the text's first 1 - --val of bytes) and written there. The text is then encoded into
 * FILE.tok (a token file, remade each run) and the model's vocab_size is the tokenizer's.
 *
 * Prints the trainer's line every --log-every steps (with MFU), `val step=<s> val_loss=<x>
 * accuracy=<a>` every --val-every steps (0: none), an epoch line each epoch (train_loss in nats
 * per token), `optimizer_state_bytes=<per replica> zero=<stage>` (--zero 1: ZeRO-1, the AdamW
 * moments sharded over the replicas: about 1/N of the bytes, the same training) and last
 * `final: val_loss=<x> tokens_per_s=<rate> params=<count> vocab=<v> val_tokens=<n>
 * val_bytes=<m>`. val_loss is in nats per byte of text whatever the tokens (the
 * validation's total nats over its target tokens / the bytes those tokens decode to), accuracy
 * the next-token top-1 accuracy (this example's validate step: the built-in one counts hits
 * for integer labels only). bench/gpt_train/text.sh runs the byte recipe under PyTorch DDP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ct/data.h"
#include "ct/nn.h"
#include "ct/trainer.h"

/* validation's nats per token -> nats per byte: val_tokens / val_bytes (1 for bytes); set by
 * main before training (the driver's callbacks read it) */
static double bytes_ratio = 1.0;

/* forward, loss, backward (averaged gradients), clip by the global norm, optimizer */
static int clipped_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    double clip = trainer_config_double(trainer_step_ctx(s), "clip", 1.0), norm = 0;
    ct_tensor *logits = ct_module_forward(trainer_step_model(s), b->x); /* (B*T, 256) */
    ct_tensor *loss = logits ? trainer_step_loss(s)(logits, b->y) : NULL;
    int rc = loss ? trainer_step_backward(s, loss) : CT_EINVAL;
    if (rc == 0)
        rc = trainer_step_clip_grad_norm(s, clip, &norm);
    if (rc == 0)
        rc = trainer_step_metric(s, "grad_norm", norm);
    if (rc == 0)
        rc = trainer_step_optimizer(s);
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)b->n;
        out->samples = b->n;
    }
    ct_tensor_release(&loss);
    ct_tensor_release(&logits);
    return rc;
}

/* forward and loss, counting each target token as a sample (so the validation's loss is per
 * token and its accuracy the next-token top-1 accuracy): logits (B*T, V), targets (B, T) ids */
static int token_validate_step(trainer_step *s, const trainer_batch *b, trainer_step_out *out)
{
    ct_tensor *y = ct_module_forward(trainer_step_model(s), b->x);
    ct_tensor *logits = y ? ct_nn_to_plain(y) : NULL;
    ct_tensor *loss = logits ? trainer_step_loss(s)(logits, b->y) : NULL;
    ct_tensor *hl = loss ? ct_tensor_to(logits, CT_CPU) : NULL, *hy = ct_tensor_to(b->y, CT_CPU);
    int rc = hl && hy ? 0 : CT_EINVAL;
    int64_t rows = rc == 0 ? ct_tensor_numel(hy) : 0, hits = 0;
    int64_t v = rows > 0 ? ct_tensor_numel(hl) / rows : 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = ct_tensor_f32(hl) + r * v;
        int64_t best = 0;
        for (int64_t c = 1; c < v; c++)
            best = row[c] > row[best] ? c : best;
        hits += best == (int64_t)ct_tensor_f32(hy)[r];
    }
    if (rc == 0) {
        out->loss_sum = ct_tensor_item(loss) * (double)rows;
        out->correct = hits;
        out->samples = rows;
    }
    ct_tensor_release(&hy);
    ct_tensor_release(&hl);
    ct_tensor_release(&loss);
    ct_tensor_release(&logits);
    ct_tensor_release(&y);
    return rc;
}

static int make_text_file(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return 0;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "COLUMNS=80 bible Genesis1:1-Revelation22:21 > '%s'", path);
    fprintf(stderr, "gpt_text: making %s with bible-kjv\n", path);
    if (system(cmd) != 0 || stat(path, &st) != 0 || st.st_size == 0) {
        fprintf(stderr, "gpt_text: could not make %s (is bible-kjv installed?)\n", path);
        remove(path);
        return -1;
    }
    return 0;
}

static int on_validate(trainer *t, const trainer_stats *st, void *user)
{
    (void)t, (void)user;
    printf("val step=%lld val_loss=%.4f accuracy=%.4f\n", (long long)st->val_step,
           st->val_loss * bytes_ratio, st->val_accuracy);
    fflush(stdout);
    return 0;
}

/* Optimizer steps of the run: the longest training shard's windows in batches, per epoch (as
 * the trainer's loader pads every rank to it), for the cosine's length. */
static int open_split(const char *text, const char *tokens, double val, long long block, int r,
                      int replicas, bool is_val, ct_dataset **d)
{
    ct_text_opts o = {
        .block_size = block, .rank = r, .world_size = replicas, .val_fraction = val, .val = is_val};
    return tokens ? ct_dataset_open_tokens(tokens, &o, d) : ct_dataset_open_text(text, &o, d);
}

static long long run_steps(const char *text, const char *tokens, double val, long long block,
                           long long batch, int replicas, long long epochs)
{
    int64_t longest = 0;
    for (int r = 0; r < replicas; r++) {
        ct_dataset *d = NULL;
        if (open_split(text, tokens, val, block, r, replicas, false, &d) < 0)
            return -1;
        longest = ct_dataset_length(d) > longest ? ct_dataset_length(d) : longest;
        ct_dataset_destroy(&d);
    }
    return (longest + batch - 1) / batch * epochs;
}

/* The validation's target tokens and the bytes they decode to, all replicas' shards together
 * (the trainer validates every window of each shard). */
static int count_val(const ct_tokenizer *tk, const char *text, const char *tokens, double val,
                     long long block, int replicas, int64_t *n_tokens, int64_t *n_bytes)
{
    *n_tokens = *n_bytes = 0;
    float *x = malloc(sizeof(float) * 2 * (size_t)block), *y = x + block;
    int rc = x ? 0 : CT_ENOMEM;
    for (int r = 0; r < replicas && rc == 0 && val > 0; r++) {
        ct_dataset *d = NULL;
        rc = open_split(text, tokens, val, block, r, replicas, true, &d);
        for (int64_t i = 0; rc == 0 && i < ct_dataset_length(d); i++) {
            rc = ct_dataset_get_target(d, i, x, y);
            for (long long t = 0; rc == 0 && t < block; t++)
                *n_bytes += ct_tokenizer_token_bytes(tk, (int32_t)y[t], NULL);
            *n_tokens += block;
        }
        ct_dataset_destroy(&d);
    }
    free(x);
    return rc;
}

/* The tokenizer of --vocab: loaded, or learned from the training split of text and saved. */
static int make_tokenizer(const char *vocab, const char *text, double val, int merges,
                          ct_tokenizer **tk)
{
    struct stat st;
    if (stat(vocab, &st) == 0)
        return ct_tokenizer_load(vocab, tk);
    FILE *f = fopen(text, "rb");
    if (!f || fstat(fileno(f), &st) < 0) {
        if (f)
            fclose(f);
        fprintf(stderr, "gpt_text: cannot read %s\n", text);
        return CT_EIO;
    }
    size_t n = (size_t)((double)st.st_size * (1.0 - val));
    unsigned char *buf = malloc(n ? n : 1);
    int rc = buf && fread(buf, 1, n, f) == n ? 0 : CT_EIO;
    fclose(f);
    if (rc == 0) {
        fprintf(stderr, "gpt_text: learning %d merges from %zu bytes of %s\n", merges, n, text);
        rc = ct_tokenizer_learn(buf, (int64_t)n, merges, tk);
    }
    free(buf);
    if (rc == 0 && (rc = ct_tokenizer_save(*tk, vocab)) == 0)
        fprintf(stderr, "gpt_text: wrote %s (vocabulary %d)\n", vocab,
                ct_tokenizer_vocab_size(*tk));
    if (rc < 0)
        ct_tokenizer_destroy(tk);
    return rc;
}

/* model FLOPs of one window's forward and backward: T (6 N + 12 L T C), N the parameters less
 * the position embedding (PaLM's count, as TorchTitan and bench/gpt_train use) */
static double flops_per_window(ct_module *m, int layers, long long embd, long long block)
{
    double n = (double)ct_module_num_params(m) - (double)(block * embd);
    return (double)block * (6 * n + 12.0 * layers * (double)block * (double)embd);
}

static int on_epoch(trainer *t, const trainer_stats *st, void *user)
{
    (void)t, (void)user;
    printf("epoch %lld: train_loss=%.4f samples_per_s=%.1f grad_norm=%.3f\n", (long long)st->epoch,
           st->train_loss, st->samples_per_s, trainer_stats_metric(st, false, "grad_norm", 0));
    fflush(stdout);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpt_text [--text FILE] [--replicas 2] [--epochs 1] [--layers 4] [--heads 4]\n"
            "                [--embd 128] [--block 128] [--batch 16] [--lr 1e-3] [--clip 1]\n"
            "                [--val 0.05] [--val-every 250] [--log-every 50]\n"
            "                [--checkpoint-dir DIR] [--threads N] [--zero 0] [--vocab FILE]\n"
            "                [--bpe-merges 256] [--log-dir DIR]\n"
            "trains a small GPT on the King James Bible (--text, made with bible-kjv when\n"
            "missing) on 2 replicas; the header of examples/gpt_text.c says more\n");
}

/* option k's value v as a number; else *bad, said on stderr */
static double number(const char *k, const char *v, bool *bad)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end) {
        fprintf(stderr, "gpt_text: %s '%s' is not a number\n", k, v);
        *bad = true;
    }
    return x;
}

int main(int argc, char **argv)
{
    const char *text = "kjv.txt", *ckpt = NULL, *vocab = NULL, *log_dir = NULL;
    int replicas = 2, layers = 4, heads = 4, threads = 1, zero = 0, merges = 256;
    long long epochs = 1, embd = 128, block = 128, batch = 16, val_every = 250, log_every = 50;
    double lr = 1e-3, clip = 1.0, val = 0.05;
    bool bad = false; /* a value that is not a number */
    for (int i = 1; i < argc && !bad; i += 2) {
        const char *k = argv[i], *v = argv[i + 1]; /* argv[argc] is NULL */
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "gpt_text: %s needs a value (see --help)\n", k);
            return 2;
        }
        if (!strcmp(k, "--text"))
            text = v;
        else if (!strcmp(k, "--replicas"))
            replicas = (int)number(k, v, &bad);
        else if (!strcmp(k, "--epochs"))
            epochs = (long long)number(k, v, &bad);
        else if (!strcmp(k, "--layers"))
            layers = (int)number(k, v, &bad);
        else if (!strcmp(k, "--heads"))
            heads = (int)number(k, v, &bad);
        else if (!strcmp(k, "--embd"))
            embd = (long long)number(k, v, &bad);
        else if (!strcmp(k, "--block"))
            block = (long long)number(k, v, &bad);
        else if (!strcmp(k, "--batch"))
            batch = (long long)number(k, v, &bad);
        else if (!strcmp(k, "--lr"))
            lr = number(k, v, &bad);
        else if (!strcmp(k, "--clip"))
            clip = number(k, v, &bad);
        else if (!strcmp(k, "--val"))
            val = number(k, v, &bad);
        else if (!strcmp(k, "--val-every"))
            val_every = (long long)number(k, v, &bad);
        else if (!strcmp(k, "--log-every"))
            log_every = (long long)number(k, v, &bad);
        else if (!strcmp(k, "--checkpoint-dir"))
            ckpt = v;
        else if (!strcmp(k, "--threads"))
            threads = (int)number(k, v, &bad);
        else if (!strcmp(k, "--zero"))
            zero = (int)number(k, v, &bad);
        else if (!strcmp(k, "--vocab"))
            vocab = v;
        else if (!strcmp(k, "--log-dir"))
            log_dir = v;
        else if (!strcmp(k, "--bpe-merges"))
            merges = (int)number(k, v, &bad);
        else {
            fprintf(stderr, "gpt_text: unknown option %s (see --help)\n", k);
            return 2;
        }
    }
    if (bad)
        return 2;
    trainer_register_train_step("clipped", clipped_step);
    trainer_register_step_keys("clipped", "clip");
    trainer_register_validate_step("tokens", token_validate_step);
    if (ct_init(NULL) != 0) {
        fprintf(stderr, "gpt_text: %s\n", ct_last_error());
        return 1;
    }
    /* tokens: the byte-level tokenizer, or --vocab's with the text encoded into a token file */
    char tokens[1100] = "";
    ct_tokenizer *tk = NULL;
    int64_t val_tokens = 0, val_bytes = 0;
    long long steps = -1;
    ct_tokens_info info = {.vocab_size = 256};
    if (make_text_file(text) < 0)
        goto fail;
    if (vocab) {
        snprintf(tokens, sizeof tokens, "%s.tok", vocab);
        if (make_tokenizer(vocab, text, val, merges, &tk) < 0 ||
            ct_tokens_write_file(tk, text, tokens, &info) < 0)
            goto fail;
        fprintf(stderr, "gpt_text: %s: %lld tokens of %lld bytes, vocabulary %d\n", tokens,
                (long long)info.n_tokens, (long long)info.n_bytes, info.vocab_size);
    } else if (ct_tokenizer_new_bytes(&tk) < 0) {
        goto fail;
    }
    const char *tok = vocab ? tokens : NULL;
    steps = run_steps(text, tok, val, block, batch, replicas, epochs);
    if (steps < 0 || count_val(tk, text, tok, val, block, replicas, &val_tokens, &val_bytes) < 0)
        goto fail;
    bytes_ratio = val_bytes > 0 ? (double)val_tokens / (double)val_bytes : 1.0;
    char config[2600];
    snprintf(config, sizeof config,
             "%s=%s,vocab_size=%d,val_fraction=%g,n_layer=%d,n_head=%d,n_embd=%lld,"
             "block_size=%lld,lr=%g,weight_decay=0.1,beta2=0.95,decay_matrices_only=1,clip=%g,"
             "warmup_steps=20,total_steps=%lld,start_factor=0.05,eta_min=%g",
             vocab ? "token_file" : "text_file", vocab ? tokens : text, info.vocab_size, val,
             layers, heads, embd, block, lr, clip, steps > 20 ? steps : 21, lr / 10);
    trainer *t = NULL;
    trainer_stats st;
    int rc = trainer_create(&(trainer_opts){.model = "gpt",
                                            .data = "text",
                                            .optimizer = "adamw",
                                            .loss = "cross_entropy",
                                            .scheduler = "warmup_cosine",
                                            .scheduler_step = "batch",
                                            .train_step = "clipped",
                                            .validate_step = "tokens",
                                            .config = config,
                                            .num_replicas = replicas,
                                            .cpus_per_replica = threads,
                                            .batch_size = batch,
                                            .epochs = epochs,
                                            .seed = 1,
                                            .zero_stage = zero},
                            &t);
    if (rc == 0)
        rc = trainer_train(t, .max_retries = 2, .stats = &st, .on_epoch = on_epoch,
                           .checkpoint_dir = ckpt, .resume = ckpt, .log_dir = log_dir,
                           .validate_every_steps = val_every, .on_validate = on_validate,
                           .log_every_steps = (int)log_every, .progress = TRAINER_PROGRESS_OFF,
                           .flops_per_sample =
                               flops_per_window(trainer_get_model(t), layers, embd, block));
    if (rc == 0)
        rc = trainer_validate(t, &st);
    if (rc == 0 && st.val_samples != val_tokens) /* the count above is the trainer's */
        fprintf(stderr, "gpt_text: the validation counted %lld tokens, not %lld\n",
                (long long)st.val_samples, (long long)val_tokens);
    if (rc == 0)
        printf("optimizer_state_bytes=%lld zero=%d\n", (long long)st.optim_state_bytes, zero);
    if (rc == 0)
        printf("final: val_loss=%.4f tokens_per_s=%.0f params=%lld vocab=%d val_tokens=%lld "
               "val_bytes=%lld\n",
               st.val_loss * bytes_ratio, st.samples_per_s * (double)block,
               (long long)ct_module_num_params(trainer_get_model(t)), info.vocab_size,
               (long long)val_tokens, (long long)val_bytes);
    else
        fprintf(stderr, "gpt_text: %s\n", ct_last_error());
    trainer_shutdown(&t);
    ct_tokenizer_destroy(&tk);
    ct_shutdown();
    return rc == 0 ? 0 : 1;
fail:
    if (*ct_last_error())
        fprintf(stderr, "gpt_text: %s\n", ct_last_error());
    ct_tokenizer_destroy(&tk);
    ct_shutdown();
    return 1;
}
