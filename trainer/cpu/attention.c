/* trainer/cpu/attention.c — fused scaled dot-product attention on the CPU, forward and
 * backward, with an optional causal mask and dropout on the probabilities, as flash attention
 * does it: blocks of BQ query rows, whose scores with the keys they see are products of small
 * matrices (gemm.c's kernels; a slice's k and v are packed into its panels once, for all the
 * slice's blocks), softmax per row in between; backward recomputes the
 * probabilities from the forward's log-sum-exp. A thread's scratch is BQ rows of scores (two in
 * backward) and its slice's packed k and v, so memory grows with T, not T^2. Parallel over the
 * (batch, head) slices, each thread the only writer of its slice's dk and dv, every sum in a fixed
 * order: the same bits for any thread count.
 *
 * Under a causal mask, a block's last BQ keys form a triangle: half of their scores are masked.
 * The products skip what the mask hides, a tile of 6 rows at a time (gemm.c's bands,
 * causal_bands()); and a row's softmax runs over whole vectors of 8 (padded()).
 *
 * Times, for the forward and backward of a GPT layer's attention (16 x 128 tokens, 4 heads of 32,
 * 1 thread):
 *   - against a kernel of 4 query rows at a time in vector registers (which read and wrote each
 *     key's dk and dv rows once per 4 query rows), these blocks take about 25% less time;
 *   - the bands, the padded rows and blocks of 64 rows (not 32) took 11% off the forward and
 *     7.5% off the backward (in one process, alternating with the old code, 4 runs). 64 rows
 *     beat 32 and 48 with the bands.
 *
 * Shapes: q, k, v, o, dout, dq, dk, dv: bh slices of (t, hs), laid out as table.h's
 * ct__attn_p says (the products take rows at any stride: q, k and v as thirds of one (B, T, 3C)
 * tensor are read in place); lse, delta (bh, t). Not here: the op and its autograd
 * (trainer/nn/attention.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/backend/lowp.h"
#include "trainer/backend/philox.h"
#include "trainer/cpu/cpu.h"
#include "trainer/cpu/vecmath.h"

#define BQ 64 /* query rows a block takes (the file comment) */

/* whether p asks for low-precision products (table.h's dt), and x rounded to that precision */
static inline bool low(const ct__attn_p *p)
{
    return p->dt == CT_BF16 || p->dt == CT_F16;
}
static inline float lp(const ct__attn_p *p, float x)
{
    return p->dt == CT_BF16 ? ct__round_bf16(x) : ct__round_f16(x);
}

/* the dropout factor of probability (b, i, j): 0 or 1 / (1 - p) */
static inline float keep(const ct__attn_p *p, int64_t b, int64_t i, int64_t j)
{
    if (p->dropout <= 0.0f)
        return 1.0f;
    float u = ct__philox_uniform(p->seed, 0, (uint64_t)((b * p->t + i) * p->t + j));
    return u < p->dropout ? 0.0f : 1.0f / (1.0f - p->dropout);
}

/* c (m, n) = or += a (m, k; stored (k, m) when ta) b (k, n; stored (n, k) when tb), the
 * stored rows lda, ldb, ldc apart: gemm.c's kernels, or plain loops on a CPU without AVX2 and
 * FMA */
static int mm(int64_t m, int64_t k, int64_t n, const float *a, int64_t lda, bool ta, const float *b,
              int64_t ldb, bool tb, float *c, int64_t ldc, bool acc, const ct__gemm_band *band)
{
    if (ct__cpu_gemm_runs())
        return ct__cpu_gemm_ld(m, k, n, a, lda, ta, b, ldb, tb, c, ldc, acc, NULL, band);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = acc ? c[i * ldc + j] : 0.0f;
            for (int64_t p = 0; p < k; p++)
                s +=
                    (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = s;
        }
    return 0;
}

/* A slice's k or v as the b of every block's product: packed once into gemm.c's panels, or, on
 * a CPU without AVX2 and FMA, read in place by mm's loops. */
