"""jaxlib's LAPACK custom-call targets as programs state them: hand-written
StableHLO (`stablehlo.custom_call @lapack_<p><routine>_ffi`) run on pjrt-ref
and on XLA CPU (jaxlib's own kernels, the oracle), for the cases JAX's
lowering rules hide: INFO outputs, fixed pivot columns, partial Hessenberg
ranges, one-equation and singular tridiagonal systems, matrices laid out
other than column-major. And the contract: a malformed call fails when it
runs (as on XLA CPU), naming the op, its location and the problem.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.xla_oracle import run_on_xla_cpu
import jax
import jax.numpy as jnp

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter import load

RNG = np.random.default_rng(11)
ELEMENTS = {np.float32: "f32", np.float64: "f64", np.complex64: "complex<f32>",
            np.complex128: "complex<f64>", np.int32: "i32"}
PREFIXES = {np.float32: "s", np.float64: "d", np.complex64: "c", np.complex128: "z"}


@pytest.fixture(scope="module", autouse=True)
def jaxlib_lapack_loaded():
    """jaxlib binds its LAPACK kernels to scipy's when JAX first lowers a
    LAPACK call; a hand-written call before that would find them unbound."""
    jax.jit(jax.lax.linalg.lu).lower(jnp.eye(2))


def tensor(shape, dtype) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{ELEMENTS[np.dtype(dtype).type]}>"


def layout(rank: int, matrix_rank: int) -> str:
    """jaxlib's layouts: column-major for the matrices (the operands of most
    dimensions), the default for the rest."""
    dims = [rank - 2, rank - 1, *range(rank - 3, -1, -1)] if rank == matrix_rank else \
        list(range(rank - 1, -1, -1))
    return f"dense<{dims if rank > 1 else (dims[0] if dims else '')}> : tensor<{rank}xindex>"


def custom_call(target: str, operands, results, config: str = "", *, attributes: str | None = None,
                location: str = '"model.py":7:3') -> str:
    """@main calling `target` on (shape, dtype) `operands`, returning every result."""
    matrix_rank = max(len(shape) for shape, _ in operands)
    if attributes is None:
        attributes = (f'backend_config = "", mhlo.backend_config = {{{config}}}, '
                      f"operand_layouts = [{', '.join(layout(len(s), matrix_rank) for s, _ in operands)}], "
                      f"result_layouts = [{', '.join(layout(len(s), matrix_rank) for s, _ in results)}]")
    arguments = ", ".join(f"%a{i}: {tensor(*t)}" for i, t in enumerate(operands))
    result_types = ", ".join(tensor(*t) for t in results)
    operand_types = ", ".join(tensor(*t) for t in operands)
    values = ", ".join(f"%0#{i}" for i in range(len(results)))
    return f"""
