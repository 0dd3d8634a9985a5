"""Control flow: while, if, case, optimization_barrier, composite, async_start/done.

JAX programs (lax.while_loop, fori_loop, scan, cond, switch) are compared with
JAX's cpu backend; hand-written StableHLO (out-of-range `case` index, `if`,
captured values, composite, async) with the StableHLO reference interpreter.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.oracle import assert_same_as_jax, assert_same_as_reference, run_reference_interpreter

import jax.numpy as jnp
from jax import lax

from pjrt_ref.interpreter import load




# --- JAX programs -----------------------------------------------------------

def test_while_loop_counts_up_to_a_bound():
    def f(x, n):
        return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))

    assert_same_as_jax(f, np.float32(1.5), np.int32(5))


def test_while_loop_with_zero_iterations_returns_its_operands():
    def f(x):
        return lax.while_loop(lambda c: c[0] > 100, lambda c: (c[0] + 1, c[1] + 1.0), (0, x))

    assert_same_as_jax(f, np.arange(3, dtype=np.float32))


def test_fori_loop_captures_values_from_the_enclosing_function():
    def f(x, y):
        return lax.fori_loop(0, 7, lambda i, acc: acc * y + i.astype(acc.dtype), x)

    assert_same_as_jax(f, np.ones(4, np.float64), np.full(4, 0.5))


def test_scan_cumulative_sum_and_stacked_outputs():
    def f(xs):
        def step(carry, x):
            carry = carry + x
            return carry, carry * 2

        return lax.scan(step, jnp.zeros(3, xs.dtype), xs)

    assert_same_as_jax(f, np.arange(12, dtype=np.int32).reshape(4, 3))


def test_nested_loops():
    def f(n):
        def outer(i, acc):
            return lax.fori_loop(0, i, lambda j, a: a + j, acc)

        return lax.fori_loop(0, n, outer, 0)

    assert_same_as_jax(f, np.int32(6))


@pytest.mark.parametrize("pred", [True, False])
def test_cond_takes_the_right_branch(pred):
    def f(p, x):
        return lax.cond(p, lambda v: v * 3.0, lambda v: v - 1.0, x)

    assert_same_as_jax(f, np.bool_(pred), np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("index", [-3, 0, 1, 2, 9])
def test_switch_including_indices_jax_clamps(index):
    def f(i, x):
        return lax.switch(i, [lambda v: v + 1, lambda v: v * v, lambda v: -v], x)

    assert_same_as_jax(f, np.int32(index), np.arange(5, dtype=np.int32))


def test_optimization_barrier_is_the_identity():
    def f(x, y):
        a, b = lax.optimization_barrier((x * 2, y))
        return a + 1, b

    assert_same_as_jax(f, np.arange(3, dtype=np.float32), np.int32(7))


# --- Hand-written StableHLO, against the reference interpreter -------------

CASE = """
func.func @main(%index: tensor<i32>, %x: tensor<3xi64>) -> (tensor<3xi64>, tensor<i64>) {
  %r:2 = "stablehlo.case"(%index) ({
    %c = stablehlo.constant dense<10> : tensor<i64>
    stablehlo.return %x, %c : tensor<3xi64>, tensor<i64>
  }, {
    %y = stablehlo.add %x, %x : tensor<3xi64>
    %c = stablehlo.constant dense<20> : tensor<i64>
    stablehlo.return %y, %c : tensor<3xi64>, tensor<i64>
  }, {
    %y = stablehlo.multiply %x, %x : tensor<3xi64>
    %c = stablehlo.constant dense<30> : tensor<i64>
    stablehlo.return %y, %c : tensor<3xi64>, tensor<i64>
  }) : (tensor<i32>) -> (tensor<3xi64>, tensor<i64>)
  return %r#0, %r#1 : tensor<3xi64>, tensor<i64>
}
"""


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 3, 2**31 - 1, -2**31])
def test_case_out_of_range_index_selects_the_last_branch(index):
    assert_same_as_reference(CASE, np.int32(index), np.array([1, 2, 3], np.int64))


IF = """
func.func @main(%p: tensor<i1>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %r = "stablehlo.if"(%p) ({
    %y = stablehlo.multiply %x, %x : tensor<2xf32>
    stablehlo.return %y : tensor<2xf32>
  }, {
    stablehlo.return %x : tensor<2xf32>
  }) : (tensor<i1>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}
"""


@pytest.mark.parametrize("pred", [True, False])
def test_if(pred):
    assert_same_as_reference(IF, np.bool_(pred), np.array([1.5, -2.0], np.float32))


WHILE_WITH_CAPTURE = """
func.func @main(%x: tensor<i64>, %limit: tensor<i64>) -> (tensor<i64>, tensor<i64>) {
  %one = stablehlo.constant dense<1> : tensor<i64>
  %zero = stablehlo.constant dense<0> : tensor<i64>
  %r:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i64>, tensor<i64>
  cond {
    %c = stablehlo.compare LT, %i, %limit : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %i1 = stablehlo.add %i, %one : tensor<i64>
    %a1 = stablehlo.multiply %acc, %i1 : tensor<i64>
    stablehlo.return %i1, %a1 : tensor<i64>, tensor<i64>
  }
  return %r#0, %r#1 : tensor<i64>, tensor<i64>
}
"""


@pytest.mark.parametrize("limit", [0, 1, 10])
def test_while_sees_captured_values(limit):
    assert_same_as_reference(WHILE_WITH_CAPTURE, np.int64(3), np.int64(limit))


WHILE_CARRIES_TOKEN = """
func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %t0 = TOKEN_SOURCE
  %t = stablehlo.after_all %t0, %t0 : !stablehlo.token
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %three = stablehlo.constant dense<3> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:3 = stablehlo.while(%i = %zero, %v = %x, %tok = %t) : tensor<i32>, tensor<f32>, !stablehlo.token
  cond {
    %c = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %i1 = stablehlo.add %i, %one : tensor<i32>
    %v1 = stablehlo.add %v, %v : tensor<f32>
    %tok1 = stablehlo.after_all %tok : !stablehlo.token
    stablehlo.return %i1, %v1, %tok1 : tensor<i32>, tensor<f32>, !stablehlo.token
  }
  %b:2 = stablehlo.optimization_barrier %r#1, %r#2 : tensor<f32>, !stablehlo.token
  return %b#0 : tensor<f32>
}
"""


def test_while_carries_a_token_through_after_all_and_a_barrier():
    text = WHILE_CARRIES_TOKEN.replace("TOKEN_SOURCE", "stablehlo.after_all : !stablehlo.token")
    assert_same_as_reference(text, np.float32(1.25))


def test_create_token_is_after_all_without_inputs():
    # The reference interpreter has no create_token: compare with after_all.
    ours = load(WHILE_CARRIES_TOKEN.replace("TOKEN_SOURCE",
                                            "stablehlo.create_token : !stablehlo.token"))
    reference = WHILE_CARRIES_TOKEN.replace("TOKEN_SOURCE", "stablehlo.after_all : !stablehlo.token")
    x = np.float32(-0.5)
    np.testing.assert_array_equal(ours(x)[0], run_reference_interpreter(reference, [x])[0])


COMPOSITE = """
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %r = stablehlo.composite "my.fma_like" %x, %y {
    composite_attributes = {scale = 2.0 : f32}, decomposition = @fma_like, version = 1 : i32
  } : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func private @fma_like(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %m = stablehlo.multiply %a, %b : tensor<4xf32>
  %s = stablehlo.add %m, %a : tensor<4xf32>
  return %s : tensor<4xf32>
}
"""


def test_composite_runs_its_decomposition():
    x = np.array([1, 2, 3, 4], np.float32)
    assert_same_as_reference(COMPOSITE, x, x[::-1].copy())


COMPOSITE_WITH_REGION = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "stablehlo.composite"(%x) <{decomposition = @square, name = "my.reduce_like"}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
func.func private @square(%a: tensor<4xf32>) -> tensor<4xf32> {
  %m = stablehlo.multiply %a, %a : tensor<4xf32>
  return %m : tensor<4xf32>
}
"""


def test_composite_regions_are_ignored_by_the_decomposition():
    assert_same_as_reference(COMPOSITE_WITH_REGION, np.array([1, -2, 3, 0.5], np.float32))


ASYNC = """
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %f = "stablehlo.async_start"(%x) ({
    ^bb0(%a: tensor<2x3xf32>):
    %g = "stablehlo.all_gather"(%a) {all_gather_dim = 1 : i64,
        replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
    "stablehlo.return"(%g) : (tensor<2x3xf32>) -> ()
  }) : (tensor<2x3xf32>) -> !stablehlo.future<tensor<2x3xf32>>
  %r = "stablehlo.async_done"(%f) : (!stablehlo.future<tensor<2x3xf32>>) -> tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}
"""


def test_async_start_and_done_run_the_wrapped_op():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(load(ASYNC)(x)[0], x)
