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

from contextlib import contextmanager

from ... import settings


def pytest_configure(config) -> None:
    tag = settings.get("PJRT_REF_JAX_DEVICE_TAG")
    if tag:
        with _capturing_as_in_collection(config):
            from jax._src import test_util

        device_tags = test_util._get_device_tags
        test_util._get_device_tags = lambda: device_tags() | {tag}


@contextmanager
def _capturing_as_in_collection(config):
    """Import JAX's test utilities with pytest's output capture on, as collection would.

    `jax._src.test_util` binds `sys.stdout` when it is imported
    (`capture_stdout = partial(_capture_output, sys.stdout)`), and
    `jtu.capture_stdout()` later redirects that object's file descriptor. A
    JAX run imports it while pytest collects the test modules, with pytest's
    capture resumed, so `sys.stdout` is pytest's capture file, the one a
    test's `print` (and `jax.debug.print`) writes to. `pytest_configure` runs
    with the capture suspended: importing it here would bind the terminal's
    stdout, and `jtu.capture_stdout()` would capture nothing the test prints.
    """
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None or not capture.is_globally_capturing():
        yield
        return
    capture.resume_global_capture()
    try:
        yield
    finally:
        capture.suspend_global_capture()
