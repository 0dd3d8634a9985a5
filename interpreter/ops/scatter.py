"""Scatter: spec section "scatter" (docs/spec.md#scatter).

Every update element gets the flat position it updates in the results: its
scatter position's `full_start_index + full_batching_index` plus its window
position's `full_window_index`. Updates are applied scatter position by
scatter position, in row-major order, each window in row-major order (the
spec leaves the schedule implementation-defined; this is XLA CPU's order, so
with duplicate indices and a "replace" body the last update wins).

Out-of-bounds updates: the spec skips each update element whose
`result_index` is out of bounds and calls that implementation-defined; we
follow XLA (whose results JAX users see) and skip the *whole window* of a
scatter position whose window does not fit entirely in the operand.

The update computation is recognised when the program is planned:
* a body returning its second argument ("replace") becomes an assignment;
* a body that is one elementwise op (add, multiply, maximum, minimum, and,
  or, xor) on its two arguments becomes `numpy.<ufunc>.at` (unbuffered, in
  order, so duplicate indices accumulate);
* anything else (several inputs, type promotion, longer bodies) calls the
  region once per update element, in order (slow but exact), in a numba
  loop when interpreter/native can compile the body.

Point scatters (one input, every update window a single element, as in the
gradient of `take_along_axis`) with a recognised body get a lean kernel at
plan time (`specialize_scatter`): the same targets, bounds check and
update application, with the batching part of every target computed once.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pjrt_ref.interpreter.native.regions import scatter_applier
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.gather import PointIndexing, batching_positions, index_vectors, row_major_strides
from pjrt_ref.interpreter.ops.reduce_regions import BODY_UFUNCS

REPLACE = "replace"


def recognise_body(op):
    """REPLACE, a numpy ufunc, or None (run the region) for the op's body."""
    (body,) = op.region_plans
    if len(body.arg_slots) != 2 or len(body.result_slots) != 1:
        return None
    current, update = body.arg_slots
    result = op.result_types[0]
    if any(t != _scalar_type(result) for t in body.arg_types):
        return None  # promoted types go through the region
    (returned,) = body.result_slots
    if not body.steps:
        return REPLACE if returned == update else None
    if len(body.steps) != 1:
        return None
    (step,) = body.steps
    ufunc = BODY_UFUNCS.get(step.op.name)
    if ufunc is None or step.results != (returned,) or sorted(step.operands) != sorted(
            (current, update)):
        return None
    if result.quant is not None:
        return None  # arithmetic on quantized values is not arithmetic on storage
    if ufunc in (np.bitwise_and, np.bitwise_or, np.bitwise_xor) and result.dtype.kind not in "biu":
        return None
    return ufunc


def _scalar_type(tensor_type):
    """The 0-d tensor type of a tensor type's elements."""
    return dataclasses.replace(tensor_type, shape=(), bounds=None)


def validate_scatter(op) -> None:
    op.cache["body"] = recognise_body(op)


def scatter_positions(operand_shape, scatter_indices, updates_shape, dims):
    """Where each update element goes.

    Returns (flat_targets, in_bounds, update_axes): flat_targets is a
    (scatter positions, window positions) matrix of flat indices into the
    results, in_bounds says which scatter positions' windows fit in the
    operand, and update_axes orders the updates' axes as (scatter axes...,
    window axes...) to match.
    """
    rank = len(operand_shape)
    window_axes = list(dims.update_window_dims)
    scatter_axes = [d for d in range(len(updates_shape)) if d not in window_axes]
    batch_shape, starts = index_vectors(scatter_indices, dims.index_vector_dim)
    full_start = batching_positions(batch_shape, dims.input_batching_dims,
                                    dims.scatter_indices_batching_dims, dims.index_vector_dim,
                                    rank)
    for d_start, d_operand in enumerate(dims.scattered_dims_to_operand_dims):
        full_start[:, d_operand] += starts[:, d_start]

    dropped = set(dims.inserted_window_dims) | set(dims.input_batching_dims)
    operand_window_dims = [d for d in range(rank) if d not in dropped]
    window_sizes = np.ones(rank, dtype=np.int64)
    for axis, d in zip(window_axes, operand_window_dims):
        window_sizes[d] = updates_shape[axis]
    limits = np.asarray(operand_shape, dtype=np.int64) - window_sizes
    in_bounds = np.all((full_start >= 0) & (full_start <= limits), axis=1)

    window_shape = [updates_shape[a] for a in window_axes]
    window_size = int(np.prod(window_shape, dtype=np.int64))
    offsets = np.indices(window_shape, dtype=np.int64).reshape(len(window_shape), window_size)
    full_window = np.zeros((offsets.shape[1], rank), dtype=np.int64)
    full_window[:, operand_window_dims] = offsets.T
    strides = row_major_strides(operand_shape)
    flat_targets = (full_start @ strides)[:, None] + (full_window @ strides)[None, :]
    return flat_targets, in_bounds, scatter_axes + window_axes


