/* trainer/data/loader.c — the batch loader: distributed sampler + batching + transforms, with an
 * optional background prefetch thread.
 *
 * Prefetch is a ring of prefetch+1 batch slots: the consumer holds at most one (the batch it was
 * last given, borrowed until its next call) while the producer thread fills the others in batch
 * order. Slot states move FREE -> FILLED (producer) -> HELD -> FREE (consumer) under one mutex
 * and condition variable; the sample data is written outside the lock. The thread lives for one
 * epoch: ct_loader_set_epoch and ct_loader_destroy stop it (a flag checked between samples),
 * join it and, for set_epoch, start a new one. Every buffer is allocated in ct_loader_new, so a
 * steady-state batch costs no allocation.
 *
 * Sample pipeline (one producer at a time, so one scratch buffer):
 *   ds get -> (C,H,W) scratch -> crop + flip -> (C,OH,OW) slot -> normalise in place.
 * A target dataset's f32 targets go straight into the slot's target array (no transform).
 * Not here: index arithmetic (sampler.c), transforms' maths (transform.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "trainer/data/data_internal.h"

enum { SLOT_FREE = 0, SLOT_FILLED, SLOT_HELD };

typedef struct slot {
    float *x;       /* (batch_size, out_numel) */
    int64_t *y;     /* (batch_size) */
    float *t;       /* (batch_size, tnumel) for a target dataset, else NULL */
    int64_t *index; /* (batch_size) */
    int64_t n;
    int64_t batch;
    int state;
    int err; /* a failed get: the error to hand to the consumer */
    char msg[512];
} slot;

struct ct_loader {
    ct_dataset *ds; /* borrowed */
    ct_loader_opts o;
    float *mean, *std; /* owned copies, n_norm each */
    int n_norm;
    int in_ndim, out_ndim;
    int64_t in_shape[CT_DATA_MAX_DIMS], out_shape[CT_DATA_MAX_DIMS];
    int64_t in_numel, out_numel;
    int tndim; /* target dataset: its target shape; 0: labels */
    int64_t tshape[CT_DATA_MAX_DIMS], tnumel;
    bool crop_flip;           /* samples go through scratch */
    float *scratch;           /* (in_numel) */
    const uint8_t *u8;        /* fast path: the dataset's u8 samples (length, in_numel), or NULL */
    const int64_t *u8_labels; /* (length) with u8 */
    float *lut;               /* (max(n_norm, 1), 256): u8 -> converted and normalised float */
    int64_t n, batch_size, num_samples, num_batches;
    int64_t full_samples, full_batches; /* ... of a whole epoch (num_*: of the current one) */
    int64_t offset; /* the current epoch's first positions already seen (ct_loader_seek_offset) */
    int64_t *shard; /* (full_samples) this epoch's indices */
    int64_t *perm;  /* (n) scratch for the sampler */
    int64_t epoch;
    int64_t next_batch; /* consumer position */
    int nslots;
    slot *slots;
    int held; /* slot held by the consumer, -1 if none */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thr;
    bool running, pending; /* thread alive; thread to start at the next ct_loader_next */
    atomic_bool stop;
};

