"""Buffers a client makes from something other than host data (pjrt_c_api.h "Client").

- PJRT_Client_CreateErrorBuffer: a buffer that is an error;
- PJRT_Client_CreateViewOfDeviceBuffer: a buffer over memory the caller owns
  (pjrt-ref's device memory is host memory, so any aligned host memory will do);
- PJRT_Client_CreateAliasBuffer / PJRT_Client_FulfillAliasBuffer: a buffer
  now, its contents later, from another buffer (or an error instead).
"""
from __future__ import annotations

import sys

from pjrt_ref.errors import InvalidArgument, PjrtRefError, Unimplemented
from pjrt_ref.limits import check_allocation, nbytes
from pjrt_ref.capi import handles
from pjrt_ref.model.buffer import Buffer, ForeignMemory
from pjrt_ref.model.client import Client
from pjrt_ref.model.device import Device
from pjrt_ref.model.memory import Memory
from pjrt_ref.capi import cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.buffer import array_shape, register_buffer
from pjrt_ref.capi.cdata import Args, caller_status
from pjrt_ref.capi.client import client_of


def _client_memory(client: Client, ptr) -> Memory:
    """The memory `ptr` names, which must be one of `client`'s."""
    memory = handles.get(ptr, Memory, "PJRT_Memory")
    if not any(memory is own for own in client.memories):
        raise InvalidArgument(f"memory {memory.id} is not one of this client's memories")
    return memory


@entry_point("PJRT_Client_CreateErrorBuffer")
def client_create_error_buffer(args: Args) -> None:
    """PJRT_Client_CreateErrorBuffer: a buffer of the given shape in `memory` that is an error.

    Its ready event fails with the caller's code and message, and so does
    every read of its data: PJRT_Buffer_ToHostBuffer, CopyRawToHost, use as
    an argument of PJRT_LoadedExecutable_Execute (which fails; XLA CPU
    instead returns results that carry the error). Its shape queries answer
    as for any buffer. An OK code makes no error: INVALID_ARGUMENT.
    """
    client = client_of(args)
    error = caller_status(args, "PJRT_Client_CreateErrorBuffer", "error_code", payload=True)
    if error is None:
        raise InvalidArgument("PJRT_Client_CreateErrorBuffer: error_code is OK; an error buffer needs an error")
    element_type, dtype, dims = array_shape(args)
    memory = _client_memory(client, args.memory)
    check_allocation(nbytes(dtype, dims), f"error buffer {dtype}{list(dims)}")
    buffer = Buffer.pending(dtype, dims, memory.devices[0], memory, element_type)
    buffer.fail(error)
    args.buffer = register_buffer(buffer)


@entry_point("PJRT_Client_CreateViewOfDeviceBuffer")
def client_create_view_of_device_buffer(args: Args) -> None:
    """PJRT_Client_CreateViewOfDeviceBuffer: a buffer whose data is the caller's memory at
    `device_buffer_ptr`, read in place (no copy; pjrt-ref never writes a buffer's memory).

    The memory must be aligned to 16 bytes (XLA's CPU client asks the same)
    and hold the shape's bytes densely in row-major order (one byte per
    element of a sub-byte type, as every pjrt-ref buffer). It lives in
    `memory`, else in `device`'s default memory. `on_delete_callback(ptr, arg)`,
    if given, runs once pjrt-ref is done with the memory: the buffer is
    deleted or destroyed and nothing still reads it (an external reference,
    a pending raw copy). A non-zero `stream` is UNIMPLEMENTED: pjrt-ref has
    no streams (XLA's CPU client refuses one too).
    """
    client = client_of(args)
    element_type, dtype, dims = array_shape(args, prefix="", layout="layout")
    if args.stream:
        raise Unimplemented("PJRT_Client_CreateViewOfDeviceBuffer: pjrt-ref has no streams, "
                            f"so `stream` must be 0 (got {int(args.stream)})")
    memory = _view_memory(client, args)
    foreign = ForeignMemory(handles.address(args.device_buffer_ptr), nbytes(dtype, dims),
                            _on_delete(args.on_delete_callback, args.device_buffer_ptr, args.on_delete_callback_arg))
    buffer = Buffer(foreign.array(dtype, dims), memory.devices[0], memory, element_type)
    args.buffer = register_buffer(buffer)


