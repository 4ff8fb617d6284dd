/* tests/checkdev/test_checkdev.c — the checking device (trainer/checkdev, ct__backend_checkdev):
 *   - memory: alloc'd pointers carry bit 63 and are 64-byte aligned underneath, alloc(0) gives
 *     a block, free(NULL) does nothing, the blocked layout is plain;
 *   - results: conv forward/backward, Linear, matmul, batch norm training (with the fused
 *     ReLU's workspace), max pooling, ReLU, (log-)softmax and a plain reorder through the table
 *     (upload, kernel, download) equal the CPU table's entries bit for bit, with the descriptor
 *     clobbered right after queueing (entries copy their arguments);
 *   - it can fail: a child process that reads checkdev memory on the host dies of SIGSEGV; a
 *     copy on a second stream without a wait reads the old bytes of a buffer a kernel on the
 *     compute stream is about to fill, and with event_record + stream_wait the new ones; a
 *     download does not wait for another stream, event_sync does;
 *   - a failing kernel (a convolution with stride 0) returns 0 when queued
 *     and its code and message from the next synchronize / download / event_sync, once;
 *   - 1000 queued axpy's give the exact sum, their input freed (stream-ordered) right after. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "ct/error.h"
#include "trainer/backend/backend.h"
#include "trainer/checkdev/checkdev.h"

static const ct__backend *C = &ct__backend_cpu, *D = &ct__backend_checkdev;
static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECK_RC(call)                                                                             \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "%s:%d: %s = %d: %s\n", __FILE__, __LINE__, #call, rc_,                \
                    ct_last_error());                                                              \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Buffers of one test, host and device, released together by release(). */
static void *hosts[64], *devs[64];
static int nhosts, ndevs;

/* n floats of host memory: deterministic values in [-1, 1) from seed (an LCG), or zeros */
static float *host(int64_t n, uint32_t seed)
{
    float *x = calloc((size_t)n, sizeof(float));
    for (int64_t i = 0; seed && i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = -1.0f + 2.0f * ((float)(seed >> 8) / (float)(1u << 24));
    }
    return hosts[nhosts++] = x;
}

/* n floats of checkdev memory, holding h[0..n) when h is not NULL */
static float *dev(const float *h, int64_t n)
{
    void *p = NULL;
    CHECK_RC(D->alloc(&p, (size_t)n * sizeof(float)));
    if (h)
        CHECK_RC(D->upload(p, h, (size_t)n * sizeof(float)));
    return devs[ndevs++] = p;
}

static void release(void)
{
    while (nhosts)
        free(hosts[--nhosts]);
    while (ndevs)
        D->free(devs[--ndevs]);
}

/* the device's d[0..n) equals want[0..n) bit for bit */
static void same(const float *d, const float *want, int64_t n, const char *what)
{
    float *h = malloc((size_t)n * sizeof(float));
    CHECK_RC(D->download(h, d, (size_t)n * sizeof(float)));
    if (memcmp(h, want, (size_t)n * sizeof(float)) != 0) {
        fprintf(stderr, "%s: checkdev's result differs from the CPU's\n", what);
        failures++;
    }
    free(h);
}

static void test_memory(void)
{
    void *p = NULL, *q = NULL;
    CHECK_RC(D->alloc(&p, 0));
    CHECK_RC(D->alloc(&q, 100));
    CHECK(p && q && p != q);
    CHECK((uintptr_t)p >> 63 == 1 && (uintptr_t)q >> 63 == 1);
    CHECK(((uintptr_t)p & 63) == 0 && ((uintptr_t)q & 63) == 0);
    D->free(p);
    D->free(q);
    D->free(NULL);
    CHECK(D->blocked_fmt() == CT__FMT_PLAIN);
    CHECK(D->device == CT_CHECKDEV && strcmp(D->name, "checkdev") == 0);
    void *ev = NULL, *s = NULL;
    CHECK_RC(D->event_new(&ev));
    CHECK_RC(D->stream_new(&s));
    CHECK_RC(D->event_sync(ev)); /* never recorded: complete */
    CHECK_RC(D->stream_wait(s, ev));
    CHECK_RC(D->synchronize(s));
    D->event_free(ev);
    D->stream_free(s);
}

