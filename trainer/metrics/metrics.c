/* trainer/metrics/metrics.c — running loss / top-k accuracy / throughput sums
 * (include/ct/metrics.h). Not here: communication between replicas. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/metrics.h"

struct ct_metrics {
    int topk[CT_METRICS_MAX_TOPK];
    int ntopk;
    double s[CT_METRICS_NSUMS]; /* SECONDS holds the frozen part of the clock */
    int64_t t0_ns;              /* clock start, or 0 when frozen */
};

ct_metrics *ct_metrics_new(const ct_metrics_opts *opts)
{
    ct_metrics_opts d = {.topk = {1}, .num_topk = 1};
    if (!opts || opts->num_topk == 0)
        opts = &d;
    if (opts->num_topk < 0 || opts->num_topk > CT_METRICS_MAX_TOPK) {
        ct__error(CT_EINVAL, "metrics: num_topk = %d: must be in [0, %d]", opts->num_topk,
                  CT_METRICS_MAX_TOPK);
        return NULL;
    }
    for (int i = 0; i < opts->num_topk; i++)
        if (opts->topk[i] < 1) {
            ct__error(CT_EINVAL, "metrics: topk[%d] = %d: must be >= 1", i, opts->topk[i]);
            return NULL;
        }
    ct_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        ct__error(CT_ENOMEM, "metrics: out of memory");
        return NULL;
    }
    memcpy(m->topk, opts->topk, (size_t)opts->num_topk * sizeof m->topk[0]);
    m->ntopk = opts->num_topk;
    ct_metrics_reset(m);
    return m;
}

void ct_metrics_destroy(ct_metrics **m)
{
    if (!m || !*m)
        return;
    free(*m);
    *m = NULL;
}

void ct_metrics_reset(ct_metrics *m)
{
    if (!m)
        return;
    memset(m->s, 0, sizeof m->s);
    m->s[CT_METRICS_REPLICAS] = 1;
    m->t0_ns = ct__now_ns();
    if (m->t0_ns == 0)
        m->t0_ns = 1;
}

int ct_metrics_add_loss(ct_metrics *m, double mean_loss, int64_t batch_size)
{
    if (!m || batch_size < 0)
        return ct__error(CT_EINVAL, "metrics_add_loss: batch_size = %lld (metrics %p)",
                         (long long)batch_size, (void *)m);
    m->s[CT_METRICS_LOSS_SUM] += mean_loss * (double)batch_size;
    m->s[CT_METRICS_LOSS_COUNT] += (double)batch_size;
    return 0;
}

int ct_metrics_topk_correct(const float *logits, const int64_t *target, int64_t n, int64_t c, int k,
                            int64_t *correct)
{
    if (!logits || !target || !correct || n < 0 || c < 1 || k < 1)
        return ct__error(CT_EINVAL, "metrics_topk_correct: bad arguments (N=%lld, C=%lld, k=%d)",
                         (long long)n, (long long)c, k);
    for (int64_t i = 0; i < n; i++)
        if (target[i] < 0 || target[i] >= c)
            return ct__error(CT_EINVAL,
                             "metrics_topk_correct: target[%lld] = %lld: out of range [0, %lld)",
                             (long long)i, (long long)target[i], (long long)c);
    int64_t hits = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *row = logits + i * c;
        float v = row[target[i]];
        int64_t above = 0;
        for (int64_t j = 0; j < c; j++)
            above += row[j] > v;
        hits += above < k;
    }
    *correct = hits;
    return 0;
}

int ct_metrics_add_logits(ct_metrics *m, const float *logits, const int64_t *target, int64_t n,
                          int64_t c)
{
    if (!m)
        return ct__error(CT_EINVAL, "metrics_add_logits: metrics is NULL");
    int64_t hits[CT_METRICS_MAX_TOPK];
    for (int i = 0; i < m->ntopk; i++) {
        int rc = ct_metrics_topk_correct(logits, target, n, c, m->topk[i], &hits[i]);
        if (rc)
            return rc;
    }
    for (int i = 0; i < m->ntopk; i++)
        m->s[CT_METRICS_CORRECT + i] += (double)hits[i];
    m->s[CT_METRICS_ACC_COUNT] += (double)n;
    return 0;
}

int ct_metrics_add_samples(ct_metrics *m, int64_t n)
{
    if (!m || n < 0)
        return ct__error(CT_EINVAL, "metrics_add_samples: n = %lld (metrics %p)", (long long)n,
                         (void *)m);
    m->s[CT_METRICS_SAMPLES] += (double)n;
    return 0;
}

int ct_metrics_update(ct_metrics *m, double mean_loss, const float *logits, const int64_t *target,
                      int64_t n, int64_t c)
{
    int rc;
    if (logits && (rc = ct_metrics_add_logits(m, logits, target, n, c)))
        return rc;
    if ((rc = ct_metrics_add_loss(m, mean_loss, n)))
        return rc;
    return ct_metrics_add_samples(m, n);
}

double ct_metrics_mean_loss(const ct_metrics *m)
{
    if (!m || m->s[CT_METRICS_LOSS_COUNT] == 0)
        return NAN;
    return m->s[CT_METRICS_LOSS_SUM] / m->s[CT_METRICS_LOSS_COUNT];
}

double ct_metrics_accuracy(const ct_metrics *m, int k)
{
    if (!m || m->s[CT_METRICS_ACC_COUNT] == 0)
        return NAN;
    for (int i = 0; i < m->ntopk; i++)
        if (m->topk[i] == k)
            return m->s[CT_METRICS_CORRECT + i] / m->s[CT_METRICS_ACC_COUNT];
    return NAN;
}

static double seconds(const ct_metrics *m)
{
    double s = m->s[CT_METRICS_SECONDS];
    if (m->t0_ns)
        s += (double)(ct__now_ns() - m->t0_ns) * 1e-9;
    return s;
}

double ct_metrics_samples_per_s(const ct_metrics *m)
{
    if (!m)
        return NAN;
    double sec = seconds(m), reps = m->s[CT_METRICS_REPLICAS];
    if (!(sec > 0) || !(reps > 0))
        return NAN;
    return m->s[CT_METRICS_SAMPLES] / (sec / reps);
}

void ct_metrics_export(const ct_metrics *m, double *sums)
{
    if (!m || !sums)
        return;
    memcpy(sums, m->s, sizeof m->s);
    sums[CT_METRICS_SECONDS] = seconds(m);
}

void ct_metrics_import(ct_metrics *m, const double *sums)
{
    if (!m || !sums)
        return;
    memcpy(m->s, sums, sizeof m->s);
    m->t0_ns = 0;
}

int ct_metrics_merge(ct_metrics *dst, const ct_metrics *src)
{
    if (!dst || !src)
        return ct__error(CT_EINVAL, "metrics_merge: NULL argument");
    if (dst->ntopk != src->ntopk ||
        memcmp(dst->topk, src->topk, (size_t)dst->ntopk * sizeof dst->topk[0]))
        return ct__error(CT_EINVAL, "metrics_merge: the two track different top-k lists");
    double a[CT_METRICS_NSUMS], b[CT_METRICS_NSUMS];
    ct_metrics_export(dst, a);
    ct_metrics_export(src, b);
    for (int i = 0; i < CT_METRICS_NSUMS; i++)
        a[i] += b[i];
    ct_metrics_import(dst, a);
    return 0;
}
