"""jaxlib's LAPACK targets for factorizations and triangular solves: LU
(?getrf), Cholesky (?potrf), QR (?geqrf, ?geqp3 with column pivoting), the
Q of a QR (?orgqr/?ungqr) and products with it (?ormqr/?unmqr), and BLAS
?trsm. Each target's operands, options and results are those of
jaxlib/cpu/lapack_kernels.cc (see lapack_targets.py for what they share);
the work is scipy.linalg.lapack's.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.ops.lapack_targets import (INT, INT_VECTOR, MATRIX, VECTOR, boolean, character, lapack_target,
                                                     optimal_lwork, square_matrices)

UPLO = character("L", "U")


# ------------------------------------------------------------------ LU
def _lu_results(a, *, dtype):
    *batch, m, n = a
    return [(a, dtype), ((*batch, min(m, n)), INT), (tuple(batch), INT)]


@lapack_target({"sdcz": "getrf"}, results=_lu_results, copies={0: 0})
def getrf(lapack, a):
    """LU with partial pivoting, P A = L U (LAPACK ?getrf).

    Results: L (unit diagonal, not stored) and U packed in one matrix; IPIV,
    row i was swapped with row IPIV[i] (1-based); INFO > 0 if U[INFO-1,
    INFO-1] is exactly zero (the factorization is complete, U is singular).
    """
    lu, pivots, info = lapack.getrf(a)
    return lu, pivots + 1, info     # scipy's wrapper returns 0-based pivots


# ------------------------------------------------------------------ Cholesky
def _cholesky_results(a, *, dtype, uplo):
    batch, _ = square_matrices(a)
    return [(a, dtype), (batch, INT)]


@lapack_target({"sdcz": "potrf"}, options={"uplo": UPLO}, results=_cholesky_results, copies={0: 0})
def potrf(lapack, a, *, uplo):
    """Cholesky, A = L L^H (uplo 'L') or U^H U ('U') (LAPACK ?potrf).

    Only the named triangle is read and overwritten; the other keeps the
    operand's values, as in LAPACK (JAX zeroes it). INFO > 0: the leading
    minor of order INFO is not positive definite.
    """
    factor, info = lapack.potrf(a, lower=uplo == "L", clean=False)
    return factor, info


# ------------------------------------------------------------------ QR
def _qr_results(a, *, dtype):
    *batch, m, n = a
    return [(a, dtype), ((*batch, min(m, n)), dtype)]


@lapack_target({"sdcz": "geqrf"}, results=_qr_results, copies={0: 0})
def geqrf(lapack, a):
    """QR, A = Q R (LAPACK ?geqrf): R on and above the diagonal, the
    Householder vectors of Q below it, and their scalar factors TAU. No INFO
    (jaxlib's target has none: ?geqrf cannot fail)."""
    lwork = optimal_lwork(lapack.geqrf_lwork(*a.shape)[0])
    factors, tau, _, _ = lapack.geqrf(a, lwork=lwork)
    return factors, tau


def _pivoted_qr_results(a, jpvt, *, dtype):
    *batch, m, n = a
    if jpvt[-1] != n:
        raise ValueError(f"jpvt has {jpvt[-1]} entries for {n} columns")
    return [(a, dtype), (jpvt, INT), ((*batch, min(m, n)), dtype)]


@lapack_target({"sdcz": "geqp3"}, operands=(MATRIX, INT_VECTOR), results=_pivoted_qr_results,
               copies={0: 0, 1: 1})
def geqp3(lapack, a, jpvt):
    """QR with column pivoting, A P = Q R (LAPACK ?geqp3).

    On entry jpvt[j] != 0 fixes column j: it moves to the front of A P and
    is not pivoted; the other columns are free. Results as ?geqrf's, plus
    JPVT, the 1-based column permutation P.

    scipy's wrapper takes no JPVT (every column free), so fixed columns are
    handled the way ?geqp3 itself does: move them to the front, factor them
    without pivoting (?geqrf, then ?ormqr on the other columns), and factor
    the trailing block of the free columns with pivoting.
    """
    m, n = a.shape
    a, pivots, fixed = _fixed_columns_first(a, jpvt)
    tau = np.zeros(min(m, n), a.dtype)
    if fixed:
        head = min(m, fixed)
        a[:, :head], tau[:head] = geqrf(lapack, a[:, :head])
        if head < n:   # Q^H times the other columns
            apply_q = lapack.unmqr if lapack.is_complex else lapack.ormqr
            arguments = ("L", "C" if lapack.is_complex else "T", a[:, :head], tau[:head], a[:, head:])
            lwork = optimal_lwork(apply_q(*arguments, -1)[1])
            a[:, head:] = apply_q(*arguments, lwork)[0]
    if fixed < min(m, n):
        lwork = optimal_lwork(lapack.geqp3(a[fixed:, fixed:], lwork=-1)[3])
        block, order, block_tau, _, _ = lapack.geqp3(a[fixed:, fixed:], lwork=lwork)
        order = order - 1
        a[:fixed, fixed:] = a[:fixed, fixed:][:, order]   # ?geqp3 swaps whole columns
        a[fixed:, fixed:] = block
        pivots[fixed:] = pivots[fixed:][order]
        tau[fixed:] = block_tau
    return a, pivots, tau


def _fixed_columns_first(a: np.ndarray, jpvt: np.ndarray):
    """?geqp3's first step: swap each fixed column (jpvt != 0) to the front,
    in order. Returns the permuted copy of `a`, the 1-based permutation so
    far and the number of fixed columns."""
    a = np.array(a, copy=True)
    pivots = np.arange(1, a.shape[1] + 1, dtype=INT)
    fixed = 0
    for column in np.flatnonzero(jpvt):
        a[:, [fixed, column]] = a[:, [column, fixed]]
        pivots[[fixed, column]] = pivots[[column, fixed]]
        fixed += 1
    return a, pivots, fixed


# ------------------------------------------------------------------ Q of a QR
def _householder_product_results(a, tau, *, dtype):
    *_, m, n = a
    if not m >= n >= tau[-1]:
        raise ValueError(f"needs rows >= columns >= reflectors, got {m}x{n} with {tau[-1]} reflectors")
    return [(a, dtype)]


@lapack_target({"sd": "orgqr", "cz": "ungqr"}, operands=(MATRIX, VECTOR),
               results=_householder_product_results, copies={0: 0})
def orgqr(lapack, a, tau):
    """The first n columns of Q = H(1) ... H(k), the product of the
    Householder reflectors stored below the diagonal of `a` with factors
    `tau` (LAPACK ?orgqr, ?ungqr)."""
    lwork = optimal_lwork(lapack.routine(a, tau, lwork=-1)[1])
    q, _, _ = lapack.routine(a, tau, lwork=lwork)
    return (q,)


def _ormqr_results(a, tau, c, *, dtype, left, transpose):
    *_, a_rows, a_cols = a
    *_, m, n = c
    order = m if left else n
    if a_rows != order or not a_cols >= tau[-1] or tau[-1] > order:
        raise ValueError(f"reflectors {a_rows}x{a_cols} with {tau[-1]} factors cannot multiply "
                         f"a {m}x{n} matrix from the {'left' if left else 'right'}")
    return [(c, dtype)]


@lapack_target({"sd": "ormqr", "cz": "unmqr"}, operands=(MATRIX, VECTOR, MATRIX),
               options={"left": boolean, "transpose": boolean}, results=_ormqr_results,
               copies={0: 2})
def ormqr(lapack, a, tau, c, *, left, transpose):
    """Q C, Q^H C, C Q or C Q^H without forming Q (LAPACK ?ormqr, ?unmqr),
    Q being the product of the reflectors stored in `a` and `tau` (as for
    ?orgqr). `transpose` is the conjugate transpose for complex types."""
    side = "L" if left else "R"
    trans = ("C" if lapack.is_complex else "T") if transpose else "N"
    reflectors = a[:, :tau.shape[0]]
    lwork = optimal_lwork(lapack.routine(side, trans, reflectors, tau, c, -1)[1])
    product, _, _ = lapack.routine(side, trans, reflectors, tau, c, lwork)
    return (product,)


# ------------------------------------------------------------------ triangular solve
def _trsm_results(a, b, *, dtype, side, uplo, trans_x, diag):
    _, order = square_matrices(a)
    *_, m, n = b
    if order != (m if side == "L" else n):
        raise ValueError(f"a {order}x{order} triangle cannot solve a {m}x{n} right-hand side "
                         f"from the {'left' if side == 'L' else 'right'}")
    return [(b, dtype)]


@lapack_target({"sdcz": "trsm"}, operands=(MATRIX, MATRIX),
               options={"side": character("L", "R"), "uplo": UPLO,
                        "trans_x": character("N", "T", "C"), "diag": character("N", "U")},
               results=_trsm_results, copies={0: 1})
def trsm(lapack, a, b, *, side, uplo, trans_x, diag):
    """X with op(A) X = B (side 'L') or X op(A) = B ('R'), A triangular
    (BLAS ?trsm with alpha = 1). Only the `uplo` triangle of A is read; with
    diag 'U' its diagonal is taken to be ones; op is the identity ('N'), the
    transpose ('T') or the conjugate transpose ('C')."""
    solution = lapack.trsm(1, a, b, side=side == "R", lower=uplo == "L",
                           trans_a="NTC".index(trans_x), diag=diag == "U")
    return (solution,)
