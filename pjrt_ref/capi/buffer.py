"""PJRT_Buffer_* entry points and host <-> device transfers (pjrt_c_api.h "Buffer")."""
from __future__ import annotations

import numpy as np

from pjrt_ref.model import layouts
from pjrt_ref.capi import handles
from pjrt_ref.model.buffer import Buffer, raw_bytes
from pjrt_ref.model.device import Device
from pjrt_ref.model.dtypes import BufferType, buffer_type, to_numpy
from pjrt_ref.errors import Internal, InvalidArgument, Unimplemented
from pjrt_ref.limits import check_allocation, nbytes
from pjrt_ref.model.event import Promise
from pjrt_ref.model.memory import Memory
from pjrt_ref.capi import caller_callbacks, cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.buffer_destroy import destroy_buffer
from pjrt_ref.capi.cdata import Args, owned_array
from pjrt_ref.capi.client import client_of
from pjrt_ref.capi.event import new_event_handle


def _buffer(args: Args, field: str = "buffer") -> Buffer:
    return handles.get(getattr(args, field), Buffer, "PJRT_Buffer")


def _optional(ptr, kind, what):
    return None if ptr == cdata.NULL else handles.get(ptr, kind, what)


def int_list(ptr, count: int, what: str = "int64 array") -> list[int]:
    """A caller's (int64_t*, count) as a list; NULL with count > 0 is INVALID_ARGUMENT."""
    cdata.require_array(ptr, count, what)
    return [int(ptr[i]) for i in range(count)] if count else []


def register_buffer(buffer: Buffer):
    buffer.handle = handles.add(buffer)
    return buffer.handle


def array_shape(args: Args, prefix: str = "shape_", layout: str | None = "shape_layout"
                ) -> tuple[BufferType, np.dtype, tuple[int, ...]]:
    """(type, numpy dtype, dims) of an array shape given as the Args fields `<prefix>element_type`,
    `<prefix>dims`, `<prefix>num_dims` and, if named, a device layout, which must be the dense
    row-major one every pjrt-ref buffer has (`check_dense_device_layout`)."""
    element_type = buffer_type(getattr(args, prefix + "element_type"))
    dtype = to_numpy(element_type)
    dims = tuple(int_list(getattr(args, prefix + "dims"), getattr(args, prefix + "num_dims"), prefix + "dims"))
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"negative dimension in {list(dims)}")
    if layout is not None:
        check_dense_device_layout(args.get(layout, cdata.NULL), list(dims), dtype.itemsize)
    return element_type, dtype, dims


# ------------------------------------------------------------- layouts
def strides_from_layout(layout, dims: list[int], itemsize: int) -> list[int] | None:
    """Byte strides a `PJRT_Buffer_MemoryLayout` describes (None: dense row-major)."""
    if layout == cdata.NULL:
        return None
    if layout.type == cdata.lib.PJRT_Buffer_MemoryLayout_Type_Strides:
        strides = int_list(layout.strides.byte_strides, layout.strides.num_byte_strides)
        if len(strides) != len(dims):
            raise InvalidArgument(f"layout has {len(strides)} byte strides for rank {len(dims)}")
        return strides
    tiled = layout.tiled
    if tiled.num_tiles:
        raise Unimplemented("tiled layouts are not supported by pjrt-ref (dense layouts only)")
    minor_to_major = int_list(tiled.minor_to_major, tiled.minor_to_major_size)
    if sorted(minor_to_major) != list(range(len(dims))):
        raise InvalidArgument(f"minor_to_major {minor_to_major} is not a permutation of rank {len(dims)}")
    strides = [0] * len(dims)
    step = itemsize
    for dim in minor_to_major:
        strides[dim] = step
        step *= dims[dim]
    return strides


def _dense_strides(dims: list[int], itemsize: int) -> list[int]:
    strides, step = [], itemsize
    for d in reversed(dims):
        strides.append(step)
        step *= max(d, 1)
    return strides[::-1]


