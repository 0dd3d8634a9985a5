"""The spec's answer for one element, recomputed without pjrt-ref's kernels.

Each op of opset.py is evaluated on Python numbers: integers as Python
ints, reduced to the result type's n bits (two's complement); floats from
their exact values (`fractions.Fraction`), with +, -, *, / and remainder
computed exactly and rounded once to the result type, round to nearest
even (IEEE 754 section 4.3.1, which the spec's floating-point types
follow); square root and the transcendental functions in `mpmath` at
`WORKING_BITS` bits, then rounded once. Rounding picks, among the
representable numbers next to the value, the nearest one by exact
comparison, so it owes nothing to numpy's or ml_dtypes' casts.

`Oracle.evaluate` returns, with the value, the spec clauses it relied on
and whether the spec leaves the case to the implementation ("silent": an
integer division by zero, a shift by the type's width or more, a float
too large for an integer type, the accuracy of a transcendental function).
Complex numbers are recomputed part by part for negation, addition,
subtraction, multiplication, division, maximum and minimum
(`complex_arithmetic`); their other ops raise Unsupported, and the
reference interpreter decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np

from pjrt_ref.judge.opset import PART_TYPE, element_class
from pjrt_ref.judge.values import dtype_of

WORKING_BITS = 2400       # enough to hold any sum of two float64 values exactly


@dataclass
class Answer:
    value: object              # a numpy scalar of the result's element type, or None
    silent: str | None = None  # why the spec leaves this case to the implementation
    clause: str = ""           # the spec section relied on


class Unsupported(Exception):
    """The oracle has no independent computation for this op or element type."""


# --------------------------------------------------------------- rounding
def _bits_type(dtype: np.dtype) -> np.dtype:
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize])


def _neighbours(value: np.ndarray) -> list[np.ndarray]:
    """`value` and the representable numbers one bit pattern either side of it."""
    bits = value.reshape(1).view(_bits_type(value.dtype)).astype(np.int64)
    found = [value]
    for step in (-1, 1):
        pattern = bits + step
        if 0 <= int(pattern[0]) < 256 ** value.dtype.itemsize:
            found.append(pattern.astype(_bits_type(value.dtype)).view(value.dtype).reshape(()))
    return found


def round_to(exact: Fraction, element_type: str) -> np.ndarray:
    """The finite nonzero rational `exact` rounded to nearest, ties to even, in `element_type`."""
    dtype = dtype_of(element_type)
    info = ml_dtypes.finfo(dtype)
    largest = Fraction(float(info.max))
    ulp_at_max = Fraction(2) ** (int(math.floor(math.log2(float(info.max)))) - info.nmant)
    if abs(exact) >= largest + ulp_at_max / 2:          # beyond the rounding range: overflow
        return np.array(_signed(math.inf, exact)).astype(dtype)
    guess = np.array(float(exact)).astype(dtype)
    if not np.isfinite(guess.astype(np.float64)):
        guess = np.array(_signed(float(info.max), exact)).astype(dtype)
    best = None
    for candidate in _neighbours(guess) + _neighbours(np.array(0.0).astype(dtype)):
        as_float = float(candidate.astype(np.float64))
        if not math.isfinite(as_float):
            continue
        distance = abs(Fraction(as_float) - exact)
        even = int(candidate.reshape(1).view(_bits_type(dtype))[0]) % 2 == 0
        key = (distance, not even)
        if best is None or key < best[0]:
            best = (key, candidate)
    result = best[1]
    if float(result.astype(np.float64)) == 0.0:          # underflow keeps the sign
        result = np.array(_signed(0.0, exact)).astype(dtype)
    return result


def _signed(magnitude: float, like: Fraction) -> float:
    return -magnitude if like < 0 else magnitude


def float_result(exact_or_special, element_type: str) -> np.ndarray:
    """A result given exactly (Fraction) or as an IEEE float64 special (NaN, inf, signed zero)."""
    if isinstance(exact_or_special, Fraction) and exact_or_special != 0:
        return round_to(exact_or_special, element_type)
    return np.array(float(exact_or_special)).astype(dtype_of(element_type))


def _mp_result(function, *arguments: float) -> Fraction | float:
    """`function` of `arguments` in mpmath at WORKING_BITS, exactly as a Fraction (or a special)."""
    with mpmath.workprec(WORKING_BITS):
        value = function(*[mpmath.mpf(a) for a in arguments])
        if not mpmath.isfinite(value) or value == 0:
            return float(value)
        negative, mantissa, exponent, _ = value._mpf_        # exactly (-1)^s * m * 2^e
        return Fraction(-int(mantissa) if negative else int(mantissa)) * Fraction(2) ** int(exponent)


# --------------------------------------------------------------- integers
def wrap(value: int, element_type: str) -> int:
    """`value` reduced to the n bits of integer type `element_type` (two's complement)."""
    info = ml_dtypes.iinfo(dtype_of(element_type))
    width = int(info.max - info.min).bit_length()
    value &= (1 << width) - 1
    return value - (1 << width) if int(info.min) < 0 and value > int(info.max) else value


def _width(element_type: str) -> int:
    info = ml_dtypes.iinfo(dtype_of(element_type))
    return int(info.max - info.min).bit_length()


def _integer_binary(op: str, a: int, b: int, t: str) -> Answer:
    width = _width(t)
    clause = f"stablehlo.{op}"
    if op in ("divide", "remainder"):
        if b == 0:
            return Answer(None, f"integer {op} by zero", clause)
        if element_class(t) == "signed" and a == int(ml_dtypes.iinfo(dtype_of(t)).min) and b == -1:
            return Answer(None, f"integer {op} overflow (min / -1)", clause)
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)       # truncating
        return Answer(wrap(quotient if op == "divide" else a - b * quotient, t), None, clause)
    if op in ("shift_left", "shift_right_logical", "shift_right_arithmetic"):
        amount = b % (1 << width) if element_class(t) == "signed" else b
        if amount >= width:
            return Answer(None, f"{op} by the type's width or more", clause)
        unsigned = a % (1 << width)
        signed = unsigned - (1 << width) if unsigned >> (width - 1) else unsigned   # the bits as two's complement
        shifted = {"shift_left": unsigned << amount, "shift_right_logical": unsigned >> amount,
                   "shift_right_arithmetic": signed >> amount}[op]          # fills with the top bit, any type
        return Answer(wrap(shifted, t), None, clause)
    results = {"add": a + b, "subtract": a - b, "multiply": a * b, "maximum": max(a, b),
               "minimum": min(a, b), "and": a & b, "or": a | b, "xor": a ^ b}
    return Answer(wrap(results[op], t), None, clause)


