"""Linear algebra: `triangular_solve` and `cholesky`.

Spec "triangular_solve" (docs/spec.md#triangular_solve) and "cholesky"
(docs/spec.md#cholesky). Both work on batches of matrices (the last two
dimensions) with loops over rows that are vectorised over the batch, so
they need O(n) numpy operations for n x n matrices. Narrow floats are
computed in f32 and rounded once.
"""
from __future__ import annotations

import numpy as np

from ...errors import Unimplemented
from ..registry import register
from ..types import is_complex, is_float
from .linalg_trsm import masked_triangle, solve_by_inverting_blocks, use_direct_solve


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    if dtype in (np.float32, np.float64, np.complex64, np.complex128):
        return np.dtype(dtype)
    return np.dtype(np.complex64 if is_complex(dtype) else np.float32)


def _validate_float(op) -> None:
    for t in op.operand_types:
        if t.quant is not None or not (is_float(t.dtype) or is_complex(t.dtype)):
            raise op.error(f"{op.name} needs floating-point or complex operands",
                           cls=Unimplemented)


def _matrix_transpose(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


@register("stablehlo.triangular_solve", validate=_validate_float)
def triangular_solve(op, a, b):
    """Spec "triangular_solve": solve op(a) x = b (left_side) or x op(a) = b.

    Only the triangle of `a` named by `lower` is read; with `unit_diagonal`
    the diagonal is taken to be 1. op(a) is a, its transpose or its
    conjugate transpose (`transpose_a`). a and b share their batch
    dimensions. The algorithm is XLA's (see `linalg_trsm`).
    """
    attrs = op.attrs
    work = _compute_dtype(b.dtype)
    lower = bool(attrs.get("lower", False))
    left_side = bool(attrs.get("left_side", False))
    transpose = attrs.get("transpose_a", "NO_TRANSPOSE")
    a = masked_triangle(a.astype(work), lower, bool(attrs.get("unit_diagonal", False)))
    rhs = b.astype(work)
    with np.errstate(all="ignore"):
        if b.size == 0:
            x = rhs
        elif use_direct_solve(a):
            x = _direct_solve(a, rhs, left_side, lower, transpose)
        else:
            x = solve_by_inverting_blocks(a, rhs, left_side, lower, transpose)
    return np.asarray(x.astype(op.result_type.dtype), order="C")


def _direct_solve(a, b, left_side, lower, transpose):
    """Substitution on the equivalent left-side system."""
    if transpose != "NO_TRANSPOSE":
        a = _matrix_transpose(a)
        lower = not lower
        if transpose == "ADJOINT":
            a = np.conj(a)
    if not left_side:
        # x A = b  <=>  A^T x^T = b^T
        a, b, lower = _matrix_transpose(a), _matrix_transpose(b), not lower
    x = _substitute(a, b, lower)
    return x if left_side else _matrix_transpose(x)


def _substitute(a: np.ndarray, b: np.ndarray, lower: bool) -> np.ndarray:
    """Solve the triangular systems a x = b by forward/back substitution."""
    n = a.shape[-1]
    x = np.zeros(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], b.dtype)
    rows = range(n) if lower else range(n - 1, -1, -1)
    with np.errstate(all="ignore"):
        for i in rows:
            known = slice(0, i) if lower else slice(i + 1, n)
            coefficients = a[..., i:i + 1, known]            # (..., 1, k)
            partial = np.matmul(coefficients, x[..., known, :])  # (..., 1, m)
            x[..., i:i + 1, :] = (b[..., i:i + 1, :] - partial) / a[..., i:i + 1, i:i + 1]
    return x


@register("stablehlo.cholesky", validate=_validate_float)
def cholesky(op, a):
    """Spec "cholesky": L with L L^H = a (lower) or U with U^H U = a.

    Reads only the named triangle of `a`; the other triangle of the result
    is zero. Like XLA, a matrix that is not positive definite gives a
    matrix of NaNs instead of an error.
    """
    lower = bool(op.attrs.get("lower", False))
    work = _compute_dtype(a.dtype)
    a = a.astype(work)
    if not lower:
        a = np.conj(_matrix_transpose(a))  # the upper triangle, as a lower one
    factor = _cholesky_lower(a)
    failed = np.isnan(factor).any(axis=(-1, -2))
    factor[failed] = np.nan
    if not lower:
        factor = np.conj(_matrix_transpose(factor))
    return np.asarray(factor.astype(op.result_type.dtype), order="C")


def _cholesky_lower(a: np.ndarray) -> np.ndarray:
    """Column-by-column Cholesky of the lower triangle of each matrix."""
    n = a.shape[-1]
    factor = np.zeros_like(a)
    with np.errstate(all="ignore"):
        for j in range(n):
            row = factor[..., j, :j]
            diagonal = a[..., j, j] - np.sum(row * np.conj(row), axis=-1)
            pivot = np.sqrt(diagonal.real if is_complex(a.dtype) else diagonal)
            factor[..., j, j] = pivot
            below = a[..., j + 1:, j] - np.matmul(factor[..., j + 1:, :j],
                                                   np.conj(row)[..., :, None])[..., 0]
            factor[..., j + 1:, j] = below / pivot[..., None]
    return factor
