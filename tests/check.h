/* tests/check.h — the plain CHECK of the small unit tests that need no cluster (tests/common,
 * test_vecmath): a failed condition is printed with its file and line and counted in failures,
 * and the test goes on; main returns failures != 0. Tests with processes to clean up use
 * tests/runtime/harness.h instead. */
#ifndef CT_TESTS_CHECK_H
#define CT_TESTS_CHECK_H

#include <stdio.h>

static int failures;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                  \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#endif
