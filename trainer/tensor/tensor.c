/* trainer/tensor/tensor.c — tensors, ref-counted storage on a device (its memory comes from the
 * device's backend table, trainer/backend/backend.h), views, copies (also between devices:
 * ct__tensor_copy_on) and arenas.
 *
 * Not here: autograd (autograd.c), ct_tensor_to's place on the tape (tensor_to.c) and any math
 * (the backends, trainer/nn/). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/tensor/tensor_impl.h"

ct__storage *ct__storage_new_on(const ct__backend *bk, size_t nbytes, bool zero)
{
    ct__storage *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    if (bk->alloc(&s->data, nbytes) < 0 || (zero && bk->zero(s->data, nbytes) < 0)) {
        bk->free(s->data);
        free(s);
        return NULL;
    }
    s->refcount = 1;
    s->nbytes = nbytes;
    s->owned = true;
    s->device = bk->device;
    s->bk = bk;
    return s;
}

void ct__storage_release(ct__storage **sp)
{
    if (!sp || !*sp)
        return;
    ct__storage *s = *sp;
    *sp = NULL;
    if (--s->refcount > 0)
        return;
    if (s->owned)
        s->bk->free(s->data);
    free(s);
}

static int check_shape(int ndim, const int64_t *shape, int64_t *numel)
{
    if (ndim < 0 || ndim > CT_MAX_DIMS)
        return ct__error(CT_EINVAL, "tensor: ndim %d out of range 0..%d", ndim, CT_MAX_DIMS);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ct__error(CT_EINVAL, "tensor: shape[%d] = %lld is negative", i,
                             (long long)shape[i]);
        n *= shape[i];
    }
    *numel = n;
    return 0;
}

static void set_contiguous(ct_tensor *t, int ndim, const int64_t *shape)
{
    t->ndim = ndim;
    int64_t st = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t->shape[i] = shape[i];
        t->strides[i] = st;
        st *= shape[i];
    }
}

static ct_tensor *tensor_alloc_on(const ct__backend *bk, ct_dtype dt, int ndim,
                                  const int64_t *shape, bool zero)
{
    int64_t n = 0;
    if (check_shape(ndim, shape, &n) < 0)
        return NULL;
    ct_tensor *t = calloc(1, sizeof(*t));
    if (!t)
        goto oom;
    t->storage = ct__storage_new_on(bk, (size_t)n * ct_dtype_size(dt), zero);
    if (!t->storage)
        goto oom;
    t->refcount = 1;
    t->dtype = dt;
    set_contiguous(t, ndim, shape);
    return t;
oom:
    free(t);
    ct__error(CT_ENOMEM, "tensor: out of %s memory for %lld elements", bk->name, (long long)n);
    return NULL;
}

static ct_tensor *tensor_alloc(ct_dtype dt, int ndim, const int64_t *shape, bool zero)
{
    return tensor_alloc_on(&ct__backend_cpu, dt, ndim, shape, zero);
}

ct_tensor *ct__tensor_empty_on(const ct__backend *bk, ct_dtype dt, int ndim, const int64_t *shape)
{
    return tensor_alloc_on(bk, dt, ndim, shape, false);
}

ct_tensor *ct__tensor_empty_like(const ct_tensor *t)
{
    return tensor_alloc_on(ct__bk(t), t->dtype, t->ndim, t->shape, false);
}

ct_tensor *ct_tensor_to_i64(const ct_tensor *t)
{
    if (!t || (t->dtype != CT_F32 && t->dtype != CT_I64) || !ct_tensor_is_contiguous(t)) {
        ct__error(CT_EINVAL, "tensor_to_i64: needs a contiguous f32 or i64 tensor");
        return NULL;
    }
    if (t->dtype == CT_I64)
        return ct_tensor_retain((ct_tensor *)t);
    const ct__backend *bk = ct__bk(t);
    ct_tensor *c = tensor_alloc_on(bk, CT_I64, t->ndim, t->shape, false);
    if (c && CT__BK_CALL(bk, f32_to_i64, ct_tensor_numel(t), ct__f32(t), ct_tensor_data(c)) < 0)
        ct_tensor_release(&c);
    return c;
}

/* bytes from src (from's memory) to dst (to's), two devices of one kind with peer copies:
 * queued on to's compute stream after an event of from's, and from's later work (its free of
 * src among it) after the copy, so neither device waits on the host. An event per device: CUDA
 * records an event only on a stream of the device it was made on. */
