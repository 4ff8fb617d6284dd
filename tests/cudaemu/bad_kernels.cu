/* tests/cudaemu/bad_kernels.cu — kernels for test_emulator.c: a block reduction the emulator must
 * run right (shared memory, __syncthreads, shuffles, a vote), and kernels with the bugs it must
 * catch: a shuffle that an exited lane misses, __syncthreads that an exited thread misses, a
 * shuffle from a lane outside the mask. Compiled only for the CUDA emulator. */
#include <stdint.h>

/* out[b] = the sum of x over block b's 128 values; ballot[b] = the vote of lanes whose x > 0 in
 * the block's first warp */
static __global__ void block_sum_kernel(const float *x, float *out, unsigned *ballot)
{
    __shared__ float warp_sums[4];
    float v = x[blockIdx.x * 128 + threadIdx.x];
    unsigned vote = __ballot_sync(0xffffffffu, v > 0.0f);
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0)
        warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        out[blockIdx.x] = warp_sums[0] + warp_sums[1] + warp_sums[2] + warp_sums[3];
        ballot[blockIdx.x] = vote;
    }
}

/* lane 31 returns before the warp's shuffle */
static __global__ void exited_lane_kernel(float *x)
{
    if (threadIdx.x == 31)
        return;
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}

/* thread 5 returns before the block's barrier */
static __global__ void exited_thread_kernel(float *x)
{
    if (threadIdx.x == 5)
        return;
    x[threadIdx.x] += 1.0f;
    __syncthreads();
}

/* lanes 0-15 shuffle among themselves but read lane 16 */
static __global__ void outside_mask_kernel(float *x)
{
    if (threadIdx.x < 16)
        x[threadIdx.x] = __shfl_sync(0x0000ffffu, x[threadIdx.x], 16);
}

/* a warp-wide instruction of the emulator's (ct_emu::warp_compute): each lane gets the value of
 * lane 31 - lane, plus the sum of all */
static void reverse_and_sum(void *const in[32], void *const out[32])
{
    float sum = 0;
    for (int l = 0; l < 32; l++)
        sum += *(const float *)in[l];
    for (int l = 0; l < 32; l++)
        *(float *)out[l] = *(const float *)in[31 - l] + sum;
}

static __global__ void warp_fn_kernel(float *x)
{
    float mine = x[threadIdx.x], got;
    ct_emu::warp_compute(0xffffffffu, &mine, &got, reverse_and_sum);
    x[threadIdx.x] = got;
}

static int status(void)
{
    return (int)cudaGetLastError();
}

extern "C" int emu_block_sum(const float *x, int blocks, float *out, unsigned *ballot)
{
    block_sum_kernel<<<blocks, 128>>>(x, out, ballot);
    return status();
}
extern "C" int emu_exited_lane(float *x)
{
    exited_lane_kernel<<<1, 32>>>(x);
    return status();
}
extern "C" int emu_exited_thread(float *x)
{
    exited_thread_kernel<<<2, 64>>>(x);
    return status();
}
extern "C" int emu_outside_mask(float *x)
{
    outside_mask_kernel<<<1, 32>>>(x);
    return status();
}
extern "C" int emu_no_blocks(float *x)
{
    exited_lane_kernel<<<0, 32>>>(x);
    return status();
}
extern "C" int emu_warp_fn(float *x)
{
    warp_fn_kernel<<<1, 32>>>(x);
    return status();
}
extern "C" const char *emu_error_string(int e)
{
    return cudaGetErrorString((cudaError_t)e);
}
