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

from tests.support.jax_support import run_jax

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
    """f on pjrt_ref and on cpu agree leaf by leaf (f's results are unique).
    f may return a dict of many results: one program per backend."""
    ours, theirs = both(f, *args)
    leaves, _ = jax.tree_util.tree_flatten_with_path(ours)
    for (path, a), b in zip(leaves, jax.tree.leaves(theirs)):
        label = what + jax.tree_util.keystr(path)
        if np.asarray(b).dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=label)
        else:
            close(a, b, dtype, label, scale)
        checked.append(label)
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
SVD_ALGORITHMS = {"default": None, "QR": lax.linalg.SvdAlgorithm.QR,
                  "divide and conquer": lax.linalg.SvdAlgorithm.DIVIDE_AND_CONQUER}

def hermitian_family(x):
    w, v = jnp.linalg.eigh(x)
    return {"w": w, "v": v, "eigvalsh": jnp.linalg.eigvalsh(x),
            "upper": jsl.eigh(x, lower=False, eigvals_only=True)}

def svd_family(x):
    results = {}
    for name, algorithm in SVD_ALGORITHMS.items():
        for full in [False, True]:
            results[f"{name} full={full}"] = lax.linalg.svd(x, full_matrices=full, algorithm=algorithm)
        results[f"{name} values"] = lax.linalg.svd(x, compute_uv=False, algorithm=algorithm)
    return results

for dtype in DTYPES:
    a = matrices((2, 3, 5, 5), dtype, kind="hermitian")
    ours, cpu = both(hermitian_family, a)
    for name in ["w", "eigvalsh", "upper"]:
        close(ours[name], cpu[name], dtype, f"eigh {name}")
    same_up_to_phase(ours["v"], cpu["v"], dtype, "eigh eigenvectors")
    reconstructs(a, ours["v"] @ (ours["w"][..., None] * adjoint(ours["v"])), dtype, "eigh")
    checked.append("eigh")

    for shape in [(2, 6, 4), (3, 4, 6)]:
        a = matrices(shape, dtype)
        k = min(shape[-2:])
        ours, cpu = both(svd_family, a)
        for name in ours:
            what = f"svd {name} {shape}"
            if name.endswith("values"):
                close(ours[name], cpu[name], dtype, what)
                continue
            (u, s, vh), (u_cpu, s_cpu, vh_cpu) = ours[name], cpu[name]
            close(s, s_cpu, dtype, what + " s")
            same_up_to_phase(u[..., :k], u_cpu[..., :k], dtype, what + " u")
            same_up_to_phase(vh[..., :k, :], vh_cpu[..., :k, :], dtype, what + " vh", axis=-1)
            reconstructs(a, (u[..., :k] * s[..., None, :]) @ vh[..., :k, :], dtype, what)
            checked.append(what)

    a = matrices((4, 4), dtype)
    for f, name in [(lambda x: lax.linalg.svd(x, full_matrices=False, subset_by_index=(0, 2)), "svd"),
                    (lambda x: lax.linalg.eigh(x, subset_by_index=(0, 2)), "eigh")]:
        for device in (REF, CPU):     # not offered on CPU: refused the same way on pjrt_ref
            try:
                run_on(device, f, a)
                raise AssertionError(f"{name} subset_by_index ran on {device}")
            except NotImplementedError as error:
                assert "subset_by_index" in str(error)
        checked.append(f"{name} subset_by_index refused")
''', x64)


@X64
def test_qr_lu_cholesky_and_triangular_solves(x64):
    run_group('''
def qr_family(x):
    matrix = x[0] if x.ndim == 3 else x
    return {"reduced": jnp.linalg.qr(x), "complete": jnp.linalg.qr(x, mode="complete"),
            "pivoted": jsl.qr(matrix, pivoting=True)}

def reflector_family(factors, taus, c_left, c_right):
    results = {"householder_product": lax.linalg.householder_product(factors, taus)}
    for transpose in [False, True]:
        results[f"left T={transpose}"] = lax.linalg.ormqr(factors, taus, c_left, left=True, transpose=transpose)
        results[f"right T={transpose}"] = lax.linalg.ormqr(factors, taus, c_right, left=False, transpose=transpose)
    return results

def lu_family(x):
    return {"lu": lax.linalg.lu(x), "scipy": jsl.lu(x[0, 0]), "lu_factor": jsl.lu_factor(x),
            "tall": jsl.lu(x[0, 0, :, :4]), "wide": jsl.lu(x[0, 0, :4, :])}

def cholesky_family(spd, bad, b):
    factor = jnp.linalg.cholesky(spd)
    return {"lower": factor, "upper": jsl.cholesky(spd, lower=False), "indefinite": jnp.linalg.cholesky(bad),
            "cho_solve": jsl.cho_solve((factor, True), b)}

