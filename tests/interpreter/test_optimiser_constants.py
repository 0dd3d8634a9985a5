"""Constants preset into the frame (interpreter/optimiser/preset.py):
the function body's and a loop body's, and small broadcasts of them; the
same values as PJRT_REF_OPTIMIZE=0, computed once, never written into."""
from __future__ import annotations

import numpy as np

from tests.support.jit_support import assert_same_values, load_with  # noqa: E402

from pjrt_ref.interpreter.optimiser import preset  # noqa: E402

# x <- 1 - x * 0.5 (in a while, three times) and a 2x3 ones added after it;
# `big` is a broadcast over the size limit when the test lowers it.
LOOP = """
func.func @main(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %w:2 = stablehlo.while(%i = %zero, %v = %x) : tensor<i32>, tensor<2x3xf32>
    cond {
      %three = stablehlo.constant dense<3> : tensor<i32>
      %c = stablehlo.compare LT, %i, %three, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      %h = stablehlo.constant dense<0.5> : tensor<f32>
      %hb = stablehlo.broadcast_in_dim %h, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
      %f = stablehlo.constant dense<1.0> : tensor<f32>
      %fb = stablehlo.broadcast_in_dim %f, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
      %m = stablehlo.multiply %v, %hb : tensor<2x3xf32>
      %y = stablehlo.subtract %fb, %m : tensor<2x3xf32>
      stablehlo.return %n, %y : tensor<i32>, tensor<2x3xf32>
    }
  %o = stablehlo.constant dense<1.0> : tensor<f32>
  %big = stablehlo.broadcast_in_dim %o, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
  %r = stablehlo.add %w#1, %big : tensor<2x3xf32>
  return %w#1, %r : tensor<2x3xf32>, tensor<2x3xf32>
}
"""


def ops_in(region) -> list[str]:
    names = []
    for step in region.steps:
        names.append(step.op.name)
        for nested in step.regions:
            names += ops_in(nested)
    return names


def expected(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = x.copy()
    for _ in range(3):
        v = np.float32(1) - v * np.float32(0.5)
    return v, v + np.float32(1)


def test_loop_constants_and_their_broadcasts_are_preset(monkeypatch):
    # numba off: the loop stays a `while` step whose body the plan shows.
    program = load_with(LOOP, monkeypatch, optimize=True, jit=False)
    names = ops_in(program.function.body)
    assert "stablehlo.constant" not in names and "stablehlo.broadcast_in_dim" not in names
    assert names.count("stablehlo.while") == 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    plain = load_with(LOOP, monkeypatch, optimize=False)
    for _ in range(2):   # a second call sees the same, unwritten, preset arrays
        ours = program(x)
        for a, b, c in zip(ours, plain(x), expected(x)):
            assert_same_values(np.asarray(a), np.asarray(b))
            np.testing.assert_array_equal(a, c)


def test_a_broadcast_over_the_limit_stays_a_step(monkeypatch):
    monkeypatch.setattr(preset, "PRESET_BROADCAST_BYTES", 8)
    program = load_with(LOOP, monkeypatch, optimize=True, jit=False)
    assert ops_in(program.function.body).count("stablehlo.broadcast_in_dim") == 3
    assert "stablehlo.constant" not in ops_in(program.function.body)
    x = np.ones((2, 3), np.float32)
    for a, c in zip(program(x), expected(x)):
        np.testing.assert_array_equal(a, c)
