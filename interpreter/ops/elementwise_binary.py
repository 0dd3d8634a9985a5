"""Binary elementwise arithmetic: add, subtract, multiply, divide, remainder,
power, maximum, minimum, atan2 and complex.

Spec sections: add, subtract, multiply, divide, remainder, power, maximum,
minimum, atan2, complex.

Integer arithmetic wraps modulo 2^n. Where the spec leaves integer results
open (division by zero, INT_MIN / -1, negative exponents), the kernels give
what XLA CPU gives (and the StableHLO reference interpreter agrees):

    x / 0 = -1 (all bits set)      INT_MIN / -1 = INT_MIN
    x % 0 = x                      INT_MIN % -1 = 0
    x ** -n = 0 unless |x| = 1, where (+-1) ** -n = (+-1) ** n

Operands compute widened (narrow floats in float32); power and atan2, being
transcendental, compute in double precision and round once. Complex
multiply, divide and power use XLA's formulas (see `elementwise_complex`).
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_complex, is_float, is_integer, is_unsigned
from pjrt_ref.interpreter.ops.elementwise_complex import complex_divide, complex_multiply, complex_power
from pjrt_ref.interpreter.ops.elementwise_support import (accepts, as_result, complex_from_parts, elementwise, widen,
                                                          widen_for_math)

NUMBERS = ("integer", "float", "complex")


def _make_binary_kernel(name: str, function, note: str):
    @elementwise
    def kernel(op, lhs, rhs):
        return as_result(function(widen(lhs), widen(rhs)), op.result_type.dtype)

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f'Spec "{name}" (docs/spec.md#{name}): {" ".join(note.split())}'
    return kernel


# --- division ------------------------------------------------------------------

def _integer_quotient_and_remainder(lhs, rhs):
    """Truncating division (quotient rounds toward zero, remainder has the
    dividend's sign) with XLA's results for x / 0 and INT_MIN / -1."""
    by_zero = rhs == 0
    overflow = np.zeros_like(by_zero)
    if not is_unsigned(lhs.dtype):
        overflow = (lhs == np.iinfo(lhs.dtype).min) & (rhs == -1)
    # Divide by 1 where the result is special: INT_MIN / 1 = INT_MIN and
    # INT_MIN % 1 = 0 are already the wanted results for the overflow case.
    divisor = np.where(by_zero | overflow, np.ones_like(rhs), rhs)
    remainder = np.fmod(lhs, divisor)  # C's %: sign of the dividend
    quotient = (lhs - remainder) // divisor  # exact, so floor == trunc
    quotient = np.where(by_zero, np.array(-1).astype(lhs.dtype), quotient)
    remainder = np.where(by_zero, lhs, remainder)
    return quotient, remainder


def _divide(lhs, rhs):
    """integers truncate toward zero, x / 0 = -1 (all ones), INT_MIN / -1 =
    INT_MIN; floats divide as IEEE-754 (x / 0 = +-inf, 0 / 0 = NaN); complex
    by XLA's Smith's algorithm with C99 recovery of infinities."""
    if is_integer(lhs.dtype):
        return _integer_quotient_and_remainder(lhs, rhs)[0]
    if is_complex(lhs.dtype):
        return complex_divide(lhs, rhs)
    return np.true_divide(lhs, rhs)


def _multiply(lhs, rhs):
    """booleans: AND; integers wrap modulo 2^n; complex as XLA, with fused
    multiply-adds (see elementwise_complex)."""
    if is_complex(lhs.dtype):
        return complex_multiply(lhs, rhs)
    return np.multiply(lhs, rhs)


def _remainder(lhs, rhs):
    """lhs - trunc(lhs / rhs) * rhs: the result has the dividend's sign;
    x % 0 = x and INT_MIN % -1 = 0 for integers; floats use fmod (exact;
    fmod(x, 0) = NaN, fmod(+-inf, y) = NaN, fmod(x, +-inf) = x)."""
    if is_integer(lhs.dtype):
        return _integer_quotient_and_remainder(lhs, rhs)[1]
    return np.fmod(lhs, rhs)


# --- power -------------------------------------------------------------------

def _integer_power(base, exponent):
    """Exponentiation by squaring, wrapping modulo 2^n; a negative exponent
    gives 0 unless |base| = 1."""
    negative = exponent < 0
    # |exponent| as unsigned, so |INT_MIN| = 2^(n-1) is still right.
    remaining = np.abs(exponent).astype(np.dtype(f"u{exponent.dtype.itemsize}"))
    result = np.ones_like(base)
    square = base.copy()
    while np.any(remaining):
        odd = (remaining & 1).astype(bool)
        result = np.where(odd, result * square, result)
        square = square * square
        remaining = remaining >> 1
    one = np.abs(base) == 1
    return np.where(negative & ~one, np.zeros_like(result), result)


def _power(lhs, rhs):
    """integers by squaring (x ** -n = 0 unless |x| = 1); floats use IEEE
    `pow` (pow(x, 0) = 1 even for NaN x, pow(-8, 1/3) = NaN); complex
    follows XLA's polar-form formula (see complex_power)."""
    if is_integer(lhs.dtype):
        return _integer_power(lhs, rhs)
    lhs, rhs = widen_for_math(lhs), widen_for_math(rhs)
    if is_complex(lhs.dtype):
        return complex_power(lhs, rhs)
    return np.power(lhs, rhs)


# --- maximum / minimum ----------------------------------------------------------

def _lexicographic_greater(a, b):
    return (a.real > b.real) | ((a.real == b.real) & (a.imag > b.imag))


def maximum_values(lhs, rhs):
    """booleans: OR; floats: IEEE maximum (NaN propagates, max(-0, +0) = +0);
    complex: lexicographic on (real, imag), a NaN part never compares greater."""
    if is_complex(lhs.dtype):
        return np.where(_lexicographic_greater(lhs, rhs), lhs, rhs)
    result = np.maximum(lhs, rhs)
    if is_float(lhs.dtype):
        both_zero = (lhs == 0) & (rhs == 0)
        result = np.where(both_zero, np.where(np.signbit(lhs), rhs, lhs), result)
    return result


def minimum_values(lhs, rhs):
    """booleans: AND; floats: IEEE minimum (NaN propagates, min(-0, +0) = -0);
    complex: lexicographic on (real, imag), a NaN part never compares less."""
    if is_complex(lhs.dtype):
        return np.where(_lexicographic_greater(rhs, lhs), lhs, rhs)
    result = np.minimum(lhs, rhs)
    if is_float(lhs.dtype):
        both_zero = (lhs == 0) & (rhs == 0)
        result = np.where(both_zero, np.where(np.signbit(lhs), lhs, rhs), result)
    return result


# --- the rest --------------------------------------------------------------------

def _atan2(lhs, rhs):
    """atan2(y, x) with IEEE quadrants (atan2(+-0, -0) = +-pi); complex uses
    -i log((x + iy) / sqrt(x^2 + y^2))."""
    lhs, rhs = widen_for_math(lhs), widen_for_math(rhs)
    if is_complex(lhs.dtype):
        return -1j * np.log((rhs + 1j * lhs) / np.sqrt(rhs * rhs + lhs * lhs))
    return np.arctan2(lhs, rhs)


def _complex(lhs, rhs):
    """lhs + i*rhs; infinite and NaN parts stay where they are."""
    return complex_from_parts(lhs, rhs)


# op name -> (function of the widened operands, accepted element types, note).
BINARY_OPS = {
    "add": (np.add, ("bool",) + NUMBERS, "booleans: OR; integers wrap modulo 2^n."),
    "subtract": (np.subtract, NUMBERS, "integers wrap modulo 2^n."),
    "multiply": (_multiply, ("bool",) + NUMBERS, _multiply.__doc__),
    "divide": (_divide, NUMBERS, _divide.__doc__),
    "remainder": (_remainder, ("integer", "float"), _remainder.__doc__ +
                  " Complex remainder is TBD in the spec and not supported."),
    "power": (_power, NUMBERS, _power.__doc__),
    "maximum": (maximum_values, ("bool",) + NUMBERS, maximum_values.__doc__),
    "minimum": (minimum_values, ("bool",) + NUMBERS, minimum_values.__doc__),
    "atan2": (_atan2, ("float", "complex"), _atan2.__doc__),
    "complex": (_complex, ("float", "any result"), _complex.__doc__),
}

for _name, (_function, _types, _note) in BINARY_OPS.items():
    register(f"stablehlo.{_name}", validate=accepts(*_types))(
        _make_binary_kernel(_name, _function, _note))
