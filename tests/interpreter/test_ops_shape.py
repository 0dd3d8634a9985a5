"""Shape and slicing ops against JAX's cpu backend (and the StableHLO
reference interpreter where JAX cannot emit the op)."""
from __future__ import annotations

from tests.support.oracle import assert_same_as_jax, run_reference_interpreter  # first: pins JAX to cpu
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from pjrt_ref.interpreter import load

DTYPES = [np.float32, np.int8, np.uint16, np.bool_, np.complex64, ml_dtypes.bfloat16]


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    values = rng.integers(-50, 50, size=shape)
    if np.dtype(dtype) == np.bool_:
        return values > 0
    if np.dtype(dtype).kind == "c":
        return (values + 1j * rng.integers(-5, 5, size=shape)).astype(dtype)
    if np.dtype(dtype).kind == "u":
        values = np.abs(values)
    return values.astype(dtype)


def assert_same_as_reference(text, *args):
    """Run `text` on pjrt-ref and on StableHLO's reference interpreter."""
    ours = load(text)(*args)
    theirs = run_reference_interpreter(text, args)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_transpose_reverse_keep_element_types(dtype):
    x = sample((2, 3, 4), dtype)
    assert_same_as_jax(lambda a: (lax.reshape(a, (4, 6)), lax.transpose(a, (2, 0, 1)),
                                  lax.rev(a, (0, 2))), x)


def test_broadcast_in_dim_with_unsorted_dims_and_size_one_expansion():
    x = sample((3, 1), np.float32)
    assert_same_as_jax(lambda a: lax.broadcast_in_dim(a, (2, 5, 3), (2, 1)), x)
    assert_same_as_jax(lambda a: lax.broadcast_in_dim(a, (3, 4), (0, 1)), x)
    assert_same_as_jax(lambda a: lax.broadcast_in_dim(a[0, 0], (2, 2), ()), x)


def test_deprecated_broadcast_prepends_sizes():
    text = """
    func.func @main(%a: tensor<2x3xi32>) -> tensor<4x1x2x3xi32> {
      %0 = "stablehlo.broadcast"(%a) {broadcast_sizes = array<i64: 4, 1>} : (tensor<2x3xi32>) -> tensor<4x1x2x3xi32>
      return %0 : tensor<4x1x2x3xi32>
    }"""
    (out,) = load(text)(np.arange(6, dtype=np.int32).reshape(2, 3))
    # broadcast is broadcast_in_dim onto the trailing dims; the reference
    # interpreter runs that form.
    reference = text.replace('"stablehlo.broadcast"', '"stablehlo.broadcast_in_dim"').replace(
        "broadcast_sizes = array<i64: 4, 1>", "broadcast_dimensions = array<i64: 2, 3>")
    (expected,) = run_reference_interpreter(reference, [np.arange(6, dtype=np.int32).reshape(2, 3)])
    np.testing.assert_array_equal(out, expected)


def test_concatenate_with_empty_operand():
    a, b, c = sample((2, 3), np.int32), np.zeros((2, 0), np.int32), sample((2, 4), np.int32, 1)
    assert_same_as_jax(lambda x, y, z: lax.concatenate([x, y, z], 1), a, b, c)


def test_slice_with_strides():
    x = sample((7, 9), np.float64)
    assert_same_as_jax(lambda a: lax.slice(a, (1, 0), (7, 9), (2, 4)), x)
    assert_same_as_jax(lambda a: lax.slice(a, (3, 3), (3, 5)), x)


@pytest.mark.parametrize("config", [
    [(1, 2, 0), (0, 0, 3)],
    [(-1, 2, 1), (2, -3, 0)],       # negative padding crops
    [(-2, -2, 2), (0, 0, 0)],       # crops into interior padding
    [(3, -4, 0), (1, 1, 1)],        # low padding, then more cropped than the data
])
def test_pad_negative_and_interior(config):
    x = sample((3, 4), np.float32)
    assert_same_as_jax(lambda a: lax.pad(a, np.float32(-7), config), x)


def test_pad_of_empty_operand():
    x = np.zeros((0, 2), np.int32)
    assert_same_as_jax(lambda a: lax.pad(a, np.int32(5), [(1, 2, 3), (0, 1, 1)]), x)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float32, ml_dtypes.bfloat16,
                                   np.complex64, np.uint64, np.int8])
def test_iota(dtype):
    assert_same_as_jax(lambda: (lax.broadcasted_iota(dtype, (3, 5), 1),
                                lax.broadcasted_iota(dtype, (4,), 0)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint32, np.uint64, np.float32])
def test_iota_past_a_narrow_types_range(dtype):
    """300 indices: counted in the type where they fit, else counted wide and
    converted (int8 wraps, as XLA's conversion does)."""
    assert_same_as_jax(lambda: (lax.broadcasted_iota(dtype, (300,), 0),
                                lax.broadcasted_iota(dtype, (2, 300), 1)))


def test_dynamic_slice_clamps_start_indices():
    x = sample((5, 6), np.int32)
    for i, j in [(0, 0), (4, 5), (100, -100), (-1, 3)]:
        # JAX wraps negative indices itself before dynamic_slice; the op
        # then clamps what is out of range.
        assert_same_as_jax(lambda a, p, q: lax.dynamic_slice(a, (p, q), (2, 3)), x,
                           np.int32(i), np.int32(j))


def test_dynamic_slice_and_update_clamp_per_spec():
    text = """
    func.func @main(%a: tensor<4x4xi32>, %u: tensor<2x3xi32>, %i: tensor<i64>, %j: tensor<i64>)
        -> (tensor<2x2xi32>, tensor<4x4xi32>) {
      %0 = stablehlo.dynamic_slice %a, %i, %j, sizes = [2, 2] : (tensor<4x4xi32>, tensor<i64>, tensor<i64>) -> tensor<2x2xi32>
      %1 = stablehlo.dynamic_update_slice %a, %u, %i, %j : (tensor<4x4xi32>, tensor<2x3xi32>, tensor<i64>, tensor<i64>) -> tensor<4x4xi32>
      return %0, %1 : tensor<2x2xi32>, tensor<4x4xi32>
    }"""
    a = np.arange(16, dtype=np.int32).reshape(4, 4)
    u = -np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    for i, j in [(-1, 3), (2, 1), (9, -9)]:
        assert_same_as_reference(text, a, u, np.int64(i), np.int64(j))


def test_dynamic_update_slice_with_unsigned_indices():
    x, u = sample((6,), np.float32), sample((2,), np.float32, 1)
    assert_same_as_jax(lambda a, b, i: lax.dynamic_update_slice(a, b, (i,)), x, u, np.uint32(5))


def test_get_dimension_size_and_tuples():
    text = """
    func.func @main(%a: tensor<5x6xf32>) -> (tensor<i32>, tensor<5x6xf32>) {
      %0 = stablehlo.get_dimension_size %a, dim = 1 : (tensor<5x6xf32>) -> tensor<i32>
      %1 = stablehlo.tuple %a, %0 : tuple<tensor<5x6xf32>, tensor<i32>>
      %2 = stablehlo.get_tuple_element %1[1] : (tuple<tensor<5x6xf32>, tensor<i32>>) -> tensor<i32>
      %3 = stablehlo.get_tuple_element %1[0] : (tuple<tensor<5x6xf32>, tensor<i32>>) -> tensor<5x6xf32>
      return %2, %3 : tensor<i32>, tensor<5x6xf32>
    }"""
    assert_same_as_reference(text, sample((5, 6), np.float32))
