/* bench/pipeline/pipeline_bench.c — pipelining within a replica on the CPU (issue 40, item 4):
 * an MLP of LAYERS Linear(W, W) + ReLU layers and a Linear(W, 10) head, split into 2 stages of
 * half the layers each, forward and backward (gradients accumulated; no optimizer) of a batch
 * of N rows with a mean cross entropy, timed over STEPS steps after a warm-up step:
 *
 *   1f1b:        the 2 stages, each on a thread of its own with 1 engine thread, M micro-batches
 *                in 1F1B's order (ct_pipeline_use_threads(p, 1));
 *   gpipe:       the same in GPipe's order;
 *   unpipelined: the same 2 stages and threads without micro-batches (M = 1: stage 1 waits for
 *                stage 0's whole batch, then stage 0 for stage 1's gradient);
 *   2 threads:   the whole model in this one thread with 2 engine threads (oneDNN's OpenMP
 *                splits each primitive), no pipeline;
 *   1 thread:    the M micro-batches through both stages on this one thread (no overlap):
 *                what splitting the batch costs by itself;
 *   1 thread M=1: the whole batch through both stages on this one thread: the 1 thread row's
 *                reference (their CPU times' ratio is printed).
 *
 * Each row also gives the CPU time per step (every thread of the process): on shared, loaded
 * cores wall time says little about overlap, CPU time says what the work cost.
 *
 * Prints samples/s of each, the ideal bubble (S-1)/(M+S-1) and the one measured against the
 * unpipelined run (1 - (t_unpipelined / S) / t_1f1b: the share of the 1F1B step a perfectly
 * split stage would not need), then last:
 *   pipeline: ct=<1F1B samples/s> ref=<unpipelined samples/s> samples/s ratio=<r>
 * Usage: pipeline_bench [STEPS [M [N [W [LAYERS]]]]] (defaults 10 8 256 1024 8). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ct/error.h"
#include "ct/nn.h"
#include "ct/pipeline.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the whole process (every thread), which a loaded machine distorts far less
 * than wall time */
static double cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           1e-6 * (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

/* a variant's seconds per step: wall and CPU */
typedef struct {
    double wall, cpu;
} per_step;

static ct_tensor *mean_ce(ct_tensor *out, ct_tensor *target, void *user)
{
    (void)user;
    return ct_nn_cross_entropy(out, target, 0.0f);
}

/* layers/2 Linear + ReLU pairs; the head (Linear(w, 10)) on the last stage */
static ct_module *stage_new(int64_t w, int layers, bool head)
{
    ct_module *c[64];
    int n = 0;
    for (int i = 0; i < layers && n < 62; i++) {
        c[n++] = ct_nn_linear_new(w, w, true);
        c[n++] = ct_nn_relu_new();
    }
    if (head)
        c[n++] = ct_nn_linear_new(w, 10, true);
    return ct_nn_sequential_new(n, c);
}

/* seconds per step of the pipeline (M micro-batches, schedule k), STEPS steps after one */
static per_step time_pipeline(ct_pipeline *p, ct_tensor *x, ct_tensor *y, int m, ct_pipe_schedule k,
                              int steps)
{
    double t0 = 0, c0 = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1) {
            t0 = now_s();
            c0 = cpu_s();
        }
        if (ct_pipeline_forward_backward(p, x, y, mean_ce, NULL, m, k, NULL) < 0) {
            fprintf(stderr, "pipeline_bench: %s\n", ct_last_error());
            exit(1);
        }
    }
    return (per_step){(now_s() - t0) / steps, (cpu_s() - c0) / steps};
}

/* seconds per step of the whole model on this thread */
static per_step time_whole(ct_module *s0, ct_module *s1, ct_tensor *x, ct_tensor *y, int steps)
{
    double t0 = 0, c0 = 0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1) {
            t0 = now_s();
            c0 = cpu_s();
        }
        ct_tensor *h = ct_module_forward(s0, x);
        ct_tensor *o = h ? ct_module_forward(s1, h) : NULL;
        ct_tensor *l = o ? mean_ce(o, y, NULL) : NULL;
        if (!l || ct_tensor_backward(l, NULL) < 0) {
            fprintf(stderr, "pipeline_bench: %s\n", ct_last_error());
            exit(1);
        }
        ct_tensor_release(&l);
        ct_tensor_release(&o);
        ct_tensor_release(&h);
    }
    return (per_step){(now_s() - t0) / steps, (cpu_s() - c0) / steps};
}

