"""PJRT_Device_* and PJRT_DeviceDescription_* entry points (pjrt_c_api.h "Device")."""
from __future__ import annotations

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.capi import handles
from pjrt_ref.model.device import AsyncTrackingEvent, Device, DeviceDescription
from pjrt_ref.capi._boundary import entry_point, register_text_queries
from pjrt_ref.capi.cdata import Args, Holder, bytes_arg, caller_status, owned_array, owned_named_values, set_deleter


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


@entry_point("PJRT_Device_PoisonExecution")
def device_poison_execution(args: Args) -> None:
    """PJRT_Device_PoisonExecution: `poisoned` = false, always; the call checks its
    arguments (the device, an error code other than OK, string payloads) and succeeds.

    pjrt_c_api.h: it makes "the earliest execution on this device with given
    launch_id", if not finished yet, fail with the error; false means there
    is no such execution (finished, or a wrong launch id), which is not an
    error. pjrt-ref runs each execution to the end inside
    PJRT_LoadedExecutable_Execute and hands out its results only then, so
    by the time a caller holds a launch id's results there is nothing left
    to poison; it keeps no table of executions still running on other
    threads, so those are not poisoned either (XLA CPU poisons only
    asynchronous executions, through its execution tracker).
    """
    _device(args)
    if caller_status(args, "PJRT_Device_PoisonExecution", "error_code", payload=True) is None:
        raise InvalidArgument("PJRT_Device_PoisonExecution: error_code is OK; poisoning needs an error")
    args.poisoned = False


@entry_point("PJRT_Device_CreateAsyncTrackingEvent")
def device_create_async_tracking_event(args: Args) -> None:
    """PJRT_Device_CreateAsyncTrackingEvent: a tracking event the caller destroys with
    PJRT_AsyncTrackingEvent_Destroy (pjrt_ref/model/device.py `AsyncTrackingEvent`).

    jaxlib's C API client aborts the process (LOG(FATAL)) if this call fails,
    so it fails only for a caller's error that would otherwise crash: a bad
    device handle, a NULL description with a size. Any bytes are a valid
    description (decoded with replacement). XLA's CPU client answers with no
    event (NULL, which the caller must accept); pjrt-ref gives a real one, so
    its destroy is checked like any handle's.
    """
    device = _device(args)
    description = bytes_arg(args.description, args.description_size, "description").decode("utf-8", "replace")
    event = AsyncTrackingEvent(device, description)
    event.handle = handles.add(event)
    args.event = event.handle


@entry_point("PJRT_AsyncTrackingEvent_Destroy")
def async_tracking_event_destroy(args: Args) -> None:
    """PJRT_AsyncTrackingEvent_Destroy: frees the event. A NULL, stale (destroyed
    already) or foreign pointer is INVALID_ARGUMENT, as for every pjrt-ref handle."""
    handles.remove(args.event, AsyncTrackingEvent, "PJRT_AsyncTrackingEvent")
