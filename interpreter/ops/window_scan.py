"""Cumulative scans (JAX's cumsum, cumprod, cummax, ...) as XLA's CPU
backend computes them.

JAX lowers a scan to a `reduce_window` whose window spans the whole scanned
dimension, padded by length - 1 before it (after it, for reverse scans).
Folding each window in order costs O(n^2); XLA instead rewrites long scans
into a two-level "tree" (its ReduceWindowRewriter, base length 16 on CPU):
scan tiles of 16 elements, scan the tiles' totals (recursively), and combine
each tile with the total of the tiles before it. The rounding of float sums
depends on that structure, so it is reproduced here, with numpy ufuncs.

Only bodies that are a single add/multiply/max/min/and/or/xor are handled
(see `reduce_regions.binary_ufuncs`); such bodies' init values are their
identities in practice, and where XLA folds extra copies of the init value
in, this code folds one.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrt_ref.interpreter.ops.reduce_regions import ufunc_dtype

TILE = 16


def scan_axis(attrs, in_shape, out_shape) -> tuple[int, bool] | None:
    """(axis, reverse) if the window attributes describe a cumulative scan."""
    if tuple(out_shape) != tuple(in_shape):
        return None
    long_axes = [d for d, w in enumerate(attrs["dims"]) if w != 1]
    unit = attrs["strides"] + attrs["base_dilations"] + attrs["window_dilations"]
    if len(long_axes) != 1 or any(s != 1 for s in unit):
        return None
    axis = long_axes[0]
    length = in_shape[axis]
    if attrs["dims"][axis] != length or length < 2:
        return None
    padding = attrs["padding"]
    if any(p != (0, 0) for d, p in enumerate(padding) if d != axis):
        return None
    if padding[axis] == (length - 1, 0):
        return axis, False
    if padding[axis] == (0, length - 1):
        return axis, True
    return None


def is_identity(ufunc, init, dtype) -> bool:
    """True if `init` is the body's identity (or, for add, either zero):
    then folding in the spec's init-filled padding changes nothing, the
    spec and XLA (which skips padding) agree, and the tiled scan applies."""
    dtype = np.dtype(dtype)
    value = np.asarray(init).astype(ufunc_dtype(dtype))
    if ufunc in (np.add, np.bitwise_or, np.bitwise_xor, np.logical_or):
        return not value.any()
    if ufunc in (np.multiply, np.logical_and):
        return bool(value == 1) if ufunc is np.multiply else bool(value)
    if ufunc is np.bitwise_and:
        return bool(value == ~np.zeros((), value.dtype))
    if ufunc in (np.maximum, np.minimum):
        wide = value.astype(np.float64) if dtype.kind != "u" else value.astype(np.uint64)
        bound = _lowest(dtype) if ufunc is np.maximum else _highest(dtype)
        return bool(wide == bound)
    return False


def _lowest(dtype):
    if dtype.kind in "iu" or dtype.name in ("int2", "int4", "uint2", "uint4"):
        return ml_dtypes.iinfo(dtype).min
    if dtype == np.bool_:
        return 0
    return -np.inf


def _highest(dtype):
    if dtype.kind in "iu" or dtype.name in ("int2", "int4", "uint2", "uint4"):
        return ml_dtypes.iinfo(dtype).max
    if dtype == np.bool_:
        return 1
    return np.inf


def scan(ufunc, x: np.ndarray, init, dtype, axis: int, reverse: bool) -> np.ndarray:
    """The inclusive scan of `x` along `axis` with `ufunc`, from `init`."""
    work = ufunc_dtype(np.dtype(dtype))
    moved = np.moveaxis(np.asarray(x).astype(work), axis, -1)
    init = np.asarray(init).astype(work)
    with np.errstate(all="ignore"):
        result = _inclusive(ufunc, moved, init, reverse)
    return np.asarray(np.moveaxis(result.astype(dtype, copy=False), -1, axis), order="C")


def _inclusive(ufunc, x, init, reverse):
    n = x.shape[-1]
    if n <= TILE:
        return _direct(ufunc, x, init, reverse)
    tiles = -(-n // TILE)
    padding = [(0, 0)] * (x.ndim - 1) + [(0, tiles * TILE - n)]
    padded = np.pad(x, padding, constant_values=init)
    tiled = padded.reshape(x.shape[:-1] + (tiles, TILE))
    inner = _direct(ufunc, tiled, init, reverse)
    totals = inner[..., 0] if reverse else inner[..., -1]
    before = _exclusive(ufunc, totals, init, reverse)
    combined = ufunc(inner, before[..., None]).astype(x.dtype, copy=False)
    return combined.reshape(x.shape[:-1] + (tiles * TILE,))[..., :n]


def _exclusive(ufunc, totals, init, reverse):
    """Scan of the tile totals shifted by one: tile j gets the fold of the
    tiles before it (after it, reversed); the first (last) gets init."""
    n = totals.shape[-1]
    if n <= TILE:
        shifted = _shift(totals, init, reverse)
        return _direct(ufunc, shifted, init, reverse)
    return _shift(_inclusive(ufunc, totals, init, reverse), init, reverse)


def _shift(values, init, reverse):
    edge = np.broadcast_to(init, values.shape[:-1] + (1,)).astype(values.dtype)
    if reverse:
        return np.concatenate([values[..., 1:], edge], axis=-1)
    return np.concatenate([edge, values[..., :-1]], axis=-1)


def _direct(ufunc, x, init, reverse):
    """Each output folds its window in window order, from init: forward
    out[i] = init.x0.x1...xi; reverse out[i] = init.xi.x(i+1)...x(n-1)."""
    n = x.shape[-1]
    if not reverse:
        start = np.broadcast_to(init, x.shape[:-1] + (1,)).astype(x.dtype)
        return ufunc.accumulate(np.concatenate([start, x], axis=-1), axis=-1,
                                dtype=x.dtype)[..., 1:]
    out = np.broadcast_to(init, x.shape).astype(x.dtype)
    for k in range(n):
        # element k joins, in order, the windows that start at or before it
        out[..., :k + 1] = ufunc(out[..., :k + 1], x[..., k:k + 1])
    return out