def _span(dims: list[int], strides: list[int], itemsize: int) -> tuple[int, int]:
    """Byte offsets (first, end) of the memory an array with these strides
    touches, relative to its element [0, 0, ...]. Negative strides (a flipped
    numpy view) reach below it; XLA accepts any byte strides, so do we."""
    if any(d == 0 for d in dims):
        return 0, 0
    below = sum((d - 1) * s for d, s in zip(dims, strides) if s < 0)
    above = sum((d - 1) * s for d, s in zip(dims, strides) if s > 0)
    return below, above + itemsize


def _strided_view(data, dtype: np.dtype, dims: list[int], strides: list[int]) -> np.ndarray | None:
    """A numpy view of the caller's memory at `data` (None if it spans no bytes)."""
    first, end = _span(dims, strides, dtype.itemsize)
    if end == first:
        return None
    start = cdata.ffi.cast("char*", data) + first
    raw = np.frombuffer(cdata.ffi.buffer(start, end - first), np.uint8)
    return np.ndarray(shape=dims, dtype=dtype, buffer=raw, offset=-first, strides=strides)


def host_to_array(data, dtype: np.dtype, dims: list[int], strides: list[int] | None) -> np.ndarray:
    """Copy the caller's host memory (any byte strides) into a fresh array."""
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"negative dimension in {dims}")
    strides = strides if strides is not None else _dense_strides(dims, dtype.itemsize)
    if any(d == 0 for d in dims):
        return np.zeros(dims, dtype)
    if data == cdata.NULL:
        raise InvalidArgument("host data pointer is NULL")
    return np.array(_strided_view(data, dtype, dims, strides), copy=True, order="C")


def array_to_host(array: np.ndarray, dst, dst_size: int, strides: list[int] | None) -> None:
    """Write `array` into the caller's memory, densely or with the given byte strides."""
    itemsize = array.dtype.itemsize
    dims = list(array.shape)
    strides = strides if strides is not None else _dense_strides(dims, itemsize)
    first, end = _span(dims, strides, itemsize)
    if first < 0:
        raise InvalidArgument(f"byte strides {strides} reach below the destination pointer")
    if dst_size < end:
        raise InvalidArgument(f"destination has {dst_size} bytes, {end} needed")
    target = _strided_view(dst, array.dtype, dims, strides)
    if target is not None:
        target[...] = array


# ------------------------------------------------------ host -> device
@entry_point("PJRT_Client_BufferFromHostBuffer")
def client_buffer_from_host_buffer(args: Args) -> None:
    """PJRT_Client_BufferFromHostBuffer: copies at once, whatever the semantics.

    Because the copy is complete before we return, `done_with_host_buffer` is
    born ready: the caller may reuse its memory immediately.
    """
    client = client_of(args)
    dtype = to_numpy(args.type)
    dims = int_list(args.dims, args.num_dims)
    strides = None
    if args.byte_strides != cdata.NULL and args.num_byte_strides:
        strides = int_list(args.byte_strides, args.num_byte_strides)
        if len(strides) != len(dims):
            raise InvalidArgument(f"{len(strides)} byte strides for {len(dims)} dimensions")
    order = device_layout_order(args.get("device_layout", cdata.NULL), dims, dtype.itemsize)
    device = _optional(args.device, Device, "PJRT_Device")
    memory = _optional(args.get("memory", cdata.NULL), Memory, "PJRT_Memory")
    check_allocation(nbytes(dtype, dims), f"host transfer of {dtype}{dims}")
    array = host_to_array(args.data, dtype, dims, strides)
    buffer = client.buffer_from_array(array, device, memory, order)
    args.done_with_host_buffer = new_event_handle()
    args.buffer = register_buffer(buffer)


