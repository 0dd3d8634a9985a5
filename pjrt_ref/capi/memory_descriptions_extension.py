"""The PJRT MemoryDescriptions extension (capi_shim/pjrt_memory_descriptions.h).

A device description that no client stands behind (a topology's devices,
for ahead-of-time compiles: `jax.experimental.topologies`) has no
PJRT_Memory to list, so jaxlib asks here which kinds of memory its device
has and which is the default. pjrt-ref's devices are alike: each has the
three kinds of pjrt_ref/model/memory.py, "device" the default, and the
descriptions are three shared objects with handles for the process's life.
"""
from __future__ import annotations

import threading

from pjrt_ref.capi import handles
from pjrt_ref.model.memory import DESCRIPTIONS, MemoryDescription
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, owned_array, owned_text
from pjrt_ref.capi.device import _description

_HANDLES: list = []
_LOCK = threading.Lock()


def _description_handles() -> list:
    """The handles of DESCRIPTIONS, made on first use."""
    with _LOCK:
        if not _HANDLES:
            _HANDLES.extend(handles.add(description) for description in DESCRIPTIONS)
        return list(_HANDLES)


@entry_point("PJRT_DeviceDescription_MemoryDescriptions")
def device_description_memory_descriptions(args: Args) -> None:
    """The device's kinds of memory, the default ("device") at index 0."""
    description = _description(args)
    pointers = _description_handles()
    args.memory_descriptions = owned_array(description, "memory_descriptions", "void*", pointers)
    args.num_memory_descriptions = len(pointers)
    args.default_memory_index = 0


@entry_point("PJRT_MemoryDescription_Kind")
def memory_description_kind(args: Args) -> None:
    """The kind's name and id, as the memories of that kind report them."""
    description = handles.get(args.memory_description, MemoryDescription, "PJRT_MemoryDescription")
    args.kind, args.kind_size = owned_text(description, "kind", description.kind)
    args.kind_id = description.kind_id
