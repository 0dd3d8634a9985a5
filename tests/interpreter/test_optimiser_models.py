"""Small versions of the model workloads W8 to W10 (benchmarks/models.py):
a transformer block's AdamW step, an LSTM's value and gradient through
`lax.scan`, and a ResNet block's training step with batch norm. The same
values with numba on and off (PJRT_REF_JIT=0), the same up to a product's
rounding with the optimiser off (PJRT_REF_OPTIMIZE=0); XLA CPU's within
float tolerance."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values
from tests.support.oracle import lower_to_text  # sets JAX_PLATFORMS=cpu before jax loads

import jax

from pjrt_ref.interpreter import load

from benchmarks import models  # the repository root is on sys.path (tests/__init__.py)

SETTINGS = {"optimized": {"PJRT_REF_OPTIMIZE": "1", "PJRT_REF_JIT": "1"},
            "no numba": {"PJRT_REF_OPTIMIZE": "1", "PJRT_REF_JIT": "0"},
            "not optimized": {"PJRT_REF_OPTIMIZE": "0", "PJRT_REF_JIT": "1"}}

MODELS = {
    "transformer_step": lambda rng: models.transformer_train_step(
        rng, d_model=16, heads=2, mlp=32, batch=2, seq=8, vocab=20),
    "lstm_scan_grad": lambda rng: models.lstm_train_step(rng, steps=5, hidden=8, batch=3, features=4),
    "resnet_block_step": lambda rng: models.resnet_block_train_step(rng, batch=2, size=6, channels=4),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_step_same_values_in_every_mode_and_close_to_xla(name, monkeypatch):
    fn, args = MODELS[name](np.random.default_rng(15))
    text = lower_to_text(fn, *args)
    flat = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    results = {}
    for setting, env in SETTINGS.items():
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        results[setting] = load(text)(*flat)
    for ours, theirs in zip(results["optimized"], results["no numba"]):
        assert_same_values(ours, theirs)
    # Unoptimised, transpose(dot_general) stays as written, and BLAS may sum
    # the swapped product in another order (interpreter/optimiser/dots.py): with
    # OpenBLAS's Haswell kernels 2 of 3072 bytes of the transformer's
    # results differed. Equal up to that rounding.
    for ours, theirs in zip(results["optimized"], results["not optimized"]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    xla = [np.asarray(r) for r in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    assert len(xla) == len(results["optimized"])
    for ours, theirs in zip(results["optimized"], xla):
        np.testing.assert_allclose(ours, theirs, rtol=2e-4, atol=2e-5)
