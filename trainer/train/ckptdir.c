/* trainer/train/ckptdir.c — the checkpoint directory on the driver's host
 * (trainer_train_opts.checkpoint_dir): every checkpoint the driver adopts is also written
 * there, so that a job outlives its cluster; the newest K files are kept plus the best B by a
 * score (Ray's CheckpointConfig: num_to_keep, checkpoint_score_attribute / _order; trainer.c
 * passes K = 3 and B = 1 by default), and a small index says which file is the latest and which
 * are the best. Also finds the checkpoint to
 * resume from (trainer_train_opts.resume).
 *
 * Files: ckpt-epochEEEE-stepSSSSSS.safetensors (epochs completed, optimizer steps: name order is
 * training order) and index.json:
 *   {"format": "ct-checkpoint-index", "version": 1, "latest": FILE,
 *    "stats": {the trainer_stats when the latest was written: "epoch", "steps", "train_loss",
 *              ..., "metrics": {NAME: value}, "val_metrics": {...}},
 *    "score_attribute": NAME or null, "score_order": "min" or "max", "best": [FILE, ...],
 *    "checkpoints": [{"file", "epoch", "batch", "step", "score": number or null}, ...]}
 * ("best" best first; "checkpoints" the files kept, oldest first; "stats" lets a resumed run
 * that is complete already return its final statistics). Every file, the index too,
 * is written to a temporary name, fsynced and renamed over the old one, and the directory is
 * fsynced: a crash leaves the old file or the new one, never a torn one. Files a new index no
 * longer lists are deleted only after it is in place. Not here: the checkpoint bytes (ckpt.c),
 * when checkpoints are taken (trainer.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "internal.h"
#include "trainer/nn/safetensors.h"

#define INDEX_NAME "index.json"
#define INDEX_FORMAT "ct-checkpoint-index"

typedef struct entry {
    char file[TR_CKPT_NAME_MAX];
    int64_t epoch, batch, step;
    double score; /* NaN: none */
} entry;

struct tr_ckptdir {
    char dir[4096];
    int keep;  /* newest kept; <= 0: all */
    int nbest; /* best kept besides them (by score) */
    char attr[TR_NAME_MAX];
    bool maximize;
    entry *e; /* oldest first */
    int n, cap;
    ct__sbuf stats; /* the latest checkpoint's "stats" object (JSON), empty before an add */
};

/* ---- files ---- */

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return ct__error(CT_EIO, "checkpoint_dir %s: cannot open it: %s", dir, strerror(errno));
    int rc = fsync(fd) == 0 || errno == EINVAL ? 0 : CT_EIO; /* EINVAL: no fsync on dirs here */
    close(fd);
    return rc < 0 ? ct__error(rc, "checkpoint_dir %s: fsync: %s", dir, strerror(errno)) : 0;
}

/* dir/name gets len bytes: a temporary file, fsync, rename over the old one. */
static int write_atomic(const char *dir, const char *name, const void *buf, size_t len)
{
    char path[4400], tmp[4450];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp%d", dir, name, (int)getpid());
    int rc = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ct__error(CT_EIO, "checkpoint_dir: cannot create %s: %s", tmp, strerror(errno));
    if (ct__write_all(fd, buf, len) < 0)
        rc = ct__error(CT_EIO, "checkpoint_dir: writing %s: %s", tmp, strerror(errno));
    if (rc == 0 && fsync(fd) != 0)
        rc = ct__error(CT_EIO, "checkpoint_dir: fsync %s: %s", tmp, strerror(errno));
    close(fd);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = ct__error(CT_EIO, "checkpoint_dir: renaming %s to %s: %s", tmp, path, strerror(errno));
    if (rc < 0)
        unlink(tmp);
    return rc;
}

static int read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    size_t n = 0, cap = 0, r;
    *out = NULL;
    if (!f)
        return ct__error(CT_ENOENT, "cannot open %s: %s", path, strerror(errno));
    do {
        if (n == cap) {
            char *nb = realloc(b, cap = cap ? cap * 2 : 4096);
            if (!nb) {
                free(b);
                fclose(f);
                return ct__error(CT_ENOMEM, "reading %s: out of memory", path);
            }
            b = nb;
        }
        r = fread(b + n, 1, cap - n - 1, f);
        n += r;
    } while (r > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return ct__error(CT_EIO, "reading %s failed", path);
    }
    b[n] = 0;
    *out = b;
    *len = n;
    return 0;
}

static bool parse_name(const char *name, int64_t *epoch, int64_t *step)
{
    long long e, s;
    int end = 0;
    if (sscanf(name, "ckpt-epoch%lld-step%lld.safetensors%n", &e, &s, &end) != 2 || name[end] != 0)
        return false;
    *epoch = e;
    *step = s;
    return true;
}

