/* trainer/data/csv.c — the CSV reader: one sample a line, one integer label column (or T f32
 * target columns), the other columns float features; sample shape (F). Reads a whole file, or
 * one rank's shard of it (the lines starting in its byte range) without reading the rest.
 *
 * Errors name the file, the 1-based line (a shard not at the file's start: the line's byte
 * offset) and the 1-based column (field number, and the header name when there is one).
 * Not here: quoting, missing values, string categories. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/common.h"
#include "trainer/data/data_internal.h"

#define MAX_COLS 65536

typedef struct field {
    const char *s; /* not NUL-terminated */
    size_t len;
} field;

/* Splits [p, end) at delim into fields (trimmed). Returns the count, or -1 if more than max. */
static int split(const char *p, const char *end, char delim, field *f, int max)
{
    int n = 0;
    for (;;) {
        const char *q = p;
        while (q < end && *q != delim)
            q++;
        const char *a = p, *b = q;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (n == max)
            return -1;
        f[n].s = a;
        f[n].len = (size_t)(b - a);
        n++;
        if (q >= end)
            break;
        p = q + 1;
    }
    return n;
}

/* Parses a whole field as a double; returns false if it is empty or has junk. */
static bool parse_num(const field *f, double *v)
{
    char tmp[128];
    if (f->len == 0 || f->len >= sizeof tmp)
        return false;
    memcpy(tmp, f->s, f->len);
    tmp[f->len] = '\0';
    char *e;
    errno = 0;
    *v = strtod(tmp, &e);
    return e == tmp + f->len && errno != ERANGE;
}

/* What the first line decides and the rows read so far. */
typedef struct csv {
    const char *path;
    ct_csv_opts o;
    char delim;
    field *f; /* MAX_COLS */
    char **names;
    int nnames;
    int ncols, lcol, nt; /* columns; label (or first target) column; target columns (0: label) */
    bool header;         /* the file's first non-blank line is a header */
    float *x, *y;        /* (n, ncols - max(nt, 1)) features; (n, nt) targets */
    int64_t *labels;     /* (n) without targets */
    int64_t n, cap;
} csv;

/* "path:line" or, where line numbers are unknown (a shard), "path:byte <offset>". */
static const char *where(char *buf, size_t cap, const csv *c, int64_t line, int64_t off)
{
    if (line > 0)
        snprintf(buf, cap, "%s:%lld", c->path, (long long)line);
    else
        snprintf(buf, cap, "%s:byte %lld", c->path, (long long)off);
    return buf;
}

/* The layout from the file's first non-blank line [p, le): column count, header, label. */
static int layout(csv *c, const char *p, const char *le, const char *at)
{
    int nf = split(p, le, c->delim, c->f, MAX_COLS);
    if (nf < 0)
        return ct__error(CT_EINVAL, "%s: more than %d columns", at, MAX_COLS);
    c->ncols = nf;
    c->nt = c->o.targets > 0 ? c->o.targets : 0;
    int width = c->nt ? c->nt : 1;
    if (c->o.targets < 0)
        return ct__error(CT_EINVAL, "%s: targets %d < 0", c->path, c->o.targets);
    if (nf < width + 1)
        return ct__error(CT_EINVAL,
                         "%s: %d column(s): need %s and at least one feature (delimiter '%c')", at,
                         nf, c->nt ? "the target columns" : "a label", c->delim);
    c->header = c->o.header > 0;
    if (c->o.header == 0) { /* auto: a non-numeric field means a header */
        double v;
        for (int k = 0; k < nf && !c->header; k++)
            c->header = !parse_num(&c->f[k], &v);
    }
    if (c->header) {
        if (!(c->names = calloc((size_t)nf, sizeof *c->names)))
            return ct__error(CT_ENOMEM, "%s: out of memory", c->path);
        c->nnames = nf;
        for (int k = 0; k < nf; k++)
            if (!(c->names[k] = strndup(c->f[k].s, c->f[k].len)))
                return ct__error(CT_ENOMEM, "%s: out of memory", c->path);
    }
    c->lcol = -1;
    if (c->o.label_name) {
        if (!c->header)
            return ct__error(CT_EINVAL,
                             "%s: label column '%s' asked by name but the file has no header "
                             "line",
                             c->path, c->o.label_name);
        for (int k = 0; k < nf && c->lcol < 0; k++)
            if (strcmp(c->names[k], c->o.label_name) == 0)
                c->lcol = k;
        if (c->lcol < 0)
            return ct__error(CT_EINVAL, "%s: no column named '%s' in the header", at,
                             c->o.label_name);
    } else {
        c->lcol = c->o.label_column < 0 ? nf + c->o.label_column : c->o.label_column;
        if (c->lcol < 0 || c->lcol >= nf)
            return ct__error(CT_EINVAL, "%s: label_column %d out of range for %d columns", at,
                             c->o.label_column, nf);
    }
    if (c->lcol + width > nf)
        return ct__error(CT_EINVAL, "%s: %d target columns from column %d: only %d columns", at,
                         width, c->lcol + 1, nf);
    return 0;
}

