/* trainer/nn/module.c — torch.nn-style modules: construction with PyTorch's default
 * initialisation, forward, train/eval, dotted names, flat parameter/gradient buffers, the state
 * dict and its safetensors file.
 *
 * A module is a tagged struct: its own parameters (weight, bias), buffers (BatchNorm's running
 * stats), children, and the hyper-parameters of its kind. Not here: op math (ops.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/nn.h"
#include "ct/optim.h"
#include "trainer/nn/nn_impl.h"
#include "trainer/nn/safetensors.h"
#include "trainer/tensor/tensor_impl.h"

typedef enum kind {
    M_LINEAR,
    M_CONV,
    M_CONVT,
    M_BN,
    M_RELU,
    M_LRELU,
    M_ELU,
    M_TANH,
    M_SIGMOID,
    M_MAXPOOL,
    M_AVGPOOL,
    M_APOOL,
    M_DROPOUT,
    M_FLATTEN,
    M_SEQ,
    M_RES,
    M_EMBEDDING,
    M_LAYERNORM,
    M_GELU,
    M_ATTN,  /* causal self-attention: children c_attn, c_proj */
    M_BLOCK, /* GPT block: children ln_1, attn, ln_2, mlp */
    M_GPT,   /* children wte, wpe, drop, h, ln_f; the output layer is wte's weight */
    M_TO,    /* ct_tensor_to(x, to): a model across devices */
} kind;

#define CT__MODULE_MAX_DEVICES 8

struct ct_module {
    kind kind;
    char name[32];
    bool training;
    ct_module **children;
    int nchildren;
    ct_tensor *params[2];
    const char *pnames[2];
    int nparams;
    ct_tensor *buffers[3];
    const char *bnames[3];
    int nbuffers;
    /* hyper-parameters */
    ct_conv_opts conv;
    int k, s, pad, oh, ow;
    float alpha, p, eps, momentum;
    int64_t padding_idx, block_size; /* Embedding; GPT */
    int heads;                       /* attention */
    ct_device to;                    /* M_TO */
    /* built on demand (owned) */
    ct_param_ref *refs;
    char **ref_names;
    ct_tensor **ref_tensors; /* the parameter of each ref (borrowed: the tree's) */
    int nrefs;
    ct_named_tensor *sd;
    char **sd_names;
    int nsd;
    /* one value and one gradient buffer per device of the tree's parameters, in the order the
     * devices first appear in ct_module_params' (nflat of them; flat_n floats each) */
    ct__storage *flat_v[CT__MODULE_MAX_DEVICES], *flat_g[CT__MODULE_MAX_DEVICES];
    int64_t flat_n[CT__MODULE_MAX_DEVICES];
    int nflat;
    struct param_hook *hooks; /* nhooks entries while gradient-ready hooks are set (owned) */
    int nhooks;
};

/* What a parameter's tensor-level hook points at: the module-level callback and its index. */
typedef struct param_hook {
    ct_param_ready_fn fn;
    void *user;
    int index;
    ct_tensor *t; /* the parameter (borrowed) */
} param_hook;

/* Unhooks the parameters that still point at m's hook table, then frees it. */
static void drop_hooks(ct_module *m)
{
    for (int i = 0; i < m->nhooks; i++)
        if (m->hooks[i].t->hook_user == &m->hooks[i])
            ct_tensor_on_grad_ready(m->hooks[i].t, NULL, NULL);
    free(m->hooks);
    m->hooks = NULL;
    m->nhooks = 0;
}

/* ---------------- construction ---------------- */

static ct_module *mod_new(kind k)
{
    ct_module *m = calloc(1, sizeof(*m));
    if (!m) {
        ct__error(CT_ENOMEM, "module: out of memory");
        return NULL;
    }
    m->kind = k;
    m->training = true;
    return m;
}

static int add_param(ct_module *m, const char *name, int ndim, const int64_t *shape, float bound)
{
    ct_tensor *t = ct_tensor_new(CT_F32, ndim, shape);
    if (!t)
        return CT_ENOMEM;
    float *p = ct__f32(t);
    int64_t n = ct_tensor_numel(t);
    if (bound >= 0)
        for (int64_t i = 0; i < n; i++)
            p[i] = ct__rng_range(-bound, bound);
    ct_tensor_set_requires_grad(t, true);
    m->pnames[m->nparams] = name;
    m->params[m->nparams++] = t;
    return 0;
}

static int add_buffer(ct_module *m, const char *name, ct_dtype dt, int64_t n, float v)
{
    ct_tensor *t = ct_tensor_new(dt, 1, &n);
    if (!t)
        return CT_ENOMEM;
    if (dt == CT_F32)
        ct_tensor_fill_f32(t, v);
    if (dt == CT_I64)
        t->ndim = 0; /* num_batches_tracked is a scalar */
    m->bnames[m->nbuffers] = name;
    m->buffers[m->nbuffers++] = t;
    return 0;
}

ct_module *ct_nn_linear_new(int64_t in, int64_t out, bool bias)
{
    if (in <= 0 || out <= 0) {
        ct__error(CT_EINVAL, "Linear: in_features %lld / out_features %lld must be > 0",
                  (long long)in, (long long)out);
        return NULL;
    }
    ct_module *m = mod_new(M_LINEAR);
    if (!m)
        return NULL;
    float bound = 1.0f / sqrtf((float)in); /* kaiming_uniform(a=sqrt(5)) == 1/sqrt(fan_in) */
    int64_t ws[2] = {out, in};
    if (add_param(m, "weight", 2, ws, bound) < 0 ||
        (bias && add_param(m, "bias", 1, &out, bound) < 0))
        goto err;
    return m;
err:
    ct_module_destroy(&m);
    return NULL;
}

static ct_module *conv_new(kind k, int64_t in, int64_t out, int kernel, const ct_conv_opts *o,
                           bool bias)
{
    if (in <= 0 || out <= 0 || kernel <= 0) {
        ct__error(CT_EINVAL, "%s: in %lld, out %lld, kernel %d must be > 0",
                  k == M_CONV ? "Conv2d" : "ConvTranspose2d", (long long)in, (long long)out,
                  kernel);
        return NULL;
    }
    ct_module *m = mod_new(k);
    if (!m)
        return NULL;
    if (o)
        m->conv = *o;
    /* PyTorch: fan_in = weight.size(1) * kh * kw, for both Conv2d (in) and ConvTranspose (out) */
    int64_t fan_in = (k == M_CONV ? in : out) * kernel * kernel;
    float bound = 1.0f / sqrtf((float)fan_in);
    int64_t ws[4] = {k == M_CONV ? out : in, k == M_CONV ? in : out, kernel, kernel};
    if (add_param(m, "weight", 4, ws, bound) < 0 ||
        (bias && add_param(m, "bias", 1, &out, bound) < 0))
        goto err;
    return m;
err:
    ct_module_destroy(&m);
    return NULL;
}

