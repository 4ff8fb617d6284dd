/* trainer/train/progress.c — the run log of the driver (trainer.h, "Seeing a run"): the merged
 * per-step records (records.c), the epochs' and validations' stats, written as metrics.jsonl
 * and a TensorBoard event file (trainer/metrics/tfevents.c) in trainer_train_opts.log_dir, and
 * shown as a live progress line on a terminal or a plain line every log_every_steps steps.
 * Not here: how the records travel (records.c); when the driver calls in (trainer.c). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "internal.h"
#include "trainer/metrics/tfevents.h"

#define TAG_MAX (32 + TRAINER_METRIC_NAME_MAX)

/* Tags and values of one TensorBoard event. */
typedef struct scalars {
    int n, cap;
    char (*tag)[TAG_MAX];
    const char **tags; /* tags[i] = tag[i], as the writer takes them */
    double *val;
} scalars;

struct tr_progress {
    char *log_dir; /* NULL: no files */
    FILE *jsonl;
    ct_tfevents *tb;
    bool active;   /* inside trainer_train: lines may be printed */
    bool live;     /* the live line */
    int every;     /* a plain line every that many steps (without the live line) */
    int report_ms; /* for the replicas */
    int64_t epochs;
    char group[64];
    tr_reader *rd;
    scalars sc;
    /* what the lines show */
    tr_step_record last; /* scalars only (its arrays are the reader's) */
    bool fresh;          /* a record came since the line was drawn */
    bool line_shown;     /* a live line is on the terminal */
    int64_t prev_batch, prev_epoch, next_plain;
    double spb, rate;        /* moving averages: seconds per batch (slowest rank), samples/s */
    double flops_per_sample; /* MFU when > 0 (trainer_train_opts) and the replicas know their
                                peaks */
    tr_head_report *report;  /* the head's view (report.c) gets every record too; NULL: none */
};

/* model FLOPs utilization in percent at a group rate of samples/s, against the sum of the
 * replicas' own device peaks (each replica's backend: its CPU cores or its GPU, in the run's
 * precision); < 0 when not asked for, or a peak is unknown */
static double mfu_pct(const tr_progress *p, double samples_per_s, double peak_flops)
{
    if (!(p->flops_per_sample > 0 && peak_flops > 0))
        return -1;
    return 100.0 * samples_per_s * p->flops_per_sample / peak_flops;
}

static double now_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the files ---- */

static void sc_clear(scalars *sc)
{
    sc->n = 0;
}

static void sc_add(scalars *sc, double v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sc_add(scalars *sc, double v, const char *fmt, ...)
{
    if (sc->n == sc->cap) {
        int cap = sc->cap ? 2 * sc->cap : 32;
        char(*tag)[TAG_MAX] = realloc(sc->tag, (size_t)cap * sizeof *tag);
        if (tag)
            sc->tag = tag;
        const char **tags = realloc(sc->tags, (size_t)cap * sizeof *tags);
        if (tags)
            sc->tags = tags;
        double *val = realloc(sc->val, (size_t)cap * sizeof *val);
        if (val)
            sc->val = val;
        if (!tag || !tags || !val)
            return; /* out of memory: this scalar is left out */
        sc->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sc->tag[sc->n], TAG_MAX, fmt, ap);
    va_end(ap);
    sc->val[sc->n++] = v;
}

static void sc_write(tr_progress *p, double wall, int64_t step)
{
    if (!p->tb || !p->sc.n)
        return;
    for (int i = 0; i < p->sc.n; i++)
        p->sc.tags[i] = p->sc.tag[i];
    if (ct__tfevents_scalars(p->tb, wall, step, p->sc.tags, p->sc.val, p->sc.n) < 0)
        CT_LOG(CT_LOG_WARN, "trainer", "run log: %s", ct_last_error());
}

/* ,"key":v; null for what JSON cannot hold (NaN, infinities) */
static void jnum(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ",\"%s\":%.17g", key, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

/* :v after a key printed by the caller; null for what JSON cannot hold */
static void jvalue(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, ":%.17g", v);
    else
        fputs(":null", f);
}

/* ,"metrics":{"name":v,...}; names need no escaping (step.c allows no quotes or backslashes) */
static void jmetrics(FILE *f, const trainer_metric *m, int n)
{
    fputs(",\"metrics\":{", f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\"%s\"", i ? "," : "", m[i].name);
        jvalue(f, m[i].value);
    }
    fputc('}', f);
}