def _integer_unary(op: str, a: int, t: str) -> Answer:
    width = _width(t)
    unsigned = a % (1 << width)
    results = {"negate": -a, "abs": abs(a), "sign": (a > 0) - (a < 0), "not": ~a,
               "popcnt": bin(unsigned).count("1"), "count_leading_zeros": width - unsigned.bit_length()}
    return Answer(wrap(results[op], t), None, f"stablehlo.{op}")


# --------------------------------------------------------------- floats
def _exact(x: float) -> Fraction | float:
    """x as a Fraction when finite and nonzero; otherwise the float itself."""
    return Fraction(x) if math.isfinite(x) and x != 0 else x


def _ieee(op: str, a: float, b: float) -> float:
    """The IEEE 754 result in float64, for specials (NaN, inf, zeros)."""
    with np.errstate(all="ignore"):
        x, y = np.float64(a), np.float64(b)
        return float({"add": x + y, "subtract": x - y, "multiply": x * y, "divide": x / y,
                      "remainder": np.fmod(x, y)}[op])


def _float_binary(op: str, a: float, b: float, t: str) -> Answer:
    clause = f"stablehlo.{op}; IEEE 754 round to nearest even"
    if op in ("maximum", "minimum"):
        if math.isnan(a) or math.isnan(b):
            return Answer(float_result(math.nan, t), None, f"stablehlo.{op} (NaN propagates)")
        if a == b == 0:       # the spec orders -0 below +0 here (IEEE 754 maximum/minimum)
            pick = max if op == "maximum" else min
            return Answer(float_result(pick((a, b), key=lambda v: math.copysign(1, v)), t), None,
                          f"stablehlo.{op} (-0 < +0)")
        return Answer(float_result(_exact((max if op == "maximum" else min)(a, b)), t), None, clause)
    if op in ("power", "atan2"):
        clause = f"stablehlo.{op}"
        if not (math.isfinite(a) and math.isfinite(b)) or a == 0 or b == 0 or (op == "power" and a < 0):
            # Special values: C99 Annex F's (IEEE 754's recommended) answers, in float64.
            with np.errstate(all="ignore"):
                special = float((np.power if op == "power" else np.arctan2)(np.float64(a), np.float64(b)))
            return Answer(float_result(_exact(special), t), "transcendental: accuracy not specified", clause)
        function = mpmath.power if op == "power" else mpmath.atan2
        return Answer(float_result(_mp_result(function, a, b), t), "transcendental: accuracy not specified",
                      clause)
    x, y = _exact(a), _exact(b)
    if isinstance(x, Fraction) and isinstance(y, Fraction):
        if op == "remainder":
            quotient = x / y
            exact = x - y * (math.floor(quotient) if quotient > 0 else math.ceil(quotient))
        else:
            exact = {"add": x + y, "subtract": x - y, "multiply": x * y, "divide": x / y}[op]
        if exact == 0:
            return Answer(float_result(_ieee(op, a, b), t), None, clause)
        return Answer(float_result(exact, t), None, clause)
    return Answer(float_result(_ieee(op, a, b), t), None, clause)


