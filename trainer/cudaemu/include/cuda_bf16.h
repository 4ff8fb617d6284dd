/* trainer/cudaemu/include/cuda_bf16.h — the CUDA emulator's __nv_bfloat16: the upper 16 bits of
 * an f32, and the conversions ct's kernels use. __float2bfloat16_rn rounds to nearest, ties to
 * even, through double arithmetic (an f32's value rounded at bit 16 of its significand), not
 * through the bit trick of trainer/backend/lowp.h, so the two check each other; NaN gives the
 * canonical quiet NaN 0x7fff, as the GPU's cvt.rn.bf16.f32 does. C++ only. */
#ifndef CT_CUDAEMU_BF16_H
#define CT_CUDAEMU_BF16_H

#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
    uint16_t bits;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    __nv_bfloat16 out;
    if (std::isnan(f)) {
        out.bits = 0x7fff;
        return out;
    }
    /* the spacing of bf16 values at f's binade: 2^(e - 7), e f's exponent (subnormals: 2^-133) */
    double d = f, a = std::fabs(d);
    int e;
    std::frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    double ulp = a == 0.0 ? 0.0 : std::ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 7);
    double r = ulp == 0.0 ? a : std::nearbyint(a / ulp) * ulp; /* ties to even: the FE default */
    float rf = r > 0x1.fep127 ? INFINITY : (float)r; /* past bf16's largest value: infinity */
    rf = std::copysign(rf, f);
    uint32_t u;
    std::memcpy(&u, &rf, sizeof u);
    out.bits = (uint16_t)(u >> 16);
    return out;
}

static inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

#endif