/* A child that reads checkdev memory on the host dies of SIGSEGV. */
static void test_host_deref_faults(void)
{
    float *p = dev(NULL, 16);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* sanitizers catch SIGSEGV and exit: the test wants it */
        volatile float v = *(volatile float *)p;
        (void)v;
        _exit(0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    release();
}

static void test_conv(void)
{
    ct__conv_p p = {.n = 2,
                    .ic = 3,
                    .ih = 7,
                    .iw = 7,
                    .oc = 4,
                    .oh = 4,
                    .ow = 4,
                    .kh = 3,
                    .kw = 3,
                    .sh = 2,
                    .sw = 2,
                    .ph = 1,
                    .pw = 1,
                    .dh = 1,
                    .dw = 1,
                    .bias = 1};
    int64_t nx = 2 * 3 * 7 * 7, nw = 4 * 3 * 3 * 3, ny = 2 * 4 * 4 * 4;
    float *x = host(nx, 1), *w = host(nw, 2), *b = host(4, 3), *dy = host(ny, 4);
    float *y = host(ny, 0), *dx = host(nx, 0), *dw = host(nw, 0), *db = host(4, 0);
    CHECK_RC(C->conv_fwd(&p, x, w, b, y));
    CHECK_RC(C->conv_bwd_data(&p, w, dy, dx));
    CHECK_RC(C->conv_bwd_weights(&p, x, dy, dw, db));
    float *X = dev(x, nx), *W = dev(w, nw), *B = dev(b, 4), *DY = dev(dy, ny);
    float *Y = dev(NULL, ny), *DX = dev(NULL, nx), *DW = dev(NULL, nw), *DB = dev(NULL, 4);
    ct__conv_p q = p;
    CHECK_RC(D->conv_fwd(&q, X, W, B, Y));
    CHECK_RC(D->conv_bwd_data(&q, W, DY, DX));
    CHECK_RC(D->conv_bwd_weights(&q, X, DY, DW, DB));
    memset(&q, 0xff, sizeof q); /* the queued tasks hold their own copies */
    same(Y, y, ny, "conv_fwd y");
    same(DX, dx, nx, "conv_bwd_data dx");
    same(DW, dw, nw, "conv_bwd_weights dw");
    same(DB, db, 4, "conv_bwd_weights db");
    release();
}

static void test_linear(void)
{
    int64_t n = 5, ic = 7, oc = 3;
    float *x = host(n * ic, 5), *w = host(oc * ic, 6), *b = host(oc, 7), *dy = host(n * oc, 8);
    float *y = host(n * oc, 0), *dx = host(n * ic, 0), *dw = host(oc * ic, 0), *db = host(oc, 0);
    float *c = host(ic * ic, 0);
    CHECK_RC(C->ip_fwd(n, ic, oc, x, w, b, y));
    CHECK_RC(C->ip_bwd_data(n, ic, oc, w, dy, dx));
    CHECK_RC(C->ip_bwd_weights(n, ic, oc, x, dy, dw, db));
    CHECK_RC(C->matmul(ic, n, ic, x, true, x, false, c, false)); /* x^T x */
    float *X = dev(x, n * ic), *W = dev(w, oc * ic), *B = dev(b, oc), *DY = dev(dy, n * oc);
    float *Y = dev(NULL, n * oc), *DX = dev(NULL, n * ic), *DW = dev(NULL, oc * ic);
    float *DB = dev(NULL, oc), *C = dev(NULL, ic * ic);
    CHECK_RC(D->ip_fwd(n, ic, oc, X, W, B, Y));
    CHECK_RC(D->ip_bwd_data(n, ic, oc, W, DY, DX));
    CHECK_RC(D->ip_bwd_weights(n, ic, oc, X, DY, DW, DB));
    CHECK_RC(D->matmul(ic, n, ic, X, true, X, false, C, false));
    same(Y, y, n * oc, "ip_fwd y");
    same(DX, dx, n * ic, "ip_bwd_data dx");
    same(DW, dw, oc * ic, "ip_bwd_weights dw");
    same(DB, db, oc, "ip_bwd_weights db");
    same(C, c, ic * ic, "matmul c");
    release();
}

static void test_bn(void)
{
    ct__bn_p p = {.n = 4, .c = 3, .hw = 10, .h = 2, .w = 5, .relu = 1, .eps = 1e-5f};
    int64_t nx = 4 * 3 * 10;
    size_t wsb = D->bn_ws_bytes(&p);
    CHECK(wsb == C->bn_ws_bytes(&p) && wsb > 0);
    int64_t nws = (int64_t)(wsb + sizeof(float) - 1) / (int64_t)sizeof(float);
    float *x = host(nx, 9), *scale = host(3, 10), *shift = host(3, 11), *dy = host(nx, 12);
    float *y = host(nx, 0), *mean = host(3, 0), *var = host(3, 0), *ws = host(nws, 0);
    float *dx = host(nx, 0), *dscale = host(3, 0), *dshift = host(3, 0);
    CHECK_RC(C->bn_fwd_train(&p, x, scale, shift, y, mean, var, wsb ? ws : NULL));
    CHECK_RC(C->bn_bwd(&p, x, y, dy, scale, mean, var, wsb ? ws : NULL, dx, dscale, dshift));
    float *X = dev(x, nx), *S = dev(scale, 3), *T = dev(shift, 3), *DY = dev(dy, nx);
    float *Y = dev(NULL, nx), *M = dev(NULL, 3), *V = dev(NULL, 3), *WS = dev(NULL, nws);
    float *DX = dev(NULL, nx), *DS = dev(NULL, 3), *DT = dev(NULL, 3);
    ct__bn_p q = p;
    CHECK_RC(D->bn_fwd_train(&q, X, S, T, Y, M, V, wsb ? WS : NULL));
    CHECK_RC(D->bn_bwd(&q, X, Y, DY, S, M, V, wsb ? WS : NULL, DX, DS, DT));
    memset(&q, 0xff, sizeof q);
    same(Y, y, nx, "bn_fwd_train y");
    same(M, mean, 3, "bn_fwd_train mean");
    same(V, var, 3, "bn_fwd_train var");
    same(DX, dx, nx, "bn_bwd dx");
    same(DS, dscale, 3, "bn_bwd dscale");
    same(DT, dshift, 3, "bn_bwd dshift");
    release();
}

static void test_pool(void)
{
    ct__pool_p p = {.n = 2,
                    .c = 3,
                    .ih = 6,
                    .iw = 6,
                    .oh = 3,
                    .ow = 3,
                    .kh = 2,
                    .kw = 2,
                    .sh = 2,
                    .sw = 2,
                    .alg = CT__POOL_MAX};
    int64_t nx = 2 * 3 * 36, ny = 2 * 3 * 9;
    size_t wsb = D->pool_ws_bytes(&p);
    CHECK(wsb == C->pool_ws_bytes(&p) && wsb > 0);
    int64_t nws = (int64_t)(wsb + sizeof(float) - 1) / (int64_t)sizeof(float);
    float *x = host(nx, 13), *dy = host(ny, 14), *y = host(ny, 0), *dx = host(nx, 0);
    float *ws = host(nws, 0);
    CHECK_RC(C->pool_fwd(&p, x, y, ws, true));
    CHECK_RC(C->pool_bwd(&p, x, y, dy, ws, dx));
    float *X = dev(x, nx), *DY = dev(dy, ny), *Y = dev(NULL, ny), *DX = dev(NULL, nx);
    float *WS = dev(NULL, nws);
    CHECK_RC(D->pool_fwd(&p, X, Y, WS, true));
    CHECK_RC(D->pool_bwd(&p, X, Y, DY, WS, DX));
    same(Y, y, ny, "pool_fwd y");
    same(DX, dx, nx, "pool_bwd dx");
    release();
}

static void test_eltwise_softmax(void)
{
    int64_t rows = 6, cols = 10, n = rows * cols;
    float *x = host(n, 15), *dy = host(n, 16), *y = host(n, 0), *dx = host(n, 0);
    float *X = dev(x, n), *DY = dev(dy, n), *Y = dev(NULL, n), *DX = dev(NULL, n);
    CHECK_RC(C->eltwise_fwd(CT__ELT_RELU, 0, n, x, y));
    CHECK_RC(C->eltwise_bwd(CT__ELT_RELU, 0, n, y, dy, dx));
    CHECK_RC(D->eltwise_fwd(CT__ELT_RELU, 0, n, X, Y));
    CHECK_RC(D->eltwise_bwd(CT__ELT_RELU, 0, n, Y, DY, DX));
    same(Y, y, n, "relu fwd");
    same(DX, dx, n, "relu bwd");
    for (int log = 0; log <= 1; log++) {
        CHECK_RC(C->softmax_fwd(log, rows, cols, x, y));
        CHECK_RC(C->softmax_bwd(log, rows, cols, y, dy, dx));
        CHECK_RC(D->softmax_fwd(log, rows, cols, X, Y));
        CHECK_RC(D->softmax_bwd(log, rows, cols, Y, DY, DX));
        same(Y, y, n, log ? "log_softmax fwd" : "softmax fwd");
        same(DX, dx, n, log ? "log_softmax bwd" : "softmax bwd");
    }
    CHECK_RC(D->reorder(2, 3, 2, 5, X, CT__FMT_PLAIN, Y, CT__FMT_PLAIN)); /* a copy */
    same(Y, x, n, "plain reorder");
    release();
}

/* A kernel on the compute stream fills a (ones) with 7 behind PAD other tasks; a copy of a into
 * b on a second stream, after event_record + stream_wait when wait, else right away. Returns
 * b[0] as the host sees it: through download alone (which waits for the compute stream only)
 * or, when host_waits, after event_sync on an event recorded on the second stream. */
enum { N = 256, PAD = 50 };
static float race(bool wait, bool host_waits)
{
    float *ones = host(N, 0), *seen = host(N, 0);
    for (int i = 0; i < N; i++)
        ones[i] = 1;
    float *a = dev(ones, N), *b = dev(ones, N), *scratch = dev(NULL, N);
    void *s2 = NULL, *ev = NULL, *ev2 = NULL;
    CHECK_RC(D->stream_new(&s2));
    CHECK_RC(D->event_new(&ev));
    CHECK_RC(D->event_new(&ev2));
    CHECK_RC(D->synchronize(NULL));
    for (int i = 0; i < PAD; i++)
        CHECK_RC(D->fill(N, 0, scratch));
    CHECK_RC(D->fill(N, 7, a));
    if (wait) {
        CHECK_RC(D->event_record(ev, NULL));
        CHECK_RC(D->stream_wait(s2, ev));
    }
    CHECK(ct__checkdev_set_stream(s2) == NULL);
    for (int i = 0; !host_waits && i < PAD; i++) /* the host must not catch up by chance */
        CHECK_RC(D->fill(N, 0, scratch));
    CHECK_RC(D->copy(b, a, N * sizeof(float)));
    CHECK_RC(D->event_record(ev2, s2));
    CHECK(ct__checkdev_set_stream(NULL) == s2);
    if (host_waits)
        CHECK_RC(D->event_sync(ev2));
    CHECK_RC(D->download(seen, b, N * sizeof(float)));
    float v = seen[0];
    for (int i = 1; i < N; i++)
        CHECK(seen[i] == v);
    CHECK_RC(D->synchronize(s2));
    D->event_free(ev);
    D->event_free(ev2);
    D->stream_free(s2);
    release();
    return v;
}

static void test_races(void)
{
    CHECK(race(false, true) == 1); /* no stream_wait: the copy ran before the fill */
    CHECK(race(true, true) == 7);
    CHECK(race(true, false) == 1); /* download does not wait for the second stream */
}

/* A convolution with stride 0: the CPU rejects it when the task runs. */
static int bad_conv(void)
{
    ct__conv_p p = {.n = 1,
                    .ic = 1,
                    .ih = 5,
                    .iw = 5,
                    .oc = 1,
                    .oh = 3,
                    .ow = 3,
                    .kh = 3,
                    .kw = 3,
                    .sh = 0,
                    .sw = 0,
                    .dh = 1,
                    .dw = 1};
    float *x = dev(NULL, 25), *w = dev(NULL, 9), *y = dev(NULL, 9);
    return D->conv_fwd(&p, x, w, NULL, y);
}

static void test_sticky_error(void)
{
    CHECK_RC(bad_conv()); /* queued: no error yet */
    int rc = D->synchronize(NULL);
    CHECK(rc == CT_EDNNL);
    CHECK(strstr(ct_last_error(), "conv_fwd") && strstr(ct_last_error(), "synchronize"));
    CHECK_RC(D->synchronize(NULL)); /* reported once */

    float h[4];
    float *d = dev(NULL, 4);
    CHECK_RC(bad_conv());
    CHECK(D->download(h, d, sizeof h) == CT_EDNNL);
    CHECK(strstr(ct_last_error(), "conv_fwd") && strstr(ct_last_error(), "download"));
    CHECK_RC(D->download(h, d, sizeof h));

    void *ev = NULL;
    CHECK_RC(D->event_new(&ev));
    CHECK_RC(bad_conv());
    CHECK_RC(D->event_record(ev, NULL));
    CHECK(D->event_sync(ev) == CT_EDNNL);
    CHECK(strstr(ct_last_error(), "conv_fwd") && strstr(ct_last_error(), "event_sync"));
    CHECK_RC(D->event_sync(ev));
    CHECK(D->synchronize(NULL) == CT_EDNNL); /* the stream reports it to its own waiter too */
    CHECK_RC(D->synchronize(NULL));
    D->event_free(ev);
    release();
}

/* 1000 queued axpy's, in order, on x freed (stream-ordered) right after queueing them. */
static void test_order(void)
{
    enum { M = 64, K = 1000 };
    float *ones = host(M, 0), *zeros = host(M, 0), *out = host(M, 0);
    for (int i = 0; i < M; i++)
        ones[i] = 1;
    void *x = NULL;
    CHECK_RC(D->alloc(&x, M * sizeof(float)));
    CHECK_RC(D->upload(x, ones, M * sizeof(float)));
    float *y = dev(zeros, M);
    for (int k = 1; k <= K; k++)
        CHECK_RC(D->axpy(M, (float)k, x, y));
    D->free(x);
    CHECK_RC(D->download(out, y, M * sizeof(float)));
    for (int i = 0; i < M; i++)
        CHECK(out[i] == (float)(K * (K + 1) / 2));
    release();
}

int main(void)
{
    test_memory();
    test_host_deref_faults();
    test_conv();
    test_linear();
    test_bn();
    test_pool();
    test_eltwise_softmax();
    test_races();
    test_sticky_error();
    test_order();
    if (failures) {
        fprintf(stderr, "test_checkdev: %d failures\n", failures);
        return 1;
    }
    printf("test_checkdev: ok\n");
    return 0;
}
