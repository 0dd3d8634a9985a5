"""Collectives, replica_id and partition_id, on the StableHLO process grid.

Spec sections "Collective ops", "all_reduce", "all_gather", "reduce_scatter",
"all_to_all", "collective_permute", "collective_broadcast", "replica_id",
"partition_id" (docs/spec.md); `cross-replica-sum` is the deprecated
all_reduce-with-add that StableHLO still parses.

A program run on its own is the single process `(0, 0)`: a module that asks
for more (`mhlo.num_replicas` x `mhlo.num_partitions` > 1) loads, but its
collectives fail when it is called directly. pjrt-ref runs such a program on
several devices (`pjrt_ref/model/multi_device.py`), and `interpreter.run_parallel`
(see `process_grid`) runs the processes of a grid; either way the
processes are threads, and every kernel here follows the spec for any group:
each op splits the grid into process groups with the spec's strategies
(`cross_replica`, `cross_partition`, `cross_replica_and_partition`,
`flattened_ids`), then the processes of a group exchange values through the
grid's mailbox.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import InvalidArgument, Unimplemented
from pjrt_ref.interpreter.quantization import zeros
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.process_grid import Process, current_process
from pjrt_ref.interpreter.ops.control import as_results
from pjrt_ref.interpreter.ops.reduce_regions import is_elementwise, tree_reduce


def id_groups(ids) -> list[list[int]]:
    """A 2-D id attribute as a list of groups; XLA pads ragged rows with -1."""
    array = np.asarray(ids if ids is not None else np.zeros((0, 0)), dtype=np.int64)
    if array.size == 0:
        return []
    return [[int(i) for i in row if i >= 0] for row in array.reshape(len(array), -1)]


def cross_replica(groups, num_replicas: int, num_partitions: int):
    """Spec "cross_replica": each replica group, once per partition."""
    return [[(r, p) for r in group] for group in groups for p in range(num_partitions)]


def cross_partition(groups, num_replicas: int, num_partitions: int):
    """Spec "cross_partition": each partition group, once per replica."""
    return [[(r, p) for p in group] for group in groups for r in range(num_replicas)]


def cross_replica_and_partition(groups, num_replicas: int, num_partitions: int):
    """Spec "cross_replica_and_partition": a replica group across all partitions."""
    return [[(r, p) for p in range(num_partitions) for r in group] for group in groups]


def flattened_ids(groups, num_replicas: int, num_partitions: int):
    """Spec "flattened_ids": ids are `replica_id * num_partitions + partition_id`."""
    return [[divmod(i, num_partitions) for i in group] for group in groups]


# strategy -> (function, the size of the id range its groups index)
STRATEGIES = {
    "cross_replica": (cross_replica, lambda r, p: r),
    "cross_partition": (cross_partition, lambda r, p: p),
    "cross_replica_and_partition": (cross_replica_and_partition, lambda r, p: r),
    "flattened_ids": (flattened_ids, lambda r, p: r * p),
}


def channel_id(op) -> int:
    handle = op.attrs.get("channel_handle")
    return int(handle.handle) if handle is not None else 0


def reduction_strategy(op) -> str:
    """all_gather/all_reduce/reduce_scatter: by channel_id and use_global_device_ids."""
    if channel_id(op) <= 0:
        return "cross_replica"
    return ("flattened_ids" if op.attrs.get("use_global_device_ids")
            else "cross_replica_and_partition")


def replica_or_partition_strategy(op) -> str:
    """all_to_all/collective_permute/collective_broadcast: by channel_id."""
    return "cross_replica" if channel_id(op) <= 0 else "cross_partition"


def grid_process(op) -> Process:
    """The running process; a standalone run of a multi-process module is an error."""
    process = current_process()
    module = op.module
    if process.standalone and module is not None and module.num_replicas * module.num_partitions > 1:
        raise op.error(f"the program runs on {module.num_replicas} replica(s) x "
                       f"{module.num_partitions} partition(s), but it was called as one "
                       "process; run it on that many pjrt_ref devices "
                       "(PJRT_REF_NUM_DEVICES) or under interpreter.run_parallel",
                       cls=Unimplemented)
    return process


def process_groups(op, groups, strategy: str, grid, unique: bool = True):
    """The op's process groups on `grid`; ids must lie in the grid and, if
    `unique`, appear once. No groups means one group of every id."""
    split, id_range = STRATEGIES[strategy]
    size = id_range(grid.num_replicas, grid.num_partitions)
    groups = groups or [list(range(size))]
    flat = [i for group in groups for i in group]
    if any(not 0 <= i < size for i in flat) or (unique and len(set(flat)) != len(flat)):
        raise op.error(f"replica groups {groups} are not unique ids in [0, {size}) "
                       f"({strategy}, {grid.num_replicas} replica(s) x {grid.num_partitions} "
                       "partition(s))", cls=InvalidArgument)
    return split(groups, grid.num_replicas, grid.num_partitions)


def group_of(op, process, strategy: str):
    """The group of `op`'s process groups that holds `process`, or None."""
    groups = id_groups(op.attrs.get("replica_groups"))
    for group in process_groups(op, groups, strategy, process.grid):
        if process.id in group:
            return group
    return None


