"""The PJRT C API in Python: one function per entry point, grouped by object.

`install(ffi, lib)` is called once, by capi_shim/boot.py when GetPjrtApi boots the plugin. It
binds every slot of the `PJRT_Api` table (capi_shim/entry_points.py) to
its implementation here, or to a stub answering UNIMPLEMENTED with the entry
point's name.

Modules: error, plugin, event, client, device, memory, topology, executable,
buffer, client_buffers (error, view and alias buffers), transfer;
`caller_callbacks` holds the functions handed to the caller inside Args;
`cdata` holds the C data they share (Args access within the caller's
struct_size, PJRT_Error creation, C memory owned by Python objects),
`handles` the table from C handles to the model's objects, and
`_boundary` registers them and wraps each into the callback cffi runs.
"""
from __future__ import annotations

import atexit
import time

from pjrt_ref.capi import _boundary, cdata
# The modules of the entry points (importing one registers its entry points) and the profiler extension's callbacks.
from pjrt_ref.capi import (buffer, caller_callbacks, client, client_buffers, custom_partitioner_extension,  # noqa: F401
                           device, error, event, ffi_extension, host_callbacks, memory, memory_descriptions_extension,
                           plugin, profiler_extension, topology, transfer)
from pjrt_ref.capi_shim import entry_points
from pjrt_ref import settings
# Importing pjrt_ref.debug also plugs PJRT_REF_PROFILE's and _DIFF's sinks into the interpreter.
from pjrt_ref.debug import live_profile

_installed = False


def _slot_table():
    return entry_points


def install(ffi, lib) -> None:
    """Bind every `extern "Python"` slot callback of the shim."""
    global _installed
    if _installed:
        return
    _boundary.bind(ffi, lib)
    if lib.pjrt_ref_runs_isolated():     # a Python of our own: read the host's live environment
        settings.read_environment_with(lambda name: _host_environment_value(ffi, lib, name))
    # Their entry points; they import spmd.partitioner, and with it jaxlib's MLIR bindings (deferred_imports.py).
    from pjrt_ref.capi import executable, layouts_extension, shardings_extension  # noqa: F401

    table = _slot_table()
    for name in table.SLOTS + table.EXTENSION_FUNCTIONS:   # the table's and the extensions'
        fn = _boundary.REGISTRY.get(name)
        if fn is None:
            callback = _boundary.unimplemented_callback(name)
        else:
            callback = _boundary.make_callback(name, fn, returns_void=name in table.RETURNS_VOID)
        ffi.def_extern(name=table.callback_name(name))(callback)
    ffi.def_extern(name="pjrt_ref_release_blob")(cdata.release_blob)
    ffi.def_extern(name="pjrt_ref_callback_error")(host_callbacks.callback_error)
    ffi.def_extern(name="pjrt_ref_release_bytes")(cdata.release_bytes)
    caller_callbacks.install(ffi)      # functions handed to the caller inside Args
    profiler_extension.install(ffi, lib)   # the PJRT profiler extension's callbacks
    live_profile.watch_from_settings()    # PJRT_REF_PROFILE: slices from the start
    lib.pjrt_ref_gil_watch(settings.get("PJRT_REF_GIL_STALL"))   # the hang detector
    atexit.register(_drain, lib)
    _installed = True


def _host_environment_value(ffi, lib, name: str) -> str:
    value = lib.pjrt_ref_environment_value(name.encode())
    return "" if value == ffi.NULL else ffi.string(value).decode(errors="replace")


def _drain(lib, timeout: float = 5.0) -> None:
    """At exit: from now on only this thread may enter Python through the shim.

    Other threads (a framework's pool freeing executables, say) get a no-op
    or an UNAVAILABLE error instead of blocking on the GIL of an interpreter
    that is about to finalize (which would kill them mid-unwind). Calls
    already inside finish first; we release the GIL while waiting.
    """
    lib.pjrt_ref_begin_shutdown()
    deadline = time.monotonic() + timeout
    while lib.pjrt_ref_inflight_calls() > 0 and time.monotonic() < deadline:
        time.sleep(0.001)


def implemented() -> list[str]:
    """Entry points with a real implementation (the rest answer UNIMPLEMENTED)."""
    return sorted(_boundary.REGISTRY)
