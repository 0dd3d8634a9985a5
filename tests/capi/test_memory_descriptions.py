"""The PJRT MemoryDescriptions extension (capi_shim/pjrt_memory_descriptions.h):
the kinds of memory a device description offers without a client, and
JAX's compile-only devices built on it."""
from __future__ import annotations

from tests.support.capi_calls import PjrtCallError, extension, ffi, lib
from tests.support.jax_support import run_jax

INVALID = lib.PJRT_Error_Code_INVALID_ARGUMENT


def _extension():
    return extension(lib.PJRT_Extension_Type_MemoryDescriptions, "PJRT_MemoryDescriptions_Extension")


def _call(api, name: str, **fields):
    args = ffi.new(f"{name}_Args*")
    args.struct_size = ffi.sizeof(f"{name}_Args")
    for field, value in fields.items():
        setattr(args, field, value)
    error = getattr(_extension(), name)(args)
    if error != ffi.NULL:
        raise PjrtCallError(name, *api.take_error(error))
    return args


def _descriptions(api, description) -> list[tuple[bytes, int]]:
    args = _call(api, "PJRT_DeviceDescription_MemoryDescriptions", device_description=description)
    assert args.default_memory_index == 0
    kinds = []
    for i in range(args.num_memory_descriptions):
        kind = _call(api, "PJRT_MemoryDescription_Kind", memory_description=args.memory_descriptions[i])
        kinds.append((ffi.string(kind.kind, kind.kind_size), kind.kind_id))
    return kinds


def test_a_topology_s_device_offers_the_memory_kinds_a_client_s_device_has(api, client):
    topology = api.call("PJRT_TopologyDescription_Create").topology
    descriptions = api.call("PJRT_TopologyDescription_GetDeviceDescriptions", topology=topology)
    offered = _descriptions(api, descriptions.descriptions[0])
    assert [kind for kind, _ in offered] == [b"device", b"pinned_host", b"unpinned_host"]
    device = api.device(client)
    memories = api.call("PJRT_Device_AddressableMemories", device=device)
    present = []
    for i in range(memories.num_memories):
        memory = memories.memories[i]
        kind = api.call("PJRT_Memory_Kind", memory=memory)
        present.append((ffi.string(kind.kind, kind.kind_size),
                        api.call("PJRT_Memory_Kind_Id", memory=memory).kind_id))
    assert offered == present
    api.call("PJRT_TopologyDescription_Destroy", topology=topology)


def test_a_foreign_description_handle_is_an_error_not_a_crash(api):
    bogus = ffi.cast("PJRT_MemoryDescription*", 0x1234)
    try:
        _call(api, "PJRT_MemoryDescription_Kind", memory_description=bogus)
    except PjrtCallError as error:
        assert error.code == INVALID and "PJRT_MemoryDescription" in error.message
    else:
        raise AssertionError("a bogus handle was accepted")


def test_jax_s_compile_only_devices_know_their_memories():
    proc = run_jax("""
        from jax.experimental import topologies
        topology = topologies.get_topology_desc(platform="pjrt_ref", topology_name="pjrt_ref")
        device = topology.devices[0]
        print(device.default_memory().kind, [m.kind for m in device.addressable_memories()])
    """, JAX_PLATFORMS="pjrt_ref,cpu")
    assert proc.stdout.strip().splitlines()[-1] == "device ['device', 'pinned_host', 'unpinned_host']"
