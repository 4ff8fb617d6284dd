/* trainer/cuda/alloc.c — the caching device allocator (cuda.h says what it promises).
 *
 * Every block the allocator got from cudaMalloc is in a hash table by address (to find it on
 * free). Free blocks also sit in a bin: one singly linked list per (stream id, class size). A
 * training step asks for the same few dozen sizes every step, so the bins are a short array
 * searched in order. Blocks are never split or merged: a class is at most 25% bigger than the
 * request, and the sizes repeat, which is what splitting would be for.
 *
 * Streams are keyed by cudaStreamGetId, not by their handle: a destroyed stream's handle can be
 * given to a new stream, which must not inherit the old one's blocks while its work may still
 * run (the legacy NULL stream has an id of its own too). A block also used on other streams
 * (ct__cuda_record_stream) keeps a list of them; at ct__cuda_free an event is recorded on each
 * and the block waits on the pending list, reaching its bin only when every event is done. The
 * pending list is polled (cudaEventQuery) at each malloc and waited for (cudaEventSynchronize) by
 * empty_cache and the out-of-memory retry. Events are kept in a pool for reuse. Not here: blocks
 * from another device (the caller's current device is assumed throughout). */
#include <pthread.h>
#include <stdlib.h>

#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

#define SMALL_MAX (1u << 20) /* up to here: multiples of 512 bytes */
#define SMALL_STEP 512u
#define HASH_BUCKETS 4096

/* Another stream that uses a block: after the block's free, ev marks the end of its work there
 * (NULL: nothing to wait for). */
typedef struct use {
    cudaStream_t stream;
    uint64_t id;
    cudaEvent_t ev;
} use;

typedef struct block {
    void *ptr;
    size_t size;        /* the class size (cudaMalloc'ed) */
    size_t requested;   /* while in use: what the caller asked for */
    uint64_t stream_id; /* the stream it was allocated for */
    bool in_use;
    use *uses; /* other streams (ct__cuda_record_stream); kept until pending is over */
    int nuses, cap_uses;
    struct block *next_free; /* in its bin, or in the pending list */
    struct block *next_hash; /* in its hash bucket */
} block;

typedef struct bin {
    uint64_t stream_id;
    size_t size;
    block *head;
} bin;

static struct {
    pthread_mutex_t mu;
    block *hash[HASH_BUCKETS];
    bin *bins;
    int nbins, cap;
    block *pending;      /* freed, waiting for the events of their other streams */
    cudaEvent_t *events; /* unused events, for reuse */
    int nevents, cap_events;
    ct_cuda_alloc_stats stats;
} A = {.mu = PTHREAD_MUTEX_INITIALIZER};

size_t ct__cuda_alloc_class(size_t bytes)
{
    if (bytes <= SMALL_MAX)
        return bytes == 0 ? SMALL_STEP : (bytes + SMALL_STEP - 1) / SMALL_STEP * SMALL_STEP;
    size_t base = (size_t)1 << (63 - __builtin_clzll((unsigned long long)bytes));
    size_t step = base / 4;
    return base + (bytes - base + step - 1) / step * step;
}

static size_t hash_of(const void *p)
{
    return (size_t)(((uintptr_t)p >> 9) * 0x9e3779b97f4a7c15ull >> 52) % HASH_BUCKETS;
}

/* *id = the stream's process-unique id (NULL, the legacy stream, has one too) */
static int stream_id(void *stream, uint64_t *id)
{
    unsigned long long v = 0;
    int rc = ct__cuda_status(cudaStreamGetId((cudaStream_t)stream, &v), "cudaStreamGetId");
    *id = v;
    return rc;
}

static block *find_block(const void *p)
{
    block *b = A.hash[hash_of(p)];
    while (b && b->ptr != p)
        b = b->next_hash;
    return b;
}

static bin *find_bin(uint64_t id, size_t size, bool create)
{
    for (int i = 0; i < A.nbins; i++)
        if (A.bins[i].stream_id == id && A.bins[i].size == size)
            return &A.bins[i];
    if (!create)
        return NULL;
    if (A.nbins == A.cap) {
        int cap = A.cap ? 2 * A.cap : 64;
        bin *b = realloc(A.bins, (size_t)cap * sizeof *b);
        if (!b)
            return NULL;
        A.bins = b;
        A.cap = cap;
    }
    A.bins[A.nbins] = (bin){.stream_id = id, .size = size};
    return &A.bins[A.nbins++];
}

