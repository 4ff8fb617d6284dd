/* trainer/cuda/flash_attention.cu — flash attention (FlashAttention-2's tiling and online softmax)
 * for the backend table's attn_fwd / attn_bwd on head sizes 32, 64 and 128, dropout included;
 * attention.cu decides when it runs and keeps the simple warp-per-row kernels for the rest.
 *
 * Forward: a block takes 64 query rows of one (batch, head) slice, 4 warps of 16 rows; it walks
 * the keys the rows see in tiles staged through shared memory; each warp keeps its rows' scores
 * of a tile, their running max m and sum l, and its (16, hs) output in registers, rescaled by
 * exp(m_old - m_new) when the max grows. Backward, without atomics: one kernel takes 64 query
 * rows (4 warps of 16) and sums dq over the key tiles; another takes 64 key rows (4 warps of 16)
 * and sums dk and dv over the query tiles (at head size 128 in bf16 and f16, dv and dk in two
 * launches, each recomputing the probabilities: both sums with k's and v's fragments took more than
 * 255 registers and spilled); a warp per row computes delta_i = do_i . o_i first. Every output has
 * one writer and every sum one order: the same bits every run. Dropout draws the CPU's Philox
 * numbers per probability: the forward's l sums the weights before it, P v and the backward's
 * products take P M (M the factors), dS = P (M dP - delta) scale. Under the causal mask the query
 * blocks that see the most keys are launched first.
 *
 * The registers follow mma.sync m16n8k16's fragments (mma.cuh): a warp's (16, 8) tile of scores
 * is four floats a lane, rows g and g + 8, columns 2t and 2t + 1 (g = lane / 4, t = lane % 4);
 * so a row's max and sum are over the 4 lanes of a group (two shuffles). Two precisions share
 * that layout:
 *   - CT_BF16, CT_F16: tensor cores. q, k, v (and dout) are rounded to bf16 (f16) when they are
 *     staged into shared memory or registers, the probabilities (and dS in backward) are
 *     rounded for the second product; every sum is f32.
 *   - CT_F32: the same tiles with f32 multiply-adds on the CUDA cores, no rounding (the CPU's
 *     results to 1e-5).
 * Shared memory tiles hold bf16 (f16) pairs in 32-bit words: along a row ("rows" tiles, the b of
 * q k^T) or down a column ("cols" tiles, the b of P v), so every fragment is one load; rows are
 * padded by 4 words so that a warp's loads meet no bank twice. Tiles stay under 48 KB (static
 * shared memory): f32 key tiles are 32 rows (16 in the dk / dv kernel at head size 128).
 *
 * Shapes: q, k, v, dq, dk, dv: bh slices of (t, hs), rows p.in_rs apart; o, dout: rows p.out_rs
 * apart (table.h's ct__attn_p; heads read in place by ct__attn_slice); lse, delta (bh, t).
 * Registers (nvcc 13, sm_80 and sm_90): 114-250 a thread, no spills; a 16-byte local array in
 * Philox's call (as attention.cu).
 *
 * Not here: other head sizes (attention.cu's kernels), ldmatrix or cp.async
 * (fragments are built with plain loads), a GPU's timing (nothing here has run on a GPU). */
#include "common/common.h"

#include "trainer/backend/philox.h"
#include "trainer/cuda/cuda_internal.h"
#include "trainer/cuda/mma.cuh"

enum { FA_WARPS = 4, FA_THREADS = 32 * FA_WARPS, FA_ROWS = 16 * FA_WARPS };

/* key (or query) rows of a tile: forward, dq, dk / dv kernel */
template <int HS, bool LP> struct tiles {
    enum { FWD = LP ? 64 : 32, DQ = 32, DKV = LP || HS <= 64 ? 32 : 16 };
};

/* lo and hi rounded to DT (CT_BF16 or CT_F16), in one register (lo in the low half) */
template <int DT> static __device__ inline uint32_t pack(float lo, float hi)
{
    if constexpr (DT == CT_F16)
        return ct__pack_f16(lo, hi);
    else
        return ct__pack_bf16(lo, hi);
}

/* d += a b on the tensor cores, operands of DT */
template <int DT>
static __device__ inline void mma(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    if constexpr (DT == CT_F16)
        ct__mma_f16(d, a, b);
    else
        ct__mma_bf16(d, a, b);
}

/* ---- staging into shared memory ---- */