ct_module *ct_nn_conv2d_new(int64_t in, int64_t out, int kernel, const ct_conv_opts *o, bool bias)
{
    return conv_new(M_CONV, in, out, kernel, o, bias);
}

ct_module *ct_nn_conv_transpose2d_new(int64_t in, int64_t out, int kernel, const ct_conv_opts *o,
                                      bool bias)
{
    return conv_new(M_CONVT, in, out, kernel, o, bias);
}

static ct_module *bn_new(int64_t c)
{
    if (c <= 0) {
        ct__error(CT_EINVAL, "BatchNorm: num_features %lld must be > 0", (long long)c);
        return NULL;
    }
    ct_module *m = mod_new(M_BN);
    if (!m)
        return NULL;
    m->eps = 1e-5f;
    m->momentum = 0.1f;
    if (add_param(m, "weight", 1, &c, -1) < 0 || add_param(m, "bias", 1, &c, -1) < 0 ||
        add_buffer(m, "running_mean", CT_F32, c, 0.0f) < 0 ||
        add_buffer(m, "running_var", CT_F32, c, 1.0f) < 0 ||
        add_buffer(m, "num_batches_tracked", CT_I64, 1, 0) < 0)
        goto err;
    ct_tensor_fill_f32(m->params[0], 1.0f);
    return m;
err:
    ct_module_destroy(&m);
    return NULL;
}

ct_module *ct_nn_batchnorm1d_new(int64_t features)
{
    return bn_new(features);
}
ct_module *ct_nn_batchnorm2d_new(int64_t channels)
{
    return bn_new(channels);
}

ct_module *ct_nn_relu_new(void)
{
    return mod_new(M_RELU);
}
ct_module *ct_nn_leaky_relu_new(float negative_slope)
{
    ct_module *m = mod_new(M_LRELU);
    if (m)
        m->alpha = negative_slope;
    return m;
}
ct_module *ct_nn_elu_new(float alpha)
{
    ct_module *m = mod_new(M_ELU);
    if (m)
        m->alpha = alpha;
    return m;
}
ct_module *ct_nn_tanh_new(void)
{
    return mod_new(M_TANH);
}
ct_module *ct_nn_sigmoid_new(void)
{
    return mod_new(M_SIGMOID);
}

static ct_module *pool_new(kind k, int kernel, int stride, int padding)
{
    if (kernel <= 0 || stride < 0 || padding < 0) {
        ct__error(CT_EINVAL, "pool: kernel %d, stride %d, padding %d invalid", kernel, stride,
                  padding);
        return NULL;
    }
    ct_module *m = mod_new(k);
    if (m) {
        m->k = kernel;
        m->s = stride ? stride : kernel;
        m->pad = padding;
    }
    return m;
}

ct_module *ct_nn_maxpool2d_new(int kernel, int stride, int padding)
{
    return pool_new(M_MAXPOOL, kernel, stride, padding);
}
ct_module *ct_nn_avgpool2d_new(int kernel, int stride, int padding)
{
    return pool_new(M_AVGPOOL, kernel, stride, padding);
}
ct_module *ct_nn_adaptive_avgpool2d_new(int out_h, int out_w)
{
    if (out_h <= 0 || out_w <= 0) {
        ct__error(CT_EINVAL, "AdaptiveAvgPool2d: output size %dx%d", out_h, out_w);
        return NULL;
    }
    ct_module *m = mod_new(M_APOOL);
    if (m) {
        m->oh = out_h;
        m->ow = out_w;
    }
    return m;
}
ct_module *ct_nn_dropout_new(float p)
{
    if (!(p >= 0.0f && p <= 1.0f)) {
        ct__error(CT_EINVAL, "Dropout: p = %g not in [0, 1]", p);
        return NULL;
    }
    ct_module *m = mod_new(M_DROPOUT);
    if (m)
        m->p = p;
    return m;
}
ct_module *ct_nn_flatten_new(void)
{
    return mod_new(M_FLATTEN);
}
ct_module *ct_nn_to_device_new(ct_device device)
{
    if (ct_device_check(device) < 0)
        return NULL;
    ct_module *m = mod_new(M_TO);
    if (m)
        m->to = device;
    return m;
}

static ct_module *container_new(kind k, int n, ct_module *const *children)
{
    ct_module *m = NULL;
    int i;
    for (i = 0; i < n; i++)
        if (!children[i])
            break;
    if (n < 0 || i < n) {
        ct__error(CT_EINVAL, "%s: child %d is NULL (its constructor failed?)",
                  k == M_SEQ   ? "Sequential"
                  : k == M_RES ? "Residual"
                               : "module",
                  i);
        goto err;
    }
    m = mod_new(k);
    if (!m)
        goto err;
    m->children = calloc(n ? (size_t)n : 1, sizeof(*m->children));
    if (!m->children) {
        ct__error(CT_ENOMEM, "module: out of memory");
        goto err;
    }
    memcpy(m->children, children, (size_t)n * sizeof(*children));
    m->nchildren = n;
    return m;
err:
    if (m)
        free(m);
    for (i = 0; i < n; i++) {
        ct_module *c = children[i];
        ct_module_destroy(&c);
    }
    return NULL;
}

ct_module *ct_nn_sequential_new(int n, ct_module *const *children)
{
    return container_new(M_SEQ, n, children);
}
ct_module *ct_nn_residual_new(int n, ct_module *const *children)
{
    return container_new(M_RES, n, children);
}

/* ---------------- transformer modules ---------------- */

/* N(0, std) by Box-Muller on ct's generator */
static void init_normal(ct_tensor *t, float std)
{
    float *p = ct__f32(t);
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i += 2) {
        float u1 = ct__rng_uniform(), u2 = ct__rng_uniform();
        float r = sqrtf(-2.0f * logf(1.0f - u1)), a = 6.2831853071795864f * u2;
        p[i] = std * r * cosf(a);
        if (i + 1 < n)
            p[i + 1] = std * r * sinf(a);
    }
}

ct_module *ct_nn_embedding_new(int64_t num, int64_t dim, int64_t padding_idx)
{
    if (num <= 0 || dim <= 0 || padding_idx < -1 || padding_idx >= num) {
        ct__error(CT_EINVAL,
                  "Embedding: num %lld, dim %lld must be > 0, padding_idx %lld in [-1, "
                  "num)",
                  (long long)num, (long long)dim, (long long)padding_idx);
        return NULL;
    }
    ct_module *m = mod_new(M_EMBEDDING);
    int64_t ws[2] = {num, dim};
    if (!m || add_param(m, "weight", 2, ws, -1) < 0) {
        ct_module_destroy(&m);
        return NULL;
    }
    m->padding_idx = padding_idx;
    init_normal(m->params[0], 1.0f); /* PyTorch: N(0, 1), the padding row zero */
    if (padding_idx >= 0)
        memset(ct__f32(m->params[0]) + padding_idx * dim, 0, (size_t)dim * sizeof(float));
    return m;
}

