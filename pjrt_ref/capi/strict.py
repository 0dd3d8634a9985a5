"""Strict mode (`PJRT_REF_STRICT=1`): check how the caller uses the PJRT C API.

For framework authors writing a PJRT client. Every violation is logged on
the `pjrt_ref.strict` logger, naming the entry point, and (where the entry
point returns a `PJRT_Error*`) returned as an INVALID_ARGUMENT or
FAILED_PRECONDITION error:

* struct sizes: an Args `struct_size` that no version of the header can
  produce (unset, garbage, not ending on a field) is an error; a smaller one
  from an older header is accepted (pjrt-ref reads only what it covers), but
  an entry point needing a field past it reports the violation; a larger one
  (a newer caller) is noted and its extra fields ignored;
* NULL where a value is required: a NULL Args pointer or a NULL handle;
* stale, foreign and mismatched handles: with strict mode on, a destroyed
  handle's address is never reused, so a later use is told apart from a
  pointer pjrt-ref never issued and from a handle of another kind;
* double destroy (a second `*_Destroy` on the same handle);
* use of a buffer after `PJRT_Buffer_Delete` or after it was donated to
  `PJRT_LoadedExecutable_Execute` (in the entry points that read its data),
  and running an executable after `PJRT_LoadedExecutable_Delete`;
* leaks: at `PJRT_Client_Destroy`, a report of the client's buffers and
  executables still alive and of every `PJRT_Event` and `PJRT_Error` never
  destroyed (pjrt_c_api.h: the caller owns these and must destroy them);
  at process exit, the events and errors still not destroyed.

Hooks: `_boundary.make_callback` wraps each entry point with `checked`;
`handles.get`/`handles.remove` report to `watch` (set by `enable`).
"""
from __future__ import annotations

import atexit
import logging
import sys
import threading
import weakref
from collections import Counter
from typing import Any, Callable

from pjrt_ref import settings
from pjrt_ref.capi import handles
from pjrt_ref.capi.cdata import ErrorObject
from pjrt_ref.errors import FailedPrecondition, InvalidArgument, PjrtRefError
from pjrt_ref.model.buffer import Buffer
from pjrt_ref.model.event import Event
from pjrt_ref.model.executable import LoadedExecutable

ENABLED = settings.get("PJRT_REF_STRICT")      # read once, at import: it decides how the slots are bound
LOG = logging.getLogger("pjrt_ref.strict")

# Entry points that read a buffer's contents: using a deleted/donated buffer there is a bug.
DATA_ACCESS = frozenset({
    "PJRT_Buffer_ToHostBuffer", "PJRT_Buffer_CopyToDevice", "PJRT_Buffer_CopyToMemory",
    "PJRT_Buffer_UnsafePointer", "PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
    "PJRT_Buffer_IncreaseExternalReferenceCount", "PJRT_Buffer_CopyRawToHost",
    "PJRT_LoadedExecutable_Execute", "PJRT_Buffer_ReadyEvent",
    "PJRT_Buffer_CopyRawToHostFuture", "PJRT_Buffer_Bitcast", "PJRT_Buffer_DonateWithControlDependency",
    "PJRT_Client_FulfillAliasBuffer",
})


class StrictViolation(InvalidArgument):
    """A misuse of the API found by strict mode (INVALID_ARGUMENT)."""


class UseAfterFree(FailedPrecondition):
    """A deleted or donated buffer used for its data (FAILED_PRECONDITION)."""


_local = threading.local()


def current_entry() -> str:
    """The entry point this thread is inside (or "?" outside any)."""
    return getattr(_local, "entry", "?")


def report(message: str, error: type[PjrtRefError] | None = StrictViolation) -> PjrtRefError | None:
    """Log one violation under the current entry point; the exception to raise, if any."""
    entry = current_entry()
    LOG.warning("%s: %s", entry, message)
    Watch.instance.count[entry] += 1
    return error(f"strict mode: {entry}: {message}") if error is not None else None


