/* trainer/collective/bucket.c — DDP-style gradient bucketing on raw f32 arrays.
 *
 * Gradients, in the order backward finishes them, are grouped into buckets (the first about
 * first_bucket_bytes, the others about bucket_bytes; a bucket closes once it reaches its size,
 * a gradient is never split). When all gradients of a bucket are marked ready, and all earlier
 * buckets have been queued (so every rank issues the same allreduces in the same order), the
 * bucket is queued for the communication thread, which packs it into one contiguous buffer
 * (or reduces in place when it holds one gradient), allreduces it (AVG) and copies the result
 * back. The caller's backward keeps running meanwhile. With the nccl backend the gradients are
 * device pointers: a bucket is one grouped NCCL allreduce of its gradients (no packing; this
 * path has run on one GPU only, world size 1). The engine drives it from gradient-ready hooks
 * (ct_module_on_grad_ready: parameter i final -> mark gradient nparams-1-i), so buckets are
 * reduced while the rest of backward runs; see examples/ddp_fashion_mnist.c and
 * tests/collective/test_overlap.c. Shard mode (ZeRO-1, host gradients on the ring): each bucket
 * is reduce-scattered instead (its single gradient in place, else packed), this rank's chunk of
 * the averages is copied back, and ct_bucketer_allgather later gathers the parameters' chunks
 * with the same layout. Not a tensor library: plain pointers.
 *
 * Gradients on a device (opts.device: CUDA, the checking device): nothing in a step blocks the
 * host for a bucket's reduction; it is ordered on streams. The hook fires when backward's kernels
 * are QUEUED, not done: so when a bucket completes, the caller's thread records the bucket's
 * event on the compute stream, and the communication stream waits for it before it reads the
 * bucket. With nccl the communication thread has the NCCL stream wait for the event
 * (cudaStreamWaitEvent), enqueues the grouped allreduce after it and records the done event:
 * the communicator's watchdog (watchdog.c) polls the op's completion and enforces its deadline,
 * and finish waits only until every bucket is enqueued. With the ring (the CPU ring as the
 * checking device's communication backend) the caller's thread queues on the bucketer's own
 * stream: the wait, the download into host staging (pinned on CUDA), a host function that runs
 * the ring's allreduce of the staging when the stream reaches it (watched by the watchdog, in
 * bucket order across devices), the upload of the averages, and the done event. Either way
 * finish makes the compute stream wait for the done event recorded after the last bucket and
 * returns: the optimizer step is queued behind the averages. A failure on the communication
 * side (a hung allreduce the watchdog aborted, naming it) is reported by the next mark_ready or
 * finish, or by ct_bucketer_wait, which blocks the host until the communication is done.
 * Gradients on several devices (opts.devices: a model across devices, ring only): a bucket
 * holds gradients of one device, and each device has its own communication stream and done
 * event; the host functions reduce the buckets in order (each waits for the one before), so
 * every rank issues the same allreduces in the same order, and finish makes each device's
 * compute stream wait for its own last bucket. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "internal.h"
#include "trainer/backend/backend.h"

struct bucket {
    int first, n; /* gradients [first, first + n) */
    size_t count; /* floats */
    int pending;  /* gradients not yet ready this step */
    float *pack;  /* NULL when n == 1 or span (reduced in place) */
    float *span;  /* opts.in_place: the gradients and the padding between them, one array */
    size_t span_count;
    size_t lo, len; /* shard mode: this rank's chunk of the packed bucket (ct_comm_chunk) */
    int dev;        /* device gradients: index into the bucketer's devs */
};

/* One device's side of a bucketer of device gradients */
struct dev_side {
    ct_device device;
    const ct__backend *bk;
    void *stream;  /* ring: the bucketer's stream there; nccl: the NCCL stream */
    void *done_ev; /* recorded on stream after each of its buckets */
};
#define MAX_DEVS 8