ct_module *ct_nn_layernorm_new(int64_t d, float eps)
{
    if (d <= 0 || !(eps > 0)) {
        ct__error(CT_EINVAL, "LayerNorm: normalized size %lld and eps %g must be > 0", (long long)d,
                  eps);
        return NULL;
    }
    ct_module *m = mod_new(M_LAYERNORM);
    if (!m || add_param(m, "weight", 1, &d, -1) < 0 || add_param(m, "bias", 1, &d, -1) < 0) {
        ct_module_destroy(&m);
        return NULL;
    }
    m->eps = eps;
    ct_tensor_fill_f32(m->params[0], 1.0f);
    ct_tensor_fill_f32(m->params[1], 0.0f);
    return m;
}

ct_module *ct_nn_gelu_new(bool tanh_approx)
{
    ct_module *m = mod_new(M_GELU);
    if (m)
        m->alpha = tanh_approx ? 1.0f : 0.0f;
    return m;
}

/* A container of kind k whose children get names (NULL: none) */
static ct_module *named_new(kind k, int n, ct_module *const *children, const char *const *names)
{
    ct_module *m = container_new(k, n, children);
    for (int i = 0; m && names && i < n; i++)
        if (names[i])
            ct_module_set_name(m->children[i], names[i]);
    return m;
}

/* nanoGPT's initialisation of a Linear: weight N(0, std), bias 0 */
static ct_module *gpt_linear(int64_t in, int64_t out, float std)
{
    ct_module *m = ct_nn_linear_new(in, out, true);
    if (m) {
        init_normal(m->params[0], std);
        ct_tensor_fill_f32(m->params[1], 0.0f);
    }
    return m;
}

/* proj_std: the output projection's init (nanoGPT: 0.02 / sqrt(2 n_layer)) */
static ct_module *attn_new(int64_t n_embd, int n_head, float dropout, float proj_std)
{
    if (n_embd <= 0 || n_head <= 0 || n_embd % n_head != 0 || !(dropout >= 0 && dropout < 1)) {
        ct__error(CT_EINVAL,
                  "CausalSelfAttention: n_embd %lld must be a positive multiple of "
                  "n_head %d, dropout %g in [0, 1)",
                  (long long)n_embd, n_head, dropout);
        return NULL;
    }
    ct_module *c[2] = {gpt_linear(n_embd, 3 * n_embd, 0.02f), gpt_linear(n_embd, n_embd, proj_std)};
    ct_module *m = named_new(M_ATTN, 2, c, (const char *[]){"c_attn", "c_proj"});
    if (m) {
        m->heads = n_head;
        m->p = dropout;
    }
    return m;
}

ct_module *ct_nn_causal_self_attention_new(int64_t n_embd, int n_head, float dropout)
{
    return attn_new(n_embd, n_head, dropout, 0.02f);
}

static ct_module *block_new(int64_t n_embd, int n_head, float dropout, float proj_std)
{
    ct_module *mlp_c[4] = {gpt_linear(n_embd, 4 * n_embd, 0.02f), ct_nn_gelu_new(false),
                           gpt_linear(4 * n_embd, n_embd, proj_std), ct_nn_dropout_new(dropout)};
    ct_module *c[4] = {
        ct_nn_layernorm_new(n_embd, 1e-5f), attn_new(n_embd, n_head, dropout, proj_std),
        ct_nn_layernorm_new(n_embd, 1e-5f),
        named_new(M_SEQ, 4, mlp_c, (const char *[]){"c_fc", "gelu", "c_proj", "dropout"})};
    return named_new(M_BLOCK, 4, c, (const char *[]){"ln_1", "attn", "ln_2", "mlp"});
}

ct_module *ct_nn_gpt_block_new(int64_t n_embd, int n_head, float dropout)
{
    return block_new(n_embd, n_head, dropout, 0.02f);
}

ct_module *ct_nn_gpt_new(const ct_gpt_config *cfg)
{
    if (!cfg || cfg->n_layer <= 0 || cfg->block_size <= 0 || cfg->vocab_size <= 0) {
        ct__error(CT_EINVAL, "GPT: n_layer, block_size and vocab_size must be > 0");
        return NULL;
    }
    float proj_std = 0.02f / sqrtf(2.0f * (float)cfg->n_layer);
    ct_module **blocks = calloc((size_t)cfg->n_layer, sizeof *blocks);
    if (!blocks) {
        ct__error(CT_ENOMEM, "GPT: out of memory");
        return NULL;
    }
    for (int i = 0; i < cfg->n_layer; i++)
        blocks[i] = block_new(cfg->n_embd, cfg->n_head, cfg->dropout, proj_std);
    ct_module *h = container_new(M_SEQ, cfg->n_layer, blocks);
    free(blocks);
    ct_module *wte = ct_nn_embedding_new(cfg->vocab_size, cfg->n_embd, -1),
              *wpe = ct_nn_embedding_new(cfg->block_size, cfg->n_embd, -1);
    if (wte)
        init_normal(wte->params[0], 0.02f);
    if (wpe)
        init_normal(wpe->params[0], 0.02f);
    ct_module *c[5] = {wte, wpe, ct_nn_dropout_new(cfg->dropout), h,
                       ct_nn_layernorm_new(cfg->n_embd, 1e-5f)};
    ct_module *m =
        named_new(M_GPT, 5, c,
                  (const char *[]){"transformer.wte", "transformer.wpe", "transformer.drop",
                                   "transformer.h", "transformer.ln_f"});
    if (m)
        m->block_size = cfg->block_size;
    return m;
}

static void free_views(ct_module *m)
{
    for (int i = 0; i < m->nrefs; i++)
        free(m->ref_names[i]);
    free(m->ref_names);
    free(m->refs);
    free(m->ref_tensors);
    m->refs = NULL;
    m->ref_names = NULL;
    m->ref_tensors = NULL;
    m->nrefs = 0;
    for (int i = 0; i < m->nsd; i++)
        free(m->sd_names[i]);
    free(m->sd_names);
    free(m->sd);
    m->sd = NULL;
    m->sd_names = NULL;
    m->nsd = 0;
}

/* Drops m's own flat buffers (not its children's). */
static void drop_own_flat(ct_module *m)
{
    for (int d = 0; d < m->nflat; d++) {
        ct__storage_release(&m->flat_v[d]);
        ct__storage_release(&m->flat_g[d]);
        m->flat_n[d] = 0;
    }
    m->nflat = 0;
}

void ct_module_destroy(ct_module **mp)
{
    if (!mp || !*mp)
        return;
    ct_module *m = *mp;
    *mp = NULL;
    drop_hooks(m); /* first: a parameter someone else still holds must not keep a stale hook */
    for (int i = 0; i < m->nchildren; i++)
        ct_module_destroy(&m->children[i]);
    free(m->children);
    for (int i = 0; i < m->nparams; i++)
        ct_tensor_release(&m->params[i]);
    for (int i = 0; i < m->nbuffers; i++)
        ct_tensor_release(&m->buffers[i]);
    free_views(m);
    drop_own_flat(m);
    free(m);
}

