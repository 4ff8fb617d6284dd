/* tests/engine/test_ops_transformer.c — the transformer ops (layer norm, GELU exact and tanh,
 * the elementwise product, embedding with and without padding_idx, permute, transpose, slice,
 * batched matmul with every transpose, causal softmax, fused attention with and without a causal
 * mask and dropout, on q, k, v tensors and on one packed (B, T, 3C) tensor):
 *   - forward and every input's gradient against PyTorch 1.13 (ref/transformer.bin from
 *     make_reference.py) within 1e-4, on the CPU and on the checking device;
 *   - gradients accumulate: a second backward without zeroing doubles them;
 *   - every differentiable input against central finite differences;
 *   - the errors a user can hit name what is wrong. */
#include "tests/engine/testutil.h"

#include "ct/nn.h"

#define TOL 1e-4

typedef ct_tensor *(*op_fn)(ct_tensor **in, void *ctx);

static ref_file R;

static ct_tensor *f_layer_norm(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_layer_norm(in[0], in[1], in[2], 1e-5f);
}
static ct_tensor *f_layer_norm_plain(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_layer_norm(in[0], NULL, NULL, 1e-5f);
}
static ct_tensor *f_gelu(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_gelu(in[0], false);
}
static ct_tensor *f_gelu_tanh(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_gelu(in[0], true);
}
static ct_tensor *f_mul(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_mul(in[0], in[1]);
}
static ct_tensor *f_mul_self(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_mul(in[0], in[0]);
}
static ct_tensor *f_embedding(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_embedding(in[0], in[1], -1);
}
static ct_tensor *f_embedding_pad(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_embedding(in[0], in[1], 0);
}

static ct_tensor *f_permute(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_permute(in[0], (const int[]){0, 2, 1, 3});
}
static ct_tensor *f_transpose(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_transpose(in[0], 1, 2);
}
static ct_tensor *f_slice1(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_slice(in[0], 1, 3, 4);
}
static ct_tensor *f_slice0(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_slice(in[0], 0, 1, 2);
}
static ct_tensor *f_bmm(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_bmm(in[0], in[1], false, false);
}
static ct_tensor *f_bmm_ta(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_bmm(in[0], in[1], true, false);
}
static ct_tensor *f_bmm_tb(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_bmm(in[0], in[1], false, true);
}
static ct_tensor *f_bmm_tab(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_bmm(in[0], in[1], true, true);
}
static ct_tensor *f_softmax_causal(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_softmax_causal(in[0]);
}

static ct_tensor *f_attention(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_attention(in[0], in[1], in[2], false, 0.0f, true);
}
static ct_tensor *f_attention_causal(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_attention(in[0], in[1], in[2], true, 0.0f, true);
}
static ct_tensor *f_attention_qkv(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_attention_qkv(in[0], 2, false, 0.0f, true);
}
static ct_tensor *f_attention_qkv_causal(ct_tensor **in, void *c)
{
    (void)c;
    return ct_nn_attention_qkv(in[0], 2, true, 0.0f, true);
}
/* with dropout 0.3 in training: the generator reseeded first, so every call drops alike */
static ct_tensor *f_attention_dropout(ct_tensor **in, void *c)
{
    (void)c;
    ct_nn_manual_seed(77);
    return ct_nn_attention(in[0], in[1], in[2], true, 0.3f, true);
}
/* the same from separately tested ops: dropout(softmax_causal(q k^T / sqrt(hs))) v, on
 * (bh, t, hs) views; ct_nn_dropout draws the same mask (one generator draw seeds a Philox
 * stream over the probabilities in plain order, as the fused op does) */
