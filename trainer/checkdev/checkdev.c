/* trainer/checkdev/checkdev.c — the checking device (CT_CHECKDEV): a backend that runs on every
 * machine and makes code that would be wrong on a GPU fail here, with the CPU's kernels.
 *
 * - Memory the host cannot dereference: alloc returns 64-byte aligned host memory with bit 63
 *   set, a non-canonical x86-64 address (any host load or store faults with SIGSEGV; bit 63
 *   also survives Intel LAM, which masks bits 62:48). Only the worker threads clear it.
 * - Streams that run late: each stream is a FIFO of tasks run by a worker thread of its own,
 *   which sleeps CT_CHECKDEV_DELAY_US (default 200 us) before each task. A kernel entry copies
 *   its arguments into a task and returns at once, so a host or another stream that reads a
 *   result without waiting finds the old bytes. A task's failure is kept on its stream (the
 *   first one) and returned by the next synchronize / download / event_sync, as CUDA reports
 *   asynchronous errors.
 * - Real events: event_record queues a marker; stream_wait queues a task that blocks until the
 *   marker recorded last before it has run; event_sync blocks the host likewise.
 *
 * Each task calls the same entry of the CPU's table (ct__backend_cpu) on the untagged pointers,
 * with the OpenMP thread count of the thread that queued it, so results are the CPU's bit for
 * bit. Kernels and copy go to the calling thread's stream (checkdev.h; the compute stream
 * unless set); upload, free and download to the compute stream. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "ct/error.h"
#include "trainer/backend/table.h"
#include "trainer/backend/lowp.h"
#include "trainer/cpu/cpu.h"
#include "trainer/checkdev/checkdev.h"
#include "common/env.h"

/* ---- tagged pointers ---- */

/* bit 63: not the host's; bits 57:56: the index of the device (checkdev:N) the memory is of */
#define TAG ((uintptr_t)1 << 63)
#define DEV_SHIFT 56
#define DEV_MASK ((uintptr_t)(CT_MAX_DEVICE_INDEX - 1) << DEV_SHIFT)

static void *untag(const void *p)
{
    return (void *)((uintptr_t)p & ~(TAG | DEV_MASK));
}

/* the device index of tagged p; -1 for a host pointer (or NULL) */
static int dev_of(const void *p)
{
    return (uintptr_t)p & TAG ? (int)(((uintptr_t)p & DEV_MASK) >> DEV_SHIFT) : -1;
}

/* ---- tasks, streams, events ---- */

typedef struct cd_stream cd_stream;
typedef struct cd_event cd_event;

/* One queued call: the entry's arguments by value. The pointers stay tagged until the worker
 * runs the task; F(k) is pointer k then, as the float * the CPU kernels take. */
typedef struct task task;
struct task {
    task *next;
    int (*run)(task *t, cd_stream *s);
    const char *op;    /* the entry's name, for the error message */
    const void *p[10]; /* device pointers (upload: p[1] is the private host copy) */
    int64_t i[5];      /* sizes */
    float f[2];
    uint64_t u[2];
    int k[4]; /* algorithms, flags */
    union {
        ct__conv_p conv;
        ct__bn_p bn;
        ct__pool_p pool;
        ct__loss_p loss;
        ct__strided_p strided;
        ct__attn_p attn;
        ct__sgd_h sgd;
        ct__adam_h adam;
    } d;
    cd_event *ev; /* markers and waits: the event (the task holds a reference) */
    uint64_t seq; /* its record the marker completes / the wait waits for */
    int nthreads; /* OpenMP threads of the thread that queued the task */
    /* a copy from another device (peer_copy): p[1] is of device src_dev, whose compute stream
     * had need tasks queued when the copy was; the copy may run only after them (run_peer) */
    bool peer;
    int src_dev;
    uint64_t need;
    uint64_t pos; /* its place on its stream: the stream's queued count with it */
};
#define F(k) ((float *)t->p[k])

struct cd_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a task queued or finished, or quit */
    task *head, *tail;     /* head is the running task until it is done */
    uint64_t queued, done; /* tasks queued and finished so far */
    bool started, quit;
    int err; /* the first failure not yet reported, and its message */
    char msg[512];
    cd_stream *next; /* the list of live streams, drained at exit */
    int dev;         /* the device index (checkdev:dev) the stream belongs to */
    /* known[d]: how many tasks of device d's compute stream are done before this stream's
     * next task, by the waits it ran (run_wait); the worker's own, no lock */
    uint64_t known[CT_MAX_DEVICE_INDEX];
};

/* recorded: records made; completed: the highest whose marker ran. An event waited for is
 * complete when completed reaches the record made last before the wait. err/msg: the stream's
 * pending failure when the marker ran, for event_sync (the failure stays on the stream until a
 * synchronize or download there takes it, so both report it). */
struct cd_event {
    int refs; /* the host's and each queued task's naming it */
    uint64_t recorded, completed;
    /* the last marker run: on the compute stream of done_dev (-1: another stream), after
     * done_pos of its tasks */
    int done_dev;
    uint64_t done_pos;
    int err;
    char msg[512];
};
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;

/* one compute stream per device index, all on the list of live streams */
#define COMPUTE(i)                                                                                 \
    {                                                                                              \
        .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .dev = i,                 \
        .next = i + 1 < CT_MAX_DEVICE_INDEX ? &compute[i + 1] : NULL                               \
    }
static cd_stream compute[CT_MAX_DEVICE_INDEX] = {COMPUTE(0), COMPUTE(1), COMPUTE(2), COMPUTE(3)};
_Static_assert(CT_MAX_DEVICE_INDEX == 4, "one COMPUTE(i) per device index");
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static cd_stream *streams = &compute[0];
static _Thread_local cd_stream *current; /* ct__checkdev_set_stream's; NULL: compute */
/* host_known[d]: tasks of device d's compute stream the host has seen done (synchronize,
 * download): work queued after that is ordered after them */
