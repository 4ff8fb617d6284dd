/* trainer/train/records.c — per-step records from the replicas to the driver (internal.h,
 * "per-step records"): the replica's recorder (one text line per optimizer step, put in chunks
 * under "trainer/<group>/rec/<rank>/<epoch>/<start batch>/<seq>" in the head's KV: one series
 * per segment of an epoch) and the driver's reader (takes the chunks in order, deletes them,
 * merges the ranks' records of each step).
 *
 * A line: "<epoch> <batch> <batches> <step> <wall_ns> <loss_sum> <samples> <lr> <grad_norm>
 * <step_ns> <wait_ns> <data_ns> <peak_flops> <nmetrics> [<name> <sum> <weight>]...\n"; data_ns
 * is the step's wait for its batches; grad_norm is "nan"
 * when the step measured none; peak_flops is the replica's device's (MFU's denominator, 0 when
 * unknown); doubles as %.17g (exact). Metric names have no blanks (step.c checks).
 * Not here: what the driver does with a record (progress.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common.h"
#include "internal.h"

#define CHUNK_MAX (256 << 10) /* put at once past this (the head takes values up to 512 KiB) */

/* ---- the replica's side ---- */

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ct__rec_begin(tr_recorder *rec, trainer_step *s, const char *group, int rank, int report_ms)
{
    rec->report_ms = report_ms > 0 ? report_ms : 0;
    s->rec_metrics = NULL;
    if (!rec->report_ms)
        return;
    /* every segment's chunks count from 0 under its own prefix: a driver that starts reading
     * at a segment knows where (whatever an earlier reader of the group had read) */
    snprintf(rec->prefix, sizeof rec->prefix, "trainer/%s/rec/%d/%lld/%lld/", group, rank,
             (long long)s->epoch, (long long)s->index);
    rec->seq = 0;
    rec->len = 0;
    rec->flushed_ns = rec->t0_ns = ct__now_ns();
    rec->loss_sum = 0;
    rec->samples = rec->wait_ns = rec->data_ns = 0;
    memset(&rec->metrics, 0, sizeof rec->metrics);
    s->rec_metrics = &rec->metrics;
}