typedef struct packed {
    const float *b;
    int64_t ldb, k; /* its rows (op(b) is (k, n)) */
    bool tb;
    float *panels; /* NULL: not packed */
} packed;

static int64_t pack_floats(int64_t k, int64_t n)
{
    return (ct__cpu_gemm_pack_floats(k, n) + 15) & ~(int64_t)15; /* each buffer 64-byte aligned */
}

static packed pack(int64_t k, int64_t n, const float *b, int64_t ldb, bool tb, float *buf)
{
    packed p = {.b = b, .ldb = ldb, .k = k, .tb = tb};
    if (ct__cpu_gemm_runs()) {
        ct__cpu_gemm_pack(k, n, b, ldb, tb, buf);
        p.panels = buf;
    }
    return p;
}

/* c (m, n) = or += a (m, k) op(b)'s first k rows and n columns */
static int mm_packed(int64_t m, int64_t k, int64_t n, const float *a, int64_t lda, const packed *b,
                     float *c, int64_t ldc, bool acc, const ct__gemm_band *band)
{
    if (b->panels)
        return ct__cpu_gemm_packed(m, k, n, a, lda, false, b->panels, b->k, c, ldc, acc, band);
    return mm(m, k, n, a, lda, false, b->b, b->ldb, b->tb, c, ldc, acc, band);
}

/* The causal mask of the block of query rows from i0, as bands of its products (the gemm.c
 * kernels then skip what the mask hides; NULL when not causal): row r of the block (query
 * i0 + r) sees the keys j <= i0 + r. */
typedef struct bands {
    ct__gemm_band scores;  /* (rows, keys): columns past the keys seen are not needed */
    ct__gemm_band weights; /* (rows, keys) @ (keys, hs): a row's weights are 0 past its keys */
    ct__gemm_band keys;    /* (keys, rows) @ (rows, hs): key j has weight 0 in rows < j - i0 */
} bands;

static bands causal_bands(int64_t i0)
{
    return (bands){
        .scores = {.n_hi = i0 + 1, .k_lo = -CT_GEMM_OPEN, .k_hi = CT_GEMM_OPEN},
        .weights = {.n_hi = CT_GEMM_OPEN, .k_lo = -CT_GEMM_OPEN, .k_hi = i0 + 1},
        .keys = {.n_hi = CT_GEMM_OPEN, .k_lo = -i0, .k_hi = CT_GEMM_OPEN},
    };
}

/* The length a row's loops run to: seen rounded up to a whole vector of 8 within keys, so that
 * they have no scalar remainder (rows of a causal block are 1 to T long, 64 on average). */
static inline int64_t padded(int64_t seen, int64_t keys)
{
    int64_t len = (seen + 7) & ~(int64_t)7;
    return len < keys ? len : keys;
}

/* Row i's scores s (keys of them, seen < keys unmasked) to its weights of the values: softmax
 * of scale s over the first seen, times the dropout factors, 0 past seen; the log-sum-exp into
 * *lse. The padding past seen scores -inf: weight 0, and the same sums. */
CT_CLONES static void softmax_row(const ct__attn_p *p, int64_t b, int64_t i, int64_t seen,
                                  int64_t keys, float *restrict s, float *lse)
{
    float m = -INFINITY, l, scale = p->scale;
    int64_t len = padded(seen, keys);
    for (int64_t j = seen; j < len; j++)
        s[j] = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < len; j++)
        m = s[j] * scale > m ? s[j] * scale : m;
    for (int64_t j = 0; j < len; j++)
        s[j] = ct__expf_unclamped(s[j] * scale - m);
    l = ct__sum8(s, len);
    float inv = 1.0f / l;
    if (p->dropout <= 0.0f)
        for (int64_t j = 0; j < len; j++)
            s[j] *= inv;
    else
        for (int64_t j = 0; j < seen; j++)
            s[j] *= inv * keep(p, b, i, j);
    for (int64_t j = seen; j < keys; j++)
        s[j] = 0.0f;
    if (low(p)) /* the weights, operands of P v */
        for (int64_t j = 0; j < seen; j++)
            s[j] = lp(p, s[j]);
    *lse = m + logf(l);
}

