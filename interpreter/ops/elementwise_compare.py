"""Comparison and selection: compare, select, clamp.

Spec sections: compare, select, clamp.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_complex, is_float
from pjrt_ref.interpreter.ops.elementwise_binary import maximum_values, minimum_values
from pjrt_ref.interpreter.ops.elementwise_support import accepts, as_result, elementwise, float_bits_dtype, widen

DIRECTIONS = {
    "EQ": np.equal, "NE": np.not_equal,
    "GE": np.greater_equal, "GT": np.greater,
    "LE": np.less_equal, "LT": np.less,
}
COMPARE_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordered like IEEE-754 `totalOrder` orders floats:
    -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN.

    Take the float's bits as a signed integer; for negative floats (sign bit
    set) flip all bits but the sign, so larger magnitudes become smaller keys.
    Narrow floats were widened exactly to float32 first, keeping their order.
    """
    bits = x.view(float_bits_dtype(x.dtype))
    signed = bits.view(np.dtype(f"i{x.dtype.itemsize}"))
    magnitude_mask = np.iinfo(signed.dtype).max
    return np.where(signed < 0, signed ^ magnitude_mask, signed)


def _complex_compare(direction: str, lhs, rhs):
    """Lexicographic on (real, imag); EQ/NE compare both parts."""
    if direction in ("EQ", "NE"):
        equal = (lhs.real == rhs.real) & (lhs.imag == rhs.imag)
        return equal if direction == "EQ" else ~equal
    compare = DIRECTIONS[direction]
    strict = DIRECTIONS[direction[0] + "T"]
    return strict(lhs.real, rhs.real) | ((lhs.real == rhs.real) & compare(lhs.imag, rhs.imag))


def _validate_compare(op) -> None:
    accepts("bool", "integer", "float", "complex", "any result")(op)
    direction = op.attrs.get("comparison_direction")
    if direction not in DIRECTIONS:
        raise op.error(f"unknown comparison_direction {direction!r}")
    compare_type = op.attrs.get("compare_type")
    if compare_type is not None and compare_type not in COMPARE_TYPES:
        raise op.error(f"unknown compare_type {compare_type!r}", cls=Unimplemented)
    if compare_type == "TOTALORDER" and not is_float(op.operand_types[0].dtype):
        raise op.error("compare_type TOTALORDER needs floating-point operands")


@register("stablehlo.compare", validate=_validate_compare)
@elementwise
def compare(op, lhs, rhs):
    """Spec "compare" (docs/spec.md#compare): booleans and integers compare as
    numbers (their signedness comes from the element type); floats with
    FLOAT use IEEE quiet comparisons (NaN is unordered: only NE is true);
    with TOTALORDER, IEEE totalOrder (-NaN < -inf < -0 < +0 < inf < NaN,
    and -0 != +0); complex compares (real, imag) lexicographically."""
    direction = op.attrs["comparison_direction"]
    lhs, rhs = widen(lhs), widen(rhs)
    if is_complex(lhs.dtype):
        result = _complex_compare(direction, lhs, rhs)
    elif op.attrs.get("compare_type") == "TOTALORDER":
        result = DIRECTIONS[direction](total_order_key(lhs), total_order_key(rhs))
    else:
        result = DIRECTIONS[direction](lhs, rhs)
    return as_result(result, np.dtype(np.bool_))


def _validate_select(op) -> None:
    pred, on_true = op.operand_types[0], op.operand_types[1]
    if pred.dtype != np.bool_:
        raise op.error(f"select predicate must be i1, got {pred.element_type}")
    if pred.shape and pred.shape != on_true.shape:
        raise op.error(f"select predicate shape {pred.shape} differs from {on_true.shape}")


@register("stablehlo.select", validate=_validate_select)
def select(op, pred, on_true, on_false):
    """Spec "select" (docs/spec.md#select): pred ? on_true : on_false, with a
    0-d `pred` choosing whole tensors. Works for every element type
    (quantized ones too: only storage values are moved)."""
    if pred.ndim == 0:
        return on_true if pred else on_false
    return np.where(pred, on_true, on_false).astype(op.result_type.dtype, copy=False)


def _validate_clamp(op) -> None:
    accepts("bool", "integer", "float", "complex")(op)
    operand = op.operand_types[1]
    for bound in (op.operand_types[0], op.operand_types[2]):
        if bound.shape and bound.shape != operand.shape:
            raise op.error(f"clamp bound shape {bound.shape} differs from {operand.shape}")


@register("stablehlo.clamp", validate=_validate_clamp)
@elementwise
def clamp(op, min_, operand, max_):
    """Spec "clamp" (docs/spec.md#clamp): minimum(maximum(operand, min), max),
    with 0-d bounds applying to every element. NaN in any of the three
    propagates (IEEE maximum/minimum); if min > max the result is max."""
    low, value, high = widen(min_), widen(operand), widen(max_)
    low = np.broadcast_to(low, value.shape)
    high = np.broadcast_to(high, value.shape)
    return as_result(minimum_values(maximum_values(value, low), high), op.result_type.dtype)