def device_layout_order(layout, dims: list[int], itemsize: int) -> tuple[int, ...] | None:
    """The minor_to_major of a caller's device layout (None for NULL: the default).

    Any dense layout is taken (model/layouts.py): a tiled one without tiles,
    or byte strides that lay the elements out densely in some dimension
    order. Tiles, gaps or overlaps are UNIMPLEMENTED: a buffer is dense."""
    if layout == cdata.NULL:
        return None
    if layout.type != cdata.lib.PJRT_Buffer_MemoryLayout_Type_Strides:
        strides_from_layout(layout, dims, itemsize)        # refuses tiles and non-permutations
        return layouts.checked(int_list(layout.tiled.minor_to_major, layout.tiled.minor_to_major_size),
                               len(dims))
    strides = strides_from_layout(layout, dims, itemsize)
    order = tuple(sorted(range(len(dims)), key=lambda d: (abs(strides[d]), d)))
    if any(d > 1 for d in dims) and strides != _order_strides(dims, order, itemsize):
        raise Unimplemented(f"device layout with byte strides {strides} for dims {dims} is not dense: "
                            "pjrt-ref buffers are dense in some dimension order")
    return order


def check_dense_device_layout(layout, dims: list[int], itemsize: int) -> None:
    """UNIMPLEMENTED unless a caller's device layout (or NULL) is dense row-major."""
    order = device_layout_order(layout, dims, itemsize)
    if order is not None and any(d > 1 for d in dims) and order != layouts.row_major(len(dims)):
        raise Unimplemented(f"this entry point makes dense row-major buffers; device layout "
                            f"{layouts.text(order)} is not supported here")


def _order_strides(dims: list[int], minor_to_major: tuple[int, ...], itemsize: int) -> list[int]:
    """Byte strides of a dense array of `dims` laid out in `minor_to_major` order."""
    strides, step = [0] * len(dims), itemsize
    for dim in minor_to_major:
        strides[dim] = step
        step *= max(dims[dim], 1)
    return strides


@entry_point("PJRT_Client_CreateUninitializedBuffer")
def client_create_uninitialized_buffer(args: Args) -> None:
    """PJRT_Client_CreateUninitializedBuffer: zero-filled."""
    client = client_of(args)
    dtype = to_numpy(args.shape_element_type)
    dims = int_list(args.shape_dims, args.shape_num_dims)
    device = _optional(args.device, Device, "PJRT_Device")
    memory = _optional(args.memory, Memory, "PJRT_Memory")
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"negative dimension in {dims}")
    check_allocation(nbytes(dtype, dims), f"uninitialized buffer {dtype}{dims}")
    args.buffer = register_buffer(client.buffer_from_array(np.zeros(dims, dtype), device, memory))


# ------------------------------------------------------ device -> host
@entry_point("PJRT_Buffer_ToHostBuffer")
def buffer_to_host_buffer(args: Args) -> None:
    """PJRT_Buffer_ToHostBuffer: `dst == NULL` reports `dst_size`; else copy (honouring host_layout)."""
    buffer = _buffer(args, "src")
    array = buffer.array
    strides = strides_from_layout(args.host_layout, list(buffer.dims), buffer.dtype.itemsize)
    needed = _span(list(buffer.dims), strides or _dense_strides(list(buffer.dims), buffer.dtype.itemsize),
                   buffer.dtype.itemsize)[1]
    if args.dst == cdata.NULL:
        args.dst_size = needed
        return
    array_to_host(array, args.dst, args.dst_size, strides)
    args.event = new_event_handle()


@entry_point("PJRT_Buffer_CopyRawToHost")
def buffer_copy_raw_to_host(args: Args) -> None:
    """PJRT_Buffer_CopyRawToHost: bytes [offset, offset+size) of the data, in the buffer's layout."""
    raw = raw_bytes(_buffer(args).array)
    offset, size = int(args.offset), int(args.transfer_size)
    if offset < 0 or size < 0 or offset + size > len(raw):
        raise InvalidArgument(f"range [{offset}, {offset + size}) outside the buffer's {len(raw)} bytes")
    cdata.require_array(args.dst, size, "PJRT_Buffer_CopyRawToHost dst")
    cdata.ffi.memmove(args.dst, raw[offset:offset + size].tobytes(), size)
    args.event = new_event_handle()


