"""stablehlo.convolution / dynamic_conv against JAX's CPU backend and XLA:
strides, (negative) padding, lhs and rhs dilation, feature and batch
groups, NHWC-style dimension numbers, integer and complex convolutions,
window reversal."""
import numpy as np
import pytest
from jax import lax

from tests.support.oracle import assert_same_as_jax
from tests.support.xla_oracle import assert_close, ours_and_xla

RNG = np.random.default_rng(4)


def _floats(shape, dtype=np.float32):
    return RNG.normal(size=shape).astype(dtype)


@pytest.mark.parametrize("config", [
    dict(),
    dict(window_strides=(2, 1), padding=((1, 2), (0, 1))),
    dict(padding=((-1, 1), (2, -1)), lhs_dilation=(2, 1)),
    dict(rhs_dilation=(2, 2), padding="SAME"),
    dict(window_strides=(2, 2), lhs_dilation=(1, 3), rhs_dilation=(2, 1), padding=((2, 2), (1, 1))),
])
def test_conv_2d(config):
    x, k = _floats((2, 3, 9, 8)), _floats((4, 3, 3, 2))
    config = {"window_strides": (1, 1), "padding": "VALID", **config}
    assert_same_as_jax(lambda a, b: lax.conv_general_dilated(a, b, **config), x, k,
                       rtol=1e-5, atol=1e-5)


def test_feature_groups_depthwise_and_nhwc_layout():
    x, k = _floats((2, 7, 6, 6)), _floats((3, 3, 1, 12))
    fn = lambda a, b: lax.conv_general_dilated(
        a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=6)
    assert_same_as_jax(fn, x, k, rtol=1e-5, atol=1e-5)
    x, k = _floats((1, 4, 10)), _floats((6, 2, 3))
    fn = lambda a, b: lax.conv_general_dilated(a, b, (2,), ((1, 1),), feature_group_count=2)
    assert_same_as_jax(fn, x, k, rtol=1e-5, atol=1e-5)


def test_batch_groups():
    x, k = _floats((4, 3, 7)), _floats((6, 3, 2))
    fn = lambda a, b: lax.conv_general_dilated(a, b, (1,), "VALID", batch_group_count=2)
    assert_same_as_jax(fn, x, k, rtol=1e-5, atol=1e-5)


def test_integer_and_complex_convolutions():
    x = RNG.integers(-100, 100, (1, 2, 6, 5)).astype(np.int8)
    k = RNG.integers(-100, 100, (3, 2, 2, 2)).astype(np.int8)
    fn = lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME")
    assert_same_as_jax(fn, x, k)
    fn = lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME", preferred_element_type=np.int32)
    assert_same_as_jax(fn, x, k)
    xc = (_floats((1, 2, 5)) + 1j * _floats((1, 2, 5))).astype(np.complex64)
    kc = (_floats((2, 2, 3)) + 1j * _floats((2, 2, 3))).astype(np.complex64)
    assert_same_as_jax(lambda a, b: lax.conv_general_dilated(a, b, (1,), "VALID"), xc, kc,
                       rtol=1e-5, atol=1e-5)


def test_gradient_convolutions():
    import jax
    x, k = _floats((2, 3, 8, 8)), _floats((4, 3, 3, 3))
    loss = lambda a, b: (lax.conv_general_dilated(a, b, (2, 2), "SAME") ** 2).sum()
    assert_same_as_jax(jax.grad(loss, argnums=(0, 1)), x, k, rtol=1e-4, atol=1e-4)


_REVERSED = """
func.func @main(%x: tensor<1x2x6xf32>, %k: tensor<3x2x3xf32>) -> tensor<1x3x4xf32> {
  %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0],
       window = {stride = [1], pad = [[0, 0]], lhs_dilate = [1], rhs_dilate = [1], reverse = [true]}
       {batch_group_count = 1 : i64, feature_group_count = 1 : i64}
       : (tensor<1x2x6xf32>, tensor<3x2x3xf32>) -> tensor<1x3x4xf32>
  return %0 : tensor<1x3x4xf32>
}
"""

_DYNAMIC = """
func.func @main(%x: tensor<1x2x6xf32>, %k: tensor<3x2x3xf32>, %p: tensor<1x2xi64>) -> tensor<1x3x7xf32> {
  %1 = "stablehlo.dynamic_conv"(%x, %k, %p) {
         dimension_numbers = #stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>,
         window_strides = array<i64: 1>, lhs_dilation = array<i64: 1>, rhs_dilation = array<i64: 1>,
         feature_group_count = 1 : i64, batch_group_count = 1 : i64}
       : (tensor<1x2x6xf32>, tensor<3x2x3xf32>, tensor<1x2xi64>) -> tensor<1x3x7xf32>
  return %1 : tensor<1x3x7xf32>
}
"""


def test_window_reversal():
    x, k = _floats((1, 2, 6)), _floats((3, 2, 3))
    ours, theirs = ours_and_xla(_REVERSED, [x, k])
    assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_dynamic_conv():
    """XLA cannot compile dynamic_conv: the reference interpreter is the oracle."""
    from tests.support.oracle import run_reference_interpreter
    from pjrt_ref.interpreter import load
    x, k = _floats((1, 2, 6)), _floats((3, 2, 3))
    padding = np.array([[2, 1]], np.int64)
    ours = load(_DYNAMIC)(x, k, padding)
    theirs = run_reference_interpreter(_DYNAMIC, [x, k, padding])
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("out_spatial,window,strides,dilation", [
    ((3, 3), (8, 8), (1, 1), (1, 1)),      # a kernel gradient: window larger than the output
    ((2, 3), (3, 2), (2, 1), (1, 2)),      # strided and dilated
    ((4,), (5,), (1,), (1,)),
])
def test_im2col_fills_by_output_and_by_window_position_agree(out_spatial, window, strides, dilation):
    """The two orders of filling the im2col patches (conv.py) give the same
    patches, so the same product: which one runs changes no bit."""
    from pjrt_ref.interpreter.ops import conv

    rng = np.random.default_rng(7)
    spatial = tuple((o - 1) * s + (w - 1) * d + 1 for o, w, s, d in zip(out_spatial, window, strides, dilation))
    x = rng.standard_normal((2,) + spatial + (3,)).astype(np.float32)
    shape = (2,) + out_spatial + (3,) + window
    by_window, by_output = np.empty(shape, np.float32), np.empty(shape, np.float32)
    conv._fill_patches_by_window_position(by_window, x, window, out_spatial, strides, dilation)
    conv._fill_patches_by_output_position(by_output, x, out_spatial, strides, dilation)
    np.testing.assert_array_equal(by_window, by_output)
