/* trainer/cpu/gemm.c — f32 matrix products in AVX2+FMA C, on the calling thread.
 *
 * dnnl.c sends a Linear's or a matmul's product here (its gemm_here()) when it is small, or when
 * it runs on one thread and oneDNN's kernels are AVX2 too:
 *   - small (at most 2^20 multiply-adds): the products of a small MLP at batch 64 (40-520 k
 *     multiply-adds) ran about 10% slower per multiply-add in oneDNN's inner product than at
 *     batch 256, so gradient accumulation lost that much. In the tiny MLP's training loop (1
 *     thread, AVX2) these kernels raised samples/s from about 730k to 790k.
 *   - one thread: the GPT of bench/gpt_train (2048 tokens, widths 128-512, 1 thread, AVX2):
 *     oneDNN's inner product computed weight gradients (dy^T x, k = 2048) at 58-80 GFLOP/s, 58-62
 *     for the MLP's 512-wide layer; these kernels at 78-84. Forward and backward-data ran at
 *     par (84-93 both; this CPU's peak is about 90).
 * The kernels need only AVX2 and FMA, so ONEDNN_MAX_CPU_ISA=AVX2 (an AVX2-only machine's
 * stand-in) runs the same code as the AVX2-only machine.
 *
 * c (m,n) = a (m,k) @ b (k,n), the way BLIS-style GEMMs do it:
 *   - k is cut into blocks of KC = 256; each block's product is added into c. A block's b panel
 *     (256 x 16 floats, 16 KB) then stays in L1 while a block of 96 rows of a (in L2) passes
 *     it; then the next panel (kernel()'s comment).
 *   - b is packed into panels of 16 columns, each (k,16) contiguous and zero-padded past n. A
 *     row of b is then one cache line, read in order. Unpacked (a row stride of 512 bytes at
 *     n = 128, so a panel falls into 8 of L1's 64 sets) 64x64x128 ran at 72-87 GFLOP/s, packed
 *     at 98-100. A b stored transposed (a Linear forward, x w^T) is transposed into the panels
 *     with 8x8 register transposes; a kernel of dot products along k ran at 40-65.
 *   - a 6x16 block of c is held in 12 ymm accumulators and a is read by broadcast. An a stored
 *     transposed (a weight gradient, dy^T x) is packed into panels of 6 rows, (k,6) each (read
 *     in place, each k a new cache line, weight gradients ran at 44-56 GFLOP/s).
 *     The bias gradient (dy's column sums) is summed from the same read of dy
 *     (ct__cpu_gemm_wgrad): as a pass of its own it took about 1% of a GPT replica's step.
 *     Rows past m are clamped to the last row or zero (computed, not stored); columns past n
 *     are masked on store. */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

#include "trainer/cpu/cpu.h"

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define INLINE inline __attribute__((always_inline))

enum { MR = 6, NR = 16, KC = 256, MC = 96 };

