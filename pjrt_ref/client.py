"""`PJRT_Client`: devices, memories, compilation and host transfers."""
from __future__ import annotations

import threading
import weakref

import numpy as np

from .buffer import Buffer
from .device import Device, DeviceDescription
from .errors import InvalidArgument, NotFound
from .executable import Executable, LoadedExecutable, check_program_format
from .memory import Memory
from .topology import Topology

PLATFORM_NAME = "pjrt_ref"


def platform_version() -> str:
    from . import __version__
    return f"pjrt-ref {__version__} (StableHLO interpreter on numpy)"


class Client:
    def __init__(self, options: dict | None = None) -> None:
        self.options = dict(options or {})
        self.platform_name = PLATFORM_NAME
        self.platform_version = platform_version()
        self.process_index = 0
        description = DeviceDescription(id=0)
        memory = Memory(id=0)
        device = Device(description=description, local_hardware_id=0, memories=[memory], client=self)
        memory.devices.append(device)
        self.devices: list[Device] = [device]
        self.addressable_devices: list[Device] = [device]
        self.memories: list[Memory] = [memory]
        self.topology = Topology(PLATFORM_NAME, self.platform_version, [description], owned_by_client=True)
        self._buffers: "weakref.WeakSet[Buffer]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self.handle = None

    # -- lookups ---------------------------------------------------------------
    def lookup_device(self, device_id: int) -> Device:
        for device in self.devices:
            if device.id == device_id:
                return device
        raise InvalidArgument(f"no device with id {device_id} (pjrt_ref has {len(self.devices)})")

    def lookup_addressable_device(self, local_hardware_id: int) -> Device:
        for device in self.addressable_devices:
            if device.local_hardware_id == local_hardware_id:
                return device
        raise InvalidArgument(f"no addressable device with local hardware id {local_hardware_id}")

    def default_device_assignment(self, num_replicas: int, num_partitions: int) -> list[int]:
        needed = num_replicas * num_partitions
        if needed > len(self.devices):
            raise InvalidArgument(
                f"{num_replicas} replica(s) x {num_partitions} partition(s) need {needed} devices; "
                f"pjrt_ref has {len(self.devices)}")
        return [d.id for d in self.devices[:needed]]

    # -- compile ---------------------------------------------------------------
    def compile(self, code: bytes, fmt: str, compile_options: bytes) -> LoadedExecutable:
        check_program_format(fmt)
        return LoadedExecutable(Executable(code, compile_options), self)

    def load(self, executable: Executable) -> LoadedExecutable:
        return LoadedExecutable(executable, self)

    # -- buffers ---------------------------------------------------------------
    def memory_for(self, device: Device | None, memory: Memory | None) -> tuple[Device, Memory]:
        """The (device, memory) pair a transfer targets; either may be given."""
        if memory is not None:
            if not memory.devices:
                raise NotFound("memory space has no device")
            return memory.devices[0], memory
        if device is None:
            device = self.addressable_devices[0]
        return device, device.default_memory

    def track(self, buffer: Buffer) -> Buffer:
        with self._lock:                 # WeakSet is not safe against concurrent iteration
            self._buffers.add(buffer)
        return buffer

    def buffer_from_array(self, array: np.ndarray, device: Device | None = None,
                          memory: Memory | None = None) -> Buffer:
        device, memory = self.memory_for(device, memory)
        return self.track(Buffer(array, device, memory))

    def bytes_in_use(self) -> int:
        with self._lock:
            buffers = list(self._buffers)
        return sum(b.nbytes for b in buffers if not b.is_deleted)
