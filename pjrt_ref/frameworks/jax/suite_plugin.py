"""The pytest plugin `pjrt-ref jax-tests` loads into JAX's test runs (`-p`).

It sets JAX's `jax_test_dut` flag (the device under test JAX's tests ask
`jtu.test_device_matches` about) from PJRT_REF_JAX_TEST_DUT. The flag is an
absl-style flag, not read from the environment, and is defined only once
`jax._src.test_util` is imported, hence a plugin rather than a variable.
"""
from __future__ import annotations

import os


def pytest_configure(config) -> None:
    device = os.environ.get("PJRT_REF_JAX_TEST_DUT", "")
    if device:
        import jax
        from jax._src import test_util  # noqa: F401  (defines jax_test_dut)

        jax.config.update("jax_test_dut", device)
