"""Async host-to-device transfers: pending buffers, chunked data, errors (via pypjrt);
whole literals (PJRT_AsyncHostToDeviceTransferManager_TransferLiteral, in-process)."""
from __future__ import annotations

import numpy as np

from tests.support.capi_calls import ffi, lib
from test_capi_errors import PYPJRT_PRELUDE
from tests.support.jax_support import run_python


def test_chunked_transfer_then_execute():
    run_python(PYPJRT_PRELUDE + """
from pypjrt.client import Device
from pypjrt.transfer import ShapeSpec
dev = Device(plugin, client._addressable()[0])
exe = client.compile(ADD)
with client.async_transfer([ShapeSpec(11, (4,)), ShapeSpec(11, (4,))], device=dev) as t:
    assert len(t) == 2 and t.buffer_size(0) == 16
    a = t.retrieve(0)                      # retrieved before its data arrives
    t.transfer(0, array.array("f", [1, 2]), offset=0, last=False)
    t.transfer(0, array.array("f", [3, 4]), offset=8, last=True)
    t.transfer(1, array.array("f", [10, 20, 30, 40]))
    b = t.retrieve(1)
    expect(errors.InvalidArgument, lambda: t.retrieve(1), "already retrieved")
    expect(errors.InvalidArgument, lambda: t.transfer(1, array.array("f", [1]), offset=16), "outside")
(out,) = exe(a, b)
got = array.array("f"); got.frombytes(out.to_host())
assert list(got) == [11, 22, 33, 44], got
print("ok")
""")


# ---------------------------------------------------- TransferLiteral, in-process
INVALID = lib.PJRT_Error_Code_INVALID_ARGUMENT


def _manager(api, client, shapes):
    """A transfer manager with one buffer per (PJRT_Buffer_Type, dims)."""
    specs = ffi.new("PJRT_ShapeSpec[]", len(shapes))
    for spec, (element_type, dims) in zip(specs, shapes):
        spec.struct_size, spec.element_type = ffi.sizeof("PJRT_ShapeSpec"), element_type
        spec.dims, spec.num_dims = api.dims(dims), len(dims)
    api.keep.append(specs)
    return api.call("PJRT_Client_CreateBuffersForAsyncHostToDevice", client=client, shape_specs=specs,
                    num_shape_specs=len(shapes), memory=api.memory(client)).transfer_manager


def _literal(api, manager, index, array: np.ndarray, element_type, layout=ffi.NULL, **fields):
    fields.setdefault("data", ffi.cast("void*", array.ctypes.data))
    return api.call("PJRT_AsyncHostToDeviceTransferManager_TransferLiteral", transfer_manager=manager,
                    buffer_index=index, shape_dims=api.dims(array.shape), shape_num_dims=array.ndim,
                    shape_element_type=element_type, shape_layout=layout, **fields)


def test_transfer_literal_fills_a_whole_buffer(api, client):
    F32, S32 = lib.PJRT_Buffer_Type_F32, lib.PJRT_Buffer_Type_S32
    manager = _manager(api, client, [(F32, [2, 3]), (S32, [4]), (F32, [2, 3])])
    buffers = [api.call("PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer", transfer_manager=manager,
                        buffer_index=i).buffer_out for i in range(3)]
    event = api.ready_event(buffers[0])
    assert not api.is_ready(event)
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    done = _literal(api, manager, 0, values, F32).done_with_h2d_transfer
    assert api.settle(done) is None and api.settle(event) is None
    np.testing.assert_array_equal(api.to_host(buffers[0], np.float32, (2, 3)), values)
    ints = np.array([4, -3, 2, -1], np.int32)
    api.settle(_literal(api, manager, 1, ints, S32).done_with_h2d_transfer)
    assert api.to_host(buffers[1], np.int32, (4,)).tolist() == [4, -3, 2, -1]
    column_major = np.asfortranarray(values * 10)              # a literal in its own layout
    layout = api.tiled_layout([0, 1])
    api.settle(_literal(api, manager, 2, column_major, F32, layout).done_with_h2d_transfer)
    np.testing.assert_array_equal(api.to_host(buffers[2], np.float32, (2, 3)), values * 10)
    api.call("PJRT_AsyncHostToDeviceTransferManager_Destroy", transfer_manager=manager)
    for buffer in buffers:
        api.call("PJRT_Buffer_Destroy", buffer=buffer)


def test_transfer_literal_bad_inputs(api, client):
    F32 = lib.PJRT_Buffer_Type_F32
    manager = _manager(api, client, [(F32, [4])])
    name = "PJRT_AsyncHostToDeviceTransferManager_TransferLiteral"
    four = np.zeros(4, np.float32)
    cases = [
        (dict(shape_dims=api.dims([5])), "does not match buffer 0"),
        (dict(shape_element_type=lib.PJRT_Buffer_Type_S32), "does not match buffer 0"),
        (dict(buffer_index=3), "out of range"),
        (dict(data=ffi.NULL), "NULL"),
        (dict(shape_element_type=77), "unknown PJRT_Buffer_Type 77"),
    ]
    for change, needle in cases:
        fields = dict(transfer_manager=manager, buffer_index=0, data=ffi.cast("void*", four.ctypes.data),
                      shape_dims=api.dims([4]), shape_num_dims=1, shape_element_type=F32)
        fields.update(change)
        code, message = api.error(name, **fields)
        assert code == INVALID and needle in message, (change, message)
    api.settle(_literal(api, manager, 0, four, F32).done_with_h2d_transfer)
    code, message = api.error(name, transfer_manager=manager, buffer_index=0, data=ffi.cast("void*", four.ctypes.data),
                              shape_dims=api.dims([4]), shape_num_dims=1, shape_element_type=F32)
    assert code == INVALID and "already completed" in message
    buffer = api.call("PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer", transfer_manager=manager,
                      buffer_index=0).buffer_out
    api.call("PJRT_AsyncHostToDeviceTransferManager_Destroy", transfer_manager=manager)
    for bad in (ffi.NULL, manager, ffi.cast("PJRT_AsyncHostToDeviceTransferManager*", buffer)):   # NULL, stale, other
        code, _ = api.error(name, transfer_manager=bad, buffer_index=0)
        assert code == INVALID
    api.call("PJRT_Buffer_Destroy", buffer=buffer)
