#!/usr/bin/python3
"""scripts/fit_vecmath.py — fits the polynomial coefficients of trainer/cpu/vecmath.h's erf:
  |x| < 1:       erf(x) = x P(x^2),                 P of degree 5
  1 <= |x| <= 6: erf(x) = 1 - e^(-x^2) t Q(t), t = 1/|x|, Q of degree 10 (Q = x erfc(x) e^(x^2))
by least squares with relative weights on Chebyshev nodes, reweighted 30 times toward the
largest relative error (a cheap approach to minimax). The reference values come from mpmath at
30 digits. Prints the coefficients, lowest degree first, rounded to float, and the fits' largest
relative errors in double. Run with Debian's /usr/bin/python3 (numpy, mpmath)."""
import mpmath
import numpy as np

mpmath.mp.dps = 30


def fit(f, a, b, degree, var, nodes=4000):
    k = np.arange(nodes)
    x = (a + b) / 2 + (b - a) / 2 * np.cos(np.pi * (k + 0.5) / nodes)
    y = np.array([float(f(v)) for v in x])
    vander = np.vander(var(x), degree + 1, increasing=True)
    w = 1 / np.abs(y)
    for _ in range(30):
        c, *_ = np.linalg.lstsq(vander * w[:, None], y * w, rcond=None)
        r = (vander @ c - y) / y
        w = w * (1 + 50 * np.abs(r) / np.abs(r).max())
    return c, np.abs((vander @ c - y) / y).max()


small, e1 = fit(lambda x: mpmath.erf(x) / x, 1e-6, 1.0, 5, lambda x: x * x)
large, e2 = fit(lambda x: x * mpmath.erfc(x) * mpmath.exp(x * x), 1.0, 6.0, 10, lambda x: 1 / x)
for name, c, e in (("P", small, e1), ("Q", large, e2)):
    print("%s (max relative error %.2g):" % (name, e),
          ", ".join(repr(float(np.float32(v))) for v in c))
