"""A typed XLA FFI call: the XLA_FFI_CallFrame a handler receives (c_api.h).

    XLA_FFI_CallFrame
      api      pjrt-ref's XLA_FFI_Api table (xla_ffi_api.c)
      ctx      the XLA_FFI_ExecutionContext of this call (context.py)
      stage    EXECUTE
      args     XLA_FFI_Buffer per operand  (buffers.py)
      rets     XLA_FFI_Buffer per result
      attrs    the op's attribute dictionary, sorted by name (c_api.h: "FFI
               handler attributes are always sorted by name"), each a
               XLA_FFI_Scalar, XLA_FFI_Array, XLA_FFI_ByteSpan or nested
               XLA_FFI_Attrs
      future   set by an async handler; the bridge waits for it

Attributes never change, so they are encoded once, when the program is
planned; buffers are encoded per call. Every struct is cffi memory owned by
a Python object that outlives the call.
"""
from __future__ import annotations

import weakref

import numpy as np

from pjrt_ref.errors import InvalidArgument, PjrtRefError, Unimplemented
from pjrt_ref.interpreter.ffi import buffers, context
from pjrt_ref.interpreter.ffi.attributes import FFI_ATTRIBUTES, Unsupported
from pjrt_ref.interpreter.ffi.bridge import bridge


class AttributeEncoder:
    """Builds XLA_FFI_Attrs from typed attributes (attributes.py), keeping the
    C memory alive in `self.keep`."""

    def __init__(self, ffi, lib) -> None:
        self.ffi, self.lib = ffi, lib
        self.keep: list = []

    def new(self, ctype: str, init=None):
        value = self.ffi.new(ctype, init)
        self.keep.append(value)
        return value

    def attrs(self, attributes: dict, into) -> None:
        """Fill the XLA_FFI_Attrs `into` with `attributes`, sorted by name."""
        names = sorted(attributes, key=lambda name: name.encode())
        into.struct_size = self.lib.XLA_FFI_Attrs_STRUCT_SIZE
        into.extension_start = self.ffi.NULL
        into.size = len(names)
        into.types = self.new("XLA_FFI_AttrType[]", len(names) or 1)
        into.names = self.new("XLA_FFI_ByteSpan*[]", len(names) or 1)
        into.attrs = self.new("void*[]", len(names) or 1)
        for index, name in enumerate(names):
            into.names[index] = self.byte_span(name.encode())
            into.types[index], into.attrs[index] = self.value(attributes[name])

    def value(self, value) -> tuple[int, object]:
        """(XLA_FFI_AttrType, pointer) of one typed attribute value."""
        lib = self.lib
        if isinstance(value, np.generic):
            return lib.XLA_FFI_AttrType_SCALAR, self.scalar(value)
        if isinstance(value, np.ndarray):
            return lib.XLA_FFI_AttrType_ARRAY, self.array(value)
        if isinstance(value, bytes):
            return lib.XLA_FFI_AttrType_STRING, self.byte_span(value)
        if isinstance(value, dict):
            nested = self.new("XLA_FFI_Attrs*")
            self.attrs(value, nested)
            return lib.XLA_FFI_AttrType_DICTIONARY, nested
        raise TypeError(f"not a typed FFI attribute: {value!r}")

    def byte_span(self, data: bytes):
        span = self.new("XLA_FFI_ByteSpan*")
        text = self.new("char[]", data)
        span.ptr, span.len = text, len(data)
        return span

    def scalar(self, value: np.generic):
        scalar = self.new("XLA_FFI_Scalar*")
        scalar.dtype = buffers.data_type(self.lib, value.dtype)
        scalar.value = self.copy(np.asarray(value))
        return scalar

    def array(self, value: np.ndarray):
        array = self.new("XLA_FFI_Array*")
        array.dtype = buffers.data_type(self.lib, value.dtype)
        array.size = value.size
        array.data = self.copy(value)
        return array

    def copy(self, value: np.ndarray):
        data = self.new("char[]", max(value.nbytes, 1))
        self.ffi.memmove(data, np.ascontiguousarray(value).tobytes(), value.nbytes)
        return self.ffi.cast("void*", data)


def check_attributes(op, attributes: dict, path: str = "") -> None:
    """Refuse an attribute XLA FFI cannot pass (attributes.py), naming it."""
    for name, value in attributes.items():
        if isinstance(value, Unsupported):
            raise op.error(f"FFI call: attribute '{path}{name}' = {value.text} is of a kind XLA FFI "
                           "cannot pass to a handler (it passes bool, i8-i64, ui8-ui64, f32 and f64 "
                           "scalars, arrays of those, strings and dictionaries)", cls=Unimplemented)
        if isinstance(value, dict):
            check_attributes(op, value, f"{path}{name}.")


def check_typed_form(op, name: str) -> None:
    """A typed handler is called by a typed-FFI custom call: api_version 4, or
    JAX's api_version 1 with an empty string `backend_config` (its attributes
    then sit in `mhlo.backend_config`); other forms are legacy calls."""
    version = op.attrs.get("api_version", 1)
    config = op.attrs.get("backend_config", "")
    if version == 4 or (version == 1 and config in ("", {})):
        return
    raise op.error(f"custom call target '{name}' is a typed XLA FFI handler (registered with "
                   f"api_version=1) but is called as a legacy custom call (api_version {version}, "
                   f"backend_config {config!r}); a legacy target is registered from Python with "
                   "pjrt_ref.interpreter.ffi.targets.register(..., api_version=0)",
                   cls=InvalidArgument)


