/* trainer/cpu/vecmath.h — float exp and erf the compiler can vectorise (libm's expf and erff
 * are calls, so a loop that uses them runs one element at a time), and CT_CLONES, the ISA
 * clones of a loop. For the CPU kernels of GELU and attention.
 *
 * ct__expf: e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2 (plus rounding) (ln 2 split
 * in two parts so r is exact), e^r by its Taylor polynomial of degree 7 (remainder < 1.1e-8); 2^n
 * built in the exponent bits. Relative error under 1e-7 (about 1 ulp) over [-87, 88]; 0 below -87.3
 * (where floats go subnormal), +inf-free up to 88.3, NaN in NaN out.
 * ct__erff: |x| < 1: x P(x^2), P of degree 5; 1 <= |x| <= 6: 1 - e^(-x^2) t Q(t) with t = 1/|x|,
 * Q of degree 10 (the smooth x erfc(x) e^(x^2)); 1 beyond 6 (erfc(6) = 2e-17). Coefficients
 * fitted here by least squares with relative weights on Chebyshev nodes, reweighted toward the
 * largest error (scripts/fit_vecmath.py, with mpmath for the reference). Error against the
 * exact erf: under 1.2e-7 absolute and 1.7e-7 relative (1.4 ulp) over [-10, 10]. */
#ifndef CT_CPU_VECMATH_H
#define CT_CPU_VECMATH_H

#include <stdint.h>
#include <string.h>

/* One clone per ISA level (x86-64-v4: AVX-512; v3: AVX2 and FMA), picked at load time (glibc
 * ifunc): the binary still runs anywhere. Where a file is compiled with -ffp-contract=off
 * (optim_cpu.c) every clone gives the same bits; elsewhere the v3 and v4 clones contract to FMA,
 * which changes the last bits against the baseline clone (the same on one machine).
 * Not under clang or ASan (no target_clones there). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define CT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CT_CLONES
#endif

static inline __attribute__((always_inline)) float ct__expf(float x)
{
    float xc = x < -87.3f ? -87.3f : x > 88.3f ? 88.3f : x;
    float t = xc * 1.44269504088896341f;
    /* round to nearest (ties to even) by the float adder: 1.5 * 2^23 leaves no fraction bits;
     * a conversion with a sign-dependent half kept GCC from vectorising under -mavx2 */
    float n = (t + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693145751953125f - n * 1.42860682030941723e-06f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.3f ? 0.0f : x != x ? x : p * scale;
}

static inline __attribute__((always_inline)) float ct__erff(float x)
{
    float a = x < 0 ? -x : x, u = a * a;
    float ps = -0.0005624563782475889f;
    ps = ps * u + 0.00491570308804512f;
    ps = ps * u - 0.02670951932668686f;
    ps = ps * u + 0.11280106008052826f;
    ps = ps * u - 0.3761231303215027f;
    ps = ps * u + 1.1283791065216064f;
    float small = a * ps;
    float ac = a < 1.0f ? 1.0f : a > 6.0f ? 6.0f : a, t = 1.0f / ac;
    float pl = -0.005451489239931107f;
    pl = pl * t - 0.015562393702566624f;
    pl = pl * t + 0.24064770340919495f;
    pl = pl * t - 0.8487818241119385f;
    pl = pl * t + 1.563586711883545f;
    pl = pl * t - 1.7111064195632935f;
    pl = pl * t + 1.0452226400375366f;
    pl = pl * t - 0.1415702998638153f;
    pl = pl * t - 0.2620248794555664f;
    pl = pl * t - 0.0016228590393438935f;
    pl = pl * t + 0.5642467141151428f;
    float large = a > 6.0f ? 1.0f : 1.0f - ct__expf(-(ac * ac)) * t * pl;
    float e = a < 1.0f ? small : large;
    return x < 0 ? -e : x == x ? e : x;
}

#endif
