"""PJRT_Device_* and PJRT_DeviceDescription_* entry points (pjrt_c_api.h "Device")."""
from __future__ import annotations

from ..model import handles
from ..model.device import Device, DeviceDescription
from ._boundary import entry_point, register_text_queries
from .cdata import Args, Holder, owned_array, owned_named_values, set_deleter


def _description(args: Args) -> DeviceDescription:
    return handles.get(args.device_description, DeviceDescription, "PJRT_DeviceDescription")


def _device(args: Args) -> Device:
    return handles.get(args.device, Device, "PJRT_Device")


@entry_point("PJRT_DeviceDescription_Id")
def device_description_id(args: Args) -> None:
    """PJRT_DeviceDescription_Id: the global device id."""
    args.id = _description(args).id


@entry_point("PJRT_DeviceDescription_ProcessIndex")
def device_description_process_index(args: Args) -> None:
    """PJRT_DeviceDescription_ProcessIndex."""
    args.process_index = _description(args).process_index


@entry_point("PJRT_DeviceDescription_Attributes")
def device_description_attributes(args: Args) -> None:
    """PJRT_DeviceDescription_Attributes: `coords` (int64 list), the device's place on
    the 1-D line of virtual devices. (JAX 0.10 reads coords only to lay out TPU meshes.)"""
    description = _description(args)
    array, count = owned_named_values(description, "attributes", description.attributes)
    args.attributes, args.num_attributes = array, count


# Kind, DebugString and ToString differ only in the field names they fill.
_TEXT_QUERIES = {
    "PJRT_DeviceDescription_Kind": ("device_kind", "kind"),
    "PJRT_DeviceDescription_DebugString": ("debug_string", "debug_string"),
    "PJRT_DeviceDescription_ToString": ("to_string", "to_string"),
}


register_text_queries(_TEXT_QUERIES, _description)


@entry_point("PJRT_Device_GetDescription")
def device_get_description(args: Args) -> None:
    """PJRT_Device_GetDescription: owned by the device."""
    args.device_description = _device(args).description.handle


@entry_point("PJRT_Device_GetAttributes")
def device_get_attributes(args: Args) -> None:
    """PJRT_Device_GetAttributes: the description's attributes, freed by the caller's deleter call."""
    device = _device(args)
    holder = Holder()
    args.attributes, args.num_attributes = owned_named_values(holder, "attributes", device.description.attributes)
    args.device_attributes = handles.add(holder)
    set_deleter(args, "attributes_deleter")


@entry_point("PJRT_Device_IsAddressable")
def device_is_addressable(args: Args) -> None:
    """PJRT_Device_IsAddressable."""
    args.is_addressable = _device(args).is_addressable


@entry_point("PJRT_Device_LocalHardwareId")
def device_local_hardware_id(args: Args) -> None:
    """PJRT_Device_LocalHardwareId."""
    args.local_hardware_id = _device(args).local_hardware_id


@entry_point("PJRT_Device_AddressableMemories")
def device_addressable_memories(args: Args) -> None:
    """PJRT_Device_AddressableMemories: owned by the device."""
    device = _device(args)
    args.memories = owned_array(device, "memories", "void*", [m.handle for m in device.memories])
    args.num_memories = len(device.memories)


@entry_point("PJRT_Device_DefaultMemory")
def device_default_memory(args: Args) -> None:
    """PJRT_Device_DefaultMemory."""
    args.memory = _device(args).default_memory.handle


@entry_point("PJRT_Device_MemoryStats")
def device_memory_stats(args: Args) -> None:
    """PJRT_Device_MemoryStats: bytes held by the device's live buffers; other stats unset."""
    device = _device(args)
    client = _client_of_device(device)
    args.bytes_in_use = client.bytes_in_use(device) if client is not None else 0
    for field in ("peak_bytes_in_use", "num_allocs", "largest_alloc_size", "bytes_limit",
                  "bytes_reserved", "peak_bytes_reserved", "bytes_reservable_limit",
                  "largest_free_block_bytes", "pool_bytes", "peak_pool_bytes", "peak_allocated_bytes"):
        setattr(args, field + "_is_set", False)


@entry_point("PJRT_Device_ClearMemoryStats")
def device_clear_memory_stats(args: Args) -> None:
    """PJRT_Device_ClearMemoryStats: no peaks are tracked, so nothing to clear."""
    _device(args)


def _client_of_device(device: Device):
    return device.client
