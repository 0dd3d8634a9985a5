"""Sharding annotations and manual regions.

JAX marks values with `sdy.sharding_constraint` / `sdy.reshard` (Shardy) or
`stablehlo.custom_call @Sharding` (GSPMD), groups values that must share a
sharding with `sdy.sharding_group` (`shard_alike`), and wraps `shard_map` bodies in
`sdy.manual_computation` (Shardy) or between `@SPMDFullToShardShape` and
`@SPMDShardToFullShape` (GSPMD).

The interpreter computes on global values, so every annotation is the
identity: a sharding says where the pieces of a value live, not what the
value is. A manual region is different: it is written per device. Inside a
partitioned execute (`pjrt_ref/spmd/partitioner.py`, `pjrt_ref/spmd/manual.py`) it runs
per device on that device's local shards, with collectives meeting across
devices. On its own (one device) the local shard is the whole array: the
body runs once, and a shard-shape marker that would change the shape is an
error.
"""
from __future__ import annotations

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.partitioned_run import current_partitioned_run
from pjrt_ref.interpreter.registry import register, register_custom_call


@register_custom_call("Sharding", "xla.sdy.FuncResultSharding", "InspectSharding")
def sharding_annotation(op, *operands):
    """The value itself: a sharding does not change a global value. (JAX's
    `inspect_array_sharding` callback ran when the program was partitioned:
    pjrt_ref/spmd/inspect_sharding.py.)"""
    return operands[0] if len(operands) == 1 else tuple(operands)


def _same_shape_identity(op, operand):
    """On one device a full-to-shard (or back) marker is the identity, if the
    shard is the whole array; otherwise the program needs several devices."""
    if tuple(getattr(operand, "shape", ())) != tuple(op.result_type.shape):
        raise op.error(f"{op.attrs.get('call_target_name')} changes the shape "
                       f"{list(operand.shape)} -> {list(op.result_type.shape)}: the program "
                       "is partitioned and needs a partitioned execute (PJRT_REF_NUM_DEVICES)",
                       cls=Unimplemented)
    return operand


@register_custom_call("SPMDFullToShardShape", "xla.sdy.GlobalToLocalShape")
def full_to_shard_shape(op, operand):
    """GSPMD's entry into a manual region: this device's shard of the value."""
    run = current_partitioned_run()
    if run is not None and run.per_device:
        return run.full_to_shard(op, operand)
    return _same_shape_identity(op, operand)


@register_custom_call("SPMDShardToFullShape", "xla.sdy.LocalToGlobalShape")
def shard_to_full_shape(op, operand):
    """GSPMD's exit from a manual region: the global value from every device's shard."""
    run = current_partitioned_run()
    if run is not None and run.per_device:
        return run.shard_to_full(op, operand)
    return _same_shape_identity(op, operand)


@register_custom_call("pjrt_ref.manual_call")
def manual_call(op, *operands):
    """A GSPMD shard_map made into one op at load time (`pjrt_ref/spmd/gspmd.py`):
    its callee per device, inside a partitioned execute only."""
    run = current_partitioned_run()
    if run is None:
        raise op.error("a manual region needs a partitioned execute", cls=Unimplemented)
    results = run.run_manual_call(op, operands)
    return results[0] if len(results) == 1 else tuple(results)


@register("sdy.sharding_constraint", "sdy.reshard")
def sharding_constraint(op, operand):
    """Shardy's sharding constraint / reshard: the identity on global values,
    except where it drops unreduced axes of its operand (marked at load time,
    `pjrt_ref/spmd/unreduced.py`): there each device's partial sums are
    added up over those axes, XLA's all-reduce; where it adds unreduced axes,
    the devices off coordinate 0 of them hold zeros."""
    run = current_partitioned_run()
    if run is None or not run.per_device:
        return operand
    if "pjrt_ref.reduce_axes" in op.attrs:
        return run.sum_partials(op, operand, frozenset(op.attrs["pjrt_ref.reduce_axes"].split(",")))
    if "pjrt_ref.unreduce_axes" in op.attrs:
        return run.split_into_partials(op, operand,
                                       frozenset(op.attrs["pjrt_ref.unreduce_axes"].split(",")))
    return operand


@register("sdy.sharding_group")
def sharding_group(op, operand):
    """Shardy's sharding group (`jax.experimental.shard_alike`): values of one
    group share a sharding. It has no results and changes no value."""
    return ()


@register("sdy.manual_computation")
def manual_computation(op, *operands, regions):
    """Shardy's manual computation (shard_map): per device in a partitioned
    execute (`PartitionedRun.run_manual_computation`), else its body run
    once on the whole arrays."""
    run = current_partitioned_run()
    if run is not None:
        results = run.run_manual_computation(op, operands, regions[0])
    else:
        results = regions[0](*operands)
    return results[0] if len(results) == 1 else tuple(results)


@register_custom_call("CustomSPMDPartitioning")
def custom_partitioning(op, *operands):
    """`jax.experimental.custom_partitioning` on several devices. The body is not
    in the program: only the callbacks the framework registered know it, and
    the partitioner replaces this call by their per-device module at load time
    (pjrt_ref/spmd/custom_partitioning.py). Reaching it here means the program
    was not partitioned (compiled for one partition) or no callbacks were
    registered."""
    raise op.error("CustomSPMDPartitioning runs only in a program partitioned over several devices, "
                   "through the partition callbacks its framework registered (PJRT Custom "
                   "Partitioner extension)", cls=Unimplemented)