def _apply_recognised(body, flat_result, targets, flat_updates) -> None:
    """Apply updates in order with a recognised body: REPLACE (the last
    update to a target wins) or a ufunc (`ufunc.at`: unbuffered, in order,
    so duplicate targets accumulate)."""
    if body is REPLACE:
        last = _last_occurrences(targets)
        flat_result[targets[last]] = flat_updates[last]
    else:
        body.at(flat_result, targets, flat_updates)


def specialize_scatter(op):
    """Plan-time kernel for a static point scatter: one input, a recognised
    body (`recognise_body`), every update window a single element. Each
    update goes to one flat target; a target outside the operand is
    skipped, as `scatter` skips a window that does not fit. Updates are
    taken in row-major order, which is the generic kernel's (scatter axes,
    then window axes: moving size-1 window axes does not reorder
    elements)."""
    if len(op.operand_types) != 3 or not op.has_static_types:
        return None
    body = op.cache.get("body")
    operand_type, indices_type, updates_type = op.operand_types
    dims = op.attrs["scatter_dimension_numbers"]
    if (body is None or indices_type.dtype.kind not in "iu"
            or any(updates_type.shape[axis] != 1 for axis in dims.update_window_dims)):
        return None
    points = PointIndexing(operand_type.shape, indices_type.shape, dims.index_vector_dim,
                           dims.scattered_dims_to_operand_dims, dims.input_batching_dims,
                           dims.scatter_indices_batching_dims)

    def scatter_points(op, operand, scatter_indices, updates, regions=None):
        targets, in_bounds = points.checked(scatter_indices)
        result = np.array(operand, order="C")  # a fresh row-major copy: flat is a view of it
        _apply_recognised(body, result.reshape(-1), targets[in_bounds],
                          updates.reshape(-1)[in_bounds])
        return result
    return scatter_points


@register("stablehlo.scatter", validate=validate_scatter, specialize=specialize_scatter)
def scatter(op, *args, regions):
    """Spec "scatter" (docs/spec.md#scatter): several inputs/updates,
    batching dims, `index_vector_dim`; `indices_are_sorted` and
    `unique_indices` are hints and are ignored. See the module docstring for
    the update order and out-of-bounds windows."""
    count = (len(args) - 1) // 2
    inputs, scatter_indices, updates = args[:count], args[count], args[count + 1:]
    dims = op.attrs["scatter_dimension_numbers"]
    flat_targets, in_bounds, update_axes = scatter_positions(
        inputs[0].shape, scatter_indices, updates[0].shape, dims)
    targets = flat_targets[in_bounds].reshape(-1)
    results = [np.array(x, copy=True) for x in inputs]
    flat_results = [r.reshape(-1) for r in results]
    flat_updates = [np.transpose(u, update_axes).reshape(flat_targets.shape)[in_bounds].reshape(-1)
                    for u in updates]
    body = op.cache.get("body")
    if body is not None:
        _apply_recognised(body, flat_results[0], targets, flat_updates[0])
    elif (applier := scatter_applier(op)) is not None:
        # The same per-element loop, compiled by numba (interpreter/native).
        applier(np.ascontiguousarray(targets), *flat_results,
                *(np.ascontiguousarray(u) for u in flat_updates))
    else:
        _apply_region(regions[0], flat_results, targets, flat_updates)
    outputs = tuple(r.reshape(x.shape) for r, x in zip(flat_results, inputs))
    return outputs[0] if count == 1 else outputs


def _last_occurrences(targets: np.ndarray) -> np.ndarray:
    """Positions in `targets` of the last update to each distinct target."""
    _, first_from_end = np.unique(targets[::-1], return_index=True)
    return len(targets) - 1 - first_from_end


def _apply_region(region, flat_results, targets, flat_updates) -> None:
    """Call the update computation once per update element, in order."""
    count = len(flat_results)
    arg_dtypes = [t.dtype for t in region.arg_types]
    for position, target in enumerate(targets.tolist()):
        current = [np.asarray(r[target], dtype=dt) for r, dt in zip(flat_results, arg_dtypes)]
        update = [np.asarray(u[position], dtype=dt)
                  for u, dt in zip(flat_updates, arg_dtypes[count:])]
        new_values = region(*current, *update)
        for r, value in zip(flat_results, new_values):
            r[target] = np.asarray(value).astype(r.dtype)