/* ---- the index ---- */

/* A JSON number, null when not finite. */
static void json_num(ct__sbuf *b, double v)
{
    if (isfinite(v))
        ct__sb_json_num(b, v);
    else
        ct__sb_add(b, "null", 4);
}

static void metrics_json(ct__sbuf *b, const char *key, const trainer_metric *m, int n)
{
    ct__sb_printf(b, ", \"%s\": {", key);
    for (int i = 0; i < n; i++) {
        ct__sb_printf(b, "%s", i ? ", " : "");
        ct__sb_json_str(b, m[i].name);
        ct__sb_add(b, ": ", 2);
        json_num(b, m[i].value);
    }
    ct__sb_add(b, "}", 1);
}

/* The statistics a finished run reports, as a JSON object into b. */
static void stats_json(ct__sbuf *b, const trainer_stats *st)
{
    ct__sb_printf(b, "{\"epoch\": %lld, \"steps\": %lld, \"train_loss\": ", (long long)st->epoch,
                  (long long)st->steps);
    json_num(b, st->train_loss);
    ct__sb_printf(b, ", \"samples_per_s\": ");
    json_num(b, st->samples_per_s);
    ct__sb_printf(b, ", \"epoch_seconds\": ");
    json_num(b, st->epoch_seconds);
    ct__sb_printf(b, ", \"val_loss\": ");
    json_num(b, st->val_loss);
    ct__sb_printf(b, ", \"val_accuracy\": ");
    json_num(b, st->val_accuracy);
    ct__sb_printf(b, ", \"val_perplexity\": ");
    json_num(b, st->val_perplexity);
    ct__sb_printf(b,
                  ", \"val_samples\": %lld, \"val_epoch\": %lld, \"val_step\": %lld, "
                  "\"replicas\": %d, \"weights_agree\": %s",
                  (long long)st->val_samples, (long long)st->val_epoch, (long long)st->val_step,
                  st->replicas, st->weights_agree ? "true" : "false");
    metrics_json(b, "metrics", st->metrics, st->nmetrics);
    metrics_json(b, "val_metrics", st->val_metrics, st->val_nmetrics);
    ct__sb_add(b, "}", 1);
}

static void index_json(const tr_ckptdir *d, const int *best, int nbest, ct__sbuf *b)
{
    ct__sb_printf(b, "{\"format\": \"%s\", \"version\": 1, \"latest\": ", INDEX_FORMAT);
    ct__sb_json_str(b, d->n ? d->e[d->n - 1].file : "");
    if (d->stats.len) {
        ct__sb_printf(b, ",\n \"stats\": ");
        ct__sb_add(b, d->stats.s, d->stats.len);
    }
    ct__sb_printf(b, ", \"score_attribute\": ");
    if (d->attr[0])
        ct__sb_json_str(b, d->attr);
    else
        ct__sb_add(b, "null", 4);
    ct__sb_printf(b, ", \"score_order\": \"%s\", \"best\": [", d->maximize ? "max" : "min");
    for (int i = 0; i < nbest; i++) {
        ct__sb_printf(b, "%s", i ? ", " : "");
        ct__sb_json_str(b, d->e[best[i]].file);
    }
    ct__sb_printf(b, "],\n \"checkpoints\": [");
    for (int i = 0; i < d->n; i++) {
        const entry *e = &d->e[i];
        ct__sb_printf(b, "%s{\"file\": ", i ? ",\n  " : "\n  ");
        ct__sb_json_str(b, e->file);
        ct__sb_printf(b, ", \"epoch\": %lld, \"batch\": %lld, \"step\": %lld, \"score\": ",
                      (long long)e->epoch, (long long)e->batch, (long long)e->step);
        if (isfinite(e->score))
            ct__sb_json_num(b, e->score);
        else
            ct__sb_add(b, "null", 4);
        ct__sb_add(b, "}", 1);
    }
    ct__sb_add(b, "]}\n", 3);
}

static const ct__jval *get_typed(const ct__jval *o, const char *key, ct__jtype type)
{
    const ct__jval *v = ct__json_get(o, key);
    return v && v->type == type ? v : NULL;
}

