/* head/train.c — training jobs' progress as their drivers report it (TrainReport, sent by
 * trainer/train/report.c at most a few times a second): the last report per job, its loss
 * curve (the newest TRAIN_POINTS steps) and newest checkpoints, kept while the job's driver
 * lives and GONE_AFTER_MS after, for the metrics and the dashboard (metrics.c); a retry
 * counter that rose becomes an event (events.c). No reply: a
 * report is fire-and-forget; a malformed one is refused (an Error naming the field).
 * Not here: rendering (metrics.c), the driver's side. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "head/head_internal.h"

/* A label fit for a metric label and JSON without surprises: printable ASCII but quotes and
 * backslashes, 1..63 bytes. */
static bool label_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\')
            return false;
    return true;
}

static bool reason_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 31)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '_'))
            return false;
    return true;
}

/* A line of words from the driver (TrainReport.live_recovery_what, heal_what): printable
 * ASCII, 0..159 bytes. */
static bool line_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n > 159)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return false;
    return true;
}

static int64_t wall_ms(void)
{
    struct timespec w;
    clock_gettime(CLOCK_REALTIME, &w);
    return (int64_t)w.tv_sec * 1000 + w.tv_nsec / 1000000;
}

/* Counts by reason that rose since t's last report (was: t's; now: the report's, n of them):
 * one event of kind per count (8 at most at once), with its reason; after: words that follow. */
static void note_reasons(head *h, const train_job *t, const char *kind, const train_reasons *was,
                         Ct__TrainRetries *const *now, size_t n, int64_t step, const char *after)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t before = 0;
        for (int k = 0; k < was->n; k++)
            if (!strcmp(was->reason[k], now[i]->reason))
                before = was->count[k];
        for (uint64_t c = before; c < now[i]->count && c < before + 8; c++)
            ct__head_note(h, kind, t->label, "%s (%s %llu for that reason; step %lld)%s",
                          now[i]->reason, !strcmp(kind, "retry") ? "retry" : "drain",
                          (unsigned long long)c + 1, (long long)step, after);
    }
}

/* A report's counts by reason into k (checked: at most TRAIN_REASONS). */
static void keep_reasons(train_reasons *k, Ct__TrainRetries *const *l, size_t n)
{
    k->n = (int)n;
    for (int i = 0; i < k->n; i++) {
        snprintf(k->reason[i], sizeof k->reason[i], "%s", l[i]->reason);
        k->count[i] = l[i]->count;
    }
}

/* The field of counts by reason l (n of them) that is malformed, or NULL; sum: their total. */
static const char *reasons_bad(Ct__TrainRetries *const *l, size_t n, const char *field,
                               const char *reason_field, uint64_t *sum)
{
    *sum = 0;
    if (n > TRAIN_REASONS)
        return field;
    for (size_t i = 0; i < n; i++) {
        if (!reason_ok(l[i]->reason))
            return reason_field;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(l[k]->reason, l[i]->reason))
                return reason_field;
        *sum += l[i]->count;
    }
    return NULL;
}

/* A counter that rose since t's last report (before: its value then; what: the newest one in
 * the driver's words): one event, which says how many when more came at once. */
static void note_count(head *h, const train_job *t, const char *kind, uint64_t before, uint64_t now,
                       const char *what)
{
    if (now <= before)
        return;
    const char *w = what && *what ? what : "(no words given)";
    if (now - before == 1)
        ct__head_note(h, kind, t->label, "%s", w);
    else
        ct__head_note(h, kind, t->label, "%s (the newest of %llu since the last report)", w,
                      (unsigned long long)(now - before));
}

/* The report's steps onto t's loss curve (a ring; steps not after the newest kept are
 * dropped, but for a step back after a retry, which restarts the curve from there). */
static void add_points(train_job *t, const Ct__TrainReport *r)
{
    if (!r->n_points)
        return;
    if (!t->pts && !(t->pts = calloc(TRAIN_POINTS, sizeof *t->pts)))
        return;
    for (size_t i = 0; i < r->n_points; i++) {
        const Ct__TrainPoint *p = r->points[i];
        if (t->npts) {
            const train_point *last = &t->pts[(t->pts_next + TRAIN_POINTS - 1) % TRAIN_POINTS];
            if (p->step == last->step)
                continue;
            if (p->step < last->step) /* rewound to a checkpoint: drop the steps after it */
                while (t->npts &&
                       t->pts[(t->pts_next + TRAIN_POINTS - 1) % TRAIN_POINTS].step >= p->step) {
                    t->pts_next = (t->pts_next + TRAIN_POINTS - 1) % TRAIN_POINTS;
                    t->npts--;
                }
        }
        t->pts[t->pts_next] = (train_point){p->step, p->loss, p->samples_per_second};
        t->pts_next = (t->pts_next + 1) % TRAIN_POINTS;
        if (t->npts < TRAIN_POINTS)
            t->npts++;
    }
}

