/* trainer/data/dataset.c — the ct_dataset object: a length, a sample shape and a get function
 * (int64 labels, or f32 targets of a target shape for a "target dataset"), plus the in-memory
 * datasets (u8 divided by 255 through a lookup table, or f32) that every reader produces.
 *
 * Not here: file formats (idx.c, cifar.c, csv.c), batching (loader.c). */
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "trainer/data/data_internal.h"

struct ct_dataset {
    ct_dataset_ops ops;
    void *self;
    int64_t length;
    int ndim;
    int64_t shape[CT_DATA_MAX_DIMS];
    int64_t numel; /* floats per sample */
    int tndim;     /* target dims; 0: int64 labels */
    int64_t tshape[CT_DATA_MAX_DIMS];
    int64_t tnumel; /* floats per target; 0: labels */
};

/* Checks a shape (what names it for messages) and returns its element count, or < 0. */
static int64_t check_shape(const char *fn, const char *what, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > CT_DATA_MAX_DIMS || !shape)
        return ct__error(CT_EINVAL, "%s: %s ndim %d not in 1..%d", fn, what, ndim,
                         CT_DATA_MAX_DIMS);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return ct__error(CT_EINVAL, "%s: %s[%d] = %lld must be > 0", fn, what, d,
                             (long long)shape[d]);
        numel *= shape[d];
    }
    return numel;
}

/* Both makers: tndim 0 for a dataset of labels. */
static int ds_new(const char *fn, const ct_dataset_ops *ops, void *self, int64_t length, int ndim,
                  const int64_t *shape, int tndim, const int64_t *tshape, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (!ops || !(tndim ? (void *)ops->get_target : (void *)ops->get))
        return ct__error(CT_EINVAL, "%s: ops->%s is NULL", fn, tndim ? "get_target" : "get");
    if (length < 0)
        return ct__error(CT_EINVAL, "%s: length %lld < 0", fn, (long long)length);
    int64_t numel = check_shape(fn, "shape", ndim, shape), tnumel = 0;
    if (numel < 0)
        return (int)numel;
    if (tndim && (tnumel = check_shape(fn, "target shape", tndim, tshape)) < 0)
        return (int)tnumel;
    ct_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return ct__error(CT_ENOMEM, "%s: out of memory", fn);
    ds->ops = *ops;
    ds->self = self;
    ds->length = length;
    ds->ndim = ndim;
    memcpy(ds->shape, shape, (size_t)ndim * sizeof *shape);
    ds->numel = numel;
    ds->tndim = tndim;
    if (tndim)
        memcpy(ds->tshape, tshape, (size_t)tndim * sizeof *tshape);
    ds->tnumel = tnumel;
    *out = ds;
    return 0;
}

int ct_dataset_new(const ct_dataset_ops *ops, void *self, int64_t length, int ndim,
                   const int64_t *shape, ct_dataset **out)
{
    return ds_new("ct_dataset_new", ops, self, length, ndim, shape, 0, NULL, out);
}

int ct_dataset_new_targets(const ct_dataset_ops *ops, void *self, int64_t length, int ndim,
                           const int64_t *shape, int tndim, const int64_t *tshape, ct_dataset **out)
{
    if (tndim < 1) {
        if (out)
            *out = NULL;
        return ct__error(CT_EINVAL, "ct_dataset_new_targets: target ndim %d not in 1..%d", tndim,
                         CT_DATA_MAX_DIMS);
    }
    return ds_new("ct_dataset_new_targets", ops, self, length, ndim, shape, tndim, tshape, out);
}

void ct_dataset_destroy(ct_dataset **ds)
{
    if (!ds || !*ds)
        return;
    if ((*ds)->ops.destroy)
        (*ds)->ops.destroy((*ds)->self);
    free(*ds);
    *ds = NULL;
}

int64_t ct_dataset_length(const ct_dataset *ds)
{
    return ds ? ds->length : 0;
}

int ct_dataset_shape(const ct_dataset *ds, int64_t *shape)
{
    if (!ds)
        return 0;
    if (shape)
        memcpy(shape, ds->shape, (size_t)ds->ndim * sizeof *shape);
    return ds->ndim;
}

int64_t ct_dataset_sample_numel(const ct_dataset *ds)
{
    return ds ? ds->numel : 0;
}

int ct_dataset_get(ct_dataset *ds, int64_t i, float *x, int64_t *label)
{
    if (!ds || !x || !label)
        return ct__error(CT_EINVAL, "ct_dataset_get: NULL argument");
    if (ds->tndim)
        return ct__error(CT_EINVAL, "ct_dataset_get: the dataset has f32 targets, not labels "
                                    "(ct_dataset_get_target)");
    if (i < 0 || i >= ds->length)
        return ct__error(CT_ERANGE, "ct_dataset_get: index %lld not in [0, %lld)", (long long)i,
                         (long long)ds->length);
    return ds->ops.get(ds->self, i, x, label);
}

int ct_dataset_target_shape(const ct_dataset *ds, int64_t *shape)
{
    if (!ds)
        return 0;
    if (shape && ds->tndim)
        memcpy(shape, ds->tshape, (size_t)ds->tndim * sizeof *shape);
    return ds->tndim;
}