/* rows [r0, r0 + R) of x (rows rs apart, HS floats), 0 past t: pairs of DT along each row */
template <int HS, int R, int DT>
static __device__ void stage_rows(uint32_t (*dst)[HS / 2 + 4], const float *x, int64_t rs,
                                  int64_t r0, int64_t t)
{
    for (int i = threadIdx.x; i < R * HS / 2; i += FA_THREADS) {
        int r = i / (HS / 2), c2 = i % (HS / 2);
        const float *src = x + (r0 + r) * rs + 2 * c2;
        dst[r][c2] = r0 + r < t ? pack<DT>(src[0], src[1]) : 0u;
    }
}

/* the same rows as pairs of DT down each column: dst[c][r2] holds x[a][c] and x[a + 1][c],
 * a = r0 + 2 r2 */
template <int HS, int R, int DT>
static __device__ void stage_cols(uint32_t (*dst)[R / 2 + 4], const float *x, int64_t rs,
                                  int64_t r0, int64_t t)
{
    for (int i = threadIdx.x; i < R / 2 * HS; i += FA_THREADS) {
        int r2 = i / HS, c = i % HS;
        int64_t a = r0 + 2 * r2;
        float lo = a < t ? x[a * rs + c] : 0.0f, hi = a + 1 < t ? x[(a + 1) * rs + c] : 0.0f;
        dst[c][r2] = pack<DT>(lo, hi);
    }
}

/* the same rows in f32 */
template <int HS, int R>
static __device__ void stage_f32(float (*dst)[HS + 1], const float *x, int64_t rs, int64_t r0,
                                 int64_t t)
{
    for (int i = threadIdx.x; i < R * HS; i += FA_THREADS) {
        int r = i / HS, c = i % HS;
        dst[r][c] = r0 + r < t ? x[(r0 + r) * rs + c] : 0.0f;
    }
}

/* a warp's 16 rows from row r0 (rows past t read row t - 1: their results are not used) as
 * mma's a fragments of DT: a[kk] holds columns 16 kk .. 16 kk + 15 */
template <int HS, int DT>
static __device__ void load_a(uint32_t a[HS / 16][4], const float *x, int64_t rs, int64_t r0,
                              int64_t t, int g, int tg)
{
    int64_t ra = r0 + g < t ? r0 + g : t - 1, rb = r0 + g + 8 < t ? r0 + g + 8 : t - 1;
    const float *xa = x + ra * rs, *xb = x + rb * rs;
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        int c = 16 * kk + 2 * tg;
        a[kk][0] = pack<DT>(xa[c], xa[c + 1]);
        a[kk][1] = pack<DT>(xb[c], xb[c + 1]);
        a[kk][2] = pack<DT>(xa[c + 8], xa[c + 9]);
        a[kk][3] = pack<DT>(xb[c + 8], xb[c + 9]);
    }
}

/* ---- the two products, per precision, on a warp's 16 rows ---- */

/* s (16, 8 N) = a (16, HS) b^T, b's N * 8 rows a "rows" tile: q k^T, do v^T, k q^T, v do^T */
template <int HS, int N, int DT>
static __device__ void abt_lp(float s[N][4], const uint32_t a[HS / 16][4],
                              const uint32_t (*b)[HS / 2 + 4], int g, int tg)
{
#pragma unroll
    for (int j = 0; j < N; j++) {
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            uint32_t f[2] = {b[8 * j + g][8 * kk + tg], b[8 * j + g][8 * kk + 4 + tg]};
            mma<DT>(s[j], a[kk], f);
        }
    }
}

/* the same in f32: a's rows g and g + 8 are xa and xb (HS floats), b an f32 tile */
template <int HS, int N>
static __device__ void abt_f32(float s[N][4], const float *xa, const float *xb,
                               const float (*b)[HS + 1], int tg)
{
#pragma unroll
    for (int j = 0; j < N; j++)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    for (int c = 0; c < HS; c++) {
        float a0 = xa[c], a1 = xb[c];
#pragma unroll
        for (int j = 0; j < N; j++) {
            float b0 = b[8 * j + 2 * tg][c], b1 = b[8 * j + 2 * tg + 1][c];
            s[j][0] += a0 * b0;
            s[j][1] += a0 * b1;
            s[j][2] += a1 * b0;
            s[j][3] += a1 * b1;
        }
    }
}

