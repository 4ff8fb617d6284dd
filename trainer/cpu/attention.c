/* trainer/cpu/attention.c — fused scaled dot-product attention on the CPU, forward and
 * backward, with an optional causal mask and dropout on the probabilities. Memory grows with T,
 * not T^2: each thread keeps one row of scores (and the slice's K, V transposed, so a row of
 * products vectorises along the keys); backward recomputes the probabilities from the
 * forward's log-sum-exp (as flash attention does). Parallel over the (batch, head) slices, each
 * thread the only writer of its slice's dk and dv, every sum in a fixed order: the same bits for
 * any thread count.
 *
 * Shapes: q, k, v, o, dout, dq, dk, dv: bh slices of (t, hs), laid out as backend.h's
 * ct__attn_p says; lse, delta (bh, t). Where a slice's rows are not contiguous (q, k and v as
 * thirds of one (B, T, 3C) tensor), the thread copies them to its scratch first and adds its
 * gradients back at the end: rows 3C apart fall into a few cache sets, and the loops, which
 * read k and v once per block of query rows, then ran a third slower. Not here: the op and its
 * autograd (trainer/nn/attention.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/backend/philox.h"
#include "trainer/cpu/cpu.h"
#include "trainer/cpu/vecmath.h"

#define BWD_ROWS 4 /* query rows the backward takes together */

