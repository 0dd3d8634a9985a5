"""Fused runs that numba would not pay for run on numpy, chunk by chunk
(interpreter/optimiser/fusion.py, "When numba pays"): the same bits as the
unfused kernels (PJRT_REF_JIT=0), close to XLA CPU, and a program made only
of such runs never starts numba."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)
from tests.support.jax_support import run_python  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402

SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-39, -3.5, 1e30, -1e-45]


def values(dtype, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 30.0, 1e4], n)
    x[:len(SPECIALS)] = SPECIALS
    x[-len(SPECIALS):] = SPECIALS
    return x.astype(dtype)


def load_as(text: str, monkeypatch, jit: str):
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    monkeypatch.setenv("PJRT_REF_JIT", jit)
    monkeypatch.delenv("PJRT_REF_JIT_MIN_ELEMENTS", raising=False)
    return load(text)


def fused_kinds(program) -> list[str]:
    kinds = []
    for step in program.function.body.steps:
        if step.op.name == "pjrt_ref.fused":
            attrs = step.op.attrs
            kinds.append("numpy" if attrs.get("numpy") else "chunked" if attrs.get("chunked") else "numba")
    return kinds


def check(fn, args, monkeypatch) -> list[str]:
    """Results with numba allowed equal PJRT_REF_JIT=0's bit for bit (up to
    NaN payloads) and XLA's within rounding; returns the fused steps' kinds."""
    text = lower_to_text(fn, *args)
    fused = load_as(text, monkeypatch, "1")
    plain = load_as(text, monkeypatch, "0")
    ours, reference = fused(*args), plain(*args)
    for a, b in zip(ours, reference):
        assert_same_values(a, b)
    xla = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    scale = max(float(np.nanmax(np.abs(np.where(np.isfinite(x), x, 0)))) for x in args)
    for a, b in zip(ours, xla):
        if a.dtype == np.bool_:
            np.testing.assert_array_equal(a, np.asarray(b))
            continue
        atol = 4 * np.finfo(a.dtype).eps * max(scale, 1)
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-6, atol=atol, equal_nan=True)
    return fused_kinds(fused)


# 300_001 elements: many chunks, a partial one; 2_200_001: split over threads.
@pytest.mark.parametrize("n", [23, 300_001, 2_200_001])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_arithmetic_runs_on_numpy(n, dtype, monkeypatch):
    x, y = values(dtype, n), values(dtype, n, seed=1)
    fn = lambda x, y: ((x * 2 + y) / (y - 3) - abs(-x), x - 0.01 * y)
    assert check(fn, (x, y), monkeypatch) == ["numpy"]  # one run, two outputs


def test_splat_used_after_the_run(monkeypatch):
    """A splat that a later step (or the result) reads is written out in full."""
    x, s = values(np.float32, 1000), np.asarray(np.float32(-2.5))
    def fn(x, s):
        b = jnp.broadcast_to(s, x.shape)
        return x * b - x, b
    assert check(fn, (x, s), monkeypatch) == ["numpy"]


def test_compare_and_select(monkeypatch):
    """A relu's gradient: compare and select with splats, f32 and f64."""
    for dtype in (np.float32, np.float64):
        x, g = values(dtype, 70_001), values(dtype, 70_001, seed=3)
        fn = lambda x, g: (jnp.where(x > 0, g, 0.0), jnp.where(x <= -0.0, -0.0, g * x), x != g)
        kinds = check(fn, (x, g), monkeypatch)
        assert kinds and set(kinds) == {"numpy"}, kinds


@pytest.mark.parametrize("scalar", [0.0, -0.0, 1.5, np.nan])
def test_max_min_with_a_scalar(scalar, monkeypatch):
    """Signed zeros and NaNs on either side of a splat, as maximum_values."""
    x = np.concatenate([values(np.float32, 40_000), np.array([0.0, -0.0, np.nan] * 7, np.float32)])
    s = np.float32(scalar)
    fn = lambda x: (jnp.maximum(x, s) * 3, jnp.minimum(s, x) - x, jnp.maximum(s, x), jnp.minimum(x, s))
    kinds = check(fn, (x,), monkeypatch)
    assert kinds and set(kinds) == {"numpy"}, kinds


def test_max_min_of_two_arrays(monkeypatch):
    x = np.array([0.0, -0.0, 0.0, -0.0, np.nan, 1.0, np.nan, -np.inf] * 5000, np.float32)
    y = np.array([-0.0, 0.0, 0.0, -0.0, 1.0, np.nan, np.nan, np.inf] * 5000, np.float32)
    assert check(lambda x, y: jnp.maximum(x, y) + jnp.minimum(x, y) * 2, (x, y), monkeypatch) == ["numpy"]


