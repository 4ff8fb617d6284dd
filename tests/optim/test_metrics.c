/* tests/optim/test_metrics.c — running mean loss (batch-size weighted), top-k accuracy (values
 * worked out by hand), samples per second against the wall clock, export/import/merge of the
 * raw sums as replicas would allreduce them, reset, and argument errors. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ct/error.h"
#include "ct/metrics.h"
#include "tests/optim/ref.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* 4 samples, 4 classes. Ranks of the target: row0 1st, row1 2nd, row2 3rd, row3 tied 1st. */
static const float logits[16] = {
    5, 1, 0, 0, /* target 0: top-1 */
    3, 2, 1, 0, /* target 1: top-2 */
    0, 2, 1, 3, /* target 2: third largest */
    1, 1, 0, 0, /* target 1: tied with class 0: counts as a top-1 hit */
};
static const int64_t target[4] = {0, 1, 2, 1};

int main(void)
{
    /* topk_correct by hand */
    int64_t hits = -1;
    CHECK_EQ_INT(ct_metrics_topk_correct(logits, target, 4, 4, 1, &hits), 0);
    CHECK_EQ_INT(hits, 2);
    CHECK_EQ_INT(ct_metrics_topk_correct(logits, target, 4, 4, 2, &hits), 0);
    CHECK_EQ_INT(hits, 3);
    CHECK_EQ_INT(ct_metrics_topk_correct(logits, target, 4, 4, 3, &hits), 0);
    CHECK_EQ_INT(hits, 4);
    int64_t badt[4] = {0, 1, 4, 1};
    CHECK_EQ_INT(ct_metrics_topk_correct(logits, badt, 4, 4, 1, &hits), CT_EINVAL);
    CHECK_MSG("target[2] = 4");

    ct_metrics *m = ct_metrics_new(&(ct_metrics_opts){.topk = {1, 2}, .num_topk = 2});
    CHECK(m != NULL);
    CHECK(isnan(ct_metrics_mean_loss(m)));
    CHECK(isnan(ct_metrics_accuracy(m, 1)));
    /* two batches: sizes 4 and 2, mean losses 1.0 and 4.0 -> (4 + 8) / 6 = 2 */
    CHECK_EQ_INT(ct_metrics_update(m, 1.0, logits, target, 4, 4), 0);
    CHECK_EQ_INT(ct_metrics_update(m, 4.0, logits, target, 2, 4), 0); /* rows 0, 1 */
    check_close("mean loss", 0, ct_metrics_mean_loss(m), 2.0, 1e-15, 0);
    check_close("top1", 0, ct_metrics_accuracy(m, 1), 3.0 / 6, 1e-15, 0);
    check_close("top2", 0, ct_metrics_accuracy(m, 2), 5.0 / 6, 1e-15, 0);
    CHECK(isnan(ct_metrics_accuracy(m, 5))); /* not tracked */
    CHECK_EQ_INT(ct_metrics_add_logits(m, logits, badt, 4, 4), CT_EINVAL);
    CHECK_MSG("target[2]");
    check_close("top1 unchanged", 0, ct_metrics_accuracy(m, 1), 3.0 / 6, 1e-15, 0);
    CHECK_EQ_INT(ct_metrics_add_loss(m, 1.0, -1), CT_EINVAL);
    CHECK_MSG("batch_size");

    /* samples per second: 600 samples over >= 0.2 s, so at most ~3000/s */
    ct_metrics_reset(m);
    CHECK(isnan(ct_metrics_mean_loss(m)));
    int64_t t0 = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    ct_metrics_add_samples(m, 600);
    sleep_ms(200);
    double sps = ct_metrics_samples_per_s(m);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double el = (double)(ts.tv_sec * 1000000000LL + ts.tv_nsec - t0) * 1e-9;
    CHECK(sps <= 600 / 0.2 + 1e-6);
    CHECK(sps >= 600 / (el + 0.01)); /* clock started at reset, just before t0 */
    printf("samples/s %.1f over %.3f s\n", sps, el);

    /* replicas: a and b each export sums; "allreduce" them by adding; import into both */
    ct_metrics *a = ct_metrics_new(NULL), *b = ct_metrics_new(NULL);
    ct_metrics_update(a, 2.0, logits, target, 4, 4); /* top1 2/4, loss 2 x 4 */
    ct_metrics_update(b, 5.0, logits, target, 2, 4); /* top1 1/2, loss 5 x 2 */
    double sa[CT_METRICS_NSUMS], sb[CT_METRICS_NSUMS], sum[CT_METRICS_NSUMS];
    ct_metrics_export(a, sa);
    ct_metrics_export(b, sb);
    check_close("raw loss sum", 0, sa[CT_METRICS_LOSS_SUM], 8.0, 0, 0);
    check_close("raw count", 0, sa[CT_METRICS_LOSS_COUNT], 4.0, 0, 0);
    check_close("raw correct", 0, sa[CT_METRICS_CORRECT], 2.0, 0, 0);
    check_close("raw replicas", 0, sa[CT_METRICS_REPLICAS], 1.0, 0, 0);
    for (int i = 0; i < CT_METRICS_NSUMS; i++)
        sum[i] = sa[i] + sb[i];
    ct_metrics_import(a, sum);
    check_close("group loss", 0, ct_metrics_mean_loss(a), 18.0 / 6, 1e-15, 0);
    check_close("group top1", 0, ct_metrics_accuracy(a, 1), 3.0 / 6, 1e-15, 0);
    double want_sps = 6.0 / ((sa[CT_METRICS_SECONDS] + sb[CT_METRICS_SECONDS]) / 2);
    check_close("group samples/s (frozen)", 0, ct_metrics_samples_per_s(a), want_sps, 1e-12, 0);
    sleep_ms(5);
    check_close("frozen clock", 0, ct_metrics_samples_per_s(a), want_sps, 1e-12, 0);
    /* merge does the same object to object */
    ct_metrics_destroy(&a);
    a = ct_metrics_new(NULL);
    ct_metrics_update(a, 2.0, logits, target, 4, 4);
    CHECK_EQ_INT(ct_metrics_merge(a, b), 0);
    check_close("merged loss", 0, ct_metrics_mean_loss(a), 18.0 / 6, 1e-15, 0);
    check_close("merged top1", 0, ct_metrics_accuracy(a, 1), 3.0 / 6, 1e-15, 0);
    CHECK_EQ_INT(ct_metrics_merge(a, m), CT_EINVAL); /* different top-k lists */
    CHECK_MSG("top-k");

    CHECK(ct_metrics_new(&(ct_metrics_opts){.topk = {0}, .num_topk = 1}) == NULL);
    CHECK_MSG("topk[0]");
    CHECK(ct_metrics_new(&(ct_metrics_opts){.num_topk = 9}) == NULL);
    CHECK_MSG("num_topk");

    ct_metrics_destroy(&a);
    ct_metrics_destroy(&b);
    ct_metrics_destroy(&m);
    CHECK(m == NULL);
    ct_metrics_destroy(NULL);
    if (g_failures) {
        fprintf(stderr, "%d failure(s)\n", g_failures);
        return 1;
    }
    printf("all metrics tests passed\n");
    return 0;
}