_MP_UNARY = {
    "exponential": mpmath.exp, "exponential_minus_one": mpmath.expm1, "log": mpmath.log,
    "log_plus_one": mpmath.log1p, "logistic": lambda x: 1 / (1 + mpmath.exp(-x)),
    "rsqrt": lambda x: 1 / mpmath.sqrt(x), "cbrt": mpmath.cbrt, "tanh": mpmath.tanh,
    "sine": mpmath.sin, "cosine": mpmath.cos, "tan": mpmath.tan, "sqrt": mpmath.sqrt,
}
# Where the functions above meet a special value, IEEE 754's (and C's) answer, in float64.
_SPECIAL_UNARY = {
    "exponential": np.exp, "exponential_minus_one": np.expm1, "log": np.log, "log_plus_one": np.log1p,
    "logistic": lambda x: 1 / (1 + np.exp(-x)), "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt,
    "tanh": np.tanh, "sine": np.sin, "cosine": np.cos, "tan": np.tan, "sqrt": np.sqrt,
}


def _float_unary(op: str, a: float, t: str) -> Answer:
    clause = f"stablehlo.{op}"
    if op == "negate":
        return Answer(float_result(-a, t), None, clause)
    if op == "abs":
        return Answer(float_result(abs(a), t), None, clause)
    if op == "sign":
        value = a if math.isnan(a) or a == 0 else math.copysign(1.0, a)
        return Answer(float_result(value, t), None, clause)
    if op == "is_finite":
        return Answer(np.bool_(math.isfinite(a)), None, clause)
    if op in ("floor", "ceil", "round_nearest_afz", "round_nearest_even"):
        if not math.isfinite(a):
            return Answer(float_result(a, t), None, clause)
        rounded = {"floor": math.floor, "ceil": math.ceil, "round_nearest_even": round,
                   "round_nearest_afz": lambda v: math.copysign(math.floor(abs(v) + 0.5), v)}[op](a)
        return Answer(float_result(math.copysign(float(rounded), a) if rounded == 0 else float(rounded), t),
                      None, clause)
    accurate = op == "sqrt"
    if not math.isfinite(a) or a == 0 or (a < 0 and op in ("log", "sqrt", "rsqrt")) or \
            (a <= -1 and op == "log_plus_one"):
        with np.errstate(all="ignore"):
            special = float(_SPECIAL_UNARY[op](np.float64(a)))
        return Answer(float_result(special, t), None if accurate else "accuracy not specified", clause)
    value = _mp_result(_MP_UNARY[op], a)
    return Answer(float_result(value, t), None if accurate else "transcendental: accuracy not specified",
                  clause + ("; IEEE 754 correctly rounded" if accurate else ""))


# --------------------------------------------------------------- the others
_DIRECTIONS = {"EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "GE": lambda a, b: a >= b,
               "GT": lambda a, b: a > b, "LE": lambda a, b: a <= b, "LT": lambda a, b: a < b}


def _python(value: np.ndarray, element_type: str):
    """A numpy scalar of `element_type` as a Python bool, int or float."""
    kind = element_class(element_type)
    if kind == "bool":
        return bool(value)
    if kind in ("signed", "unsigned"):
        return int(value)
    return float(np.asarray(value).astype(np.float64))