/* b (free) onto its bin's list; CT_ENOMEM, and b on no list, when the bin cannot be made. */
static int bin_push(block *b)
{
    bin *bn = find_bin(b->stream_id, b->size, true);
    if (!bn)
        return ct__error(CT_ENOMEM, "cuda_free: out of host memory for a free list");
    b->next_free = bn->head;
    bn->head = b;
    return 0;
}

/* ---- events: a pool, so that a step's frees do not create and destroy them ---- */

static int event_get(cudaEvent_t *ev)
{
    if (A.nevents > 0) {
        *ev = A.events[--A.nevents];
        return 0;
    }
    *ev = NULL;
    return ct__cuda_status(cudaEventCreateWithFlags(ev, cudaEventDisableTiming),
                           "cudaEventCreateWithFlags");
}

static void event_put(cudaEvent_t ev)
{
    if (!ev)
        return;
    if (A.nevents == A.cap_events) {
        int cap = A.cap_events ? 2 * A.cap_events : 64;
        cudaEvent_t *e = realloc(A.events, (size_t)cap * sizeof *e);
        if (!e) { /* not worth an error: the pool is only a saving */
            cudaEventDestroy(ev);
            return;
        }
        A.events = e;
        A.cap_events = cap;
    }
    A.events[A.nevents++] = ev;
}

/* ---- the pending list ---- */

/* After b's free: an event on each of its other streams, at the end of the work queued there so
 * far. Where an event cannot be had or recorded, that stream is waited for instead (a slow path
 * that keeps the block safe); its error is returned when that fails too. */
static int uses_record(block *b)
{
    int rc = 0;
    for (int i = 0; i < b->nuses; i++) {
        use *u = &b->uses[i];
        if (event_get(&u->ev) == 0 &&
            ct__cuda_status(cudaEventRecord(u->ev, u->stream), "cudaEventRecord") == 0)
            continue;
        (void)cudaGetLastError(); /* handled here: not for the next launch check to see */
        event_put(u->ev);
        u->ev = NULL;
        int e = ct__cuda_status(cudaStreamSynchronize(u->stream), "cudaStreamSynchronize");
        rc = rc ? rc : e;
    }
    return rc;
}

/* Moves the pending blocks whose events are all done to their bins; with wait, waits for them
 * (every pending block moves). The caller holds the lock. */
static int pending_collect(bool wait)
{
    block **pp = &A.pending;
    while (*pp) {
        block *b = *pp;
        bool done = true;
        for (int i = 0; i < b->nuses && done; i++) {
            use *u = &b->uses[i];
            if (!u->ev)
                continue;
            cudaError_t e = wait ? cudaEventSynchronize(u->ev) : cudaEventQuery(u->ev);
            if (e == cudaErrorNotReady) {
                (void)cudaGetLastError(); /* not an error: else the next launch check sees it */
                done = false;
            } else if (e != cudaSuccess) {
                return ct__cuda_status(e, wait ? "cudaEventSynchronize" : "cudaEventQuery");
            } else {
                event_put(u->ev);
                u->ev = NULL;
            }
        }
        if (!done) {
            pp = &b->next_free;
            continue;
        }
        block *next = b->next_free;
        b->nuses = 0; /* handed out again, it starts with no other streams */
        int rc = bin_push(b);
        if (rc < 0) /* stays pending, with nothing left to wait for: tried again next time */
            return rc;
        *pp = next;
        A.stats.pending_blocks--;
        A.stats.pending_bytes -= (int64_t)b->size;
    }
    return 0;
}

/* cudaFree of every free block (pending ones stay); the caller holds the lock. */
static int release_cached(void)
{
    int rc = 0;
    for (int i = 0; i < A.nbins; i++) {
        while (A.bins[i].head) {
            block *b = A.bins[i].head;
            A.bins[i].head = b->next_free;
            block **pp = &A.hash[hash_of(b->ptr)];
            while (*pp != b)
                pp = &(*pp)->next_hash;
            *pp = b->next_hash;
            int e = ct__cuda_status(cudaFree(b->ptr), "cudaFree");
            rc = rc ? rc : e;
            A.stats.reserved_bytes -= (int64_t)b->size;
            A.stats.device_frees++;
            free(b->uses);
            free(b);
        }
    }
    A.nbins = 0; /* every bin is empty now */
    return rc;
}

