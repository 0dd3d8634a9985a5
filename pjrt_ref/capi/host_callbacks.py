"""Host callbacks at the C boundary: PJRT_ExecuteOptions send/recv callbacks
and the PJRT_CopyToDeviceStream_* entry points (pjrt_c_api.h "PJRT_Chunk",
"PJRT_SendCallbackInfo", "CopyToDeviceStream").

`host_transfers_for(options, device_index)` turns the caller's callback
tables into a `pjrt_ref.services.host_callbacks.HostTransfers` (see that module for
the mechanism and why pjrt-ref uses it); Execute attaches it for one
device (`attached_host_transfers`) or one per device
(`attached_device_host_transfers`):

* a send hands the framework a `PJRT_Chunk` whose memory comes from the
  shim's `pjrt_ref_chunk_alloc` and whose deleter is `pjrt_ref_chunk_free`
  (plain C: the framework may free it on any thread). The callback reports
  failure by returning a `PJRT_Error*` built with our `PJRT_CallbackError`
  (`callback_error` below); that error becomes the execution's error.
* a recv hands the framework a new `PJRT_CopyToDeviceStream*`; the framework
  fills it with PJRT_CopyToDeviceStream_AddChunk and destroys it.
"""
from __future__ import annotations

import contextlib

from pjrt_ref.capi import handles
from pjrt_ref.errors import ErrorCode, InvalidArgument, PjrtRefError
from pjrt_ref.model.event import Event
from pjrt_ref.services.host_callbacks import CopyToDeviceStream, DeviceHostTransfers, HostTransfers, Receiver, Sender
from pjrt_ref.capi import cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, ErrorObject, require_array
from pjrt_ref.capi.event import new_event_handle

_CALLBACK_ERROR = None     # PJRT_CallbackError* handed to every send callback


def callback_error(code: int, message, message_size: int):
    """Our `PJRT_CallbackError`: a `PJRT_Error*` for a failing send callback.

    Called from C (cffi `extern "Python"`); it must always return an error,
    since NULL would mean "no error" to the plugin.
    """
    try:
        text = cdata.ffi.unpack(message, message_size).decode("utf-8", "replace") \
            if message != cdata.NULL else ""
        if int(code) not in ErrorCode._value2member_map_:
            text = f"(callback error code {int(code)}) {text}"
            code = ErrorCode.UNKNOWN
        return cdata.new_error(int(code), text)
    except BaseException:   # noqa: BLE001 - nothing may escape into C
        return cdata.new_error(ErrorCode.UNKNOWN, "a host callback failed (its message was unreadable)")


def callback_error_pointer():
    """The `PJRT_CallbackError*` we hand to every framework callback that may fail."""
    global _CALLBACK_ERROR
    if _CALLBACK_ERROR is None:
        _CALLBACK_ERROR = cdata.ffi.new("PJRT_CallbackError*", cdata.lib.pjrt_ref_callback_error)
    return _CALLBACK_ERROR


def _taken_error(error, channel_id: int) -> PjrtRefError:
    """The `PJRT_Error*` a send callback returned, as an exception (and freed)."""
    obj = handles.remove(error, ErrorObject, "PJRT_Error returned by a send callback")
    exc = PjrtRefError(f"host callback (send channel {channel_id}) failed: {obj.message}")
    exc.code = ErrorCode(obj.code)
    return exc


def _sender(info) -> Sender:
    """Send one chunk per operand to `info.send_callback` (done = true: one chunk is all)."""
    ffi, lib = cdata.ffi, cdata.lib
    function, user_arg, channel_id = info.send_callback, info.user_arg, int(info.channel_id)
    if function == cdata.NULL:
        raise InvalidArgument(f"PJRT_ExecuteOptions: send callback for channel {channel_id} is NULL")

    def send(data: bytes) -> None:
        chunk = ffi.new("PJRT_Chunk*")
        chunk.data = lib.pjrt_ref_chunk_alloc(len(data))
        ffi.memmove(chunk.data, data, len(data))
        chunk.size = len(data)
        chunk.deleter = ffi.addressof(lib, "pjrt_ref_chunk_free")
        error = function(chunk, callback_error_pointer(), len(data), True, user_arg)
        if error != cdata.NULL:
            raise _taken_error(error, channel_id)

    return send


def _receiver(info) -> Receiver:
    """Give `info.recv_callback` a fresh stream handle; it fills and destroys it."""
    function, user_arg, channel_id = info.recv_callback, info.user_arg, int(info.channel_id)
    if function == cdata.NULL:
        raise InvalidArgument(f"PJRT_ExecuteOptions: recv callback for channel {channel_id} is NULL")

    def receive(stream: CopyToDeviceStream) -> None:
        function(handles.add(stream), user_arg)

    return receive


