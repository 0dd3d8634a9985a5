"""C data at the boundary: the shim's ffi/lib, Args views, PJRT_Error objects, memory kept alive for the caller.

What every entry point module needs to talk C: reading a caller's Args
struct within its `struct_size` (`Args`), its strings, byte strings,
arrays and named values; making a `PJRT_Error*`; handing out C memory that
a Python object owns (`owned_*`) or that the caller frees with a deleter
(`hand_out_blob`, `hand_out_bytes`). Strict mode, the API log and the fast paths read it too.

It imports only the handle table and the error types, so any module of the
C API layer may import it. Turning entry points into the callbacks cffi
runs (with the API log, strict mode and the fast paths) is the module above,
`_boundary.py`.
"""
from __future__ import annotations

import sys
import traceback
from typing import Any, Callable

from pjrt_ref.capi import handles
from pjrt_ref.errors import ErrorCode, InvalidArgument, PjrtRefError

ffi: Any = None            # the shim's FFI, set by bind()
lib: Any = None
NULL: Any = None


def bind(shim_ffi, shim_lib) -> None:
    """Use the shim's FFI and library from now on (called by `_boundary.bind`)."""
    global ffi, lib, NULL
    ffi, lib, NULL = shim_ffi, shim_lib, shim_ffi.NULL
    handles.bind(shim_ffi)


