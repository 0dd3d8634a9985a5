"""`PJRT_Client`: devices, memories, compilation and host transfers."""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from pjrt_ref.model.buffer import Buffer
from pjrt_ref.model.device import Device, DeviceDescription
from pjrt_ref.errors import AlreadyExists, InvalidArgument, NotFound
from pjrt_ref.interpreter.process_grid import collective_timeout
from pjrt_ref.model.executable import Executable, LoadedExecutable
from pjrt_ref.model.memory import KINDS, Memory, kind_id
from pjrt_ref.model.topology import PLATFORM_NAME, Topology, device_count, platform_version
from pjrt_ref.process_files import set_process_index

# Where a client finds every object a caller can still reach (the C API layer's
# handle table, capi/handles.py `live_objects`, once it is bound).
REACHABLE_SOURCES: list[Callable[[], list]] = []


def make_client(options: dict | None = None, kv_store=None) -> "Client":
    """The client PJRT_Client_Create makes.

    JAX's multi-controller mode passes `node_id` and `num_nodes` (its
    process index and count, `jax.distributed.initialize`) with the
    distributed runtime's key-value store; with more than one node this
    process joins the others (`pjrt_ref.distributed.join`: the topology
    through the store, collectives over MPI) before its client exists.
    """
    options = dict(options or {})
    num_nodes = int(options.get("num_nodes", 1))
    if num_nodes <= 1:
        return Client(options)
    if kv_store is None:
        raise InvalidArgument(f"num_nodes={num_nodes}: a client of several processes needs "
                              "the key-value store callbacks of PJRT_Client_Create")
    from pjrt_ref.distributed import join

    cluster = join(kv_store, int(options.get("node_id", 0)), num_nodes, device_count(options),
                   platform_version(), collective_timeout())
    set_process_index(cluster.process_index)    # PJRT_REF_TRACE / _PROFILE: a file per process
    return Client(options, cluster)