/* The rows of the next slice that a slice's products write, read ahead into L2 a few lines per
 * row of the slice (behind its softmax or gradient rows): its o in the forward, its dq, dk and
 * dv (added to) in the backward. Otherwise each of those products waits on memory for its c.
 * A GPT layer's attention (16 x 128 tokens, 4 heads of 32, 1 thread), in one process
 * alternating with the code without it, 5 runs: the forward took 0.89-0.95 of the time, the
 * backward 0.88-0.96. Reading the next slice's q, k, v, o and dout ahead as well made the
 * backward slower than without any. */
typedef struct ahead {
    float *row0[3]; /* the next slice's rows 0 of n tensors; n = 0: none */
    int64_t rs[3];
    int n;
    int64_t t, hs, per_row; /* lines read ahead per row of this slice */
    int i, col;             /* the next line: tensor i, its row, floats col of it */
    int64_t row;
} ahead;

/* b's rows 0 of n tensors (rows rs apart), or none when b is past the last slice */
static ahead ahead_of(const ct__attn_p *p, int64_t b, int n, float *const base[3], int64_t rs)
{
    ahead a = {.t = p->t, .hs = p->hs};
    if (b >= p->bh)
        return a;
    for (int i = 0; i < n; i++) {
        a.row0[i] = base[i] + ct__attn_slice(p, b, rs);
        a.rs[i] = rs;
    }
    a.n = n;
    a.per_row = n * ((p->hs + 15) / 16 + 1);
    return a;
}

/* the next per_row lines: each row's floats 0, 16, ... and its last (a row need not start a
 * line), for writing */
static void read_ahead(ahead *a)
{
    for (int64_t k = 0; k < a->per_row && a->i < a->n; k++) {
        __builtin_prefetch(a->row0[a->i] + a->row * a->rs[a->i] + a->col, 1, 2);
        if (a->col == a->hs - 1) {
            a->col = 0;
            if (++a->row == a->t)
                a->row = 0, a->i++;
        } else {
            a->col = a->col + 16 < a->hs ? a->col + 16 : (int)a->hs - 1;
        }
    }
}

/* one (batch, head) slice of the forward (rows rs apart in q, k, v, ors in o); s (BQ T) is the
 * thread's scratch, kt and vp room for k^T's and v's panels. 0 or the products' error. */
static int attn_fwd_slice(const ct__attn_p *p, int64_t b, const float *qb, const float *kb,
                          const float *vb, float *ob, float *lseb, float *s, float *kt, float *vp,
                          ahead *next)
{
    int64_t T = p->t, hs = p->hs, rs = p->in_rs, ors = p->out_rs;
    packed k_t = pack(hs, T, kb, rs, true, kt), v = pack(T, hs, vb, rs, false, vp);
    for (int64_t i0 = 0; i0 < T; i0 += BQ) {
        int64_t rows = T - i0 < BQ ? T - i0 : BQ, keys = p->causal ? i0 + rows : T;
        bands band = causal_bands(i0);
        bool c = p->causal;
        int rc = mm_packed(rows, hs, keys, qb + i0 * rs, rs, &k_t, s, keys, false,
                           c ? &band.scores : NULL);
        if (rc < 0) /* that was q k^T */
            return rc;
        for (int64_t r = 0; r < rows; r++) {
            softmax_row(p, b, i0 + r, c ? i0 + r + 1 : keys, keys, s + r * keys, lseb + i0 + r);
            read_ahead(next);
        }
        if ((rc = mm_packed(rows, keys, hs, s, keys, &v, ob + i0 * ors, ors, false,
                            c ? &band.weights : NULL)) < 0)
            return rc; /* P v */
    }
    return 0;
}

/* grad_row's first pass at j: s[j] := P_ij, dp[j] kept, both 0 at or past seen (the padding);
 * returns their product, a term of delta_i */