int64_t ct_dataset_target_numel(const ct_dataset *ds)
{
    return ds ? ds->tnumel : 0;
}

int ct_dataset_get_target(ct_dataset *ds, int64_t i, float *x, float *y)
{
    if (!ds || !x || !y)
        return ct__error(CT_EINVAL, "ct_dataset_get_target: NULL argument");
    if (!ds->tndim)
        return ct__error(CT_EINVAL, "ct_dataset_get_target: the dataset has int64 labels, not "
                                    "f32 targets (ct_dataset_get)");
    if (i < 0 || i >= ds->length)
        return ct__error(CT_ERANGE, "ct_dataset_get_target: index %lld not in [0, %lld)",
                         (long long)i, (long long)ds->length);
    return ds->ops.get_target(ds->self, i, x, y);
}

/* ---- in-memory datasets ------------------------------------------------------------------ */

typedef struct mem_ds {
    uint8_t *u8;     /* (length, numel) or NULL */
    float *f32;      /* (length, numel) or NULL */
    int64_t *labels; /* (length), or NULL with targets */
    float *targets;  /* (length, tnumel) or NULL */
    int64_t numel, tnumel;
    float lut[256]; /* u8 value -> float, exact (k / div) */
} mem_ds;

static void mem_destroy(void *self)
{
    mem_ds *m = self;
    free(m->u8);
    free(m->f32);
    free(m->labels);
    free(m->targets);
    free(m);
}

static int mem_get_u8(void *self, int64_t i, float *x, int64_t *label)
{
    const mem_ds *m = self;
    const uint8_t *src = m->u8 + i * m->numel;
    for (int64_t k = 0; k < m->numel; k++)
        x[k] = m->lut[src[k]];
    *label = m->labels[i];
    return 0;
}

static int mem_get_f32(void *self, int64_t i, float *x, int64_t *label)
{
    const mem_ds *m = self;
    memcpy(x, m->f32 + i * m->numel, (size_t)m->numel * sizeof *x);
    *label = m->labels[i];
    return 0;
}

static int mem_get_f32_target(void *self, int64_t i, float *x, float *y)
{
    const mem_ds *m = self;
    memcpy(x, m->f32 + i * m->numel, (size_t)m->numel * sizeof *x);
    memcpy(y, m->targets + i * m->tnumel, (size_t)m->tnumel * sizeof *y);
    return 0;
}

static int64_t shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim && shape; d++)
        n *= shape[d] > 0 ? shape[d] : 0;
    return n;
}

/* Takes ownership of u8 or f32 and labels; frees them on failure. */
static int mem_new(uint8_t *u8, float *f32, int64_t *labels, int64_t length, int ndim,
                   const int64_t *shape, float div, ct_dataset **out)
{
    static const ct_dataset_ops u8_ops = {mem_get_u8, mem_destroy};
    static const ct_dataset_ops f32_ops = {mem_get_f32, mem_destroy};
    int rc = CT_ENOMEM;
    mem_ds *m = calloc(1, sizeof *m);
    if (!m) {
        rc = ct__error(CT_ENOMEM, "dataset: out of memory");
        goto err;
    }
    m->u8 = u8;
    m->f32 = f32;
    m->labels = labels;
    m->numel = shape_numel(ndim, shape);
    for (int k = 0; k < 256; k++)
        m->lut[k] = (div == 0.0f || div == 1.0f) ? (float)k : (float)k / div;
    rc = ct_dataset_new(u8 ? &u8_ops : &f32_ops, m, length, ndim, shape, out);
    if (rc < 0)
        goto err;
    return 0;
err:
    if (m)
        free(m);
    free(u8);
    free(f32);
    free(labels);
    return rc;
}

int ct__dataset_u8_take(uint8_t *x, int64_t *labels, int64_t length, int ndim, const int64_t *shape,
                        float div, ct_dataset **out)
{
    return mem_new(x, NULL, labels, length, ndim, shape, div, out);
}

/* Copies (length, numel) elements of size elt and the labels; shared by both public makers. */
static int mem_copy(const void *x, size_t elt, const int64_t *labels, int64_t length, int ndim,
                    const int64_t *shape, void **xc, int64_t **lc)
{
    *xc = NULL;
    *lc = NULL;
    if (length < 0 || ndim < 1 || ndim > CT_DATA_MAX_DIMS || !shape)
        return ct__error(CT_EINVAL, "dataset: bad length %lld or ndim %d", (long long)length, ndim);
    if ((length > 0 && (!x || !labels)))
        return ct__error(CT_EINVAL, "dataset: x or labels is NULL");
    size_t nx = (size_t)length * (size_t)shape_numel(ndim, shape) * elt;
    *xc = malloc(nx ? nx : 1);
    *lc = malloc(length ? (size_t)length * sizeof **lc : 1);
    if (!*xc || !*lc) {
        free(*xc);
        free(*lc);
        *xc = NULL;
        *lc = NULL;
        return ct__error(CT_ENOMEM, "dataset: out of memory copying %zu bytes", nx);
    }
    if (nx)
        memcpy(*xc, x, nx);
    if (length)
        memcpy(*lc, labels, (size_t)length * sizeof **lc);
    return 0;
}

