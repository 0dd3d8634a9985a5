"""JAX's linear algebra on pjrt_ref against the same functions on JAX's cpu
backend, in one child process per group (JAX_PLATFORMS=pjrt_ref,cpu).

pjrt_ref lowers JAX's linear-algebra primitives with JAX's CPU rules
(pjrt_ref/frameworks/jax/linalg.py) and runs the LAPACK custom calls they
emit with scipy (interpreter/ops/lapack_*.py). Results are compared within
the tolerances of JAX's own tests (rtol 1e-4 single, 1e-10 double
precision); results that are unique only up to a phase (eigenvectors,
singular vectors, Q of a QR, Schur and Hessenberg forms) are compared as
such, and each factorization must also reconstruct its matrix. Each group
runs for f32 and complex64, and (JAX_ENABLE_X64=1) f64 and complex128, on
batches.
"""
from __future__ import annotations

import pytest

from test_jax_support import run_jax

PRELUDE = r'''
import jax.scipy.linalg as jsl
import scipy.linalg
from jax import lax

CPU, REF = jax.devices("cpu")[0], jax.devices("pjrt_ref")[0]
DTYPES = [np.float64, np.complex128] if jax.config.jax_enable_x64 else [np.float32, np.complex64]
rng = np.random.default_rng(0)
checked = []


def tolerance(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def run_on(device, f, *args):
    """jit(f)(*args) on `device` (results checked to be there), as numpy."""
    results = jax.jit(f)(*jax.device_put(args, device))
    for leaf in jax.tree.leaves(results):
        assert leaf.devices() == {device}, (leaf.devices(), device)
    return jax.tree.map(np.asarray, results)


def both(f, *args):
    return run_on(REF, f, *args), run_on(CPU, f, *args)


def close(ours, theirs, dtype, what, scale=1.0):
    tol = tolerance(dtype)
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (what, ours.shape, theirs.shape)
    atol = tol * scale * max(1.0, float(np.abs(theirs).max(initial=0)))
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=atol, err_msg=what)


def same(f, *args, what, dtype, scale=1.0):
    """f on pjrt_ref and on cpu agree leaf by leaf (f's results are unique)."""
    ours, theirs = both(f, *args)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        if np.asarray(b).dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=what)
        else:
            close(a, b, dtype, what, scale)
    checked.append(what)
    return ours


def same_up_to_phase(ours, theirs, dtype, what, axis=-2):
    """Vectors along `axis` (columns by default) agree up to unit factors."""
    inner = np.sum(np.conj(theirs) * ours, axis=axis, keepdims=True)
    phase = inner / np.maximum(np.abs(inner), np.finfo(np.abs(inner).dtype).tiny)
    close(ours, theirs * phase, dtype, what + " (up to phase)", scale=10)


def adjoint(x):
    return np.conj(np.swapaxes(x, -1, -2))


def matrices(shape, dtype, *, kind="general"):
    x = rng.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.normal(size=shape)
    n = shape[-1]
    if kind == "hermitian":
        x = x + adjoint(x)
    elif kind == "positive":
        x = x @ adjoint(x) + n * np.eye(n)
    elif kind == "well-conditioned":
        x = x + 2 * n * np.eye(n)
    return x.astype(dtype)


def reconstructs(a, product, dtype, what):
    close(product, a, dtype, what + " reconstructs the matrix", scale=10 * a.shape[-1])
'''


def run_group(body: str, x64: bool):
    proc = run_jax(PRELUDE + body + "\nprint('checked', len(checked), checked)\n", timeout=300,
                   JAX_PLATFORMS="pjrt_ref,cpu", JAX_ENABLE_X64="1" if x64 else "0")
    assert "checked" in proc.stdout
    return proc


X64 = pytest.mark.parametrize("x64", [False, True], ids=["f32-c64", "f64-c128"])


