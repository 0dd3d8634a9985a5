"""One pjrt-ref client's view of a multi-process job: who is where, and the transport."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from pjrt_ref.distributed import mpi_transport
from pjrt_ref.errors import Internal
from pjrt_ref.interpreter.process_grid import MailStore
from pjrt_ref.distributed.kv_store import KeyValueStore, ScopedStore
from pjrt_ref.distributed.topology_exchange import (GlobalDevice, check_same_plugin, exchange_local_topologies,
                                                    global_devices)

# The n-th multi-process client a process creates uses keys under
# `pjrt_ref/client{n}/`: every process creates its clients in the same order.
_CLIENT_NUMBERS = itertools.count()


@dataclass
class ProcessState:
    """What PJRT_Client_UpdateGlobalProcessInfo last said about one process."""

    incarnation_id: int
    state: str
    error: str = ""


@dataclass
class Cluster:
    """This process's place in a job of `num_processes` processes."""

    process_index: int
    num_processes: int
    devices: list[GlobalDevice]
    transport: object                      # MpiTransport: the links of multi-host grids
    process_states: dict[int, ProcessState] = field(default_factory=dict)
    _executions: dict = field(default_factory=dict)

    def next_execution(self, hosts: frozenset) -> int:
        """The number of this execution among those spanning `hosts`: every host of
        the set counts the same executions (multi-controller JAX launches the same
        programs in the same order in every process), so it names the same grid."""
        number = self._executions.get(hosts, 0)
        self._executions[hosts] = number + 1
        return number

    def update_process_states(self, states: dict[int, ProcessState]) -> None:
        self.process_states.update(states)

    def close(self) -> None:
        self.transport.close()


def join(store: KeyValueStore, process_index: int, num_processes: int, local_device_count: int,
         plugin_version: str, timeout_seconds: float) -> Cluster:
    """Exchange topologies through `store`, connect the processes over MPI.

    Called by PJRT_Client_Create when the framework passes a key-value store
    and more than one process (JAX: `node_id`, `num_nodes` options).
    """
    MPI = mpi_transport.import_mpi()
    scoped = ScopedStore(store, f"pjrt_ref/client{next(_CLIENT_NUMBERS)}/")
    local = {"process_index": process_index, "device_count": local_device_count,
             "plugin_version": plugin_version, **mpi_transport.local_facts(MPI)}
    descriptions = exchange_local_topologies(scoped, process_index, num_processes, local,
                                             timeout_seconds)
    for name in ("plugin_version", "mpi_library"):
        check_same_plugin(descriptions, name)
    comm = mpi_transport.connect(MPI, scoped, process_index, num_processes, descriptions,
                                 timeout_seconds)
    if comm.Get_rank() != process_index:     # the transport's host i must be JAX's process i
        raise Internal(f"process {process_index} got MPI rank {comm.Get_rank()}")
    transport = mpi_transport.MpiTransport(MPI, comm, MailStore())
    return Cluster(process_index, num_processes, global_devices(descriptions), transport)
