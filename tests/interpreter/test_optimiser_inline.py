"""Calls inlined into their callers (interpreter/optimiser/inline.py): no
`func.call` step left where the callee qualifies, the same bits as
PJRT_REF_OPTIMIZE=0 (which keeps every call), values checked against numpy
written here, and the calls that must stay calls (recursion, big callees)."""
from __future__ import annotations

import numpy as np

from tests.support.jit_support import assert_same_values, load_with  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter.optimiser import inline  # noqa: E402

# @twice returns one value twice and its argument; @scale calls @twice; the
# loop body calls @scale; @total has a reduce region.
CALLS = """
func.func private @twice(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %d = stablehlo.add %x, %x : tensor<4xf32>
  return %d, %x, %d : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
func.func private @scale(%x: tensor<4xf32>, %s: tensor<f32>) -> tensor<4xf32> {
  %a:3 = func.call @twice(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %b = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %m = stablehlo.multiply %a#0, %b : tensor<4xf32>
  %r = stablehlo.subtract %m, %a#1 : tensor<4xf32>
  %t = stablehlo.add %r, %a#2 : tensor<4xf32>
  return %t : tensor<4xf32>
}
func.func @total(%x: tensor<4xf32>) -> tensor<f32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}
func.func @main(%x: tensor<4xf32>, %s: tensor<f32>) -> (tensor<4xf32>, tensor<f32>, tensor<4xf32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %w:2 = stablehlo.while(%i = %zero, %v = %x) : tensor<i32>, tensor<4xf32>
    cond {
      %three = stablehlo.constant dense<3> : tensor<i32>
      %c = stablehlo.compare LT, %i, %three, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      %y = func.call @scale(%v, %s) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
      stablehlo.return %n, %y : tensor<i32>, tensor<4xf32>
    }
  %t = func.call @total(%w#1) : (tensor<4xf32>) -> tensor<f32>
  %u:3 = func.call @twice(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %w#1, %t, %u#1 : tensor<4xf32>, tensor<f32>, tensor<4xf32>
}
"""

# n! by recursion: @fact calls itself from an `if` region.
RECURSIVE = """
func.func private @fact(%n: tensor<i32>) -> tensor<i32> {
  %one = stablehlo.constant dense<1> : tensor<i32>
  %small = stablehlo.compare LE, %n, %one, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %r = "stablehlo.if"(%small) ({
    stablehlo.return %one : tensor<i32>
  }, {
    %m = stablehlo.subtract %n, %one : tensor<i32>
    %f = func.call @fact(%m) : (tensor<i32>) -> tensor<i32>
    %p = stablehlo.multiply %n, %f : tensor<i32>
    stablehlo.return %p : tensor<i32>
  }) : (tensor<i1>) -> tensor<i32>
  return %r : tensor<i32>
}
func.func @main(%n: tensor<i32>) -> tensor<i32> {
  %r = func.call @fact(%n) : (tensor<i32>) -> tensor<i32>
  return %r : tensor<i32>
}
"""


def call_steps(plan) -> int:
    """`func.call` steps anywhere in `plan` (nested regions included)."""
    def count(region):
        return sum((step.op.name == "func.call") + sum(count(r) for r in step.regions)
                   for step in region.steps)
    return count(plan.body)


def test_calls_become_the_callees_steps_with_the_same_bits(monkeypatch):
    x = np.array([1.5, -2.0, 0.25, 3.0], np.float32)
    s = np.float32(0.5)
    # numba off: the loop stays a `while` step (not one compiled loop), so
    # the plan shows where the calls went.
    inlined = load_with(CALLS, monkeypatch, optimize=True, jit=False)
    plain = load_with(CALLS, monkeypatch, optimize=False)
    assert call_steps(inlined.function) == 0
    assert call_steps(plain.function) == 3
    expected = x.copy()
    for _ in range(3):   # @scale: 2v*s - v + 2v
        expected = (expected + expected) * s - expected + (expected + expected)
    ours = inlined(x, s)
    np.testing.assert_array_equal(ours[0], expected)
    np.testing.assert_array_equal(ours[1], np.float32(expected.sum(dtype=np.float32)))
    np.testing.assert_array_equal(ours[2], x)
    compiled = load_with(CALLS, monkeypatch, optimize=True)
    for a, b, c in zip(ours, plain(x, s), compiled(x, s)):
        assert_same_values(np.asarray(a), np.asarray(b))
        assert_same_values(np.asarray(c), np.asarray(b))


def test_a_recursive_function_keeps_its_call_and_its_value(monkeypatch):
    program = load_with(RECURSIVE, monkeypatch, optimize=True)
    # main's call became @fact's steps; the call inside @fact's `if` stays.
    assert call_steps(program.function) == 1
    assert program(np.int32(6))[0] == 720
    assert program(np.int32(1))[0] == 1


def test_a_callee_over_the_size_limit_stays_a_call(monkeypatch):
    monkeypatch.setattr(inline, "MAX_INLINED_STEPS", 1)
    program = load_with(CALLS, monkeypatch, optimize=True, jit=False)
    # @twice (1 step) is inlined everywhere, @scale (5 steps) and @total stay calls.
    assert call_steps(program.function) == 2
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    plain = load_with(CALLS, monkeypatch, optimize=False)
    for a, b in zip(program(x, np.float32(2.0)), plain(x, np.float32(2.0))):
        assert_same_values(np.asarray(a), np.asarray(b))


def scan_with_helper_calls(h, xs):
    """lax.scan whose body JAX lowers with private functions (dynamic
    index/update, `jnp.where`, `jnp.clip`)."""
    def step(carry, x):
        carry = jnp.where(x > 0, jnp.tanh(carry + x), jnp.clip(carry * x, -1.0, 1.0))
        return carry, carry.sum()
    return lax.scan(step, h, xs)


def test_a_scan_from_jax_runs_without_calls_and_matches_xla(monkeypatch):
    rng = np.random.default_rng(3)
    h = rng.standard_normal(8).astype(np.float32)
    xs = rng.standard_normal((16, 8)).astype(np.float32)
    text = lower_to_text(scan_with_helper_calls, h, xs)
    assert "func.call" in text
    inlined = load_with(text, monkeypatch, optimize=True, jit=False)
    assert call_steps(inlined.function) == 0
    plain = load_with(text, monkeypatch, optimize=False)
    ours = inlined(h, xs)
    for a, b in zip(ours, plain(h, xs)):
        assert_same_values(np.asarray(a), np.asarray(b))
    reference = jax.jit(scan_with_helper_calls)(h, xs)
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
