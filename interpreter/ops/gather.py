"""Gather ops: gather, dynamic_gather, torch_index_select.

Spec sections: "gather", "dynamic_gather"; `torch_index_select` is a
deprecated MHLO op kept by StableHLO. Gather is computed for all batch
positions at once with numpy fancy indexing: one index array per operand
dimension, shaped (batch, window...), then the result axes are permuted
into place (`offset_dims` get the window axes, the other axes the batch).

`index_vectors` and `batching_positions` are shared with scatter.py.

Point gathers (every slice size 1: each result element is one operand
element, as in `take_along_axis`) get a lean kernel at plan time
(`specialize_gather`), with the batching part of every flat position
computed once.
"""
from __future__ import annotations

import math

import numpy as np

from pjrt_ref.interpreter.registry import register

_INT64_MAX = np.iinfo(np.int64).max


def as_int64(indices: np.ndarray) -> np.ndarray:
    """Integer indices as int64; huge unsigned values saturate (they are out
    of range whichever way, and clamping/bounds checks then see them so)."""
    indices = np.asarray(indices)
    if indices.dtype == np.uint64:
        indices = np.minimum(indices, np.uint64(_INT64_MAX))
    return indices.astype(np.int64)


def index_vectors(indices: np.ndarray, index_vector_dim: int) -> tuple[tuple, np.ndarray]:
    """Split an indices tensor into (batch shape, index vectors).

    The index vectors run along `index_vector_dim`; if that equals the rank,
    every element is its own length-1 vector. Returns the shape of the other
    dims and a (batch size, vector length) int64 matrix in row-major batch
    order.
    """
    indices = as_int64(indices)
    order, vectors_shape, batch_shape = index_layout(indices.shape, index_vector_dim)
    return batch_shape, indices.transpose(order).reshape(vectors_shape)


def index_layout(indices_shape, index_vector_dim: int) -> tuple[tuple, tuple, tuple]:
    """(order, (batch size, vector length), batch shape): `indices.transpose(
    order).reshape(...)` gives the index vectors of `index_vectors`; worked
    out once at plan time for a static shape (`PointIndexing`)."""
    rank = len(indices_shape)
    if index_vector_dim == rank:
        return tuple(range(rank)), (math.prod(indices_shape), 1), tuple(indices_shape)
    order = tuple(d for d in range(rank) if d != index_vector_dim) + (index_vector_dim,)
    batch_shape = tuple(indices_shape[d] for d in order[:-1])
    return order, (math.prod(batch_shape), indices_shape[index_vector_dim]), batch_shape


def row_major_strides(shape) -> np.ndarray:
    """Elements between neighbours along each dim of a row-major array."""
    strides = np.ones(len(shape), dtype=np.int64)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


