/* trainer/backend/lowp.h — low-precision (autocast) helpers shared by the backends: rounding an
 * f32 to the nearest bf16 or f16 value (round-to-nearest-even, as torch's .to(bfloat16) and
 * .to(float16) do), kept in an f32. The checking device's reference kernels round their
 * operands with these and then run the CPU's f32 kernel; the CPU's oneDNN reorders and the
 * GPU's conversions round the same way, so every backend multiplies the same operands. */
#ifndef CT_BACKEND_LOWP_H
#define CT_BACKEND_LOWP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ct/dtype.h"

/* f rounded to bf16 (8 significant bits): NaN stays NaN, overflow goes to infinity. */
static inline float ct__round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet, never round it to infinity */
        return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f rounded to f16 (11 significant bits, exponent -14..15, subnormals down to 2^-24): values
 * from 65520 up go to infinity, as the IEEE conversion does. */
static inline float ct__round_f16(float f)
{
    if (!isfinite(f))
        return f;
    float a = fabsf(f);
    if (a >= 65520.0f)
        return copysignf(INFINITY, f);
    if (a < 0x1p-14f) { /* f16 subnormal: multiples of 2^-24; the scaling is exact */
        return copysignf(nearbyintf(a * 0x1p24f) * 0x1p-24f, f);
    }
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0xfffu + ((u >> 13) & 1u);
    u &= 0xffffe000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* dst[i] = src[i] rounded to dt (CT_BF16 or CT_F16); dst may be src. */
static inline void ct__round_lp(int dt, int64_t n, const float *src, float *dst)
{
    if (dt == CT_BF16)
        for (int64_t i = 0; i < n; i++)
            dst[i] = ct__round_bf16(src[i]);
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = ct__round_f16(src[i]);
}

#endif
