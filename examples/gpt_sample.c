/* examples/gpt_sample.c — text from a gpt_text checkpoint: the prompt, then --tokens tokens
 * from ct_gpt_generate (ct/infer.h: nanoGPT's generate, at a temperature, from the top-k
 * tokens), decoded to text. No cluster: the model runs in this process. Installed by
 * `cmake --install` (bin/gpt_sample).
 *
 *   gpt_sample --checkpoint FILE|DIR [--prompt TEXT] [--tokens 200] [--temperature 0.8]
 *              [--top-k 20] [--seed 1] [--vocab FILE] [--threads N]
 *              [--layers L --heads H --embd C --block T]
 *
 * The model is built from the checkpoint's own metadata (ct_module_from_checkpoint: a
 * trainer's checkpoint file, or a checkpoint_dir's latest). The shape options build it by
 * hand instead, for a ct_module_save file; its weights then load strictly (a checkpoint of
 * another shape fails, naming the first mismatch). --vocab (the BPE vocabulary file; none:
 * bytes) must be the one the checkpoint was trained with: the prompt is encoded and the output
 * decoded with it. Temperature 0 is greedy. --threads caps the threads (ct/infer.h's rule
 * picks one for a small model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/data.h"
#include "ct/error.h"
#include "ct/infer.h"

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
    int tokens = 200, top_k = 20, threads = 0;
    double temperature = 0.8;
    uint64_t seed = 1;
    ct_gpt_config c = {0}; /* by hand when the shape options are given */
    bool bad = false;      /* a value that is not a number */
    for (int i = 1; i < argc && !bad; i += 2) {
        const char *k = argv[i], *v = argv[i + 1]; /* argv[argc] is NULL */
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            printf("usage: gpt_sample --checkpoint FILE|DIR [--prompt TEXT] [--tokens 200]\n"
                   "                  [--temperature 0.8] [--top-k 20] [--seed 1] [--vocab FILE]\n"
                   "                  [--threads N] [--layers L --heads H --embd C --block T]\n"
                   "prints text from a trainer's checkpoint (a file, or a checkpoint directory's\n"
                   "latest); the model is built from its metadata, or from the shape options\n"
                   "(a ct_module_save file); --vocab must be the one it was trained with;\n"
                   "temperature 0 is greedy, top-k 0 takes all tokens\n");
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
            seed = (uint64_t)number(k, v, &bad);
        else if (!strcmp(k, "--threads"))
            threads = (int)number(k, v, &bad);
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
    if (!ckpt || !prompt[0] || tokens < 0 || !(temperature >= 0) || top_k < 0) {
        fprintf(stderr, "gpt_sample: needs --checkpoint, a prompt, temperature >= 0, top-k >= 0\n");
        return 2;
    }
    bool by_hand = c.n_layer || c.n_head || c.n_embd || c.block_size;
    if (by_hand && !(c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0 && c.block_size > 0)) {
        fprintf(stderr, "gpt_sample: the shape options go together: --layers --heads --embd "
                        "--block\n");
        return 2;
    }
    ct_tokenizer *tk = NULL;
    ct_module *m = NULL;
    int32_t *ids = NULL;
    unsigned char *text = NULL;
    int rc = 1;
    if ((vocab ? ct_tokenizer_load(vocab, &tk) : ct_tokenizer_new_bytes(&tk)) < 0)
        goto out;
    int v = ct_tokenizer_vocab_size(tk);
    if (by_hand) {
        c.vocab_size = v;
        if (!(m = ct_nn_gpt_new(&c)) || ct_module_load(m, ckpt) < 0)
            goto out;
    } else if (ct_module_from_checkpoint(ckpt, &m) < 0 || ct_nn_gpt_config(m, &c) < 0) {
        goto out;
    }
    if (c.vocab_size != v) {
        fprintf(stderr,
                "gpt_sample: the model's vocabulary is %lld tokens, the tokenizer's %d: give the "
                "--vocab file it was trained with\n",
                (long long)c.vocab_size, v);
        goto done;
    }
    if (threads > 0)
        ct_nn_set_threads(threads);
    size_t n = strlen(prompt);
    ids = malloc(sizeof(int32_t) * (n + (size_t)tokens));
    int64_t len =
        ids ? ct_tokenizer_encode(tk, (const unsigned char *)prompt, (int64_t)n, ids) : -1;
    if (len < 1 ||
        ct_gpt_generate(m, ids, len, tokens, (float)temperature, top_k, seed, ids + len) < 0)
        goto out;
    len += tokens;
    int64_t bytes = ct_tokenizer_decode(tk, ids, len, NULL, 0);
    if (bytes < 0 || !(text = malloc((size_t)bytes + 1)) ||
        ct_tokenizer_decode(tk, ids, len, text, bytes) < 0)
        goto out;
    fwrite(text, 1, (size_t)bytes, stdout);
    putchar('\n');
    rc = 0;
    goto done;
out:
    fprintf(stderr, "gpt_sample: %s\n", *ct_last_error() ? ct_last_error() : "out of memory");
done:
    free(text);
    free(ids);
    ct_module_destroy(&m);
    ct_tokenizer_destroy(&tk);
    return rc;
}