bool ct__head_check_train_report(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    const Ct__TrainReport *r = e->train_report;
    const char *label = r->job && *r->job ? r->job : e->sender;
    const char *field = NULL;
    if (!label_ok(label))
        field = r->job && *r->job ? "train_report.job" : "sender";
    else if (r->step < 0 || r->epoch < 0)
        field = r->step < 0 ? "train_report.step" : "train_report.epoch";
    else if (!isfinite(r->samples_per_second) || r->samples_per_second < 0)
        field = "train_report.samples_per_second";
    else if (isinf(r->loss))
        field = "train_report.loss";
    else if (isinf(r->mfu_percent))
        field = "train_report.mfu_percent";
    else if (r->replicas_alive < 0 || r->replicas_alive > 1000000)
        field = "train_report.replicas_alive";
    else if (isinf(r->val_loss))
        field = "train_report.val_loss";
    else if (isinf(r->eta_seconds))
        field = "train_report.eta_seconds";
    else if (r->epochs < 0)
        field = "train_report.epochs";
    else if (r->checkpoints < 0 || r->checkpoint_step < 0)
        field = r->checkpoints < 0 ? "train_report.checkpoints" : "train_report.checkpoint_step";
    else if (!line_ok(r->live_recovery_what))
        field = "train_report.live_recovery_what";
    else if (!line_ok(r->heal_what))
        field = "train_report.heal_what";
    else if (r->n_points > TRAIN_REPORT_POINTS)
        field = "train_report.points";
    else if (r->n_histograms > TRAIN_HISTS)
        field = "train_report.histograms";
    for (size_t i = 0; !field && i < r->n_histograms; i++) {
        const Ct__TrainHistogram *g = r->histograms[i];
        bool ok = reason_ok(g->name) && g->n_bounds <= TRAIN_HIST_BOUNDS &&
                  g->n_counts == g->n_bounds && isfinite(g->sum) && g->sum >= 0;
        uint64_t below = 0;
        for (size_t k = 0; ok && k < g->n_bounds; k++) {
            ok = isfinite(g->bounds[k]) && (k == 0 || g->bounds[k] > g->bounds[k - 1]) &&
                 g->counts[k] <= g->count - below;
            below += ok ? g->counts[k] : 0;
        }
        for (size_t k = 0; ok && k < i; k++)
            ok = strcmp(r->histograms[k]->name, g->name) != 0;
        if (!ok)
            field = "train_report.histograms";
    }
    uint64_t sum = 0;
    if (!field)
        field = reasons_bad(r->retries, r->n_retries, "train_report.retries",
                            "train_report.retries.reason", &sum);
    if (!field)
        field =
            reasons_bad(r->drains_by_reason, r->n_drains_by_reason, "train_report.drains_by_reason",
                        "train_report.drains_by_reason.reason", &sum);
    /* a driver that names no reasons (before protocol 1.6) is taken at its total */
    if (!field && r->n_drains_by_reason && sum != r->drains)
        field = "train_report.drains_by_reason";
    for (size_t i = 0; !field && i < r->n_points; i++) {
        const Ct__TrainPoint *p = r->points[i];
        if (p->step < 0 || isinf(p->loss) || !isfinite(p->samples_per_second) ||
            p->samples_per_second < 0)
            field = "train_report.points";
    }
    if (!field)
        return true;
    ct__head_refuse(h, rid, e, CT_EINVAL, field,
                    "%s: a job label is 1-63 printable bytes without quotes, a reason 1-31 of "
                    "[a-z_], at most %d distinct reasons (the drains' summing to drains) and %d "
                    "points, numbers finite and not negative, "
                    "a live recovery's or heal's words printable ASCII of at most 159 bytes; "
                    "at most %d histograms, each a distinct [a-z_] name, at most %d ascending "
                    "bounds, a count per bound, their sum at most the count",
                    field, TRAIN_REASONS, TRAIN_REPORT_POINTS, TRAIN_HISTS, TRAIN_HIST_BOUNDS);
    return false;
}

/* Whether a new job may take label: no other job's report holds it (its metric series would be
 * two of one name and labels, which makes /metrics invalid for every reader), or the job that
 * held it ended, and is forgotten now. Refused, naming the field, when a running job holds it. */
static bool label_free(head *h, const ct__rid *rid, const Ct__Envelope *e, const char *label)
{
    int i = 0;
    while (i < h->ntrain && strcmp(h->train[i].label, label))
        i++;
    if (i == h->ntrain)
        return true;
    if (!h->train[i].ended_at) {
        const Ct__TrainReport *r = e->train_report;
        const char *field = r->job && *r->job ? "train_report.job" : "sender";
        ct__head_refuse(h, rid, e, CT_EEXIST, field,
                        "%s: %s is the label of another running job's training (one label, one "
                        "job's metrics)",
                        field, label);
        return false;
    }
    free(h->train[i].pts);
    memmove(&h->train[i], &h->train[i + 1], (size_t)(h->ntrain - i - 1) * sizeof h->train[0]);
    h->ntrain--;
    return true;
}