ct_module *ct_module_set_name(ct_module *m, const char *name)
{
    if (m && name)
        snprintf(m->name, sizeof(m->name), "%s", name);
    return m;
}

/* ---------------- forward ---------------- */

/* num_batches_tracked += 1, on its device (y is released when that fails) */
static ct_tensor *count_batch(ct_module *bn, ct_tensor *y)
{
    ct_tensor *n = bn->buffers[2];
    if (y && bn->training && CT__BK_CALL(ct__bk(n), add_i64, 1, 1, ct_tensor_data(n)) < 0)
        ct_tensor_release(&y);
    return y;
}

/* BatchNorm followed by ReLU runs as one fused op (one pass over the activations each way). */
static ct_tensor *bn_relu_forward(ct_module *bn, ct_tensor *x)
{
    return count_batch(bn,
                       ct_nn_batch_norm_relu(x, bn->params[0], bn->params[1], bn->buffers[0],
                                             bn->buffers[1], bn->training, bn->momentum, bn->eps));
}

static ct_tensor *seq_forward(ct_module *m, ct_tensor *x)
{
    ct_tensor *h = ct_tensor_retain(x);
    for (int i = 0; i < m->nchildren && h; i++) {
        ct_module *c = m->children[i];
        ct_tensor *nh;
        if (c->kind == M_BN && i + 1 < m->nchildren && m->children[i + 1]->kind == M_RELU) {
            nh = bn_relu_forward(c, h);
            i++;
        } else {
            nh = ct_module_forward(c, h);
        }
        ct_tensor_release(&h);
        h = nh;
    }
    return h;
}

/* Releases n tensors (NULLs skipped). */
static void release_n(int n, ct_tensor **ts)
{
    for (int i = 0; i < n; i++)
        ct_tensor_release(&ts[i]);
}