static pthread_mutex_t known_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t host_known[CT_MAX_DEVICE_INDEX];
/* queued_here[d]: the place of the last task this thread queued on device d's compute stream:
 * what a peer copy this thread queues next must be ordered after */
static _Thread_local uint64_t queued_here[CT_MAX_DEVICE_INDEX];

static pthread_once_t once = PTHREAD_ONCE_INIT;
static long delay_us = 200;
static pid_t owner; /* the process whose workers run the queues */

/* A stream argument (NULL: device dev's compute stream). */
static cd_stream *stream_arg(void *s, int dev)
{
    return s ? (cd_stream *)s : &compute[dev];
}

void *ct__checkdev_set_stream(void *stream)
{
    cd_stream *prev = current;
    current = stream;
    return prev;
}

/* Drops a reference to an event: the host's (event_free) or a queued task's. */
static void cd_event_free(void *ev)
{
    cd_event *e = ev;
    if (!e)
        return;
    pthread_mutex_lock(&ev_mu);
    bool last = --e->refs == 0;
    pthread_mutex_unlock(&ev_mu);
    if (last)
        free(e);
}

/* Waits until s has finished the tasks queued before the call. Caller holds s->mu. */
static void drain_locked(cd_stream *s)
{
    uint64_t target = s->queued;
    while (s->done < target)
        pthread_cond_wait(&s->cv, &s->mu);
}

/* At exit: every live stream's queued work (frees included) is done before the process goes;
 * the workers are detached and end with it. A forked child has no workers: it does not wait. */
static void drain_all(void)
{
    if (getpid() != owner)
        return;
    pthread_mutex_lock(&streams_mu);
    for (cd_stream *s = streams; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        drain_locked(s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&streams_mu);
}

static void init_once(void)
{
    const char *e = ct__env(CT__ENV_CHECKDEV_DELAY_US);
    if (e && *e)
        delay_us = strtol(e, NULL, 10);
    owner = getpid();
    atexit(drain_all);
}

static void stream_destroy(cd_stream *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static void *worker(void *arg)
{
    cd_stream *s = arg;
    int nthreads = ct__cpu_threads();
    struct timespec delay = {delay_us / 1000000, delay_us % 1000000 * 1000};
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->quit)
            pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head)
            break;
        task *t = s->head;
        pthread_mutex_unlock(&s->mu);
        if (delay_us > 0)
            nanosleep(&delay, NULL);
        for (size_t k = 0; k < CT_ARRAY_LEN(t->p); k++)
            t->p[k] = untag(t->p[k]);
        if (t->nthreads != nthreads)
            ct__cpu_set_threads(nthreads = t->nthreads);
        int rc = t->run(t, s);
        cd_event_free(t->ev);
        pthread_mutex_lock(&s->mu);
        if (rc && !s->err) {
            s->err = rc;
            snprintf(s->msg, sizeof s->msg, "checkdev %s (queued earlier): %s", t->op,
                     ct_last_error());
        }
        s->head = t->next;
        if (!s->head)
            s->tail = NULL;
        s->done++;
        pthread_cond_broadcast(&s->cv);
        free(t);
    }
    pthread_mutex_unlock(&s->mu);
    stream_destroy(s); /* stream_free asked for quit and left the rest to its worker */
    return NULL;
}

/* The device of a task's device pointers (p[1] of a peer copy is another's): the first one's;
 * -2 when they are of two devices (pair: those two); -1 when there are none. */
static int task_dev(const task *t, bool peer, int pair[2])
{
    int dev = -1;
    for (size_t k = 0; k < CT_ARRAY_LEN(t->p); k++) {
        int d = peer && k == 1 ? -1 : dev_of(t->p[k]);
        if (d >= 0 && dev >= 0 && d != dev) {
            pair[0] = dev;
            pair[1] = d;
            return -2;
        }
        if (d >= 0)
            dev = d;
    }
    return dev;
}

/* Queues a copy of *tmpl on s, starting s's worker at the first task. s NULL: the stream of the
 * calling thread (ct__checkdev_set_stream) when it is of the task's device, else that device's
 * compute stream. A task whose memory is of two devices, or of another device than s, is
 * refused here: the caller missed a copy. */
