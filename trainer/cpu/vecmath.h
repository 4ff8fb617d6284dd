/* trainer/cpu/vecmath.h — float exp and the normal CDF the compiler can vectorise (libm's expf
 * and erff are calls, so a loop that uses them runs one element at a time), sums that vectorise
 * and still give the same bits on every CPU, and CT_CLONES, the ISA clones of a loop. For the
 * CPU kernels of GELU, attention and cross entropy.
 *
 * ct__expf: e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2 (plus rounding) (ln 2 split
 * in two parts so r is exact), e^r by its Taylor polynomial of degree 7 (remainder < 1.1e-8); 2^n
 * built in the exponent bits. Relative error under 1e-7 (about 1 ulp) over [-87, 88]; 0 below -87.3
 * (where floats go subnormal), +inf-free up to 88.3, NaN in NaN out. ct__normcdf_pdf: below. */
#ifndef CT_CPU_VECMATH_H
#define CT_CPU_VECMATH_H

#include <stdint.h>
#include <string.h>

/* One clone per ISA level (x86-64-v4: AVX-512; v3: AVX2 and FMA), picked at load time (glibc
 * ifunc): the binary still runs anywhere. Where a file is compiled with -ffp-contract=off
 * (optim_cpu.c) every clone gives the same bits; elsewhere the v3 and v4 clones contract to FMA,
 * which changes the last bits against the baseline clone (the same on one machine).
 * Not under clang, nor under a sanitizer (the compiler defines __SANITIZE_ADDRESS__ or
 * __SANITIZE_THREAD__; make sanitize, make tsan): the ifunc resolvers run while the dynamic
 * linker relocates, before TSan's runtime is up, and an instrumented resolver then crashes the
 * program before main. There the loops are built once, for the baseline ISA. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define CT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CT_CLONES
#endif

/* 8 partial sums s[0..8) added pairwise: the order ct__dot8, ct__sum8 and ct__sumsq8 end with
 * (for float or double s) */
#define CT__SUM_LANES8(s)                                                                          \
    ((((s)[0] + (s)[4]) + ((s)[2] + (s)[6])) + (((s)[1] + (s)[5]) + ((s)[3] + (s)[7])))

static inline __attribute__((always_inline)) float ct__sum_lanes8(const float *s)
{
    return CT__SUM_LANES8(s);
}

/* The sum of x[0, n) (ct__sum8) and the dot product of x and y (ct__dot8) in 8 partial sums,
 * element j into sum j % 8, added pairwise at the end. The compiler keeps the 8 sums in one
 * vector (an in-order loop adds one element per add's latency), and, unlike an omp simd
 * reduction (as many partial sums as the clone's vector has lanes), every ISA clone gives the
 * same bits. */
static inline __attribute__((always_inline)) float ct__dot8(const float *x, const float *y,
                                                            int64_t n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8)
        for (int l = 0; l < 8; l++)
            s[l] += (y ? x[j + l] * y[j + l] : x[j + l]);
    for (int64_t j = n8; j < n; j++)
        s[j - n8] += y ? x[j] * y[j] : x[j];
    return ct__sum_lanes8(s);
}

static inline __attribute__((always_inline)) float ct__sum8(const float *x, int64_t n)
{
    return ct__dot8(x, NULL, n);
}

/* The sum of x[0, n)'s squares in double, in 8 partial sums in ct__dot8's order: a float's
 * square is exact in double, so only the adds round, and the bits are the same with or without
 * FMA. Gradient clipping's norms: summed in order (an add's latency an element), they took 0.5%
 * of a step of bench/gpt_train's GPT. */
static inline __attribute__((always_inline)) double ct__sumsq8(const float *x, int64_t n)
{
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8)
        for (int l = 0; l < 8; l++)
            s[l] += (double)x[j + l] * x[j + l];
    for (int64_t j = n8; j < n; j++)
        s[j - n8] += (double)x[j] * x[j];
    return CT__SUM_LANES8(s);
}

/* ct__expf for x <= 88.3 (larger x give garbage): one select less, for arguments that are
 * never large (the softmax's x - max, GELU's -x^2 / 2) */
