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

Each row runs in a process of its own (`python -m benchmarks.compile_scaling
ROW OUT.npy`, started by worker.py) under ROW_LIMIT_S: XLA's compile time
grows faster than the program (about 40 s for 10,000 ops of an earlier,
simpler DAG here, and past 15 minutes for this one), and a row that
outlasts the limit is reported as "more than the limit".
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

SIZES = (100, 1000, 10000)
DEVICE_COUNTS = (1, 8)
ELEMENTS = 64
SHARED_WINDOW = 8
ROW_LIMIT_S = 240.0


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


def time_row(label: str, output_path: str) -> dict:
    """`.compile()` seconds of one row (the median of 3 programs of its size up
    to 1,000 ops, each new to the backend's caches; one above), after a
    warm-up compile; the last program's result is saved to `output_path`."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    jax.config.update("jax_num_cpu_devices", max(DEVICE_COUNTS))
    (devices, num_ops), = [(d, n) for row, d, n in rows() if row == label]
    args = arguments()
    if devices > 1:
        mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
        args = tuple(jax.device_put(a, NamedSharding(mesh, PartitionSpec("x"))) for a in args)
    jax.jit(elementwise_dag(10, seed=100)).lower(*args).compile()     # not a first compile
    times = []
    for seed in range(3 if num_ops <= 1000 else 1):
        lowered = jax.jit(elementwise_dag(num_ops, seed)).lower(*args)
        t0 = time.perf_counter()
        compiled = lowered.compile()
        times.append(time.perf_counter() - t0)
    np.save(output_path, np.asarray(jax.block_until_ready(compiled(*args))))
    return {"compile_s": statistics.median(times), "ops": num_ops, "devices": devices,
            "platform": jax.devices()[0].platform}


if __name__ == "__main__":
    print(json.dumps(time_row(sys.argv[1], sys.argv[2])))
