/* tests/cudaemu/mma_kernels.cu — the emulated tensor-core instruction of trainer/cuda/mma.cuh in
 * one warp, for test_mma.c: each lane loads its fragments of A (16, 16), B (16, 8) and C (16, 8)
 * from row-major arrays by the PTX ISA's layout for mma.m16n8k16 (mma.cuh's file comment), runs
 * ct__mma_bf16 or ct__mma_f16 and stores its part of D where that layout says it lies. Compiled
 * only for the CUDA emulator. */
#include <stdint.h>

#include "trainer/cuda/mma.cuh"

template <bool F16> static __device__ uint32_t pack(float lo, float hi)
{
    return F16 ? ct__f16_bits(lo) | ct__f16_bits(hi) << 16 : ct__pack_bf16(lo, hi);
}

template <bool F16>
static __global__ void mma_kernel(const float *A, const float *B, const float *C, float *D)
{
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint32_t a[4] = {pack<F16>(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                     pack<F16>(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                     pack<F16>(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                     pack<F16>(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
    uint32_t b[2] = {pack<F16>(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]),
                     pack<F16>(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g])};
    float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                  C[(g + 8) * 8 + 2 * t + 1]};
    if (F16)
        ct__mma_f16(d, a, b);
    else
        ct__mma_bf16(d, a, b);
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

/* D = A B + C in one warp; 0 or the launch's CUDA error */
extern "C" int emu_mma(int f16, const float *A, const float *B, const float *C, float *D)
{
    if (f16)
        mma_kernel<true><<<1, 32>>>(A, B, C, D);
    else
        mma_kernel<false><<<1, 32>>>(A, B, C, D);
    return (int)cudaGetLastError();
}
