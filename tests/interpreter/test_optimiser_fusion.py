"""Fused elementwise loops (interpreter/optimiser/fusion.py) give the same bits as
the unfused kernels, and agree with XLA CPU."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values, load_with  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402

SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-39, -3.5, 88.0, -104.0, 1e30]


def step_names(program) -> list[str]:
    return [s.op.name for s in program.function.body.steps]


def values(dtype, n=4096, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 30.0, 1e4], n)
    x[:len(SPECIALS)] = SPECIALS
    return x.astype(dtype)


def check(fn, args, monkeypatch, expect_fused=True):
    text = lower_to_text(fn, *args)
    plain = load_with(text, monkeypatch, optimize=False)
    fused = load_with(text, monkeypatch, optimize=True)
    if expect_fused:
        assert "pjrt_ref.fused" in step_names(fused), step_names(fused)
    ours = fused(*args)
    reference = plain(*args)
    for a, b in zip(ours, reference):
        assert_same_values(a, b)
    # XLA CPU flushes subnormals to zero and fuses multiply-adds (whose
    # cancellations differ by an ulp of the operands): absolute slack of a
    # few ulps of the largest finite input.
    xla = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    for a, b in zip(ours, xla):
        scale = max(float(np.nanmax(np.abs(np.where(np.isfinite(x), x, 0)))) for x in args)
        atol = 4 * np.finfo(a.dtype).eps * max(scale, 1) if a.dtype.kind == "f" else 0
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-6, atol=atol, equal_nan=True)
    return fused


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_arithmetic_chain(dtype, monkeypatch):
    x, y = values(dtype), values(dtype, seed=1)
    check(lambda x, y: (x * 2 + y) / (y - 3) - abs(-x), (x, y), monkeypatch)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_min_signed_zeros_and_nan(dtype, monkeypatch):
    x = np.array([0.0, -0.0, 0.0, -0.0, np.nan, 1.0, np.nan, -np.inf] * 4, dtype)
    y = np.array([-0.0, 0.0, 0.0, -0.0, 1.0, np.nan, np.nan, np.inf] * 4, dtype)
    check(lambda x, y: jnp.maximum(x, y) * 1 + jnp.minimum(x, y) * 2, (x, y), monkeypatch)
    check(lambda x, y: (jnp.maximum(x, y) + 0, jnp.minimum(x, y) + 0), (x, y), monkeypatch)


def test_compare_select_and_several_outputs(monkeypatch):
    x, y = values(np.float32), values(np.float32, seed=2)
    fn = lambda x, y: (jnp.where(x < y, x * y, x - y) + 1, x * 3 + 1, (x >= y) & (x != y))
    check(fn, (x, y), monkeypatch)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_math_runs_fuse(dtype, monkeypatch):
    # 200001 elements: several chunks (f64) or threads' pieces (f32) and a
    # partial one; two outputs. f32 exp/tanh/logistic compile into the loop
    # (vector_math.py); f64 ones run chunk by chunk through numpy.
    x = np.concatenate([values(dtype, 100_000), np.linspace(-20, 20, 100_001, dtype=dtype)])
    fn = lambda x: (jnp.tanh(x * 2 + 1) * jax.nn.sigmoid(x), jnp.exp(-x) + x)
    fused = check(fn, (x,), monkeypatch)
    chunked = [bool(s.op.attrs.get("chunked")) for s in fused.function.body.steps
               if s.op.name == "pjrt_ref.fused"]
    assert chunked == [dtype == np.float64]


def test_log_and_sine_runs_stay_chunked(monkeypatch):
    x = values(np.float32, 40_000)
    fused = check(lambda x: jnp.log(jnp.abs(x) + 1) * jnp.sin(x) + jnp.exp(x * 0.01), (x,), monkeypatch)
    assert any(s.op.attrs.get("chunked") for s in fused.function.body.steps)


def test_f32_math_in_double_rounded_once(monkeypatch):
    x = np.concatenate([values(np.float32, 100_000), np.linspace(-20, 20, 100_001, dtype=np.float32)])
    fn = lambda x: (jnp.exp(x * 0.5) + jnp.log(jnp.abs(x) + 1) * jnp.sin(x) - jnp.cos(x * 2)
                    + jax.nn.sigmoid(x) * jnp.log1p(jnp.abs(x)) + jnp.expm1(x * 0.1) + jnp.sqrt(jnp.abs(x)))
    check(fn, (x,), monkeypatch)


def test_converts_and_scalars(monkeypatch):
    x = values(np.float32, 64)
    fn = lambda x: (x.astype(jnp.float64) * 3 + 1).astype(jnp.float32) - x
    check(fn, (x,), monkeypatch)
    s = np.asarray(np.float32(1.5))
    check(lambda a, b: (a * b + a) / b - 1, (s, s), monkeypatch)


def test_intermediate_used_later_and_in_loop(monkeypatch):
    x = values(np.float32, 16)

    def fn(x):
        y = x * 2 + 1
        z = lax.fori_loop(0, 5, lambda i, v: v * 0.5 + jnp.sin(v) * 0.25, y)
        return z + y, jnp.sum(y)

    fused = check(fn, (x,), monkeypatch)
    assert "pjrt_ref.fused" in step_names(fused)


def test_integer_arithmetic_fuses_and_wraps(monkeypatch):
    """Every value is cast back to its type in the fused loop: the spec's
    wrap-around (test_optimiser_fusion_integers.py checks every integer op)."""
    x = np.array([2**31 - 1, -2**31, 5, -7], np.int32)
    check(lambda x: x * 3 + x - 7, (x,), monkeypatch)


def test_jit_switch_off(monkeypatch):
    x = values(np.float32, 16)
    text = lower_to_text(lambda x: x * 2 + 1 - x, x)
    monkeypatch.setenv("PJRT_REF_JIT", "0")
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    assert "pjrt_ref.fused" not in step_names(load(text))


def test_relu_alone_fuses(monkeypatch):
    x = values(np.float32, 512).reshape(16, 32)
    check(lambda x: jnp.maximum(x, 0.0), (x,), monkeypatch)
    check(lambda x: jnp.minimum(x, -0.0), (x,), monkeypatch)


def test_blas_threads_setting_is_harmless():
    from pjrt_ref.interpreter.native import blas

    blas.limit_blas_threads()  # idempotent; matmuls still right afterwards
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(a @ a.T, np.asarray(jnp.asarray(a) @ jnp.asarray(a).T))


def test_numba_is_imported_only_when_something_compiles():
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from pjrt_ref.interpreter import load\n"
        "load('func.func @main(%x: tensor<f32>) -> tensor<f32> {\\n"
        "  %0 = stablehlo.add %x, %x : tensor<f32>\\n  return %0 : tensor<f32>\\n}')\n"
        "print('numba' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


@pytest.mark.parametrize("element, operand_shape, shape", [
    ("f32", (1,), (4096,)), ("f32", (1, 1), (64, 64)), ("ui32", (1,), (4096,))])
def test_a_broadcast_of_a_one_element_tensor_joins_the_run(element, operand_shape, shape, monkeypatch):
    """JAX's uniform broadcasts `maxval - minval` of shape (1,): a splat like
    a 0-d one, which joins the run (numpy's for floats, numba's for integers)
    instead of cutting it."""
    dtype = {"f32": np.float32, "ui32": np.uint32}[element]
    t = f"tensor<{'x'.join(map(str, shape))}x{element}>"
    v = f"tensor<{'x'.join(map(str, operand_shape))}x{element}>"
    dims = ", ".join(str(d) for d in range(len(shape)))
    text = (f"func.func @main(%x: {t}, %v: {v}) -> {t} {{\n"
            f"  %b = stablehlo.broadcast_in_dim %v, dims = [{dims}] : ({v}) -> {t}\n"
            f"  %0 = stablehlo.multiply %x, %b : {t}\n"
            f"  %1 = stablehlo.add %0, %x : {t}\n"
            f"  return %1 : {t}\n}}")
    x = (values(np.float32, math.prod(shape)) if dtype == np.float32
         else np.arange(math.prod(shape), dtype=dtype) * np.uint32(2654435761)).reshape(shape)
    scale = np.full(operand_shape, 3, dtype)
    plain = load_with(text, monkeypatch, optimize=False)
    fused = load_with(text, monkeypatch, optimize=True)
    assert step_names(fused) == ["pjrt_ref.fused"], step_names(fused)
    assert_same_values(fused(x, scale)[0], plain(x, scale)[0])
    np.testing.assert_array_equal(fused(x, scale)[0], x * dtype(3) + x)
