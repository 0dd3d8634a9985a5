"""stablehlo.batch_norm_inference / _training / _grad against XLA CPU, to a
tolerance (XLA expands them into elementwise ops of its own arrangement:
docs/xla-cpu-deviations.md, entry 12), and against the spec's decomposition."""
import numpy as np
import pytest

from pjrt_ref.interpreter import load
from tests.support.xla_oracle import assert_close, ours_and_xla

RNG = np.random.default_rng(7)


def _t(shape, element):
    return f"tensor<{'x'.join(map(str, shape))}x{element}>"


@pytest.mark.parametrize("dtype,element", [(np.float32, "f32"), (np.float64, "f64"),
                                           (np.float16, "f16")])
@pytest.mark.parametrize("feature_index", [0, 2])
def test_batch_norm_ops(dtype, element, feature_index):
    shape = (3, 4, 5)
    c = shape[feature_index]
    x, v = _t(shape, element), _t((c,), element)
    text = f"""
func.func @main(%x: {x}, %scale: {v}, %offset: {v}, %mean: {v}, %var: {v}, %dy: {x})
    -> ({x}, {x}, {v}, {v}, {x}, {v}, {v}) {{
  %0 = "stablehlo.batch_norm_inference"(%x, %scale, %offset, %mean, %var)
       {{epsilon = 0.001 : f32, feature_index = {feature_index} : i64}} : ({x}, {v}, {v}, {v}, {v}) -> {x}
  %1:3 = "stablehlo.batch_norm_training"(%x, %scale, %offset)
       {{epsilon = 0.001 : f32, feature_index = {feature_index} : i64}} : ({x}, {v}, {v}) -> ({x}, {v}, {v})
  %2:3 = "stablehlo.batch_norm_grad"(%x, %scale, %mean, %var, %dy)
       {{epsilon = 0.001 : f32, feature_index = {feature_index} : i64}} : ({x}, {v}, {v}, {v}, {x}) -> ({x}, {v}, {v})
  return %0, %1#0, %1#1, %1#2, %2#0, %2#1, %2#2 : {x}, {x}, {v}, {v}, {x}, {v}, {v}
}}"""
    args = [RNG.normal(size=shape) * 2 + 1, RNG.normal(size=c), RNG.normal(size=c),
            RNG.normal(size=c), RNG.random(c) + 0.5, RNG.normal(size=shape)]
    args = [a.astype(dtype) for a in args]
    ours, theirs = ours_and_xla(text, args)
    tol = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}[dtype]
    assert_close(ours, theirs, rtol=tol, atol=tol)


def test_batch_norm_inference_divides_before_it_scales_as_the_spec_decomposes_it():
    """Spec: normalized = (x - mean) / stddev, then scale * normalized + offset. With x - mean
    at float64's largest magnitude, scaling first overflows to -inf; the spec's order gives
    a finite result (found by `pjrt-ref fuzz`, issue 33). The expected value is the spec's
    steps in numpy, each IEEE 754's correctly rounded float64 operation."""
    v = _t((1,), "f64")
    text = f"""
func.func @main(%x: {v}, %scale: {v}, %offset: {v}, %mean: {v}, %var: {v}) -> {v} {{
  %0 = "stablehlo.batch_norm_inference"(%x, %scale, %offset, %mean, %var)
       {{epsilon = 1.0 : f32, feature_index = 0 : i64}} : ({v}, {v}, {v}, {v}, {v}) -> {v}
  return %0 : {v}
}}"""
    largest = np.finfo(np.float64).max
    x, scale, offset, mean, variance = (np.array([value]) for value in (3.0, 1.5, 3.0, largest, 1.5))
    normalized = (x - mean) / np.sqrt(variance + 1.0)
    expected = scale * normalized + offset
    assert np.isfinite(expected).all()
    (ours,) = load(text)(x, scale, offset, mean, variance)
    assert np.array_equal(ours, expected)