# ------------------------------------------------------------------ errors
class ErrorObject:
    """What a `PJRT_Error*` points to: a code and a message (pjrt_c_api.h `PJRT_Error`)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = int(code)
        self.message = message
        data = message.encode("utf-8", "replace")
        self.c_message = ffi.new("char[]", data)
        self.c_message_size = len(data)


def new_error(code: int, message: str):
    """A fresh `PJRT_Error*`, owned by the caller (freed by PJRT_Error_Destroy)."""
    return handles.add(ErrorObject(code, message))


def error_from_exception(name: str, exc: BaseException):
    """The `PJRT_Error*` for `exc`: its own code for a PjrtRefError, CANCELLED for Ctrl-C, else INTERNAL."""
    if isinstance(exc, KeyboardInterrupt):
        return _interrupted(name)
    if isinstance(exc, PjrtRefError):
        return new_error(exc.code, str(exc))
    if isinstance(exc, RuntimeError) and "null pointer" in str(exc):   # cffi refused to index NULL
        return new_error(ErrorCode.INVALID_ARGUMENT, f"{name}: a NULL pointer where memory was required ({exc})")
    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return new_error(ErrorCode.INTERNAL, f"{name}: internal error in pjrt-ref: {detail}")


def _interrupted(name: str):
    """Ctrl-C arrived while Python ran an entry point (the host is a Python program).

    The KeyboardInterrupt cannot cross the C frames between us and the
    host's Python code, so the call ends with CANCELLED and the shim raises
    the interrupt again once it is back in C (`pjrt_ref_request_interrupt`,
    capi_shim/build_shim.py): the host's next Python bytecode gets a plain
    KeyboardInterrupt, as if Ctrl-C had come a moment later.
    """
    error = new_error(ErrorCode.CANCELLED, f"{name}: interrupted by KeyboardInterrupt (Ctrl-C)")
    lib.pjrt_ref_request_interrupt()
    return error


def caller_error(name: str, code: int, message: str) -> PjrtRefError:
    """An error the caller hands us (PJRT_Event_Set, SetBufferError): `code` must be a PJRT_Error_Code."""
    if int(code) not in ErrorCode._value2member_map_:
        raise InvalidArgument(f"{name}: {int(code)} is not a PJRT_Error_Code (1..16)")
    error = PjrtRefError(message)
    error.code = ErrorCode(int(code))
    return error


def caller_status(args: "Args", name: str, code_field: str, payload: bool = False) -> PjrtRefError | None:
    """The error a caller describes with `<code_field>`, `error_message` and, with `payload`
    (where the caller's struct has them), string `payload`s; None for OK. pjrt-ref's errors
    carry a code and a message only, so payloads are checked (strings, as XLA requires)
    and dropped."""
    code = int(getattr(args, code_field))
    if payload and args.get("num_payload", 0):
        payload = read_named_values(args.payload, args.num_payload)
        for key, value in payload.items():
            if not isinstance(value, str):
                raise InvalidArgument(f"{name}: payload {key!r} is not a string")
    if code == 0:
        return None
    return caller_error(name, code, text_arg(args.error_message, args.error_message_size, "error_message"))


# -------------------------------------------------------------------- args
class Args:
    """A view of one `PJRT_*_Args` struct that stays inside the caller's struct_size.

    `args.field` reads a field the caller must provide (InvalidArgument if its
    struct is too short); `args.get(field, default)` reads an optional one;
    `args.field = value` writes an output, silently skipped if the caller's
    (older) struct has no room for it.

    `Args(raw, name)` returns an instance of a subclass made once per struct
    type (`_view_class`), in which every field is a property doing that
    check: a field read is then one property call, which matters on the
    entry points a framework calls for every execution.
    """

    __slots__ = ("_raw", "_size", "_name")
    _ends: dict[str, int] = {}    # field -> offset just past it; set per struct type

    def __new__(cls, raw, name: str) -> "Args":
        if raw == NULL:
            raise InvalidArgument(f"{name}: Args pointer is NULL")
        ctype = ffi.typeof(raw)
        view_class = _VIEW_CLASSES.get(ctype) or _view_class(ctype)
        self = object.__new__(view_class)
        self._raw = raw
        self._name = name
        self._size = int(raw.struct_size)
        return self

    def has(self, field: str) -> bool:
        return self._ends[field] <= self._size

    def get(self, field: str, default: Any = None) -> Any:
        return getattr(self._raw, field) if self.has(field) else default

    def too_short(self, field: str) -> InvalidArgument:
        return InvalidArgument(f"{self._name}: struct_size {self._size} is too small to hold field '{field}'")

    def require(self, *fields: str) -> None:
        """INVALID_ARGUMENT unless the caller's struct holds all of `fields`: for outputs
        that must reach the caller (a callback it has to call), checked before any effect."""
        for field in fields:
            if not self.has(field):
                raise self.too_short(field)

    @property
    def raw(self):
        return self._raw


_VIEW_CLASSES: dict[Any, type] = {}


def _field_property(field: str, end: int) -> property:
    def read(self: Args) -> Any:
        if end > self._size:
            raise self.too_short(field)
        return getattr(self._raw, field)

    def write(self: Args, value: Any) -> None:
        if end <= self._size:
            setattr(self._raw, field, value)
    return property(read, write, doc=f"the Args field '{field}' (within struct_size)")


def _view_class(pointer_type) -> type:
    """The Args subclass for `pointer_type` (a `PJRT_X_Args*`): one property per field."""
    struct = pointer_type.item
    ends = {name: f.offset + ffi.sizeof(f.type) for name, f in struct.fields}
    namespace: dict[str, Any] = {"__slots__": (), "_ends": ends}
    for field, end in ends.items():
        namespace[field] = _field_property(field, end)
    view_class = type(f"Args[{struct.cname}]", (Args,), namespace)
    _VIEW_CLASSES[pointer_type] = view_class
    return view_class


# ------------------------------------------------- memory owned by objects
def owned(owner: Any, key: Any, make: Callable[[], Any]) -> Any:
    """C memory cached on `owner`: lives exactly as long as the owner does."""
    cache = owner.__dict__.setdefault("_c_owned", {})
    value = cache.get(key)
    if value is None:
        value = cache.setdefault(key, make())
    return value


def owned_text(owner: Any, key: Any, text: str) -> tuple[Any, int]:
    """(`const char*`, size) for `text`, owned by `owner`."""
    def make():
        data = text.encode()
        return ffi.new("char[]", data), len(data)
    return owned(owner, ("text", key), make)


def owned_array(owner: Any, key: Any, ctype: str, values: list) -> Any:
    """A C array of `ctype` owned by `owner`, as a `void*` (assignable to any pointer field)."""
    # An empty list still gets a (zeroed) element: C callers may read the pointer, never the value.
    array = owned(owner, ("array", key), lambda: ffi.new(f"{ctype}[]", list(values) or 1))
    return ffi.cast("void*", array)


def owned_named_values(owner: Any, key: Any, values: dict) -> tuple[Any, int]:
    """A `PJRT_NamedValue[]` for `values` (str, bool, int, float, list of int), owned by `owner`."""
    def make():
        keep: list = []
        array = ffi.new("PJRT_NamedValue[]", max(len(values), 1))
        for item, (name, value) in zip(array, values.items()):
            _fill_named_value(item, name, value, keep)
        return array, len(values), keep
    array, count, _ = owned(owner, ("named", key), make)
    return array, count


def _fill_named_value(item, name: str, value: Any, keep: list) -> None:
    encoded = name.encode()
    c_name = ffi.new("char[]", encoded)
    keep.append(c_name)
    item.struct_size = ffi.sizeof("PJRT_NamedValue")
    item.name, item.name_size = c_name, len(encoded)
    if isinstance(value, str):
        data = value.encode()
        c_value = ffi.new("char[]", data)
        keep.append(c_value)
        item.type, item.string_value, item.value_size = lib.PJRT_NamedValue_kString, c_value, len(data)
    elif isinstance(value, bool):
        item.type, item.bool_value, item.value_size = lib.PJRT_NamedValue_kBool, value, 1
    elif isinstance(value, int):
        item.type, item.int64_value, item.value_size = lib.PJRT_NamedValue_kInt64, value, 1
    elif isinstance(value, float):
        item.type, item.float_value, item.value_size = lib.PJRT_NamedValue_kFloat, value, 1
    else:
        c_list = ffi.new("int64_t[]", [int(v) for v in value] or [0])
        keep.append(c_list)
        item.type, item.int64_array_value, item.value_size = lib.PJRT_NamedValue_kInt64List, c_list, len(value)


def read_named_values(array, count: int) -> dict:
    """Decode a caller's `PJRT_NamedValue[count]` into a dict."""
    out: dict = {}
    require_array(array, count, "PJRT_NamedValue array")
    for i in range(count):
        item = array[i]
        name = text_arg(item.name, item.name_size, "PJRT_NamedValue name")
        kind = item.type
        if kind == lib.PJRT_NamedValue_kString:
            out[name] = text_arg(item.string_value, item.value_size, f"named value {name!r}")
        elif kind == lib.PJRT_NamedValue_kInt64:
            out[name] = int(item.int64_value)
        elif kind == lib.PJRT_NamedValue_kInt64List:
            values = require_array(item.int64_array_value, item.value_size, f"named value {name!r}")
            out[name] = [int(values[j]) for j in range(item.value_size)]
        elif kind == lib.PJRT_NamedValue_kFloat:
            out[name] = float(item.float_value)
        elif kind == lib.PJRT_NamedValue_kBool:
            out[name] = bool(item.bool_value)
    return out


def require_array(ptr, count: int, what: str = "array"):
    """`ptr`, after checking a caller's (pointer, count) pair is not (NULL, count > 0).

    Indexing a NULL cdata pointer would crash the host; a NULL array with
    elements is INVALID_ARGUMENT instead. (Wild non-NULL pointers cannot be
    checked: the C API trusts the caller's memory, as every plugin does.)
    """
    if count and ptr == NULL:
        raise InvalidArgument(f"{what} is NULL but its size/count is {int(count)}")
    return ptr


def text_arg(ptr, size: int, what: str = "string argument") -> str:
    """A caller's (const char*, size) as text; NULL with size > 0 or bad UTF-8 is INVALID_ARGUMENT."""
    try:
        return bytes_arg(ptr, size, what).decode()
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid UTF-8: {exc}") from None


def bytes_arg(ptr, size: int, what: str = "byte argument") -> bytes:
    """A caller's (const char*, size) as bytes; NULL with size > 0 is INVALID_ARGUMENT."""
    return bytes(ffi.buffer(require_array(ptr, size, what), size)) if size else b""


# ----------------------------------------- memory handed over with a deleter
class Blob:
    """Bytes handed to the caller together with a deleter (Serialize, GetCompileOptions)."""

    def __init__(self, data: bytes) -> None:
        self.data = ffi.new("char[]", data or b"\0")
        self.size = len(data)


class Holder:
    """Keeps C data alive until the caller's deleter call (e.g. device attributes)."""


def release_blob(blob) -> None:
    """The deleter behind `serialized_executable_deleter` & co. (extern "Python")."""
    try:
        handles.remove(blob, (Blob, Holder), "serialized blob")
    except Exception:  # a deleter cannot report errors
        pass


# Bytes handed out by `hand_out_bytes`, by the address of their first byte.
_HANDED_BYTES: dict[int, Blob] = {}


def hand_out_bytes(args: Args, bytes_field: str, deleter_field: str, data: bytes) -> None:
    """Give the caller `data` and a deleter it calls with the bytes pointer itself
    (`void (*)(const char*)`, e.g. MakeCanonicalShapeForMemorySpace's serialized_shape)."""
    blob = Blob(data)
    _HANDED_BYTES[int(ffi.cast("uintptr_t", blob.data))] = blob
    setattr(args, bytes_field, blob.data)
    setattr(args, bytes_field + "_size", blob.size)
    set_deleter(args, deleter_field, lib.pjrt_ref_release_bytes)


def release_bytes(data) -> None:
    """The deleter behind `hand_out_bytes` (extern "Python"); a pointer it never handed out
    (or one already freed) is reported on stderr, never followed."""
    if _HANDED_BYTES.pop(int(ffi.cast("uintptr_t", data)), None) is None:
        print(f"pjrt-ref: a bytes deleter was called with {data}, which pjrt-ref did not hand out "
              "or which was already freed: ignored", file=sys.stderr)


def set_deleter(args: Args, field: str, function=None) -> None:
    """Point the caller's deleter field at `function` (default `pjrt_ref_release_blob`), cast to the field's type."""
    deleter_type = dict(ffi.typeof(args.raw).item.fields)[field].type
    setattr(args, field, ffi.cast(deleter_type, function if function is not None else lib.pjrt_ref_release_blob))


def hand_out_blob(args: Args, bytes_field: str, holder_field: str, deleter_field: str, data: bytes) -> None:
    """Give the caller `data` plus a holder handle and the deleter that frees it."""
    blob = Blob(data)
    setattr(args, bytes_field, blob.data)
    setattr(args, bytes_field + "_size", blob.size)
    setattr(args, holder_field, handles.add(blob))
    set_deleter(args, deleter_field)


__all__ = ["Args", "new_error", "caller_error", "caller_status", "owned", "owned_text", "owned_array", "owned_named_values", "read_named_values",
           "text_arg", "bytes_arg", "require_array", "Holder", "hand_out_blob", "set_deleter", "release_blob",
           "hand_out_bytes", "release_bytes"]
