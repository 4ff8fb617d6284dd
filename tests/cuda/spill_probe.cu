/* tests/cuda/spill_probe.cu — a kernel that must spill registers, for cuda_spill_is_error: built
 * with ct's CUDA options (ct_cuda_compile_options), its build must fail on ptxas's spill error.
 * __launch_bounds__(1024, 2) caps it at 32 registers a thread (64K registers, 2048 threads an SM),
 * and it keeps 64 loaded floats alive across an unrolled loop that reads each of them several
 * times: ptxas 13.0 spills 576 to 692 bytes (stores) on sm_80 and sm_90. Not part of ct; never
 * linked. */
__global__ void __launch_bounds__(1024, 2) spill_probe(float *out, int n)
{
    float a[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        a[i] = out[i * n + threadIdx.x];
    float s = 0.0f;
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int i = 0; i < 64; i++)
            s += a[i] * a[(i * 7 + r) & 63];
    out[threadIdx.x] = s;
}
