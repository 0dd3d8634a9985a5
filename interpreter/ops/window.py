"""Window ops: `reduce_window` and `select_and_scatter`.

Spec sections "reduce_window" (docs/spec.md#reduce_window) and
"select_and_scatter" (docs/spec.md#select_and_scatter). Windows are numpy
views (`sliding_window_view`) of the padded, dilated input, gathered into a
trailing axis, then reduced with the fastest path the body allows (see
`reduce_regions`).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.window_scan import is_identity, scan, scan_axis
from pjrt_ref.interpreter.ops.reduce_regions import (analyse_regions, body_analysis, fold_last_axis, reduce_last_axis,
                                                     run_body, ufunc_dtype)


def _window_attrs(op, rank: int) -> dict:
    """The window attributes with the spec's defaults filled in."""
    attrs = op.attrs
    padding = attrs.get("padding")
    padding = np.zeros((rank, 2), np.int64) if padding is None else np.asarray(padding).reshape(rank, 2)
    return {
        "dims": tuple(attrs["window_dimensions"]),
        "strides": tuple(attrs.get("window_strides") or (1,) * rank),
        "base_dilations": tuple(attrs.get("base_dilations") or (1,) * rank),
        "window_dilations": tuple(attrs.get("window_dilations") or (1,) * rank),
        "padding": [(int(lo), int(hi)) for lo, hi in padding],
    }


def pad_and_dilate(x: np.ndarray, fill, padding, base_dilations) -> np.ndarray:
    """Spec "pad" with `base_dilations - 1` interior padding; padding may be < 0."""
    dilated = [(s - 1) * b + 1 if s else 0 for s, b in zip(x.shape, base_dilations)]
    full_shape = [max(lo, 0) + d + max(hi, 0) for d, (lo, hi) in zip(dilated, padding)]
    padded = np.full(full_shape, fill, dtype=x.dtype)
    padded[tuple(slice(max(lo, 0), max(lo, 0) + d, b)
                 for d, (lo, _), b in zip(dilated, padding, base_dilations))] = x
    crop = tuple(slice(-min(lo, 0), size + min(hi, 0))
                 for size, (lo, hi) in zip(full_shape, padding))
    return padded[crop]


def windows(padded: np.ndarray, dims, strides, window_dilations, out_shape) -> np.ndarray:
    """Array of shape out_shape + (window size,): the elements of each window."""
    rank = padded.ndim
    count = int(np.prod(dims, dtype=np.int64))
    if 0 in out_shape or count == 0:
        return np.empty(tuple(out_shape) + (count,), padded.dtype)
    spans = [(w - 1) * d + 1 for w, d in zip(dims, window_dilations)]
    if padded.dtype.isbuiltin != 1:
        # numpy's stride tricks cannot build views of ml_dtypes' arrays: window
        # their bits instead.
        bits = padded.view(np.dtype(f"u{padded.dtype.itemsize}"))
        return windows(bits, dims, strides, window_dilations, out_shape).view(padded.dtype)
    view = sliding_window_view(padded, spans)
    view = view[tuple(slice(0, o * s, s) for o, s in zip(out_shape, strides))
                + tuple(slice(None, None, d) for d in window_dilations)]
    assert view.shape[:rank] == tuple(out_shape), (view.shape, out_shape)
    return view.reshape(tuple(out_shape) + (count,))


_EXACT_UFUNCS = (np.maximum, np.minimum, np.logical_and, np.logical_or,
                 np.bitwise_and, np.bitwise_or, np.bitwise_xor)


def _rounding_free(body) -> bool:
    """True if the body is max/min/and/or/xor: any order gives the same result."""
    return body.ufuncs is not None and all(u in _EXACT_UFUNCS for u in body.ufuncs)


