/* tests/cuda/test_streams.c — streams, events and the caching allocator across streams
 * (trainer/cuda/cuda.h) on a GPU:
 *   - ordering: a producer on stream A (a 50 ms spin, then a fill) and a copy to pinned host
 *     memory on stream B that waits on an event recorded after the producer: the host sees the
 *     producer's values, not the buffer's earlier ones; event_done is 0 while the producer runs
 *     and 1 after; a never recorded event is done; a NULL event is CT_EINVAL;
 *   - record_stream: a block also used on stream B, held busy 200 ms, and then freed is not handed
 *     out again on its own stream while B's work runs (the pending count shows it), and is after
 *     B is synced (a cache hit, holding what B wrote); empty_cache waits for pending blocks;
 *     recording a foreign or freed pointer is CT_EINVAL;
 *   - stream ids: a block freed for a stream that was then destroyed is not given to a new stream
 *     (which may get the old stream's handle).
 * Where kernel launches block the host (CUDA_LAUNCH_BLOCKING=1, some sanitizer modes) the spin
 * is over before the checks that need it running: those checks are skipped with a note. Exits 77
 * with "no GPU" where no CUDA device can be used. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ct/error.h"
#include "trainer/cuda/cuda.h"

#include "check.h"

/* on failure: counts it and goes to the function's `out` */
#define CHECK_RC(expr) CHECK_RC_OR(expr, goto out)

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* true (with a note) when queueing work that started with a spin of `spin_ms` took most of it:
 * launches block here, and the spin no longer holds its stream busy */
static bool launches_blocked(double t0, int spin_ms, const char *what)
{
    double took = now_ms() - t0;
    if (took < spin_ms / 2.0)
        return false;
    printf("note: %s: queueing took %.0f ms of a %d ms spin (launches block): the checks that "
           "need the spin still running are skipped\n",
           what, took, spin_ms);
    return true;
}

static void test_ordering(void)
{
    enum { N = 1 << 20, SPIN_MS = 50 };
    void *a = NULL, *b = NULL, *ev = NULL;
    float *d = NULL, *h = NULL;
    CHECK(ct__cuda_event_record(NULL, NULL) == CT_EINVAL);
    CHECK(ct__cuda_event_done(NULL) == CT_EINVAL);
    CHECK_RC(ct__cuda_stream_new(&a));
    CHECK_RC(ct__cuda_stream_new(&b));
    CHECK_RC(ct__cuda_event_new(&ev));
    CHECK(ct__cuda_event_done(ev) == 1); /* never recorded */
    CHECK_RC(ct__cuda_pinned_alloc((void **)&h, N * sizeof(float)));
    CHECK_RC(ct__cuda_malloc((void **)&d, N * sizeof(float), a));
    CHECK_RC(ct__cuda_fill(d, 1.0f, N, a)); /* what B would copy if it did not wait */
    CHECK_RC(ct__cuda_sync(a));
    for (int i = 0; i < N; i++)
        h[i] = -1.0f;

    double t0 = now_ms();
    CHECK_RC(ct__cuda_test_spin(a, SPIN_MS)); /* the slow producer */
    CHECK_RC(ct__cuda_fill(d, 7.0f, N, a));
    CHECK_RC(ct__cuda_event_record(ev, a));
    int done = ct__cuda_event_done(ev);
    if (!launches_blocked(t0, SPIN_MS, "ordering"))
        CHECK(done == 0);
    CHECK_RC(ct__cuda_stream_wait(b, ev));
    CHECK_RC(ct__cuda_record_stream(d, b)); /* d is read on B too */
    CHECK_RC(ct__cuda_to_host(h, d, N * sizeof(float), b));
    CHECK_RC(ct__cuda_sync(b));
    CHECK(ct__cuda_event_done(ev) == 1);
    int bad = 0, first = -1;
    for (int i = 0; i < N; i++)
        if (h[i] != 7.0f && bad++ == 0)
            first = i;
    if (bad) {
        fprintf(stderr, "ordering: %d of %d copied values are not the producer's: [%d] = %g\n", bad,
                N, first, h[first]);
        failures++;
    }
    CHECK_RC(ct__cuda_event_sync(ev));
out:
    ct__cuda_free(d);
    ct__cuda_sync(NULL); /* the pinned buffer may still be a copy's target after a failure */
    ct__cuda_pinned_free(h);
    ct__cuda_event_free(ev);
    ct__cuda_stream_free(a);
    ct__cuda_stream_free(b);
}