def _convert(a, from_type: str, to_type: str) -> Answer:
    source, target = element_class(from_type), element_class(to_type)
    clause = "stablehlo.convert"
    if target == "bool":
        return Answer(np.bool_(a != 0), None, clause)
    if target in ("signed", "unsigned"):
        if source == "float":
            if not math.isfinite(a):
                return Answer(None, "float -> integer of NaN or infinity", clause)
            truncated = math.trunc(a)
            info = ml_dtypes.iinfo(dtype_of(to_type))
            if not int(info.min) <= truncated <= int(info.max):
                return Answer(None, "float -> integer out of the integer type's range", clause)
            return Answer(truncated, None, clause)
        return Answer(wrap(int(a), to_type), None, clause + " (integer -> integer keeps the low n bits)")
    value = float(a) if source == "float" else a
    exact = _exact(float(value)) if source == "float" else (Fraction(int(value)) if value else 0.0)
    return Answer(float_result(exact, to_type), None, clause + "; IEEE 754 round to nearest even")


def _part(which: str):
    def part(operands, element_type):
        value = getattr(np.asarray(operands[0]), which)
        return Answer(np.asarray(value).astype(dtype_of(element_type)), None, f"stablehlo.{which} (exact)")
    return part


def _complex(operands, element_type):
    value = np.empty((), dtype_of(element_type))
    value.real, value.imag = operands[0], operands[1]
    return Answer(value, None, "stablehlo.complex (exact)")


_PARTS = {"real": _part("real"), "imag": _part("imag"), "complex": _complex}


def _bits(value, element_type: str) -> int:
    """The element's bit pattern as an unsigned integer."""
    kind = element_class(element_type)
    if kind in ("signed", "unsigned"):
        return int(value) % (1 << _width(element_type))
    array = np.asarray(value).astype(dtype_of(element_type)).reshape(1)
    return int(array.view(_bits_type(array.dtype))[0])


def _bitcast(value, from_type: str, to_type: str) -> Answer:
    """stablehlo.bitcast_convert between types of one width: the same bits, read as `to_type`."""
    bits = _bits(value, from_type)
    if element_class(to_type) in ("signed", "unsigned"):
        result = np.asarray(wrap(bits, to_type)).astype(dtype_of(to_type))
    else:
        dtype = dtype_of(to_type)
        result = np.array([bits], _bits_type(dtype)).view(dtype).reshape(())
    return Answer(result, None, "stablehlo.bitcast_convert (the same bits)")


# ------------------------------------------------------------ complex numbers
COMPLEX_ROUNDING = "the spec does not say how a complex product's or quotient's parts are rounded"
COMPLEX_SPECIALS = ("complex arithmetic on infinite or NaN parts, or overflowing in between, is not defined "
                    "by the spec (C99's Annex G defines one answer; how wide the parts are computed decides "
                    "another)")


def _complex_parts(value) -> tuple[float, float]:
    value = complex(np.asarray(value).reshape(()))
    return value.real, value.imag


def _complex_result(real, imag, element_type: str) -> np.ndarray:
    """A complex element from its parts, each given exactly (Fraction) or as an IEEE special
    and rounded once to the part type."""
    part = PART_TYPE[element_type]
    value = np.empty((), dtype_of(element_type))
    value.real, value.imag = float_result(real, part), float_result(imag, part)
    return value


def complex_arithmetic(op: str, operands: list, element_type: str) -> Answer:
    """The spec's result of `op` on complex scalars. Negation, addition and subtraction
    work on each part alone, as IEEE 754 operations; maximum and minimum order by the real
    part, then the imaginary part (spec: "lexicographic comparison"). A product's and a
    quotient's parts are computed exactly and rounded once where every part is finite, the
    divisor is not zero and nothing overflows (the spec leaves their rounding open); other
    ops are not computed here."""
    clause = f"stablehlo.{op} (complex)"
    parts = [_complex_parts(v) for v in operands]
    part_type = PART_TYPE[element_type]
    if op == "negate":
        (re, im), = parts
        return Answer(_complex_result(-re, -im, element_type), None, clause)
    if op in ("add", "subtract"):
        (a, b), (c, d) = parts
        real = _float_binary(op, a, c, part_type).value
        imag = _float_binary(op, b, d, part_type).value
        return Answer(_complex_result(float(real), float(imag), element_type), None, clause)
    if op in ("maximum", "minimum"):
        if any(math.isnan(x) for pair in parts for x in pair):
            return Answer(None, "the order of complex numbers with NaN parts is not defined by the spec", clause)
        (a, b), (c, d) = parts
        if (a, b) == (c, d) and (math.copysign(1, a), math.copysign(1, b)) != (math.copysign(1, c), math.copysign(1, d)):
            return Answer(None, "equal complex numbers whose zero parts differ in sign: either is the "
                          "maximum and the minimum", clause)
        chosen = (max if op == "maximum" else min)(parts)
        return Answer(_complex_result(_exact(chosen[0]), _exact(chosen[1]), element_type), None, clause)
    if op in ("multiply", "divide"):
        return _complex_product(op, parts, element_type, clause)
    raise Unsupported(f"complex {op}")


