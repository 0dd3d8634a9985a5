"""Loop-carried buffers updated in place (interpreter/optimiser/in_place.py): the
same values as PJRT_REF_OPTIMIZE=0, the caller's arrays untouched, and the
rewrite only where nothing else reads the buffer."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values, entry_steps, load_with  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402
from pjrt_ref.interpreter.optimiser import in_place  # noqa: E402
from pjrt_ref.interpreter.native import blas, gemm_pool  # noqa: E402
from tests.support.products_support import FixedStrategy, GivenAnswers, RecordingPool  # noqa: E402


def scan_with_stacked_outputs(init, xs):
    """lax.scan: the per-step outputs are stacked into carried buffers."""
    def step(carry, x):
        carry = jnp.tanh(carry * 0.5 + x)
        return carry, (carry, carry.sum())
    return lax.scan(step, init, xs)


def loop_that_reads_its_buffer(buffer):
    """A while whose carried buffer is read besides being updated: no rewrite."""
    def body(i, b):
        return lax.dynamic_update_index_in_dim(b, b[i] + b.sum(), i + 1, 0)
    return lax.fori_loop(0, buffer.shape[0] - 1, body, buffer)


def stepwise_kernels(program) -> set:
    """Kernel function names of every step of every planned function."""
    names = set()

    def visit(region):
        for step in region.steps:
            names.add(step.kernel.__name__)
            for nested in step.regions:
                visit(nested)
    for plan in program.module_plan.functions.values():
        visit(plan.body)
    return names


def run_both(monkeypatch, fn, *args):
    text = lower_to_text(fn, *args)
    copies = [a.copy() for a in args]
    optimized = load_with(text, monkeypatch, optimize=True)
    results = optimized(*args)
    for before, after in zip(copies, args):
        np.testing.assert_array_equal(before, after)      # the caller's arrays are not written
    plain = load_with(text, monkeypatch, optimize=False)(*args)
    for ours, theirs in zip(results, plain):
        assert_same_values(ours, theirs)
    return optimized


def test_scan_outputs_are_written_in_place_with_the_same_values(monkeypatch):
    """Stacked outputs larger than a compiled loop updates whole each
    iteration (tensor_ops.MAX_UPDATED_ELEMENTS): the interpreted loop
    writes each step's row in place."""
    from pjrt_ref.interpreter.native.tensor_ops import MAX_UPDATED_ELEMENTS

    rng = np.random.default_rng(3)
    steps = MAX_UPDATED_ELEMENTS // 32 + 1
    program = run_both(monkeypatch, scan_with_stacked_outputs,
                       rng.standard_normal((8, 4), dtype=np.float32),
                       rng.standard_normal((steps, 8, 4), dtype=np.float32))
    assert "while_owning_carries" in stepwise_kernels(program)
    # A second call starts from fresh copies again (the loop owns only its own).
    program(rng.standard_normal((8, 4), dtype=np.float32), rng.standard_normal((steps, 8, 4), dtype=np.float32))


def test_a_small_scan_compiles_whole_with_the_same_values(monkeypatch):
    """Below that size the whole scan, stacking and sums included, is one
    compiled loop (optimiser/loops.py, native/tensor_ops.py)."""
    rng = np.random.default_rng(3)
    program = run_both(monkeypatch, scan_with_stacked_outputs,
                       rng.standard_normal((4, 3), dtype=np.float32),
                       rng.standard_normal((6, 4, 3), dtype=np.float32))
    assert "compiled_while" in stepwise_kernels(program)


def test_a_buffer_the_body_also_reads_is_copied_as_before(monkeypatch):
    program = run_both(monkeypatch, loop_that_reads_its_buffer, np.arange(5, dtype=np.float32))
    assert "while_owning_carries" not in stepwise_kernels(program)


def test_the_in_place_kernel_clamps_start_indices_like_the_spec():
    operand = np.zeros((4, 2), np.float32)
    update = np.ones((2, 2), np.float32)
    result = in_place.dynamic_update_slice_in_place(None, operand, update, np.int32(3), np.int32(-1))
    assert result is operand
    np.testing.assert_array_equal(operand, [[0, 0], [0, 0], [1, 1], [1, 1]])


# --- Gradient accumulators: `acc + a . b` inside gemm --------------------------

def scan_gradient(w, xs):
    """The weight gradient of a scan's loss: the backward loop carries
    `dw + x_t^T . g_t` (a product dots.py folds with its transpose, read
    once, added to the carried accumulator)."""
    def loss(w):
        def step(h, x):
            h = jnp.tanh(x @ w + h)
            return h, h.sum()
        _, ys = lax.scan(step, jnp.zeros((xs.shape[1], w.shape[1]), w.dtype), xs)
        return ys.sum()
    return jax.grad(loss)(w)


