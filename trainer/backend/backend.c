/* trainer/backend/backend.c — the one place a device's table is chosen (backend.h). */
#include "common/common.h"
#include "trainer/backend/cudalib.h"
#ifdef CT_HAVE_CHECKDEV
#include "trainer/checkdev/checkdev.h"
#endif

#ifdef CT_HAVE_CUDA
/* Weak, both: a program of ct's build that trains on a GPU links the CUDA code (ct_link_cuda in
 * CMake: the GPU tests, bench/gpu_train); libct.so has the loader instead, and loads
 * libct_cuda.so on first use. The others do not load cudart, cuBLASLt, cuDNN and NCCL, which
 * cost about 0.1 s at every process start and fail where CUDA is not installed. */
extern const ct__cuda_lib ct__cuda_lib_linked __attribute__((weak));
const ct__cuda_lib *ct__cuda_lib_load(void) __attribute__((weak));

const ct__cuda_lib *ct__cuda_lib_get(void)
{
    if (&ct__cuda_lib_linked)
        return &ct__cuda_lib_linked;
    if (ct__cuda_lib_load)
        return ct__cuda_lib_load();
    ct__error(CT_ENOSYS, "device cuda: this program was linked without ct's CUDA backend "
                         "(libct.so loads it from libct_cuda.so; a program of ct's build links "
                         "ct_cuda with ct_link_cuda)");
    return NULL;
}

/* the table of cuda:index, where that device can be used; the device count is read once */
static const ct__backend *cuda_backend(int index)
{
    static int ndev = -1;
    static const char *why;
    const ct__cuda_lib *lib = ct__cuda_lib_get();
    if (!lib)
        return NULL;
    if (ndev < 0)
        ndev = lib->backend->devices(&why);
    if (ndev <= 0) {
        ct__error(CT_ENOSYS, "device cuda: %s", why ? why : "no CUDA device");
        return NULL;
    }
    if (index >= ndev) {
        ct__error(CT_ENOSYS,
                  "device cuda:%d: this process sees %d CUDA device(s) (cuda:0 to "
                  "cuda:%d; CUDA_VISIBLE_DEVICES, gpus_per_replica)",
                  index, ndev, ndev - 1);
        return NULL;
    }
    return index == 0 ? lib->backend : lib->table(index);
}
#else
const ct__cuda_lib *ct__cuda_lib_get(void)
{
    ct__error(CT_ENOSYS, "device cuda: this build of ct has no CUDA (CMake found none)");
    return NULL;
}
#endif

const ct__backend *ct__backend_of(ct_device device)
{
    if (ct_device_check(device) < 0)
        return NULL;
    switch (ct_device_kind(device)) {
    case CT_CPU:
        return &ct__backend_cpu;
    case CT_CHECKDEV:
#ifdef CT_HAVE_CHECKDEV
        return ct__checkdev_table(ct_device_index(device));
#else
        ct__error(CT_ENOSYS, "device checkdev: not in this build");
        return NULL;
#endif
    case CT_CUDA:
#ifdef CT_HAVE_CUDA
        return cuda_backend(ct_device_index(device));
#else
    {
        char name[32];
        ct__error(CT_ENOSYS, "device %s: this build of ct has no CUDA (CMake found none)",
                  ct_device_name(device, name, sizeof name));
        return NULL;
    }
#endif
    }
    ct__error(CT_EINVAL, "device %d unknown", (int)device);
    return NULL;
}

int ct__backend_linked(ct_device device)
{
    if (ct_device_kind(device) != CT_CUDA)
        return ct__backend_of(device) ? 0 : CT_ENOSYS;
    return ct__cuda_lib_get() ? 0 : CT_ENOSYS;
}
