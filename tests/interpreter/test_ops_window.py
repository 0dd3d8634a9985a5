"""stablehlo.reduce_window and stablehlo.select_and_scatter against JAX's
CPU backend and the reference interpreter: pooling with strides, padding
(negative too), base and window dilation, cumulative ops, variadic windows,
max-pool gradients with overlapping windows and padding."""
import ml_dtypes
import numpy as np
import pytest
import jax
import jax.numpy as jnp
from jax import lax

from tests.support.oracle import assert_same_as_jax
from tests.support.xla_oracle import ours_and_xla

RNG = np.random.default_rng(1)


def _floats(shape, dtype=np.float32):
    return (RNG.normal(size=shape) * 4).astype(dtype)


@pytest.mark.parametrize("config", [
    dict(window=(2, 2), strides=(2, 2), padding="VALID"),
    dict(window=(3, 3), strides=(1, 2), padding="SAME"),
    dict(window=(3, 2), strides=(2, 1), padding=((1, 2), (0, 1)),
         base_dilation=(2, 1), window_dilation=(1, 2)),
    dict(window=(2, 2), strides=(1, 1), padding=((-1, 0), (1, -1))),
])
def test_reduce_window(config):
    x = _floats((7, 9))
    padding = config["padding"]
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(x.shape, config["window"], config["strides"], padding)

    def window(v, computation, init):
        return lax.reduce_window(v, np.float32(init), computation, config["window"],
                                 config["strides"], padding,
                                 base_dilation=config.get("base_dilation"),
                                 window_dilation=config.get("window_dilation"))

    fn = lambda v: [window(v, lax.max, -np.inf), window(v, lax.min, np.inf)]  # noqa: E731
    assert_same_as_jax(fn, x, rtol=0)
    # XLA may sum a window in another order than row-major (the spec leaves
    # the schedule open), so sums agree to a few ulps.
    assert_same_as_jax(lambda v: window(v, lax.add, 0.0), x, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int8, np.uint32, np.float16, ml_dtypes.bfloat16,
                                   np.complex64])
@pytest.mark.parametrize("fn", [jnp.cumsum, jnp.cumprod])
def test_cumulative_sums_round_like_xla(fn, dtype):
    x = _floats((8, 9)).astype(dtype) if np.dtype(dtype).kind != "c" else \
        (_floats((8, 9)) + 1j * _floats((8, 9))).astype(dtype)
    assert_same_as_jax(lambda v: fn(v, axis=0, dtype=v.dtype), x, rtol=0)


@pytest.mark.parametrize("fn", [lax.cummax, lax.cummin])
def test_cumulative_max_min(fn):
    assert_same_as_jax(lambda v: fn(v, axis=1, reverse=True), _floats((5, 11)))
    assert_same_as_jax(lambda v: fn(v, axis=0), RNG.integers(-9, 9, (6, 3)).astype(np.int16))