static void test_record_stream(void)
{
    /* a class no other test here uses: the free lists hold nothing of it */
    enum { BYTES = 3 << 20, N = BYTES / 4, SPIN_MS = 200 };
    void *s = NULL, *b = NULL, *p = NULL, *q = NULL, *r = NULL;
    ct_cuda_alloc_stats s0, s1;
    int x = 0;
    float back = 0;
    CHECK_RC(ct__cuda_stream_new(&s));
    CHECK_RC(ct__cuda_stream_new(&b));
    CHECK_RC(ct__cuda_malloc(&p, BYTES, s));
    CHECK_RC(ct__cuda_fill(p, 1.0f, N, s));
    CHECK_RC(ct__cuda_sync(s)); /* from here p is used on B only */

    double t0 = now_ms();
    CHECK_RC(ct__cuda_test_spin(b, SPIN_MS));
    CHECK_RC(ct__cuda_fill(p, 2.0f, N, b)); /* runs after the spin */
    CHECK_RC(ct__cuda_record_stream(p, b));
    CHECK_RC(ct__cuda_record_stream(p, b)); /* again: nothing more */
    CHECK_RC(ct__cuda_record_stream(p, s)); /* its own stream: nothing */
    CHECK_RC(ct__cuda_free(p));
    bool blocked = launches_blocked(t0, SPIN_MS, "record_stream");
    ct__cuda_alloc_stats_get(&s0);
    CHECK_RC(ct__cuda_malloc(&q, BYTES, s)); /* B still runs: not p */
    if (!blocked) {
        CHECK(s0.pending_blocks >= 1 && s0.pending_bytes >= BYTES);
        CHECK(q != p);
    }
    CHECK_RC(ct__cuda_sync(b));
    CHECK_RC(ct__cuda_malloc(&r, BYTES, s)); /* B is done: p, from its free list */
    ct__cuda_alloc_stats_get(&s1);
    if (!blocked) {
        CHECK(r == p);
        CHECK(s1.cache_hits - s0.cache_hits == 1 && s1.device_mallocs - s0.device_mallocs == 1);
    }
    CHECK(s1.pending_blocks == 0 && s1.pending_bytes == 0);
    CHECK_RC(ct__cuda_to_host(&back, r, sizeof back, s));
    CHECK_RC(ct__cuda_sync(s));
    if (!blocked)
        CHECK(back == 2.0f); /* B's fill ran before p came back */

    CHECK(ct__cuda_record_stream(&x, b) == CT_EINVAL);
    CHECK_RC(ct__cuda_free(q));
    CHECK(ct__cuda_record_stream(q, b) == CT_EINVAL); /* freed */
    q = NULL;

    /* empty_cache waits for a pending block and then returns it to the device */
    CHECK_RC(ct__cuda_test_spin(b, 20));
    CHECK_RC(ct__cuda_record_stream(r, b));
    CHECK_RC(ct__cuda_free(r));
    r = NULL;
    CHECK_RC(ct__cuda_empty_cache());
    ct__cuda_alloc_stats_get(&s1);
    CHECK(s1.pending_blocks == 0 && s1.reserved_bytes == s1.allocated_bytes);
out:
    ct__cuda_free(q);
    ct__cuda_free(r);
    ct__cuda_sync(NULL);
    ct__cuda_stream_free(s);
    ct__cuda_stream_free(b);
}

static void test_stream_ids(void)
{
    void *s1 = NULL, *s2 = NULL, *p = NULL, *q = NULL;
    CHECK_RC(ct__cuda_stream_new(&s1));
    CHECK_RC(ct__cuda_malloc(&p, 5000, s1));
    CHECK_RC(ct__cuda_free(p)); /* on s1's free list */
    uintptr_t old = (uintptr_t)s1;
    ct__cuda_stream_free(s1);
    s1 = NULL;
    CHECK_RC(ct__cuda_stream_new(&s2));
    if ((uintptr_t)s2 == old)
        printf("note: the new stream got the destroyed stream's handle\n");
    CHECK_RC(ct__cuda_malloc(&q, 5000, s2));
    CHECK(q != p); /* the old stream's block stays with the old stream's id */
out:
    ct__cuda_free(q);
    ct__cuda_stream_free(s1);
    ct__cuda_stream_free(s2);
}

int main(void)
{
    if (no_gpu())
        return 77;
    test_ordering();
    test_record_stream();
    test_stream_ids();
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("cuda streams: event ordering, record_stream, stream ids: ok\n");
    return failures ? 1 : 0;
}
