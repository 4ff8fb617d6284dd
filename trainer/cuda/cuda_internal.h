/* trainer/cuda/cuda_internal.h — what the CUDA backend's own files share: error reporting of a
 * CUDA runtime call, and the launch shape of elementwise kernels. Included by .c and .cu. */
#ifndef CT_CUDA_INTERNAL_H
#define CT_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "trainer/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when e is cudaSuccess; else CT_ENOMEM (out of memory) or CT_ECUDA with "what: CUDA's
 * message". */
int ct__cuda_status(cudaError_t e, const char *what);

#ifdef __cplusplus
}
#endif

/* Elementwise kernels: 256 threads a block, each thread a grid-stride loop, at most 4096
 * blocks (enough to fill an H100's 132 SMs many times over). */
enum { CT_CUDA_THREADS = 256, CT_CUDA_MAX_BLOCKS = 4096 };
static inline unsigned ct__cuda_blocks(int64_t n)
{
    const int64_t threads = CT_CUDA_THREADS, max_blocks = CT_CUDA_MAX_BLOCKS;
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > max_blocks ? max_blocks : b);
}

#endif
