/* trainer/pipeline/gpt_stage.c — the GPT split into pipeline stages, and the synthetic token
 * data of the stage actors' jobs (stage.h).
 *
 * A stage is a Sequential of the GPT's own modules named as ct_nn_gpt_new names them
 * ("transformer.wte", "transformer.h.3", "transformer.ln_f"), so its state dict is a part of the
 * whole model's; its weights are copied from a whole model built with the same seed, which is what
 * makes a pipelined run start where one process does. Its forward is this file's, not the
 * Sequential's: gpt_forward's (trainer/nn/module.c) steps, cut at the stage's layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "stage.h"

struct ct__gpt_stage {
    ct_module *seq; /* owns the children below */
    ct_module *wte, *wpe, *drop, *ln_f;
    ct_module **blocks;
    int nblocks;
    bool first, last;
    int64_t n_embd;
};

void ct__pipe_gpt_layers(int n_layer, int stages, int s, int *first, int *n)
{
    int base = n_layer / stages, extra = n_layer % stages;
    *n = base + (s < extra);
    *first = s * base + (s < extra ? s : extra);
}

uint64_t ct__pipe_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

#define SEQ_LEN 4096

int ct__pipe_gpt_batch(uint64_t seed, int64_t step, int64_t row0, int64_t n, int64_t T,
                       int64_t vocab, ct_tensor **x, ct_tensor **y)
{
    *x = *y = NULL;
    if (n < 1 || T < 1 || T + 1 >= SEQ_LEN || vocab < 2)
        return ct__error(CT_EINVAL, "pipeline data: %lld rows of %lld tokens, vocab %lld",
                         (long long)n, (long long)T, (long long)vocab);
    int64_t *seq = malloc(SEQ_LEN * sizeof *seq);
    *x = ct_tensor_new(CT_I64, 2, (int64_t[]){n, T});
    *y = ct_tensor_new(CT_I64, 1, (int64_t[]){n * T});
    if (!seq || !*x || !*y) {
        free(seq);
        ct_tensor_release(x);
        ct_tensor_release(y);
        return ct__error(CT_ENOMEM, "pipeline data: out of memory");
    }
    /* a walk where the next token is mostly a function of the last one: learnable */
    seq[0] = (int64_t)(ct__pipe_mix(seed) % (uint64_t)vocab);
    for (int i = 1; i < SEQ_LEN; i++) {
        uint64_t r = ct__pipe_mix(seed ^ (uint64_t)i * 0x632be59bd9b4e019ull);
        seq[i] = (seq[i - 1] * 5 + 1 + (int64_t)(r % 4 == 0 ? r % 3 : 0)) % vocab;
    }
    int64_t *xd = ct_tensor_data(*x), *yd = ct_tensor_data(*y);
    for (int64_t r = 0; r < n; r++) {
        uint64_t h =
            ct__pipe_mix(seed ^ ct__pipe_mix((uint64_t)step * 1000003ull + (uint64_t)(row0 + r)));
        int64_t at = (int64_t)(h % (uint64_t)(SEQ_LEN - T - 1));
        for (int64_t t = 0; t < T; t++) {
            xd[r * T + t] = seq[at + t];
            yd[r * T + t] = seq[at + t + 1];
        }
    }
    free(seq);
    return 0;
}

static ct_module *named(ct_module *m, const char *name)
{
    return m ? ct_module_set_name(m, name) : NULL;
}

void ct__gpt_stage_destroy(ct__gpt_stage **g)
{
    if (!g || !*g)
        return;
    ct_module_destroy(&(*g)->seq);
    free((*g)->blocks);
    free(*g);
    *g = NULL;
}

/* the stage's weights: whole's */
static int load_weights(ct__gpt_stage *g, ct_module *whole)
{
    const ct_named_tensor *sd = NULL;
    int n = 0, rc = whole ? ct_module_state_dict(whole, &sd, &n) : CT_EINVAL;
    if (rc == 0)
        rc = ct_module_load_state_dict(g->seq, sd, n, false);
    return rc;
}

ct__gpt_stage *ct__gpt_stage_new(const ct_gpt_config *cfg, int s, int stages, uint64_t seed)
{
    if (!cfg)
        return ct__gpt_stage_from(cfg, s, stages, NULL);
    ct_nn_manual_seed(seed);
    ct_module *whole = ct_nn_gpt_new(cfg);
    ct__gpt_stage *g = whole ? ct__gpt_stage_from(cfg, s, stages, whole) : NULL;
    ct_module_destroy(&whole);
    return g;
}

