"""The pure-Python side of the boundary: dtypes, events, buffers, handles, host copies."""
from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

from pjrt_ref.capi import handles
from pjrt_ref.model.buffer import Buffer
from pjrt_ref.capi import _boundary
from pjrt_ref.capi.buffer import array_to_host, host_to_array
from pjrt_ref.model.client import Client
from pjrt_ref.model.dtypes import NUMPY_DTYPES, BufferType, from_numpy, to_numpy
from pjrt_ref.errors import FailedPrecondition, InvalidArgument, Unimplemented
from pjrt_ref.model.event import Event


@pytest.fixture(scope="module")
def ffi():
    from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib
    _boundary.bind(ffi, lib)
    return ffi


def test_dtype_table_round_trips():
    for buffer_type, dtype in NUMPY_DTYPES.items():
        assert from_numpy(dtype) == buffer_type
        assert to_numpy(int(buffer_type)) == dtype
    assert to_numpy(BufferType.BF16) == np.dtype(ml_dtypes.bfloat16)
    with pytest.raises(Unimplemented):
        to_numpy(BufferType.TOKEN)
    with pytest.raises(InvalidArgument):
        to_numpy(999)


def test_event_callbacks_run_once_when_set():
    seen = []
    event = Event()
    event.on_ready(seen.append)
    assert seen == [] and not event.is_ready
    threading.Timer(0.01, event.set).start()
    assert event.wait(5) is None
    event.set(InvalidArgument("ignored: already complete"))
    event.on_ready(seen.append)          # already ready: runs immediately
    assert seen == [None, None]


def test_buffer_is_read_only_and_deletable(ffi):
    client = Client()
    buffer = client.buffer_from_array(np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(ValueError):
        buffer.array[0, 0] = 1           # buffers are immutable: executions may share them
    assert client.bytes_in_use() == 0    # counted: buffers the caller holds a handle to
    buffer.handle = handles.add(buffer)
    assert client.bytes_in_use() == client.bytes_in_use(client.devices[0]) == 24
    assert Client().bytes_in_use() == 0  # another client's buffers are not counted
    buffer.delete()
    assert buffer.is_deleted and client.bytes_in_use() == 0
    handles.remove(buffer.handle, Buffer)
    with pytest.raises(FailedPrecondition):
        buffer.array


def test_scalar_buffers_stay_scalar():
    buffer = Buffer(np.float32(3), Client().devices[0])
    assert buffer.dims == () and buffer.array.shape == ()


def test_pending_buffer_waits_for_its_data():
    device = Client().devices[0]
    buffer = Buffer.pending(np.dtype(np.int32), (3,), device)
    threading.Timer(0.01, buffer.fulfill, [np.array([1, 2, 3], np.int32)]).start()
    np.testing.assert_array_equal(buffer.array, [1, 2, 3])


def test_handles_reject_stale_and_foreign_pointers(ffi):
    buffer = Buffer(np.zeros(2), Client().devices[0])
    ptr = handles.add(buffer)
    assert handles.get(ptr, Buffer) is buffer
    with pytest.raises(InvalidArgument, match="not a live Client"):
        handles.get(ptr, Client)
    handles.remove(ptr, Buffer)
    with pytest.raises(InvalidArgument, match="not a live"):
        handles.get(ptr, Buffer)
    with pytest.raises(InvalidArgument, match="NULL"):
        handles.get(ffi.NULL, Buffer)


@pytest.mark.parametrize("order", ["C", "F", "strided"])
def test_host_copies_honour_byte_strides(ffi, order):
    base = np.arange(24, dtype=np.int16).reshape(4, 6)
    host = {"C": base, "F": np.asfortranarray(base), "strided": base[:, ::2]}[order]
    pointer = ffi.cast("void*", host.__array_interface__["data"][0])
    copy = host_to_array(pointer, host.dtype, list(host.shape), list(host.strides))
    np.testing.assert_array_equal(copy, host)
    assert copy.flags.c_contiguous
    target = np.zeros(base.size, np.int16)
    array_to_host(base[:, :4], ffi.cast("void*", target.__array_interface__["data"][0]), target.nbytes,
                  [2, 8])               # column-major 4x4
    np.testing.assert_array_equal(target[:16].reshape(4, 4, order="F"), base[:, :4])
