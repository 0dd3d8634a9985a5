"""Client, device and topology entry points driven through the plugin's PJRT_Api table:
PJRT_Client_DmaMap/DmaUnmap, PJRT_Device_PoisonExecution, PJRT_Device_CreateAsyncTrackingEvent
with PJRT_AsyncTrackingEvent_Destroy, PJRT_TopologyDescription_GetMemorySpaceKindIds and
PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace (checked byte for byte against the
ShapeProto XLA itself writes, through jaxlib). Bad inputs give a PJRT error."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.capi_calls import ffi, lib
from pjrt_ref.capi import cdata
from pjrt_ref.capi import handles
from pjrt_ref.model.device import AsyncTrackingEvent
from pjrt_ref.model.dtypes import NUMPY_DTYPES, BufferType

INVALID, ALREADY_EXISTS = lib.PJRT_Error_Code_INVALID_ARGUMENT, lib.PJRT_Error_Code_ALREADY_EXISTS
UNIMPLEMENTED = lib.PJRT_Error_Code_UNIMPLEMENTED


# ------------------------------------------------------------------ DMA maps
def _address(array: np.ndarray, offset: int = 0):
    return ffi.cast("void*", array.ctypes.data + offset)


def test_dma_map_and_unmap_pair_up(api, client):
    staging = np.zeros(4096, np.uint8)
    api.call("PJRT_Client_DmaMap", client=client, data=_address(staging), size=4096)
    buffer = api.buffer(client, staging[:16].view(np.float32))     # transfers from mapped memory work as ever
    code, message = api.error("PJRT_Client_DmaMap", client=client, data=_address(staging, 100), size=10)
    assert code == ALREADY_EXISTS and "overlaps" in message
    api.call("PJRT_Client_DmaUnmap", client=client, data=_address(staging))
    code, message = api.error("PJRT_Client_DmaUnmap", client=client, data=_address(staging))
    assert code == INVALID and "never mapped, or already unmapped" in message
    api.call("PJRT_Client_DmaMap", client=client, data=_address(staging, 100), size=10)   # free again
    api.call("PJRT_Client_DmaUnmap", client=client, data=_address(staging, 100))
    api.call("PJRT_Buffer_Destroy", buffer=buffer)


def test_dma_bad_inputs(api, client):
    staging = np.zeros(64, np.uint8)
    code, message = api.error("PJRT_Client_DmaUnmap", client=client, data=_address(staging))
    assert code == INVALID and "not the start of memory mapped" in message
    code, message = api.error("PJRT_Client_DmaMap", client=client, data=ffi.NULL, size=64)
    assert code == INVALID and "NULL" in message
    code, message = api.error("PJRT_Client_DmaMap", client=client, data=_address(staging), size=0)
    assert code == INVALID and "size 0" in message
    for name in ("PJRT_Client_DmaMap", "PJRT_Client_DmaUnmap"):
        for bad in (ffi.NULL, ffi.cast("PJRT_Client*", api.device(client))):
            code, _ = api.error(name, client=bad, data=_address(staging), size=64) if name.endswith("Map") else \
                api.error(name, client=bad, data=_address(staging))
            assert code == INVALID


def test_each_client_has_its_own_mappings(api, client):
    staging = np.zeros(64, np.uint8)
    other = api.client()
    api.call("PJRT_Client_DmaMap", client=client, data=_address(staging), size=64)
    code, _ = api.error("PJRT_Client_DmaUnmap", client=other, data=_address(staging))
    assert code == INVALID
    api.call("PJRT_Client_DmaUnmap", client=client, data=_address(staging))
    api.call("PJRT_Client_Destroy", client=other)


# ----------------------------------------------------------- PoisonExecution
def _poison(api, device, code=lib.PJRT_Error_Code_ABORTED, message=b"peer lost", **fields):
    text = ffi.new("char[]", message)
    api.keep.append(text)
    return dict(device=device, launch_id=7, error_code=code, error_message=text, error_message_size=len(message),
                poisoned=True, **fields)


def test_there_is_never_an_execution_left_to_poison(api, client):
    args = api.call("PJRT_Device_PoisonExecution", **_poison(api, api.device(client)))
    assert args.poisoned is False
    older = ffi.offsetof("PJRT_Device_PoisonExecution_Args", "poisoned") + 1   # an older header's: up to `poisoned`
    args = api.call("PJRT_Device_PoisonExecution", **_poison(api, api.device(client), struct_size=older))
    assert args.poisoned is False


def test_poison_bad_inputs(api, client):
    device = api.device(client)
    code, message = api.error("PJRT_Device_PoisonExecution", **_poison(api, device, code=0))
    assert code == INVALID and "needs an error" in message
    code, message = api.error("PJRT_Device_PoisonExecution", **_poison(api, device, code=42))
    assert code == INVALID and "42 is not a PJRT_Error_Code" in message
    for bad in (ffi.NULL, ffi.cast("PJRT_Device*", client)):
        code, _ = api.error("PJRT_Device_PoisonExecution", **_poison(api, bad))
        assert code == INVALID
    payload = ffi.new("PJRT_NamedValue[1]")
    key = ffi.new("char[]", b"retries")
    api.keep += [payload, key]
    payload[0].struct_size, payload[0].name, payload[0].name_size = ffi.sizeof("PJRT_NamedValue"), key, 7
    payload[0].type, payload[0].bool_value, payload[0].value_size = lib.PJRT_NamedValue_kBool, True, 1
    code, message = api.error("PJRT_Device_PoisonExecution", **_poison(api, device, payload=payload, num_payload=1))
    assert code == INVALID and "payload 'retries' is not a string" in message


# ------------------------------------------------------- async tracking events
def test_a_tracking_event_is_a_handle_until_destroyed(api, client):
    before = handles.count(AsyncTrackingEvent)
    description = ffi.new("char[]", b"host callback")
    event = api.call("PJRT_Device_CreateAsyncTrackingEvent", device=api.device(client), description=description,
                     description_size=13).event
    assert event != ffi.NULL
    tracked = handles.get(event, AsyncTrackingEvent)
    assert tracked.description == "host callback" and tracked.device.id == 0
    assert handles.count(AsyncTrackingEvent) == before + 1
    api.call("PJRT_AsyncTrackingEvent_Destroy", event=event)
    assert handles.count(AsyncTrackingEvent) == before
    code, message = api.error("PJRT_AsyncTrackingEvent_Destroy", event=event)       # double destroy
    assert code == INVALID and "not a live PJRT_AsyncTrackingEvent" in message


def test_any_description_makes_a_tracking_event(api, client):
    for text, size in ((ffi.NULL, 0), (ffi.new("char[]", b"\xff\xfe not utf-8"), 12)):
        event = api.call("PJRT_Device_CreateAsyncTrackingEvent", device=api.device(client), description=text,
                         description_size=size).event
        api.call("PJRT_AsyncTrackingEvent_Destroy", event=event)


def test_tracking_event_bad_inputs(api, client):
    for bad in (ffi.NULL, ffi.cast("PJRT_Device*", client)):
        code, _ = api.error("PJRT_Device_CreateAsyncTrackingEvent", device=bad)
        assert code == INVALID
    code, message = api.error("PJRT_Device_CreateAsyncTrackingEvent", device=api.device(client),
                              description=ffi.NULL, description_size=5)
    assert code == INVALID and "NULL" in message
    buffer = api.buffer(client, np.zeros(1, np.float32))
    for bad in (ffi.NULL, ffi.cast("PJRT_AsyncTrackingEvent*", buffer), ffi.cast("PJRT_AsyncTrackingEvent*", 0x1234)):
        code, _ = api.error("PJRT_AsyncTrackingEvent_Destroy", event=bad)
        assert code == INVALID
    api.call("PJRT_Buffer_Destroy", buffer=buffer)


# ----------------------------------------------------------- memory kinds, shapes
def _topology(api, client):
    return api.call("PJRT_Client_TopologyDescription", client=client).topology


def test_the_topology_lists_the_kind_id_of_every_memory(api, client):
    args = api.call("PJRT_TopologyDescription_GetMemorySpaceKindIds", topology=_topology(api, client))
    ids = [args.memory_space_kind_ids[i] for i in range(args.num_memory_space_kind_ids)]
    assert ids == [0, 1, 2]         # device (the default), pinned_host, unpinned_host
    memory = api.memory(client)
    assert api.call("PJRT_Memory_Kind_Id", memory=memory).kind_id == ids[0]
    kind = api.call("PJRT_Memory_Kind", memory=memory)
    assert ffi.string(kind.kind, kind.kind_size) == b"device"
    created = api.call("PJRT_TopologyDescription_Create").topology       # without a client too
    args = api.call("PJRT_TopologyDescription_GetMemorySpaceKindIds", topology=created)
    assert [args.memory_space_kind_ids[i] for i in range(args.num_memory_space_kind_ids)] == [0, 1, 2]
    api.call("PJRT_TopologyDescription_Destroy", topology=created)


def _canonical(api, topology, element_type, dims, kind_id=0, **fields) -> bytes:
    args = api.call("PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace", topology=topology,
                    memory_space_kind_id=kind_id, dims=api.dims(dims), num_dims=len(dims),
                    element_type=int(element_type), **fields)
    proto = bytes(ffi.buffer(args.serialized_shape, args.serialized_shape_size))
    args.serialized_shape_deleter(args.serialized_shape)
    return proto


def _xla_shape_proto(dtype: np.dtype, dims) -> bytes | None:
    from jax._src.lib import xla_client
    try:
        return xla_client.Shape.array_shape(dtype, tuple(dims)).to_serialized_proto()
    except Exception:                 # a type this jaxlib cannot make a Shape of
        return None


@pytest.mark.parametrize("dims", [(), (5,), (10, 20), (2, 0, 3)])
def test_canonical_shapes_are_the_shape_protos_xla_writes(api, client, dims):
    topology = _topology(api, client)
    compared = 0
    for element_type, dtype in NUMPY_DTYPES.items():
        expected = _xla_shape_proto(dtype, dims)
        if expected is None:
            continue
        assert _canonical(api, topology, element_type, dims) == expected, element_type.name
        compared += 1
    assert compared >= 25


def test_a_token_and_the_row_major_layout_spelled_out(api, client):
    from jax._src.lib import xla_client
    topology = _topology(api, client)
    assert _canonical(api, topology, BufferType.TOKEN, ()) == xla_client.Shape.token_shape().to_serialized_proto()
    layout = api.tiled_layout([1, 0])
    assert _canonical(api, topology, BufferType.F32, (3, 4), layout=layout) == \
        _xla_shape_proto(np.dtype(np.float32), (3, 4))


def test_the_shape_deleter_frees_once(api, client, capfd):
    before = len(cdata._HANDED_BYTES)
    args = api.call("PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace", topology=_topology(api, client),
                    memory_space_kind_id=0, dims=api.dims([2]), num_dims=1, element_type=BufferType.F32)
    assert len(cdata._HANDED_BYTES) == before + 1
    args.serialized_shape_deleter(args.serialized_shape)
    assert len(cdata._HANDED_BYTES) == before
    args.serialized_shape_deleter(args.serialized_shape)          # twice: reported, not followed
    assert "already freed" in capfd.readouterr().err


def test_canonical_shape_bad_inputs(api, client):
    topology = _topology(api, client)
    fields = dict(topology=topology, memory_space_kind_id=0, dims=api.dims([2, 3]), num_dims=2,
                  element_type=BufferType.F32)
    name = "PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace"
    code, message = api.error(name, **{**fields, "memory_space_kind_id": 12345})
    assert code == INVALID and "kind id 12345" in message and "[0, 1, 2]" in message
    code, message = api.error(name, **{**fields, "element_type": 99})
    assert code == INVALID and "unknown PJRT_Buffer_Type 99" in message
    code, message = api.error(name, **{**fields, "element_type": 0})
    assert code == INVALID and "INVALID" in message
    code, message = api.error(name, **{**fields, "dims": api.dims([2, -3])})
    assert code == INVALID and "negative" in message
    code, message = api.error(name, **{**fields, "dims": ffi.NULL})
    assert code == INVALID and "NULL" in message
    code, message = api.error(name, **{**fields, "element_type": BufferType.TOKEN})
    assert code == INVALID and "token has no dimensions" in message
    layout = api.tiled_layout([0, 1])
    code, message = api.error(name, **fields, layout=layout)
    assert code == UNIMPLEMENTED and "{0,1}" in message
    layout.tiled.minor_to_major[0] = layout.tiled.minor_to_major[1] = 1
    code, message = api.error(name, **fields, layout=layout)
    assert code == INVALID and "not a permutation" in message
    layout.type = lib.PJRT_Buffer_MemoryLayout_Type_Strides
    code, message = api.error(name, **fields, layout=layout)
    assert code == INVALID and "tiled" in message
    for bad in (ffi.NULL, ffi.cast("PJRT_TopologyDescription*", client)):
        for entry in (name, "PJRT_TopologyDescription_GetMemorySpaceKindIds"):
            code, _ = api.error(entry, topology=bad)
            assert code == INVALID