/* acc (16, HS) += w (16, K) y (K, HS): w the warp's tile of weights in score fragments (rounded
 * to DT here), y a "cols" tile (K rows): P v, dS k, P^T do, dS^T q */
template <int HS, int K, int DT>
static __device__ void aw_lp(float acc[HS / 8][4], const float w[K / 8][4],
                             const uint32_t (*y)[K / 2 + 4], int g, int tg)
{
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        uint32_t a[4] = {pack<DT>(w[2 * kk][0], w[2 * kk][1]), pack<DT>(w[2 * kk][2], w[2 * kk][3]),
                         pack<DT>(w[2 * kk + 1][0], w[2 * kk + 1][1]),
                         pack<DT>(w[2 * kk + 1][2], w[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < HS / 8; n++) {
            uint32_t f[2] = {y[8 * n + g][8 * kk + tg], y[8 * n + g][8 * kk + 4 + tg]};
            mma<DT>(acc[n], a, f);
        }
    }
}

/* the same in f32: the weights go through the warp's scratch ws (16, K), y an f32 tile */
template <int HS, int K>
static __device__ void aw_f32(float acc[HS / 8][4], const float w[K / 8][4], float (*ws)[K + 1],
                              const float (*y)[HS + 1], int g, int tg)
{
#pragma unroll
    for (int j = 0; j < K / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            ws[g + 8 * (e >> 1)][8 * j + 2 * tg + (e & 1)] = w[j][e];
    __syncwarp();
    for (int k = 0; k < K; k++) {
        float wa = ws[g][k], wb = ws[g + 8][k];
#pragma unroll
        for (int n = 0; n < HS / 8; n++) {
            float y0 = y[k][8 * n + 2 * tg], y1 = y[k][8 * n + 2 * tg + 1];
            acc[n][0] += wa * y0;
            acc[n][1] += wa * y1;
            acc[n][2] += wb * y0;
            acc[n][3] += wb * y1;
        }
    }
    __syncwarp(); /* ws is rewritten next */
}

/* the max (or sum) of v over the 4 lanes of a group: one row of a fragment */
static __device__ inline float group_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
static __device__ inline float group_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* whether score (i, j) counts: key j exists and, under the mask, j <= i */
static __device__ inline bool seen(const ct__attn_p &p, int64_t i, int64_t j)
{
    return j < p.t && (!p.causal || j <= i);
}

/* the dropout factor of probability (b, i, j): 0 or 1 / (1 - p), attention.cu's and the CPU's
 * draw (Philox at (b t + i) t + j). A call, not inlined: Philox's registers would otherwise
 * count in every kernel, with dropout or without (the bf16 forward at head size 128 went from
 * 228 to 246 registers). */
static __device__ __noinline__ float draw(const ct__attn_p &p, int64_t b, int64_t i, int64_t j)
{
    float u = ct__philox_uniform(p.seed, 0, (uint64_t)((b * p.t + i) * p.t + j));
    return u < p.dropout ? 0.0f : 1.0f / (1.0f - p.dropout);
}
static __device__ inline float keep(const ct__attn_p &p, int64_t b, int64_t i, int64_t j)
{
    return p.dropout > 0.0f ? draw(p, b, i, j) : 1.0f;
}

/* the first query row of the block: under the mask the last blocks, which see the most keys,
 * run first, so that short blocks fill the tail of the launch */
static __device__ inline int64_t query_block(const ct__attn_p &p)
{
    return (int64_t)(p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * FA_ROWS;
}

/* ---- forward ---- */

template <int HS, bool LP> struct fwd_smem;
template <int HS> struct fwd_smem<HS, true> {
    uint32_t k[tiles<HS, true>::FWD][HS / 2 + 4];
    uint32_t v[HS][tiles<HS, true>::FWD / 2 + 4];
};
template <int HS> struct fwd_smem<HS, false> {
    float k[tiles<HS, false>::FWD][HS + 1], v[tiles<HS, false>::FWD][HS + 1];
    float w[FA_WARPS][16][tiles<HS, false>::FWD + 1];
};

/* One block: 64 query rows from blockIdx.x * 64 of slice blockIdx.y. o = softmax(scale q k^T) v,
 * lse = its rows' log-sum-exp. */
template <int HS, int DT>
static __global__ void __launch_bounds__(FA_THREADS, 1)
    flash_fwd_kernel(ct__attn_p p, const float *q, const float *k, const float *v, float *o,
                     float *lse)
{
    constexpr bool LP = DT != CT_F32; /* tensor cores */
    enum { BK = tiles<HS, LP>::FWD, N = BK / 8 };
    __shared__ fwd_smem<HS, LP> sm;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
    int64_t T = p.t, b = blockIdx.y, rs = p.in_rs, i0 = query_block(p);
    int64_t r0 = i0 + 16 * warp, row[2] = {r0 + g, r0 + g + 8};
    int64_t in = ct__attn_slice(&p, b, rs);
    const float *qb = q + in, *kb = k + in, *vb = v + in;
    const float *xa = qb + (row[0] < T ? row[0] : T - 1) * rs,
                *xb = qb + (row[1] < T ? row[1] : T - 1) * rs;
    uint32_t qa[LP ? HS / 16 : 1][4];
    if constexpr (LP)
        load_a<HS, DT>(qa, qb, rs, r0, T, g, tg);
    float acc[HS / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int64_t keys = p.causal && i0 + FA_ROWS < T ? i0 + FA_ROWS : T;
    for (int64_t j0 = 0; j0 < keys; j0 += BK) {
        __syncthreads(); /* every warp is done with the last tile */
        if constexpr (LP) {
            stage_rows<HS, BK, DT>(sm.k, kb, rs, j0, T);
            stage_cols<HS, BK, DT>(sm.v, vb, rs, j0, T);
        } else {
            stage_f32<HS, BK>(sm.k, kb, rs, j0, T);
            stage_f32<HS, BK>(sm.v, vb, rs, j0, T);
        }
        __syncthreads();
        if (p.causal && j0 > r0 + 15)
            continue; /* the warp's rows see none of these keys */
        float s[N][4];
        if constexpr (LP)
            abt_lp<HS, N, DT>(s, qa, sm.k, g, tg);
        else
            abt_f32<HS, N>(s, xa, xb, sm.k, tg);
#pragma unroll
        for (int h = 0; h < 2; h++) { /* row g + 8 h: scale, mask, online softmax */
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < N; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float x = s[j][2 * h + e] * p.scale;
                    x = seen(p, row[h], j0 + 8 * j + 2 * tg + e) ? x : -INFINITY;
                    s[j][2 * h + e] = x;
                    mx = fmaxf(mx, x);
                }
            float mn = fmaxf(m[h], group_max(mx)), sum = 0.0f;
            /* nothing seen yet: nothing to rescale (exp(-inf - -inf) would be NaN) */
            float corr = m[h] == -INFINITY ? 0.0f : expf(m[h] - mn);
#pragma unroll
            for (int j = 0; j < N; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) { /* l sums the weights before dropout */
                    float x = s[j][2 * h + e], w = x == -INFINITY ? 0.0f : expf(x - mn);
                    int64_t col = j0 + 8 * j + 2 * tg + e;
                    sum += w;
                    s[j][2 * h + e] = w == 0.0f ? 0.0f : w * keep(p, b, row[h], col);
                }
            l[h] = l[h] * corr + sum;
            m[h] = mn;
#pragma unroll
            for (int n = 0; n < HS / 8; n++) {
                acc[n][2 * h] *= corr;
                acc[n][2 * h + 1] *= corr;
            }
        }
        if constexpr (LP)
            aw_lp<HS, BK, DT>(acc, s, sm.v, g, tg);
        else
            aw_f32<HS, BK>(acc, s, sm.w[warp], sm.v, g, tg);
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float sum = group_sum(l[h]);
        if (row[h] >= T)
            continue;
        float *oi = o + ct__attn_slice(&p, b, p.out_rs) + row[h] * p.out_rs;
#pragma unroll
        for (int n = 0; n < HS / 8; n++) {
            oi[8 * n + 2 * tg] = acc[n][2 * h] / sum;
            oi[8 * n + 2 * tg + 1] = acc[n][2 * h + 1] / sum;
        }
        if (tg == 0)
            lse[b * T + row[h]] = m[h] + logf(sum);
    }
}

/* ---- backward ---- */

/* delta_i = do_i . o_i, a warp a row */
static __global__ void flash_delta_kernel(ct__attn_p p, const float *o, const float *dout,
                                          float *delta)
{
    int lane = threadIdx.x % 32;
    int64_t T = p.t;
    WARP_ROWS(r, p.bh * T)
    {
        int64_t off = ct__attn_slice(&p, r / T, p.out_rs) + r % T * p.out_rs;
        float s = 0.0f;
        for (int64_t c = lane; c < p.hs; c += 32)
            s += dout[off + c] * o[off + c];
        s = ct__warp_sum(s);
        if (lane == 0)
            delta[r] = s;
    }
}

/* dst (+)= x */
static __device__ inline void put(float *dst, float x, bool add)
{
    *dst = add ? *dst + x : x;
}

/* the warp's (16, HS) sums acc into rows r0.. of dst (rows rs apart), those before t */
template <int HS>
static __device__ void put_rows(float *dst, int64_t rs, const int64_t row[2], int64_t t,
                                const float acc[HS / 8][4], int tg, bool add)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (row[h] >= t)
            continue;
#pragma unroll
        for (int n = 0; n < HS / 8; n++) {
            put(dst + row[h] * rs + 8 * n + 2 * tg, acc[n][2 * h], add);
            put(dst + row[h] * rs + 8 * n + 2 * tg + 1, acc[n][2 * h + 1], add);
        }
    }
}

template <int HS, bool LP> struct dq_smem;
template <int HS> struct dq_smem<HS, true> {
    uint32_t k[tiles<HS, true>::DQ][HS / 2 + 4], v[tiles<HS, true>::DQ][HS / 2 + 4];
    uint32_t kc[HS][tiles<HS, true>::DQ / 2 + 4];
};
template <int HS> struct dq_smem<HS, false> {
    float k[tiles<HS, false>::DQ][HS + 1], v[tiles<HS, false>::DQ][HS + 1];
    float w[FA_WARPS][16][tiles<HS, false>::DQ + 1];
};

/* One block: 64 query rows of slice blockIdx.y. dq_i (+)= scale sum_j P_ij (dP_ij - delta_i) k_j,
 * P_ij = exp(scale q_i . k_j - lse_i), dP_ij = do_i . v_j. */
template <int HS, int DT>
static __global__ void __launch_bounds__(FA_THREADS, 1)
    flash_dq_kernel(ct__attn_p p, const float *q, const float *k, const float *v, const float *lse,
                    const float *dout, const float *delta, float *dq, bool add)
{
    constexpr bool LP = DT != CT_F32; /* tensor cores */
    enum { BK = tiles<HS, LP>::DQ, N = BK / 8 };
    __shared__ dq_smem<HS, LP> sm;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
    int64_t T = p.t, b = blockIdx.y, rs = p.in_rs, ors = p.out_rs;
    int64_t i0 = query_block(p), r0 = i0 + 16 * warp, row[2] = {r0 + g, r0 + g + 8};
    int64_t in = ct__attn_slice(&p, b, rs), out = ct__attn_slice(&p, b, ors);
    const float *qb = q + in, *kb = k + in, *vb = v + in, *gb = dout + out;
    int64_t ra = row[0] < T ? row[0] : T - 1, rb = row[1] < T ? row[1] : T - 1;
    float l[2] = {lse[b * T + ra], lse[b * T + rb]}, d[2] = {delta[b * T + ra], delta[b * T + rb]};
    uint32_t qa[LP ? HS / 16 : 1][4], ga[LP ? HS / 16 : 1][4];
    if constexpr (LP) {
        load_a<HS, DT>(qa, qb, rs, r0, T, g, tg);
        load_a<HS, DT>(ga, gb, ors, r0, T, g, tg);
    }
    float acc[HS / 8][4] = {};
    int64_t keys = p.causal && i0 + FA_ROWS < T ? i0 + FA_ROWS : T;
    for (int64_t j0 = 0; j0 < keys; j0 += BK) {
        __syncthreads();
        if constexpr (LP) {
            stage_rows<HS, BK, DT>(sm.k, kb, rs, j0, T);
            stage_rows<HS, BK, DT>(sm.v, vb, rs, j0, T);
            stage_cols<HS, BK, DT>(sm.kc, kb, rs, j0, T);
        } else {
            stage_f32<HS, BK>(sm.k, kb, rs, j0, T);
            stage_f32<HS, BK>(sm.v, vb, rs, j0, T);
        }
        __syncthreads();
        if (p.causal && j0 > r0 + 15)
            continue;
        float s[N][4], dp[N][4];
        if constexpr (LP) {
            abt_lp<HS, N, DT>(s, qa, sm.k, g, tg);
            abt_lp<HS, N, DT>(dp, ga, sm.v, g, tg);
        } else {
            abt_f32<HS, N>(s, qb + ra * rs, qb + rb * rs, sm.k, tg);
            abt_f32<HS, N>(dp, gb + ra * ors, gb + rb * ors, sm.v, tg);
        }
#pragma unroll
        for (int j = 0; j < N; j++) /* s := dS */
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int h = e >> 1;
                int64_t col = j0 + 8 * j + 2 * tg + (e & 1);
                float pij = seen(p, row[h], col) ? expf(s[j][e] * p.scale - l[h]) : 0.0f;
                float m = pij == 0.0f ? 0.0f : keep(p, b, row[h], col);
                s[j][e] = pij * (m * dp[j][e] - d[h]) * p.scale;
            }
        if constexpr (LP)
            aw_lp<HS, BK, DT>(acc, s, sm.kc, g, tg);
        else
            aw_f32<HS, BK>(acc, s, sm.w[warp], sm.k, g, tg);
    }
    put_rows<HS>(dq + in, rs, row, T, acc, tg, add);
}