static ct_tensor *composed_attention_dropout(ct_tensor **in)
{
    int64_t hs = ct_tensor_shape(in[0])[3], t = ct_tensor_shape(in[0])[2];
    int64_t bh = ct_tensor_numel(in[0]) / (t * hs), s3[3] = {bh, t, hs};
    ct_tensor *q = ct_nn_reshape(in[0], 3, s3), *k = ct_nn_reshape(in[1], 3, s3),
              *v = ct_nn_reshape(in[2], 3, s3);
    ct_tensor *s = ct_nn_bmm(q, k, false, true);
    int64_t s4[4] = {1, bh, t, t};
    ct_tensor *s4v = ct_nn_reshape(s, 4, s4);
    ct_tensor *p = ct_nn_softmax_causal(s4v);
    ct_nn_manual_seed(77);
    ct_tensor *pd = ct_nn_dropout(p, 0.3f, true);
    int64_t p3[3] = {bh, t, t};
    ct_tensor *pd3 = ct_nn_reshape(pd, 3, p3);
    ct_tensor *o = ct_nn_bmm(pd3, v, false, false);
    ct_tensor *y = ct_nn_reshape(o, 4, ct_tensor_shape(in[0]));
    ct_tensor *all[] = {q, k, v, s, s4v, p, pd, pd3, o};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ct_tensor_release(&all[i]);
    return y;
}

/* A random upstream gradient of shape (ndim, shape) on dev (fd_rand's values). */
static ct_tensor *rand_grad(int ndim, const int64_t *shape, ct_device dev)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    float *r = malloc((size_t)n * sizeof(float));
    for (int64_t j = 0; j < n; j++)
        r[j] = fd_rand();
    ct_tensor *h = ct_tensor_from_f32(ndim, shape, r), *g = ct_tensor_to(h, dev);
    free(r);
    ct_tensor_release(&h);
    return g;
}

static ct_tensor *on_cpu(const ct_tensor *t)
{
    return t ? ct_tensor_to(t, CT_CPU) : NULL;
}

/* compares a tensor of any device with a reference times scale */
static void expect(const char *what, const ct_tensor *got, const ct_tensor *want, float scale)
{
    ct_tensor *g = on_cpu(got), *w = ct_tensor_clone(want);
    float *p = ct_tensor_f32(w);
    for (int64_t i = 0; i < ct_tensor_numel(w); i++)
        p[i] *= scale;
    close_t(what, g, w, TOL);
    ct_tensor_release(&g);
    ct_tensor_release(&w);
}

/* One case on device dev: inputs name.in<i> (moved there), forward vs name.out, backward of
 * name.gy vs name.g<i>, then a second forward and backward: the gradients must double. */
static void run_case(const char *name, op_fn fn, ct_device dev)
{
    char key[160], what[200];
    const char *dn = dev == CT_CPU ? "cpu" : "checkdev";
    ct_tensor *in[4] = {0};
    int nin = 0;
    for (; nin < 4; nin++) {
        snprintf(key, sizeof key, "%s.in%d", name, nin);
        ct_tensor *t = ref_get(&R, key);
        if (!t)
            break;
        in[nin] = ct_tensor_to(t, dev);
        snprintf(key, sizeof key, "%s.g%d", name, nin);
        if (ref_get(&R, key))
            ct_tensor_set_requires_grad(in[nin], true);
    }
    snprintf(key, sizeof key, "%s.gy", name);
    ct_tensor *gy = ct_tensor_to(ref_must(&R, key), dev);
    for (int pass = 1; pass <= 2; pass++) {
        ct_tensor *y = fn(in, NULL);
        snprintf(what, sizeof what, "%s on %s: forward", name, dn);
        snprintf(key, sizeof key, "%s.out", name);
        expect(what, y, ref_must(&R, key), 1.0f);
        int rc = y ? ct_tensor_backward(y, gy) : -1;
        CHECK(rc == 0, "%s on %s: backward rc %d", name, dn, rc);
        for (int i = 0; i < nin; i++) {
            snprintf(key, sizeof key, "%s.g%d", name, i);
            ct_tensor *want = ref_get(&R, key);
            snprintf(what, sizeof what, "%s on %s: gradient of input %d after %d backward(s)", name,
                     dn, i, pass);
            if (want)
                expect(what, ct_tensor_grad(in[i]), want, (float)pass);
        }
        ct_tensor_release(&y);
    }
    ct_tensor_release(&gy);
    for (int i = 0; i < nin; i++)
        ct_tensor_release(&in[i]);
}

