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

/* Row kernels (layer norm, softmax, attention, cross entropy): a warp per row, its 32 lanes
 * over the row's columns side by side, CT_CUDA_WARPS rows a block: the launch of an elementwise
 * kernel over 32 threads a row, and a grid-stride loop (WARP_ROWS) over the rows past it. Sums
 * over the lanes go through shuffles over fixed lanes: the same bits every run. */
enum { CT_CUDA_WARPS = CT_CUDA_THREADS / 32 };
static inline unsigned ct__cuda_row_blocks(int64_t rows)
{
    return ct__cuda_blocks(rows * 32);
}

/* device code: nvcc's, or the CUDA emulator's host C++ (trainer/cudaemu/kernel.h) */
#if defined(__CUDACC__) || defined(CT_EMU_DEVICE_CODE)
/* i over [0, n): each thread from its global index, a grid apart (ct__cuda_blocks' launch) */
#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* the rows r of the calling warp: warp w of block b takes row b * CT_CUDA_WARPS + w, then one
 * grid further on */
#define WARP_ROWS(r, rows)                                                                         \
    for (int64_t r = blockIdx.x * (int64_t)CT_CUDA_WARPS + threadIdx.x / 32; r < (rows);           \
         r += (int64_t)gridDim.x * CT_CUDA_WARPS)

static __device__ inline float ct__warp_sum(float v)
{
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ inline float ct__warp_max(float v)
{
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#endif

#endif