static inline __attribute__((always_inline)) float
prob_term(float *restrict s, float *restrict dp, int64_t j, int64_t seen, float scale, float lse)
{
    float pij = j < seen ? ct__expf_unclamped(s[j] * scale - lse) : 0.0f,
          dpj = j < seen ? dp[j] : 0.0f;
    s[j] = pij;
    dp[j] = dpj;
    return pij * dpj;
}

/* Row i of a block in backward: s (q k^T) to ds = P (M dp - delta_i) scale, in place, and dp
 * (do v^T) to the weights P M, in place; P = exp(scale s - lse_i), M the dropout factors; both 0
 * past seen. delta_i = do_i . o_i is the same sum as sum_j P_ij M_ij dp_ij (o_i = sum_j P_ij
 * M_ij v_j): computed so, from the row in L1, in the pass that computes P, so that the
 * backward never reads o (its rows were cache misses: a GPT layer's 8192 dot products of 32
 * were 1% of a step). In a 1-thread GPT step, alternating with do . o step by step, the
 * attention's backward took 0.92-1.01 of the time (6 runs, 0.976 on average). Returns
 * delta_i. */
CT_CLONES static float grad_row(const ct__attn_p *p, int64_t b, int64_t i, int64_t seen,
                                int64_t keys, float lse, float *restrict s, float *restrict dp)
{
    float scale = p->scale;
    int64_t len = padded(seen, keys), len8 = len & ~(int64_t)7;
    float delta;
    if (p->dropout <= 0.0f) {
        /* P, the padding's 0s and delta in one pass: ct__dot8's order */
        float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t j0 = 0; j0 < len8; j0 += 8)
            for (int l = 0; l < 8; l++)
                d[l] += prob_term(s, dp, j0 + l, seen, scale, lse);
        for (int64_t j = len8; j < len; j++)
            d[j - len8] += prob_term(s, dp, j, seen, scale, lse);
        for (int64_t j = len; j < keys; j++)
            s[j] = dp[j] = 0.0f;
        delta = ct__sum_lanes8(d);
        for (int64_t j = 0; j < len; j++) {
            float pij = s[j];
            s[j] = pij * (dp[j] - delta) * scale;
            dp[j] = pij;
        }
    } else {
        /* one draw of M_ij per element: dp[j] := M_ij dp_ij, and s[j] := P_ij with the sign
         * bit set where M_ij is 0 (P_ij >= 0, so its magnitude is kept, exactly) */
        float d[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* ct__dot8's order, with M */
        for (int64_t j = 0; j < seen; j++) {
            float pij = ct__expf_unclamped(s[j] * scale - lse), mij = keep(p, b, i, j);
            dp[j] *= mij;
            d[j % 8] += pij * dp[j];
            s[j] = mij != 0.0f ? pij : -pij;
        }
        for (int64_t j = seen; j < keys; j++)
            s[j] = dp[j] = 0.0f;
        delta = ct__sum_lanes8(d);
        float kept = 1.0f / (1.0f - p->dropout); /* keep()'s nonzero factor */
        for (int64_t j = 0; j < seen; j++) {
            float pij = fabsf(s[j]), mij = signbit(s[j]) ? 0.0f : kept;
            s[j] = pij * (dp[j] - delta) * scale;
            dp[j] = pij * mij;
        }
    }
    return delta;
}

/* With P = exp(scale q k^T - lse) and M the dropout factors: dv_j += sum_i P_ij M_ij do_i;
 * dP_ij = do_i . v_j; dS_ij = P_ij (M_ij dP_ij - delta_i) scale, delta_i = do_i . o_i;
 * dq_i += sum_j dS_ij k_j; dk_j += sum_i dS_ij q_i. One slice (rows rs apart in q, k, v, dq, dk,
 * dv; ors in dout); sc (2 BQ T) is the thread's scratch, kt, vt and kp room for k^T's, v^T's
 * and k's panels; deltab gets the deltas. 0 or the products' error. */
