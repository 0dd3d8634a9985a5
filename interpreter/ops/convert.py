"""Type conversions: convert, bitcast_convert, reduce_precision.

Spec sections: convert, bitcast_convert, reduce_precision.

The spec leaves convert's out-of-range results TBD (#180); the kernels give
what XLA CPU gives:

* float -> integer truncates toward zero and saturates: NaN -> 0,
  too large -> the type's max, too small -> its min (0 for unsigned).
* integer -> integer keeps the low n bits (two's complement wrap).
* integer -> narrow float (bf16, f16, f8...) and float64 -> bf16 or f16
  round through float32, as XLA does (so they can round twice); float64 ->
  f8/f6/f4 rounds once (XLA converts those directly).
* float -> float rounds to nearest even; overflow gives +-inf, or NaN for
  the types without infinities (f8E4M3FN...), as ml_dtypes and XLA do.
* complex -> real keeps the real part; real -> complex has imaginary 0;
  x -> bool is x != 0 (the real part only for complex); bool -> x is 0 / 1.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_bool, is_complex, is_float, is_integer, is_unsigned
from pjrt_ref.interpreter.ops.elementwise_support import (accepts, as_result, bit_width, compute_dtype, contiguous,
                                                          elementwise, integer_info, widen)

_ALL = ("bool", "integer", "float", "complex")


# --- convert ---------------------------------------------------------------------

def float_to_integer(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Truncate toward zero, saturating at the bounds of integer `dtype`;
    NaN becomes 0."""
    truncated = np.trunc(values.astype(np.float64))
    width = bit_width(dtype)
    # Bounds as exact powers of two: float64 cannot hold 2^63 - 1.
    upper = 2.0 ** width if is_unsigned(dtype) else 2.0 ** (width - 1)
    lower = 0.0 if is_unsigned(dtype) else -upper
    too_big, too_small = truncated >= upper, truncated < lower
    in_range = np.where(too_big | too_small | np.isnan(truncated), 0.0, truncated)
    info = integer_info(dtype)
    result = in_range.astype(compute_dtype(dtype))
    result = np.where(too_big, compute_dtype(dtype).type(info.max), result)
    result = np.where(too_small, compute_dtype(dtype).type(info.min), result)
    return as_result(result, dtype)


def _is_narrow_float(dtype: np.dtype) -> bool:
    return is_float(dtype) and dtype not in (np.float32, np.float64)


