"""Bitwise ops: and, or, xor, not, the three shifts, popcnt and
count_leading_zeros.

Spec sections: and, or, xor, not, shift_left, shift_right_arithmetic,
shift_right_logical, popcnt, count_leading_zeros.

Shifts and bit counts work on the operand's n-bit pattern held in an
unsigned numpy integer (`bits_of`), so the 2- and 4-bit types behave like the
others. The shift amount is read as an unsigned n-bit number, as XLA does: an
amount that is negative or >= n shifts everything out (0 for shift_left and
shift_right_logical, the sign fill -1 or 0 for shift_right_arithmetic).
"""
from __future__ import annotations

import functools

import numpy as np

from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.elementwise_support import (PLAIN_INTEGERS, accepts, as_result, bit_width, compute_dtype,
                                                          elementwise, widen)


def bits_of(x: np.ndarray) -> np.ndarray:
    """The n-bit two's complement patterns of integer array `x`, unsigned."""
    wide = widen(x)
    unsigned = wide.view(np.dtype(f"u{wide.dtype.itemsize}"))
    width = bit_width(x.dtype)
    if width == unsigned.dtype.itemsize * 8:
        return unsigned
    return unsigned & unsigned.dtype.type((1 << width) - 1)


def signed_from_bits(bits: np.ndarray, width: int) -> np.ndarray:
    """Sign-extend n-bit patterns into the signed integer of their container."""
    spare = bits.dtype.itemsize * 8 - width
    signed = (bits << bits.dtype.type(spare)).view(np.dtype(f"i{bits.dtype.itemsize}"))
    return signed >> signed.dtype.type(spare)


def from_bits(bits: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Patterns (signed or unsigned container) back to element type `dtype`;
    bits above the type's width are dropped."""
    return as_result(bits.view(compute_dtype(dtype)), dtype)


# --- and / or / xor / not ---------------------------------------------------------

def _make_logical_kernel(name: str, function):
    @elementwise
    def kernel(op, *operands):
        return as_result(function(*(widen(x) for x in operands)), op.result_type.dtype)

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = (f'Spec "{name}" (docs/spec.md#{name}): bitwise {name} for integers, '
                      f'logical {name} for booleans.')
    return kernel


LOGICAL_OPS = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
               "not": np.invert}  # np.invert on booleans is logical not

for _name, _function in LOGICAL_OPS.items():
    register(f"stablehlo.{_name}", validate=accepts("bool", "integer"))(
        _make_logical_kernel(_name, _function))


# --- shifts -------------------------------------------------------------------

def _shift_operands(lhs, rhs):
    """(patterns of lhs, bit width, shift amounts clamped to a safe range,
    mask of amounts that are in range)."""
    width = bit_width(lhs.dtype)
    value, amount = bits_of(lhs), bits_of(rhs)
    in_range = amount < width
    safe_amount = np.where(in_range, amount, amount.dtype.type(0))
    return value, width, safe_amount, in_range


@functools.cache
def numpy_shifts_saturate() -> bool:
    """Whether numpy's left_shift and right_shift on unsigned integers give 0
    for every amount >= the bit width, as the spec's shift_left and
    shift_right_logical do (numpy's own `npy_lshift`/`npy_rshift` guard; C's
    `<<` leaves such amounts undefined). Probed once on this numpy."""
    for size in (1, 2, 4, 8):
        unsigned = np.dtype(f"u{size}")
        width = size * 8
        value = np.array([1, 3, 1 << (width - 1), (1 << width) - 1], unsigned)
        amounts = np.array([width, width + 1, (1 << width) - 1, width], unsigned)
        if np.left_shift(value, amounts).any() or np.right_shift(value, amounts).any():
            return False
    return True