def triangular_family(t, b):
    results = {"scipy": jsl.solve_triangular(t[0], b[0], trans="C")}
    for left in [True, False]:
        for lower in [True, False]:
            for transpose, conjugate in [(False, False), (True, False), (True, True), (False, True)]:
                rhs = b if left else jnp.swapaxes(b, -1, -2)
                results[f"left={left} lower={lower} T={transpose} C={conjugate}"] = lax.linalg.triangular_solve(
                    t, rhs, left_side=left, lower=lower, transpose_a=transpose, conjugate_a=conjugate,
                    unit_diagonal=lower)
    return results

for dtype in DTYPES:
    for shape in [(2, 5, 3), (2, 3, 5), (4, 4)]:
        a = matrices(shape, dtype)
        k = min(shape[-2:])
        ours, cpu = both(qr_family, a)
        for mode in ["reduced", "complete"]:
            (q, r), (q_cpu, r_cpu) = ours[mode], cpu[mode]
            what = f"qr {mode} {shape}"
            same_up_to_phase(q[..., :k], q_cpu[..., :k], dtype, what + " q")
            same_up_to_phase(r[..., :k, :], r_cpu[..., :k, :], dtype, what + " r", axis=-1)
            reconstructs(a, q @ r, dtype, what)
            checked.append(what)
        (q, r, p), (_, _, p_cpu) = ours["pivoted"], cpu["pivoted"]
        np.testing.assert_array_equal(p, p_cpu)
        reconstructs((a[0] if a.ndim == 3 else a)[:, p], q @ r, dtype, "pivoted qr")
        checked.append(f"pivoted qr {shape}")

    # Householder reflectors from scipy's raw QR, and products with their Q.
    a = matrices((2, 5, 3), dtype)
    raw = [scipy.linalg.qr(x, mode="raw")[0] for x in a]
    factors, taus = np.stack([f for f, _ in raw]), np.stack([t for _, t in raw])
    same(reflector_family, factors, taus, matrices((2, 5, 2), dtype), matrices((2, 2, 5), dtype),
         what="reflectors", dtype=dtype)

    a = matrices((2, 3, 6, 6), dtype)
    ours = same(lu_family, a, what="lu", dtype=dtype)
    lu, _, perm = ours["lu"]
    lower = np.tril(lu, -1) + np.eye(6, dtype=dtype)
    reconstructs(np.take_along_axis(a, perm[..., None], axis=-2), lower @ np.triu(lu), dtype, "lu")

    spd = matrices((2, 5, 5), dtype, kind="positive")
    bad = spd.copy()
    bad[1, 2, 2] = -100
    ours = same(cholesky_family, spd, bad, matrices((2, 5, 3), dtype), what="cholesky", dtype=dtype)
    reconstructs(spd, ours["lower"] @ adjoint(ours["lower"]), dtype, "cholesky")
    indefinite = ours["indefinite"]
    assert np.isnan(indefinite[1][np.tril_indices(5)]).all() and not np.isnan(indefinite[0]).any()

    same(triangular_family, matrices((2, 5, 5), dtype, kind="well-conditioned"), matrices((2, 5, 3), dtype),
         what="triangular_solve", dtype=dtype)
''', x64)


@X64
def test_general_eigenproblems_schur_hessenberg_and_tridiagonal(x64):
    run_group('''
def by_value(values, *vectors):
    order = np.lexsort((np.round(values.imag, 3), np.round(values.real, 3)))
    return (values[order],) + tuple(v[:, order] for v in vectors)

def eig_family(x, with_nan):
    return {"eig": lax.linalg.eig(x, compute_left_eigenvectors=True, compute_right_eigenvectors=True),
            "eigvals": jnp.linalg.eigvals(x), "nan": jnp.linalg.eig(with_nan)[0]}

def schur_family(m):
    results = {"complex": jsl.schur(m, output="complex"), "hessenberg": jsl.hessenberg(m, calc_q=True)}
    if not jnp.iscomplexobj(m):
        results["real"] = jsl.schur(m, output="real")
    return results

def tridiagonal_family(h):
    return {"lower": lax.linalg.tridiagonal(h, lower=True)[1:3],
            "upper": lax.linalg.tridiagonal(h, lower=False)[1:3]}

def tridiagonal_solve_family(dl, d, du, b):
    zero = jnp.zeros_like(d)
    return {"plain": lax.linalg.tridiagonal_solve(dl, d, du, b),
            "perturbed": lax.linalg.tridiagonal_solve(dl, d, du, b, perturb_singular=True),
            "zero matrix": lax.linalg.tridiagonal_solve(zero, zero, zero, b, perturb_singular=True)}

