"""stablehlo.triangular_solve and stablehlo.cholesky against XLA CPU:
every side / triangle / transpose / unit-diagonal combination, batches,
only the named triangle read, non-positive-definite input (NaNs)."""
import itertools

import numpy as np
import pytest

from tests.support.xla_oracle import assert_close, ours_and_xla

RNG = np.random.default_rng(6)


def _well_conditioned(shape, dtype):
    a = RNG.normal(size=shape) * 0.3
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.normal(size=shape) * 0.3
    n = shape[-1]
    a = a + 3 * np.eye(n)  # dominant diagonal
    return a.astype(dtype)


def _triangular_solve_program(a_shape, b_shape, element, left_side, lower, transpose,
                              unit_diagonal):
    ta = f"tensor<{'x'.join(map(str, a_shape))}x{element}>"
    tb = f"tensor<{'x'.join(map(str, b_shape))}x{element}>"
    flag = lambda v: str(v).lower()  # noqa: E731
    return f"""
func.func @main(%a: {ta}, %b: {tb}) -> {tb} {{
  %0 = "stablehlo.triangular_solve"(%a, %b) {{left_side = {flag(left_side)}, lower = {flag(lower)},
       unit_diagonal = {flag(unit_diagonal)}, transpose_a = #stablehlo<transpose {transpose}>}}
       : ({ta}, {tb}) -> {tb}
  return %0 : {tb}
}}"""


@pytest.mark.parametrize("left_side,lower,transpose,unit_diagonal",
                         itertools.product([True, False], [True, False],
                                           ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"],
                                           [False, True]))
def test_triangular_solve_variants(left_side, lower, transpose, unit_diagonal):
    dtype, element = (np.complex64, "complex<f32>") if transpose == "ADJOINT" else (np.float64, "f64")
    a = _well_conditioned((2, 5, 5), dtype)
    b = RNG.normal(size=(2, 5, 3) if left_side else (2, 3, 5)).astype(dtype)
    text = _triangular_solve_program(a.shape, b.shape, element, left_side, lower, transpose,
                                     unit_diagonal)
    ours, theirs = ours_and_xla(text, [a, b])
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    assert_close(ours, theirs, rtol=tol, atol=tol)


def test_triangular_solve_reads_only_its_triangle():
    a = _well_conditioned((4, 4), np.float32)
    a[np.triu_indices(4, 1)] = np.nan  # never read with lower = true
    b = RNG.normal(size=(4, 2)).astype(np.float32)
    text = _triangular_solve_program(a.shape, b.shape, "f32", True, True, "NO_TRANSPOSE", False)
    ours, theirs = ours_and_xla(text, [a, b])
    assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def _cholesky_program(shape, element, lower):
    dims = "x".join(map(str, shape))
    t = f"tensor<{dims}x{element}>"
    return f"""
func.func @main(%a: {t}) -> {t} {{
  %0 = "stablehlo.cholesky"(%a) {{lower = {str(lower).lower()}}} : ({t}) -> {t}
  return %0 : {t}
}}"""


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype,element", [(np.float32, "f32"), (np.float64, "f64"),
                                           (np.complex64, "complex<f32>")])
def test_cholesky(lower, dtype, element):
    m = RNG.normal(size=(3, 6, 6))
    if np.dtype(dtype).kind == "c":
        m = m + 1j * RNG.normal(size=(3, 6, 6))
    spd = (m @ np.conj(np.swapaxes(m, -1, -2)) + 0.5 * np.eye(6)).astype(dtype)
    spd[1] = -spd[1]  # not positive definite: XLA gives NaNs
    ours, theirs = ours_and_xla(_cholesky_program(spd.shape, element, lower), [spd])
    rtol = 1e-4 if dtype in (np.float32, np.complex64) else 1e-10
    assert np.isnan(ours[0][1]).all() and np.isnan(theirs[0][1]).all()
    assert_close(ours, theirs, rtol=rtol, atol=rtol)


def test_cholesky_reads_only_its_triangle():
    m = RNG.normal(size=(5, 5))
    spd = m @ m.T + np.eye(5)
    spd[np.triu_indices(5, 1)] = 1e6  # ignored with lower = true
    ours, theirs = ours_and_xla(_cholesky_program(spd.shape, "f64", True), [spd])
    assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("a_shape,b_shape,left_side,lower,transpose", [
    ((300, 300), (300, 4), True, True, "TRANSPOSE"),        # three 128-blocks
    ((260, 260), (3, 260), False, False, "NO_TRANSPOSE"),
    ((10, 6, 6), (10, 6, 2), True, False, "NO_TRANSPOSE"),  # batched small: direct solve
    ((10, 6, 6), (10, 2, 6), False, True, "TRANSPOSE"),
])
def test_triangular_solve_blocked_and_direct_paths(a_shape, b_shape, left_side, lower, transpose):
    a = _well_conditioned(a_shape, np.float64)
    b = RNG.normal(size=b_shape)
    text = _triangular_solve_program(a_shape, b_shape, "f64", left_side, lower, transpose, False)
    ours, theirs = ours_and_xla(text, [a, b])
    assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


def test_cholesky_of_more_than_one_panel():
    """n > 128: panels factored one by one, the rest solved by triangular solves."""
    m = RNG.normal(size=(150, 150))
    spd = m @ m.T + 150 * np.eye(150)
    for lower in (True, False):
        ours, theirs = ours_and_xla(_cholesky_program(spd.shape, "f64", lower), [spd])
        assert_close(ours, theirs, rtol=1e-10, atol=1e-12)
