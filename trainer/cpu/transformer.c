/* trainer/cpu/transformer.c — CPU kernels of the transformer ops oneDNN has no primitive for
 * here: layer norm over the last axis, GELU (exact and tanh; vectorised through vecmath.h's
 * exp and normal CDF), embedding lookup and its scatter-add. Plain C loops, OpenMP over rows (or
 * columns) when the work is large; every sum runs in a fixed order, so results are the same
 * bits for any thread count.
 *
 * Shapes: x, y, dy (rows, d); w, b, dw, db (d); mean, rstd (rows); idx (n) i64; table (vocab, d).
 * Backward kernels ADD into dw, db and dtable (the caller zeroes them when they hold nothing);
 * dx is written, or added to when acc. Not here: the differentiable ops (trainer/nn). */
#include <math.h>
#include <string.h>

#include "common/common.h"
#include "trainer/cpu/cpu.h"
#include "trainer/cpu/vecmath.h"

#define PAR_MIN 32768

/* Layer norm runs a block of rows (or of columns) at a time through ISA clones (vecmath.h). On the
 * GPT of bench/gpt_train (2048 rows of 128, 1 thread, cold operands) the AVX2 clones took the
 * forward from 0.27 to 0.22 ms and the backward from 0.36 to 0.29 ms against the baseline
 * clone's SSE loops (they are near memory speed). A row's sums run in 8 partial sums
 * (vecmath.h's) whatever the clone's vector width (FMA contraction in the AVX2 and AVX-512
 * clones still moves last bits against the baseline one). */
#define LN_ROWS 64 /* rows a thread takes at a time */

/* y = (x - mean) rstd w + b for rows [r0, r1) (no w: 1; no b: 0) */
CT_CLONES static void layernorm_fwd_rows(int64_t r0, int64_t r1, int64_t d, float eps,
                                         const float *restrict x, const float *restrict w,
                                         const float *restrict b, float *restrict y,
                                         float *restrict mean, float *restrict rstd)
{
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float m = ct__sum8(xr, d) / (float)d;
        for (int64_t i = 0; i < d; i++)
            yr[i] = xr[i] - m;
        float rs = 1.0f / sqrtf(ct__dot8(yr, yr, d) / (float)d + eps);
        for (int64_t i = 0; i < d; i++)
            yr[i] = yr[i] * rs * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
        mean[r] = m;
        rstd[r] = rs;
    }
}

int ct__cpu_layernorm_fwd(int64_t rows, int64_t d, float eps, const float *x, const float *w,
                          const float *b, float *y, float *mean, float *rstd)
{
    int64_t blocks = (rows + LN_ROWS - 1) / LN_ROWS;
#pragma omp parallel for schedule(static) if (rows * d > PAR_MIN)
    for (int64_t k = 0; k < blocks; k++)
        layernorm_fwd_rows(k * LN_ROWS, rows < (k + 1) * LN_ROWS ? rows : (k + 1) * LN_ROWS, d, eps,
                           x, w, b, y, mean, rstd);
    return 0;
}

/* dxhat = dy w; dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)); dw += dy xhat;
 * db += dy. dx per row in parallel; dw and db per column, each summing its rows in order. */
#define LN_COLS 64 /* layer norm's weight gradients: columns a block sums over the rows */

/* 8 floats at any alignment (GCC's vector extension: 2 SSE or 1 AVX2 register by clone) */
typedef float v8f __attribute__((vector_size(32), aligned(4), may_alias));

/* the lanes of *s added pairwise, in vecmath.h's ct__dot8 order */
static inline __attribute__((always_inline)) float lanes_sum(const v8f *s)
{
    return ct__sum_lanes8((const float *)s);
}

/* dx of rows [r0, r1), written or added to (acc). A row's two sums in 8 lanes, as vecmath.h's
 * (a loop of 8 partial sums in an array stayed scalar here) */
CT_CLONES static void layernorm_bwd_rows(int64_t r0, int64_t r1, int64_t d, const float *restrict x,
                                         const float *restrict w, const float *restrict mean,
                                         const float *restrict rstd, const float *restrict dy,
                                         float *restrict dx, bool acc)
{
    int64_t d8 = d & ~(int64_t)7;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * d, *gr = dy + r * d;
        float *dr = dx + r * d;
        float m = mean[r], rs = rstd[r];
        v8f s1 = {0}, s2 = {0}; /* sums of g = dy w and of g (x - m) */
        for (int64_t j = 0; j < d8; j += 8) {
            v8f g = *(const v8f *)(gr + j);
            if (w)
                g *= *(const v8f *)(w + j);
            s1 += g;
            s2 += g * (*(const v8f *)(xr + j) - m);
        }
        for (int64_t j = d8; j < d; j++) {
            float g = gr[j] * (w ? w[j] : 1.0f);
            s1[j - d8] += g;
            s2[j - d8] += g * (xr[j] - m);
        }
        float a1 = lanes_sum(&s1) / (float)d, c2 = rs * rs * lanes_sum(&s2) / (float)d;
        for (int64_t i = 0; i < d; i++) {
            float g = gr[i] * (w ? w[i] : 1.0f);
            float v = rs * (g - a1 - (xr[i] - m) * c2);
            dr[i] = acc ? dr[i] + v : v;
        }
    }
}

