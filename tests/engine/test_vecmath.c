/* tests/engine/test_vecmath.c — trainer/cpu/vecmath.h's float exp and erf against libm's double
 * exp and erf of the same float input: every float step of 1e-5 over [-10, 10] for erf (under
 * 2e-7 absolute and 2e-7 relative error, about 1.5 ulp), every 1e-4 over [-87, 88] for exp
 * (under 1.5e-7 relative), and their edges: exp(-inf) = exp(-100) = 0, exp(0) = 1, NaN stays
 * NaN, erf(+-inf) = +-1, erf(0) = 0. The same inline functions, compiled here, that the GELU and
 * attention kernels inline (in their ISA clones the compiler may contract to FMA, which moves
 * the last bit only). */
#include <math.h>
#include <stdio.h>

#include "trainer/cpu/vecmath.h"

static int failures;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                  \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main(void)
{
    double erf_abs = 0, erf_rel = 0, exp_rel = 0, at_abs = 0, at_rel = 0, at_exp = 0;
    for (double x = -10; x <= 10; x += 1e-5) {
        float f = (float)x;
        double want = erf((double)f), got = ct__erff(f), d = fabs(got - want);
        if (d > erf_abs)
            erf_abs = d, at_abs = f;
        if (want != 0 && d / fabs(want) > erf_rel)
            erf_rel = d / fabs(want), at_rel = f;
    }
    for (double x = -87; x <= 88; x += 1e-4) {
        float f = (float)x;
        double want = exp((double)f), got = ct__expf(f);
        if (fabs(got - want) / want > exp_rel)
            exp_rel = fabs(got - want) / want, at_exp = f;
    }
    printf("erf: max error %.3g absolute (x = %g), %.3g relative (x = %g); exp: %.3g relative "
           "(x = %g)\n",
           erf_abs, at_abs, erf_rel, at_rel, exp_rel, at_exp);
    CHECK(erf_abs < 2e-7);
    CHECK(erf_rel < 2e-7);
    CHECK(exp_rel < 1.5e-7);
    CHECK(ct__expf(-INFINITY) == 0.0f && ct__expf(-100.0f) == 0.0f && ct__expf(0.0f) == 1.0f);
    CHECK(isnan(ct__expf(NAN)) && isnan(ct__erff(NAN)));
    CHECK(ct__erff(INFINITY) == 1.0f && ct__erff(-INFINITY) == -1.0f && ct__erff(0.0f) == 0.0f);
    CHECK(ct__erff(-0.5f) == -ct__erff(0.5f));
    if (failures)
        fprintf(stderr, "test_vecmath: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
