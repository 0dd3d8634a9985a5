"""The PJRT profiler extension: pjrt-ref's slices inside `jax.profiler.trace`.

The shim announces a `PJRT_Profiler_Extension` on `PJRT_Api.extension_start`
(capi_shim/profiler_extension.py, capi_shim/pjrt_profiler_extension.h).
jaxlib finds it when it loads the plugin (`register_plugin_profiler`) and,
for every profiling session (`jax.profiler.trace`, `start_trace`), drives
the five functions bound here:

    create        a new `TraceSession` (live_profile.py) behind a handle
    start         record compile, execute and per-op slices from now on
    stop          stop recording
    collect_data  the slices as a serialized tensorflow.profiler.XSpace
                  (xspace.py), in memory the session owns until destroy
    destroy       forget the session

Each callback catches everything: an exception becomes a
`PLUGIN_Profiler_Error` (the extension's own error type, made in C by
`pjrt_ref_profiler_error_new`) with the code of a `PjrtRefError`, INTERNAL
otherwise. The host does not set `struct_size` in these Args structs, so it
is never read (see the header).
"""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

from pjrt_ref.capi import handles
from pjrt_ref.errors import ErrorCode, InvalidArgument, PjrtRefError
from pjrt_ref.capi import api_log
from pjrt_ref.debug import live_profile, xspace

_ffi: Any = None
_lib: Any = None


class ProfilerHandle:
    """What a `PLUGIN_Profiler*` names: a session and the bytes last collected."""

    def __init__(self, options: bytes) -> None:
        self.options = options           # serialized tensorflow.ProfileOptions (kept, not interpreted)
        self.session = live_profile.TraceSession()
        self.collected = None            # cdata owning the XSpace handed to the host: exactly its bytes


def _session(args) -> ProfilerHandle:
    return handles.get(args.profiler, ProfilerHandle, "PLUGIN_Profiler")


# ------------------------------------------------------------ the functions
def create(args) -> None:
    options = b"" if args.options == _ffi.NULL else bytes(_ffi.buffer(args.options, args.options_size))
    args.profiler = _ffi.cast("PLUGIN_Profiler*", handles.add(ProfilerHandle(options)))


def destroy(args) -> None:
    handle = handles.remove(args.profiler, ProfilerHandle, "PLUGIN_Profiler")
    handle.session.stop()
    handle.collected = None


def start(args) -> None:
    _session(args).session.start()


def stop(args) -> None:
    _session(args).session.stop()


def collect_data(args) -> None:
    """The XSpace of the session's slices.

    With `buffer == NULL` (what jaxlib does) the answer is our own bytes,
    valid until the next collect_data or destroy; with a caller's buffer
    (the header's two-call protocol) the bytes are copied into it.
    """
    handle = _session(args)
    if args.buffer == _ffi.NULL:
        data = xspace.xspace(handle.session.slices)
        handle.collected = _exact_copy(data) if data else None
        args.buffer = handle.collected if data else _ffi.NULL
        args.buffer_size_in_bytes = len(data)
        return
    if handle.collected is None:
        raise InvalidArgument("PLUGIN_Profiler_CollectData: call it with buffer == NULL first")
    # The caller's buffer holds the size the first call reported, no more.
    size = _ffi.sizeof(handle.collected)
    _ffi.memmove(args.buffer, handle.collected, size)
    args.buffer_size_in_bytes = size


def _exact_copy(data: bytes):
    """`data` in C memory of exactly len(data) bytes.

    Not `ffi.new("uint8_t[]", data)`: made from bytes, cffi's array gets a
    NUL at the end, one byte more than the size reported, and copying it into
    the caller's buffer (sized as reported) would write past that buffer's end.
    """
    copy = _ffi.new("uint8_t[]", len(data))
    _ffi.memmove(copy, data, len(data))
    return copy


# ------------------------------------------------------------ the boundary
def _error(name: str, exc: BaseException):
    """A `PLUGIN_Profiler_Error*` for `exc` (never raises)."""
    try:
        if isinstance(exc, KeyboardInterrupt):   # re-raised in the host's Python code (capi/cdata.py)
            _lib.pjrt_ref_request_interrupt()
            code, text = int(ErrorCode.CANCELLED), f"{name}: interrupted by KeyboardInterrupt (Ctrl-C)"
        elif isinstance(exc, PjrtRefError):
            code, text = int(exc.code), f"{name}: {exc}"
        else:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            code, text = int(ErrorCode.INTERNAL), f"{name}: internal error in pjrt-ref: {detail}"
        data = text.encode("utf-8", "replace")
        return _lib.pjrt_ref_profiler_error_new(code, data, len(data))
    except BaseException:  # pragma: no cover - building the error failed (MemoryError...)
        traceback.print_exc(file=sys.stderr)
        return _lib.pjrt_ref_profiler_error_new(int(ErrorCode.INTERNAL), b"pjrt-ref profiler error", 23)


def _callback(name: str, fn: Callable[[Any], None]) -> Callable[[Any], Any]:
    """What cffi runs: `fn`, logged like the PJRT entry points under PJRT_REF_LOG_API=1."""
    if api_log.ENABLED:
        fn = _logged(name, fn, api_log.LOG)

    def callback(args):
        try:
            fn(args)
            return _ffi.NULL
        except BaseException as exc:
            return _error(name, exc)
    return callback


def _logged(name: str, fn: Callable[[Any], None], log) -> Callable[[Any], None]:
    """`fn`, with its call and outcome on the `pjrt_ref.api` log (as `PJRT_REF_LOG_API=1` does)."""
    creates = name == "PLUGIN_Profiler_Create"      # its `profiler` is an output

    def logged(args) -> None:
        log.info("-> %s%s", name, "" if creates else f" profiler=0x{handles.address(args.profiler):x}")
        try:
            fn(args)
        except BaseException as exc:
            log.info("<- %s error %s: %s", name, type(exc).__name__, exc)
            raise
        if creates:
            log.info("<- %s ok profiler=0x%x", name, handles.address(args.profiler))
        elif name == "PLUGIN_Profiler_CollectData":
            log.info("<- %s ok bytes=%d", name, args.buffer_size_in_bytes)
        else:
            log.info("<- %s ok", name)
    return logged


FUNCTIONS = {"create": create, "destroy": destroy, "start": start, "stop": stop,
             "collect_data": collect_data}


def install(ffi, lib) -> None:
    """Bind the shim's `pjrt_ref_profiler_*` callbacks (from `pjrt_ref.capi.install`)."""
    global _ffi, _lib
    if not hasattr(lib, "pjrt_ref_profiler_error_new"):   # a shim built before the extension existed
        return
    _ffi, _lib = ffi, lib
    for name, fn in FUNCTIONS.items():
        ffi.def_extern(name=f"pjrt_ref_profiler_{name}")(_callback(f"PLUGIN_Profiler_{_title(name)}", fn))


def _title(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))