static int peer_copy(const ct__backend *from, const ct__backend *to, void *dst, const void *src,
                     size_t bytes)
{
    void *written = NULL, *copied = NULL;
    int rc = from->event_new(&written);
    if (rc == 0 && (rc = to->event_new(&copied)) == 0 &&
        (rc = from->event_record(written, NULL)) == 0 &&
        (rc = to->stream_wait(NULL, written)) == 0 &&
        (rc = to->peer_copy(dst, src, bytes, NULL)) == 0 &&
        (rc = to->event_record(copied, NULL)) == 0)
        rc = from->stream_wait(NULL, copied);
    if (written)
        from->event_free(written);
    if (copied)
        to->event_free(copied);
    return rc;
}

/* bytes from src on from's device to dst on to's (two tables) */
int ct__copy_between(const ct__backend *from, const ct__backend *to, void *dst, const void *src,
                     size_t bytes)
{
    if (from == to)
        return to->copy(dst, src, bytes);
    if (from->device == CT_CPU)
        return to->upload(dst, src, bytes);
    if (to->device == CT_CPU)
        return from->download(dst, src, bytes);
    if (ct_device_kind(from->device) == ct_device_kind(to->device) && to->peer_copy)
        return peer_copy(from, to, dst, src, bytes);
    void *h = malloc(bytes ? bytes : 1); /* between two devices: through the host */
    int rc = !h ? ct__error(CT_ENOMEM, "tensor_to: out of memory") : from->download(h, src, bytes);
    if (rc == 0)
        rc = to->upload(dst, h, bytes);
    free(h);
    return rc;
}

/* (tensor_impl.h) t's copy on device, or t's clone on its own; not on the autograd tape. */
ct_tensor *ct__tensor_copy_on(const ct_tensor *t, ct_device device)
{
    const ct__backend *to = ct__backend_of(device), *from = ct__bk(t);
    if (!to)
        return NULL;
    ct_tensor *c;
    if (from == to) {
        c = ct_tensor_clone(t);
    } else if (!ct_tensor_is_contiguous(t)) {
        ct__error(CT_EINVAL, "tensor_to: the tensor must be contiguous");
        return NULL;
    } else {
        if (!(c = tensor_alloc_on(to, t->dtype, t->ndim, t->shape, false)))
            return NULL;
        c->fmt = t->fmt;
        size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype);
        if (ct__copy_between(from, to, ct_tensor_data(c), ct_tensor_data(t), bytes) < 0)
            ct_tensor_release(&c);
    }
    return c;
}

ct_tensor *ct_tensor_new(ct_dtype dt, int ndim, const int64_t *shape)
{
    return tensor_alloc(dt, ndim, shape, true);
}

ct_tensor *ct_tensor_from_f32(int ndim, const int64_t *shape, const float *data)
{
    ct_tensor *t = tensor_alloc(CT_F32, ndim, shape, false);
    if (t)
        memcpy(t->storage->data, data, (size_t)ct_tensor_numel(t) * sizeof(float));
    return t;
}

ct_tensor *ct_tensor_wrap(ct_dtype dt, int ndim, const int64_t *shape, void *data)
{
    int64_t n = 0;
    if (check_shape(ndim, shape, &n) < 0)
        return NULL;
    ct_tensor *t = calloc(1, sizeof(*t));
    ct__storage *s = calloc(1, sizeof(*s));
    if (!t || !s) {
        free(t);
        free(s);
        ct__error(CT_ENOMEM, "tensor: out of memory");
        return NULL;
    }
    s->refcount = 1;
    s->data = data;
    s->nbytes = (size_t)n * ct_dtype_size(dt);
    s->owned = false;
    s->device = CT_CPU;
    s->bk = &ct__backend_cpu;
    t->storage = s;
    t->refcount = 1;
    t->dtype = dt;
    set_contiguous(t, ndim, shape);
    return t;
}

ct_tensor *ct_tensor_retain(ct_tensor *t)
{
    if (t)
        t->refcount++;
    return t;
}

void ct_tensor_release(ct_tensor **tp)
{
    if (!tp || !*tp)
        return;
    ct_tensor *t = *tp;
    *tp = NULL;
    if (--t->refcount > 0)
        return;
    ct_tensor_release(&t->grad);
    ct__storage_release(&t->storage);
    free(t);
}

bool ct_tensor_is_plain(const ct_tensor *t)
{
    return t && t->fmt == 0;
}

bool ct_tensor_is_contiguous(const ct_tensor *t)
{
    int64_t st = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != st)
            return false;
        st *= t->shape[i];
    }
    return true;
}

