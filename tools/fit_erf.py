"""The coefficients of the kernels' f32 erf (lt_erf_sharing_exp in the CPU and OpenCL preludes).

Two fits in double precision, each a weighted least-squares polynomial over Chebyshev nodes whose
weights Lawson's iteration moves toward the minimax (equal-ripple) fit:
  - below 0.84375: erf(x) / x - 1 as a polynomial of degree 5 in x^2 (absolute error);
  - from 0.84375 to 3.9: exp(x^2) erfc(x) as a polynomial of degree 11 in x mapped onto [-1, 1]
    (relative error), so that erf(x) = 1 - exp(-x^2) Q(t).
Prints them rounded to f32, highest degree first (Horner's order). Needs NumPy:
    python3 tools/fit_erf.py
"""
import math

import numpy as np

SPLIT, HIGH = 0.84375, 3.9


def fit(f, lo, hi, degree, variable, relative, nodes=4000, iterations=60):
    k = np.arange(nodes)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / nodes)
    y = np.array([f(v) for v in x])
    basis = np.vander(variable(x), degree + 1, increasing=True)
    scale = 1 / np.abs(y) if relative else np.ones_like(y)
    weights = np.full(nodes, 1.0 / nodes)
    for _ in range(iterations):
        w = np.sqrt(weights) * scale
        coefficients, *_ = np.linalg.lstsq(basis * w[:, None], y * w, rcond=None)
        error = np.abs((basis @ coefficients - y) * scale)
        weights *= error
        weights /= weights.sum()
    return coefficients, error.max()


def main():
    center, half = (SPLIT + HIGH) / 2, (HIGH - SPLIT) / 2
    small, small_error = fit(lambda x: math.erf(x) / x - 1, 1e-6, SPLIT, 5, lambda x: x * x, False)
    tail, tail_error = fit(lambda x: math.erfc(x) * math.exp(x * x), SPLIT, HIGH, 11,
                           lambda x: (x - center) / half, True)
    f32 = lambda v: "%.9ef" % float(np.float32(v))
    print("// below %g: absolute error %.2g; above: relative error %.2g"
          % (SPLIT, small_error, tail_error))
    print("t = fma(min(|x|, %s), %s, %s)" % (f32(HIGH), f32(1 / half), f32(-center / half)))
    print("P(x^2):", ", ".join(f32(c) for c in small[::-1]))
    print("Q(t):", ", ".join(f32(c) for c in tail[::-1]))


if __name__ == "__main__":
    main()
