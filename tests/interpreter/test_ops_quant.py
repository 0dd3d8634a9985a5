"""Quantized types: uniform_quantize/uniform_dequantize and quantized operands
of other ops, against the StableHLO reference interpreter.

JAX does not produce `!quant.uniform` types, so the programs are written by
hand. They take and return floats (or the storage integers, through
`bitcast_convert`), since the oracle cannot pass quantized arguments.

The reference interpreter lowers quantized `add`, `dot_general` and
`convolution` to integer arithmetic (stablehlo-legalize-quant-to-math) while
pjrt-ref follows the spec's `dequantize_op_quantize` in floating point; the
two may then differ by one step of the result's scale. Everything else must
agree exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.oracle import run_reference_interpreter

from pjrt_ref.errors import PjrtRefError
from pjrt_ref.interpreter import load


def run_both(text: str, *args):
    ours = load(text)(*args)
    theirs = run_reference_interpreter(text, args)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    return ours, theirs


def assert_same_as_reference(text: str, *args):
    ours, theirs = run_both(text, *args)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


EDGE_VALUES = np.array([0.0, -0.0, 0.25, 0.75, 1.25, -1.25, 2.5, -2.5, 0.1, -0.3, 63.5, 64.0,
                        -64.5, 1e6, -1e6, np.inf, -np.inf, np.nan, 3.0, -7.75], np.float32)

# The storage integers come back as i64: the oracle cannot return i4.
QUANTIZE = """
func.func @main(%x: tensor<20xf32>) -> (tensor<20xi64>, tensor<20xf32>) {
  %q = stablehlo.uniform_quantize %x : (tensor<20xf32>) -> tensor<20x!quant.uniform<QTYPE>>
  %s = stablehlo.bitcast_convert %q : (tensor<20x!quant.uniform<QTYPE>>) -> tensor<20xSTORAGE>
  %w = stablehlo.convert %s : (tensor<20xSTORAGE>) -> tensor<20xi64>
  %d = stablehlo.uniform_dequantize %q : (tensor<20x!quant.uniform<QTYPE>>) -> tensor<20xf32>
  return %w, %d : tensor<20xi64>, tensor<20xf32>
}
"""


@pytest.mark.parametrize("storage, qtype", [
    ("i8", "i8:f32, 0.5:3"),          # ties to even, saturation, NaN
    ("i8", "i8:f32, 0.5"),            # zero point 0 by default
    ("i8", "i8<-127:127>:f32, 0.25:-1"),  # narrow storage range
    ("ui8", "ui8:f32, 0.1:128"),
    ("i16", "i16:f32, 0.001:-7"),
    ("i32", "i32:f32, 1.0:0"),        # bounds not representable in f32
    ("i4", "i4:f32, 1.5:2"),
])
def test_uniform_quantize_and_dequantize_per_tensor(storage, qtype):
    text = QUANTIZE.replace("STORAGE", storage).replace("QTYPE", qtype)
    assert_same_as_reference(text, EDGE_VALUES)


PER_AXIS = """
func.func @main(%x: tensor<3x4xf32>) -> (tensor<3x4xi8>, tensor<3x4xf32>, tensor<3x4xi8>) {
  %q = stablehlo.uniform_quantize %x : (tensor<3x4xf32>) -> tensor<3x4x!quant.uniform<i8:f32:1, {0.1:-30, 0.5:-20, 2.0:0, 0.03:100}>>
  %s = stablehlo.bitcast_convert %q : (tensor<3x4x!quant.uniform<i8:f32:1, {0.1:-30, 0.5:-20, 2.0:0, 0.03:100}>>) -> tensor<3x4xi8>
  %d = stablehlo.uniform_dequantize %q : (tensor<3x4x!quant.uniform<i8:f32:1, {0.1:-30, 0.5:-20, 2.0:0, 0.03:100}>>) -> tensor<3x4xf32>
  %r = stablehlo.uniform_quantize %q : (tensor<3x4x!quant.uniform<i8:f32:1, {0.1:-30, 0.5:-20, 2.0:0, 0.03:100}>>) -> tensor<3x4x!quant.uniform<i8:f32:1, {0.2:5, 0.05:-3, 1.0:1, 0.5:0}>>
  %t = stablehlo.bitcast_convert %r : (tensor<3x4x!quant.uniform<i8:f32:1, {0.2:5, 0.05:-3, 1.0:1, 0.5:0}>>) -> tensor<3x4xi8>
  return %s, %d, %t : tensor<3x4xi8>, tensor<3x4xf32>, tensor<3x4xi8>
}
"""


def test_per_axis_quantize_dequantize_and_requantize():
    x = np.linspace(-9, 9, 12, dtype=np.float32).reshape(3, 4)
    assert_same_as_reference(PER_AXIS, x)


REQUANTIZE = """
func.func @main(%x: tensor<20xf32>) -> tensor<20xi8> {
  %q = stablehlo.uniform_quantize %x : (tensor<20xf32>) -> tensor<20x!quant.uniform<i8:f32, 0.5:3>>
  %r = stablehlo.uniform_quantize %q : (tensor<20x!quant.uniform<i8:f32, 0.5:3>>) -> tensor<20x!quant.uniform<i8:f32, 0.3:-5>>
  %s = stablehlo.bitcast_convert %r : (tensor<20x!quant.uniform<i8:f32, 0.3:-5>>) -> tensor<20xi8>
  return %s : tensor<20xi8>
}
"""


def test_requantize_per_tensor():
    assert_same_as_reference(REQUANTIZE, EDGE_VALUES)


def _unary(op_name: str, qin: str, qout: str) -> str:
    return f"""
