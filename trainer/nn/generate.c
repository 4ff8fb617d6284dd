/* trainer/nn/generate.c — using a model (ct/infer.h): ct_module_predict, a forward in eval mode
 * without the tape on the model's device, and ct_gpt_generate, nanoGPT's generate (the context
 * cropped to the block size, the last position's logits over a temperature, top-k, a seeded
 * draw). Both choose their CPU threads by the size of the forward (ct__infer_threads).
 *
 * Not here: building a model from a checkpoint (trainer/train/infer.c, it needs the trainer's
 * creator registry), the kernels, a key-value cache (each token runs the whole context again,
 * as nanoGPT's generate does).
 *
 * Shapes: prompt / out (n) token ids; the GPT's input (1, t), t <= block_size, its logits
 * (t, V). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/infer.h"
#include "trainer/cpu/cpu.h"
#include "trainer/nn/nn_impl.h"

/* ---- threads ---- */

/* Why a rule and not the caller's count: a generated token's forward is a few small products
 * (a 0.84 M-parameter GPT at 128 tokens: about 10^8 multiply-adds, a millisecond of one core),
 * where each OpenMP region's fork and join, and on a busy machine a worker waiting for a
 * descheduled peer, cost more than the work: 200 tokens took 38 s with the default threads
 * beside other jobs, 0.42 s on one. */
int ct__infer_threads(int64_t work)
{
    int cap = ct__cpu_threads();
    int64_t want = 1 + (work > 0 ? work / CT__INFER_WORK_PER_THREAD : 0);
    return want < cap ? (int)want : (cap > 0 ? cap : 1);
}

/* The state inference changes and puts back: training flags, autograd, CPU threads. */
typedef struct infer_scope {
    bool *modes;
    bool grad;
    int threads; /* the caller's, 0 when untouched */
} infer_scope;

static int scope_enter(ct_module *m, int64_t work, infer_scope *s)
{
    memset(s, 0, sizeof *s);
    int n = ct__module_count(m);
    if (!(s->modes = malloc(sizeof(bool) * (size_t)n)))
        return ct__error(CT_ENOMEM, "infer: out of memory");
    ct__module_modes(m, s->modes, false);
    ct_module_train(m, false);
    s->grad = ct_autograd_set_enabled(false);
    if (ct__module_device(m) == CT_CPU) {
        s->threads = ct__cpu_threads();
        ct__cpu_set_threads(ct__infer_threads(work));
    }
    return 0;
}

static void scope_leave(ct_module *m, infer_scope *s)
{
    if (s->threads > 0)
        ct__cpu_set_threads(s->threads);
    ct_autograd_set_enabled(s->grad);
    ct__module_modes(m, s->modes, true);
    free(s->modes);
    s->modes = NULL;
}

/* ---- predict ---- */

int ct_module_predict(ct_module *m, ct_tensor *x, ct_tensor **y)
{
    if (y)
        *y = NULL;
    if (!m || !x || !y)
        return ct__error(CT_EINVAL, "module_predict: NULL %s", !m ? "module" : !x ? "x" : "y");
    /* a forward's multiply-adds, about: every parameter once per row (a token, a sample's
     * row of features, a pixel row of an image: the elements over the last dimension) */
    int nd = ct_tensor_ndim(x);
    int64_t rows = ct_tensor_dtype(x) == CT_I64 || nd < 2
                       ? ct_tensor_numel(x)
                       : ct_tensor_numel(x) / (ct_tensor_dim(x, -1) > 0 ? ct_tensor_dim(x, -1) : 1);
    int64_t work = ct_module_num_params(m) * (rows > 0 ? rows : 1);
    ct_device dev = ct__module_device(m);
    infer_scope s;
    int rc = scope_enter(m, work, &s);
    if (rc < 0)
        return rc;
    ct_tensor *in = ct_tensor_device(x) == dev ? ct_tensor_retain(x) : ct_tensor_to(x, dev);
    ct_tensor *out = in ? ct_module_forward(m, in) : NULL;
    if (out) /* a caller reads rows: oneDNN's blocked layout back to plain */
        *y = ct_nn_to_plain(out);
    rc = *y ? 0 : CT_EINVAL; /* the op's message stays */
    ct_tensor_release(&out);
    ct_tensor_release(&in);
    scope_leave(m, &s);
    return rc;
}

/* ---- generate ---- */

/* splitmix64: the sampler's generator, one per call, seeded by the caller */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

typedef struct scored {
    float v;
    int32_t i;
} scored;

/* larger logits first, ties to the smaller id */
static int by_logit(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* The next token from one position's logits (v): argmax at temperature 0 (the first of equal
 * maxima), else a draw from softmax(logits / temperature) over the top_k largest (exactly k:
 * ties to the smaller id; 0 or >= v: all). sorted, p: scratch of v. */