def _view_memory(client: Client, args: Args) -> Memory:
    """`memory` if the caller's struct has it and it is set, else `device`'s default memory."""
    memory = args.get("memory", cdata.NULL)
    if memory != cdata.NULL:
        return _client_memory(client, memory)
    if args.device == cdata.NULL:
        raise InvalidArgument("PJRT_Client_CreateViewOfDeviceBuffer needs a device or a memory")
    device = handles.get(args.device, Device, "PJRT_Device")
    if device.client is not client:
        raise InvalidArgument(f"device {device.id} is not one of this client's devices")
    return device.default_memory


def _on_delete(callback, pointer, user_arg):
    """`callback(pointer, user_arg)` as a Python function (None for a NULL callback)."""
    if callback == cdata.NULL:
        return None

    def on_delete() -> None:
        try:
            callback(pointer, user_arg)     # cffi releases the GIL around the call into C
        except Exception as error:          # it runs from a finalizer: report, never raise
            print(f"pjrt-ref: on_delete_callback of a view failed: {error!r}", file=sys.stderr)
    return on_delete


class AliasFulfillment:
    """What a `PJRT_FulfillAliasBufferCallback*` points to: the alias buffer it fulfils (once)."""

    def __init__(self, alias: Buffer) -> None:
        self.alias = alias


@entry_point("PJRT_Client_CreateAliasBuffer")
def client_create_alias_buffer(args: Args) -> None:
    """PJRT_Client_CreateAliasBuffer: `alias_buffer` of the given shape in `memory`, its contents
    to come, and `fulfill_alias_buffer_cb` to pass, once, to PJRT_Client_FulfillAliasBuffer.
    Until then the alias is not ready: reading it, or executing on it, waits."""
    args.require("fulfill_alias_buffer_cb")
    client = client_of(args)
    element_type, dtype, dims = array_shape(args)
    memory = _client_memory(client, args.memory)
    check_allocation(nbytes(dtype, dims), f"alias buffer {dtype}{list(dims)}")
    alias = Buffer.pending(dtype, dims, memory.devices[0], memory, element_type)
    args.fulfill_alias_buffer_cb = handles.add(AliasFulfillment(alias))
    args.alias_buffer = register_buffer(alias)


@entry_point("PJRT_Client_FulfillAliasBuffer")
def client_fulfill_alias_buffer(args: Args) -> None:
    """PJRT_Client_FulfillAliasBuffer: give the alias its contents (`status_code` OK) or an error.

    The callback is consumed whatever happens (a second use is INVALID_ARGUMENT).
    With OK, `buffer` must have the alias's element type and dims; it is
    donated (deleted) and the alias takes over its contents, now or when
    they arrive. With an error code, the alias fails with that code and
    message, and the call returns the same error, as XLA's does (its
    callback answers the status it is given). If the call fails for another
    reason (NULL, mismatched, deleted or viewed buffer), the alias fails
    with that error too, so nothing waits on it for ever.
    """
    client_of(args)
    if args.fulfill_alias_buffer_cb == cdata.NULL:
        raise InvalidArgument("PJRT_Client_FulfillAliasBuffer: fulfill_alias_buffer_cb is NULL")
    alias = handles.remove(args.fulfill_alias_buffer_cb, AliasFulfillment, "PJRT_FulfillAliasBufferCallback").alias
    try:
        error = caller_status(args, "PJRT_Client_FulfillAliasBuffer", "status_code")
        if error is not None:
            raise error
        _donate_to(alias, args.buffer)
    except PjrtRefError as error:
        alias.fail(error)
        raise


def _donate_to(alias: Buffer, ptr) -> None:
    """Donate the buffer at `ptr` (its element type and dims must be the alias's) to `alias`."""
    if ptr == cdata.NULL:
        raise InvalidArgument("PJRT_Client_FulfillAliasBuffer: status OK but buffer is NULL")
    real = handles.get(ptr, Buffer, "PJRT_Buffer")
    if (real.buffer_type, real.dims) != (alias.buffer_type, alias.dims):
        raise InvalidArgument(f"the alias is {alias.buffer_type.name}{list(alias.dims)}, the buffer that "
                              f"fulfils it {real.buffer_type.name}{list(real.dims)}")
    real.on_contents(alias.fulfill, alias.fail, donate=True)