/* Builds batch b into s. Returns 0, CT_ECANCELED when stopped, or the dataset's error. */
static int build(ct_loader *ld, int64_t b, slot *s, bool threaded)
{
    int64_t start = b * ld->batch_size;
    int64_t cnt = ld->num_samples - start;
    if (cnt > ld->batch_size)
        cnt = ld->batch_size;
    const ct_transform_opts *t = &ld->o.transform;
    int c = (int)ld->in_shape[0], h = 0, w = 0;
    if (ld->in_ndim == 3) {
        h = (int)ld->in_shape[1];
        w = (int)ld->in_shape[2];
    }
    s->n = cnt;
    s->batch = b;
    s->err = 0;
    for (int64_t k = 0; k < cnt; k++) {
        if (threaded && atomic_load_explicit(&ld->stop, memory_order_relaxed))
            return CT_ECANCELED;
        int64_t idx = ld->shard[start + k];
        float *dst = s->x + k * ld->out_numel;
        if (ld->u8) { /* one pass through a table: the same bits as get + normalise */
            const uint8_t *src = ld->u8 + idx * ld->in_numel;
            int nt = ld->n_norm ? ld->n_norm : 1;
            int64_t per = ld->in_numel / nt;
            for (int t = 0; t < nt; t++) {
                const float *lut = ld->lut + t * 256;
                for (int64_t i = 0; i < per; i++)
                    dst[t * per + i] = lut[src[t * per + i]];
            }
            s->y[k] = ld->u8_labels[idx];
            s->index[k] = idx;
            continue;
        }
        ct__clear_error(); /* so a user get that sets no message leaves no stale one */
        float *xd = ld->crop_flip ? ld->scratch : dst;
        int rc = ld->tndim ? ct_dataset_get_target(ld->ds, idx, xd, s->t + k * ld->tnumel)
                           : ct_dataset_get(ld->ds, idx, xd, &s->y[k]);
        if (rc < 0) {
            const char *why = *ct_last_error() ? ct_last_error() : ct_strerror(rc);
            snprintf(s->msg, sizeof s->msg, "loader: sample %lld of epoch %lld: %s", (long long)idx,
                     (long long)ld->epoch, why);
            s->err = rc;
            return rc;
        }
        if (ld->crop_flip) {
            ct_transform_draw d = ct_transform_draw_for(t, h, w, ld->o.seed, ld->epoch, idx);
            int crop = t->crop_h > 0 && t->crop_w > 0;
            ct_transform_crop_flip(ld->scratch, c, h, w, crop ? t->crop_pad : 0, d.top, d.left,
                                   d.flip, dst, (int)ld->out_shape[1], (int)ld->out_shape[2]);
        }
        if (ld->n_norm)
            ct_transform_normalize(dst, ld->out_numel, ld->mean, ld->std, ld->n_norm);
        s->index[k] = idx;
    }
    return 0;
}

static void *producer(void *arg)
{
    ct_loader *ld = arg;
    for (int64_t b = ld->next_batch; b < ld->num_batches; b++) { /* from the seek position */
        slot *s = &ld->slots[b % ld->nslots];
        pthread_mutex_lock(&ld->mu);
        while (s->state != SLOT_FREE && !atomic_load(&ld->stop))
            pthread_cond_wait(&ld->cv, &ld->mu);
        bool stop = atomic_load(&ld->stop);
        pthread_mutex_unlock(&ld->mu);
        if (stop)
            break;
        int rc = build(ld, b, s, true);
        if (rc == CT_ECANCELED)
            break;
        pthread_mutex_lock(&ld->mu);
        s->state = SLOT_FILLED;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        if (rc < 0)
            break; /* the consumer gets the error at this batch */
    }
    return NULL;
}

static void stop_thread(ct_loader *ld)
{
    if (!ld->running)
        return;
    pthread_mutex_lock(&ld->mu);
    atomic_store(&ld->stop, true);
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
    pthread_join(ld->thr, NULL);
    ld->running = false;
    atomic_store(&ld->stop, false);
}

static int start_thread(ct_loader *ld)
{
    ld->pending = false;
    if (ld->num_batches == 0)
        return 0;
    int e = pthread_create(&ld->thr, NULL, producer, ld);
    if (e != 0)
        return ct__error(-e, "loader: cannot start the prefetch thread: %s", strerror(e));
    ld->running = true;
    return 0;
}

/* This rank's part of the rest of the epoch's order after its first `offset` positions: positions
 * offset + rank, offset + rank + world, ... (a position past the end wraps to the order's start,
 * as the sampler's padding does) into ld->shard; the counts of the current epoch follow. */
