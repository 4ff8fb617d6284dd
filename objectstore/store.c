/* objectstore/store.c — the object store shard: arena allocator, index, LRU spilling, and the
 * thread that serves same-node clients over a unix socket.
 *
 * Layout: one shm file per shard, the arena, sized memory_cap. Objects take 4 KiB-aligned
 * ranges, placed first-fit from a free list sorted by offset (coalesced on free). Pages below
 * `populated` have been allocated by tmpfs and mapped here; a create that reaches past it
 * fallocates and pre-faults the new range (one syscall each, instead of a fault per page, and a
 * clean CT_ENOSPC instead of SIGBUS when /dev/shm is full). Freed ranges keep their pages, so
 * the next object written there is copied at memcpy speed. With opts.populate_ahead, a warming
 * thread (normal priority: see warm_thread) keeps `populated` that far past the highest range
 * ever allocated (`high`), 1 MiB per step without the lock, so creates into fresh space rarely
 * populate themselves;
 * a create that does anyway just repeats part of that work (both are idempotent).
 *
 * Index: a chained hash table of objects. An object that is deleted while pinned leaves the
 * index at once and is freed by its last unpin. The LRU list holds sealed, in-memory objects
 * only (pinned ones stay in it and are skipped by eviction).
 *
 * Not here: cross-node transfer (transfer.c), the client side of the socket (client.c). */
#define _GNU_SOURCE
#include "objectstore/store.h"
#include "objectstore/store_wire.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

#define ALIGN 4096u
#define DEFAULT_CAP (1ull << 30)

typedef struct obj {
    ct_object_id id;
    uint64_t size;
    uint64_t off;   /* arena offset when in memory */
    uint64_t alloc; /* bytes of arena held (size rounded up), 0 when not in memory */
    int sealed;
    int in_mem;
    int pins;
    int deleted; /* out of the index; freed at the last unpin */
    int owner;   /* id of the client connection that created it unsealed, 0 = local */
    int in_lru;
    struct obj *hnext;
    struct obj *prev, *next; /* LRU: head.next is least recently used */
} obj;

typedef struct blk {
    uint64_t off, len;
    struct blk *next;
} blk;

typedef struct conn {
    int fd;
    int id;
    obj **pins;
    size_t npins, cap;
} conn;

struct ct_store {
    char name[CT_STORE_NAME_MAX + 1];
    char shm_name[CT_STORE_NAME_MAX + 32];
    char *spill_dir;
    uint64_t cap;
    int arena_fd;
    unsigned char *arena;
    uint64_t populated;
    uint64_t high;     /* end of the highest range ever allocated */
    uint64_t ahead;    /* opts.populate_ahead */
    pthread_t warm_th; /* the warming thread, when ahead */
    pthread_cond_t warm_cv;
    int warm_started, warm_stop, warm_failed;
    /* The warming thread only works while the store is quiet: no object being written and no
     * create, seal, pin or release for WARM_QUIET_NS. */
    int writing;        /* objects created and not yet sealed or dropped */
    int64_t last_op_ns; /* ct__now_ns() of the last create/seal/pin/release */

    pthread_mutex_t mu;
    obj **buckets;
    size_t nbuckets, nobj;
    obj lru; /* sentinel */
    blk *free_list;
    uint64_t used;
    ct_store_stats st;

    int listen_fd;
    int bound; /* listen_fd holds the name: this shard owns its shm and spill names */
    int wake[2];
    pthread_t thread;
    int thread_started;
    conn *conns;
    size_t nconns;
    int next_conn_id;
    void (*on_event)(void *arg, int event, const ct_object_id *id, uint64_t size);
    void *event_arg;
};

/* ---- ids ---- */

char *ct_object_id_hex(const ct_object_id *id, char out[2 * CT_OBJECT_ID_LEN + 1])
{
    return ct__hex(out, id->b, CT_OBJECT_ID_LEN);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int ct_object_id_parse(ct_object_id *id, const char *hex)
{
    if (!id || !hex || strlen(hex) != 2 * CT_OBJECT_ID_LEN)
        return ct__error(CT_EINVAL, "object id: want %d hex digits", 2 * CT_OBJECT_ID_LEN);
    for (int i = 0; i < CT_OBJECT_ID_LEN; i++) {
        int h = hexval(hex[2 * i]), l = hexval(hex[2 * i + 1]);
        if (h < 0 || l < 0)
            return ct__error(CT_EINVAL, "object id '%s': not hex at %d", hex, 2 * i);
        id->b[i] = (uint8_t)(h << 4 | l);
    }
    return 0;
}

int ct__store_check_name(const char *name)
{
    if (!name || !*name)
        return ct__error(CT_EINVAL, "store opts.name: required");
    size_t n = strlen(name);
    if (n > CT_STORE_NAME_MAX)
        return ct__error(CT_EINVAL, "store name '%s': longer than %d", name, CT_STORE_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return ct__error(CT_EINVAL, "store name '%s': character %zu not in [A-Za-z0-9_.-]",
                             name, i);
    }
    return 0;
}

void ct__store_shm_name(char *out, size_t n, const char *name)
{
    snprintf(out, n, "/ct.%s.arena", name);
}

socklen_t ct__store_sockaddr(struct sockaddr_un *sa, const char *name)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int len = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "ct-store.%s", name);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

