"""`PJRT_Memory`: a memory space. Each device has three, as on XLA's CPU client.

| kind            | kind id | what a framework puts there                         |
|-----------------|---------|-----------------------------------------------------|
| `device`        | 0       | everything, unless asked otherwise (the default)    |
| `pinned_host`   | 1       | host offloading: `out_shardings` / `device_put` with |
|                 |         | memory_kind="pinned_host", remat offload policies   |
| `unpinned_host` | 2       | the same, memory_kind="unpinned_host"                |

pjrt-ref's device memory is host RAM already, so the three kinds hold the
same numpy arrays; what differs is the bookkeeping a framework reads back:
a buffer lives in exactly one memory (`PJRT_Buffer_Memory`), a program's
parameters and results have the kinds its entry function's
`mhlo.memory_kind` attributes name (`PJRT_Executable_ParameterMemoryKinds`,
`OutputMemoryKinds`), and `PJRT_Buffer_CopyToMemory` moves a buffer between
them. So `jax.device_put(x, ...memory_kind="pinned_host")` gives an array
whose `.sharding.memory_kind` is "pinned_host", as on cpu.

A memory belongs to one device (`PJRT_Memory_AddressableByDevices`). Ids:
device d's memory of kind k has id `k * n + d` for a client of n devices,
so device memories keep the ids of their devices. XLA derives kind ids from
a fingerprint of the kind's name; any int that names the kind uniquely will
do (`PJRT_TopologyDescription_GetMemorySpaceKindIds` lists `KIND_IDS`, the
default first), and small ones read better.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pjrt_ref.errors import InvalidArgument

DEVICE_KIND = "device"
PINNED_HOST_KIND = "pinned_host"
UNPINNED_HOST_KIND = "unpinned_host"
KINDS: tuple[str, ...] = (DEVICE_KIND, PINNED_HOST_KIND, UNPINNED_HOST_KIND)   # kind id = index
KIND_IDS: tuple[int, ...] = tuple(range(len(KINDS)))     # every memory kind pjrt-ref has, the default first
DEVICE_KIND_ID = KINDS.index(DEVICE_KIND)


def kind_id(kind: str) -> int:
    """The kind id of memory kind `kind`; INVALID_ARGUMENT for a kind pjrt-ref has not."""
    if kind not in KINDS:
        raise InvalidArgument(f"memory kind {kind!r}: pjrt_ref's memories are of kinds "
                              f"{', '.join(KINDS)}")
    return KINDS.index(kind)


@dataclass(eq=False)
class Memory:
    id: int
    kind: str = DEVICE_KIND
    devices: list = field(default_factory=list)   # Device objects that can address it
    handle: object = None                          # our PJRT_Memory*

    @property
    def kind_id(self) -> int:
        return KINDS.index(self.kind)

    @property
    def debug_string(self) -> str:
        return f"pjrt_ref memory {self.id} ({self.kind})"

    @property
    def to_string(self) -> str:
        return f"{self.kind.upper()}_{self.id}"


@dataclass(frozen=True, eq=False)
class MemoryDescription:
    """A kind of memory a device has, known without a client (the
    MemoryDescriptions extension): what a topology's devices offer an
    ahead-of-time compile."""

    kind: str

    @property
    def kind_id(self) -> int:
        return KINDS.index(self.kind)


# Every device's memory descriptions, the default first (one set: the devices are alike).
DESCRIPTIONS: tuple[MemoryDescription, ...] = tuple(MemoryDescription(kind) for kind in KINDS)
