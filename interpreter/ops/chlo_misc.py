"""CHLO's small ops: constant, constant_like, conj, square, mulhi, is_inf,
is_neg_inf, is_pos_inf, next_after and top_k.

CHLO ops have no section in the StableHLO spec; each docstring cites the
op's definition in openxla/stablehlo `stablehlo/dialect/ChloOps.td` and
states the edge cases, which follow the op's expansion into StableHLO
(`stablehlo/transforms/ChloDecompositionPatterns*.td`,
`ChloLegalizeToStablehlo.cpp`), i.e. what XLA computes.
"""
from __future__ import annotations

import re

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import lookup, register
from pjrt_ref.interpreter.ops import core
from pjrt_ref.interpreter.types import is_bool, is_complex, is_float, is_integer
from pjrt_ref.interpreter.ops.elementwise_compare import total_order_key
from pjrt_ref.interpreter.ops.elementwise_support import compute_dtype


@register("chlo.constant")
def constant(op):
    """ChloOps.td "constant": the `value` attribute, like stablehlo.constant."""
    return core.constant(op)


_COMPLEX_NUMBER = re.compile(r"#complex\.number<:\w+\s+([^,]+),\s*([^>]+)>")


def _constant_like_value(op):
    value = op.attrs["value"]
    if isinstance(value, np.ndarray):
        return value.reshape(-1)[0]
    if isinstance(value, str):
        match = _COMPLEX_NUMBER.search(value)
        if match is None:
            raise op.error(f"cannot read constant_like value {value}", cls=Unimplemented)
        return complex(float(match.group(1)), float(match.group(2)))
    return value


def _validate_constant_like(op) -> None:
    op.cache["value"] = np.asarray(_constant_like_value(op)).astype(op.result_type.dtype)


@register("chlo.constant_like", validate=_validate_constant_like)
def constant_like(op, operand):
    """ChloOps.td "constant_like": a tensor shaped like `operand` (its
    run-time shape, so dynamic shapes work) filled with `value`."""
    return np.full(operand.shape, op.cache["value"], dtype=op.result_type.dtype)


@register("chlo.conj")
def conj(op, operand):
    """ChloOps.td "conj": complex conjugate; the identity on real types."""
    if is_complex(operand.dtype):
        return np.conj(operand)
    return operand


def _validate_square(op) -> None:
    if not is_complex(op.result_type.dtype):
        multiply = lookup("stablehlo.multiply")
        if multiply is None:
            raise op.error("needs stablehlo.multiply", cls=Unimplemented)
        op.cache["multiply"] = multiply.fn


@register("chlo.square", validate=_validate_square)
def square(op, x):
    """ChloOps.td "square" (float and complex operands): x * x with
    stablehlo.multiply's semantics. Complex (a + bi)^2 is
    (a - b)(a + b) + 2abi, with the real part exactly 0 when |a| == |b| and
    a is finite."""
    if not is_complex(x.dtype):
        return op.cache["multiply"](op, x, x)
    a, b = x.real, x.imag
    with np.errstate(all="ignore"):
        real = np.where(np.isfinite(a) & (np.abs(a) == np.abs(b)), a.dtype.type(0),
                        (a - b) * (a + b))
        imag = a.dtype.type(2) * (a * b)
    result = np.empty(x.shape, dtype=x.dtype)
    result.real, result.imag = real, imag
    return result


def _validate_mulhi(op) -> None:
    dtype = op.operand_types[0].dtype
    if not is_integer(dtype) or op.operand_types[0].quant is not None:
        raise op.error(f"mulhi needs integer operands, not {op.operand_types[0].element_type}",
                       cls=Unimplemented)


@register("chlo.mulhi", validate=_validate_mulhi)
def mulhi(op, lhs, rhs):
    """ChloOps.td "mulhi": the high N bits of the 2N-bit product of two
    N-bit integers (signed or unsigned as the element type says)."""
    dtype = lhs.dtype
    bits = 8 * dtype.itemsize if dtype.name not in ("int2", "int4", "uint2", "uint4") \
        else int(dtype.name[-1])
    if bits == 64:  # the 128-bit product needs Python integers
        high = [(int(a) * int(b)) >> 64 for a, b in zip(lhs.ravel(), rhs.ravel())]
        return np.array(high, dtype=dtype).reshape(lhs.shape)
    wide = np.int64 if dtype.kind == "i" or dtype.name in ("int2", "int4") else np.uint64
    product = lhs.astype(wide) * rhs.astype(wide)
    return (product >> wide(bits)).astype(dtype)


