"""Integer, bit and rounding ops as numba scalar expressions, for compiled loops.

optimiser/loops.py compiles whole `while` loops and regions.py region bodies
through translator.py; before this module, an integer remainder or
division, a shift or a popcount in a loop body (JAX lowers `i % 7` and
`i // 3` to rem, div, compare and select; its PRNG is shifts and xors on
uint32) sent the whole loop back to op-by-op interpretation. Each template
here computes the interpreter's bits exactly (the kernels in
ops/elementwise_binary.py, bitwise.py, convert.py, elementwise_unary.py):

* integer arithmetic of every width, signed and unsigned: each result is cast
  back to its own type, which keeps its low n bits, as the interpreter's
  two's-complement wrap does;
* divide and remainder truncate toward zero, with XLA's answers where the
  spec leaves them open: x / 0 = -1 (all bits set), x % 0 = x,
  INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0;
* shifts read the amount as an unsigned n-bit number: an amount >= n shifts
  everything out (0, or the sign fill for shift_right_arithmetic, which
  shifts in copies of the top bit for unsigned types too);
* popcnt and count_leading_zeros count the n-bit pattern;
* convert between integers wraps; integer -> float32/float64 rounds to
  nearest even (one LLVM conversion, as numpy's); float -> integer
  truncates toward zero and saturates (NaN -> 0), as convert.py does;
* bitcast_convert between types of one width reinterprets the bits;
* float remainder is fmod (exact), floor, ceil, round_nearest_even,
  round_nearest_afz and sign follow elementwise_unary.py (sign keeps -0.0
  and NaN), clamp is minimum(maximum(x, lo), hi) with the IEEE maximum and
  minimum of codegen's prelude.

Numba's typing would turn a mix of signed and unsigned 64-bit integers into
float64, so every helper works on one type at a time, and unsigned
patterns are formed with an explicit cast. The helpers are defined once in
INTEGER_PRELUDE, which codegen adds to a generated module that calls them.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.types import TensorType
from pjrt_ref.interpreter.native.scalar_expressions import BOOL, COMPARE, FLOATS, scalar_expression

SIGNED = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UNSIGNED = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
INTEGERS = SIGNED + UNSIGNED
# Every element type compiled loops carry, by its name in generated code.
TYPE_NAMES = {dtype: dtype.name for dtype in INTEGERS + FLOATS}
TYPE_NAMES[BOOL] = "bool_"

_WRAPPING = {"stablehlo.add": "{0} + {1}", "stablehlo.subtract": "{0} - {1}",
             "stablehlo.multiply": "{0} * {1}", "stablehlo.maximum": "max({0}, {1})",
             "stablehlo.minimum": "min({0}, {1})"}
_BITWISE = {"stablehlo.and": "{0} & {1}", "stablehlo.or": "{0} | {1}", "stablehlo.xor": "{0} ^ {1}"}
_SHIFTS = {"stablehlo.shift_left": "shift_left", "stablehlo.shift_right_logical": "shift_right_logical",
           "stablehlo.shift_right_arithmetic": "shift_right_arithmetic"}
_ROUNDING = {"stablehlo.floor": "np.floor({0})", "stablehlo.ceil": "np.ceil({0})",
             "stablehlo.round_nearest_even": "np.rint({0})",
             "stablehlo.round_nearest_afz": "round_nearest_afz({0})",
             "stablehlo.sign": "float_sign({0})"}


def _bits(dtype: np.dtype) -> str:
    """The unsigned type of `dtype`'s width, by name."""
    return f"uint{dtype.itemsize * 8}"


def _signed(dtype: np.dtype) -> str:
    return f"int{dtype.itemsize * 8}"


def _literal(dtype: np.dtype, value: int) -> str:
    return f"{TYPE_NAMES[dtype]}({value})"


