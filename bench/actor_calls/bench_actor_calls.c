/* bench/actor_calls/bench_actor_calls.c — actor method call and creation rates on an embedded
 * cluster (ct_init(NULL)), the rows of Ray's microbenchmark:
 *   sync   1 caller, 1 actor, one call in flight (round trips/s)
 *   async  1 caller, 1 actor, calls pipelined in windows of W, results collected (calls/s)
 *   create actors created (and serving) per second, N at a time in flight
 *          (the handle connected, as ct_actor_create_many returns; the zygotes are warm: one
 *          actor was created before, as in Ray's benchmark where workers are prestarted)
 * Prints "<row> <value>" lines; run.sh turns them into the bench's summary lines.
 * Usage: bench_actor_calls [seconds_per_row] [actors_to_create]; seconds 0: the create row only.
 * BENCH_WINDOW=1 prints the create window (CLOCK_MONOTONIC) on stderr, for perf --time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ct/ct.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int echo(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    (void)state;
    *res = NULL;
    *rlen = 0;
    if (len) {
        if (!(*res = malloc(len)))
            return CT_ENOMEM;
        memcpy(*res, args, len);
        *rlen = len;
    }
    return 0;
}

#define DIE(what)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "bench_actor_calls: %s: %s\n", what, ct_last_error());                     \
        ct_shutdown();                                                                             \
        return 1;                                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    ct_actor_class_register("Echo", &(ct_actor_class){.methods = {{"echo", echo}}});
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    int ncreate = argc > 2 ? atoi(argv[2]) : 500;
    if (ct_init(NULL))
        DIE("ct_init");
    ct_actor *a;
    if (ct_actor_create("Echo", NULL, NULL, 0, &a))
        DIE("create");
    char payload[8] = "1234567";
    if (secs <= 0) /* creation row only */
        goto create;
    /* warm up */
    for (int i = 0; i < 1000; i++)
        if (ct_actor_call(a, "echo", payload, sizeof payload, NULL, NULL, 5000))
            DIE("call");

    long n = 0;
    double t0 = now_s(), t;
    do {
        for (int i = 0; i < 200; i++)
            if (ct_actor_call(a, "echo", payload, sizeof payload, NULL, NULL, 5000))
                DIE("sync call");
        n += 200;
    } while ((t = now_s() - t0) < secs);
    printf("sync %.0f\n", n / t);
    fflush(stdout);

    enum { W = 1000 };
    ct_future **f = calloc(W, sizeof *f);
    n = 0;
    t0 = now_s();
    do {
        for (int i = 0; i < W; i++)
            if (ct_actor_call_async(a, "echo", payload, sizeof payload, &f[i]))
                DIE("async call");
        for (int i = 0; i < W; i++) {
            if (ct_future_wait(f[i], 10000, NULL, NULL))
                DIE("future");
            ct_future_destroy(&f[i]);
        }
        n += W;
    } while ((t = now_s() - t0) < secs);
    printf("async %.0f\n", n / t);
    fflush(stdout);
    free(f);
create:
    ct_actor_kill(a);
    ct_actor_release(&a);

    ct_actor **many = calloc(ncreate, sizeof *many);
    t0 = now_s();
    if (ct_actor_create_many("Echo", NULL, NULL, 0, ncreate, many))
        DIE("create many");
    t = now_s() - t0;
    /* every one serves */
    for (int i = 0; i < ncreate; i++)
        if (ct_actor_call(many[i], "echo", NULL, 0, NULL, NULL, 10000))
            DIE("call new actor");
    if (getenv("BENCH_WINDOW"))
        fprintf(stderr, "window %.6f %.6f\n", t0, t0 + t);
    printf("create %.0f\n", ncreate / t);
    fflush(stdout);
    for (int i = 0; i < ncreate; i++)
        ct_actor_release(&many[i]);
    free(many);
    ct_shutdown();
    return 0;
}