static void shard_from_offset(ct_loader *ld, int64_t epoch, int64_t offset)
{
    int64_t world = ld->o.world_size ? ld->o.world_size : 1, rest = ld->n - offset;
    int64_t ns = rest > 0 ? (rest + world - 1) / world : 0;
    if (ld->o.shuffle)
        ct_sampler_permutation(ld->n, ld->o.seed + (uint64_t)epoch, ld->perm);
    else
        for (int64_t i = 0; i < ld->n; i++)
            ld->perm[i] = i;
    for (int64_t i = 0; i < ns; i++)
        ld->shard[i] = ld->perm[(offset + ld->o.rank + i * world) % ld->n];
    ld->num_samples = ns;
    ld->num_batches =
        ld->o.drop_last ? ns / ld->batch_size : (ns + ld->batch_size - 1) / ld->batch_size;
}

/* Stops the producer, computes the epoch's shard (from offset: shard_from_offset) and resets
 * the ring. */
static int prepare_epoch(ct_loader *ld, int64_t epoch, int64_t offset)
{
    stop_thread(ld);
    ld->epoch = epoch;
    ld->next_batch = 0;
    ld->held = -1;
    ld->offset = offset;
    for (int i = 0; i < ld->nslots; i++)
        ld->slots[i].state = SLOT_FREE;
    if (offset > 0) {
        shard_from_offset(ld, epoch, offset);
        return 0;
    }
    ld->num_samples = ld->full_samples;
    ld->num_batches = ld->full_batches;
    ct_sampler_opts so = {.rank = ld->o.rank,
                          .world_size = ld->o.world_size,
                          .shuffle = ld->o.shuffle,
                          .drop_last = ld->o.sampler_drop_last,
                          .seed = ld->o.seed,
                          .epoch = epoch};
    int64_t k = ct_sampler_indices(ld->n, &so, ld->shard, ld->perm);
    if (k < 0)
        return (int)k;
    /* pad_to: repeat this epoch's order from its start (checked in ct_loader_new: k > 0) */
    for (int64_t p = k; p < ld->num_samples; p++)
        ld->shard[p] = ld->shard[p % k];
    return 0;
}

static int check_transform(const ct_transform_opts *t, int ndim, const int64_t *shape)
{
    bool spatial = t->hflip_p > 0 || t->crop_h > 0 || t->crop_w > 0 || t->crop_pad > 0;
    if (t->hflip_p < 0 || t->hflip_p > 1)
        return ct__error(CT_EINVAL, "loader: transform.hflip_p %g not in [0, 1]",
                         (double)t->hflip_p);
    if (spatial && ndim != 3)
        return ct__error(CT_EINVAL,
                         "loader: transform flip/crop needs (C,H,W) samples, not %d "
                         "dims",
                         ndim);
    if (t->crop_h < 0 || t->crop_w < 0 || t->crop_pad < 0 || ((t->crop_h > 0) != (t->crop_w > 0)))
        return ct__error(CT_EINVAL,
                         "loader: transform crop %dx%d pad %d: both sizes > 0, pad "
                         ">= 0",
                         t->crop_h, t->crop_w, t->crop_pad);
    if (t->crop_pad > 0 && t->crop_h == 0)
        return ct__error(CT_EINVAL, "loader: transform.crop_pad %d without crop_h/crop_w",
                         t->crop_pad);
    if (t->crop_h > 0 &&
        (t->crop_h > shape[1] + 2 * t->crop_pad || t->crop_w > shape[2] + 2 * t->crop_pad))
        return ct__error(CT_EINVAL,
                         "loader: transform crop %dx%d larger than the padded image "
                         "%lldx%lld",
                         t->crop_h, t->crop_w, (long long)(shape[1] + 2 * t->crop_pad),
                         (long long)(shape[2] + 2 * t->crop_pad));
    if ((t->mean == NULL) != (t->std == NULL))
        return ct__error(CT_EINVAL, "loader: transform.mean and transform.std go together");
    if (t->mean) {
        int n = t->n_mean ? t->n_mean : (ndim == 3 ? (int)shape[0] : 1);
        if (n != 1 && n != shape[0])
            return ct__error(CT_EINVAL,
                             "loader: transform.n_mean %d: must be 1 or the channel "
                             "count %lld",
                             n, (long long)shape[0]);
        for (int i = 0; i < n; i++)
            if (!(t->std[i] != 0))
                return ct__error(CT_EINVAL, "loader: transform.std[%d] is %g", i,
                                 (double)t->std[i]);
    }
    return 0;
}

