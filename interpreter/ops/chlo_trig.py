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
  op computes in f32 and rounds back). NaN outside the domain.
* cosh(x) = e^(x + log 1/2) + e^(-x + log 1/2), which does not overflow
  before cosh itself does; sinh likewise, with
  (expm1(x) + expm1(x) / (expm1(x) + 1)) / 2 for real |x| < 1. XLA runs
  these two in f32 for narrower types, rounding once at the end.
* tan and the complex inverse functions use numpy's (C99) evaluation in
  double precision. On the branch cuts XLA picks the side by comparing the
  argument's parts with 0 (so -0 counts as +0), not by the sign of zero as
  C99 does; `_COMPLEX_BRANCH_SIGNS` applies XLA's choice. Complex arguments
  with infinite or NaN parts follow C99 Annex G, where XLA's expansions
  give NaN for some (e.g. acos(NaN i)).
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...errors import Unimplemented
from ..registry import register
from ..types import is_complex, is_float
from .chlo_numerics import correctly_rounded, exp, expm1, log, log1p

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
    value = r(r(r(log1p(x)) - r(log1p(-x))) * f(0.5))
    return np.where(np.abs(x) > 1, f(np.nan), value)


REAL_INVERSES = {"chlo.acos": _acos, "chlo.acosh": _acosh, "chlo.asin": _asin,
                 "chlo.asinh": _asinh, "chlo.atan": _atan, "chlo.atanh": _atanh}


# --- cosh and sinh (real and complex) ------------------------------------------

def _log_half(x: np.ndarray):
    return math.log(0.5) if is_complex(x.dtype) else x.dtype.type(math.log(0.5))


def _cosh(x: np.ndarray) -> np.ndarray:
    return exp(x + _log_half(x)) + exp(_log_half(x) - x)


def _sinh_large(x: np.ndarray) -> np.ndarray:
    return exp(x + _log_half(x)) - exp(_log_half(x) - x)


def _sinh(x: np.ndarray) -> np.ndarray:
    if is_complex(x.dtype):
        return _sinh_large(x)
    e = expm1(x)
    small = x.dtype.type(0.5) * (e + e / (e + 1))
    return np.where(np.abs(x) < 1, small, _sinh_large(x))


HYPERBOLIC = {"chlo.cosh": _cosh, "chlo.sinh": _sinh}


# --- library functions (tan; complex inverse functions) ------------------------

LIBRARY = {"chlo.acos": np.arccos, "chlo.acosh": np.arccosh, "chlo.asin": np.arcsin,
           "chlo.asinh": np.arcsinh, "chlo.atan": np.arctan, "chlo.atanh": np.arctanh,
           "chlo.tan": np.tan}


def _with_signs(real_sign, imag_sign):
    """Fix the signs of a complex result's parts (None: keep numpy's)."""
    def fix(z, result):
        real, imag = result.real, result.imag
        if real_sign is not None:
            real = np.copysign(real, real_sign(z))
        if imag_sign is not None:
            imag = np.copysign(imag, imag_sign(z))
        fixed = np.empty_like(result)
        fixed.real, fixed.imag = real, imag
        return fixed
    return fix


def _sign_where(condition, when_true: float):
    return lambda z: np.where(condition(z), when_true, -when_true)


# XLA's side of each branch cut: the comparison its expansion makes.
_COMPLEX_BRANCH_SIGNS = {
    "chlo.asin": _with_signs(None, _sign_where(lambda z: z.imag < 0, -1.0)),
    "chlo.acos": _with_signs(None, _sign_where(lambda z: z.imag < 0, 1.0)),
    "chlo.acosh": _with_signs(None, _sign_where(lambda z: z.imag < 0, -1.0)),
    "chlo.asinh": _with_signs(_sign_where(lambda z: z.real < 0, -1.0), None),
    "chlo.atanh": _with_signs(_sign_where(lambda z: z.real >= 0, 1.0), None),
    "chlo.atan": _with_signs(None, _sign_where(lambda z: -z.imag >= 0, -1.0)),
}


def _library(name: str, x: np.ndarray) -> np.ndarray:
    """numpy's function in double precision, rounded to XLA's precision."""
    wide = x.astype(np.complex128 if is_complex(x.dtype) else np.float64)
    result = LIBRARY[name](wide)
    if name in _COMPLEX_BRANCH_SIGNS and is_complex(x.dtype):
        result = _COMPLEX_BRANCH_SIGNS[name](wide, result)
    return result.astype(xla_dtype(x.dtype))


# --- the ops -------------------------------------------------------------------

def _validate_trigonometric(op) -> None:
    dtype = op.operand_types[0].dtype
    if not (is_float(dtype) or is_complex(dtype)) or op.operand_types[0].quant is not None:
        raise op.error(f"{op.name} needs a floating-point or complex operand, not "
                       f"{op.operand_types[0].element_type}", cls=Unimplemented)


@register(*LIBRARY, *HYPERBOLIC, validate=_validate_trigonometric)
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
        else:
            result = _library(op.name, x)
    return np.asarray(result).astype(op.result_type.dtype)
