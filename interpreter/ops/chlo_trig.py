"""CHLO trigonometric and hyperbolic ops: acos, acosh, asin, asinh, atan,
atanh, cosh, sinh and tan, on float and complex tensors.

CHLO ops have no section in the StableHLO spec (see ChloOps.td in
openxla/stablehlo). Values are the principal branches of the functions,
as in C99/numpy: for complex arguments the branch cuts are the usual ones
(asin/acos/atanh on the real axis outside [-1, 1], asinh/atan on the
imaginary axis outside [-i, i], acosh on the real axis below 1).

Precision follows XLA CPU: bf16, f16 (and the other narrow floats) are
computed in f32 and rounded; f32 is computed in f64 and rounded once
(within an ulp or two of XLA's own approximations). Where XLA's expansion of
the op is a formula with a rounding behaviour of its own, we evaluate that
formula instead, so the edge cases agree:

* cosh(x) = e^(x + log 1/2) + e^(-x + log 1/2), which does not overflow
  before cosh itself does; sinh likewise, with
  (expm1(x) + expm1(x) / (expm1(x) + 1)) / 2 for |x| < 1;
* atanh(x) = (log1p(x) - log1p(-x)) / 2 for real x, NaN for |x| > 1;
* on the branch cuts of the complex inverse functions, XLA picks the side
  by comparing the argument's parts with 0 (so -0 counts as +0), not by
  the sign of zero as C99 does (see `_COMPLEX_BRANCH_SIGNS`).

Complex arguments with infinite or NaN parts follow numpy (C99 Annex G);
XLA's expansions give NaN for some of those (e.g. acos(NaN i)).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import Unimplemented
from ..registry import register
from ..types import is_complex, is_float
from .chlo_special import exp, expm1, log1p


def _computation_dtype(dtype: np.dtype) -> np.dtype:
    """f64/complex128 as themselves; f32 in f64; narrower floats in f32."""
    if dtype in (np.float64, np.complex128):
        return dtype
    if dtype == np.complex64:
        return np.dtype(np.complex128)
    if dtype == np.float32:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


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


def _atanh(x: np.ndarray) -> np.ndarray:
    if is_complex(x.dtype):
        return np.arctanh(x)
    value = (log1p(x) - log1p(-x)) * x.dtype.type(0.5)
    return np.where(np.abs(x) > 1, x.dtype.type(np.nan), value)


TRIGONOMETRIC = {
    "chlo.acos": np.arccos,
    "chlo.acosh": np.arccosh,
    "chlo.asin": np.arcsin,
    "chlo.asinh": np.arcsinh,
    "chlo.atan": np.arctan,
    "chlo.atanh": _atanh,
    "chlo.cosh": _cosh,
    "chlo.sinh": _sinh,
    "chlo.tan": np.tan,
}

def _with_signs(real_sign, imag_sign):
    """Fix the signs of a complex result's parts (None: keep numpy's).

    On the branch cuts numpy follows C99, where a signed zero in the
    argument picks the side; XLA's expansions instead compare the argument's
    parts with 0, so -0 counts as +0. Each rule below is that comparison."""
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


_COMPLEX_BRANCH_SIGNS = {
    "chlo.asin": _with_signs(None, _sign_where(lambda z: z.imag < 0, -1.0)),
    "chlo.acos": _with_signs(None, _sign_where(lambda z: z.imag < 0, 1.0)),
    "chlo.acosh": _with_signs(None, _sign_where(lambda z: z.imag < 0, -1.0)),
    "chlo.asinh": _with_signs(_sign_where(lambda z: z.real < 0, -1.0), None),
    "chlo.atanh": _with_signs(_sign_where(lambda z: z.real >= 0, 1.0), None),
    "chlo.atan": _with_signs(None, _sign_where(lambda z: -z.imag >= 0, -1.0)),
}

# The formulas XLA itself evaluates are rounded as XLA rounds them: in the
# operand's own precision (narrow floats in f32), not in double.
_XLA_FORMULAS = ("chlo.atanh", "chlo.cosh", "chlo.sinh")


def _validate_trigonometric(op) -> None:
    dtype = op.operand_types[0].dtype
    if not (is_float(dtype) or is_complex(dtype)) or op.operand_types[0].quant is not None:
        raise op.error(f"{op.name} needs a floating-point or complex operand, not "
                       f"{op.operand_types[0].element_type}", cls=Unimplemented)


@register(*TRIGONOMETRIC, validate=_validate_trigonometric)
def trigonometric(op, x):
    """ChloOps.td "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh",
    "sinh", "tan": elementwise, principal branches; NaN outside the real
    domain (e.g. acos(2), acosh(0.5), atanh(2)); +-inf where the function
    overflows; the XLA formulas listed in the module docstring."""
    dtype = _computation_dtype(x.dtype)
    if op.name in _XLA_FORMULAS and x.dtype in (np.float32, np.complex64):
        dtype = x.dtype
    with np.errstate(all="ignore"):
        z = np.asarray(x).astype(dtype)
        result = TRIGONOMETRIC[op.name](z)
        if is_complex(dtype) and op.name in _COMPLEX_BRANCH_SIGNS:
            result = _COMPLEX_BRANCH_SIGNS[op.name](z, result)
    return np.asarray(result).astype(op.result_type.dtype)
