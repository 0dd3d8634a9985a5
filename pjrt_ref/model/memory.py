"""`PJRT_Memory`: a memory space. pjrt-ref has one per device, kind "device".

Memory i belongs to device i alone (`PJRT_Memory_AddressableByDevices`
lists just that device); a buffer lives in exactly one memory, and
`PJRT_Buffer_CopyToDevice` / `CopyToMemory` move it between them.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Memory:
    id: int
    kind: str = "device"
    kind_id: int = 0
    devices: list = field(default_factory=list)   # Device objects that can address it
    handle: object = None                          # our PJRT_Memory*

    @property
    def debug_string(self) -> str:
        return f"pjrt_ref memory {self.id} ({self.kind})"

    @property
    def to_string(self) -> str:
        return f"MEMORY_SPACE_{self.id}"
