/* trainer/cpu/peak.c — this CPU's FP32 peak, the denominator of model FLOPs utilization (MFU,
 * as TorchTitan reports it): the clock of /proc/cpuinfo's first "cpu MHz" times the FP32 FLOPs
 * one core retires a cycle with two FMA units: 64 with AVX-512 (16 lanes), 32 with AVX2 (8),
 * 16 otherwise. AVX-512 counts only when oneDNN may use it (ONEDNN_MAX_CPU_ISA not set to an
 * AVX2 or older level), as the GEMMs then run on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/cpu/cpu.h"

static bool isa_capped_below_avx512(void)
{
    const char *isa = getenv("ONEDNN_MAX_CPU_ISA");
    if (!isa || !*isa)
        return false;
    return strncmp(isa, "AVX512", 6) != 0 && strncmp(isa, "AVX10", 5) != 0 &&
           strcmp(isa, "ALL") != 0 && strncmp(isa, "AMX", 3) != 0;
}

double ct__cpu_peak_flops_per_core(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return 0;
    char line[8192];
    double mhz = 0;
    bool avx512 = false, avx2 = false, fma = false, flags_seen = false;
    while (fgets(line, sizeof line, f)) {
        if (mhz == 0 && !strncmp(line, "cpu MHz", 7)) {
            const char *c = strchr(line, ':');
            mhz = c ? atof(c + 1) : 0;
        } else if (!flags_seen && !strncmp(line, "flags", 5)) {
            flags_seen = true;
            avx512 = strstr(line, " avx512f") != NULL;
            avx2 = strstr(line, " avx2") != NULL;
            fma = strstr(line, " fma") != NULL;
        }
    }
    fclose(f);
    double per_cycle = avx512 && !isa_capped_below_avx512() ? 64 : avx2 && fma ? 32 : 16;
    return mhz * 1e6 * per_cycle;
}