/* A Linear over the last dimension of x (..., in): through a (rows, in) view. */
static ct_tensor *linear_nd(ct_tensor *x, ct_tensor *w, ct_tensor *b)
{
    if (x->ndim <= 2)
        return ct_nn_linear(x, w, b);
    int64_t in = x->shape[x->ndim - 1], s2[2] = {ct_tensor_numel(x) / (in ? in : 1), in};
    int64_t shape[CT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    shape[x->ndim - 1] = w->shape[0];
    ct_tensor *t[2] = {ct_nn_reshape(x, 2, s2), NULL};
    t[1] = t[0] ? ct_nn_linear(t[0], w, b) : NULL;
    ct_tensor *y = t[1] ? ct_nn_reshape(t[1], x->ndim, shape) : NULL;
    release_n(2, t);
    return y;
}

/* x (B, T, C): q, k, v from c_attn (B, T, 3C), fused causal attention over its heads in place
 * (ct_nn_attention_qkv: no split, no permutes), c_proj, dropout. */
static ct_tensor *attn_forward(ct_module *m, ct_tensor *x)
{
    if (x->ndim != 3) {
        ct__error(CT_EINVAL, "CausalSelfAttention: x must be (B, T, C), has %d dims", x->ndim);
        return NULL;
    }
    ct_tensor *t[3] = {0}, *y = NULL;
    if ((t[0] = ct_module_forward(m->children[0], x)) &&
        (t[1] = ct_nn_attention_qkv(t[0], m->heads, true, m->p, m->training)) &&
        (t[2] = ct_module_forward(m->children[1], t[1])))
        y = ct_nn_dropout(t[2], m->p, m->training);
    release_n(3, t);
    return y;
}

/* pre-LN: x + attn(ln_1(x)), then + mlp(ln_2(.)) */
static ct_tensor *block_forward(ct_module *m, ct_tensor *x)
{
    ct_tensor *t[5] = {0}, *y = NULL;
    if ((t[0] = ct_module_forward(m->children[0], x)) &&
        (t[1] = ct_module_forward(m->children[1], t[0])) && (t[2] = ct_nn_add(x, t[1])) &&
        (t[3] = ct_module_forward(m->children[2], t[2])) &&
        (t[4] = ct_module_forward(m->children[3], t[3])))
        y = ct_nn_add(t[2], t[4]);
    release_n(5, t);
    return y;
}

/* idx (B, T) i64 -> logits (B*T, vocab): token and position embeddings, dropout, the blocks,
 * ln_f, and the token embedding's weight as the output layer (weight tying). */
static ct_tensor *gpt_forward(ct_module *m, ct_tensor *idx)
{
    if (idx->dtype == CT_F32) { /* token ids carried as floats (a dataset's samples) */
        ct_tensor *i64 = ct_tensor_to_i64(idx);
        ct_tensor *y = i64 ? gpt_forward(m, i64) : NULL;
        ct_tensor_release(&i64);
        return y;
    }
    if (idx->dtype != CT_I64 || idx->ndim != 2 || idx->shape[1] > m->block_size) {
        ct__error(CT_EINVAL, "GPT: input must be (B, T) i64 token ids with T <= block_size %lld",
                  (long long)m->block_size);
        return NULL;
    }
    int64_t B = idx->shape[0], T = idx->shape[1];
    ct_module *wte = m->children[0];
    ct_tensor *t[8] = {0}, *y = NULL;
    ct_tensor *pos_h = ct_tensor_new(CT_I64, 2, idx->shape);
    if (!pos_h)
        return NULL;
    int64_t *pp = ct_tensor_data(pos_h);
    for (int64_t i = 0; i < B * T; i++)
        pp[i] = i % T;
    t[0] = ct__bk(idx) == &ct__backend_cpu ? ct_tensor_retain(pos_h)
                                           : ct_tensor_to(pos_h, ct__bk(idx)->device);
    ct_tensor_release(&pos_h);
    int64_t s2[2] = {B * T, wte->params[0]->shape[1]};
    if (t[0] && (t[1] = ct_module_forward(wte, idx)) &&
        (t[2] = ct_module_forward(m->children[1], t[0])) && (t[3] = ct_nn_add(t[1], t[2])) &&
        (t[4] = ct_module_forward(m->children[2], t[3])) &&
        (t[5] = ct_module_forward(m->children[3], t[4])) &&
        (t[6] = ct_module_forward(m->children[4], t[5])) && (t[7] = ct_nn_reshape(t[6], 2, s2)))
        y = ct_nn_linear(t[7], wte->params[0], NULL);
    release_n(8, t);
    return y;
}

ct_tensor *ct_module_forward(ct_module *m, ct_tensor *x)
{
    if (!m || !x) {
        ct__error(CT_EINVAL, "module_forward: NULL %s", m ? "input" : "module");
        return NULL;
    }
    ct_tensor *w = m->nparams > 0 ? m->params[0] : NULL;
    ct_tensor *b = m->nparams > 1 ? m->params[1] : NULL;
    switch (m->kind) {
    case M_LINEAR:
        return linear_nd(x, w, b);
    case M_CONV:
        return ct_nn_conv2d(x, w, b, &m->conv);
    case M_CONVT:
        return ct_nn_conv_transpose2d(x, w, b, &m->conv);
    case M_BN: {
        return count_batch(m, ct_nn_batch_norm(x, w, b, m->buffers[0], m->buffers[1], m->training,
                                               m->momentum, m->eps));
    }
    case M_RELU:
        return ct_nn_relu(x);
    case M_LRELU:
        return ct_nn_leaky_relu(x, m->alpha);
    case M_ELU:
        return ct_nn_elu(x, m->alpha);
    case M_TANH:
        return ct_nn_tanh(x);
    case M_SIGMOID:
        return ct_nn_sigmoid(x);
    case M_MAXPOOL:
        return ct_nn_max_pool2d(x, m->k, m->s, m->pad);
    case M_AVGPOOL:
        return ct_nn_avg_pool2d(x, m->k, m->s, m->pad, true);
    case M_APOOL:
        return ct_nn_adaptive_avg_pool2d(x, m->oh, m->ow);
    case M_DROPOUT:
        return ct_nn_dropout(x, m->p, m->training);
    case M_FLATTEN:
        return ct_nn_flatten(x);
    case M_SEQ:
        return seq_forward(m, x);
    case M_RES: {
        ct_tensor *h = seq_forward(m, x);
        if (!h)
            return NULL;
        ct_tensor *y = ct_nn_add(x, h);
        ct_tensor_release(&h);
        return y;
    }
    case M_EMBEDDING:
        return ct_nn_embedding(x, w, m->padding_idx);
    case M_LAYERNORM:
        return ct_nn_layer_norm(x, w, b, m->eps);
    case M_GELU:
        return ct_nn_gelu(x, m->alpha != 0.0f);
    case M_ATTN:
        return attn_forward(m, x);
    case M_BLOCK:
        return block_forward(m, x);
    case M_GPT:
        return gpt_forward(m, x);
    case M_TO:
        return ct_tensor_to(x, m->to);
    }
    ct__error(CT_EINVAL, "module_forward: unknown module kind %d", (int)m->kind);
    return NULL;
}

void ct_module_train(ct_module *m, bool training)
{
    if (!m)
        return;
    m->training = training;
    for (int i = 0; i < m->nchildren; i++)
        ct_module_train(m->children[i], training);
}

bool ct_module_is_training(const ct_module *m)
{
    return m && m->training;
}

int ct__module_count(const ct_module *m)
{
    int n = m ? 1 : 0;
    for (int i = 0; m && i < m->nchildren; i++)
        n += ct__module_count(m->children[i]);
    return n;
}

/* pre-order: m, then each child's tree; returns the next index */
static int modes_at(ct_module *m, bool *modes, bool restore, int i)
{
    if (restore)
        m->training = modes[i];
    else
        modes[i] = m->training;
    i++;
    for (int c = 0; c < m->nchildren; c++)
        i = modes_at(m->children[c], modes, restore, i);
    return i;
}

void ct__module_modes(ct_module *m, bool *modes, bool restore)
{
    if (m)
        modes_at(m, modes, restore, 0);
}

static const ct_tensor *first_tensor(const ct_module *m)
{
    if (m->nparams > 0)
        return m->params[0];
    if (m->nbuffers > 0)
        return m->buffers[0];
    for (int i = 0; i < m->nchildren; i++) {
        const ct_tensor *t = first_tensor(m->children[i]);
        if (t)
            return t;
    }
    return NULL;
}

ct_device ct__module_device(const ct_module *m)
{
    const ct_tensor *t = m ? first_tensor(m) : NULL;
    return t ? ct_tensor_device(t) : CT_CPU;
}

int ct_nn_gpt_config(const ct_module *m, ct_gpt_config *cfg)
{
    if (!m || !cfg)
        return ct__error(CT_EINVAL, "nn_gpt_config: NULL argument");
    if (m->kind != M_GPT)
        return ct__error(CT_EINVAL, "nn_gpt_config: the module is not a GPT (ct_nn_gpt_new's)");
    const ct_module *wte = m->children[0], *drop = m->children[2], *h = m->children[3];
    const ct_module *attn = h->nchildren > 0 ? h->children[0]->children[1] : NULL;
    *cfg = (ct_gpt_config){.n_layer = h->nchildren,
                           .n_head = attn ? attn->heads : 0,
                           .n_embd = wte->params[0]->shape[1],
                           .block_size = m->block_size,
                           .vocab_size = wte->params[0]->shape[0],
                           .dropout = drop->p};
    return 0;
}

/* ---------------- traversal ---------------- */

typedef struct item {
    char name[256];
    ct_tensor *t;
    bool is_param;
} item;

typedef struct walk {
    item *v;
    int n, cap;
    bool buffers; /* include buffers (state dict) */
} walk;

static int walk_push(walk *w, const char *prefix, const char *name, ct_tensor *t, bool param)
{
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 32;
        item *nv = realloc(w->v, (size_t)cap * sizeof(*nv));
        if (!nv)
            return ct__error(CT_ENOMEM, "module: out of memory");
        w->v = nv;
        w->cap = cap;
    }
    item *it = &w->v[w->n++];
    snprintf(it->name, sizeof(it->name), "%s%s", prefix, name);
    it->t = t;
    it->is_param = param;
    return 0;
}

/* PyTorch order: own parameters, own buffers, then children (recursively). */
static int walk_module(walk *w, ct_module *m, const char *prefix)
{
    int rc;
    for (int i = 0; i < m->nparams; i++)
        if ((rc = walk_push(w, prefix, m->pnames[i], m->params[i], true)) < 0)
            return rc;
    if (w->buffers)
        for (int i = 0; i < m->nbuffers; i++)
            if ((rc = walk_push(w, prefix, m->bnames[i], m->buffers[i], false)) < 0)
                return rc;
    for (int i = 0; i < m->nchildren; i++) {
        char p[256];
        ct_module *c = m->children[i];
        if (c->name[0])
            snprintf(p, sizeof(p), "%s%s.", prefix, c->name);
        else
            snprintf(p, sizeof(p), "%s%d.", prefix, i);
        if ((rc = walk_module(w, c, p)) < 0)
            return rc;
    }
    return 0;
}

/* Whether a parameter of m's refs is no longer where its ref says (ct_module_to on a child
 * after m packed). */
static bool refs_moved(const ct_module *m)
{
    for (int i = 0; i < m->nrefs; i++) {
        const ct_tensor *t = m->ref_tensors[i];
        if (ct__f32(t) != m->refs[i].value || ct__bk(t)->device != m->refs[i].device)
            return true;
    }
    return false;
}