static void row(const char *name, int64_t n, per_step t, const char *note)
{
    printf("%-12s %8.1f samples/s (%.1f ms/step, CPU %.1f ms/step%s)\n", name, (double)n / t.wall,
           1e3 * t.wall, 1e3 * t.cpu, note);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 10, m = argc > 2 ? atoi(argv[2]) : 8;
    int64_t n = argc > 3 ? atoll(argv[3]) : 256, w = argc > 4 ? atoll(argv[4]) : 1024;
    int layers = argc > 5 ? atoi(argv[5]) : 8;
    if (steps < 1 || m < 1 || n < m || w < 1 || layers < 2 || layers > 60) {
        fprintf(stderr, "usage: pipeline_bench [STEPS [M [N [W [LAYERS]]]]]\n");
        return 2;
    }
    const int S = 2;
    ct_nn_manual_seed(1);
    ct_module *st[2] = {stage_new(w, layers / 2, false), stage_new(w, layers - layers / 2, true)};
    ct_device dev[2] = {CT_CPU, CT_CPU};
    ct_pipeline *p = st[0] && st[1] ? ct_pipeline_new(st, dev, S) : NULL;
    if (!p || ct_pipeline_use_threads(p, 1) < 0) {
        fprintf(stderr, "pipeline_bench: %s\n", ct_last_error());
        return 1;
    }
    int64_t xs[2] = {n, w}, ys[1] = {n};
    ct_tensor *x = ct_tensor_new(CT_F32, 2, xs), *y = ct_tensor_new(CT_I64, 1, ys);
    float *hx = malloc((size_t)(n * w) * sizeof(float));
    int64_t *hy = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n * w; i++)
        hx[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (int64_t i = 0; i < n; i++)
        hy[i] = (i * 7) % 10;
    ct_tensor_copy_from(x, hx, (size_t)(n * w) * sizeof(float));
    ct_tensor_copy_from(y, hy, (size_t)n * sizeof(int64_t));

    per_step t1f1b = time_pipeline(p, x, y, m, CT_PIPE_1F1B, steps);
    per_step tgpipe = time_pipeline(p, x, y, m, CT_PIPE_GPIPE, steps);
    per_step tflat = time_pipeline(p, x, y, 1, CT_PIPE_1F1B, steps);
    ct_nn_set_threads(1); /* the micro-batches' own cost: M = 8, both stages on this thread */
    ct_pipeline_use_threads(p, 0);
    per_step tserial = time_pipeline(p, x, y, m, CT_PIPE_1F1B, steps);
    per_step tone = time_whole(st[0], st[1], x, y, steps);
    ct_nn_set_threads(2);
    per_step twhole = time_whole(st[0], st[1], x, y, steps);

    double ideal = (double)(S - 1) / (double)(m + S - 1);
    double measured = 1.0 - (tflat.wall / S) / t1f1b.wall;
    double load[1] = {0};
    getloadavg(load, 1);
    printf("pipeline_bench: %d stages x 1 thread, M=%d, batch %lld, %d x Linear(%lld) + ReLU, "
           "%d steps, load average %.1f on %ld cores\n",
           S, m, (long long)n, layers, (long long)w, steps, load[0], sysconf(_SC_NPROCESSORS_ONLN));
    row("1f1b:", n, t1f1b, "");
    row("gpipe:", n, tgpipe, "");
    row("unpipelined:", n, tflat, "");
    row("2 threads:", n, twhole, ", one process, no pipeline");
    row("1 thread:", n, tserial,
        ", the M micro-batches' stages one after another on one thread: what micro-batches cost "
        "without overlap");
    row("1 thread M=1:", n, tone, ", the whole batch through both stages on one thread");
    printf("micro-batches' CPU time per sample against the whole batch's (1 thread): %.2f\n",
           tserial.cpu / tone.cpu);
    printf("bubble: ideal (S-1)/(M+S-1) = %.3f, measured 1 - (t_unpipelined/S)/t_1f1b = %.3f\n",
           ideal, measured);
    printf("CPU time per step, 1f1b against unpipelined: %.2f (what overlap cannot hide: on "
           "shared, loaded cores the wall-time ratio below says little)\n",
           t1f1b.cpu / tflat.cpu);
    printf("pipeline: ct=%.1f ref=%.1f samples/s ratio=%.2f\n", (double)n / t1f1b.wall,
           (double)n / tflat.wall, tflat.wall / t1f1b.wall);
    free(hx);
    free(hy);
    ct_tensor_release(&x);
    ct_tensor_release(&y);
    ct_pipeline_destroy(&p);
    ct_module_destroy(&st[0]);
    ct_module_destroy(&st[1]);
    return 0;
}
