/* ct/metrics.h — training metrics: running mean loss (weighted by batch size), top-k accuracy
 * from logits, samples per second (wall clock), with raw sums that replicas can allreduce.
 *
 * Not here: the allreduce itself (trainer/collective does it on the exported sums), reporting.
 *
 * Example (one replica, then the group):
 *     ct_metrics *m = ct_metrics_new(&(ct_metrics_opts){.topk = {1, 5}, .num_topk = 2});
 *     for (batch...) ct_metrics_update(m, loss, logits, y, N, C);  // (N,C) logits, (N) targets
 *     double s[CT_METRICS_NSUMS];
 *     ct_metrics_export(m, s);  allreduce_sum(s, CT_METRICS_NSUMS);  ct_metrics_import(m, s);
 *     printf("%g %g %g\n", ct_metrics_mean_loss(m), ct_metrics_accuracy(m, 1),
 *            ct_metrics_samples_per_s(m));
 *
 * Ownership: ct_metrics_new returns an owned object; arrays passed in are borrowed for the call.
 * Threads: a ct_metrics is not thread-safe; ct_metrics_topk_correct is. */
#ifndef CT_METRICS_H
#define CT_METRICS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CT_METRICS_MAX_TOPK 4

/* Which k to track (default: top-1 only). Each k >= 1, at most CT_METRICS_MAX_TOPK of them. */
typedef struct ct_metrics_opts {
    int topk[CT_METRICS_MAX_TOPK];
    int num_topk;
} ct_metrics_opts;

/* Layout of the raw sums (doubles; summing them over replicas gives the group's sums). */
enum {
    CT_METRICS_LOSS_SUM = 0,   /* sum of batch mean loss * batch size */
    CT_METRICS_LOSS_COUNT = 1, /* samples behind LOSS_SUM */
    CT_METRICS_ACC_COUNT = 2,  /* samples behind the correct counts */
    CT_METRICS_CORRECT = 3,    /* CORRECT + i: samples correct at topk[i], i < MAX_TOPK */
    CT_METRICS_SAMPLES = 3 + CT_METRICS_MAX_TOPK, /* samples counted for throughput */
    CT_METRICS_SECONDS,                           /* wall-clock seconds (per replica, summed) */
    CT_METRICS_REPLICAS,                          /* 1 per replica */
    CT_METRICS_NSUMS
};

typedef struct ct_metrics ct_metrics;

/* NULL on bad options (CT_EINVAL naming the field in ct_last_error()) or out of memory. */
ct_metrics *ct_metrics_new(const ct_metrics_opts *opts);
/* Accepts NULL; nulls *m. */
void ct_metrics_destroy(ct_metrics **m);

/* Zeroes every sum and restarts the throughput clock. */
void ct_metrics_reset(ct_metrics *m);

/* Adds a batch's mean loss, weighted by its size. CT_EINVAL if batch_size < 0. */
int ct_metrics_add_loss(ct_metrics *m, double mean_loss, int64_t batch_size);
/* Adds top-k hits of logits (N,C) against targets (N) for every tracked k. A target out of
 * [0, C) is CT_EINVAL naming its index. */
int ct_metrics_add_logits(ct_metrics *m, const float *logits, const int64_t *target, int64_t n,
                          int64_t c);
/* Counts n samples towards samples per second. */
int ct_metrics_add_samples(ct_metrics *m, int64_t n);
/* All three for one batch of n samples (logits/target may be NULL: loss and samples only). */
int ct_metrics_update(ct_metrics *m, double mean_loss, const float *logits, const int64_t *target,
                      int64_t n, int64_t c);

/* Results; NaN when nothing was counted (or k is not tracked). */
double ct_metrics_mean_loss(const ct_metrics *m);
double ct_metrics_accuracy(const ct_metrics *m, int k);
/* Throughput: samples / (seconds / replicas), i.e. the group's samples over its mean wall
 * time. The clock runs from new/reset until an import freezes it. */
double ct_metrics_samples_per_s(const ct_metrics *m);

/* Copies the raw sums (seconds measured now) into sums[CT_METRICS_NSUMS]. */
void ct_metrics_export(const ct_metrics *m, double *sums);
/* Replaces the sums with sums[CT_METRICS_NSUMS] (e.g. after an allreduce); the clock stops at
 * the imported seconds until the next reset. */
void ct_metrics_import(ct_metrics *m, const double *sums);
/* Adds src's sums into dst (dst's clock stops, as after an import). Both must track the same
 * k list (CT_EINVAL otherwise). */
int ct_metrics_merge(ct_metrics *dst, const ct_metrics *src);

/* Counts rows of logits (N,C) whose target's logit is among the k largest: fewer than k
 * classes have a strictly larger logit (ties count as hits). Into *correct. */
int ct_metrics_topk_correct(const float *logits, const int64_t *target, int64_t n, int64_t c, int k,
                            int64_t *correct);

#ifdef __cplusplus
}
#endif
#endif
