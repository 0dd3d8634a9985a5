"""scatter against JAX's cpu backend and the StableHLO reference interpreter:
the recognised bodies (add, multiply, max, min, replace, and/or), general
bodies run through the region, duplicates, out-of-bounds windows, batching
dims and several inputs."""
from __future__ import annotations

from tests.support.oracle import assert_same_as_jax, run_reference_interpreter  # first: pins JAX to cpu
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from pjrt_ref.interpreter import load

PROMISE = lax.GatherScatterMode.PROMISE_IN_BOUNDS
ROWS = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                   scatter_dims_to_operand_dims=(0,))
SCATTERS = {"add": lax.scatter_add, "mul": lax.scatter_mul, "max": lax.scatter_max,
            "min": lax.scatter_min, "replace": lax.scatter, "sub": lax.scatter_sub}


def scatter_fn(kind, dims=ROWS, mode=PROMISE):
    return lambda x, i, u: SCATTERS[kind](x, i, u, dims, mode=mode)


def operand_and_updates(dtype, rows=6, updates=5):
    rng = np.random.default_rng(1)
    operand = rng.integers(-9, 9, size=(rows, 3)).astype(dtype)
    update = rng.integers(-9, 9, size=(updates, 3)).astype(dtype)
    return operand, update


@pytest.mark.parametrize("kind", ["add", "mul", "max", "min", "replace", "sub"])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint32, ml_dtypes.bfloat16])
def test_duplicate_indices_apply_in_order(kind, dtype):
    operand, update = operand_and_updates(dtype)
    indices = np.array([[2], [0], [2], [5], [2]], np.int32)
    assert_same_as_jax(scatter_fn(kind), operand, indices, update)


def test_integer_add_wraps():
    operand = np.full((2, 3), 120, np.int8)
    update = np.full((3, 3), 100, np.int8)
    assert_same_as_jax(scatter_fn("add"), operand, np.array([[1], [1], [0]], np.int32), update)


@pytest.mark.parametrize("kind", ["add", "replace"])
def test_out_of_bounds_windows_are_skipped(kind):
    operand = np.zeros((5,), np.float32)
    dims = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(),
                                       scatter_dims_to_operand_dims=(0,))
    indices = np.array([[3], [-1], [4], [0], [7]], np.int32)
    update = np.arange(1, 11, dtype=np.float32).reshape(5, 2)
    # Windows starting at -1 and 4 are partly outside: XLA skips them whole.
    assert_same_as_jax(scatter_fn(kind, dims), operand, indices, update)


def test_fill_or_drop_mode():
    operand, update = operand_and_updates(np.float64)
    indices = np.array([[2], [-1], [6], [5], [100]], np.int32)
    assert_same_as_jax(scatter_fn("add", mode=lax.GatherScatterMode.FILL_OR_DROP),
                       operand, indices, update)


def test_window_dims_before_scatter_dims_and_2d_starts():
    operand = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    dims = lax.ScatterDimensionNumbers(update_window_dims=(0, 2), inserted_window_dims=(1,),
                                       scatter_dims_to_operand_dims=(1, 2))
    indices = np.array([[0, 1], [4, 3], [2, 0]], np.int32)
    update = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2) + 100
    assert_same_as_jax(scatter_fn("replace", dims), operand, indices, update)
    assert_same_as_jax(scatter_fn("add", dims), operand, indices, update)


def test_batching_dims():
    operand = np.zeros((3, 4), np.int32)
    dims = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(1,),
                                       scatter_dims_to_operand_dims=(1,),
                                       operand_batching_dims=(0,),
                                       scatter_indices_batching_dims=(0,))
    indices = np.array([[[1], [1]], [[0], [3]], [[2], [9]]], np.int32)   # (3, 2, 1)
    update = np.arange(1, 7, dtype=np.int32).reshape(3, 2)
    assert_same_as_jax(scatter_fn("add", dims), operand, indices, update)


def test_general_body_runs_the_region():
    operand, update = operand_and_updates(np.float32)
    indices = np.array([[1], [4], [1], [0], [3]], np.int32)
    apply = lambda x, i: lax.scatter_apply(x, i, lambda v: v * 2 + 1, ROWS,  # noqa: E731
                                           update_shape=(5, 3), mode=PROMISE)
    assert_same_as_jax(apply, operand, indices)


