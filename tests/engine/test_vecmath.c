/* tests/engine/test_vecmath.c — trainer/cpu/vecmath.h's float exp and normal CDF against libm's
 * double exp and erfc of the same float input: every step of 1e-4 over [-87, 88] for exp (under
 * 1.5e-7 relative), every 1e-5 over [-10, 10] for the CDF Phi (under 2.5e-7 absolute; 2e-6
 * relative where Phi >= 1e-6) and the density phi (under 1e-7 absolute and 1.5e-6 relative over
 * [-4, 4], where GELU's inputs live), Phi alone (ct__normcdf, GELU's forward: under 2.5e-7
 * absolute over the same steps, and 1e-5 relative for x >= -2), and their edges: exp(-inf) =
 * exp(-100) = 0, exp(0) = 1, NaN stays NaN, Phi(+-inf) = 1 and 0, Phi(0) = 0.5. The same inline
 * functions, compiled here, that the GELU, attention and cross entropy kernels inline (in their ISA
 * clones the compiler may contract to FMA, which moves the last bit only). */
#include <math.h>
#include <stdio.h>

#include "trainer/cpu/vecmath.h"

#include "tests/check.h"

int main(void)
{
    double cdf_abs = 0, cdf_rel = 0, pdf_abs = 0, pdf_rel = 0, exp_rel = 0, at_abs = 0, at_rel = 0,
           at_pdf = 0, at_exp = 0;
    double fast_abs = 0, fast_rel = 0, at_fast = 0; /* ct__normcdf, Phi alone */
    for (double x = -10; x <= 10; x += 1e-5) {
        float f = (float)x, pdf;
        double want = 0.5 * erfc(-(double)f * M_SQRT1_2), got = ct__normcdf_pdf(f, &pdf);
        double d = fabs(got - want), fd = fabs(ct__normcdf(f) - want);
        if (fd > fast_abs)
            fast_abs = fd, at_fast = f;
        if (f >= -2 && fd / want > fast_rel)
            fast_rel = fd / want;
        if (d > cdf_abs)
            cdf_abs = d, at_abs = f;
        if (want >= 1e-6 && d / want > cdf_rel)
            cdf_rel = d / want, at_rel = f;
        double pw = exp(-0.5 * (double)f * f) / sqrt(2 * M_PI), pd = fabs(pdf - pw);
        if (pd > pdf_abs)
            pdf_abs = pd;
        if (fabs(f) <= 4 && pd / pw > pdf_rel)
            pdf_rel = pd / pw, at_pdf = f;
    }
    for (double x = -87; x <= 88; x += 1e-4) {
        float f = (float)x;
        double want = exp((double)f), got = ct__expf(f);
        if (fabs(got - want) / want > exp_rel)
            exp_rel = fabs(got - want) / want, at_exp = f;
    }
    printf("Phi: max error %.3g absolute (x = %g), %.3g relative (x = %g); phi: %.3g absolute, "
           "%.3g relative (x = %g); exp: %.3g relative (x = %g)\n",
           cdf_abs, at_abs, cdf_rel, at_rel, pdf_abs, pdf_rel, at_pdf, exp_rel, at_exp);
    printf("Phi alone: max error %.3g absolute (x = %g), %.3g relative for x >= -2\n", fast_abs,
           at_fast, fast_rel);
    CHECK(fast_abs < 2.5e-7);
    CHECK(fast_rel < 1e-5);
    CHECK(cdf_abs < 2.5e-7);
    CHECK(cdf_rel < 2e-6);
    CHECK(pdf_abs < 1e-7);
    CHECK(pdf_rel < 1.5e-6);
    CHECK(exp_rel < 1.5e-7);
    CHECK(ct__expf(-INFINITY) == 0.0f && ct__expf(-100.0f) == 0.0f && ct__expf(0.0f) == 1.0f);
    float pdf;
    CHECK(isnan(ct__expf(NAN)) && isnan(ct__normcdf_pdf(NAN, &pdf)));
    CHECK(ct__normcdf_pdf(INFINITY, &pdf) == 1.0f && pdf == 0.0f);
    CHECK(ct__normcdf_pdf(-INFINITY, &pdf) == 0.0f && pdf == 0.0f);
    CHECK(fabsf(ct__normcdf_pdf(0.0f, &pdf) - 0.5f) < 1e-7f);
    CHECK(ct__normcdf(INFINITY) == 1.0f && ct__normcdf(-INFINITY) == 0.0f &&
          isnan(ct__normcdf(NAN)) && ct__normcdf(0.0f) == 0.5f);
    CHECK(fabsf(ct__normcdf_pdf(-0.5f, &pdf) + ct__normcdf_pdf(0.5f, &pdf) - 1.0f) < 3e-7f);
    if (failures)
        fprintf(stderr, "test_vecmath: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