@X64
def test_hermitian_eigenproblems_and_singular_values(x64):
    run_group('''
for dtype in DTYPES:
    a = matrices((2, 3, 5, 5), dtype, kind="hermitian")
    (w, v), (w_cpu, v_cpu) = both(jnp.linalg.eigh, a)
    close(w, w_cpu, dtype, "eigh eigenvalues")
    same_up_to_phase(v, v_cpu, dtype, "eigh eigenvectors")
    reconstructs(a, v @ (w[..., None] * adjoint(v)), dtype, "eigh")
    same(jnp.linalg.eigvalsh, a, what="eigvalsh", dtype=dtype)
    same(lambda x: jsl.eigh(x, lower=False, eigvals_only=True), a, what="scipy eigh upper", dtype=dtype)

    for shape in [(2, 6, 4), (3, 4, 6)]:
        a = matrices(shape, dtype)
        for algorithm in [None, lax.linalg.SvdAlgorithm.QR, lax.linalg.SvdAlgorithm.DIVIDE_AND_CONQUER]:
            for full in [False, True]:
                f = lambda x: lax.linalg.svd(x, full_matrices=full, algorithm=algorithm)
                (u, s, vh), (u_cpu, s_cpu, vh_cpu) = both(f, a)
                what = f"svd {algorithm} full={full} {shape}"
                close(s, s_cpu, dtype, what + " s")
                k = min(shape[-2:])
                same_up_to_phase(u[..., :k], u_cpu[..., :k], dtype, what + " u")
                same_up_to_phase(vh[..., :k, :], vh_cpu[..., :k, :], dtype, what + " vh", axis=-1)
                reconstructs(a, (u[..., :k] * s[..., None, :]) @ vh[..., :k, :], dtype, what)
                checked.append(what)
            same(lambda x: lax.linalg.svd(x, compute_uv=False, algorithm=algorithm), a,
                 what=f"singular values {algorithm}", dtype=dtype)
    a = matrices((4, 4), dtype)
    for f, name in [(lambda x: lax.linalg.svd(x, full_matrices=False, subset_by_index=(0, 2)), "svd subset_by_index"),
                    (lambda x: lax.linalg.eigh(x, subset_by_index=(0, 2)), "eigh subset_by_index")]:
        for device in (REF, CPU):     # not offered on CPU: refused the same way on pjrt_ref
            try:
                run_on(device, f, a)
                raise AssertionError(f"{name} ran on {device}")
            except NotImplementedError as error:
                assert "subset_by_index" in str(error)
        checked.append(name)
''', x64)