func.func @main({arguments}) -> ({result_types}) {{
  %0:{len(results)} = stablehlo.custom_call @{target}({', '.join(f'%a{i}' for i in range(len(operands)))}) {{{attributes}}}
      : ({operand_types}) -> ({result_types}) loc({location})
  return {values} : {result_types}
}}"""


def ours_and_cpu(text, args):
    return load(text)(*args), run_on_xla_cpu(text, args)


def assert_close(ours, theirs, rtol):
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.kind in "iu":
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, np.abs(b).max(initial=0)),
                                       equal_nan=True)


def tolerance(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def random(shape, dtype):
    x = RNG.normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.normal(size=shape)
    return x.astype(dtype)


# ------------------------------------------------------------------ INFO and friends
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_getrf_of_singular_matrices_reports_the_zero_pivot(dtype):
    a = random((2, 4, 4), dtype)
    a[0, :, 2] = 0                       # a zero column: U[2, 2] is exactly zero, INFO 3
    a[1] = 0                             # the zero matrix: INFO 1
    text = custom_call(f"lapack_{PREFIXES[dtype]}getrf_ffi", [((2, 4, 4), dtype)],
                       [((2, 4, 4), dtype), ((2, 4), np.int32), ((2,), np.int32)])
    ours, cpu = ours_and_cpu(text, [a])
    assert list(ours[2]) == list(cpu[2]) == [3, 1]
    np.testing.assert_array_equal(ours[1], cpu[1])
    assert_close(ours[:1], cpu[:1], tolerance(dtype))


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_potrf_reports_the_first_non_positive_minor(dtype):
    a = random((3, 3), dtype)
    spd = (a @ a.conj().T + 3 * np.eye(3)).astype(dtype)
    indefinite = spd.copy()
    indefinite[2, 2] = -5
    text = custom_call(f"lapack_{PREFIXES[dtype]}potrf_ffi", [((2, 3, 3), dtype)],
                       [((2, 3, 3), dtype), ((2,), np.int32)], "uplo = 76 : ui8")
    ours, cpu = ours_and_cpu(text, [np.stack([spd, indefinite])])
    assert list(ours[1]) == list(cpu[1]) == [0, 3]
    # The upper triangle keeps the operand's values, as LAPACK leaves it.
    np.testing.assert_array_equal(np.triu(ours[0][0], 1), np.triu(spd, 1))
    assert_close([np.tril(ours[0][0])], [np.tril(cpu[0][0])], tolerance(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_geev_refuses_non_finite_matrices_with_info_minus_4(dtype):
    a = random((2, 3, 3), dtype)
    a[1, 0, 1] = np.nan
    real = np.dtype(dtype).kind == "f"
    vectors = np.complex64
    results = ([((2, 3), dtype)] * (2 if real else 1)
               + [((2, 3, 3), vectors), ((2, 3, 3), vectors), ((2,), np.int32)])
    text = custom_call(f"lapack_{PREFIXES[dtype]}geev_ffi", [((2, 3, 3), dtype)], results,
                       "compute_left = 86 : ui8, compute_right = 86 : ui8")
    ours, cpu = ours_and_cpu(text, [a])
    assert list(ours[-1]) == list(cpu[-1]) == [0, -4]
    values = ours[0] + 1j * ours[1] if real else ours[0]
    right = ours[-2][0]
    np.testing.assert_allclose(a[0] @ right, right * values[0], atol=1e-4)


def test_geqp3_keeps_fixed_columns_in_front():
    a = random((5, 4), np.float64)
    jpvt = np.array([0, 1, 0, 1], np.int32)       # columns 1 and 3 are fixed
    text = custom_call("lapack_dgeqp3_ffi", [((5, 4), np.float64), ((4,), np.int32)],
                       [((5, 4), np.float64), ((4,), np.int32), ((4,), np.float64)])
    ours, cpu = ours_and_cpu(text, [a, jpvt])
    assert list(ours[1][:2]) == [2, 4]
    np.testing.assert_array_equal(ours[1], cpu[1])
    assert_close(ours, cpu, 1e-10)


def test_gehrd_reduces_only_rows_and_columns_low_to_high():
    a = np.triu(random((6, 6), np.float64))
    a[1:5, 1:5] = random((4, 4), np.float64)      # already triangular outside 2..5
    text = custom_call("lapack_dgehrd_ffi", [((6, 6), np.float64)],
                       [((6, 6), np.float64), ((5,), np.float64), ((), np.int32)],
                       "low = 2 : i32, high = 5 : i32")
    ours, cpu = ours_and_cpu(text, [a])
    assert_close(ours, cpu, 1e-10)
    assert not ours[1][0] and not ours[1][4]     # no reflector outside the range


@pytest.mark.parametrize("d", [np.array([[2.0]]), np.array([[0.0]]),
                               np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]])])
def test_gtsv_single_equations_and_singular_systems(d):
    batch, m = d.shape
    dl, du = RNG.normal(size=(2, batch, m))
    dl[:, 0] = du[:, -1] = 7         # outside the matrix: never read
    b = RNG.normal(size=(batch, m, 2))
    vector, matrix = ((batch, m), np.float64), ((batch, m, 2), np.float64)
    text = custom_call("lapack_dgtsv_ffi", [vector, vector, vector, matrix],
                       [vector, vector, vector, matrix, ((batch,), np.int32)])
    ours, cpu = ours_and_cpu(text, [dl, d, du, b])
    np.testing.assert_array_equal(ours[4], cpu[4])
    ok = cpu[4] == 0
    assert_close([ours[3][ok]], [cpu[3][ok]], 1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_perturbed_tridiagonal_solve_of_singular_systems(dtype):
    m = 5
    dl, d, du = (random((3, m), dtype) for _ in range(3))
    d[0] = 0                                    # zero pivot: perturbed
    dl[1], d[1], du[1] = 0, 1e-30, 0            # tiny pivot, isolated row
    dl[2], d[2], du[2] = 0, 0, 0                # the zero matrix
    b = random((3, m, 2), dtype)
    vector = ((3, m), dtype)
    text = custom_call("tridiagonal_solve_perturbed_ffi",
                       [vector, vector, vector, ((3, m, 2), dtype)], [((3, m, 2), dtype)])
    ours, cpu = ours_and_cpu(text, [dl, d, du, b])
    assert np.isfinite(cpu[0]).all()
    assert_close(ours, cpu, tolerance(dtype))


def test_the_typed_ffi_form_of_stablehlo_works_like_jaxs():
    """api_version 4 with the options in `backend_config` itself."""
    a = random((3, 3), np.float64)
    spd = a @ a.T + np.eye(3)
    results = [((3, 3), np.float64), ((3,), np.float64), ((), np.int32)]
    jax_form = custom_call("lapack_dsyevd_ffi", [((3, 3), np.float64)], results,
                           "mode = 86 : ui8, uplo = 85 : ui8")
    layouts = jax_form.split("operand_layouts = ")[1].split("}")[0]
    typed = custom_call("lapack_dsyevd_ffi", [((3, 3), np.float64)], results,
                        attributes="api_version = 4 : i32, backend_config = {mode = 86 : ui8, "
                                   f"uplo = 85 : ui8}}, operand_layouts = {layouts}")
    for ours, theirs in zip(load(typed)(spd), load(jax_form)(spd)):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_allclose(load(typed)(spd)[1], np.linalg.eigvalsh(spd), rtol=1e-12)


# ------------------------------------------------------------------ broken calls
SYEVD = ("lapack_ssyevd_ffi", [((2, 3, 3), np.float32)],
         [((2, 3, 3), np.float32), ((2, 3), np.float32), ((2,), np.int32)])
GOOD_CONFIG = "mode = 86 : ui8, uplo = 76 : ui8"


@pytest.mark.parametrize("target, operands, results, config, problem", [
    (*SYEVD, "mode = 86 : ui8, uplo = 76 : ui8, lower = true", r"unknown \['lower'\]"),
    (*SYEVD, "mode = 86 : ui8", r"no \['uplo'\]"),
    (*SYEVD, "mode = 86 : ui8, uplo = 88 : ui8", r"option 'uplo': expected one of the character "
                                                  r"codes 76 \('L'\), 85 \('U'\), got 88"),
    (*SYEVD, "mode = 86 : ui8, uplo = 1.5 : f32", "option 'uplo'"),
    ("lapack_ssyevd_ffi", [((2, 3, 3), np.float64)], SYEVD[2], GOOD_CONFIG,
     r"operand #0 \(matrix\) must be a rank-3 tensor of float32, got tensor<2x3x3xf64>"),
    ("lapack_ssyevd_ffi", [((3, 4), np.float32)], [((3, 4), np.float32), ((4,), np.float32),
                                                   ((), np.int32)], GOOD_CONFIG,
     "takes square matrices, got 3x4"),
    ("lapack_ssyevd_ffi", SYEVD[1] * 2, SYEVD[2], GOOD_CONFIG, r"takes 1 operand\(s\)"),
    ("lapack_ssyevd_ffi", SYEVD[1], SYEVD[2][:2], GOOD_CONFIG, "has 3 results, got 2"),
    ("lapack_ssyevd_ffi", SYEVD[1], [SYEVD[2][0], ((2, 3), np.complex64), SYEVD[2][2]],
     GOOD_CONFIG, r"result #1 must be \[2, 3\] of float32"),
    ("lapack_strsm_ffi", [((2, 3, 3), np.float32), ((3, 3, 2), np.float32)], [((3, 3, 2), np.float32)],
     "side = 76 : ui8, uplo = 76 : ui8, trans_x = 78 : ui8, diag = 78 : ui8",
     r"operand #1 has batch dimensions \[3\], operand #0 \[2\]"),
    ("lapack_sgesdd_ffi", [((3, 2), np.float32)], [((3, 2), np.float32), ((2,), np.float32),
                                                   ((3, 3), np.float32), ((2, 2), np.float32),
                                                   ((), np.int32)], "mode = 79 : ui8",
     r"option 'mode'.*got 79"),
])
def test_malformed_calls_fail_when_run_naming_op_location_and_problem(target, operands, results,
                                                                      config, problem):
    program = load(custom_call(target, operands, results, config))     # as XLA CPU compiles it
    with pytest.raises(InvalidArgument, match=problem) as error:
        program(*(np.zeros(shape, dtype) for shape, dtype in operands))
    message = str(error.value)
    assert f"@{target}" in message and "stablehlo.custom_call" in message
    assert "model.py:7" in message


@pytest.mark.parametrize("attributes, problem", [
    ('backend_config = "", mhlo.backend_config = {mode = 86 : ui8, uplo = 76 : ui8}',
     "operand_layouts is missing"),
    ('api_version = 2 : i32, backend_config = "mode=V"',
     "typed-FFI calls: their options are a dictionary"),
])
def test_calls_outside_the_typed_ffi_contract_fail_when_run(attributes, problem):
    program = load(custom_call(*SYEVD, attributes=attributes))
    with pytest.raises(InvalidArgument, match=problem):
        program(np.zeros((2, 3, 3), np.float32))


def test_a_call_that_lays_its_matrices_out_row_major_gives_xla_cpu_s_numbers():
    """jaxlib's kernel reads a row-major operand's bytes as a column-major
    matrix (other numbers) and XLA reads the results back as laid out; the
    same bytes-level call on pjrt-ref (`reread`) gives the same numbers."""
    a = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    row_major = "operand_layouts = [dense<[2, 1, 0]> : tensor<3xindex>], result_layouts = " \
                "[dense<[2, 1, 0]> : tensor<3xindex>, dense<[1, 0]> : tensor<2xindex>]"
    text = custom_call("lapack_sgeqrf_ffi", [((2, 4, 3), np.float32)],
                       [((2, 4, 3), np.float32), ((2, 3), np.float32)],
                       attributes='backend_config = "", mhlo.backend_config = {}, ' + row_major)
    ours, theirs = ours_and_cpu(text, [a])
    assert_close(ours, theirs, rtol=1e-4)
    column_major, _ = ours_and_cpu(custom_call("lapack_sgeqrf_ffi", [((2, 4, 3), np.float32)],
                                               [((2, 4, 3), np.float32), ((2, 3), np.float32)]), [a])
    assert not np.allclose(ours[0], column_major[0])      # the layout changed the numbers
