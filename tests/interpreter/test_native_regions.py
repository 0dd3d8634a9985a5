"""Region bodies compiled by numba (interpreter/native/regions.py): scatter
update computations and sort comparators give what the interpreted region
gives (PJRT_REF_JIT=0) and what XLA CPU gives."""
from __future__ import annotations

import numpy as np

from tests.support.jit_support import assert_same_values  # noqa: E402
from tests.support.oracle import lower_to_text, run_reference_interpreter  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402


def run_both(text, args, monkeypatch):
    """(jitted results, interpreted results, the jitted program)."""
    monkeypatch.setenv("PJRT_REF_JIT", "0")
    plain = load(text)
    monkeypatch.setenv("PJRT_REF_JIT", "1")
    fast = load(text)
    ours = fast(*args)
    return ours, plain(*args), fast


def used(program, key: str) -> bool:
    for plan in program.module_plan.functions.values():
        stack = [plan.body]
        while stack:
            region = stack.pop()
            for step in region.steps:
                if step.op.cache.get(key) is not None:
                    return True
                stack.extend(step.regions)
    return False


def same_bits(ours, theirs):
    for a, b in zip(ours, theirs):
        assert_same_values(a, b)


def test_scatter_apply_with_duplicates_in_order(monkeypatch):
    x = np.linspace(-2, 2, 10, dtype=np.float32)
    idx = np.array([3, 1, 3, 3, 9, 0, 1], np.int32)
    fn = lambda x, i: x.at[i].apply(lambda v: v * 1.5 - 0.25)
    text = lower_to_text(fn, x, idx)
    ours, plain, program = run_both(text, (x, idx), monkeypatch)
    assert used(program, "jit_scatter_apply")
    same_bits(ours, plain)
    np.testing.assert_allclose(ours[0], np.asarray(jax.jit(fn)(x, idx)), rtol=1e-6)


VARIADIC_SCATTER = """
func.func @main(%v: tensor<6xf32>, %w: tensor<6xi32>, %i: tensor<5x1xi32>,
                %u: tensor<5xf32>, %c: tensor<5xi32>) -> (tensor<6xf32>, tensor<6xi32>) {
  %r:2 = "stablehlo.scatter"(%v, %w, %i, %u, %c) ({
  ^bb0(%a: tensor<f32>, %b: tensor<i32>, %x: tensor<f32>, %y: tensor<i32>):
    %less = stablehlo.compare LT, %x, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    %min = stablehlo.select %less, %x, %a : tensor<i1>, tensor<f32>
    %count = stablehlo.add %b, %y : tensor<i32>
    %big = stablehlo.constant dense<2147483647> : tensor<i32>
    %wrapped = stablehlo.add %count, %big : tensor<i32>
    stablehlo.return %min, %wrapped : tensor<f32>, tensor<i32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0],
      scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}
    : (tensor<6xf32>, tensor<6xi32>, tensor<5x1xi32>, tensor<5xf32>, tensor<5xi32>)
      -> (tensor<6xf32>, tensor<6xi32>)
  return %r#0, %r#1 : tensor<6xf32>, tensor<6xi32>
}
"""


def test_variadic_scatter_with_wrapping_integers(monkeypatch):
    args = (np.array([5, 4, 3, 2, 1, 0], np.float32), np.arange(6, dtype=np.int32),
            np.array([[0], [5], [0], [2], [9]], np.int32),
            np.array([7, -1, np.nan, 2, 3], np.float32), np.array([1, 2, 3, 4, 5], np.int32))
    ours, plain, program = run_both(VARIADIC_SCATTER, args, monkeypatch)
    assert used(program, "jit_scatter_apply")
    same_bits(ours, plain)
    reference = run_reference_interpreter(VARIADIC_SCATTER, args)
    for a, b in zip(ours, reference):
        np.testing.assert_array_equal(a, b)


def test_two_key_sort_with_ties_nan_and_batch(monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 3, (3, 400)).astype(np.float32)
    x[0, :5] = [np.nan, -0.0, 0.0, np.inf, -np.nan]
    y = rng.integers(0, 4, (3, 400)).astype(np.int32)
    payload = np.arange(1200, dtype=np.int32).reshape(3, 400)
    fn = lambda x, y, p: lax.sort((x, y, p), dimension=1, num_keys=2)
    text = lower_to_text(fn, x, y, payload)
    ours, plain, program = run_both(text, (x, y, payload), monkeypatch)
    assert used(program, "jit_sort_order")
    same_bits(ours, plain)
    same_bits(ours, [np.asarray(r) for r in jax.jit(fn)(x, y, payload)])