struct ct_bucketer {
    ct_comm *comm;
    struct dev_side devs[MAX_DEVS]; /* device gradients: their devices; ndev 0: host */
    int ndev;
    void **ready_ev; /* device: per bucket, recorded on its device's compute stream */
    bool skip_waits; /* tests only: ct__bucketer_test_skip_waits */
    float **grads;
    size_t *counts;
    int ngrads;
    int *bucket_of;
    char *ready;
    struct bucket *b;
    int nb;
    int timeout_ms;
    bool no_sync;
    bool shard;       /* ZeRO-1: reduce-scatter, then ct_bucketer_allgather of the parameters */
    size_t *shard_lo; /* shard mode: [ngrads] the part of gradient i this rank owns */
    size_t *shard_n;
    int next_launch; /* caller thread only */

    pthread_t thread;
    int thread_up;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int queued, done; /* buckets [0, queued) handed to the thread, [0, done) finished */
    int err;
    int stop;
    /* device gradients on the ring: host functions queued and run, over all steps (each runs
     * when ring_ran reaches its number), and the first failure of one not yet reported */
    uint64_t ring_queued, ring_ran;
    int async_err;
    char async_msg[512];
};

/* one bucket's allreduce as a stream's host function (the ring's device path) */
struct ring_job {
    ct_bucketer *t;
    int k;
    uint64_t seq;
};

/* Names bucket k's allreduce in the watchdog's messages. */
static void bucket_name(const ct_bucketer *t, int k, char *buf, size_t n)
{
    snprintf(buf, n, "the allreduce of gradient bucket %d of %d (%zu floats)", k, t->nb,
             t->b[k].count);
}

/* nccl, a bucket of device gradients (the communication thread): the NCCL stream waits for the
 * bucket's event, the grouped allreduce is enqueued after it (the watchdog sees it complete),
 * and the done event is recorded after it. */
static int reduce_device(ct_bucketer *t, int k)
{
    struct bucket *b = &t->b[k];
    const struct dev_side *d = &t->devs[b->dev];
    const ct__backend *bk = d->bk;
    char what[160];
    int rc = 0;
    if (!t->skip_waits && (rc = bk->stream_wait(d->stream, t->ready_ev[k])) < 0)
        return rc;
    bucket_name(t, k, what, sizeof what);
    rc = ct__comm_allreduce_many_async(t->comm, t->grads + b->first, t->counts + b->first, b->n,
                                       t->timeout_ms, what);
    return rc < 0 ? rc : bk->event_record(d->done_ev, d->stream);
}

/* Keeps the first failure of the communication side for the next call to report. */
static void async_fail(ct_bucketer *t, int rc, const char *msg)
{
    pthread_mutex_lock(&t->mu);
    if (!t->async_err) {
        t->async_err = rc;
        snprintf(t->async_msg, sizeof t->async_msg, "%s", msg);
    }
    pthread_mutex_unlock(&t->mu);
}

/* The failure kept by async_fail or the watchdog (nccl), once: 0 or the code, with its message
 * prefixed by who reports it. */
static int take_async(ct_bucketer *t, const char *who)
{
    pthread_mutex_lock(&t->mu);
    int err = t->async_err;
    char msg[sizeof t->async_msg];
    memcpy(msg, t->async_msg, sizeof msg);
    t->async_err = 0;
    pthread_mutex_unlock(&t->mu);
    if (!err && t->ndev && t->comm->backend == CT_COMM_NCCL && ct__watch_error(t->comm) < 0) {
        err = ct__comm_aborted(t->comm) ? ct__comm_aborted(t->comm) : CT_ENCCL;
        snprintf(msg, sizeof msg, "%s", ct_last_error());
    }
    return err ? ct__error(err, "%s: %s", who, msg) : 0;
}

/* The ring's device path: bucket k's allreduce of its host staging, run on its device's
 * communication stream after the download and before the upload. Buckets run in the order they
 * were queued (across devices' streams too), so every rank issues the same allreduces in the
 * same order; the watchdog aborts one that outlives the bucketer's timeout and names it. */