/* Appends formatted text to the buffer; false when out of memory (the record is dropped). */
static bool append(tr_recorder *rec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool append(tr_recorder *rec, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(rec->buf + rec->len, rec->cap - rec->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return false;
        if ((size_t)n < rec->cap - rec->len) {
            rec->len += (size_t)n;
            return true;
        }
        size_t cap = rec->cap ? rec->cap * 2 : 8192;
        while (cap < rec->len + (size_t)n + 1)
            cap *= 2;
        char *b = realloc(rec->buf, cap);
        if (!b)
            return false;
        rec->buf = b;
        rec->cap = cap;
    }
}

void ct__rec_flush(tr_recorder *rec)
{
    if (!rec->report_ms || rec->len == 0)
        return;
    char key[sizeof rec->prefix + 24];
    snprintf(key, sizeof key, "%s%llu", rec->prefix, (unsigned long long)rec->seq);
    int rc = ct_kv_put(key, rec->buf, rec->len);
    if (rc == 0)
        rec->seq++; /* else dropped: the next chunk takes its number, the driver sees no gap */
    else
        CT_LOG(CT_LOG_DEBUG, "trainer", "step records dropped (%zu bytes): %s", rec->len,
               ct_last_error());
    rec->len = 0;
    rec->flushed_ns = ct__now_ns();
}

void ct__rec_batch(tr_recorder *rec, const trainer_step *s, const trainer_step_out *so,
                   int64_t batches)
{
    if (!rec->report_ms)
        return;
    rec->loss_sum += so->loss_sum;
    rec->samples += so->samples;
    rec->wait_ns += s->wait_ns;
    if (!trainer_step_sync(s))
        return; /* the accumulation group goes on */
    int64_t now = ct__now_ns();
    const tr_metrics *m = &rec->metrics;
    size_t len0 = rec->len;
    bool ok = append(rec, "%lld %lld %lld %lld %lld %.17g %lld %.17g %.17g %lld %lld %lld %.17g %d",
                     (long long)s->epoch, (long long)s->index, (long long)batches,
                     (long long)s->st->step, (long long)realtime_ns(), rec->loss_sum,
                     (long long)rec->samples, ct_optim_get_lr(s->st->optims[0], 0),
                     s->has_grad_norm ? s->grad_norm : NAN, (long long)(now - rec->t0_ns),
                     (long long)rec->wait_ns, (long long)rec->data_ns, rec->peak_flops, m->n);
    for (int i = 0; ok && i < m->n; i++)
        ok = append(rec, " %s %.17g %.17g", m->names[i], m->sum[i], m->weight[i]);
    ok = ok && append(rec, "\n");
    if (!ok)
        rec->len = len0;
    rec->t0_ns = now;
    rec->loss_sum = 0;
    rec->samples = rec->wait_ns = rec->data_ns = 0;
    memset(&rec->metrics, 0, sizeof rec->metrics);
    if (now - rec->flushed_ns >= (int64_t)rec->report_ms * 1000000 || rec->len >= CHUNK_MAX)
        ct__rec_flush(rec);
}

void ct__rec_idle(tr_recorder *rec)
{
    if (rec->report_ms)
        rec->t0_ns = ct__now_ns();
}

void ct__rec_free(tr_recorder *rec)
{
    free(rec->buf);
    rec->buf = NULL;
    rec->len = rec->cap = 0;
}

/* ---- the driver's side ---- */

/* One rank's record as sent. */
typedef struct rank_rec {
    int64_t epoch, batch, batches, step, wall_ns, samples, step_ns, wait_ns, data_ns;
    double loss_sum, lr, grad_norm, peak_flops;
    tr_metrics metrics;
} rank_rec;

/* A rank's records read but not merged yet (a ring would do; records come in order). */
typedef struct rank_queue {
    uint64_t seq; /* the next chunk to read */
    rank_rec *q;
    int head, n, cap;
} rank_queue;

struct tr_reader {
    char group[64];
    int world;
    int64_t epoch, start; /* whose chunks are read: the segment of epoch from batch start */
    rank_queue *ranks;
    tr_record_fn fn;
    void *user;
    tr_step_record out; /* step_s / wait_s: world entries */
};

tr_reader *ct__reader_new(const char *group, int world, tr_record_fn fn, void *user)
{
    tr_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return NULL;
    snprintf(rd->group, sizeof rd->group, "%s", group);
    rd->world = world;
    rd->epoch = rd->start = -1; /* none until ct__reader_segment */
    rd->fn = fn;
    rd->user = user;
    rd->ranks = calloc((size_t)world, sizeof *rd->ranks);
    rd->out.step_s = calloc((size_t)world, sizeof(double));
    rd->out.wait_s = calloc((size_t)world, sizeof(double));
    rd->out.data_s = calloc((size_t)world, sizeof(double));
    if (!rd->ranks || !rd->out.step_s || !rd->out.wait_s || !rd->out.data_s) {
        ct__reader_free(&rd);
        return NULL;
    }
    return rd;
}

_Static_assert(TRAINER_METRIC_NAME_MAX == 48, "parse_line's %47s reads a metric name");

/* Parses one line; false when it is malformed. */
static bool parse_line(const char *line, rank_rec *r)
{
    char *end;
    long long v[14] = {0};
    const char *p = line;
    int nm;
    /* integers and doubles in their order on the line */
    static const char kinds[] = "iiiiididdiiidi"; /* i: integer, d: double */
    double d[14] = {0};
    for (int k = 0; k < 14; k++) {
        if (kinds[k] == 'i')
            v[k] = strtoll(p, &end, 10);
        else
            d[k] = strtod(p, &end);
        if (end == p)
            return false;
        p = end;
    }
    r->epoch = v[0];
    r->batch = v[1];
    r->batches = v[2];
    r->step = v[3];
    r->wall_ns = v[4];
    r->loss_sum = d[5];
    r->samples = v[6];
    r->lr = d[7];
    r->grad_norm = d[8];
    r->step_ns = v[9];
    r->wait_ns = v[10];
    r->data_ns = v[11];
    r->peak_flops = d[12];
    nm = (int)v[13];
    memset(&r->metrics, 0, sizeof r->metrics);
    for (int i = 0; i < nm; i++) {
        char name[TRAINER_METRIC_NAME_MAX];
        int used = 0;
        while (*p == ' ')
            p++;
        if (sscanf(p, "%47s%n", name, &used) != 1)
            return false;
        p += used;
        double sum = strtod(p, &end), weight;
        if (end == p)
            return false;
        p = end;
        weight = strtod(p, &end);
        if (end == p)
            return false;
        p = end;
        if (weight > 0 && ct__trainer_metric_add(&r->metrics, name, sum / weight, weight) < 0)
            return false;
    }
    return true;
}

static bool push(rank_queue *q, const rank_rec *r)
{
    if (q->head + q->n == q->cap) {
        if (q->head > 0) { /* slide down before growing */
            memmove(q->q, q->q + q->head, (size_t)q->n * sizeof *q->q);
            q->head = 0;
        }
        if (q->n == q->cap) {
            int cap = q->cap ? 2 * q->cap : 64;
            rank_rec *nq = realloc(q->q, (size_t)cap * sizeof *nq);
            if (!nq)
                return false;
            q->q = nq;
            q->cap = cap;
        }
    }
    q->q[q->head + q->n++] = *r;
    return true;
}

/* Reads and deletes rank i's chunks that are there now. */
static void read_rank(tr_reader *rd, int i)
{
    rank_queue *q = &rd->ranks[i];
    char key[200];
    for (;;) {
        void *v = NULL;
        size_t n = 0;
        snprintf(key, sizeof key, "trainer/%s/rec/%d/%lld/%lld/%llu", rd->group, i,
                 (long long)rd->epoch, (long long)rd->start, (unsigned long long)q->seq);
        if (ct_kv_get(key, &v, &n, 0) < 0) {
            free(v);
            return; /* not there (yet) */
        }
        ct_kv_del(key);
        q->seq++;
        char *text = realloc(v, n + 1);
        if (!text) {
            free(v);
            continue;
        }
        text[n] = 0;
        for (char *line = text, *nl; *line; line = nl + 1) {
            if (!(nl = strchr(line, '\n')))
                break;
            *nl = 0;
            rank_rec r;
            if (parse_line(line, &r))
                push(q, &r);
        }
        free(text);
    }
}

/* Merges the head record of every rank (all of one step) into rd->out. */
static void merge(tr_reader *rd)
{
    tr_step_record *o = &rd->out;
    const rank_rec *r0 = &rd->ranks[0].q[rd->ranks[0].head];
    tr_metrics m = {0};
    double loss = 0, slowest = 0, peak = 0;
    bool peak_known = true;
    int64_t samples = 0;
    o->epoch = r0->epoch;
    o->batch = r0->batch;
    o->batches = r0->batches;
    o->step = r0->step;
    o->wall_time = (double)r0->wall_ns * 1e-9;
    o->lr = r0->lr;
    o->grad_norm = r0->grad_norm;
    o->has_grad_norm = !isnan(r0->grad_norm);
    o->world = rd->world;
    for (int i = 0; i < rd->world; i++) {
        const rank_rec *r = &rd->ranks[i].q[rd->ranks[i].head];
        loss += r->loss_sum;
        samples += r->samples;
        o->step_s[i] = (double)r->step_ns * 1e-9;
        o->wait_s[i] = (double)r->wait_ns * 1e-9;
        o->data_s[i] = (double)r->data_ns * 1e-9;
        slowest = o->step_s[i] > slowest ? o->step_s[i] : slowest;
        peak += r->peak_flops;
        peak_known = peak_known && r->peak_flops > 0;
        ct__trainer_metrics_add(&m, &r->metrics);
    }
    o->loss = samples ? loss / (double)samples : NAN;
    o->samples = samples;
    o->samples_per_s = slowest > 0 ? (double)samples / slowest : 0;
    o->peak_flops = peak_known ? peak : 0;
    ct__trainer_metrics_out(&m, o->metrics, &o->nmetrics);
}

static void pop(rank_queue *q)
{
    q->head++;
    q->n--;
}

void ct__reader_poll(tr_reader *rd)
{
    if (!rd)
        return;
    for (int i = 0; i < rd->world; i++)
        read_rank(rd, i);
    for (;;) {
        /* every rank's oldest record must be the same step; a rank that has one the others
         * lack (its chunk lost) drops it */
        int64_t lo_e = INT64_MAX, lo_b = INT64_MAX;
        bool all = true, same = true;
        for (int i = 0; i < rd->world; i++) {
            rank_queue *q = &rd->ranks[i];
            if (!q->n) {
                all = false;
                break;
            }
            const rank_rec *r = &q->q[q->head];
            if (i > 0 && (r->epoch != lo_e || r->batch != lo_b))
                same = false;
            if (r->epoch < lo_e || (r->epoch == lo_e && r->batch < lo_b)) {
                lo_e = r->epoch;
                lo_b = r->batch;
            }
        }
        if (!all)
            return;
        if (!same) {
            for (int i = 0; i < rd->world; i++) {
                rank_queue *q = &rd->ranks[i];
                if (q->q[q->head].epoch == lo_e && q->q[q->head].batch == lo_b)
                    pop(q);
            }
            continue;
        }
        merge(rd);
        for (int i = 0; i < rd->world; i++)
            pop(&rd->ranks[i]);
        rd->fn(&rd->out, rd->user);
    }
}

void ct__reader_segment(tr_reader *rd, int64_t epoch, int64_t start_batch)
{
    if (!rd || (epoch == rd->epoch && start_batch == rd->start))
        return;
    ct__reader_poll(rd); /* the last segment's chunks, if any are left */
    rd->epoch = epoch;
    rd->start = start_batch;
    for (int i = 0; i < rd->world; i++) {
        rd->ranks[i].seq = 0;
        rd->ranks[i].head = rd->ranks[i].n = 0; /* a step no longer completed */
    }
}

void ct__reader_free(tr_reader **rdp)
{
    if (!rdp || !*rdp)
        return;
    tr_reader *rd = *rdp;
    for (int i = 0; rd->ranks && i < rd->world; i++) {
        read_rank(rd, i); /* delete what is left in the KV */
        free(rd->ranks[i].q);
    }
    free(rd->ranks);
    free(rd->out.step_s);
    free(rd->out.wait_s);
    free(rd->out.data_s);
    free(rd);
    *rdp = NULL;
}