def specialize_shift(op):
    """A direct kernel for a shift on one plain integer type, or None.

    shift_left and shift_right_logical: numpy's shift of the unsigned
    patterns, where `numpy_shifts_saturate` holds. shift_right_arithmetic:
    the signed pattern shifted by min(amount, width - 1), which for an
    amount >= width is the sign fill, as the generic kernel gives."""
    dtype = op.result_type.dtype
    if dtype not in PLAIN_INTEGERS or any(t.dtype != dtype for t in op.operand_types):
        return None
    unsigned, signed = np.dtype(f"u{dtype.itemsize}"), np.dtype(f"i{dtype.itemsize}")
    if op.name == "stablehlo.shift_right_arithmetic":
        largest = unsigned.type(dtype.itemsize * 8 - 1)

        def shift_right_arithmetic_direct(op, lhs, rhs):
            amount = np.minimum(rhs.view(unsigned), largest).view(signed)
            return np.asarray(np.right_shift(lhs.view(signed), amount)).view(dtype)
        return shift_right_arithmetic_direct
    if not numpy_shifts_saturate():
        return None
    function = np.left_shift if op.name == "stablehlo.shift_left" else np.right_shift

    def shift_direct(op, lhs, rhs):
        return np.asarray(function(lhs.view(unsigned), rhs.view(unsigned))).view(dtype)
    return shift_direct


@register("stablehlo.shift_left", validate=accepts("integer"), specialize=specialize_shift)
@elementwise
def shift_left(op, lhs, rhs):
    """Spec "shift_left" (docs/spec.md#shift_left): lhs << rhs, wrapping; an
    amount that is negative or >= the bit width gives 0."""
    value, _, amount, in_range = _shift_operands(lhs, rhs)
    shifted = np.where(in_range, value << amount, value.dtype.type(0))
    return from_bits(shifted, op.result_type.dtype)


@register("stablehlo.shift_right_logical", validate=accepts("integer"), specialize=specialize_shift)
@elementwise
def shift_right_logical(op, lhs, rhs):
    """Spec "shift_right_logical" (docs/spec.md#shift_right_logical): shifts
    in zeros; an amount that is negative or >= the bit width gives 0."""
    value, _, amount, in_range = _shift_operands(lhs, rhs)
    shifted = np.where(in_range, value >> amount, value.dtype.type(0))
    return from_bits(shifted, op.result_type.dtype)


@register("stablehlo.shift_right_arithmetic", validate=accepts("integer"), specialize=specialize_shift)
@elementwise
def shift_right_arithmetic(op, lhs, rhs):
    """Spec "shift_right_arithmetic" (docs/spec.md#shift_right_arithmetic):
    shifts in copies of the top bit (for unsigned types too); an amount
    that is negative or >= the bit width fills every bit with the sign."""
    value, width, amount, in_range = _shift_operands(lhs, rhs)
    signed = signed_from_bits(value, width)
    amount = amount.astype(signed.dtype)
    sign_fill = signed >> signed.dtype.type(width - 1)
    shifted = np.where(in_range, signed >> amount, sign_fill)
    return from_bits(shifted, op.result_type.dtype)


# --- bit counts -----------------------------------------------------------------

_SET_BITS_PER_BYTE = np.array([bin(byte).count("1") for byte in range(256)], np.uint8)


def count_set_bits(bits: np.ndarray) -> np.ndarray:
    """Set bits per element of an unsigned array (np.bitwise_count needs numpy 2)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(bits)
    as_bytes = np.ascontiguousarray(bits).view(np.uint8).reshape(bits.shape + (-1,))
    return _SET_BITS_PER_BYTE[as_bytes].sum(axis=-1, dtype=np.uint8)


@register("stablehlo.popcnt", validate=accepts("integer"))
@elementwise
def popcnt(op, operand):
    """Spec "popcnt" (docs/spec.md#popcnt): number of set bits of the n-bit
    pattern (popcnt(-1 : i8) = 8, popcnt(-1 : i4) = 4)."""
    return as_result(count_set_bits(bits_of(operand)), op.result_type.dtype)


@register("stablehlo.count_leading_zeros", validate=accepts("integer"))
@elementwise
def count_leading_zeros(op, operand):
    """Spec "count_leading_zeros" (docs/spec.md#count_leading_zeros): leading
    zero bits of the n-bit pattern; clz(0) = n, clz(negative) = 0.

    Binary search on the highest set bit: at each step, if the value has a
    set bit in its upper `step` bits, drop the lower ones."""
    value = bits_of(operand)
    width = bit_width(operand.dtype)
    zeros = np.full(value.shape, width, dtype=np.int64)
    step = 1 << (width - 1).bit_length()
    while step > 1:
        step //= 2
        upper = value >> value.dtype.type(step)
        has_upper = upper != 0
        zeros -= np.where(has_upper, step, 0)
        value = np.where(has_upper, upper, value)
    zeros -= (value != 0)
    return as_result(zeros, op.result_type.dtype)
