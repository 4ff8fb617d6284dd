/* actor/gpu_detect.c — how many NVIDIA GPUs this machine has, asked of NVML, for the resources
 * a node registers when no --gpus is given; and each GPU's memory and utilisation, sampled for
 * the node's metrics (node_stats.c).
 *
 * NVML (libnvidia-ml.so.1) ships with the driver, not with the CUDA toolkit, so it is loaded
 * with dlopen rather than linked: a node on a machine without the driver must still start (and
 * offer 0 GPUs), and neither ct-node nor libct may carry a link-time dependency on a library
 * that only GPU machines have. The functions used are declared here by hand (their documented C
 * signatures), for the same reason: no nvml.h is needed to build.
 *
 * Not in here: the --gpus override and which GPUs an actor sees (node.c). */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include "actor/runtime.h"
#include "common/common.h"

/* nvmlReturn_t is an enum; 0 is NVML_SUCCESS. The _v2 names are the symbols nvml.h maps
 * nvmlInit and nvmlDeviceGetCount to. */
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_count_fn)(unsigned int *count);
typedef int (*nvml_shutdown_fn)(void);

int ct__gpu_count(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        CT_LOG(CT_LOG_INFO, "node", "no NVIDIA driver (%s): offering 0 GPUs",
               why ? why : "dlopen failed");
        return 0;
    }
    unsigned int count = 0;
    int rc = 0;
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    nvml_count_fn get_count = (nvml_count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
    nvml_shutdown_fn fini = (nvml_shutdown_fn)dlsym(lib, "nvmlShutdown");
    if (!init || !get_count || !fini) {
        CT_LOG(CT_LOG_INFO, "node",
               "libnvidia-ml.so.1 lacks the NVML v2 functions: offering 0 GPUs");
        goto out;
    }
    if ((rc = init()) != 0) {
        CT_LOG(CT_LOG_INFO, "node", "nvmlInit_v2 returned %d: offering 0 GPUs", rc);
        goto out;
    }
    if ((rc = get_count(&count)) != 0) {
        CT_LOG(CT_LOG_INFO, "node", "nvmlDeviceGetCount_v2 returned %d: offering 0 GPUs", rc);
        count = 0;
    }
    fini();
out:
    dlclose(lib);
    if (count)
        CT_LOG(CT_LOG_DEBUG, "node", "NVML counts %u GPU(s)", count);
    return (int)count;
}

/* nvmlMemory_t and nvmlUtilization_t, as nvml.h lays them out; nvmlDevice_t is a pointer. */
typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct nvml_utilization {
    unsigned int gpu, memory; /* percent of the last sample period */
} nvml_utilization;
typedef int (*nvml_handle_fn)(unsigned int index, void **device);
typedef int (*nvml_memory_fn)(void *device, nvml_memory *memory);
typedef int (*nvml_util_fn)(void *device, nvml_utilization *util);

struct ct__nvml {
    void *lib;
    nvml_count_fn count;
    nvml_handle_fn handle;
    nvml_memory_fn memory;
    nvml_util_fn util;
    nvml_shutdown_fn fini;
};

ct__nvml *ct__nvml_open(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return NULL;
    ct__nvml *m = calloc(1, sizeof *m);
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    if (m) {
        m->lib = lib;
        m->count = (nvml_count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
        m->handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
        m->memory = (nvml_memory_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
        m->util = (nvml_util_fn)dlsym(lib, "nvmlDeviceGetUtilizationRates");
        m->fini = (nvml_shutdown_fn)dlsym(lib, "nvmlShutdown");
    }
    if (!m || !init || !m->count || !m->handle || !m->memory || !m->util || !m->fini ||
        init() != 0) {
        CT_LOG(CT_LOG_INFO, "node",
               "NVML without the functions it needs or failing to start: "
               "no GPU metrics");
        free(m);
        dlclose(lib);
        return NULL;
    }
    return m;
}

int ct__nvml_sample(ct__nvml *m, ct__gpu_sample *out, int cap)
{
    unsigned int count = 0;
    if (!m || m->count(&count) != 0)
        return 0;
    int k = 0;
    for (unsigned int i = 0; i < count && k < cap; i++) {
        void *dev = NULL;
        nvml_memory mem;
        nvml_utilization u;
        if (m->handle(i, &dev) != 0 || m->memory(dev, &mem) != 0)
            continue;
        out[k] = (ct__gpu_sample){
            .index = i, .memory_used = mem.used, .memory_total = mem.total, .utilization = NAN};
        if (m->util(dev, &u) == 0) /* not every GPU reports it */
            out[k].utilization = u.gpu;
        k++;
    }
    return k;
}

void ct__nvml_close(ct__nvml **m)
{
    if (!m || !*m)
        return;
    (*m)->fini();
    dlclose((*m)->lib);
    free(*m);
    *m = NULL;
}
