/* tests/cuda/check.h — what the CUDA tests share: a failure count and CHECK that counts and goes
 * on, deterministic random inputs, a blocking download, and the exit 77 where no GPU can be
 * used. Header-only, test code only; each test defines its own CHECK_RC with CHECK_RC_OR
 * (where it goes on a failed call); attention's parameters of a packed qkv tensor. */
#ifndef CT_TESTS_CUDA_CHECK_H
#define CT_TESTS_CUDA_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "ct/error.h"
#include "trainer/cuda/cuda.h"

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Prints and counts a failed call (rc != 0); true when it failed. CHECK_RC_OR(expr, then) runs
 * `then` (return; goto out) after a failure: each test defines its CHECK_RC with it. */
__attribute__((unused)) static bool failed_rc(int rc, const char *expr, const char *file, int line)
{
    if (rc == 0)
        return false;
    fprintf(stderr, "%s:%d: %s = %d (%s): %s\n", file, line, expr, rc, ct_strerror(rc),
            ct_last_error());
    failures++;
    return true;
}
#define CHECK_RC_OR(expr, then)                                                                    \
    do {                                                                                           \
        if (failed_rc((expr), #expr, __FILE__, __LINE__))                                          \
            then;                                                                                  \
    } while (0)

/* x[0..n) = deterministic values in [lo, hi) (an LCG) */
__attribute__((unused)) static void fill_random(float *x, int64_t n, uint32_t seed, float lo,
                                                float hi)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * ((float)(seed >> 8) / (float)(1u << 24));
    }
}

/* h[0..n) = the device's d[0..n), when every queued copy is done */
__attribute__((unused)) static int download(float *h, const float *d, int64_t n)
{
    int rc = ct__cuda_to_host(h, d, (size_t)n * sizeof(float), NULL);
    return rc ? rc : ct__cuda_sync(NULL);
}

/* attention's parameters for q, k, v as thirds of one (batch, t, 3 heads hs) tensor, heads read
 * in place, the output (batch, t, heads hs) */
__attribute__((unused)) static ct__attn_p packed_attn(int64_t batch, int64_t heads, int64_t t,
                                                      int64_t hs, bool causal, float dropout,
                                                      uint64_t seed, int dt)
{
    int64_t c = heads * hs;
    return (ct__attn_p){.bh = batch * heads,
                        .t = t,
                        .hs = hs,
                        .heads = heads,
                        .in_rs = 3 * c,
                        .out_rs = c,
                        .scale = 1.0f / sqrtf((float)hs),
                        .dropout = dropout,
                        .causal = causal,
                        .seed = seed,
                        .dt = dt};
}

/* true (after printing "no GPU: why") where no CUDA device can be used: main returns 77 */
__attribute__((unused)) static bool no_gpu(void)
{
    const char *why = NULL;
    if (ct__cuda_device_count(&why) > 0)
        return false;
    printf("no GPU: %s\n", why ? why : "");
    return true;
}

#endif
