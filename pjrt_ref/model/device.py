"""`PJRT_Device` and `PJRT_DeviceDescription`.

pjrt-ref exposes N addressable virtual devices, `pjrt_ref:0` ...
`pjrt_ref:N-1` (N from PJRT_REF_NUM_DEVICES or the `num_devices` client
create option; default 1): CPU-like devices in one process, each with its
own memory of numpy arrays in host RAM.

`AsyncTrackingEvent` is what PJRT_Device_CreateAsyncTrackingEvent hands out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.model.memory import Memory


@dataclass(eq=False)
class DeviceDescription:
    """What is known about a device without a client (also in topologies)."""

    id: int
    process_index: int = 0
    kind: str = "cpu"
    attributes: dict[str, Any] = field(default_factory=dict)
    handle: object = None          # our PJRT_DeviceDescription*

    @classmethod
    def virtual(cls, index: int, process_index: int = 0) -> "DeviceDescription":
        """Virtual device `index` (of process `process_index`). Its attributes
        (PJRT_DeviceDescription_Attributes) place it on a line: `coords` =
        [index], as a 1-D mesh of devices."""
        return cls(id=index, process_index=process_index, attributes={"coords": [index]})

    @property
    def debug_string(self) -> str:
        return f"pjrt_ref:{self.id}"

    @property
    def to_string(self) -> str:
        return f"PjrtRefDevice(id={self.id}, kind={self.kind})"


@dataclass(eq=False)
class Device:
    description: DeviceDescription
    local_hardware_id: int
    memories: list[Memory] = field(default_factory=list)
    handle: object = None          # our PJRT_Device*
    is_addressable: bool = True
    client: object = None          # the Client that owns this device

    @property
    def id(self) -> int:
        return self.description.id

    @property
    def default_memory(self) -> Memory:
        if not self.memories:
            raise InvalidArgument(f"device {self.id} belongs to process {self.description.process_index}: "
                                  "it has no memory in this process")
        return self.memories[0]

    def memory_of_kind(self, kind: str) -> Memory:
        """This device's memory of kind `kind` ("device", "pinned_host", "unpinned_host")."""
        for memory in self.memories:
            if memory.kind == kind:
                return memory
        raise InvalidArgument(f"device {self.id} has no memory of kind {kind!r} (it has "
                              f"{', '.join(m.kind for m in self.memories) or 'none in this process'})")


@dataclass(eq=False)
class AsyncTrackingEvent:
    """A caller's note that asynchronous work depends on `device` (PJRT_Device_CreateAsyncTrackingEvent).

    XLA's ScopedAsyncTrackingEvent lets a runtime see, while the note lives,
    that something outside it waits on the device. pjrt-ref finishes its
    work inside each call, so nothing waits on a note; it keeps the device
    and the caller's description, so a live note names what it tracks (in
    strict mode's leak report, say) until PJRT_AsyncTrackingEvent_Destroy.
    """

    device: Device
    description: str
    handle: object = None          # our PJRT_AsyncTrackingEvent*

    def __repr__(self) -> str:
        return f"AsyncTrackingEvent(pjrt_ref:{self.device.id}, {self.description!r})"
