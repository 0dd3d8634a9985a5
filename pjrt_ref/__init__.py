"""pjrt-ref: a reference PJRT plugin written in Python.

`library_path()` is the PJRT plugin to hand to a framework (JAX registers it
through the `jax_plugins` entry point, see `pjrt_ref.frameworks.jax`).
"""
from __future__ import annotations

import importlib.util
import os
import sys

from pjrt_ref import package_home as _package_home

__version__ = "0.1.0"

SHIM_MODULE = "pjrt_ref.capi_shim._pjrt_ref_shim"


ISOLATED_RUNTIME_MODULE = "pjrt_ref.capi_shim._pjrt_ref_isolated"

RECORDING_PROXY_MODULE = "pjrt_ref.capi_shim._pjrt_ref_recorder"


def library_path(runtime: str = "shared") -> str:
    """Absolute path of the PJRT plugin library to hand to a framework.

    PJRT_REF_RUNTIME, else `runtime` (the framework's default), says which:
    "isolated", the small library that gives the plugin a Python of its own
    (capi_shim/isolated_runtime.c); "shared", the shim itself, which runs
    in the host's Python.
    """
    from pjrt_ref import settings

    if (settings.get("PJRT_REF_RUNTIME") or runtime) == "isolated":
        return _built_library(ISOLATED_RUNTIME_MODULE)
    return shim_path()


def recording_proxy_path() -> str:
    """Absolute path of the recording proxy, a PJRT plugin that forwards to
    another and keeps what it compiles and runs (capi_shim/recording_proxy.c;
    the plugin test kit puts it in front of the plugin under test)."""
    return _built_library(RECORDING_PROXY_MODULE)


def shim_path() -> str:
    """Absolute path of the built cffi shim, the library every slot is in.

    Found without importing it, so a framework's dlopen is the first load.
    """
    loaded = sys.modules.get(SHIM_MODULE)       # already loaded (e.g. by a host's dlopen)
    if loaded is not None:                      # ask the library itself (dladdr)
        return loaded.ffi.string(loaded.lib.pjrt_ref_shim_path()).decode()
    return _built_library(SHIM_MODULE)


def _built_library(module: str) -> str:
    try:
        spec = importlib.util.find_spec(module)
    except ValueError:                          # in sys.modules without a __spec__
        spec = None
    if spec is None or not spec.origin:
        raise FileNotFoundError(
            f"pjrt-ref's library {module} is not built: install pjrt-ref (`pip install .`, "
            "or `pip install -e .` to work on a checkout)")
    return os.path.realpath(spec.origin)


# In a checkout, pjrt_ref/ lacks the folders the install puts inside it; this
# maps them, or hands the import to a non-editable install (package_home.py).
_package_home.settle_checkout(__path__[0])