int ct__cuda_malloc(void **p, size_t bytes, void *stream)
{
    if (!p)
        return ct__error(CT_EINVAL, "cuda_malloc: p is NULL");
    *p = NULL;
    size_t size = ct__cuda_alloc_class(bytes);
    uint64_t id = 0;
    int rc = stream_id(stream, &id);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&A.mu);
    if (A.pending && (rc = pending_collect(false)) < 0)
        goto out;
    bin *bn = find_bin(id, size, false);
    block *b = bn ? bn->head : NULL;
    if (b) {
        bn->head = b->next_free;
        A.stats.cache_hits++;
    } else {
        void *ptr = NULL;
        cudaError_t e = cudaMalloc(&ptr, size);
        if (e == cudaErrorMemoryAllocation) { /* what the cache holds may be enough */
            (void)cudaGetLastError();
            A.stats.oom_retries++;
            if ((rc = pending_collect(true)) < 0 || (rc = release_cached()) < 0)
                goto out;
            e = cudaMalloc(&ptr, size);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* else the next kernel launch's check reports this */
            rc = ct__cuda_status(e, "cudaMalloc");
            rc = ct__error(rc,
                           "cuda_malloc: %zu bytes (class %zu) on stream %p (id %llu): %s; %lld "
                           "bytes in use, %lld reserved",
                           bytes, size, stream, (unsigned long long)id, ct_last_error(),
                           (long long)A.stats.allocated_bytes, (long long)A.stats.reserved_bytes);
            goto out;
        }
        if (!(b = calloc(1, sizeof *b))) {
            cudaFree(ptr);
            rc = ct__error(CT_ENOMEM, "cuda_malloc: out of host memory");
            goto out;
        }
        b->ptr = ptr;
        b->size = size;
        b->stream_id = id;
        size_t h = hash_of(ptr);
        b->next_hash = A.hash[h];
        A.hash[h] = b;
        A.stats.reserved_bytes += (int64_t)size;
        A.stats.device_mallocs++;
    }
    b->in_use = true;
    b->requested = bytes;
    b->next_free = NULL;
    A.stats.allocs++;
    A.stats.allocated_bytes += (int64_t)size;
    A.stats.requested_bytes += (int64_t)bytes;
    if (A.stats.allocated_bytes > A.stats.peak_allocated_bytes)
        A.stats.peak_allocated_bytes = A.stats.allocated_bytes;
    *p = b->ptr;
out:
    pthread_mutex_unlock(&A.mu);
    return rc;
}

int ct__cuda_record_stream(void *p, void *stream)
{
    if (!p)
        return 0;
    uint64_t id = 0;
    int rc = stream_id(stream, &id);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&A.mu);
    block *b = find_block(p);
    if (!b || !b->in_use) {
        rc = ct__error(CT_EINVAL, "cuda_record_stream: %p %s", p,
                       !b ? "did not come from ct__cuda_malloc" : "is not in use");
        goto out;
    }
    if (id == b->stream_id)
        goto out;
    for (int i = 0; i < b->nuses; i++)
        if (b->uses[i].id == id)
            goto out;
    if (b->nuses == b->cap_uses) {
        int cap = b->cap_uses ? 2 * b->cap_uses : 4;
        use *u = realloc(b->uses, (size_t)cap * sizeof *u);
        if (!u) {
            rc = ct__error(CT_ENOMEM, "cuda_record_stream: out of host memory");
            goto out;
        }
        b->uses = u;
        b->cap_uses = cap;
    }
    b->uses[b->nuses++] = (use){.stream = (cudaStream_t)stream, .id = id};
out:
    pthread_mutex_unlock(&A.mu);
    return rc;
}

int ct__cuda_free(void *p)
{
    if (!p)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&A.mu);
    block *b = find_block(p);
    if (!b || !b->in_use) {
        rc = ct__error(CT_EINVAL, "cuda_free: %p %s", p,
                       !b ? "did not come from ct__cuda_malloc" : "is freed already");
        goto out;
    }
    if (b->nuses == 0) { /* only its own stream: reusable there at once, in stream order */
        if ((rc = bin_push(b)) < 0)
            goto out;
    } else {
        rc = uses_record(b); /* an error here has waited instead: b is safe either way */
        b->next_free = A.pending;
        A.pending = b;
        A.stats.pending_blocks++;
        A.stats.pending_bytes += (int64_t)b->size;
    }
    b->in_use = false;
    A.stats.allocated_bytes -= (int64_t)b->size;
    A.stats.requested_bytes -= (int64_t)b->requested;
out:
    pthread_mutex_unlock(&A.mu);
    return rc;
}

int ct__cuda_empty_cache(void)
{
    pthread_mutex_lock(&A.mu);
    int rc = pending_collect(true);
    int rrc = release_cached();
    pthread_mutex_unlock(&A.mu);
    return rc < 0 ? rc : rrc;
}

void ct__cuda_alloc_stats_get(ct_cuda_alloc_stats *out)
{
    pthread_mutex_lock(&A.mu);
    *out = A.stats;
    pthread_mutex_unlock(&A.mu);
}
