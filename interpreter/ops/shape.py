"""Shape ops: broadcasts, reshape, transpose, concatenate, reverse, iota,
dimension sizes and tuples.

Spec sections: "broadcast_in_dim", "reshape", "transpose", "concatenate",
"reverse", "iota", "get_dimension_size", "tuple", "get_tuple_element"; and
the deprecated `broadcast` and `set_dimension_size` (kept by StableHLO for
compatibility with MHLO). Quantized tensors move as their storage values:
none of these ops looks at element values.

The dynamic variants (`dynamic_broadcast_in_dim`, `dynamic_reshape`,
`dynamic_iota`, ...) live in `dynamic.py`; they share the helpers here.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_complex
from pjrt_ref.interpreter.ops.elementwise_support import PLAIN_INTEGERS


def broadcast_layout(operand_shape, broadcast_dimensions, rank: int) -> tuple[tuple, tuple]:
    """(order, expanded shape): `np.transpose(operand, order).reshape(expanded
    shape)` puts operand dim `d` at result dim `broadcast_dimensions[d]`, with
    size-1 dims everywhere else, ready to be broadcast to the result."""
    order = tuple(sorted(range(len(operand_shape)), key=lambda d: broadcast_dimensions[d]))
    expanded_shape = [1] * rank
    for d in order:
        expanded_shape[broadcast_dimensions[d]] = operand_shape[d]
    return order, tuple(expanded_shape)


def broadcast_to_shape(operand: np.ndarray, shape, broadcast_dimensions) -> np.ndarray:
    """Spec "broadcast_in_dim" for a given result shape.

    Operand dim `d` becomes result dim `broadcast_dimensions[d]` (the
    dimensions need not be increasing, so the operand is transposed first);
    operand dims of size 1 are repeated along the result dim. The result is
    a fresh row-major array (copying a broadcast view in numpy's default
    "K" order would lay a (1, n) -> (m, n) result out column-major, and
    every later elementwise op on it would walk memory with a stride).
    """
    shape = tuple(int(d) for d in shape)
    order, expanded_shape = broadcast_layout(operand.shape, broadcast_dimensions, len(shape))
    expanded = np.transpose(operand, order).reshape(expanded_shape)
    return np.array(np.broadcast_to(expanded, shape), order="C")


def specialize_broadcast_in_dim(op):
    """Plan-time kernel for a static broadcast_in_dim: the transpose, the
    expanded shape and the result shape are fixed, so a call is one reshape
    and one broadcasting copy into a fresh row-major array (the values of
    `broadcast_to_shape`).

    A broadcast that only inserts size-1 dims in order (512 -> 1x512) copies
    nothing: for a row-major operand the reshaped view is laid out exactly
    as the copy would be, so every later kernel sees the same layout (some
    results depend on it: a reduction's order of summation), and no kernel
    writes into its operands (argument buffers are read-only)."""
    if not op.has_static_types:
        return None
    shape, dtype = op.result_type.shape, op.result_type.dtype
    operand_shape = op.operand_types[0].shape
    order, expanded_shape = broadcast_layout(operand_shape, op.attrs["broadcast_dimensions"],
                                             len(shape))
    empty, copyto = np.empty, np.copyto

    def broadcast_in_place(op, operand):
        result = empty(shape, dtype)
        copyto(result, operand.transpose(order).reshape(expanded_shape))
        return result

    if order != tuple(range(len(order))) or expanded_shape != tuple(shape):
        return broadcast_in_place

    def broadcast_as_view(op, operand):
        if operand.flags.c_contiguous:
            return operand.reshape(shape)
        return broadcast_in_place(op, operand)
    return broadcast_as_view


@register("stablehlo.broadcast_in_dim", specialize=specialize_broadcast_in_dim)
def broadcast_in_dim(op, operand):
    """Spec "broadcast_in_dim" (docs/spec.md#broadcast_in_dim): unsorted
    `broadcast_dimensions` and size-1 expansion are honoured; a `?` result
    dim takes the size of the operand dim mapped onto it."""
    dims = op.attrs["broadcast_dimensions"]
    shape = list(op.result_type.shape)
    for d, size in enumerate(operand.shape):
        if shape[dims[d]] is None:
            shape[dims[d]] = size
    if None in shape:
        raise op.error(f"result type {op.result_type} has a dynamic dimension no operand "
                       "dimension maps to")
    return broadcast_to_shape(operand, shape, dims)


@register("stablehlo.broadcast")
def broadcast(op, operand):
    """Deprecated `broadcast`: prepend `broadcast_sizes` to the operand shape
    (the same as broadcast_in_dim onto the trailing dims)."""
    sizes = tuple(op.attrs["broadcast_sizes"])
    shape = sizes + operand.shape
    dims = tuple(range(len(sizes), len(shape)))
    return broadcast_to_shape(operand, shape, dims)


def reshape_to(operand: np.ndarray, shape) -> np.ndarray:
    """Row-major reshape (spec "reshape"); sizes must agree. One `None`
    (a `?` dim of a result type) takes whatever size is left."""
    if list(shape).count(None) == 1:
        shape = [-1 if d is None else d for d in shape]
    shape = tuple(int(d) for d in shape)
    if -1 in shape:
        return np.reshape(operand, shape)
    if int(np.prod(shape)) != operand.size:
        raise ValueError(f"cannot reshape {operand.shape} into {shape}: sizes differ")
    return np.reshape(operand, shape)


def specialize_reshape(op):
    """Plan-time kernel for a static reshape: numpy's reshape to the fixed
    result shape (a view where the layout allows, as `reshape_to`)."""
    if not op.has_static_types:
        return None
    shape = op.result_type.shape

    def reshape_static(op, operand):
        return operand.reshape(shape)
    return reshape_static


@register("stablehlo.reshape", specialize=specialize_reshape)
def reshape(op, operand):
    """Spec "reshape" (docs/spec.md#reshape): row-major order is kept."""
    return reshape_to(operand, op.result_type.shape)


def specialize_transpose(op):
    """Plan-time kernel for transpose: the permutation as a tuple, once."""
    permutation = tuple(op.attrs["permutation"])

    def transpose_fixed(op, operand):
        return operand.transpose(permutation)
    return transpose_fixed


@register("stablehlo.transpose", specialize=specialize_transpose)
def transpose(op, operand):
    """Spec "transpose" (docs/spec.md#transpose): result dim `d` is operand
    dim `permutation[d]`."""
    return np.transpose(operand, op.attrs["permutation"])


@register("stablehlo.concatenate")
def concatenate(op, *inputs):
    """Spec "concatenate" (docs/spec.md#concatenate) along `dimension`;
    empty inputs contribute nothing."""
    dtype = op.result_type.dtype
    return np.concatenate([np.asarray(x, dtype=dtype) for x in inputs], axis=op.attrs["dimension"])


@register("stablehlo.reverse")
def reverse(op, operand):
    """Spec "reverse" (docs/spec.md#reverse): flip each of `dimensions`
    (an empty list leaves the operand unchanged)."""
    dims = tuple(op.attrs["dimensions"])
    return np.flip(operand, axis=dims) if dims else operand


def iota_array(shape, dimension: int, dtype: np.dtype) -> np.ndarray:
    """Spec "iota": element = its index along `dimension` (for complex
    types the real part; the imaginary part is 0)."""
    shape = tuple(int(d) for d in shape)
    if not 0 <= dimension < len(shape):
        raise ValueError(f"iota_dimension {dimension} is out of range for rank {len(shape)}")
    line = _index_line(shape[dimension], dtype)
    if len(shape) == 1:
        return line
    view_shape = [1] * len(shape)
    view_shape[dimension] = shape[dimension]
    result = np.empty(shape, dtype)   # row-major: np.array of the broadcast view kept its
    result[...] = line.reshape(view_shape)   # strides, column-major for the last dimension
    return result


def _index_line(count: int, dtype: np.dtype) -> np.ndarray:
    """0, 1, ..., count - 1 as `dtype`: counted in the type itself where every
    index fits a plain integer type (one pass; JAX's PRNG counts 10^8 uint64
    indices), else counted in int64 or float64 and converted."""
    if dtype in PLAIN_INTEGERS and count - 1 <= np.iinfo(dtype).max:
        return np.arange(count, dtype=dtype)
    line = np.arange(count, dtype=np.float64 if _needs_float_count(dtype) else np.int64)
    return line.astype(dtype)



def _needs_float_count(dtype: np.dtype) -> bool:
    # Narrow float types convert from float64 directly; integer types and
    # complex from int64 (exact).
    return not (dtype.kind in "iub" or is_complex(dtype)) and dtype.name not in (
        "int2", "int4", "uint2", "uint4")


def validate_iota(op) -> None:
    result = op.result_type
    if result.quant is not None:
        raise op.error("iota of a quantized tensor is not supported", cls=Unimplemented)


@register("stablehlo.iota", validate=validate_iota)
def iota(op):
    """Spec "iota" (docs/spec.md#iota)."""
    result = op.result_type
    return iota_array(result.shape, op.attrs["iota_dimension"], result.dtype)


@register("stablehlo.get_dimension_size")
def get_dimension_size(op, operand):
    """Spec "get_dimension_size" (docs/spec.md#get_dimension_size): the
    run-time size of `dimension`, as a 0-d i32 tensor."""
    return np.array(operand.shape[op.attrs["dimension"]], dtype=op.result_type.dtype)


@register("stablehlo.set_dimension_size")
def set_dimension_size(op, operand, size):
    """Deprecated `set_dimension_size` (MHLO): the run-time size of
    `dimension` becomes `size`; we keep the first `size` elements along it
    (`size` is clamped to [0, static size], there being no data beyond)."""
    dim = op.attrs["dimension"]
    keep = int(np.clip(int(size), 0, operand.shape[dim]))
    index = [slice(None)] * operand.ndim
    index[dim] = slice(0, keep)
    return operand[tuple(index)]


@register("stablehlo.tuple")
def make_tuple(op, *values):
    """Spec "tuple" (docs/spec.md#tuple): a Python tuple of the values."""
    return tuple(values)


@register("stablehlo.get_tuple_element")
def get_tuple_element(op, value):
    """Spec "get_tuple_element" (docs/spec.md#get_tuple_element)."""
    return value[op.attrs["index"]]
