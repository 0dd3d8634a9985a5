"""A buffer's contents handed on, driven through the plugin's PJRT_Api table: PJRT_Buffer_Bitcast
and PJRT_Buffer_DonateWithControlDependency (the buffer is donated to a new one) and
PJRT_Buffer_CopyRawToHostFuture (the contents go to a destination the caller gives later,
through a function pjrt-ref hands out: pjrt_ref/capi/caller_callbacks.py)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.capi_calls import PjrtCallError, ffi, lib

INVALID, PRECONDITION = lib.PJRT_Error_Code_INVALID_ARGUMENT, lib.PJRT_Error_Code_FAILED_PRECONDITION
UNIMPLEMENTED, ABORTED = lib.PJRT_Error_Code_UNIMPLEMENTED, lib.PJRT_Error_Code_ABORTED
F32, U32, S8, TOKEN = (lib.PJRT_Buffer_Type_F32, lib.PJRT_Buffer_Type_U32, lib.PJRT_Buffer_Type_S8,
                       lib.PJRT_Buffer_Type_TOKEN)


def _deleted(api, buffer) -> bool:
    return bool(api.call("PJRT_Buffer_IsDeleted", buffer=buffer).is_deleted)


def _destroy(api, *buffers) -> None:
    for buffer in buffers:
        api.call("PJRT_Buffer_Destroy", buffer=buffer)


def _pending(api, client, dims=(6,)):
    """An alias buffer (contents not here yet) and the callback that fulfils it."""
    args = api.call("PJRT_Client_CreateAliasBuffer", client=client, memory=api.memory(client),
                    shape_dims=api.dims(dims), shape_num_dims=len(dims), shape_element_type=F32)
    return args.alias_buffer, args.fulfill_alias_buffer_cb


def _fulfill(api, client, callback, real) -> None:
    api.call("PJRT_Client_FulfillAliasBuffer", client=client, fulfill_alias_buffer_cb=callback, buffer=real,
             status_code=0)


# ------------------------------------------------------------------- Bitcast
def _bitcast(api, buffer, element_type, dims, **fields):
    return api.call("PJRT_Buffer_Bitcast", buffer=buffer, element_type=element_type, dims=api.dims(dims),
                    num_dims=len(dims), **fields).out_buffer


def test_bitcast_reads_the_same_bytes_as_another_type_and_donates_its_input(api, client):
    values = np.array([[1.5, -2.0, 3.25], [0.0, 1e9, -7.0]], np.float32)
    buffer = api.buffer(client, values)
    memory = api.call("PJRT_Buffer_Memory", buffer=buffer).memory
    words = _bitcast(api, buffer, U32, [6])
    assert _deleted(api, buffer)
    assert api.call("PJRT_Buffer_ElementType", buffer=words).type == U32
    assert api.call("PJRT_Buffer_Memory", buffer=words).memory == memory
    assert api.to_host(words, np.uint32, (6,)).tolist() == values.view(np.uint32).reshape(6).tolist()
    bytes_ = _bitcast(api, words, S8, [2, 12])
    np.testing.assert_array_equal(api.to_host(bytes_, np.int8, (2, 12)), values.view(np.int8).reshape(2, 12))
    _destroy(api, buffer, words, bytes_)


def test_bitcast_of_a_pending_buffer_is_ready_when_its_contents_are(api, client):
    alias, callback = _pending(api, client)
    words = _bitcast(api, alias, U32, [6])
    event = api.ready_event(words)
    assert not api.is_ready(event)
    real = api.buffer(client, np.arange(6, dtype=np.float32))
    _fulfill(api, client, callback, real)
    assert api.settle(event) is None
    assert api.to_host(words, np.uint32, (6,)).tolist() == np.arange(6, dtype=np.float32).view(np.uint32).tolist()
    _destroy(api, alias, words, real)


def test_bitcast_bad_inputs(api, client):
    buffer = api.buffer(client, np.zeros(6, np.float32))
    code, message = api.error("PJRT_Buffer_Bitcast", buffer=buffer, element_type=F32, dims=api.dims([7]), num_dims=1)
    assert code == INVALID and "F32[7] has 28 bytes" in message and "has 24" in message
    code, message = api.error("PJRT_Buffer_Bitcast", buffer=buffer, element_type=TOKEN, dims=api.dims([]), num_dims=0)
    assert code == INVALID and "tokens" in message
    code, message = api.error("PJRT_Buffer_Bitcast", buffer=buffer, element_type=99, dims=api.dims([6]), num_dims=1)
    assert code == INVALID and "unknown PJRT_Buffer_Type 99" in message
    code, message = api.error("PJRT_Buffer_Bitcast", buffer=buffer, element_type=F32, dims=api.dims([-6]), num_dims=1)
    assert code == INVALID and "negative" in message
    layout = api.tiled_layout([0, 1])
    code, message = api.error("PJRT_Buffer_Bitcast", buffer=buffer, element_type=F32, dims=api.dims([2, 3]),
                              num_dims=2, device_layout=layout)
    assert code == UNIMPLEMENTED and "row-major" in message
    assert not _deleted(api, buffer)                      # a refused bitcast donates nothing
    api.call("PJRT_Buffer_IncreaseExternalReferenceCount", buffer=buffer)
    code, message = api.error("PJRT_Buffer_Bitcast", buffer=buffer, element_type=U32, dims=api.dims([6]), num_dims=1)
    assert code == PRECONDITION and "external reference" in message
    api.call("PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer)
    short = ffi.offsetof("PJRT_Buffer_Bitcast_Args", "out_buffer")
    code, message = api.error("PJRT_Buffer_Bitcast", buffer=buffer, element_type=U32, dims=api.dims([6]), num_dims=1,
                              struct_size=short)
    assert code == INVALID and "too small to hold field 'out_buffer'" in message
    api.call("PJRT_Buffer_Delete", buffer=buffer)
    code, message = api.error("PJRT_Buffer_Bitcast", buffer=buffer, element_type=U32, dims=api.dims([6]), num_dims=1)
    assert code == PRECONDITION and "deleted or donated" in message
    _destroy(api, buffer)
    for bad in (ffi.NULL, buffer, ffi.cast("PJRT_Buffer*", client)):     # NULL, stale, another kind
        code, _ = api.error("PJRT_Buffer_Bitcast", buffer=bad, element_type=U32, dims=api.dims([6]), num_dims=1)
        assert code == INVALID


# ----------------------------------------------------- DonateWithControlDependency
def _signal(api, args, code=0, message=b""):
    """Call the handed-out dependency_ready_callback as a caller does."""
    text = ffi.new("char[]", message)
    api.keep.append(text)
    callback_args = ffi.new("PJRT_Buffer_DonateWithControlDependency_Callback_Args*", {
        "struct_size": ffi.sizeof("PJRT_Buffer_DonateWithControlDependency_Callback_Args"),
        "callback_data": args.callback_data, "error_code": code, "error_message": text,
        "error_message_size": len(message)})
    args.dependency_ready_callback(callback_args)


def test_donation_with_a_control_dependency_waits_for_it(api, client):
    buffer = api.buffer(client, np.array([1, 2, 3], np.float32))
    args = api.call("PJRT_Buffer_DonateWithControlDependency", buffer=buffer)
    assert _deleted(api, buffer)
    out = args.out_buffer
    event = api.ready_event(out)
    assert not api.is_ready(event)
    _signal(api, args)
    assert api.settle(event) is None
    assert api.to_host(out, np.float32, (3,)).tolist() == [1, 2, 3]
    _destroy(api, buffer, out)


def test_a_failed_dependency_fails_the_new_buffer(api, client):
    buffer = api.buffer(client, np.zeros(3, np.float32))
    args = api.call("PJRT_Buffer_DonateWithControlDependency", buffer=buffer)
    _signal(api, args, ABORTED, b"the collective was cancelled")
    assert api.settle(api.ready_event(args.out_buffer)) == (ABORTED, "the collective was cancelled")
    out = np.zeros(3, np.float32)
    code, _ = api.error("PJRT_Buffer_ToHostBuffer", src=args.out_buffer, dst=ffi.cast("void*", out.ctypes.data),
                        dst_size=12)
    assert code == ABORTED
    _destroy(api, buffer, args.out_buffer)


def test_contents_that_come_later_and_a_dependency_both_gate_the_new_buffer(api, client):
    alias, callback = _pending(api, client, (2,))
    args = api.call("PJRT_Buffer_DonateWithControlDependency", buffer=alias)
    event = api.ready_event(args.out_buffer)
    _signal(api, args)
    assert not api.is_ready(event)                        # the dependency came, the contents did not
    real = api.buffer(client, np.array([4, 5], np.float32))
    _fulfill(api, client, callback, real)
    assert api.settle(event) is None
    assert api.to_host(args.out_buffer, np.float32, (2,)).tolist() == [4, 5]
    _destroy(api, alias, real, args.out_buffer)


def test_dependency_callback_misuse_is_reported_not_followed(api, client, capfd):
    buffer = api.buffer(client, np.zeros(2, np.float32))
    args = api.call("PJRT_Buffer_DonateWithControlDependency", buffer=buffer)
    _signal(api, args, 99, b"what")                       # not a PJRT_Error_Code: the buffer fails with that
    code, message = api.settle(api.ready_event(args.out_buffer))
    assert code == INVALID and "99 is not a PJRT_Error_Code" in message
    _signal(api, args)                                    # a second call: its data is gone
    assert "callback_data" in capfd.readouterr().err
    args.dependency_ready_callback(ffi.NULL)              # no Args at all
    assert "Args pointer is NULL" in capfd.readouterr().err
    _destroy(api, buffer, args.out_buffer)


def test_donation_bad_inputs(api, client):
    buffer = api.buffer(client, np.zeros(2, np.float32))
    short = ffi.offsetof("PJRT_Buffer_DonateWithControlDependency_Args", "out_buffer")
    code, message = api.error("PJRT_Buffer_DonateWithControlDependency", buffer=buffer, struct_size=short)
    assert code == INVALID and "out_buffer" in message
    assert not _deleted(api, buffer)
    api.call("PJRT_Buffer_Delete", buffer=buffer)
    code, message = api.error("PJRT_Buffer_DonateWithControlDependency", buffer=buffer)
    assert code == PRECONDITION and "deleted or donated" in message
    _destroy(api, buffer)
    for bad in (ffi.NULL, buffer):
        code, _ = api.error("PJRT_Buffer_DonateWithControlDependency", buffer=bad)
        assert code == INVALID


# --------------------------------------------------------- CopyRawToHostFuture
def _destination(api, args, dst=None, code=0, message=b""):
    """Call the handed-out future_ready_callback as a caller does."""
    text = ffi.new("char[]", message)
    api.keep.append(text)
    callback_args = ffi.new("PJRT_Buffer_CopyRawToHostFuture_Callback_Args*", {
        "struct_size": ffi.sizeof("PJRT_Buffer_CopyRawToHostFuture_Callback_Args"),
        "callback_data": args.callback_data, "error_code": code, "error_message": text,
        "error_message_size": len(message),
        "dst": ffi.NULL if dst is None else ffi.cast("void*", dst.ctypes.data)})
    args.future_ready_callback(callback_args)


def test_raw_copy_waits_for_its_destination(api, client):
    values = np.arange(8, dtype=np.int32)
    buffer = api.buffer(client, values)
    args = api.call("PJRT_Buffer_CopyRawToHostFuture", buffer=buffer, offset=8, transfer_size=12)
    assert not api.is_ready(args.event)
    dst = np.zeros(3, np.int32)
    _destination(api, args, dst)
    assert api.settle(args.event) is None
    assert dst.tolist() == [2, 3, 4]
    _destroy(api, buffer)


def test_raw_copy_keeps_the_contents_of_a_buffer_deleted_before_the_destination_comes(api, client):
    buffer = api.buffer(client, np.array([7, 8], np.int64))
    args = api.call("PJRT_Buffer_CopyRawToHostFuture", buffer=buffer, offset=0, transfer_size=16)
    api.call("PJRT_Buffer_Destroy", buffer=buffer)
    dst = np.zeros(2, np.int64)
    _destination(api, args, dst)
    assert api.settle(args.event) is None and dst.tolist() == [7, 8]


def test_raw_copy_of_contents_that_come_after_the_destination(api, client):
    alias, callback = _pending(api, client, (4,))
    args = api.call("PJRT_Buffer_CopyRawToHostFuture", buffer=alias, offset=4, transfer_size=8)
    dst = np.zeros(2, np.float32)
    _destination(api, args, dst)
    assert not api.is_ready(args.event)
    real = api.buffer(client, np.array([1, 2, 3, 4], np.float32))
    _fulfill(api, client, callback, real)
    assert api.settle(args.event) is None and dst.tolist() == [2, 3]
    _destroy(api, alias, real)


def test_raw_copy_errors_reach_its_event(api, client, capfd):
    buffer = api.buffer(client, np.zeros(4, np.int32))
    args = api.call("PJRT_Buffer_CopyRawToHostFuture", buffer=buffer, offset=0, transfer_size=16)
    _destination(api, args, code=ABORTED, message=b"no room on the host")
    assert api.settle(args.event) == (ABORTED, "no room on the host")
    args = api.call("PJRT_Buffer_CopyRawToHostFuture", buffer=buffer, offset=0, transfer_size=16)
    _destination(api, args)                                 # OK, but dst is NULL
    code, message = api.settle(args.event)
    assert code == INVALID and "NULL" in message
    _destination(api, args, np.zeros(4, np.int32))          # a second call: reported, not followed
    assert "callback_data" in capfd.readouterr().err
    failed, callback = _pending(api, client, (4,))
    args = api.call("PJRT_Buffer_CopyRawToHostFuture", buffer=failed, offset=0, transfer_size=4)
    _destination(api, args, np.zeros(1, np.float32))
    assert not api.is_ready(args.event)
    with pytest.raises(PjrtCallError):
        api.call("PJRT_Client_FulfillAliasBuffer", client=client, fulfill_alias_buffer_cb=callback,
                 status_code=ABORTED)
    assert api.settle(args.event) == (ABORTED, "")          # the buffer's own error
    _destroy(api, buffer, failed)


def test_raw_copy_bad_inputs(api, client):
    buffer = api.buffer(client, np.zeros(4, np.int32))
    for offset, size in ((-1, 4), (0, 17), (12, 8), (0, -1)):
        code, message = api.error("PJRT_Buffer_CopyRawToHostFuture", buffer=buffer, offset=offset, transfer_size=size)
        assert code == INVALID and "outside the buffer's 16 bytes" in message
    short = ffi.offsetof("PJRT_Buffer_CopyRawToHostFuture_Args", "future_ready_callback")
    code, message = api.error("PJRT_Buffer_CopyRawToHostFuture", buffer=buffer, offset=0, transfer_size=4,
                              struct_size=short)
    assert code == INVALID and "future_ready_callback" in message
    api.call("PJRT_Buffer_Delete", buffer=buffer)
    code, message = api.error("PJRT_Buffer_CopyRawToHostFuture", buffer=buffer, offset=0, transfer_size=4)
    assert code == PRECONDITION and "deleted or donated" in message
    _destroy(api, buffer)
    for bad in (ffi.NULL, buffer):
        code, _ = api.error("PJRT_Buffer_CopyRawToHostFuture", buffer=bad, offset=0, transfer_size=4)
        assert code == INVALID
