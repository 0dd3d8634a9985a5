"""CHLO top_k, next_after, square, conj, is_inf/is_pos_inf/is_neg_inf,
constant and constant_like against XLA CPU (JAX's lowering where JAX emits
the op, hand-written programs otherwise). All of these are exact."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from jax import lax

from test_ops_chlo_oracle import (BF16, assert_jax_matches, assert_matches_xla,
                                  tensor_type, unary_program)

FLOATS = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
INTEGERS = [np.dtype(t) for t in (np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64)]


def top_k_input(dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == np.bool_:
        return rng.integers(0, 2, (4, 9)).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = rng.integers(max(int(info.min), -50), 50, (4, 9)).astype(dtype)
        values[:, 0] = info.min
        values[:, 1] = info.max
        values[:, 2] = values[:, 3]  # ties keep the lower index first
        return values
    specials = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1.0, -2.5]
    rows = [specials, rng.integers(-3, 3, 9), -np.array(specials), rng.normal(size=9)]
    return np.array(rows, dtype=np.float64).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS + [np.dtype(np.bool_)], ids=str)
@pytest.mark.parametrize("k", [0, 3, 9])
def test_top_k_matches_xla(dtype, k):
    """Descending, stable, floats in IEEE total order (NaN first, then
    +inf, ..., +0 before -0, ..., -NaN last); indices are i32."""
    x = top_k_input(dtype)
    values, indices = assert_jax_matches(lambda a: lax.top_k(a, k), x, op="chlo.top_k")
    assert indices.dtype == np.int32


def test_top_k_of_rank_1_and_3():
    rng = np.random.default_rng(1)
    for shape in [(7,), (2, 3, 5)]:
        x = rng.integers(0, 4, shape).astype(np.float32)
        assert_jax_matches(lambda a: lax.top_k(a, 2), x, op="chlo.top_k")


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_next_after_matches_xla(dtype):
    values = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.0, -2.5, 1e30, 7e-3])
    x = np.repeat(values, len(values))
    y = np.tile(values, len(values))
    with np.errstate(over="ignore"):
        x, y = x.astype(dtype), y.astype(dtype)
    ours = assert_jax_matches(lax.nextafter, x, y, op="chlo.next_after")[0]
    # XLA flushes subnormal results; check bit patterns where it cannot.
    np.testing.assert_array_equal(ours[x == y].view(np.uint8), y[x == y].view(np.uint8))


def test_next_after_from_zero_is_the_smallest_subnormal():
    """XLA CPU flushes subnormals, so this IEEE case is checked by hand:
    from +-0 towards y != 0 the result is the smallest subnormal signed
    like y."""
    from pjrt_ref.interpreter import load

    x = np.array([0.0, -0.0, 0.0], np.float32)
    y = np.array([1.0, -1.0, -0.0], np.float32)
    t = tensor_type((3,), np.float32)
    text = (f"func.func @main(%x: {t}, %y: {t}) -> {t} {{\n"
            f"  %0 = chlo.next_after %x, %y : {t}, {t} -> {t}\n  return %0 : {t}\n}}")
    result = load(text)(x, y)[0]
    tiny = np.finfo(np.float32).smallest_subnormal
    np.testing.assert_array_equal(result.view(np.uint32),
                                  np.array([tiny, -tiny, -0.0], np.float32).view(np.uint32))


@pytest.mark.parametrize("dtype", FLOATS + [np.dtype(np.complex64), np.dtype(np.complex128)],
                         ids=str)
def test_square_matches_xla(dtype):
    """Complex: (a - b)(a + b) + 2abi with an exact 0 real part when |a| == |b|."""
    rng = np.random.default_rng(2)
    if dtype.kind == "c":
        x = rng.normal(size=40) + 1j * rng.normal(size=40)
        x[:6] = [1 + 1j, 2 - 2j, np.inf + 1j, 1e20 + 1e20j, np.nan + 1j, -3 + 3j]
    else:
        x = np.concatenate([rng.normal(size=34) * 100, [0, -0.0, np.inf, -np.inf, np.nan, 1e30]])
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    assert_jax_matches(lax.square, x, op="chlo.square")


@pytest.mark.parametrize("dtype", FLOATS + [np.dtype(np.complex64), np.dtype(np.complex128)],
                         ids=str)
def test_conj_matches_xla(dtype):
    real = np.array([1.5, -2.0, 0.0, np.inf, np.nan])
    x = np.empty(5, dtype)
    if dtype.kind == "c":
        x.real, x.imag = real, [2.0, -0.0, 0.0, -np.inf, 1.0]
    else:
        x[:] = real
    assert_matches_xla(unary_program("chlo.conj", x), x)


@pytest.mark.parametrize("op", ["chlo.is_inf", "chlo.is_pos_inf", "chlo.is_neg_inf"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_infinity_tests_match_xla(op, dtype):
    x = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, -np.nan, 65504.0]).astype(dtype)
    assert_matches_xla(unary_program(op, x, result_dtype=np.bool_), x)


def test_infinity_tests_on_floats_without_infinity():
    from pjrt_ref.interpreter import load

    x = np.array([448.0, -448.0, np.nan], dtype=ml_dtypes.float8_e4m3fn)
    text = unary_program("chlo.is_inf", x, result_dtype=np.bool_).replace(
        "tensor<3xf8E4M3FN>", "tensor<3xf8E4M3FN>")
    assert not load(text)(x)[0].any()


def test_constant_and_constant_like_match_xla():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    text = """func.func @main(%x: tensor<2x3xf32>) -> (tensor<2xf32>, tensor<2x2xi32>,
                                                   tensor<2x3xf32>, tensor<2x3xi32>,
                                                   tensor<2x3xi1>) {
      %0 = chlo.constant dense<[1.5, -2.0]> : tensor<2xf32>
      %1 = chlo.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
      %2 = "chlo.constant_like"(%x) {value = 2.5 : f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %3 = "chlo.constant_like"(%x) {value = -7 : i32} : (tensor<2x3xf32>) -> tensor<2x3xi32>
      %4 = "chlo.constant_like"(%x) {value = true} : (tensor<2x3xf32>) -> tensor<2x3xi1>
      return %0, %1, %2, %3, %4 : tensor<2xf32>, tensor<2x2xi32>, tensor<2x3xf32>,
                                  tensor<2x3xi32>, tensor<2x3xi1>
    }"""
    assert_matches_xla(text, x)


def test_complex_constant_like():
    """XLA's parser cannot read `#complex.number`; the value is checked
    directly."""
    from pjrt_ref.interpreter import load

    text = """func.func @main(%x: tensor<2xf32>) -> tensor<2xcomplex<f32>> {
      %0 = "chlo.constant_like"(%x) {value = #complex.number<:f32 1.0, -2.5> : complex<f32>}
          : (tensor<2xf32>) -> tensor<2xcomplex<f32>>
      return %0 : tensor<2xcomplex<f32>>
    }"""
    result = load(text)(np.zeros(2, np.float32))[0]
    np.testing.assert_array_equal(result, np.array([1 - 2.5j, 1 - 2.5j], np.complex64))


@pytest.mark.parametrize("dtype", INTEGERS + [np.dtype(np.int16), np.dtype(np.uint16)], ids=str)
def test_mulhi_matches_xla(dtype):
    """The high half of the double-width product, extremes included."""
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    lhs = rng.integers(info.min, info.max, 40, dtype=dtype, endpoint=True)
    rhs = rng.integers(info.min, info.max, 40, dtype=dtype, endpoint=True)
    lhs[:4] = [info.min, info.max, info.min, 0]
    rhs[:4] = [info.min, info.max, info.max, info.min]
    t = tensor_type(lhs.shape, dtype)
    text = (f"func.func @main(%a: {t}, %b: {t}) -> {t} {{\n"
            f"  %0 = chlo.mulhi %a, %b : {t}, {t} -> {t}\n  return %0 : {t}\n}}\n")
    assert_matches_xla(text, lhs, rhs)