template <int HS, bool LP> struct dkv_smem;
template <int HS> struct dkv_smem<HS, true> {
    uint32_t q[tiles<HS, true>::DKV][HS / 2 + 4], g[tiles<HS, true>::DKV][HS / 2 + 4];
    uint32_t qc[HS][tiles<HS, true>::DKV / 2 + 4], gc[HS][tiles<HS, true>::DKV / 2 + 4];
    float lse[tiles<HS, true>::DKV], delta[tiles<HS, true>::DKV];
};
template <int HS> struct dkv_smem<HS, false> {
    float q[tiles<HS, false>::DKV][HS + 1], g[tiles<HS, false>::DKV][HS + 1];
    float w[FA_WARPS][16][tiles<HS, false>::DKV + 1], ds[FA_WARPS][16][tiles<HS, false>::DKV + 1];
    float lse[tiles<HS, false>::DKV], delta[tiles<HS, false>::DKV];
};

/* what a dk / dv kernel sums: both, or one of them, as two launches that both compute the
 * probabilities (the bf16 and f16 kernels at head size 128: two sums of 16 x 128 with k's and
 * v's fragments would not fit in 255 registers) */
enum { DK = 1, DV = 2 };

/* One block: 64 key rows of slice blockIdx.y, a warp's 16 as the rows of the products (the
 * transposed scores S^T). dv_j (+)= sum_i P_ij M_ij do_i, dk_j (+)= scale sum_i P_ij (M_ij dP_ij
 * - delta_i) q_i, as PARTS asks. */
