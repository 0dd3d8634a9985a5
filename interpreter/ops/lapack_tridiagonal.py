"""jaxlib's tridiagonal solvers: LAPACK ?gtsv (`lapack_<p>gtsv_ffi`), and
`tridiagonal_solve_perturbed_ffi`, jaxlib's own Gaussian elimination that
perturbs tiny pivots instead of failing (jaxlib/tridiagonal_solve_perturbed.h;
JAX's `tridiagonal_solve(..., perturb_singular=True)`). LAPACK has no such
routine, so the second is the one target here computed by pjrt-ref itself.

Both take JAX's form of the three diagonals: vectors of m entries each, of
which dl[0] and du[m-1] lie outside the matrix and are never read.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.ops.lapack_targets import INT, MATRIX, VECTOR, Target, add_target, lapack_target

DIAGONALS_AND_RHS = (VECTOR, VECTOR, VECTOR, MATRIX)


def _check_diagonals(dl, d, du, b) -> None:
    if not dl == d == du == tuple(b[:-1]):
        raise ValueError(f"the diagonals {list(dl)}, {list(d)}, {list(du)} must all be "
                         f"{list(b[:-1])} for a right-hand side {list(b)}")


def _gtsv_results(dl, d, du, b, *, dtype):
    _check_diagonals(dl, d, du, b)
    return [(dl, dtype), (d, dtype), (du, dtype), (b, dtype), (tuple(b[:-2]), INT)]


@lapack_target({"sdcz": "gtsv"}, operands=DIAGONALS_AND_RHS, results=_gtsv_results,
               copies={0: 0, 1: 1, 2: 2, 3: 3})
def gtsv(lapack, dl, d, du, b):
    """X with A X = B, A tridiagonal, by Gaussian elimination with partial
    pivoting (LAPACK ?gtsv). Results: the diagonals overwritten by the
    factorization (dl by U's second superdiagonal), X, INFO (> 0: U[INFO-1,
    INFO-1] is exactly zero and X was not computed)."""
    if d.shape[0] == 1:      # scipy's wrapper refuses empty off-diagonals
        return _one_equation(dl, d, du, b)
    second, diagonal, first, x, info = lapack.gtsv(dl[1:], d, du[:-1], b)
    return (np.concatenate([dl[:1], second]), diagonal, np.concatenate([first, du[-1:]]),
            x, info)


def _one_equation(dl, d, du, b):
    """?gtsv for m = 1: x = b / d, or INFO 1 (and b kept) if d is zero."""
    if d[0] == 0:
        return dl, d, du, b, 1
    return dl, d, du, b / d[0], 0


# ------------------------------------------------------------------ perturbed
def _solve_results(dl, d, du, b, *, dtype):
    _check_diagonals(dl, d, du, b)
    return [(b, dtype)]


def solve_perturbed(lapack, dl, d, du, b):
    """X with A X = B, A tridiagonal, by Gaussian elimination with scaled
    partial pivoting; a pivot too small to divide by is nudged away from
    zero (or, if merely tiny, its row is scaled up) instead of failing.

    The algorithm of jaxlib/tridiagonal_solve_perturbed.h (after
    TensorFlow's): eliminate below the diagonal into U (at most two
    superdiagonals after row swaps), then back-substitute, perturbing pivots
    by multiples of eps * max|U|.
    """
    m = d.shape[0]
    x = np.array(b, copy=True)
    eps = np.finfo(d.dtype).eps
    if m == 1:
        pivot, row = perturb_pivot(eps * abs(d[0]), d[0], b[0])
        return (row / pivot,)
    u, max_abs_u = _eliminate(dl, d, du, b, x)
    perturb = eps * max_abs_u
    for k in range(m - 1, -1, -1):
        row = x[k]
        if k + 1 < m:
            row = row - u[k, 1] * x[k + 1]
        if k + 2 < m:
            row = row - u[k, 2] * x[k + 2]
        pivot, row = perturb_pivot(perturb, u[k, 0], row)
        x[k] = row * (1 / pivot)
    return (x,)


def _eliminate(dl, d, du, b, x):
    """Forward elimination: U's diagonal and two superdiagonals (columns of
    `u`), L^-1 P b in `x`, and the largest |U| entry."""
    m = d.shape[0]
    u = np.zeros((m, 3), d.dtype)
    u[0, 0], u[0, 1] = d[0], du[0]
    max_abs_u = max(abs(u[0, 0]), abs(u[0, 1]))
    scale = abs(u[0, 0]) + abs(u[0, 1])    # of the row now at k
    for k in range(m - 1):
        u[k + 1, 0] = d[k + 1]
        next_scale = abs(dl[k + 1]) + abs(d[k + 1]) + (abs(du[k + 1]) if k < m - 2 else 0)
        if dl[k + 1] == 0:
            scale = next_scale
            u[k + 1, 1] = du[k + 1]
            u[k, 2] = 0
            x[k + 1] = b[k + 1]
        elif abs(dl[k + 1]) / next_scale <= (0 if u[k, 0] == 0 else abs(u[k, 0]) / scale):
            scale = next_scale                  # no row swap
            factor = dl[k + 1] / u[k, 0]
            u[k + 1, 0] -= factor * u[k, 1]
            u[k + 1, 1] = du[k + 1]
            u[k, 2] = 0
            x[k + 1] = b[k + 1] - factor * x[k]
        else:                                   # swap rows k and k+1
            factor = u[k, 0] / dl[k + 1]
            u[k, 0], u[k + 1, 0], u[k, 1] = dl[k + 1], u[k, 1] - factor * d[k + 1], d[k + 1]
            if k < m - 2:
                u[k, 2] = du[k + 1]
                u[k + 1, 1] = -factor * du[k + 1]
            x[k + 1] = x[k] - factor * b[k + 1]
            x[k] = b[k + 1]
            scale = abs(u[k + 1, 0]) + abs(u[k + 1, 1])
        if k < m - 2:
            max_abs_u = max(max_abs_u, *np.abs(u[k]))   # NaNs skipped, as std::max does
    return u, max(max_abs_u, abs(u[m - 1, 0]))


def perturb_pivot(perturb, pivot, row):
    """(pivot, row) made safe to divide: a pivot of magnitude < 1 that would
    overflow the row on division gets `perturb` (same sign as the pivot,
    doubling each time) added until it would not; one below the safe minimum
    but not too small for the row scales both up instead. (LAPACK's xLAMCH
    safe minimum; jaxlib's MaybePerturbPivot.)"""
    real = np.finfo(np.asarray(pivot).dtype)
    one = real.dtype.type(1)
    small = one / real.max
    safe_min = real.tiny if small < real.tiny else small * (one + real.eps)
    big = one / safe_min
    size = abs(pivot)
    if size >= one:
        return pivot, row
    perturb = np.copysign(max(abs(perturb), safe_min), np.real(pivot)).astype(real.dtype)
    largest = np.abs(row).max(initial=0)
    while size < one:     # (the branches as jaxlib's, so NaNs take the same ones)
        if size < safe_min:
            if size == 0 or largest * safe_min > size:
                pivot, perturb = pivot + perturb, perturb * 2
            else:
                return pivot * big, row * big
        elif largest > size * big:
            pivot, perturb = pivot + perturb, perturb * 2
        else:
            break
        size = abs(pivot)
    return pivot, row


add_target(Target("tridiagonal_solve_perturbed_ffi", None, None, DIAGONALS_AND_RHS, {},
                  _solve_results, solve_perturbed))