static void write_step(tr_progress *p, const tr_step_record *r)
{
    FILE *f = p->jsonl;
    if (f) {
        fprintf(
            f, "{\"type\":\"step\",\"epoch\":%lld,\"batch\":%lld,\"batches\":%lld,\"step\":%lld",
            (long long)r->epoch, (long long)r->batch, (long long)r->batches, (long long)r->step);
        jnum(f, "wall_time", r->wall_time);
        jnum(f, "loss", r->loss);
        fprintf(f, ",\"samples\":%lld", (long long)r->samples);
        jnum(f, "lr", r->lr);
        if (r->has_grad_norm)
            jnum(f, "grad_norm", r->grad_norm);
        jnum(f, "samples_per_s", r->samples_per_s);
        if (mfu_pct(p, r->samples_per_s, r->peak_flops) >= 0) {
            jnum(f, "mfu_pct", mfu_pct(p, r->samples_per_s, r->peak_flops));
            jnum(f, "peak_flops", r->peak_flops);
        }
        for (int k = 0; k < 2; k++) {
            const double *v = k ? r->wait_s : r->step_s;
            fprintf(f, ",\"%s\":[", k ? "wait_s" : "step_s");
            for (int i = 0; i < r->world; i++)
                fprintf(f, "%s%.17g", i ? "," : "", v[i]);
            fputc(']', f);
        }
        jmetrics(f, r->metrics, r->nmetrics);
        fputs("}\n", f);
    }
    scalars *sc = &p->sc;
    sc_clear(sc);
    sc_add(sc, r->loss, "train/loss");
    sc_add(sc, r->lr, "train/lr");
    if (r->has_grad_norm)
        sc_add(sc, r->grad_norm, "train/grad_norm");
    sc_add(sc, r->samples_per_s, "train/samples_per_s");
    if (mfu_pct(p, r->samples_per_s, r->peak_flops) >= 0)
        sc_add(sc, mfu_pct(p, r->samples_per_s, r->peak_flops), "train/mfu_pct");
    for (int i = 0; i < r->world; i++) {
        sc_add(sc, r->step_s[i], "train/step_s/rank%d", i);
        sc_add(sc, r->wait_s[i], "train/wait_s/rank%d", i);
    }
    for (int i = 0; i < r->nmetrics; i++)
        sc_add(sc, r->metrics[i].value, "train/metrics/%s", r->metrics[i].name);
    sc_write(p, r->wall_time, r->step);
}

static void flush_files(tr_progress *p)
{
    if (p->jsonl)
        fflush(p->jsonl);
    if (p->tb)
        ct__tfevents_flush(p->tb);
}

/* ---- the lines ---- */

static void fmt_eta(char *buf, size_t cap, double s)
{
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, cap, "?");
        return;
    }
    long long t = (long long)(s + 0.5);
    snprintf(buf, cap, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
}

/* "epoch 2/3 step 120/469 | 1234 samples/s | MFU 31.2% | ETA 0:01:12 | loss 0.4321" of the
 * last record (MFU when asked for) */
static void status_line(const tr_progress *p, char *buf, size_t cap)
{
    const tr_step_record *r = &p->last;
    double left =
        (double)(r->batches - r->batch) + (double)(p->epochs - r->epoch - 1) * (double)r->batches;
    char eta[32], mfu[32] = "";
    fmt_eta(eta, sizeof eta, left * p->spb);
    if (mfu_pct(p, p->rate, r->peak_flops) >= 0)
        snprintf(mfu, sizeof mfu, " | MFU %.1f%%", mfu_pct(p, p->rate, r->peak_flops));
    snprintf(buf, cap, "epoch %lld/%lld step %lld/%lld | %.0f samples/s%s | ETA %s | loss %.4f",
             (long long)r->epoch + 1, (long long)p->epochs, (long long)r->batch,
             (long long)r->batches, p->rate, mfu, eta, r->loss);
}

