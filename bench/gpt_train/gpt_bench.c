/* bench/gpt_train/gpt_bench.c — single-process GPT training throughput in ct: nanoGPT's model
 * (ct_nn_gpt_new), AdamW with weight decay 0.1 on every parameter, random byte tokens already
 * in memory, STEPS steps after 3 warm-up steps, THREADS engine threads.
 *   gpt_bench STEPS THREADS [n_layer n_head n_embd block batch]
 *   gpt_bench --peak
 * Prints `tokens_per_s=<x> loss=<y> params=<n> flops_per_token=<f>`: f = 6 N + 12 L T C, the
 * model FLOPs of a token's forward and backward (PaLM's, with N the parameters less the
 * position embedding), from which run.sh computes MFU. --peak prints `peak_flops_per_core=<p>`,
 * the FP32 peak of one core that the trainer's MFU uses (trainer/cpu/peak.c: measured). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct/error.h"
#include "ct/nn.h"
#include "ct/optim.h"

void ct__cpu_set_threads(int n);          /* trainer/cpu/cpu.h (internal) */
double ct__cpu_peak_flops_per_core(void); /* trainer/cpu/cpu.h (internal) */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--peak")) {
        printf("peak_flops_per_core=%.0f\n", ct__cpu_peak_flops_per_core());
        return 0;
    }
    int steps = argc > 1 ? atoi(argv[1]) : 20, threads = argc > 2 ? atoi(argv[2]) : 1;
    ct_gpt_config c = {.n_layer = argc > 3 ? atoi(argv[3]) : 4,
                       .n_head = argc > 4 ? atoi(argv[4]) : 4,
                       .n_embd = argc > 5 ? atoll(argv[5]) : 128,
                       .block_size = argc > 6 ? atoll(argv[6]) : 64,
                       .vocab_size = 256};
    int64_t batch = argc > 7 ? atoll(argv[7]) : 16, T = c.block_size;
    ct__cpu_set_threads(threads);
    ct_nn_manual_seed(0);
    ct_module *m = ct_nn_gpt_new(&c);
    const ct_param_ref *ps;
    int np;
    if (!m || ct_module_params(m, &ps, &np) < 0) {
        fprintf(stderr, "gpt_bench: %s\n", ct_last_error());
        return 1;
    }
    ct_optim *opt = ct_optim_adamw_new(ps, np, &(ct_adam_opts){.lr = 1e-3, .weight_decay = 0.1});
    enum { NB = 8 };
    ct_tensor *x[NB], *y[NB];
    int64_t xs[2] = {batch, T}, ys[1] = {batch * T};
    uint64_t s = 88172645463325252ULL;
    for (int b = 0; b < NB; b++) {
        x[b] = ct_tensor_new(CT_I64, 2, xs);
        y[b] = ct_tensor_new(CT_I64, 1, ys);
        for (int64_t i = 0; i < batch * T; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            ((int64_t *)ct_tensor_data(x[b]))[i] = (int64_t)(s % 256);
            ((int64_t *)ct_tensor_data(y[b]))[i] = (int64_t)((s >> 8) % 256);
        }
    }
    double loss = 0, t0 = 0;
    for (int step = 0; step < steps + 3; step++) {
        if (step == 3)
            t0 = now();
        ct_module_zero_grad(m);
        ct_tensor *logits = ct_module_forward(m, x[step % NB]);
        ct_tensor *l = logits ? ct_nn_cross_entropy(logits, y[step % NB], 0.0f) : NULL;
        if (!l || ct_tensor_backward(l, NULL) < 0 || ct_optim_step(opt) < 0) {
            fprintf(stderr, "gpt_bench: step %d: %s\n", step, ct_last_error());
            return 1;
        }
        loss = ct_tensor_item(l);
        ct_tensor_release(&l);
        ct_tensor_release(&logits);
    }
    double dt = now() - t0;
    int64_t n = ct_module_num_params(m) - c.block_size * c.n_embd;
    double fpt = 6.0 * (double)n + 12.0 * c.n_layer * (double)T * (double)c.n_embd;
    printf("tokens_per_s=%.1f loss=%.4f params=%lld flops_per_token=%.0f\n",
           (double)steps * batch * T / dt, loss, (long long)ct_module_num_params(m), fpt);
    for (int b = 0; b < NB; b++) {
        ct_tensor_release(&x[b]);
        ct_tensor_release(&y[b]);
    }
    ct_optim_destroy(&opt);
    ct_module_destroy(&m);
    return 0;
}