static int submit(cd_stream *s, const task *tmpl, const char *op)
{
    pthread_once(&once, init_once);
    int pair[2], dev = task_dev(tmpl, tmpl->peer, pair);
    if (dev == -2)
        return ct__error(CT_EINVAL,
                         "checkdev %s: memory of checkdev:%d and of checkdev:%d in one "
                         "call (a tensor not copied to the device it is used on)",
                         op, pair[0], pair[1]);
    if (!s)
        s = current && (dev < 0 || current->dev == dev) ? current : &compute[dev < 0 ? 0 : dev];
    if (dev >= 0 && dev != s->dev)
        return ct__error(CT_EINVAL,
                         "checkdev:%d %s: memory of checkdev:%d (a tensor not copied "
                         "to the device it is used on)",
                         s->dev, op, dev);
    task *t = malloc(sizeof *t);
    if (!t)
        return ct__error(CT_ENOMEM, "checkdev %s: out of memory", op);
    *t = *tmpl;
    t->next = NULL;
    t->op = op;
    t->nthreads = ct__cpu_threads();
    pthread_mutex_lock(&s->mu);
    if (!s->started) {
        pthread_t th;
        int e = pthread_create(&th, NULL, worker, s);
        if (e) {
            pthread_mutex_unlock(&s->mu);
            free(t);
            return ct__error(CT_ENOMEM, "checkdev %s: cannot start a stream's worker: %s", op,
                             strerror(e));
        }
        pthread_detach(th);
        s->started = true;
    }
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    t->pos = ++s->queued;
    if (s == &compute[s->dev])
        queued_here[s->dev] = t->pos;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* A failure taken off a stream or event (each is reported once), re-raised with its message. */
static int report(int err, const char *msg, const char *what)
{
    return err ? ct__error(err, "%s (reported by %s)", msg, what) : 0;
}

/* The host has seen device dev's compute stream do its first pos tasks. */
static void host_learns(int dev, uint64_t pos)
{
    pthread_mutex_lock(&known_mu);
    if (host_known[dev] < pos)
        host_known[dev] = pos;
    pthread_mutex_unlock(&known_mu);
}

static int sync_stream(cd_stream *s, const char *what)
{
    char msg[sizeof s->msg];
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->queued;
    drain_locked(s);
    if (s == &compute[s->dev])
        host_learns(s->dev, target);
    int err = s->err;
    memcpy(msg, s->msg, sizeof msg);
    s->err = 0;
    pthread_mutex_unlock(&s->mu);
    return report(err, msg, what);
}

/* ---- memory ---- */

static int alloc_on(int dev, void **p, size_t bytes)
{
    size_t sz = bytes ? (bytes + 63) / 64 * 64 : 64;
    void *m = sz >= bytes ? aligned_alloc(64, sz) : NULL;
    if (!m)
        return ct__error(CT_ENOMEM, "checkdev alloc: out of memory (%zu bytes)", bytes);
    *p = (void *)((uintptr_t)m | TAG | (uintptr_t)dev << DEV_SHIFT);
    return 0;
}

static int run_free(task *t, cd_stream *s)
{
    free((void *)t->p[0]);
    return 0;
}

/* Stream-ordered: work queued before the free still sees the memory. */
static void cd_free(void *p)
{
    if (!p)
        return;
    cd_stream *s = &compute[dev_of(p) < 0 ? 0 : dev_of(p)];
    if (submit(s, &(task){.run = run_free, .p = {p}}, "free") < 0) {
        pthread_mutex_lock(&s->mu); /* out of memory: free it now, after the queue */
        drain_locked(s);
        pthread_mutex_unlock(&s->mu);
        free(untag(p));
    }
}

static int run_upload(task *t, cd_stream *s)
{
    memcpy(F(0), t->p[1], (size_t)t->i[0]);
    free((void *)t->p[1]);
    return 0;
}

static int cd_upload(void *dst, const void *host_src, size_t bytes)
{
    if (!bytes)
        return 0;
    void *copy = malloc(bytes);
    if (!copy)
        return ct__error(CT_ENOMEM, "checkdev upload: out of memory (%zu bytes)", bytes);
    memcpy(copy, host_src, bytes);
    int rc =
        submit(NULL, &(task){.run = run_upload, .p = {dst, copy}, .i = {(int64_t)bytes}}, "upload");
    if (rc < 0)
        free(copy);
    return rc;
}

static int cd_download(void *host_dst, const void *src, size_t bytes)
{
    int rc = sync_stream(&compute[dev_of(src) < 0 ? 0 : dev_of(src)], "download");
    if (rc < 0)
        return rc;
    if (bytes)
        memcpy(host_dst, untag(src), bytes);
    return 0;
}

static int run_copy(task *t, cd_stream *s)
{
    memcpy(F(0), t->p[1], (size_t)t->i[0]);
    return 0;
}

static int cd_copy(void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    return submit(NULL, &(task){.run = run_copy, .p = {dst, src}, .i = {(int64_t)bytes}}, "copy");
}

/* A peer copy runs only when the tasks the calling thread had queued on its source's compute
 * stream before it are known done on its own stream (by an event of that stream it waited for)
 * or were seen done by the host before it was queued; else it fails, as reading the source then
 * is a race. (Work other threads queue there is not ordered with the copy by this thread's
 * program either way, so it is not counted.) */
static int run_peer(task *t, cd_stream *s)
{
    if (s->known[t->src_dev] < t->need)
        return ct__error(
            CT_EINVAL,
            "peer_copy from checkdev:%d to checkdev:%d: the work queued on checkdev:%d "
            "before the copy (to task %llu) is not known done, only to task %llu "
            "(no event wait between the devices' streams)",
            t->src_dev, s->dev, t->src_dev, (unsigned long long)t->need,
            (unsigned long long)s->known[t->src_dev]);
    memcpy(F(0), t->p[1], (size_t)t->i[0]);
    return 0;
}

static int cd_peer_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    int dev = dev_of(dst), src_dev = dev_of(src);
    if (dev < 0 || src_dev < 0 || dev == src_dev)
        return ct__error(CT_EINVAL,
                         "checkdev peer_copy: needs memory of two checking devices "
                         "(checkdev:%d to checkdev:%d)",
                         dev, src_dev);
    if (!bytes)
        return 0;
    uint64_t need = queued_here[src_dev];
    pthread_mutex_lock(&known_mu);
    if (host_known[src_dev] >= need)
        need = 0;
    pthread_mutex_unlock(&known_mu);
    return submit(stream_arg(stream, dev),
                  &(task){.run = run_peer,
                          .p = {dst, src},
                          .i = {(int64_t)bytes},
                          .peer = true,
                          .src_dev = src_dev,
                          .need = need},
                  "peer_copy");
}

/* Queued on stream, waiting for nothing else: run_copy with the host side untagged already
 * (untag leaves a host pointer as it is). The host bytes are read or written when the task
 * runs, so a caller that reuses them before synchronizing the stream races it. */
static int cd_upload_async(void *dst, const void *host_src, size_t bytes, void *stream)
{
    if (!bytes)
        return 0;
    return submit(stream_arg(stream, dev_of(dst) < 0 ? 0 : dev_of(dst)),
                  &(task){.run = run_copy, .p = {dst, host_src}, .i = {(int64_t)bytes}},
                  "upload_async");
}

static int cd_download_async(void *host_dst, const void *src, size_t bytes, void *stream)
{
    if (!bytes)
        return 0;
    return submit(stream_arg(stream, dev_of(src) < 0 ? 0 : dev_of(src)),
                  &(task){.run = run_copy, .p = {host_dst, src}, .i = {(int64_t)bytes}},
                  "download_async");
}

