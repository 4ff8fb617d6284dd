/* trainer/cpu/attention.c — fused scaled dot-product attention on the CPU, forward and
 * backward, with an optional causal mask and dropout on the probabilities. Memory grows with T,
 * not T^2: each thread keeps one row of scores; backward recomputes the probabilities from the
 * forward's log-sum-exp (as flash attention does). Parallel over the (batch, head) slices, each
 * thread the only writer of its slice's dk and dv, every sum in a fixed order: the same bits for
 * any thread count.
 *
 * Shapes: q, k, v, o, dout, dq, dk, dv (bh, t, hs); lse, delta (bh, t). Not here: the op and
 * its autograd (trainer/nn/attention.c). */
#include <math.h>
#include <stdlib.h>

#include "common/common.h"
#include "trainer/backend/philox.h"
#include "trainer/cpu/cpu.h"

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

int ct__cpu_attn_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v, float *o,
                     float *lse)
{
    int64_t T = p->t, hs = p->hs;
    int rc = 0;
#pragma omp parallel for schedule(static) if (p->bh * T * T * hs > 32768)
    for (int64_t b = 0; b < p->bh; b++) {
        float *s = malloc((size_t)T * sizeof(float));
        if (!s) {
#pragma omp atomic write
            rc = CT_ENOMEM;
            continue;
        }
        const float *qb = q + b * T * hs, *kb = k + b * T * hs, *vb = v + b * T * hs;
        for (int64_t i = 0; i < T; i++) {
            int64_t seen = p->causal ? i + 1 : T;
            float m = -INFINITY, l = 0;
            for (int64_t j = 0; j < seen; j++) {
                s[j] = p->scale * dot(qb + i * hs, kb + j * hs, hs);
                m = s[j] > m ? s[j] : m;
            }
            for (int64_t j = 0; j < seen; j++) {
                s[j] = expf(s[j] - m);
                l += s[j];
            }
            float *oi = o + (b * T + i) * hs, inv = 1.0f / l;
            for (int64_t c = 0; c < hs; c++)
                oi[c] = 0.0f;
            for (int64_t j = 0; j < seen; j++) {
                float w = s[j] * inv * keep(p, b, i, j);
                const float *vj = vb + j * hs;
#pragma omp simd
                for (int64_t c = 0; c < hs; c++)
                    oi[c] += w * vj[c];
            }
            lse[b * T + i] = m + logf(l);
        }
        free(s);
    }
    return rc < 0 ? ct__error(rc, "attention: out of memory for a row of scores") : 0;
}

/* With P = exp(scale q k^T - lse) and M the dropout factors: dv_j += sum_i P_ij M_ij do_i;
 * dP_ij = M_ij do_i . v_j; dS_ij = P_ij (dP_ij - delta_i), delta_i = do_i . o_i;
 * dq_i += scale sum_j dS_ij k_j; dk_j += scale sum_i dS_ij q_i. */
int ct__cpu_attn_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                     const float *o, const float *lse, const float *dout, float *delta, float *dq,
                     float *dk, float *dv)
{
    int64_t T = p->t, hs = p->hs;
#pragma omp parallel for schedule(static) if (p->bh * T * T * hs > 32768)
    for (int64_t b = 0; b < p->bh; b++) {
        int64_t base = b * T * hs;
        const float *qb = q + base, *kb = k + base, *vb = v + base, *ob = o + base,
                    *gb = dout + base;
        for (int64_t i = 0; i < T; i++)
            delta[b * T + i] = dot(gb + i * hs, ob + i * hs, hs);
        for (int64_t i = 0; i < T; i++) {
            int64_t seen = p->causal ? i + 1 : T;
            const float *qi = qb + i * hs, *gi = gb + i * hs;
            float l = lse[b * T + i], di = delta[b * T + i];
            for (int64_t j = 0; j < seen; j++) {
                float pij = expf(p->scale * dot(qi, kb + j * hs, hs) - l), mij = keep(p, b, i, j);
                float ds = pij * (mij * dot(gi, vb + j * hs, hs) - di) * p->scale;
                float wv = pij * mij;
                float *dvj = dv + base + j * hs, *dkj = dk + base + j * hs,
                      *dqi = dq + base + i * hs;
                const float *kj = kb + j * hs;
#pragma omp simd
                for (int64_t c = 0; c < hs; c++) {
                    dvj[c] += wv * gi[c];
                    dkj[c] += ds * qi[c];
                    dqi[c] += ds * kj[c];
                }
            }
        }
    }
    return 0;
}