def _folded(program) -> int:
    return sum(step.kernel is in_place.add_product_in_place for step in entry_steps(program))


def _without_folding(text, monkeypatch):
    """Every rewrite but this one: what its bits are promised against (the
    unoptimised plan may differ by dots.py's rounding)."""
    with monkeypatch.context() as patch:
        patch.setattr(in_place, "_fold_accumulation", lambda *args: False)
        return load_with(text, patch)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("exact", [True, False], ids=["gemm_adds", "product_then_add"])
def test_scan_gradient_accumulates_inside_the_product(dtype, exact, monkeypatch):
    """Big enough for the C pool (256x32 @ 32x512: two blocks): with the
    probe's answer forced both ways, the folded step takes the gemm with
    beta = 1 or the product and then the add, and both have the bits of
    the plan without the fold. Values against XLA."""
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((256, 512)) / 16).astype(dtype)
    xs = rng.standard_normal((6, 32, 256)).astype(dtype)
    text = lower_to_text(scan_gradient, w, xs)
    unfolded = _without_folding(text, monkeypatch)(w, xs)[0]
    w_before = w.copy()
    real_pool = gemm_pool.load()
    pool = RecordingPool(real_pool) if real_pool is not None else None
    # The default strategy, whatever this machine's timing chose (OpenBLAS's threads would skip the pool).
    engine = blas.build_engine(pool=pool, strategies=FixedStrategy())
    engine.exactness = GivenAnswers(engine, accumulate_exact=exact)
    program = load_with(text, monkeypatch)
    assert _folded(program) == 1
    with blas.engine_in_use(engine):
        ours = program(w, xs)[0]
    np.testing.assert_array_equal(w, w_before)
    if pool is not None and blas.blas_threads() == 1:
        assert any(pool.accumulated) == exact
    np.testing.assert_array_equal(ours, unfolded)
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(ours, np.asarray(jax.jit(scan_gradient)(w, xs)), rtol=tolerance,
                               atol=tolerance)


# Operands above hand_back.MAX_PRODUCT_OPERAND: a smaller product would run
# inside a compiled loop instead (native/hand_back.py).
ACCUMULATOR_LOOP = """
func.func @main(%x: tensor<128x40xf32>, %g: tensor<128x48xf32>, %acc0: tensor<40x48xf32>)
    -> (tensor<40x48xf32>, tensor<40x48xf32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %three = stablehlo.constant dense<3> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r:3 = stablehlo.while(%i = %zero, %acc = %acc0, %last = %acc0)
      : tensor<i32>, tensor<40x48xf32>, tensor<40x48xf32>
    cond {
      %c = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %next = stablehlo.add %i, %one : tensor<i32>
      %p = stablehlo.dot_general %x, %g, contracting_dims = [0] x [0]
          : (tensor<128x40xf32>, tensor<128x48xf32>) -> tensor<40x48xf32>
      %sum = stablehlo.add %acc, %p : tensor<40x48xf32>
      stablehlo.return %next, %sum, SECOND : tensor<i32>, tensor<40x48xf32>, tensor<40x48xf32>
    }
  return %r#1, %r#2 : tensor<40x48xf32>, tensor<40x48xf32>
}
"""


@pytest.mark.parametrize("second,folds", [("%last", 1), ("%p", 0), ("%acc", 0)],
                         ids=["accumulator_alone", "product_also_carried", "accumulator_also_carried"])
def test_an_accumulation_folds_only_where_nothing_else_reads_it(second, folds):
    """The product read again (carried out as well), or the accumulator's
    old value read again: both keep their arrays. Values against numpy."""
    rng = np.random.default_rng(9)
    x, g, acc0 = (rng.standard_normal(s).astype(np.float32) for s in ((128, 40), (128, 48), (40, 48)))
    program = load(ACCUMULATOR_LOOP.replace("SECOND", second))
    assert _folded(program) == folds
    acc0_before = acc0.copy()
    total, last = program(x, g, acc0)
    np.testing.assert_array_equal(acc0, acc0_before)
    product = x.T.astype(np.float64) @ g.astype(np.float64)
    np.testing.assert_allclose(total, acc0 + 3 * product, rtol=1e-4, atol=1e-4)
    expected_last = {"%last": acc0, "%p": product, "%acc": acc0 + 2 * product}[second]
    np.testing.assert_allclose(last, expected_last, rtol=1e-4, atol=1e-4)
