/* trainer/collective/shm.c — shared-memory transport among the ranks of one node.
 *
 * One POSIX shm segment per (group, node), created by local rank 0 and named through the
 * rendezvous, unlinked once everyone has mapped it. Layout (a slot holds up to 4 MiB, mapped
 * lazily; a round uses 256 KiB .. bytes/128 of it):
 *
 *   [header][ctl 0]...[ctl L-1][pad to 4 KiB][buffer 0: slot 0..L-1][buffer 1: slot 0..L-1]
 *
 * ctl i holds rank i's progress counter `seq` (a futex word), how many ranks sleep on it, its
 * pid, and a `failed` flag. Collectives run in rounds that alternate between the two
 * buffers. Inside a round a rank writes only its own slot, then signals (seq++) and waits for
 * every other local rank's seq to reach its own; a rank's first signal of round r+1 comes after
 * all its reads of round r, so double buffering needs no extra sync. Allreduce of a large
 * buffer: copy in, sync, reduce my 1/L slice of all slots into my slot, sync, copy every
 * slice out. Small messages (<= 16 KiB): copy in, sync, every rank sums all slots itself: one
 * sync, no syscall when the peers are running. Reduce-scatter (ZeRO): copy in, sync, each rank
 * sums only its own chunk (the same sums, in the same order, as the allreduce's); allgatherv:
 * each round every rank copies the next piece of its block in, sync, copies the others' out;
 * gather (hier.c): the same rounds, only local rank 0 copies out.
 *
 * Waiting spins, then yields, then sleeps on the futex with a short timeout; while waiting it
 * checks the deadline, the abort flag, the peer's failed flag and (every 10 ms) whether the
 * peer process still exists (pidfd). Not a general allocator; not used across machines. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "common/common.h"
#include "internal.h"
#include "common/env.h"

#define SHM_MAGIC 0x6374636f6c6c3031ull /* "ctcoll01" */
#define CTL_BYTES 128
#define SMALL_BYTES (16 * 1024)
#define DEFAULT_SLOT (4 * 1024 * 1024) /* slot capacity; mapped lazily */
#define MIN_CHUNK (256 * 1024)         /* cache-friendly rounds for mid-size messages */
#define MAX_ROUNDS 128                 /* big messages: fewer, larger rounds = fewer syncs */

struct hdr {
    uint64_t magic;
    uint32_t nlocal;
    uint32_t pad;
    uint64_t slot_bytes;
    _Atomic uint32_t attached;
};

struct ctl {
    _Atomic uint32_t seq;
    _Atomic uint32_t waiters;
    _Atomic int32_t pid;
    _Atomic uint32_t failed;
};

struct ct__shm {
    char name[96];
    void *base;
    size_t size;
    struct hdr *h;
    char *data;
    size_t slot;
    int n, me;
    uint32_t seq;    /* my signals so far */
    uint32_t round;  /* rounds so far: buffer = round & 1 */
    int *pidfd;      /* [n] -1 for me or when pidfd_open is unavailable */
    int *pid;        /* [n] */
    int64_t spin_ns; /* spin this long before sleeping on the futex */
    int unlinked;
    int64_t next_live_check;
};

static struct ctl *ctl(struct ct__shm *s, int i)
{
    return (struct ctl *)((char *)s->base + CTL_BYTES * (size_t)(i + 1));
}