static void ring_bucket(void *arg)
{
    struct ring_job *j = arg;
    ct_bucketer *t = j->t;
    struct bucket *b = &t->b[j->k];
    pthread_mutex_lock(&t->mu);
    while (t->ring_ran != j->seq)
        pthread_cond_wait(&t->cv, &t->mu);
    int failed = t->async_err;
    pthread_mutex_unlock(&t->mu);
    int rc = 0;
    if (!failed) {
        char what[160];
        bucket_name(t, j->k, what, sizeof what);
        int ms = t->timeout_ms > 0 ? t->timeout_ms : t->comm->timeout_ms;
        int ticket =
            ct__watch_begin(t->comm, what, ct__comm_deadline(t->comm, ms), NULL, NULL, true);
        rc = ticket;
        if (ticket >= 0) {
            /* the ring's own deadline after the watchdog's: the watchdog names the op */
            ct__comm_async_thread(true);
            rc = ct_comm_allreduce(t->comm, b->pack, b->count, CT_F32, CT_COMM_AVG,
                                   ms < 1000000000 ? 2 * ms : ms);
            ct__comm_async_thread(false);
            rc = ct__watch_end(t->comm, ticket, rc);
        }
        if (rc < 0)
            async_fail(t, rc, ct_last_error());
    }
    pthread_mutex_lock(&t->mu);
    t->ring_ran++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    ct__comm_async_ran(t->comm);
    free(j);
}

/* The ring's device path, the caller's thread: queues bucket k's wait, download, allreduce
 * (ring_bucket), upload and done event on its device's communication stream. */
static int queue_ring_bucket(ct_bucketer *t, int k)
{
    struct bucket *b = &t->b[k];
    const struct dev_side *d = &t->devs[b->dev];
    const ct__backend *bk = d->bk;
    int rc = 0;
    if (!t->skip_waits && (rc = bk->stream_wait(d->stream, t->ready_ev[k])) < 0)
        return rc;
    if (b->count == 0) /* empty parameters only: nothing to reduce */
        return bk->event_record(d->done_ev, d->stream);
    size_t off = 0;
    for (int i = b->first; rc == 0 && i < b->first + b->n; i++) {
        rc =
            bk->download_async(b->pack + off, t->grads[i], t->counts[i] * sizeof(float), d->stream);
        off += t->counts[i];
    }
    if (rc < 0)
        return rc;
    struct ring_job *j = malloc(sizeof *j);
    if (!j)
        return ct__error(CT_ENOMEM, "ct_bucketer: bucket %d's host function", k);
    *j = (struct ring_job){.t = t, .k = k, .seq = t->ring_queued};
    ct__comm_async_queued(t->comm); /* the comm's other callers wait for it */
    if ((rc = bk->host_fn(d->stream, ring_bucket, j)) < 0) {
        ct__comm_async_ran(t->comm);
        free(j);
        return rc;
    }
    t->ring_queued++;
    off = 0;
    for (int i = b->first; rc == 0 && i < b->first + b->n; i++) {
        rc = bk->upload_async(t->grads[i], b->pack + off, t->counts[i] * sizeof(float), d->stream);
        off += t->counts[i];
    }
    return rc < 0 ? rc : bk->event_record(d->done_ev, d->stream);
}

/* Shard mode: copies the owned parts of bucket b between the gradient-shaped arrays v and the
 * packed buffer (to_pack) or back. */
static void copy_owned(ct_bucketer *t, const struct bucket *b, float *const *v, bool to_pack)
{
    size_t off = 0;
    for (int i = b->first; i < b->first + b->n; i++) {
        size_t lo = t->shard_lo[i], n = t->shard_n[i];
        if (n && to_pack)
            memcpy(b->pack + off + lo, v[i] + lo, n * sizeof(float));
        else if (n)
            memcpy(v[i] + lo, b->pack + off + lo, n * sizeof(float));
        off += t->counts[i];
    }
}

/* Shard mode: one reduce-scatter (AVG) of the bucket; this rank's chunk goes back into the
 * gradients it covers. */
static int scatter_bucket(ct_bucketer *t, struct bucket *b)
{
    if (!b->pack)
        return ct_comm_reduce_scatter(t->comm, t->grads[b->first], b->count, CT_COMM_AVG,
                                      t->timeout_ms);
    size_t off = 0;
    for (int i = b->first; i < b->first + b->n; i++) {
        memcpy(b->pack + off, t->grads[i], t->counts[i] * sizeof(float));
        off += t->counts[i];
    }
    int rc = ct_comm_reduce_scatter(t->comm, b->pack, b->count, CT_COMM_AVG, t->timeout_ms);
    if (rc == 0)
        copy_owned(t, b, t->grads, false);
    return rc;
}