int ct_loader_new(ct_dataset *ds, const ct_loader_opts *opts, ct_loader **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_loader_new: out is NULL");
    *out = NULL;
    if (!ds)
        return ct__error(CT_EINVAL, "ct_loader_new: dataset is NULL");
    ct_loader_opts o = opts ? *opts : (ct_loader_opts){0};
    if (o.batch_size < 0)
        return ct__error(CT_EINVAL, "ct_loader_new: batch_size %lld < 0", (long long)o.batch_size);
    if (o.prefetch < 0)
        return ct__error(CT_EINVAL, "ct_loader_new: prefetch %d < 0", o.prefetch);
    int64_t in_shape[CT_DATA_MAX_DIMS];
    int in_ndim = ct_dataset_shape(ds, in_shape);
    int rc = check_transform(&o.transform, in_ndim, in_shape);
    if (rc < 0)
        return rc;
    ct_sampler_opts so = {
        .rank = o.rank, .world_size = o.world_size, .drop_last = o.sampler_drop_last};
    int64_t ns = ct_sampler_num_samples(ct_dataset_length(ds), &so);
    if (ns < 0)
        return (int)ns;
    if (o.pad_to > 0 && (o.pad_to < ns || ns == 0))
        return ct__error(CT_EINVAL,
                         "ct_loader_new: pad_to %lld: must be >= the %lld samples of this "
                         "rank, which must be > 0",
                         (long long)o.pad_to, (long long)ns);
    if (o.pad_to > ns)
        ns = o.pad_to;

    ct_loader *ld = calloc(1, sizeof *ld);
    if (!ld)
        return ct__error(CT_ENOMEM, "ct_loader_new: out of memory");
    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv, NULL);
    atomic_init(&ld->stop, false);
    ld->ds = ds;
    ld->o = o;
    ld->held = -1;
    ld->n = ct_dataset_length(ds);
    ld->batch_size = o.batch_size ? o.batch_size : 1;
    ld->num_samples = ns;
    ld->num_batches =
        o.drop_last ? ns / ld->batch_size : (ns + ld->batch_size - 1) / ld->batch_size;
    ld->full_samples = ld->num_samples;
    ld->full_batches = ld->num_batches;
    ld->in_ndim = ld->out_ndim = in_ndim;
    memcpy(ld->in_shape, in_shape, sizeof in_shape);
    memcpy(ld->out_shape, in_shape, sizeof in_shape);
    const ct_transform_opts *t = &o.transform;
    if (t->crop_h > 0) {
        ld->out_shape[1] = t->crop_h;
        ld->out_shape[2] = t->crop_w;
    }
    ld->crop_flip = t->crop_h > 0 || t->hflip_p > 0;
    ld->tndim = ct_dataset_target_shape(ds, ld->tshape);
    ld->tnumel = ct_dataset_target_numel(ds);
    ld->in_numel = ld->out_numel = 1;
    for (int d = 0; d < in_ndim; d++) {
        ld->in_numel *= ld->in_shape[d];
        ld->out_numel *= ld->out_shape[d];
    }
    if (t->mean) {
        ld->n_norm = t->n_mean ? t->n_mean : (in_ndim == 3 ? (int)in_shape[0] : 1);
        ld->mean = malloc((size_t)ld->n_norm * sizeof *ld->mean);
        ld->std = malloc((size_t)ld->n_norm * sizeof *ld->std);
        if (!ld->mean || !ld->std)
            goto nomem;
        memcpy(ld->mean, t->mean, (size_t)ld->n_norm * sizeof *ld->mean);
        memcpy(ld->std, t->std, (size_t)ld->n_norm * sizeof *ld->std);
    }
    ld->o.transform.mean = ld->mean; /* never point at the caller's arrays */
    ld->o.transform.std = ld->std;
    const float *dlut = NULL;
    ld->u8 = ld->crop_flip ? NULL : ct__dataset_u8(ds, &dlut, &ld->u8_labels);
    if (ld->u8) {
        int nt = ld->n_norm ? ld->n_norm : 1;
        ld->lut = malloc((size_t)nt * 256 * sizeof *ld->lut);
        if (!ld->lut)
            goto nomem;
        for (int t = 0; t < nt; t++) {
            memcpy(ld->lut + t * 256, dlut, 256 * sizeof *dlut);
            if (ld->n_norm)
                ct_transform_normalize(ld->lut + t * 256, 256, ld->mean + t, ld->std + t, 1);
        }
    }
    ld->scratch = malloc((size_t)ld->in_numel * sizeof *ld->scratch);
    ld->shard = malloc((size_t)(ns ? ns : 1) * sizeof *ld->shard);
    ld->perm = malloc((size_t)(ld->n ? ld->n : 1) * sizeof *ld->perm);
    ld->nslots = o.prefetch > 0 ? o.prefetch + 1 : 1;
    ld->slots = calloc((size_t)ld->nslots, sizeof *ld->slots);
    if (!ld->scratch || !ld->shard || !ld->perm || !ld->slots)
        goto nomem;
    for (int i = 0; i < ld->nslots; i++) {
        slot *s = &ld->slots[i];
        s->x = malloc((size_t)(ld->batch_size * ld->out_numel) * sizeof *s->x);
        s->y = malloc((size_t)ld->batch_size * sizeof *s->y);
        s->index = malloc((size_t)ld->batch_size * sizeof *s->index);
        if (ld->tndim)
            s->t = malloc((size_t)(ld->batch_size * ld->tnumel) * sizeof *s->t);
        if (!s->x || !s->y || !s->index || (ld->tndim && !s->t))
            goto nomem;
    }
    rc = prepare_epoch(ld, 0, 0);
    if (rc < 0)
        goto err;
    ld->pending = o.prefetch > 0;
    *out = ld;
    return 0;