@X64
def test_qr_lu_cholesky_and_triangular_solves(x64):
    run_group('''
for dtype in DTYPES:
    for shape in [(2, 5, 3), (2, 3, 5), (4, 4)]:
        a = matrices(shape, dtype)
        for mode in ["reduced", "complete"]:
            (q, r), (q_cpu, r_cpu) = both(lambda x: jnp.linalg.qr(x, mode=mode), a)
            what = f"qr {mode} {shape}"
            k = min(shape[-2:])
            same_up_to_phase(q[..., :k], q_cpu[..., :k], dtype, what + " q")
            same_up_to_phase(r[..., :k, :], r_cpu[..., :k, :], dtype, what + " r", axis=-1)
            reconstructs(a, q @ r, dtype, what)
            checked.append(what)
        (q, r, p), (q_cpu, r_cpu, p_cpu) = both(lambda x: jsl.qr(x, pivoting=True), a[0] if a.ndim == 3 else a)
        np.testing.assert_array_equal(p, p_cpu)
        reconstructs((a[0] if a.ndim == 3 else a)[:, p], q @ r, dtype, "pivoted qr")
        checked.append(f"pivoted qr {shape}")
    # Householder reflectors (scipy's raw QR) and the products of their Q.
    a = matrices((2, 5, 3), dtype)
    raw = [scipy.linalg.qr(x, mode="raw")[0] for x in a]
    factors, taus = np.stack([f for f, _ in raw]), np.stack([t for _, t in raw])
    same(lax.linalg.householder_product, factors, taus, what="householder_product", dtype=dtype)
    for left, c in [(True, matrices((2, 5, 2), dtype)), (False, matrices((2, 2, 5), dtype))]:
        for transpose in [False, True]:
            same(lambda *args: lax.linalg.ormqr(*args, left=left, transpose=transpose), factors, taus, c,
                 what=f"ormqr left={left} transpose={transpose}", dtype=dtype)

    a = matrices((2, 3, 6, 6), dtype)
    lu, pivots, perm = same(lax.linalg.lu, a, what="lu", dtype=dtype)
    lower = np.tril(lu, -1) + np.eye(6, dtype=dtype)
    reconstructs(np.take_along_axis(a, perm[..., None], axis=-2), lower @ np.triu(lu), dtype, "lu")
    same(jsl.lu, a[0, 0], what="scipy lu (p, l, u)", dtype=dtype)
    same(lambda x: jsl.lu_factor(x), a, what="lu_factor", dtype=dtype)
    same(lambda x: jsl.lu(x[:, :4]), a[0, 0], what="lu of a tall matrix", dtype=dtype)

    spd = matrices((2, 5, 5), dtype, kind="positive")
    factor = same(jnp.linalg.cholesky, spd, what="cholesky", dtype=dtype)
    reconstructs(spd, factor @ adjoint(factor), dtype, "cholesky")
    same(lambda x: jsl.cholesky(x, lower=False), spd, what="cholesky upper", dtype=dtype)
    bad = spd.copy(); bad[1, 2, 2] = -100
    factor, _ = both(jnp.linalg.cholesky, bad)
    assert np.isnan(factor[1][np.tril_indices(5)]).all() and not np.isnan(factor[0]).any()
    checked.append("cholesky of an indefinite matrix is NaN")
    b = matrices((2, 5, 3), dtype)
    same(lambda c, y: jsl.cho_solve((c, True), y), jnp.linalg.cholesky(spd), b, what="cho_solve", dtype=dtype)

    t = matrices((2, 5, 5), dtype, kind="well-conditioned")
    for left in [True, False]:
        for lower in [True, False]:
            for transpose, conjugate in [(False, False), (True, False), (True, True), (False, True)]:
                rhs = b if left else np.swapaxes(b, -1, -2)
                same(lambda x, y: lax.linalg.triangular_solve(
                         x, y, left_side=left, lower=lower, transpose_a=transpose,
                         conjugate_a=conjugate, unit_diagonal=lower),
                     t, rhs, what=f"triangular_solve left={left} lower={lower} T={transpose} C={conjugate}",
                     dtype=dtype)
    same(lambda x, y: jsl.solve_triangular(x, y, trans="C"), t[0], b[0], what="solve_triangular", dtype=dtype)
''', x64)