static void clear_line(tr_progress *p)
{
    if (p->line_shown)
        fputs("\r\033[K", stderr);
    p->line_shown = false;
}

static void on_record(const tr_step_record *r, void *user)
{
    tr_progress *p = user;
    write_step(p, r);
    if (p->report)
        ct__report_step(p->report, r, mfu_pct(p, r->samples_per_s, r->peak_flops));
    int64_t covered = r->epoch == p->prev_epoch ? r->batch - p->prev_batch : r->batch;
    double slowest = 0;
    for (int i = 0; i < r->world; i++)
        slowest = r->step_s[i] > slowest ? r->step_s[i] : slowest;
    if (covered > 0) { /* moving averages over about the last 10 steps */
        double spb = slowest / (double)covered;
        p->spb = p->spb > 0 ? 0.9 * p->spb + 0.1 * spb : spb;
        p->rate = p->rate > 0 ? 0.9 * p->rate + 0.1 * r->samples_per_s : r->samples_per_s;
    }
    p->prev_epoch = r->epoch;
    p->prev_batch = r->batch;
    p->last = *r;
    p->fresh = true;
    if (p->next_plain < 0) /* the first record: the next multiple of every from here */
        p->next_plain = p->every > 0 ? (r->step + p->every - 1) / p->every * p->every : 0;
    if (p->active && !p->live && p->every > 0 && r->step >= p->next_plain) {
        char line[256];
        status_line(p, line, sizeof line);
        fprintf(stderr, "trainer: %s | lr %.4g\n", line, r->lr);
        p->next_plain = (r->step / p->every + 1) * p->every;
    }
}

/* ---- the driver's calls ---- */

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return ct__error(CT_EINVAL, "trainer_train: log_dir longer than %zu bytes", sizeof buf - 1);
    for (char *s = buf + 1;; s++) {
        char c = *s;
        if (c != '/' && c != 0)
            continue;
        *s = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return ct__error(CT_EIO, "trainer_train: log_dir: cannot create %s: %s", buf,
                             strerror(errno));
        *s = c;
        if (!c)
            return 0;
    }
}

void ct__progress_free(tr_progress **pp)
{
    if (!pp || !*pp)
        return;
    tr_progress *p = *pp;
    ct__progress_stop(p);
    ct__reader_free(&p->rd);
    if (p->jsonl)
        fclose(p->jsonl);
    ct__tfevents_close(&p->tb);
    free(p->sc.tag);
    free(p->sc.tags);
    free(p->sc.val);
    free(p->log_dir);
    free(p);
    *pp = NULL;
}

static int open_files(tr_progress *p, const char *dir)
{
    char path[4200];
    int rc;
    if ((rc = make_dirs(dir)) < 0)
        return rc;
    if (!(p->log_dir = strdup(dir)))
        return ct__error(CT_ENOMEM, "trainer_train: out of memory");
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (!(p->jsonl = fopen(path, "a")))
        return ct__error(CT_EIO, "trainer_train: log_dir: cannot open %s: %s", path,
                         strerror(errno));
    if ((rc = ct__tfevents_open(dir, now_wall(), &p->tb)) < 0)
        return ct__trainer_error_prefix(rc, "trainer_train: log_dir");
    return 0;
}