static ct_tensor *view_of(ct_tensor *t)
{
    ct_tensor *v = calloc(1, sizeof(*v));
    if (!v) {
        ct__error(CT_ENOMEM, "tensor: out of memory");
        return NULL;
    }
    v->refcount = 1;
    v->dtype = t->dtype;
    v->storage = t->storage;
    v->storage->refcount++;
    v->offset = t->offset;
    return v;
}

ct_tensor *ct_tensor_view(ct_tensor *t, int ndim, const int64_t *shape)
{
    int64_t n = 0;
    if (!t) {
        ct__error(CT_EINVAL, "tensor_view: NULL tensor");
        return NULL;
    }
    if (check_shape(ndim, shape, &n) < 0)
        return NULL;
    if (n != ct_tensor_numel(t)) {
        ct__error(CT_ERANGE, "tensor_view: %lld elements cannot be viewed as %lld",
                  (long long)ct_tensor_numel(t), (long long)n);
        return NULL;
    }
    if (!ct_tensor_is_contiguous(t) || t->fmt != 0) {
        ct__error(CT_EINVAL, "tensor_view: tensor is not contiguous in plain layout (use "
                             "ct_nn_to_plain)");
        return NULL;
    }
    ct_tensor *v = view_of(t);
    if (v)
        set_contiguous(v, ndim, shape);
    return v;
}

ct_tensor *ct_tensor_narrow0(ct_tensor *t, int64_t start, int64_t len)
{
    if (!t || t->ndim < 1 || start < 0 || len < 0 || start + len > t->shape[0]) {
        ct__error(CT_ERANGE, "tensor_narrow0: rows [%lld, %lld) out of range", (long long)start,
                  (long long)(start + len));
        return NULL;
    }
    ct_tensor *v = view_of(t);
    if (!v)
        return NULL;
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof(v->shape));
    memcpy(v->strides, t->strides, sizeof(v->strides));
    v->shape[0] = len;
    v->offset = t->offset + start * t->strides[0]; /* also right for nChw16c: N outermost */
    v->fmt = t->fmt;
    return v;
}

/* Copies a possibly strided tensor into contiguous dst (element size es). */
static void gather(const ct_tensor *t, char *dst)
{
    size_t es = ct_dtype_size(t->dtype);
    int64_t n = ct_tensor_numel(t);
    const char *base = (const char *)t->storage->data + t->offset * (int64_t)es;
    if (ct_tensor_is_contiguous(t)) {
        memcpy(dst, base, (size_t)n * es);
        return;
    }
    int64_t idx[CT_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++)
            off += idx[d] * t->strides[d];
        memcpy(dst + i * (int64_t)es, base + off * (int64_t)es, es);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d])
                break;
            idx[d] = 0;
        }
    }
}

ct_tensor *ct_tensor_clone(const ct_tensor *t)
{
    if (!t) {
        ct__error(CT_EINVAL, "tensor_clone: NULL tensor");
        return NULL;
    }
    const ct__backend *bk = ct__bk(t);
    if (bk->device != CT_CPU && !ct_tensor_is_contiguous(t)) {
        ct__error(CT_EINVAL, "tensor_clone: a %s tensor must be contiguous", bk->name);
        return NULL;
    }
    ct_tensor *c = tensor_alloc_on(bk, t->dtype, t->ndim, t->shape, false);
    if (!c)
        return NULL;
    c->fmt = t->fmt; /* a blocked tensor is copied as is */
    if (bk->device == CT_CPU) {
        gather(t, c->storage->data);
    } else if (bk->copy(ct_tensor_data(c), ct_tensor_data(t),
                        (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype)) < 0) {
        ct_tensor_release(&c);
    }
    return c;
}

ct_dtype ct_tensor_dtype(const ct_tensor *t)
{
    return t->dtype;
}

ct_device ct_tensor_device(const ct_tensor *t)
{
    return t->storage->device;
}

int ct_tensor_ndim(const ct_tensor *t)
{
    return t->ndim;
}

int64_t ct_tensor_dim(const ct_tensor *t, int i)
{
    if (i < 0)
        i += t->ndim;
    return (i >= 0 && i < t->ndim) ? t->shape[i] : 0;
}

const int64_t *ct_tensor_shape(const ct_tensor *t)
{
    return t->shape;
}

const int64_t *ct_tensor_strides(const ct_tensor *t)
{
    return t->strides;
}

int64_t ct_tensor_numel(const ct_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

void *ct_tensor_data(const ct_tensor *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)ct_dtype_size(t->dtype);
}

float *ct_tensor_f32(const ct_tensor *t)
{
    return (t && t->dtype == CT_F32) ? (float *)ct_tensor_data(t) : NULL;
}