static int reduce_bucket(ct_bucketer *t, struct bucket *b)
{
    if (t->shard)
        return scatter_bucket(t, b);
    if (t->ndev)
        return reduce_device(t, (int)(b - t->b));
    if (t->comm->backend == CT_COMM_NCCL) /* device gradients: one NCCL group, no packing */
        return ct__comm_allreduce_many(t->comm, t->grads + b->first, t->counts + b->first, b->n,
                                       t->timeout_ms);
    if (b->span)
        return ct_comm_allreduce(t->comm, b->span, b->span_count, CT_F32, CT_COMM_AVG,
                                 t->timeout_ms);
    if (!b->pack)
        return ct_comm_allreduce(t->comm, t->grads[b->first], b->count, CT_F32, CT_COMM_AVG,
                                 t->timeout_ms);
    size_t off = 0;
    for (int i = b->first; i < b->first + b->n; i++) {
        memcpy(b->pack + off, t->grads[i], t->counts[i] * sizeof(float));
        off += t->counts[i];
    }
    int rc = ct_comm_allreduce(t->comm, b->pack, b->count, CT_F32, CT_COMM_AVG, t->timeout_ms);
    if (rc < 0)
        return rc;
    off = 0;
    for (int i = b->first; i < b->first + b->n; i++) {
        memcpy(t->grads[i], b->pack + off, t->counts[i] * sizeof(float));
        off += t->counts[i];
    }
    return 0;
}

/* opts.in_place: bucket b's gradients as the one array [lo, hi) they lie in, when what lies
 * between them is padding (fewer than 16 floats a gradient, as a flat buffer's 64-byte
 * alignment leaves) and no other gradient of t is inside: DDP's gradient_as_bucket_view, no
 * copies into and out of a packed buffer (a GPT's 3.4 MB of gradients on 2 replicas: 0.6% of a
 * step in those copies). Otherwise b stays packed. */
static void find_span(ct_bucketer *t, struct bucket *b)
{
    float *lo = NULL, *hi = NULL;
    for (int i = b->first; i < b->first + b->n; i++)
        if (t->counts[i]) {
            lo = !lo || t->grads[i] < lo ? t->grads[i] : lo;
            hi = !hi || t->grads[i] + t->counts[i] > hi ? t->grads[i] + t->counts[i] : hi;
        }
    if (!lo || (size_t)(hi - lo) < b->count || (size_t)(hi - lo) > b->count + 15 * (size_t)b->n)
        return; /* nothing, overlapping gradients, or gaps wider than padding */
    for (int i = 0; i < t->ngrads; i++)
        if ((i < b->first || i >= b->first + b->n) && t->counts[i] && t->grads[i] < hi &&
            t->grads[i] + t->counts[i] > lo)
            return; /* another bucket's gradient in between */
    b->span = lo;
    b->span_count = (size_t)(hi - lo);
}

static void *comm_thread(void *arg)
{
    ct_bucketer *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->done == t->queued && !t->stop)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop)
            break;
        int k = t->done, failed = t->err;
        pthread_mutex_unlock(&t->mu);
        int rc = failed ? 0 : reduce_bucket(t, &t->b[k]);
        pthread_mutex_lock(&t->mu);
        if (rc < 0 && !t->err)
            t->err = rc;
        t->done++;
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void reset_step(ct_bucketer *t)
{
    memset(t->ready, 0, (size_t)t->ngrads);
    for (int k = 0; k < t->nb; k++)
        t->b[k].pending = t->b[k].n;
    t->next_launch = 0;
    pthread_mutex_lock(&t->mu);
    t->queued = t->done = 0;
    t->err = 0;
    pthread_mutex_unlock(&t->mu);
}