static int cd_host_alloc(void **p, size_t bytes)
{
    if (!(*p = malloc(bytes ? bytes : 1)))
        return ct__error(CT_ENOMEM, "checkdev host_alloc: out of memory (%zu bytes)", bytes);
    return 0;
}

static int run_zero(task *t, cd_stream *s)
{
    (void)s;
    memset(untag(t->p[0]), 0, (size_t)t->i[0]);
    return 0;
}

static int cd_zero(void *p, size_t bytes)
{
    if (!bytes)
        return 0;
    return submit(NULL, &(task){.run = run_zero, .p = {p}, .i = {(int64_t)bytes}}, "zero");
}

/* ---- streams and events ---- */

static int stream_new_on(int dev, void **stream)
{
    cd_stream *s = calloc(1, sizeof *s);
    if (!s)
        return ct__error(CT_ENOMEM, "checkdev stream_new: out of memory");
    s->dev = dev;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_lock(&streams_mu);
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&streams_mu);
    *stream = s;
    return 0;
}

/* Its queued work still runs; the worker frees the stream after the last task. */
static void cd_stream_free(void *stream)
{
    cd_stream *s = stream;
    if (!s || s == &compute[s->dev])
        return;
    pthread_mutex_lock(&streams_mu);
    for (cd_stream **pp = &streams; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&streams_mu);
    if (current == s)
        current = NULL;
    pthread_mutex_lock(&s->mu);
    bool started = s->started;
    s->quit = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (!started)
        stream_destroy(s);
}

static int synchronize_on(int dev, void *stream)
{
    return sync_stream(stream_arg(stream, dev), "synchronize");
}

/* events belong to no device until recorded (done_dev) */
static int event_new_on(int dev, void **ev)
{
    (void)dev;
    cd_event *e = calloc(1, sizeof *e);
    if (!e)
        return ct__error(CT_ENOMEM, "checkdev event_new: out of memory");
    e->refs = 1;
    e->done_dev = -1;
    *ev = e;
    return 0;
}

/* Record seq of e is complete, with s's pending failure (s NULL: none), at s's task pos (0:
 * none ran). */
static void mark(cd_event *e, uint64_t seq, cd_stream *s, uint64_t pos)
{
    if (s)
        pthread_mutex_lock(&s->mu);
    pthread_mutex_lock(&ev_mu);
    if (s && s->err && !e->err) {
        e->err = s->err;
        memcpy(e->msg, s->msg, sizeof e->msg);
    }
    if (e->completed < seq)
        e->completed = seq;
    if (pos) {
        e->done_dev = s == &compute[s->dev] ? s->dev : -1;
        e->done_pos = pos;
    }
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mu);
    if (s)
        pthread_mutex_unlock(&s->mu);
}

static int run_mark(task *t, cd_stream *s)
{
    mark(t->ev, t->seq, s, t->pos);
    return 0;
}

static int event_record_on(int dev, void *ev, void *stream)
{
    cd_event *e = ev;
    pthread_mutex_lock(&ev_mu);
    uint64_t seq = ++e->recorded;
    e->refs++;
    pthread_mutex_unlock(&ev_mu);
    int rc = submit(stream_arg(stream, dev), &(task){.run = run_mark, .ev = e, .seq = seq},
                    "event_record");
    if (rc < 0) { /* never to be marked: complete, so no one waits forever */
        mark(e, seq, NULL, 0);
        cd_event_free(e);
    }
    return rc;
}

static void wait_event(cd_event *e, uint64_t seq)
{
    pthread_mutex_lock(&ev_mu);
    while (e->completed < seq)
        pthread_cond_wait(&ev_cv, &ev_mu);
    pthread_mutex_unlock(&ev_mu);
}

/* s learns what the event's marker's stream had done (a compute stream's count) */
static int run_wait(task *t, cd_stream *s)
{
    cd_event *e = t->ev;
    wait_event(e, t->seq);
    pthread_mutex_lock(&ev_mu);
    if (e->done_dev >= 0 && s->known[e->done_dev] < e->done_pos)
        s->known[e->done_dev] = e->done_pos;
    pthread_mutex_unlock(&ev_mu);
    return 0;
}

/* The stream's later tasks wait for the record made last before this call (none: no wait). */
static int stream_wait_on(int dev, void *stream, void *ev)
{
    cd_event *e = ev;
    pthread_mutex_lock(&ev_mu);
    uint64_t seq = e->recorded;
    if (seq)
        e->refs++;
    pthread_mutex_unlock(&ev_mu);
    if (!seq)
        return 0;
    int rc = submit(stream_arg(stream, dev), &(task){.run = run_wait, .ev = e, .seq = seq},
                    "stream_wait");
    if (rc < 0)
        cd_event_free(e);
    return rc;
}

static int cd_event_sync(void *ev)
{
    cd_event *e = ev;
    char msg[sizeof e->msg];
    pthread_mutex_lock(&ev_mu);
    uint64_t seq = e->recorded;
    pthread_mutex_unlock(&ev_mu);
    wait_event(e, seq);
    pthread_mutex_lock(&ev_mu);
    if (e->done_dev >= 0)
        host_learns(e->done_dev, e->done_pos);
    int err = e->err;
    memcpy(msg, e->msg, sizeof msg);
    e->err = 0;
    pthread_mutex_unlock(&ev_mu);
    return report(err, msg, "event_sync");
}

/* a host function: the task's u[0], u[1] are fn and arg */
static int run_host_fn(task *t, cd_stream *s)
{
    (void)s;
    void (*fn)(void *) = (void (*)(void *))(uintptr_t)t->u[0];
    fn((void *)(uintptr_t)t->u[1]);
    return 0;
}

static int cd_host_fn(void *stream, void (*fn)(void *arg), void *arg)
{
    if (!stream || !fn)
        return ct__error(CT_EINVAL, "checkdev host_fn: needs a stream and a function");
    return submit(stream, &(task){.run = run_host_fn, .u = {(uintptr_t)fn, (uintptr_t)arg}},
                  "host_fn");
}

/* ---- kernels ---- */

