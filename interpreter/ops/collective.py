"""Collectives on a one-process grid, and replica_id / partition_id.

Spec sections "Collective ops", "all_reduce", "all_gather", "reduce_scatter",
"all_to_all", "collective_permute", "collective_broadcast", "replica_id",
"partition_id" (docs/spec.md); `cross-replica-sum` is the deprecated
all_reduce-with-add that StableHLO still parses.

The StableHLO process grid is `num_replicas x num_partitions` processes
(module attributes `mhlo.num_replicas`, `mhlo.num_partitions`). This
interpreter runs exactly one process, `(replica_id 0, partition_id 0)`.
Each op's `validate` computes its process groups with the spec's strategies
(`cross_replica`, `cross_partition`, `cross_replica_and_partition`,
`flattened_ids`), rejects ids outside the grid (InvalidArgument) and grids
of more than one process (Unimplemented: the program needs more devices
than the interpreter has). The kernels then apply the spec's definitions
to a group that holds this process alone.
"""
from __future__ import annotations

import numpy as np

from ...errors import InvalidArgument, Unimplemented
from ..quantization import zeros
from ..registry import register
from .control import as_results

# (replica_id, partition_id) of the one process this interpreter runs.
THIS_PROCESS = (0, 0)


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


# strategy -> (function, which id range the groups index: its size)
STRATEGIES = {
    "cross_replica": (cross_replica, lambda r, p: r),
    "cross_partition": (cross_partition, lambda r, p: p),
    "cross_replica_and_partition": (cross_replica_and_partition, lambda r, p: r),
    "flattened_ids": (flattened_ids, lambda r, p: r * p),
}


def reduction_strategy(op) -> str:
    """all_gather/all_reduce/reduce_scatter: chosen by channel_id and
    use_global_device_ids."""
    global_ids = bool(op.attrs.get("use_global_device_ids", False))
    if channel_id(op) <= 0:
        if global_ids:
            raise op.error("use_global_device_ids requires channel_id > 0", cls=InvalidArgument)
        return "cross_replica"
    return "flattened_ids" if global_ids else "cross_replica_and_partition"


def replica_or_partition_strategy(op) -> str:
    """all_to_all/collective_permute/collective_broadcast: chosen by channel_id."""
    return "cross_replica" if channel_id(op) <= 0 else "cross_partition"


def channel_id(op) -> int:
    handle = op.attrs.get("channel_handle")
    return int(handle.handle) if handle is not None else 0


def process_groups(op, groups, strategy: str, unique: bool = True) -> list[list[tuple[int, int]]]:
    """The op's process groups, after checking the grid can run them.

    Ids must lie in the grid and, if `unique`, appear once in all groups.
    """
    num_replicas = op.module.num_replicas if op.module is not None else 1
    num_partitions = op.module.num_partitions if op.module is not None else 1
    split, id_range = STRATEGIES[strategy]
    size = id_range(num_replicas, num_partitions)
    if not groups:  # no groups: one group of every id
        groups = [list(range(size))]
    flat = [i for group in groups for i in group]
    if any(not 0 <= i < size for i in flat) or (unique and len(set(flat)) != len(flat)):
        raise op.error(f"replica groups {groups} are not unique ids in [0, {size}) "
                       f"({strategy}, {num_replicas} replica(s) x {num_partitions} "
                       f"partition(s))", cls=InvalidArgument)
    if num_replicas * num_partitions != 1:
        raise op.error(f"the program runs on {num_replicas} replica(s) x {num_partitions} "
                       "partition(s); pjrt-ref's interpreter runs a single process",
                       cls=Unimplemented)
    return split(groups, num_replicas, num_partitions)


def group_of_this_process(op, groups, strategy: str):
    """The process group that holds THIS_PROCESS, or None."""
    for group in process_groups(op, groups, strategy):
        if THIS_PROCESS in group:
            return group
    return None


def _validate_grouped(strategy_of):
    """validate: this process must be in exactly one group; cache it."""

    def validate(op) -> None:
        strategy = strategy_of(op)
        group = group_of_this_process(op, id_groups(op.attrs.get("replica_groups")), strategy)
        if group is None:
            raise op.error("this process is in none of the replica groups", cls=InvalidArgument)
        op.cache["group"] = group

    return validate


def converted(op, operands):
    """Operands as the result types' dtypes (all_reduce may promote, C5)."""
    return [np.asarray(x).astype(t.dtype, copy=False) for x, t in zip(operands, op.result_types)]


