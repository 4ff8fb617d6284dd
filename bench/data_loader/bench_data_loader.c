/* bench/data_loader/bench_data_loader.c — samples/s of ct's loader on Fashion-MNIST train:
 * batch 64, shuffled, normalised (mean 0.2860, std 0.3530), a consumer that reads every batch.
 * Prints "ct_loader prefetch=P samples_per_s=X" for prefetch 0 (one thread, like torch's
 * num_workers=0) and for prefetch 4 (a background thread). Not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "ct/data.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int epochs = argc > 1 ? atoi(argv[1]) : 5;
    ct_dataset *ds = NULL;
    double t0 = now_s();
    if (ct_dataset_open_mnist(NULL, true, &ds) < 0) {
        fprintf(stderr, "bench_data_loader: %s\n", ct_last_error());
        return 1;
    }
    printf("ct_open seconds=%.3f samples=%lld\n", now_s() - t0, (long long)ct_dataset_length(ds));
    const float mean = 0.2860f, stdv = 0.3530f;
    const int pfs[2] = {0, 4};
    for (int p = 0; p < 2; p++) {
        ct_loader *ld = NULL;
        ct_loader_opts o = {.batch_size = 64,
                            .shuffle = true,
                            .seed = 1,
                            .prefetch = pfs[p],
                            .transform = {.mean = &mean, .std = &stdv}};
        if (ct_loader_new(ds, &o, &ld) < 0) {
            fprintf(stderr, "bench_data_loader: %s\n", ct_last_error());
            return 1;
        }
        double best = 0, sink = 0;
        for (int e = 0; e < epochs; e++) {
            ct_loader_set_epoch(ld, e);
            ct_batch b;
            long long n = 0;
            double t = now_s();
            while (ct_loader_next(ld, &b) > 0) {
                n += b.n;
                sink += b.x[0] + b.x[b.n * 784 - 1] + (double)b.y[b.n - 1];
            }
            double sps = (double)n / (now_s() - t);
            if (sps > best)
                best = sps;
        }
        printf("ct_loader prefetch=%d samples_per_s=%.0f (best of %d epochs; sink %g)\n", pfs[p],
               best, epochs, sink);
        ct_loader_destroy(&ld);
    }
    ct_dataset_destroy(&ds);
    return 0;
}