# ------------------------------------------------------------ entry points
def checked(name: str, invoke: Callable[[Any], None], ffi, returns_void: bool) -> Callable[[Any], None]:
    """`invoke(raw_args)` with the entry-point checks around it."""
    def run(raw) -> None:
        previous = current_entry()
        _local.entry = name
        try:
            _check_args(raw, ffi)
            if name == "PJRT_Client_Destroy":
                leak_report(raw.client)
            invoke(raw)
        except (StrictViolation, UseAfterFree):
            if not returns_void:      # PJRT_Error_Destroy/_Message cannot report: logged only
                raise
        except InvalidArgument as error:
            message = str(error).removeprefix(f"{name}: ")
            if "NULL" in message or "too small to hold" in message:  # a required field is missing
                report(message, error=None)
            raise
        finally:
            _local.entry = previous
    return run


# Entry points a caller uses while handling an error: failing them would make it loop.
NEVER_FAIL = frozenset({"PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode",
                        "PJRT_Error_ForEachPayload"})
_FIELD_ENDS: dict = {}
_NOTED: set = set()


def field_ends(ctype, ffi) -> list[int]:
    """Where each field of an Args struct ends: the sizes a caller's struct_size may take.

    pjrt_c_api.h's PJRT_STRUCT_SIZE(type, last_field) is the end of the last
    field (no tail padding), and an older header's struct is a prefix of ours,
    so a valid struct_size is the end of one of our fields.
    """
    ends = _FIELD_ENDS.get(ctype)
    if ends is None:
        ends = _FIELD_ENDS[ctype] = sorted(f.offset + ffi.sizeof(f.type) for _, f in ctype.fields)
    return ends


# Caller-provided structs inside Args that carry their own struct_size (input fields only:
# an output pointer may hold garbage and must not be followed).
NESTED = {
    "PJRT_Client_Compile": ("program",), "PJRT_Compile": ("program",),
    "PJRT_Executable_OptimizedProgram": ("program",), "PJRT_LoadedExecutable_Execute": ("options",),
}


def _check_args(raw, ffi) -> None:
    """NULL Args and struct_size against our header (pjrt_c_api.h PJRT_*_Args), nested structs too."""
    if raw == ffi.NULL:
        raise report("Args pointer is NULL")
    _check_struct_size(raw, ffi)
    for field in NESTED.get(current_entry(), ()):
        inside = int(raw.struct_size) > ffi.offsetof(ffi.typeof(raw).item, field)
        if inside and getattr(raw, field) != ffi.NULL:
            _check_struct_size(getattr(raw, field), ffi)


def _check_struct_size(raw, ffi) -> None:
    """One struct's struct_size: it must be a size some version of pjrt_c_api.h gives."""
    ctype = ffi.typeof(raw).item
    ends, theirs = field_ends(ctype, ffi), int(raw.struct_size)
    no_fields = theirs == ends[1] and len(ends) > 2       # nothing after extension_start
    if theirs < ends[1] or no_fields or (theirs < ends[-1] and theirs not in ends):
        # struct_size unset, garbage, or covering no field: no header has this size.
        problem = report(f"unknown struct_size {theirs} for {ctype.cname} (pjrt-ref's is {ends[-1]}; "
                         "an older header's size ends on one of its fields)",
                         error=None if current_entry() in NEVER_FAIL else StrictViolation)
        if problem is not None:
            raise problem
    elif theirs not in (ends[-1], ffi.sizeof(ctype)) and ctype not in _NOTED:
        # A different header version (sizeof, with tail padding, counts as ours): noted once.
        _NOTED.add(ctype)
        relation = "older (smaller)" if theirs < ends[-1] else "newer (larger; extra fields ignored)"
        LOG.info("%s: struct_size %d of %s: %s than pjrt-ref's %d", current_entry(), theirs,
                 ctype.cname, relation, ends[-1])


