/* tests/engine/testutil.h — helpers shared by the engine tests: the reference-file reader
 * (format written by make_reference.py), comparisons that print both values, and a finite
 * difference gradient checker. Header-only, static functions; not a library. */
#ifndef CT_TEST_ENGINE_UTIL_H
#define CT_TEST_ENGINE_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/error.h"
#include "ct/nn.h"
#include "ct/tensor.h"

static int g_fail;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " (last error: %s)\n", ct_last_error());                               \
            g_fail++;                                                                              \
        }                                                                                          \
    } while (0)

/* ---- reference file ---- */
typedef struct ref_rec {
    char name[128];
    ct_tensor *t;
} ref_rec;

typedef struct ref_file {
    ref_rec *v;
    int n;
} ref_file;

static __attribute__((unused)) ref_file ref_load(const char *dir, const char *file)
{
    ref_file r = {0};
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    char magic[8];
    if (!f || fread(magic, 1, 8, f) != 8 || memcmp(magic, "CTREF1", 6) != 0) {
        fprintf(stderr, "cannot read reference file %s\n", path);
        exit(1);
    }
    for (;;) {
        uint32_t nl, dt, nd;
        if (fread(&nl, 4, 1, f) != 1)
            break;
        ref_rec rec = {0};
        if (nl >= sizeof(rec.name) || fread(rec.name, 1, nl, f) != nl || fread(&dt, 4, 1, f) != 1 ||
            fread(&nd, 4, 1, f) != 1 || nd > CT_MAX_DIMS) {
            fprintf(stderr, "%s: corrupt record\n", path);
            exit(1);
        }
        int64_t dims[CT_MAX_DIMS];
        if (nd && fread(dims, 8, nd, f) != nd)
            exit(1);
        rec.t = ct_tensor_new(dt == 4 ? CT_I64 : CT_F32, (int)nd, dims);
        size_t bytes = (size_t)ct_tensor_numel(rec.t) * ct_dtype_size(ct_tensor_dtype(rec.t));
        if (fread(ct_tensor_data(rec.t), 1, bytes, f) != bytes) {
            fprintf(stderr, "%s: truncated record %s\n", path, rec.name);
            exit(1);
        }
        r.v = realloc(r.v, (size_t)(r.n + 1) * sizeof(*r.v));
        r.v[r.n++] = rec;
    }
    fclose(f);
    return r;
}

/* Borrowed; NULL if absent. */
static __attribute__((unused)) ct_tensor *ref_get(ref_file *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->v[i].name, name) == 0)
            return r->v[i].t;
    return NULL;
}

static __attribute__((unused)) ct_tensor *ref_must(ref_file *r, const char *name)
{
    ct_tensor *t = ref_get(r, name);
    if (!t) {
        fprintf(stderr, "reference record %s missing\n", name);
        exit(1);
    }
    return t;
}

static __attribute__((unused)) void ref_free(ref_file *r)
{
    for (int i = 0; i < r->n; i++)
        ct_tensor_release(&r->v[i].t);
    free(r->v);
    r->v = NULL;
    r->n = 0;
}

static __attribute__((unused)) const char *ref_dir(int argc, char **argv)
{
    return argc > 1 ? argv[1] : "tests/engine/ref";
}

/* ---- comparisons ---- */

/* Max relative error max|a-b| / max(max|b|, 1e-3) must be <= tol (relative to the tensor's
 * scale, so near-zero elements do not blow it up). Prints both values at the worst index. */
static __attribute__((unused)) int close_f32(const char *what, const float *a, const float *b,
                                             int64_t n, double tol)
{
    double maxb = 0, worst = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(b[i]) > maxb)
            maxb = fabs(b[i]);
    double scale = maxb > 1e-3 ? maxb : 1e-3;
    /* A gradient that is mathematically zero (a bias feeding batch norm) is f32 rounding noise
     * in both: accept when both are below 1e-5 in magnitude everywhere. */
    if (maxb < 1e-5) {
        double maxa = 0;
        for (int64_t i = 0; i < n; i++)
            maxa = fabs(a[i]) > maxa ? fabs(a[i]) : maxa;
        if (maxa < 1e-5)
            return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / scale;
        if (!(d <= worst)) {
            worst = d;
            wi = i;
        }
    }
    if (!(worst <= tol)) {
        fprintf(stderr, "FAIL %s: rel err %.3g > %.1g at [%lld]: got %.8g want %.8g\n", what, worst,
                tol, (long long)wi, n ? a[wi] : 0.0f, n ? b[wi] : 0.0f);
        g_fail++;
        return -1;
    }
    return 0;
}

