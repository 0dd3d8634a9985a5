"""W14, compile scaling: does compile time grow with the program, not faster?

Each row compiles one elementwise DAG of `num_ops` ops over two f32
vectors of 64 elements, on one device or sharded over 8
(`NamedSharding(Mesh(8 devices, ('x',)), P('x'))`). Op i applies one of five
binary ops to the previous value and to a value picked from the eight
before that (a seeded choice; never the previous value itself, so `a - a`
does not zero the chain), so values are shared by several users, as
they are in real programs and as the partitioner's walk once went
exponential on. The worker times `.compile()` alone (JAX's tracing and
lowering are the same work for both backends, as in W11), after a warm-up
compile, so no row pays the process's first-compile costs (W11c does).

Target: per device count, the time per op at the largest size is at most
twice that at the smallest (roughly constant), and every row compiles at
least as fast as XLA.
"""
from __future__ import annotations

import numpy as np

SIZES = (100, 1000, 10000)
DEVICE_COUNTS = (1, 8)
ELEMENTS = 64
SHARED_WINDOW = 8


def _ops():
    import jax.numpy as jnp

    return (jnp.add, jnp.maximum, jnp.subtract, jnp.minimum, lambda a, b: jnp.sin(a) + 0.5 * b)


def elementwise_dag(num_ops: int, seed: int = 0):
    """f(x, y): a chain of `num_ops` binary ops, each also reading a recent earlier value."""
    ops = _ops()
    picks = np.random.default_rng(seed).integers(0, SHARED_WINDOW, size=num_ops)

    def dag(x, y):
        values = [x, y]
        for i in range(num_ops):
            shared = values[-2 - int(picks[i]) % min(len(values) - 1, SHARED_WINDOW)]
            values.append(ops[i % len(ops)](values[-1], shared))
        return values[-1]

    return dag


def arguments() -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(-2, 2, ELEMENTS, dtype=np.float32)
    return x, np.cos(3 * x)


def rows() -> list[tuple[str, int, int]]:
    """(label, devices, num_ops) for every row, smallest first."""
    return [(f"{num_ops} ops, {devices} device{'s' if devices > 1 else ''}", devices, num_ops)
            for devices in DEVICE_COUNTS for num_ops in SIZES]