@X64
def test_general_eigenproblems_schur_hessenberg_and_tridiagonal(x64):
    run_group('''
def by_value(values, *vectors):
    order = np.lexsort((np.round(values.imag, 3), np.round(values.real, 3)))
    return (values[order],) + tuple(v[:, order] for v in vectors)

for dtype in DTYPES:
    a = matrices((2, 5, 5), dtype)
    f = lambda x: lax.linalg.eig(x, compute_left_eigenvectors=True, compute_right_eigenvectors=True)
    (w, vl, vr), (w_cpu, vl_cpu, vr_cpu) = both(f, a)
    for i in range(2):
        ours, theirs = by_value(w[i], vl[i], vr[i]), by_value(w_cpu[i], vl_cpu[i], vr_cpu[i])
        close(ours[0], theirs[0], dtype, "eig eigenvalues")
        same_up_to_phase(ours[1], theirs[1], dtype, "left eigenvectors")
        same_up_to_phase(ours[2], theirs[2], dtype, "right eigenvectors")
        close(a[i] @ vr[i], vr[i] * w[i], dtype, "A vr = vr w", scale=50)
        close(adjoint(vl[i]) @ a[i], w[i][:, None] * adjoint(vl[i]), dtype, "vl^H A = w vl^H", scale=50)
    checked.append("eig with left and right eigenvectors")
    values, values_cpu = both(jnp.linalg.eigvals, a)
    close(np.sort_complex(values), np.sort_complex(values_cpu), dtype, "eigvals")
    checked.append("eigvals")
    nan = a.copy(); nan[1, 0, 0] = np.nan
    (w, _), _ = both(jnp.linalg.eig, nan)
    assert np.isnan(w[1]).all() and np.isfinite(w[0]).all()
    checked.append("eig of a matrix with a NaN is NaN")

    m = a[0]
    for output in (["real", "complex"] if np.dtype(dtype).kind == "f" else ["complex"]):
        (t, z), (t_cpu, z_cpu) = both(lambda x: jsl.schur(x, output=output), m)
        reconstructs(m.astype(t.dtype), z @ t @ adjoint(z), dtype, f"schur {output}")
        close(np.sort_complex(np.linalg.eigvals(t)), np.sort_complex(np.linalg.eigvals(t_cpu)), dtype, "schur eigenvalues", scale=10)
        checked.append(f"schur {output}")
    (h, q), (h_cpu, q_cpu) = both(lambda x: jsl.hessenberg(x, calc_q=True), m)
    assert np.allclose(np.tril(h, -2), 0)
    reconstructs(m, q @ h @ adjoint(q), dtype, "hessenberg")
    same_up_to_phase(q, q_cpu, dtype, "hessenberg q")
    checked.append("hessenberg")

    hermitian = matrices((2, 5, 5), dtype, kind="hermitian")
    for lower in [True, False]:
        (_, d, e, _), (_, d_cpu, e_cpu, _) = both(lambda x: lax.linalg.tridiagonal(x, lower=lower), hermitian)
        close(d, d_cpu, dtype, "tridiagonal diagonal")
        close(np.abs(e), np.abs(e_cpu), dtype, "tridiagonal off-diagonal (up to sign)")
        checked.append(f"tridiagonal lower={lower}")

    dl, d, du = (matrices((3, 6), dtype) for _ in range(3))
    d = d + 4
    b = matrices((3, 6, 2), dtype)
    x = same(lax.linalg.tridiagonal_solve, dl, d, du, b, what="tridiagonal_solve", dtype=dtype)
    same(lambda *args: lax.linalg.tridiagonal_solve(*args, perturb_singular=True), dl, d, du, b,
         what="tridiagonal_solve perturbed", dtype=dtype)
    zero = np.zeros_like(d)
    ours, theirs = both(lambda *args: lax.linalg.tridiagonal_solve(*args, perturb_singular=True), zero, zero, zero, b)
    assert np.isfinite(ours).all()
    close(ours, theirs, dtype, "perturbed solve of the zero matrix")
    checked.append("tridiagonal_solve of the zero matrix")
''', x64)


