/* trainer/backend/cudalib.h — ct's CUDA code as one unit: the backend table and NCCL's
 * communicator (trainer/cuda/cudalib.c). A program of ct's build links it (ct_link_cuda in
 * CMake); libct.so links none of it and loads it from libct_cuda.so on first use
 * (libct/cuda_load.c), so that libct.so runs where CUDA is not installed. Not the device probe
 * (the table's devices()). */
#ifndef CT_BACKEND_CUDALIB_H
#define CT_BACKEND_CUDALIB_H

#include <stddef.h>

#include "trainer/backend/table.h"

struct ct__nccl_ops; /* trainer/collective/internal.h */

#define CT__CUDA_LIB_ABI 2 /* bumped when ct__cuda_lib or the tables it points to change */
typedef struct ct__cuda_lib {
    int abi;             /* CT__CUDA_LIB_ABI of the build that made it */
    size_t backend_size; /* sizeof(ct__backend) there */
    const ct__backend *backend;
    const struct ct__nccl_ops *nccl;
    /* the table of cuda:index (index 0: backend; NULL past CT_MAX_DEVICE_INDEX) */
    const ct__backend *(*table)(int index);
} ct__cuda_lib;

/* The CUDA code, linked in or loaded once (backend.c); NULL with CT_ENOSYS naming what is
 * missing (ct's CUDA library, or one of CUDA's). Says nothing on whether a device can be used. */
const ct__cuda_lib *ct__cuda_lib_get(void);
/* libct.so's loader (libct/cuda_load.c): dlopen()s libct_cuda.so once. Only libct.so has it. */
const ct__cuda_lib *ct__cuda_lib_load(void);
/* trainer/cuda/backend_cuda.c's tables per device index (ct__cuda_lib.table) */
const ct__backend *ct__cuda_table(int index);
/* libct_cuda.so's one export (trainer/cuda/cudalib.c): its ct__cuda_lib */
const ct__cuda_lib *ct__cuda_lib_entry(void);

#endif
