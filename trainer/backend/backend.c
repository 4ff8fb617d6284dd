/* trainer/backend/backend.c — the one place a device's table is chosen (backend.h). */
#include "common/common.h"
#include "trainer/backend/backend.h"

#ifdef CT_HAVE_CUDA
/* Weak: only a program linked with ct_cuda's table (ct_link_cuda in CMake: the GPU tests,
 * bench/gpu_train, libct.so) has it. The others do not load cuBLASLt and cuDNN, which cost
 * about 0.1 s at every process start (measured: an empty program linked with them). */
extern const ct__backend ct__backend_cuda __attribute__((weak));

/* the CUDA table, where a device can be used; decided once */
static const ct__backend *cuda_backend(void)
{
    static int usable = -1;
    static const char *why;
    if (!&ct__backend_cuda) {
        ct__error(CT_ENOSYS, "device cuda: this program was linked without ct's CUDA backend "
                             "(libct.so has it; a program of ct's build links ct_cuda with "
                             "ct_link_cuda)");
        return NULL;
    }
    if (usable < 0) {
        int ndev = ct__backend_cuda.devices(&why);
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

int ct__backend_linked(ct_device device)
{
    if (device != CT_CUDA)
        return ct__backend_of(device) ? 0 : CT_ENOSYS;
#ifdef CT_HAVE_CUDA
    if (&ct__backend_cuda)
        return 0;
    return ct__error(CT_ENOSYS, "device cuda: this program was linked without ct's CUDA backend "
                                "(libct.so has it; a program of ct's build links ct_cuda with "
                                "ct_link_cuda)");
#else
    return ct__error(CT_ENOSYS, "device cuda: this build of ct has no CUDA (CMake found none)");
#endif
}