def _complex_product(op: str, parts, element_type: str, clause: str) -> Answer:
    (a, b), (c, d) = parts
    if not all(math.isfinite(x) for x in (a, b, c, d)) or (op == "divide" and c == d == 0):
        return Answer(None, COMPLEX_SPECIALS, clause)
    a, b, c, d = (Fraction(x) for x in (a, b, c, d))
    if op == "multiply":
        real, imag = a * c - b * d, a * d + b * c
    else:
        norm = c * c + d * d
        real, imag = (a * c + b * d) / norm, (b * c - a * d) / norm
    largest = Fraction(float(ml_dtypes.finfo(dtype_of(PART_TYPE[element_type])).max))
    if max(abs(a * c), abs(b * d), abs(a * d), abs(b * c), abs(real), abs(imag)) > largest:
        return Answer(None, COMPLEX_SPECIALS, clause)
    if real == 0 or imag == 0:      # the sign of a zero part depends on how it is computed
        return Answer(None, COMPLEX_ROUNDING + " (nor the sign of a zero part)", clause)
    return Answer(_complex_result(real, imag, element_type), COMPLEX_ROUNDING, clause)


class Oracle:
    """Evaluates a FuzzProgram's nodes on one element each, from the spec."""

    def evaluate(self, node, operands: list, operand_types: list[str]) -> Answer:
        """The spec's result of `node` on scalar `operands` (numpy scalars of `operand_types`)."""
        t = operand_types[-1]
        if node.op in _PARTS:
            return _PARTS[node.op](operands, node.element_type)
        if node.op == "bitcast_convert":
            return _bitcast(operands[0], operand_types[0], node.element_type)
        if element_class(node.element_type) == "complex" and all(
                element_class(x) == "complex" for x in operand_types):
            return complex_arithmetic(node.op, operands, node.element_type)
        if any(element_class(x) == "complex" for x in operand_types) or element_class(node.element_type) == "complex":
            raise Unsupported("complex element types")
        values = [_python(v, x) for v, x in zip(operands, operand_types)]
        answer = self._evaluate(node, values, operand_types, t)
        if answer.value is not None:
            answer.value = np.asarray(answer.value).astype(dtype_of(node.element_type)) \
                if not isinstance(answer.value, np.ndarray) else answer.value
        return answer

    def _evaluate(self, node, values: list, operand_types: list[str], t: str) -> Answer:
        op, kind = node.op, element_class(t)
        if op == "convert":
            return _convert(values[0], operand_types[0], node.element_type)
        if op == "compare":
            return Answer(np.bool_(_DIRECTIONS[node.direction](*values)), None,
                          "stablehlo.compare (IEEE 754 comparisons for FLOAT: NaN is unordered)")
        if op == "select":
            return Answer(_typed(values[1] if values[0] else values[2], t), None, "stablehlo.select")
        if op == "clamp":
            low, x, high = values
            if kind == "float" and any(math.isnan(v) for v in values):
                return Answer(None, "clamp with a NaN bound or operand", "stablehlo.clamp")
            return Answer(_typed(min(max(x, low), high), t), None, "stablehlo.clamp")
        if kind == "bool":
            return self._boolean(op, values)
        if kind in ("signed", "unsigned"):
            if node.spec.arity == 1:
                return _integer_unary(op, values[0], t)
            return _integer_binary(op, values[0], values[1], t)
        if node.spec.arity == 1:
            return _float_unary(op, values[0], t)
        return _float_binary(op, values[0], values[1], t)

    @staticmethod
    def _boolean(op: str, values: list[bool]) -> Answer:
        a, b = (values + [False])[:2]
        results = {"add": a or b, "or": a or b, "multiply": a and b, "and": a and b, "xor": a != b,
                   "maximum": a or b, "minimum": a and b, "not": not a}
        return Answer(np.bool_(results[op]), None, f"stablehlo.{op} (i1)")


def _typed(value, element_type: str) -> np.ndarray:
    if element_class(element_type) == "float":
        return float_result(_exact(value), element_type)
    return np.asarray(value).astype(dtype_of(element_type))