@entry_point("PJRT_Buffer_CopyRawToHostFuture")
def buffer_copy_raw_to_host_future(args: Args) -> None:
    """PJRT_Buffer_CopyRawToHostFuture: PJRT_Buffer_CopyRawToHost whose destination comes later.

    The caller gets `event`, `callback_data` and `future_ready_callback`, and
    calls the callback once with `callback_data` and either the destination
    (`error_code` OK, `dst`) or an error. The bytes are written, and `event`
    completes, once both the destination and the buffer's contents are here
    (a pending buffer's may come later); an error on either side becomes
    the event's. As pjrt_c_api.h asks, the contents stay alive for the copy
    even if the buffer is deleted before the destination comes. A range
    outside the buffer, or a deleted buffer, fails the call itself (XLA's
    wrapper fails the event instead; pjrt-ref's CopyRawToHost fails the call).
    """
    args.require("future_ready_callback")
    buffer = _buffer(args)
    offset, size = int(args.offset), int(args.transfer_size)
    destination = Promise()
    args.event = new_event_handle(buffer.copy_raw_later(offset, size, destination))
    caller_callbacks.hand_out(args, "future_ready_callback", "pjrt_ref_copy_raw_destination_ready",
                              destination, lambda callback_args: _writer(callback_args.dst, size))


def _writer(dst, size: int):
    """How the promised destination is written: `size` bytes to `dst` (NULL: INVALID_ARGUMENT)."""
    cdata.require_array(dst, size, "PJRT_Buffer_CopyRawToHostFuture destination (dst)")

    def write(data: np.ndarray) -> None:
        if not size:
            return
        try:
            cdata.ffi.memmove(dst, data, size)
        except Exception as error:    # cffi refused the copy: an error of the event, not a crash
            raise Internal(f"copy to the destination failed: {error!r}") from None
    return write


# ------------------------------------------------------- donating buffers
@entry_point("PJRT_Buffer_Bitcast")
def buffer_bitcast(args: Args) -> None:
    """PJRT_Buffer_Bitcast: a new buffer on the same memory holding the same bytes as
    another element type and dims; no byte is copied, and, as PjRtBuffer::Bitcast
    says, the input is donated (deleted). The byte sizes must match (else
    INVALID_ARGUMENT naming both); the layout must be the dense row-major one
    (NULL: that default, not the input's). Tokens are not arrays: INVALID_ARGUMENT.
    A deleted input: FAILED_PRECONDITION, as for every read of a deleted buffer."""
    args.require("out_buffer")
    buffer = _buffer(args)
    if BufferType.TOKEN in (buffer.buffer_type, buffer_type(args.element_type)):
        raise InvalidArgument("a bitcast takes and makes arrays, not tokens")
    element_type, dtype, dims = array_shape(args, prefix="", layout="device_layout")
    args.out_buffer = register_buffer(buffer.successor(element_type, dtype, dims))


@entry_point("PJRT_Buffer_DonateWithControlDependency")
def buffer_donate_with_control_dependency(args: Args) -> None:
    """PJRT_Buffer_DonateWithControlDependency: `buffer` is donated (deleted) to
    `out_buffer`, which has its contents and is ready once they are and the
    caller has called `dependency_ready_callback(callback_data)` (once). An
    error from either (a failed buffer, an error code in the callback) becomes
    out_buffer's error. A deleted buffer, or one a framework views
    (external references), cannot be donated: FAILED_PRECONDITION."""
    args.require("dependency_ready_callback", "out_buffer")
    buffer = _buffer(args)
    dependency = Promise()
    out = buffer.successor(buffer.buffer_type, buffer.dtype, buffer.dims, dependency.event)
    caller_callbacks.hand_out(args, "dependency_ready_callback", "pjrt_ref_dependency_ready", dependency)
    args.out_buffer = register_buffer(out)


