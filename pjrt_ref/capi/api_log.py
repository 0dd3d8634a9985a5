"""The API log (PJRT_REF_LOG_API=1): its switch, its logger, and what it says about each call.

`logged` wraps an entry point (capi/_boundary.py `make_callback` does it
for every one when `ENABLED`) so that each call and its outcome go to the
`pjrt_ref.api` logger `LOG`; the profiler extension's callbacks use the
same switch and logger.

`describe_inputs` runs before an entry point, `describe_outputs` after it;
both return short `key=value` text. Handles (`PJRT_Buffer*`, `PJRT_Event*`,
...) are every field whose type is a pointer to an opaque PJRT struct: the
ones naming a live handle on entry are inputs, the ones that changed are
outputs. A few entry
points add their key arguments (shapes and types of host transfers, program
size and name for Compile, argument and output buffers for Execute).
"""
from __future__ import annotations

import logging
import sys
from typing import Any, Callable

from pjrt_ref.capi import handles
from pjrt_ref import settings
from pjrt_ref.capi import cdata
from pjrt_ref.capi.cdata import Args, text_arg
from pjrt_ref.model.dtypes import BufferType

ENABLED = settings.get("PJRT_REF_LOG_API")      # read once, at import: it decides how the slots are bound
LOG = logging.getLogger("pjrt_ref.api")

_HANDLE_FIELDS: dict[Any, tuple[str, ...]] = {}


def _handle_fields(args) -> tuple[str, ...]:
    """Names of the Args fields holding opaque handles (and within struct_size)."""
    ffi = cdata.ffi
    ctype = ffi.typeof(args.raw).item
    names = _HANDLE_FIELDS.get(ctype)
    if names is None:
        names = tuple(name for name, field in ctype.fields
                      if field.type.kind == "pointer" and field.type.item.kind == "struct"
                      and _is_opaque(ffi, field.type.item) and name != "extension_start")
        _HANDLE_FIELDS[ctype] = names
    return tuple(name for name in names if args.has(name))


def _is_opaque(ffi, ctype) -> bool:
    """True for a declared-only struct (a handle type such as PJRT_Buffer)."""
    try:
        ffi.sizeof(ctype)
    except ffi.error:
        return True
    return False


def _handle_text(ptr) -> str:
    address = handles.address(ptr)
    return "NULL" if address == 0 else f"0x{address:x}"


def _object(ptr):
    try:
        return handles.get(ptr, object)
    except Exception:
        return None


def _buffer_type_name(value: int) -> str:
    try:
        return BufferType(int(value)).name
    except ValueError:
        return str(int(value))


def _is_null(ptr) -> bool:
    return handles.address(ptr) == 0


def _dims(ptr, count: int) -> str:
    if _is_null(ptr):
        return "NULL"
    return "[" + ",".join(str(int(ptr[i])) for i in range(count)) + "]"


def _buffer_text(ptr) -> str:
    buffer = _object(ptr)
    array = getattr(buffer, "array", None) if buffer is not None else None
    shape = f" {array.dtype}{list(array.shape)}" if array is not None and hasattr(array, "shape") else ""
    return _handle_text(ptr) + shape


# ---------------------------------------------------------- key arguments
def _compile_inputs(args) -> str:
    program = args.program
    if _is_null(program):
        return "program=NULL"
    fmt = text_arg(program.format, int(program.format_size))
    return f"program={fmt}, {int(program.code_size)} bytes"


def _from_host_inputs(args) -> str:
    return f"type={_buffer_type_name(args.type)} dims={_dims(args.dims, int(args.num_dims))}"


def _execute_inputs(args) -> str:
    num_args = int(args.num_args)
    lists = args.argument_lists
    if num_args and (_is_null(lists) or _is_null(lists[0])):
        return f"num_args={num_args} argument_lists=NULL"
    buffers = [_buffer_text(lists[0][i]) for i in range(num_args)] if int(args.num_devices) else []
    return f"num_args={num_args} args=[{', '.join(buffers)}]"


def _compile_outputs(args) -> str:
    loaded = _object(args.executable)
    name = getattr(getattr(loaded, "executable", None), "name", None)
    return f"name={name}" if name else ""


def _execute_outputs(args) -> str:
    loaded = _object(args.executable)
    count = getattr(getattr(loaded, "executable", None), "num_outputs", 0)
    lists = args.output_lists
    if _is_null(lists) or _is_null(lists[0]) or not int(args.num_devices):
        return ""
    outputs = [_buffer_text(lists[0][i]) for i in range(count)]
    text = f"outputs=[{', '.join(outputs)}]"
    events = args.get("device_complete_events")
    if events is not None and handles.address(events) != 0:
        text += f" device_complete_event={_handle_text(events[0])}"
    return text


def _to_host_inputs(args) -> str:
    if _is_null(args.src):
        return ""
    text = _buffer_text(args.src).split(" ", 1)
    return f"src_shape={text[1]}" if len(text) == 2 else ""


INPUTS = {
    "PJRT_Client_Compile": _compile_inputs,
    "PJRT_Client_BufferFromHostBuffer": _from_host_inputs,
    "PJRT_LoadedExecutable_Execute": _execute_inputs,
    "PJRT_Buffer_ToHostBuffer": _to_host_inputs,
}
OUTPUTS = {
    "PJRT_Client_Compile": _compile_outputs,
    "PJRT_LoadedExecutable_Execute": _execute_outputs,
}


def describe_inputs(name: str, args) -> tuple[str, dict]:
    """(text, snapshot of the handle fields) before the call."""
    snapshot = {}
    parts = []
    try:
        for field in _handle_fields(args):
            ptr = getattr(args.raw, field)
            address = handles.address(ptr)
            snapshot[field] = address
            if address and _object(ptr) is not None:  # live: an input (outputs hold junk)
                parts.append(f"{field}=0x{address:x}")
        extra = INPUTS.get(name)
        if extra is not None:
            parts.append(extra(args))
    except Exception as exc:  # the log must never break a call
        parts.append(f"(arguments unreadable: {type(exc).__name__})")
    return " ".join(p for p in parts if p), snapshot


def describe_outputs(name: str, args, snapshot: dict) -> str:
    """Handles the call wrote (fields that changed) and the entry point's key results."""
    parts = []
    try:
        for field, before in snapshot.items():
            address = handles.address(getattr(args.raw, field))
            if address != before:
                parts.append(f"{field}=0x{address:x}")
        extra = OUTPUTS.get(name)
        if extra is not None:
            parts.append(extra(args))
    except Exception as exc:
        parts.append(f"(results unreadable: {type(exc).__name__})")
    return " ".join(p for p in parts if p)


def logged(name: str, fn: Callable[[Args], None]) -> Callable[[Args], None]:
    """`fn`, logging each call and its outcome to the `pjrt_ref.api` logger: on stderr,
    or through the host's handlers if it configured logging (at INFO even if its
    root level is higher, as PyTorch/XLA's WARNING is)."""
    if not logging.getLogger().handlers and not LOG.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("pjrt-ref: %(message)s"))
        LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)

    def logged_call(args: Args) -> None:
        inputs, snapshot = describe_inputs(name, args)
        LOG.info("-> %s %s", name, inputs)
        try:
            fn(args)
        except BaseException as exc:
            LOG.info("<- %s error %s: %s", name, type(exc).__name__, exc)
            raise
        LOG.info("<- %s ok %s", name, describe_outputs(name, args, snapshot))
    return logged_call
