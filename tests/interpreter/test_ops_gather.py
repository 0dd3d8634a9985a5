"""gather, dynamic_gather and torch_index_select against JAX's cpu backend
and the StableHLO reference interpreter."""
from __future__ import annotations

from tests.support.oracle import assert_same_as_jax, run_reference_interpreter  # first: pins JAX to cpu
import numpy as np
from jax import lax

from pjrt_ref.interpreter import load

PROMISE = lax.GatherScatterMode.PROMISE_IN_BOUNDS


def gather_fn(dims, slice_sizes, mode=PROMISE):
    return lambda operand, indices: lax.gather(operand, indices, dims, slice_sizes, mode=mode)


def test_gather_rows_with_out_of_range_indices_clamped():
    operand = np.arange(40, dtype=np.float32).reshape(10, 4)
    indices = np.array([[0], [9], [12], [-3], [7]], np.int32)
    dims = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                      start_index_map=(0,))
    assert_same_as_jax(gather_fn(dims, (1, 4)), operand, indices)
    # A window of 3 rows: starts are clamped to [0, 10 - 3].
    dims = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(),
                                      start_index_map=(0,))
    assert_same_as_jax(gather_fn(dims, (3, 2)), operand, indices)


def test_gather_two_dim_starts_in_permuted_order():
    operand = np.arange(5 * 6 * 7, dtype=np.int64).reshape(5, 6, 7)
    indices = np.array([[[1, 2], [4, 0]], [[5, 5], [0, 3]], [[2, 2], [3, 1]]], np.int64)
    dims = lax.GatherDimensionNumbers(offset_dims=(1, 3), collapsed_slice_dims=(2,),
                                      start_index_map=(2, 0))
    assert_same_as_jax(gather_fn(dims, (2, 6, 1)), operand, indices)


def test_gather_with_batching_dims():
    operand = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    indices = np.array([[[1], [3]], [[0], [0]], [[2], [9]]], np.int32)  # (3, 2, 1)
    dims = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,),
                                      start_index_map=(1,), operand_batching_dims=(0,),
                                      start_indices_batching_dims=(0,))
    assert_same_as_jax(gather_fn(dims, (1, 1, 5)), operand, indices)


def test_gather_fill_mode_and_unsigned_indices():
    operand = np.arange(12, dtype=np.int32).reshape(3, 4)
    indices = np.array([[0, 1], [2, 3], [3, 0], [4294967295, 1]], np.uint32)
    dims = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0, 1),
                                      start_index_map=(0, 1))
    assert_same_as_jax(gather_fn(dims, (1, 1)), operand, indices)
    assert_same_as_jax(gather_fn(dims, (1, 1), lax.GatherScatterMode.FILL_OR_DROP),
                       operand, indices.astype(np.int32))


# The spec's gather example: batching dims and an index_vector_dim that is
# not the last one (JAX always puts it last).
SPEC_GATHER = """
func.func @main(%operand: tensor<2x3x4x2xi64>, %start_indices: tensor<2x2x3x2xi64>)
    -> tensor<2x2x3x2x2xi64> {
  %result = "stablehlo.gather"(%operand, %start_indices) {
    dimension_numbers = #stablehlo.gather<
      offset_dims = [3, 4], collapsed_slice_dims = [1], operand_batching_dims = [0],
      start_indices_batching_dims = [1], start_index_map = [2, 1], index_vector_dim = 3>,
    slice_sizes = array<i64: 1, 1, 2, 2>, indices_are_sorted = false
  } : (tensor<2x3x4x2xi64>, tensor<2x2x3x2xi64>) -> tensor<2x2x3x2x2xi64>
  return %result : tensor<2x2x3x2x2xi64>
}
"""