/* Parses the fields of one data line (nf of them) into a new row. */
static int add_row(csv *c, int nf, const char *at)
{
    int width = c->nt ? c->nt : 1, nx = c->ncols - width;
    if (nf != c->ncols)
        return ct__error(CT_EINVAL, "%s: expected %d columns, got %d", at, c->ncols, nf);
    if (c->n == c->cap) {
        int64_t ncap = c->cap ? c->cap * 2 : 1024;
        float *x = realloc(c->x, (size_t)(ncap * nx) * sizeof *x);
        if (x)
            c->x = x;
        void *y = c->nt ? (void *)realloc(c->y, (size_t)(ncap * c->nt) * sizeof *c->y)
                        : (void *)realloc(c->labels, (size_t)ncap * sizeof *c->labels);
        if (y && c->nt)
            c->y = y;
        else if (y)
            c->labels = y;
        if (!x || !y)
            return ct__error(CT_ENOMEM, "%s: out of memory", at);
        c->cap = ncap;
    }
    float *row = c->x + c->n * nx;
    for (int k = 0, j = 0; k < c->ncols; k++) {
        double v;
        const field *f = &c->f[k];
        int flen = (int)(f->len > 40 ? 40 : f->len);
        if (!parse_num(f, &v))
            return ct__error(CT_EINVAL, "%s: column %d%s%s%s: cannot parse '%.*s' as a number", at,
                             k + 1, c->names ? " (" : "", c->names ? c->names[k] : "",
                             c->names ? ")" : "", flen, f->s);
        if (c->nt && k >= c->lcol && k < c->lcol + c->nt) {
            c->y[c->n * c->nt + (k - c->lcol)] = (float)v;
        } else if (!c->nt && k == c->lcol) {
            if (v != floor(v) || fabs(v) > 9.0e15)
                return ct__error(CT_EINVAL, "%s: column %d (label): '%.*s' is not an integer", at,
                                 k + 1, flen, f->s);
            c->labels[c->n] = (int64_t)v;
        } else {
            row[j++] = (float)v;
        }
    }
    c->n++;
    return 0;
}

/* Finds the first non-blank line in [p, end): *ls, *le (without CR), returns the line after it
 * (NULL: none). *lines counts the lines passed, that one included. */
static const char *next_line(const char *p, const char *end, const char **ls, const char **le,
                             int64_t *lines)
{
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end, *e = eol ? eol : end;
        (*lines)++;
        if (e > p && e[-1] == '\r')
            e--;
        const char *t = p;
        while (t < e && isspace((unsigned char)*t))
            t++;
        if (t < e) {
            *ls = p;
            *le = e;
            return next;
        }
        p = next;
    }
    return NULL;
}

/* Parses the data lines of [p, end), the buffer starting at file offset off0 (line numbers
 * from line0 + 1 when line0 >= 0, else unknown), leaving out the line starting at skip. */