def float64_to_float32_round_to_odd(values: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding toward zero, then setting the last bit
    when inexact ("round to odd"). Rounding that result to any format with
    at least two fewer significand bits (f8, f6, f4) gives the correctly
    rounded float64 conversion, which a plain double rounding would not."""
    nearest = values.astype(np.float32)
    overshot = np.abs(nearest.astype(np.float64)) > np.abs(values)
    toward_zero = np.where(overshot, np.nextafter(nearest, np.float32(0)), nearest)
    inexact = toward_zero.astype(np.float64) != values
    bits = contiguous(toward_zero).view(np.uint32) | inexact.astype(np.uint32)
    return np.where(np.isnan(values), nearest, bits.view(np.float32))


def convert_values(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`values` converted to element type `dtype` (see the module docstring)."""
    if is_bool(dtype):
        return widen(values.real if is_complex(values.dtype) else values) != 0
    if is_complex(values.dtype) and not is_complex(dtype):
        values = values.real
    if is_float(values.dtype) and is_integer(dtype):
        return float_to_integer(values, dtype)
    # Exact widening first: ml_dtypes cannot cast between every pair of its
    # types (uint4 -> int4, f8E4M3FN -> f8E8M0FNU, ...).
    values = widen(values.astype(np.uint8) if is_bool(values.dtype) else values)
    if _is_narrow_float(dtype):
        if values.dtype == np.float64 and dtype.itemsize == 1:
            values = float64_to_float32_round_to_odd(values)  # XLA rounds once
        else:
            values = values.astype(np.float32)  # XLA rounds through f32 too
    return as_result(values, dtype)


@register("stablehlo.convert", validate=accepts(*_ALL))
@elementwise
def convert(op, operand):
    """Spec "convert" (docs/spec.md#convert): elementwise conversion to the
    result's element type; out-of-range cases as in the module docstring."""
    return convert_values(operand, op.result_type.dtype)


# --- bitcast_convert ----------------------------------------------------------------

def bit_patterns(x: np.ndarray) -> np.ndarray:
    """The n-bit patterns of any array as uint64 (narrow types: low n bits)."""
    width = bit_width(x.dtype)
    container = contiguous(x).view(np.dtype(f"u{x.dtype.itemsize}"))
    return container.astype(np.uint64) & np.uint64((1 << width) - 1)


def from_bit_patterns(patterns: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Inverse of `bit_patterns` for element type `dtype`."""
    container = patterns.astype(np.dtype(f"u{dtype.itemsize}"))
    return container.view(dtype)


def bitcast_shape(shape: tuple, source: np.dtype, result: np.dtype) -> tuple:
    """Spec (C1) of bitcast_convert: narrower results gain a last dimension
    of parts, wider ones lose the operand's last dimension."""
    source_width, result_width = bit_width(source), bit_width(result)
    if result_width < source_width:
        return tuple(shape) + (source_width // result_width,)
    if result_width > source_width:
        return tuple(shape[:-1])
    return tuple(shape)


def _bitcast_by_patterns(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Any widths (2-, 4- and 6-bit types included), one shift per part;
    parts are little-endian: part 0 holds the least significant bits."""
    source_width, result_width = bit_width(x.dtype), bit_width(dtype)
    patterns = bit_patterns(x)
    if result_width < source_width:
        parts = source_width // result_width
        shifts = np.arange(parts, dtype=np.uint64) * np.uint64(result_width)
        mask = np.uint64((1 << result_width) - 1)
        patterns = (patterns[..., None] >> shifts) & mask
    elif result_width > source_width:
        parts = result_width // source_width
        shifts = np.arange(parts, dtype=np.uint64) * np.uint64(source_width)
        patterns = np.bitwise_or.reduce(patterns << shifts, axis=-1)
    return from_bit_patterns(patterns, dtype)


def _whole_bytes(dtype: np.dtype) -> bool:
    return bit_width(dtype) == dtype.itemsize * 8


def _validate_bitcast(op) -> None:
    accepts(*_ALL)(op)
    source, result = op.operand_types[0], op.result_type
    if is_complex(source.dtype) != is_complex(result.dtype):
        raise op.error("bitcast_convert between complex and non-complex types is not allowed")
    source_width, result_width = bit_width(source.dtype), bit_width(result.dtype)
    wider, narrower = max(source_width, result_width), min(source_width, result_width)
    if wider % narrower:
        raise op.error(f"cannot bitcast {source.element_type} to {result.element_type}")
    expected = bitcast_shape(source.shape, source.dtype, result.dtype)
    if len(expected) != len(result.shape) or any(
            a is not None and b is not None and a != b for a, b in zip(expected, result.shape)):
        raise op.error(f"bitcast_convert of {source} cannot give {result}")


@register("stablehlo.bitcast_convert", validate=_validate_bitcast)
@elementwise
def bitcast_convert(op, operand):
    """Spec "bitcast_convert" (docs/spec.md#bitcast_convert): reinterpret the
    bits. To a narrower type, each element becomes a new last dimension of
    parts; to a wider type, the last dimension is joined into one element.
    Parts are little-endian (part 0 = least significant bits), as on XLA
    CPU."""
    dtype = op.result_type.dtype
    if _whole_bytes(operand.dtype) and _whole_bytes(dtype) and not is_bool(dtype) \
            and not is_bool(operand.dtype):
        # numpy views bytes in memory order, which is little-endian here.
        shape = bitcast_shape(operand.shape, operand.dtype, dtype)
        return contiguous(operand).reshape(-1).view(dtype).reshape(shape)
    return _bitcast_by_patterns(operand, dtype)


# --- reduce_precision ------------------------------------------------------------------

# IEEE binary formats whose bits the rounding works on directly:
# dtype -> (exponent bits, mantissa bits).
_IEEE_LAYOUTS = {
    np.dtype(np.float16): (5, 10),
    np.dtype(ml_dtypes.bfloat16): (8, 7),
    np.dtype(np.float32): (8, 23),
    np.dtype(np.float64): (11, 52),
}


def reduce_precision_values(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round IEEE floats `x` to a format with the given bit counts and back,
    on their bit patterns: mantissa rounded to nearest even, then exponents
    beyond the new range overflow to +-inf or flush to +-0 (subnormals of
    the new format included). NaN stays NaN; with mantissa_bits = 0 the
    format has no NaN and it becomes +inf, as in the spec's reference
    interpreter (XLA CPU keeps the NaN there)."""
    source_exponent, source_mantissa = _IEEE_LAYOUTS[x.dtype]
    bits = contiguous(x).view(np.dtype(f"u{x.dtype.itemsize}"))
    word = bits.dtype.type
    if mantissa_bits < source_mantissa:
        dropped = source_mantissa - mantissa_bits
        last_kept_bit = (bits >> word(dropped)) & word(1)
        # Adding 0111..1 (+1 if the last kept bit is odd) rounds ties to even.
        bias = word((1 << (dropped - 1)) - 1) + last_kept_bit
        bits = (bits + bias) & ~word((1 << dropped) - 1)
    if exponent_bits < source_exponent:
        exponent_mask = word(((1 << source_exponent) - 1) << source_mantissa)
        sign = bits & word(1 << (8 * x.dtype.itemsize - 1))
        source_bias = (1 << (source_exponent - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = bits & exponent_mask
        overflows = exponent > word((source_bias + reduced_bias) << source_mantissa)
        underflows = exponent <= word((source_bias - reduced_bias) << source_mantissa)
        bits = np.where(overflows, sign | exponent_mask, np.where(underflows, sign, bits))
    result = bits.view(x.dtype)
    nan_becomes = x if mantissa_bits > 0 else x.dtype.type(np.inf)
    return np.where(np.isnan(x), nan_becomes, result).astype(x.dtype, copy=False)


def _validate_reduce_precision(op) -> None:
    accepts("float")(op)
    if op.attrs.get("exponent_bits", 0) < 1 or op.attrs.get("mantissa_bits", -1) < 0:
        raise op.error("reduce_precision needs exponent_bits >= 1 and mantissa_bits >= 0")


@register("stablehlo.reduce_precision", validate=_validate_reduce_precision)
@elementwise
def reduce_precision(op, operand):
    """Spec "reduce_precision" (docs/spec.md#reduce_precision): see
    `reduce_precision_values`. f8/f6/f4 operands are widened exactly to
    float32, rounded there (limited to their own bit counts), and narrowed."""
    exponent_bits, mantissa_bits = op.attrs["exponent_bits"], op.attrs["mantissa_bits"]
    if operand.dtype in _IEEE_LAYOUTS:
        return reduce_precision_values(operand, exponent_bits, mantissa_bits)
    info = ml_dtypes.finfo(operand.dtype)
    own_exponent_bits = info.bits - info.nmant - 1
    if exponent_bits >= own_exponent_bits:
        exponent_bits = _IEEE_LAYOUTS[np.dtype(np.float32)][0]  # no exponent change
    reduced = reduce_precision_values(operand.astype(np.float32), exponent_bits,
                                      min(mantissa_bits, info.nmant))
    return as_result(reduced, operand.dtype)
