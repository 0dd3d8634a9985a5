"""The workloads of issues 4 (W1 to W7), 15 (W8 to W12) and 32 (W0, W13 to W15), as JAX
functions with fixed inputs.

Each workload is a `Workload(name, title, build, target_ratio, kind)`;
`build()` returns the function to `jax.jit` and its arguments (numpy arrays
or pytrees of them, from a seeded generator, so every backend process sees
the same inputs). JAX is imported inside the builders: the parent process
never imports it.

`kind` says what the worker times (benchmarks/worker.py):
  steady         the median of repeated calls of one compiled program
  compile_cold   `jit(f).lower(*args).compile()` once, in a fresh process
                 with empty compilation caches
  compile_warm   the same, again, after a first compile in the process
  programs       `build()` returns [(name, function, argument)]: each is
                 jitted, compiled and run once; the total wall time
  first_result   (W0) no build of its own: fresh processes run W1-W10 once
                 each (first_result.py), timed from start to result by cli.py
  loop_ops       `build()` returns [(row, fn(n, *args), args)]: each row's
                 time per loop iteration (loop_ops.py); the target is per row
  compile_scaling  (W14) each row's `.compile()` time for elementwise DAGs of
                 growing size on 1 and 8 devices (compile_scaling.py): the
                 target is per row, and on the growth of time per op
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import loop_ops, models


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    build: Callable[[], tuple]
    # The target for the ratio pjrt_ref / XLA CPU of what `kind` times.
    target_ratio: float
    kind: str = "steady"


def _rng() -> np.random.Generator:
    return np.random.default_rng(20261122)


def build_dispatch():
    x, y = np.float32(1.5), np.float32(2.25)
    return (lambda a, b: a + b), (np.asarray(x), np.asarray(y))


def build_matmul():
    rng = _rng()
    a = rng.standard_normal((256, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    return (lambda a, b: a @ b), (a, b)


def build_elementwise():
    import jax
    import jax.numpy as jnp

    x = _rng().standard_normal(1_000_000, dtype=np.float32)
    return (lambda x: jnp.sum(jnp.tanh(x * 2 + 1) * jax.nn.sigmoid(x))), (x,)


def build_training_step():
    import jax
    import jax.numpy as jnp

    rng = _rng()
    sizes = (784, 512, 512, 10)
    params = [
        (rng.standard_normal((m, n), dtype=np.float32) * np.float32(1 / np.sqrt(m)),
         np.zeros(n, np.float32))
        for m, n in zip(sizes[:-1], sizes[1:])
    ]
    x = rng.standard_normal((128, 784), dtype=np.float32)
    labels = rng.integers(0, 10, 128).astype(np.int32)

    def loss(params, x, labels):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        logits = h @ w + b
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def step(params, x, labels):
        value, grads = jax.value_and_grad(loss)(params, x, labels)
        new = jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)
        return value, new

    return step, (params, x, labels)


def build_conv():
    import jax
    import jax.numpy as jnp
    from jax import lax

    rng = _rng()
    x = rng.standard_normal((8, 32, 32, 3), dtype=np.float32)
    k1 = rng.standard_normal((3, 3, 3, 16), dtype=np.float32) * np.float32(0.2)
    k2 = rng.standard_normal((3, 3, 16, 32), dtype=np.float32) * np.float32(0.1)
    dims = ("NHWC", "HWIO", "NHWC")

    def net(x, k1, k2):
        h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dims))
        h = jax.nn.relu(lax.conv_general_dilated(h, k2, (1, 1), "SAME", dimension_numbers=dims))
        return jnp.mean(h)

    return net, (x, k1, k2)


def build_loop():
    import jax.numpy as jnp
    from jax import lax

    x = _rng().standard_normal(16, dtype=np.float32)

    def loop(x):
        return lax.fori_loop(0, 1000, lambda i, x: x * 0.99 + 0.01 * jnp.sin(x), x)

    return loop, (x,)


def build_sort_gather_segment():
    import jax
    import jax.numpy as jnp

    rng = _rng()
    x = rng.standard_normal(100_000, dtype=np.float32)
    indices = rng.integers(0, 100_000, 10_000).astype(np.int32)
    segments = rng.integers(0, 100, 10_000).astype(np.int32)

    def fn(x, indices, segments):
        taken = jnp.take(jnp.sort(x), indices)
        return jax.ops.segment_sum(taken, segments, num_segments=100)

    return fn, (x, indices, segments)


def build_prng():
    """JAX's PRNG on 10^7 elements: the threefry hash (integer adds, shifts
    and xors in a five-round loop over the counters), a Bernoulli draw and
    normals (issue 32: its hash ran op by op before integer runs fused)."""
    import jax

    n = 10_000_000
    key_data = np.asarray([0, 20261129], dtype=np.uint32)

    def fn(key_data):
        coin, noise = jax.random.split(jax.random.wrap_key_data(key_data))
        return jax.random.bernoulli(coin, 0.3, (n,)).sum(), jax.random.normal(noise, (n,)).mean()

    return fn, (key_data,)


def build_transformer_step():
    return models.transformer_train_step(_rng())


def build_lstm():
    return models.lstm_train_step(_rng())


def build_resnet_block_step():
    return models.resnet_block_train_step(_rng())


def build_transformer_forward():
    return models.transformer_forward(_rng(), layers=12)


def build_small_programs():
    return models.small_programs(_rng())


def build_loop_ops():
    return loop_ops.rows()


WORKLOADS = {
    w.name: w
    for w in (
        Workload("W0", "time to first result: a fresh process to the first result of each of W1-W10 "
                 "(the worst workload's ratio)", None, 1.0, "first_result"),
        Workload("W1", "dispatch: x + y on f32 scalars", build_dispatch, 5),
        Workload("W2", "matmul 256x256 f32", build_matmul, 1.5),
        Workload("W3", "elementwise sum(tanh(2x+1)*sigmoid(x)), 1e6 f32", build_elementwise, 3),
        Workload("W4", "MLP 784-512-512-10 train step, batch 128", build_training_step, 2),
        Workload("W5", "conv NHWC 8x32x32x3 -> 16 -> 32, relu, mean", build_conv, 3),
        Workload("W6", "fori_loop 1000 x (x*0.99 + 0.01*sin x), 16 f32", build_loop, 20),
        Workload("W7", "sort 1e5 f32, take 1e4, segment_sum 100", build_sort_gather_segment, 3),
        Workload("W8", "transformer block train step (d 256, 4 heads, MLP 1024, batch 8x128, "
                 "vocab 1000, AdamW)", build_transformer_step, 2),
        Workload("W9", "LSTM scan 64 steps, hidden 256, batch 32, value and grad", build_lstm, 2),
        Workload("W10", "ResNet block train step, NHWC 16x32x32x64, batch norm, SGD momentum",
                 build_resnet_block_step, 2),
        Workload("W11c", "compile, cold: 12-layer transformer forward (fresh process, empty caches)",
                 build_transformer_forward, 0.5, "compile_cold"),
        Workload("W11w", "compile, warm: 12-layer transformer forward (second compile in the process)",
                 build_transformer_forward, 0.1, "compile_warm"),
        Workload("W12", "300 small programs, each jitted, compiled and run once (total)",
                 build_small_programs, 1, "programs"),
        Workload("W13", "ops in loops: fori_loop over 8 elements, one op per row and element type "
                 "(time per iteration; the ratio is the worst row's)", build_loop_ops, 10, "loop_ops"),
        Workload("W14", "compile scaling: elementwise DAGs of 100, 1,000 and 10,000 ops with shared "
                 "operands, on 1 device and sharded over 8 (`.compile()`; the ratio is the worst "
                 "row's)", None, 1.0, "compile_scaling"),
        Workload("W15", "PRNG at scale: bernoulli and normal draws of 1e7 (threefry), reduced",
                 build_prng, 2),
    )
}


def select(names: list[str]) -> list[str]:
    """The workloads `--only` names: exact names, or a prefix that stops at
    a number ("W11" is W11c and W11w, but "W1" is W1 alone)."""
    chosen = []
    for name in names:
        if name in WORKLOADS:
            chosen.append(name)
            continue
        family = [w for w in WORKLOADS if w.startswith(name) and not w[len(name)].isdigit()]
        if not family:
            raise KeyError(name)
        chosen += family
    return chosen
