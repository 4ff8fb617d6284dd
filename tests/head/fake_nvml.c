/* tests/head/fake_nvml.c — a stand-in libnvidia-ml.so.1 for head_prometheus_nodes, on machines
 * without an NVIDIA driver: the six NVML functions actor/gpu_detect.c resolves with dlsym, with
 * nvml.h's signatures as gpu_detect.c declares them, answering for 2 GPUs with fixed numbers:
 * each 80 GiB, GPU i using i GiB + 123 bytes; GPU 0 42 % busy, GPU 1 not reporting its
 * utilisation (NVML_ERROR_NOT_SUPPORTED, 3). It checks what ct-node does with NVML's answers
 * (sampling, the heartbeat, the head's metrics), not that the declarations match the real
 * library's ABI: only a machine with the driver shows that. Not linked into anything: ct-node
 * finds it by LD_LIBRARY_PATH. */
#include <stdint.h>

typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct nvml_utilization {
    unsigned int gpu, memory;
} nvml_utilization;

int nvmlInit_v2(void)
{
    return 0;
}

int nvmlShutdown(void)
{
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *count)
{
    *count = 2;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device)
{
    if (index >= 2)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *device = (void *)(uintptr_t)(index + 1);
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *device, nvml_memory *m)
{
    unsigned long long i = (uintptr_t)device - 1;
    m->total = 80ull << 30;
    m->used = (i << 30) + 123;
    m->free = m->total - m->used;
    return 0;
}

int nvmlDeviceGetUtilizationRates(void *device, nvml_utilization *u)
{
    if ((uintptr_t)device != 1)
        return 3; /* NVML_ERROR_NOT_SUPPORTED */
    u->gpu = 42;
    u->memory = 7;
    return 0;
}