static inline float dot(const float *a, const float *b, int64_t n)
{
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* the dropout factor of probability (b, i, j): 0 or 1 / (1 - p) */
static inline float keep(const ct__attn_p *p, int64_t b, int64_t i, int64_t j)
{
    if (p->dropout <= 0.0f)
        return 1.0f;
    float u = ct__philox_uniform(p->seed, 0, (uint64_t)((b * p->t + i) * p->t + j));
    return u < p->dropout ? 0.0f : 1.0f / (1.0f - p->dropout);
}

/* mt (hs, T) = m (T, hs) transposed: a row of products with every key is then a sum of hs
 * rows of mt, which vectorises along the keys */
static void transpose(const float *restrict m, int64_t t, int64_t hs, float *restrict mt)
{
    for (int64_t j = 0; j < t; j++)
        for (int64_t c = 0; c < hs; c++)
            mt[c * t + j] = m[j * hs + c];
}

/* s[j] = scale a . m_j for j < n, m given transposed (hs, T): sums over c in order */
static inline __attribute__((always_inline)) void row_products(const float *restrict a,
                                                               const float *restrict mt, int64_t t,
                                                               int64_t hs, int64_t n, float scale,
                                                               float *restrict s)
{
    for (int64_t j = 0; j < n; j++)
        s[j] = 0.0f;
    for (int64_t c = 0; c < hs; c++) {
        float ac = a[c];
        const float *mc = mt + c * t;
        for (int64_t j = 0; j < n; j++)
            s[j] += ac * mc[j];
    }
    for (int64_t j = 0; j < n; j++)
        s[j] *= scale;
}

/* 8 floats in a register (GCC's vector extension: one AVX register, two SSE ones). The helpers
 * are static and inlined, so the default clone's vector-return ABI (-Wpsabi) is never used. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v8f __attribute__((vector_size(32)));
static inline v8f ld8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void st8(float *p, v8f v)
{
    memcpy(p, &v, sizeof v);
}
/* (a scalar times a v8f is GCC's broadcast: vbroadcastss, where a v8f literal of 8 copies
 * compiled to a chain of inserts) */

/* row_products for 4 rows at once: s[r * ts + j] = scale a_r . m_j (a_r = a + r * hs) for
 * j < n (and maybe up to 15 more, where j < t <= ts), each sum over c in the same order as
 * row_products (the same bits). 16 keys of the 4 rows stay in 8 registers across c, so each
 * load of a row of mt serves 4 rows. */
static inline __attribute__((always_inline)) void
rows4_products(const float *restrict a, const float *restrict mt, int64_t t, int64_t hs, int64_t n,
               float scale, float *restrict s, int64_t ts)
{
    int64_t j = 0;
    /* past n up to a multiple of 16 where the rows have room (t): the extra sums are never read */
    for (; j < n && j + 16 <= t; j += 16) {
        v8f acc[4][2] = {{{0}}};
        for (int64_t c = 0; c < hs; c++) {
            v8f m0 = ld8(mt + c * t + j), m1 = ld8(mt + c * t + j + 8);
            for (int r = 0; r < 4; r++) {
                float ar = a[r * hs + c];
                acc[r][0] += ar * m0;
                acc[r][1] += ar * m1;
            }
        }
        for (int r = 0; r < 4; r++) {
            st8(s + r * ts + j, acc[r][0] * scale);
            st8(s + r * ts + j + 8, acc[r][1] * scale);
        }
    }
    for (; j < n; j++)
        for (int r = 0; r < 4; r++) {
            float x = 0.0f;
            for (int64_t c = 0; c < hs; c++)
                x += a[r * hs + c] * mt[c * t + j];
            s[r * ts + j] = x * scale;
        }
}

/* Softmax of row i's scores s (seen of them) in place, times the dropout factors: the weights
 * of the values; its log-sum-exp into *lse. */
static inline __attribute__((always_inline)) void
softmax_row(const ct__attn_p *p, int64_t b, int64_t i, int64_t seen, float *restrict s, float *lse)
{
    float m = -INFINITY, l = 0;
    for (int64_t j = 0; j < seen; j++)
        m = s[j] > m ? s[j] : m;
    for (int64_t j = 0; j < seen; j++)
        s[j] = ct__expf_unclamped(s[j] - m);
    for (int64_t j = 0; j < seen; j++)
        l += s[j];
    float inv = 1.0f / l;
    for (int64_t j = 0; j < seen; j++)
        s[j] = s[j] * inv * keep(p, b, i, j);
    *lse = m + logf(l);
}

/* o_i = sum over j < seen of w_j v_j, in j order */
static inline __attribute__((always_inline)) void weighted_row(const float *restrict w,
                                                               const float *restrict vb, int64_t hs,
                                                               int64_t seen, float *restrict oi)
{
    for (int64_t c = 0; c < hs; c++)
        oi[c] = 0.0f;
    for (int64_t j = 0; j < seen; j++) {
        const float *vj = vb + j * hs;
        for (int64_t c = 0; c < hs; c++)
            oi[c] += w[j] * vj[c];
    }
}

/* one (batch, head) slice of the forward; s (4 T) and kt (hs, T) are the thread's scratch.
 * Query rows 4 at a time (rows4_products; the weighted sums of the values 8 columns by 4 rows
 * in registers, each sum in j order as weighted_row's, so the bits are a row's alone). */
CT_CLONES static void attn_fwd_slice(const ct__attn_p *p, int64_t b, const float *restrict qb,
                                     const float *restrict kb, const float *restrict vb,
                                     float *restrict ob, float *restrict lseb, float *restrict s,
                                     float *restrict kt)
{
    int64_t T = p->t, hs = p->hs, i0 = 0;
    transpose(kb, T, hs, kt);
    for (; hs % 8 == 0 && i0 + 4 <= T; i0 += 4) {
        int64_t all = p->causal ? i0 + 1 : T, last = p->causal ? i0 + 4 : T;
        rows4_products(qb + i0 * hs, kt, T, hs, last, p->scale, s, T);
        for (int r = 0; r < 4; r++)
            softmax_row(p, b, i0 + r, p->causal ? i0 + r + 1 : T, s + r * T, lseb + i0 + r);
        for (int64_t c = 0; c < hs; c += 8) {
            v8f acc[4] = {{0}};
            for (int64_t j = 0; j < all; j++) { /* keys every row of the block sees */
                v8f vj = ld8(vb + j * hs + c);
                for (int r = 0; r < 4; r++)
                    acc[r] += s[r * T + j] * vj;
            }
            for (int64_t j = all; j < last; j++) { /* causal: the block's own keys */
                v8f vj = ld8(vb + j * hs + c);
                for (int r = (int)(j - i0); r < 4; r++)
                    acc[r] += s[r * T + j] * vj;
            }
            for (int r = 0; r < 4; r++)
                st8(ob + (i0 + r) * hs + c, acc[r]);
        }
    }
    for (int64_t i = i0; i < T; i++) { /* the last rows (or hs not a multiple of 8) */
        int64_t seen = p->causal ? i + 1 : T;
        row_products(qb + i * hs, kt, T, hs, seen, p->scale, s);
        softmax_row(p, b, i, seen, s, lseb + i);
        weighted_row(s, vb, hs, seen, ob + i * hs);
    }
}

/* a slice's t rows of hs, rs apart, to contiguous dst */
static void gather(const float *restrict src, int64_t rs, int64_t t, int64_t hs,
                   float *restrict dst)
{
    for (int64_t i = 0; i < t; i++)
        memcpy(dst + i * hs, src + i * rs, (size_t)hs * sizeof(float));
}

/* contiguous src into a slice's rows rs apart: copied, or added when acc */
static void scatter(const float *restrict src, int64_t t, int64_t hs, float *restrict dst,
                    int64_t rs, bool acc)
{
    for (int64_t i = 0; i < t; i++)
        for (int64_t c = 0; c < hs; c++)
            dst[i * rs + c] = acc ? dst[i * rs + c] + src[i * hs + c] : src[i * hs + c];
}

static bool strided(const ct__attn_p *p)
{
    return p->in_rs != p->hs || p->out_rs != p->hs;
}

int ct__cpu_attn_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                     float *lse)
{
    int64_t T = p->t, hs = p->hs, th = T * hs;
    int rc = 0;
#pragma omp parallel if (p->bh * T * T * hs > 32768)
    {
        /* 4 rows of scores, K^T, and contiguous q, k, v, o where the slices are strided */
        size_t n = (size_t)(4 * T + th + (strided(p) ? 4 * th : 0));
        float *s = malloc(n * sizeof(float)), *c = s + 4 * T + th;
        if (!s) {
#pragma omp atomic write
            rc = CT_ENOMEM;
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < p->bh; b++) {
            int64_t in = ct__attn_slice(p, b, p->in_rs), out = ct__attn_slice(p, b, p->out_rs);
            if (!s)
                continue;
            if (!strided(p)) {
                attn_fwd_slice(p, b, q + in, k + in, v + in, o + out, lse + b * T, s, s + 4 * T);
                continue;
            }
            gather(q + in, p->in_rs, T, hs, c);
            gather(k + in, p->in_rs, T, hs, c + th);
            gather(v + in, p->in_rs, T, hs, c + 2 * th);
            attn_fwd_slice(p, b, c, c + th, c + 2 * th, c + 3 * th, lse + b * T, s, s + 4 * T);
            scatter(c + 3 * th, T, hs, o + out, p->out_rs, false);
        }
        free(s);
    }
    return rc < 0 ? ct__error(rc, "attention: out of memory for a row of scores") : 0;
}

