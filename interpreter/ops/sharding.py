"""Sharding annotations, as seen by a single device.

JAX marks values with `stablehlo.custom_call @Sharding` (GSPMD) or
`sdy.sharding_constraint` (Shardy), and wraps `shard_map` bodies in
`@SPMDFullToShardShape` / `@SPMDShardToFullShape` or `sdy.manual_computation`.
On one device every sharding is the trivial one: each annotation is the
identity and a manual computation is its body run once.
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
    """Shardy's sharding constraint: the identity on one device."""
    return operand


@register("sdy.manual_computation")
def manual_computation(op, *operands, regions):
    """Shardy's manual computation: its body, run once on the whole arrays."""
    results = regions[0](*operands)
    return results[0] if len(results) == 1 else tuple(results)
