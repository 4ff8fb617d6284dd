/* trainer/cudaemu/include/cuda_fp16.h — the CUDA emulator's __half: the IEEE binary16 storage
 * type and the conversions ct's kernels use, through GCC's _Float16 (the compiler's IEEE
 * conversion, round-to-nearest-even: not ct's own rounding in trainer/backend/lowp.h, so the two
 * check each other). C++ only. */
#ifndef CT_CUDAEMU_FP16_H
#define CT_CUDAEMU_FP16_H

#include <cstdint>
#include <cstring>

struct __half {
    uint16_t bits;
};

static inline __half __float2half_rn(float f)
{
    _Float16 h = (_Float16)f;
    __half out;
    std::memcpy(&out.bits, &h, sizeof out.bits);
    return out;
}

static inline float __half2float(__half h)
{
    _Float16 v;
    std::memcpy(&v, &h.bits, sizeof v);
    return (float)v;
}

#endif