static int parse_lines(csv *c, const char *p, const char *end, int64_t line0, int64_t off0,
                       const char *skip)
{
    const char *base = p, *ls, *le;
    int64_t lines = line0 >= 0 ? line0 : 0;
    char at[600];
    while ((p = next_line(p, end, &ls, &le, &lines))) {
        if (ls == skip)
            continue;
        where(at, sizeof at, c, line0 >= 0 ? lines : 0, off0 + (ls - base));
        int nf = split(ls, le, c->delim, c->f, MAX_COLS);
        if (nf < 0)
            return ct__error(CT_EINVAL, "%s: more than %d columns", at, MAX_COLS);
        int rc = add_row(c, nf, at);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int csv_init(csv *c, const char *path, const ct_csv_opts *opts)
{
    memset(c, 0, sizeof *c);
    c->path = path;
    c->o = opts ? *opts : (ct_csv_opts){0};
    c->delim = c->o.delimiter ? c->o.delimiter : ',';
    if (!(c->f = malloc(MAX_COLS * sizeof *c->f)))
        return ct__error(CT_ENOMEM, "%s: out of memory", path);
    return 0;
}

/* The dataset of the rows read. */
static int csv_finish(csv *c, ct_dataset **out)
{
    const int64_t shape[1] = {c->ncols - (c->nt ? c->nt : 1)}, tshape[1] = {c->nt};
    if (c->nt)
        return ct_dataset_from_f32_targets(c->x, c->y, c->n, 1, shape, 1, tshape, out);
    return ct_dataset_from_f32(c->x, c->labels, c->n, 1, shape, out);
}

static void csv_free(csv *c)
{
    for (int k = 0; k < c->nnames; k++)
        free(c->names[k]);
    free(c->names);
    free(c->f);
    free(c->x);
    free(c->y);
    free(c->labels);
}

int ct_dataset_open_csv(const char *path, const ct_csv_opts *opts, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_open_csv: out is NULL");
    *out = NULL;
    if (!path)
        return ct__error(CT_EINVAL, "ct_dataset_open_csv: path is NULL");
    uint8_t *buf = NULL;
    size_t len = 0;
    csv c;
    int rc = csv_init(&c, path, opts);
    if (rc < 0 || (rc = ct__read_file(path, &buf, &len)) < 0)
        goto out;
    const char *p = (const char *)buf, *end = p + len, *ls, *le;
    int64_t line = 0;
    char at[600];
    if (!next_line(p, end, &ls, &le, &line)) {
        rc = ct__error(CT_EINVAL, "%s: no data lines", path);
        goto out;
    }
    if ((rc = layout(&c, ls, le, where(at, sizeof at, &c, line, 0))) < 0 ||
        (rc = parse_lines(&c, p, end, 0, 0, c.header ? ls : NULL)) < 0)
        goto out;
    rc = csv_finish(&c, out);
out:
    csv_free(&c);
    free(buf);
    return rc;
}

/* pread of [off, off + n) into dst; *got bytes (fewer at the end of the file). */
static int read_at(int fd, const char *path, char *dst, int64_t off, int64_t n, int64_t *got,
                   int64_t *counted)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = pread(fd, dst + *got, (size_t)(n - *got), (off_t)(off + *got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ct__error(CT_EIO, "%s: read at byte %lld failed: %s", path,
                             (long long)(off + *got), strerror(errno));
        if (r == 0)
            break;
        *got += r;
        *counted += r;
    }
    return 0;
}

#define CHUNK 256

/* Reads from off until the buffer (grown as needed) holds stop_after_nonblank ? a complete
 * non-blank line : a '\n' (or the end of the file), appending to *buf at *len. */
static int read_to_newline(int fd, const char *path, char **buf, int64_t *len, int64_t *cap,
                           int64_t off, int64_t size, bool nonblank, int64_t *counted)
{
    int64_t scan = *len;
    while (off < size) {
        if (*len + CHUNK > *cap) {
            int64_t ncap = (*len + CHUNK) * 2;
            char *b = realloc(*buf, (size_t)ncap);
            if (!b)
                return ct__error(CT_ENOMEM, "%s: out of memory", path);
            *buf = b;
            *cap = ncap;
        }
        int64_t got;
        int rc = read_at(fd, path, *buf + *len, off, CHUNK, &got, counted);
        if (rc < 0)
            return rc;
        if (got == 0)
            break;
        *len += got;
        off += got;
        for (; scan < *len; scan++) {
            if ((*buf)[scan] != '\n')
                continue;
            if (!nonblank)
                return 0;
            const char *ls, *le;
            int64_t lines = 0;
            if (next_line(*buf, *buf + scan + 1, &ls, &le, &lines))
                return 0;
        }
    }
    return 0;
}

int ct_dataset_open_csv_shard(const char *path, const ct_csv_opts *opts, int rank, int world,
                              ct_dataset **out, int64_t *bytes_read)
{
    if (bytes_read)
        *bytes_read = 0;
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_open_csv_shard: out is NULL");
    *out = NULL;
    if (!path)
        return ct__error(CT_EINVAL, "ct_dataset_open_csv_shard: path is NULL");
    if (world < 1 || rank < 0 || rank >= world)
        return ct__error(CT_EINVAL, "ct_dataset_open_csv_shard: rank %d not in [0, world %d)", rank,
                         world);
    csv c;
    char *first = NULL, *buf = NULL, at[600];
    int64_t flen = 0, fcap = 0, len = 0, cap = 0, counted = 0;
    int fd = -1, rc = csv_init(&c, path, opts);
    if (rc < 0)
        goto out;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = ct__error(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
        goto out;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        rc = ct__error(CT_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    int64_t size = sb.st_size;
    /* the file's first non-blank line: the layout (and the header every shard skips) */
    if ((rc = read_to_newline(fd, path, &first, &flen, &fcap, 0, size, true, &counted)) < 0)
        goto out;
    const char *ls, *le;
    int64_t line = 0;
    if (!first || !next_line(first, first + flen, &ls, &le, &line)) {
        rc = ct__error(CT_EINVAL, "%s: no data lines", path);
        goto out;
    }
    int64_t header_off = ls - first;
    if ((rc = layout(&c, ls, le, where(at, sizeof at, &c, line, 0))) < 0)
        goto out;
    /* the byte range, from one byte before it: is its start a line start? */
    int64_t lo = (int64_t)((__int128)size * rank / world);
    int64_t hi = (int64_t)((__int128)size * (rank + 1) / world);
    int64_t from = lo > 0 ? lo - 1 : 0, got;
    cap = hi - from + CHUNK;
    if (!(buf = malloc((size_t)cap))) {
        rc = ct__error(CT_ENOMEM, "%s: out of memory for %lld bytes", path, (long long)cap);
        goto out;
    }
    if ((rc = read_at(fd, path, buf, from, hi - from, &got, &counted)) < 0)
        goto out;
    len = got;
    /* the rest of the last line that starts before hi */
    if (len > 0 && buf[len - 1] != '\n' &&
        (rc = read_to_newline(fd, path, &buf, &len, &cap, from + len, size, false, &counted)) < 0)
        goto out;
    /* our lines: those starting in [lo, hi) */
    int64_t s0 = 0;
    if (lo > 0) {
        const char *nl = memchr(buf, '\n', (size_t)len);
        s0 = nl ? nl - buf + 1 : len;
    }
    int64_t e0 = s0;
    while (e0 < len && from + e0 < hi) {
        const char *nl = memchr(buf + e0, '\n', (size_t)(len - e0));
        e0 = nl ? nl - buf + 1 : len;
    }
    const char *skip = c.header && header_off >= from + s0 && header_off < from + e0
                           ? buf + (header_off - from)
                           : NULL;
    if ((rc = parse_lines(&c, buf + s0, buf + e0, lo == 0 ? 0 : -1, from + s0, skip)) < 0)
        goto out;
    rc = csv_finish(&c, out);
out:
    if (bytes_read)
        *bytes_read = counted;
    if (fd >= 0)
        close(fd);
    csv_free(&c);
    free(first);
    free(buf);
    return rc;
}