def test_big_max_pool_is_fast_and_right():
    x = _floats((2, 64, 64, 8))
    fn = lambda v: lax.reduce_window(v, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    assert_same_as_jax(fn, x)


def test_variadic_reduce_window():
    x, i = _floats((6, 6)), np.arange(36, dtype=np.int32).reshape(6, 6)

    def body(a, b):
        (av, ai), (bv, bi) = a, b
        take_a = av >= bv
        return lax.select(take_a, av, bv), lax.select(take_a, ai, bi)

    fn = lambda v, w: lax.reduce_window((v, w), (np.float32(-np.inf), np.int32(-1)), body,
                                        (2, 3), (2, 1), ((1, 0), (0, 1)))
    assert_same_as_jax(fn, x, i)


def test_empty_windows():
    fn = lambda v: lax.reduce_window(v, np.float32(0), lax.add, (5,), (1,), ((0, 0),))
    assert_same_as_jax(fn, _floats((3,)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_max_pool_gradient_uses_select_and_scatter(dtype, padding):
    x = _floats((2, 7, 6)).astype(dtype)
    x[0, :2, :2] = 1  # ties: the first maximum in a window wins

    def pool_sum(v):
        pooled = lax.reduce_window(v, np.array(-np.inf if dtype != np.int32 else -2**31, dtype),
                                   lax.max, (1, 3, 2), (1, 2, 1), padding)
        return (pooled * jnp.arange(pooled.size, dtype=v.dtype).reshape(pooled.shape)).sum()

    if dtype == np.int32:
        # jax.grad needs floats: drive select_and_scatter_add directly.
        from jax._src.lax.windowed_reductions import _select_and_scatter_add
        pads = lax.padtype_to_pads(x.shape, (1, 3, 2), (1, 2, 1), padding)
        out_shape = jax.eval_shape(lambda v: lax.reduce_window(
            v, np.int32(0), lax.max, (1, 3, 2), (1, 2, 1), padding), x).shape
        source = RNG.integers(-5, 5, out_shape).astype(np.int32)
        fn = lambda s, v: _select_and_scatter_add(s, v, lax.ge_p, (1, 3, 2), (1, 2, 1), pads)
        assert_same_as_jax(fn, source, x)
    else:
        assert_same_as_jax(jax.grad(pool_sum), x)


_SELECT_AND_SCATTER = """
func.func @main(%x: tensor<4x5xf32>, %s: tensor<2x2xf32>) -> tensor<4x5xf32> {
  %init = stablehlo.constant dense<0.5> : tensor<f32>
  %r = "stablehlo.select_and_scatter"(%x, %s, %init) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare LE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
  }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = stablehlo.multiply %a, %b : tensor<f32>
      stablehlo.return %m : tensor<f32>
  }) {window_dimensions = array<i64: 3, 3>, window_strides = array<i64: 2, 2>,
      padding = dense<[[1, 0], [0, 0]]> : tensor<2x2xi64>}
    : (tensor<4x5xf32>, tensor<2x2xf32>, tensor<f32>) -> tensor<4x5xf32>
  return %r : tensor<4x5xf32>
}
"""


def test_select_and_scatter_min_select_and_multiply_scatter():
    """Overlapping windows, padding, a non-add scatter and a min-style select."""
    x = _floats((4, 5))
    x[1, 2] = -100.0  # chosen by two windows: its scatter combines two sources
    s = np.array([[2.0, 3.0], [5.0, 7.0]], np.float32)
    ours, theirs = ours_and_xla(_SELECT_AND_SCATTER, [x, s])
    # XLA starts every element from init and multiplies in each picked
    # source once: 0.5 * 2 * 3 * 5 * 7 at [1, 2].
    assert ours[0][1, 2] == 105.0
    np.testing.assert_array_equal(ours[0], theirs[0])


@pytest.mark.parametrize("n", [17, 257, 5000])
def test_long_scans_round_like_xla_tiled_scan(n):
    """XLA rewrites scans longer than 16 into tiles of 16 plus a scan of the
    tile totals; sums must round the same way (bit-exact)."""
    x = _floats((2, n))
    fn = lambda v, w: [lax.cumsum(v, axis=1), lax.cumsum(v, axis=1, reverse=True),  # noqa: E731
                       lax.cummax(v, axis=1, reverse=True), lax.cumsum(w, axis=0)]
    assert_same_as_jax(fn, x, x.T.astype(ml_dtypes.bfloat16), rtol=0)


_PADDED_WITH_INIT = """
func.func @main(%x: tensor<2x3xi32>) -> (tensor<2x3xi32>, tensor<2x3xi32>) {
  %init = stablehlo.constant dense<5> : tensor<i32>
  %0 = "stablehlo.reduce_window"(%x, %init) ({
    ^bb0(%a: tensor<i32>, %b: tensor<i32>):
      %s = stablehlo.add %a, %b : tensor<i32>
      stablehlo.return %s : tensor<i32>
  }) {window_dimensions = array<i64: 2, 2>, padding = dense<[[0, 1], [0, 1]]> : tensor<2x2xi64>}
    : (tensor<2x3xi32>, tensor<i32>) -> tensor<2x3xi32>
  %1 = "stablehlo.reduce_window"(%x, %init) ({
    ^bb0(%a: tensor<i32>, %b: tensor<i32>):
      %s = stablehlo.add %a, %b : tensor<i32>
      stablehlo.return %s : tensor<i32>
  }) {window_dimensions = array<i64: 1, 3>, padding = dense<[[0, 0], [2, 0]]> : tensor<2x2xi64>}
    : (tensor<2x3xi32>, tensor<i32>) -> tensor<2x3xi32>
  return %0, %1 : tensor<2x3xi32>, tensor<2x3xi32>
}
"""


def test_padding_holds_the_init_value_as_in_the_spec():
    """With an init that is not the body's identity, padding counts (spec and
    reference interpreter; XLA skips padding instead). The second op is a
    scan, which must not take the tiled-scan shortcut."""
    from tests.support.oracle import run_reference_interpreter
    from pjrt_ref.interpreter import load
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    ours = load(_PADDED_WITH_INIT)(x)
    theirs = run_reference_interpreter(_PADDED_WITH_INIT, [x])
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
