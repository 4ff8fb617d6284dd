#!/usr/bin/python3
"""scripts/fit_vecmath.py — fits the polynomial of trainer/cpu/vecmath.h's normal CDF:
  erfc(a) = t Q(t) e^(-a^2),  t = 1 / (1 + 0.4 a),  a >= 0,  Q of degree 8
(the form of Hastings' approximation, Abramowitz and Stegun 7.1.26, with a longer polynomial:
Q(t) = erfc(a) e^(a^2) / t is smooth on t in (0, 1]), over a in [0, 7.5] (Phi down to x = -10.6),
by least squares with relative weights on Chebyshev nodes, reweighted 30 times toward the
largest relative error (a cheap approach to minimax). The reference values come from mpmath at
30 digits. Prints the coefficients, lowest degree first, rounded to float, and the fit's largest
relative error in double. Run with Debian's /usr/bin/python3 (numpy, mpmath)."""
import mpmath
import numpy as np

mpmath.mp.dps = 30
P, DEGREE, A_MAX, NODES = 0.4, 8, 7.5, 3000

k = np.arange(NODES)
a = A_MAX / 2 + A_MAX / 2 * np.cos(np.pi * (k + 0.5) / NODES)
t = 1 / (1 + P * a)
y = np.array([float(mpmath.erfc(v) * mpmath.exp(v * v) * (1 + P * v)) for v in a])
vander = np.vander(t, DEGREE + 1, increasing=True)
w = 1 / np.abs(y)
for _ in range(30):
    c, *_ = np.linalg.lstsq(vander * w[:, None], y * w, rcond=None)
    r = (vander @ c - y) / y
    w = w * (1 + 50 * np.abs(r) / np.abs(r).max())
print("Q (max relative error %.2g):" % np.abs((vander @ c - y) / y).max(),
      ", ".join(repr(float(np.float32(v))) for v in c))
