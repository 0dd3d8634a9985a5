"""Train a small MLP with JAX on pjrt-ref, and check it against JAX's cpu backend.

    JAX_PLATFORMS=pjrt_ref,cpu python examples/quickstart.py

Every jitted step below is compiled by JAX to StableHLO, handed to pjrt-ref
through the PJRT C API, and run by pjrt-ref's Python interpreter.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np


def init_params(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (fan_in, fan_out)) / np.sqrt(fan_in),
                       jnp.zeros(fan_out)))
    return params


def loss(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    logits = x @ w + b
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


@jax.jit
def sgd_step(params, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    return params, value


def train(device, steps=20):
    with jax.default_device(device):
        key = jax.random.key(0)
        x = jax.random.normal(key, (64, 16))
        y = jax.nn.one_hot(jnp.arange(64) % 4, 4)
        params = init_params(key, [16, 32, 32, 4])
        losses = []
        for _ in range(steps):
            params, value = sgd_step(params, x, y)
            losses.append(float(value))
    return np.array(losses)


def main() -> None:
    plugin = jax.devices("pjrt_ref")[0]
    start = time.perf_counter()
    ours = train(plugin)
    seconds = time.perf_counter() - start
    print(f"pjrt-ref device: {plugin}")
    print(f"loss on pjrt_ref: {ours[0]:.6f} -> {ours[-1]:.6f} in {len(ours)} steps ({seconds:.2f} s)")
    try:
        reference = train(jax.devices("cpu")[0])
    except RuntimeError:
        print("(JAX's cpu backend is not enabled: add 'cpu' to JAX_PLATFORMS to compare)")
        return
    error = np.max(np.abs(ours - reference))
    print(f"loss on XLA cpu:  {reference[0]:.6f} -> {reference[-1]:.6f}")
    print(f"max difference: {error:.2e}")
    assert error < 1e-4, "pjrt-ref and XLA disagree"
    print("OK: pjrt-ref matches XLA")


if __name__ == "__main__":
    main()
