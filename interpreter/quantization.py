"""Quantized tensors: `quantize`, `dequantize` and `dequantize_op_quantize`.

Spec section "Quantization computations" (docs/spec.md). A quantized value
is carried as its storage integers; its `TensorType.quant` (a
`types.QuantParams`) says how to read them:

    real value = (storage - zero_point) * scale

per tensor (one scale and zero point) or per axis (one pair per index along
`quantization_dimension`).

Most ops accept quantized operands by the spec's `dequantize_op_quantize`:
dequantize the operands, run the float op, quantize the results.
`dequantize_op_quantize(kernel, op, has_regions)` wraps a float kernel that
way when its op has quantized types; the planner calls it for every op.
Ops that only move or copy elements, and ops with regions (whose region
ops are themselves quantized ops and convert on their own), work on the
storage values directly, and see the storage types.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pjrt_ref.interpreter.registry import Kernel
from pjrt_ref.interpreter.types import DTYPE_ELEMENT_NAMES, QuantParams, TensorType

# Ops whose result elements are copies of operand elements (or that only
# carry values around): on quantized tensors they act on the storage values.
STORAGE_OPS = frozenset(f"stablehlo.{name}" for name in (
    "constant", "reshape", "dynamic_reshape", "transpose", "broadcast", "broadcast_in_dim",
    "dynamic_broadcast_in_dim", "slice", "dynamic_slice", "real_dynamic_slice",
    "dynamic_update_slice", "concatenate", "gather", "dynamic_gather", "pad", "dynamic_pad",
    "reverse", "bitcast_convert", "get_dimension_size", "tuple", "get_tuple_element",
    "optimization_barrier", "uniform_quantize", "uniform_dequantize", "composite",
    "custom_call", "async_start", "async_done", "all_gather", "all_to_all",
    "collective_permute", "collective_broadcast", "infeed", "outfeed", "send", "recv",
)) | {"func.call"}

# Ops whose kernels read the quantization parameters themselves.
QUANTIZATION_AWARE_OPS = frozenset(f"stablehlo.{name}" for name in (
    "uniform_quantize", "uniform_dequantize", "collective_permute", "collective_broadcast"))


def scales_and_zero_points(quant: QuantParams, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Spec `compute_scales`/`compute_zero_points`, as arrays that broadcast
    against a tensor of rank `rank`: 0-d per tensor, or laid out along the
    `quantization_dimension` per axis. Scales have the expressed type."""
    scales = np.asarray(quant.scales, dtype=quant.expressed_dtype)
    zero_points = np.asarray(quant.zero_points, dtype=np.int64)
    if quant.quantization_dimension is None:
        return scales.reshape(()), zero_points.reshape(())
    shape = [1] * rank
    shape[quant.quantization_dimension] = -1
    return scales.reshape(shape), zero_points.reshape(shape)


def dequantize(storage: np.ndarray, quant: QuantParams) -> np.ndarray:
    """Spec `dequantize`: `(storage - zero_point) * scale` in the expressed type.

    The subtraction is exact (done in 64-bit integers), so a zero point at
    the far end of the storage range cannot wrap around.
    """
    storage = np.asarray(storage)
    scales, zero_points = scales_and_zero_points(quant, storage.ndim)
    shifted = storage.astype(np.int64) - zero_points
    return np.asarray(shifted.astype(quant.expressed_dtype) * scales,
                      dtype=quant.expressed_dtype)


def quantize(values: np.ndarray, quant: QuantParams) -> np.ndarray:
    """Spec `quantize`: `round_nearest_even(clamp(min, x / scale + zero_point, max))`.

    The arithmetic is done in the expressed type, as the spec writes it.
    NaN (which the spec leaves undefined) becomes storage 0, as in the
    reference interpreter.
    """
    expressed = quant.expressed_dtype
    values = np.asarray(values).astype(expressed)
    scales, zero_points = scales_and_zero_points(quant, values.ndim)
    lo, hi = quant.storage_bounds
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scaled = values / scales + zero_points.astype(expressed)
        clamped = np.clip(scaled, np.asarray(lo, dtype=expressed), np.asarray(hi, dtype=expressed))
        rounded = np.rint(clamped.astype(np.float64))
    rounded = np.where(np.isnan(rounded), 0.0, rounded)
    # The expressed type may round min/max outward (e.g. i32 bounds in f32).
    return np.clip(rounded, lo, hi).astype(quant.storage_dtype)