/* Finite differences on the reference inputs (float ones: mask bit i for input i). */
static void fd_case(const char *name, op_fn fn, unsigned mask, double atol, double rtol)
{
    char key[160];
    ct_tensor *in[4] = {0};
    int nin = 0;
    for (; nin < 4; nin++) {
        snprintf(key, sizeof key, "%s.in%d", name, nin);
        ct_tensor *t = ref_get(&R, key);
        if (!t)
            break;
        in[nin] = ct_tensor_clone(t);
    }
    fd_check(name, fn, in, nin, mask, NULL, 1e-2, atol, rtol);
    for (int i = 0; i < nin; i++)
        ct_tensor_release(&in[i]);
}

/* Fused attention with dropout against its composition from the separate ops, on dev: output
 * and the gradients of q (pre-scaled by 1/sqrt(hs) for the composition), k and v. */
static void test_attention_dropout(ct_device dev)
{
    const char *dn = dev == CT_CPU ? "cpu" : "checkdev";
    ct_tensor *in[3], *ref_in[3];
    for (int i = 0; i < 3; i++) {
        char key[64];
        snprintf(key, sizeof key, "attention_causal.in%d", i);
        ct_tensor *h = ct_tensor_clone(ref_must(&R, key));
        ct_tensor *hs = ct_tensor_clone(h);
        if (i == 0) { /* q / sqrt(hs) for the composition */
            float *p = ct_tensor_f32(hs);
            for (int64_t j = 0; j < ct_tensor_numel(hs); j++)
                p[j] /= sqrtf((float)ct_tensor_shape(h)[3]);
        }
        in[i] = ct_tensor_to(h, dev);
        ref_in[i] = ct_tensor_to(hs, dev);
        ct_tensor_set_requires_grad(in[i], true);
        ct_tensor_set_requires_grad(ref_in[i], true);
        ct_tensor_release(&h);
        ct_tensor_release(&hs);
    }
    /* one tape per thread: each forward is followed by its own backward */
    int64_t n = ct_tensor_numel(in[0]);
    ct_tensor *gy = rand_grad(4, ct_tensor_shape(in[0]), dev);
    ct_tensor *y = f_attention_dropout(in, NULL);
    int rc1 = y ? ct_tensor_backward(y, gy) : -1;
    ct_tensor *want = composed_attention_dropout(ref_in);
    int rc2 = want ? ct_tensor_backward(want, gy) : -1;
    char what[128];
    snprintf(what, sizeof what, "attention with dropout on %s: forward", dn);
    ct_tensor *yc = on_cpu(y), *wc = on_cpu(want);
    close_t(what, yc, wc, TOL);
    /* and dropout did drop: the output differs from attention without it */
    bool prev = ct_autograd_set_enabled(false);
    ct_tensor *plain = ct_nn_attention(in[0], in[1], in[2], true, 0.3f, false), *pc = on_cpu(plain);
    ct_autograd_set_enabled(prev);
    double diff = 0;
    for (int64_t j = 0; yc && pc && j < n; j++)
        diff = fmax(diff, fabs(ct_tensor_f32(yc)[j] - ct_tensor_f32(pc)[j]));
    CHECK(diff > 0.1, "attention with dropout on %s: differs from none by only %g", dn, diff);
    ct_tensor_release(&plain);
    ct_tensor_release(&pc);
    CHECK(rc1 == 0 && rc2 == 0, "attention with dropout on %s: backward %d %d (%s)", dn, rc1, rc2,
          ct_last_error());
    for (int i = 0; i < 3 && rc1 == 0 && rc2 == 0; i++) {
        ct_tensor *g = on_cpu(ct_tensor_grad(in[i])), *w = on_cpu(ct_tensor_grad(ref_in[i]));
        if (i == 0) { /* d/dq = d/d(q / sqrt(hs)) / sqrt(hs) */
            float *p = ct_tensor_f32(w);
            for (int64_t j = 0; j < ct_tensor_numel(w); j++)
                p[j] /= sqrtf((float)ct_tensor_shape(in[0])[3]);
        }
        snprintf(what, sizeof what, "attention with dropout on %s: gradient of input %d", dn, i);
        close_t(what, g, w, TOL);
        ct_tensor_release(&g);
        ct_tensor_release(&w);
    }
    ct_tensor *all[] = {y, want, yc, wc, gy, in[0], in[1], in[2], ref_in[0], ref_in[1], ref_in[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ct_tensor_release(&all[i]);
}

/* The fused backward writes the gradients that hold nothing yet and adds to those that hold a
 * sum (run_case checks a second backward into three sums), on dev: with k a new tensor, a second
 * backward gives q and v twice the first's gradients and k once; and attention(x, x, x)
 * gives x the sum of the three gradients (the one tensor is each target in turn). */
static void test_attention_accumulates(ct_device dev)
{
    const char *dn = dev == CT_CPU ? "cpu" : "checkdev";
    ct_tensor *in[3], *g1[3] = {0};
    for (int i = 0; i < 3; i++) {
        char key[64];
        snprintf(key, sizeof key, "attention_causal.in%d", i);
        in[i] = ct_tensor_to(ref_must(&R, key), dev);
        ct_tensor_set_requires_grad(in[i], true);
    }
    int64_t n = ct_tensor_numel(in[0]);
    ct_tensor *gy = rand_grad(4, ct_tensor_shape(in[0]), dev);
    char what[128];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* k: a new tensor, whose gradient does not exist yet */
            ct_tensor *k = ct_tensor_clone(in[1]);
            ct_tensor_release(&in[1]);
            in[1] = k;
            ct_tensor_set_requires_grad(k, true);
        }
        ct_tensor *y = f_attention_dropout(in, NULL);
        int rc = y ? ct_tensor_backward(y, gy) : -1;
        CHECK(rc == 0, "attention on %s: backward %d (%s)", dn, rc, ct_last_error());
        ct_tensor_release(&y);
        for (int i = 0; i < 3 && rc == 0; i++) {
            ct_tensor *g = on_cpu(ct_tensor_grad(in[i]));
            if (pass == 0) {
                g1[i] = g;
                continue;
            }
            ct_tensor *w = ct_tensor_clone(g1[i]);
            float times = i == 1 ? 1.0f : 2.0f;
            for (int64_t j = 0; j < n; j++)
                ct_tensor_f32(w)[j] *= times;
            snprintf(what, sizeof what, "attention on %s: k new, input %d", dn, i);
            close_t(what, g, w, TOL);
            ct_tensor_release(&g);
            ct_tensor_release(&w);
        }
    }
    /* one tensor as q, k and v */
    ct_tensor *x[3] = {in[0], in[0], in[0]}, *xs = ct_tensor_clone(ct_tensor_grad(in[0]));
    ct_tensor *y = f_attention_dropout(x, NULL);
    int rc = y ? ct_tensor_backward(y, gy) : -1;
    CHECK(rc == 0, "attention(x, x, x) on %s: backward %d (%s)", dn, rc, ct_last_error());
    ct_tensor_release(&y);
    ct_tensor *sep[3];
    for (int i = 0; i < 3; i++) { /* the same as three tensors holding x's values */
        sep[i] = ct_tensor_clone(in[0]);
        ct_tensor_set_requires_grad(sep[i], true);
    }
    ct_tensor *ys = f_attention_dropout(sep, NULL);
    rc = ys ? ct_tensor_backward(ys, gy) : -1;
    CHECK(rc == 0, "attention(x1, x2, x3) on %s: backward %d (%s)", dn, rc, ct_last_error());
    ct_tensor_release(&ys);
    ct_tensor *got = on_cpu(ct_tensor_grad(in[0])), *want = on_cpu(xs);
    for (int i = 0; i < 3 && rc == 0; i++) {
        ct_tensor *g = on_cpu(ct_tensor_grad(sep[i]));
        for (int64_t j = 0; j < n; j++)
            ct_tensor_f32(want)[j] += ct_tensor_f32(g)[j];
        ct_tensor_release(&g);
    }
    snprintf(what, sizeof what, "attention(x, x, x) on %s: gradient of x", dn);
    close_t(what, got, want, TOL);
    ct_tensor *all[] = {gy,    xs,    got,   want,   in[0],  in[1], in[2],
                        g1[0], g1[1], g1[2], sep[0], sep[1], sep[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ct_tensor_release(&all[i]);
}

/* ct_nn_attention_qkv with dropout against the composition it replaces (slices of the (B, T, 3C)
 * input viewed as (B, T, H, hs), permuted to (B, H, T, hs), ct_nn_attention, permuted back), on
 * dev, the generator reseeded before each: the same kernel on other strides, so the same bits,
 * forward and the input's gradient. */
static void test_attention_qkv_dropout(ct_device dev)
{
    const char *dn = dev == CT_CPU ? "cpu" : "checkdev";
    ct_tensor *h = ref_must(&R, "attention_qkv_causal.in0");
    const int64_t *xs = ct_tensor_shape(h);
    int64_t B = xs[0], T = xs[1], C = xs[2] / 3, H = 2, s4[4] = {B, T, H, C / H}, s3[3] = {B, T, C};
    const int swap12[4] = {0, 2, 1, 3};
    ct_tensor *x[2];
    for (int i = 0; i < 2; i++) {
        x[i] = ct_tensor_to(h, dev);
        ct_tensor_set_requires_grad(x[i], true);
    }
    ct_tensor *gy = rand_grad(3, s3, dev);
    ct_nn_manual_seed(77);
    ct_tensor *y = ct_nn_attention_qkv(x[0], (int)H, true, 0.3f, true);
    int rc1 = y ? ct_tensor_backward(y, gy) : -1;
    ct_tensor *t[12] = {0}, *want = NULL;
    for (int i = 0; i < 3; i++) {
        t[i] = ct_nn_slice(x[1], 2, i * C, C);
        t[3 + i] = t[i] ? ct_nn_reshape(t[i], 4, s4) : NULL;
        t[6 + i] = t[3 + i] ? ct_nn_permute(t[3 + i], swap12) : NULL;
    }
    ct_nn_manual_seed(77);
    if (t[6] && t[7] && t[8] && (t[9] = ct_nn_attention(t[6], t[7], t[8], true, 0.3f, true)) &&
        (t[10] = ct_nn_permute(t[9], swap12)))
        want = ct_nn_reshape(t[10], 3, s3);
    int rc2 = want ? ct_tensor_backward(want, gy) : -1;
    CHECK(rc1 == 0 && rc2 == 0, "attention_qkv with dropout on %s: %d %d (%s)", dn, rc1, rc2,
          ct_last_error());
    ct_tensor *got[2] = {on_cpu(y), on_cpu(ct_tensor_grad(x[0]))};
    ct_tensor *exp[2] = {on_cpu(want), on_cpu(ct_tensor_grad(x[1]))};
    for (int k = 0; k < 2 && rc1 == 0 && rc2 == 0; k++) {
        double diff = 0;
        for (int64_t j = 0; j < ct_tensor_numel(exp[k]); j++)
            diff = fmax(diff, fabs(ct_tensor_f32(got[k])[j] - ct_tensor_f32(exp[k])[j]));
        CHECK(diff == 0,
              "attention_qkv with dropout on %s: %s differs from the composition's by %g", dn,
              k ? "the gradient" : "the output", diff);
    }
    ct_tensor *all[] = {y, want, gy, x[0], x[1], got[0], got[1], exp[0], exp[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ct_tensor_release(&all[i]);
    for (int i = 0; i < 12; i++)
        ct_tensor_release(&t[i]);
}

static void test_errors(void)
{
    int64_t ws[2] = {10, 6}, is[1] = {3}, xs[2] = {4, 8}, ls[1] = {7};
    ct_tensor *w = ct_tensor_new(CT_F32, 2, ws), *idx = ct_tensor_new(CT_I64, 1, is);
    int64_t *ix = ct_tensor_data(idx);
    ix[0] = 1, ix[1] = 10, ix[2] = 2;
    ct_tensor *y = ct_nn_embedding(idx, w, -1);
    CHECK(!y && strstr(ct_last_error(), "index 10 at position 1 is outside [0, 10)"),
          "embedding of a bad index: '%s'", ct_last_error());
    ct_tensor_release(&y);
    y = ct_nn_embedding(idx, w, 10);
    CHECK(!y && strstr(ct_last_error(), "padding_idx 10"), "bad padding_idx: '%s'",
          ct_last_error());
    ct_tensor *x = ct_tensor_new(CT_F32, 2, xs), *g = ct_tensor_new(CT_F32, 1, ls);
    y = ct_nn_layer_norm(x, g, NULL, 1e-5f);
    CHECK(!y && strstr(ct_last_error(), "last dimension is 8 but weight / bias have 7"),
          "layer norm of a wrong weight: '%s'", ct_last_error());
    ct_tensor_release(&y);
    y = ct_nn_slice(x, 1, 5, 4);
    CHECK(!y && strstr(ct_last_error(), "[5, 9) of dimension 1 is outside the tensor's (size 8)"),
          "slice past the end: '%s'", ct_last_error());
    y = ct_nn_permute(x, (const int[]){1, 1});
    CHECK(!y && strstr(ct_last_error(), "perm[1] = 1"), "bad perm: '%s'", ct_last_error());
    y = ct_nn_softmax_causal(x);
    CHECK(!y && strstr(ct_last_error(), "(4, 8) must be (T, T)"), "causal of (4, 8): '%s'",
          ct_last_error());
    y = ct_nn_attention(x, x, w, false, 0.0f, false);
    CHECK(!y && strstr(ct_last_error(), "one shape"), "attention of two shapes: '%s'",
          ct_last_error());
    int64_t q3[3] = {2, 4, 8};
    ct_tensor *qkv = ct_tensor_new(CT_F32, 3, q3);
    y = ct_nn_attention_qkv(qkv, 2, true, 0.0f, false);
    CHECK(!y && strstr(ct_last_error(), "last dimension 8 must be 3 C"), "qkv of width 8: '%s'",
          ct_last_error());
    ct_tensor_release(&qkv);
    y = ct_nn_mul(x, w);
    CHECK(!y && strstr(ct_last_error(), "mul: shapes differ"), "mul of two shapes: '%s'",
          ct_last_error());
    ct_tensor_release(&y);
    ct_tensor *all[] = {w, idx, x, g};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ct_tensor_release(&all[i]);
}

/* the largest |a - b| over two tensors of any device */
static double max_diff(const ct_tensor *a, const ct_tensor *b)
{
    ct_tensor *x = on_cpu(a), *y = on_cpu(b);
    double d = x && y ? 0 : INFINITY;
    for (int64_t j = 0; x && y && j < ct_tensor_numel(x); j++)
        d = fmax(d, fabs(ct_tensor_f32(x)[j] - ct_tensor_f32(y)[j]));
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    return d;
}

/* Attention under autocast to dt (bf16, f16) on dev (packed qkv, 2 heads, causal): output and
 * gradient differ from f32's (the products' operands were rounded) but stay close (2^-5: the
 * rounding of operands in [-1, 1] moves each product by at most 2^-8 of itself); backward run
 * after the region is closed gives the bits of a backward run inside it (the node keeps its
 * precision). */
static void test_attention_autocast(ct_device dev, ct_dtype dt)
{
    const char *dn = dev == CT_CPU ? "cpu" : "checkdev";
    ct_tensor *h = ref_must(&R, "attention_qkv_causal.in0"), *in[3], *y[3], *g[3];
    ct_tensor *gy = NULL;
    int rc[3];
    for (int run = 0; run < 3; run++) { /* f32; bf16, backward after; bf16, backward inside */
        in[run] = ct_tensor_to(h, dev);
        ct_tensor_set_requires_grad(in[run], true);
        if (run > 0)
            CHECK(ct_autocast_push(dt) == 0, "autocast push");
        y[run] = ct_nn_attention_qkv(in[run], 2, true, 0.0f, true);
        if (!gy && y[run])
            gy = rand_grad(3, ct_tensor_shape(y[run]), dev);
        if (run == 1)
            ct_autocast_pop();
        rc[run] = y[run] ? ct_tensor_backward(y[run], gy) : -1;
        if (run == 2)
            ct_autocast_pop();
        CHECK(rc[run] == 0, "attention autocast on %s: run %d: %d (%s)", dn, run, rc[run],
              ct_last_error());
        g[run] = ct_tensor_grad(in[run]);
    }
    if (rc[0] == 0 && rc[1] == 0 && rc[2] == 0) {
        double dy = max_diff(y[1], y[0]), dg = max_diff(g[1], g[0]);
        const char *dtn = dt == CT_BF16 ? "bf16" : "f16";
        printf("attention autocast %s on %s: output %.3g, gradient %.3g from f32\n", dtn, dn, dy,
               dg);
        CHECK(dy > 1e-4 && dy < 0x1p-5, "attention %s on %s: output %g from f32", dtn, dn, dy);
        CHECK(dg > 1e-4 && dg < 0x1p-5, "attention %s on %s: gradient %g from f32", dtn, dn, dg);
        CHECK(max_diff(g[1], g[2]) == 0, "attention %s on %s: backward after the region", dtn, dn);
    }
    for (int run = 0; run < 3; run++) {
        ct_tensor_release(&y[run]);
        ct_tensor_release(&in[run]);
    }
    ct_tensor_release(&gy);
}

int main(int argc, char **argv)
{
    R = ref_load(ref_dir(argc, argv), "transformer.bin");
    static const struct {
        const char *name;
        op_fn fn;
        unsigned fd_mask;
    } cases[] = {
        {"layer_norm", f_layer_norm, 7},
        {"layer_norm_plain", f_layer_norm_plain, 1},
        {"layer_norm_wide", f_layer_norm, 0},
        {"gelu", f_gelu, 1},
        {"gelu_tanh", f_gelu_tanh, 1},
        {"mul", f_mul, 3},
        {"mul_self", f_mul_self, 1},
        {"embedding", f_embedding, 2},
        /* no finite differences: the padding row's gradient is 0 by definition, not the
         * derivative (PyTorch's padding_idx) */
        {"embedding_pad", f_embedding_pad, 0},
        {"permute", f_permute, 1},
        {"transpose", f_transpose, 1},
        {"slice1", f_slice1, 1},
        {"slice0", f_slice0, 1},
        {"bmm", f_bmm, 3},
        {"bmm_ta", f_bmm_ta, 3},
        {"bmm_tb", f_bmm_tb, 3},
        {"bmm_tab", f_bmm_tab, 3},
        {"softmax_causal", f_softmax_causal, 1},
        {"attention", f_attention, 7},
        {"attention_causal", f_attention_causal, 7},
        {"attention_long", f_attention, 0},
        {"attention_long_causal", f_attention_causal, 0},
        {"attention_qkv", f_attention_qkv, 0},
        {"attention_qkv_causal", f_attention_qkv_causal, 1},
        {"attention_blocks_causal", f_attention_causal, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(cases[i].name, cases[i].fn, CT_CPU);
        run_case(cases[i].name, cases[i].fn, CT_CHECKDEV);
        if (cases[i].fd_mask)
            fd_case(cases[i].name, cases[i].fn, cases[i].fd_mask, 2e-3, 2e-2);
    }
    test_attention_dropout(CT_CPU);
    test_attention_dropout(CT_CHECKDEV);
    test_attention_qkv_dropout(CT_CPU);
    test_attention_qkv_dropout(CT_CHECKDEV);
    test_attention_accumulates(CT_CPU);
    test_attention_accumulates(CT_CHECKDEV);
    test_attention_autocast(CT_CPU, CT_BF16);
    test_attention_autocast(CT_CHECKDEV, CT_BF16);
    test_attention_autocast(CT_CPU, CT_F16);
    test_attention_autocast(CT_CHECKDEV, CT_F16);
    fd_case("attention_causal", f_attention_dropout, 7, 2e-3, 2e-2);
    test_errors();
    ref_free(&R);
    if (g_fail) {
        fprintf(stderr, "%d failure(s)\n", g_fail);
        return 1;
    }
    printf("transformer ops vs PyTorch (cpu, checkdev), accumulation, finite differences: ok\n");
    return 0;
}
