"""CHLO trigonometric and hyperbolic ops: acos, acosh, asin, asinh, atan,
atanh, cosh, sinh and tan, on float and complex tensors.

CHLO ops have no section in the StableHLO spec (see ChloOps.td in
openxla/stablehlo). Values are the principal branches of the functions:
for complex arguments the branch cuts are the usual ones (asin/acos/atanh
on the real axis outside [-1, 1], asinh/atan on the imaginary axis outside
[-i, i], acosh on the real axis below 1).

The numbers follow XLA CPU, which expands each op into StableHLO
(`ChloDecompositionPatterns*.td`, `ChloLegalizeToStablehlo.cpp`):

* Real acos, acosh, asin, asinh, atan and atanh are XLA's formulas, e.g.
  asin(x) = 2 atan2(x, 1 + sqrt((1 - x)(1 + x))) and
  acosh(x) = log1p(sqrt(x - 1) (sqrt(x + 1) + sqrt(x - 1))), each step
  rounded to the operand's type, as XLA CPU does for f16 and bf16 (every
  op computes in f32 and rounds back). NaN outside the domain. f64 atanh
  is libm's, within an ulp of the exact value, as XLA's is from 0.12 on
  (its earlier (log1p(x) - log1p(-x)) / 2 lost up to 113 ulp to
  cancellation).
* cosh(x) = e^(x + log 1/2) + e^(-x + log 1/2), which does not overflow
  before cosh itself does; sinh likewise, with
  (expm1(x) + expm1(x) / (expm1(x) + 1)) / 2 for real |x| < 1. XLA runs
  these two in f32 for narrower types, rounding once at the end.
* Complex asin, acos, asinh and acosh are XLA's expansion around
  `asin_acos_kernel` (Hull et al.'s algorithm), complex atanh and atan its
  log1p/atan2 expansion, infinities and NaNs included. On the branch cuts
  XLA picks the side by comparing the argument's parts with 0 (so -0
  counts as +0), not by the sign of zero as C99 and numpy do.
* tan is numpy's, evaluated in double precision and rounded (with XLA's
  NaN for complex tan(+-inf + 0i) and tan(NaN + 0i)).
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_complex, is_float
from pjrt_ref.interpreter.ops.chlo_numerics import correctly_rounded, cos, exp, expm1, fma, log, log1p, sin
from pjrt_ref.interpreter.ops.elementwise_unary import tan_values

atan2 = correctly_rounded(np.arctan2)


def xla_dtype(dtype: np.dtype) -> np.dtype:
    """The precision XLA computes in: narrow floats widen to f32."""
    if dtype in (np.float64, np.complex128, np.float32, np.complex64):
        return dtype
    return np.dtype(np.float32)


def step_rounding(dtype: np.dtype):
    """Round an intermediate result to `dtype` (and back to the working
    precision): the identity unless `dtype` is narrower than f32."""
    if xla_dtype(dtype) == dtype:
        return lambda value: value
    work = xla_dtype(dtype)
    return lambda value: np.asarray(value).astype(dtype).astype(work)


# --- real inverse functions: XLA's formulas, every step rounded by `r` -------

def _one_minus_x_squared(x, r):
    one = x.dtype.type(1)
    return r(r(one - x) * r(one + x))


def _asin(x, r, largest):
    one = x.dtype.type(1)
    half_angle = r(atan2(x, r(one + r(np.sqrt(_one_minus_x_squared(x, r))))))
    return r(half_angle + half_angle)


def _acos(x, r, largest):
    return r(atan2(r(np.sqrt(_one_minus_x_squared(x, r))), x))


def _acosh(x, r, largest):
    f = x.dtype.type
    root_below = r(np.sqrt(r(x - f(1))))
    value = r(log1p(r(root_below * r(r(np.sqrt(r(x + f(1)))) + root_below))))
    huge = r(r(log(f(2))) + r(log(x)))  # x >= max / 2: log(2x) without overflow
    return np.where(x >= r(f(largest) / f(2)), huge, value)


def _asinh(x, r, largest):
    f = x.dtype.type
    ax = np.abs(x)
    ax2 = r(ax * ax)
    value = r(log1p(r(ax + r(ax2 / r(f(1) + r(np.sqrt(r(f(1) + ax2))))))))
    huge = r(r(log(f(2))) + r(log(ax)))
    magnitude = np.where(ax >= r(np.sqrt(f(largest))), huge, value)
    return r(np.sign(x) * magnitude)


def _atan(x, r, largest):
    return r(atan2(x, x.dtype.type(1)))


def _atanh(x, r, largest):
    f = x.dtype.type
    if x.dtype == np.float64:   # libm's atanh, as XLA >= 0.12 is accurate in f64
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.arctanh(x)
    value = r(r(r(log1p(x)) - r(log1p(-x))) * f(0.5))
    return np.where(np.abs(x) > 1, f(np.nan), value)


REAL_INVERSES = {"chlo.acos": _acos, "chlo.acosh": _acosh, "chlo.asin": _asin,
                 "chlo.asinh": _asinh, "chlo.atan": _atan, "chlo.atanh": _atanh}


# --- cosh and sinh (real and complex) ------------------------------------------

def _log_half(x: np.ndarray):
    return (x.real.dtype if is_complex(x.dtype) else x.dtype).type(math.log(0.5))


def _exp(x: np.ndarray) -> np.ndarray:
    """e^x; for complex x = a + bi, XLA's e^a cos(b) + i e^a sin(b), with
    the imaginary part exactly b when b = 0 (so e^(inf + 0i) = inf + 0i)."""
    if not is_complex(x.dtype):
        return exp(x)
    scale = exp(x.real)
    imag = np.where(x.imag == 0, x.imag, scale * sin(x.imag))
    return _complex(scale * cos(x.imag), imag)


def _cosh(x: np.ndarray) -> np.ndarray:
    return _exp(x + _log_half(x)) + _exp(_log_half(x) - x)


def _sinh_large(x: np.ndarray) -> np.ndarray:
    return _exp(x + _log_half(x)) - _exp(_log_half(x) - x)


def _sinh(x: np.ndarray) -> np.ndarray:
    if is_complex(x.dtype):
        return _sinh_large(x)
    e = expm1(x)
    small = x.dtype.type(0.5) * (e + e / (e + 1))
    return np.where(np.abs(x) < 1, small, _sinh_large(x))


HYPERBOLIC = {"chlo.cosh": _cosh, "chlo.sinh": _sinh}


# --- complex asin, acos, asinh, acosh: XLA's asin_acos_kernel -----------------
#
# w = asin_acos_kernel(z) = sqrt(a^2 - x^2) + i log(a + sqrt(a^2 - 1)) with
# x = |Re z|, y = |Im z|, a = (hypot(x + 1, y) + hypot(x - 1, y)) / 2,
# evaluated region by region as in Hull et al., "Implementing the complex
# arcsine and arccosine functions using exception handling" (the modified
# form XLA generates; see ChloDecompositionPatternsMath.td). Then
#   asin(z)  = atan2(Re z, Re w) + i sign(Im z) Im w
#   acos(z)  = atan2(Re w, Re z) - i sign(Im z) Im w
#   acosh(z) = Im w + i sign(Im z) atan2(Re w, Re z)
#   asinh(z) = sign(Re z) Im w' + i atan2(Im z, Re w'),  w' = kernel(i z)
# where sign(v) compares v with 0 (so -0 counts as +0).

def _hypot(u, y):
    """hypot(u, y) for u, y >= 0, as the kernel computes it."""
    f = u.dtype.type
    larger, smaller = np.maximum(u, y), np.minimum(u, y)
    q = smaller / larger
    q2 = q * q
    root = np.sqrt(fma(q, q, f(1)))
    general = np.where((root == 1) & (q2 > 0), larger + larger * q2 / f(2), larger * root)
    return np.where(larger == smaller, f(math.sqrt(2)) * larger, general)


def asin_acos_kernel(z: np.ndarray):
    """(Re w, Im w) of w = asin_acos_kernel(z), in z's part precision."""
    f = z.real.dtype.type
    info = np.finfo(z.real.dtype)
    one, half = f(1), f(0.5)
    x, y = np.abs(z.real), np.abs(z.imag)
    safe_max = np.sqrt(f(info.max)) / f(8)
    xp1, xm1 = x + one, x - one
    r, s = _hypot(np.abs(xp1), y), _hypot(np.abs(xm1), y)
    a = half * (r + s)
    half_apx = half * (a + x)
    yy = y * y
    rpxp1, smxm1, spxm1 = r + xp1, s - xm1, s + xm1
    real = np.where(np.maximum(x, y) >= safe_max, y,
                    np.where(x <= one, np.sqrt(half_apx * (yy / rpxp1 + smxm1)),
                             y * np.sqrt(half_apx / rpxp1 + half_apx / spxm1)))
    # Im w = log(a + sqrt(a^2 - 1)): asymptotically for huge arguments,
    # y / sqrt(a^2 - 1) for tiny y, else log1p(am1 + sqrt(am1 (a + 1))).
    safe_max_opt = np.where(x < safe_max * f(1e12), safe_max * f(1e-6), safe_max * f(100))
    y_large = y >= safe_max_opt
    big = np.where(y_large, y, x)
    xoy = np.where(y_large & (y != np.inf), x / y, f(0))
    huge = fma(half, log1p(xoy * xoy), log(f(2)) + log(big))
    tiny_y = (y < np.sqrt(f(info.tiny)) * f(4)) & (x < one)
    ap1 = a + one
    half_yy = half * yy
    half_yy_over_rpxp1 = half_yy / rpxp1
    am1 = np.where(tiny_y, -(xp1 * xm1) / ap1,
                   np.where(x >= one, fma(half, spxm1, half_yy_over_rpxp1),
                            np.where(a <= f(1.5), half_yy_over_rpxp1 + half_yy / smxm1,
                                     a - one)))
    root = np.sqrt(am1 * ap1)
    imag = np.where(big >= np.where(y_large, safe_max_opt, safe_max), huge,
                    np.where(tiny_y, y / root, log1p(am1 + root)))
    return real, imag