template <int HS, int DT, int PARTS>
static __global__ void __launch_bounds__(FA_THREADS, 1)
    flash_dkv_kernel(ct__attn_p p, const float *q, const float *k, const float *v, const float *lse,
                     const float *dout, const float *delta, float *dk, float *dv, bool add)
{
    constexpr bool LP = DT != CT_F32; /* tensor cores */
    enum { BQ = tiles<HS, LP>::DKV, N = BQ / 8 };
    constexpr bool WK = (PARTS & DK) != 0, WV = (PARTS & DV) != 0;
    __shared__ dkv_smem<HS, LP> sm;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tg = lane % 4;
    int64_t T = p.t, b = blockIdx.y, rs = p.in_rs, ors = p.out_rs;
    int64_t j0 = (int64_t)blockIdx.x * FA_ROWS, r0 = j0 + 16 * warp, key[2] = {r0 + g, r0 + g + 8};
    int64_t in = ct__attn_slice(&p, b, rs), out = ct__attn_slice(&p, b, ors);
    const float *qb = q + in, *kb = k + in, *vb = v + in, *gb = dout + out;
    int64_t ka = key[0] < T ? key[0] : T - 1, kb2 = key[1] < T ? key[1] : T - 1;
    /* tensor cores: the warp's k (and, for dk, v) rows as a fragments, loaded once */
    uint32_t kf[LP ? HS / 16 : 1][4], vf[LP && WK ? HS / 16 : 1][4];
    if constexpr (LP)
        load_a<HS, DT>(kf, kb, rs, r0, T, g, tg);
    if constexpr (LP && WK)
        load_a<HS, DT>(vf, vb, rs, r0, T, g, tg);
    float ak[WK ? HS / 8 : 1][4] = {}, av[WV ? HS / 8 : 1][4] = {};
    /* under the mask, queries before j0 see none of the block's keys (j0 is a multiple of BQ) */
    for (int64_t i0 = p.causal ? j0 : 0; i0 < T; i0 += BQ) {
        __syncthreads();
        if constexpr (LP) {
            stage_rows<HS, BQ, DT>(sm.q, qb, rs, i0, T);
            if constexpr (WK) {
                stage_rows<HS, BQ, DT>(sm.g, gb, ors, i0, T);
                stage_cols<HS, BQ, DT>(sm.qc, qb, rs, i0, T);
            }
            if constexpr (WV)
                stage_cols<HS, BQ, DT>(sm.gc, gb, ors, i0, T);
        } else {
            stage_f32<HS, BQ>(sm.q, qb, rs, i0, T);
            stage_f32<HS, BQ>(sm.g, gb, ors, i0, T);
        }
        for (int i = threadIdx.x; i < BQ; i += FA_THREADS) {
            sm.lse[i] = i0 + i < T ? lse[b * T + i0 + i] : 0.0f;
            sm.delta[i] = i0 + i < T ? delta[b * T + i0 + i] : 0.0f;
        }
        __syncthreads();
        if (p.causal && i0 + BQ - 1 < r0)
            continue; /* these queries see none of the warp's keys */
        float s[N][4], dp[WK ? N : 1][4];
        if constexpr (LP)
            abt_lp<HS, N, DT>(s, kf, sm.q, g, tg);
        else
            abt_f32<HS, N>(s, kb + ka * rs, kb + kb2 * rs, sm.q, tg);
        if constexpr (WK && LP)
            abt_lp<HS, N, DT>(dp, vf, sm.g, g, tg);
        else if constexpr (WK)
            abt_f32<HS, N>(dp, vb + ka * rs, vb + kb2 * rs, sm.g, tg);
#pragma unroll
        for (int j = 0; j < N; j++) /* s := P^T M^T, dp := dS^T */
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int c = 8 * j + 2 * tg + (e & 1);
                int64_t kj = key[e >> 1];
                bool counts = i0 + c < T && kj < T && seen(p, i0 + c, kj);
                float pij = counts ? expf(s[j][e] * p.scale - sm.lse[c]) : 0.0f;
                float m = pij == 0.0f ? 0.0f : keep(p, b, i0 + c, kj);
                s[j][e] = pij * m;
                if constexpr (WK)
                    dp[j][e] = pij * (m * dp[j][e] - sm.delta[c]) * p.scale;
            }
        if constexpr (WV && LP)
            aw_lp<HS, BQ, DT>(av, s, sm.gc, g, tg);
        else if constexpr (WV)
            aw_f32<HS, BQ>(av, s, sm.w[warp], sm.g, g, tg);
        if constexpr (WK && LP)
            aw_lp<HS, BQ, DT>(ak, dp, sm.qc, g, tg);
        else if constexpr (WK)
            aw_f32<HS, BQ>(ak, dp, sm.ds[warp], sm.q, g, tg);
    }
    if constexpr (WK)
        put_rows<HS>(dk + in, rs, key, T, ak, tg, add);
    if constexpr (WV)
        put_rows<HS>(dv + in, rs, key, T, av, tg, add);
}

