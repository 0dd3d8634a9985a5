"""Unary elementwise math: exp/log/trig, roundings, abs, negate, sign, and
the complex-number accessors.

Spec sections: abs, cbrt, ceil, complex accessors (real, imag), cosine,
exponential, exponential_minus_one, floor, is_finite, log, log_plus_one,
logistic, negate, round_nearest_afz, round_nearest_even, rsqrt, sign, sine,
sqrt, tan, tanh.

Most ops differ only in the numpy function they apply, so they are two
tables and one generic kernel. Exact ops (`EXACT_UNARY_OPS`: abs, floor,
sign, ...) receive the operand widened to its compute type (narrow floats in
float32, see `elementwise_support`); transcendental ones (`MATH_UNARY_OPS`)
receive it in double precision. Either way the result is rounded once to
the result type.
IEEE special values (NaN, infinities, signed zeros) follow numpy, which
follows C99 Annexes F and G. XLA CPU agrees on real operands; for complex
ones it departs from Annex G in places (sqrt(-1 - 0i) = +i, log(inf + NaN i)
= NaN + NaN i, ...), and those cases keep the C99 answer here.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.elementwise_support import (accepts, as_result, complex_from_parts, elementwise, widen,
                                                          widen_for_math)

FLOATS = ("float",)
FLOATS_COMPLEX = ("float", "complex")
SIGNED_FLOATS_COMPLEX = ("signed", "float", "complex")


def _logistic(x):
    """1 / (1 + e^-x): saturates cleanly to 0 and 1 for large |x|."""
    return 1 / (1 + np.exp(-x))


def _rsqrt(x):
    """1 / sqrt(x); for complex x the reciprocal is scaled so that huge and
    infinite roots give 0 instead of numpy's NaN (1 / (inf + inf i) = 0),
    and rsqrt(0) = inf + NaN i, as on XLA CPU."""
    root = np.sqrt(x)
    if not np.iscomplexobj(x):
        return 1 / root
    p, q = root.real, root.imag
    scale = np.maximum(np.abs(p), np.abs(q))
    p_scaled, q_scaled = p / scale, q / scale
    norm = p_scaled * p_scaled + q_scaled * q_scaled
    real, imag = p_scaled / norm / scale, -q_scaled / norm / scale
    infinite = np.isinf(scale)
    real = np.where(infinite, np.copysign(0.0, p), np.where(scale == 0, np.inf, real))
    imag = np.where(infinite, np.copysign(0.0, -q), imag)  # 1 / 0 = inf + NaN i
    return complex_from_parts(real, imag)


def _expm1(x):
    """e^x - 1, accurate near 0; numpy's expm1 has no complex loop, so for
    complex x = a + bi it is expm1(a)cos(b) - 2 sin^2(b/2) + i e^a sin(b),
    with a real x staying real (expm1(inf + 0i) = inf + 0i)."""
    if np.iscomplexobj(x):
        a, b = x.real, x.imag
        real = np.expm1(a) * np.cos(b) - 2 * np.sin(b / 2) ** 2
        imag = np.where(b == 0, b, np.exp(a) * np.sin(b))
        return complex_from_parts(real, imag)
    return np.expm1(x)


def exp_values(x):
    """e^x; for complex x = a + bi, e^a cos(b) + i e^a sin(b) as XLA CPU
    computes it (with the imaginary part exactly b when b = 0, so that
    e^(inf + 0i) = inf + 0i), not C99's cexp: e^(-inf + inf i) is NaN + NaN i
    where C99 gives 0 + 0i. JAX's accuracy tests of exp, cosh and sinh (which
    JAX decomposes into exponentials) expect these values."""
    if not np.iscomplexobj(x):
        return np.exp(x)
    scale = np.exp(x.real)
    imag = np.where(x.imag == 0, x.imag, scale * np.sin(x.imag))
    return complex_from_parts(scale * np.cos(x.imag), imag)


def tan_values(x):
    """numpy's tan; for complex x = +-inf + 0i or NaN + 0i the result is
    NaN + NaN i, as XLA CPU gives and JAX's accuracy tests expect, where C99
    keeps the zero imaginary part. (chlo.tan uses it too.)"""
    result = np.tan(x)
    if np.iscomplexobj(x):
        result.imag = np.where((x.imag == 0) & ~np.isfinite(x.real), np.nan, result.imag)
    return result


def _cbrt(x):
    """The real cube root for real x (cbrt(-8) = -2); for complex x the
    principal root |x|^(1/3) (cos(arg x / 3) + i sin(arg x / 3)), as in the
    spec's reference interpreter (cbrt(-8 + 0i) = 1 + 1.732i)."""
    if not np.iscomplexobj(x):
        return np.cbrt(x)
    modulus_root = np.hypot(x.real, x.imag) ** (1 / 3)
    angle = np.arctan2(x.imag, x.real) / 3
    return complex_from_parts(modulus_root * np.cos(angle), modulus_root * np.sin(angle))