/* The index at path into d's entries (those whose files still exist). */
static int index_load(tr_ckptdir *d, const char *path)
{
    char *buf = NULL, err[160] = "";
    size_t len = 0;
    ct__jval root = {0};
    int rc = read_file(path, &buf, &len);
    if (rc < 0)
        return rc;
    if (ct__json_parse(buf, len, &root, err, sizeof err) < 0 || root.type != CT__J_OBJ) {
        rc = ct__error(CT_EINVAL, "checkpoint_dir: %s is not a JSON object: %s", path, err);
        goto out;
    }
    const char *fmt = ct__json_get_str(&root, "format"),
               *attr = ct__json_get_str(&root, "score_attribute");
    const ct__jval *list = get_typed(&root, "checkpoints", CT__J_ARR);
    if (!fmt || strcmp(fmt, INDEX_FORMAT) || !list) {
        rc = ct__error(CT_EINVAL, "checkpoint_dir: %s: \"%s\" missing or wrong", path,
                       !fmt || strcmp(fmt, INDEX_FORMAT) ? "format" : "checkpoints");
        goto out;
    }
    /* scores of another attribute mean nothing for this one */
    bool same_attr = attr ? !strcmp(attr, d->attr) : !d->attr[0];
    for (int i = 0; i < list->n; i++) {
        const ct__jval *o = &list->items[i], *sc = ct__json_get(o, "score");
        const char *file = ct__json_get_str(o, "file");
        const ct__jval *ep = get_typed(o, "epoch", CT__J_NUM),
                       *bt = get_typed(o, "batch", CT__J_NUM),
                       *st = get_typed(o, "step", CT__J_NUM);
        int64_t pe, ps;
        if (!file || !ep || !bt || !st || strlen(file) >= TR_CKPT_NAME_MAX ||
            !parse_name(file, &pe, &ps)) {
            rc = ct__error(CT_EINVAL,
                           "checkpoint_dir: %s: checkpoints[%d] is not a checkpoint "
                           "entry (file, epoch, batch, step)",
                           path, i);
            goto out;
        }
        char fp[4400];
        struct stat sb;
        snprintf(fp, sizeof fp, "%s/%s", d->dir, file);
        if (stat(fp, &sb) != 0)
            continue; /* deleted by hand: forget it */
        if (d->n == d->cap) {
            entry *ne = realloc(d->e, sizeof *ne * (size_t)(d->cap = d->cap ? d->cap * 2 : 16));
            if (!ne) {
                rc = ct__error(CT_ENOMEM, "checkpoint_dir: out of memory");
                goto out;
            }
            d->e = ne;
        }
        entry *e = &d->e[d->n++];
        snprintf(e->file, sizeof e->file, "%s", file);
        e->epoch = (int64_t)ep->num;
        e->batch = (int64_t)bt->num;
        e->step = (int64_t)st->num;
        e->score = same_attr && sc && sc->type == CT__J_NUM ? sc->num : NAN;
    }
out:
    ct__json_free(&root);
    free(buf);
    return rc;
}

/* ---- retention ---- */

static const tr_ckptdir *sort_dir; /* qsort has no user pointer; one driver thread sorts */

static int by_score(const void *a, const void *b)
{
    const entry *x = &sort_dir->e[*(const int *)a], *y = &sort_dir->e[*(const int *)b];
    if (x->score != y->score)
        return (x->score < y->score) == !sort_dir->maximize ? -1 : 1;
    return *(const int *)b - *(const int *)a; /* ties: the newer first */
}

/* best[] gets the indices of the scored entries, best first; returns their count. */
static int rank_best(const tr_ckptdir *d, int *best)
{
    int nb = 0;
    for (int i = 0; i < d->n; i++)
        if (!isnan(d->e[i].score))
            best[nb++] = i;
    sort_dir = d;
    qsort(best, (size_t)nb, sizeof *best, by_score);
    return nb;
}

int ct__ckptdir_open(const char *dir, int keep, int nbest, const char *attr, bool maximize,
                     tr_ckptdir **out)
{
    *out = NULL;
    if (!dir || !*dir || strlen(dir) >= 4000)
        return ct__error(CT_EINVAL, "trainer_train: checkpoint_dir is empty or too long");
    if (attr && strlen(attr) >= TR_NAME_MAX)
        return ct__error(CT_EINVAL, "trainer_train: checkpoint_score_attribute longer than %d",
                         TR_NAME_MAX - 1);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ct__error(CT_EIO, "trainer_train: checkpoint_dir %s: cannot create it: %s", dir,
                         strerror(errno));
    tr_ckptdir *d = calloc(1, sizeof *d);
    if (!d)
        return ct__error(CT_ENOMEM, "checkpoint_dir: out of memory");
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    d->keep = keep;
    d->nbest = nbest > 0 ? nbest : 0;
    snprintf(d->attr, sizeof d->attr, "%s", attr ? attr : "");
    d->maximize = maximize;
    char path[4400];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, INDEX_NAME);
    int rc = stat(path, &sb) == 0 ? index_load(d, path) : 0; /* a job going on: keep its list */
    if (rc < 0) {
        ct__ckptdir_free(&d);
        return rc;
    }
    *out = d;
    return 0;
}

