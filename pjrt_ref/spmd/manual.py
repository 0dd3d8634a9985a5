"""Manual regions of a partitioned execute: the parts of a program written per device.

`shard_map` lowers its body to a region that is written per device (local
shapes, collectives across devices), in one of two spellings:

- Shardy (JAX's default): `sdy.manual_computation(%x) in_shardings=[...]
  out_shardings=[...] manual_axes={"x"} (%local) { ... sdy.return ... }`,
  a region op. The partitioned execute runs the global program once and,
  at this op, cuts each operand into the devices' local shards, runs the
  body once per device on its own thread (process (0, partition) of a
  fresh StableHLO process grid, so the body's collectives meet across
  devices) and puts the local results back together by `out_shardings`
  (`PartitionedRun.run_manual_computation`).
- GSPMD (`jax_use_shardy_partitioner=False`): no region, only markers in the
  data flow: `custom_call @SPMDFullToShardShape` turns a global value into
  the device's local shard, `custom_call @SPMDShardToFullShape` turns local
  values back into a global one, and everything in between is per device.
  `gspmd.py` makes each such region (a call between the markers) into a
  `@pjrt_ref.manual_call` op at load time, which runs like Shardy's
  (`PartitionedRun.run_manual_call`). A region of another shape makes the
  program run whole on every device (`per_device` mode): the global parts
  are computed redundantly (identical on every device), FullToShard cuts
  this device's shard, ShardToFull exchanges the devices' local values
  through the grid's mailbox and assembles them.

A manual region met by a thread that already is one device (a shard_map
nested in another's body, or any manual region in `per_device` mode) cuts
this device's shard, runs in that thread, and puts results back together
from the devices that differ from it only in the region's manual axes.

Kernels in `interpreter/ops/sharding.py` call in here when
`current_partitioned_run()` (`interpreter/partitioned_run.py`) is set, i.e.
inside `pjrt_ref/spmd/partitioner.py`'s runner.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Internal, PjrtRefError, Unimplemented
from pjrt_ref.interpreter.partitioned_run import enter
from pjrt_ref.interpreter.process_grid import Process, ProcessGrid, current_process, run_processes
from pjrt_ref.interpreter.process_hosts import share_among_hosts
from pjrt_ref.interpreter.steps import run_block
from pjrt_ref.interpreter.types import TOKEN, TokenType
from pjrt_ref.spmd.gspmd import CALLEE_ATTR, FULL_SHARDING_ATTR, IN_SHARDINGS_ATTR, OUT_SHARDINGS_ATTR
from pjrt_ref.spmd.layout import (Layout, hlo_manual_groups, parse_hlo_sharding, parse_manual_axes,
                          parse_sharding_per_value, parse_tensor_sharding)


class PartitionedRun:
    """The state of one partitioned execute that manual regions need."""

    def __init__(self, meshes: dict, num_replicas: int, num_partitions: int, *,
                 per_device: bool = False, inside_manual: bool = False, placement=None) -> None:
        self.meshes = meshes
        self.num_replicas = num_replicas
        self.num_partitions = num_partitions
        self.per_device = per_device          # the whole program runs on every device
        self.inside_manual = inside_manual    # this thread runs a manual body
        self.devices = range(num_replicas * num_partitions)
        # Devices spread over processes (process_hosts.HostPlacement), or None;
        # each manual region run gets its own grid, named by how often the
        # program met that op before (the same in every process).
        self.placement = placement
        self._manual_runs: dict = {}

    # -- Shardy ---------------------------------------------------------------
    def run_manual_computation(self, op, operands, body) -> list[np.ndarray]:
        """`sdy.manual_computation`: the body once per device, on local shards.

        The local shard of an operand is cut by the manual axes of its
        `in_shardings` entry only (free axes stay global inside the body, as
        Shardy's partial-manual semantics say); every device runs the body,
        and devices that differ only in free axes compute the same values.
        """
        if self.inside_manual or self.per_device:
            return self.run_manual_on_this_device(op, operands, body)
        in_layouts, out_layouts = _manual_layouts(op, self.meshes)
        local_args = {d: _cut_operands(op, in_layouts, operands, d) for d in self.devices}
        for i, (arg, ttype) in enumerate(zip(local_args[0], body.arg_types)):
            if hasattr(ttype, "shape") and tuple(arg.shape) != tuple(ttype.shape):
                raise op.error(f"operand {i}: the local shard has shape {list(arg.shape)}, "
                               f"the body takes {list(ttype.shape)}")
        return _assemble_results(op, out_layouts, self.run_body_per_device(op, body, local_args))

    def run_manual_on_this_device(self, op, operands, body) -> list[np.ndarray]:
        """A manual computation met by a thread that already is one device (a
        shard_map nested in another one's body): cut this device's local shards,
        run the body here (its collectives meet the other devices' threads),
        then put the result back together from the devices that share this
        device's coordinates on every axis that is not manual here."""
        in_layouts, out_layouts = _manual_layouts(op, self.meshes)
        device = _this_device(self)
        results = [np.asarray(r) for r in body(*_cut_operands(op, in_layouts, operands, device))]
        shared = self.exchange(op, _devices_differing_only_in(op, self.meshes, device), results)
        return _assemble_results(op, out_layouts, shared, view_of=device)

    def sum_partials(self, op, value, axes: frozenset) -> np.ndarray:
        """An unreduced value's sum over mesh `axes` (a sharding that drops
        them, `unreduced.py`): XLA's all-reduce over the devices that differ
        from this one only in those axes, added in device order."""
        mesh = parse_tensor_sharding(op.attrs["sharding"]).mesh(self.meshes)
        device = _this_device(self)
        group = devices_differing_only_in(mesh, device, axes)
        shared = self.exchange(op, group, np.asarray(value))
        total = shared[group[0]].copy()
        for d in group[1:]:
            total += shared[d]
        return total

    def split_into_partials(self, op, value, axes: frozenset) -> np.ndarray:
        """A whole value made unreduced over mesh `axes`: XLA keeps it on the
        devices at coordinate 0 of those axes and gives the others zeros."""
        mesh = parse_tensor_sharding(op.attrs["sharding"]).mesh(self.meshes)
        coordinates = mesh.coordinates()[_this_device(self)]
        if all(coordinates[axis] == 0 for axis in axes):
            return value
        return np.zeros_like(np.asarray(value))

    def run_body_per_device(self, op, body, local_args: dict) -> dict:
        """Run the region `body` once per device, each in its own copy of the
        region's frame (see `run_per_device`)."""
        return self.run_per_device(
            op, lambda device: run_block(body.plan, list(body.frame), local_args[device]))

    def run_per_device(self, op, work) -> dict:
        """`work(device)` as every process of a fresh grid, one thread each,
        marked as inside a manual region; {device: its results} for every
        device (those of other processes come through the transport)."""
        inner = PartitionedRun(self.meshes, self.num_replicas, self.num_partitions,
                               inside_manual=True)

        def job(device: int):
            def run() -> list:
                enter(inner)
                with np.errstate(all="ignore"):
                    return work(device)
            return run
        return run_on_grid(op, self.num_replicas, self.num_partitions,
                           [job(d) for d in self.devices], self._manual_placement(op), everywhere=True)

    def _manual_placement(self, op):
        """The placement of this run of manual region `op`'s grid (None in one process)."""
        if self.placement is None:
            return None
        key = (op.name, op.location)
        run = self._manual_runs[key] = self._manual_runs.get(key, 0) + 1
        return self.placement.child("manual region", op.name, op.location, run)

    # -- GSPMD ----------------------------------------------------------------
    def run_manual_call(self, op, operands) -> list[np.ndarray]:
        """`@pjrt_ref.manual_call` (a GSPMD shard_map, see `gspmd.py`): the
        callee once per device on the local shards its `in_shardings` cut,
        the results put back together by its `out_shardings`."""
        callee = op.module.function(op.attrs[CALLEE_ATTR])
        in_layouts = [_cached_layout(op, text, np.ndim(x), self.devices)
                      for text, x in zip(op.attrs[IN_SHARDINGS_ATTR], operands)]
        out_texts = op.attrs[OUT_SHARDINGS_ATTR]
        out_layouts = [_cached_layout(op, text, len(t.shape), self.devices)
                       for text, t in zip(out_texts, op.result_types)]
        if self.inside_manual or self.per_device:
            # Nested in another manual region: this thread is one device.
            device = _this_device(self)
            results = [np.asarray(r) for r in callee.run(_cut_operands(op, in_layouts, operands, device))]
            group = _manual_group(op, out_texts[0] if out_texts else "{replicated}",
                                  len(op.result_types[0].shape) if out_texts else 0,
                                  self.devices, device)
            shared = self.exchange(op, group, results)
        else:
            shared = self.run_per_device(
                op, lambda device: callee.run(_cut_operands(op, in_layouts, operands, device)))
        return _assemble_results(op, out_layouts, shared)

    def full_to_shard(self, op, operand) -> np.ndarray:
        """`@SPMDFullToShardShape`: this device's shard of the global operand."""
        text = op.attrs.get(FULL_SHARDING_ATTR)
        if text is None:
            raise op.error("SPMDFullToShardShape whose operand has no @Sharding",
                           cls=Unimplemented)
        layout = _cached_layout(op, text, np.ndim(operand), self.devices)
        return layout.cut(np.asarray(operand), _this_device(self), f"operand of {op.name}")

    def shard_to_full(self, op, local) -> np.ndarray:
        """`@SPMDShardToFullShape`: the global value from every device's local value."""
        ttype = op.result_type
        text = op.attrs.get("mhlo.sharding", "{replicated}")
        layout = _cached_layout(op, text, len(ttype.shape), self.devices)
        # Inside an outer manual region (partially manual sharding) only the
        # devices of this device's manual group hold pieces of one value.
        group = _manual_group(op, text, len(ttype.shape), self.devices, _this_device(self))
        shards = self.exchange(op, group, np.asarray(local))
        # A tile several devices hold is this device's own value where it holds
        # it (XLA keeps each device's local value, e.g. pmap's out_axes=None).
        return layout.assemble(shards, tuple(ttype.shape), ttype.dtype, f"result of {op.name}",
                               view_of=_this_device(self))

    def exchange(self, op, group: list[int], value) -> dict:
        """Every device of `group` shares `value` (this thread is one of them);
        returns {device: its value}. The n-th run of `op` meets the n-th run
        of its peers, as collectives do (process_grid's mailbox)."""
        process = current_process()
        grid = process.grid
        # The op by name and location (its MLIR object differs between processes).
        key = ("spmd exchange", op.name, op.location)
        key = key + (process.next_run(key),)
        peers = [divmod(d, self.num_partitions) for d in group]
        grid.share(key + (process.id,), value, readers=peers)
        return {d: grid.mailbox.take(key + (peer,), op.name, op, waiting_for=grid.describe(peer))
                for d, peer in zip(group, peers)}


def run_on_grid(op, num_replicas: int, num_partitions: int, jobs: list, placement=None,
                everywhere: bool = False) -> dict:
    """Run `jobs[d]()` as process `divmod(d, num_partitions)` of a fresh grid,
    one thread each (`process_grid.run_processes`); {d: its result}.

    With a `placement` only this process's devices run here, and the result
    has theirs, or, if `everywhere`, every device's (the processes send
    their results to each other). `op` (or None) names the failure if a job
    raises something other than a pjrt-ref error.
    """

    grid = ProcessGrid(num_replicas, num_partitions, placement=placement)
    local = [d for d in range(len(jobs)) if grid.is_local(divmod(d, num_partitions))]
    try:
        outcomes = run_processes(grid, [(Process(divmod(d, num_partitions), grid), jobs[d])
                                        for d in local])
    except PjrtRefError:
        raise
    except Exception as error:
        message = f"a device failed: {type(error).__name__}: {error}"
        if op is None:
            raise Internal(message) from error
        raise op.error(message) from error
    results = dict(zip(local, outcomes))
    if placement is None or not everywhere:
        return results
    shared = share_among_hosts(grid, "results", {divmod(d, num_partitions): r for d, r in results.items()},
                               f"{op.name if op else 'manual region'}: gathering the devices' results")
    return {replica * num_partitions + partition: value for (replica, partition), value in shared.items()}


def _this_device(run: PartitionedRun) -> int:

    replica, partition = current_process().id
    return replica * run.num_partitions + partition


def _cached_layout(op, text: str, rank: int, devices) -> Layout:
    key = ("spmd_layout", text, rank)
    layout = op.cache.get(key)
    if layout is None:
        layout = op.cache[key] = parse_hlo_sharding(text, rank, devices)
    return layout


def _cut_operands(op, layouts: list[Layout], operands, device: int) -> list[np.ndarray]:
    """`device`'s local shard of each of the op's global operands (a token
    orders effects; every device gets it whole)."""
    return [x if x is TOKEN else layout.cut(np.asarray(x), device, f"operand {i} of {op.name}")
            for i, (layout, x) in enumerate(zip(layouts, operands))]


def _assemble_results(op, layouts: list[Layout], per_device: dict,
                      view_of: int | None = None) -> list[np.ndarray]:
    """Each of the op's global results, from {device: its local results}
    (unreduced ones as device `view_of`'s partial sum)."""
    return [TOKEN if isinstance(t, TokenType) else
            layout.assemble({d: values[i] for d, values in per_device.items()},
                            tuple(t.shape), t.dtype, f"result {i} of {op.name}", view_of=view_of)
            for i, (layout, t) in enumerate(zip(layouts, op.result_types))]


def _manual_group(op, text: str, rank: int, devices: list[int], device: int) -> list[int]:
    """The devices in `device`'s manual group of HloSharding `text`
    (`hlo_manual_groups`): the ones whose values make up one global value.
    Cached on the op, since it is asked on every run."""
    key = ("spmd_manual_group", text, rank, device)
    group = op.cache.get(key)
    if group is None:
        groups = hlo_manual_groups(text, rank, devices)
        group = op.cache[key] = [d for d in devices if groups[d] == groups[device]]
    return group


def _devices_differing_only_in(op, meshes: dict, device: int) -> list[int]:
    """The devices whose mesh coordinates equal `device`'s on every axis
    outside the op's `manual_axes` (they hold the pieces of one value)."""
    manual = parse_manual_axes(op.attrs.get("manual_axes", ""))
    shardings = (parse_sharding_per_value(op.attrs["in_shardings"])
                 + parse_sharding_per_value(op.attrs["out_shardings"]))
    if not shardings:
        return [device]
    return devices_differing_only_in(shardings[0].mesh(meshes), device, manual)


def devices_differing_only_in(mesh, device: int, axes) -> list[int]:
    """The devices of `mesh` whose coordinates equal `device`'s on every axis
    not in `axes`, in increasing order."""
    coordinates = mesh.coordinates()
    mine = {axis: c for axis, c in coordinates[device].items() if axis not in axes}
    return sorted(d for d, coords in coordinates.items()
                  if all(coords[axis] == c for axis, c in mine.items()))


def _manual_layouts(op, meshes: dict) -> tuple[list[Layout], list[Layout]]:
    """The local layouts of a manual computation's operands and results (cached on the op)."""
    cached = op.cache.get("spmd_manual_layouts")
    if cached is None:
        manual = parse_manual_axes(op.attrs.get("manual_axes", ""))
        ins = [s.layout(meshes, keep_axes=manual)
               for s in parse_sharding_per_value(op.attrs["in_shardings"])]
        outs = [s.layout(meshes, keep_axes=manual)
                for s in parse_sharding_per_value(op.attrs["out_shardings"])]
        if len(ins) != len(op.operand_types) or len(outs) != len(op.result_types):
            raise op.error(f"{len(ins)} in_shardings and {len(outs)} out_shardings for "
                           f"{len(op.operand_types)} operand(s) and {len(op.result_types)} "
                           "result(s)")
        cached = op.cache["spmd_manual_layouts"] = (ins, outs)
    return cached
