"""sort's argsort path for comparators `compare(g(lhs), g(rhs))` (JAX's float
sorts canonicalise -0 and NaN first): results match XLA CPU exactly, and
comparators it must not take (lexicographic on two keys) still sort right."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.oracle import assert_same_as_jax  # sets JAX_PLATFORMS=cpu before jax loads

import jax.numpy as jnp
from jax import lax

SPECIALS = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 1.0, 0.0, -0.0], np.float32)


def floats(n, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-5, 5, n).astype(dtype)  # many ties, to see stability
    x[:len(SPECIALS)] = SPECIALS
    return rng.permutation(x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_float_sort_with_nan_and_signed_zeros(dtype):
    x = floats(1000, dtype)
    ours = assert_same_as_jax(jnp.sort, x)
    assert np.array_equal(ours[0].view(np.uint8), np.asarray(jnp.sort(x)).view(np.uint8))


def test_argsort_is_stable_like_xla():
    x = floats(2000)
    assert_same_as_jax(lambda x: jnp.argsort(x, stable=True), x)
    assert_same_as_jax(lambda x: jnp.argsort(-x, stable=True, descending=True), x)


def test_sort_carrying_payloads_and_2d_axis():
    x = floats(600).reshape(20, 30)
    payload = np.arange(600, dtype=np.int32).reshape(20, 30)
    assert_same_as_jax(lambda x, p: lax.sort((x, p), dimension=0, num_keys=1), x, payload)
    assert_same_as_jax(lambda x, p: lax.sort((x, p), dimension=1, num_keys=1), x, payload)


def test_two_keys_take_another_path():
    x = floats(500)
    y = np.random.default_rng(1).integers(0, 3, 500).astype(np.int32)
    assert_same_as_jax(lambda x, y: lax.sort((x, y), num_keys=2), x, y)