void ct__ckptdir_free(tr_ckptdir **dp)
{
    if (!dp || !*dp)
        return;
    free((*dp)->e);
    free((*dp)->stats.s);
    free(*dp);
    *dp = NULL;
}

int ct__ckptdir_add(tr_ckptdir *d, const void *buf, size_t len, int64_t epoch, int64_t batch,
                    int64_t step, double score, const trainer_stats *st, char *name, size_t cap)
{
    entry ne = {.epoch = epoch, .batch = batch, .step = step, .score = score};
    snprintf(ne.file, sizeof ne.file, "ckpt-epoch%04lld-step%06lld.safetensors", (long long)epoch,
             (long long)step);
    if (name)
        snprintf(name, cap, "%s", ne.file);
    int rc = write_atomic(d->dir, ne.file, buf, len);
    if (rc < 0)
        return rc;
    /* the same name again (a resumed job repeating a step): the new file replaces the entry */
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->e[i].file, ne.file)) {
            memmove(&d->e[i], &d->e[i + 1], sizeof *d->e * (size_t)(d->n - i - 1));
            d->n--;
            break;
        }
    if (d->n == d->cap) {
        entry *e = realloc(d->e, sizeof *e * (size_t)(d->cap = d->cap ? d->cap * 2 : 16));
        if (!e)
            return ct__error(CT_ENOMEM, "checkpoint_dir: out of memory");
        d->e = e;
    }
    d->e[d->n++] = ne;
    d->stats.len = 0;
    if (st)
        stats_json(&d->stats, st);
    /* kept: the newest keep, and the best nbest by score (keep <= 0: every one); the latest is
     * always among the newest, and the index lists every file kept before any is deleted */
    int *best = malloc(sizeof *best * (size_t)d->n);
    bool *kept = calloc((size_t)d->n, sizeof *kept);
    entry *gone = malloc(sizeof *gone * (size_t)d->n);
    ct__sbuf js = {0};
    int ngone = 0;
    if (!best || !kept || !gone) {
        rc = ct__error(CT_ENOMEM, "checkpoint_dir: out of memory");
        goto out;
    }
    int nbest = d->attr[0] ? rank_best(d, best) : 0;
    if (d->keep > 0 && nbest > d->nbest)
        nbest = d->nbest;
    for (int i = 0; i < d->n; i++)
        kept[i] = d->keep <= 0 || i >= d->n - d->keep;
    for (int i = 0; i < nbest; i++)
        kept[best[i]] = true;
    /* drop the others from the list, renumbering best[] */
    int k = 0;
    for (int i = 0; i < d->n; i++) {
        if (!kept[i]) {
            gone[ngone++] = d->e[i];
            continue;
        }
        for (int j = 0; j < nbest; j++)
            if (best[j] == i)
                best[j] = k;
        d->e[k++] = d->e[i];
    }
    d->n = k;
    index_json(d, best, nbest, &js);
    if (js.oom || d->stats.oom) {
        rc = ct__error(CT_ENOMEM, "checkpoint_dir: out of memory");
        goto out;
    }
    if ((rc = write_atomic(d->dir, INDEX_NAME, js.s, js.len)) < 0 || (rc = fsync_dir(d->dir)) < 0)
        goto out;
    for (int i = 0; i < ngone; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", d->dir, gone[i].file);
        if (unlink(p) != 0 && errno != ENOENT)
            CT_LOG(CT_LOG_WARN, "trainer", "checkpoint_dir: cannot delete %s: %s", p,
                   strerror(errno));
    }
out:
    free(js.s);
    free(best);
    free(kept);
    free(gone);
    return rc;
}

int ct__ckptdir_best(const tr_ckptdir *d, char *path, size_t cap, double *score)
{
    int *best = malloc(sizeof *best * (size_t)(d->n ? d->n : 1));
    if (!best)
        return ct__error(CT_ENOMEM, "checkpoint_dir: out of memory");
    int nb = d->attr[0] ? rank_best(d, best) : 0;
    if (nb > 0) {
        snprintf(path, cap, "%s/%s", d->dir, d->e[best[0]].file);
        *score = d->e[best[0]].score;
    }
    free(best);
    return nb > 0 ? 0 : 1;
}

