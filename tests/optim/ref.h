/* tests/optim/ref.h — reads the reference files written by make_reference.py (lines of
 * `key v0 v1 ...`) and compares values; shared by the optim/sched/loss tests. Not a library:
 * static functions, test code only (prints, exits). */
#ifndef CT_TEST_OPTIM_REF_H
#define CT_TEST_OPTIM_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_line {
    char *key;
    double *v;
    int n;
} ref_line;

typedef struct ref_file {
    ref_line *lines;
    int n;
} ref_file;

static int g_failures;

/* Loads CT_OPTIM_REF_DIR/name; exits 1 if the file is missing (it is committed). */
__attribute__((unused)) static ref_file *ref_load(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", CT_OPTIM_REF_DIR, name);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open reference file %s\n", path);
        exit(1);
    }
    ref_file *r = calloc(1, sizeof *r);
    int cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0) {
        char *save = NULL, *tok = strtok_r(line, " \n", &save);
        if (!tok)
            continue;
        if (r->n == cap) {
            cap = cap ? cap * 2 : 256;
            r->lines = realloc(r->lines, (size_t)cap * sizeof *r->lines);
        }
        ref_line *l = &r->lines[r->n++];
        l->key = strdup(tok);
        l->v = NULL;
        l->n = 0;
        int vcap = 0;
        while ((tok = strtok_r(NULL, " \n", &save))) {
            if (l->n == vcap) {
                vcap = vcap ? vcap * 2 : 16;
                l->v = realloc(l->v, (size_t)vcap * sizeof *l->v);
            }
            l->v[l->n++] = strtod(tok, NULL);
        }
    }
    free(line);
    fclose(f);
    return r;
}

__attribute__((unused)) static void ref_free(ref_file *r)
{
    for (int i = 0; i < r->n; i++) {
        free(r->lines[i].key);
        free(r->lines[i].v);
    }
    free(r->lines);
    free(r);
}

/* The values of key; exits 1 if absent or if n >= 0 and the count differs. */
__attribute__((unused)) static const double *ref_get(const ref_file *r, const char *key, int n)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->lines[i].key, key)) {
            if (n >= 0 && r->lines[i].n != n) {
                fprintf(stderr, "reference %s: %d values, expected %d\n", key, r->lines[i].n, n);
                exit(1);
            }
            return r->lines[i].v;
        }
    fprintf(stderr, "reference key %s missing (re-run make_reference.py)\n", key);
    exit(1);
}

__attribute__((unused)) static int ref_count(const ref_file *r, const char *key)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->lines[i].key, key))
            return r->lines[i].n;
    return -1;
}

/* |got - want| <= rtol*|want| + atol, else print both and count a failure. Returns 1 if ok. */
__attribute__((unused)) static int check_close(const char *what, int idx, double got, double want,
                                               double rtol, double atol)
{
    double err = fabs(got - want);
    if (isnan(want) && isnan(got))
        return 1;
    if (!(err <= rtol * fabs(want) + atol)) {
        fprintf(stderr, "FAIL %s[%d]: got %.9g, want %.9g (abs err %.3g, rel err %.3g)\n", what,
                idx, got, want, err, want != 0 ? err / fabs(want) : err);
        g_failures++;
        return 0;
    }
    return 1;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(got, want)                                                                    \
    do {                                                                                           \
        long long g_ = (long long)(got), w_ = (long long)(want);                                   \
        if (g_ != w_) {                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #got, g_,    \
                    w_);                                                                           \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

/* The last error message must mention needle. */
#define CHECK_MSG(needle)                                                                          \
    do {                                                                                           \
        if (!strstr(ct_last_error(), (needle))) {                                                  \
            fprintf(stderr, "FAIL %s:%d: error message '%s' does not name '%s'\n", __FILE__,       \
                    __LINE__, ct_last_error(), (needle));                                          \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

#endif
