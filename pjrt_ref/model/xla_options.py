"""`jit(..., compiler_options={...})`: checked the way XLA checks them.

JAX passes a function's `compiler_options` to the plugin as the
`env_option_overrides` of the CompileOptionsProto (after taking out the
effort levels it sets itself). They are XLA's `DebugOptions` fields, or
the two effort fields of ExecutableBuildOptions that JAX 0.12 leaves in, and
XLA rejects what it cannot apply: an unknown name is "No such compile
option: 'name'", a value of the wrong type "While setting option name,
'value' is not a valid bool value." (xla/pjrt/pjrt_executable.cc,
`CompileOptions::ApplyOption`). pjrt-ref does not run XLA, so it ignores
the options it accepts, but it rejects the same ones XLA would: a typo must
not pass silently.

The list of options and their types is the installed XLA's own: the
`DebugOptions` message of the `xla/xla.proto` descriptor that protobuf
compiles into jaxlib's shared library, read once with the wire-format
reader of `compile_options.py`. If it cannot be found there (a future
jaxlib laid out differently), names are screened by XLA's `xla_` prefix
only, and values are not type-checked.
"""
from __future__ import annotations

import functools
import glob
import mmap
import os

from pjrt_ref.model.compile_options import wire_fields
from pjrt_ref.errors import InvalidArgument

# The start of the serialized FileDescriptorProto: 1: name "xla/xla.proto", 2: package "xla".
_DESCRIPTOR_START = b"\n\rxla/xla.proto\x12\x03xla"
_DESCRIPTOR_WINDOW = 8 << 20      # far more than xla.proto's descriptor; parsing stops early

# google.protobuf.FieldDescriptorProto.Type numbers -> the names C++'s type_name() gives.
_PROTO_TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
                7: "fixed32", 8: "bool", 9: "string", 10: "group", 11: "message", 12: "bytes",
                13: "uint32", 14: "enum", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
_REPEATED = 3
# ExecutableBuildOptions fields XLA's ApplyOption also sets from an override
# (JAX 0.10 took them out itself; JAX 0.12 passes them on).
_BUILD_OPTION_TYPES = {"exec_time_optimization_effort": "float", "memory_fitting_effort": "float"}


def check_option_overrides(overrides) -> None:
    """Raise InvalidArgument for the first (name, value) XLA would refuse."""
    debug_types = debug_option_types()
    types = None if debug_types is None else {**debug_types, **_BUILD_OPTION_TYPES}
    for name, value in overrides:
        if types is None:
            if name in _BUILD_OPTION_TYPES:
                continue
            if not name.startswith("xla_"):
                raise InvalidArgument(f"No such compile option: '{name}'")
            continue
        if name not in types:
            raise InvalidArgument(f"No such compile option: '{name}'")
        if not _applies(types[name], value):
            raise InvalidArgument(f"While setting option {name}, '{_as_text(value)}' is not a valid "
                                  f"{types[name]} value.")


def _applies(field_type: str, value) -> bool:
    """Whether XLA's ApplyOption accepts `value` (bool, int, float or str) for a field of this type."""
    if isinstance(value, str):
        return _parses_as(field_type, value)
    if isinstance(value, bool):
        return field_type == "bool"
    if isinstance(value, int):
        return field_type in ("int32", "int64")
    return field_type in ("float", "double")


def _parses_as(field_type: str, text: str) -> bool:
    """ApplyOptionFromString: strings, integers, floats and "True"/"False" for bools."""
    if field_type == "string":
        return True
    if field_type == "bool":
        return text in ("True", "False")
    try:
        if field_type in ("int32", "int64"):
            int(text.strip())
        elif field_type == "float":
            float(text)
        else:
            return False
    except ValueError:
        return False
    return True


def _as_text(value) -> str:
    """The value as absl::StrCat prints it (bools as 1/0)."""
    if isinstance(value, bool):
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


@functools.lru_cache(maxsize=1)
def debug_option_types() -> dict[str, str] | None:
    """{option name: protobuf type name} of XLA's DebugOptions (non-repeated
    fields), from the descriptor in jaxlib's shared libraries; None if absent."""
    for path in _jaxlib_libraries():
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            start = data.find(_DESCRIPTOR_START)
            if start >= 0:
                return _debug_options(bytes(data[start:start + _DESCRIPTOR_WINDOW]))
    return None


def _jaxlib_libraries() -> list[str]:
    try:
        import jaxlib
    except ImportError:
        return []
    folder = os.path.dirname(jaxlib.__file__)
    # the largest library first: that is where XLA lives (libjax_common.so in 0.10)
    return sorted(glob.glob(os.path.join(folder, "*.so*")), key=os.path.getsize, reverse=True)


def _debug_options(descriptor: bytes) -> dict[str, str] | None:
    """FileDescriptorProto 4: message_type -> the DescriptorProto named DebugOptions -> its fields."""
    try:
        for field, _, message in wire_fields(descriptor, "xla.proto descriptor"):
            if field == 4 and _name(message) == "DebugOptions":
                return _field_types(message)
    except InvalidArgument:     # ran past the descriptor's end without finding it
        pass
    return None


def _name(message: bytes) -> str:
    for field, _, value in wire_fields(message, "DescriptorProto"):
        if field == 1:
            return value.decode(errors="replace")
    return ""


def _field_types(message: bytes) -> dict[str, str]:
    """DescriptorProto 2: field -> FieldDescriptorProto 1: name, 4: label, 5: type."""
    types = {}
    for field, _, value in wire_fields(message, "DescriptorProto"):
        if field != 2:
            continue
        entry = {number: item for number, _, item in wire_fields(value, "FieldDescriptorProto")}
        if entry.get(4) != _REPEATED and 1 in entry and 5 in entry:
            types[entry[1].decode()] = _PROTO_TYPES.get(entry[5], "message")
    return types