def test_spec_example_with_batching_dims():
    operand = np.arange(48, dtype=np.int64).reshape(2, 3, 4, 2)
    indices = np.array([[[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]],
                        [[[0, 0], [2, 1], [2, 2]], [[1, 2], [0, 1], [1, 0]]]], np.int64)
    (ours,) = load(SPEC_GATHER)(operand, indices)
    (theirs,) = run_reference_interpreter(SPEC_GATHER, [operand, indices])
    np.testing.assert_array_equal(ours, theirs)


def test_index_vector_dim_equal_to_rank_means_scalar_indices():
    text = """
    func.func @main(%operand: tensor<5x3xf32>, %idx: tensor<2x2xi32>) -> tensor<2x2x3xf32> {
      %0 = "stablehlo.gather"(%operand, %idx) {
        dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0],
                                              start_index_map = [0], index_vector_dim = 2>,
        slice_sizes = array<i64: 1, 3>} : (tensor<5x3xf32>, tensor<2x2xi32>) -> tensor<2x2x3xf32>
      return %0 : tensor<2x2x3xf32>
    }"""
    operand = np.arange(15, dtype=np.float32).reshape(5, 3)
    idx = np.array([[4, 0], [7, -2]], np.int32)
    (ours,) = load(text)(operand, idx)
    (theirs,) = run_reference_interpreter(text, [operand, idx])
    np.testing.assert_array_equal(ours, theirs)


def test_dynamic_gather_matches_static_gather():
    text = """
    func.func @main(%operand: tensor<3x4x2xi64>, %si: tensor<2x3x2xi64>, %ss: tensor<3xi64>)
        -> tensor<2x3x2x2xi64> {
      %0 = "stablehlo.dynamic_gather"(%operand, %si, %ss) {
        dimension_numbers = #stablehlo.gather<offset_dims = [2, 3], collapsed_slice_dims = [0],
                                              start_index_map = [1, 0], index_vector_dim = 2>,
        indices_are_sorted = false
      } : (tensor<3x4x2xi64>, tensor<2x3x2xi64>, tensor<3xi64>) -> tensor<2x3x2x2xi64>
      return %0 : tensor<2x3x2x2xi64>
    }"""
    args = [np.arange(24, dtype=np.int64).reshape(3, 4, 2),
            np.array([[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]], np.int64),
            np.array([1, 2, 2], np.int64)]
    (ours,) = load(text)(*args)
    (theirs,) = run_reference_interpreter(text, args)
    np.testing.assert_array_equal(ours, theirs)


def test_torch_index_select_equals_its_gather_form():
    # torch_index_select(operand, index, dim=2, batch_dims=1) written as the
    # equivalent gather, which the reference interpreter runs.
    select = """
    func.func @main(%a: tensor<2x3x4xi64>, %i: tensor<2x5xi32>) -> tensor<2x3x5xi64> {
      %0 = "stablehlo.torch_index_select"(%a, %i) {dim = 2 : i64, batch_dims = 1 : i64}
          : (tensor<2x3x4xi64>, tensor<2x5xi32>) -> tensor<2x3x5xi64>
      return %0 : tensor<2x3x5xi64>
    }"""
    as_gather = """
    func.func @main(%a: tensor<2x3x4xi64>, %i: tensor<2x5xi32>) -> tensor<2x3x5xi64> {
      %0 = "stablehlo.gather"(%a, %i) {
        dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [2],
          operand_batching_dims = [0], start_indices_batching_dims = [0],
          start_index_map = [2], index_vector_dim = 2>,
        slice_sizes = array<i64: 1, 3, 1>} : (tensor<2x3x4xi64>, tensor<2x5xi32>) -> tensor<2x3x5xi64>
      return %0 : tensor<2x3x5xi64>
    }"""
    a = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    i = np.array([[0, 1, 2, 3, 0], [3, 3, 2, 1, 0]], np.int32)
    (ours,) = load(select)(a, i)
    (theirs,) = run_reference_interpreter(as_gather, [a, i])
    np.testing.assert_array_equal(ours, theirs)
