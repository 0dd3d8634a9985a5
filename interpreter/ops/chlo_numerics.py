"""How XLA CPU does floating-point arithmetic, for the CHLO expansions.

XLA compiles each CHLO op into StableHLO arithmetic, and then compiles that
with LLVM. To get XLA's numbers (not just the exact function values) the
CHLO kernels evaluate the same expansions with the same habits:

* A multiply whose result feeds an add is fused into one fused
  multiply-add (one rounding): `fma`, used by `horner` and `chebyshev`.
* exp, log, sin, cos, ... in f32 are XLA's own approximations, within
  about an ulp of the correctly rounded value, which numpy's f32 loops
  are not; `correctly_rounded` evaluates in f64 and rounds once.
* log1p is XLA's: Cephes' rational approximation for |x| < sqrt(2) - 1,
  log(1 + x) beyond (`log1p`). That approximation is designed for
  -0.29 < x < 0.41, so XLA's f64 log1p is up to ~125 ulp off on
  [-0.41, -0.29], and every expansion using it inherits that error.
* (Not reproduced: XLA CPU flushes subnormal numbers to zero.)
"""
from __future__ import annotations

import numpy as np


def correctly_rounded(function):
    """`function` that, for f32 arrays, computes in f64 and rounds once:
    numpy's own f32 loops are a few ulp off, while XLA's f32 exp, log,
    sin, ... are within about an ulp of the correctly rounded value."""
    def evaluate(*args):
        if all(getattr(a, "dtype", None) != np.float32 for a in args):
            return function(*args)
        return function(*(np.asarray(a, dtype=np.float64) for a in args)).astype(np.float32)
    evaluate.__name__ = function.__name__
    return evaluate


exp = correctly_rounded(np.exp)
log = correctly_rounded(np.log)
sin = correctly_rounded(np.sin)
cos = correctly_rounded(np.cos)
power = correctly_rounded(np.power)
expm1 = correctly_rounded(np.expm1)


def fma(a, b, c):
    """a * b + c rounded once. XLA CPU's compiler fuses a multiply feeding an
    add into one fused multiply-add, so the expansions below use `fma`
    wherever the StableHLO they mirror has that shape."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v) for v in (a, b, c)))
    dtype = np.result_type(a, b, c)
    if dtype != np.float64:
        # The f64 product of f32 values is exact: one rounding remains.
        wide = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
        return wide.astype(dtype)
    # f64: the product's rounding error (Dekker's TwoProduct) and the sum's
    # (Knuth's TwoSum), added back in.
    product = a * b
    product_error = _two_product_error(a, b, product)
    total = product + c
    rounded_part = total - product
    sum_error = (product - (total - rounded_part)) + (c - rounded_part)
    result = total + (sum_error + product_error)
    return np.where(np.isfinite(result), result, total)


def _split(x: np.ndarray):
    """Veltkamp's split of f64 `x` into 26- and 27-bit halves."""
    scaled = x * 134217729.0  # 2^27 + 1
    high = scaled - (scaled - x)
    return high, x - high


def _two_product_error(a, b, product):
    a_high, a_low = _split(a)
    b_high, b_low = _split(b)
    return ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low


def horner(x: np.ndarray, coefficients) -> np.ndarray:
    """c[0] * x^(n-1) + ... + c[n-1], evaluated as ((c0 * x + c1) * x + ...)
    with a fused multiply-add per step."""
    poly = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        poly = fma(poly, x, x.dtype.type(c))
    return poly


def chebyshev(x: np.ndarray, coefficients) -> np.ndarray:
    """Clenshaw's recurrence for a Chebyshev series (Cephes' `chbevl`)."""
    b0 = np.zeros_like(x)
    b1 = np.zeros_like(x)
    b2 = np.zeros_like(x)
    for c in coefficients:
        b2 = b1
        b1 = b0
        b0 = fma(x, b1, -b2) + x.dtype.type(c)
    return (b0 - b2) * x.dtype.type(0.5)


# Cephes' log1p rational approximation (descending powers).
_LOG1P_NUMERATOR = (4.5270000862445199635215E-5, 4.9854102823193375972212E-1,
                    6.5787325942061044846969E0, 2.9911919328553073277375E1,
                    6.0949667980987787057556E1, 5.7112963590585538103336E1,
                    2.0039553499201281259648E1)
_LOG1P_DENOMINATOR = (1.0, 1.5062909083469192043167E1, 8.3047565967967209469434E1,
                      2.2176239823732856465394E2, 3.0909872225312059774938E2,
                      2.1642788614495947685003E2, 6.0118660497603843919306E1)


def log1p(x: np.ndarray) -> np.ndarray:
    """log(1 + x) as XLA CPU evaluates it (see the module docstring)."""
    f = x.dtype.type
    x2 = x * x
    ratio = horner(x, _LOG1P_NUMERATOR) / horner(x, _LOG1P_DENOMINATOR)
    small = x + fma(f(-0.5), x2, (x * x2) * ratio)
    return np.where(np.abs(x) < f(0.41421356237309504880), small, log(x + f(1)))
