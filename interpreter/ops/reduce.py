"""Reductions: `reduce` (spec "reduce", docs/spec.md#reduce).

The body is inspected once (see `reduce_regions`): a plain add/max/... body
becomes numpy's `ufunc.reduce`, an element-wise body (argmax's
compare/select chain) runs vectorised in log2(n) steps, anything else runs
element by element.

With the plan-time optimiser on, a single-input reduce with such a plain
body gets a lean kernel (`specialize_reduce`): the same numpy calls, with
the axis order, shapes and ufunc worked out once when the program is
planned instead of on every call.
"""
from __future__ import annotations

import math

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.reduce_regions import (analyse_regions, body_analysis, reduce_last_axis, ufunc_dtype,
                                                     ufunc_folder)


def _validate_reduce(op) -> None:
    if any(t.quant is not None for t in op.operand_types):
        raise op.error("quantized reduce is not supported", cls=Unimplemented)
    analyse_regions(op)


def moved_layout(shape, axes) -> tuple[tuple, tuple]:
    """(order, moved shape) taking an array of `shape` to one with `axes`
    moved to the end (`np.transpose(array, order)`) and flattened into one
    last axis (`.reshape(moved shape)`)."""
    axes = tuple(axes)
    kept = [d for d in range(len(shape)) if d not in axes]
    count = math.prod(shape[d] for d in axes)
    return tuple(kept) + axes, tuple(shape[d] for d in kept) + (count,)


def move_axes_last(array: np.ndarray, axes) -> np.ndarray:
    """`array` with `axes` moved to the end and flattened into one axis."""
    order, moved_shape = moved_layout(array.shape, axes)
    return np.transpose(array, order).reshape(moved_shape)


def specialize_reduce(op):
    """Plan-time kernel for `reduce` of one input whose body is one plain
    ufunc (add, max, min, and, or, ...) on a dtype numpy's ufuncs handle
    directly, over at least two elements per result (one element, any
    body: `_single_element_reduce`): the numpy calls of the generic path
    (`reduce_regions._ufunc_reduce`: the same transpose and reshape, so the
    same summation order; the same `ufunc_folder`), with the layout, shapes
    and functions decided here. Other reduces: None."""
    if len(op.operand_types) != 2 or not op.has_static_types:
        return None
    dtype = op.result_type.dtype
    order, moved_shape = moved_layout(op.operand_types[0].shape, op.attrs["dimensions"])
    if moved_shape[-1] == 1 and op.operand_types[0].dtype == dtype:
        return _single_element_reduce(order, moved_shape, dtype)
    ufuncs = body_analysis(op, 0).ufuncs
    if (ufuncs is None or ufunc_dtype(dtype) != dtype or op.operand_types[0].dtype != dtype
            or moved_shape[-1] == 0):
        return None  # empty folds: the generic kernel's special case
    fold, combine = ufunc_folder(ufuncs[0], dtype)
    out_shape, asarray = moved_shape[:-1], np.asarray

    def reduce_with_ufunc(op, operand, init, regions=None):
        folded = fold(operand.transpose(order).reshape(moved_shape))
        return asarray(combine(init, folded)).reshape(out_shape)
    return reduce_with_ufunc


def _single_element_reduce(order, moved_shape, dtype):
    """Every result folds one element (only size-1 dims reduced, whatever
    the body): the result is that element, as in the generic kernel. For a
    row-major operand that is a reshaped view, laid out as the generic
    kernel's copy; otherwise the generic kernel's own copy."""
    out_shape = moved_shape[:-1]

    def reduce_single_elements(op, operand, init, regions=None):
        if operand.flags.c_contiguous:
            return operand.reshape(out_shape)
        return operand.transpose(order).reshape(moved_shape)[..., 0].astype(dtype)
    return reduce_single_elements


@register("stablehlo.reduce", validate=_validate_reduce, specialize=specialize_reduce)
def reduce(op, *operands, regions):
    """Spec "reduce": fold `inputs` along `dimensions` with `body`, from `init_values`.

    Variadic: N inputs and N inits give N results, the body seeing N
    accumulators then N elements. Reducing an empty dimension gives the init
    values. Where each result folds exactly one element (no dimension, or
    only size-1 dimensions, reduced) the result is that element, as in XLA
    (the spec leaves where init values enter the schedule open).
    """
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    dims = op.attrs["dimensions"]
    dtypes = [t.dtype for t in op.result_types]
    out_shape = tuple(size for d, size in enumerate(inputs[0].shape) if d not in dims)
    values = [move_axes_last(x, dims) for x in inputs]
    if values[0].shape[-1] == 1:
        results = [v[..., 0].astype(d) for v, d in zip(values, dtypes)]
        return results[0] if n == 1 else tuple(results)
    results = reduce_last_axis(regions[0], body_analysis(op, 0), dtypes, values, inits)
    results = [np.asarray(r, dtype=d).reshape(out_shape) for r, d in zip(results, dtypes)]
    return results[0] if n == 1 else tuple(results)
