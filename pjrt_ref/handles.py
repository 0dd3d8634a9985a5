"""One table from opaque C handles (`PJRT_Client*`, `PJRT_Buffer*`, ...) to Python objects.

The C API hands out pointers the caller never dereferences. Each handle here
is a real (tiny, zeroed) allocation owned by the table, so its address is
unique for as long as it lives and never reused while registered. Looking up
a pointer that is not in the table, or that names an object of another kind,
raises `InvalidArgument` instead of crashing: stale and foreign pointers
become PJRT errors.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, TypeVar

from .errors import InvalidArgument

T = TypeVar("T")

_ffi = None                       # set by bind(); the shim's cffi FFI object
_lock = threading.Lock()
_objects: dict[int, tuple[Any, Any]] = {}   # address -> (object, backing allocation)
# The backing memory of the last QUARANTINE destroyed handles stays allocated,
# so their addresses are not handed out again soon: a use after destroy (or a
# double destroy) is "not a live handle" rather than silently reaching
# whatever object reused the address. Bounded: ~100 bytes per entry.
QUARANTINE = 8192
_quarantine: "collections.deque" = collections.deque(maxlen=QUARANTINE)
watch = None      # PJRT_REF_STRICT=1: the strict-mode observer (pjrt_ref/strict.py Watch)


def bind(ffi) -> None:
    """Called once by `pjrt_ref.capi.install` with the shim's FFI."""
    global _ffi
    _ffi = ffi


def address(ptr) -> int:
    """The integer address behind a cdata pointer (0 for NULL)."""
    return int(_ffi.cast("uintptr_t", ptr))


def add(obj: Any):
    """Register `obj` under a fresh handle; returns it as a `void*` cdata."""
    backing = _ffi.new("uint64_t[2]")
    key = address(backing)
    with _lock:
        _objects[key] = (obj, backing)
    return _ffi.cast("void*", backing)


def get(ptr, kind: type[T], what: str | None = None) -> T:
    """The live object of type `kind` behind `ptr`, or InvalidArgument."""
    key = address(ptr)
    entry = _objects.get(key)
    if entry is None or not isinstance(entry[0], kind):
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
    obj = get(ptr, kind, what)
    with _lock:
        entry = _objects.pop(address(ptr), None)
        if entry is not None:
            _quarantine.append(entry[1])
    if watch is not None and entry is not None:
        watch.removed(address(ptr), obj, entry[1], what or kind.__name__)
    return obj


def live_objects() -> list:
    """Every object that has a live handle (for strict mode's leak report)."""
    with _lock:
        return [obj for obj, _ in _objects.values()]


def count(kind: type | None = None) -> int:
    """How many handles are live (of `kind`, if given); for tests and leak checks."""
    with _lock:
        values = list(_objects.values())
    return sum(1 for obj, _ in values if kind is None or isinstance(obj, kind))