nomem:
    rc = ct__error(CT_ENOMEM, "ct_loader_new: out of memory (batch_size %lld, prefetch %d)",
                   (long long)ld->batch_size, o.prefetch);
err:
    ct_loader_destroy(&ld);
    return rc;
}

void ct_loader_destroy(ct_loader **pld)
{
    if (!pld || !*pld)
        return;
    ct_loader *ld = *pld;
    stop_thread(ld);
    if (ld->slots)
        for (int i = 0; i < ld->nslots; i++) {
            free(ld->slots[i].x);
            free(ld->slots[i].y);
            free(ld->slots[i].t);
            free(ld->slots[i].index);
        }
    free(ld->slots);
    free(ld->scratch);
    free(ld->lut);
    free(ld->shard);
    free(ld->perm);
    free(ld->mean);
    free(ld->std);
    pthread_cond_destroy(&ld->cv);
    pthread_mutex_destroy(&ld->mu);
    free(ld);
    *pld = NULL;
}

int ct_loader_set_epoch(ct_loader *ld, int64_t epoch)
{
    if (!ld)
        return ct__error(CT_EINVAL, "ct_loader_set_epoch: loader is NULL");
    if (epoch < 0)
        return ct__error(CT_EINVAL, "ct_loader_set_epoch: epoch %lld < 0", (long long)epoch);
    int rc = prepare_epoch(ld, epoch, 0);
    if (rc < 0)
        return rc;
    ld->pending = false;
    if (ld->o.prefetch > 0)
        return start_thread(ld);
    return 0;
}

