/* head/train.c — training jobs' progress as their drivers report it (TrainReport, sent by
 * trainer/train/report.c at most a few times a second): the last report per job, kept while
 * the job's driver lives and GONE_AFTER_MS after, for the metrics (metrics.c). No reply: a
 * report is fire-and-forget; a malformed one is refused (an Error naming the field).
 * Not here: rendering (metrics.c), the driver's side. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    else if (r->n_retries > TRAIN_REASONS)
        field = "train_report.retries";
    for (size_t i = 0; !field && i < r->n_retries; i++)
        if (!reason_ok(r->retries[i]->reason))
            field = "train_report.retries.reason";
    if (!field)
        return true;
    ct__head_refuse(h, rid, e, CT_EINVAL, field,
                    "%s: a job label is 1-63 printable bytes without quotes, a reason 1-31 of "
                    "[a-z_], at most %d reasons, numbers finite and not negative",
                    field, TRAIN_REASONS);
    return false;
}

void ct__head_on_train_report(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    const Ct__TrainReport *r = e->train_report;
    const char *label = r->job && *r->job ? r->job : e->sender;
    train_job *t = NULL;
    for (int i = 0; i < h->ntrain && !t; i++)
        if (!strcmp(h->train[i].label, label) && ct__token_eq(h->train[i].job, f->job))
            t = &h->train[i];
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
    }
    t->step = r->step;
    t->epoch = r->epoch;
    t->loss = r->loss;
    t->sps = r->samples_per_second;
    t->mfu = isnan(r->mfu_percent) ? -1 : r->mfu_percent;
    t->replicas = r->replicas_alive;
    t->done = r->done;
    t->ended_at = 0;
    t->nr = (int)r->n_retries;
    for (int i = 0; i < t->nr; i++) {
        snprintf(t->reason[i], sizeof t->reason[i], "%s", r->retries[i]->reason);
        t->count[i] = r->retries[i]->count;
    }
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
        if (h->train[i].ended_at && now - h->train[i].ended_at >= max_age)
            continue;
        if (k != i)
            h->train[k] = h->train[i];
        k++;
    }
    h->ntrain = k;
}
