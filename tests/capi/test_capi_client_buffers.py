"""Buffers made from something other than host data, driven through the plugin's PJRT_Api table:
PJRT_Client_CreateErrorBuffer, PJRT_Client_CreateViewOfDeviceBuffer, PJRT_Client_CreateAliasBuffer
and PJRT_Client_FulfillAliasBuffer (pjrt_ref/capi/client_buffers.py). Bad inputs give a PJRT error."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from tests.support.capi_calls import PjrtCallError, ffi, lib

INVALID, NOT_FOUND = lib.PJRT_Error_Code_INVALID_ARGUMENT, lib.PJRT_Error_Code_NOT_FOUND
PRECONDITION, UNIMPLEMENTED = lib.PJRT_Error_Code_FAILED_PRECONDITION, lib.PJRT_Error_Code_UNIMPLEMENTED
F32, S32 = lib.PJRT_Buffer_Type_F32, lib.PJRT_Buffer_Type_S32
ADD = """func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %x, %y : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


@pytest.fixture(scope="module")
def add(api, client):
    return api.compile(client, ADD)


def _destroy(api, *buffers) -> None:
    for buffer in buffers:
        api.call("PJRT_Buffer_Destroy", buffer=buffer)


def _deleted(api, buffer) -> bool:
    return bool(api.call("PJRT_Buffer_IsDeleted", buffer=buffer).is_deleted)


# ------------------------------------------------------------- error buffers
def _error_buffer(api, client, code=NOT_FOUND, message=b"the shard is gone", dims=(4,), **fields):
    text = ffi.new("char[]", message)
    api.keep.append(text)
    fields.setdefault("memory", api.memory(client))
    return api.call("PJRT_Client_CreateErrorBuffer", client=client, error_code=code, error_message=text,
                    error_message_size=len(message), shape_dims=api.dims(dims), shape_num_dims=len(dims),
                    shape_element_type=F32, **fields).buffer


def test_an_error_buffer_fails_its_ready_event_and_every_read(api, client, add):
    buffer = _error_buffer(api, client)
    assert api.call("PJRT_Buffer_ElementType", buffer=buffer).type == F32
    assert api.call("PJRT_Buffer_OnDeviceSizeInBytes", buffer=buffer).on_device_size_in_bytes == 16
    assert not _deleted(api, buffer)
    event = api.ready_event(buffer)
    assert api.is_ready(event)
    assert api.settle(event) == (NOT_FOUND, "the shard is gone")
    out = np.zeros(4, np.float32)
    assert api.error("PJRT_Buffer_ToHostBuffer", src=buffer, dst=ffi.cast("void*", out.ctypes.data),
                     dst_size=16) == (NOT_FOUND, "the shard is gone")
    assert api.error("PJRT_Buffer_CopyRawToHost", buffer=buffer, dst=ffi.cast("void*", out.ctypes.data),
                     offset=0, transfer_size=4) == (NOT_FOUND, "the shard is gone")
    fine = api.buffer(client, np.ones(4, np.float32))
    with pytest.raises(PjrtCallError) as caught:
        api.execute(add, [fine, buffer], 1)
    assert caught.value.code == NOT_FOUND and "the shard is gone" in caught.value.message
    _destroy(api, buffer, fine)


def test_error_buffer_string_payloads_are_accepted(api, client):
    payload = ffi.new("PJRT_NamedValue[1]")
    key, value = ffi.new("char[]", b"where"), ffi.new("char[]", b"host 3")
    api.keep += [payload, key, value]
    payload[0].struct_size = ffi.sizeof("PJRT_NamedValue")
    payload[0].name, payload[0].name_size = key, 5
    payload[0].type, payload[0].string_value, payload[0].value_size = lib.PJRT_NamedValue_kString, value, 6
    buffer = _error_buffer(api, client, payload=payload, num_payload=1)
    _destroy(api, buffer)
    payload[0].type, payload[0].int64_value, payload[0].value_size = lib.PJRT_NamedValue_kInt64, 3, 1
    with pytest.raises(PjrtCallError) as caught:
        _error_buffer(api, client, payload=payload, num_payload=1)
    assert caught.value.code == INVALID and "not a string" in caught.value.message