/* dw += sum over rows of dy xhat, db += sum of dy, for columns [i0, i0 + n), n <= LN_COLS:
 * each column sums its rows in order (the bits of a plain column loop, for any thread count),
 * walking the rows forward: a column at a time strode through dy and x, a cache line per row
 * for one float of it */
CT_CLONES static void layernorm_bwd_cols(int64_t rows, int64_t d, int64_t i0, int64_t n,
                                         const float *restrict x, const float *restrict mean,
                                         const float *restrict rstd, const float *restrict dy,
                                         float *restrict dw, float *restrict db)
{
    float sw[LN_COLS] = {0}, sb[LN_COLS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = dy + r * d + i0, *xr = x + r * d + i0;
        float m = mean[r], rs = rstd[r];
        for (int64_t k = 0; k < n; k++) {
            sw[k] += gr[k] * (xr[k] - m) * rs;
            sb[k] += gr[k];
        }
    }
    for (int64_t k = 0; k < n; k++) {
        if (dw)
            dw[i0 + k] += sw[k];
        if (db)
            db[i0 + k] += sb[k];
    }
}

int ct__cpu_layernorm_bwd(int64_t rows, int64_t d, const float *x, const float *w,
                          const float *mean, const float *rstd, const float *dy, float *dx,
                          bool acc, float *dw, float *db)
{
    if (dx) {
        int64_t blocks = (rows + LN_ROWS - 1) / LN_ROWS;
#pragma omp parallel for schedule(static) if (rows * d > PAR_MIN)
        for (int64_t k = 0; k < blocks; k++)
            layernorm_bwd_rows(k * LN_ROWS, rows < (k + 1) * LN_ROWS ? rows : (k + 1) * LN_ROWS, d,
                               x, w, mean, rstd, dy, dx, acc);
    }
    if (dw || db) {
#pragma omp parallel for schedule(static) if (rows * d > PAR_MIN)
        for (int64_t i0 = 0; i0 < d; i0 += LN_COLS)
            layernorm_bwd_cols(rows, d, i0, d - i0 < LN_COLS ? d - i0 : LN_COLS, x, mean, rstd, dy,
                               dw, db);
    }
    return 0;
}

#define SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_C 0.044715f
#define GELU_CHUNK 8192 /* elements a thread takes at a time */

/* tanh(z) = 1 - 2 / (e^2z + 1): +-1 where e^2z saturates, absolute error about 1e-7 */
static inline __attribute__((always_inline)) float tanh_v(float z)
{
    return 1.0f - 2.0f / (ct__expf(2.0f * z) + 1.0f);
}

CT_CLONES static void gelu_fwd_span(bool tanh_approx, int64_t n, const float *restrict x,
                                    float *restrict y)
{
    if (tanh_approx) {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + tanh_v(SQRT_2_OVER_PI * (v + GELU_C * v * v * v)));
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * ct__normcdf(x[i]);
    }
}

/* d/dx of exact GELU: Phi(x) + x phi(x); of the tanh form: 0.5 (1 + t) + 0.5 x (1 - t^2) u'
 * with u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline __attribute__((always_inline)) float gelu_grad(bool tanh_approx, float v)
{
    if (tanh_approx) {
        float t = tanh_v(SQRT_2_OVER_PI * (v + GELU_C * v * v * v));
        return 0.5f * (1.0f + t) +
               0.5f * v * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
    }
    float pdf, cdf = ct__normcdf_pdf(v, &pdf);
    return cdf + v * pdf;
}

/* one branch-free loop per (form, accumulate): each vectorises */
static inline __attribute__((always_inline)) void
gelu_bwd_loop(const bool tanh_approx, const bool acc, int64_t n, const float *restrict x,
              const float *restrict dy, float *restrict dx)
{
    for (int64_t i = 0; i < n; i++) {
        float d = dy[i] * gelu_grad(tanh_approx, x[i]);
        dx[i] = acc ? dx[i] + d : d;
    }
}

CT_CLONES static void gelu_bwd_span(bool tanh_approx, int64_t n, const float *restrict x,
                                    const float *restrict dy, float *restrict dx, bool acc)
{
    if (tanh_approx)
        acc ? gelu_bwd_loop(true, true, n, x, dy, dx) : gelu_bwd_loop(true, false, n, x, dy, dx);
    else
        acc ? gelu_bwd_loop(false, true, n, x, dy, dx) : gelu_bwd_loop(false, false, n, x, dy, dx);
}