/* One device's side: the backend, the communication stream, the done event. */
static int device_setup(ct_bucketer *t, struct dev_side *d)
{
    if (!(d->bk = ct__backend_of(d->device)))
        return CT_ENOSYS; /* ct__backend_of said why */
    const ct__backend *bk = d->bk;
    if (!bk->event_new || !bk->stream_wait || !bk->event_record || !bk->stream_new ||
        !bk->download_async || !bk->upload_async || !bk->host_alloc ||
        (t->comm->backend != CT_COMM_NCCL && !bk->host_fn))
        return ct__backend_missing(bk, "streams, events, async copies or host functions");
    int rc = 0;
    if (t->comm->backend == CT_COMM_NCCL) {
        if (!(d->stream = ct__comm_stream(t->comm)))
            return ct__error(CT_EINVAL, "ct_bucketer_new: the nccl communicator has no stream");
    } else if ((rc = bk->stream_new(&d->stream)) < 0) {
        return rc;
    }
    return bk->event_new(&d->done_ev);
}

/* The device sides (one per device of the gradients, in order of first use) and each bucket's
 * ready event, on its device. */
static int devices_setup(ct_bucketer *t, const ct_device *dev_of)
{
    int rc = 0;
    for (int k = 0; rc == 0 && k < t->nb; k++) {
        ct_device dv = dev_of[t->b[k].first];
        int j = 0;
        while (j < t->ndev && t->devs[j].device != dv)
            j++;
        if (j == t->ndev) {
            if (t->ndev == MAX_DEVS)
                return ct__error(CT_EINVAL, "ct_bucketer_new: gradients on more than %d devices",
                                 MAX_DEVS);
            if (t->ndev == 1 && t->comm->backend == CT_COMM_NCCL)
                return ct__error(CT_ENOSYS, "ct_bucketer_new: gradients on several devices need "
                                            "the ring backend (an NCCL communicator has one GPU)");
            t->devs[t->ndev].device = dv;
            rc = device_setup(t, &t->devs[t->ndev++]);
        }
        t->b[k].dev = j;
    }
    if (rc == 0 && !(t->ready_ev = calloc((size_t)t->nb, sizeof *t->ready_ev)))
        return ct__error(CT_ENOMEM, "ct_bucketer_new: events");
    for (int k = 0; rc == 0 && k < t->nb; k++)
        rc = t->devs[t->b[k].dev].bk->event_new(&t->ready_ev[k]);
    return rc;
}

void ct__bucketer_test_skip_waits(ct_bucketer *t, bool skip)
{
    if (t)
        t->skip_waits = skip;
}