def test_error_buffer_bad_inputs(api, client):
    other = api.client()
    cases = {
        "OK code": dict(code=0),
        "unknown code": dict(code=99),
        "NULL memory": dict(memory=ffi.NULL),
        "another client's memory": dict(memory=api.memory(other)),
        "negative dim": dict(dims=(-1,)),
    }
    needles = {"OK code": "needs an error", "unknown code": "not a PJRT_Error_Code",
               "NULL memory": "NULL", "another client's memory": "not one of this client's",
               "negative dim": "negative"}
    for case, fields in cases.items():
        with pytest.raises(PjrtCallError) as caught:
            _error_buffer(api, client, **fields)
        assert caught.value.code == INVALID and needles[case] in caught.value.message, (case, caught.value)
    code, message = api.error("PJRT_Client_CreateErrorBuffer", client=ffi.NULL, error_code=NOT_FOUND)
    assert code == INVALID and "PJRT_Client handle is NULL" in message
    api.call("PJRT_Client_Destroy", client=other)


def test_an_older_caller_without_payload_fields_still_makes_error_buffers(api, client):
    size = ffi.offsetof("PJRT_Client_CreateErrorBuffer_Args", "payload")
    buffer = _error_buffer(api, client, struct_size=size)
    assert api.settle(api.ready_event(buffer)) == (NOT_FOUND, "the shard is gone")
    _destroy(api, buffer)


