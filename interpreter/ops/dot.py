"""Dot products: `dot_general`, and the deprecated `dot`, `einsum` and
`unary_einsum`.

Spec "dot_general" (docs/spec.md#dot_general); `dot`, `einsum` and
`unary_einsum` are described in the StableHLO deprecation list and are
rewritten here in terms of the same arithmetic.

Arithmetic follows XLA's CPU backend: the result element type is the
accumulation type (precision_config is ignored); integers are multiplied
and summed modulo 2**64 and wrap to the result type; narrow floats (f16,
bf16, f8...) are computed in f32 and rounded once; i1 is `or` of `and`s.
"""
from __future__ import annotations

import math

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.native import blas
from pjrt_ref.interpreter.native.blas import matrix_operands
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_bool, is_complex, is_float, is_integer


def work_dtype(*dtypes) -> np.dtype:
    """The numpy dtype the products and sums are computed in."""
    if all(is_integer(d) or is_bool(d) for d in dtypes):
        return np.dtype(np.uint64)  # modular arithmetic: wraps like the result
    widened = [np.dtype(np.float32) if is_float(d) and d.itemsize < 4 else d for d in dtypes
               if is_float(d) or is_complex(d)]
    return np.result_type(*widened)


def to_work(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return x.astype(dtype, copy=False)


def from_work(x: np.ndarray, result_dtype: np.dtype) -> np.ndarray:
    """Round/wrap the computed values to the result element type."""
    if is_bool(result_dtype):
        return np.asarray(x != 0)
    if is_complex(x.dtype) and not is_complex(result_dtype):
        x = x.real
    return np.asarray(x).astype(result_dtype, copy=False)  # x is a fresh array: no copy


# Up to this many multiply-adds, complex products are summed in order.
_ORDERED_LIMIT = 1 << 21


def complex_matmul(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Batched complex matmul rounded as XLA CPU (Eigen) does: the four real
    products re*re, im*im, re*im, im*re are each summed in order over the
    contracting axis without fused multiply-adds, then combined."""
    if lhs.shape[1] * lhs.shape[2] * rhs.shape[2] * max(lhs.shape[0], 1) > _ORDERED_LIMIT:
        return np.matmul(lhs, rhs)
    real_dtype = lhs.real.dtype
    shape = (lhs.shape[0], lhs.shape[1], rhs.shape[2])
    sums = {key: np.zeros(shape, real_dtype) for key in ("rr", "ii", "ri", "ir")}
    for k in range(lhs.shape[2]):
        a, b = lhs[:, :, k:k + 1], rhs[:, k:k + 1, :]
        sums["rr"] += a.real * b.real
        sums["ii"] += a.imag * b.imag
        sums["ri"] += a.real * b.imag
        sums["ir"] += a.imag * b.real
    result = np.empty(shape, lhs.dtype)
    result.real = sums["rr"] - sums["ii"]
    result.imag = sums["ri"] + sums["ir"]
    return result


# The types numpy multiplies with BLAS (`matrix_product`).
BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _validate_dot(op) -> None:
    for t in (*op.operand_types, *op.result_types):
        if t.quant is not None:
            raise op.error("quantized dot products are not supported", cls=Unimplemented)


def dot_general_arrays(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract,
                       result_dtype) -> np.ndarray:
    """The spec's dot_general on numpy arrays: result dims are batch dims,
    then lhs free dims, then rhs free dims."""
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_batch and d not in lhs_contract]
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_batch and d not in rhs_contract]
    if not lhs_batch and lhs.dtype == rhs.dtype == result_dtype and lhs.dtype in BLAS_FLOATS:
        return matrix_product(lhs, rhs, lhs_free, rhs_free, lhs_contract, rhs_contract)
    work = work_dtype(lhs.dtype, rhs.dtype, result_dtype)
    return batched_product(lhs, rhs, lhs_batch, rhs_batch, lhs_free, rhs_free, lhs_contract,
                           rhs_contract, work, result_dtype)


def _size(shape) -> int:
    """Elements in `shape` (Python ints: math.prod is much quicker than np.prod
    on a short list, which matters for small products)."""
    return math.prod(shape)


def matrix_product(lhs, rhs, lhs_free, rhs_free, lhs_contract, rhs_contract) -> np.ndarray:
    """f32/f64 dot_general without batch dimensions: one matrix product in
    the operands' type, computed by `blas.matmul` (threads for big ones).
    Transposed operands stay views: BLAS reads their strides as they are,
    and the product is already in the result type (no copies)."""
    a, b, shape = matrix_operands(lhs, rhs, lhs_free, rhs_free, lhs_contract, rhs_contract)
    with np.errstate(all="ignore"):
        product = blas.matmul(a, b)
    return product.reshape(shape)


def batched_product(lhs, rhs, lhs_batch, rhs_batch, lhs_free, rhs_free, lhs_contract,
                    rhs_contract, work, result_dtype) -> np.ndarray:
    """Any dot_general: operands converted to the work type, arranged as
    (batch, free, contract) x (batch, contract, free), one batched matmul,
    rounded/wrapped back to the result type."""
    batch_shape = [lhs.shape[d] for d in lhs_batch]
    lhs_free_shape = [lhs.shape[d] for d in lhs_free]
    rhs_free_shape = [rhs.shape[d] for d in rhs_free]
    contract = _size([lhs.shape[d] for d in lhs_contract])
    lhs3 = np.transpose(to_work(lhs, work), list(lhs_batch) + list(lhs_free) + list(lhs_contract))
    lhs3 = lhs3.reshape(_size(batch_shape), _size(lhs_free_shape), contract)
    rhs3 = np.transpose(to_work(rhs, work), list(rhs_batch) + list(rhs_contract) + list(rhs_free))
    rhs3 = rhs3.reshape(_size(batch_shape), contract, _size(rhs_free_shape))
    with np.errstate(all="ignore"):
        product = complex_matmul(lhs3, rhs3) if is_complex(work) else np.matmul(lhs3, rhs3)
    product = product.reshape(batch_shape + lhs_free_shape + rhs_free_shape)
    return from_work(product, result_dtype)


@register("stablehlo.dot_general", validate=_validate_dot)
def dot_general(op, lhs, rhs):
    """Spec "dot_general": sum of products over the contracting dimensions,
    for each pair of batch indices. Empty contracting dimensions give zeros."""
    numbers = op.attrs["dot_dimension_numbers"]
    return dot_general_arrays(lhs, rhs, numbers.lhs_batching_dimensions,
                              numbers.rhs_batching_dimensions,
                              numbers.lhs_contracting_dimensions,
                              numbers.rhs_contracting_dimensions, op.result_type.dtype)


@register("stablehlo.dot", validate=_validate_dot)
def dot(op, lhs, rhs):
    """Deprecated "dot": the last dimension of `lhs` with the first of `rhs`
    (vector.vector, matrix.vector, vector.matrix, matrix.matrix)."""
    return dot_general_arrays(lhs, rhs, (), (), (lhs.ndim - 1,), (0,), op.result_type.dtype)


def _einsum(config: str, operands, result_dtype) -> np.ndarray:
    work = work_dtype(*(x.dtype for x in operands), result_dtype)
    with np.errstate(all="ignore"):
        result = np.einsum(config, *(to_work(x, work) for x in operands))
    return from_work(np.asarray(result), result_dtype)


@register("stablehlo.einsum", validate=_validate_dot)
def einsum(op, lhs, rhs):
    """Deprecated "einsum": `einsum_config` such as "ab,bc->ac" (numpy's notation)."""
    return _einsum(op.attrs["einsum_config"], (lhs, rhs), op.result_type.dtype)


@register("stablehlo.unary_einsum", validate=_validate_dot)
def unary_einsum(op, operand):
    """Deprecated "unary_einsum": `einsum_config` such as "ab->a"."""
    return _einsum(op.attrs["einsum_config"], (operand,), op.result_type.dtype)