# --------------------------------------------------------------- queries
@entry_point("PJRT_Buffer_Destroy")
def buffer_destroy(args: Args) -> None:
    """PJRT_Buffer_Destroy: frees the handle and the data."""
    destroy_buffer(handles.address(args.buffer))


@entry_point("PJRT_Buffer_ElementType")
def buffer_element_type(args: Args) -> None:
    """PJRT_Buffer_ElementType."""
    args.type = int(_buffer(args).buffer_type)


@entry_point("PJRT_Buffer_Dimensions")
def buffer_dimensions(args: Args) -> None:
    """PJRT_Buffer_Dimensions: owned by the buffer."""
    buffer = _buffer(args)
    args.dims = owned_array(buffer, "dims", "int64_t", list(buffer.dims))
    args.num_dims = len(buffer.dims)


@entry_point("PJRT_Buffer_UnpaddedDimensions")
def buffer_unpadded_dimensions(args: Args) -> None:
    """PJRT_Buffer_UnpaddedDimensions: static shapes only, so the dimensions."""
    buffer = _buffer(args)
    args.unpadded_dims = owned_array(buffer, "dims", "int64_t", list(buffer.dims))
    args.num_dims = len(buffer.dims)


@entry_point("PJRT_Buffer_DynamicDimensionIndices")
def buffer_dynamic_dimension_indices(args: Args) -> None:
    """PJRT_Buffer_DynamicDimensionIndices: none."""
    buffer = _buffer(args)
    args.dynamic_dim_indices = owned_array(buffer, "dynamic", "size_t", [])
    args.num_dynamic_dims = 0


@entry_point("PJRT_Buffer_GetMemoryLayout")
def buffer_get_memory_layout(args: Args) -> None:
    """PJRT_Buffer_GetMemoryLayout: the buffer's dense layout, as a tiled layout with no tiles."""
    buffer = _buffer(args)
    rank = len(buffer.dims)
    layout = args.raw.layout
    layout.struct_size = cdata.ffi.sizeof("PJRT_Buffer_MemoryLayout")
    layout.type = cdata.lib.PJRT_Buffer_MemoryLayout_Type_Tiled
    tiled = layout.tiled
    tiled.struct_size = cdata.ffi.sizeof("PJRT_Buffer_MemoryLayout_Tiled")
    tiled.minor_to_major = owned_array(buffer, "minor_to_major", "int64_t", list(buffer.layout))
    tiled.minor_to_major_size = rank
    tiled.tile_dims = cdata.NULL
    tiled.tile_dim_sizes = cdata.NULL
    tiled.num_tiles = 0


@entry_point("PJRT_Buffer_OnDeviceSizeInBytes")
def buffer_on_device_size_in_bytes(args: Args) -> None:
    """PJRT_Buffer_OnDeviceSizeInBytes."""
    args.on_device_size_in_bytes = _buffer(args).nbytes


@entry_point("PJRT_Buffer_Device")
def buffer_device(args: Args) -> None:
    """PJRT_Buffer_Device."""
    args.device = _buffer(args).device.handle


@entry_point("PJRT_Buffer_Memory")
def buffer_memory(args: Args) -> None:
    """PJRT_Buffer_Memory."""
    args.memory = _buffer(args).memory.handle


@entry_point("PJRT_Buffer_Delete")
def buffer_delete(args: Args) -> None:
    """PJRT_Buffer_Delete: drop the data; the handle stays until Destroy."""
    _buffer(args).delete()


@entry_point("PJRT_Buffer_IsDeleted")
def buffer_is_deleted(args: Args) -> None:
    """PJRT_Buffer_IsDeleted."""
    args.is_deleted = _buffer(args).is_deleted


