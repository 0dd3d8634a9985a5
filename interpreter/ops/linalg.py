"""Linear algebra: `triangular_solve` and `cholesky`.

Spec "triangular_solve" (docs/spec.md#triangular_solve) and "cholesky"
(docs/spec.md#cholesky). Both work on batches of matrices (the last two
dimensions) with loops over rows that are vectorised over the batch, so
they need O(n) numpy operations for n x n matrices. Narrow floats are
computed in f32 and rounded once.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_complex, is_float
from pjrt_ref.interpreter.ops.linalg_trsm import BLOCK, masked_triangle, solve_by_inverting_blocks, use_direct_solve


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
    is zero. As in XLA (its CholeskyExpander, reproduced here: 128-wide
    panels, each factored column by column, the rest of the panel by a
    triangular solve), `lower = false` factors the transpose, and a matrix
    with a non-positive pivot gives a matrix of NaNs instead of an error.
    """
    lower = bool(op.attrs.get("lower", False))
    work = _compute_dtype(a.dtype)
    a = a.astype(work)
    if not lower:
        a = _matrix_transpose(a)
    with np.errstate(all="ignore"):
        factor, failed = _cholesky_blocked(a)
    factor[failed] = np.nan
    if not lower:
        factor = _matrix_transpose(factor)
    return np.asarray(factor.astype(op.result_type.dtype), order="C")


def _cholesky_blocked(a: np.ndarray):
    """(L, failed per matrix): left-looking blocked Cholesky of the lower triangles."""
    n = a.shape[-1]
    factor = np.zeros_like(a)
    failed = np.zeros(a.shape[:-2], bool)
    for start in range(0, n, BLOCK):
        size = min(BLOCK, n - start)
        stop = start + size
        panel = a[..., start:, start:stop]
        if start > 0:
            done = factor[..., start:, :start]
            panel = panel - np.matmul(done, np.conj(_matrix_transpose(factor[..., start:stop, :start])))
        block, block_failed = _cholesky_unblocked(panel[..., :size, :])
        failed |= block_failed
        factor[..., start:stop, start:stop] = block
        if stop < n:
            rest = panel[..., size:, :]
            solver = _direct_solve if use_direct_solve(block) else solve_by_inverting_blocks
            factor[..., stop:, start:stop] = solver(block, rest, False, True, "ADJOINT")
    return factor, failed


def _cholesky_unblocked(a: np.ndarray):
    """Column by column: t = a - L L^H; L[j:, j] = t[j:, j] / sqrt(t[j, j])."""
    n = a.shape[-1]
    factor = np.zeros_like(a)
    failed = np.zeros(a.shape[:-2], bool)
    for j in range(n):
        row = factor[..., j, :j]
        column = a[..., j:, j] - np.matmul(factor[..., j:, :j], np.conj(row)[..., :, None])[..., 0]
        pivot_square = column[..., 0].real if is_complex(a.dtype) else column[..., 0]
        pivot = np.sqrt(pivot_square)
        failed |= np.isnan(pivot)
        factor[..., j:, j] = column / pivot[..., None]
    return factor, failed