def test_scalar_operand_and_empty_updates():
    dims = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                       scatter_dims_to_operand_dims=(0,))
    operand = np.arange(4, dtype=np.float32)
    assert_same_as_jax(scatter_fn("add", dims), operand, np.zeros((0, 1), np.int32),
                       np.zeros((0,), np.float32))
    assert_same_as_jax(scatter_fn("max", dims), operand, np.array([[3], [3]], np.int32),
                       np.array([7, -1], np.float32))


# Two inputs updated together by one body (JAX cannot emit this), with the
# index vector along dim 0 of the indices.
VARIADIC = """
func.func @main(%a: tensor<4x3xf32>, %b: tensor<4x3xi32>, %i: tensor<1x2xi64>,
                %ua: tensor<2x3xf32>, %ub: tensor<2x3xi32>) -> (tensor<4x3xf32>, tensor<4x3xi32>) {
  %0:2 = "stablehlo.scatter"(%a, %b, %i, %ua, %ub) ({
  ^bb0(%x: tensor<f32>, %y: tensor<i32>, %ux: tensor<f32>, %uy: tensor<i32>):
    %s = stablehlo.subtract %x, %ux : tensor<f32>
    %m = stablehlo.maximum %y, %uy : tensor<i32>
    stablehlo.return %s, %m : tensor<f32>, tensor<i32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1],
        inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 0>}
     : (tensor<4x3xf32>, tensor<4x3xi32>, tensor<1x2xi64>, tensor<2x3xf32>, tensor<2x3xi32>)
     -> (tensor<4x3xf32>, tensor<4x3xi32>)
  return %0#0, %0#1 : tensor<4x3xf32>, tensor<4x3xi32>
}
"""


def test_several_inputs_with_one_body():
    args = [np.arange(12, dtype=np.float32).reshape(4, 3),
            np.arange(12, dtype=np.int32).reshape(4, 3),
            np.array([[3, 1]], np.int64), np.full((2, 3), 0.5, np.float32),
            np.array([[0, 20, 0], [9, 0, 9]], np.int32)]
    ours = load(VARIADIC)(*args)
    theirs = run_reference_interpreter(VARIADIC, args)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


# One scatter per program: the reference interpreter updates a scatter's
# input in place, so a second scatter of the same value would see the first.
BITWISE_SCATTER = """
func.func @main(%a: tensor<5xTYPE>, %i: tensor<3x1xi32>, %u: tensor<3xTYPE>) -> tensor<5xTYPE> {
  %0 = "stablehlo.scatter"(%a, %i, %u) ({
  ^bb0(%x: tensor<TYPE>, %y: tensor<TYPE>):
    %r = stablehlo.BODY %y, %x : tensor<TYPE>
    stablehlo.return %r : tensor<TYPE>
  }) {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
        scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}
     : (tensor<5xTYPE>, tensor<3x1xi32>, tensor<3xTYPE>) -> tensor<5xTYPE>
  return %0 : tensor<5xTYPE>
}
"""


@pytest.mark.parametrize("body", ["and", "or", "xor"])
def test_bitwise_bodies_on_integers_and_booleans(body):
    text = BITWISE_SCATTER.replace("BODY", body)
    a, i, u = np.array([6, 3, 0, 0, 5], np.int8), np.array([[0], [2], [0]], np.int32), \
        np.array([3, 7, 1], np.int8)
    (expected,) = run_reference_interpreter(text.replace("TYPE", "i8"), [a, i, u])
    (ours,) = load(text.replace("TYPE", "i8"))(a, i, u)
    np.testing.assert_array_equal(ours, expected)
    # The same on i1, with the i8 program on 0/1 values as the oracle (the
    # oracle's array conversion does not carry i1 arrays faithfully).
    a, u = a % 2, u % 2
    (expected,) = run_reference_interpreter(text.replace("TYPE", "i8"), [a, i, u])
    (ours,) = load(text.replace("TYPE", "i1"))(a.astype(bool), i, u.astype(bool))
    np.testing.assert_array_equal(ours, expected.astype(bool))


@pytest.mark.parametrize("kind", ["min", "max"])
def test_boolean_min_max(kind):
    operand = np.array([True, True, False, False, True])
    assert_same_as_jax(lambda a, u: getattr(a.at[np.array([0, 2, 4, 2])], kind)(u), operand,
                       np.array([False, True, True, False]))
