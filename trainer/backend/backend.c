/* trainer/backend/backend.c — the one place a device's table is chosen (backend.h). */
#include "common/common.h"
#include "trainer/backend/backend.h"
#ifdef CT_HAVE_CUDA
#include "trainer/cuda/cuda.h"
#endif

const char *ct__device_name(ct_device device)
{
    switch (device) {
    case CT_CPU:
        return "cpu";
    case CT_CUDA:
        return "cuda";
    case CT_CHECKDEV:
        return "checkdev";
    }
    return "unknown device";
}

#ifdef CT_HAVE_CUDA
/* the CUDA table, where a device can be used; decided once */
static const ct__backend *cuda_backend(void)
{
    static int usable = -1;
    static const char *why;
    if (usable < 0) {
        int ndev = ct__cuda_device_count(&why);
        usable = ndev > 0;
    }
    if (!usable) {
        ct__error(CT_ENOSYS, "device cuda: %s", why ? why : "no CUDA device");
        return NULL;
    }
    return &ct__backend_cuda;
}
#endif

const ct__backend *ct__backend_of(ct_device device)
{
    switch (device) {
    case CT_CPU:
        return &ct__backend_cpu;
    case CT_CHECKDEV:
#ifdef CT_HAVE_CHECKDEV
        return &ct__backend_checkdev;
#else
        ct__error(CT_ENOSYS, "device checkdev: not in this build");
        return NULL;
#endif
    case CT_CUDA:
#ifdef CT_HAVE_CUDA
        return cuda_backend();
#else
        ct__error(CT_ENOSYS, "device cuda: this build of ct has no CUDA (CMake found none)");
        return NULL;
#endif
    }
    ct__error(CT_EINVAL, "device %d unknown", (int)device);
    return NULL;
}
