"""`jax.debug.inspect_array_sharding` over several devices: tell JAX's callback the sharding.

JAX lowers it, on several devices, to

    %v2 = stablehlo.custom_call @InspectSharding(%v) {backend_config = <16 bytes>, has_side_effect = true}

where the bytes are a `JAX_InspectSharding_Callback` (jaxlib's
`xla/python/inspect_sharding.h`, an ABI meant for compiler plugins: a C
function pointer and its data). XLA's SPMD partitioner calls it once, at
compile time, with the serialized `xla.OpSharding` its propagation gave the
operand; the callback may set an error, which fails the compile. The
reference does the same when it partitions a program (`report`), giving
the operand's layout as its propagation gives it; at run time the call is
the identity (interpreter/ops/sharding.py).
"""
from __future__ import annotations

import functools
import gc
from typing import Callable

import cffi

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.spmd.gspmd import custom_call_target, walk

TARGET = "InspectSharding"

_DECLARATIONS = """
typedef struct JAX_InspectSharding_Callback_Args {
    char* sharding_spec;
    size_t sharding_spec_size;
    const char* error_txt;
    void* error_scratch;
    void (*free_error)(struct JAX_InspectSharding_Callback_Args* args);
} JAX_InspectSharding_Callback_Args;
typedef struct JAX_InspectSharding_Callback {
    void (*call)(void* data, JAX_InspectSharding_Callback_Args* args);
    void* data;
} JAX_InspectSharding_Callback;
"""


@functools.cache
def _ffi():
    ffi = cffi.FFI()
    ffi.cdef(_DECLARATIONS)
    return ffi


def report(module, sharding_of: Callable, describe: Callable) -> None:
    """Call each @InspectSharding callback in `module` with `sharding_of(operand)`, a
    serialized OpSharding; `describe(op)` names an op in errors. A callback's own
    error (an assertion in the user's function, say) becomes INVALID_ARGUMENT.

    The bytes are pointers, valid only in the process that lowered the program
    and while its callback lives. A program read from a file, or lowered by
    another process, carries pointers into nothing: calling them would crash
    the host. So a callback is called only if its function is this process's
    jaxlib's and its data is a live Python callable; any other is refused."""
    for op in walk(module.operation):
        if custom_call_target(op) == TARGET:
            callback = _callback_bytes(op, describe)
            _check_alive(callback, describe(op))
            _call(callback, sharding_of(op.operands[0]), describe(op))


def _callback_bytes(op, describe: Callable) -> bytes:
    from jaxlib.mlir import ir

    data = ir.StringAttr(op.attributes["backend_config"]).value_bytes \
        if "backend_config" in op.attributes else b""
    size = _ffi().sizeof("JAX_InspectSharding_Callback")
    if len(data) != size:
        raise InvalidArgument(f"{describe(op)}: @{TARGET}'s backend_config has {len(data)} bytes, "
                              f"not the {size} of a JAX_InspectSharding_Callback")
    return data


def _check_alive(callback: bytes, where: str) -> None:
    """INVALID_ARGUMENT unless `callback` is one jaxlib made in this process for a live callable."""
    ffi = _ffi()
    held = ffi.from_buffer("JAX_InspectSharding_Callback*", bytearray(callback))
    function, data = int(ffi.cast("uintptr_t", held.call)), int(ffi.cast("uintptr_t", held.data))
    if function != _jaxlib_function() or not _is_live_callable(data):
        raise InvalidArgument(f"{where}: @{TARGET}'s callback was not made in this process, or its "
                              "executable is gone (a program read from a file, or lowered by another "
                              "process): it is not called")


@functools.cache
def _jaxlib_function() -> int:
    """The address of the function jaxlib puts in every InspectSharding callback it encodes."""
    from jax._src.lib import xla_client

    ffi = _ffi()
    sample = ffi.from_buffer("JAX_InspectSharding_Callback*",
                             bytearray(xla_client.encode_inspect_sharding_callback(print)))
    return int(ffi.cast("uintptr_t", sample.call))


def _is_live_callable(address: int) -> bool:
    """Whether a live Python callable has id `address` (only asked of programs that
    inspect shardings, a debugging aid: a walk over the collector's objects)."""
    return any(id(obj) == address and callable(obj) for obj in gc.get_objects())


def _call(callback: bytes, sharding: bytes, where: str) -> None:
    ffi = _ffi()
    held = ffi.new("JAX_InspectSharding_Callback*")
    ffi.memmove(held, callback, len(callback))
    spec = ffi.new("char[]", sharding)
    args = ffi.new("JAX_InspectSharding_Callback_Args*",
                   {"sharding_spec": spec, "sharding_spec_size": len(sharding)})
    held.call(held.data, args)
    if args.error_txt != ffi.NULL:
        message = ffi.string(args.error_txt).decode("utf-8", "replace")
        if args.free_error != ffi.NULL:
            args.free_error(args)
        raise InvalidArgument(f"{where}: the inspect_array_sharding callback failed: {message}")