def _callback_table(table, count: int, device_index: int, what: str, make) -> dict:
    if not count:
        return {}
    rows = require_array(table, device_index + 1, f"PJRT_ExecuteOptions.{what}")
    infos = require_array(rows[device_index], count, f"PJRT_ExecuteOptions.{what}[{device_index}]")
    return {int(infos[i].channel_id): make(infos[i]) for i in range(count)}


def host_transfers_for(options, device_index: int) -> HostTransfers | None:
    """The send/recv callbacks `options` gives device `device_index`; None if it gives none."""
    if options == cdata.NULL:
        return None
    opts = Args(options, "PJRT_ExecuteOptions")
    num_send, num_recv = opts.get("num_send_ops", 0), opts.get("num_recv_ops", 0)
    if not num_send and not num_recv:
        return None
    senders = _callback_table(opts.send_callbacks, num_send, device_index, "send_callbacks", _sender)
    receivers = _callback_table(opts.recv_callbacks, num_recv, device_index, "recv_callbacks", _receiver)
    return HostTransfers(senders, receivers)


_NO_CALLBACKS = contextlib.nullcontext()


def attached_host_transfers(options, device_index: int):
    """A context in which the interpreter's host send/recv use the caller's callbacks.

    Without callbacks (most executions) nothing is attached and this costs
    well under a microsecond; a program that does send to the host then
    fails in the interpreter with UNAVAILABLE, naming the op and saying no
    callbacks were given. With callbacks, a channel that has none fails
    with FAILED_PRECONDITION naming it.
    """
    transfers = host_transfers_for(options, device_index)
    if transfers is None:
        return _NO_CALLBACKS
    from pjrt_ref.interpreter.ops.side_effects import attach_host_channel
    return attach_host_channel(transfers)


def attached_device_host_transfers(options, logical_ids: list[tuple[int, int]]):
    """`attached_host_transfers` for an execution on several devices: device d
    (logical id `logical_ids[d]`) uses its own callbacks (`DeviceHostTransfers`).
    Enter it in the calling thread: the devices' threads inherit it."""
    by_process = {}
    for d, logical_id in enumerate(logical_ids):
        transfers = host_transfers_for(options, d)
        if transfers is None:
            return _NO_CALLBACKS
        by_process[tuple(logical_id)] = transfers
    from pjrt_ref.interpreter.ops.side_effects import attach_host_channel
    return attach_host_channel(DeviceHostTransfers(by_process))


# ------------------------------------------------------ CopyToDeviceStream
def _stream(args: Args) -> CopyToDeviceStream:
    return handles.get(args.stream, CopyToDeviceStream, "PJRT_CopyToDeviceStream")


@entry_point("PJRT_CopyToDeviceStream_Destroy")
def copy_to_device_stream_destroy(args: Args) -> None:
    """PJRT_CopyToDeviceStream_Destroy: the framework is done with the stream."""
    handles.remove(args.stream, CopyToDeviceStream, "PJRT_CopyToDeviceStream")


@entry_point("PJRT_CopyToDeviceStream_AddChunk")
def copy_to_device_stream_add_chunk(args: Args) -> None:
    """PJRT_CopyToDeviceStream_AddChunk: copy the chunk, free it with its deleter,
    return a ready `transfer_complete` event (failed if the chunk overflows)."""
    stream = _stream(args)
    chunk = args.chunk
    if chunk == cdata.NULL:
        raise InvalidArgument("PJRT_CopyToDeviceStream_AddChunk: chunk is NULL")
    data = cdata.bytes_arg(chunk.data, chunk.size, "PJRT_Chunk.data")
    if chunk.deleter != cdata.NULL:
        chunk.deleter(chunk.data, chunk.deleter_arg)
    try:
        stream.add_chunk(data)
        args.transfer_complete = new_event_handle()
    except PjrtRefError as error:
        args.transfer_complete = new_event_handle(Event.ready(error))


@entry_point("PJRT_CopyToDeviceStream_TotalBytes")
def copy_to_device_stream_total_bytes(args: Args) -> None:
    """PJRT_CopyToDeviceStream_TotalBytes: the size of the recv's result."""
    args.total_bytes = _stream(args).total_bytes


@entry_point("PJRT_CopyToDeviceStream_GranuleSize")
def copy_to_device_stream_granule_size(args: Args) -> None:
    """PJRT_CopyToDeviceStream_GranuleSize: 1 (chunks of any size)."""
    args.granule_size_in_bytes = _stream(args).granule_bytes


@entry_point("PJRT_CopyToDeviceStream_CurrentBytes")
def copy_to_device_stream_current_bytes(args: Args) -> None:
    """PJRT_CopyToDeviceStream_CurrentBytes: bytes added so far."""
    args.current_bytes = _stream(args).current_bytes