for dtype in DTYPES:
    a = matrices((2, 5, 5), dtype)
    with_nan = a.copy()
    with_nan[1, 0, 0] = np.nan
    ours, cpu = both(eig_family, a, with_nan)
    (w, vl, vr), (w_cpu, vl_cpu, vr_cpu) = ours["eig"], cpu["eig"]
    for i in range(2):
        mine, theirs = by_value(w[i], vl[i], vr[i]), by_value(w_cpu[i], vl_cpu[i], vr_cpu[i])
        close(mine[0], theirs[0], dtype, "eig eigenvalues")
        same_up_to_phase(mine[1], theirs[1], dtype, "left eigenvectors")
        same_up_to_phase(mine[2], theirs[2], dtype, "right eigenvectors")
        close(a[i] @ vr[i], vr[i] * w[i], dtype, "A vr = vr w", scale=50)
        close(adjoint(vl[i]) @ a[i], w[i][:, None] * adjoint(vl[i]), dtype, "vl^H A = w vl^H", scale=50)
    close(np.sort_complex(ours["eigvals"]), np.sort_complex(cpu["eigvals"]), dtype, "eigvals")
    assert np.isnan(ours["nan"][1]).all() and np.isfinite(ours["nan"][0]).all()
    checked.extend(["eig", "eigvals", "eig of a matrix with a NaN is NaN"])

    m = a[0]
    ours, cpu = both(schur_family, m)
    for output in ["real", "complex"]:
        if output in ours:
            (t, z), (t_cpu, _) = ours[output], cpu[output]
            reconstructs(m.astype(t.dtype), z @ t @ adjoint(z), dtype, f"schur {output}")
            close(np.sort_complex(np.linalg.eigvals(t)), np.sort_complex(np.linalg.eigvals(t_cpu)), dtype,
                  f"schur {output} eigenvalues", scale=10)
            checked.append(f"schur {output}")
    (h, q), (_, q_cpu) = ours["hessenberg"], cpu["hessenberg"]
    assert np.allclose(np.tril(h, -2), 0)
    reconstructs(m, q @ h @ adjoint(q), dtype, "hessenberg")
    same_up_to_phase(q, q_cpu, dtype, "hessenberg q")
    checked.append("hessenberg")

    ours, cpu = both(tridiagonal_family, matrices((2, 5, 5), dtype, kind="hermitian"))
    for triangle in ["lower", "upper"]:
        (d, e), (d_cpu, e_cpu) = ours[triangle], cpu[triangle]
        close(d, d_cpu, dtype, "tridiagonal diagonal")
        close(np.abs(e), np.abs(e_cpu), dtype, "tridiagonal off-diagonal (up to sign)")
        checked.append(f"tridiagonal {triangle}")

    dl, du = matrices((3, 6), dtype), matrices((3, 6), dtype)
    d = matrices((3, 6), dtype) + 4
    ours = same(tridiagonal_solve_family, dl, d, du, matrices((3, 6, 2), dtype), what="tridiagonal_solve",
                dtype=dtype)
    assert np.isfinite(ours["zero matrix"]).all()
''', x64)


@pytest.mark.slow
@X64
def test_solvers_and_matrix_functions(x64):
    run_group('''
def solver_family(a, b, spd, singular, tall, rhs, rank_two):
    return {"inv": jnp.linalg.inv(a), "solve": jnp.linalg.solve(a, b), "scipy solve": jsl.solve(a[0], b[0]),
            "positive definite solve": jsl.solve(spd, b[0], assume_a="pos"),
            "det": jnp.linalg.det(a), "slogdet": jnp.linalg.slogdet(a), "singular det": jnp.linalg.det(singular),
            "matrix_rank": jnp.linalg.matrix_rank(rank_two), "spectral norm": jnp.linalg.norm(a, ord=2, axis=(-2, -1)),
            "matrix_power": jnp.linalg.matrix_power(a, -2)}

def least_squares_family(a, tall, rhs):
    return {"pinv": jnp.linalg.pinv(tall), "lstsq": jax.vmap(lambda x, y: jnp.linalg.lstsq(x, y)[0])(tall, rhs),
            "cond": jnp.linalg.cond(a)}

def matrix_functions(small, spd, a):
    return {"expm": jsl.expm(small), "sqrtm": jsl.sqrtm(spd), "polar svd": jsl.polar(a, method="svd"),
            "polar qdwh": jsl.polar(a, method="qdwh"), "funm": jsl.funm(small[0], jnp.exp)}