int ct__progress_start(tr_progress **pp, const trainer_train_opts *o, int64_t epochs)
{
    if (o->progress < TRAINER_PROGRESS_AUTO || o->progress > TRAINER_PROGRESS_OFF)
        return ct__error(CT_EINVAL,
                         "trainer_train: progress %d is not TRAINER_PROGRESS_AUTO, _ON or _OFF",
                         o->progress);
    if (o->log_every_steps < 0 || o->report_ms < 0 || !(o->flops_per_sample >= 0))
        return ct__error(CT_EINVAL, "trainer_train: %s is negative or not a number",
                         o->log_every_steps < 0 ? "log_every_steps"
                         : o->report_ms < 0     ? "report_ms"
                                                : "flops_per_sample");
    bool live = o->progress == TRAINER_PROGRESS_ON ||
                (o->progress == TRAINER_PROGRESS_AUTO && isatty(STDERR_FILENO));
    const char *dir = o->log_dir && *o->log_dir ? o->log_dir : NULL;
    tr_progress *p = *pp;
    /* the files stay open only for the same log_dir */
    if (p && !(dir && p->log_dir && !strcmp(dir, p->log_dir)))
        ct__progress_free(pp);
    if (!dir && !live && o->log_every_steps == 0)
        return 0; /* nothing to show: the replicas send nothing either */
    if (!*pp) {
        if (!(p = calloc(1, sizeof *p)))
            return ct__error(CT_ENOMEM, "trainer_train: out of memory");
        int rc = dir ? open_files(p, dir) : 0;
        if (rc < 0) {
            ct__progress_free(&p);
            return rc;
        }
        *pp = p;
    }
    p = *pp;
    p->active = true;
    p->live = live;
    p->every = o->log_every_steps;
    p->next_plain = -1;
    p->report_ms = o->report_ms > 0 ? o->report_ms : 100;
    p->epochs = epochs;
    p->flops_per_sample = o->flops_per_sample;
    return 0;
}

void ct__progress_stop(tr_progress *p)
{
    if (!p)
        return;
    ct__progress_poll(p);
    clear_line(p);
    p->active = false;
}

void ct__progress_set_report(tr_progress *p, tr_head_report *r)
{
    if (p)
        p->report = r;
}

int ct__progress_report_ms(const tr_progress *p)
{
    return p ? p->report_ms : 0;
}

void ct__progress_segment_start(tr_progress *p, const char *group, int world, int64_t epoch,
                                int64_t start_batch)
{
    if (!p)
        return;
    if (!p->rd || strcmp(p->group, group)) { /* a new group */
        ct__reader_free(&p->rd);
        snprintf(p->group, sizeof p->group, "%s", group);
        if (!(p->rd = ct__reader_new(group, world, on_record, p)))
            CT_LOG(CT_LOG_WARN, "trainer", "run log: out of memory: no step records");
    }
    ct__reader_segment(p->rd, epoch, start_batch);
    /* the next record covers the batches from here (a resumed epoch's first one too) */
    p->prev_epoch = epoch;
    p->prev_batch = start_batch;
}

void ct__progress_poll(tr_progress *p)
{
    if (!p || !p->rd)
        return;
    ct__reader_poll(p->rd);
    if (p->report)
        ct__report_send(p->report, false);
    if (!p->fresh)
        return;
    p->fresh = false;
    flush_files(p);
    if (p->active && p->live) {
        char line[256];
        status_line(p, line, sizeof line);
        fprintf(stderr, "\r\033[K%s", line);
        fflush(stderr);
        p->line_shown = true;
    }
}

