"""The pytest plugin `pjrt-ref jax-tests` loads into JAX's test runs (`-p`).

JAX's tests ask which device they run on in two ways:
`jtu.test_device_matches(["cpu"])` / `jtu.run_on_devices("cpu")` (what kind of
device: tolerances, tests only meaningful on host memory) and
`jtu.device_under_test() == "cpu"` (which platform JAX dispatches to, e.g.
`lax.platform_dependent`'s branch). pjrt_ref is a host-memory CPU backend
whose platform is "pjrt_ref", so with PJRT_REF_JAX_DEVICE_TAG=cpu its device
carries both tags for the first question and stays "pjrt_ref" for the
second: the two runs select the same tests with the same tolerances, and a
test of platform dispatch expects pjrt_ref's branch, as JAX takes it.
"""
from __future__ import annotations

import os


def pytest_configure(config) -> None:
    tag = os.environ.get("PJRT_REF_JAX_DEVICE_TAG", "")
    if tag:
        from jax._src import test_util

        device_tags = test_util._get_device_tags
        test_util._get_device_tags = lambda: device_tags() | {tag}