int ct__ckptdir_latest(const char *dir, char *path, size_t cap)
{
    char ip[4400], *buf = NULL, err[160] = "";
    size_t len = 0;
    struct stat sb;
    snprintf(ip, sizeof ip, "%s/%s", dir, INDEX_NAME);
    if (stat(ip, &sb) == 0) { /* the index says which */
        ct__jval root = {0};
        int rc = read_file(ip, &buf, &len);
        if (rc == 0 && (ct__json_parse(buf, len, &root, err, sizeof err) < 0 ||
                        !ct__json_get_str(&root, "latest")))
            rc = ct__error(CT_EINVAL, "resume: %s has no \"latest\" checkpoint %s", ip, err);
        const char *latest = rc == 0 ? ct__json_get_str(&root, "latest") : NULL;
        if (rc == 0 && strchr(latest, '/'))
            rc = ct__error(CT_EINVAL, "resume: %s: \"latest\" %s is not a file name", ip, latest);
        if (rc == 0 && !*latest)
            rc = 1; /* names none */
        if (rc == 0)
            snprintf(path, cap, "%s/%s", dir, latest);
        ct__json_free(&root);
        free(buf);
        return rc;
    }
    /* no index (a directory filled by hand): the file the names put last */
    DIR *dh = opendir(dir);
    if (!dh)
        return ct__error(CT_ENOENT, "resume: cannot open directory %s: %s", dir, strerror(errno));
    int64_t be = -1, bs = -1;
    struct dirent *de;
    while ((de = readdir(dh))) {
        int64_t e, s;
        if (parse_name(de->d_name, &e, &s) && (e > be || (e == be && s > bs))) {
            be = e;
            bs = s;
            snprintf(path, cap, "%s/%s", dir, de->d_name);
        }
    }
    closedir(dh);
    return be < 0 ? 1 : 0;
}

int ct__ckptdir_stats(const char *ckpt, trainer_stats *st)
{
    char dir[4400], ip[4420], *buf = NULL, err[160] = "";
    const char *slash = strrchr(ckpt, '/'), *base = slash ? slash + 1 : ckpt;
    size_t len = 0;
    ct__jval root = {0};
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - ckpt) : 1, slash ? ckpt : ".");
    snprintf(ip, sizeof ip, "%s/%s", dir, INDEX_NAME);
    int rc = read_file(ip, &buf, &len);
    if (rc == 0 && ct__json_parse(buf, len, &root, err, sizeof err) < 0)
        rc = ct__error(CT_EINVAL, "%s: %s", ip, err);
    const char *latest = rc == 0 ? ct__json_get_str(&root, "latest") : NULL;
    const ct__jval *o = rc == 0 ? get_typed(&root, "stats", CT__J_OBJ) : NULL;
    if (rc == 0 && (!latest || strcmp(latest, base) || !o))
        rc = ct__error(CT_ENOENT, "%s keeps no statistics of %s", ip, base);
    if (rc == 0) {
#define NUM(key, field)                                                                            \
    do {                                                                                           \
        const ct__jval *v_ = get_typed(o, key, CT__J_NUM);                                         \
        if (v_)                                                                                    \
            st->field = v_->num;                                                                   \
    } while (0)
        NUM("epoch", epoch);
        NUM("steps", steps);
        NUM("train_loss", train_loss);
        NUM("samples_per_s", samples_per_s);
        NUM("epoch_seconds", epoch_seconds);
        NUM("val_loss", val_loss);
        NUM("val_accuracy", val_accuracy);
        NUM("val_perplexity", val_perplexity);
        NUM("val_samples", val_samples);
        NUM("val_epoch", val_epoch);
        NUM("val_step", val_step);
#undef NUM
        const ct__jval *wa = get_typed(o, "weights_agree", CT__J_BOOL);
        st->weights_agree = wa ? wa->num != 0 : st->weights_agree;
        const ct__jval *ms[2] = {get_typed(o, "metrics", CT__J_OBJ),
                                 get_typed(o, "val_metrics", CT__J_OBJ)};
        trainer_metric *out[2] = {st->metrics, st->val_metrics};
        int *nout[2] = {&st->nmetrics, &st->val_nmetrics};
        for (int k = 0; k < 2; k++) {
            *nout[k] = 0;
            for (int i = 0; ms[k] && i < ms[k]->n && *nout[k] < TRAINER_MAX_METRICS; i++) {
                if (ms[k]->items[i].type != CT__J_NUM ||
                    strlen(ms[k]->keys[i]) >= TRAINER_METRIC_NAME_MAX)
                    continue;
                trainer_metric *m = &out[k][(*nout[k])++];
                snprintf(m->name, sizeof m->name, "%s", ms[k]->keys[i]);
                m->value = ms[k]->items[i].num;
            }
        }
    }
    ct__json_free(&root);
    free(buf);
    return rc;
}
