/* trainer/data/csv.c — the CSV reader: one sample a line, one integer label column, the other
 * columns float features; sample shape (F).
 *
 * Errors name the file, the 1-based line and the 1-based column (field number, and the header
 * name when there is one). Not here: quoting, missing values, string categories. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int ct_dataset_open_csv(const char *path, const ct_csv_opts *opts, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_open_csv: out is NULL");
    *out = NULL;
    if (!path)
        return ct__error(CT_EINVAL, "ct_dataset_open_csv: path is NULL");
    ct_csv_opts o = opts ? *opts : (ct_csv_opts){0};
    char delim = o.delimiter ? o.delimiter : ',';
    uint8_t *buf = NULL;
    size_t len = 0;
    field *f = NULL;
    char **names = NULL;
    float *x = NULL;
    int64_t *labels = NULL;
    int64_t n = 0, cap = 0;
    int ncols = 0, lcol = -1, nnames = 0;
    int rc = ct__read_file(path, &buf, &len);
    if (rc < 0)
        goto out;
    f = malloc(MAX_COLS * sizeof *f);
    if (!f) {
        rc = ct__error(CT_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    const char *p = (const char *)buf, *end = p + len;
    int line = 0;
    bool first = true;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        if (!eol)
            eol = end;
        line++;
        const char *le = eol;
        if (le > p && le[-1] == '\r')
            le--;
        const char *t = p;
        while (t < le && isspace((unsigned char)*t))
            t++;
        if (t == le) { /* blank line */
            p = next;
            continue;
        }
        int nf = split(p, le, delim, f, MAX_COLS);
        if (nf < 0) {
            rc = ct__error(CT_EINVAL, "%s:%d: more than %d columns", path, line, MAX_COLS);
            goto out;
        }
        if (first) {
            first = false;
            ncols = nf;
            if (ncols < 2) {
                rc = ct__error(CT_EINVAL,
                               "%s:%d: %d column(s): need a label and at least one feature "
                               "(delimiter '%c')",
                               path, line, ncols, delim);
                goto out;
            }
            bool header = o.header > 0;
            if (o.header == 0) { /* auto: a non-numeric field means a header */
                double v;
                for (int c = 0; c < nf && !header; c++)
                    header = !parse_num(&f[c], &v);
            }
            if (header) {
                names = calloc((size_t)nf, sizeof *names);
                if (!names) {
                    rc = ct__error(CT_ENOMEM, "%s: out of memory", path);
                    goto out;
                }
                nnames = nf;
                for (int c = 0; c < nf; c++) {
                    names[c] = strndup(f[c].s, f[c].len);
                    if (!names[c]) {
                        rc = ct__error(CT_ENOMEM, "%s: out of memory", path);
                        goto out;
                    }
                }
            }
            if (o.label_name) {
                if (!header) {
                    rc = ct__error(CT_EINVAL,
                                   "%s: label column '%s' asked by name but the file "
                                   "has no header line",
                                   path, o.label_name);
                    goto out;
                }
                for (int c = 0; c < nf && lcol < 0; c++)
                    if (strcmp(names[c], o.label_name) == 0)
                        lcol = c;
                if (lcol < 0) {
                    rc = ct__error(CT_EINVAL, "%s:%d: no column named '%s' in the header", path,
                                   line, o.label_name);
                    goto out;
                }
            } else {
                lcol = o.label_column < 0 ? ncols + o.label_column : o.label_column;
                if (lcol < 0 || lcol >= ncols) {
                    rc = ct__error(CT_EINVAL, "%s:%d: label_column %d out of range for %d columns",
                                   path, line, o.label_column, ncols);
                    goto out;
                }
            }
            if (header) {
                p = next;
                continue;
            }
        }
        if (nf != ncols) {
            rc = ct__error(CT_EINVAL, "%s:%d: expected %d columns, got %d", path, line, ncols, nf);
            goto out;
        }
        if (n == cap) {
            int64_t ncap = cap ? cap * 2 : 1024;
            float *nx = realloc(x, (size_t)ncap * (size_t)(ncols - 1) * sizeof *x);
            if (nx)
                x = nx;
            int64_t *nl = realloc(labels, (size_t)ncap * sizeof *labels);
            if (nl)
                labels = nl;
            if (!nx || !nl) {
                rc = ct__error(CT_ENOMEM, "%s:%d: out of memory", path, line);
                goto out;
            }
            cap = ncap;
        }
        float *row = x + n * (ncols - 1);
        for (int c = 0, k = 0; c < ncols; c++) {
            double v;
            if (!parse_num(&f[c], &v)) {
                rc = ct__error(CT_EINVAL, "%s:%d: column %d%s%s%s: cannot parse '%.*s' as a number",
                               path, line, c + 1, names ? " (" : "", names ? names[c] : "",
                               names ? ")" : "", (int)(f[c].len > 40 ? 40 : f[c].len), f[c].s);
                goto out;
            }
            if (c == lcol) {
                if (v != floor(v) || fabs(v) > 9.0e15) {
                    rc = ct__error(CT_EINVAL, "%s:%d: column %d (label): '%.*s' is not an integer",
                                   path, line, c + 1, (int)(f[c].len > 40 ? 40 : f[c].len), f[c].s);
                    goto out;
                }
                labels[n] = (int64_t)v;
            } else {
                row[k++] = (float)v;
            }
        }
        n++;
        p = next;
    }
    if (ncols == 0) {
        rc = ct__error(CT_EINVAL, "%s: no data lines", path);
        goto out;
    }
    const int64_t shape[1] = {ncols - 1};
    rc = ct_dataset_from_f32(x, labels, n, 1, shape, out);
out:
    for (int c = 0; c < nnames; c++)
        free(names[c]);
    free(names);
    free(f);
    free(buf);
    free(x);
    free(labels);
    return rc;
}
