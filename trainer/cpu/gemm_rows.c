/* trainer/cpu/gemm_rows.c — a Linear's forward for a few rows (n <= 32, a pipeline's
 * micro-batch) on the calling thread, AVX-512F, reading the weight once, in place.
 *
 * dnnl.c sends y = x w^T + b here (its rows_here()) on one thread where oneDNN has AVX-512 and
 * the product is past gemm.c's small ones. For 32 rows oneDNN's inner product copies (packs) the
 * whole weight on every call, which 32 rows do not pay for: x (32, 1024) by w (1024, 1024) took
 * 0.82 ms in oneDNN (82 GFLOP/s; 256 rows ran at 150) and 0.49-0.57 ms here (8 weights in turn,
 * 1 thread, CPU time under load; the 256-row product took 3.5 ms, 0.44 per 32 rows).
 *
 * x is transposed into a thread's buffer, xt (ic, 32), zero past n; 12 outputs j at once, each
 * a row of w read along k (12 streams the hardware prefetches), times the 32 rows: 24
 * accumulators of 16 lanes (fwd_block). Sums run in k order, one FMA per term, so results are
 * not oneDNN's bits. Not here: the data gradient dx = dy w. The same scheme over 6-row groups
 * and 64-column strips of w (rows of w 4 KB apart, which neither the prefetchers follow nor L2's
 * sets hold) ran at 1.4-2.8 ms against oneDNN's 0.6-0.9, so that stays in oneDNN. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

#include "trainer/cpu/cpu.h"

#define AVX512 __attribute__((target("avx512f")))

enum { ROWS = CT__CPU_ROWS_MAX, FJ = 12 };

bool ct__cpu_rows_runs(void)
{
    return __builtin_cpu_supports("avx512f");
}

/* This thread's buffer for the transposed rows, 64-byte aligned, kept between calls. */
static float *rows_buffer(int64_t floats)
{
    static __thread float *buf;
    static __thread int64_t cap;
    if (cap < floats) {
        free(buf);
        buf = aligned_alloc(64, (size_t)((floats + 15) / 16) * 64);
        cap = buf ? floats : 0;
    }
    return buf;
}

/* t (k, ROWS) = x (n, k) transposed; rows past n zero */
static void transpose_rows(int64_t n, int64_t k, const float *x, float *t)
{
    if (n < ROWS)
        memset(t, 0, (size_t)(k * ROWS) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        for (int64_t p = 0; p < k; p++)
            t[p * ROWS + i] = x[i * k + p];
}

/* y[:, j0 .. j0+mr) = x w[j0 .. j0+mr)^T (+ b): xt (ic, 32), w (oc, ic) */
static AVX512 void fwd_block(int64_t n, int64_t ic, int64_t oc, int64_t j0, int mr, const float *xt,
                             const float *w, const float *b, float *y)
{
    __m512 lo[FJ], hi[FJ];
    const float *wr[FJ];
    for (int r = 0; r < FJ; r++) {
        lo[r] = _mm512_setzero_ps();
        hi[r] = _mm512_setzero_ps();
        wr[r] = w + (j0 + (r < mr ? r : mr - 1)) * ic; /* past mr: computed, not stored */
    }
    for (int64_t p = 0; p < ic; p++) {
        __m512 x0 = _mm512_load_ps(xt + p * ROWS), x1 = _mm512_load_ps(xt + p * ROWS + 16);
#pragma GCC unroll 12
        for (int r = 0; r < FJ; r++) {
            __m512 s = _mm512_set1_ps(wr[r][p]);
            lo[r] = _mm512_fmadd_ps(s, x0, lo[r]);
            hi[r] = _mm512_fmadd_ps(s, x1, hi[r]);
        }
    }
    float tile[FJ][ROWS];
    for (int r = 0; r < mr; r++) {
        _mm512_storeu_ps(tile[r], lo[r]);
        _mm512_storeu_ps(tile[r] + 16, hi[r]);
    }
    for (int64_t i = 0; i < n; i++)
        for (int r = 0; r < mr; r++)
            y[i * oc + j0 + r] = b ? tile[r][i] + b[j0 + r] : tile[r][i];
}

int ct__cpu_rows_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                     const float *b, float *y)
{
    float *xt = rows_buffer(ic * ROWS);
    if (n < 1 || n > ROWS || !xt)
        return ct__error(n < 1 || n > ROWS ? CT_EINVAL : CT_ENOMEM,
                         "rows product: %lld rows (want 1..%d), or out of memory", (long long)n,
                         ROWS);
    transpose_rows(n, ic, x, xt);
    for (int64_t j0 = 0; j0 < oc; j0 += FJ)
        fwd_block(n, ic, oc, j0, oc - j0 < FJ ? (int)(oc - j0) : FJ, xt, w, b, y);
    return 0;
}