/* ---- launches ---- */

/* Whether the flash kernels take p: head size 32, 64 or 128, rows, and at most 65,535 slices
 * (the grid's y). */
extern "C" bool ct__cuda_flash_takes(const ct__attn_p *p)
{
    return (p->hs == 32 || p->hs == 64 || p->hs == 128) && p->t > 0 && p->bh > 0 && p->bh <= 65535;
}

template <int HS, int DT>
static void fwd(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                float *lse, cudaStream_t s)
{
    dim3 grid((unsigned)((p->t + FA_ROWS - 1) / FA_ROWS), (unsigned)p->bh);
    flash_fwd_kernel<HS, DT><<<grid, FA_THREADS, 0, s>>>(*p, q, k, v, o, lse);
}

template <int HS, int DT>
static void bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                const float *lse, const float *dout, const float *delta, float *dq, float *dk,
                float *dv, bool acc, cudaStream_t s)
{
    constexpr bool LP = DT != CT_F32;
    dim3 grid((unsigned)((p->t + FA_ROWS - 1) / FA_ROWS), (unsigned)p->bh);
    flash_dq_kernel<HS, DT><<<grid, FA_THREADS, 0, s>>>(*p, q, k, v, lse, dout, delta, dq, acc);
    if constexpr (LP && HS == 128) { /* one sum a launch (flash_dkv_kernel's PARTS) */
        flash_dkv_kernel<HS, DT, DV>
            <<<grid, FA_THREADS, 0, s>>>(*p, q, k, v, lse, dout, delta, dk, dv, acc);
        flash_dkv_kernel<HS, DT, DK>
            <<<grid, FA_THREADS, 0, s>>>(*p, q, k, v, lse, dout, delta, dk, dv, acc);
    } else {
        flash_dkv_kernel<HS, DT, DK | DV>
            <<<grid, FA_THREADS, 0, s>>>(*p, q, k, v, lse, dout, delta, dk, dv, acc);
    }
}

