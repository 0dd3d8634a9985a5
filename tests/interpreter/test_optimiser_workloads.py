"""The benchmark workloads, small, with numba on and off: the same bits
either way, and XLA CPU's results within float tolerance. This is CI's
check that `PJRT_REF_JIT=0` and `=1` agree on whole programs."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values, mlp_training_step  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402

RNG = np.random.default_rng(4)


def conv_net():
    dims = ("NHWC", "HWIO", "NHWC")
    x = RNG.standard_normal((2, 8, 8, 3), dtype=np.float32)
    k1 = RNG.standard_normal((3, 3, 3, 4), dtype=np.float32)
    k2 = RNG.standard_normal((3, 3, 4, 5), dtype=np.float32)

    def net(x, k1, k2):
        h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dims))
        h = jax.nn.relu(lax.conv_general_dilated(h, k2, (2, 2), "VALID", dimension_numbers=dims))
        return jnp.mean(h), h

    return net, (x, k1, k2)


WORKLOADS = {
    "elementwise": (lambda x: jnp.sum(jnp.tanh(x * 2 + 1) * jax.nn.sigmoid(x)),
                    (RNG.standard_normal(5000, dtype=np.float32),)),
    "loop": (lambda x: lax.fori_loop(0, 100, lambda i, x: x * 0.99 + 0.01 * jnp.sin(x), x),
             (RNG.standard_normal(16, dtype=np.float32),)),
    "sort_take_segment_sum": (
        lambda x, i, s: jax.ops.segment_sum(jnp.take(jnp.sort(x), i), s, num_segments=10),
        (RNG.standard_normal(1000, dtype=np.float32), RNG.integers(0, 1000, 100).astype(np.int32),
         RNG.integers(0, 10, 100).astype(np.int32))),
    "mlp_step": mlp_training_step(RNG, (20, 16, 16, 4), batch=8),
    "conv": conv_net(),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_numba_on_and_off_agree(name, monkeypatch):
    fn, args = WORKLOADS[name]
    text = lower_to_text(fn, *args)
    flat = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    results = {}
    for setting in ("0", "1"):
        monkeypatch.setenv("PJRT_REF_JIT", setting)
        results[setting] = load(text)(*flat)
    for a, b in zip(results["1"], results["0"]):
        assert_same_values(a, b)
    xla = [np.asarray(r) for r in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    for a, b in zip(results["1"], xla):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