int ct_module_params(ct_module *m, const ct_param_ref **refs, int *n)
{
    int rc = 0;
    walk w = {0};
    ct__storage *sv[CT__MODULE_MAX_DEVICES] = {0}, *sg[CT__MODULE_MAX_DEVICES] = {0};
    int *dev_of = NULL;
    if (!m || !refs || !n)
        return ct__error(CT_EINVAL, "module_params: NULL argument");
    if (m->refs && refs_moved(m)) { /* a child placed since: pack again where they are now */
        free_views(m);
        drop_own_flat(m);
    }
    if (m->refs) {
        *refs = m->refs;
        *n = m->nrefs;
        return 0;
    }
    if ((rc = walk_module(&w, m, "")) < 0)
        goto out;
    /* carve: 64-byte aligned offsets in one value and one gradient buffer per device (the
     * parameters' own, from ct_module_to on m or on its children) */
    const ct__backend *bks[CT__MODULE_MAX_DEVICES];
    int64_t total[CT__MODULE_MAX_DEVICES] = {0};
    int ndev = 0;
    if (!(dev_of = calloc(w.n ? (size_t)w.n : 1, sizeof *dev_of))) {
        rc = ct__error(CT_ENOMEM, "module_params: out of memory");
        goto out;
    }
    for (int i = 0; i < w.n; i++) {
        const ct__backend *bk = ct__bk(w.v[i].t);
        int d = 0;
        while (d < ndev && bks[d] != bk)
            d++;
        if (d == ndev && ndev == CT__MODULE_MAX_DEVICES) {
            rc = ct__error(CT_EINVAL,
                           "module_params: '%s' is on a device after %d others (at most "
                           "%d devices per module)",
                           w.v[i].name, ndev, CT__MODULE_MAX_DEVICES);
            goto out;
        }
        if (d == ndev)
            bks[ndev++] = bk;
        dev_of[i] = d;
        total[d] = ((total[d] + 15) & ~(int64_t)15) + ct_tensor_numel(w.v[i].t);
    }
    if (ndev == 0) /* no parameters: one empty buffer on the CPU, as before devices */
        bks[ndev++] = &ct__backend_cpu;
    for (int d = 0; d < ndev; d++) {
        total[d] = (total[d] + 15) & ~(int64_t)15;
        size_t bytes = (size_t)(total[d] ? total[d] : 16) * sizeof(float);
        sv[d] = ct__storage_new_on(bks[d], bytes, true);
        sg[d] = ct__storage_new_on(bks[d], bytes, true);
        if (!sv[d] || !sg[d]) {
            rc = ct__error(CT_ENOMEM, "module_params: out of memory for %lld floats on %s",
                           (long long)total[d], bks[d]->name);
            goto out;
        }
    }
    m->refs = calloc(w.n ? (size_t)w.n : 1, sizeof(*m->refs));
    m->ref_names = calloc(w.n ? (size_t)w.n : 1, sizeof(char *));
    m->ref_tensors = calloc(w.n ? (size_t)w.n : 1, sizeof(ct_tensor *));
    if (!m->refs || !m->ref_names || !m->ref_tensors) {
        rc = ct__error(CT_ENOMEM, "module_params: out of memory");
        goto out;
    }
    int64_t off[CT__MODULE_MAX_DEVICES] = {0};
    for (int i = 0; i < w.n; i++) {
        ct_tensor *t = w.v[i].t;
        int d = dev_of[i];
        const ct__backend *bk = bks[d];
        int64_t numel = ct_tensor_numel(t);
        off[d] = (off[d] + 15) & ~(int64_t)15;
        if ((rc = bk->copy((float *)sv[d]->data + off[d], ct__f32(t),
                           (size_t)numel * sizeof(float))) < 0)
            goto out;
        ct__tensor_rebind(t, sv[d], off[d]);
        if ((rc = ct__tensor_bind_grad(t, sg[d], off[d])) < 0)
            goto out;
        t->grad_empty = true;
        m->ref_names[i] = strdup(w.v[i].name);
        if (!m->ref_names[i]) {
            rc = ct__error(CT_ENOMEM, "module_params: out of memory");
            goto out;
        }
        m->refs[i] =
            (ct_param_ref){m->ref_names[i], ct__f32(t), ct__f32(t->grad), numel, bk->device};
        m->ref_tensors[i] = t;
        m->nrefs = i + 1;
        off[d] += numel;
    }
    drop_own_flat(m);
    for (int d = 0; d < ndev; d++) {
        m->flat_v[d] = sv[d];
        m->flat_g[d] = sg[d];
        m->flat_n[d] = total[d];
        sv[d] = sg[d] = NULL;
    }
    m->nflat = ndev;
    *refs = m->refs;
    *n = m->nrefs;
out:
    for (int d = 0; d < CT__MODULE_MAX_DEVICES; d++) {
        ct__storage_release(&sv[d]);
        ct__storage_release(&sg[d]);
    }
    free(dev_of);
    if (rc < 0)
        free_views(m);
    free(w.v);
    return rc;
}

/* Drops every flat buffer and view of the tree (they are rebuilt on demand). */
static void drop_flat(ct_module *m)
{
    free_views(m);
    drop_own_flat(m);
    for (int i = 0; i < m->nchildren; i++)
        drop_flat(m->children[i]);
}

int ct_module_to(ct_module *m, ct_device device)
{
    walk w = {.buffers = true};
    int rc = 0;
    if (!m)
        return ct__error(CT_EINVAL, "module_to: NULL module");
    const ct__backend *bk = ct__backend_of(device);
    if (!bk)
        return CT_ENOSYS; /* ct__backend_of said why */
    if ((rc = walk_module(&w, m, "")) < 0)
        goto out;
    /* copies first, so that a failure moves nothing */
    ct_tensor **moved = calloc(w.n ? (size_t)w.n : 1, sizeof *moved);
    if (!moved) {
        rc = ct__error(CT_ENOMEM, "module_to: out of memory");
        goto out;
    }
    bool grad_mode = ct_autograd_set_enabled(false); /* a move, not an op to differentiate */
    for (int i = 0; i < w.n && rc == 0; i++)
        if (!(moved[i] = ct_tensor_to(w.v[i].t, device)))
            rc = ct__error(CT_ENOMEM, "module_to: '%s' to device %s failed", w.v[i].name, bk->name);
    ct_autograd_set_enabled(grad_mode);
    for (int i = 0; i < w.n && rc == 0; i++) {
        ct_tensor *t = w.v[i].t;
        ct__tensor_rebind(t, moved[i]->storage, moved[i]->offset);
        ct_tensor_release(&t->grad); /* the old device's; made again on the new one */
        t->grad_empty = true;
    }
    for (int i = 0; i < w.n; i++)
        ct_tensor_release(&moved[i]);
    free(moved);
    if (rc == 0)
        drop_flat(m); /* ct_module_params carves them again, on the device */
out:
    free(w.v);
    return rc;
}

