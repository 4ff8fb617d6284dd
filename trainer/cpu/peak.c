/* trainer/cpu/peak.c — this CPU's FP32 peak, the denominator of model FLOPs utilization (MFU,
 * as TorchTitan reports it), for one core: measured. 12 independent vector FMAs in a loop (the
 * FMA units alone, no memory) at the widest width the GEMMs use: 512 bits with AVX-512 (only
 * when oneDNN may use it: ONEDNN_MAX_CPU_ISA not set to an AVX2 or older level), else 256 with
 * AVX2 and FMA; the best of 12 runs of about a millisecond each, once per process.
 *
 * Why measured: a virtual machine's /proc/cpuinfo gives its nominal clock, not the one its FMA
 * units run at. On the 2-core AMD EPYC of bench/gpt_train "cpu MHz" says 2445 (78 GFLOP/s a
 * core with AVX2) and this loop runs at 99 GFLOP/s (3.1 GHz): an MFU over the nominal clock
 * was about 27% too high. Without AVX2 and FMA (or off x86): that clock times 16 FLOPs a cycle. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/env.h"
#include "trainer/cpu/cpu.h"

static bool isa_capped_below_avx512(void)
{
    const char *isa = ct__env(CT__ENV_ONEDNN_MAX_CPU_ISA);
    if (!isa || !*isa)
        return false;
    return strncmp(isa, "AVX512", 6) != 0 && strncmp(isa, "AVX10", 5) != 0 &&
           strcmp(isa, "ALL") != 0 && strncmp(isa, "AMX", 3) != 0;
}

/* /proc/cpuinfo's first "cpu MHz" x 16: the fallback */
static double nominal(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return 0;
    char line[8192];
    double mhz = 0;
    while (mhz == 0 && fgets(line, sizeof line, f))
        if (!strncmp(line, "cpu MHz", 7)) {
            const char *c = strchr(line, ':');
            mhz = c ? atof(c + 1) : 0;
        }
    fclose(f);
    return mhz * 1e6 * 16;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* clang-format off */
#define FMA(r, i) "vfmadd231ps " r "12, " r "13, " r #i "\n\t"
#define TWELVE(r) FMA(r, 0) FMA(r, 1) FMA(r, 2) FMA(r, 3) FMA(r, 4) FMA(r, 5) \
                  FMA(r, 6) FMA(r, 7) FMA(r, 8) FMA(r, 9) FMA(r, 10) FMA(r, 11)
#define ZERO(x, r, i) x " " r #i ", " r #i ", " r #i "\n\t"
#define ZEROS(x, r) ZERO(x, r, 0) ZERO(x, r, 1) ZERO(x, r, 2) ZERO(x, r, 3) ZERO(x, r, 4)      \
                    ZERO(x, r, 5) ZERO(x, r, 6) ZERO(x, r, 7) ZERO(x, r, 8) ZERO(x, r, 9)      \
                    ZERO(x, r, 10) ZERO(x, r, 11) ZERO(x, r, 12) ZERO(x, r, 13)
/* clang-format on */

/* n rounds of 12 FMAs on 12 registers (no dependence between them: each FMA unit busy every
 * cycle), ymm or zmm, all zero (no denormals). In assembly: a compiler merges chains it can
 * prove equal. */
#define FMA_ROUNDS(name, isa, xor, r)                                                              \
    __attribute__((target(isa))) static void name(long n)                                          \
    {                                                                                              \
        __asm__ volatile(ZEROS(xor, r) "1:\n\t" TWELVE(r) "dec %0\n\tjnz 1b\n\tvzeroupper"         \
                         : "+r"(n)                                                                 \
                         :                                                                         \
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                           "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc");                      \
    }
FMA_ROUNDS(fma_rounds_256, "avx2,fma", "vpxor", "%%ymm")
FMA_ROUNDS(fma_rounds_512, "avx512f", "vpxord", "%%zmm")

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* FLOP/s of the loop at `lanes` floats a vector: the best of 12 runs (a run that lost the core
 * to another process only counts less) */
static double measured(int lanes)
{
    const long rounds = 1 << 18; /* 3 M FMAs: about 1 ms at 3 GHz */
    double best = 0;
    for (int run = 0; run < 12; run++) {
        double t0 = now_s();
        lanes == 16 ? fma_rounds_512(rounds) : fma_rounds_256(rounds);
        double t = now_s() - t0, flops = (double)rounds * 12 * 2 * lanes;
        if (t > 0 && flops / t > best)
            best = flops / t;
    }
    return best;
}
#endif

double ct__cpu_peak_flops_per_core(void)
{
    static double peak = -1; /* measured once: the driver asks at each trainer_train */
    if (peak >= 0)
        return peak;
    peak = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && !isa_capped_below_avx512())
        peak = measured(16);
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        peak = measured(8);
#endif
    if (peak <= 0)
        peak = nominal();
    return peak;
}
