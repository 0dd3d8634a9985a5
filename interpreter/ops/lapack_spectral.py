"""jaxlib's LAPACK targets for spectral decompositions and the reductions
behind them: SVD (?gesdd, ?gesvd), Hermitian eigenproblems (?syevd/?heevd),
general eigenproblems (?geev), Schur (?gees), Hessenberg (?gehrd) and
tridiagonal (?sytrd/?hetrd) forms. Operands, options and results are those
of jaxlib/cpu/lapack_kernels.cc (see lapack_targets.py for what they
share); the work is scipy.linalg.lapack's.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.ops.lapack_targets import (INT, character, complex_dtype, int32, lapack_target, optimal_lwork,
                                                     real_dtype, square_matrices)

UPLO = character("L", "U")
JOB = character("N", "V")      # JOBZ, JOBVL, JOBVR, JOBVS: 'V' computes the vectors


# ------------------------------------------------------------------ SVD
def _svd_results(a, *, dtype, mode):
    *batch, m, n = a
    k = min(m, n)
    # 'N' computes no vectors: U and V^H may have any shape (JAX gives m x k or m x m).
    u_cols, vt_rows = {"A": (m, n), "S": (k, k)}.get(mode, (None, None))
    u = None if u_cols is None else (*batch, m, u_cols)
    vt = None if vt_rows is None else (*batch, vt_rows, n)
    return [(a, dtype), ((*batch, k), real_dtype(dtype)), (u, dtype), (vt, dtype),
            (tuple(batch), INT)]


# mode 'O' (overwrite A with the vectors) is refused, as by jaxlib.
SVD_OPTIONS = {"mode": character("A", "S", "N")}


@lapack_target({"sdcz": "gesdd"}, options=SVD_OPTIONS, results=_svd_results, copies={0: 0})
def gesdd(lapack, a, *, mode):
    """A = U S V^H by divide and conquer (LAPACK ?gesdd): mode 'A' all of U
    (m x m) and V^H (n x n), 'S' their first min(m, n) columns / rows, 'N'
    only the singular values (descending). The operand's copy is left as is
    (LAPACK "destroys" it). INFO > 0: the iteration did not converge."""
    return _svd(lapack, a, mode)


@lapack_target({"sdcz": "gesvd"}, options=SVD_OPTIONS, results=_svd_results, copies={0: 0})
def gesvd(lapack, a, *, mode):
    """A = U S V^H by QR iteration (LAPACK ?gesvd, JOBU = JOBVT = mode);
    otherwise as ?gesdd."""
    return _svd(lapack, a, mode)


def _svd(lapack, a, mode):
    options = {"compute_uv": mode != "N", "full_matrices": mode == "A"}
    lwork = optimal_lwork(lapack.lwork_query(*a.shape, **options)[0])
    u, s, vt, info = lapack.routine(a, lwork=lwork, **options)
    if mode == "N":
        return None, s, None, None, info
    return None, s, u, vt, info


# ------------------------------------------------------------------ Hermitian eigenproblem
def _eigh_results(a, *, dtype, uplo, mode):
    batch, n = square_matrices(a)
    return [(a, dtype), ((*batch, n), real_dtype(dtype)), (batch, INT)]


@lapack_target({"sd": "syevd", "cz": "heevd"}, options={"uplo": UPLO, "mode": JOB},
               results=_eigh_results, copies={0: 0})
def syevd(lapack, a, *, uplo, mode):
    """Eigenvalues (ascending) and, with mode 'V', orthonormal eigenvectors
    (columns, replacing the matrix) of a symmetric / Hermitian matrix, of
    which only the `uplo` triangle is read (LAPACK ?syevd, ?heevd: divide
    and conquer). INFO > 0: the algorithm did not converge. scipy's default
    workspaces are the minimal ones, which jaxlib uses too."""
    values, vectors, info = lapack.routine(a, compute_v=mode == "V", lower=uplo == "L")
    return (vectors if mode == "V" else None), values, info


# ------------------------------------------------------------------ general eigenproblem
def _eig_results(a, *, dtype, compute_left, compute_right):
    batch, n = square_matrices(a)
    values = ((*batch, n), dtype)
    vectors = ((*batch, n, n), complex_dtype(dtype))
    info = (batch, INT)
    if dtype.kind == "c":
        return [values, vectors, vectors, info]
    return [values, values, vectors, vectors, info]     # real and imaginary parts


@lapack_target({"sdcz": "geev"}, options={"compute_left": JOB, "compute_right": JOB},
               results=_eig_results)
def geev(lapack, a, *, compute_left, compute_right):
    """Eigenvalues and left / right eigenvectors (columns, unit 2-norm,
    largest component real) of a general matrix (LAPACK ?geev): v^H A =
    w v^H, A v = w v.

    As jaxlib: a matrix with an infinite or NaN entry is not given to LAPACK
    and gets INFO -4; real matrices give the real and imaginary parts of the
    eigenvalues and complex eigenvectors (LAPACK's packed pairs unpacked,
    only when INFO is 0). INFO > 0: the QR algorithm did not converge.
    """
    if not np.isfinite(a).all():
        return (None,) * (3 if lapack.is_complex else 4) + (-4,)
    left, right = compute_left == "V", compute_right == "V"
    lwork = optimal_lwork(lapack.geev_lwork(a.shape[0], compute_vl=left, compute_vr=right)[0])
    *values, vl, vr, info = lapack.geev(a, compute_vl=left, compute_vr=right, lwork=lwork)
    if not lapack.is_complex:
        if info != 0:
            return (*values, None, None, info)
        vl, vr = (unpack_eigenvectors(values[1], v) for v in (vl, vr))
    return (*values, vl if left else None, vr if right else None, info)


def unpack_eigenvectors(imaginary: np.ndarray, packed: np.ndarray) -> np.ndarray:
    """Complex eigenvectors from real ?geev's packed columns: for a complex
    conjugate pair of eigenvalues (imaginary part of the first > 0), columns
    j and j+1 hold the real and imaginary parts of the first one's vector;
    the second's is its conjugate. (An imaginary part that is NaN counts as
    real, as in jaxlib.)"""
    vectors = packed.astype(complex_dtype(packed.dtype))
    j = 0
    while j < len(imaginary):
        if imaginary[j] == 0 or np.isnan(imaginary[j]) or j + 1 == len(imaginary):
            j += 1
            continue
        vectors[:, j] = packed[:, j] + 1j * packed[:, j + 1]
        vectors[:, j + 1] = np.conj(vectors[:, j])
        j += 2
    return vectors


# ------------------------------------------------------------------ Schur form
def _schur_results(a, *, dtype, mode, sort):
    batch, n = square_matrices(a)
    matrix, values, count = (a, dtype), ((*batch, n), dtype), (batch, INT)
    if dtype.kind == "c":
        return [matrix, matrix, values, count, count]
    return [matrix, matrix, values, values, count, count]


def _select_none(*_) -> int:
    return 0


# sort 'S' needs a selection function, which jaxlib's target cannot take either.
@lapack_target({"sdcz": "gees"}, options={"mode": JOB, "sort": character("N")},
               results=_schur_results, copies={0: 0})
def gees(lapack, a, *, mode, sort):
    """Schur form A = Z T Z^H (LAPACK ?gees): T upper (quasi-)triangular (real
    types: 2x2 blocks for complex conjugate pairs), with mode 'V' the Schur
    vectors Z, the eigenvalues (real: real and imaginary parts), SDIM (0:
    nothing is sorted) and INFO (> 0: the QR algorithm did not converge)."""
    compute = mode == "V"
    query = lapack.gees(_select_none, a, compute_v=compute, lwork=-1)
    lwork = optimal_lwork(query[-2])
    form, selected, *values, vectors, _, info = lapack.gees(_select_none, a, compute_v=compute,
                                                            sort_t=0, lwork=lwork)
    return (form, vectors if compute else None, *values, selected, info)


# ------------------------------------------------------------------ Hessenberg form
def _hessenberg_results(a, *, dtype, low, high):
    batch, n = square_matrices(a)
    if n and not 1 <= low <= high <= n:
        raise ValueError(f"needs 1 <= low <= high <= {n}, got low {low}, high {high}")
    return [(a, dtype), ((*batch, max(n - 1, 0)), dtype), (batch, INT)]


@lapack_target({"sdcz": "gehrd"}, options={"low": int32, "high": int32},
               results=_hessenberg_results, copies={0: 0})
def gehrd(lapack, a, *, low, high):
    """Hessenberg form A = Q H Q^H (LAPACK ?gehrd): H on and above the first
    subdiagonal, Q's Householder vectors below it with factors TAU. Rows and
    columns outside low..high (1-based, as LAPACK's ILO/IHI) are taken to be
    already reduced."""
    lo, hi = low - 1, high - 1          # scipy's wrapper counts from 0
    lwork = optimal_lwork(lapack.gehrd_lwork(a.shape[0], lo=lo, hi=hi)[0])
    form, tau, info = lapack.gehrd(a, lo=lo, hi=hi, lwork=lwork)
    return form, tau, info


# ------------------------------------------------------------------ tridiagonal form
def _tridiagonal_results(a, *, dtype, uplo):
    batch, n = square_matrices(a)
    real = real_dtype(dtype)
    edge = (*batch, max(n - 1, 0))
    return [(a, dtype), ((*batch, n), real), (edge, real), (edge, dtype), (batch, INT)]


@lapack_target({"sd": "sytrd", "cz": "hetrd"}, options={"uplo": UPLO},
               results=_tridiagonal_results, copies={0: 0})
def sytrd(lapack, a, *, uplo):
    """Tridiagonal form A = Q T Q^H of a symmetric / Hermitian matrix (LAPACK
    ?sytrd, ?hetrd), reading the `uplo` triangle: T's diagonal and
    off-diagonal (real), Q's Householder vectors in that triangle of the
    matrix, their factors TAU, INFO."""
    lower = uplo == "L"
    lwork = optimal_lwork(lapack.lwork_query(a.shape[0], lower=lower)[0])
    form, diagonal, off_diagonal, tau, info = lapack.routine(a, lower=lower, lwork=lwork)
    return form, diagonal, off_diagonal, tau, info