def loop_expression(op) -> str | None:
    """The numba scalar expression of `op` over its operands {0}, {1}, ... for
    the element types above, or None (translator.py then tries the float
    expressions of scalar_expressions.py, and otherwise stops compiling)."""
    types = op.operand_types + op.result_types
    if any(not isinstance(t, TensorType) or t.quant is not None for t in types):
        return None
    operands = [t.dtype for t in op.operand_types]
    result = op.result_types[0].dtype
    if op.name == "stablehlo.convert":
        return _convert(operands[0], result)
    if op.name == "stablehlo.bitcast_convert":
        return _bitcast(operands[0], result)
    if op.name == "stablehlo.compare":
        return _compare(op, operands[0])
    if op.name == "stablehlo.is_finite":
        return "math.isfinite({0})" if operands[0] in FLOATS and result == BOOL else None
    if op.name == "stablehlo.select":
        same = operands[1] == operands[2] == result and operands[0] == BOOL
        return "{1} if {0} else {2}" if same and result in TYPE_NAMES else None
    if any(d != result for d in operands):
        return None
    if result in INTEGERS:
        return _integer(op.name, result)
    if result == BOOL:
        return _boolean(op.name)
    if result in FLOATS:
        return _float(op.name)
    return None


def element_expression(op) -> str | None:
    """The numba scalar expression of elementwise `op` over its operands for
    every element type compiled code carries: this module's templates, else
    the float ones of scalar_expressions.py. Fused runs (optimiser/fusion.py) and
    compiled loops and regions (translator.py) both build from it."""
    return loop_expression(op) or scalar_expression(op)


def _integer(name: str, dtype: np.dtype) -> str | None:
    if name in _WRAPPING:
        return _WRAPPING[name]
    if name in _BITWISE:
        return _BITWISE[name]
    if name in _SHIFTS:
        width = dtype.itemsize * 8
        return f"{_SHIFTS[name]}({_bits(dtype)}({{0}}), {_bits(dtype)}({{1}}), {width})"
    unsigned = dtype in UNSIGNED
    if name == "stablehlo.divide":
        return (f"unsigned_divide({{0}}, {{1}}, {_literal(dtype, np.iinfo(dtype).max)})" if unsigned
                else f"signed_divide({{0}}, {{1}}, {_literal(dtype, np.iinfo(dtype).min)})")
    if name == "stablehlo.remainder":
        return "unsigned_remainder({0}, {1})" if unsigned else "signed_remainder({0}, {1})"
    if name == "stablehlo.negate":
        return f"{_literal(dtype, 0)} - {{0}}"
    if name == "stablehlo.not":
        return "~{0}"
    if name == "stablehlo.abs" and not unsigned:
        return "abs({0})"
    if name == "stablehlo.sign" and not unsigned:
        return f"{_literal(dtype, 1)} if {{0}} > 0 else ({_literal(dtype, -1)} if {{0}} < 0 else {_literal(dtype, 0)})"
    if name == "stablehlo.popcnt":
        return f"popcount({_bits(dtype)}({{0}}))"
    if name == "stablehlo.count_leading_zeros":
        return f"leading_zeros({_bits(dtype)}({{0}}), {dtype.itemsize * 8})"
    if name == "stablehlo.clamp":
        return "min(max({1}, {0}), {2})"
    return None


def _boolean(name: str) -> str | None:
    if name in _BITWISE:
        return _BITWISE[name]
    if name == "stablehlo.not":
        return "not {0}"
    return None


def _float(name: str) -> str | None:
    if name == "stablehlo.remainder":
        return "np.fmod({0}, {1})"
    if name == "stablehlo.clamp":
        return "minimum(maximum({1}, {0}), {2})"
    return _ROUNDING.get(name)


def _compare(op, operand: np.dtype) -> str | None:
    """Integers and i1 compared by value; the compare_type must say how (floats:
    scalar_expressions.py)."""
    allowed = {**{d: (None, "SIGNED") for d in SIGNED}, **{d: (None, "UNSIGNED") for d in UNSIGNED},
               BOOL: (None, "SIGNED", "UNSIGNED")}
    if op.attrs.get("compare_type") not in allowed.get(operand, ()):
        return None
    return "{0} %s {1}" % COMPARE[op.attrs["comparison_direction"]]


def _convert(source: np.dtype, result: np.dtype) -> str | None:
    if source not in TYPE_NAMES or result not in TYPE_NAMES:
        return None
    if result == BOOL:
        return "{0} != 0"
    if source in FLOATS and result in INTEGERS:
        return _float_to_integer(result)
    if source in FLOATS and result in FLOATS:
        return "{0}"
    return "{0}"    # integer or bool -> integer (keeps the low bits) or float (nearest even)


