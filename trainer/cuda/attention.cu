/* trainer/cuda/attention.cu — fused attention on the GPU (the backend table's attn_fwd and
 * attn_bwd; trainer/cpu/attention.c is the reference). A warp per row: forward and the dq pass
 * take a query row each, with an online softmax over the keys (flash attention's rescaling),
 * the dk / dv pass a key row each, so every output has one writer and sums run in a fixed
 * order (the same bits every run, no atomics). Head sizes up to 256 (8 values a lane). Rows of
 * q, k, v, dq, dk, dv are p.in_rs apart, of o and dout p.out_rs (table.h's layout).
 * ct__cuda_attn_fwd / _bwd send what flash_attention.cu takes (head sizes 32, 64, 128: tiled,
 * tensor cores in bf16 and f16) there; these kernels run the rest, in f32 whatever p.dt asks. */
#include "common/common.h"

#include "trainer/backend/philox.h"
#include "trainer/cuda/cuda_internal.h"

enum { PER_LANE = 8, MAX_HS = 32 * PER_LANE };

static __device__ float keep(const ct__attn_p &p, int64_t b, int64_t i, int64_t j)
{
    if (p.dropout <= 0.0f)
        return 1.0f;
    float u = ct__philox_uniform(p.seed, 0, (uint64_t)((b * p.t + i) * p.t + j));
    return u < p.dropout ? 0.0f : 1.0f / (1.0f - p.dropout);
}

/* lane's part of the dot product of two rows of hs */
static __device__ float part_dot(const float *a, const float *b, int64_t hs, int lane)
{
    float s = 0;
    for (int64_t c = lane; c < hs; c += 32)
        s += a[c] * b[c];
    return s;
}

static __global__ void attn_fwd_kernel(ct__attn_p p, const float *q, const float *k, const float *v,
                                       float *o, float *lse)
{
    int lane = threadIdx.x % 32;
    int64_t rows = p.bh * p.t, T = p.t, hs = p.hs;
    WARP_ROWS(r, rows)
    {
        int64_t b = r / T, i = r % T, seen = p.causal ? i + 1 : T, rs = p.in_rs;
        const float *kb = k + ct__attn_slice(&p, b, rs), *vb = v + ct__attn_slice(&p, b, rs);
        const float *qi = q + ct__attn_slice(&p, b, rs) + i * rs;
        float *oi = o + ct__attn_slice(&p, b, p.out_rs) + i * p.out_rs;
        float acc[PER_LANE] = {0};
        float m = -INFINITY, l = 0;
        for (int64_t j = 0; j < seen; j++) {
            float s = p.scale * ct__warp_sum(part_dot(qi, kb + j * rs, hs, lane));
            /* a score of -inf weighs 0 and, ahead of every finite one, leaves nothing to
             * rescale (expf(-inf - -inf) would be NaN): the CPU takes the row's max first */
            float mn = fmaxf(m, s), corr = m == -INFINITY ? 0.0f : expf(m - mn),
                  e = s == -INFINITY ? 0.0f : expf(s - mn);
            float w = e * keep(p, b, i, j);
            l = l * corr + e;
            for (int c = 0; c < PER_LANE && lane + 32 * c < hs; c++)
                acc[c] = acc[c] * corr + w * vb[j * rs + lane + 32 * c];
            m = mn;
        }
        for (int c = 0; c < PER_LANE && lane + 32 * c < hs; c++)
            oi[lane + 32 * c] = acc[c] / l;
        if (lane == 0)
            lse[r] = m + logf(l);
    }
}

/* delta_i = do_i . o_i; dq_i (+)= scale sum_j P_ij (M_ij do_i . v_j - delta_i) k_j */
static __global__ void attn_bwd_q_kernel(ct__attn_p p, const float *q, const float *k,
                                         const float *v, const float *o, const float *lse,
                                         const float *dout, float *delta, float *dq, bool add)
{
    int lane = threadIdx.x % 32;
    int64_t rows = p.bh * p.t, T = p.t, hs = p.hs;
    WARP_ROWS(r, rows)
    {
        int64_t b = r / T, i = r % T, seen = p.causal ? i + 1 : T, rs = p.in_rs;
        int64_t in = ct__attn_slice(&p, b, rs), out = ct__attn_slice(&p, b, p.out_rs);
        const float *qi = q + in + i * rs, *gi = dout + out + i * p.out_rs, *kb = k + in,
                    *vb = v + in;
        float di = ct__warp_sum(part_dot(gi, o + out + i * p.out_rs, hs, lane)), l = lse[r];
        if (lane == 0)
            delta[r] = di;
        float acc[PER_LANE] = {0};
        for (int64_t j = 0; j < seen; j++) {
            float s = p.scale * ct__warp_sum(part_dot(qi, kb + j * rs, hs, lane));
            float dp = ct__warp_sum(part_dot(gi, vb + j * rs, hs, lane));
            float ds = expf(s - l) * (keep(p, b, i, j) * dp - di) * p.scale;
            for (int c = 0; c < PER_LANE && lane + 32 * c < hs; c++)
                acc[c] += ds * kb[j * rs + lane + 32 * c];
        }
        for (int c = 0; c < PER_LANE && lane + 32 * c < hs; c++) {
            float *d = dq + in + i * rs + lane + 32 * c;
            *d = add ? *d + acc[c] : acc[c];
        }
    }
}

