/* trainer/train/report.c — the head's view of a training job (internal.h, "the head's view of
 * the job"): the driver keeps its last step, epoch, loss, throughput, MFU, replicas alive,
 * retries by reason, live recoveries and heals (each with its newest in words), validation loss,
 * checkpoints and the steps since its last send (the dashboard's loss curve), and sends them to the
 * head (TrainReport, actor/runtime.h ct__report_train), which shows them as ct_train_* metrics and
 * in /api/jobs (head/metrics.c). At most one send per TR_REPORT_MS, fire-and-forget. Not here: the
 * run log's files and lines (progress.c), why a retry happened (trainer.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "actor/runtime.h"
#include "common/common.h"
#include "internal.h"

/* The histograms' upper bounds, seconds (+Inf implied). */
static const double hist_bounds[TR_HIST_BOUNDS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const char *hist_name[TR_HISTS] = {
    [TR_HIST_STEP] = "step",
    [TR_HIST_ALLREDUCE] = "allreduce",
    [TR_HIST_DATA_WAIT] = "data_wait",
    [TR_HIST_CHECKPOINT] = "checkpoint",
};

static void observe(tr_hist *h, double s)
{
    if (!isfinite(s) || s < 0)
        return;
    int i = 0;
    while (i < TR_HIST_BOUNDS && s > hist_bounds[i])
        i++;
    if (i < TR_HIST_BOUNDS)
        h->counts[i]++;
    h->count++;
    h->sum += s;
}

/* The slowest rank's value of v (world entries; NULL: none). */
static double slowest(const double *v, int world)
{
    double m = NAN;
    for (int i = 0; v && i < world; i++)
        if (isnan(m) || v[i] > m)
            m = v[i];
    return m;
}

void ct__report_init(tr_head_report *r)
{
    memset(r, 0, sizeof *r);
    r->loss = NAN;
    r->val_loss = NAN;
    r->mfu = -1;
    r->eta = NAN;
    r->last_batch = -1;
}

/* The ETA from a step record: the batches left to the last epoch's end at the recent pace (a
 * moving average of seconds per batch; a jump back, a retry's rewind, restarts the pace). */
static void update_eta(tr_head_report *r, const tr_step_record *rec)
{
    if (rec->batches <= 0 || r->epochs <= 0)
        return;
    int64_t at = rec->epoch * rec->batches + rec->batch;
    if (r->last_batch >= 0 && at > r->last_batch && rec->wall_time > r->last_wall) {
        double spb = (rec->wall_time - r->last_wall) / (double)(at - r->last_batch);
        r->spb = r->spb > 0 ? 0.9 * r->spb + 0.1 * spb : spb;
    }
    r->last_batch = at;
    r->last_wall = rec->wall_time;
    int64_t left = r->epochs * rec->batches - at;
    r->eta = r->spb > 0 ? (double)(left > 0 ? left : 0) * r->spb : NAN;
}

void ct__report_step(tr_head_report *r, const tr_step_record *rec, double mfu)
{
    r->step = rec->step;
    r->epoch = rec->epoch;
    r->loss = rec->loss;
    r->sps = isfinite(rec->samples_per_s) && rec->samples_per_s >= 0 ? rec->samples_per_s : 0;
    r->mfu = mfu;
    update_eta(r, rec);
    observe(&r->hist[TR_HIST_STEP], slowest(rec->step_s, rec->world));
    observe(&r->hist[TR_HIST_ALLREDUCE], slowest(rec->wait_s, rec->world));
    observe(&r->hist[TR_HIST_DATA_WAIT], slowest(rec->data_s, rec->world));
    if (r->npts == TR_POINTS) { /* the newest are kept */
        memmove(r->pt_step, r->pt_step + 1, (TR_POINTS - 1) * sizeof r->pt_step[0]);
        memmove(r->pt_loss, r->pt_loss + 1, (TR_POINTS - 1) * sizeof r->pt_loss[0]);
        memmove(r->pt_sps, r->pt_sps + 1, (TR_POINTS - 1) * sizeof r->pt_sps[0]);
        r->npts--;
    }
    r->pt_step[r->npts] = r->step;
    r->pt_loss[r->npts] = isinf(r->loss) ? NAN : r->loss;
    r->pt_sps[r->npts++] = r->sps;
    r->dirty = true;
}

void ct__report_epoch(tr_head_report *r, const trainer_stats *st)
{
    r->step = st->steps;
    r->epoch = st->epoch; /* the next epoch's (0-based) */
    r->loss = st->train_loss;
    if (isfinite(st->samples_per_s) && st->samples_per_s >= 0)
        r->sps = st->samples_per_s;
    if (st->val_samples > 0 && isfinite(st->val_loss))
        r->val_loss = st->val_loss;
    if (r->spb <= 0 && r->epochs > 0 && st->epoch_seconds > 0) /* no step records: by epochs */
        r->eta = (double)(r->epochs > st->epoch ? r->epochs - st->epoch : 0) * st->epoch_seconds;
    r->dirty = true;
}

void ct__report_val(tr_head_report *r, const trainer_stats *st)
{
    if (st->val_samples > 0 && isfinite(st->val_loss)) {
        r->val_loss = st->val_loss;
        r->dirty = true;
    }
}

void ct__report_checkpoint(tr_head_report *r, int64_t step, double write_s)
{
    observe(&r->hist[TR_HIST_CHECKPOINT], write_s);
    r->ckpts++;
    r->ckpt_step = step;
    r->dirty = true;
}

void ct__report_replicas(tr_head_report *r, int n)
{
    r->replicas = n;
    r->dirty = true;
}

/* One more of reason in rs. */
static void count_reason(tr_reasons *rs, const char *reason)
{
    int i = 0;
    while (i < rs->n && strcmp(rs->reason[i], reason))
        i++;
    if (i == rs->n) {
        if (rs->n == TR_REASONS)
            i = TR_REASONS - 1; /* the last slot sums what does not fit */
        else
            snprintf(rs->reason[rs->n++], sizeof rs->reason[0], "%s", reason);
    }
    rs->count[i]++;
}

void ct__report_retry(tr_head_report *r, const char *reason)
{
    count_reason(&r->retries, reason);
    r->dirty = true;
}

void ct__report_drain(tr_head_report *r, const char *reason)
{
    count_reason(&r->drains_by, reason);
    r->drains++;
    r->dirty = true;
}

/* fmt's text into line (cap bytes), printable ASCII only (the head refuses others). */
static void put_line(char *line, size_t cap, const char *fmt, va_list ap)
{
    vsnprintf(line, cap, fmt, ap);
    for (char *c = line; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            *c = '?';
}

void ct__report_live(tr_head_report *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put_line(r->live_what, sizeof r->live_what, fmt, ap);
    va_end(ap);
    r->live++;
    r->dirty = true;
}

void ct__report_heal(tr_head_report *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put_line(r->heal_what, sizeof r->heal_what, fmt, ap);
    va_end(ap);
    r->heals++;
    r->dirty = true;
}

void ct__report_done(tr_head_report *r)
{
    r->done = true;
    r->eta = 0;
    r->replicas = 0;
    r->dirty = true;
}

/* rs as the report's (borrowed while rs lives). */
static void reasons_out(const tr_reasons *rs, ct__train_reasons *out)
{
    out->n = rs->n;
    for (int i = 0; i < rs->n; i++) {
        out->reason[i] = rs->reason[i];
        out->count[i] = rs->count[i];
    }
}

void ct__report_send(tr_head_report *r, bool force)
{
    int64_t now = ct__now_ms();
    if (!r->dirty || (!force && now - r->sent_ms < TR_REPORT_MS))
        return;
    ct__train_report m = {.step = r->step,
                          .epoch = r->epoch,
                          .loss = r->loss,
                          .samples_per_s = r->sps,
                          .mfu_pct = r->mfu >= 0 ? r->mfu : NAN,
                          .replicas = r->replicas,
                          .done = r->done,
                          .val_loss = r->val_loss,
                          .eta_s = r->eta,
                          .epochs = r->epochs,
                          .drains = r->drains,
                          .live_recoveries = r->live,
                          .heals = r->heals,
                          .live_what = r->live_what,
                          .heal_what = r->heal_what,
                          .checkpoints = r->ckpts,
                          .checkpoint_step = r->ckpt_step,
                          .npoints = r->npts,
                          .point_step = r->pt_step,
                          .point_loss = r->pt_loss,
                          .point_sps = r->pt_sps,
                          .nhist = TR_HISTS};
    for (int i = 0; i < TR_HISTS; i++)
        m.hist[i] = (struct ct__train_hist){.name = hist_name[i],
                                            .nbounds = TR_HIST_BOUNDS,
                                            .bounds = hist_bounds,
                                            .counts = r->hist[i].counts,
                                            .count = r->hist[i].count,
                                            .sum = r->hist[i].sum};
    reasons_out(&r->retries, &m.retries);
    reasons_out(&r->drains_by, &m.drains_by);
    r->sent_ms = now;
    r->dirty = false;
    r->npts = 0;
    if (ct__report_train(&m) < 0 && !r->warned) {
        r->warned = true;
        CT_LOG(CT_LOG_WARN, "trainer", "cannot tell the head the job's progress: %s",
               ct_last_error());
    }
}
