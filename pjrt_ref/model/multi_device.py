"""Executables on several devices: placement, and one execution across devices.

PJRT's model (pjrt_c_api.h, `PJRT_LoadedExecutable_Execute`): an executable
compiled for `num_replicas x num_partitions` logical devices is bound to a
device assignment, `assignment[replica][partition] = device id`, taken from
the CompileOptions (`ExecutableBuildOptionsProto.device_assignment`) or, if
none is given, from `PJRT_Client_DefaultDeviceAssignment`. Its addressable
devices are listed replica-major, and one Execute call gets one argument
list per addressable device, in that order, and returns one output list
per device.

Running it follows the StableHLO spec's process grid ("Collective ops" in
docs/spec.md): each device is the process `(replica_id, partition_id)` and
runs as its own thread; the threads meet in the grid's mailbox at each
collective (`interpreter/process_grid.py`). A device that never
reaches a collective its peers wait in fails them with DEADLINE_EXCEEDED
after PJRT_REF_COLLECTIVE_TIMEOUT seconds (default 120), naming the op, its
location and the missing process.

Two kinds of multi-device program arrive:
- a program without sharding annotations is already per device (the spec's
  semantics: every process runs the whole program on its own arguments), as
  hand-written StableHLO with replicas or partitions is; each device runs it;
- a program with Shardy / GSPMD sharding annotations (what JAX sends for
  `jit` over shardings, `shard_map` and `pmap`) has the global shapes in its
  signature and needs partitioning first: that is `pjrt_ref/spmd/partitioner.py`'s
  partitioned runner (`spmd.runner_for_executable`).
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from pjrt_ref.model.buffer import Buffer
from pjrt_ref.model.compile_options import DeviceAssignment
from pjrt_ref.interpreter import observer
from pjrt_ref.errors import Internal, InvalidArgument
from pjrt_ref.interpreter.process_grid import Process, ProcessGrid, run_processes
from pjrt_ref.interpreter.process_hosts import HostPlacement
from pjrt_ref.model.execution_io import delete_donated, donated_indices, output_buffers


# ------------------------------------------------------------- placement
def device_assignment(executable, client) -> DeviceAssignment:
    """The executable's `assignment[replica][partition]`, checked against the client."""
    replicas, partitions = executable.num_replicas, executable.num_partitions
    given = executable.build_options.device_assignment
    if given is None:
        return client.default_device_assignment(replicas, partitions)
    if len(given) != replicas or any(len(row) != partitions for row in given):
        raise InvalidArgument(
            f"the compile options' device assignment is {len(given)}x{len(given[0]) if given else 0}, "
            f"but the program runs on {replicas} replica(s) x {partitions} partition(s)")
    ids = [device_id for row in given for device_id in row]
    if len(set(ids)) != len(ids):
        raise InvalidArgument(f"device assignment {given} uses a device twice")
    for device_id in ids:
        client.lookup_device(device_id)           # InvalidArgument for an unknown id
    return [list(row) for row in given]


def logical_ids(assignment: DeviceAssignment) -> list[tuple[int, int]]:
    """(replica, partition) of each addressable device, replica-major (as XLA lists them)."""
    return [(r, p) for r, row in enumerate(assignment) for p in range(len(row))]


def assigned_devices(assignment: DeviceAssignment, client) -> list:
    """The devices of `assignment`, in `logical_ids` order."""
    return [client.lookup_device(device_id) for row in assignment for device_id in row]


# ------------------------------------------------------------- execution
def execute(loaded, argument_lists: list[list[Buffer]], non_donatable: set[int]) -> list[list[Buffer]]:
    """One execution on every device of `loaded`: an output list per device.

    Donated arguments (see LoadedExecutable.execute) are deleted on every
    device once all devices have finished. (Host send/recv callbacks are
    attached by the caller, one set per device: `host_callbacks.DeviceHostTransfers`.)
    """
    if loaded.deleted:
        raise InvalidArgument("executable has been deleted")
    exe = loaded.executable
    if len(argument_lists) != len(loaded.devices):
        raise InvalidArgument(f"executable runs on {len(loaded.devices)} device(s), "
                              f"got {len(argument_lists)} argument lists")
    donated = [donated_indices(exe, row, non_donatable) for row in argument_lists]
    arrays = [[buffer.array for buffer in row] for row in argument_lists]
    start = time.perf_counter()
    outputs = runner_for(exe)(arrays, loaded.logical_ids(), host_placement(loaded))
    watch = observer.current      # PJRT_REF_PROFILE / jax.profiler.trace (interpreter/observer.py)
    if watch.recording:
        watch.slice(f"execute {exe.name}", "execute", start, time.perf_counter(),
                    {"devices": len(loaded.devices)})
    if len(outputs) != len(loaded.devices):
        raise Internal(f"{len(outputs)} output lists for {len(loaded.devices)} devices")
    buffers = [output_buffers(exe, values, device, row)
               for values, device, row in zip(outputs, loaded.devices, arrays)]
    for row, indices in zip(argument_lists, donated):
        delete_donated(row, indices)
    return buffers


def host_placement(loaded):
    """Where the devices of an execution that spans processes run, and the
    transport between them (interpreter/process_hosts.py); None when
    every device is in this process.

    The execution's grids are named by how many executions over the same
    processes came before it: every process of a multi-controller job
    launches the same executions in the same order.
    """
    if not loaded.spans_processes:
        return None

    cluster = loaded.client.cluster
    number = cluster.next_execution(frozenset(loaded.hosts.values()))
    return HostPlacement(cluster.transport, dict(loaded.hosts), ("execution", number))


# runner(this process's per-device arrays, their logical ids, host placement or None)
#   -> per-device outputs
Runner = Callable[[list[list[np.ndarray]], list[tuple[int, int]], object], list[list[np.ndarray]]]


def runner_for(exe) -> Runner:
    """How `exe` runs across devices: partitioned (an annotated program with
    several partitions, pjrt_ref/spmd/partitioner.py), else the program on every device."""
    from pjrt_ref.spmd import partitioner as spmd

    partitioned = spmd.runner_for_executable(exe)       # made once per executable
    if partitioned is not None:
        return lambda arrays, ids, placement: partitioned(arrays, ids, placement)
    return lambda arrays, ids, placement: run_per_device(
        exe.program, exe.num_replicas, exe.num_partitions, arrays, ids, placement)


def run_per_device(program, num_replicas: int, num_partitions: int,
                   arrays: list[list[np.ndarray]], ids: list[tuple[int, int]],
                   placement=None) -> list[list[np.ndarray]]:
    """Run `program` once per device, concurrently, device i as process `ids[i]`.

    Every device's arguments are checked against the signature first, so a
    bad argument fails the call before any device starts. With a
    `placement`, `ids` are this process's devices and the grid's other
    processes run in other processes.
    """

    checked = [program.check_arguments(row) for row in arrays]
    function = observer.current.function(program)    # instrumented under jax.profiler.trace

    def job(index: int) -> Callable[[], list]:
        return lambda: function.run(checked[index])

    grid = ProcessGrid(num_replicas, num_partitions, placement=placement)
    return run_processes(grid, [(Process(logical_id, grid), job(i)) for i, logical_id in enumerate(ids)])