int ct_bucketer_new(ct_comm *comm, float *const *grads, const size_t *counts, int ngrads,
                    const ct_bucketer_opts *opts, ct_bucketer **out)
{
    int rc = 0;
    ct_device *dev_of = NULL;
    if (!out)
        return ct__error(CT_EINVAL, "ct_bucketer_new: out is NULL");
    *out = NULL;
    if (!comm || !grads || !counts || ngrads < 1)
        return ct__error(CT_EINVAL,
                         "ct_bucketer_new: comm, grads or counts missing, or "
                         "ngrads %d < 1",
                         ngrads);
    for (int i = 0; i < ngrads; i++)
        if (!grads[i] && counts[i])
            return ct__error(CT_EINVAL, "ct_bucketer_new: grads[%d] is NULL", i);
    ct_bucketer_opts o = opts ? *opts : (ct_bucketer_opts){0};
    size_t first = o.first_bucket_bytes ? o.first_bucket_bytes : 1024 * 1024;
    size_t rest = o.bucket_bytes ? o.bucket_bytes : 25 * 1024 * 1024;

    ct_bucketer *t = calloc(1, sizeof *t);
    if (!t)
        return ct__error(CT_ENOMEM, "ct_bucketer_new");
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->comm = comm;
    t->ngrads = ngrads;
    t->timeout_ms = o.timeout_ms;
    t->grads = malloc(sizeof *t->grads * (size_t)ngrads);
    t->counts = malloc(sizeof *t->counts * (size_t)ngrads);
    t->bucket_of = malloc(sizeof *t->bucket_of * (size_t)ngrads);
    t->ready = calloc((size_t)ngrads, 1);
    t->b = calloc((size_t)ngrads, sizeof *t->b);
    if (!t->grads || !t->counts || !t->bucket_of || !t->ready || !t->b) {
        rc = ct__error(CT_ENOMEM, "ct_bucketer_new: tables");
        goto err;
    }
    memcpy(t->grads, grads, sizeof *t->grads * (size_t)ngrads);
    memcpy(t->counts, counts, sizeof *t->counts * (size_t)ngrads);
    /* each gradient's device (a bucket closes where the next gradient is on another device) */
    dev_of = malloc(sizeof *dev_of * (size_t)ngrads);
    if (!dev_of) {
        rc = ct__error(CT_ENOMEM, "ct_bucketer_new: tables");
        goto err;
    }
    bool on_device = false;
    for (int i = 0; i < ngrads; i++) {
        dev_of[i] = o.devices ? o.devices[i] : o.device;
        on_device |= dev_of[i] != CT_CPU;
    }
    for (int i = 0; i < ngrads && on_device; i++)
        if (dev_of[i] == CT_CPU) {
            rc = ct__error(CT_EINVAL,
                           "ct_bucketer_new: gradient %d is on the CPU, others on a "
                           "device (all host, or all device gradients)",
                           i);
            goto err;
        }
    size_t cap = first, bytes = 0;
    for (int i = 0; i < ngrads; i++) {
        struct bucket *b = &t->b[t->nb];
        if (b->n == 0)
            b->first = i;
        b->n++;
        b->count += counts[i];
        t->bucket_of[i] = t->nb;
        bytes += counts[i] * sizeof(float);
        if (bytes >= cap || i == ngrads - 1 || dev_of[i + 1] != dev_of[i]) {
            t->nb++;
            cap = rest;
            bytes = 0;
        }
    }
    if (o.shard && (on_device || comm->backend != CT_COMM_RING)) {
        rc = ct__error(CT_ENOSYS,
                       "ct_bucketer_new: shard (ZeRO-1) needs host gradients and the ring backend");
        goto err;
    }
    t->shard = o.shard;
    if (t->shard) {
        t->shard_lo = calloc((size_t)ngrads, sizeof *t->shard_lo);
        t->shard_n = calloc((size_t)ngrads, sizeof *t->shard_n);
        if (!t->shard_lo || !t->shard_n) {
            rc = ct__error(CT_ENOMEM, "ct_bucketer_new: shard tables");
            goto err;
        }
        for (int k = 0; k < t->nb; k++) {
            struct bucket *b = &t->b[k];
            ct_comm_chunk(b->count, ct_comm_world_size(comm), ct_comm_rank(comm), &b->lo, &b->len);
            size_t off = 0;
            for (int i = b->first; i < b->first + b->n; i++) {
                size_t a = b->lo > off ? b->lo : off;
                size_t e = b->lo + b->len < off + counts[i] ? b->lo + b->len : off + counts[i];
                if (e > a) {
                    t->shard_lo[i] = a - off;
                    t->shard_n[i] = e - a;
                }
                off += counts[i];
            }
        }
    }
    if (on_device && (rc = devices_setup(t, dev_of)) < 0)
        goto err;
    for (int k = 0;
         o.in_place && !t->shard && !t->ndev && comm->backend == CT_COMM_RING && k < t->nb; k++)
        if (t->b[k].n > 1)
            find_span(t, &t->b[k]);
    for (int k = 0; k < t->nb; k++)
        if ((t->b[k].n > 1 || t->ndev) && !t->b[k].span && t->b[k].count > 0 &&
            comm->backend == CT_COMM_RING) {
            size_t bytes = t->b[k].count * sizeof(float);
            if (t->ndev)
                rc = t->devs[t->b[k].dev].bk->host_alloc((void **)&t->b[k].pack, bytes);
            else if (!(t->b[k].pack = malloc(bytes)))
                rc = CT_ENOMEM;
            if (rc < 0) {
                rc = ct__error(rc, "ct_bucketer_new: bucket %d of %zu floats", k, t->b[k].count);
                goto err;
            }
        }
    reset_step(t);
    if (pthread_create(&t->thread, NULL, comm_thread, t) != 0) {
        rc = ct__error(CT_ENOMEM, "ct_bucketer_new: pthread_create");
        goto err;
    }
    t->thread_up = 1;
    *out = t;
    free(dev_of);
    return 0;
err:
    free(dev_of);
    ct_bucketer_destroy(&t);
    return rc;
}