int ct__cpu_gelu_fwd(bool tanh_approx, int64_t n, const float *x, float *y)
{
    int64_t chunks = (n + GELU_CHUNK - 1) / GELU_CHUNK;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t at = c * GELU_CHUNK, len = n - at < GELU_CHUNK ? n - at : GELU_CHUNK;
        gelu_fwd_span(tanh_approx, len, x + at, y + at);
    }
    return 0;
}

int ct__cpu_gelu_bwd(bool tanh_approx, int64_t n, const float *x, const float *dy, float *dx,
                     bool acc)
{
    int64_t chunks = (n + GELU_CHUNK - 1) / GELU_CHUNK;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t at = c * GELU_CHUNK, len = n - at < GELU_CHUNK ? n - at : GELU_CHUNK;
        gelu_bwd_span(tanh_approx, len, x + at, dy + at, dx + at, acc);
    }
    return 0;
}

int ct__cpu_f32_to_i64(int64_t n, const float *x, int64_t *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = (int64_t)lrintf(x[i]);
    return 0;
}

/* The first index outside [0, vocab), or -1. */
static int64_t bad_index(int64_t n, int64_t vocab, const int64_t *idx)
{
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= vocab)
            return i;
    return -1;
}

int ct__cpu_embedding_fwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                          const float *table, float *y)
{
    int64_t bad = bad_index(n, vocab, idx);
    if (bad >= 0)
        return ct__error(CT_EINVAL, "embedding: index %lld at position %lld is outside [0, %lld)",
                         (long long)idx[bad], (long long)bad, (long long)vocab);
#pragma omp parallel for schedule(static) if (n * d > PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        memcpy(y + i * d, table + idx[i] * d, (size_t)d * sizeof(float));
    return 0;
}

/* dtable[idx[i]] += dy[i] for every i whose index is not padding_idx (-1: none). Rows in
 * order, so a token seen twice sums its gradients the same way on every run; parallel over
 * column blocks, which no two threads share. */
int ct__cpu_embedding_bwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                          int64_t padding_idx, const float *dy, float *dtable)
{
    int64_t bad = bad_index(n, vocab, idx);
    if (bad >= 0)
        return ct__error(CT_EINVAL, "embedding: index %lld at position %lld is outside [0, %lld)",
                         (long long)idx[bad], (long long)bad, (long long)vocab);
    int64_t blocks = (d + 63) / 64;
#pragma omp parallel for schedule(static) if (n * d > PAR_MIN)
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t c0 = blk * 64, c1 = c0 + 64 < d ? c0 + 64 : d;
        for (int64_t i = 0; i < n; i++) {
            if (idx[i] == padding_idx)
                continue;
            float *t = dtable + idx[i] * d;
            const float *g = dy + i * d;
            for (int64_t c = c0; c < c1; c++)
                t[c] += g[c];
        }
    }
    return 0;
}

/* Rows of the innermost axis, each a plain strided loop (a memcpy-like one when both sides
 * are contiguous there); the outer index is decomposed per row, so rows run in parallel. */
int ct__cpu_strided_copy(const ct__strided_p *p, const float *src, float *dst, bool acc)
{
    int nd = p->ndim;
    if (nd < 1 || nd > CT_MAX_DIMS)
        return ct__error(CT_EINVAL, "strided_copy: %d dims", nd);
    int64_t inner = p->shape[nd - 1], rows = 1;
    for (int i = 0; i < nd - 1; i++)
        rows *= p->shape[i];
    int64_t ss = p->sstride[nd - 1], ds = p->dstride[nd - 1];
#pragma omp parallel for schedule(static) if (rows * inner > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t so = 0, dof = 0, rem = r;
        for (int i = nd - 2; i >= 0; i--) {
            int64_t k = rem % p->shape[i];
            rem /= p->shape[i];
            so += k * p->sstride[i];
            dof += k * p->dstride[i];
        }
        const float *s = src + so;
        float *d = dst + dof;
        if (ss == 1 && ds == 1) {
            if (acc) {
#pragma omp simd
                for (int64_t j = 0; j < inner; j++)
                    d[j] += s[j];
            } else {
                memcpy(d, s, (size_t)inner * sizeof(float));
            }
        } else {
            for (int64_t j = 0; j < inner; j++)
                d[j * ds] = acc ? d[j * ds] + s[j * ss] : s[j * ss];
        }
    }
    return 0;
}

int ct__cpu_softmax_causal_fwd(int64_t rows, int64_t t, const float *x, float *y)
{
#pragma omp parallel for schedule(static) if (rows * t > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * t;
        float *yr = y + r * t;
        int64_t seen = r % t + 1;
        float m = xr[0], s = 0;
        for (int64_t j = 1; j < seen; j++)
            m = xr[j] > m ? xr[j] : m;
        for (int64_t j = 0; j < seen; j++) {
            yr[j] = ct__expf_unclamped(xr[j] - m);
            s += yr[j];
        }
        float inv = 1.0f / s;
        for (int64_t j = 0; j < seen; j++)
            yr[j] *= inv;
        for (int64_t j = seen; j < t; j++)
            yr[j] = 0.0f;
    }
    return 0;
}