@register("stablehlo.all_reduce", validate=_validate_grouped(reduction_strategy))
def all_reduce(op, *operands, regions):
    """Spec "all_reduce": reduce each operand across the process group.

    The reduction over a group of one process is a tree with a single leaf,
    the operand itself (converted to the computation's element type), so
    `computation` is never applied.
    """
    return as_results(op, converted(op, operands))


@register("stablehlo.cross-replica-sum", validate=_validate_grouped(lambda op: "cross_replica"))
def cross_replica_sum(op, operand):
    """Deprecated `cross-replica-sum`: all_reduce with addition, across
    replicas; over a group of one it returns the operand."""
    return converted(op, [operand])[0]


@register("stablehlo.all_gather", validate=_validate_grouped(reduction_strategy))
def all_gather(op, *operands):
    """Spec "all_gather": concatenate the group's operands along
    `all_gather_dim`; a group of one concatenates the operand alone."""
    dim = op.attrs["all_gather_dim"]
    gathered = [np.concatenate([x] * len(op.cache["group"]), axis=dim) for x in operands]
    return as_results(op, gathered)


@register("stablehlo.reduce_scatter", validate=_validate_grouped(reduction_strategy))
def reduce_scatter(op, operand, *, regions):
    """Spec "reduce_scatter": reduce across the group, then give process i
    the i-th of `len(group)` parts along `scatter_dimension`; with one
    process the reduction is the operand and the one part is all of it."""
    group = op.cache["group"]
    reduced = operand
    parts = np.split(reduced, len(group), axis=op.attrs["scatter_dimension"])
    return parts[group.index(THIS_PROCESS)].astype(op.result_type.dtype, copy=False)


def _validate_all_to_all(op) -> None:
    _validate_grouped(replica_or_partition_strategy)(op)
    if op.attrs["split_count"] != len(op.cache["group"]):
        raise op.error(f"split_count {op.attrs['split_count']} differs from the process group "
                       f"size {len(op.cache['group'])}", cls=InvalidArgument)


@register("stablehlo.all_to_all", validate=_validate_all_to_all)
def all_to_all(op, *operands):
    """Spec "all_to_all": split each operand into `split_count` parts along
    `split_dimension`, send part i to the i-th process of the group, and
    concatenate what arrives along `concat_dimension`. With one process the
    only part goes back to itself."""
    split_dim, concat_dim = op.attrs["split_dimension"], op.attrs["concat_dimension"]
    index = op.cache["group"].index(THIS_PROCESS)
    results = []
    for x in operands:
        parts = np.split(x, op.attrs["split_count"], axis=split_dim)
        results.append(np.concatenate([parts[index]], axis=concat_dim))
    return as_results(op, results)


def _validate_collective_permute(op) -> None:
    pairs = id_groups(op.attrs.get("source_target_pairs"))
    sources, targets = [p[0] for p in pairs], [p[1] for p in pairs]
    if len(set(sources)) != len(sources) or len(set(targets)) != len(targets):
        raise op.error("source_target_pairs repeat a source or a target", cls=InvalidArgument)
    # Each pair is a two-process "group" [source, target].
    strategy = replica_or_partition_strategy(op)
    groups = process_groups(op, pairs, strategy, unique=False) if pairs else []
    op.cache["source"] = next((g[0] for g in groups if g[1] == THIS_PROCESS), None)


@register("stablehlo.collective_permute", validate=_validate_collective_permute)
def collective_permute(op, operand):
    """Spec "collective_permute": receive the operand of the process whose
    pair targets this one; with no such pair, zeros (for a quantized
    result, `quantize(0)`, i.e. the zero point)."""
    if op.cache["source"] is None:
        return zeros(op.result_type)
    return operand  # the only process that can send here is this one


def _validate_collective_broadcast(op) -> None:
    groups = id_groups(op.attrs.get("replica_groups"))
    op.cache["group"] = group_of_this_process(op, groups, replica_or_partition_strategy(op))


@register("stablehlo.collective_broadcast", validate=_validate_collective_broadcast)
def collective_broadcast(op, *operands):
    """Spec "collective_broadcast": every process of a group receives the
    operands of the group's first process; a process in no group gets
    zeros (for a quantized result, `quantize(0)`)."""
    if op.cache["group"] is None:
        return as_results(op, [zeros(t) for t in op.result_types])
    return as_results(op, operands)  # the group's first process is this one


@register("stablehlo.replica_id")
def replica_id(op):
    """Spec "replica_id": this process's replica id, a 0-d ui32 (always 0)."""
    return np.array(THIS_PROCESS[0], dtype=np.uint32)


@register("stablehlo.partition_id")
def partition_id(op):
    """Spec "partition_id": this process's partition id, a 0-d ui32 (always 0)."""
    return np.array(THIS_PROCESS[1], dtype=np.uint32)