bool ct__cpu_gemm_runs(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* A lane mask with the first `lanes` (0..8) lanes set. */
static AVX2_FMA INLINE __m256i lane_mask(int64_t lanes)
{
    static const int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
    return _mm256_loadu_si256((const __m256i *)(ones_then_zeros + 8 - lanes));
}

/* ---- packing b into panels ---- */

/* The packing buffer of this thread, 64-byte aligned (kept between calls, as autograd's
 * scratch is, and freed when the thread ends). */
static __thread float *pack_buf;
static __thread int64_t pack_cap;

static void pack_release(void)
{
    free(pack_buf);
    pack_buf = NULL;
    pack_cap = 0;
}

static float *pack_buffer(int64_t floats)
{
    if (pack_cap < floats) {
        int64_t lines = (floats + 15) / 16; /* aligned_alloc takes whole multiples of 64 bytes */
        free(pack_buf);
        pack_buf = NULL;
        pack_cap = 0;
        if (ct__at_thread_exit(pack_release) < 0)
            return NULL;
        pack_buf = aligned_alloc(64, (size_t)lines * 64);
        pack_cap = pack_buf ? lines * 16 : 0;
    }
    return pack_buf;
}

/* out (8x8, row stride lo) = in (8x8, row stride li) transposed. */
static AVX2_FMA INLINE void transpose8(const float *in, int64_t li, float *out, int64_t lo)
{
    __m256 r0 = _mm256_loadu_ps(in), r1 = _mm256_loadu_ps(in + li),
           r2 = _mm256_loadu_ps(in + 2 * li), r3 = _mm256_loadu_ps(in + 3 * li),
           r4 = _mm256_loadu_ps(in + 4 * li), r5 = _mm256_loadu_ps(in + 5 * li),
           r6 = _mm256_loadu_ps(in + 6 * li), r7 = _mm256_loadu_ps(in + 7 * li);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
           t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
           t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    r0 = _mm256_shuffle_ps(t0, t2, 0x44), r1 = _mm256_shuffle_ps(t0, t2, 0xee);
    r2 = _mm256_shuffle_ps(t1, t3, 0x44), r3 = _mm256_shuffle_ps(t1, t3, 0xee);
    r4 = _mm256_shuffle_ps(t4, t6, 0x44), r5 = _mm256_shuffle_ps(t4, t6, 0xee);
    r6 = _mm256_shuffle_ps(t5, t7, 0x44), r7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_storeu_ps(out, _mm256_permute2f128_ps(r0, r4, 0x20));
    _mm256_storeu_ps(out + lo, _mm256_permute2f128_ps(r1, r5, 0x20));
    _mm256_storeu_ps(out + 2 * lo, _mm256_permute2f128_ps(r2, r6, 0x20));
    _mm256_storeu_ps(out + 3 * lo, _mm256_permute2f128_ps(r3, r7, 0x20));
    _mm256_storeu_ps(out + 4 * lo, _mm256_permute2f128_ps(r0, r4, 0x31));
    _mm256_storeu_ps(out + 5 * lo, _mm256_permute2f128_ps(r1, r5, 0x31));
    _mm256_storeu_ps(out + 6 * lo, _mm256_permute2f128_ps(r2, r6, 0x31));
    _mm256_storeu_ps(out + 7 * lo, _mm256_permute2f128_ps(r3, r7, 0x31));
}

/* Panels of op(b) (k,n): panel q holds columns [16q, 16q+16) as (k,16), zero past n. b is
 * stored (k,n), or (n,k) when tb. */
static AVX2_FMA void pack_panels(int64_t k, int64_t n, const float *b, int64_t ldb, bool tb,
                                 float *out)
{
    int64_t panels = (n + NR - 1) / NR;
    if (!tb) {
        for (int64_t q = 0; q < panels; q++) {
            int64_t j0 = q * NR, w = n - j0 < NR ? n - j0 : NR;
            float *o = out + q * k * NR;
            if (w == NR) {
                for (int64_t p = 0; p < k; p++) {
                    _mm256_store_ps(o + p * NR, _mm256_loadu_ps(b + p * ldb + j0));
                    _mm256_store_ps(o + p * NR + 8, _mm256_loadu_ps(b + p * ldb + j0 + 8));
                }
            } else {
                __m256i m0 = lane_mask(w < 8 ? w : 8), m1 = lane_mask(w > 8 ? w - 8 : 0);
                for (int64_t p = 0; p < k; p++) {
                    _mm256_store_ps(o + p * NR, _mm256_maskload_ps(b + p * ldb + j0, m0));
                    _mm256_store_ps(o + p * NR + 8, _mm256_maskload_ps(b + p * ldb + j0 + 8, m1));
                }
            }
        }
        return;
    }
    /* column j of op(b) is b's row j: 8x8 blocks transposed, the edges one by one */
    int64_t n8 = n & ~(int64_t)7, k8 = k & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8)
        for (int64_t p = 0; p < k8; p += 8)
            transpose8(b + j * ldb + p, ldb, out + (j / NR) * k * NR + p * NR + j % NR, NR);
    for (int64_t j = 0; j < panels * NR; j++)
        for (int64_t p = j < n8 ? k8 : 0; p < k; p++)
            out[(j / NR) * k * NR + p * NR + j % NR] = j < n ? b[j * ldb + p] : 0.0f;
}