def required_group_of(op, process, strategy: str):
    group = group_of(op, process, strategy)
    if group is None:
        raise op.error(f"process {process.id} is in none of the replica groups",
                       cls=InvalidArgument)
    return group


def exchange(op, process, group, values):
    """Every process of `group` shares `values`; returns theirs in group order."""
    key = (op.name, channel_id(op), tuple(group))
    key = key + (process.next_run(key),)
    process.grid.share(key + (process.id,), values, readers=group)
    shared = [take(op, process, key + (peer,), peer) for peer in group]
    check_same_types(op, process, group, values, shared)
    return shared


def take(op, process, key, peer):
    """The value `peer` posted under `key`; DEADLINE_EXCEEDED naming both if it never comes."""
    grid = process.grid
    return grid.mailbox.take(key, op.name, op,
                             waiting_for=f"{grid.describe(peer)} [this is {grid.describe(process.id)}]")


def check_same_types(op, process, group, values, shared) -> None:
    """The peers' operands must have this process's shapes and element types:
    processes that run different programs (possible across hosts) meet at one
    collective with different operands. The error names both processes."""
    mine = [(np.shape(v), np.asarray(v).dtype) for v in values]
    for peer, theirs in zip(group, shared):
        if [(np.shape(v), np.asarray(v).dtype) for v in theirs] != mine:
            grid = process.grid
            raise op.error(f"{grid.describe(peer)} brought {_types_text(theirs)} but "
                           f"{grid.describe(process.id)} brought {_types_text(values)}: "
                           "the processes do not run the same program", cls=InvalidArgument)


def _types_text(values) -> str:
    return ", ".join(f"{np.asarray(v).dtype}{list(np.shape(v))}" for v in values)


def reduce_across(region, dtype, values: list[np.ndarray]) -> np.ndarray:
    """Combine the group's `values` element-wise with `region` (spec: some
    binary tree whose in-order traversal is the group's order)."""
    stacked = np.stack([np.asarray(v, dtype=dtype) for v in values], axis=-1)
    if is_elementwise(region.plan):
        return tree_reduce(region, [dtype], [stacked])[0]
    result = np.empty(stacked.shape[:-1], dtype=dtype)
    for index in np.ndindex(*result.shape):
        acc = np.asarray(stacked[index + (0,)])
        for k in range(1, stacked.shape[-1]):
            acc = np.asarray(region(acc, np.asarray(stacked[index + (k,)]))[0], dtype=dtype)
        result[index] = acc
    return result


def all_reduce_values(op, operands, region, strategy: str) -> list[np.ndarray]:
    process = grid_process(op)
    group = required_group_of(op, process, strategy)
    shared = exchange(op, process, group, operands)
    return [reduce_across(region, t.dtype, [values[i] for values in shared])
            for i, t in enumerate(op.result_types)]


@register("stablehlo.all_reduce")
def all_reduce(op, *operands, regions):
    """Spec "all_reduce": each result is the group's operands combined by
    `computation` (converted to its element type first). Over a group of
    one process that is the operand itself: the region never runs."""
    return as_results(op, all_reduce_values(op, operands, regions[0], reduction_strategy(op)))


@register("stablehlo.cross-replica-sum")
def cross_replica_sum(op, operand):
    """Deprecated `cross-replica-sum`: all_reduce with addition across replicas."""
    process = grid_process(op)
    group = required_group_of(op, process, "cross_replica")
    shared = exchange(op, process, group, [operand])
    return np.asarray(sum(values[0] for values in shared), dtype=op.result_type.dtype)


