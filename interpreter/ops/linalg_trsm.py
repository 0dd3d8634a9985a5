"""Triangular solves the way XLA's CPU backend computes them (its
TriangularSolveExpander), so results round alike:

* many small systems (more than 8 in the batch, fewer than 32 unknowns) are
  solved directly, by substitution;
* otherwise the diagonal blocks (128 x 128) of the triangle are inverted
  with a row recurrence on the unit-scaled block, and the solution is built
  block by block with matrix products (a single product for n <= 128).

Both are O(n) numpy operations vectorised over the batch.
"""
from __future__ import annotations

import numpy as np

BLOCK = 128


def masked_triangle(a: np.ndarray, lower: bool, unit_diagonal: bool) -> np.ndarray:
    """The triangle of `a` that is read (with a unit diagonal if asked)."""
    a = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        n = a.shape[-1]
        a = a.copy()
        a[..., np.arange(n), np.arange(n)] = 1
    return a


def use_direct_solve(a: np.ndarray) -> bool:
    batch = int(np.prod(a.shape[:-2], dtype=np.int64))
    return batch > BLOCK // 16 and a.shape[-1] < BLOCK // 4


def invert_triangle(block: np.ndarray, lower: bool) -> np.ndarray:
    """Inverse of triangular blocks: scale to a unit diagonal (columns),
    invert row by row, undo the scaling (rows)."""
    size = block.shape[-1]
    diagonal = np.diagonal(block, axis1=-2, axis2=-1)
    scaled = block / diagonal[..., None, :]
    inverse = np.broadcast_to(-np.eye(size, dtype=block.dtype), block.shape).copy()
    first = 0 if lower else size - 1
    inverse[..., first, first] = 1
    for step in range(1, size):
        row = step if lower else size - 1 - step
        # [L21 L22 0] <- -[L21 L22 0] @ [L11^-1, -I, -I]: row's new values
        inverse[..., row, :] = -np.matmul(scaled[..., row:row + 1, :], inverse)[..., 0, :]
    return inverse / diagonal[..., :, None]


def _op(x: np.ndarray, transpose: str) -> np.ndarray:
    if transpose == "NO_TRANSPOSE":
        return x
    x = np.swapaxes(x, -1, -2)
    return np.conj(x) if transpose == "ADJOINT" else x


def solve_by_inverting_blocks(a, b, left_side: bool, lower: bool, transpose: str):
    """op(a) x = b (left_side) or x op(a) = b, `a` already masked."""
    n = a.shape[-1]
    starts = list(range(0, n, BLOCK))
    transposed = transpose != "NO_TRANSPOSE"
    backward = left_side ^ lower ^ transposed
    op_a = _op(a, transpose)
    solved: list[tuple[int, int]] = []   # (start, stop) of solved blocks, in x order
    x = np.zeros(b.shape, np.result_type(a, b))
    for start in (reversed(starts) if backward else starts):
        stop = min(start + BLOCK, n)
        inverse = _op(invert_triangle(a[..., start:stop, start:stop], lower), transpose)
        done = slice(min((s for s, _ in solved), default=0), max((e for _, e in solved), default=0))
        if left_side:
            remainder = b[..., start:stop, :]
            if solved:
                remainder = remainder - np.matmul(op_a[..., start:stop, done], x[..., done, :])
            x[..., start:stop, :] = np.matmul(inverse, remainder)
        else:
            remainder = b[..., :, start:stop]
            if solved:
                remainder = remainder - np.matmul(x[..., :, done], op_a[..., done, start:stop])
            x[..., :, start:stop] = np.matmul(remainder, inverse)
        solved.append((start, stop))
    return x