/* With P = exp(scale q k^T - lse) and M the dropout factors: dv_j += sum_i P_ij M_ij do_i;
 * dP_ij = M_ij do_i . v_j; dS_ij = P_ij (dP_ij - delta_i), delta_i = do_i . o_i;
 * dq_i += scale sum_j dS_ij k_j; dk_j += scale sum_i dS_ij q_i.
 * One slice; sc (3 BWD_ROWS T + BWD_ROWS hs) and kvt (2 hs T) are the thread's scratch. */
CT_CLONES static void attn_bwd_slice(const ct__attn_p *p, int64_t b, const float *restrict qb,
                                     const float *restrict kb, const float *restrict vb,
                                     const float *restrict ob, const float *restrict lseb,
                                     const float *restrict gb, float *restrict deltab,
                                     float *restrict dqb, float *restrict dkb, float *restrict dvb,
                                     float *restrict sc, float *restrict kvt)
{
    int64_t T = p->t, hs = p->hs;
    float *kt = kvt, *vt = kvt + hs * T;
    transpose(kb, T, hs, kt);
    transpose(vb, T, hs, vt);
    for (int64_t i = 0; i < T; i++)
        deltab[i] = dot(gb + i * hs, ob + i * hs, hs);
    /* BWD_ROWS query rows at a time: each key's dk_j and dv_j rows are loaded and stored once
     * for all of them; ds and wv are 0 past a row's last key, so the loops are uniform */
    for (int64_t i0 = 0; i0 < T; i0 += BWD_ROWS) {
        int rows = T - i0 < BWD_ROWS ? (int)(T - i0) : BWD_ROWS;
        int64_t keys = p->causal ? i0 + rows : T;
        float *ds = sc, *wv = sc + BWD_ROWS * T, *dp = sc + 2 * BWD_ROWS * T;
        if (rows == BWD_ROWS) { /* every row's products with the block's keys at once */
            rows4_products(qb + i0 * hs, kt, T, hs, keys, p->scale, ds, T);
            rows4_products(gb + i0 * hs, vt, T, hs, keys, 1.0f, dp, T);
        }
        for (int r = 0; r < rows; r++) {
            int64_t i = i0 + r, seen = p->causal ? i + 1 : T;
            float l = lseb[i], di = deltab[i], *dsr = ds + r * T, *wvr = wv + r * T;
            float *dpr = dp + r * T;
            if (rows < BWD_ROWS) {
                row_products(qb + i * hs, kt, T, hs, seen, p->scale, dsr);
                row_products(gb + i * hs, vt, T, hs, seen, 1.0f, dpr);
            }
            for (int64_t j = 0; j < seen; j++)
                dsr[j] = ct__expf_unclamped(dsr[j] - l); /* P_ij */
            if (p->dropout <= 0.0f) /* keep() is 1: the same values, in a loop that vectorises */
                for (int64_t j = 0; j < seen; j++) {
                    wvr[j] = dsr[j];
                    dsr[j] = dsr[j] * (dpr[j] - di) * p->scale;
                }
            else
                for (int64_t j = 0; j < seen; j++) {
                    float mij = keep(p, b, i, j);
                    wvr[j] = dsr[j] * mij;
                    dsr[j] = dsr[j] * (mij * dpr[j] - di) * p->scale;
                }
            for (int64_t j = seen; j < keys; j++)
                dsr[j] = wvr[j] = 0.0f;
        }
        for (int r = rows; r < BWD_ROWS; r++) /* a short last block: rows of zeros */
            for (int64_t j = 0; j < keys; j++)
                ds[r * T + j] = wv[r * T + j] = 0.0f;
        const float *q0 = qb + i0 * hs, *g0 = gb + i0 * hs;
        float *dq = sc + 3 * BWD_ROWS * T; /* (BWD_ROWS, hs): the block's dq sums */
        for (int64_t c = 0; c < BWD_ROWS * hs; c++)
            dq[c] = 0.0f;
        for (int64_t c = 0; hs % 8 == 0 && c < hs; c += 8) {
            /* 8 columns: the block's rows of do and q in registers, each key's dv and dk
             * loaded and stored once; then dq's 4 rows in registers over the keys. The same
             * sums in the same order as the loop below. */
            v8f g[BWD_ROWS], q[BWD_ROWS], dqa[BWD_ROWS];
            for (int r = 0; r < BWD_ROWS; r++) {
                g[r] = ld8((r < rows ? g0 + r * hs : g0) + c);
                q[r] = ld8((r < rows ? q0 + r * hs : q0) + c);
                dqa[r] = (v8f){0};
            }
            for (int64_t j = 0; j < keys; j++) {
                v8f dv = ld8(dvb + j * hs + c), dk = ld8(dkb + j * hs + c);
                for (int r = 0; r < BWD_ROWS; r++) {
                    dv += wv[r * T + j] * g[r];
                    dk += ds[r * T + j] * q[r];
                }
                st8(dvb + j * hs + c, dv);
                st8(dkb + j * hs + c, dk);
            }
            for (int64_t j = 0; j < keys; j++) {
                v8f kj = ld8(kb + j * hs + c);
                for (int r = 0; r < BWD_ROWS; r++)
                    dqa[r] += ds[r * T + j] * kj;
            }
            for (int r = 0; r < BWD_ROWS; r++)
                st8(dq + r * hs + c, dqa[r]);
        }
        for (int64_t j = 0; hs % 8 != 0 && j < keys; j++) {
            float *dvj = dvb + j * hs, *dkj = dkb + j * hs;
            const float *kj = kb + j * hs;
            for (int r = 0; r < BWD_ROWS; r++) {
                float w = wv[r * T + j], d = ds[r * T + j];
                const float *gr = r < rows ? g0 + r * hs : g0, *qr = r < rows ? q0 + r * hs : q0;
                for (int64_t c = 0; c < hs; c++) {
                    dvj[c] += w * gr[c];
                    dkj[c] += d * qr[c];
                    dq[r * hs + c] += d * kj[c];
                }
            }
        }
        for (int r = 0; r < rows; r++)
            for (int64_t c = 0; c < hs; c++)
                dqb[(i0 + r) * hs + c] += dq[r * hs + c];
    }
}

