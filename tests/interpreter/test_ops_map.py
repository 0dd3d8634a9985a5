"""stablehlo.map against the reference interpreter and XLA CPU: an
element-wise computation (run vectorised) and one that is not (run per
element), over several inputs."""
import numpy as np

from tests.support.oracle import run_reference_interpreter
from pjrt_ref.interpreter import load
from tests.support.xla_oracle import assert_close, ours_and_xla

RNG = np.random.default_rng(8)

_ELEMENTWISE = """
func.func @main(%x: tensor<3x4xf32>, %y: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %r = "stablehlo.map"(%x, %y) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %two = stablehlo.constant dense<2.0> : tensor<f32>
      %p = stablehlo.multiply %a, %two : tensor<f32>
      %gt = stablehlo.compare GT, %p, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %s = stablehlo.select %gt, %p, %b : tensor<i1>, tensor<f32>
      stablehlo.return %s : tensor<f32>
  }) {dimensions = array<i64: 0, 1>} : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}
"""

_PER_ELEMENT = """
func.func @main(%x: tensor<5xi32>) -> tensor<5xi32> {
  %r = "stablehlo.map"(%x) ({
    ^bb0(%a: tensor<i32>):
      %v = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<i32>) -> tensor<2xi32>
      %s = stablehlo.reduce(%v init: %a) applies stablehlo.add across dimensions = [0]
           : (tensor<2xi32>, tensor<i32>) -> tensor<i32>
      stablehlo.return %s : tensor<i32>
  }) {dimensions = array<i64: 0>} : (tensor<5xi32>) -> tensor<5xi32>
  return %r : tensor<5xi32>
}
"""


def test_elementwise_map():
    x, y = RNG.normal(size=(3, 4)).astype(np.float32), RNG.normal(size=(3, 4)).astype(np.float32)
    ours = load(_ELEMENTWISE)(x, y)
    theirs = run_reference_interpreter(_ELEMENTWISE, [x, y])
    np.testing.assert_array_equal(ours[0], theirs[0])
    ours, xla = ours_and_xla(_ELEMENTWISE, [x, y])
    assert_close(ours, xla, exact=True)


def test_map_with_shape_ops_runs_per_element():
    x = np.array([1, -2, 3, 100, 0], np.int32)
    ours = load(_PER_ELEMENT)(x)
    theirs = run_reference_interpreter(_PER_ELEMENT, [x])
    np.testing.assert_array_equal(ours[0], theirs[0])