@register("stablehlo.all_gather")
def all_gather(op, *operands):
    """Spec "all_gather": concatenate the group's operands along `all_gather_dim`."""
    process = grid_process(op)
    group = required_group_of(op, process, reduction_strategy(op))
    shared = exchange(op, process, group, operands)
    dim = op.attrs["all_gather_dim"]
    return as_results(op, [np.concatenate([values[i] for values in shared], axis=dim)
                           for i in range(len(operands))])


@register("stablehlo.reduce_scatter")
def reduce_scatter(op, operand, *, regions):
    """Spec "reduce_scatter": all_reduce, then process i of the group keeps
    the i-th of `len(group)` equal parts along `scatter_dimension`."""
    process = grid_process(op)
    strategy = reduction_strategy(op)
    group = required_group_of(op, process, strategy)
    shared = exchange(op, process, group, [operand])
    reduced = reduce_across(regions[0], op.result_type.dtype, [values[0] for values in shared])
    parts = np.split(reduced, len(group), axis=op.attrs["scatter_dimension"])
    return parts[group.index(process.id)]


@register("stablehlo.all_to_all")
def all_to_all(op, *operands):
    """Spec "all_to_all": every sender splits its operands into `split_count`
    parts along `split_dimension`; receiver i concatenates the senders'
    i-th parts, in group order, along `concat_dimension`."""
    process = grid_process(op)
    group = required_group_of(op, process, replica_or_partition_strategy(op))
    if op.attrs["split_count"] != len(group):
        raise op.error(f"split_count {op.attrs['split_count']} differs from the process "
                       f"group size {len(group)}", cls=InvalidArgument)
    shared = exchange(op, process, group, operands)
    receiver = group.index(process.id)
    split_dim, concat_dim = op.attrs["split_dimension"], op.attrs["concat_dimension"]
    return as_results(op, [
        np.concatenate([np.split(values[i], len(group), axis=split_dim)[receiver]
                        for values in shared], axis=concat_dim)
        for i in range(len(operands))])


@register("stablehlo.collective_permute")
def collective_permute(op, operand):
    """Spec "collective_permute": each `[source, target]` pair sends the
    source's operand to the target. A process that no pair targets gets
    zeros (for a quantized result, `quantize(0)`, i.e. the zero point)."""
    process = grid_process(op)
    pairs = id_groups(op.attrs.get("source_target_pairs"))
    for column in zip(*pairs):
        if len(set(column)) != len(column):
            raise op.error("source_target_pairs repeat a source or a target",
                           cls=InvalidArgument)
    links = process_groups(op, pairs, replica_or_partition_strategy(op), process.grid,
                           unique=False) if pairs else []
    key = (op.name, channel_id(op), tuple(map(tuple, pairs)))
    key = key + (process.next_run(key),)
    for source, target in links:
        if source == process.id:
            process.grid.share(key + (source,), operand, readers=[target])
    source = next((s for s, t in links if t == process.id), None)
    if source is None:
        return zeros(op.result_type)
    received = take(op, process, key + (source,), source)
    check_same_types(op, process, [source], [operand], [[received]])
    return received


@register("stablehlo.collective_broadcast")
def collective_broadcast(op, *operands):
    """Spec "collective_broadcast": every process of a group receives the
    operands of the group's first process; a process in no group gets zeros
    (for a quantized result, `quantize(0)`)."""
    process = grid_process(op)
    group = group_of(op, process, replica_or_partition_strategy(op))
    if group is None:
        return as_results(op, [zeros(t) for t in op.result_types])
    key = (op.name, channel_id(op), tuple(group))
    key = key + (process.next_run(key),)
    if process.id == group[0]:
        process.grid.share(key, operands, readers=group)
    received = take(op, process, key, group[0])
    check_same_types(op, process, group[:1], operands, [received])
    return as_results(op, received)


@register("stablehlo.replica_id")
def replica_id(op):
    """Spec "replica_id": this process's replica id, a 0-d ui32."""
    return np.array(current_process().id[0], dtype=np.uint32)


@register("stablehlo.partition_id")
def partition_id(op):
    """Spec "partition_id": this process's partition id, a 0-d ui32."""
    return np.array(current_process().id[1], dtype=np.uint32)
