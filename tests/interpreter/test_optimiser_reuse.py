"""interpreter/optimiser/reuse.py: an elementwise step writes into a matrix
product's array that nothing else reads; against the plan without this
rewrite (bit for bit), numpy and XLA."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402
from pjrt_ref.interpreter.optimiser import reuse  # noqa: E402

RNG = np.random.default_rng(5)


def _rewritten(program) -> list[tuple[str, int]]:
    """(op name, operand written into) of every rewritten step, nested ones too."""
    found = []

    def walk(region):
        for step in region.steps:
            if hasattr(step.kernel, "writes_into_operand"):
                found.append((step.op.name, step.kernel.writes_into_operand))
            for nested in step.regions:
                walk(nested)
    walk(program.function.body)
    return found


def _without_reuse(text: str, monkeypatch):
    """The program planned with every rewrite but this one: what the bits are promised against
    (the unoptimised plan may differ by dots.py's rounding)."""
    with monkeypatch.context() as patch:
        patch.setattr(reuse, "write_into_dead_products", lambda region: None)
        return load(text)


def _floats(*shapes, dtype=np.float32):
    return tuple(RNG.standard_normal(shape).astype(dtype) for shape in shapes)


ACCUMULATIONS = {
    "add": (lambda acc, x, g: acc + x.T @ g, ("stablehlo.add", 1)),
    # dots.py makes the transposed product one step; it is written into as well.
    "subtract_transposed": (lambda acc, x, g: (g.T @ x).T - acc, ("stablehlo.subtract", 0)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(ACCUMULATIONS))
def test_accumulated_weight_gradient_writes_into_the_product(name, dtype, monkeypatch):
    fn, rewritten = ACCUMULATIONS[name]
    args = _floats((40, 24), (16, 40), (16, 24), dtype=dtype)
    text = lower_to_text(fn, *args)
    program = load(text)
    assert _rewritten(program) == [rewritten]
    ours = program(*args)
    assert np.array_equal(ours[0], _without_reuse(text, monkeypatch)(*args)[0])
    np.testing.assert_allclose(ours[0], np.asarray(jax.jit(fn)(*args)), rtol=1e-5, atol=1e-5)


PRODUCT_RETURNED = """
func.func @main(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %b: tensor<4x5xf32>)
    -> (tensor<4x5xf32>, tensor<4x5xf32>) {
  %p = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
      : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  %s = stablehlo.add %b, %p : tensor<4x5xf32>
  return %s, %p : tensor<4x5xf32>, tensor<4x5xf32>
}
"""

PRODUCT_READ_BY_A_LOOP = """
func.func @main(%x: tensor<4x3xf32>, %w: tensor<3x5xf32>, %b: tensor<4x5xf32>)
    -> (tensor<4x5xf32>, tensor<4x5xf32>) {
  %p = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
      : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  %s = stablehlo.add %b, %p : tensor<4x5xf32>
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %two = stablehlo.constant dense<2> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %b) : tensor<i32>, tensor<4x5xf32>
    cond {
      %c = stablehlo.compare LT, %i, %two : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %next = stablehlo.add %i, %one : tensor<i32>
      %sum = stablehlo.add %acc, %p : tensor<4x5xf32>
      stablehlo.return %next, %sum : tensor<i32>, tensor<4x5xf32>
    }
  return %s, %r#1 : tensor<4x5xf32>, tensor<4x5xf32>
}
"""


@pytest.mark.parametrize("text", [PRODUCT_RETURNED, PRODUCT_READ_BY_A_LOOP],
                         ids=["returned", "read_by_a_loop"])
def test_a_product_read_elsewhere_keeps_its_array(text):
    x, w, b = _floats((4, 3), (3, 5), (4, 5))
    program = load(text)
    assert _rewritten(program) == []
    product = x.astype(np.float64) @ w.astype(np.float64)
    first, second = program(x, w, b)
    np.testing.assert_allclose(first, b + product, rtol=1e-5, atol=1e-5)
    expected_second = product if text is PRODUCT_RETURNED else b + 2 * product
    np.testing.assert_allclose(second, expected_second, rtol=1e-5, atol=1e-5)


def test_batched_and_integer_products_are_left_alone(monkeypatch):
    def fn(a, b, i, j):
        return jnp.einsum("bij,bjk->bik", a, b) + 1, i @ j - 1

    args = (*_floats((2, 4, 3), (2, 3, 5)), RNG.integers(-9, 9, (4, 3), dtype=np.int32),
            RNG.integers(-9, 9, (3, 5), dtype=np.int32))
    text = lower_to_text(fn, *args)
    program = load(text)
    assert _rewritten(program) == []
    for mine, unoptimised in zip(program(*args), _without_reuse(text, monkeypatch)(*args)):
        assert np.array_equal(mine, unoptimised)


def test_scan_gradient_accumulator_matches_xla_and_the_plain_plan(monkeypatch):
    """An LSTM-like backward scan: `dW + h^T . dgates` per step (W9's shape of work)."""
    def fn(hs, gs, w):
        def step(dw, hg):
            h, g = hg
            return dw + h.T @ jnp.tanh(g + h @ w), None
        return lax.scan(step, jnp.zeros((hs.shape[2], gs.shape[2]), hs.dtype), (hs, gs))[0]

    # Products above hand_back.MAX_PRODUCT_OPERAND: smaller ones would run
    # inside a compiled loop (native/hand_back.py), not this rewrite.
    args = _floats((6, 64, 96), (6, 64, 128), (96, 128))
    text = lower_to_text(fn, *args)
    program = load(text)
    assert ("stablehlo.add", 1) in _rewritten(program)
    ours = program(*args)[0]
    assert np.array_equal(ours, _without_reuse(text, monkeypatch)(*args)[0])
    np.testing.assert_allclose(ours, np.asarray(jax.jit(fn)(*args)), rtol=1e-4, atol=1e-4)


def test_an_operand_numpy_cannot_write_gets_a_new_array():
    a, b = _floats((3, 4), (3, 4))
    b.flags.writeable = False
    kernel = reuse._into_operand(np.add, 1)
    result = kernel(None, a, b)
    assert result is not b and np.array_equal(result, a + b)
    c = b.copy()
    assert kernel(None, a, c) is c