/* fwd and bwd in p's precision: CT_BF16, CT_F16, else f32 */
template <int HS>
static void fwd_dt(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                   float *lse, cudaStream_t s)
{
    if (p->dt == CT_BF16)
        fwd<HS, CT_BF16>(p, q, k, v, o, lse, s);
    else if (p->dt == CT_F16)
        fwd<HS, CT_F16>(p, q, k, v, o, lse, s);
    else
        fwd<HS, CT_F32>(p, q, k, v, o, lse, s);
}
template <int HS>
static void bwd_dt(const ct__attn_p *p, const float *q, const float *k, const float *v,
                   const float *lse, const float *dout, const float *delta, float *dq, float *dk,
                   float *dv, bool acc, cudaStream_t s)
{
    if (p->dt == CT_BF16)
        bwd<HS, CT_BF16>(p, q, k, v, lse, dout, delta, dq, dk, dv, acc, s);
    else if (p->dt == CT_F16)
        bwd<HS, CT_F16>(p, q, k, v, lse, dout, delta, dq, dk, dv, acc, s);
    else
        bwd<HS, CT_F32>(p, q, k, v, lse, dout, delta, dq, dk, dv, acc, s);
}

/* forward on a p that ct__cuda_flash_takes, in p->dt (CT_BF16 or CT_F16 on tensor cores, else
 * f32) */