# ----------------------------------------------------------------- handles
class Watch:
    """What strict mode remembers about handles (called from pjrt_ref/capi/handles.py)."""

    instance: "Watch"

    def __init__(self) -> None:
        self.graveyard: dict[int, tuple[str, str, Any]] = {}   # address -> (kind, destroyed by, backing)
        self.deleted_by: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # buffer -> entry
        self.count: Counter = Counter()
        self.lock = threading.Lock()

    def removed(self, key: int, obj: Any, backing: Any, what: str) -> None:
        """A handle was destroyed: keep its memory so the address is never reused."""
        with self.lock:
            kind = _kind(obj) if what == "object" else what
            self.graveyard[key] = (kind, current_entry(), backing)

    def bad_handle(self, key: int, obj: Any, what: str) -> None:
        """`handles.get` failed: raise a precise violation."""
        if key == 0:
            raise report(f"NULL {what} where a value is required")
        dead = self.graveyard.get(key)
        if dead is not None:
            kind, destroyed_by, _ = dead
            if current_entry().endswith("_Destroy"):
                raise report(f"double destroy of {kind} 0x{key:x} (already destroyed by {destroyed_by})")
            raise report(f"use of destroyed {kind} 0x{key:x} (destroyed by {destroyed_by})")
        if obj is not None:
            raise report(f"0x{key:x} is a {_kind(obj)} handle, passed where a {what} is required")
        raise report(f"0x{key:x} is not a handle pjrt-ref issued (foreign or corrupt pointer), "
                     f"{what} expected")

    def used(self, obj: Any, what: str) -> None:
        """`handles.get` succeeded: a deleted buffer may not be read, a deleted executable not run."""
        if getattr(obj, "deleted", False) is True and current_entry() == "PJRT_LoadedExecutable_Execute":
            raise report(f"{what} run after PJRT_LoadedExecutable_Delete", UseAfterFree)
        if getattr(obj, "is_deleted", False) is True and current_entry() in DATA_ACCESS:
            how = self.deleted_by.get(obj, "PJRT_Buffer_Delete")
            reason = ("donated to PJRT_LoadedExecutable_Execute" if how == "PJRT_LoadedExecutable_Execute"
                      else f"deleted by {how}")
            raise report(f"use of {what} after it was {reason}", UseAfterFree)


def _kind(obj: Any) -> str:
    name = type(obj).__name__
    return {"ErrorObject": "PJRT_Error", "Topology": "PJRT_TopologyDescription"}.get(name, f"PJRT_{name}")


# -------------------------------------------------------------------- leaks
def leak_report(client_ptr) -> list[str]:
    """At PJRT_Client_Destroy: log what is still alive; returns the report's lines."""
    try:
        client = handles.get(client_ptr, object, "PJRT_Client")
    except PjrtRefError:
        return []                                  # the Destroy call itself reports it
    lines = _leaks(client)
    if lines:
        LOG.warning("PJRT_Client_Destroy: leak report: %s", "; ".join(lines))
    else:
        LOG.info("PJRT_Client_Destroy: leak report: nothing left alive")
    return lines


def exit_report() -> list[str]:
    """At process exit: events and errors never destroyed (a client may legitimately live on)."""
    lines = [line for line in _leaks(None) if "PJRT_Event" in line or "PJRT_Error" in line]
    if lines:
        LOG.warning("at exit: leak report: %s", "; ".join(lines))
    return lines


def _leaks(client) -> list[str]:
    """'N KIND never destroyed' lines: `client`'s buffers and executables, every event and error."""
    owned: Counter = Counter()
    for obj in handles.live_objects():
        if isinstance(obj, Buffer) and getattr(obj.device, "client", None) is client:
            owned["PJRT_Buffer" + (" (deleted, not destroyed)" if obj.is_deleted else "")] += 1
        elif isinstance(obj, LoadedExecutable) and obj.client is client:
            owned["PJRT_LoadedExecutable"] += 1
        elif isinstance(obj, Event):
            owned["PJRT_Event"] += 1
        elif isinstance(obj, ErrorObject):
            owned["PJRT_Error"] += 1
    return [f"{n} {kind} never destroyed" for kind, n in sorted(owned.items())]


# ------------------------------------------------------------------ enable
def _record_deletion(delete: Callable) -> Callable:
    """Wrap `Buffer.delete` to remember which entry point deleted (or donated) a buffer."""
    def recorded(buffer) -> None:
        Watch.instance.deleted_by[buffer] = current_entry()
        delete(buffer)
    recorded.__doc__ = delete.__doc__
    return recorded


def enable() -> None:
    """Turn strict mode on (called by `_boundary.bind` when PJRT_REF_STRICT=1)."""
    if handles.watch is not None:
        return
    if not LOG.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("pjrt-ref strict: %(message)s"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)
    Watch.instance = Watch()
    Buffer.delete = _record_deletion(Buffer.delete)
    atexit.register(exit_report)
    handles.watch = Watch.instance


Watch.instance = Watch()