def _abs(x):
    """|x|; abs(INT_MIN) wraps to INT_MIN; complex gives the modulus."""
    return np.abs(x)


def _sign(x):
    """Spec "sign": -1/0/1; NaN stays NaN; -0.0 and +0.0 keep their sign;
    complex x gives x / |x| (NaN if a part is NaN, 0 for 0)."""
    if np.iscomplexobj(x):
        modulus = np.abs(x)
        # Divide the parts separately: complex division by (|x| + 0i)
        # would turn (inf + 1i) into (nan + nan i) instead of (nan + 0i).
        sign = complex_from_parts(x.real / modulus, x.imag / modulus)
        sign = np.where(x == 0, 0, sign)
        return np.where(np.isnan(x.real) | np.isnan(x.imag), complex(np.nan, np.nan), sign)
    if x.dtype.kind == "f":
        return np.where(x == 0, x, np.sign(x))  # np.sign(-0.0) would be +0.0
    return np.sign(x)


def _round_nearest_afz(x):
    """Round half away from zero; computed from trunc(x) and the exact
    difference x - trunc(x) so that 0.49999997 does not round up."""
    truncated = np.trunc(x)
    away = np.abs(x - truncated) >= 0.5
    rounded = truncated + np.where(away, np.sign(x), 0)
    return np.copysign(rounded, x)  # -0.4 -> -0.0


def _real(x):
    return x.real if np.iscomplexobj(x) else x


def _imag(x):
    return x.imag if np.iscomplexobj(x) else np.zeros_like(x)


# Ops whose result is exact in the operand's own precision: op name ->
# (function of the operand widened by `widen`, accepted element types, note).
EXACT_UNARY_OPS = {
    "abs": (_abs, SIGNED_FLOATS_COMPLEX, _abs.__doc__),
    "ceil": (np.ceil, FLOATS, "roundToIntegralTowardPositive; -0.5 -> -0.0."),
    "floor": (np.floor, FLOATS, "roundToIntegralTowardNegative; 0.5 -> 0.0."),
    "imag": (_imag, FLOATS_COMPLEX, "the imaginary part; 0 for real operands."),
    "is_finite": (np.isfinite, FLOATS, "false for NaN and +-inf."),
    "negate": (np.negative, ("integer", "float", "complex"),
               "-x; negate(INT_MIN) wraps to INT_MIN, unsigned wraps modulo 2^n."),
    "real": (_real, FLOATS_COMPLEX, "the real part; the operand itself for real operands."),
    "round_nearest_afz": (_round_nearest_afz, FLOATS, _round_nearest_afz.__doc__),
    "round_nearest_even": (np.rint, FLOATS, "roundToIntegralTiesToEven (2.5 -> 2)."),
    "sign": (_sign, SIGNED_FLOATS_COMPLEX, _sign.__doc__),
}

# Transcendental ops, computed in double precision (`widen_for_math`) and
# rounded once to the result type: same layout as EXACT_UNARY_OPS.
MATH_UNARY_OPS = {
    "cbrt": (_cbrt, FLOATS_COMPLEX, _cbrt.__doc__),
    "cosine": (np.cos, FLOATS_COMPLEX, "cos(+-inf) = NaN."),
    "exponential": (exp_values, FLOATS_COMPLEX, "overflow gives +inf, e^-inf = 0. " + exp_values.__doc__),
    "exponential_minus_one": (_expm1, FLOATS_COMPLEX, _expm1.__doc__),
    "log": (np.log, FLOATS_COMPLEX, "log(0) = -inf, log(x < 0) = NaN."),
    "log_plus_one": (np.log1p, FLOATS_COMPLEX, "log(1 + x), accurate near 0; log1p(-1) = -inf."),
    "logistic": (_logistic, FLOATS_COMPLEX, _logistic.__doc__),
    "rsqrt": (_rsqrt, FLOATS_COMPLEX, "rsqrt(0) = inf, rsqrt(x < 0) = NaN. " + _rsqrt.__doc__),
    "sine": (np.sin, FLOATS_COMPLEX, "sin(+-inf) = NaN."),
    "sqrt": (np.sqrt, FLOATS_COMPLEX, "sqrt(-0) = -0, sqrt(x < 0) = NaN."),
    "tan": (tan_values, FLOATS_COMPLEX, "tan(+-inf) = NaN. " + tan_values.__doc__),
    "tanh": (np.tanh, FLOATS_COMPLEX, "saturates to +-1."),
}


def _make_unary_kernel(name: str, function, widen_operand, note: str):
    @elementwise
    def kernel(op, operand):
        return as_result(function(widen_operand(operand)), op.result_type.dtype)

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f'Spec "{name}" (docs/spec.md#{name}): {" ".join(note.split())}'
    return kernel


for _table, _widen in ((EXACT_UNARY_OPS, widen), (MATH_UNARY_OPS, widen_for_math)):
    for _name, (_function, _types, _note) in _table.items():
        register(f"stablehlo.{_name}", validate=accepts(*_types, "any result"))(
            _make_unary_kernel(_name, _function, _widen, _note))
