"""Helpers (no tests): call pjrt-ref's PJRT C API in-process through the cffi shim.

`Api().call("PJRT_Client_Create", field=value, ...)` fills a fresh
`PJRT_Client_Create_Args` (struct_size set to the full size unless given),
calls the slot from `GetPjrtApi()` and returns the Args; a returned
`PJRT_Error*` is read (code, message), destroyed and raised as `PjrtCallError`.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib


class PjrtCallError(Exception):
    def __init__(self, name: str, code: int, message: str) -> None:
        super().__init__(f"{name}: code {code}: {message}")
        self.code, self.message = code, message


def extension(type_: int, struct: str):
    """The extension of PJRT_Extension_Type `type_` on the plugin's
    `extension_start` chain, as a `struct*` (the test fails without one)."""
    base = lib.GetPjrtApi().extension_start
    while base != ffi.NULL and base.type != type_:
        base = base.next
    assert base != ffi.NULL, f"no {struct} on PJRT_Api.extension_start"
    return ffi.cast(f"{struct}*", base)


class Api:
    """The plugin's PJRT_Api table, driven from Python."""

    def __init__(self) -> None:
        self.api = lib.GetPjrtApi()
        self.keep: list = []             # C memory that must outlive calls (programs, host data)

    def args(self, name: str, **fields):
        args = ffi.new(f"{name}_Args*")
        args.struct_size = fields.pop("struct_size", ffi.sizeof(f"{name}_Args"))
        for field, value in fields.items():
            setattr(args, field, value)
        return args

    def raw(self, name: str, args):
        """Call the slot; return the PJRT_Error* (possibly NULL) untouched."""
        return getattr(self.api, name)(args)

    def call(self, name: str, **fields):
        args = self.args(name, **fields)
        error = self.raw(name, args)
        if error != ffi.NULL:
            raise PjrtCallError(name, *self.take_error(error))
        return args

    def take_error(self, error) -> tuple[int, str]:
        """(code, message) of `error`, which is then destroyed."""
        code = self.args("PJRT_Error_GetCode", error=error)
        assert self.raw("PJRT_Error_GetCode", code) == ffi.NULL
        message = self.args("PJRT_Error_Message", error=error)
        self.raw("PJRT_Error_Message", message)
        text = ffi.string(message.message, message.message_size).decode("utf-8", "replace")
        self.raw("PJRT_Error_Destroy", self.args("PJRT_Error_Destroy", error=error))
        return int(code.code), text

    def error(self, name: str, **fields) -> tuple[int, str]:
        """(code, message) of the error the call must return (AssertionError if it succeeds)."""
        try:
            self.call(name, **fields)
        except PjrtCallError as error:
            return error.code, error.message
        raise AssertionError(f"{name} succeeded")

    # -- conveniences ---------------------------------------------------------
    def is_ready(self, event) -> bool:
        return bool(self.call("PJRT_Event_IsReady", event=event).is_ready)

    def settle(self, event) -> tuple[int, str] | None:
        """Await `event`, destroy it; None if it completed without error, else (code, message)."""
        try:
            error = self.raw("PJRT_Event_Await", self.args("PJRT_Event_Await", event=event))
            return None if error == ffi.NULL else self.take_error(error)
        finally:
            self.call("PJRT_Event_Destroy", event=event)

    def ready_event(self, buffer):
        return self.call("PJRT_Buffer_ReadyEvent", buffer=buffer).event

    def device(self, client, index: int = 0):
        return self.call("PJRT_Client_AddressableDevices", client=client).addressable_devices[index]

    def memory(self, client, index: int = 0):
        return self.call("PJRT_Client_AddressableMemories", client=client).addressable_memories[index]

    def dims(self, dims) -> object:
        """A C int64_t array of `dims`, kept alive with the Api."""
        array = ffi.new("int64_t[]", list(dims) or [0])
        self.keep.append(array)
        return array

    def tiled_layout(self, minor_to_major) -> object:
        """A tiled `PJRT_Buffer_MemoryLayout*` with this dimension order and no tiles,
        kept alive with the Api."""
        layout = ffi.new("PJRT_Buffer_MemoryLayout*")
        order = ffi.new("int64_t[]", list(minor_to_major))
        self.keep += [layout, order]
        layout.struct_size, layout.type = ffi.sizeof("PJRT_Buffer_MemoryLayout"), lib.PJRT_Buffer_MemoryLayout_Type_Tiled
        layout.tiled.minor_to_major, layout.tiled.minor_to_major_size = order, len(order)
        return layout

    def client(self):
        return self.call("PJRT_Client_Create").client

    def compile(self, client, text: str | bytes, options: bytes = b"", fmt: str = "mlir"):
        code = text.encode() if isinstance(text, str) else text
        c_code, c_fmt, c_opts = ffi.new("char[]", code), ffi.new("char[]", fmt.encode()), ffi.new("char[]", options)
        program = ffi.new("PJRT_Program*", {"struct_size": ffi.sizeof("PJRT_Program"), "code": c_code,
                                            "code_size": len(code), "format": c_fmt, "format_size": len(fmt)})
        self.keep += [c_code, c_fmt, c_opts, program]
        return self.call("PJRT_Client_Compile", client=client, program=program,
                         compile_options=c_opts, compile_options_size=len(options)).executable

    def buffer(self, client, array: np.ndarray):
        from pjrt_ref.model.dtypes import from_numpy
        array = np.ascontiguousarray(array)
        dims = ffi.new("int64_t[]", list(array.shape) or [0])
        self.keep += [dims, array]
        args = self.call("PJRT_Client_BufferFromHostBuffer", client=client,
                         data=ffi.cast("void*", array.ctypes.data), type=int(from_numpy(array.dtype)),
                         dims=dims, num_dims=array.ndim,
                         host_buffer_semantics=lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall)
        if args.done_with_host_buffer != ffi.NULL:
            self.call("PJRT_Event_Destroy", event=args.done_with_host_buffer)
        return args.buffer

    def to_host(self, buffer, dtype, shape) -> np.ndarray:
        out = np.zeros(shape, dtype)
        args = self.call("PJRT_Buffer_ToHostBuffer", src=buffer, dst=ffi.cast("void*", out.ctypes.data),
                         dst_size=out.nbytes)
        if args.event != ffi.NULL:
            self.call("PJRT_Event_Await", event=args.event)
            self.call("PJRT_Event_Destroy", event=args.event)
        return out

    def execute(self, loaded, buffers: list, num_outputs: int) -> list:
        row = ffi.new("PJRT_Buffer*[]", buffers or [ffi.NULL])
        arg_lists = ffi.new("PJRT_Buffer**[]", [row])
        out_row = ffi.new("PJRT_Buffer*[]", max(num_outputs, 1))
        out_lists = ffi.new("PJRT_Buffer**[]", [out_row])
        options = ffi.new("PJRT_ExecuteOptions*", {"struct_size": ffi.sizeof("PJRT_ExecuteOptions")})
        self.call("PJRT_LoadedExecutable_Execute", executable=loaded, options=options,
                  argument_lists=arg_lists, num_devices=1, num_args=len(buffers), output_lists=out_lists)
        return [out_row[i] for i in range(num_outputs)]

    def serialize(self, loaded) -> bytes:
        exe = self.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded).executable
        try:
            args = self.call("PJRT_Executable_Serialize", executable=exe)
            blob = bytes(ffi.buffer(args.serialized_bytes, args.serialized_bytes_size))
            args.serialized_executable_deleter(args.serialized_executable)
            return blob
        finally:
            self.call("PJRT_Executable_Destroy", executable=exe)

    def deserialize(self, client, blob: bytes, options: bytes | None = None):
        c_blob = ffi.new("char[]", blob)
        fields = {"client": client, "serialized_executable": c_blob, "serialized_executable_size": len(blob)}
        if options is not None:
            c_opts = ffi.new("char[]", options)
            self.keep.append(c_opts)
            fields.update(overridden_serialized_compile_options=c_opts,
                          overridden_serialized_compile_options_size=len(options))
        return self.call("PJRT_Executable_DeserializeAndLoad", **fields).loaded_executable


def assert_layout_matches(name: str, theirs) -> None:
    """Our cffi struct `name` has the size and field offsets of `theirs`
    (a ctypes struct from pypjrt's layout-checked ABI description)."""
    import ctypes

    ours = dict(ffi.typeof(name).fields)
    for field, *_ in theirs._fields_:
        assert ours[field].offset == getattr(theirs, field).offset, f"{name}.{field}"
    assert ffi.sizeof(name) == ctypes.sizeof(theirs)
