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

One more place asks by platform name: JAX's test harnesses
(`jax._src.internal_test_util.test_harnesses`, which `shape_poly_test.py`
generates its cases from) list, per platform, the dtypes JAX's lowering
rules leave unimplemented, and a file generates cases for
`jtu.device_under_test()` only. pjrt_ref lowers those ops with cpu's rules
(frameworks/jax/cpu_only_rules.py), so cpu's limitations are its own: the
harnesses are asked about the tag's platform. Asked about "pjrt_ref", they
generate cases cpu leaves out (LU, QR, SVD and eig of bfloat16), which fail
in cpu's lowering on either backend, instead of the cases cpu runs.

The harnesses are patched when a test file first imports them, not here:
importing them starts JAX's backends (`jtu.dtypes` asks the default
device), and a test file must be able to ask for its devices first
(`jtu.request_cpu_devices(8)` at its top).

A test that sets JAX's mesh with `jax.set_mesh(mesh)` outside a `with`
(`pallas/tpu_pallas_interpret_distributed_test.py` does) leaves it set in
the worker's thread for every later test, which then fails with "cannot
change the size of the mesh" or "incompatible devices" on either backend,
depending only on which worker pytest-xdist gave it. After each test the
plugin puts the mesh contexts back as they were before it and warns, naming
the test: each test starts from the state a fresh process would give it.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from contextlib import contextmanager

import pytest

from pjrt_ref import settings

HARNESSES = "jax._src.internal_test_util.test_harnesses"


def pytest_configure(config) -> None:
    tag = settings.get("PJRT_REF_JAX_DEVICE_TAG")
    if tag:
        with _capturing_as_in_collection(config):
            from jax._src import test_util

        device_tags = test_util._get_device_tags
        test_util._get_device_tags = lambda: device_tags() | {tag}
        after_import(HARNESSES, lambda harnesses: ask_harnesses_as(harnesses, tag))


MESH_CONTEXTS = ("device_context", "abstract_mesh_context_manager")


MESH_BEFORE = pytest.StashKey[tuple]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    item.stash[MESH_BEFORE] = mesh_contexts()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test's teardown, undo a mesh it left set (module docstring)."""
    yield
    before = item.stash.get(MESH_BEFORE, None)
    if before is not None and mesh_contexts() != before:
        restore_mesh_contexts(before)
        warnings.warn(f"{item.nodeid} left JAX's mesh set (jax.set_mesh outside a `with`); "
                      "pjrt-ref's test plugin restored it before the next test")


def mesh_contexts() -> tuple | None:
    """This thread's own values of JAX's mesh contexts, or None before JAX is imported."""
    config = sys.modules.get("jax._src.config")
    if config is None:
        return None
    return tuple(getattr(config, name).get_local() for name in MESH_CONTEXTS)


def restore_mesh_contexts(values: tuple) -> None:
    config = sys.modules["jax._src.config"]
    for name, value in zip(MESH_CONTEXTS, values):
        getattr(config, name).set_local(value)


def ask_harnesses_as(harnesses, tag: str) -> None:
    """JAX's harnesses answer for pjrt_ref what they answer for `tag` (module docstring)."""
    ask = harnesses.Harness.filter

    def filter_as_tag(self, device_under_test, **options):
        return ask(self, tag if device_under_test == "pjrt_ref" else device_under_test, **options)

    harnesses.Harness.filter = filter_as_tag


def after_import(name: str, then) -> None:
    """Call `then(module)` once module `name` is imported, without importing it now."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder that answers for one module only, once: it finds the module's
    spec with the other finders and wraps its loader so that `then` runs on
    the module right after the module's own code."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThen(spec.loader, self.then)
        return spec


class _LoaderThen(importlib.abc.Loader):
    """`loader`, calling `then(module)` after executing the module."""

    def __init__(self, loader, then):
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.then(module)

    def __getattr__(self, name):  # get_source, is_package, ...: the wrapped loader's
        return getattr(self.loader, name)


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