/* Tells the embedder (ct-node) that an object appeared or went; called without the lock. */
static void notify(ct_store *s, int event, const ct_object_id *id, uint64_t size)
{
    if (s->on_event)
        s->on_event(s->event_arg, event, id, size);
}

/* ---- index ---- */

static size_t id_hash(const ct_object_id *id)
{
    uint64_t h = ct__fnv1a64(id->b, CT_OBJECT_ID_LEN);
    return (size_t)(h ^ (h >> 29));
}

static obj *find(ct_store *s, const ct_object_id *id)
{
    for (obj *o = s->buckets[id_hash(id) & (s->nbuckets - 1)]; o; o = o->hnext)
        if (!memcmp(o->id.b, id->b, CT_OBJECT_ID_LEN))
            return o;
    return NULL;
}

static void grow_index(ct_store *s)
{
    size_t nb = s->nbuckets * 2;
    obj **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* keep the old table: longer chains, still correct */
    for (size_t i = 0; i < s->nbuckets; i++) {
        for (obj *o = s->buckets[i], *nx; o; o = nx) {
            nx = o->hnext;
            size_t h = id_hash(&o->id) & (nb - 1);
            o->hnext = b[h];
            b[h] = o;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

static void index_insert(ct_store *s, obj *o)
{
    if (s->nobj + 1 > 2 * s->nbuckets)
        grow_index(s);
    size_t h = id_hash(&o->id) & (s->nbuckets - 1);
    o->hnext = s->buckets[h];
    s->buckets[h] = o;
    s->nobj++;
}

static void index_remove(ct_store *s, obj *o)
{
    obj **pp = &s->buckets[id_hash(&o->id) & (s->nbuckets - 1)];
    while (*pp && *pp != o)
        pp = &(*pp)->hnext;
    if (*pp) {
        *pp = o->hnext;
        s->nobj--;
    }
    o->hnext = NULL;
}

static void lru_remove(obj *o)
{
    if (!o->in_lru)
        return;
    o->prev->next = o->next;
    o->next->prev = o->prev;
    o->prev = o->next = NULL;
    o->in_lru = 0;
}

static void lru_push(ct_store *s, obj *o) /* as most recently used */
{
    lru_remove(o);
    o->prev = s->lru.prev;
    o->next = &s->lru;
    s->lru.prev->next = o;
    s->lru.prev = o;
    o->in_lru = 1;
}

/* ---- arena allocator ---- */

static int arena_alloc(ct_store *s, uint64_t len, uint64_t *off)
{
    blk **pp = &s->free_list;
    for (blk *b = *pp; b; pp = &b->next, b = b->next) {
        if (b->len < len)
            continue;
        *off = b->off;
        b->off += len;
        b->len -= len;
        if (!b->len) {
            *pp = b->next;
            free(b);
        }
        s->used += len;
        return 0;
    }
    return CT_ENOSPC;
}

static void arena_free(ct_store *s, uint64_t off, uint64_t len)
{
    if (!len)
        return;
    s->used -= len;
    blk *prev = NULL, *b = s->free_list;
    while (b && b->off < off) {
        prev = b;
        b = b->next;
    }
    if (prev && prev->off + prev->len == off) {
        prev->len += len;
        if (b && prev->off + prev->len == b->off) {
            prev->len += b->len;
            prev->next = b->next;
            free(b);
        }
        return;
    }
    if (b && off + len == b->off) {
        b->off = off;
        b->len += len;
        return;
    }
    blk *n = malloc(sizeof *n);
    if (CT_NEVER(!n)) {
        /* Out of memory for a list node: leak the range rather than corrupt the list. */
        CT_LOG(CT_LOG_ERROR, "store", "out of memory freeing %llu bytes of arena",
               (unsigned long long)len);
        return;
    }
    n->off = off;
    n->len = len;
    n->next = b;
    if (prev)
        prev->next = n;
    else
        s->free_list = n;
}

static uint64_t arena_free_total(ct_store *s)
{
    uint64_t t = 0;
    for (blk *b = s->free_list; b; b = b->next)
        t += b->len;
    return t;
}

/* Makes sure tmpfs has pages for [0, end) and that they are mapped here. */
static int populate(ct_store *s, uint64_t end)
{
    if (end <= s->populated)
        return 0;
    uint64_t from = s->populated;
    if (fallocate(s->arena_fd, 0, (off_t)from, (off_t)(end - from)) != 0 && errno != EOPNOTSUPP)
        return ct__error(errno == ENOSPC ? CT_ENOSPC : -errno,
                         "store %s: reserving %llu bytes of shared memory: %s", s->name,
                         (unsigned long long)(end - from), strerror(errno));
#ifdef MADV_POPULATE_WRITE
    (void)madvise(s->arena + from, end - from, MADV_POPULATE_WRITE);
#endif
    s->populated = end;
    return 0;
}

/* ---- spilling ---- */

static void spill_path(ct_store *s, const obj *o, char *out, size_t n, int tmp)
{
    char hex[2 * CT_OBJECT_ID_LEN + 1];
    snprintf(out, n, "%s/%s%s", s->spill_dir, ct_object_id_hex(&o->id, hex), tmp ? ".tmp" : "");
}

static int read_all(int fd, unsigned char *p, uint64_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (uint64_t)r;
    }
    return 0;
}

/* Writes o to its spill file (tmp, fsync, rename) and frees its arena range. On failure o
 * stays in memory untouched. */
static int spill(ct_store *s, obj *o)
{
    char tmp[4200], path[4200];
    spill_path(s, o, tmp, sizeof tmp, 1);
    spill_path(s, o, path, sizeof path, 0);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return ct__error(CT_EIO, "store %s: spill file %s: %s", s->name, tmp, strerror(errno));
    int rc = 0;
    if (ct__write_all(fd, s->arena + o->off, o->size) != 0 || fsync(fd) != 0) {
        rc = ct__error(errno == ENOSPC ? CT_ENOSPC : CT_EIO, "store %s: writing spill file %s: %s",
                       s->name, tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        goto out;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        rc = ct__error(CT_EIO, "store %s: rename %s: %s", s->name, tmp, strerror(errno));
        unlink(tmp);
        goto out;
    }
    lru_remove(o);
    arena_free(s, o->off, o->alloc);
    o->alloc = 0;
    o->in_mem = 0;
    s->st.spill_count++;
    s->st.spill_bytes += o->size;
    CT_LOG(CT_LOG_DEBUG, "store", "%s: spilled %llu bytes to %s", s->name,
           (unsigned long long)o->size, path);
out:
    return rc;
}

/* Finds len bytes of arena, spilling LRU unpinned sealed objects as needed. Evicts nothing if
 * the free space plus everything evictable is too small. */
static int make_room(ct_store *s, uint64_t len, uint64_t *off)
{
    *off = 0;
    if (!len)
        return 0;
    if (len > s->cap)
        return ct__error(CT_ENOSPC, "store %s: object of %llu bytes exceeds memory cap %llu",
                         s->name, (unsigned long long)len, (unsigned long long)s->cap);
    if (arena_alloc(s, len, off) == 0)
        goto got;
    uint64_t evictable = 0;
    if (s->spill_dir)
        for (obj *o = s->lru.next; o != &s->lru; o = o->next)
            if (!o->pins)
                evictable += o->alloc;
    if (arena_free_total(s) + evictable < len)
        return ct__error(CT_ENOSPC,
                         "store %s: %llu bytes do not fit: %llu free, %llu evictable (cap %llu%s)",
                         s->name, (unsigned long long)len, (unsigned long long)arena_free_total(s),
                         (unsigned long long)evictable, (unsigned long long)s->cap,
                         s->spill_dir ? "" : ", no spill_dir");
    for (obj *o = s->lru.next, *nx; o != &s->lru; o = nx) {
        nx = o->next;
        if (o->pins)
            continue;
        int rc = spill(s, o);
        if (rc)
            return rc;
        if (arena_alloc(s, len, off) == 0)
            goto got;
    }
    return ct__error(CT_ENOSPC, "store %s: %llu bytes do not fit (arena fragmented by pins)",
                     s->name, (unsigned long long)len);
got:;
    int rc = populate(s, *off + len);
    if (rc) {
        arena_free(s, *off, len);
        return rc;
    }
    if (*off + len > s->high) {
        s->high = *off + len;
        if (s->warm_started)
            pthread_cond_signal(&s->warm_cv);
    }
    return 0;
}

/* The warming thread (opts.populate_ahead): populates [populated, high + ahead) in steps,
 * without the lock during the work, and only while the store is quiet (nothing being
 * written, no operation for WARM_QUIET_NS): zeroing pages competes for CPU and for the shm
 * file with the transfers and copies it is meant to speed up. Measured with the store never
 * quiet-gated: 1 MiB node-to-node gets went from 1.1 ms to a median of 3-4 ms while it ran.
 * Each step is 1 MiB, so it holds the shm file and the mmap lock only briefly. Stops for good if
 * /dev/shm is full (creates then report CT_ENOSPC themselves). */
#define WARM_STEP (1ull << 20)
#define WARM_QUIET_NS 2000000
static void *warm_thread(void *arg)
{
    ct_store *s = arg;
    /* The normal priority of the process, neither SCHED_IDLE nor nice 19: madvise holds the
     * process's mmap lock, and a low-priority thread preempted while holding it waits for CPU
     * for seconds beside busy processes, while every thread that maps memory (malloc, thread
     * stacks, fork, ZeroMQ's I/O threads) queues behind it in D state. Seen at nice 19 with 8
     * CPU-bound processes on 2 cores (tests/runtime/test_load.c): this thread runnable for
     * seconds, the node's ZeroMQ I/O threads in D in vm_mmap_pgoff and its fork in dup_mmap,
     * the node cut off from its head for up to 15 s. Quiet-gated 1 MiB steps keep its CPU
     * small. */
    pthread_setname_np(pthread_self(), "ct-store-warm"); /* who is who in /proc/PID/task */
    pthread_mutex_lock(&s->mu);
    while (!s->warm_stop) {
        uint64_t want = s->high + s->ahead < s->cap ? s->high + s->ahead : s->cap;
        if (s->warm_failed || s->populated >= want) {
            pthread_cond_wait(&s->warm_cv, &s->mu);
            continue;
        }
        int64_t quiet_at = s->last_op_ns + WARM_QUIET_NS;
        if (s->writing || ct__now_ns() < quiet_at) {
            /* busy: look again after the quiet time (the clock of timedwait is realtime) */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += WARM_QUIET_NS;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&s->warm_cv, &s->mu, &ts);
            continue;
        }
        uint64_t from = s->populated, end = want - from > WARM_STEP ? from + WARM_STEP : want;
        pthread_mutex_unlock(&s->mu);
        int ok =
            fallocate(s->arena_fd, 0, (off_t)from, (off_t)(end - from)) == 0 || errno == EOPNOTSUPP;
#ifdef MADV_POPULATE_WRITE
        if (ok)
            (void)madvise(s->arena + from, end - from, MADV_POPULATE_WRITE);
#endif
        pthread_mutex_lock(&s->mu);
        if (!ok) {
            s->warm_failed = 1;
            CT_LOG(CT_LOG_INFO, "store", "%s: populating ahead stopped at %llu bytes: %s", s->name,
                   (unsigned long long)from, strerror(errno));
        } else if (s->populated < end) {
            s->populated = end; /* [from, end) is done; below from was done before */
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Copies a spilled, unpinned object back into the arena and removes its file. */
static int restore(ct_store *s, obj *o)
{
    uint64_t len = (o->size + ALIGN - 1) & ~(uint64_t)(ALIGN - 1), off;
    int rc = make_room(s, len, &off);
    if (rc)
        return rc;
    char path[4200];
    spill_path(s, o, path, sizeof path, 0);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read_all(fd, s->arena + off, o->size) != 0) {
        rc = ct__error(CT_EIO, "store %s: reading spill file %s: %s", s->name, path,
                       strerror(errno));
        if (fd >= 0)
            close(fd);
        arena_free(s, off, len);
        return rc;
    }
    close(fd);
    unlink(path);
    o->off = off;
    o->alloc = len;
    o->in_mem = 1;
    lru_push(s, o);
    s->st.restore_count++;
    return 0;
}

/* Frees an object that is out of the index and unpinned. */
static void free_obj(ct_store *s, obj *o)
{
    lru_remove(o);
    if (o->in_mem) {
        arena_free(s, o->off, o->alloc);
    } else if (o->sealed && s->spill_dir) {
        char path[4200];
        spill_path(s, o, path, sizeof path, 0);
        unlink(path);
    }
    free(o);
}

/* Drops a pin; frees the object if it was deleted meanwhile. Caller holds mu. */
static void unpin(ct_store *s, obj *o)
{
    if (CT_NEVER(o->pins <= 0))
        return;
    if (--o->pins == 0 && o->deleted)
        free_obj(s, o);
}

/* ---- operations shared by the local API and the client thread (caller holds mu) ---- */

static int do_create(ct_store *s, const ct_object_id *id, uint64_t size, int owner, obj **out)
{
    char hex[2 * CT_OBJECT_ID_LEN + 1];
    if (find(s, id))
        return ct__error(CT_EEXIST, "store %s: object %s exists", s->name,
                         ct_object_id_hex(id, hex));
    uint64_t len = (size + ALIGN - 1) & ~(uint64_t)(ALIGN - 1), off;
    if (len < size)
        return ct__error(CT_EINVAL, "store %s: size %llu too large", s->name,
                         (unsigned long long)size);
    obj *o = calloc(1, sizeof *o);
    if (!o)
        return ct__error(CT_ENOMEM, "store %s: out of memory", s->name);
    int rc = make_room(s, len, &off);
    if (rc) {
        free(o);
        return rc;
    }
    o->id = *id;
    o->size = size;
    o->off = off;
    o->alloc = len;
    o->in_mem = 1;
    o->owner = owner;
    index_insert(s, o);
    s->writing++;
    s->last_op_ns = ct__now_ns();
    *out = o;
    return 0;
}

/* conn: the client connection asking (it must be the writer), or 0 for the local API. */
static int do_seal_abort(ct_store *s, const ct_object_id *id, int seal, int conn, uint64_t *size)
{
    char hex[2 * CT_OBJECT_ID_LEN + 1];
    obj *o = find(s, id);
    if (!o)
        return ct__error(CT_ENOENT, "store %s: no object %s to %s", s->name,
                         ct_object_id_hex(id, hex), seal ? "seal" : "abort");
    if (o->sealed)
        return ct__error(CT_EINVAL, "store %s: object %s is already sealed", s->name,
                         ct_object_id_hex(id, hex));
    if (conn && o->owner != conn)
        return ct__error(CT_EBUSY, "store %s: object %s is being written by another process",
                         s->name, ct_object_id_hex(id, hex));
    *size = o->size;
    s->writing--;
    s->last_op_ns = ct__now_ns();
    if (seal) {
        o->sealed = 1;
        o->owner = 0;
        lru_push(s, o);
    } else {
        index_remove(s, o);
        free_obj(s, o);
    }
    return 0;
}

/* Pins a sealed object. *in_mem tells whether it is in the arena (else: read its file). */
static int do_pin(ct_store *s, const ct_object_id *id, obj **out)
{
    char hex[2 * CT_OBJECT_ID_LEN + 1];
    obj *o = find(s, id);
    if (!o || !o->sealed)
        return ct__error(CT_ENOENT, "store %s: no sealed object %s", s->name,
                         ct_object_id_hex(id, hex));
    if (!o->in_mem && !o->pins) {
        int rc = restore(s, o);
        if (rc && rc != CT_ENOSPC)
            return rc;
        /* CT_ENOSPC: no room now; the reader maps the spill file instead. */
    }
    o->pins++;
    if (o->in_mem)
        lru_push(s, o);
    s->last_op_ns = ct__now_ns();
    *out = o;
    return 0;
}

static int do_delete(ct_store *s, const ct_object_id *id, uint64_t *size)
{
    char hex[2 * CT_OBJECT_ID_LEN + 1];
    obj *o = find(s, id);
    if (!o)
        return ct__error(CT_ENOENT, "store %s: no object %s to delete", s->name,
                         ct_object_id_hex(id, hex));
    /* Its writer still holds a pointer into the arena: only the writer may drop it (abort). */
    if (!o->sealed)
        return ct__error(CT_EBUSY, "store %s: object %s is being written (not sealed)", s->name,
                         ct_object_id_hex(id, hex));
    *size = o->size;
    index_remove(s, o);
    lru_remove(o);
    o->deleted = 1;
    if (!o->pins)
        free_obj(s, o);
    return 0;
}

/* ---- public local API ---- */

int ct_store_create(ct_store *s, const ct_object_id *id, uint64_t size, void **data)
{
    if (!s || !id || !data)
        return ct__error(CT_EINVAL, "ct_store_create: NULL argument");
    obj *o;
    pthread_mutex_lock(&s->mu);
    int rc = do_create(s, id, size, 0, &o);
    if (!rc)
        *data = s->arena + o->off;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ct_store_seal(ct_store *s, const ct_object_id *id)
{
    if (!s || !id)
        return ct__error(CT_EINVAL, "ct_store_seal: NULL argument");
    uint64_t size = 0;
    pthread_mutex_lock(&s->mu);
    int rc = do_seal_abort(s, id, 1, 0, &size);
    pthread_mutex_unlock(&s->mu);
    if (!rc)
        notify(s, CT_STORE_SEALED, id, size);
    return rc;
}

int ct_store_abort(ct_store *s, const ct_object_id *id)
{
    if (!s || !id)
        return ct__error(CT_EINVAL, "ct_store_abort: NULL argument");
    uint64_t size;
    pthread_mutex_lock(&s->mu);
    int rc = do_seal_abort(s, id, 0, 0, &size);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ct_store_put(ct_store *s, const ct_object_id *id, const void *data, uint64_t size)
{
    if (!s || !id || (!data && size))
        return ct__error(CT_EINVAL, "ct_store_put: NULL argument");
    void *p;
    int rc = ct_store_create(s, id, size, &p);
    if (rc)
        return rc;
    if (size)
        memcpy(p, data, size);
    return ct_store_seal(s, id);
}

int ct__map_file(const char *path, uint64_t size, void **map, uint64_t *maplen)
{
    *map = NULL;
    *maplen = 0;
    if (!size)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct__error(CT_EIO, "open %s: %s", path, strerror(errno));
    void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return ct__error(CT_EIO, "mmap %s: %s", path, strerror(e));
    *map = p;
    *maplen = size;
    return 0;
}

int ct_store_get(ct_store *s, const ct_object_id *id, ct_store_view *view)
{
    if (!s || !id || !view)
        return ct__error(CT_EINVAL, "ct_store_get: NULL argument");
    memset(view, 0, sizeof *view);
    obj *o;
    pthread_mutex_lock(&s->mu);
    int rc = do_pin(s, id, &o);
    if (rc)
        goto out;
    view->id = *id;
    view->size = o->size;
    view->obj_ = o;
    if (o->in_mem) {
        view->data = s->arena + o->off;
    } else {
        char path[4200];
        spill_path(s, o, path, sizeof path, 0);
        rc = ct__map_file(path, o->size, &view->map_, &view->maplen_);
        if (rc) {
            unpin(s, o);
            memset(view, 0, sizeof *view);
            goto out;
        }
        view->data = view->map_ ? view->map_ : (const void *)"";
    }
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ct__store_view_file(ct_store *s, const ct_store_view *v, int *fd, uint64_t *off)
{
    if (!s || !v || !v->obj_ || v->map_ || !v->size)
        return CT_EINVAL;
    const unsigned char *p = v->data;
    if (p < s->arena || p + v->size > s->arena + s->cap)
        return CT_EINVAL;
    *fd = s->arena_fd;
    *off = (uint64_t)(p - s->arena);
    return 0;
}

void ct_store_release(ct_store *s, ct_store_view *view)
{
    if (!s || !view || !view->obj_)
        return;
    if (view->map_)
        munmap(view->map_, view->maplen_);
    pthread_mutex_lock(&s->mu);
    unpin(s, view->obj_);
    s->last_op_ns = ct__now_ns();
    pthread_mutex_unlock(&s->mu);
    memset(view, 0, sizeof *view);
}

int ct_store_delete(ct_store *s, const ct_object_id *id)
{
    if (!s || !id)
        return ct__error(CT_EINVAL, "ct_store_delete: NULL argument");
    uint64_t size = 0;
    pthread_mutex_lock(&s->mu);
    int rc = do_delete(s, id, &size);
    pthread_mutex_unlock(&s->mu);
    if (!rc)
        notify(s, CT_STORE_DELETED, id, size);
    return rc;
}

bool ct_store_contains(ct_store *s, const ct_object_id *id)
{
    if (!s || !id)
        return false;
    pthread_mutex_lock(&s->mu);
    obj *o = find(s, id);
    bool r = o && o->sealed;
    pthread_mutex_unlock(&s->mu);
    return r;
}

int ct_store_size(ct_store *s, const ct_object_id *id, uint64_t *size)
{
    char hex[2 * CT_OBJECT_ID_LEN + 1];
    if (!s || !id || !size)
        return ct__error(CT_EINVAL, "ct_store_size: NULL argument");
    pthread_mutex_lock(&s->mu);
    obj *o = find(s, id);
    int rc = o && o->sealed ? 0
                            : ct__error(CT_ENOENT, "store %s: no sealed object %s", s->name,
                                        ct_object_id_hex(id, hex));
    if (!rc)
        *size = o->size;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ct_store_list(ct_store *s, ct_store_entry **out, size_t *n)
{
    if (!s || !out || !n)
        return ct__error(CT_EINVAL, "ct_store_list: NULL argument");
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    size_t k = 0;
    ct_store_entry *e = malloc((s->nobj ? s->nobj : 1) * sizeof *e);
    if (!e) {
        rc = ct__error(CT_ENOMEM, "ct_store_list: out of memory");
        goto out;
    }
    for (size_t i = 0; i < s->nbuckets; i++)
        for (obj *o = s->buckets[i]; o; o = o->hnext)
            if (o->sealed)
                e[k++] = (ct_store_entry){o->id, o->size, !o->in_mem, o->pins};
    *out = e;
    *n = k;
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void ct_store_get_stats(ct_store *s, ct_store_stats *st)
{
    if (!s || !st)
        return;
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->memory_cap = s->cap;
    st->memory_used = s->used;
    st->objects = s->nobj;
    st->spilled = 0;
    st->spilled_bytes = 0;
    for (size_t i = 0; i < s->nbuckets; i++)
        for (obj *o = s->buckets[i]; o; o = o->hnext)
            if (o->sealed && !o->in_mem) {
                st->spilled++;
                st->spilled_bytes += o->size;
            }
    pthread_mutex_unlock(&s->mu);
}

const char *ct_store_name(const ct_store *s)
{
    return s ? s->name : "";
}

/* ---- client thread ---- */

static void conn_close(ct_store *s, size_t i)
{
    conn *c = &s->conns[i];
    pthread_mutex_lock(&s->mu);
    for (size_t k = 0; k < c->npins; k++)
        unpin(s, c->pins[k]);
    /* Discard what this client created and did not seal. */
    for (size_t b = 0; b < s->nbuckets; b++) {
        for (obj *o = s->buckets[b], *nx; o; o = nx) {
            nx = o->hnext;
            if (!o->sealed && o->owner == c->id) {
                s->writing--;
                index_remove(s, o);
                o->deleted = 1;
                if (!o->pins)
                    free_obj(s, o);
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    CT_LOG(CT_LOG_DEBUG, "store", "%s: client %d gone, dropped %zu pins", s->name, c->id, c->npins);
    close(c->fd);
    free(c->pins);
    s->conns[i] = s->conns[--s->nconns];
}

static void handle(ct_store *s, conn *c, const ct__store_req *rq, ct__store_rep *rp)
{
    obj *o = NULL;
    memset(rp, 0, sizeof *rp);
    ct__clear_error();
    switch (rq->op) {
    case CT__STORE_OP_HELLO:
        snprintf(rp->path, sizeof rp->path, "%s", s->shm_name);
        rp->size = s->cap;
        return;
    case CT__STORE_OP_GET:
        if (c->npins == c->cap) {
            size_t nc = c->cap ? 2 * c->cap : 16;
            obj **np = realloc(c->pins, nc * sizeof *np);
            if (!np) {
                rp->status = ct__error(CT_ENOMEM, "store %s: out of memory", s->name);
                break;
            }
            c->pins = np;
            c->cap = nc;
        }
        pthread_mutex_lock(&s->mu);
        rp->status = do_pin(s, &rq->id, &o);
        if (!rp->status) {
            c->pins[c->npins++] = o;
            rp->size = o->size;
            rp->off = o->off;
            if (!o->in_mem) {
                rp->kind = CT__STORE_KIND_FILE;
                spill_path(s, o, rp->path, sizeof rp->path, 0);
            }
        }
        pthread_mutex_unlock(&s->mu);
        break;
    case CT__STORE_OP_RELEASE:
        pthread_mutex_lock(&s->mu);
        for (size_t k = c->npins; k-- > 0;) {
            if (!memcmp(c->pins[k]->id.b, rq->id.b, CT_OBJECT_ID_LEN)) {
                o = c->pins[k];
                c->pins[k] = c->pins[--c->npins];
                unpin(s, o);
                break;
            }
        }
        pthread_mutex_unlock(&s->mu);
        return;
    case CT__STORE_OP_CONTAINS:
        pthread_mutex_lock(&s->mu);
        o = find(s, &rq->id);
        rp->size = o && o->sealed;
        pthread_mutex_unlock(&s->mu);
        break;
    case CT__STORE_OP_CREATE:
        pthread_mutex_lock(&s->mu);
        rp->status = do_create(s, &rq->id, rq->size, c->id, &o);
        if (!rp->status) {
            rp->off = o->off;
            rp->size = o->size;
            snprintf(rp->path, sizeof rp->path, "%s", s->shm_name);
        }
        pthread_mutex_unlock(&s->mu);
        break;
    case CT__STORE_OP_SEAL:
    case CT__STORE_OP_ABORT:
        pthread_mutex_lock(&s->mu);
        rp->status = do_seal_abort(s, &rq->id, rq->op == CT__STORE_OP_SEAL, c->id, &rp->size);
        pthread_mutex_unlock(&s->mu);
        if (!rp->status && rq->op == CT__STORE_OP_SEAL)
            notify(s, CT_STORE_SEALED, &rq->id, rp->size);
        break;
    case CT__STORE_OP_DELETE:
        pthread_mutex_lock(&s->mu);
        rp->status = do_delete(s, &rq->id, &rp->size);
        pthread_mutex_unlock(&s->mu);
        if (!rp->status)
            notify(s, CT_STORE_DELETED, &rq->id, rp->size);
        break;
    default:
        rp->status = ct__error(CT_EPROTO, "store %s: unknown request op %u", s->name, rq->op);
        break;
    }
    if (rp->status)
        snprintf(rp->err, sizeof rp->err, "%s", ct_last_error());
}

static void *client_thread(void *arg)
{
    ct_store *s = arg;
    ct__log_set_who(s->name);
    for (;;) {
        size_t n = s->nconns + 2;
        struct pollfd *p = calloc(n, sizeof *p);
        if (!p) {
            usleep(10000);
            continue;
        }
        p[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        p[1] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < s->nconns; i++)
            p[i + 2] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
        int r = poll(p, n, -1);
        if (r < 0 && errno != EINTR) {
            free(p);
            break;
        }
        if (p[0].revents) {
            free(p);
            break;
        }
        /* Walk backwards: conn_close moves the last connection into the closed slot. */
        for (size_t i = n - 2; i-- > 0;) {
            if (!p[i + 2].revents)
                continue;
            ct__store_req rq;
            ct__store_rep rp;
            ssize_t got = recv(s->conns[i].fd, &rq, sizeof rq, 0);
            if (got <= 0) {
                conn_close(s, i);
                continue;
            }
            if (got != sizeof rq) {
                memset(&rp, 0, sizeof rp);
                rp.status = CT_EPROTO;
                snprintf(rp.err, sizeof rp.err, "store %s: request of %zd bytes, want %zu", s->name,
                         got, sizeof rq);
            } else {
                handle(s, &s->conns[i], &rq, &rp);
                if (rq.op == CT__STORE_OP_RELEASE)
                    continue;
            }
            /* A client that does not read its replies is cut off rather than block others. */
            if (send(s->conns[i].fd, &rp, sizeof rp, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof rp)
                conn_close(s, i);
        }
        if (p[1].revents & POLLIN) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            /* Abstract sockets have no file permissions: admit only this user's processes. */
            struct ucred cred;
            socklen_t cl = sizeof cred;
            if (fd >= 0 && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 ||
                            (cred.uid != geteuid() && cred.uid != 0))) {
                CT_LOG(CT_LOG_WARN, "store", "%s: refused a client of another user", s->name);
                close(fd);
                fd = -1;
            }
            if (fd >= 0) {
                conn *nc = realloc(s->conns, (s->nconns + 1) * sizeof *nc);
                if (!nc) {
                    close(fd);
                } else {
                    s->conns = nc;
                    s->conns[s->nconns++] = (conn){.fd = fd, .id = ++s->next_conn_id};
                }
            }
        }
        free(p);
    }
    return NULL;
}

/* ---- lifecycle ---- */

/* Removes the files in a shard's own spill directory (a predecessor's spills are useless: the
 * index that knew them is gone), and the directory itself if rm_dir. */
static int clean_spill_dir(const char *dir, int rm_dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    if (rm_dir)
        rmdir(dir);
    return 0;
}

ct_store *ct_store_new(const ct_store_opts *opts)
{
    if (!opts) {
        ct__error(CT_EINVAL, "ct_store_new: NULL opts");
        return NULL;
    }
    if (ct__store_check_name(opts->name))
        return NULL;
    ct_store *s = calloc(1, sizeof *s);
    if (!s) {
        ct__error(CT_ENOMEM, "ct_store_new: out of memory");
        return NULL;
    }
    s->arena_fd = s->listen_fd = s->wake[0] = s->wake[1] = -1;
    s->arena = MAP_FAILED;
    snprintf(s->name, sizeof s->name, "%s", opts->name);
    ct__store_shm_name(s->shm_name, sizeof s->shm_name, s->name);
    s->cap = opts->memory_cap ? opts->memory_cap : DEFAULT_CAP;
    s->on_event = opts->on_event;
    s->event_arg = opts->event_arg;
    s->cap = (s->cap + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
    s->lru.prev = s->lru.next = &s->lru;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->warm_cv, NULL);
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    s->free_list = calloc(1, sizeof *s->free_list);
    if (!s->buckets || !s->free_list) {
        ct__error(CT_ENOMEM, "ct_store_new: out of memory");
        goto err;
    }
    s->free_list->len = s->cap;
    if (opts->spill_dir && *opts->spill_dir) {
        struct stat sb;
        if (stat(opts->spill_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            ct__error(CT_ENOENT, "store opts.spill_dir '%s': not a directory", opts->spill_dir);
            goto err;
        }
        if (strlen(opts->spill_dir) + strlen(s->name) + 2 * CT_OBJECT_ID_LEN + 16 >=
            sizeof(((ct__store_rep *)0)->path)) {
            ct__error(CT_EINVAL, "store opts.spill_dir '%s': path too long", opts->spill_dir);
            goto err;
        }
        /* Each shard spills into its own subdirectory, so shards may share a spill_dir. */
        if (asprintf(&s->spill_dir, "%s/ct.%s", opts->spill_dir, s->name) < 0)
            s->spill_dir = NULL;
        if (!s->spill_dir) {
            ct__error(CT_ENOMEM, "ct_store_new: out of memory");
            goto err;
        }
    }

    /* The socket name is the liveness lock: bound means a live shard owns the name. */
    struct sockaddr_un sa;
    socklen_t salen = ct__store_sockaddr(&sa, s->name);
    s->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&sa, salen) != 0 ||
        listen(s->listen_fd, 64) != 0) {
        ct__error(errno == EADDRINUSE ? CT_EEXIST : -errno, "store '%s': socket: %s%s", s->name,
                  strerror(errno), errno == EADDRINUSE ? " (a live store has this name)" : "");
        goto err;
    }
    s->bound = 1;
    shm_unlink(s->shm_name); /* left behind by a killed predecessor */
    if (s->spill_dir && (clean_spill_dir(s->spill_dir, 0) != 0 ||
                         (mkdir(s->spill_dir, 0700) != 0 && errno != EEXIST))) {
        ct__error(CT_EIO, "store '%s': spill directory %s: %s", s->name, s->spill_dir,
                  strerror(errno));
        goto err;
    }
    s->arena_fd = shm_open(s->shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (s->arena_fd < 0) {
        ct__error(-errno, "store '%s': shm_open %s: %s", s->name, s->shm_name, strerror(errno));
        goto err;
    }
    if (ftruncate(s->arena_fd, (off_t)s->cap) != 0) {
        ct__error(-errno, "store '%s': ftruncate %s to %llu: %s", s->name, s->shm_name,
                  (unsigned long long)s->cap, strerror(errno));
        goto err;
    }
    s->arena = mmap(NULL, s->cap, PROT_READ | PROT_WRITE, MAP_SHARED, s->arena_fd, 0);
    if (s->arena == MAP_FAILED) {
        ct__error(-errno, "store '%s': mmap %llu bytes: %s", s->name, (unsigned long long)s->cap,
                  strerror(errno));
        goto err;
    }
    if (opts->prefault && populate(s, s->cap) != 0)
        goto err;
    s->ahead = opts->prefault ? 0 : opts->populate_ahead;
    if (s->ahead && pthread_create(&s->warm_th, NULL, warm_thread, s) == 0)
        s->warm_started = 1; /* without it, creates populate for themselves */
    if (pipe2(s->wake, O_CLOEXEC) != 0) {
        ct__error(-errno, "store '%s': pipe: %s", s->name, strerror(errno));
        goto err;
    }
    if (pthread_create(&s->thread, NULL, client_thread, s) != 0) {
        ct__error(CT_ENOMEM, "store '%s': cannot start client thread", s->name);
        goto err;
    }
    s->thread_started = 1;
    CT_LOG(CT_LOG_INFO, "store", "%s: arena %s, cap %llu, spill_dir %s", s->name, s->shm_name,
           (unsigned long long)s->cap, s->spill_dir ? s->spill_dir : "(none)");
    return s;
err:
    ct_store_destroy(&s);
    return NULL;
}

void ct_store_destroy(ct_store **sp)
{
    if (!sp || !*sp)
        return;
    ct_store *s = *sp;
    if (s->warm_started) {
        pthread_mutex_lock(&s->mu);
        s->warm_stop = 1;
        pthread_cond_signal(&s->warm_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->warm_th, NULL);
        s->warm_started = 0;
    }
    if (s->thread_started) {
        char b = 1;
        ssize_t w = write(s->wake[1], &b, 1);
        (void)w;
        pthread_join(s->thread, NULL);
    }
    for (size_t i = 0; i < s->nconns; i++) {
        close(s->conns[i].fd);
        free(s->conns[i].pins);
    }
    free(s->conns);
    if (s->buckets) {
        for (size_t i = 0; i < s->nbuckets; i++) {
            for (obj *o = s->buckets[i], *nx; o; o = nx) {
                nx = o->hnext;
                if (!o->in_mem && o->sealed && s->spill_dir) {
                    char path[4200];
                    spill_path(s, o, path, sizeof path, 0);
                    unlink(path);
                }
                free(o);
            }
        }
        free(s->buckets);
    }
    /* Objects deleted while pinned and never released are leaked with their views. */
    for (blk *b = s->free_list, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    if (s->arena != MAP_FAILED)
        munmap(s->arena, s->cap);
    if (s->arena_fd >= 0) {
        close(s->arena_fd);
        shm_unlink(s->shm_name);
    }
    if (s->spill_dir && s->bound)
        clean_spill_dir(s->spill_dir, 1); /* before the name is released */
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->wake[0] >= 0)
        close(s->wake[0]);
    if (s->wake[1] >= 0)
        close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->warm_cv);
    free(s->spill_dir);
    free(s);
    *sp = NULL;
}

int ct_store_purge(const char *name)
{
    int rc = ct__store_check_name(name);
    if (rc)
        return rc;
    struct sockaddr_un sa;
    socklen_t salen = ct__store_sockaddr(&sa, name);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return ct__error(-errno, "ct_store_purge: socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, salen) != 0) {
        rc = errno == EADDRINUSE ? ct__error(CT_EBUSY, "ct_store_purge: store '%s' is alive", name)
                                 : ct__error(-errno, "ct_store_purge: bind: %s", strerror(errno));
        close(fd);
        return rc;
    }
    char shm[CT_STORE_NAME_MAX + 32];
    ct__store_shm_name(shm, sizeof shm, name);
    if (shm_unlink(shm) == 0)
        CT_LOG(CT_LOG_INFO, "store", "purged %s left by a dead store", shm);
    close(fd);
    return 0;
}
