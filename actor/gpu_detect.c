/* actor/gpu_detect.c — how many NVIDIA GPUs this machine has, asked of NVML, for the resources
 * a node registers when no --gpus is given.
 *
 * NVML (libnvidia-ml.so.1) ships with the driver, not with the CUDA toolkit, so it is loaded
 * with dlopen rather than linked: a node on a machine without the driver must still start (and
 * offer 0 GPUs), and neither ct-node nor libct may carry a link-time dependency on a library
 * that only GPU machines have. The three functions used are declared here by hand (their
 * documented C signatures), for the same reason: no nvml.h is needed to build.
 *
 * Not in here: the --gpus override and which GPUs an actor sees (node.c). */
#include <dlfcn.h>
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
