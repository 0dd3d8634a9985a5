"""pytest plugin behind `pjrt-ref jax-tests --dut NAME` (loaded with `-p`).

JAX's test utilities skip or adapt tests by the device under test: the
backend's platform name, unless their `--jax_test_dut` flag names another
(jax/_src/test_util.py, `device_under_test`). pytest's command line cannot
carry that flag, so this sets it from PJRT_REF_TEST_DUT before the tests are
collected: with `--dut cpu`, tests JAX restricts to cpu (`run_on_devices`,
`test_device_matches`) run on pjrt_ref, which lowers like cpu where it
matters (linear algebra: frameworks/jax/linalg.py).
"""
from __future__ import annotations

import os


def pytest_configure(config) -> None:
    name = os.environ.get("PJRT_REF_TEST_DUT")
    if name:
        import jax
        from jax._src import test_util  # noqa: F401  (defines jax_test_dut)

        jax.config.update("jax_test_dut", name)