def zeros(ttype: TensorType) -> np.ndarray:
    """A tensor of zeros of `ttype`; for a quantized type, `quantize(0)`."""
    shape = tuple(ttype.shape)
    if ttype.quant is None:
        return np.zeros(shape, dtype=ttype.dtype)
    return quantize(np.zeros(shape, dtype=ttype.quant.expressed_dtype), ttype.quant)


def expressed_type(ttype):
    """The float tensor type a quantized tensor type dequantizes to."""
    if not isinstance(ttype, TensorType) or ttype.quant is None:
        return ttype
    dtype = np.dtype(ttype.quant.expressed_dtype)
    return TensorType(ttype.shape, dtype, DTYPE_ELEMENT_NAMES[dtype], None, ttype.bounds)


def storage_type(ttype):
    """The integer tensor type a quantized tensor type is stored as."""
    if not isinstance(ttype, TensorType) or ttype.quant is None:
        return ttype
    return TensorType(ttype.shape, ttype.dtype, DTYPE_ELEMENT_NAMES[ttype.dtype], None,
                      ttype.bounds)


def is_quantized(ttype) -> bool:
    return isinstance(ttype, TensorType) and ttype.quant is not None


def dequantize_op_quantize(kernel: Kernel, op, has_regions: bool) -> Kernel:
    """`kernel` made to accept the quantized types of `op` (spec
    `dequantize_op_quantize`, `dequantize_compare`, `dequantize_select_quantize`
    and `hybrid_dequantize_then_op`).

    * Ops without quantized types, and `QUANTIZATION_AWARE_OPS`: `kernel`.
    * `STORAGE_OPS` and ops with regions: `kernel` on the storage values,
      shown a view of the op whose quantized types are their storage types.
    * Any other op: the returned kernel dequantizes quantized operands, runs
      `kernel` on a view of the op whose quantized types are their expressed
      types, and quantizes the quantized results. Non-quantized operands (a
      `select` predicate, gather indices) and results (`compare`) pass
      through.
    """
    if op.name in QUANTIZATION_AWARE_OPS or not any(
            map(is_quantized, (*op.operand_types, *op.result_types))):
        return kernel
    if has_regions or op.name in STORAGE_OPS:
        return _on_storage(kernel, op)
    return _in_float(kernel, op)


def _retyped(kernel: Kernel, view, run) -> Kernel:
    """A kernel whose validate sees `view` and whose fn is `run`."""

    def validate(_):
        if kernel.validate is not None:
            kernel.validate(view)

    return Kernel(kernel.name, run, validate)


def _on_storage(kernel: Kernel, op) -> Kernel:
    storage_op = dataclasses.replace(
        op, operand_types=tuple(map(storage_type, op.operand_types)),
        result_types=tuple(map(storage_type, op.result_types)), cache={})
    storage_fn = kernel.fn

    def run_on_storage(_, *operands, **regions):
        return storage_fn(storage_op, *operands, **regions)

    return _retyped(kernel, storage_op, run_on_storage)


def _in_float(kernel: Kernel, op) -> Kernel:
    float_op = dataclasses.replace(
        op, operand_types=tuple(map(expressed_type, op.operand_types)),
        result_types=tuple(map(expressed_type, op.result_types)),
        attrs=_float_attrs(op.attrs), cache={})
    operand_quants = [t.quant if is_quantized(t) else None for t in op.operand_types]
    result_quants = [t.quant if is_quantized(t) else None for t in op.result_types]
    float_fn = kernel.fn

    def run_in_float(_, *operands):
        floats = [x if q is None else dequantize(x, q) for x, q in zip(operands, operand_quants)]
        result = float_fn(float_op, *floats)
        if len(result_quants) == 1:
            return result if result_quants[0] is None else quantize(result, result_quants[0])
        return tuple(r if q is None else quantize(r, q) for r, q in zip(result, result_quants))

    return _retyped(kernel, float_op, run_in_float)


def _float_attrs(attrs: dict) -> dict:
    """Attributes for the float view: a quantized `compare` compares floats."""
    if "compare_type" in attrs:
        return {**attrs, "compare_type": "FLOAT"}
    return attrs