static int32_t pick(const float *logits, int32_t v, float temperature, int top_k, uint64_t *rng,
                    scored *sorted, double *p)
{
    int32_t best = 0;
    for (int32_t i = 1; i < v; i++)
        if (logits[i] > logits[best])
            best = i;
    if (temperature == 0)
        return best;
    int32_t k = top_k > 0 && top_k < v ? top_k : v;
    for (int32_t i = 0; i < v; i++)
        sorted[i] = (scored){logits[i], i};
    if (k < v)
        qsort(sorted, (size_t)v, sizeof *sorted, by_logit);
    double sum = 0, max = logits[best];
    for (int32_t j = 0; j < k; j++)
        sum += p[j] = exp(((double)sorted[j].v - max) / temperature);
    double u = (double)(next_u64(rng) >> 11) * 0x1.0p-53 * sum;
    for (int32_t j = 0; j < k; j++)
        if ((u -= p[j]) < 0)
            return sorted[j].i;
    return sorted[k - 1].i; /* u at the sum's rounding edge */
}

int ct_gpt_generate(ct_module *gpt, const int32_t *prompt, int64_t n_prompt, int64_t n,
                    float temperature, int top_k, uint64_t seed, int32_t *out)
{
    ct_gpt_config c;
    if (!gpt || !prompt || (n > 0 && !out))
        return ct__error(CT_EINVAL, "gpt_generate: NULL %s",
                         !gpt      ? "model"
                         : !prompt ? "prompt"
                                   : "out");
    if (ct_nn_gpt_config(gpt, &c) < 0)
        return ct__error(CT_EINVAL, "gpt_generate: %s", ct_last_error());
    if (n_prompt < 1 || n < 0 || !(temperature >= 0 && temperature <= 1e30f) || top_k < 0)
        return ct__error(CT_EINVAL,
                         "gpt_generate: prompt of %lld tokens, n %lld, temperature %g, top_k %d: "
                         "needs a prompt of 1 or more tokens, n >= 0, a finite temperature >= 0, "
                         "top_k >= 0",
                         (long long)n_prompt, (long long)n, temperature, top_k);
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c.vocab_size)
            return ct__error(CT_EINVAL, "gpt_generate: prompt[%lld] = %d is not in [0, %lld)",
                             (long long)i, prompt[i], (long long)c.vocab_size);
    int32_t v = (int32_t)c.vocab_size;
    int64_t tmax = n_prompt + n < c.block_size ? n_prompt + n : c.block_size;
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(n_prompt + n));
    float *row = malloc(sizeof(float) * (size_t)v);
    scored *sorted = malloc(sizeof(scored) * (size_t)v);
    double *p = malloc(sizeof(double) * (size_t)v);
    ct_device dev = ct__module_device(gpt);
    infer_scope s = {0};
    int rc = 0;
    if (!ids || !row || !sorted || !p) {
        rc = ct__error(CT_ENOMEM, "gpt_generate: out of memory");
        goto out;
    }
    if ((rc = scope_enter(gpt, ct_module_num_params(gpt) * tmax, &s)) < 0)
        goto out;
    for (int64_t i = 0; i < n_prompt; i++)
        ids[i] = prompt[i];
    uint64_t rng = seed;
    int64_t len = n_prompt;
    for (int64_t k = 0; k < n && rc == 0; k++) {
        /* the last block_size tokens, as nanoGPT's idx[:, -block_size:] */
        int64_t t = len < c.block_size ? len : c.block_size, shape[2] = {1, t};
        ct_tensor *h = ct_tensor_wrap(CT_I64, 2, shape, ids + len - t);
        ct_tensor *idx = !h ? NULL : dev == CT_CPU ? ct_tensor_retain(h) : ct_tensor_to(h, dev);
        ct_tensor *logits = idx ? ct_module_forward(gpt, idx) : NULL; /* (t, V) */
        ct_tensor *last = logits ? ct_tensor_narrow0(logits, t - 1, 1) : NULL;
        if (!last || ct_tensor_copy_to(last, row, sizeof(float) * (size_t)v) < 0) {
            rc =
                ct__error(CT_EINVAL, "gpt_generate: token %lld: %s", (long long)k, ct_last_error());
        } else {
            for (int32_t i = 0; i < v && rc == 0; i++)
                if (!isfinite(row[i]))
                    rc = ct__error(CT_ERANGE, "gpt_generate: token %lld: logit %d is %g",
                                   (long long)k, i, row[i]);
            if (rc == 0)
                ids[len++] = out[k] = pick(row, v, temperature, top_k, &rng, sorted, p);
        }
        ct_tensor_release(&last);
        ct_tensor_release(&logits);
        ct_tensor_release(&idx);
        ct_tensor_release(&h);
    }
    scope_leave(gpt, &s);
out:
    free(ids);
    free(row);
    free(sorted);
    free(p);
    return rc;
}
