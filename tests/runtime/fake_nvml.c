/* tests/runtime/fake_nvml.c — a stand-in libnvidia-ml.so.1 for test_gpu_detect: the three NVML
 * functions ct-node's gpu_detect.c calls, answering what the test's environment says, so that
 * the dlopen path is tested on machines without a GPU (and gives the same answers on one).
 *   CT_TEST_NVML_INIT_RC  what nvmlInit_v2 returns (default 0, NVML_SUCCESS)
 *   CT_TEST_NVML_COUNT    the GPU count nvmlDeviceGetCount_v2 reports (default 0)
 *   CT_TEST_NVML_LOG      a file each call appends its name to, one line each
 * Not a model of NVML: nothing else is exported. */
#include <stdio.h>
#include <stdlib.h>

static void note(const char *call)
{
    const char *path = getenv("CT_TEST_NVML_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        fprintf(f, "%s\n", call);
        fclose(f);
    }
}

int nvmlInit_v2(void)
{
    note("init");
    const char *rc = getenv("CT_TEST_NVML_INIT_RC");
    return rc ? atoi(rc) : 0;
}

int nvmlDeviceGetCount_v2(unsigned int *count)
{
    note("count");
    const char *n = getenv("CT_TEST_NVML_COUNT");
    *count = n ? (unsigned)atoi(n) : 0;
    return 0;
}

int nvmlShutdown(void)
{
    note("shutdown");
    return 0;
}
