"""interpreter/optimiser/dots.py: transpose(dot_general) computed as one product,
against the unoptimised plan (PJRT_REF_OPTIMIZE=0) and against XLA."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402

RNG = np.random.default_rng(11)


def _op_names(program) -> list[str]:
    names = []

    def walk(region):
        for step in region.steps:
            names.append(step.op.name)
            for nested in step.regions:
                walk(nested)
    walk(program.function.body)
    return names


def _weight_gradient(x, g):
    # JAX's gradient of x @ w with respect to w: transpose(dot_general(g, x)).
    return jax.grad(lambda w: jnp.sum((x @ w) * g))(jnp.zeros((x.shape[1], g.shape[1]), x.dtype))


CASES = {
    "weight_gradient": (_weight_gradient, (96, 200), (96, 130)),
    "lhs_contracted_first": (lambda a, b: (a.T @ b).T * 2 - 1, (150, 70), (150, 90)),
    "both_contracted_last": (lambda a, b: jnp.transpose(a @ b.T) + 1, (60, 40), (80, 40)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(CASES))
def test_folded_transpose_matches_plain_plan_and_xla(name, dtype, monkeypatch):
    fn, lhs_shape, rhs_shape = CASES[name]
    args = (RNG.standard_normal(lhs_shape).astype(dtype), RNG.standard_normal(rhs_shape).astype(dtype))
    text = lower_to_text(fn, *args)
    assert "stablehlo.transpose" in text
    optimized = load(text)
    ours = optimized(*args)[0]
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "0")
    plain_program = load(text)
    # The transpose of the product is gone (one of an operand may stay).
    assert (_op_names(optimized).count("stablehlo.transpose")
            == _op_names(plain_program).count("stablehlo.transpose") - 1)
    plain = plain_program(*args)[0]
    xla = np.asarray(jax.jit(fn)(*args))
    assert ours.dtype == plain.dtype == xla.dtype and ours.shape == plain.shape == xla.shape
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours, plain, **tolerance)
    np.testing.assert_allclose(ours, xla, **tolerance)


def test_product_with_another_use_is_left_alone():
    def fn(a, b):
        product = a @ b
        return product.T, product * 2

    args = (RNG.standard_normal((30, 20)).astype(np.float32),
            RNG.standard_normal((20, 10)).astype(np.float32))
    program = load(lower_to_text(fn, *args))
    assert "stablehlo.transpose" in _op_names(program)
    for ours, xla in zip(program(*args), jax.jit(fn)(*args)):
        np.testing.assert_allclose(ours, np.asarray(xla), rtol=1e-5, atol=1e-5)


def test_folded_inside_a_loop_body():
    def fn(a, b):
        return lax.fori_loop(0, 3, lambda i, acc: acc + (a.T @ b).T, jnp.zeros((b.shape[1], a.shape[1]),
                                                                              a.dtype))

    args = (RNG.standard_normal((40, 30)).astype(np.float32),
            RNG.standard_normal((40, 50)).astype(np.float32))
    program = load(lower_to_text(fn, *args))
    np.testing.assert_allclose(program(*args)[0], np.asarray(jax.jit(fn)(*args)), rtol=1e-5, atol=1e-5)