extern "C" int ct__cuda_flash_fwd(const ct__attn_p *p, const float *q, const float *k,
                                  const float *v, float *o, float *lse, void *stream)
{
    if (!ct__cuda_flash_takes(p))
        return ct__error(CT_EINVAL, "cuda_flash_fwd: head size %lld: not taken", (long long)p->hs);
    cudaStream_t s = (cudaStream_t)stream;
    if (p->hs == 32)
        fwd_dt<32>(p, q, k, v, o, lse, s);
    else if (p->hs == 64)
        fwd_dt<64>(p, q, k, v, o, lse, s);
    else
        fwd_dt<128>(p, q, k, v, o, lse, s);
    return ct__cuda_status(cudaGetLastError(), "cuda_flash_fwd");
}

/* backward on a p that ct__cuda_flash_takes: delta, then dq, then dk and dv */
extern "C" int ct__cuda_flash_bwd(const ct__attn_p *p, const float *q, const float *k,
                                  const float *v, const float *o, const float *lse,
                                  const float *dout, float *delta, float *dq, float *dk, float *dv,
                                  bool acc, void *stream)
{
    if (!ct__cuda_flash_takes(p))
        return ct__error(CT_EINVAL, "cuda_flash_bwd: head size %lld: not taken", (long long)p->hs);
    cudaStream_t s = (cudaStream_t)stream;
    flash_delta_kernel<<<ct__cuda_row_blocks(p->bh * p->t), CT_CUDA_THREADS, 0, s>>>(*p, o, dout,
                                                                                     delta);
    int rc = ct__cuda_status(cudaGetLastError(), "cuda_flash_bwd delta");
    if (rc)
        return rc;
    if (p->hs == 32)
        bwd_dt<32>(p, q, k, v, lse, dout, delta, dq, dk, dv, acc, s);
    else if (p->hs == 64)
        bwd_dt<64>(p, q, k, v, lse, dout, delta, dq, dk, dv, acc, s);
    else
        bwd_dt<128>(p, q, k, v, lse, dout, delta, dq, dk, dv, acc, s);
    return ct__cuda_status(cudaGetLastError(), "cuda_flash_bwd");
}
