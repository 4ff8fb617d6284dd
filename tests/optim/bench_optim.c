/* tests/optim/bench_optim.c — times ct_optim_step (SGD+momentum, Adam, AdamW) on one
 * parameter of N floats; prints "kind N us_per_step". Not a test (not registered with ctest);
 * tests/optim/bench_optim.py times PyTorch 1.13 on the same sizes for comparison. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct/optim.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int iters = argc > 2 ? atoi(argv[2]) : 50;
    float *v = malloc((size_t)n * sizeof *v), *g = malloc((size_t)n * sizeof *g);
    for (long i = 0; i < n; i++) {
        v[i] = (float)(i % 17) * 0.01f;
        g[i] = (float)(i % 13) * 0.001f - 0.006f;
    }
    ct_param_ref p = {"p", v, g, n};
    const char *kinds[] = {"sgd_momentum", "adam", "adamw"};
    for (int k = 0; k < 3; k++) {
        ct_optim *o = k == 0 ? ct_optim_sgd_new(&p, 1, &(ct_sgd_opts){.lr = 0.01, .momentum = 0.9})
                      : k == 1 ? ct_optim_adam_new(&p, 1, NULL)
                               : ct_optim_adamw_new(&p, 1, NULL);
        for (int i = 0; i < 3; i++)
            ct_optim_step(o);
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            double t0 = now_s();
            for (int i = 0; i < iters; i++)
                ct_optim_step(o);
            double dt = (now_s() - t0) / iters;
            best = dt < best ? dt : best;
        }
        printf("%s %ld %.1f\n", kinds[k], n, best * 1e6);
        ct_optim_destroy(&o);
    }
    free(v);
    free(g);
    return 0;
}
