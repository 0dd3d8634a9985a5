"""Sharding annotations and manual regions.

JAX marks values with `sdy.sharding_constraint` / `sdy.reshard` (Shardy) or
`stablehlo.custom_call @Sharding` (GSPMD), and wraps `shard_map` bodies in
`sdy.manual_computation` (or `@SPMDFullToShardShape` / `@SPMDShardToFullShape`).

The interpreter computes on global values, so every annotation is the
identity: a sharding says where the pieces of a value live, not what the
value is. A manual computation is different: its body is written per
device. Inside a partitioned execute (`pjrt_ref/spmd.py`) the body runs
once per device on that device's local shards, with collectives meeting
across devices; on its own (one device) the local shard is the whole array
and the body runs once.
"""
from __future__ import annotations

from ..registry import register, register_custom_call


@register_custom_call("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                      "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape",
                      "xla.sdy.FuncResultSharding")
def sharding_annotation(op, *operands):
    """The value itself: on one device the shard is the whole array."""
    return operands[0] if len(operands) == 1 else tuple(operands)


@register("sdy.sharding_constraint", "sdy.reshard")
def sharding_constraint(op, operand):
    """Shardy's sharding constraint / reshard: the identity on global values."""
    return operand


@register("sdy.manual_computation")
def manual_computation(op, *operands, regions):
    """Shardy's manual computation (shard_map): per device in a partitioned
    execute (see `pjrt_ref.spmd.PartitionedRun.run_manual_computation`),
    else its body run once on the whole arrays."""
    from ...spmd import current_partitioned_run

    run = current_partitioned_run()
    if run is not None:
        results = run.run_manual_computation(op, operands, regions[0])
    else:
        results = regions[0](*operands)
    return results[0] if len(results) == 1 else tuple(results)
