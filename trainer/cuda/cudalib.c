/* trainer/cuda/cudalib.c — ct's CUDA code as one unit (ct__cuda_lib in trainer/backend/cudalib.h):
 * the backend table and NCCL's communicator. A program of ct's build links it with ct_link_cuda
 * (ct__cuda_lib_linked); libct_cuda.so exports only ct__cuda_lib_entry, which libct.so looks
 * up after dlopen() (libct/cuda_load.c). Not the loader, and no code of its own. */
#include "common/common.h"
#include "trainer/backend/cudalib.h"
#include "trainer/collective/internal.h"

const ct__cuda_lib ct__cuda_lib_linked = {
    .abi = CT__CUDA_LIB_ABI,
    .backend_size = sizeof(ct__backend),
    .backend = &ct__backend_cuda,
    .nccl = &ct__nccl_table,
    .table = ct__cuda_table,
};

const ct__cuda_lib *ct__cuda_lib_entry(void)
{
    return &ct__cuda_lib_linked;
}