static __attribute__((unused)) int close_t(const char *what, const ct_tensor *got,
                                           const ct_tensor *want, double tol)
{
    if (!got || !want) {
        fprintf(stderr, "FAIL %s: missing tensor (got %p want %p): %s\n", what, (void *)got,
                (void *)want, ct_last_error());
        g_fail++;
        return -1;
    }
    if (ct_tensor_numel(got) != ct_tensor_numel(want)) {
        fprintf(stderr, "FAIL %s: %lld elements, want %lld\n", what,
                (long long)ct_tensor_numel(got), (long long)ct_tensor_numel(want));
        g_fail++;
        return -1;
    }
    return close_f32(what, ct_tensor_f32(got), ct_tensor_f32(want), ct_tensor_numel(want), tol);
}

/* ---- finite differences ---- */

typedef ct_tensor *(*fd_fn)(ct_tensor **in, void *ctx);

static uint64_t fd_rng = 88172645463325252ULL;
static __attribute__((unused)) float fd_rand(void)
{
    fd_rng ^= fd_rng << 13;
    fd_rng ^= fd_rng >> 7;
    fd_rng ^= fd_rng << 17;
    return (float)((fd_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* L = sum(fn(in) * R) in double. */
static __attribute__((unused)) double fd_loss(fd_fn fn, ct_tensor **in, void *ctx, const float *R)
{
    ct_tensor *y = fn(in, ctx);
    if (!y)
        return NAN;
    const float *p = ct_tensor_f32(y);
    double s = 0;
    for (int64_t i = 0; i < ct_tensor_numel(y); i++)
        s += (double)p[i] * R[i];
    ct_tensor_release(&y);
    return s;
}

/* Central differences (step eps) for every element of the inputs flagged in check (bitmask),
 * against the autograd gradient of L = sum(y * R). |fd - an| <= atol + rtol * |an|. */
static __attribute__((unused)) int fd_check(const char *what, fd_fn fn, ct_tensor **in, int nin,
                                            unsigned check, void *ctx, double eps, double atol,
                                            double rtol)
{
    int bad = 0;
    for (int i = 0; i < nin; i++)
        if (check & (1u << i)) {
            ct_tensor_set_requires_grad(in[i], true);
            ct_tensor_zero_grad(in[i]);
        }
    ct_tensor *y = fn(in, ctx);
    if (!y) {
        fprintf(stderr, "FAIL %s: forward failed: %s\n", what, ct_last_error());
        g_fail++;
        return -1;
    }
    int64_t ny = ct_tensor_numel(y);
    float *R = malloc((size_t)ny * sizeof(float));
    for (int64_t i = 0; i < ny; i++)
        R[i] = fd_rand();
    ct_tensor *gR = ct_tensor_from_f32(ct_tensor_ndim(y), ct_tensor_shape(y), R);
    if (ct_tensor_backward(y, gR) < 0) {
        fprintf(stderr, "FAIL %s: backward failed: %s\n", what, ct_last_error());
        g_fail++;
        bad = 1;
    }
    ct_tensor_release(&gR);
    ct_tensor_release(&y);
    bool prev = ct_autograd_set_enabled(false);
    for (int i = 0; i < nin && !bad; i++) {
        if (!(check & (1u << i)))
            continue;
        ct_tensor *g = ct_tensor_grad(in[i]);
        if (!g) {
            fprintf(stderr, "FAIL %s: input %d got no gradient\n", what, i);
            g_fail++;
            bad = 1;
            break;
        }
        float *x = ct_tensor_f32(in[i]), *an = ct_tensor_f32(g);
        for (int64_t j = 0; j < ct_tensor_numel(in[i]); j++) {
            float v = x[j];
            x[j] = v + (float)eps;
            double lp = fd_loss(fn, in, ctx, R);
            x[j] = v - (float)eps;
            double lm = fd_loss(fn, in, ctx, R);
            x[j] = v;
            double fd = (lp - lm) / (2 * eps);
            if (!(fabs(fd - an[j]) <= atol + rtol * fabs(an[j]))) {
                fprintf(stderr, "FAIL %s: d/d in%d[%lld]: finite diff %.6g, autograd %.6g\n", what,
                        i, (long long)j, fd, an[j]);
                g_fail++;
                bad = 1;
                break;
            }
        }
    }
    ct_autograd_set_enabled(prev);
    for (int i = 0; i < nin; i++)
        if (check & (1u << i))
            ct_tensor_set_requires_grad(in[i], false);
    free(R);
    return bad ? -1 : 0;
}

/* A new f32 tensor of uniform values in [-1, 1). */
static __attribute__((unused)) ct_tensor *rand_t(int ndim, const int64_t *shape)
{
    ct_tensor *t = ct_tensor_new(CT_F32, ndim, shape);
    float *p = ct_tensor_f32(t);
    for (int64_t i = 0; i < ct_tensor_numel(t); i++)
        p[i] = fd_rand();
    return t;
}

#endif