/* ---- the kernel ---- */

/* c's rows [i0, i0+mr) x one panel's first w columns (w = NR: `full`): ar[r] + p * a_p is
 * a (i0+r, p); bp the panel. */
static AVX2_FMA INLINE void block(int64_t k, const float *const ar[MR], int64_t a_p,
                                  const float *bp, float *c, int64_t ldc, int mr, bool full,
                                  int64_t w, bool acc, const float *bias)
{
    __m256 s[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
        s[r][0] = s[r][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        __m256 b0 = _mm256_load_ps(bp + p * NR), b1 = _mm256_load_ps(bp + p * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 t = _mm256_broadcast_ss(ar[r] + p * a_p);
            s[r][0] = _mm256_fmadd_ps(t, b0, s[r][0]);
            s[r][1] = _mm256_fmadd_ps(t, b1, s[r][1]);
        }
    }
    __m256i m0 = lane_mask(w < 8 ? w : 8), m1 = lane_mask(w > 8 ? w - 8 : 0);
    __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
    if (bias) {
        bias0 = full ? _mm256_loadu_ps(bias) : _mm256_maskload_ps(bias, m0);
        bias1 = full ? _mm256_loadu_ps(bias + 8) : _mm256_maskload_ps(bias + 8, m1);
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        if (r >= mr)
            break;
        float *cr = c + r * ldc;
        __m256 v0 = _mm256_add_ps(s[r][0], bias0), v1 = _mm256_add_ps(s[r][1], bias1);
        if (full) {
            if (acc) {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8));
            }
            _mm256_storeu_ps(cr, v0);
            _mm256_storeu_ps(cr + 8, v1);
        } else {
            if (acc) {
                v0 = _mm256_add_ps(v0, _mm256_maskload_ps(cr, m0));
                v1 = _mm256_add_ps(v1, _mm256_maskload_ps(cr + 8, m1));
            }
            _mm256_maskstore_ps(cr, m0, v0);
            _mm256_maskstore_ps(cr + 8, m1, v1);
        }
    }
}

/* Which terms of this call (its [p0, p0 + k) of k_all) the tile of rows [i0, i0 + mr) x the
 * panel at column j0 adds, [*from, *to) relative to p0, and whether it adds to c (*acc: when
 * accumulating or an earlier call wrote it). Without a band, all of them; with one, only those
 * its rows' band holds, and none of a panel past every row's columns. False: nothing to do in
 * this call. A tile with no term at all is written as 0 by the first call. */
static INLINE bool tile_terms(const ct__gemm_band *band, int64_t i0, int mr, int64_t j0,
                              int64_t k_all, int64_t p0, int64_t k, bool accumulate, int64_t *from,
                              int64_t *to, bool *acc)
{
    int64_t lo = 0, hi = k_all, last = i0 + mr - 1; /* the tile's terms of the whole sum */
    if (band) {
        if (j0 >= last + band->n_hi)
            return false;
        lo = i0 + band->k_lo > 0 ? i0 + band->k_lo : 0;
        hi = last + band->k_hi < k_all ? last + band->k_hi : k_all;
    }
    *acc = accumulate || p0 > lo;
    if (lo >= hi) {
        *from = *to = 0;
        return !accumulate && p0 == 0;
    }
    *from = lo > p0 ? lo - p0 : 0;
    *to = hi - p0 < k ? hi - p0 : k;
    return *from < *to;
}

/* Rows of c in blocks of MC: a block's rows of a (96 x 256 floats at most, 96 KB) stay in L2
 * while every panel of b passes them. Without the blocks a streamed from L3 or memory once per
 * panel: with the operands cold (16 sets of them in turn), the GPT's forward and backward-data
 * products ran 5-24% faster with them (MC = 96 beat 48, 72, 144, 192 and 384); weight gradients
 * (m = 128-512) at par.
 * One call adds the terms [p0, p0 + k) (k <= KC) of sums over k_all terms: a (i,p) at
 * a[i * a_i + p * a_p] for p in [0, k), or a_packed: a holds pack_a_t's panels of these k; b's
 * panels from pack_panels, ps floats apart, their row 0 term p0; c (i,j) at c[i * ldc + j],
 * added to when accumulate or an earlier call wrote it. band (ct__gemm_band, or NULL): each tile
 * of MR rows computes only the panels and the terms its rows need. */
