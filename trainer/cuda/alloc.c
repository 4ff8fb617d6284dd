/* trainer/cuda/alloc.c — the caching device allocator (cuda.h says what it promises).
 *
 * Every block the allocator got from cudaMalloc is in a hash table by address (to find it on
 * free). Free blocks also sit in a bin: one singly linked list per (stream, class size). A
 * training step asks for the same few dozen sizes every step, so the bins are a short array
 * searched in order. Blocks are never split or merged: a class is at most 25% bigger than the
 * request, and the sizes repeat, which is what splitting would be for. */
#include <pthread.h>
#include <stdlib.h>

#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

#define SMALL_MAX (1u << 20) /* up to here: multiples of 512 bytes */
#define SMALL_STEP 512u
#define HASH_BUCKETS 4096

typedef struct block {
    void *ptr;
    size_t size;      /* the class size (cudaMalloc'ed) */
    size_t requested; /* while in use: what the caller asked for */
    cudaStream_t stream;
    bool in_use;
    struct block *next_free; /* in its bin */
    struct block *next_hash; /* in its hash bucket */
} block;

typedef struct bin {
    cudaStream_t stream;
    size_t size;
    block *head;
} bin;

static struct {
    pthread_mutex_t mu;
    block *hash[HASH_BUCKETS];
    bin *bins;
    int nbins, cap;
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

static bin *find_bin(cudaStream_t stream, size_t size, bool create)
{
    for (int i = 0; i < A.nbins; i++)
        if (A.bins[i].stream == stream && A.bins[i].size == size)
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
    A.bins[A.nbins] = (bin){.stream = stream, .size = size};
    return &A.bins[A.nbins++];
}

/* cudaFree of every free block; the caller holds the lock. */
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
    cudaStream_t s = (cudaStream_t)stream;
    int rc = 0;
    pthread_mutex_lock(&A.mu);
    bin *bn = find_bin(s, size, false);
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
            if ((rc = release_cached()) < 0)
                goto out;
            e = cudaMalloc(&ptr, size);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* else the next kernel launch's check reports this */
            rc = ct__cuda_status(e, "cudaMalloc");
            rc = ct__error(rc,
                           "cuda_malloc: %zu bytes (class %zu) on stream %p: %s; %lld bytes "
                           "in use, %lld reserved",
                           bytes, size, stream, ct_last_error(), (long long)A.stats.allocated_bytes,
                           (long long)A.stats.reserved_bytes);
            goto out;
        }
        if (!(b = calloc(1, sizeof *b))) {
            cudaFree(ptr);
            rc = ct__error(CT_ENOMEM, "cuda_malloc: out of host memory");
            goto out;
        }
        b->ptr = ptr;
        b->size = size;
        b->stream = s;
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

int ct__cuda_free(void *p)
{
    if (!p)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&A.mu);
    block *b = A.hash[hash_of(p)];
    while (b && b->ptr != p)
        b = b->next_hash;
    if (!b || !b->in_use) {
        rc = ct__error(CT_EINVAL, "cuda_free: %p %s", p,
                       !b ? "did not come from ct__cuda_malloc" : "is freed already");
        goto out;
    }
    bin *bn = find_bin(b->stream, b->size, true);
    if (!bn) {
        rc = ct__error(CT_ENOMEM, "cuda_free: out of host memory for a free list");
        goto out;
    }
    b->in_use = false;
    b->next_free = bn->head;
    bn->head = b;
    A.stats.allocated_bytes -= (int64_t)b->size;
    A.stats.requested_bytes -= (int64_t)b->requested;
out:
    pthread_mutex_unlock(&A.mu);
    return rc;
}

int ct__cuda_empty_cache(void)
{
    pthread_mutex_lock(&A.mu);
    int rc = release_cached();
    pthread_mutex_unlock(&A.mu);
    return rc;
}

void ct__cuda_alloc_stats_get(ct_cuda_alloc_stats *out)
{
    pthread_mutex_lock(&A.mu);
    *out = A.stats;
    pthread_mutex_unlock(&A.mu);
}