static int attn_bwd_slice(const ct__attn_p *p, int64_t b, const float *qb, const float *kb,
                          const float *vb, const float *lseb, const float *gb, float *deltab,
                          float *dqb, float *dkb, float *dvb, bool acc, float *sc, float *kt,
                          float *vt, float *kp, ahead *next)
{
    int64_t T = p->t, hs = p->hs, rs = p->in_rs, ors = p->out_rs;
    if (!acc) /* the products below add: their rows start at 0, zeroed here as they are used */
        for (int64_t i = 0; i < T; i++) {
            memset(dqb + i * rs, 0, (size_t)hs * sizeof(float));
            memset(dkb + i * rs, 0, (size_t)hs * sizeof(float));
            memset(dvb + i * rs, 0, (size_t)hs * sizeof(float));
        }
    packed k_t = pack(hs, T, kb, rs, true, kt), v_t = pack(hs, T, vb, rs, true, vt),
           k = pack(T, hs, kb, rs, false, kp);
    for (int64_t i0 = 0; i0 < T; i0 += BQ) {
        int64_t rows = T - i0 < BQ ? T - i0 : BQ, keys = p->causal ? i0 + rows : T;
        float *s = sc, *dp = sc + BQ * T;
        const float *q0 = qb + i0 * rs, *g0 = gb + i0 * ors;
        bands band = causal_bands(i0);
        bool c = p->causal;
        const ct__gemm_band *scores = c ? &band.scores : NULL, *weights = c ? &band.weights : NULL,
                            *by_key = c ? &band.keys : NULL;
        int rc = mm_packed(rows, hs, keys, q0, rs, &k_t, s, keys, false, scores); /* q k^T */
        if (rc == 0)
            rc = mm_packed(rows, hs, keys, g0, ors, &v_t, dp, keys, false, scores); /* do v^T */
        if (rc < 0)
            return rc;
        for (int64_t r = 0; r < rows; r++) {
            deltab[i0 + r] = grad_row(p, b, i0 + r, c ? i0 + r + 1 : keys, keys, lseb[i0 + r],
                                      s + r * keys, dp + r * keys);
            if (low(p)) /* dS and P M, operands of the products below */
                for (int64_t j = 0; j < keys; j++) {
                    s[r * keys + j] = lp(p, s[r * keys + j]);
                    dp[r * keys + j] = lp(p, dp[r * keys + j]);
                }
            read_ahead(next);
        }
        rc = mm_packed(rows, keys, hs, s, keys, &k, dqb + i0 * rs, rs, true, weights); /* ds k */
        if (rc == 0)                                                                   /* ds^T q */
            rc = mm(keys, rows, hs, s, keys, true, q0, rs, false, dkb, rs, true, by_key);
        if (rc == 0) /* (PM)^T do */
            rc = mm(keys, rows, hs, dp, keys, true, g0, ors, false, dvb, rs, true, by_key);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Under CT_BF16 (CT_F16), x (q, k, v or dout: rows rs apart) rounded to bf16 (f16) into *buf, a
 * copy with the same layout (the columns the slices read; the rest is not read): returns the
 * copy, or x itself under CT_F32, or NULL when out of memory. */
static const float *rounded(const ct__attn_p *p, const float *x, int64_t rs, float **buf)
{
    *buf = NULL;
    if (!low(p))
        return x;
    int64_t rows = p->heads ? p->bh / p->heads * p->t : 0, cols = p->heads * p->hs;
    if (!(*buf = malloc((size_t)(rows ? rows * rs : 1) * sizeof(float))))
        return NULL;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            (*buf)[r * rs + c] = lp(p, x[r * rs + c]);
    return *buf;
}

static int attn_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                    float *lse);

/* CT_BF16, CT_F16: the products' operands rounded (rounded()), the probabilities in softmax_row */
int ct__cpu_attn_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                     float *lse)
{
    float *bq, *bk, *bv;
    const float *rq = rounded(p, q, p->in_rs, &bq), *rk = rounded(p, k, p->in_rs, &bk),
                *rv = rounded(p, v, p->in_rs, &bv);
    int rc = rq && rk && rv
                 ? attn_fwd(p, rq, rk, rv, o, lse)
                 : ct__error(CT_ENOMEM, "attention: out of memory for low-precision operands");
    free(bq);
    free(bk);
    free(bv);
    return rc;
}

