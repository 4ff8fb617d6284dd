/* bench/attention/attention_bench.c — ct's fused causal self-attention (ct_nn_attention_qkv),
 * forward and backward, on one layer of bench/gpt_train's GPT: q, k and v packed in one
 * (B, T, 3C) tensor, n_head heads, no dropout, a random upstream gradient. Each step takes a
 * fresh qkv (as a GPT's c_attn output is: its gradient starts empty), made outside the timing.
 *   attention_bench STEPS THREADS [B T n_head n_embd]
 * Prints `ms=<median of the steps' forward + backward> fwd_ms=<median forward>`. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct/error.h"
#include "ct/nn.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 40, threads = argc > 2 ? atoi(argv[2]) : 1;
    int64_t B = argc > 3 ? atoll(argv[3]) : 16, T = argc > 4 ? atoll(argv[4]) : 128;
    int heads = argc > 5 ? atoi(argv[5]) : 4;
    int64_t C = argc > 6 ? atoll(argv[6]) : 128;
    if (steps < 1 || threads < 1 || B < 1 || T < 1 || heads < 1 || C % heads) {
        fprintf(stderr, "usage: attention_bench STEPS THREADS [B T n_head n_embd]\n");
        return 2;
    }
    ct_nn_set_threads(threads);
    int64_t qs[3] = {B, T, 3 * C}, os[3] = {B, T, C};
    float *data = malloc((size_t)(B * T * 3 * C) * sizeof(float));
    float *grad = malloc((size_t)(B * T * C) * sizeof(float));
    double *all = malloc((size_t)steps * sizeof(double)),
           *fwd = malloc((size_t)steps * sizeof(double));
    if (!data || !grad || !all || !fwd)
        return 1;
    uint64_t s = 88172645463325252ULL;
    for (int64_t i = 0; i < B * T * 3 * C; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        data[i] = (float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
        if (i < B * T * C)
            grad[i] = (float)(s & 0xffffff) / (float)(1 << 24) * 2.0f - 1.0f;
    }
    ct_tensor *g = ct_tensor_from_f32(3, os, grad);
    for (int step = -3; step < steps; step++) { /* 3 warm-up steps */
        ct_tensor *qkv = ct_tensor_from_f32(3, qs, data);
        if (!qkv)
            goto fail;
        ct_tensor_set_requires_grad(qkv, true);
        double t0 = now();
        ct_tensor *y = ct_nn_attention_qkv(qkv, heads, true, 0.0f, true);
        double t1 = now();
        if (!y || ct_tensor_backward(y, g) < 0)
            goto fail;
        double t2 = now();
        if (step >= 0) {
            all[step] = (t2 - t0) * 1e3;
            fwd[step] = (t1 - t0) * 1e3;
        }
        ct_tensor_release(&y);
        ct_tensor_release(&qkv);
    }
    printf("ms=%.3f fwd_ms=%.3f\n", median(all, steps), median(fwd, steps));
    ct_tensor_release(&g);
    free(data);
    free(grad);
    free(all);
    free(fwd);
    return 0;
fail:
    fprintf(stderr, "attention_bench: %s\n", ct_last_error());
    return 1;
}