# ------------------------------------------------------ views of caller memory
class OnDelete:
    """A C on_delete_callback that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.function = ffi.callback("void(void*, void*)", self._called)

    def _called(self, pointer, user_arg) -> None:
        self.calls.append((int(ffi.cast("uintptr_t", pointer)), int(ffi.cast("uintptr_t", user_arg))))


def _view(api, client, array: np.ndarray, on_delete: OnDelete | None = None, **fields):
    fields.setdefault("memory", api.memory(client))
    return api.call("PJRT_Client_CreateViewOfDeviceBuffer", client=client,
                    device_buffer_ptr=ffi.cast("void*", array.ctypes.data), dims=api.dims(array.shape),
                    num_dims=array.ndim, element_type=F32,
                    on_delete_callback=on_delete.function if on_delete else ffi.NULL,
                    on_delete_callback_arg=ffi.cast("void*", 0xC0FFEE), **fields).buffer


def test_a_view_reads_the_caller_memory_in_place_and_reports_when_done(api, client, add):
    memory = np.arange(12, dtype=np.float32).reshape(3, 4)
    on_delete = OnDelete()
    view = _view(api, client, memory, on_delete)
    assert api.call("PJRT_Buffer_UnsafePointer", buffer=view).buffer_pointer == memory.ctypes.data
    np.testing.assert_array_equal(api.to_host(view, np.float32, (3, 4)), memory)
    memory[0, 0] = 42.0                            # the caller's memory, not a copy
    assert api.to_host(view, np.float32, (3, 4))[0, 0] == 42.0
    api.call("PJRT_Buffer_Delete", buffer=view)
    gc.collect()
    assert on_delete.calls == [(memory.ctypes.data, 0xC0FFEE)]
    _destroy(api, view)
    gc.collect()
    assert len(on_delete.calls) == 1               # once


def test_a_view_is_an_execution_argument_and_outlives_its_handle_while_read(api, client, add):
    memory = np.array([1, 2, 3, 4], np.float32)
    on_delete = OnDelete()
    view = _view(api, client, memory, on_delete)
    [out] = api.execute(add, [view, view], 1)
    assert api.to_host(out, np.float32, (4,)).tolist() == [2, 4, 6, 8]
    api.call("PJRT_Buffer_IncreaseExternalReferenceCount", buffer=view)
    api.call("PJRT_Buffer_Delete", buffer=view)
    gc.collect()
    assert on_delete.calls == []                    # an external reference still reads it
    api.call("PJRT_Buffer_DecreaseExternalReferenceCount", buffer=view)
    gc.collect()
    assert len(on_delete.calls) == 1
    _destroy(api, view, out)


def test_a_view_on_a_device_or_from_an_older_caller(api, client):
    memory = np.ones(4, np.float32)
    view = _view(api, client, memory, memory=ffi.NULL, device=api.device(client))
    assert api.call("PJRT_Buffer_Memory", buffer=view).memory == api.memory(client)
    older = ffi.offsetof("PJRT_Client_CreateViewOfDeviceBuffer_Args", "memory")
    view2 = _view(api, client, memory, memory=ffi.NULL, device=api.device(client), struct_size=older)
    _destroy(api, view, view2)


def test_view_bad_inputs(api, client):
    aligned = np.zeros(8, np.float32)
    assert aligned.ctypes.data % 16 == 0
    code, message = api.error("PJRT_Client_CreateViewOfDeviceBuffer", client=client,
                              device_buffer_ptr=ffi.cast("void*", aligned.ctypes.data + 4),
                              dims=api.dims([2]), num_dims=1, element_type=F32, memory=api.memory(client))
    assert code == INVALID and "aligned to 16 bytes" in message
    code, message = api.error("PJRT_Client_CreateViewOfDeviceBuffer", client=client, device_buffer_ptr=ffi.NULL,
                              dims=api.dims([2]), num_dims=1, element_type=F32, memory=api.memory(client))
    assert code == INVALID and "NULL" in message
    with pytest.raises(PjrtCallError) as caught:
        _view(api, client, aligned, memory=ffi.NULL)
    assert caught.value.code == INVALID and "needs a device or a memory" in caught.value.message
    with pytest.raises(PjrtCallError) as caught:
        _view(api, client, aligned, stream=7)
    assert caught.value.code == UNIMPLEMENTED and "stream" in caught.value.message
    for bad_client in (ffi.NULL, ffi.cast("PJRT_Client*", api.memory(client))):
        code, _ = api.error("PJRT_Client_CreateViewOfDeviceBuffer", client=bad_client)
        assert code == INVALID
    column_major = api.tiled_layout([0, 1])
    with pytest.raises(PjrtCallError) as caught:
        _view(api, client, aligned.reshape(2, 4), layout=column_major)
    assert caught.value.code == UNIMPLEMENTED and "row-major" in caught.value.message


# ------------------------------------------------------------- alias buffers
def _alias(api, client, dims=(4,), element_type=F32):
    args = api.call("PJRT_Client_CreateAliasBuffer", client=client, memory=api.memory(client),
                    shape_dims=api.dims(dims), shape_num_dims=len(dims), shape_element_type=element_type)
    return args.alias_buffer, args.fulfill_alias_buffer_cb


def _fulfill(api, client, callback, buffer=ffi.NULL, code=0, message=b""):
    text = ffi.new("char[]", message)
    api.keep.append(text)
    return dict(client=client, fulfill_alias_buffer_cb=callback, buffer=buffer, status_code=code,
                error_message=text, error_message_size=len(message))


def test_an_alias_takes_over_the_buffer_that_fulfils_it(api, client):
    alias, callback = _alias(api, client)
    event = api.ready_event(alias)
    assert not api.is_ready(event)
    real = api.buffer(client, np.array([5, 6, 7, 8], np.float32))
    api.call("PJRT_Client_FulfillAliasBuffer", **_fulfill(api, client, callback, real))
    assert api.settle(event) is None
    assert _deleted(api, real)                       # donated to the alias
    assert api.to_host(alias, np.float32, (4,)).tolist() == [5, 6, 7, 8]
    code, message = api.error("PJRT_Client_FulfillAliasBuffer", **_fulfill(api, client, callback, alias))
    assert code == INVALID and "not a live PJRT_FulfillAliasBufferCallback" in message   # consumed
    _destroy(api, alias, real)


def test_an_execution_on_an_alias_waits_for_its_contents(api, client, add):
    alias, callback = _alias(api, client)
    ones = api.buffer(client, np.ones(4, np.float32))
    results: list = []
    worker = threading.Thread(target=lambda: results.append(api.execute(add, [alias, ones], 1)))
    worker.start()
    worker.join(0.3)
    assert worker.is_alive()                          # waiting for the alias's contents
    real = api.buffer(client, np.array([1, 2, 3, 4], np.float32))
    api.call("PJRT_Client_FulfillAliasBuffer", **_fulfill(api, client, callback, real))
    worker.join(30)
    [[out]] = results
    assert api.to_host(out, np.float32, (4,)).tolist() == [2, 3, 4, 5]
    _destroy(api, alias, ones, real, out)


def test_an_alias_fulfilled_with_an_error_fails_with_it(api, client):
    alias, callback = _alias(api, client)
    code, message = api.error("PJRT_Client_FulfillAliasBuffer",
                              **_fulfill(api, client, callback, code=PRECONDITION, message=b"producer died"))
    assert (code, message) == (PRECONDITION, "producer died")      # as XLA: the call answers that status
    assert api.settle(api.ready_event(alias)) == (PRECONDITION, "producer died")
    _destroy(api, alias)


@pytest.mark.parametrize("case", ["NULL buffer", "shape mismatch", "type mismatch", "deleted buffer",
                                  "viewed buffer", "unknown code"])
def test_a_failed_fulfilment_fails_the_alias_too(api, client, case):
    alias, callback = _alias(api, client)
    real, code = ffi.NULL, 0
    if case == "shape mismatch":
        real = api.buffer(client, np.zeros(5, np.float32))
    elif case == "type mismatch":
        real = api.buffer(client, np.zeros(4, np.int32))
    elif case in ("deleted buffer", "viewed buffer"):
        real = api.buffer(client, np.zeros(4, np.float32))
        api.call("PJRT_Buffer_Delete" if case == "deleted buffer" else "PJRT_Buffer_IncreaseExternalReferenceCount",
                 buffer=real)
    elif case == "unknown code":
        code = 77
    got, message = api.error("PJRT_Client_FulfillAliasBuffer", **_fulfill(api, client, callback, real, code))
    expected = {"NULL buffer": (INVALID, "buffer is NULL"), "shape mismatch": (INVALID, "F32[4], the buffer that fulfils it F32[5]"),
                "type mismatch": (INVALID, "S32[4]"), "deleted buffer": (PRECONDITION, "deleted or donated"),
                "viewed buffer": (PRECONDITION, "external reference"),
                "unknown code": (INVALID, "not a PJRT_Error_Code")}[case]
    assert got == expected[0] and expected[1] in message, message
    assert api.settle(api.ready_event(alias)) == (got, message)    # nobody waits for ever
    _destroy(api, alias)
    if real != ffi.NULL:
        if case == "viewed buffer":
            api.call("PJRT_Buffer_DecreaseExternalReferenceCount", buffer=real)
        _destroy(api, real)


def test_alias_bad_handles(api, client):
    code, message = api.error("PJRT_Client_FulfillAliasBuffer", **_fulfill(api, client, ffi.NULL))
    assert code == INVALID and "fulfill_alias_buffer_cb is NULL" in message
    alias, callback = _alias(api, client)
    code, message = api.error("PJRT_Client_FulfillAliasBuffer",
                              **_fulfill(api, client, ffi.cast("PJRT_FulfillAliasBufferCallback*", alias)))
    assert code == INVALID and "PJRT_FulfillAliasBufferCallback" in message      # a buffer is not one
    code, _ = api.error("PJRT_Client_FulfillAliasBuffer", **_fulfill(api, ffi.NULL, callback))
    assert code == INVALID
    for fields in (dict(client=ffi.NULL), dict(memory=ffi.NULL),
                   dict(struct_size=ffi.offsetof("PJRT_Client_CreateAliasBuffer_Args", "fulfill_alias_buffer_cb"))):
        full = dict(client=client, memory=api.memory(client), shape_dims=api.dims([4]), shape_num_dims=1,
                    shape_element_type=F32)
        full.update(fields)
        code, _ = api.error("PJRT_Client_CreateAliasBuffer", **full)
        assert code == INVALID, fields
    real = api.buffer(client, np.zeros(4, np.float32))
    api.call("PJRT_Client_FulfillAliasBuffer", **_fulfill(api, client, callback, real))
    _destroy(api, alias, real)