int ct_loader_seek(ct_loader *ld, int64_t epoch, int64_t batch)
{
    return ct_loader_seek_offset(ld, epoch, 0, batch);
}

int ct_loader_seek_offset(ct_loader *ld, int64_t epoch, int64_t offset, int64_t batch)
{
    if (!ld)
        return ct__error(CT_EINVAL, "ct_loader_seek: loader is NULL");
    if (offset < 0 || offset > ld->n ||
        (offset > 0 && (ld->o.pad_to > 0 || ld->o.sampler_drop_last)))
        return ct__error(CT_EINVAL,
                         "ct_loader_seek_offset: offset %lld: must be in [0, %lld], and 0 with "
                         "pad_to or sampler_drop_last",
                         (long long)offset, (long long)ld->n);
    if (epoch < 0 || batch < 0)
        return ct__error(CT_EINVAL, "ct_loader_seek: epoch %lld batch %lld out of range",
                         (long long)epoch, (long long)batch);
    int rc = prepare_epoch(ld, epoch, offset);
    if (rc < 0)
        return rc;
    if (batch > ld->num_batches)
        return ct__error(CT_EINVAL, "ct_loader_seek: epoch %lld batch %lld (of %lld) out of range",
                         (long long)epoch, (long long)batch, (long long)ld->num_batches);
    /* the shard depends on the epoch (and offset) only: batch b is the same samples as when
     * reached in order; the producer starts at next_batch, whose slot is the one the consumer
     * waits on */
    ld->next_batch = batch;
    ld->pending = false;
    if (ld->o.prefetch > 0 && batch < ld->num_batches)
        return start_thread(ld);
    return 0;
}

int ct_loader_next(ct_loader *ld, ct_batch *b)
{
    if (!ld || !b)
        return ct__error(CT_EINVAL, "ct_loader_next: NULL argument");
    if (ld->held >= 0) {
        pthread_mutex_lock(&ld->mu);
        ld->slots[ld->held].state = SLOT_FREE;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        ld->held = -1;
    }
    if (ld->next_batch >= ld->num_batches)
        return 0;
    int si = 0;
    slot *s;
    if (ld->o.prefetch > 0) {
        if (ld->pending) {
            int rc = start_thread(ld);
            if (rc < 0)
                return rc;
        }
        si = (int)(ld->next_batch % ld->nslots);
        s = &ld->slots[si];
        pthread_mutex_lock(&ld->mu);
        while (s->state != SLOT_FILLED)
            pthread_cond_wait(&ld->cv, &ld->mu);
        s->state = SLOT_HELD;
        pthread_mutex_unlock(&ld->mu);
    } else {
        s = &ld->slots[0];
        build(ld, ld->next_batch, s, false);
        s->state = SLOT_HELD;
    }
    ld->held = si;
    if (s->err) {
        ld->next_batch = ld->num_batches; /* the epoch ends here */
        return ct__error(s->err, "%s", s->msg);
    }
    ld->next_batch++;
    b->x = s->x;
    b->y = ld->tndim ? NULL : s->y;
    b->target = s->t;
    b->tndim = ld->tndim;
    memcpy(b->tshape, ld->tshape, sizeof b->tshape);
    b->index = s->index;
    b->n = s->n;
    b->ndim = ld->out_ndim;
    memcpy(b->shape, ld->out_shape, sizeof b->shape);
    b->batch = s->batch;
    return 1;
}

int64_t ct_loader_num_batches(const ct_loader *ld)
{
    return ld ? ld->num_batches : 0;
}

int64_t ct_loader_num_samples(const ct_loader *ld)
{
    return ld ? ld->num_samples : 0;
}

int ct_loader_shape(const ct_loader *ld, int64_t *shape)
{
    if (!ld)
        return 0;
    if (shape)
        memcpy(shape, ld->out_shape, (size_t)ld->out_ndim * sizeof *shape);
    return ld->out_ndim;
}
