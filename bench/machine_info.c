/* bench/machine_info.c — the one line every benchmark prints before its results, so a figure can
 * be read against the machine it was taken on:
 *   machine: cpu="<model name>" onednn_isa=<isa> cores=<n> memcpy=<x> GB/s
 * cpu: /proc/cpuinfo's first "model name". onednn_isa: what oneDNN will use in this process
 * (dnnl_get_effective_cpu_isa, so ONEDNN_MAX_CPU_ISA=AVX2 shows avx2). cores: the CPUs this
 * process may run on (its affinity, as nproc counts). memcpy: a 256 MiB memcpy between two
 * buffers whose pages are already faulted in, best of 5, measured now.
 * Not a benchmark of anything in ct; scripts/run-bench.sh runs it before each bench/NAME/run.sh.
 * Exits 1 (and prints nothing) if the buffers cannot be allocated. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Writes the first "model name" of /proc/cpuinfo into out ("unknown" if there is none). */
static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon)
            continue;
        char *v = colon + 1 + strspn(colon + 1, " \t");
        v[strcspn(v, "\n")] = 0;
        snprintf(out, cap, "%s", v);
        break;
    }
    fclose(f);
}

/* oneDNN's names for its ISAs, those that oneDNN 2 and 3 both define. */
static const struct {
    dnnl_cpu_isa_t isa;
    const char *name;
} isas[] = {
    {dnnl_cpu_isa_sse41, "sse41"},
    {dnnl_cpu_isa_avx, "avx"},
    {dnnl_cpu_isa_avx2, "avx2"},
    {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
    {dnnl_cpu_isa_avx512_core, "avx512_core"},
    {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
    {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
    {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
};

/* Best memcpy bandwidth in GB/s (1e9 bytes/s copied) over 5 copies of 256 MiB; -1 on ENOMEM. */
static double memcpy_gbs(void)
{
    const size_t bytes = (size_t)256 << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    double best = -1;
    if (!src || !dst)
        goto out;
    memset(src, 1, bytes); /* fault every page in before timing */
    memset(dst, 2, bytes);
    for (int i = 0; i < 5; i++) {
        double t0 = now_s();
        memcpy(dst, src, bytes);
        double dt = now_s() - t0;
        src[i] = dst[bytes - 1 - (size_t)i]; /* keep each copy observable */
        if (best < 0 || bytes / dt / 1e9 > best)
            best = bytes / dt / 1e9;
    }
out:
    free(src);
    free(dst);
    return best;
}

int main(void)
{
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    double gbs = memcpy_gbs();
    if (gbs < 0) {
        fprintf(stderr, "machine_info: out of memory for the memcpy buffers\n");
        return 1;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    char name[32];
    snprintf(name, sizeof name, "0x%x", (unsigned)isa); /* an ISA newer than the table */
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
        if (isas[i].isa == isa)
            snprintf(name, sizeof name, "%s", isas[i].name);
    printf("machine: cpu=\"%s\" onednn_isa=%s cores=%d memcpy=%.1f GB/s\n", cpu, name, cores, gbs);
    return 0;
}
