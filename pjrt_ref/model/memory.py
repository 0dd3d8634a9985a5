"""`PJRT_Memory`: a memory space. pjrt-ref has one per device, kind "device".

Memory i belongs to device i alone (`PJRT_Memory_AddressableByDevices`
lists just that device); a buffer lives in exactly one memory, and
`PJRT_Buffer_CopyToDevice` / `CopyToMemory` move it between them.

There is one kind of memory, so one kind id: "device" is 0
(`PJRT_Memory_Kind_Id`; `PJRT_TopologyDescription_GetMemorySpaceKindIds`
lists `KIND_IDS`, the default first). XLA's CPU client derives its kind ids
from a fingerprint of the kind's name; any int that names the kind uniquely
will do, and 0 reads better.
"""
from __future__ import annotations

from dataclasses import dataclass, field


DEVICE_KIND = "device"
DEVICE_KIND_ID = 0
KIND_IDS: tuple[int, ...] = (DEVICE_KIND_ID,)     # every memory kind pjrt-ref has, the default first


@dataclass(eq=False)
class Memory:
    id: int
    kind: str = DEVICE_KIND
    kind_id: int = DEVICE_KIND_ID
    devices: list = field(default_factory=list)   # Device objects that can address it
    handle: object = None                          # our PJRT_Memory*

    @property
    def debug_string(self) -> str:
        return f"pjrt_ref memory {self.id} ({self.kind})"

    @property
    def to_string(self) -> str:
        return f"MEMORY_SPACE_{self.id}"
