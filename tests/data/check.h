/* tests/data/check.h — assertion macros for the data tests: each failure prints the expression,
 * both values and the line, and counts; main returns check_failures != 0. */
#ifndef CT_TESTS_DATA_CHECK_H
#define CT_TESTS_DATA_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_) {                                                                          \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, __LINE__, #a, #b,  \
                    va_, vb_);                                                                     \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b);                                               \
        if (!(fabs(va_ - vb_) <= (tol))) {                                                         \
            fprintf(stderr, "%s:%d: %s ~= %s failed: %.9g vs %.9g (tol %g)\n", __FILE__, __LINE__, \
                    #a, #b, va_, vb_, (double)(tol));                                              \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* rc must equal code and ct_last_error() must contain sub. */
#define CHECK_ERR(rc, code, sub)                                                                   \
    do {                                                                                           \
        int rc_ = (rc);                                                                            \
        CHECK_EQ(rc_, (code));                                                                     \
        if (!strstr(ct_last_error(), (sub))) {                                                     \
            fprintf(stderr, "%s:%d: error message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,      \
                    ct_last_error(), (sub));                                                       \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_OK(rc)                                                                               \
    do {                                                                                           \
        int rc_ = (rc);                                                                            \
        if (rc_ < 0) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed: %d %s: %s\n", __FILE__, __LINE__, #rc, rc_,         \
                    ct_strerror(rc_), ct_last_error());                                            \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_DONE(name)                                                                           \
    do {                                                                                           \
        if (check_failures)                                                                        \
            fprintf(stderr, "%s: %d check(s) failed\n", (name), check_failures);                   \
        else                                                                                       \
            printf("%s: ok\n", (name));                                                            \
        return check_failures ? 1 : 0;                                                             \
    } while (0)

#endif