@pytest.mark.parametrize("n", [1000, 300_001])
def test_intermediates_in_output_memory(n, monkeypatch):
    """An SGD update's product lives in its output (whole-range calls); a
    longer run whose intermediates cannot all go there keeps chunk buffers;
    a select must not compute in the memory of its own operand."""
    from pjrt_ref.interpreter.optimiser import numpy_runs

    p, g = values(np.float32, n), values(np.float32, n, seed=2)
    def sgd(p, g):
        return p - 0.01 * g
    def fn(p, g):
        update = sgd(p, g)
        mixed = jnp.where(g > 0, g * p, p - g)   # select reads intermediates
        return update, mixed, (p * g + 1) * (p - g)
    placements = []
    place = numpy_runs.place_members
    monkeypatch.setattr(numpy_runs, "place_members",
                        lambda members, outs: placements.append(place(members, outs)) or placements[-1])
    assert set(check(sgd, (p, g), monkeypatch)) == {"numpy"}
    assert placements and all(-1 not in targets for targets in placements)  # no buffers
    placements.clear()
    assert set(check(fn, (p, g), monkeypatch)) == {"numpy"}
    assert any(-1 in targets for targets in placements)  # the select's operands need some


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_select_with_zero_splats(zero, monkeypatch):
    """select(pred, x, +0) and select(pred, +0, x) take the short way (the
    zero's bits are all 0); -0.0 has its sign bit, so it takes the long one."""
    x, g = values(np.float32, 70_001), values(np.float32, 70_001, seed=4)
    fn = lambda x, g: (jnp.where(x > 0, g, zero), jnp.where(x > 0, zero, g),
                       jnp.where(x < g, x * 2, zero))
    assert set(check(fn, (x, g), monkeypatch)) == {"numpy"}


def test_runs_on_non_contiguous_inputs(monkeypatch):
    """A transpose's result (a strided view) feeding runs with and without
    buffers of their own: values as the unfused kernels give them."""
    x, y = values(np.float32, 3000).reshape(50, 60), values(np.float32, 3000, seed=5).reshape(60, 50)
    fn = lambda x, y: (x.T * 2 - y, jnp.where(x.T > y, x.T, 0.0), jnp.maximum(x.T, 0.0),
                       (x.T * y + 1) * (x.T - y) / (y + 3))
    assert set(check(fn, (x, y), monkeypatch)) == {"numpy"}


def test_numba_only_for_runs_large_enough(monkeypatch):
    """A run with a sqrt or an f32 exp compiles from COMPILE_MIN_ELEMENTS
    elements on; smaller ones stay unfused."""
    from pjrt_ref.interpreter.optimiser.fusion import COMPILE_MIN_ELEMENTS

    fn = lambda x: (jnp.sqrt(jnp.abs(x)) * 2, jnp.exp(x * 0.5) - 1)
    small = values(np.float32, COMPILE_MIN_ELEMENTS // 2)
    assert check(fn, (small,), monkeypatch) == []
    large = values(np.float32, COMPILE_MIN_ELEMENTS + 3)
    assert check(fn, (large,), monkeypatch) == ["numba"]  # one run, two outputs


MLP_STEP = """
import sys
import numpy as np
import jax, jax.numpy as jnp
from pjrt_ref.interpreter import load

def loss(params, x):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    return -jnp.mean(jax.nn.log_softmax(h @ w + b)[:, 0])

def step(params, x):
    value, grads = jax.value_and_grad(loss)(params, x)
    return value, jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

rng = np.random.default_rng(0)
sizes = [64, 96, 96, 10]
params = [(rng.standard_normal((a, b), dtype=np.float32) * 0.1, np.zeros(b, np.float32))
          for a, b in zip(sizes[:-1], sizes[1:])]
x = rng.standard_normal((32, 64), dtype=np.float32)
program = load(jax.jit(step).lower(params, x).as_text())
flat = [np.asarray(a) for a in jax.tree_util.tree_leaves((params, x))]
ours = program(*flat)
fused = [s for s in program.function.body.steps if s.op.name == "pjrt_ref.fused"]
assert fused, "no fused runs"
assert "numba" not in sys.modules, "numba was imported"
xla = jax.tree_util.tree_leaves(jax.jit(step)(params, x))
for a, b in zip(ours, xla):
    np.testing.assert_allclose(a, np.asarray(b), rtol=2e-5, atol=2e-6)
print("OK")
"""


def test_training_step_does_not_start_numba():
    """An MLP training step (W4's kind of program) fuses its SGD updates and
    relus on numpy and never imports numba (a fresh process: this one may
    have imported it already)."""
    result = run_python(MLP_STEP, JAX_PLATFORMS="cpu", PJRT_REF_JIT="1")
    assert "OK" in result.stdout, result.stdout + result.stderr