class Client:
    """A pjrt-ref client: `device_count(options)` virtual devices in this process.

    Every device is CPU-like and has its own memories (numpy arrays in host
    RAM), one of each kind in memory.py; device i has id i, local hardware
    id i and default memory i. Executables
    run on several devices concurrently, one thread each
    (`pjrt_ref/model/multi_device.py`).

    With a `cluster` (one process of a multi-process job, see `make_client`)
    the client also lists the other processes' devices, numbered in process
    order; only its own are addressable, and executions that span processes
    meet them through the cluster's transport.
    """

    def __init__(self, options: dict | None = None, cluster=None) -> None:
        self.options = dict(options or {})
        self.platform_name = PLATFORM_NAME
        self.platform_version = platform_version()
        self.cluster = cluster
        if cluster is None:
            self.process_index = 0
            self.devices: list[Device] = [self._new_device(i, i, 0) for i in range(device_count(self.options))]
        else:
            self.process_index = cluster.process_index
            self.devices = [self._new_device(d.id, d.local_index, d.process_index) for d in cluster.devices]
        self.addressable_devices: list[Device] = [d for d in self.devices if d.is_addressable]
        self._give_memories(self.addressable_devices, len(self.devices))
        self.memories: list[Memory] = sorted((m for d in self.addressable_devices for m in d.memories),
                                             key=lambda memory: memory.id)
        self.topology = Topology(PLATFORM_NAME, self.platform_version,
                                 [d.description for d in self.devices], owned_by_client=True)
        self.dma_mappings: dict[int, int] = {}     # PJRT_Client_DmaMap: start address -> size
        self._dma_lock = threading.Lock()
        self.handle = None

    def _new_device(self, device_id: int, local_index: int, process_index: int) -> Device:
        return Device(description=DeviceDescription.virtual(device_id, process_index),
                      local_hardware_id=local_index, client=self,
                      is_addressable=process_index == self.process_index)

    @staticmethod
    def _give_memories(devices: list[Device], device_count: int) -> None:
        """One memory of each kind per addressable device, the default ("device")
        first, with ids `kind_id * device_count + device id` (memory.py).
        Another process's device has no memory here (as in XLA, a
        non-addressable device has no memory spaces)."""
        for device in devices:
            for kind in KINDS:
                memory = Memory(id=kind_id(kind) * device_count + device.id, kind=kind, devices=[device])
                device.memories.append(memory)

    def close(self) -> None:
        """PJRT_Client_Destroy: a process of a job stops its transport."""
        if self.cluster is not None:
            self.cluster.close()

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

    def default_device_assignment(self, num_replicas: int, num_partitions: int) -> list[list[int]]:
        """`assignment[replica][partition]`: device `partition * num_replicas + replica`.

        The same placement as XLA's ComputationPlacer::AssignDevices, so a
        program sees the same ids on pjrt_ref as on XLA CPU.
        """
        needed = num_replicas * num_partitions
        if num_replicas < 1 or num_partitions < 1:
            raise InvalidArgument(f"{num_replicas} replica(s) x {num_partitions} partition(s): "
                                  "both must be at least 1")
        if needed > len(self.devices):
            raise InvalidArgument(
                f"{num_replicas} replica(s) x {num_partitions} partition(s) need {needed} devices; "
                f"pjrt_ref has {len(self.devices)} (set PJRT_REF_NUM_DEVICES or the num_devices "
                "create option)")
        return [[self.devices[p * num_replicas + r].id for p in range(num_partitions)]
                for r in range(num_replicas)]

    # -- compile ---------------------------------------------------------------
    def compile(self, code: bytes, fmt: str, compile_options: bytes) -> LoadedExecutable:
        """Compile a program in any format `program_formats` accepts ("mlir", "hlo")."""
        return LoadedExecutable(Executable.compile(code, fmt, compile_options), self)

    def load(self, executable: Executable) -> LoadedExecutable:
        return LoadedExecutable(executable, self)

    # -- DMA mappings ------------------------------------------------------------
    def dma_map(self, address: int, size: int) -> None:
        """Record host memory [address, address+size) as mapped (PJRT_Client_DmaMap).

        pjrt-ref's device memory is host memory, so every host address is
        already one it can copy from and to: nothing needs registering. The
        record lets DmaUnmap check that it undoes a DmaMap, as a GPU driver
        does. Mapping memory that overlaps a mapping is ALREADY_EXISTS
        (CUDA's cudaHostRegister refuses it too).
        """
        if address == 0:
            raise InvalidArgument("DmaMap: data is NULL")
        if size <= 0:
            raise InvalidArgument(f"DmaMap: size {size}: nothing to map")
        with self._dma_lock:
            for start, length in self.dma_mappings.items():
                if start < address + size and address < start + length:
                    raise AlreadyExists(f"DmaMap: [0x{address:x}, +{size}) overlaps the mapping "
                                        f"[0x{start:x}, +{length}) made before")
            self.dma_mappings[address] = size

    def dma_unmap(self, address: int) -> None:
        """Forget the mapping DmaMap made at `address`; INVALID_ARGUMENT if there is none."""
        with self._dma_lock:
            if self.dma_mappings.pop(address, None) is None:
                raise InvalidArgument(f"DmaUnmap: 0x{address:x} is not the start of memory mapped by "
                                      "PJRT_Client_DmaMap (never mapped, or already unmapped)")

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

    def buffer_from_array(self, array: np.ndarray, device: Device | None = None,
                          memory: Memory | None = None, minor_to_major: tuple[int, ...] | None = None
                          ) -> Buffer:
        device, memory = self.memory_for(device, memory)
        return Buffer(array, device, memory, minor_to_major=minor_to_major)

    def bytes_in_use(self, device: Device | None = None) -> int:
        """Bytes held by this client's live buffers (not deleted, handle not
        destroyed): all of them, or those on `device`.

        Counted when asked (PJRT_Device_MemoryStats) from REACHABLE_SOURCES (the
        C API layer's handle table holds every buffer the caller can still reach), rather than kept
        up to date on every buffer's creation and destruction (the Execute
        path would pay for it on each output)."""
        return sum(obj.nbytes for source in REACHABLE_SOURCES for obj in source()
                   if isinstance(obj, Buffer) and not obj.is_deleted
                   and (obj.device is device if device is not None else obj.device.client is self))