void ct_bucketer_destroy(ct_bucketer **pt)
{
    if (!pt || !*pt)
        return;
    ct_bucketer *t = *pt;
    if (t->thread_up) {
        pthread_mutex_lock(&t->mu);
        t->stop = 1;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
    }
    /* the streams' work done before their staging goes (a failed step may leave some) */
    for (int j = 0; j < t->ndev; j++)
        if (t->devs[j].bk && t->devs[j].stream && t->comm->backend != CT_COMM_NCCL)
            t->devs[j].bk->synchronize(t->devs[j].stream);
    for (int k = 0; t->b && k < t->nb; k++) {
        if (t->ndev)
            t->devs[t->b[k].dev].bk->host_free(t->b[k].pack);
        else
            free(t->b[k].pack);
    }
    for (int k = 0; t->ready_ev && k < t->nb; k++)
        if (t->ready_ev[k])
            t->devs[t->b[k].dev].bk->event_free(t->ready_ev[k]);
    free(t->ready_ev);
    for (int j = 0; j < t->ndev; j++) {
        struct dev_side *d = &t->devs[j];
        if (!d->bk)
            continue;
        if (d->stream && t->comm->backend != CT_COMM_NCCL)
            d->bk->stream_free(d->stream);
        if (d->done_ev)
            d->bk->event_free(d->done_ev);
    }
    free(t->b);
    free(t->shard_lo);
    free(t->shard_n);
    free(t->ready);
    free(t->bucket_of);
    free(t->counts);
    free(t->grads);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    *pt = NULL;
}

/* queues every consecutive complete bucket from next_launch on */
static int launch(ct_bucketer *t)
{
    int k = t->next_launch;
    while (k < t->nb && t->b[k].pending == 0)
        k++;
    if (k == t->next_launch)
        return 0;
    /* device: the buckets' gradients are final once the compute stream's work so far is done */
    for (int j = t->next_launch; t->ndev && j < k; j++) {
        int rc = t->devs[t->b[j].dev].bk->event_record(t->ready_ev[j], NULL);
        if (rc < 0)
            return rc;
    }
    if (t->ndev && t->comm->backend != CT_COMM_NCCL) { /* queued on streams here: see the head */
        for (int j = t->next_launch; j < k; j++) {
            int rc = queue_ring_bucket(t, j);
            if (rc < 0)
                return rc;
        }
        t->next_launch = k;
        return 0;
    }
    t->next_launch = k;
    pthread_mutex_lock(&t->mu);
    t->queued = k;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return 0;
}

int ct_bucketer_mark_ready(ct_bucketer *t, int i)
{
    if (!t)
        return ct__error(CT_EINVAL, "ct_bucketer_mark_ready: bucketer is NULL");
    if (t->no_sync)
        return 0;
    if (i < 0 || i >= t->ngrads)
        return ct__error(CT_EINVAL, "ct_bucketer_mark_ready: index %d not in [0, %d)", i,
                         t->ngrads);
    if (t->ready[i])
        return ct__error(CT_EINVAL, "ct_bucketer_mark_ready: gradient %d marked twice", i);
    t->ready[i] = 1;
    t->b[t->bucket_of[i]].pending--;
    int rc = launch(t);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&t->mu);
    int err = t->err;
    pthread_mutex_unlock(&t->mu);
    if (err < 0)
        return ct__error(err, "ct_bucketer_mark_ready: an earlier bucket's allreduce failed: %s",
                         ct_strerror(err));
    return take_async(t, "ct_bucketer_mark_ready: an earlier bucket's allreduce failed");
}