def _float_to_integer(result: np.dtype) -> str:
    """Truncate toward zero and saturate, NaN -> 0 (convert.py's float_to_integer).
    Every branch is of the result type: a float64 branch would round the
    64-bit bounds."""
    info = np.iinfo(result)
    upper = float(2 ** (result.itemsize * 8 - (0 if result in UNSIGNED else 1)))
    lower = 0.0 if result in UNSIGNED else -upper
    truncated = "np.trunc(float64({0}))"
    return (f"{_literal(result, info.max)} if {truncated} >= {upper!r} else "
            f"({_literal(result, info.min)} if {truncated} < {lower!r} else "
            f"({_literal(result, 0)} if {{0}} != {{0}} else {TYPE_NAMES[result]}({truncated})))")


def _bitcast(source: np.dtype, result: np.dtype) -> str | None:
    if source not in TYPE_NAMES or result not in TYPE_NAMES or BOOL in (source, result):
        return None
    if source.itemsize != result.itemsize:
        return None
    return f"{TYPE_NAMES[source]}({{0}}).view(np.{TYPE_NAMES[result]})"


# The helpers the templates call, added to a generated module that calls one.
INTEGER_PRELUDE = '''

@njit(cache=True, error_model="numpy", inline="always")
def signed_divide(a, b, smallest):
    """Truncating division; x / 0 = -1 and INT_MIN / -1 = INT_MIN (XLA's answers)."""
    if b == 0:
        return -1
    if b == -1 and a == smallest:
        return a
    quotient = a // b
    if a % b != 0 and (a < 0) != (b < 0):
        quotient += 1
    return quotient


@njit(cache=True, error_model="numpy", inline="always")
def signed_remainder(a, b):
    """The dividend's sign; x % 0 = x and x % -1 = 0 (so INT_MIN % -1 = 0)."""
    if b == 0:
        return a
    if b == -1:
        return 0
    remainder = a % b
    if remainder != 0 and (remainder < 0) != (a < 0):
        remainder -= b
    return remainder


@njit(cache=True, error_model="numpy", inline="always")
def unsigned_divide(a, b, all_ones):
    return all_ones if b == 0 else a // b


@njit(cache=True, error_model="numpy", inline="always")
def unsigned_remainder(a, b):
    return a if b == 0 else a % b


@njit(cache=True, inline="always")
def shift_left(bits, amount, width):
    """bits and amount as unsigned patterns of `width` bits."""
    return bits << amount if amount < width else bits ^ bits


@njit(cache=True, inline="always")
def shift_right_logical(bits, amount, width):
    return bits >> amount if amount < width else bits ^ bits


@njit(cache=True, inline="always")
def shift_right_arithmetic(bits, amount, width):
    """Copies of the top bit shift in; an amount >= width leaves only them."""
    signed = np.int64(np.uint64(bits) << np.uint64(64 - width)) >> np.int64(64 - width)
    if amount >= width:
        return signed >> np.int64(63)
    return signed >> np.int64(amount)


@njit(cache=True, inline="always")
def popcount(bits):
    value = np.uint64(bits)
    count = 0
    while value:
        value &= value - np.uint64(1)
        count += 1
    return count


@njit(cache=True, inline="always")
def leading_zeros(bits, width):
    value = np.uint64(bits)
    count = width
    while value:
        value >>= np.uint64(1)
        count -= 1
    return count


@njit(cache=True, error_model="numpy", inline="always")
def round_nearest_afz(x):
    """Half away from zero, from trunc(x) and the exact x - trunc(x); keeps -0.0."""
    truncated = np.trunc(x)
    if abs(x - truncated) >= 0.5:
        truncated += math.copysign(1.0, x)
    return math.copysign(truncated, x)


@njit(cache=True, error_model="numpy", inline="always")
def float_sign(x):
    """-1, 1, or x itself for NaN and +-0."""
    if x != x or x == 0:
        return x
    return 1.0 if x > 0 else -1.0
'''
# The names INTEGER_PRELUDE defines (codegen adds it when one is called).
PRELUDE_FUNCTIONS = ("signed_divide", "signed_remainder", "unsigned_divide", "unsigned_remainder",
                     "shift_left", "shift_right_logical", "shift_right_arithmetic", "popcount",
                     "leading_zeros", "round_nearest_afz", "float_sign")