void ct__head_on_train_report(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    const Ct__TrainReport *r = e->train_report;
    const char *label = r->job && *r->job ? r->job : e->sender;
    train_job *t = NULL;
    bool fresh = false; /* a job new to this head: its retries and drains are from before */
    for (int i = 0; i < h->ntrain && !t; i++)
        if (!strcmp(h->train[i].label, label) && ct__token_eq(h->train[i].job, f->job))
            t = &h->train[i];
    if (!t && !label_free(h, rid, e, label))
        return;
    if (!t) {
        if (h->ntrain == MAX_TRAIN) {
            ct__head_refuse(h, rid, e, CT_ENOSPC, "train_report",
                            "train_report: the head keeps %d training jobs, its limit", MAX_TRAIN);
            return;
        }
        if (!h->train && !(h->train = calloc(MAX_TRAIN, sizeof *h->train))) {
            ct__head_refuse(h, rid, e, CT_ENOMEM, "train_report", "train_report: out of memory");
            return;
        }
        t = &h->train[h->ntrain++];
        memset(t, 0, sizeof *t);
        snprintf(t->job, sizeof t->job, "%s", f->job);
        snprintf(t->label, sizeof t->label, "%s", label);
        t->val_loss = NAN;
        fresh = true;
    } else {
        note_reasons(h, t, "retry", &t->retries, r->retries, r->n_retries, r->step, "");
        note_reasons(h, t, "train_drain", &t->drains_by, r->drains_by_reason, r->n_drains_by_reason,
                     r->step, ": a group ended at a checkpoint, its node drained (told to stop)");
    }
    add_points(t, r);
    if (r->checkpoints > t->ckpts) {
        if (t->nck == TRAIN_CKPTS) {
            memmove(t->ck_step, t->ck_step + 1, (TRAIN_CKPTS - 1) * sizeof t->ck_step[0]);
            memmove(t->ck_ms, t->ck_ms + 1, (TRAIN_CKPTS - 1) * sizeof t->ck_ms[0]);
            t->nck--;
        }
        t->ck_step[t->nck] = r->checkpoint_step;
        t->ck_ms[t->nck++] = wall_ms();
    }
    t->ckpts = r->checkpoints;
    t->nh = (int)r->n_histograms;
    for (int i = 0; i < t->nh; i++) {
        const Ct__TrainHistogram *g = r->histograms[i];
        snprintf(t->hist[i].name, sizeof t->hist[i].name, "%s", g->name);
        t->hist[i].nb = (int)g->n_bounds;
        if (g->n_bounds) /* (memcpy of NULL, 0 is undefined) */
            memcpy(t->hist[i].bound, g->bounds, g->n_bounds * sizeof g->bounds[0]);
        if (g->n_counts)
            memcpy(t->hist[i].counts, g->counts, g->n_counts * sizeof g->counts[0]);
        t->hist[i].count = g->count;
        t->hist[i].sum = g->sum;
    }
    t->val_loss = r->val_loss;
    t->eta = r->eta_seconds >= 0 ? r->eta_seconds : NAN;
    t->epochs = r->epochs;
    t->drains = r->drains;
    keep_reasons(&t->drains_by, r->drains_by_reason, r->n_drains_by_reason);
    if (!fresh) {
        note_count(h, t, "live_recovery", t->live, r->live_recoveries, r->live_recovery_what);
        note_count(h, t, "heal", t->heals, r->heals, r->heal_what);
    }
    t->live = r->live_recoveries;
    t->heals = r->heals;
    t->step = r->step;
    t->epoch = r->epoch;
    t->loss = r->loss;
    t->sps = r->samples_per_second;
    t->mfu = isnan(r->mfu_percent) ? -1 : r->mfu_percent;
    t->replicas = r->replicas_alive;
    t->done = r->done;
    t->ended_at = 0;
    keep_reasons(&t->retries, r->retries, r->n_retries);
}

void ct__head_train_job_gone(head *h, const char *job)
{
    for (int i = 0; i < h->ntrain; i++)
        if (!h->train[i].ended_at && ct__token_eq(h->train[i].job, job)) {
            h->train[i].ended_at = ct__now_ms();
            h->train[i].replicas = 0;
        }
}

void ct__head_train_forget(head *h, int64_t max_age)
{
    int64_t now = ct__now_ms();
    int k = 0;
    for (int i = 0; i < h->ntrain; i++) {
        if (h->train[i].ended_at && now - h->train[i].ended_at >= max_age) {
            free(h->train[i].pts);
            continue;
        }
        if (k != i)
            h->train[k] = h->train[i];
        k++;
    }
    h->ntrain = k;
}
