/* trainer/train/driver_stats.c — the driver's statistics from what its replicas sent, shared
 * by the replica groups (trainer.c) and the pipelines (pipeline_train.c): a validation's sums as
 * the val_* stats and their delivery to on_validate, the epoch's stats so far, a segment's run-log
 * records (progress.c) and the head's epoch report (report.c), and a checkpoint's stats and score
 * (restore_best's attribute). */
#include <math.h>
#include <string.h>

#include "common/common.h"
#include "driver.h"

/* Makes a validation's sums the val_* fields of st. */
void ct__driver_set_val_stats(const trainer *t, trainer_stats *st, double loss, int64_t correct,
                              int64_t total, const tr_metrics *m)
{
    ct__trainer_metrics_out(m, st->val_metrics, &st->val_nmetrics);
    st->val_loss = total ? loss / (double)total : 0;
    st->val_accuracy = total ? (double)correct / (double)total : 0;
    /* token targets: the built-in steps' loss is the mean over a window's tokens, so val_loss
     * is the mean per-token loss (equal windows) and this its perplexity */
    st->val_perplexity = t->tokens && total ? exp(st->val_loss) : 0;
    st->val_samples = total;
}

/* The last epoch's validations into the stats, one by one, each handed to on_validate. */
int ct__driver_deliver_validations(trainer *t, const trainer_train_opts *o)
{
    for (int i = 0; i < t->nvals; i++) {
        const tr_val_result *v = &t->vals[i];
        ct__driver_set_val_stats(t, &t->stats, v->loss_sum, v->correct, v->total, &v->metrics);
        ct__report_val(&t->report, &t->stats); /* the head's, sent with the next report */
        t->stats.val_epoch = v->epoch;
        t->stats.val_step = v->step;
        int rc = o->on_validate ? o->on_validate(t, &t->stats, o->user) : 0;
        if (rc < 0)
            return ct__error(rc, "trainer_train: on_validate stopped training at step %lld",
                             (long long)v->step);
    }
    return 0;
}

/* The epoch's statistics so far (its segments' sums) into st. */
void ct__driver_epoch_stats(const trainer *t, trainer_stats *st)
{
    st->train_loss = t->acc.samples ? t->acc.loss / (double)t->acc.samples : 0;
    st->samples_per_s = t->acc.seconds > 0 ? (double)t->acc.samples / t->acc.seconds : 0;
    st->epoch_seconds = t->acc.seconds;
    st->weights_agree = t->acc.agree;
    ct__trainer_metrics_out(&t->acc.m, st->metrics, &st->nmetrics);
}

/* The run log of a segment that ended well: its last step records (in the KV before the
 * replies), a record per validation it ran (in order; in-line, after their steps), and at the
 * epoch's end the epoch's record (the stats are the epoch's then). */
void ct__driver_segment_records(trainer *t, bool epoch_done)
{
    if (epoch_done) {
        ct__report_epoch(&t->report, &t->stats);
        ct__report_send(&t->report, true);
    }
    if (!t->progress)
        return;
    ct__progress_poll(t->progress);
    for (int i = 0; i < t->nvals; i++) {
        const tr_val_result *v = &t->vals[i];
        trainer_stats st = t->stats;
        ct__driver_set_val_stats(t, &st, v->loss_sum, v->correct, v->total, &v->metrics);
        ct__progress_val(t->progress, &st, v->epoch, v->step);
    }
    if (epoch_done)
        ct__progress_epoch(t->progress, &t->stats);
}

/* The value of the score attribute in st; NaN when there is none (see trainer.h). */
static double score_of(const char *attr, const trainer_stats *st)
{
    if (!strcmp(attr, "train_loss"))
        return st->train_loss;
    if (!strcmp(attr, "val_loss") || !strcmp(attr, "val_accuracy") ||
        !strcmp(attr, "val_perplexity"))
        return st->val_samples == 0 ? NAN
               : attr[4] == 'l'     ? st->val_loss
               : attr[4] == 'a'     ? st->val_accuracy
                                    : st->val_perplexity;
    double v = trainer_stats_metric(st, false, attr, NAN);
    return isnan(v) ? trainer_stats_metric(st, true, attr, NAN) : v;
}

/* The stats a checkpoint is scored and indexed with (an epoch's end: t->stats; within an
 * epoch: the epoch's batches so far) into st; its score (NaN: none) returned. */
double ct__driver_ckpt_stats(const trainer *t, const char *attr, bool epoch_end, trainer_stats *st)
{
    *st = t->stats;
    if (!epoch_end)
        ct__driver_epoch_stats(t, st);
    return attr ? score_of(attr, st) : NAN;
}
