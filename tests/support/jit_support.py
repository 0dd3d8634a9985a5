"""Comparing optimised (interpreter/optimiser) results with the plain interpreter's."""
from __future__ import annotations

import numpy as np


def assert_same_values(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Same dtype, shape and bits, except that a NaN may differ from a NaN
    in sign and payload.

    When two NaNs meet in a commutative op (a * b, a + b), x86 returns the
    first operand, and a compiled loop may order the operands differently
    from numpy's loop; the spec (like XLA) leaves NaN payloads unspecified.
    Everything else, signed zeros included, must be identical.
    """
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (ours.dtype, theirs.dtype)
    a, b = ours.reshape(-1), theirs.reshape(-1)
    if a.dtype.kind in "fc" or "float" in a.dtype.name:     # ml_dtypes' floats are kind "V"
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        np.testing.assert_array_equal(nan_a, nan_b)
        a, b = a[~nan_a], b[~nan_b]
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def load_with(text: str, monkeypatch, optimize: bool = True, jit: bool = True):
    """`text` loaded with the optimiser on or off and numba allowed or not;
    runs of any size compile (these tests check the compiled loops' bits)."""
    from pjrt_ref.interpreter import load

    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1" if optimize else "0")
    monkeypatch.setenv("PJRT_REF_JIT", "1" if jit else "0")
    monkeypatch.setenv("PJRT_REF_JIT_MIN_ELEMENTS", "0")
    return load(text)


def entry_steps(program):
    """Every step of `program`'s entry function, those of nested regions too."""
    def walk(region):
        for step in region.steps:
            yield step
            for nested in step.regions:
                yield from walk(nested)
    return list(walk(program.function.body))


def ordered(values: np.ndarray) -> np.ndarray:
    """float32 bits as integers ordered like the floats (-0 and +0 equal)."""
    bits = values.view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def mlp_loss(params, x, labels):
    """Softmax cross-entropy of an MLP (ReLU layers) with `params` [(w, b), ...]."""
    import jax
    import jax.numpy as jnp

    h = x
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    logp = jax.nn.log_softmax(h @ params[-1][0] + params[-1][1])
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def mlp_data(rng: np.random.Generator, sizes: tuple, batch: int):
    """(params, x, labels) for `mlp_loss`: layer widths `sizes`, `batch` examples."""
    params = [(rng.standard_normal((m, n)).astype(np.float32) / np.float32(np.sqrt(m)),
               np.zeros(n, np.float32)) for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    labels = rng.integers(0, sizes[-1], batch).astype(np.int32)
    return params, x, labels


def mlp_training_step(rng: np.random.Generator, sizes: tuple, batch: int):
    """The benchmarks' W4 in any size: value_and_grad of softmax
    cross-entropy for an MLP with layer widths `sizes` on `batch` examples,
    plus an SGD update. Returns (step, (params, x, labels))."""
    import jax

    params, x, labels = mlp_data(rng, sizes, batch)

    def step(params, x, labels):
        value, grads = jax.value_and_grad(mlp_loss)(params, x, labels)
        return value, jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

    return step, (params, x, labels)


def product_in_blocks(a: np.ndarray, b: np.ndarray, axis: int, count: int) -> np.ndarray:
    """`a @ b` as `count` blocks of rows (axis 0) or columns (axis 1) of the
    result, block k covering [n*k//count, n*(k+1)//count), each one
    np.matmul call: the bits blas.matmul promises, computed by numpy alone."""
    length = a.shape[0] if axis == 0 else b.shape[1]
    cuts = [length * k // count for k in range(count + 1)]
    if axis == 0:
        return np.concatenate([a[lo:hi] @ b for lo, hi in zip(cuts[:-1], cuts[1:])], axis=0)
    return np.concatenate([a @ b[:, lo:hi] for lo, hi in zip(cuts[:-1], cuts[1:])], axis=1)