static inline __attribute__((always_inline)) float ct__expf_unclamped(float x)
{
    float xc = x < -87.3f ? -87.3f : x;
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
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* unsigned: NaN's n shifts defined */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.3f ? 0.0f : p * scale; /* NaN: p is NaN */
}

static inline __attribute__((always_inline)) float ct__expf(float x)
{
    return ct__expf_unclamped(x > 88.3f ? 88.3f : x);
}

/* Phi(x), the standard normal CDF, and in *pdf its density phi(x) = e^(-x^2/2) / sqrt(2 pi), for
 * exact GELU (x Phi(x)) and its gradient (Phi(x) + x phi(x)): with a = |x| / sqrt 2,
 * erfc(a) = t Q(t) e^(-a^2), t = 1 / (1 + 0.4 a) (the form of Hastings' approximation,
 * Abramowitz and Stegun 7.1.26, with Q of degree 8 fitted by scripts/fit_vecmath.py: 4e-8
 * relative), Phi = erfc(a) / 2 for x < 0 and 1 - erfc(a) / 2 above. One exp (shared with the
 * density) and one division; an erf with two polynomial branches cost 2-3 times the time. Error
 * against the exact Phi, float rounding included: under 2.5e-7 absolute, and 2e-6 relative where
 * Phi >= 1e-6 (the rounding of a^2, which exp turns into a relative error of a^2 6e-8). */
static inline __attribute__((always_inline)) float ct__normcdf_pdf(float x, float *pdf)
{
    float a = (x < 0 ? -x : x) * 0.70710678118654752f;
    float e = ct__expf_unclamped(-(a * a));
    float t = 1.0f / (1.0f + 0.4f * a);
    float q = 0.03424615040421486f;
    q = q * t - 0.10532250255346298f;
    q = q * t + 0.009451091289520264f;
    q = q * t + 0.1761976033449173f;
    q = q * t + 0.016394861042499542f;
    q = q * t + 0.22159989178180695f;
    q = q * t + 0.19430038332939148f;
    q = q * t + 0.22756877541542053f;
    q = q * t + 0.22556377947330475f;
    float h = 0.5f * t * q * e; /* erfc(a) / 2 */
    *pdf = e * 0.3989422804014327f;
    return x < 0 ? h : x == x ? 1.0f - h : x;
}

/* Phi(x) alone (GELU's forward needs no density): 1/2 + erf(z) / 2 with z = x / sqrt 2 and
 * erf(z) = z P(z^2) / Q(z^2), P of degree 6 and Q of degree 4, on |z| <= 3.92 (clamped beyond,
 * where erf rounds to +-1: Phi is 0 and 1 there), fitted by scripts/fit_vecmath.py --erf (8e-8
 * absolute in double), evaluated by Estrin's scheme (a shorter chain of dependent FMAs than
 * Horner's). No exp: GELU's forward took 0.66-0.73 ns an element, against 1.1 with
 * ct__normcdf_pdf (AVX2, 1 thread). Error against the exact Phi, float rounding included:
 * under 2.5e-7 absolute, 1e-5 relative for x >= -2; further left, where Phi is small, the
 * relative error grows as 1 + erf cancels (as in PyTorch's vectorised erf). NaN in, NaN out. */
static inline __attribute__((always_inline)) float ct__normcdf(float x)
{
    float z = x * 0.70710678118654752f;
    float c = z > 3.92f ? 3.92f : z < -3.92f ? -3.92f : z; /* keeps P and Q finite */
    float u = c * c;
    float u2 = u * u, u4 = u2 * u2; /* Estrin's scheme: a short chain of dependent FMAs */
    float p =
        ((1.1283791065216064f + 0.19012027978897095f * u) +
         (0.04924105480313301f + 0.0032949792221188545f * u) * u2) +
        ((0.0001331352978013456f - 1.9483522919472307e-06f * u) + 2.05517860507598e-08f * u2) * u4;
    float q = ((1.0f + 0.5018218159675598f * u) +
               (0.11091861873865128f + 0.01350797712802887f * u) * u2) +
              0.0008612631936557591f * u4;
    float e = z > 3.92f ? 1.0f : z < -3.92f ? -1.0f : c * p / q; /* 0 and 1 exactly out there */
    return 0.5f + 0.5f * e;
}

#endif