int ct_dataset_from_f32(const float *x, const int64_t *labels, int64_t length, int ndim,
                        const int64_t *shape, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_from_f32: out is NULL");
    *out = NULL;
    void *xc;
    int64_t *lc;
    int rc = mem_copy(x, sizeof(float), labels, length, ndim, shape, &xc, &lc);
    if (rc < 0)
        return rc;
    return mem_new(NULL, xc, lc, length, ndim, shape, 1.0f, out);
}

int ct_dataset_from_u8(const uint8_t *x, const int64_t *labels, int64_t length, int ndim,
                       const int64_t *shape, float div, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_from_u8: out is NULL");
    *out = NULL;
    void *xc;
    int64_t *lc;
    int rc = mem_copy(x, 1, labels, length, ndim, shape, &xc, &lc);
    if (rc < 0)
        return rc;
    return mem_new(xc, NULL, lc, length, ndim, shape, div, out);
}

int ct_dataset_from_f32_targets(const float *x, const float *y, int64_t length, int ndim,
                                const int64_t *shape, int tndim, const int64_t *tshape,
                                ct_dataset **out)
{
    static const ct_dataset_ops ops = {.get_target = mem_get_f32_target, .destroy = mem_destroy};
    const char *fn = "ct_dataset_from_f32_targets";
    if (!out)
        return ct__error(CT_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    int64_t numel = check_shape(fn, "shape", ndim, shape);
    int64_t tnumel = numel < 0 ? numel : check_shape(fn, "target shape", tndim, tshape);
    if (tnumel < 0)
        return (int)tnumel;
    if (length < 0 || (length > 0 && (!x || !y)))
        return ct__error(CT_EINVAL, "%s: length %lld < 0 or x / y NULL", fn, (long long)length);
    mem_ds *m = calloc(1, sizeof *m);
    size_t nx = (size_t)(length * numel) * sizeof(float),
           ny = (size_t)(length * tnumel) * sizeof(float);
    if (m) {
        m->f32 = malloc(nx ? nx : 1);
        m->targets = malloc(ny ? ny : 1);
    }
    if (!m || !m->f32 || !m->targets) {
        if (m)
            mem_destroy(m);
        return ct__error(CT_ENOMEM, "%s: out of memory copying %zu bytes", fn, nx + ny);
    }
    if (nx)
        memcpy(m->f32, x, nx);
    if (ny)
        memcpy(m->targets, y, ny);
    m->numel = numel;
    m->tnumel = tnumel;
    int rc = ct_dataset_new_targets(&ops, m, length, ndim, shape, tndim, tshape, out);
    if (rc < 0)
        mem_destroy(m);
    return rc;
}

struct subset_view {
    ct_dataset *base; /* borrowed */
    int64_t start;
};

static int subset_get(void *self, int64_t i, float *x, int64_t *label);

const uint8_t *ct__dataset_u8(const ct_dataset *ds, const float **lut, const int64_t **labels)
{
    if (ds && ds->ops.get == subset_get) { /* a window of a u8 dataset is one too */
        const struct subset_view *v = ds->self;
        const uint8_t *u8 = ct__dataset_u8(v->base, lut, labels);
        if (!u8)
            return NULL;
        *labels += v->start;
        return u8 + v->start * v->base->numel;
    }
    if (!ds || ds->ops.get != mem_get_u8)
        return NULL;
    const mem_ds *m = ds->self;
    *lut = m->lut;
    *labels = m->labels;
    return m->u8;
}

/* ---- subsets ------------------------------------------------------------------------------ */

typedef struct subset_view subset_ds;

static int subset_get(void *self, int64_t i, float *x, int64_t *label)
{
    const subset_ds *s = self;
    return s->base->ops.get(s->base->self, s->start + i, x, label);
}

static int subset_get_target(void *self, int64_t i, float *x, float *y)
{
    const subset_ds *s = self;
    return s->base->ops.get_target(s->base->self, s->start + i, x, y);
}

int ct_dataset_subset(ct_dataset *base, int64_t start, int64_t count, ct_dataset **out)
{
    static const ct_dataset_ops ops = {subset_get, free, subset_get_target};
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_subset: out is NULL");
    *out = NULL;
    if (!base)
        return ct__error(CT_EINVAL, "ct_dataset_subset: base is NULL");
    if (start < 0 || count < 0 || start > base->length || count > base->length - start)
        return ct__error(CT_ERANGE, "ct_dataset_subset: [%lld, %lld) not within [0, %lld)",
                         (long long)start, (long long)(start + count), (long long)base->length);
    subset_ds *s = malloc(sizeof *s);
    if (!s)
        return ct__error(CT_ENOMEM, "ct_dataset_subset: out of memory");
    s->base = base;
    s->start = start;
    int rc = ds_new("ct_dataset_subset", &ops, s, count, base->ndim, base->shape, base->tndim,
                    base->tshape, out);
    if (rc < 0)
        free(s);
    return rc;
}
