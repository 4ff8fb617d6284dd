/* examples/gpt_sample.c — text from a gpt_text checkpoint: the prompt, then --tokens tokens
 * drawn one at a time from the model's next-token distribution, at a temperature and from the
 * top-k tokens only, decoded to text. No cluster: the model runs in this process.
 *
 *   gpt_sample --checkpoint FILE [--prompt TEXT] [--tokens 200] [--temperature 0.8]
 *              [--top-k 20] [--seed 1] [--layers 4] [--heads 4] [--embd 128] [--block 128]
 *              [--vocab FILE]
 *
 * The shape options and --vocab (the BPE vocabulary file; none: bytes) must be the ones the
 * checkpoint was trained with (gpt_text's): the prompt is encoded and the output decoded with
 * it, and the model's vocab_size is its. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/data.h"
#include "ct/error.h"
#include "ct/nn.h"

static uint64_t rng = 1;
static double uniform(void) /* xorshift64*, [0, 1) */
{
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

/* a token drawn from logits (v) / temperature, among the top_k largest (0: all); scratch (v)
 * doubles, sorted (v) floats */
static int draw(const float *logits, int v, double temperature, int top_k, double *p, float *sorted)
{
    double kth = -INFINITY, max = -INFINITY, sum = 0;
    if (top_k > 0 && top_k < v) {
        memcpy(sorted, logits, sizeof(float) * (size_t)v);
        for (int i = 0; i < top_k; i++) /* partial selection: the k-th largest */
            for (int j = i + 1; j < v; j++)
                if (sorted[j] > sorted[i]) {
                    float t = sorted[i];
                    sorted[i] = sorted[j];
                    sorted[j] = t;
                }
        kth = sorted[top_k - 1];
    }
    for (int i = 0; i < v; i++)
        max = logits[i] > max ? logits[i] : max;
    for (int i = 0; i < v; i++) {
        p[i] = logits[i] < kth ? 0.0 : exp((logits[i] - max) / temperature);
        sum += p[i];
    }
    double u = uniform() * sum;
    for (int i = 0; i < v; i++)
        if ((u -= p[i]) < 0)
            return i;
    return v - 1;
}

/* option k's value v as a number; else *bad, said on stderr */
static double number(const char *k, const char *v, bool *bad)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end) {
        fprintf(stderr, "gpt_sample: %s '%s' is not a number\n", k, v);
        *bad = true;
    }
    return x;
}

int main(int argc, char **argv)
{
    const char *ckpt = NULL, *prompt = "And God said", *vocab = NULL;
    int tokens = 200, top_k = 20;
    double temperature = 0.8;
    ct_gpt_config c = {
        .n_layer = 4, .n_head = 4, .n_embd = 128, .block_size = 128, .vocab_size = 256};
    bool bad = false; /* a value that is not a number */
    for (int i = 1; i < argc && !bad; i += 2) {
        const char *k = argv[i], *v = argv[i + 1]; /* argv[argc] is NULL */
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            printf("usage: gpt_sample --checkpoint FILE [--prompt TEXT] [--tokens 200]\n"
                   "                  [--temperature 0.8] [--top-k 20] [--seed 1] [--layers 4]\n"
                   "                  [--heads 4] [--embd 128] [--block 128] [--vocab FILE]\n"
                   "prints text from a gpt_text checkpoint; the shape options and --vocab must\n"
                   "be the ones it was trained with (gpt_text's defaults by default)\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "gpt_sample: %s needs a value (see --help)\n", k);
            return 2;
        }
        if (!strcmp(k, "--checkpoint"))
            ckpt = v;
        else if (!strcmp(k, "--prompt"))
            prompt = v;
        else if (!strcmp(k, "--tokens"))
            tokens = (int)number(k, v, &bad);
        else if (!strcmp(k, "--temperature"))
            temperature = number(k, v, &bad);
        else if (!strcmp(k, "--top-k"))
            top_k = (int)number(k, v, &bad);
        else if (!strcmp(k, "--seed"))
            rng = (uint64_t)number(k, v, &bad) * 0x9E3779B97F4A7C15ULL | 1;
        else if (!strcmp(k, "--layers"))
            c.n_layer = (int)number(k, v, &bad);
        else if (!strcmp(k, "--heads"))
            c.n_head = (int)number(k, v, &bad);
        else if (!strcmp(k, "--embd"))
            c.n_embd = (int64_t)number(k, v, &bad);
        else if (!strcmp(k, "--block"))
            c.block_size = (int64_t)number(k, v, &bad);
        else if (!strcmp(k, "--vocab"))
            vocab = v;
        else {
            fprintf(stderr, "gpt_sample: unknown option %s (see --help)\n", k);
            return 2;
        }
    }
    if (bad)
        return 2;
    if (!ckpt || !prompt[0] || tokens < 0 || !(temperature > 0)) {
        fprintf(stderr, "gpt_sample: needs --checkpoint FILE, a prompt, temperature > 0\n");
        return 2;
    }
    ct_tokenizer *tk = NULL;
    if ((vocab ? ct_tokenizer_load(vocab, &tk) : ct_tokenizer_new_bytes(&tk)) < 0) {
        fprintf(stderr, "gpt_sample: %s\n", ct_last_error());
        return 1;
    }
    int v = ct_tokenizer_vocab_size(tk);
    c.vocab_size = v;
    ct_module *m = ct_nn_gpt_new(&c);
    if (!m || ct_module_load(m, ckpt) < 0) {
        fprintf(stderr, "gpt_sample: %s\n", ct_last_error());
        ct_module_destroy(&m);
        ct_tokenizer_destroy(&tk);
        return 1;
    }
    ct_module_train(m, false);
    ct_autograd_set_enabled(false);
    size_t n = strlen(prompt);
    int32_t *ids = malloc(sizeof(int32_t) * (n + (size_t)tokens));
    double *p = malloc(sizeof(double) * (size_t)v);
    float *sorted = malloc(sizeof(float) * (size_t)v);
    int64_t len = ct_tokenizer_encode(tk, (const unsigned char *)prompt, (int64_t)n, ids);
    int rc = 0;
    for (int s = 0; s < tokens && rc == 0; s++) {
        int64_t t = len < c.block_size ? len : c.block_size, shape[2] = {1, t};
        ct_tensor *idx = ct_tensor_new(CT_I64, 2, shape);
        for (int64_t i = 0; i < t; i++)
            ((int64_t *)ct_tensor_data(idx))[i] = ids[len - t + i];
        ct_tensor *logits = ct_module_forward(m, idx); /* (t, v) */
        if (!logits) {
            fprintf(stderr, "gpt_sample: %s\n", ct_last_error());
            rc = 1;
        } else {
            ids[len++] =
                draw(ct_tensor_f32(logits) + (t - 1) * v, v, temperature, top_k, p, sorted);
        }
        ct_tensor_release(&logits);
        ct_tensor_release(&idx);
    }
    int64_t bytes = ct_tokenizer_decode(tk, ids, len, NULL, 0);
    unsigned char *text = malloc((size_t)bytes + 1);
    ct_tokenizer_decode(tk, ids, len, text, bytes);
    fwrite(text, 1, (size_t)bytes, stdout);
    putchar('\n');
    free(text);
    free(ids);
    free(p);
    free(sorted);
    ct_module_destroy(&m);
    ct_tokenizer_destroy(&tk);
    return rc;
}