def _complex(real, imag) -> np.ndarray:
    result = np.empty(real.shape, np.complex64 if real.dtype == np.float32 else np.complex128)
    result.real, result.imag = real, imag
    return result


def _complex_asin(z):
    w_real, w_imag = asin_acos_kernel(z)
    return _complex(atan2(z.real, w_real), np.where(z.imag < 0, -w_imag, w_imag))


def _complex_acos(z):
    w_real, w_imag = asin_acos_kernel(z)
    return _complex(atan2(w_real, z.real), np.where(z.imag < 0, w_imag, -w_imag))


def _complex_acosh(z):
    w_real, w_imag = asin_acos_kernel(z)
    angle = atan2(w_real, z.real)
    return _complex(w_imag, np.where(z.imag < 0, -angle, angle))


def _complex_asinh(z):
    w_real, w_imag = asin_acos_kernel(_complex(-z.imag, z.real))
    return _complex(np.where(z.real < 0, -w_imag, w_imag), atan2(z.imag, w_real))


def _complex_atanh(z):
    """atanh(x + iy) = sign(x) log1p(4|x| / ((1 - |x|)^2 + y^2)) / 4
    + i atan2(2y, (1 - |x|)(1 + |x|) - y^2) / 2, with asymptotic forms once
    |x| or |y| exceeds 1 / eps^2 (XLA's expansion)."""
    f = z.real.dtype.type
    x, y = z.real, z.imag
    ax, ay = np.abs(x), np.abs(y)
    inv_eps = f(9007199254740994.0 if z.real.dtype == np.float64 else 16777218.0)
    safe_max = inv_eps * inv_eps
    in_safe_region = (ax < safe_max) & (ay < safe_max)
    one_minus_ax = f(1) - ax
    y2 = y * y
    infinite = np.isinf(x) | np.isinf(y)
    far = np.where(ay * inv_eps < ax, f(1) / ax,
                   np.where(infinite, f(0), (f(1) / (ax / y + y / ax)) / y))
    ratio = np.where(in_safe_region, ax / fma(one_minus_ax, one_minus_ax, y2), far)
    real = np.where(x >= 0, f(1), f(-1)) * log1p(f(4) * ratio) * f(0.25)
    angle = np.where(in_safe_region, atan2(y + y, fma(one_minus_ax, f(1) + ax, -y2)),
                     np.where(y >= 0, f(1), f(-1)) * f(math.pi))
    return _complex(real, angle * f(0.5))


