"""interpreter/optimiser/invariant_layouts.py: a loop-invariant matrix that a
product in a `while` body reads transposed is copied to row-major once per
run of the loop; against the plan without this rewrite (bit for bit) and
XLA."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.jit_support import entry_steps  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402
from pjrt_ref.interpreter.optimiser import invariant_layouts  # noqa: E402
from pjrt_ref.interpreter.native import blas  # noqa: E402
from tests.support.products_support import GivenAnswers  # noqa: E402

RNG = np.random.default_rng(12)


def times_transposed(h, w):
    """`h . w^T` as JAX's gradients write it: one dot_general contracting
    both second dimensions (`h @ w.T` would be a transpose, then a product)."""
    return lax.dot_general(h, w, (((1,), (1,)), ((), ())))


def recurrence(w, h0):
    """`h <- tanh(h . w^T)` eight times: `w` is a loop-invariant carry that
    the product reads transposed."""
    return lax.fori_loop(0, 8, lambda i, h: jnp.tanh(times_transposed(h, w)), h0)


def recurrence_with_changing_weight(w, h0):
    """The same, but the weight is updated every iteration: not invariant."""
    def body(i, carry):
        h, w = carry
        return jnp.tanh(times_transposed(h, w)), w * 0.5
    return lax.fori_loop(0, 8, body, (h0, w))[0]


def _kernels(program) -> list[str]:
    return [step.kernel.__name__ for step in entry_steps(program)]


def _operands(dtype):
    # 64x256 @ (256x256)^T: big enough to be cut into blocks (blas.product_blocks).
    w = (RNG.standard_normal((256, 256)) / 16).astype(dtype)
    return w, RNG.standard_normal((64, 256)).astype(dtype)


def _unrewritten(text, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(invariant_layouts, "copy_transposed_invariants", lambda plan: None)
        return load(text)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("agree", [True, False], ids=["copy_read", "original_read"])
def test_invariant_weight_is_read_row_major(dtype, agree, monkeypatch):
    """One copy step before the loop, the body's product reading it where
    `blas.layouts_agree` says so (forced both ways here): the bits of the
    plan without the rewrite either way, the caller's weight untouched,
    values against XLA."""
    w, h0 = _operands(dtype)
    text = lower_to_text(recurrence, w, h0)
    expected = _unrewritten(text, monkeypatch)(w, h0)[0]
    truly = blas.layouts_agree(h0, w.T, np.ascontiguousarray(w.T), 1)
    engine = blas.build_engine()
    engine.exactness = GivenAnswers(engine, layouts_agree=agree)
    program = load(text)
    kernels = _kernels(program)
    assert kernels.count("row_major_operand") == 1
    assert kernels.count("product_of_row_major_operand") == 1
    w_before = w.copy()
    with blas.engine_in_use(engine):
        ours = program(w, h0)[0]
    np.testing.assert_array_equal(w, w_before)
    copies = [args[2] for name, args in engine.exactness.asked]
    assert [copy.flags.c_contiguous for copy in copies] == [True] * 8
    if truly or not agree:   # the probe's real answer keeps these bits
        np.testing.assert_array_equal(ours, expected)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ours, np.asarray(jax.jit(recurrence)(w, h0)), rtol=tolerance,
                               atol=tolerance)


def test_a_weight_the_loop_changes_is_read_as_it_is():
    w, h0 = _operands(np.float32)
    program = load(lower_to_text(recurrence_with_changing_weight, w, h0))
    assert "row_major_operand" not in _kernels(program)
    np.testing.assert_allclose(program(w, h0)[0],
                               np.asarray(jax.jit(recurrence_with_changing_weight)(w, h0)),
                               rtol=1e-5, atol=1e-5)


def test_a_small_product_is_left_alone():
    """One block (blas.product_blocks): quick in either layout."""
    w, h0 = RNG.standard_normal((16, 16)).astype(np.float32), RNG.standard_normal((4, 16)).astype(np.float32)
    program = load(lower_to_text(recurrence, w, h0))
    assert "row_major_operand" not in _kernels(program)


@pytest.mark.parametrize("position", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layouts_agree_answers_for_the_operands_it_describes(position, dtype):
    """The probe's answer (on random operands of the shapes and layouts)
    holds for other operands of those shapes and layouts: BLAS's order of
    operations does not depend on the values."""
    a = RNG.standard_normal((256, 96)).astype(dtype).T if position == 0 else \
        RNG.standard_normal((96, 256)).astype(dtype)
    b = RNG.standard_normal((512, 256)).astype(dtype).T if position == 1 else \
        RNG.standard_normal((256, 512)).astype(dtype)
    operands = [a, b]
    copy = np.ascontiguousarray(operands[position])
    original = blas.matmul(a, b)
    operands[position] = copy
    assert blas.layouts_agree(a, b, copy, position) == np.array_equal(original, blas.matmul(*operands))
