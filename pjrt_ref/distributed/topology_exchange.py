"""Agreeing on the global topology through the key-value store.

What XLA's clients do (`xla/pjrt/distributed/topology_util.cc`,
`ExchangeTopologies` / `BuildGlobalTopology`): each process puts a
description of its local devices under a key of its own, reads every
other process's, and numbers the devices of all processes in process
order. Every process computes the same global list from the same
descriptions, so they agree without a second round.

pjrt-ref's local description is a small JSON object: the process index,
its device count (PJRT_REF_NUM_DEVICES or the `num_devices` option, which
may differ between processes), the plugin version, and what the MPI
transport needs to decide how to connect (`mpi_transport.local_facts`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.distributed.kv_store import KeyValueStore


@dataclass(frozen=True)
class GlobalDevice:
    """One device of the whole job: its global id, its process, its index there."""

    id: int
    process_index: int
    local_index: int


def exchange_local_topologies(store: KeyValueStore, process_index: int, num_processes: int,
                              local: dict, timeout_seconds: float) -> list[dict]:
    """Put this process's `local` description; return every process's, in process order."""
    store.put(f"local_topology/{process_index}", json.dumps(local, sort_keys=True).encode())
    return [json.loads(store.get(f"local_topology/{i}", timeout_seconds))
            for i in range(num_processes)]


def global_devices(descriptions: list[dict]) -> list[GlobalDevice]:
    """Every device of the job: ids 0, 1, ... in process order, then local order
    (as BuildGlobalTopology numbers them)."""
    devices = []
    for process_index, description in enumerate(descriptions):
        if description["process_index"] != process_index:
            raise InvalidArgument(f"the topology of process {process_index} says it is process "
                                  f"{description['process_index']}")
        for local_index in range(description["device_count"]):
            devices.append(GlobalDevice(len(devices), process_index, local_index))
    return devices


def check_same_plugin(descriptions: list[dict], field: str) -> None:
    """All processes must run the same pjrt-ref (and MPI library): mixing
    versions would mix semantics."""
    values = {d["process_index"]: d.get(field) for d in descriptions}
    if len(set(values.values())) > 1:
        raise InvalidArgument(f"the processes disagree on {field}: {values}")