def _complex_atan(z):
    """atan(z) = -i atanh(iz)."""
    w = _complex_atanh(_complex(-z.imag, z.real))
    return _complex(w.imag, -w.real)


COMPLEX_INVERSES = {"chlo.asin": _complex_asin, "chlo.acos": _complex_acos,
                    "chlo.acosh": _complex_acosh, "chlo.asinh": _complex_asinh,
                    "chlo.atan": _complex_atan, "chlo.atanh": _complex_atanh}


# --- tan: the library function --------------------------------------------------

def _tan(x: np.ndarray) -> np.ndarray:
    """stablehlo.tan's values (`tan_values`) in double precision, rounded to
    XLA's precision."""
    wide = x.astype(np.complex128 if is_complex(x.dtype) else np.float64)
    return tan_values(wide).astype(xla_dtype(x.dtype))


# --- the ops -------------------------------------------------------------------

def _validate_trigonometric(op) -> None:
    dtype = op.operand_types[0].dtype
    if not (is_float(dtype) or is_complex(dtype)) or op.operand_types[0].quant is not None:
        raise op.error(f"{op.name} needs a floating-point or complex operand, not "
                       f"{op.operand_types[0].element_type}", cls=Unimplemented)


@register(*REAL_INVERSES, "chlo.tan", *HYPERBOLIC, validate=_validate_trigonometric)
def trigonometric(op, x):
    """ChloOps.td "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh",
    "sinh", "tan": elementwise, principal branches; NaN outside the real
    domain (e.g. acos(2), acosh(0.5), atanh(2)); +-inf where the function
    overflows; XLA's formulas and roundings (module docstring)."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        if op.name in HYPERBOLIC:
            result = HYPERBOLIC[op.name](x.astype(xla_dtype(x.dtype)))
        elif op.name in REAL_INVERSES and not is_complex(x.dtype):
            largest = float(ml_dtypes.finfo(x.dtype).max)
            result = REAL_INVERSES[op.name](x.astype(xla_dtype(x.dtype)),
                                            step_rounding(x.dtype), largest)
        elif op.name in COMPLEX_INVERSES:
            result = COMPLEX_INVERSES[op.name](x)
        else:
            result = _tan(x)
    return np.asarray(result).astype(op.result_type.dtype)


def _validate_complex_operand(op) -> None:
    if not is_complex(op.operand_types[0].dtype):
        raise op.error(f"{op.name} needs a complex operand", cls=Unimplemented)


@register("chlo._asin_acos_kernel", validate=_validate_complex_operand)
def asin_acos_kernel_op(op, z):
    """ChloOps.td "_asin_acos_kernel" (internal to the asin/acos expansions):
    w = sqrt(a^2 - x^2) + i log(a + sqrt(a^2 - 1)) as described above."""
    with np.errstate(all="ignore"):
        return _complex(*asin_acos_kernel(np.asarray(z))).astype(op.result_type.dtype)