void ct__progress_epoch(tr_progress *p, const trainer_stats *st)
{
    if (!p)
        return;
    ct__progress_poll(p); /* the epoch's last records: in the KV before the replicas replied */
    double wall = now_wall();
    if (p->jsonl) {
        FILE *f = p->jsonl;
        fprintf(f, "{\"type\":\"epoch\",\"epoch\":%lld,\"step\":%lld", (long long)st->epoch - 1,
                (long long)st->steps);
        jnum(f, "wall_time", wall);
        jnum(f, "train_loss", st->train_loss);
        jnum(f, "samples_per_s", st->samples_per_s);
        jnum(f, "epoch_seconds", st->epoch_seconds);
        fprintf(f, ",\"replicas\":%d,\"retries_used\":%d", st->replicas, st->retries_used);
        if (st->loss_scale > 0) { /* f16's loss scaler */
            jnum(f, "loss_scale", st->loss_scale);
            fprintf(f, ",\"skipped_steps\":%lld", (long long)st->skipped_steps);
        }
        jmetrics(f, st->metrics, st->nmetrics);
        fputs("}\n", f);
    }
    sc_clear(&p->sc);
    sc_add(&p->sc, st->train_loss, "epoch/train_loss");
    sc_add(&p->sc, st->samples_per_s, "epoch/samples_per_s");
    sc_add(&p->sc, st->epoch_seconds, "epoch/seconds");
    if (st->loss_scale > 0) {
        sc_add(&p->sc, st->loss_scale, "epoch/loss_scale");
        sc_add(&p->sc, (double)st->skipped_steps, "epoch/skipped_steps");
    }
    for (int i = 0; i < st->nmetrics; i++)
        sc_add(&p->sc, st->metrics[i].value, "epoch/metrics/%s", st->metrics[i].name);
    sc_write(p, wall, st->steps);
    flush_files(p);
    if (p->active && (p->live || p->every > 0)) {
        clear_line(p);
        char scale[96] = "";
        if (st->loss_scale > 0)
            snprintf(scale, sizeof scale, " | loss scale %g, %lld step%s skipped", st->loss_scale,
                     (long long)st->skipped_steps, st->skipped_steps == 1 ? "" : "s");
        fprintf(stderr, "%sepoch %lld/%lld: loss %.4f | %.0f samples/s | %.1f s%s\n",
                p->live ? "" : "trainer: ", (long long)st->epoch, (long long)p->epochs,
                st->train_loss, st->samples_per_s, st->epoch_seconds, scale);
    }
}

void ct__progress_val(tr_progress *p, const trainer_stats *st, int64_t epoch, int64_t step)
{
    if (!p)
        return;
    double wall = now_wall();
    if (p->jsonl) {
        FILE *f = p->jsonl;
        fprintf(f, "{\"type\":\"val\",\"epoch\":%lld,\"step\":%lld", (long long)epoch,
                (long long)step);
        jnum(f, "wall_time", wall);
        jnum(f, "val_loss", st->val_loss);
        if (st->val_perplexity > 0) /* token targets: perplexity, and accuracy only if counted */
            jnum(f, "val_perplexity", st->val_perplexity);
        if (st->val_perplexity <= 0 || st->val_accuracy > 0)
            jnum(f, "val_accuracy", st->val_accuracy);
        fprintf(f, ",\"val_samples\":%lld", (long long)st->val_samples);
        jmetrics(f, st->val_metrics, st->val_nmetrics);
        fputs("}\n", f);
    }
    sc_clear(&p->sc);
    sc_add(&p->sc, st->val_loss, "val/loss");
    if (st->val_perplexity > 0)
        sc_add(&p->sc, st->val_perplexity, "val/perplexity");
    if (st->val_perplexity <= 0 || st->val_accuracy > 0)
        sc_add(&p->sc, st->val_accuracy, "val/accuracy");
    for (int i = 0; i < st->val_nmetrics; i++)
        sc_add(&p->sc, st->val_metrics[i].value, "val/metrics/%s", st->val_metrics[i].name);
    sc_write(p, wall, step);
    flush_files(p);
    if (p->active && (p->live || p->every > 0)) {
        clear_line(p);
        char acc[48] = "";
        if (st->val_perplexity <= 0 || st->val_accuracy > 0)
            snprintf(acc, sizeof acc, " | accuracy %.4f", st->val_accuracy);
        if (st->val_perplexity > 0)
            fprintf(stderr, "%svalidation: loss %.4f | perplexity %.4f%s (%lld samples)\n",
                    p->live ? "" : "trainer: ", st->val_loss, st->val_perplexity, acc,
                    (long long)st->val_samples);
        else
            fprintf(stderr, "%svalidation: loss %.4f%s (%lld samples)\n",
                    p->live ? "" : "trainer: ", st->val_loss, acc, (long long)st->val_samples);
    }
}

bool ct__progress_note(tr_progress *p, const char *fmt, ...)
{
    if (!p || !p->active || !(p->live || p->every > 0))
        return false;
    va_list ap;
    clear_line(p);
    fputs(p->live ? "" : "trainer: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return true;
}