@X64
def test_solvers_and_matrix_functions(x64):
    run_group('''
for dtype in DTYPES:
    a = matrices((2, 4, 4), dtype, kind="well-conditioned")
    b = matrices((2, 4, 3), dtype)
    same(jnp.linalg.inv, a, what="inv", dtype=dtype)
    same(jnp.linalg.solve, a, b, what="solve", dtype=dtype)
    same(jsl.solve, a[0], b[0], what="scipy solve", dtype=dtype)
    same(lambda x, y: jsl.solve(x, y, assume_a="pos"), matrices((4, 4), dtype, kind="positive"), b[0],
         what="solve positive definite", dtype=dtype)
    same(jnp.linalg.det, a, what="det", dtype=dtype)
    same(jnp.linalg.slogdet, a, what="slogdet", dtype=dtype)
    singular = a.copy(); singular[0, :, 1] = 0
    same(jnp.linalg.det, singular, what="det of a singular matrix", dtype=dtype)
    tall = matrices((2, 6, 3), dtype)
    same(jnp.linalg.pinv, tall, what="pinv", dtype=dtype, scale=10)
    same(jax.vmap(lambda x, y: jnp.linalg.lstsq(x, y)[0]), tall, matrices((2, 6, 2), dtype), what="lstsq", dtype=dtype, scale=10)
    rank_two = tall[..., :2] @ matrices((2, 2, 3), dtype)
    assert list(same(jnp.linalg.matrix_rank, rank_two, what="matrix_rank", dtype=dtype)) == [2, 2]
    same(jnp.linalg.cond, a, what="cond", dtype=dtype, scale=10)
    same(lambda x: jnp.linalg.norm(x, ord=2, axis=(-2, -1)), a, what="spectral norm", dtype=dtype)
    same(lambda x: jnp.linalg.matrix_power(x, -2), a, what="matrix_power -2", dtype=dtype)

    small = matrices((2, 4, 4), dtype) / 4
    same(jsl.expm, small, what="expm", dtype=dtype, scale=10)
    spd = matrices((4, 4), dtype, kind="positive")
    root = same(jsl.sqrtm, spd, what="sqrtm", dtype=dtype, scale=10)
    reconstructs(spd.astype(root.dtype), root @ root, dtype, "sqrtm")
    for method in ["svd", "qdwh"]:
        (u, p), _ = both(lambda x: jsl.polar(x, method=method), a[0])
        same(lambda x: jsl.polar(x, method=method)[0], a[0], what=f"polar {method}", dtype=dtype, scale=100)
        reconstructs(a[0], u @ p, dtype, f"polar {method}")
    same(lambda x: jsl.funm(x, jnp.exp), small[0], what="funm", dtype=dtype, scale=100)

    if np.dtype(dtype).kind == "f":
        x = np.linspace(0, 1, 9, dtype=dtype)
        same(lambda x, y: jnp.polyfit(x, y, 3), x, (x ** 3 - x).astype(dtype), what="polyfit", dtype=dtype, scale=10)
        cov = matrices((3, 3), dtype, kind="positive")
        for method in ["cholesky", "eigh", "svd"]:
            same(lambda key, c: jax.random.multivariate_normal(key, jnp.zeros(3, dtype), c, (4,), method=method),
                 jax.random.key_data(jax.random.key(1)), cov, what=f"multivariate_normal {method}",
                 dtype=dtype, scale=10)
''', x64)


@X64
def test_gradients(x64):
    run_group('''
for dtype in DTYPES:
    real = np.dtype(dtype).kind == "f"
    loss = lambda y: jnp.sum(jnp.real(y) * 1.5 - jnp.imag(y) * 0.5) if not real else jnp.sum(y * 1.5)
    a = matrices((2, 4, 4), dtype, kind="well-conditioned")
    h = matrices((2, 4, 4), dtype, kind="hermitian")
    spd = matrices((2, 4, 4), dtype, kind="positive")
    b = matrices((2, 4, 2), dtype)
    cases = {
        "eigh": (lambda x: loss(jnp.linalg.eigh(x)[0] * jnp.arange(4)), h),
        "svd": (lambda x: loss(jnp.linalg.svd(x, compute_uv=False) * jnp.arange(4)), a),
        "qr": (lambda x: loss(jnp.linalg.qr(x)[1]), a),
        "cholesky": (lambda x: loss(jnp.linalg.cholesky(x)), spd),
        "det": (lambda x: loss(jnp.linalg.det(x)), a),
        "slogdet": (lambda x: loss(jnp.linalg.slogdet(x)[1]), a),
        "inv": (lambda x: loss(jnp.linalg.inv(x)), a),
        "solve": (lambda x: loss(jnp.linalg.solve(x, b)), a),
        "eigvals": (lambda x: loss(jnp.linalg.eigvalsh(x)), h),
    }
    for name, (f, x) in cases.items():
        g = same(jax.grad(f), x, what=f"grad of {name}", dtype=dtype, scale=10)
        assert np.isfinite(g).all()
''', x64)