/* per key row j: dv_j (+)= sum_i P_ij M_ij do_i; dk_j (+)= scale sum_i dS_ij q_i */
static __global__ void attn_bwd_kv_kernel(ct__attn_p p, const float *q, const float *k,
                                          const float *v, const float *lse, const float *dout,
                                          const float *delta, float *dk, float *dv, bool add)
{
    int lane = threadIdx.x % 32;
    int64_t rows = p.bh * p.t, T = p.t, hs = p.hs;
    WARP_ROWS(r, rows)
    {
        int64_t b = r / T, j = r % T, rs = p.in_rs, ors = p.out_rs;
        int64_t in = ct__attn_slice(&p, b, rs);
        const float *kj = k + in + j * rs, *vj = v + in + j * rs, *qb = q + in,
                    *gb = dout + ct__attn_slice(&p, b, ors);
        float ak[PER_LANE] = {0}, av[PER_LANE] = {0};
        for (int64_t i = p.causal ? j : 0; i < T; i++) {
            float s = p.scale * ct__warp_sum(part_dot(qb + i * rs, kj, hs, lane));
            float dp = ct__warp_sum(part_dot(gb + i * ors, vj, hs, lane));
            float pij = expf(s - lse[b * T + i]), mij = keep(p, b, i, j);
            float ds = pij * (mij * dp - delta[b * T + i]) * p.scale, wv = pij * mij;
            for (int c = 0; c < PER_LANE && lane + 32 * c < hs; c++) {
                ak[c] += ds * qb[i * rs + lane + 32 * c];
                av[c] += wv * gb[i * ors + lane + 32 * c];
            }
        }
        for (int c = 0; c < PER_LANE && lane + 32 * c < hs; c++) {
            float *d = dk + in + j * rs + lane + 32 * c, *e = dv + in + j * rs + lane + 32 * c;
            *d = add ? *d + ak[c] : ak[c];
            *e = add ? *e + av[c] : av[c];
        }
    }
}

static int check(const ct__attn_p *p, const char *what)
{
    if (p->bh < 0 || p->t < 0 || p->hs < 0)
        return ct__error(CT_EINVAL, "%s: negative size", what);
    if (p->hs > MAX_HS)
        return ct__error(CT_ENOSYS, "%s: head size %lld > %d is not implemented on device cuda",
                         what, (long long)p->hs, (int)MAX_HS);
    return 0;
}

extern "C" int ct__cuda_attn_fwd(const ct__attn_p *p, const float *q, const float *k,
                                 const float *v, float *o, float *lse, void *stream)
{
    int rc = check(p, "cuda_attn_fwd");
    if (rc || p->bh * p->t == 0)
        return rc;
    if (ct__cuda_flash_takes(p))
        return ct__cuda_flash_fwd(p, q, k, v, o, lse, stream);
    attn_fwd_kernel<<<ct__cuda_row_blocks(p->bh * p->t), CT_CUDA_THREADS, 0,
                      (cudaStream_t)stream>>>(*p, q, k, v, o, lse);
    return ct__cuda_status(cudaGetLastError(), "cuda_attn_fwd");
}

extern "C" int ct__cuda_attn_bwd(const ct__attn_p *p, const float *q, const float *k,
                                 const float *v, const float *o, const float *lse,
                                 const float *dout, float *delta, float *dq, float *dk, float *dv,
                                 bool acc, void *stream)
{
    int rc = check(p, "cuda_attn_bwd");
    if (rc || p->bh * p->t == 0)
        return rc;
    if (ct__cuda_flash_takes(p))
        return ct__cuda_flash_bwd(p, q, k, v, o, lse, dout, delta, dq, dk, dv, acc, stream);
    cudaStream_t s = (cudaStream_t)stream;
    unsigned blocks = ct__cuda_row_blocks(p->bh * p->t);
    attn_bwd_q_kernel<<<blocks, CT_CUDA_THREADS, 0, s>>>(*p, q, k, v, o, lse, dout, delta, dq, acc);
    if ((rc = ct__cuda_status(cudaGetLastError(), "cuda_attn_bwd dq")))
        return rc;
    attn_bwd_kv_kernel<<<blocks, CT_CUDA_THREADS, 0, s>>>(*p, q, k, v, lse, dout, delta, dk, dv,
                                                          acc);
    return ct__cuda_status(cudaGetLastError(), "cuda_attn_bwd dk dv");
}
