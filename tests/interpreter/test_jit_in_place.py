"""Loop-carried buffers updated in place (interpreter/jit/in_place.py): the
same values as PJRT_REF_OPTIMIZE=0, the caller's arrays untouched, and the
rewrite only where nothing else reads the buffer."""
from __future__ import annotations

import numpy as np

from jit_support import assert_same_values, load_with  # noqa: E402
from oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter.jit import in_place  # noqa: E402


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
    rng = np.random.default_rng(3)
    program = run_both(monkeypatch, scan_with_stacked_outputs,
                       rng.standard_normal((4, 3), dtype=np.float32),
                       rng.standard_normal((6, 4, 3), dtype=np.float32))
    assert "while_owning_carries" in stepwise_kernels(program)
    # A second call starts from fresh copies again (the loop owns only its own).
    program(rng.standard_normal((4, 3), dtype=np.float32), rng.standard_normal((6, 4, 3), dtype=np.float32))


def test_a_buffer_the_body_also_reads_is_copied_as_before(monkeypatch):
    program = run_both(monkeypatch, loop_that_reads_its_buffer, np.arange(5, dtype=np.float32))
    assert "while_owning_carries" not in stepwise_kernels(program)


def test_the_in_place_kernel_clamps_start_indices_like_the_spec():
    operand = np.zeros((4, 2), np.float32)
    update = np.ones((2, 2), np.float32)
    result = in_place.dynamic_update_slice_in_place(None, operand, update, np.int32(3), np.int32(-1))
    assert result is operand
    np.testing.assert_array_equal(operand, [[0, 0], [0, 0], [1, 1], [1, 1]])
