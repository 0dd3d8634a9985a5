"""Complex multiply, divide and power, computed the way XLA CPU computes them
(no ops are registered here; `elementwise_binary` uses these).

The spec only says "complex multiplication/division/exponentiation", and
different correct formulas round differently. XLA's formulas are:

* multiply: (a + bi)(c + di) = fma(a, c, -(b d)) + fma(b, c, a d) i
* divide: Smith's algorithm with fused multiply-adds, then C99 Annex G's
  recovery of infinities and zeros where the formula gives NaN + NaN i.
* power: polar form, see `complex_power`.

numpy has no fused multiply-add, so `fma` emulates one: for float32 in
float64 (where a product of two floats is exact), for float64 with Dekker's
exact product and Knuth's exact sum. Results match XLA CPU bit for bit on
random and special inputs.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.ops.elementwise_support import complex_from_parts


_SPLITTER = 2.0 ** 27 + 1  # Veltkamp's constant for float64


def _split(x):
    """x = high + low with each half holding at most 26 significant bits."""
    scaled = _SPLITTER * x
    high = scaled - (scaled - x)
    return high, x - high


def _fma64(x, y, z):
    """x * y + z on float64 arrays with (almost always) a single rounding:
    x * y = p + e exactly (Dekker), p + z = s + t exactly (Knuth), then
    s + (t + e). Non-finite or extreme operands, where the splitting could
    overflow or the error terms underflow, take the plain formula."""
    product = x * y
    x_high, x_low = _split(x)
    y_high, y_low = _split(y)
    product_error = ((x_high * y_high - product) + x_high * y_low + x_low * y_high) + x_low * y_low
    total = product + z
    z_part = total - product
    sum_error = (product - (total - z_part)) + (z - z_part)
    fused = total + (sum_error + product_error)
    # A zero sum keeps the sign IEEE gives it (-0 * 1 + -0 = -0).
    fused = np.where((fused == 0) & (total == 0), total, fused)
    safe = (np.abs(x) < 2.0 ** 995) & (np.abs(y) < 2.0 ** 995) & np.isfinite(z) \
        & ((np.abs(product) > 2.0 ** -960) | (product == 0)) & (np.abs(product) < 2.0 ** 1000)
    return np.where(safe, fused, product + z)


def fma(x, y, z):
    """x * y + z rounded once, for float32 or float64 arrays."""
    if x.dtype == np.float32:
        return (x.astype(np.float64) * y + z).astype(np.float32)  # exact product
    return _fma64(x, y, z)


def complex_multiply(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    a, b, c, d = lhs.real, lhs.imag, rhs.real, rhs.imag
    return complex_from_parts(fma(a, c, -(b * d)), fma(b, c, a * d))


def _smith_quotient(lhs, rhs):
    """(real, imag) of lhs / rhs by Smith's algorithm: divide through by the
    larger part of the divisor, so |c|^2 + |d|^2 never overflows."""
    a, b, c, d = lhs.real, lhs.imag, rhs.real, rhs.imag
    imag_larger = np.abs(c) < np.abs(d)
    ratio = np.where(imag_larger, c / d, d / c)
    # |c| < |d|: (a r + b) / (d + c r) and (b r - a) / (d + c r), with r = c / d;
    # otherwise: (a + b r) / (c + d r) and (b - a r) / (c + d r), with r = d / c.
    denominator = np.where(imag_larger, fma(c, ratio, d), fma(d, ratio, c))
    real = np.where(imag_larger, fma(a, ratio, b), fma(b, ratio, a))
    imag = np.where(imag_larger, fma(b, ratio, -a), fma(-a, ratio, b))
    return real / denominator, imag / denominator


def _recover_infinities(lhs, rhs, real, imag):
    """C99 Annex G: where the formula gave NaN + NaN i, a zero divisor gives
    an infinity, an infinite dividend (finite divisor) an infinity, and an
    infinite divisor (finite dividend) a zero, with the right signs."""
    a, b, c, d = lhs.real, lhs.imag, rhs.real, rhs.imag
    both_nan = np.isnan(real) & np.isnan(imag)
    if not both_nan.any():
        return real, imag
    dtype = real.dtype
    inf, one, zero = dtype.type(np.inf), dtype.type(1), dtype.type(0)
    lhs_all_nan = np.isnan(a) & np.isnan(b)

    def unit_or_zero(x):  # copysign(isinf(x) ? 1 : 0, x)
        return np.copysign(np.where(np.isinf(x), one, zero), x)

    zero_divisor = both_nan & (c == 0) & (d == 0) & ~lhs_all_nan
    infinite_lhs = both_nan & (np.isinf(a) | np.isinf(b)) & np.isfinite(c) & np.isfinite(d)
    infinite_rhs = both_nan & (np.isinf(c) | np.isinf(d)) & np.isfinite(a) & np.isfinite(b)
    signed_inf = np.copysign(inf, c)
    ua, ub = unit_or_zero(a), unit_or_zero(b)
    uc, ud = unit_or_zero(c), unit_or_zero(d)
    real = np.select([zero_divisor, infinite_lhs, infinite_rhs],
                     [signed_inf * a, inf * (ua * c + ub * d), zero * (a * uc + b * ud)], real)
    imag = np.select([zero_divisor, infinite_lhs, infinite_rhs],
                     [signed_inf * b, inf * (ub * c - ua * d), zero * (b * uc - a * ud)], imag)
    return real, imag


def complex_divide(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    real, imag = _smith_quotient(lhs, rhs)
    return complex_from_parts(*_recover_infinities(lhs, rhs, real, imag))


def complex_power(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """(a + bi) ** (c + di) the way XLA computes it, from polar form:
    |x|^c e^(-d arg x) (cos q + i sin q) with q = c arg x + d ln|x|; then
    x ** 0 = 1 (NaN x too) and 0 ** c = 0 for real c > 0. Computed in
    double precision (the caller widens complex64)."""
    a, b, c, d = base.real, base.imag, exponent.real, exponent.imag
    squared_modulus = a * a + b * b
    angle = np.arctan2(b, a)
    scale = np.power(squared_modulus, 0.5 * c) * np.exp(-d * angle)
    q = c * angle + 0.5 * d * np.log(squared_modulus)
    result = complex_from_parts(scale * np.cos(q), scale * np.sin(q))
    zero_to_positive = (base == 0) & (d == 0) & (c > 0)
    result = np.where(zero_to_positive, 0, result)
    return np.where(exponent == 0, 1, result)