int ct_module_flat(ct_module *m, float **values, float **grads, int64_t *numel)
{
    const ct_param_ref *r;
    int n, rc = ct_module_params(m, &r, &n);
    if (rc < 0)
        return rc;
    if (m->nflat != 1)
        return ct__error(CT_EINVAL,
                         "module_flat: the parameters are on %d devices, a flat buffer "
                         "each (use ct_module_params)",
                         m->nflat);
    if (values)
        *values = m->flat_v[0]->data;
    if (grads)
        *grads = m->flat_g[0]->data;
    if (numel)
        *numel = m->flat_n[0];
    return 0;
}

int64_t ct_module_num_params(ct_module *m)
{
    walk w = {0};
    int64_t n = 0;
    if (m && walk_module(&w, m, "") == 0)
        for (int i = 0; i < w.n; i++)
            n += ct_tensor_numel(w.v[i].t);
    free(w.v);
    return n;
}

static int param_ready(ct_tensor *t, void *user)
{
    (void)t;
    param_hook *h = user;
    return h->fn(h->index, h->user);
}

int ct_module_on_grad_ready(ct_module *m, ct_param_ready_fn fn, void *user)
{
    const ct_param_ref *refs;
    int n, rc = 0;
    walk w = {0};
    param_hook *hooks = NULL;
    if (!m)
        return ct__error(CT_EINVAL, "module_on_grad_ready: NULL module");
    if ((rc = ct_module_params(m, &refs, &n)) < 0)
        return rc;
    if ((rc = walk_module(&w, m, "")) < 0)
        goto out;
    if (w.n != n) {
        rc = ct__error(CT_EINVAL, "module_on_grad_ready: %d parameters, %d packed", w.n, n);
        goto out;
    }
    if (fn && !(hooks = calloc(n ? (size_t)n : 1, sizeof(*hooks)))) {
        rc = ct__error(CT_ENOMEM, "module_on_grad_ready: out of memory");
        goto out;
    }
    drop_hooks(m);
    for (int i = 0; i < n; i++) {
        if (hooks)
            hooks[i] = (param_hook){fn, user, i, w.v[i].t};
        /* parameters are leaves: cannot fail */
        ct_tensor_on_grad_ready(w.v[i].t, fn ? param_ready : NULL, hooks ? &hooks[i] : NULL);
    }
    m->hooks = hooks;
    m->nhooks = hooks ? n : 0;
out:
    free(w.v);
    return rc;
}

static void mark_empty(ct_module *m)
{
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i]->grad)
            m->params[i]->grad_empty = true;
    for (int i = 0; i < m->nchildren; i++)
        mark_empty(m->children[i]);
}

void ct_module_zero_grad(ct_module *m)
{
    if (!m)
        return;
    if (m->nflat) { /* one memset per device, then mark every parameter's gradient empty */
        for (int d = 0; d < m->nflat; d++)
            m->flat_g[d]->bk->zero(m->flat_g[d]->data, (size_t)m->flat_n[d] * sizeof(float));
        mark_empty(m);
        return;
    }
    for (int i = 0; i < m->nparams; i++)
        ct_tensor_zero_grad(m->params[i]);
    for (int i = 0; i < m->nchildren; i++)
        ct_module_zero_grad(m->children[i]);
}

/* ---------------- state dict ---------------- */

int ct_module_state_dict(ct_module *m, const ct_named_tensor **entries, int *n)
{
    int rc = 0;
    walk w = {.buffers = true};
    if (!m || !entries || !n)
        return ct__error(CT_EINVAL, "module_state_dict: NULL argument");
    if (m->sd) { /* the tree does not change after construction: built once */
        *entries = m->sd;
        *n = m->nsd;
        return 0;
    }
    if ((rc = walk_module(&w, m, "")) < 0)
        goto out;
    m->sd = calloc(w.n ? (size_t)w.n : 1, sizeof(*m->sd));
    m->sd_names = calloc(w.n ? (size_t)w.n : 1, sizeof(char *));
    if (!m->sd || !m->sd_names) {
        rc = ct__error(CT_ENOMEM, "module_state_dict: out of memory");
        goto out;
    }
    for (int i = 0; i < w.n; i++) {
        m->sd_names[i] = strdup(w.v[i].name);
        if (!m->sd_names[i]) {
            rc = ct__error(CT_ENOMEM, "module_state_dict: out of memory");
            goto out;
        }
        m->sd[i] = (ct_named_tensor){m->sd_names[i], w.v[i].t};
        m->nsd = i + 1;
    }
    *entries = m->sd;
    *n = m->nsd;
out:
    if (rc < 0)
        free_views(m);
    free(w.v);
    return rc;
}

static bool same_shape(const ct_tensor *a, const ct_tensor *b)
{
    return ct_tensor_numel(a) == ct_tensor_numel(b) &&
           (a->ndim == b->ndim || ct_tensor_numel(a) == 1) &&
           (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim) == 0);
}

/* "(384, 128)" into buf */
static const char *shape_str(const ct_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, ")");
    return buf;
}

/* Copies entries into m's state dict. Checked first, in entries' order then the model's, so
 * that a failed load changes nothing and the message names the first mismatch: a name the
 * model lacks (strict), a dtype or shape that differs, a model key the entries lack (strict).
 * what: where the entries come from in messages ("load_state_dict", "module_load: PATH");
 * src: what they are called ("the state dict", "the file"). */
static int load_entries(ct_module *m, const ct_named_tensor *entries, int n, bool strict,
                        const char *what, const char *src)
{
    const ct_named_tensor *sd;
    int nsd, rc;
    char a[160], b[160];
    if ((rc = ct_module_state_dict(m, &sd, &nsd)) < 0)
        return rc;
    int *at = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1)); /* entry j -> model key, or -1 */
    if (!at)
        return ct__error(CT_ENOMEM, "%s: out of memory", what);
    for (int j = 0; j < n; j++) {
        const char *name = entries[j].name ? entries[j].name : "(null)";
        at[j] = -1;
        for (int i = 0; i < nsd && at[j] < 0; i++)
            if (entries[j].name && strcmp(entries[j].name, sd[i].name) == 0)
                at[j] = i;
        if (at[j] < 0) {
            if (!strict)
                continue;
            rc = ct__error(CT_EINVAL, "%s: %s: in %s but not in the model", what, name, src);
            goto out;
        }
        const ct_tensor *t = entries[j].tensor, *mt = sd[at[j]].tensor;
        if (!t || t->dtype != mt->dtype) {
            rc = ct__error(CT_EINVAL, "%s: %s: dtype %s in %s, %s in the model", what, name,
                           t ? ct_dtype_name(t->dtype) : "NULL", src, ct_dtype_name(mt->dtype));
            goto out;
        }
        if (!same_shape(t, mt)) {
            rc = ct__error(CT_EINVAL, "%s: %s: shape %s in %s, %s in the model", what, name,
                           shape_str(t, a, sizeof a), src, shape_str(mt, b, sizeof b));
            goto out;
        }
    }
    for (int i = 0; strict && i < nsd; i++) {
        bool found = false;
        for (int j = 0; j < n && !found; j++)
            found = at[j] == i;
        if (!found) {
            rc = ct__error(CT_EINVAL, "%s: %s: in the model but not in %s", what, sd[i].name, src);
            goto out;
        }
    }
    for (int j = 0; j < n; j++) {
        if (at[j] < 0)
            continue;
        /* through the host: the entry and the model may be on different devices */
        bool grad_mode = ct_autograd_set_enabled(false);
        ct_tensor *c = ct_tensor_to(entries[j].tensor, CT_CPU);
        ct_autograd_set_enabled(grad_mode);
        if (!c) {
            rc = CT_ENOMEM;
            goto out;
        }
        rc = ct_tensor_copy_from(sd[at[j]].tensor, ct_tensor_data(c),
                                 (size_t)ct_tensor_numel(c) * ct_dtype_size(c->dtype));
        ct_tensor_release(&c);
        if (rc < 0)
            goto out;
    }