int ct_tensor_copy_from(ct_tensor *t, const void *src, size_t nbytes)
{
    if (!t || !src)
        return ct__error(CT_EINVAL, "tensor_copy_from: NULL argument");
    size_t want = (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype);
    if (nbytes != want)
        return ct__error(CT_ERANGE, "tensor_copy_from: %zu bytes given, tensor holds %zu", nbytes,
                         want);
    if (!ct_tensor_is_contiguous(t))
        return ct__error(CT_EINVAL, "tensor_copy_from: tensor is not contiguous");
    return ct__bk(t)->upload(ct_tensor_data(t), src, nbytes);
}

int ct_tensor_copy_to(const ct_tensor *t, void *dst, size_t nbytes)
{
    if (!t || !dst)
        return ct__error(CT_EINVAL, "tensor_copy_to: NULL argument");
    size_t have = (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype);
    if (nbytes != have)
        return ct__error(CT_ERANGE, "tensor_copy_to: %zu bytes asked, tensor holds %zu", nbytes,
                         have);
    if (!ct_tensor_is_contiguous(t))
        return ct__error(CT_EINVAL, "tensor_copy_to: tensor is not contiguous");
    return ct__bk(t)->download(dst, ct_tensor_data(t), nbytes);
}

int ct_tensor_fill_f32(ct_tensor *t, float v)
{
    if (!t || t->dtype != CT_F32 || !ct_tensor_is_contiguous(t))
        return ct__error(CT_EINVAL, "tensor_fill_f32: needs a contiguous f32 tensor");
    return ct__bk(t)->fill(ct_tensor_numel(t), v, ct__f32(t));
}

float ct_tensor_item(const ct_tensor *t)
{
    float v = 0.0f;
    if (t && t->dtype == CT_F32 && ct__bk(t)->download(&v, ct_tensor_data(t), sizeof v) < 0)
        v = NAN;
    return v;
}

void ct__tensor_rebind(ct_tensor *t, ct__storage *s, int64_t offset)
{
    s->refcount++;
    ct__storage_release(&t->storage);
    t->storage = s;
    t->offset = offset;
}

int ct__tensor_bind_grad(ct_tensor *t, ct__storage *s, int64_t offset)
{
    ct_tensor *g = calloc(1, sizeof(*g));
    if (!g)
        return ct__error(CT_ENOMEM, "tensor: out of memory");
    g->refcount = 1;
    g->dtype = CT_F32;
    set_contiguous(g, t->ndim, t->shape);
    g->storage = s;
    s->refcount++;
    g->offset = offset;
    ct_tensor_release(&t->grad);
    t->grad = g;
    return 0;
}

/* ---- arenas ---- */
struct ct_arena {
    ct__storage *s;
    size_t used;
};

ct_arena *ct_arena_new(size_t bytes)
{
    ct_arena *a = calloc(1, sizeof(*a));
    if (!a || !(a->s = ct__storage_new_on(&ct__backend_cpu, bytes ? bytes : 64, true))) {
        free(a);
        ct__error(CT_ENOMEM, "arena: out of memory for %zu bytes", bytes);
        return NULL;
    }
    return a;
}

ct_tensor *ct_arena_alloc(ct_arena *a, ct_dtype dt, int ndim, const int64_t *shape)
{
    int64_t n = 0;
    if (!a) {
        ct__error(CT_EINVAL, "arena_alloc: NULL arena");
        return NULL;
    }
    if (check_shape(ndim, shape, &n) < 0)
        return NULL;
    size_t es = ct_dtype_size(dt);
    size_t start = (a->used + 63) & ~(size_t)63;
    size_t bytes = (size_t)n * es;
    if (start + bytes > a->s->nbytes) {
        ct__error(CT_ENOSPC, "arena_alloc: %zu bytes requested, %zu of %zu free", bytes,
                  a->s->nbytes - start, a->s->nbytes);
        return NULL;
    }
    ct_tensor *t = calloc(1, sizeof(*t));
    if (!t) {
        ct__error(CT_ENOMEM, "arena_alloc: out of memory");
        return NULL;
    }
    t->refcount = 1;
    t->dtype = dt;
    set_contiguous(t, ndim, shape);
    t->storage = a->s;
    a->s->refcount++;
    t->offset = (int64_t)(start / es);
    a->used = start + bytes;
    return t;
}

void *ct_arena_data(const ct_arena *a)
{
    return a ? a->s->data : NULL;
}

size_t ct_arena_used(const ct_arena *a)
{
    return a ? a->used : 0;
}

void ct_arena_destroy(ct_arena **ap)
{
    if (!ap || !*ap)
        return;
    ct__storage_release(&(*ap)->s);
    free(*ap);
    *ap = NULL;
}
