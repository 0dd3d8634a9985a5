"""Whole while loops compiled by numba (interpreter/optimiser/loops.py): the same
bits as the interpreted loop, and close to XLA CPU."""
from __future__ import annotations

import numpy as np

from tests.support.jit_support import assert_same_values  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402


def programs(fn, args, monkeypatch):
    text = lower_to_text(fn, *args)
    monkeypatch.setenv("PJRT_REF_JIT", "1")
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "0")
    plain = load(text)
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    return plain, load(text)


def compiled(program) -> bool:
    return any(s.op.name == "pjrt_ref.compiled_while"
               for f in program.module_plan.functions.values() for s in f.body.steps)


def check(fn, args, monkeypatch, expect_compiled=True, rtol=1e-5):
    plain, fast = programs(fn, args, monkeypatch)
    assert compiled(fast) == expect_compiled
    ours, reference = fast(*args), plain(*args)
    for a, b in zip(ours, reference):
        assert_same_values(a, b)
    for a, b in zip(ours, jax.tree_util.tree_leaves(jax.jit(fn)(*args))):
        np.testing.assert_allclose(a, np.asarray(b), rtol=rtol, atol=1e-6)


def test_fori_loop_of_vector_math(monkeypatch):
    x = np.linspace(-3, 3, 16, dtype=np.float32)
    check(lambda x: lax.fori_loop(0, 1000, lambda i, x: x * 0.99 + 0.01 * jnp.sin(x), x), (x,), monkeypatch)


def test_counter_used_in_body_and_captured_array(monkeypatch):
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    w = np.arange(8, dtype=np.float32) / 8

    def fn(x, w):
        def body(i, carry):
            x, total = carry
            x = jnp.where(x > 0, x * w, x - i.astype(jnp.float32) * 0.001)
            return x, total + i * 3
        return lax.fori_loop(0, 50, body, (x, jnp.int32(7)))

    check(fn, (x, w), monkeypatch)


def test_while_with_data_dependent_condition_and_wrapping_ints(monkeypatch):
    def fn(n):
        def cond(c):
            return c[0] < n
        def body(c):
            return c[0] + 1, c[1] * 1_000_003 + 12345, jnp.maximum(c[2], c[2] * -1.5)
        return lax.while_loop(cond, body, (jnp.int32(0), jnp.int32(1), jnp.float32(-0.0)))

    check(fn, (np.int32(40),), monkeypatch)


def test_loop_with_a_small_matmul_hands_it_back(monkeypatch):
    """A small float product runs by the interpreter's kernel inside the
    compiled loop (native/hand_back.py); a big one keeps the loop
    interpreted, where the loop rewrites of optimiser/in_place.py apply."""
    from pjrt_ref.interpreter.native.hand_back import MAX_PRODUCT_OPERAND

    x = np.eye(4, dtype=np.float32)
    check(lambda x: lax.fori_loop(0, 3, lambda i, x: x @ x + 1, x), (x,), monkeypatch)
    side = int(MAX_PRODUCT_OPERAND ** 0.5) + 1
    x = np.eye(side, dtype=np.float32) / side
    check(lambda x: lax.fori_loop(0, 3, lambda i, x: x @ x + 1, x), (x,), monkeypatch,
          expect_compiled=False)


def test_float64_loop(monkeypatch):
    x = np.linspace(0, 1, 5)
    check(lambda x: lax.fori_loop(0, 20, lambda i, x: x * x - 0.5 + x / 3, x), (x,), monkeypatch)


def test_f32_math_in_double_rounded_once_inside_compiled_loops(monkeypatch):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(20_000).astype(np.float32) * 10,
                        np.array([0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 88.7, -104], np.float32)])

    def body(i, x):
        return (jnp.exp(x * 0.5) * 0.001 + jnp.log(jnp.abs(x) + 1) * jnp.sin(x) - jnp.cos(x * 2)
                + jax.nn.sigmoid(x) * jnp.log1p(jnp.abs(x)) + jnp.expm1(x * 0.1) + jnp.tanh(x))

    # XLA's single-precision exp/log/... differ from ours by ulps; exp(5x) grows them.
    check(lambda x: lax.fori_loop(0, 2, body, x), (x,), monkeypatch, rtol=1e-4)


def test_arrays_passed_through_and_computed_keep_their_values(monkeypatch):
    """Computed arrays alternate between two buffers unless a carried array is passed
    through as another (it would hold a buffer the next iteration overwrites):
    Fibonacci on vectors passes `y` through as the new `x`."""
    x, y = np.arange(8, dtype=np.float32), np.ones(8, dtype=np.float32)
    fibonacci = lambda x, y: lax.fori_loop(0, 9, lambda i, c: (c[1], c[0] + c[1]), (x, y))  # noqa: E731
    check(fibonacci, (x, y), monkeypatch)
    shifted = lambda x, y: lax.fori_loop(0, 9, lambda i, c: (c[0] * 2 + c[1], c[0]), (x, y))  # noqa: E731
    check(shifted, (x, y), monkeypatch)
    both_computed = lambda x, y: lax.fori_loop(0, 9, lambda i, c: (c[0] + c[1], c[0] - c[1]), (x, y))  # noqa: E731
    check(both_computed, (x, y), monkeypatch)