static AVX2_FMA void kernel(int64_t m, int64_t k_all, int64_t p0, int64_t k, int64_t n,
                            const float *a, int64_t a_i, int64_t a_p, bool a_packed,
                            const float *panels, int64_t ps, float *c, int64_t ldc, bool accumulate,
                            const float *bias, const ct__gemm_band *band)
{
    if (a_packed)
        a_p = MR;
    int64_t row_lines = (k + 15) / 16 + 1; /* cache lines a row of a spans, unaligned */
    for (int64_t ib = 0; ib < m; ib += MC) {
        /* a read in place: the next block's rows are prefetched into L2 while this block is
         * multiplied, a few lines each tile (the GPT of bench/gpt_train, 1 thread: about 3% off
         * a step, alternating steps with and without in one process; into L1 no better) */
        int64_t rows = m - ib < MC ? m - ib : MC, next = ib + MC;
        int64_t next_rows = a_packed || next >= m ? 0 : m - next < MC ? m - next : MC;
        int64_t lines = next_rows * row_lines, fetched = 0;
        int64_t tiles = (n + NR - 1) / NR * ((rows + MR - 1) / MR);
        int64_t per_tile = (lines + tiles - 1) / tiles;
        for (int64_t j0 = 0; j0 < n; j0 += NR) {
            const float *bp = panels + (j0 / NR) * ps, *bj = bias ? bias + j0 : NULL;
            int64_t w = n - j0 < NR ? n - j0 : NR;
            for (int64_t i0 = ib; i0 < ib + rows; i0 += MR) {
                for (int64_t q = 0; q < per_tile && fetched < lines; q++, fetched++)
                    _mm_prefetch((const char *)(a + (next + fetched / row_lines) * a_i +
                                                fetched % row_lines * 16),
                                 _MM_HINT_T1);
                int mr = m - i0 < MR ? (int)(m - i0) : MR;
                int64_t from, to;
                bool acc;
                if (!tile_terms(band, i0, mr, j0, k_all, p0, k, accumulate, &from, &to, &acc))
                    continue;
                const float *ar[MR];
                for (int r = 0; r < MR; r++)
                    ar[r] = (a_packed ? a + i0 * k + r : a + (i0 + r < m ? i0 + r : m - 1) * a_i) +
                            from * a_p;
                if (w == NR)
                    block(to - from, ar, a_p, bp + from * NR, c + i0 * ldc + j0, ldc, mr, true, NR,
                          acc, bj);
                else
                    block(to - from, ar, a_p, bp + from * NR, c + i0 * ldc + j0, ldc, mr, false, w,
                          acc, bj);
            }
        }
    }
}

/* a stored (k,m), rows [0,m) of op(a) over k: panels of MR rows, each (k,MR), rows past m
 * zero. A row of a panel is stored 8 floats wide, its last 2 overwritten by the next row (the
 * buffer has 2 floats of slack past the last panel). sums (m) != NULL: op(a)'s row sums over
 * these k are added to it (the bias gradient of a weight gradient dy^T x, from the one read of
 * dy). */
static AVX2_FMA void pack_a_t(int64_t m, int64_t k, const float *a, int64_t lda, float *out,
                              float *sums)
{
    for (int64_t i0 = 0; i0 < m; i0 += MR) {
        float *o = out + i0 * k; /* panel i0 / MR, (k,MR) */
        __m256i mask = lane_mask(m - i0 < MR ? m - i0 : MR);
        __m256 sum = _mm256_setzero_ps();
        for (int64_t p = 0; p < k; p++) {
            __m256 v = _mm256_maskload_ps(a + p * lda + i0, mask);
            _mm256_storeu_ps(o + p * MR, v);
            sum = _mm256_add_ps(sum, v);
        }
        if (sums)
            _mm256_maskstore_ps(sums + i0, mask,
                                _mm256_add_ps(_mm256_maskload_ps(sums + i0, mask), sum));
    }
}