int ct__cpu_attn_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                     const float *o, const float *lse, const float *dout, float *delta, float *dq,
                     float *dk, float *dv)
{
    int64_t T = p->t, hs = p->hs, th = T * hs;
    int rc = 0;
#pragma omp parallel if (p->bh * T * T * hs > 32768)
    {
        /* rows, K^T and V^T, and where the slices are strided contiguous q, k, v, o, dout and
         * the gradients dq, dk, dv */
        size_t rows_scratch = (size_t)(3 * BWD_ROWS * T + BWD_ROWS * hs);
        size_t n = rows_scratch + (size_t)(2 * th + (strided(p) ? 8 * th : 0));
        float *s = malloc(n * sizeof(float)), *c = s + rows_scratch + 2 * th;
        if (!s) {
#pragma omp atomic write
            rc = CT_ENOMEM;
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < p->bh; b++) {
            int64_t in = ct__attn_slice(p, b, p->in_rs), out = ct__attn_slice(p, b, p->out_rs);
            if (!s)
                continue;
            if (!strided(p)) {
                attn_bwd_slice(p, b, q + in, k + in, v + in, o + out, lse + b * T, dout + out,
                               delta + b * T, dq + in, dk + in, dv + in, s, s + rows_scratch);
                continue;
            }
            const float *from[5] = {q + in, k + in, v + in, o + out, dout + out};
            for (int i = 0; i < 5; i++)
                gather(from[i], i < 3 ? p->in_rs : p->out_rs, T, hs, c + i * th);
            memset(c + 5 * th, 0, (size_t)(3 * th) * sizeof(float));
            attn_bwd_slice(p, b, c, c + th, c + 2 * th, c + 3 * th, lse + b * T, c + 4 * th,
                           delta + b * T, c + 5 * th, c + 6 * th, c + 7 * th, s, s + rows_scratch);
            float *to[3] = {dq + in, dk + in, dv + in};
            for (int i = 0; i < 3; i++)
                scatter(c + (5 + i) * th, T, hs, to[i], p->in_rs, true);
        }
        free(s);
    }
    return rc < 0 ? ct__error(rc, "attention: out of memory for the backward's scratch") : 0;
}