@entry_point("PJRT_Buffer_IsOnCpu")
def buffer_is_on_cpu(args: Args) -> None:
    """PJRT_Buffer_IsOnCpu: true, the data is host memory (a numpy array).

    It lets a framework alias results instead of copying them: jaxlib's
    `np.asarray(y)` of a buffer on CPU (jaxlib/py_array.cc
    `IsZeroCopyableCpuBuffer`: on CPU, 8 bits or wider, default layout)
    takes an external reference, reads
    PJRT_Buffer_OpaqueDeviceMemoryDataPointer and wraps that memory in a
    read-only numpy array; sub-byte types still go through
    PJRT_Buffer_ToHostBuffer. `Buffer` keeps that memory valid while the
    reference lives (see pjrt_ref/model/buffer.py). Answered in C too
    (capi_shim/fast_paths.c).
    """
    _buffer(args)
    args.is_on_cpu = True


@entry_point("PJRT_Buffer_ReadyEvent")
def buffer_ready_event(args: Args) -> None:
    """PJRT_Buffer_ReadyEvent: a new handle on the buffer's (already complete) event."""
    args.event = new_event_handle(_buffer(args).ready_event)


def _copy(buffer: Buffer, device: Device, memory: Memory):
    copy = device.client.buffer_from_array(buffer.array, device, memory, buffer.minor_to_major)
    return register_buffer(copy)


@entry_point("PJRT_Buffer_CopyToDevice")
def buffer_copy_to_device(args: Args) -> None:
    """PJRT_Buffer_CopyToDevice: a new buffer with the same contents."""
    buffer = _buffer(args)
    device = handles.get(args.dst_device, Device, "PJRT_Device")
    args.dst_buffer = _copy(buffer, device, device.default_memory)


@entry_point("PJRT_Buffer_CopyToMemory")
def buffer_copy_to_memory(args: Args) -> None:
    """PJRT_Buffer_CopyToMemory."""
    buffer = _buffer(args)
    memory = handles.get(args.dst_memory, Memory, "PJRT_Memory")
    args.dst_buffer = _copy(buffer, memory.devices[0], memory)


@entry_point("PJRT_Buffer_IncreaseExternalReferenceCount")
def buffer_increase_external_reference_count(args: Args) -> None:
    """PJRT_Buffer_IncreaseExternalReferenceCount: the data is shared with another
    framework and must stay where it is, alive, until the matching decrease
    (even if the buffer is deleted or donated meanwhile). A deleted buffer:
    FAILED_PRECONDITION."""
    _buffer(args).acquire_external_reference()


@entry_point("PJRT_Buffer_DecreaseExternalReferenceCount")
def buffer_decrease_external_reference_count(args: Args) -> None:
    """PJRT_Buffer_DecreaseExternalReferenceCount: ends one reference; "returns an
    error if the reference count is zero" (INVALID_ARGUMENT). Works on a
    deleted buffer: the references taken before the delete end here."""
    _buffer(args).release_external_reference()


def _data_pointer(buffer: Buffer) -> int:
    """Address of the buffer's (read-only, C-contiguous, aligned) data; waits until it is ready."""
    return int(buffer.array.__array_interface__["data"][0])


@entry_point("PJRT_Buffer_UnsafePointer")
def buffer_unsafe_pointer(args: Args) -> None:
    """PJRT_Buffer_UnsafePointer: address of the (read-only) numpy data."""
    args.buffer_pointer = _data_pointer(_buffer(args))


@entry_point("PJRT_Buffer_OpaqueDeviceMemoryDataPointer")
def buffer_opaque_device_memory_data_pointer(args: Args) -> None:
    """PJRT_Buffer_OpaqueDeviceMemoryDataPointer: the same address, as void*.

    pjrt_c_api.h: it "may become invalid at any point unless the external
    reference count is greater than 0". With a reference held it stays valid
    until the reference ends, whatever happens to the buffer meanwhile.
    """
    args.device_memory_ptr = cdata.ffi.cast("void*", _data_pointer(_buffer(args)))