class PointIndexing:
    """Flat positions of single elements addressed by index vectors, for a
    static operand and indices shape (a point gather or scatter): the
    batching dims' part of every position is computed once, at plan time;
    a call adds each index vector's component times its dim's stride."""

    def __init__(self, operand_shape, indices_shape, index_vector_dim: int, index_map,
                 operand_batching_dims, indices_batching_dims):
        self.order, self.vectors_shape, batch_shape = index_layout(indices_shape, index_vector_dim)
        strides = row_major_strides(operand_shape)
        full = batching_positions(batch_shape, operand_batching_dims, indices_batching_dims,
                                  index_vector_dim, len(operand_shape))
        self.base = full @ strides
        self.strides = [int(strides[d]) for d in index_map]
        self.limits = [operand_shape[d] - 1 for d in index_map]

    def vectors(self, indices: np.ndarray) -> np.ndarray:
        """The (batch size, vector length) int64 index vectors, as `index_vectors`."""
        return as_int64(indices).transpose(self.order).reshape(self.vectors_shape)

    def clamped(self, indices: np.ndarray) -> np.ndarray:
        """Flat positions with every component clamped into its dim (gather)."""
        starts = self.vectors(indices)
        flat = self.base.copy()
        for j, (stride, limit) in enumerate(zip(self.strides, self.limits)):
            # np.minimum(np.maximum(...)): np.clip's Python wrapper costs
            # more than the work for W4's 128 indices.
            flat += np.minimum(np.maximum(starts[:, j], 0), limit) * stride
        return flat

    def checked(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flat positions, in bounds): positions as given, and which of them
        have every component inside its dim (scatter skips the others)."""
        starts = self.vectors(indices)
        flat = self.base.copy()
        in_bounds = np.ones(len(flat), dtype=bool)
        for j, (stride, limit) in enumerate(zip(self.strides, self.limits)):
            component = starts[:, j]
            in_bounds &= (component >= 0) & (component <= limit)
            flat += component * stride
        return flat, in_bounds


def batching_positions(batch_shape: tuple, operand_batching_dims, indices_batching_dims,
                       index_vector_dim: int, rank: int) -> np.ndarray:
    """`full_batching_index` of the spec for every batch position: a
    (batch size, rank) matrix, zero except at the operand batching dims,
    which take the batch position's coordinate along the paired indices dim.
    """
    size = int(np.prod(batch_shape, dtype=np.int64))
    full = np.zeros((size, rank), dtype=np.int64)
    if operand_batching_dims:
        coordinates = np.indices(batch_shape).reshape(len(batch_shape), size)
        for d_operand, d_indices in zip(operand_batching_dims, indices_batching_dims):
            axis = d_indices - (0 if d_indices < index_vector_dim else 1)
            full[:, d_operand] = coordinates[axis]
    return full


def gather_array(operand: np.ndarray, start_indices: np.ndarray, dims, slice_sizes) -> np.ndarray:
    """Spec "gather" for a given `slice_sizes`.

    `full_start_index` is clamped into [0, dim - slice_size] per operand dim;
    `indices_are_sorted` is only a hint and is ignored.
    """
    slice_sizes = [int(s) for s in slice_sizes]
    rank = operand.ndim
    batch_shape, starts = index_vectors(start_indices, dims.index_vector_dim)
    full_start = batching_positions(batch_shape, dims.operand_batching_dims,
                                    dims.start_indices_batching_dims, dims.index_vector_dim, rank)
    for d_start, d_operand in enumerate(dims.start_index_map):
        upper = operand.shape[d_operand] - slice_sizes[d_operand]
        full_start[:, d_operand] += np.clip(starts[:, d_start], 0, max(upper, 0))
    dropped = set(dims.collapsed_slice_dims) | set(dims.operand_batching_dims)
    window_dims = [d for d in range(rank) if d not in dropped]
    window_shape = [slice_sizes[d] for d in window_dims]
    index = []
    for d in range(rank):
        per_dim = full_start[:, d].reshape((-1,) + (1,) * len(window_dims))
        if d in window_dims:
            axis = window_dims.index(d)
            offsets_shape = [1] * (1 + len(window_dims))
            offsets_shape[1 + axis] = slice_sizes[d]
            per_dim = per_dim + np.arange(slice_sizes[d]).reshape(offsets_shape)
        index.append(per_dim)
    values = operand[tuple(index)] if rank else np.broadcast_to(operand, (len(full_start),))
    values = values.reshape(tuple(batch_shape) + tuple(window_shape))
    return np.transpose(values, _result_axes(len(batch_shape), dims.offset_dims))


def _result_axes(batch_rank: int, offset_dims) -> list[int]:
    """Permutation taking (batch axes..., window axes...) to the result:
    result axis `offset_dims[j]` is window axis j, the others batch axes."""
    result_rank = batch_rank + len(offset_dims)
    batch_dims = [d for d in range(result_rank) if d not in offset_dims]
    axes = [0] * result_rank
    for i, d in enumerate(batch_dims):
        axes[d] = i
    for j, d in enumerate(offset_dims):
        axes[d] = batch_rank + j
    return axes


def specialize_gather(op):
    """Plan-time kernel for a static point gather (every slice size 1): one
    flat position per result element, each index clamped into its dim as
    `gather_array` clamps it (the window is one element, so the clamp range
    is [0, dim - 1]), and one `take`. The elements are the ones the generic
    kernel picks, in the same row-major batch order (the size-1 window dims
    of the result do not change that order)."""
    operand_type, indices_type = op.operand_types
    dims = op.attrs["dimension_numbers"]
    if (not op.has_static_types or any(int(s) != 1 for s in op.attrs["slice_sizes"])
            or 0 in operand_type.shape or indices_type.dtype.kind not in "iu"):
        return None
    points = PointIndexing(operand_type.shape, indices_type.shape, dims.index_vector_dim,
                           dims.start_index_map, dims.operand_batching_dims,
                           dims.start_indices_batching_dims)
    shape = op.result_type.shape

    def gather_points(op, operand, start_indices):
        return operand.reshape(-1).take(points.clamped(start_indices)).reshape(shape)
    return gather_points


@register("stablehlo.gather", specialize=specialize_gather)
def gather(op, operand, start_indices):
    """Spec "gather" (docs/spec.md#gather), batching dims included."""
    return gather_array(operand, start_indices, op.attrs["dimension_numbers"],
                        op.attrs["slice_sizes"])


@register("stablehlo.dynamic_gather")
def dynamic_gather(op, operand, start_indices, slice_sizes):
    """Spec "dynamic_gather" (docs/spec.md#dynamic_gather): gather with
    `slice_sizes` given as a run-time tensor."""
    sizes = [int(s) for s in as_int64(slice_sizes)]
    if any(not 0 <= s <= n for s, n in zip(sizes, operand.shape)) or len(sizes) != operand.ndim:
        raise op.error(f"slice_sizes {sizes} do not fit operand shape {operand.shape}")
    return gather_array(operand, start_indices, op.attrs["dimension_numbers"], sizes)


@register("stablehlo.torch_index_select")
def torch_index_select(op, operand, index):
    """Deprecated `torch_index_select` (MHLO): `torch.index_select` with
    `batch_dims` leading dims shared by operand and index:
    result[b, m, i, r] = operand[b, m, index[b, i], r], where `b` are the
    batch dims, `m` the operand dims before `dim`, `i` the index dims after
    the batch and `r` the operand dims after `dim`. Indices must be in range.
    """
    dim, batch = op.attrs["dim"], op.attrs["batch_dims"]
    index = as_int64(index)
    if index.size and (index.min() < 0 or index.max() >= operand.shape[dim]):
        raise op.error(f"index out of range [0, {operand.shape[dim]}) for dimension {dim}")
    batch_shape = operand.shape[:batch]
    pieces = [np.take(operand[b], index[b], axis=dim - batch) for b in np.ndindex(*batch_shape)]
    result_shape = op.result_type.shape
    if any(d is None for d in result_shape):
        result_shape = operand.shape[:dim] + index.shape[batch:] + operand.shape[dim + 1:]
    return np.array(pieces, dtype=operand.dtype).reshape(result_shape)