def _validate_float_operand(op) -> None:
    dtype = op.operand_types[0].dtype
    if not is_float(dtype):
        raise op.error(f"{op.name} needs a floating-point operand, not "
                       f"{op.operand_types[0].element_type}", cls=Unimplemented)


_INF_TESTS = {"chlo.is_inf": np.isinf, "chlo.is_pos_inf": np.isposinf,
              "chlo.is_neg_inf": np.isneginf}


@register(*_INF_TESTS, validate=_validate_float_operand)
def infinity_test(op, x):
    """ChloOps.td "is_inf", "is_pos_inf", "is_neg_inf": i1 per element; NaN
    is none of them; float types without infinities give all false."""
    widened = np.asarray(x).astype(compute_dtype(x.dtype), copy=False)
    return np.asarray(_INF_TESTS[op.name](widened), dtype=np.bool_)


def _validate_next_after(op) -> None:
    _validate_float_operand(op)
    dtype = op.operand_types[0].dtype
    sub_byte = dtype.name in ("float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn")
    if sub_byte or not np.isnan(np.asarray(np.nan).astype(dtype).astype(np.float32)):
        raise op.error(f"next_after on {op.operand_types[0].element_type} is not supported",
                       cls=Unimplemented)


@register("chlo.next_after", validate=_validate_next_after)
def next_after(op, x, y):
    """ChloOps.td "next_after": the representable value after x in the
    direction of y. NaN if either is NaN; y if x == y (so +-0 -> the sign
    of y); from +-0 the smallest subnormal with y's sign. Works on the bit
    patterns: one step of the magnitude towards or away from zero."""
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    signed = np.dtype(f"i{x.dtype.itemsize}")
    x_bits = x.view(signed).astype(np.int64)
    y_bits = y.view(signed).astype(np.int64)
    sign_bit = np.int64(1) << (8 * x.dtype.itemsize - 1)
    magnitude_mask = sign_bit - 1
    x_magnitude, y_magnitude = x_bits & magnitude_mask, y_bits & magnitude_mask
    x_sign, y_sign = x_bits & sign_bit, y_bits & sign_bit
    towards_zero = (x_magnitude > y_magnitude) | (x_sign != y_sign)
    result = x_bits + np.where(towards_zero, -1, 1)
    from_zero = np.where(y_magnitude == 0, y_bits, y_sign | 1)
    result = np.where(x_magnitude == 0, from_zero, result)
    wide_x = x.astype(compute_dtype(x.dtype))
    wide_y = y.astype(compute_dtype(y.dtype))
    result = np.where(wide_x == wide_y, y_bits, result)
    nan_bits = np.asarray(np.nan).astype(x.dtype).view(signed).astype(np.int64)
    result = np.where(np.isnan(wide_x) | np.isnan(wide_y), nan_bits, result)
    return result.astype(signed).view(x.dtype).reshape(x.shape)


def _validate_top_k(op) -> None:
    operand = op.operand_types[0]
    if not operand.shape:
        raise op.error("top_k needs an operand of rank >= 1")
    dtype = operand.dtype
    if not (is_float(dtype) or is_integer(dtype) or is_bool(dtype)):
        raise op.error(f"top_k on {operand.element_type} is not supported", cls=Unimplemented)
    k = op.attrs["k"]
    last = operand.shape[-1]
    if k < 0 or (last is not None and k > last):
        raise op.error(f"k = {k} is not in [0, {last}]")


def descending_sort_key(x: np.ndarray) -> np.ndarray:
    """Integers whose ascending order is `x`'s descending order. Floats are
    ordered by IEEE totalOrder (NaN above +inf, -NaN below -inf, +0 above
    -0), as XLA's sort-based top_k does."""
    if is_bool(x.dtype):
        return ~x.astype(np.int8)
    if is_float(x.dtype):
        if x.dtype not in (np.float32, np.float64):
            x = x.astype(np.float32)
        return ~total_order_key(x)
    # ~v = -v - 1 reverses the order of signed and unsigned integers alike.
    return ~x.astype(compute_dtype(x.dtype))


@register("chlo.top_k", validate=_validate_top_k)
def top_k(op, operand):
    """ChloOps.td "top_k": the k largest entries along the last dimension,
    in descending order, and their (i32) indices. The sort is stable:
    equal values keep the lower index first."""
    k = op.attrs["k"]
    order = np.argsort(descending_sort_key(operand), axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(operand, order, axis=-1)
    return values, order.astype(np.int32)
