"""Functions pjrt-ref hands to the caller inside Args, for it to call once, later.

Two entry points answer with a C function and a `callback_data` to pass it:

- PJRT_Buffer_CopyRawToHostFuture: `future_ready_callback` says where the
  bytes go (or why they go nowhere);
- PJRT_Buffer_DonateWithControlDependency: `dependency_ready_callback` says
  the control dependency is ready (or failed).

`callback_data` is a handle to a `CallerPromise`: the `Promise` the entry
point waits on, and how to read the value from the caller's callback Args.
The call consumes it (as XLA's wrapper deletes its callback data), so a
second call with the same data, or data pjrt-ref never handed out, is not
followed: the functions return nothing, so it is reported on stderr. The C
functions are in the shim (capi_shim/build_shim.py CALLER_CALLBACKS, guarded
like the slots); `install` binds their Python halves, below.
"""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

from pjrt_ref.errors import Internal, PjrtRefError
from pjrt_ref.capi import handles
from pjrt_ref.model.event import Promise
from pjrt_ref.capi import cdata
from pjrt_ref.capi.cdata import Args, text_arg


class CallerPromise:
    """What a handed-out `callback_data` points to (one call, then gone)."""

    def __init__(self, promise: Promise, read: Callable[[Args], Any]) -> None:
        self.promise = promise
        self.read = read        # the promised value, from the caller's callback Args


def hand_out(args: Args, callback_field: str, c_function: str, promise: Promise,
             read: Callable[[Args], Any] = lambda _: None) -> None:
    """Give the caller `callback_data` and the C function `c_function` (in `callback_field`)."""
    args.callback_data = handles.add(CallerPromise(promise, read))
    function_type = dict(cdata.ffi.typeof(args.raw).item.fields)[callback_field].type
    setattr(args, callback_field, cdata.ffi.cast(function_type, cdata.ffi.addressof(cdata.lib, c_function)))


def _called(raw, name: str) -> None:
    """One call of a handed-out function: settle its promise with the value or the caller's error."""
    try:
        args = Args(raw, name)
        pending = handles.remove(args.callback_data, CallerPromise, f"{name}.callback_data")
    except PjrtRefError as error:
        print(f"pjrt-ref: {name}: {error} (called twice, or with data pjrt-ref did not hand out): "
              "the call is ignored", file=sys.stderr)
        return
    try:
        code = int(args.error_code)
        if code != 0:
            message = text_arg(args.error_message, args.error_message_size, "error_message")
            pending.promise.fail(cdata.caller_error(name, code, message))
        else:
            pending.promise.set(pending.read(args))
    except PjrtRefError as error:
        pending.promise.fail(error)
    except Exception as error:   # nowhere to raise it: the promise fails with it, and it is printed
        traceback.print_exc()
        pending.promise.fail(Internal(f"{name}: internal error in pjrt-ref: {error!r}"))


def destination_ready(raw) -> None:
    """`future_ready_callback` of PJRT_Buffer_CopyRawToHostFuture (extern "Python")."""
    _called(raw, "PJRT_Buffer_CopyRawToHostFuture_Callback_Args")


def dependency_ready(raw) -> None:
    """`dependency_ready_callback` of PJRT_Buffer_DonateWithControlDependency (extern "Python")."""
    _called(raw, "PJRT_Buffer_DonateWithControlDependency_Callback_Args")


def install(ffi) -> None:
    """Bind the Python halves of the shim's CALLER_CALLBACKS."""
    ffi.def_extern(name="pjrt_ref_copy_raw_destination_ready_py")(destination_ready)
    ffi.def_extern(name="pjrt_ref_dependency_ready_py")(dependency_ready)
