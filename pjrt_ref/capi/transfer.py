"""PJRT_Client_CreateBuffersForAsyncHostToDevice and PJRT_AsyncHostToDeviceTransferManager_*."""
from __future__ import annotations

from pjrt_ref.capi import handles
from pjrt_ref.model.device import Device
from pjrt_ref.model.dtypes import to_numpy
from pjrt_ref.errors import InvalidArgument
from pjrt_ref.model.memory import Memory
from pjrt_ref.model.transfer import TransferManager
from pjrt_ref.capi import cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, bytes_arg, read_named_values, text_arg
from pjrt_ref.capi.buffer import (array_shape, check_dense_device_layout, host_to_array, int_list, register_buffer,
                                  strides_from_layout)
from pjrt_ref.capi.client import client_of
from pjrt_ref.capi.event import new_event_handle


def _manager(args: Args) -> TransferManager:
    return handles.get(args.transfer_manager, TransferManager, "PJRT_AsyncHostToDeviceTransferManager")


@entry_point("PJRT_Client_CreateBuffersForAsyncHostToDevice")
def client_create_buffers_for_async_host_to_device(args: Args) -> None:
    """PJRT_Client_CreateBuffersForAsyncHostToDevice: one pending buffer per shape spec."""
    client = client_of(args)
    memory = handles.get(args.memory, Memory, "PJRT_Memory")
    specs = []
    for i in range(args.num_shape_specs):
        spec = args.shape_specs[i]
        dtype = to_numpy(spec.element_type)
        dims = int_list(spec.dims, spec.num_dims)
        if args.device_layouts != cdata.NULL and i < args.num_device_layouts:
            check_dense_device_layout(args.device_layouts[i], dims, dtype.itemsize)
        specs.append((dtype, tuple(dims)))
    manager = TransferManager(client, specs, memory.devices[0], memory)
    manager.handle = handles.add(manager)
    args.transfer_manager = manager.handle


@entry_point("PJRT_AsyncHostToDeviceTransferManager_Destroy")
def transfer_manager_destroy(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_Destroy (retrieved buffers live on)."""
    handles.remove(args.transfer_manager, TransferManager, "PJRT_AsyncHostToDeviceTransferManager")


@entry_point("PJRT_AsyncHostToDeviceTransferManager_TransferData")
def transfer_manager_transfer_data(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_TransferData: copied at once; the event is born ready."""
    manager = _manager(args)
    size = int(args.transfer_size)
    if size < 0:
        raise InvalidArgument(f"negative transfer_size {size}")
    manager.transfer(args.buffer_index, bytes_arg(args.data, size), int(args.offset), bool(args.is_last_transfer))
    args.done_with_h2d_transfer = new_event_handle()


@entry_point("PJRT_AsyncHostToDeviceTransferManager_TransferLiteral")
def transfer_manager_transfer_literal(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_TransferLiteral: buffer `buffer_index`'s whole
    contents, a host literal of exactly its element type and dims, copied at once (the event
    is born ready); the buffer is then ready. The literal's layout may be any dense one
    (`shape_layout`: a minor-to-major order or byte strides; NULL: row-major). A shape that
    is not the buffer's, or a buffer already completed, is INVALID_ARGUMENT."""
    manager = _manager(args)
    _, dtype, dims = array_shape(args, layout=None)
    manager.check_literal(args.buffer_index, dtype, dims)      # before reading the caller's memory
    strides = strides_from_layout(args.shape_layout, list(dims), dtype.itemsize)
    manager.transfer_literal(args.buffer_index, host_to_array(args.data, dtype, list(dims), strides))
    args.done_with_h2d_transfer = new_event_handle()


@entry_point("PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer")
def transfer_manager_retrieve_buffer(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer: the caller owns the buffer."""
    args.buffer_out = register_buffer(_manager(args).retrieve(args.buffer_index))


@entry_point("PJRT_AsyncHostToDeviceTransferManager_Device")
def transfer_manager_device(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_Device."""
    device: Device = _manager(args).device
    args.device_out = device.handle


@entry_point("PJRT_AsyncHostToDeviceTransferManager_BufferCount")
def transfer_manager_buffer_count(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_BufferCount."""
    args.buffer_count = len(_manager(args).buffers)


@entry_point("PJRT_AsyncHostToDeviceTransferManager_BufferSize")
def transfer_manager_buffer_size(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_BufferSize: bytes to send for buffer_index."""
    args.buffer_size = _manager(args).buffer_size(args.buffer_index)


@entry_point("PJRT_AsyncHostToDeviceTransferManager_SetBufferError")
def transfer_manager_set_buffer_error(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_SetBufferError: the buffer completes with this error."""
    error = cdata.caller_error("SetBufferError", args.error_code,
                                   text_arg(args.error_message, args.error_message_size))
    _manager(args).set_error(args.buffer_index, error)


@entry_point("PJRT_AsyncHostToDeviceTransferManager_AddMetadata")
def transfer_manager_add_metadata(args: Args) -> None:
    """PJRT_AsyncHostToDeviceTransferManager_AddMetadata: recorded, not used."""
    manager = _manager(args)
    if args.num_metadata:
        manager.metadata.update(read_named_values(args.transfer_metadata, args.num_metadata))
