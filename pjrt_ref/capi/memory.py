"""PJRT_Memory_* entry points (pjrt_c_api.h "Memory")."""
from __future__ import annotations

from pjrt_ref.capi import handles
from pjrt_ref.model.memory import Memory
from pjrt_ref.capi._boundary import entry_point, register_text_queries
from pjrt_ref.capi.cdata import Args, owned_array


def _memory(args: Args) -> Memory:
    return handles.get(args.memory, Memory, "PJRT_Memory")


@entry_point("PJRT_Memory_Id")
def memory_id(args: Args) -> None:
    """PJRT_Memory_Id."""
    args.id = _memory(args).id


@entry_point("PJRT_Memory_Kind_Id")
def memory_kind_id(args: Args) -> None:
    """PJRT_Memory_Kind_Id: one kind, id 0."""
    args.kind_id = _memory(args).kind_id


_TEXT_QUERIES = {
    "PJRT_Memory_Kind": ("kind", "kind"),
    "PJRT_Memory_DebugString": ("debug_string", "debug_string"),
    "PJRT_Memory_ToString": ("to_string", "to_string"),
}


register_text_queries(_TEXT_QUERIES, _memory)


@entry_point("PJRT_Memory_AddressableByDevices")
def memory_addressable_by_devices(args: Args) -> None:
    """PJRT_Memory_AddressableByDevices: owned by the memory."""
    memory = _memory(args)
    args.devices = owned_array(memory, "devices", "void*", [d.handle for d in memory.devices])
    args.num_devices = len(memory.devices)