static int attn_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                    float *lse)
{
    int64_t T = p->t;
    int rc = 0;
#pragma omp parallel if (p->bh * T * T * p->hs > 32768)
    {
        int64_t nk = pack_floats(p->hs, T), nv = pack_floats(T, p->hs);
        /* a block's scores, then k^T's and v's panels */
        float *s = aligned_alloc(64, (size_t)(BQ * T + nk + nv) * sizeof(float));
        if (!s) {
#pragma omp atomic write
            rc = CT_ENOMEM;
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < p->bh; b++) {
            int64_t in = ct__attn_slice(p, b, p->in_rs), out = ct__attn_slice(p, b, p->out_rs);
            ahead next = ahead_of(p, b + 1, 1, (float *const[3]){o}, p->out_rs);
            int e = s ? attn_fwd_slice(p, b, q + in, k + in, v + in, o + out, lse + b * T, s,
                                       s + BQ * T, s + BQ * T + nk, &next)
                      : 0;
            if (e < 0) {
#pragma omp atomic write
                rc = e;
            }
        }
        free(s);
    }
    return rc < 0 ? ct__error(rc, "attention: out of memory for a block of scores or packing") : 0;
}

static int attn_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                    const float *lse, const float *dout, float *delta, float *dq, float *dk,
                    float *dv, bool acc);

/* CT_BF16, CT_F16: q, k, v and dout rounded (rounded()), P and dS in attn_bwd_slice */
int ct__cpu_attn_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                     const float *o, const float *lse, const float *dout, float *delta, float *dq,
                     float *dk, float *dv, bool acc)
{
    (void)o; /* delta comes from the probabilities (grad_row) */
    float *bq, *bk, *bv, *bg;
    const float *rq = rounded(p, q, p->in_rs, &bq), *rk = rounded(p, k, p->in_rs, &bk),
                *rv = rounded(p, v, p->in_rs, &bv), *rg = rounded(p, dout, p->out_rs, &bg);
    int rc = rq && rk && rv && rg
                 ? attn_bwd(p, rq, rk, rv, lse, rg, delta, dq, dk, dv, acc)
                 : ct__error(CT_ENOMEM, "attention: out of memory for low-precision operands");
    free(bq);
    free(bk);
    free(bv);
    free(bg);
    return rc;
}

static int attn_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                    const float *lse, const float *dout, float *delta, float *dq, float *dk,
                    float *dv, bool acc)
{
    int64_t T = p->t;
    int rc = 0;
#pragma omp parallel if (p->bh * T * T * p->hs > 32768)
    {
        int64_t nt = pack_floats(p->hs, T), nk = pack_floats(T, p->hs);
        /* a block's two score rows, then k^T's, v^T's and k's panels */
        float *s = aligned_alloc(64, (size_t)(2 * BQ * T + 2 * nt + nk) * sizeof(float));
        if (!s) {
#pragma omp atomic write
            rc = CT_ENOMEM;
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < p->bh; b++) {
            int64_t in = ct__attn_slice(p, b, p->in_rs), out = ct__attn_slice(p, b, p->out_rs);
            ahead next = ahead_of(p, b + 1, 3, (float *const[3]){dq, dk, dv}, p->in_rs);
            int e =
                s ? attn_bwd_slice(p, b, q + in, k + in, v + in, lse + b * T, dout + out,
                                   delta + b * T, dq + in, dk + in, dv + in, acc, s, s + 2 * BQ * T,
                                   s + 2 * BQ * T + nt, s + 2 * BQ * T + 2 * nt, &next)
                  : 0;
            if (e < 0) {
#pragma omp atomic write
                rc = e;
            }
        }
        free(s);
    }
    return rc < 0 ? ct__error(rc, "attention: out of memory for the backward's scratch or packing")
                  : 0;
}