class TypedCall:
    """The kernel of one custom call served by a typed FFI handler."""

    def __init__(self, op, handler) -> None:
        check_typed_form(op, handler.name)
        buffers.check_types(op)
        buffers.check_layouts(op)
        attributes = op.attrs.get(FFI_ATTRIBUTES, {})
        check_attributes(op, attributes)
        module = bridge()
        self.ffi, self.lib = module.ffi, module.lib
        self.op = op
        self.handler = handler
        self.function = self.ffi.cast("XLA_FFI_Handler*", handler.address)
        self.aliased = buffers.aliases(op)
        self.encoder = AttributeEncoder(self.ffi, self.lib)
        self.attrs = self.encoder.new("XLA_FFI_Attrs*")
        self.encoder.attrs(attributes, self.attrs)
        # The call site's state (XLA_FFI_State_Set/Get), freed with this object.
        self.state = self.ffi.new("pjrt_ref_ffi_state*")
        weakref.finalize(self, self.lib.pjrt_ref_ffi_state_destroy, self.state)

    def __call__(self, operands) -> list:
        arguments, results = buffers.call_arrays(self.op, operands, self.aliased)
        keep: list = []     # the C memory the frame points into, alive until the call returns
        frame = self._frame(arguments, results, keep)
        error = self.lib.pjrt_ref_ffi_call(self.function, frame)   # without the GIL
        if error != self.ffi.NULL:
            raise self._handler_error(error)
        return results

    def _frame(self, arguments: list, results: list, keep: list):
        """The XLA_FFI_CallFrame of one call (see the module docstring)."""
        lib = self.lib
        frame = self.ffi.new("XLA_FFI_CallFrame*")
        frame.struct_size = lib.XLA_FFI_CallFrame_STRUCT_SIZE
        frame.api = lib.pjrt_ref_ffi_api()
        frame.ctx = self._context(keep)
        frame.stage = lib.XLA_FFI_ExecutionStage_EXECUTE
        frame.args.struct_size = lib.XLA_FFI_Args_STRUCT_SIZE
        frame.args.size = len(arguments)
        frame.args.types = self._kinds("XLA_FFI_ArgType", lib.XLA_FFI_ArgType_BUFFER, len(arguments), keep)
        frame.args.args = self._buffers(arguments, keep)
        frame.rets.struct_size = lib.XLA_FFI_Rets_STRUCT_SIZE
        frame.rets.size = len(results)
        frame.rets.types = self._kinds("XLA_FFI_RetType", lib.XLA_FFI_RetType_BUFFER, len(results), keep)
        frame.rets.rets = self._buffers(results, keep)
        frame.attrs = self.attrs[0]
        keep.append(frame)
        return frame

    def _context(self, keep: list):
        info = context.current()
        ctx = self.ffi.new("XLA_FFI_ExecutionContext*")
        ctx.device_ordinal = info.device_ordinal
        ctx.run_id = info.run_id
        user_data = self.ffi.new("pjrt_ref_ffi_user_data[]", list(info.user_data) or 1)
        ctx.num_user_data = len(info.user_data)
        ctx.user_data = user_data
        ctx.state = self.state
        keep += [ctx, user_data]
        return ctx

    def _kinds(self, type_name: str, kind: int, count: int, keep: list):
        kinds = self.ffi.new(f"{type_name}[]", [kind] * count or 1)
        keep.append(kinds)
        return kinds

    def _buffers(self, arrays: list, keep: list):
        """`void*[]` of one XLA_FFI_Buffer per array (a TOKEN: type TOKEN, no data)."""
        structs = self.ffi.new("XLA_FFI_Buffer[]", len(arrays) or 1)
        pointers = self.ffi.new("void*[]", len(arrays) or 1)
        keep += [structs, pointers]
        for index, array in enumerate(arrays):
            buffer = structs[index]
            buffer.struct_size = self.lib.XLA_FFI_Buffer_STRUCT_SIZE
            if array is buffers.TOKEN:
                buffer.dtype, buffer.rank = self.lib.XLA_FFI_DataType_TOKEN, 0
            else:
                dims = self.ffi.new("int64_t[]", list(array.shape) or 1)
                keep.append(dims)
                buffer.dtype = buffers.data_type(self.lib, array.dtype)
                buffer.rank, buffer.dims = array.ndim, dims
            buffer.data = buffers.address(self.ffi, array)
            pointers[index] = self.ffi.addressof(buffer)
        return pointers

    def _handler_error(self, error) -> PjrtRefError:
        """The handler's XLA_FFI_Error as the execution's error, with its code and message."""
        code = self.lib.pjrt_ref_ffi_error_code(error)
        message = self.ffi.string(self.lib.pjrt_ref_ffi_error_message(error)).decode("utf-8", "replace")
        self.lib.pjrt_ref_ffi_error_destroy(error)
        return self.op.error(f"FFI handler '{self.handler.name}' failed: {message}",
                             cls=error_class(code))


def error_class(code: int) -> type[PjrtRefError]:
    """The PjrtRefError subclass of an absl/XLA status code (the base class, UNKNOWN, if none)."""
    return next((cls for cls in PjrtRefError.__subclasses__() if cls.code == code), PjrtRefError)
