"""The top of the C/Python boundary: entry point registration and the callbacks cffi runs.

Every entry point is a Python function `fn(args)` registered with
`@entry_point("PJRT_...")`. `make_callback` wraps it into the function cffi
calls from C: it views the Args struct through `cdata.Args` (which respects
the caller's `struct_size`), runs `fn`, and turns any exception into a
`PJRT_Error*` (a `PjrtRefError` keeps its code, anything else is INTERNAL).
Nothing escapes into C. Around `fn` it puts the API log (api_log.py),
strict mode's checks (strict.py) and the finishing of buffer destroys the C
fast paths answered (fast_paths.py).

Those three import neither this module nor any entry point module (the C
data they need is below them, in cdata.py), so this module sits above them
and imports them; the entry point modules import it for `entry_point`.
"""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

from pjrt_ref.capi import strict
from pjrt_ref.capi import api_log
from pjrt_ref.errors import ErrorCode
from pjrt_ref.capi import cdata, fast_paths
from pjrt_ref.capi.cdata import Args, error_from_exception, new_error, owned_text

REGISTRY: dict[str, Callable[[Args], None]] = {}


def bind(shim_ffi, shim_lib) -> None:
    """Bind the C data, then strict mode (PJRT_REF_STRICT=1) and the fast paths, to the shim."""
    cdata.bind(shim_ffi, shim_lib)
    if strict.ENABLED:
        strict.enable()
    fast_paths.bind(shim_ffi, shim_lib)


def entry_point(name: str):
    """Register `fn` as the implementation of the PJRT entry point `name`."""
    def register(fn):
        fn.entry_point = name
        REGISTRY[name] = fn
        return fn
    return register


def make_callback(name: str, fn: Callable[[Args], None], returns_void: bool = False):
    """The Python function cffi runs for slot `name` (PJRT_REF_LOG_API=1 logs each call)."""
    if api_log.ENABLED:
        fn = api_log.logged(name, fn)
    invoke = lambda raw: fn(Args(raw, name))  # noqa: E731
    if strict.ENABLED:  # PJRT_REF_STRICT=1: API-usage checks around the call (pjrt_ref/capi/strict.py)
        invoke = strict.checked(name, invoke, cdata.ffi, returns_void)
    settle = fast_paths.finish_buffer_destroys    # destroys answered in C: done before any handle lookup
    if returns_void:
        def void_callback(raw):
            try:
                settle()
                invoke(raw)
            except KeyboardInterrupt:  # keep the Ctrl-C for the host's Python code (see cdata.py `_interrupted`)
                cdata.lib.pjrt_ref_request_interrupt()
            except BaseException:  # nowhere to report it: print, never raise into C
                print(f"pjrt-ref: {name} failed:", file=sys.stderr)
                traceback.print_exc()
        return void_callback

    def callback(raw):
        try:
            settle()
            invoke(raw)
            return cdata.NULL
        except BaseException as exc:
            return failed_call_error(name, exc)
    return callback


def failed_call_error(name: str, exc: BaseException):
    """The `PJRT_Error*` for a failed call (NULL would read as success, so retry building it).

    Building the error can itself be interrupted (a KeyboardInterrupt that
    arrives meanwhile, a MemoryError): then it is built again, with a plain
    message on the last tries. Only if all fail is NULL returned.
    """
    for attempt in range(4):
        try:
            if attempt < 2:
                return error_from_exception(name, exc)
            return new_error(ErrorCode.INTERNAL, f"{name} failed")
        except BaseException:
            pass
    traceback.print_exc()  # pragma: no cover
    return cdata.NULL


def unimplemented_callback(name: str):
    """Slot stub: an UNIMPLEMENTED error naming the entry point."""
    message = f"{name} is not implemented by pjrt-ref"

    def callback(raw):
        if api_log.ENABLED:
            api_log.LOG.info("-> %s (UNIMPLEMENTED)", name)
        try:
            return new_error(ErrorCode.UNIMPLEMENTED, message)
        except BaseException:  # pragma: no cover
            return cdata.NULL
    return callback


def register_text_queries(queries: dict[str, tuple[str, str]], object_of: Callable[[Args], Any]) -> None:
    """Register entry points that only return one text attribute of an object.

    `queries` maps an entry point name to (out field, attribute): the entry
    point finds its object with `object_of(args)` and writes the attribute's
    text, owned by that object, to `args.<out field>` and `<out field>_size`
    (e.g. PJRT_Memory_Kind, PJRT_DeviceDescription_DebugString).
    """
    def text_query(out_field: str, attribute: str):
        def query(args: Args) -> None:
            owner = object_of(args)
            pointer, size = owned_text(owner, attribute, getattr(owner, attribute))
            setattr(args, out_field, pointer)
            setattr(args, out_field + "_size", size)
        query.__doc__ = f"The {attribute.replace('_', ' ')} text of the object, owned by it."
        return query

    for name, (out_field, attribute) in queries.items():
        entry_point(name)(text_query(out_field, attribute))


__all__ = ["REGISTRY", "bind", "entry_point", "make_callback", "unimplemented_callback", "register_text_queries"]
