/* trainer/cudaemu/kernel.h — CUDA's device built-ins for the CUDA emulator, so that the kernels of
 * trainer/cuda/ (.cu files) compile as C++ for the host and run on the CPU. CMake force-includes it
 * into each .cu file compiled for the emulator (trainer/cudaemu/CMakeLists.txt), after rewriting
 * each launch `k<<<grid, block, shared, stream>>>(args)` into `CT_EMU_LAUNCH((k), grid, block,
 * shared, stream)(args)`.
 *
 * What it gives: the qualifiers (__global__, __device__, __shared__ ...) as host C++; threadIdx,
 * blockIdx, blockDim and gridDim of the thread that runs; __syncthreads, __syncwarp, the warp
 * shuffles and votes as barriers of the block's threads, which run in lock step (emu.cc: a fibre a
 * thread, switched at each barrier); float/int bit casts; %globaltimer. A barrier that not every
 * thread it names reaches, a shuffle from a lane outside its mask and a bad launch configuration
 * fail the launch with a message (cudaGetLastError). Shared memory is per host thread and
 * reused by the next block: a kernel that reads shared memory it did not write this block reads
 * the last block's values, as a GPU may.
 *
 * Not here: the memory model (every access is at once visible, nothing is reordered), timing,
 * occupancy and resource limits (registers, shared memory size), and library calls (cuBLASLt,
 * cuDNN, NCCL). */
#ifndef CT_CUDAEMU_KERNEL_H
#define CT_CUDAEMU_KERNEL_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>

/* what trainer/cuda/cuda_internal.h takes for device code, as it takes __CUDACC__ */
#define CT_EMU_DEVICE_CODE 1

/* CUDA's math classification functions are global in device code */
using std::isfinite;
using std::isinf;
using std::isnan;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
/* one copy per host thread; the block's fibres, which run on it, share it */
#define __shared__ static thread_local

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace ct_emu
{

/* the running thread's indices, and its launch's shape (set by emu.cc at each switch) */
extern thread_local uint3 thread_idx, block_idx;
extern thread_local dim3 block_dim, grid_dim;

/* the warp operations: every lane of mask waits until all of them arrive; then a lane's result
 * is the value of lane src (SHFL) or the mask of lanes whose value is not 0 (BALLOT) */
enum warp_op { WARP_SYNC, WARP_SHFL, WARP_BALLOT, WARP_FN };
uint64_t warp_collective(warp_op op, unsigned mask, uint64_t value, int src);
/* A warp-wide instruction (mma.sync, ldmatrix...): every lane of mask gives in and out (its
 * registers, on its own stack) and waits; when all have arrived, fn runs once with every lane's
 * (NULL for lanes outside mask) and writes each lane's out; then they go on. */
typedef void (*warp_fn)(void *const in[32], void *const out[32]);
void warp_compute(unsigned mask, const void *in, void *out, warp_fn fn);
/* all threads of the block wait until all of them arrive */
void block_barrier(void);
uint64_t globaltimer_ns(void);

/* the caller's lane: its linear index in the block, modulo 32 */
static inline int lane_id(void)
{
    unsigned linear = thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z);
    return (int)(linear % 32);
}

template <typename T> static inline T shuffle(unsigned mask, T v, int src)
{
    static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    bits = warp_collective(WARP_SHFL, mask, bits, src);
    T out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

/* a launch: the kernel, its name, its shape; () runs it with the arguments converted to the
 * kernel's parameter types, each thread with its own copy, as on the GPU */
struct kernel_job {
    virtual void run() = 0;
};
void launch(const char *name, dim3 grid, dim3 block, size_t shared, cudaStream_t s,
            kernel_job *job);

template <typename... P> struct launcher {
    void (*kernel)(P...);
    const char *name;
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    /* the parameters by value, so that a call converts its arguments as a kernel call does (NULL
     * becomes a pointer) */
    void operator()(typename std::decay<P>::type... a) const
    {
        struct job : kernel_job {
            void (*kernel)(P...);
            std::tuple<typename std::decay<P>::type...> args;
            job(void (*k)(P...), std::tuple<typename std::decay<P>::type...> t) : kernel(k), args(t)
            {
            }
            void run() override
            {
                std::tuple<typename std::decay<P>::type...> mine = args;
                std::apply(kernel, mine);
            }
        } j(kernel, std::make_tuple(a...));
        launch(name, grid, block, shared, stream, &j);
    }
};

template <typename... P>
launcher<P...> configure(void (*k)(P...), const char *name, dim3 grid, dim3 block,
                         size_t shared = 0, cudaStream_t s = 0)
{
    return launcher<P...>{k, name, grid, block, shared, s};
}

} // namespace ct_emu

#define CT_EMU_LAUNCH(k, ...) ct_emu::configure(k, #k, __VA_ARGS__)

#define threadIdx (ct_emu::thread_idx)
#define blockIdx (ct_emu::block_idx)
#define blockDim (ct_emu::block_dim)
#define gridDim (ct_emu::grid_dim)
#define warpSize 32

static inline void __syncthreads(void)
{
    ct_emu::block_barrier();
}
static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    ct_emu::warp_collective(ct_emu::WARP_SYNC, mask, 0, 0);
}
static inline unsigned __ballot_sync(unsigned mask, int pred)
{
    return (unsigned)ct_emu::warp_collective(ct_emu::WARP_BALLOT, mask, pred != 0, 0);
}
static inline int __any_sync(unsigned mask, int pred)
{
    return __ballot_sync(mask, pred) != 0;
}
static inline int __all_sync(unsigned mask, int pred)
{
    return __ballot_sync(mask, pred) == mask;
}

/* the source lane of each shuffle, by CUDA's rules for a width of 32 or a power of 2 below it:
 * a lane outside the caller's segment gives the caller its own value */
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    int lane = ct_emu::lane_id(), base = lane / width * width;
    return ct_emu::shuffle(mask, v, base + (src % width + width) % width);
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
    int lane = ct_emu::lane_id(), src = lane ^ m;
    return ct_emu::shuffle(mask, v, src / width > lane / width || src > 31 ? lane : src);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int lane = ct_emu::lane_id(), src = lane + (int)delta;
    return ct_emu::shuffle(mask, v, src / width != lane / width || src > 31 ? lane : src);
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int lane = ct_emu::lane_id(), src = lane - (int)delta;
    return ct_emu::shuffle(mask, v, src < lane / width * width ? lane : src);
}

/* the bits of a value as another type of the same size */
template <typename To, typename From> static inline To ct_emu_bits(From v)
{
    static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
    To out;
    std::memcpy(&out, &v, sizeof out);
    return out;
}
static inline float __int_as_float(int i)
{
    return ct_emu_bits<float>(i);
}
static inline int __float_as_int(float f)
{
    return ct_emu_bits<int>(f);
}
static inline float __uint_as_float(unsigned i)
{
    return ct_emu_bits<float>(i);
}
static inline unsigned __float_as_uint(float f)
{
    return ct_emu_bits<unsigned>(f);
}
template <typename T> static inline T __ldg(const T *p)
{
    return *p;
}

#endif