def test_descending_lexsort(monkeypatch):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 5, 300).astype(np.int32)
    b = rng.standard_normal(300).astype(np.float32)
    fn = lambda a, b: jnp.lexsort((b, a))
    text = lower_to_text(fn, a, b)
    ours, plain, _ = run_both(text, (a, b), monkeypatch)
    same_bits(ours, plain)
    same_bits(ours, [np.asarray(jax.jit(fn)(a, b))])


REDUCE_WITH_CALL = """
func.func @combine(%a: tensor<f32>, %b: tensor<f32>) -> tensor<f32> {
  %p = stablehlo.multiply %a, %b : tensor<f32>
  %s = stablehlo.add %p, %b : tensor<f32>
  return %s : tensor<f32>
}
func.func @main(%x: tensor<3x50xf32>, %i: tensor<f32>) -> (tensor<3xf32>, tensor<3x25xf32>) {
  %r = stablehlo.reduce(%x init: %i) across dimensions = [1] : (tensor<3x50xf32>, tensor<f32>) -> tensor<3xf32>
    reducer(%a: tensor<f32>, %b: tensor<f32>) {
      %c = func.call @combine(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      stablehlo.return %c : tensor<f32>
    }
  %w = "stablehlo.reduce_window"(%x, %i) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = func.call @combine(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      stablehlo.return %c : tensor<f32>
    }) {window_dimensions = array<i64: 1, 4>, window_strides = array<i64: 1, 2>}
    : (tensor<3x50xf32>, tensor<f32>) -> tensor<3x24xf32>
  %pad = stablehlo.constant dense<0.0> : tensor<f32>
  %wp = stablehlo.pad %w, %pad, low = [0, 0], high = [0, 1], interior = [0, 0] : (tensor<3x24xf32>, tensor<f32>) -> tensor<3x25xf32>
  return %r, %wp : tensor<3xf32>, tensor<3x25xf32>
}
"""

MAP_WITH_CALL = """
func.func @f(%a: tensor<f32>, %b: tensor<i32>) -> tensor<f32> {
  %c = stablehlo.convert %b : (tensor<i32>) -> tensor<f32>
  %m = stablehlo.maximum %a, %c : tensor<f32>
  %d = stablehlo.divide %m, %a : tensor<f32>
  return %d : tensor<f32>
}
func.func @main(%x: tensor<4x5xf32>, %y: tensor<4x5xi32>) -> tensor<4x5xf32> {
  %r = "stablehlo.map"(%x, %y) ({
    ^bb0(%a: tensor<f32>, %b: tensor<i32>):
      %c = func.call @f(%a, %b) : (tensor<f32>, tensor<i32>) -> tensor<f32>
      stablehlo.return %c : tensor<f32>
    }) {dimensions = array<i64: 0, 1>} : (tensor<4x5xf32>, tensor<4x5xi32>) -> tensor<4x5xf32>
  return %r : tensor<4x5xf32>
}
"""


def test_reduce_and_reduce_window_bodies_with_calls_fold_compiled(monkeypatch):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, 50)) * 0.3).astype(np.float32)
    x[1, 7] = np.nan
    args = (x, np.asarray(np.float32(0.5)))
    ours, plain, program = run_both(REDUCE_WITH_CALL, args, monkeypatch)
    folds = [s.regions[0].__dict__.get("jit_folds") for s in program.function.body.steps if s.regions]
    assert folds and all(f and all(v is not None for v in f.values()) for f in folds)
    same_bits(ours, plain)
    reference = run_reference_interpreter(REDUCE_WITH_CALL, args)
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(a, b, rtol=1e-6, equal_nan=True)


def test_map_body_with_a_call(monkeypatch):
    x = np.array([[1, -2, 0.0, -0.0, np.nan], [3, 4, 5, 6, 7], [np.inf, -1, 2, 0.5, 8], [1, 2, 3, 4, 5]],
                 np.float32)
    y = np.arange(20, dtype=np.int32).reshape(4, 5) - 10
    ours, plain, program = run_both(MAP_WITH_CALL, (x, y), monkeypatch)
    assert used(program, "jit_map_apply")
    same_bits(ours, plain)
    reference = run_reference_interpreter(MAP_WITH_CALL, (x, y))
    np.testing.assert_array_equal(ours[0], reference[0])