/* c (m,n) = or += op(a) op(b) [+ bias]: b packed here one k block at a time, or given as
 * prepacked, ct__cpu_gemm_pack's panels of a b of pk rows. a_sums (m) != NULL (ta only): op(a)'s
 * row sums. */
static int product(int64_t m, int64_t k, int64_t n, const float *a, int64_t lda, bool ta,
                   const float *b, int64_t ldb, bool tb, const float *prepacked, int64_t pk,
                   float *c, int64_t ldc, bool accumulate, const float *bias, float *a_sums,
                   const ct__gemm_band *band)
{
    if (a_sums)
        memset(a_sums, 0, (size_t)m * sizeof(float));
    int64_t kc = k < KC ? k : KC;
    int64_t b_floats = prepacked ? 0 : (n + NR - 1) / NR * NR * kc;
    int64_t a_floats = ta ? (m + MR - 1) / MR * MR * kc + 2 : 0;
    float *buf = b_floats + a_floats > 0 ? pack_buffer(b_floats + a_floats) : NULL;
    if (b_floats + a_floats > 0 && !buf)
        return ct__error(CT_ENOMEM, "gemm: out of memory packing a %lldx%lld operand", (long long)k,
                         (long long)(ta ? m : n));
    for (int64_t p0 = 0; p0 < k; p0 += kc) {
        int64_t kb = k - p0 < kc ? k - p0 : kc, ps = pk * NR;
        const float *bp = prepacked ? prepacked + p0 * NR : buf;
        if (!prepacked) {
            pack_panels(kb, n, tb ? b + p0 : b + p0 * ldb, ldb, tb, buf);
            ps = kb * NR;
        }
        const float *bb = p0 > 0 ? NULL : bias;
        if (ta) {
            pack_a_t(m, kb, a + p0 * lda, lda, buf + b_floats, a_sums);
            kernel(m, k, p0, kb, n, buf + b_floats, 0, 0, true, bp, ps, c, ldc, accumulate, bb,
                   band);
        } else {
            kernel(m, k, p0, kb, n, a + p0, lda, 1, false, bp, ps, c, ldc, accumulate, bb, band);
        }
    }
    return 0;
}

int ct__cpu_gemm_ld(int64_t m, int64_t k, int64_t n, const float *a, int64_t lda, bool ta,
                    const float *b, int64_t ldb, bool tb, float *c, int64_t ldc, bool accumulate,
                    const float *bias, const ct__gemm_band *band)
{
    if (band && bias)
        return ct__error(CT_EINVAL, "gemm: a product with a band takes no bias");
    return product(m, k, n, a, lda, ta, b, ldb, tb, NULL, 0, c, ldc, accumulate, bias, NULL, band);
}

int64_t ct__cpu_gemm_pack_floats(int64_t k, int64_t n)
{
    return (n + NR - 1) / NR * NR * k;
}

void ct__cpu_gemm_pack(int64_t k, int64_t n, const float *b, int64_t ldb, bool tb, float *panels)
{
    pack_panels(k, n, b, ldb, tb, panels);
}

int ct__cpu_gemm_packed(int64_t m, int64_t k, int64_t n, const float *a, int64_t lda, bool ta,
                        const float *panels, int64_t pk, float *c, int64_t ldc, bool accumulate,
                        const ct__gemm_band *band)
{
    return product(m, k, n, a, lda, ta, NULL, 0, false, panels, pk, c, ldc, accumulate, NULL, NULL,
                   band);
}

int ct__cpu_gemm(int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b, bool tb,
                 float *c, bool accumulate, const float *bias)
{
    return ct__cpu_gemm_ld(m, k, n, a, ta ? m : k, ta, b, tb ? k : n, tb, c, n, accumulate, bias,
                           NULL);
}

int ct__cpu_gemm_wgrad(int64_t oc, int64_t n, int64_t ic, const float *dy, const float *x,
                       float *dw, float *db)
{
    return product(oc, n, ic, dy, oc, true, x, ic, false, NULL, 0, dw, ic, false, NULL, db, NULL);
}
