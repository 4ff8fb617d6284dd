#!/usr/bin/python3
"""scripts/fit_vecmath.py — fits the polynomials of trainer/cpu/vecmath.h's normal CDF.

Without arguments, ct__normcdf_pdf's Q:
  erfc(a) = t Q(t) e^(-a^2),  t = 1 / (1 + 0.4 a),  a >= 0,  Q of degree 8
(the form of Hastings' approximation, Abramowitz and Stegun 7.1.26, with a longer polynomial:
Q(t) = erfc(a) e^(a^2) / t is smooth on t in (0, 1]), over a in [0, 7.5] (Phi down to x = -10.6),
by least squares with relative weights on Chebyshev nodes, reweighted 30 times toward the
largest relative error (a cheap approach to minimax). The reference values come from mpmath at
30 digits. Prints the coefficients, lowest degree first, rounded to float, and the fit's largest
relative error in double.

With --erf, ct__normcdf's erf(z) = z P(u) / Q(u), u = z^2, P of degree 6 and Q of degree 4 with
Q(0) = 1, on z in [0, 3.92]: linearised least squares (Sanathanan-Koerner: P - (erf / z) Q over
the last round's Q) with weights z (the absolute error of erf), reweighted toward the largest
error after the first 11 of 60 rounds; references from libm's double erf. Prints P and Q, lowest
degree first, rounded to float, and the largest absolute error of erf in double and evaluated in
float.

Run with Debian's /usr/bin/python3 (numpy, mpmath)."""
import math
import sys

import mpmath
import numpy as np


def chebyshev_nodes(hi, n):
    k = np.arange(n)
    return hi / 2 + hi / 2 * np.cos(np.pi * (k + 0.5) / n)


def fit_q(p=0.4, degree=8, a_max=7.5, nodes=3000):
    mpmath.mp.dps = 30
    a = chebyshev_nodes(a_max, nodes)
    t = 1 / (1 + p * a)
    y = np.array([float(mpmath.erfc(v) * mpmath.exp(v * v) * (1 + p * v)) for v in a])
    vander = np.vander(t, degree + 1, increasing=True)
    w = 1 / np.abs(y)
    for _ in range(30):
        c, *_ = np.linalg.lstsq(vander * w[:, None], y * w, rcond=None)
        r = (vander @ c - y) / y
        w = w * (1 + 50 * np.abs(r) / np.abs(r).max())
    print("Q (max relative error %.2g):" % np.abs((vander @ c - y) / y).max(),
          ", ".join(repr(float(np.float32(v))) for v in c))


def fit_erf(p_degree=6, q_degree=4, z_max=3.92, nodes=4000):
    z = chebyshev_nodes(z_max, nodes)
    u = z * z
    y = np.array([math.erf(v) / v for v in z])
    vp = np.vander(u, p_degree + 1, increasing=True)
    vq = np.vander(u, q_degree + 1, increasing=True)
    q_last, w = np.ones(nodes), z.copy()
    for it in range(60):
        a = np.hstack([vp, -(y[:, None] * vq[:, 1:])]) / q_last[:, None] * w[:, None]
        c, *_ = np.linalg.lstsq(a, y / q_last * w, rcond=None)
        p, q = c[:p_degree + 1], np.concatenate([[1.0], c[p_degree + 1:]])
        q_last = vq @ q
        err = (vp @ p / q_last - y) * z
        if it > 10:
            w = w * (1 + 20 * np.abs(err) / np.abs(err).max())
    pf, qf = p.astype(np.float32), q.astype(np.float32)
    zf = np.linspace(0, z_max, 200001).astype(np.float32)

    def horner(cs, x):
        r = np.float32(cs[-1])
        for v in cs[-2::-1]:
            r = r * x + np.float32(v)
        return r

    ef = zf * horner(pf, zf * zf) / horner(qf, zf * zf)
    fe = np.abs(ef - np.array([math.erf(float(v)) for v in zf])).max()
    print("erf (max absolute error %.2g in double, %.2g in float):" % (np.abs(err).max(), fe))
    print("P:", ", ".join(repr(float(v)) for v in pf))
    print("Q:", ", ".join(repr(float(v)) for v in qf))


if __name__ == "__main__":
    fit_erf() if "--erf" in sys.argv[1:] else fit_q()