func.func @main(%x: tensor<20xf32>) -> tensor<20xf32> {{
  %q = stablehlo.uniform_quantize %x : (tensor<20xf32>) -> tensor<20x!quant.uniform<{qin}>>
  %y = stablehlo.{op_name} %q : (tensor<20x!quant.uniform<{qin}>>) -> tensor<20x!quant.uniform<{qout}>>
  %d = stablehlo.uniform_dequantize %y : (tensor<20x!quant.uniform<{qout}>>) -> tensor<20xf32>
  return %d : tensor<20xf32>
}}
"""


@pytest.mark.parametrize("op_name", ["floor", "ceil", "negate", "abs", "sign",
                                     "round_nearest_even", "exponential", "tanh", "sqrt",
                                     "logistic", "cosine"])
def test_unary_ops_dequantize_op_quantize(op_name):
    x = np.linspace(-3, 3, 20, dtype=np.float32)
    assert_same_as_reference(_unary(op_name, "i8:f32, 0.05:-2", "i8:f32, 0.04:7"), x)


BINARY_QDQ = """
func.func @main(%x: tensor<20xf32>, %y: tensor<20xf32>) -> (tensor<20xf32>, tensor<20xf32>, tensor<20xf32>, tensor<20xi1>, tensor<20xf32>) {
  %a = stablehlo.uniform_quantize %x : (tensor<20xf32>) -> tensor<20x!quant.uniform<i8:f32, 0.05:-2>>
  %b = stablehlo.uniform_quantize %y : (tensor<20xf32>) -> tensor<20x!quant.uniform<i8:f32, 0.07:5>>
  %m = stablehlo.multiply %a, %b : (tensor<20x!quant.uniform<i8:f32, 0.05:-2>>, tensor<20x!quant.uniform<i8:f32, 0.07:5>>) -> tensor<20x!quant.uniform<i8:f32, 0.1:0>>
  %s = stablehlo.subtract %a, %b : (tensor<20x!quant.uniform<i8:f32, 0.05:-2>>, tensor<20x!quant.uniform<i8:f32, 0.07:5>>) -> tensor<20x!quant.uniform<i8:f32, 0.1:0>>
  %v = stablehlo.divide %a, %b : (tensor<20x!quant.uniform<i8:f32, 0.05:-2>>, tensor<20x!quant.uniform<i8:f32, 0.07:5>>) -> tensor<20x!quant.uniform<i8:f32, 0.1:0>>
  %c = stablehlo.compare GT, %a, %b : (tensor<20x!quant.uniform<i8:f32, 0.05:-2>>, tensor<20x!quant.uniform<i8:f32, 0.07:5>>) -> tensor<20xi1>
  %bb = stablehlo.uniform_quantize %b : (tensor<20x!quant.uniform<i8:f32, 0.07:5>>) -> tensor<20x!quant.uniform<i8:f32, 0.05:-2>>
  %e = stablehlo.select %c, %a, %bb : (tensor<20xi1>, tensor<20x!quant.uniform<i8:f32, 0.05:-2>>, tensor<20x!quant.uniform<i8:f32, 0.05:-2>>) -> tensor<20x!quant.uniform<i8:f32, 0.05:-2>>
  %md = stablehlo.uniform_dequantize %m : (tensor<20x!quant.uniform<i8:f32, 0.1:0>>) -> tensor<20xf32>
  %sd = stablehlo.uniform_dequantize %s : (tensor<20x!quant.uniform<i8:f32, 0.1:0>>) -> tensor<20xf32>
  %vd = stablehlo.uniform_dequantize %v : (tensor<20x!quant.uniform<i8:f32, 0.1:0>>) -> tensor<20xf32>
  %ed = stablehlo.uniform_dequantize %e : (tensor<20x!quant.uniform<i8:f32, 0.05:-2>>) -> tensor<20xf32>
  return %md, %sd, %vd, %c, %ed : tensor<20xf32>, tensor<20xf32>, tensor<20xf32>, tensor<20xi1>, tensor<20xf32>
}
"""


def test_binary_ops_compare_and_select_on_quantized_operands():
    x = np.linspace(-4, 4, 20, dtype=np.float32)
    y = np.linspace(3, -2, 20, dtype=np.float32)
    assert_same_as_reference(BINARY_QDQ, x, y)


DATA_MOVEMENT = """
func.func @main(%x: tensor<2x3xf32>) -> (tensor<3x2xi8>, tensor<6xi8>, tensor<2x2x3xi8>, tensor<1x3xi8>, tensor<4x3xi8>, tensor<2x3xi8>) {
  %q = stablehlo.uniform_quantize %x : (tensor<2x3xf32>) -> tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>
  %t = stablehlo.transpose %q, dims = [1, 0] : (tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<3x2x!quant.uniform<i8:f32, 0.1:4>>
  %r = stablehlo.reshape %q : (tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<6x!quant.uniform<i8:f32, 0.1:4>>
  %b = stablehlo.broadcast_in_dim %q, dims = [1, 2] : (tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<2x2x3x!quant.uniform<i8:f32, 0.1:4>>
  %s = stablehlo.slice %q [1:2, 0:3] : (tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<1x3x!quant.uniform<i8:f32, 0.1:4>>
  %c = stablehlo.concatenate %q, %q, dim = 0 : (tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>, tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<4x3x!quant.uniform<i8:f32, 0.1:4>>
  %m = stablehlo.maximum %q, %q : tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>
  %t1 = stablehlo.bitcast_convert %t : (tensor<3x2x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<3x2xi8>
  %r1 = stablehlo.bitcast_convert %r : (tensor<6x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<6xi8>
  %b1 = stablehlo.bitcast_convert %b : (tensor<2x2x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<2x2x3xi8>
  %s1 = stablehlo.bitcast_convert %s : (tensor<1x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<1x3xi8>
  %c1 = stablehlo.bitcast_convert %c : (tensor<4x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<4x3xi8>
  %m1 = stablehlo.bitcast_convert %m : (tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<2x3xi8>
  return %t1, %r1, %b1, %s1, %c1, %m1 : tensor<3x2xi8>, tensor<6xi8>, tensor<2x2x3xi8>, tensor<1x3xi8>, tensor<4x3xi8>, tensor<2x3xi8>
}
"""


def test_data_movement_ops_act_on_storage():
    x = np.array([[-1.0, 0.0, 0.55], [2.0, -13.0, 20.0]], np.float32)
    assert_same_as_reference(DATA_MOVEMENT, x)


ADD = """
func.func @main(%x: tensor<40xf32>, %y: tensor<40xf32>) -> tensor<40xf32> {
  %a = stablehlo.uniform_quantize %x : (tensor<40xf32>) -> tensor<40x!quant.uniform<i8:f32, 0.05:3>>
  %b = stablehlo.uniform_quantize %y : (tensor<40xf32>) -> tensor<40x!quant.uniform<i8:f32, 0.03:-2>>
  %s = stablehlo.add %a, %b : (tensor<40x!quant.uniform<i8:f32, 0.05:3>>, tensor<40x!quant.uniform<i8:f32, 0.03:-2>>) -> tensor<40x!quant.uniform<i8:f32, 0.07:1>>
  %d = stablehlo.uniform_dequantize %s : (tensor<40x!quant.uniform<i8:f32, 0.07:1>>) -> tensor<40xf32>
  return %d : tensor<40xf32>
}
"""


def test_add_within_one_step_of_the_integer_reference():
    x = np.linspace(-6, 6, 40, dtype=np.float32)
    y = np.linspace(3.5, -3, 40, dtype=np.float32)
    (ours,), (theirs,) = run_both(ADD, x, y)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=0.07 * 1.001)


DOT = """
func.func @main(%x: tensor<3x4xf32>, %w: tensor<4x2xf32>) -> (tensor<3x2xf32>, tensor<3x2xf32>) {
  %a = stablehlo.uniform_quantize %x : (tensor<3x4xf32>) -> tensor<3x4x!quant.uniform<i8:f32, 0.02:-5>>
  %b = stablehlo.uniform_quantize %w : (tensor<4x2xf32>) -> tensor<4x2x!quant.uniform<i8:f32:1, {0.01:0, 0.03:0}>>
  %p = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<3x4x!quant.uniform<i8:f32, 0.02:-5>>, tensor<4x2x!quant.uniform<i8:f32:1, {0.01:0, 0.03:0}>>) -> tensor<3x2x!quant.uniform<i32:f32:1, {2.0e-4:0, 6.0e-4:0}>>
  %d = stablehlo.uniform_dequantize %p : (tensor<3x2x!quant.uniform<i32:f32:1, {2.0e-4:0, 6.0e-4:0}>>) -> tensor<3x2xf32>
  %h = stablehlo.dot_general %x, %b, contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x2x!quant.uniform<i8:f32:1, {0.01:0, 0.03:0}>>) -> tensor<3x2xf32>
  return %d, %h : tensor<3x2xf32>, tensor<3x2xf32>
}
"""


def test_dot_general_per_axis_rhs_and_hybrid_float_lhs():
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.linspace(0.5, -0.9, 8, dtype=np.float32).reshape(4, 2)
    (ours, ours_hybrid), (theirs, theirs_hybrid) = run_both(DOT, x, w)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=6.0e-4 * 1.001)
    np.testing.assert_allclose(ours_hybrid, theirs_hybrid, rtol=1e-6, atol=1e-6)


def test_uniform_dequantize_rejects_a_float_operand_at_load():
    text = """
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %q = stablehlo.uniform_quantize %x : (tensor<2xf32>) -> tensor<2xf32>
  return %q : tensor<2xf32>
}
"""
    with pytest.raises(PjrtRefError):
        load(text)


REDUCE_WINDOW = """
func.func @main(%x: tensor<2x5xf32>) -> tensor<2x3xf32> {
  %q = stablehlo.uniform_quantize %x : (tensor<2x5xf32>) -> tensor<2x5x!quant.uniform<i8:f32, 0.1:4>>
  %init = stablehlo.constant() {value = dense<4> : tensor<i8>} : () -> tensor<!quant.uniform<i8:f32, 0.1:4>>
  %w = "stablehlo.reduce_window"(%q, %init) ({
    ^bb0(%a: tensor<!quant.uniform<i8:f32, 0.1:4>>, %b: tensor<!quant.uniform<i8:f32, 0.1:4>>):
      %m = stablehlo.maximum %a, %b : tensor<!quant.uniform<i8:f32, 0.1:4>>
      stablehlo.return %m : tensor<!quant.uniform<i8:f32, 0.1:4>>
  }) {window_dimensions = array<i64: 1, 3>} : (tensor<2x5x!quant.uniform<i8:f32, 0.1:4>>, tensor<!quant.uniform<i8:f32, 0.1:4>>) -> tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>
  %e = stablehlo.uniform_dequantize %w : (tensor<2x3x!quant.uniform<i8:f32, 0.1:4>>) -> tensor<2x3xf32>
  return %e : tensor<2x3xf32>
}
"""


def test_ops_with_regions_run_on_storage_and_their_region_ops_are_quantized():
    x = np.array([[-1, 0.3, 2, -5, 0.25], [-0.3, -0.4, -0.5, -0.6, -0.7]], np.float32)
    assert_same_as_reference(REDUCE_WINDOW, x)
