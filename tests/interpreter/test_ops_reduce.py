"""stablehlo.reduce against JAX's CPU backend and the reference interpreter.

Covers the ufunc fast path (sum/prod/max/min/and/or/xor, wrapping integers,
narrow floats, complex, i1), the vectorised fold (argmax/argmin with NaNs
and ties, variadic bodies), the element-by-element fallback, empty
dimensions and reductions over no dimension.
"""
import ml_dtypes
import numpy as np
import pytest
from jax import lax
import jax.numpy as jnp

from tests.support.oracle import assert_same_as_jax, compare_with_jax, run_reference_interpreter
from pjrt_ref.interpreter import load

RNG = np.random.default_rng(0)


def _data(dtype, shape=(4, 5, 3)):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    values = RNG.normal(size=shape) * 3
    if dtype.kind == "c":
        values = values + 1j * RNG.normal(size=shape)
    return values.astype(dtype)


_REAL_TYPES = [np.int8, np.uint16, np.int32, np.uint64, np.float32, np.float64, np.float16,
               ml_dtypes.bfloat16]


_REDUCERS = {
    "sum": lambda v: lax.reduce(v, np.zeros((), v.dtype), lax.add, (0, 2)),
    "prod": lambda v: lax.reduce(v, np.ones((), v.dtype), lax.mul, (1,)),
    "max": lambda v: lax.reduce_max(v, (0, 1, 2)),
    "min": lambda v: lax.reduce_min(v, (2,)),
}


@pytest.mark.parametrize("reducer", ["sum", "prod", "max", "min"])
def test_monoid_reductions(reducer):
    """Every element type in one program per reducer (one compilation)."""
    types = _REAL_TYPES + ([np.complex64, np.complex128] if reducer in ("sum", "prod") else [])
    arrays = [_data(t) for t in types]
    fn = lambda *vs: [_REDUCERS[reducer](v) for v in vs]  # noqa: E731
    ours, theirs = compare_with_jax(fn, *arrays)
    for a, b, t in zip(ours, theirs, types):
        assert a.dtype == b.dtype and a.shape == b.shape
        rtol = 1e-2 if np.dtype(t).itemsize <= 2 else 1e-6
        if np.dtype(t).kind in "iu":
            np.testing.assert_array_equal(a, b)
        else:
            wide = np.complex128 if np.dtype(t).kind == "c" else np.float64
            np.testing.assert_allclose(a.astype(wide), b.astype(wide), rtol=rtol)


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int64])
def test_bitwise_reductions(dtype):
    x = _data(dtype)
    ones = np.array(True) if dtype == np.bool_ else ~np.zeros((), dtype)
    zero = np.zeros((), dtype)
    fn = lambda v: [lax.reduce(v, ones, lax.bitwise_and, (0, 1)),  # noqa: E731
                    lax.reduce(v, zero, lax.bitwise_or, (0, 1)),
                    lax.reduce(v, zero, lax.bitwise_xor, (0, 2)),
                    lax.reduce(v, zero, lax.max, (1,))]
    assert_same_as_jax(fn, x)


def test_nonzero_init_is_folded_in():
    x = _data(np.int32)
    assert_same_as_jax(lambda v: lax.reduce(v, np.int32(7), lax.add, (1,)), x)
    assert_same_as_jax(lambda v: lax.reduce(v, np.float32(100.0), lax.max, (0, 2)),
                       x.astype(np.float32))


@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin])
def test_argmax_argmin_with_nans_and_ties(fn):
    x = np.array([[1.0, 3.0, 3.0, -1.0], [np.nan, 2.0, np.nan, 5.0], [0.0, -0.0, 0.0, 0.0],
                  [-np.inf, -np.inf, np.inf, np.inf]], np.float32)
    assert_same_as_jax(lambda v: fn(v, axis=1), x)
    assert_same_as_jax(lambda v: fn(v, axis=0), x)
    assert_same_as_jax(lambda v: fn(v), _data(np.float32, (37, 11)))
    assert_same_as_jax(lambda v: fn(v, axis=0), _data(np.int8, (50, 3)))


def test_variadic_reduce_with_custom_body():
    x, y = _data(np.float32, (6, 7)), _data(np.int32, (6, 7))

    def body(a, b):
        # max of the floats, and the smallest int among the maxima
        (av, ai), (bv, bi) = a, b
        take_a = av > bv
        tie = av == bv
        return (lax.select(take_a, av, bv),
                lax.select(tie, lax.min(ai, bi), lax.select(take_a, ai, bi)))

    fn = lambda u, v: lax.reduce((u, v), (np.float32(-np.inf), np.int32(0)), body, (1,))
    assert_same_as_jax(fn, x, y)


def test_empty_reduced_dimension_gives_init():
    x = np.zeros((0, 3), np.float32)
    assert_same_as_jax(lambda v: lax.reduce(v, np.float32(2.5), lax.add, (0,)), x)
    assert_same_as_jax(lambda v: lax.reduce_max(v, (0,)), x)
    assert_same_as_jax(lambda v: lax.reduce(v, np.int8(3), lax.mul, (1, 2)),
                       np.zeros((2, 4, 0), np.int8))


def test_reduce_of_single_elements_is_the_element_as_in_xla():
    x = _data(np.int32, (3, 4, 1))
    assert_same_as_jax(lambda v: lax.reduce(v, np.int32(5), lax.add, ()), x)
    assert_same_as_jax(lambda v: lax.reduce(v, np.int32(5), lax.add, (2,)), x)


_SCALAR_BODY = """
func.func @main(%x: tensor<4x6xf32>) -> tensor<6xf32> {
  %init = stablehlo.constant dense<1.0> : tensor<f32>
  %r = stablehlo.reduce(%x init: %init) across dimensions = [0] : (tensor<4x6xf32>, tensor<f32>) -> tensor<6xf32>
   reducer(%a: tensor<f32>, %b: tensor<f32>) {
    %ab = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<1xf32>
    %bb = stablehlo.broadcast_in_dim %b, dims = [] : (tensor<f32>) -> tensor<1xf32>
    %s = stablehlo.subtract %ab, %bb : tensor<1xf32>
    %r = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
    stablehlo.return %r : tensor<f32>
  }
  return %r : tensor<6xf32>
}
"""


def test_non_elementwise_body_runs_element_by_element():
    """A body with shape ops runs once per element, in order (left fold)."""
    x = _data(np.float32, (4, 6))
    ours = load(_SCALAR_BODY)(x)
    theirs = run_reference_interpreter(_SCALAR_BODY, [x])
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e5m2, ml_dtypes.int4, ml_dtypes.uint4,
                                   ml_dtypes.float4_e2m1fn])
def test_narrow_types_through_reduce_window_and_sort(dtype):
    """ml_dtypes' narrow types: no ufunc loops for 4-bit ints, no stride
    tricks for user dtypes, f4's sign bit inside its byte."""
    import jax.numpy as jnp
    if np.dtype(dtype).name.startswith("float"):
        x = (RNG.normal(size=(4, 6)) * 3).astype(dtype)
    else:
        x = RNG.integers(0, 7, (4, 6)).astype(dtype)
    fn = lambda v: [lax.reduce(v, np.zeros((), v.dtype), lax.add, (1,)),  # noqa: E731
                    lax.reduce_max(v, (0,)),
                    lax.reduce_window(v, np.zeros((), v.dtype), lax.add, (2, 2), (1, 1), "VALID"),
                    jnp.cumsum(v, axis=1, dtype=v.dtype),
                    jnp.sort(v, axis=1)]
    ours, theirs = compare_with_jax(fn, x)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.astype(np.float64), b.astype(np.float64))