def sampling_and_fitting(x, y, key, cov):
    results = {"polyfit": jnp.polyfit(x, y, 3)}
    for method in ["cholesky", "eigh", "svd"]:
        results[f"multivariate_normal {method}"] = jax.random.multivariate_normal(
            jax.random.wrap_key_data(key), jnp.zeros(3, cov.dtype), cov, (4,), method=method)
    return results

for dtype in DTYPES:
    a = matrices((2, 4, 4), dtype, kind="well-conditioned")
    b = matrices((2, 4, 3), dtype)
    singular = a.copy()
    singular[0, :, 1] = 0
    tall = matrices((2, 6, 3), dtype)
    rank_two = tall[..., :2] @ matrices((2, 2, 3), dtype)
    ours = same(solver_family, a, b, matrices((4, 4), dtype, kind="positive"), singular, tall,
                matrices((2, 6, 2), dtype), rank_two, what="solvers", dtype=dtype)
    assert list(ours["matrix_rank"]) == [2, 2]
    same(least_squares_family, a, tall, matrices((2, 6, 2), dtype), what="least squares", dtype=dtype, scale=10)

    small, spd = matrices((2, 4, 4), dtype) / 4, matrices((4, 4), dtype, kind="positive")
    ours = same(matrix_functions, small, spd, a[0], what="matrix functions", dtype=dtype, scale=100)
    root = ours["sqrtm"]
    reconstructs(spd.astype(root.dtype), root @ root, dtype, "sqrtm")
    for method in ["svd", "qdwh"]:
        u, p = ours[f"polar {method}"]
        reconstructs(a[0], u @ p, dtype, f"polar {method}")

    if np.dtype(dtype).kind == "f":
        x = np.linspace(0, 1, 9, dtype=dtype)
        same(sampling_and_fitting, x, (x ** 3 - x).astype(dtype), jax.random.key_data(jax.random.key(1)),
             matrices((3, 3), dtype, kind="positive"), what="sampling and fitting", dtype=dtype, scale=10)
''', x64)


@X64
def test_gradients(x64):
    run_group('''
def gradients(a, h, spd, b):
    real = not jnp.iscomplexobj(a)
    loss = (lambda y: jnp.sum(y * 1.5)) if real else (lambda y: jnp.sum(jnp.real(y) * 1.5 - jnp.imag(y) * 0.5))
    weights = jnp.arange(4)
    cases = {
        "eigh": (lambda x: loss(jnp.linalg.eigh(x)[0] * weights), h),
        "eigvalsh": (lambda x: loss(jnp.linalg.eigvalsh(x)), h),
        "svd": (lambda x: loss(jnp.linalg.svd(x, compute_uv=False) * weights), a),
        "qr": (lambda x: loss(jnp.linalg.qr(x)[1]), a),
        "cholesky": (lambda x: loss(jnp.linalg.cholesky(x)), spd),
        "det": (lambda x: loss(jnp.linalg.det(x)), a),
        "slogdet": (lambda x: loss(jnp.linalg.slogdet(x)[1]), a),
        "inv": (lambda x: loss(jnp.linalg.inv(x)), a),
        "solve": (lambda x: loss(jnp.linalg.solve(x, b)), a),
    }
    return {name: jax.grad(f)(x) for name, (f, x) in cases.items()}

for dtype in DTYPES:
    ours = same(gradients, matrices((2, 4, 4), dtype, kind="well-conditioned"),
                matrices((2, 4, 4), dtype, kind="hermitian"), matrices((2, 4, 4), dtype, kind="positive"),
                matrices((2, 4, 2), dtype), what="grad", dtype=dtype, scale=10)
    assert all(np.isfinite(g).all() for g in ours.values())
''', x64)


def test_a_jax_without_a_cpu_rule_fails_clearly():
    """If the installed JAX has no CPU lowering rule to borrow for a
    primitive, using that primitive on pjrt_ref says so (simulated by hiding
    eigh's rule)."""
    run_jax('''
        from jax._src.interpreters import mlir
        from jax._src.lax import linalg
        from pjrt_ref.frameworks.jax.linalg import register_linalg_lowerings

        jax.devices()    # loads the plugin, which registers the rules JAX has
        del mlir._platform_specific_lowerings["cpu"][linalg.eigh_p]
        assert register_linalg_lowerings("pjrt_ref") == ["eigh"]
        try:
            jnp.linalg.eigh(jnp.eye(3))
            raise AssertionError("eigh ran without a lowering rule")
        except NotImplementedError as error:
            assert "'eigh'" in str(error) and jax.__version__ in str(error), error
        assert float(jnp.linalg.det(jnp.eye(3) * 2)) == 8.0     # the others still lower
    ''', JAX_PLATFORMS="pjrt_ref,cpu")