/* KERNEL(name, (params), (task fields), (args)) defines the entry cd_<name>(params), which
 * queues a task with those fields on the calling thread's stream and returns, and run_<name>,
 * which calls the CPU table's entry of that name with args (F(k): pointer k, untagged) when the
 * task runs. The CPU's failures become the stream's (a kernel the CPU lacks: CT_ENOSYS). */
#define FIELDS(...) __VA_ARGS__
#define KERNEL(name, params, fields, args)                                                         \
    static int run_##name(task *t, cd_stream *s)                                                   \
    {                                                                                              \
        return CT__BK_CALL(&ct__backend_cpu, name, FIELDS args);                                   \
    }                                                                                              \
    static int cd_##name params                                                                    \
    {                                                                                              \
        return submit(NULL, &(task){.run = run_##name, FIELDS fields}, #name);                     \
    }

/* layouts: plain only, as a GPU (blocked_fmt says none); a plain reorder is a copy */
static int cd_blocked_fmt(void)
{
    return CT__FMT_PLAIN;
}

/* workspace sizes: the CPU's, at once */
static size_t cd_bn_ws_bytes(const ct__bn_p *p)
{
    return ct__backend_cpu.bn_ws_bytes ? ct__backend_cpu.bn_ws_bytes(p) : 0;
}

static size_t cd_pool_ws_bytes(const ct__pool_p *p)
{
    return ct__backend_cpu.pool_ws_bytes ? ct__backend_cpu.pool_ws_bytes(p) : 0;
}

KERNEL(reorder,
       (int64_t n, int64_t c, int64_t h, int64_t w, const float *src, int sfmt, float *dst,
        int dfmt),
       (.i = {n, c, h, w}, .p = {src, dst}, .k = {sfmt, dfmt}),
       (t->i[0], t->i[1], t->i[2], t->i[3], F(0), t->k[0], F(1), t->k[1]))

/* QUEUE(name, (params), (task fields)): cd_<name> only, for a run_<name> written out. */
#define QUEUE(name, params, fields)                                                                \
    static int cd_##name params                                                                    \
    {                                                                                              \
        return submit(NULL, &(task){.run = run_##name, FIELDS fields}, #name);                     \
    }

/* Autocast reference (trainer/backend/lowp.h): an op in CT_BF16 / CT_F16 rounds its two
 * operands to that type (round-to-nearest-even) into private host copies and runs the CPU's
 * f32 kernel on them, so products of rounded values accumulate in f32 and the output is f32:
 * the arithmetic of a GPU's bf16 GEMM with f32 accumulation, on every machine. */
static float *lp_copy(int dt, const float *x, int64_t n)
{
    float *c = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (c)
        ct__round_lp(dt, n, x, c);
    return c;
}

static int lp_nomem(const char *op)
{
    return ct__error(CT_ENOMEM, "%s: out of memory for the rounded operands", op);
}

static int64_t conv_x_numel(const ct__conv_p *p)
{
    return p->n * p->ic * p->ih * p->iw;
}

static int64_t conv_w_numel(const ct__conv_p *p)
{
    return p->oc * p->ic * p->kh * p->kw;
}

static int64_t conv_y_numel(const ct__conv_p *p)
{
    return p->n * p->oc * p->oh * p->ow;
}

static int run_conv_fwd(task *t, cd_stream *s)
{
    ct__conv_p p = t->d.conv;
    if (p.dt == CT_F32)
        return CT__BK_CALL(&ct__backend_cpu, conv_fwd, &p, F(0), F(1), F(2), F(3));
    int dt = p.dt, rc;
    p.dt = CT_F32;
    float *x = lp_copy(dt, F(0), conv_x_numel(&p)), *w = lp_copy(dt, F(1), conv_w_numel(&p));
    rc = x && w ? ct__backend_cpu.conv_fwd(&p, x, w, F(2), F(3)) : lp_nomem("conv_fwd");
    free(x);
    free(w);
    return rc;
}
QUEUE(conv_fwd, (const ct__conv_p *p, const float *x, const float *w, const float *b, float *y),
      (.d.conv = *p, .p = {x, w, b, y}))

static int run_conv_bwd_data(task *t, cd_stream *s)
{
    ct__conv_p p = t->d.conv;
    if (p.dt == CT_F32)
        return CT__BK_CALL(&ct__backend_cpu, conv_bwd_data, &p, F(0), F(1), F(2));
    int dt = p.dt, rc;
    p.dt = CT_F32;
    float *w = lp_copy(dt, F(0), conv_w_numel(&p)), *dy = lp_copy(dt, F(1), conv_y_numel(&p));
    rc = w && dy ? ct__backend_cpu.conv_bwd_data(&p, w, dy, F(2)) : lp_nomem("conv_bwd_data");
    free(w);
    free(dy);
    return rc;
}
QUEUE(conv_bwd_data, (const ct__conv_p *p, const float *w, const float *dy, float *dx),
      (.d.conv = *p, .p = {w, dy, dx}))

static int run_conv_bwd_weights(task *t, cd_stream *s)
{
    ct__conv_p p = t->d.conv;
    if (p.dt == CT_F32)
        return CT__BK_CALL(&ct__backend_cpu, conv_bwd_weights, &p, F(0), F(1), F(2), F(3));
    int dt = p.dt, rc;
    p.dt = CT_F32;
    float *x = lp_copy(dt, F(0), conv_x_numel(&p)), *dy = lp_copy(dt, F(1), conv_y_numel(&p));
    rc = x && dy ? ct__backend_cpu.conv_bwd_weights(&p, x, dy, F(2), F(3))
                 : lp_nomem("conv_bwd_weights");
    free(x);
    free(dy);
    return rc;
}
QUEUE(conv_bwd_weights,
      (const ct__conv_p *p, const float *x, const float *dy, float *dw, float *db),
      (.d.conv = *p, .p = {x, dy, dw, db}))

static int run_matmul_lp(task *t, cd_stream *s)
{
    int dt = t->k[3];
    int64_t m = t->i[0], k = t->i[1], n = t->i[2];
    float *a = lp_copy(dt, F(0), m * k), *b = lp_copy(dt, F(1), k * n);
    int rc = a && b ? ct__backend_cpu.matmul(m, k, n, a, t->k[0], b, t->k[1], F(2), t->k[2])
                    : lp_nomem("matmul_lp");
    free(a);
    free(b);
    return rc;
}
static int cd_matmul_lp(int dt, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                        const float *b, bool tb, float *c, bool accumulate)
{
    if (dt != CT_BF16 && dt != CT_F16)
        return ct__error(CT_EINVAL, "matmul_lp: precision %d is not an autocast dtype", dt);
    return submit(
        NULL,
        &(task){
            .run = run_matmul_lp, .i = {m, k, n}, .p = {a, b, c}, .k = {ta, tb, accumulate, dt}},
        "matmul_lp");
}

KERNEL(ip_fwd,
       (int64_t n, int64_t ic, int64_t oc, const float *x, const float *w, const float *b,
        float *y),
       (.i = {n, ic, oc}, .p = {x, w, b, y}), (t->i[0], t->i[1], t->i[2], F(0), F(1), F(2), F(3)))
KERNEL(ip_bwd_data, (int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy, float *dx),
       (.i = {n, ic, oc}, .p = {w, dy, dx}), (t->i[0], t->i[1], t->i[2], F(0), F(1), F(2)))
KERNEL(ip_bwd_weights,
       (int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy, float *dw, float *db),
       (.i = {n, ic, oc}, .p = {x, dy, dw, db}),
       (t->i[0], t->i[1], t->i[2], F(0), F(1), F(2), F(3)))
KERNEL(matmul,
       (int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b, bool tb, float *c,
        bool accumulate),
       (.i = {m, k, n}, .p = {a, b, c}, .k = {ta, tb, accumulate}),
       (t->i[0], t->i[1], t->i[2], F(0), t->k[0], F(1), t->k[1], F(2), t->k[2]))
KERNEL(add_col_sums, (int64_t rows, int64_t cols, const float *x, float *y),
       (.i = {rows, cols}, .p = {x, y}), (t->i[0], t->i[1], F(0), F(1)))

KERNEL(bn_fwd_train,
       (const ct__bn_p *p, const float *x, const float *scale, const float *shift, float *y,
        float *mean, float *var, void *ws),
       (.d.bn = *p, .p = {x, scale, shift, y, mean, var, ws}),
       (&t->d.bn, F(0), F(1), F(2), F(3), F(4), F(5), F(6)))
KERNEL(bn_fwd_infer,
       (const ct__bn_p *p, const float *x, const float *scale, const float *shift,
        const float *mean, const float *var, float *y),
       (.d.bn = *p, .p = {x, scale, shift, mean, var, y}),
       (&t->d.bn, F(0), F(1), F(2), F(3), F(4), F(5)))
KERNEL(bn_bwd,
       (const ct__bn_p *p, const float *x, const float *y, const float *dy, const float *scale,
        const float *mean, const float *var, const void *ws, float *dx, float *dscale,
        float *dshift),
       (.d.bn = *p, .p = {x, y, dy, scale, mean, var, ws, dx, dscale, dshift}),
       (&t->d.bn, F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), F(8), F(9)))
KERNEL(bn_bwd_frozen,
       (const ct__bn_p *p, const float *x, const float *y, const float *dy, const float *scale,
        const float *mean, const float *var, float *dx, float *dscale, float *dshift),
       (.d.bn = *p, .p = {x, y, dy, scale, mean, var, dx, dscale, dshift}),
       (&t->d.bn, F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), F(8)))
KERNEL(bn_update_running,
       (int64_t c, float momentum, float unbias, const float *mean, const float *var, float *rm,
        float *rv),
       (.i = {c}, .f = {momentum, unbias}, .p = {mean, var, rm, rv}),
       (t->i[0], t->f[0], t->f[1], F(0), F(1), F(2), F(3)))

KERNEL(pool_fwd, (const ct__pool_p *p, const float *x, float *y, void *ws, bool training),
       (.d.pool = *p, .p = {x, y, ws}, .k = {training}), (&t->d.pool, F(0), F(1), F(2), t->k[0]))
KERNEL(pool_bwd,
       (const ct__pool_p *p, const float *x, const float *y, const float *dy, const void *ws,
        float *dx),
       (.d.pool = *p, .p = {x, y, dy, ws, dx}), (&t->d.pool, F(0), F(1), F(2), F(3), F(4)))
KERNEL(adaptive_avg_fwd,
       (int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow, const float *x, float *y),
       (.i = {nc, ih, iw, oh, ow}, .p = {x, y}),
       (t->i[0], t->i[1], t->i[2], t->i[3], t->i[4], F(0), F(1)))
KERNEL(adaptive_avg_bwd,
       (int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow, const float *dy, float *dx,
        bool acc),
       (.i = {nc, ih, iw, oh, ow}, .p = {dy, dx}, .k = {acc}),
       (t->i[0], t->i[1], t->i[2], t->i[3], t->i[4], F(0), F(1), t->k[0]))

KERNEL(eltwise_fwd, (int alg, float alpha, int64_t n, const float *x, float *y),
       (.k = {alg}, .f = {alpha}, .i = {n}, .p = {x, y}), (t->k[0], t->f[0], t->i[0], F(0), F(1)))
KERNEL(eltwise_bwd, (int alg, float alpha, int64_t n, const float *y, const float *dy, float *dx),
       (.k = {alg}, .f = {alpha}, .i = {n}, .p = {y, dy, dx}),
       (t->k[0], t->f[0], t->i[0], F(0), F(1), F(2)))
KERNEL(softmax_fwd, (bool log, int64_t rows, int64_t cols, const float *x, float *y),
       (.k = {log}, .i = {rows, cols}, .p = {x, y}), (t->k[0], t->i[0], t->i[1], F(0), F(1)))
KERNEL(softmax_bwd,
       (bool log, int64_t rows, int64_t cols, const float *y, const float *dy, float *dx),
       (.k = {log}, .i = {rows, cols}, .p = {y, dy, dx}),
       (t->k[0], t->i[0], t->i[1], F(0), F(1), F(2)))

KERNEL(layernorm_fwd,
       (int64_t rows, int64_t d, float eps, const float *x, const float *w, const float *b,
        float *y, float *mean, float *rstd),
       (.i = {rows, d}, .f = {eps}, .p = {x, w, b, y, mean, rstd}),
       (t->i[0], t->i[1], t->f[0], F(0), F(1), F(2), F(3), F(4), F(5)))
KERNEL(layernorm_bwd,
       (int64_t rows, int64_t d, const float *x, const float *w, const float *mean,
        const float *rstd, const float *dy, float *dx, bool acc, float *dw, float *db),
       (.i = {rows, d}, .p = {x, w, mean, rstd, dy, dx, dw, db}, .k = {acc}),
       (t->i[0], t->i[1], F(0), F(1), F(2), F(3), F(4), F(5), t->k[0], F(6), F(7)))
KERNEL(gelu_fwd, (bool tanh_approx, int64_t n, const float *x, float *y),
       (.k = {tanh_approx}, .i = {n}, .p = {x, y}), (t->k[0], t->i[0], F(0), F(1)))
KERNEL(gelu_bwd,
       (bool tanh_approx, int64_t n, const float *x, const float *dy, float *dx, bool acc),
       (.k = {tanh_approx, acc}, .i = {n}, .p = {x, dy, dx}),
       (t->k[0], t->i[0], F(0), F(1), F(2), t->k[1]))
KERNEL(embedding_fwd,
       (int64_t n, int64_t d, int64_t vocab, const int64_t *idx, const float *table, float *y),
       (.i = {n, d, vocab}, .p = {idx, table, y}),
       (t->i[0], t->i[1], t->i[2], (const int64_t *)t->p[0], F(1), F(2)))
KERNEL(embedding_bwd,
       (int64_t n, int64_t d, int64_t vocab, const int64_t *idx, int64_t padding_idx,
        const float *dy, float *dtable),
       (.i = {n, d, vocab, padding_idx}, .p = {idx, dy, dtable}),
       (t->i[0], t->i[1], t->i[2], (const int64_t *)t->p[0], t->i[3], F(1), F(2)))

KERNEL(strided_copy, (const ct__strided_p *p, const float *src, float *dst, bool acc),
       (.d.strided = *p, .p = {src, dst}, .k = {acc}), (&t->d.strided, F(0), F(1), t->k[0]))
KERNEL(softmax_causal_fwd, (int64_t rows, int64_t t_, const float *x, float *y),
       (.i = {rows, t_}, .p = {x, y}), (t->i[0], t->i[1], F(0), F(1)))

KERNEL(f32_to_i64, (int64_t n, const float *x, int64_t *y), (.i = {n}, .p = {x, y}),
       (t->i[0], F(0), (int64_t *)t->p[1]))
KERNEL(attn_fwd,
       (const ct__attn_p *p, const float *q, const float *k, const float *v, float *o, float *lse),
       (.d.attn = *p, .p = {q, k, v, o, lse}), (&t->d.attn, F(0), F(1), F(2), F(3), F(4)))
KERNEL(attn_bwd,
       (const ct__attn_p *p, const float *q, const float *k, const float *v, const float *o,
        const float *lse, const float *dout, float *delta, float *dq, float *dk, float *dv,
        bool acc),
       (.d.attn = *p, .p = {q, k, v, o, lse, dout, delta, dq, dk, dv}, .k = {acc}),
       (&t->d.attn, F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), F(8), F(9), t->k[0]))

KERNEL(fill, (int64_t n, float value, float *x), (.i = {n}, .f = {value}, .p = {x}),
       (t->i[0], t->f[0], F(0)))
KERNEL(add, (int64_t n, const float *a, const float *b, float *y), (.i = {n}, .p = {a, b, y}),
       (t->i[0], F(0), F(1), F(2)))
KERNEL(axpy, (int64_t n, float alpha, const float *x, float *y),
       (.i = {n}, .f = {alpha}, .p = {x, y}), (t->i[0], t->f[0], F(0), F(1)))
KERNEL(mul, (int64_t n, const float *a, const float *b, float *y, bool acc),
       (.i = {n}, .p = {a, b, y}, .k = {acc}), (t->i[0], F(0), F(1), F(2), t->k[0]))
KERNEL(sum, (int64_t n, const float *x, float *out), (.i = {n}, .p = {x, out}),
       (t->i[0], F(0), F(1)))
KERNEL(norm2, (int64_t n, const float *x, float *out), (.i = {n}, .p = {x, out}),
       (t->i[0], F(0), F(1)))
KERNEL(scale, (int64_t n, float alpha, float *x), (.i = {n}, .f = {alpha}, .p = {x}),
       (t->i[0], t->f[0], F(0)))
KERNEL(unscale, (int64_t n, float inv_scale, float *g, float *found_inf),
       (.i = {n}, .f = {inv_scale}, .p = {g, found_inf}), (t->i[0], t->f[0], F(0), F(1)))
KERNEL(broadcast, (int64_t n, const float *value, float *x, bool acc),
       (.i = {n}, .p = {value, x}, .k = {acc}), (t->i[0], F(0), F(1), t->k[0]))
KERNEL(dropout_mask, (int64_t n, float p, uint64_t seed, uint64_t offset, float *mask),
       (.i = {n}, .f = {p}, .u = {seed, offset}, .p = {mask}),
       (t->i[0], t->f[0], t->u[0], t->u[1], F(0)))

KERNEL(loss_fwd, (const ct__loss_p *p, const float *x, const void *target, float *out),
       (.d.loss = *p, .p = {x, target, out}), (&t->d.loss, F(0), t->p[1], F(2)))
KERNEL(loss_bwd,
       (const ct__loss_p *p, const float *x, const void *target, const float *grad_out,
        float *grad),
       (.d.loss = *p, .p = {x, target, grad_out, grad}), (&t->d.loss, F(0), t->p[1], F(2), F(3)))

KERNEL(add_i64, (int64_t n, int64_t v, int64_t *x), (.i = {n, v}, .p = {x}),
       (t->i[0], t->i[1], (int64_t *)t->p[0]))
KERNEL(sgd_step, (float *param, const float *grad, float *buf, int64_t n, const ct__sgd_h *h),
       (.d.sgd = *h, .p = {param, grad, buf}, .i = {n}), (F(0), F(1), F(2), t->i[0], &t->d.sgd))
KERNEL(adam_step,
       (float *param, const float *grad, float *m, float *v, float *mx, int64_t n,
        const ct__adam_h *h),
       (.d.adam = *h, .p = {param, grad, m, v, mx}, .i = {n}),
       (F(0), F(1), F(2), F(3), F(4), t->i[0], &t->d.adam))

static int cd_devices(const char **why)
{
    (void)why;
    return 1;
}

/* its kernels are the CPU's, on the CPU */
static double cd_peak_flops(int dt, int threads)
{
    return ct__backend_cpu.peak_flops(dt, threads);
}

/* The entries that name no memory of their own, one set per device index (table.h) */
CT__INDEX_ENTRIES(0)
CT__INDEX_ENTRIES(1)
CT__INDEX_ENTRIES(2)
CT__INDEX_ENTRIES(3)
_Static_assert(CT_MAX_DEVICE_INDEX == 4, "one CT__INDEX_ENTRIES(i) per device index");

const ct__backend ct__backend_checkdev = {
    .name = "checkdev",
    .device = CT_CHECKDEV,
    .devices = cd_devices,
    .peak_flops = cd_peak_flops,
    .alloc = alloc_0,
    .free = cd_free,
    .upload = cd_upload,
    .download = cd_download,
    .copy = cd_copy,
    .zero = cd_zero,
    .host_alloc = cd_host_alloc,
    .host_free = free,
    .upload_async = cd_upload_async,
    .download_async = cd_download_async,
    .peer_copy = cd_peer_copy,
    .stream_new = stream_new_0,
    .stream_free = cd_stream_free,
    .synchronize = synchronize_0,
    .event_new = event_new_0,
    .event_free = cd_event_free,
    .event_record = event_record_0,
    .stream_wait = stream_wait_0,
    .event_sync = cd_event_sync,
    .host_fn = cd_host_fn,
    .blocked_fmt = cd_blocked_fmt,
    .reorder = cd_reorder,
    .conv_fwd = cd_conv_fwd,
    .conv_bwd_data = cd_conv_bwd_data,
    .conv_bwd_weights = cd_conv_bwd_weights,
    .ip_fwd = cd_ip_fwd,
    .ip_bwd_data = cd_ip_bwd_data,
    .ip_bwd_weights = cd_ip_bwd_weights,
    .matmul = cd_matmul,
    .matmul_lp = cd_matmul_lp,
    .add_col_sums = cd_add_col_sums,
    .bn_ws_bytes = cd_bn_ws_bytes,
    .bn_fwd_train = cd_bn_fwd_train,
    .bn_fwd_infer = cd_bn_fwd_infer,
    .bn_bwd = cd_bn_bwd,
    .bn_bwd_frozen = cd_bn_bwd_frozen,
    .bn_update_running = cd_bn_update_running,
    .pool_ws_bytes = cd_pool_ws_bytes,
    .pool_fwd = cd_pool_fwd,
    .pool_bwd = cd_pool_bwd,
    .adaptive_avg_fwd = cd_adaptive_avg_fwd,
    .adaptive_avg_bwd = cd_adaptive_avg_bwd,
    .eltwise_fwd = cd_eltwise_fwd,
    .eltwise_bwd = cd_eltwise_bwd,
    .softmax_fwd = cd_softmax_fwd,
    .softmax_bwd = cd_softmax_bwd,
    .layernorm_fwd = cd_layernorm_fwd,
    .layernorm_bwd = cd_layernorm_bwd,
    .gelu_fwd = cd_gelu_fwd,
    .gelu_bwd = cd_gelu_bwd,
    .embedding_fwd = cd_embedding_fwd,
    .embedding_bwd = cd_embedding_bwd,
    .strided_copy = cd_strided_copy,
    .f32_to_i64 = cd_f32_to_i64,
    .softmax_causal_fwd = cd_softmax_causal_fwd,
    .attn_fwd = cd_attn_fwd,
    .attn_bwd = cd_attn_bwd,
    .fill = cd_fill,
    .add = cd_add,
    .axpy = cd_axpy,
    .mul = cd_mul,
    .sum = cd_sum,
    .norm2 = cd_norm2,
    .scale = cd_scale,
    .unscale = cd_unscale,
    .broadcast = cd_broadcast,
    .dropout_mask = cd_dropout_mask,
    .loss_fwd = cd_loss_fwd,
    .loss_bwd = cd_loss_bwd,
    .sgd_step = cd_sgd_step,
    .add_i64 = cd_add_i64,
    .adam_step = cd_adam_step,
};

static ct__backend tables[CT_MAX_DEVICE_INDEX];
static char table_names[CT_MAX_DEVICE_INDEX][16];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void)
{
    static const ct__index_entries *const per[CT_MAX_DEVICE_INDEX] = {
        &index_entries_0, &index_entries_1, &index_entries_2, &index_entries_3};
    ct__index_tables(tables, table_names, &ct__backend_checkdev, per);
}

const ct__backend *ct__checkdev_table(int index)
{
    if (index < 0 || index >= CT_MAX_DEVICE_INDEX)
        return NULL;
    if (index == 0)
        return &ct__backend_checkdev;
    pthread_once(&tables_once, tables_init);
    return &tables[index];
}
