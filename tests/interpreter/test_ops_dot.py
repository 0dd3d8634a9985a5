"""stablehlo.dot_general (and the deprecated dot / einsum / unary_einsum)
against JAX's CPU backend and XLA: batch and contracting dimensions,
wrapping integer accumulation in the result type, narrow floats computed in
f32, complex products rounded like XLA, i1, empty contractions."""
import ml_dtypes
import numpy as np
import pytest
import jax.numpy as jnp
from jax import lax

from tests.support.oracle import assert_same_as_jax
from tests.support.xla_oracle import assert_close, ours_and_xla

RNG = np.random.default_rng(3)


def _data(dtype, shape):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    values = RNG.normal(size=shape)
    if dtype.kind == "c":
        values = values + 1j * RNG.normal(size=shape)
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint64, np.int64,
                                   np.float32, np.float64, np.complex64, np.complex128,
                                   np.float16, ml_dtypes.bfloat16])
def test_matmul(dtype):
    a, b = _data(dtype, (5, 7)), _data(dtype, (7, 3))
    assert_same_as_jax(lambda x, y: lax.dot(x, y), a, b, **_tolerance(dtype))


def _tolerance(dtype) -> dict:
    """Summation order is XLA's business: allow a few ulps (absolute ones
    too, for sums that cancel)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return dict(rtol=0)
    eps = float(np.finfo(dtype).eps) if dtype.kind != "V" else 2.0 ** -7
    return dict(rtol=8 * eps, atol=8 * eps)


def test_integer_accumulation_wraps_in_the_preferred_type():
    a, b = _data(np.int8, (4, 30)), _data(np.int8, (30, 2))
    assert_same_as_jax(lambda x, y: lax.dot(x, y, preferred_element_type=np.int8), a, b)
    assert_same_as_jax(lambda x, y: lax.dot(x, y, preferred_element_type=np.int32), a, b)
    u = _data(np.uint16, (3, 9))
    assert_same_as_jax(lambda x, y: lax.dot(x, y, preferred_element_type=np.uint32), u, u.T.copy())


def test_narrow_floats_accumulate_in_f32():
    a, b = _data(ml_dtypes.bfloat16, (3, 200)), _data(ml_dtypes.bfloat16, (200, 4))
    assert_same_as_jax(lambda x, y: lax.dot(x, y), a, b, rtol=1e-2)
    assert_same_as_jax(lambda x, y: lax.dot(x, y, preferred_element_type=np.float32), a, b,
                       rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("numbers,lhs_shape,rhs_shape", [
    ((((2,), (1,)), ((0,), (0,))), (3, 4, 5), (3, 5, 6)),          # batch matmul
    ((((1, 3), (0, 2)), ((), ())), (2, 3, 4, 5), (3, 6, 5)),       # two contracting dims
    ((((0,), (2,)), ((1, 3), (0, 1))), (4, 2, 3, 7), (2, 7, 4)),   # batch dims not leading
    ((((), ()), ((0,), (0,))), (3, 2), (3, 4)),                    # outer product per batch
])
def test_dimension_numbers(numbers, lhs_shape, rhs_shape):
    a, b = _data(np.float32, lhs_shape), _data(np.float32, rhs_shape)
    assert_same_as_jax(lambda x, y: lax.dot_general(x, y, numbers), a, b, rtol=1e-5)
    a, b = _data(np.int16, lhs_shape), _data(np.int16, rhs_shape)
    assert_same_as_jax(lambda x, y: lax.dot_general(x, y, numbers), a, b)


def test_empty_contraction_gives_zeros():
    a, b = np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)
    assert_same_as_jax(lambda x, y: x @ y, a, b)


def test_einsum_lowers_to_dot_general():
    a, b = _data(np.float32, (2, 3, 4)), _data(np.float32, (4, 3, 5))
    assert_same_as_jax(lambda x, y: jnp.einsum("bij,jik->bk", x, y), a, b, rtol=1e-5, atol=1e-6)


_DEPRECATED = """
func.func @main(%a: tensor<4x3xi8>, %b: tensor<3xi8>, %c: tensor<3x5xi8>, %d: tensor<4xi1>, %e: tensor<4x2xi1>)
    -> (tensor<4xi8>, tensor<4x5xi32>, tensor<4x5xi8>, tensor<2xi1>) {
  %0 = "stablehlo.dot"(%a, %b) : (tensor<4x3xi8>, tensor<3xi8>) -> tensor<4xi8>
  %1 = "stablehlo.dot"(%a, %c) : (tensor<4x3xi8>, tensor<3x5xi8>) -> tensor<4x5xi32>
  %2 = "stablehlo.einsum"(%a, %c) {einsum_config = "ab,bc->ac"} : (tensor<4x3xi8>, tensor<3x5xi8>) -> tensor<4x5xi8>
  %4 = "stablehlo.dot"(%d, %e) : (tensor<4xi1>, tensor<4x2xi1>) -> tensor<2xi1>
  return %0, %1, %2, %4 : tensor<4xi8>, tensor<4x5xi32>, tensor<4x5xi8>, tensor<2xi1>
}
"""


def test_deprecated_dot_and_einsum():
    args = [_data(np.int8, (4, 3)), _data(np.int8, (3,)), _data(np.int8, (3, 5)),
            np.array([True, False, True, False]), _data(np.bool_, (4, 2))]
    ours, theirs = ours_and_xla(_DEPRECATED, args)
    assert_close(ours, theirs, exact=True)


_UNARY_EINSUM = """
func.func @main(%a: tensor<4x3xi8>) -> tensor<3xi8> {
  %0 = "stablehlo.unary_einsum"(%a) {einsum_config = "ab->b"} : (tensor<4x3xi8>) -> tensor<3xi8>
  return %0 : tensor<3xi8>
}
"""


def test_unary_einsum_is_a_wrapping_sum():
    """XLA cannot compile unary_einsum any more: compare with JAX's sum."""
    import jax
    from pjrt_ref.interpreter import load
    a = _data(np.int8, (4, 3))
    ours = load(_UNARY_EINSUM)(a)[0]
    theirs = np.asarray(jax.jit(lambda x: jnp.sum(x, axis=0, dtype=np.int8))(a))
    np.testing.assert_array_equal(ours, theirs)
