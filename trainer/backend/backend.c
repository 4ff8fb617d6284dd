/* trainer/backend/backend.c — the one place a device's table is chosen (backend.h): a static
 * table of one lookup per device kind, each giving the table (table.h) of an index of its kind.
 * Nothing registers at run time. */
#include "common/common.h"
#include "trainer/backend/backend.h"
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

static const ct__backend *cpu_backend(int index)
{
    (void)index; /* ct_device_check let only index 0 of the CPU through */
    return &ct__backend_cpu;
}

static const ct__backend *checkdev_backend(int index)
{
#ifdef CT_HAVE_CHECKDEV
    return ct__checkdev_table(index);
#else
    (void)index;
    ct__error(CT_ENOSYS, "device checkdev: not in this build");
    return NULL;
#endif
}

#ifndef CT_HAVE_CUDA
static const ct__backend *cuda_backend(int index)
{
    char name[32];
    ct__error(CT_ENOSYS, "device %s: this build of ct has no CUDA (CMake found none)",
              ct_device_name(ct_device_make(CT_CUDA, index), name, sizeof name));
    return NULL;
}
#endif

/* The table of an index of each device kind, or NULL with a message. */
static const ct__backend *(*const table_of_kind[])(int index) = {
    [CT_CPU] = cpu_backend,
    [CT_CUDA] = cuda_backend,
    [CT_CHECKDEV] = checkdev_backend,
};

const ct__backend *ct__backend_of(ct_device device)
{
    if (ct_device_check(device) < 0)
        return NULL;
    return table_of_kind[ct_device_kind(device)](ct_device_index(device));
}

int ct__backend_linked(ct_device device)
{
    if (ct_device_kind(device) != CT_CUDA)
        return ct__backend_of(device) ? 0 : CT_ENOSYS;
    return ct__cuda_lib_get() ? 0 : CT_ENOSYS;
}
