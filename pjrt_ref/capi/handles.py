"""One table from opaque C handles (`PJRT_Client*`, `PJRT_Buffer*`, ...) to Python objects.

The C API hands out pointers the caller never dereferences. Each handle here
is a real (tiny, zeroed) allocation owned by the table, so its address is
unique for as long as it lives and never reused while registered. Looking up
a pointer that is not in the table, or that names an object of another kind,
raises `InvalidArgument` instead of crashing: stale and foreign pointers
become PJRT errors.

The table belongs to the C API layer: the model knows nothing of handles.
It announces each buffer whose contents go (`model/buffer.py`
DELETION_LISTENERS), which `bind` subscribes `facts_changed` to, and a
client counts its live buffers from what `live_objects` lists (`model/client.py`
REACHABLE_SOURCES, filled by `bind` too).

Once the shim is bound, `c_facts` (pjrt_ref/capi/fast_paths.py) mirrors
what the C fast paths need into a C table: facts recorded on `add`,
forgotten on `remove` (before this table drops the handle, so C never knows
more handles than Python). It also makes C-only ready events (handles with
no entry in `_objects`): `get` and `remove` recognise those through it.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, TypeVar

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.model import buffer as model_buffer, client as model_client
from pjrt_ref.model.event import COMPLETE

T = TypeVar("T")

_ffi = None                       # set by bind(); the shim's cffi FFI object
_types = None                     # (uintptr_t, uint64_t[2], void*): resolved once, for the hot paths
_lock = threading.Lock()
_objects: dict[int, tuple[Any, Any]] = {}   # address -> (object, backing allocation)
# The backing memory of the last QUARANTINE destroyed handles stays allocated,
# so their addresses are not handed out again soon: a use after destroy (or a
# double destroy) is "not a live handle" rather than silently reaching
# whatever object reused the address. Bounded: ~100 bytes per entry.
QUARANTINE = 8192
_quarantine: "collections.deque" = collections.deque(maxlen=QUARANTINE)
watch = None      # PJRT_REF_STRICT=1: the strict-mode observer (pjrt_ref/capi/strict.py Watch)
c_facts = None    # the shim's C fact table (pjrt_ref/capi/fast_paths.py CFacts), once bound


def bind(ffi) -> None:
    """Called once by `pjrt_ref.capi.install` with the shim's FFI; from then on the
    model's buffer deletions reach the C facts and its clients count buffers here."""
    global _ffi, _types
    _ffi = ffi
    _types = (ffi.typeof("uintptr_t"), ffi.typeof("uint64_t[2]"), ffi.typeof("void*"))
    if facts_changed not in model_buffer.DELETION_LISTENERS:
        model_buffer.DELETION_LISTENERS.append(facts_changed)
    if live_objects not in model_client.REACHABLE_SOURCES:
        model_client.REACHABLE_SOURCES.append(live_objects)


def address(ptr) -> int:
    """The integer address behind a cdata pointer (0 for NULL)."""
    return int(_ffi.cast(_types[0], ptr))


def add(obj: Any):
    """Register `obj` under a fresh handle; returns it as a `void*` cdata."""
    uintptr, backing_type, void_pointer = _types
    backing = _ffi.new(backing_type)
    key = int(_ffi.cast(uintptr, backing))
    with _lock:
        _objects[key] = (obj, backing)
    if c_facts is not None:
        c_facts.added(key, obj)
    return _ffi.cast(void_pointer, backing)


def facts_changed(obj: Any) -> None:
    """`obj` (a Buffer, whose handle is `obj.handle`) was deleted: tell the C fact table."""
    if c_facts is not None and obj.handle is not None:
        c_facts.buffer_deleted(address(obj.handle))


def get(ptr, kind: type[T], what: str | None = None) -> T:
    """The live object of type `kind` behind `ptr`, or InvalidArgument."""
    return get_address(int(_ffi.cast(_types[0], ptr)), kind, what)


def get_address(key: int, kind: type[T], what: str | None = None) -> T:
    """`get` for a handle given by its address."""
    entry = _objects.get(key)
    if entry is not None and watch is None and isinstance(entry[0], kind):   # (_get's common case: a hot path)
        return entry[0]
    return _get(key, kind, what)


def _get(key: int, kind: type[T], what: str | None) -> T:
    entry = _objects.get(key)
    if entry is None or not isinstance(entry[0], kind):
        if entry is None and c_facts is not None:     # a C-only handle (a ready event)?
            obj = c_facts.c_only(key)
            if obj is not None and isinstance(obj, kind):
                return obj
        name = what or kind.__name__
        if watch is not None:
            watch.bad_handle(key, entry[0] if entry else None, name)
        if key == 0:
            raise InvalidArgument(f"{name} handle is NULL")
        raise InvalidArgument(f"0x{key:x} is not a live {name} handle")
    if watch is not None:
        watch.used(entry[0], what or kind.__name__)
    return entry[0]


def remove(ptr, kind: type[T], what: str | None = None) -> T:
    """Unregister `ptr` (after checking it names a `kind`); returns the object."""
    return remove_address(address(ptr), kind, what)


def remove_address(key: int, kind: type[T], what: str | None = None) -> T:
    """`remove` for a handle given by its address."""
    entry = _objects.get(key)
    obj = entry[0] if entry is not None and watch is None and isinstance(entry[0], kind) else _get(key, kind, what)
    if c_facts is not None:
        c_facts.removed(key)
    with _lock:
        entry = _objects.pop(key, None)
        if entry is not None:
            _quarantine.append(entry[1])
    if entry is None and c_facts is not None and not c_facts.destroy_c_only(key):
        raise InvalidArgument(f"0x{key:x} is not a live {what or kind.__name__} handle")   # destroyed meanwhile
    if watch is not None and entry is not None:
        watch.removed(key, obj, entry[1], what or kind.__name__)
    return obj


def is_live(ptr) -> bool:
    """Whether `ptr` is a live handle Python owns (after finishing destroys the C fast path answered)."""
    if c_facts is not None:
        c_facts.settle()
    return address(ptr) in _objects


def live_objects() -> list:
    """Every object that has a live handle (for strict mode's leak report).

    Each C-only ready event appears as the shared complete event it stands for.
    """
    if c_facts is not None:
        c_facts.settle()
    with _lock:
        objects = [obj for obj, _ in _objects.values()]
    if c_facts is not None:
        objects += [COMPLETE] * c_facts.c_only_count()
    return objects


def count(kind: type | None = None) -> int:
    """How many handles are live (of `kind`, if given); for tests and leak checks."""
    if c_facts is not None:
        c_facts.settle()
    with _lock:
        values = list(_objects.values())
    total = sum(1 for obj, _ in values if kind is None or isinstance(obj, kind))
    if c_facts is not None and (kind is None or isinstance(COMPLETE, kind)):
        total += c_facts.c_only_count()       # C-only ready events
    return total
