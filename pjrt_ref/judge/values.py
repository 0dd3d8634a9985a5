"""Input values that find disagreements: each element type's edges, then ordinary numbers.

Most elements are drawn from the type's edge values, where implementations
part ways: ±0, ±1, ±inf, NaN, the largest and smallest normal numbers, the
smallest subnormal, halves (rounding ties), integers one past the float's
exact range; for integers 0, ±1, the minimum and maximum and their
neighbours, and shift amounts at the type's width. The rest are ordinary
values of a modest size.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from pjrt_ref.interpreter.types import ELEMENT_DTYPES
from pjrt_ref.judge.opset import element_class

EDGE_SHARE = 0.7        # the share of elements drawn from the edge values


def dtype_of(element_type: str) -> np.dtype:
    return ELEMENT_DTYPES[element_type]


def _float_edges(dtype: np.dtype) -> list[float]:
    info = ml_dtypes.finfo(dtype)
    big = float(info.max)
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, big, -big,
             float(info.tiny), -float(info.tiny), float(info.smallest_subnormal),
             1.0 + float(info.eps), 2.0 ** (info.nmant + 1) + 1, np.pi]
    if has_infinity(dtype):
        edges += [np.inf, -np.inf]
    if _has_nan(dtype):
        edges.append(np.nan)
    return edges


def has_infinity(dtype: np.dtype) -> bool:
    return bool(np.isinf(np.array(np.inf).astype(dtype).astype(np.float64)))


def _has_nan(dtype: np.dtype) -> bool:
    return bool(np.isnan(np.array(np.nan).astype(dtype).astype(np.float64)))


def _integer_edges(dtype: np.dtype) -> list[int]:
    info = ml_dtypes.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    width = dtype.itemsize * 8 if dtype.itemsize > 1 or hi > 15 else 4
    candidates = [0, 1, 2, 3, -1, -2, lo, lo + 1, hi, hi - 1, width - 1, width, width + 1]
    return [v for v in candidates if lo <= v <= hi]


def edge_values(element_type: str) -> np.ndarray:
    """The edge values of `element_type`, as an array of it."""
    dtype = dtype_of(element_type)
    kind = element_class(element_type)
    if kind == "bool":
        return np.array([False, True])
    if kind in ("signed", "unsigned"):
        return np.array([np.array(v).astype(dtype) for v in _integer_edges(dtype)], dtype)
    if kind == "float":
        return np.array(_float_edges(dtype), np.float64).astype(dtype)
    part = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
    reals = np.array(_float_edges(part), np.float64).astype(part)
    pairs = np.empty((len(reals), len(reals)), dtype)
    pairs.real, pairs.imag = reals[:, None], reals[None, :]    # (not x + 1j*y: inf * 0j is NaN)
    return pairs.reshape(-1)


def ordinary_values(element_type: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """`size` unremarkable values of `element_type`."""
    dtype = dtype_of(element_type)
    kind = element_class(element_type)
    if kind == "bool":
        return rng.integers(0, 2, size).astype(bool)
    if kind in ("signed", "unsigned"):
        info = ml_dtypes.iinfo(dtype)
        return rng.integers(max(int(info.min), -100), min(int(info.max), 100) + 1, size).astype(dtype)
    values = rng.normal(0.0, 4.0, size)
    if kind == "complex":
        values = values + 1j * rng.normal(0.0, 4.0, size)
    return values.astype(dtype)


def random_array(element_type: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """An array of `shape`, most of its elements edge values."""
    size = int(np.prod(shape, dtype=np.int64))
    edges = edge_values(element_type)
    ordinary = ordinary_values(element_type, rng, size)
    from_edges = rng.random(size) < EDGE_SHARE
    picked = edges[rng.integers(0, len(edges), size)] if size else ordinary
    return np.where(from_edges, picked, ordinary).astype(dtype_of(element_type)).reshape(shape)