int ct_bucketer_finish(ct_bucketer *t)
{
    if (!t)
        return ct__error(CT_EINVAL, "ct_bucketer_finish: bucketer is NULL");
    if (t->no_sync)
        return 0;
    for (int i = 0; i < t->ngrads; i++)
        if (!t->ready[i]) {
            t->ready[i] = 1;
            t->b[t->bucket_of[i]].pending--;
        }
    int lrc = launch(t);
    /* host gradients: every bucket reduced; nccl: every bucket enqueued; the ring's device
     * path: nothing (it queued its buckets itself) */
    pthread_mutex_lock(&t->mu);
    while (t->done < t->queued)
        pthread_cond_wait(&t->cv, &t->mu);
    int err = t->err ? t->err : lrc;
    pthread_mutex_unlock(&t->mu);
    /* device: the optimizer's kernels (each device's compute stream) wait for the last
     * bucket's averages there; the host does not */
    for (int j = 0; err == 0 && j < t->ndev && !t->skip_waits; j++)
        err = t->devs[j].bk->stream_wait(NULL, t->devs[j].done_ev);
    reset_step(t);
    if (err < 0)
        return ct__error(err, "ct_bucketer_finish: a bucket's allreduce failed: %s",
                         ct_strerror(err));
    return take_async(t, "ct_bucketer_finish: a bucket's allreduce failed");
}

int ct_bucketer_wait(ct_bucketer *t)
{
    if (!t)
        return ct__error(CT_EINVAL, "ct_bucketer_wait: bucketer is NULL");
    int rc = 0;
    for (int j = 0; j < t->ndev; j++) {
        int r = t->devs[j].bk->event_sync(t->devs[j].done_ev);
        if (r < 0 && rc == 0)
            rc = r;
    }
    int err = take_async(t, "ct_bucketer_wait: a bucket's allreduce failed");
    return err < 0 ? err : rc;
}

void ct_bucketer_set_no_sync(ct_bucketer *t, bool no_sync)
{
    if (t)
        t->no_sync = no_sync;
}

int ct_bucketer_num_buckets(const ct_bucketer *t)
{
    return t ? t->nb : 0;
}

bool ct_bucketer_in_place(const ct_bucketer *t, int k)
{
    return t && k >= 0 && k < t->nb && (t->b[k].span || t->b[k].n == 1);
}

void ct_bucketer_bucket_range(const ct_bucketer *t, int k, int *first, int *n)
{
    *first = 0;
    *n = 0;
    if (t && k >= 0 && k < t->nb) {
        *first = t->b[k].first;
        *n = t->b[k].n;
    }
}

int ct_bucketer_buckets_done(ct_bucketer *t)
{
    if (!t)
        return 0;
    pthread_mutex_lock(&t->mu);
    int done = t->done;
    pthread_mutex_unlock(&t->mu);
    return done;
}

void ct_bucketer_shard(const ct_bucketer *t, int i, size_t *lo, size_t *n)
{
    *lo = 0;
    *n = 0;
    if (!t || i < 0 || i >= t->ngrads)
        return;
    if (!t->shard) {
        *n = t->counts[i];
        return;
    }
    *lo = t->shard_lo[i];
    *n = t->shard_n[i];
}

int ct_bucketer_allgather(ct_bucketer *t, float *const *vals)
{
    if (!t || !vals)
        return ct__error(CT_EINVAL, "ct_bucketer_allgather: bucketer or vals is NULL");
    if (!t->shard)
        return ct__error(CT_EINVAL, "ct_bucketer_allgather: the bucketer is not in shard mode");
    for (int k = 0; k < t->nb; k++) {
        struct bucket *b = &t->b[k];
        int rc;
        if (!b->pack) {
            rc = ct_comm_allgather_chunks(t->comm, vals[b->first], b->count, CT_F32, t->timeout_ms);
        } else {
            copy_owned(t, b, vals, true);
            rc = ct_comm_allgather_chunks(t->comm, b->pack, b->count, CT_F32, t->timeout_ms);
            size_t off = 0;
            for (int i = b->first; rc == 0 && i < b->first + b->n; i++) {
                memcpy(vals[i], b->pack + off, t->counts[i] * sizeof(float));
                off += t->counts[i];
            }
        }
        if (rc < 0)
            return ct__error(rc, "ct_bucketer_allgather: bucket %d: %s", k, ct_last_error());
    }
    return 0;
}