def window_output_shape(in_shape, attrs) -> tuple:
    """Spec "reduce_window" (C15): the number of windows along each dimension."""
    shape = []
    for size, window, stride, base, dilation, (lo, hi) in zip(
            in_shape, attrs["dims"], attrs["strides"], attrs["base_dilations"],
            attrs["window_dilations"], attrs["padding"]):
        dilated = (size - 1) * base + 1 if size else 0
        padded = lo + dilated + hi
        span = (window - 1) * dilation + 1
        shape.append(0 if padded <= 0 or span > padded else (padded - span) // stride + 1)
    return tuple(shape)


def _validate_quantization(op) -> None:
    if any(getattr(t, "quant", None) is not None for t in op.operand_types):
        raise op.error(f"quantized {op.name} is not supported", cls=Unimplemented)
    analyse_regions(op)


@register("stablehlo.reduce_window", validate=_validate_quantization)
def reduce_window(op, *operands, regions):
    """Spec "reduce_window": `reduce` of each window of the padded inputs.

    Padding and base-dilation holes hold the init value, as the spec says
    (XLA skips padding instead: the two differ only for an init value that is
    not the body's identity); windows may be dilated and strided; variadic
    inputs share the windows. Negative padding crops the input.
    """
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    attrs = _window_attrs(op, inputs[0].ndim)
    out_shape = window_output_shape(inputs[0].shape, attrs)
    dtypes = [t.dtype for t in op.result_types]
    body = body_analysis(op, 0)
    scan_along = scan_axis(attrs, inputs[0].shape, out_shape) if body.ufuncs else None
    if scan_along is not None and all(is_identity(u, i, d) for u, i, d
                                      in zip(body.ufuncs, inits, dtypes)):
        # cumsum & co: XLA's tiled scan, O(n) instead of O(n^2)
        axis, reverse = scan_along
        results = [scan(u, x, i, d, axis, reverse)
                   for u, x, i, d in zip(body.ufuncs, inputs, inits, dtypes)]
        return results[0] if n == 1 else tuple(results)
    values = []
    for x, init in zip(inputs, inits):
        padded = pad_and_dilate(x, init, attrs["padding"], attrs["base_dilations"])
        values.append(windows(padded, attrs["dims"], attrs["strides"],
                              attrs["window_dilations"], out_shape))
    if _rounding_free(body):
        results = reduce_last_axis(regions[0], body, dtypes, values, inits)
    else:
        # Sums and products round differently in different orders: fold in
        # window order, as XLA does.
        results = fold_last_axis(regions[0], body, dtypes, values, inits)
    results = [np.asarray(r, dtype=d).reshape(out_shape) for r, d in zip(results, dtypes)]
    return results[0] if n == 1 else tuple(results)


@register("stablehlo.select_and_scatter", validate=_validate_quantization)
def select_and_scatter(op, operand, source, init_value, regions):
    """Spec "select_and_scatter": pick one element per window with `select`,
    then combine the `source` values picked for each element with `scatter`.

    Within a window the first element is kept while `select(kept, next)`
    holds, as XLA does; padding positions are never picked, and a window made
    only of padding scatters nothing. Elements never picked hold `init_value`.
    """
    select, scatter = regions
    attrs = _window_attrs(op, operand.ndim)
    out_shape = source.shape
    padding = attrs["padding"]
    ones = (1,) * operand.ndim

    def window_values(array, fill):
        padded = pad_and_dilate(array, fill, padding, ones)
        return windows(padded, attrs["dims"], attrs["strides"], ones, out_shape)

    padded_shape = [s + lo + hi for s, (lo, hi) in zip(operand.shape, padding)]
    positions = np.arange(int(np.prod(padded_shape, dtype=np.int64))).reshape(padded_shape)
    values = window_values(operand, operand.flat[0] if operand.size else 0)
    valid = window_values(np.ones(operand.shape, bool), False)
    where = windows(positions, attrs["dims"], attrs["strides"], ones, out_shape)
    chosen, has_choice = _select_in_windows(select, body_analysis(op, 0), values, valid, where)

    result = np.full(padded_shape, init_value, dtype=op.result_types[0].dtype).reshape(-1)
    _scatter_into(scatter, body_analysis(op, 1), result, chosen[has_choice], source[has_choice])
    result = result.reshape(padded_shape)
    return result[tuple(slice(lo, lo + s) for s, (lo, _) in zip(operand.shape, padding))].copy()


def _select_in_windows(select, body, values, valid, where):
    """(position, any-valid) of the element `select` keeps in each window."""
    out_shape = values.shape[:-1]
    if not body.elementwise:
        return _select_in_windows_scalar(select, values, valid, where)
    kept_value, kept_where, kept_valid = values[..., 0], where[..., 0], valid[..., 0]
    for k in range(1, values.shape[-1]):
        candidate = values[..., k]
        keep, = run_body(select, [np.dtype(bool)], out_shape, kept_value, candidate)
        take = valid[..., k] & (~kept_valid | ~keep)
        kept_value = np.where(take, candidate, kept_value)
        kept_where = np.where(take, where[..., k], kept_where)
        kept_valid = kept_valid | take
    return kept_where, kept_valid


def _select_in_windows_scalar(select, values, valid, where):
    out_shape = values.shape[:-1]
    chosen = np.zeros(out_shape, np.int64)
    found = np.zeros(out_shape, bool)
    for index in np.ndindex(*out_shape):
        kept = None
        for k in range(values.shape[-1]):
            if not valid[index + (k,)]:
                continue
            candidate = np.asarray(values[index + (k,)])
            if kept is None or not bool(select(np.asarray(values[index + (kept,)]), candidate)[0]):
                kept = k
        if kept is not None:
            chosen[index], found[index] = where[index + (kept,)], True
    return chosen, found


def _scatter_into(scatter, body, result, targets, sources) -> None:
    """result[t] = scatter(result[t], s) for each (t, s), in source order."""
    dtype = result.dtype
    if body.ufuncs is not None and ufunc_dtype(dtype) == dtype:
        body.ufuncs[0].at(result, targets, sources)
        return
    vectorised = body.elementwise
    # Round r updates the r-th source aimed at each target: targets within a
    # round are distinct, so each round is one vectorised run of the body.
    order = np.argsort(targets, kind="stable")
    sorted_targets = targets[order]
    starts = np.searchsorted(sorted_targets, sorted_targets, side="left")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order)) - starts
    for r in range(int(rank.max()) + 1 if len(rank) else 0):
        picked = rank == r
        t, s = targets[picked], sources[picked]
        if vectorised:
            result[t], = run_body(scatter, [dtype], t.shape, result[t], s)
        else:
            for ti, si in zip(t, s):
                result[ti] = np.asarray(scatter(np.asarray(result[ti]), np.asarray(si))[0], dtype)
