"""Slicing ops: slice, dynamic_slice, dynamic_update_slice, pad.

Spec sections: "slice", "dynamic_slice", "dynamic_update_slice", "pad".
Dynamic start indices are clamped so the slice stays inside the operand,
exactly as the spec says; `pad` supports negative edge padding (which
crops) and interior padding.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.registry import register


def index_value(index: np.ndarray) -> int:
    """A 0-d integer tensor as a Python int (unsigned values stay positive)."""
    return int(np.asarray(index).reshape(()))


@register("stablehlo.slice")
def slice_op(op, operand):
    """Spec "slice" (docs/spec.md#slice): static start/limit/stride per dim."""
    starts, limits, strides = (op.attrs[k] for k in ("start_indices", "limit_indices", "strides"))
    return operand[tuple(slice(s, l, t) for s, l, t in zip(starts, limits, strides))]


def clamped_starts(start_indices, operand_shape, window_shape) -> list[int]:
    """`clamp(0, start_indices, shape(operand) - window_shape)`, per dim."""
    return [min(max(index_value(s), 0), n - w)
            for s, n, w in zip(start_indices, operand_shape, window_shape)]


def window(starts, sizes) -> tuple:
    return tuple(slice(s, s + w) for s, w in zip(starts, sizes))


@register("stablehlo.dynamic_slice")
def dynamic_slice(op, operand, *start_indices):
    """Spec "dynamic_slice" (docs/spec.md#dynamic_slice): start indices are
    clamped into [0, dim - slice_size], so the slice never leaves the operand."""
    sizes = op.attrs["slice_sizes"]
    starts = clamped_starts(start_indices, operand.shape, sizes)
    return operand[window(starts, sizes)].copy()


@register("stablehlo.dynamic_update_slice")
def dynamic_update_slice(op, operand, update, *start_indices):
    """Spec "dynamic_update_slice" (docs/spec.md#dynamic_update_slice): start
    indices are clamped into [0, dim - update_dim]."""
    starts = clamped_starts(start_indices, operand.shape, update.shape)
    result = operand.copy()
    result[window(starts, update.shape)] = update
    return result


def pad_array(operand: np.ndarray, padding_value: np.ndarray, low, high, interior) -> np.ndarray:
    """Spec "pad": interior padding first, then edge padding (negative edge
    padding removes elements from that side)."""
    low, high, interior = ([int(v) for v in values] for values in (low, high, interior))
    if any(i < 0 for i in interior):
        raise ValueError(f"interior padding must be >= 0, got {interior}")
    value = np.asarray(padding_value, dtype=operand.dtype).reshape(())
    dilated_shape = [(n - 1) * (i + 1) + 1 if n > 0 else 0 for n, i in zip(operand.shape, interior)]
    dilated = np.full(dilated_shape, value, dtype=operand.dtype)
    dilated[tuple(slice(None, None, i + 1) for i in interior)] = operand
    result_shape = [lo + n + hi for lo, n, hi in zip(low, dilated_shape, high)]
    if any(n < 0 for n in result_shape):
        raise ValueError(f"padding gives a negative dimension size: {result_shape}")
    result = np.full(result_shape, value, dtype=operand.dtype)
    source, target = [], []
    for lo, hi, n in zip(low, high, dilated_shape):
        begin, end = max(-lo, 0), n - max(-hi, 0)
        length = max(end - begin, 0)
        source.append(slice(begin, begin + length))
        target.append(slice(max(lo, 0), max(lo, 0) + length))
    result[tuple(target)] = dilated[tuple(source)]
    return result


@register("stablehlo.pad")
def pad(op, operand, padding_value):
    """Spec "pad" (docs/spec.md#pad): edge (possibly negative) and interior
    padding with `padding_value`."""
    return pad_array(operand, padding_value, op.attrs["edge_padding_low"],
                     op.attrs["edge_padding_high"], op.attrs["interior_padding"])