out:
    free(at);
    return rc;
}

int ct_module_load_state_dict(ct_module *m, const ct_named_tensor *entries, int n, bool strict)
{
    if (!m || (n > 0 && !entries) || n < 0)
        return ct__error(CT_EINVAL, "module_load_state_dict: NULL argument");
    return load_entries(m, entries, n, strict, "load_state_dict", "the state dict");
}
/* ---------------- safetensors (codec: trainer/nn/safetensors.c) ---------------- */

int ct_module_save(ct_module *m, const char *path)
{
    const ct_named_tensor *sd;
    int n, rc = 0;
    ct__sbuf hdr = {0};
    FILE *f = NULL;
    if (!m || !path)
        return ct__error(CT_EINVAL, "module_save: NULL argument");
    if ((rc = ct_module_state_dict(m, &sd, &n)) < 0)
        return rc;
    ct__sb_add(&hdr, "{", 1);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        ct_tensor *t = sd[i].tensor;
        size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype);
        ct__st_add_tensor(&hdr, i == 0, sd[i].name, t->dtype, t->ndim, t->shape, off, bytes);
        off += bytes;
    }
    ct__sb_add(&hdr, "}", 1);
    ct__st_pad(&hdr);
    if (hdr.oom) {
        rc = ct__error(CT_ENOMEM, "module_save: out of memory");
        goto out;
    }
    f = fopen(path, "wb");
    if (!f) {
        rc = ct__error(CT_EIO, "module_save: cannot open %s for writing", path);
        goto out;
    }
    uint64_t hl = hdr.len; /* little-endian host assumed (x86-64 / aarch64) */
    if (fwrite(&hl, 8, 1, f) != 1 || fwrite(hdr.s, 1, hdr.len, f) != hdr.len)
        goto ioerr;
    for (int i = 0; i < n; i++) {
        bool grad_mode = ct_autograd_set_enabled(false);
        ct_tensor *c = ct_tensor_to(sd[i].tensor, CT_CPU); /* contiguous host bytes */
        ct_autograd_set_enabled(grad_mode);
        if (!c) {
            rc = CT_ENOMEM;
            goto out;
        }
        size_t bytes = (size_t)ct_tensor_numel(c) * ct_dtype_size(c->dtype);
        size_t wr = fwrite(ct_tensor_data(c), 1, bytes, f);
        ct_tensor_release(&c);
        if (wr != bytes)
            goto ioerr;
    }
    if (fclose(f) != 0) {
        f = NULL;
        goto ioerr;
    }
    f = NULL;
    goto out;
ioerr:
    rc = ct__error(CT_EIO, "module_save: write to %s failed", path);
out:
    if (f)
        fclose(f);
    free(hdr.s);
    return rc;
}

int ct__module_load_bytes(ct_module *m, const void *buf, size_t len, const char *path, bool strict)
{
    int rc = 0, nin = 0;
    ct_named_tensor *in = NULL;
    ct__jval root = {0};
    const unsigned char *data;
    size_t data_len;
    char what[600];
    snprintf(what, sizeof what, "module_load: %s", path);
    if ((rc = ct__st_parse(buf, len, path, &root, &data, &data_len)) < 0)
        return rc;
    /* a trainer's checkpoint: the model's entries without their optimizer's ("optim.") */
    const ct__jval *meta = ct__json_get(&root, "__metadata__");
    const char *fmt = ct__json_get_str(meta, "format"), *model = ct__json_get_str(meta, "model");
    bool ckpt = fmt && !strcmp(fmt, CT__CKPT_FORMAT);
    if (ckpt && model && strchr(model, ',')) {
        rc = ct__error(CT_EINVAL,
                       "%s: a checkpoint of several models (\"%s\"): entries m<i>.NAME; load one "
                       "model's entries with ct_module_load_state_dict",
                       what, model);
        goto out;
    }
    in = calloc(root.n ? (size_t)root.n : 1, sizeof(*in));
    if (!in) {
        rc = ct__error(CT_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    for (int k = 0; k < root.n; k++) {
        ct__st_entry e;
        int r = ct__st_entry_at(&root, k, data, data_len, path, &e);
        if (r == 1) /* __metadata__ */
            continue;
        if (r < 0) {
            rc = r;
            goto out;
        }
        if (ckpt && !strncmp(e.name, CT__CKPT_OPTIM_PREFIX, strlen(CT__CKPT_OPTIM_PREFIX)))
            continue;
        ct_tensor *t = ct_tensor_new(e.dtype, e.ndim, e.shape);
        if (!t) {
            rc = ct__error(CT_EINVAL, "%s: %s: bad shape", what, e.name);
            goto out;
        }
        memcpy(ct_tensor_data(t), e.data, e.bytes);
        in[nin++] = (ct_named_tensor){e.name, t};
    }
    rc = load_entries(m, in, nin, strict, what, "the file");
out:
    for (int i = 0; i < nin; i++)
        ct_tensor_release(&in[i].tensor);
    free(in);
    ct__json_free(&root);
    return rc;
}

int ct_module_load_file(ct_module *m, const char *path, bool strict)
{
    int rc = 0;
    unsigned char *buf = NULL;
    FILE *f = NULL;
    if (!m || !path)
        return ct__error(CT_EINVAL, "module_load: NULL argument");
    f = fopen(path, "rb");
    if (!f)
        return ct__error(CT_ENOENT, "module_load: cannot open %s", path);
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = ct__error(CT_EIO, "module_load: %s: cannot size the file", path);
        goto out;
    }
    buf = malloc((size_t)len + 1);
    if (!buf) {
        rc = ct__error(CT_ENOMEM, "module_load: out of memory");
        goto out;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        rc = ct__error(CT_EIO, "module_load: %s: read failed", path);
        goto out;
    }
    rc = ct__module_load_bytes(m, buf, (size_t)len, path, strict);
out:
    free(buf);
    if (f)
        fclose(f);
    return rc;
}

int ct_module_load(ct_module *m, const char *path)
{
    return ct_module_load_file(m, path, true);
}