static char *slot(struct ct__shm *s, uint32_t round, int i)
{
    return s->data + ((size_t)(round & 1) * (size_t)s->n + (size_t)i) * s->slot;
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int peer_dead(struct ct__shm *s, int i)
{
    if (s->pidfd[i] >= 0) {
        struct pollfd p = {.fd = s->pidfd[i], .events = POLLIN};
        return poll(&p, 1, 0) > 0;
    }
    return s->pid[i] > 0 && kill(s->pid[i], 0) < 0 && errno == ESRCH;
}

/* Waits until local rank i's seq reaches target: spins (then spins with sched_yield) for up to
 * spin_ns (the peer is usually running on another core), then sleeps on the peer's futex word in
 * short slices so that an oversubscribed machine runs the peer instead of this spinner. */
static int wait_peer(ct_comm *c, int i, uint32_t target, int64_t deadline)
{
    struct ct__shm *s = c->shm;
    struct ctl *p = ctl(s, i);
    int64_t start = 0;
    for (unsigned spins = 0;; spins++) {
        uint32_t v = atomic_load_explicit(&p->seq, memory_order_acquire);
        if ((int32_t)(v - target) >= 0)
            return 0;
        if (spins & 63) {
            cpu_relax();
            continue;
        }
        int64_t now = ct__now_ns();
        if (!start)
            start = now;
        if (now - start < s->spin_ns) {
            /* after a few microseconds, yield: on a busy machine the peer may be queued
             * behind this process on the same core */
            if (now - start > 5000)
                sched_yield();
            else
                cpu_relax();
            continue;
        }
        int st = ct__comm_aborted(c);
        if (st)
            return ct__error(st, "collective: rank %d: %s while waiting for rank %d", c->rank,
                             st == CT_ECANCELED ? "aborted" : "failed", c->local_ranks[i]);
        if (atomic_load(&p->failed))
            return ct__error(CT_ECONNRESET, "collective: rank %d (pid %d) left group %s",
                             c->local_ranks[i], s->pid[i], c->group);
        if (now >= deadline)
            return ct__error(CT_ETIMEDOUT, "collective: rank %d timed out waiting for rank %d",
                             c->rank, c->local_ranks[i]);
        if (now >= s->next_live_check) {
            s->next_live_check = now + 10 * 1000000;
            if (peer_dead(s, i))
                return ct__error(CT_ECONNRESET, "collective: rank %d (pid %d) died",
                                 c->local_ranks[i], s->pid[i]);
        }
        atomic_fetch_add(&p->waiters, 1);
        v = atomic_load(&p->seq);
        if ((int32_t)(v - target) < 0) {
            struct timespec ts = {0, 5 * 1000000};
            futex(&p->seq, FUTEX_WAIT, v, &ts);
        }
        atomic_fetch_sub(&p->waiters, 1);
    }
}

/* Signals my progress and waits for every other local rank to reach it. */
static int sync_all(ct_comm *c, int64_t deadline)
{
    struct ct__shm *s = c->shm;
    struct ctl *me = ctl(s, s->me);
    uint32_t target = ++s->seq;
    atomic_store(&me->seq, target); /* seq_cst: ordered before the waiters load */
    if (atomic_load(&me->waiters))
        futex(&me->seq, FUTEX_WAKE, INT_MAX, NULL);
    for (int k = 1; k < s->n; k++) {
        int i = (s->me + k) % s->n;
        int rc = wait_peer(c, i, target, deadline);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void ct__shm_mark_failed(ct_comm *c)
{
    if (c->shm && c->shm->base) {
        struct ctl *me = ctl(c->shm, c->shm->me);
        atomic_store(&me->failed, 1);
        futex(&me->seq, FUTEX_WAKE, INT_MAX, NULL);
    }
}

int ct__shm_setup(ct_comm *c, const ct_rendezvous *rdv, int64_t deadline)
{
    int rc = 0, fd = -1;
    char key[512], *name = NULL;
    struct ct__shm *s = calloc(1, sizeof *s);
    if (!s)
        return ct__error(CT_ENOMEM, "collective: shm state");
    c->shm = s;
    s->n = c->local_size;
    s->me = c->local_rank;
    s->pidfd = malloc(sizeof(int) * (size_t)s->n);
    s->pid = calloc((size_t)s->n, sizeof(int));
    if (!s->pidfd || !s->pid)
        return ct__error(CT_ENOMEM, "collective: shm state");
    for (int i = 0; i < s->n; i++)
        s->pidfd[i] = -1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const char *spin = ct__env(CT__ENV_COLL_SHM_SPIN_US);
    s->spin_ns = spin ? atoll(spin) * 1000 : s->n <= ncpu ? 50000 : 2000;
    const char *env = ct__env(CT__ENV_COLL_SHM_SLOT_KB);
    s->slot = env && atoi(env) > 0 ? (size_t)atoi(env) * 1024 : DEFAULT_SLOT;
    size_t data_off = ((size_t)CTL_BYTES * (size_t)(s->n + 1) + 4095) & ~(size_t)4095;
    s->size = data_off + 2 * (size_t)s->n * s->slot;
    snprintf(key, sizeof key, "%s/shm/%d", c->group, c->node);

    if (s->me == 0) {
        snprintf(s->name, sizeof s->name, "/ct-coll-%016llx-%d-%d",
                 (unsigned long long)c->group_hash, c->node, (int)getpid());
        fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            return ct__error(-errno, "collective: shm_open %s: %s", s->name, strerror(errno));
        if (ftruncate(fd, (off_t)s->size) < 0) {
            rc = ct__error(-errno, "collective: ftruncate %s to %zu: %s", s->name, s->size,
                           strerror(errno));
            goto out;
        }
    } else {
        rc = ct__rdv_get_str(rdv, key, &name, deadline);
        if (rc < 0) {
            ct__error(rc, "collective: rank %d waiting for shm key %s: %s", c->rank, key,
                      ct_strerror(rc));
            goto out;
        }
        snprintf(s->name, sizeof s->name, "%s", name);
        s->unlinked = 1; /* only the creator unlinks */
        fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = ct__error(-errno, "collective: shm_open %s: %s", s->name, strerror(errno));
            goto out;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || (size_t)st.st_size != s->size) {
            rc = ct__error(CT_EPROTO, "collective: shm %s has %lld bytes, expected %zu", s->name,
                           (long long)st.st_size, s->size);
            goto out;
        }
    }
    s->base = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        rc = ct__error(-errno, "collective: mmap %s: %s", s->name, strerror(errno));
        goto out;
    }
    s->h = s->base;
    s->data = (char *)s->base + data_off;
    if (s->me == 0) {
        s->h->nlocal = (uint32_t)s->n;
        s->h->slot_bytes = s->slot;
        atomic_store(&s->h->attached, 0);
        __atomic_store_n(&s->h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
        rc = rdv->put(rdv->ctx, key, s->name, strlen(s->name));
        if (rc < 0)
            goto out;
    } else if (__atomic_load_n(&s->h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC ||
               s->h->nlocal != (uint32_t)s->n || s->h->slot_bytes != s->slot) {
        rc = ct__error(CT_EPROTO,
                       "collective: shm %s: bad header (local size or slot size "
                       "differ between ranks?)",
                       s->name);
        goto out;
    }
    atomic_store(&ctl(s, s->me)->pid, (int32_t)getpid());
    atomic_fetch_add(&s->h->attached, 1);
    while (atomic_load(&s->h->attached) < (uint32_t)s->n) {
        if (ct__now_ns() >= deadline) {
            rc = ct__error(CT_ETIMEDOUT,
                           "collective: rank %d: only %u of %d local ranks "
                           "attached to %s",
                           c->rank, atomic_load(&s->h->attached), s->n, s->name);
            goto out;
        }
        usleep(200);
    }
    if (s->me == 0) {
        shm_unlink(s->name);
        s->unlinked = 1;
    }
    for (int i = 0; i < s->n; i++) {
        s->pid[i] = atomic_load(&ctl(s, i)->pid);
        if (i != s->me)
            s->pidfd[i] = (int)syscall(SYS_pidfd_open, s->pid[i], 0);
    }
out:
    if (fd >= 0)
        close(fd);
    free(name);
    return rc;
}

void ct__shm_destroy(ct_comm *c)
{
    struct ct__shm *s = c->shm;
    if (!s)
        return;
    if (s->base) {
        ct__shm_mark_failed(c); /* "gone": a peer still waiting on me fails at once */
        munmap(s->base, s->size);
    }
    if (!s->unlinked && s->name[0])
        shm_unlink(s->name);
    if (s->pidfd)
        for (int i = 0; i < s->n; i++)
            if (s->pidfd[i] >= 0)
                close(s->pidfd[i]);
    free(s->pidfd);
    free(s->pid);
    free(s);
    c->shm = NULL;
}

/* bytes per round for a message of `bytes`: every rank computes the same value. Small
 * rounds keep the slots in cache; on a busy machine each sync may cost a context switch, so
 * big messages use at most MAX_ROUNDS rounds. */
static size_t round_bytes(const struct ct__shm *s, size_t bytes)
{
    static size_t fixed = (size_t)-1;
    if (fixed == (size_t)-1) {
        const char *env = ct__env(CT__ENV_COLL_SHM_CHUNK_KB);
        fixed = env && atoi(env) > 0 ? (size_t)atoi(env) * 1024 : 0;
    }
    size_t r = fixed ? fixed : (bytes / MAX_ROUNDS + 4095) & ~(size_t)4095;
    if (r < MIN_CHUNK)
        r = MIN_CHUNK;
    return r < s->slot ? r : s->slot;
}

/* balanced split of n items among k parts: part i is [lo, lo + len) */
static void split(size_t n, int k, int i, size_t *lo, size_t *len)
{
    size_t base = n / (size_t)k, rem = n % (size_t)k;
    *lo = (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
    *len = base + ((size_t)i < rem);
}

int ct__shm_allreduce(ct_comm *c, float *buf, size_t count, float div, int only_leader,
                      int64_t deadline)
{
    struct ct__shm *s = c->shm;
    const float *srcs[s->n];
    int want = !only_leader || s->me == 0;
    int rc;
    if (count * sizeof(float) <= SMALL_BYTES && count * sizeof(float) <= s->slot) {
        uint32_t r = s->round++;
        memcpy(slot(s, r, s->me), buf, count * sizeof(float));
        if ((rc = sync_all(c, deadline)) < 0)
            return rc;
        if (want) {
            for (int i = 0; i < s->n; i++)
                srcs[i] = (const float *)slot(s, r, i);
            ct__reduce_sum(buf, srcs, s->n, count, div);
        }
        return 0;
    }
    size_t chunk = round_bytes(s, count * sizeof(float)) / sizeof(float);
    for (size_t off = 0; off < count; off += chunk) {
        size_t n = count - off < chunk ? count - off : chunk;
        uint32_t r = s->round++;
        if (ct__comm_aborted(c))
            return ct__error(ct__comm_aborted(c), "collective: aborted");
        memcpy(slot(s, r, s->me), buf + off, n * sizeof(float));
        if ((rc = sync_all(c, deadline)) < 0)
            return rc;
        size_t lo, len;
        split(n, s->n, s->me, &lo, &len);
        for (int i = 0; i < s->n; i++)
            srcs[i] = (const float *)slot(s, r, i) + lo;
        ct__reduce_sum((float *)slot(s, r, s->me) + lo, srcs, s->n, len, div);
        if ((rc = sync_all(c, deadline)) < 0)
            return rc;
        if (want)
            for (int i = 0; i < s->n; i++) {
                split(n, s->n, i, &lo, &len);
                memcpy(buf + off + lo, (const float *)slot(s, r, i) + lo, len * sizeof(float));
            }
    }
    return 0;
}

int ct__shm_broadcast(ct_comm *c, void *buf, size_t bytes, int root_local, int64_t deadline)
{
    struct ct__shm *s = c->shm;
    char *b = buf;
    size_t rb = round_bytes(s, bytes);
    for (size_t off = 0; off < bytes; off += rb) {
        size_t n = bytes - off < rb ? bytes - off : rb;
        uint32_t r = s->round++;
        if (s->me == root_local)
            memcpy(slot(s, r, s->me), b + off, n);
        int rc = sync_all(c, deadline);
        if (rc < 0)
            return rc;
        if (s->me != root_local)
            memcpy(b + off, slot(s, r, root_local), n);
    }
    return 0;
}

int ct__shm_allgather(ct_comm *c, const void *send, void *recv, size_t bytes, int64_t deadline)
{
    struct ct__shm *s = c->shm;
    const char *in = send;
    char *outp = recv;
    size_t rb = round_bytes(s, bytes);
    for (size_t off = 0; off < bytes; off += rb) {
        size_t n = bytes - off < rb ? bytes - off : rb;
        uint32_t r = s->round++;
        memcpy(slot(s, r, s->me), in + off, n);
        int rc = sync_all(c, deadline);
        if (rc < 0)
            return rc;
        for (int i = 0; i < s->n; i++)
            memcpy(outp + (size_t)c->local_ranks[i] * bytes + off, slot(s, r, i), n);
    }
    return 0;
}

int ct__shm_gather(ct_comm *c, const void *send, void *recv, size_t bytes, bool by_rank,
                   int64_t deadline)
{
    struct ct__shm *s = c->shm;
    const char *in = send;
    char *outp = recv;
    size_t rb = round_bytes(s, bytes);
    if (s->me == 0)
        memcpy(outp + (by_rank ? (size_t)c->rank * bytes : 0), in, bytes);
    /* a rank writes this round's buffer again two rounds on, after its next sync: that waits
     * for local rank 0, which reads this round before it syncs again */
    for (size_t off = 0; off < bytes; off += rb) {
        size_t n = bytes - off < rb ? bytes - off : rb;
        uint32_t r = s->round++;
        if (s->me != 0)
            memcpy(slot(s, r, s->me), in + off, n);
        int rc = sync_all(c, deadline);
        if (rc < 0)
            return rc;
        if (s->me == 0)
            for (int i = 1; i < s->n; i++)
                memcpy(outp + (size_t)(by_rank ? c->local_ranks[i] : i) * bytes + off,
                       slot(s, r, i), n);
    }
    return 0;
}

int ct__shm_barrier(ct_comm *c, int64_t deadline)
{
    c->shm->round++;
    return sync_all(c, deadline);
}

int ct__shm_reduce_scatter(ct_comm *c, float *buf, size_t count, float div, size_t lo, size_t len,
                           int64_t deadline)
{
    struct ct__shm *s = c->shm;
    const float *srcs[s->n];
    size_t chunk = count * sizeof(float) <= s->slot
                       ? count
                       : round_bytes(s, count * sizeof(float)) / sizeof(float);
    /* one sync per round: a rank's next write to this round's buffer (two rounds on) comes
     * after its next sync, which waits for every peer's reads of this round */
    for (size_t off = 0; off < count; off += chunk) {
        size_t n = count - off < chunk ? count - off : chunk;
        uint32_t r = s->round++;
        if (ct__comm_aborted(c))
            return ct__error(ct__comm_aborted(c), "collective: aborted");
        memcpy(slot(s, r, s->me), buf + off, n * sizeof(float));
        int rc = sync_all(c, deadline);
        if (rc < 0)
            return rc;
        size_t a = lo > off ? lo : off, b = lo + len < off + n ? lo + len : off + n;
        if (a >= b)
            continue;
        for (int i = 0; i < s->n; i++)
            srcs[i] = (const float *)slot(s, r, i) + (a - off);
        ct__reduce_sum(buf + a, srcs, s->n, b - a, div);
    }
    return 0;
}

int ct__shm_allgatherv(ct_comm *c, void *buf, const size_t *off, const size_t *len,
                       int64_t deadline)
{
    struct ct__shm *s = c->shm;
    char *b = buf;
    size_t most = 0;
    for (int i = 0; i < s->n; i++)
        if (len[c->local_ranks[i]] > most)
            most = len[c->local_ranks[i]];
    size_t rb = round_bytes(s, most);
    size_t my_off = off[c->rank], my_len = len[c->rank];
    for (size_t pos = 0; pos < most; pos += rb) {
        uint32_t r = s->round++;
        if (pos < my_len)
            memcpy(slot(s, r, s->me), b + my_off + pos, my_len - pos < rb ? my_len - pos : rb);
        int rc = sync_all(c, deadline);
        if (rc < 0)
            return rc;
        for (int i = 0; i < s->n; i++) {
            int q = c->local_ranks[i];
            if (i != s->me && pos < len[q])
                memcpy(b + off[q] + pos, slot(s, r, i), len[q] - pos < rb ? len[q] - pos : rb);
        }
    }
    return 0;
}