ct__gpt_stage *ct__gpt_stage_from(const ct_gpt_config *cfg, int s, int stages, ct_module *whole)
{
    if (!cfg || stages < 1 || s < 0 || s >= stages || stages > cfg->n_layer) {
        ct__error(CT_EINVAL, "gpt stage %d of %d: want 1 <= stages <= n_layer (%d)", s, stages,
                  cfg ? cfg->n_layer : 0);
        return NULL;
    }
    int first = 0, nl = 0;
    ct__pipe_gpt_layers(cfg->n_layer, stages, s, &first, &nl);
    ct__gpt_stage *g = calloc(1, sizeof *g);
    ct_module **c = calloc((size_t)nl + 5, sizeof *c);
    if (!g || !c || !(g->blocks = calloc((size_t)nl, sizeof *g->blocks))) {
        free(c);
        ct__gpt_stage_destroy(&g);
        ct__error(CT_ENOMEM, "gpt stage: out of memory");
        return NULL;
    }
    g->first = s == 0;
    g->last = s == stages - 1;
    g->n_embd = cfg->n_embd;
    int k = 0;
    if (g->first || g->last) /* the output layer is the token embedding (tied) */
        c[k++] = g->wte =
            named(ct_nn_embedding_new(cfg->vocab_size, cfg->n_embd, -1), "transformer.wte");
    if (g->first) {
        c[k++] = g->wpe =
            named(ct_nn_embedding_new(cfg->block_size, cfg->n_embd, -1), "transformer.wpe");
        c[k++] = g->drop = named(ct_nn_dropout_new(cfg->dropout), "transformer.drop");
    }
    for (int i = 0; i < nl; i++) {
        char name[48];
        snprintf(name, sizeof name, "transformer.h.%d", first + i);
        c[k++] = g->blocks[i] =
            named(ct_nn_gpt_block_new(cfg->n_embd, cfg->n_head, cfg->dropout), name);
    }
    g->nblocks = nl;
    if (g->last)
        c[k++] = g->ln_f = named(ct_nn_layernorm_new(cfg->n_embd, 1e-5f), "transformer.ln_f");
    g->seq = ct_nn_sequential_new(k, c); /* owns the children, also when it fails */
    free(c);
    if (!g->seq || load_weights(g, whole) < 0) {
        ct__error(CT_EINVAL, "gpt stage %d of %d: %s", s, stages, ct_last_error());
        ct__gpt_stage_destroy(&g);
        return NULL;
    }
    return g;
}

ct_module *ct__gpt_stage_module(ct__gpt_stage *g)
{
    return g->seq;
}

static ct_tensor *weight_of(ct_module *m)
{
    const ct_named_tensor *sd = NULL;
    int n = 0;
    return ct_module_state_dict(m, &sd, &n) == 0 && n > 0 ? sd[0].tensor : NULL;
}

ct_tensor *ct__gpt_stage_tied(ct__gpt_stage *g)
{
    return g->wte ? weight_of(g->wte) : NULL;
}

/* token and position embeddings, dropout */
static ct_tensor *embed(ct__gpt_stage *g, ct_tensor *idx)
{
    if (ct_tensor_dtype(idx) == CT_F32) { /* token ids carried as floats (a dataset's samples) */
        ct_tensor *i64 = ct_tensor_to_i64(idx);
        ct_tensor *y = i64 ? embed(g, i64) : NULL;
        ct_tensor_release(&i64);
        return y;
    }
    if (ct_tensor_dtype(idx) != CT_I64 || ct_tensor_ndim(idx) != 2) {
        ct__error(CT_EINVAL, "gpt stage 0: input must be (B, T) i64 token ids");
        return NULL;
    }
    int64_t B = ct_tensor_dim(idx, 0), T = ct_tensor_dim(idx, 1);
    ct_tensor *pos = ct_tensor_new(CT_I64, 2, ct_tensor_shape(idx)), *t[3] = {0}, *y = NULL;
    if (!pos)
        return NULL;
    int64_t *pp = ct_tensor_data(pos);
    for (int64_t i = 0; i < B * T; i++)
        pp[i] = i % T;
    if ((t[0] = ct_module_forward(g->wte, idx)) && (t[1] = ct_module_forward(g->wpe, pos)) &&
        (t[2] = ct_nn_add(t[0], t[1])))
        y = ct_module_forward(g->drop, t[2]);
    for (int i = 0; i < 3; i++)
        ct_tensor_release(&t[i]);
    ct_tensor_release(&pos);
    return y;
}

/* ln_f, then the token embedding's weight as the output layer: (B*T, vocab) */
static ct_tensor *head(ct__gpt_stage *g, ct_tensor *x)
{
    int64_t s2[2] = {ct_tensor_numel(x) / g->n_embd, g->n_embd};
    ct_tensor *n = ct_module_forward(g->ln_f, x), *r = n ? ct_nn_reshape(n, 2, s2) : NULL;
    ct_tensor *y = r ? ct_nn_linear(r, weight_of(g->wte), NULL) : NULL;
    ct_tensor_release(&n);
    ct_tensor_release(&r);
    return y;
}

ct_tensor *ct__gpt_stage_forward(ct__gpt_stage *g, ct_tensor *x)
{
    ct_tensor *h = g->first ? embed(g, x) : ct_tensor_retain(x);
    for (int i = 0; h && i < g->nblocks; i++) {
        ct_tensor *next = ct_module_forward(g->blocks[i], h);
        ct_tensor_release(&h);
        h = next;
    }
    if (h && g->last) {
        ct_tensor *y = head(g, h);
        ct_tensor_release(&h);
        h = y;
    }
    return h;
}
