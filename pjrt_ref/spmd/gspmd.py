"""GSPMD's manual regions, made into region-like calls at load time.

With `jax_use_shardy_partitioner=False`, JAX lowers a `shard_map` without a
region op: the body is a function, and the data flow around its call marks
where per-device code starts and ends:

    %g = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{devices=[4,1]<=[4]}"}
    %l = stablehlo.custom_call @SPMDFullToShardShape(%g) {mhlo.sharding = "{manual}"}
    %r = call @shmap_body(%l)                  // per device: local shapes, collectives
    %m = stablehlo.custom_call @Sharding(%r) {mhlo.sharding = "{manual}"}
    %y = stablehlo.custom_call @SPMDShardToFullShape(%m) {mhlo.sharding = "{replicated}"}

`make_manual_calls` rewrites each such group into one op that says the same
thing the way Shardy's `sdy.manual_computation` does,

    %y = stablehlo.custom_call @pjrt_ref.manual_call(%g)
           {pjrt_ref.callee = "shmap_body",
            pjrt_ref.in_shardings = ["{devices=[4,1]<=[4]}"],
            pjrt_ref.out_shardings = ["{replicated}"]}

so the partitioned execute can run the global program once and only the
callee per device (`manual.PartitionedRun.run_manual_call`). A group
that does not have this shape is left alone; the program then runs whole on
every device instead (`annotate_full_to_shard` and the `per_device` mode).
"""
from __future__ import annotations

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.attributes import string_value
from pjrt_ref.interpreter.loader import make_context

MANUAL_CALL = "pjrt_ref.manual_call"
CALLEE_ATTR = "pjrt_ref.callee"
IN_SHARDINGS_ATTR = "pjrt_ref.in_shardings"
OUT_SHARDINGS_ATTR = "pjrt_ref.out_shardings"
# What `annotate_full_to_shard` gives every SPMDFullToShardShape: the
# HloSharding of its (global) operand, read from the @Sharding op before it.
FULL_SHARDING_ATTR = "pjrt_ref.full_sharding"


def make_manual_calls(text: str) -> tuple[str, bool]:
    """(`text` with every recognised manual region turned into a
    `@pjrt_ref.manual_call`, whether any SPMDFullToShardShape is left)."""
    from jaxlib.mlir import ir

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        calls = [op for op in walk(module.operation) if op.name == "func.call"
                 and op.operands and all(custom_call_target(_producer(v)) == "SPMDFullToShardShape"
                                         for v in op.operands)]
        for call in calls:
            _rewrite(call)
        left = any(custom_call_target(op) == "SPMDFullToShardShape" for op in walk(module.operation))
        return str(module), left


def _rewrite(call) -> None:
    """Replace FullToShard -> call -> Sharding -> ShardToFull by one manual call,
    if every result of the call goes through exactly that pair of ops."""
    from jaxlib.mlir import ir

    exits = []
    for result in call.results:
        users = [use.owner for use in result.uses]
        if len(users) != 1 or custom_call_target(users[0]) != "Sharding":
            return
        marker = users[0]
        after = [use.owner for use in marker.results[0].uses]
        if len(after) != 1 or custom_call_target(after[0]) != "SPMDShardToFullShape":
            return
        exits.append((marker, after[0]))
    entries = [_producer(v) for v in call.operands]
    globals_ = [entry.operands[0] for entry in entries]
    in_shardings = [_sharding_of(_producer(v)) for v in globals_]
    if any(s is None for s in in_shardings):
        return
    out_shardings = [attribute_text(exit_.attributes["mhlo.sharding"]) for _, exit_ in exits]
    with ir.InsertionPoint(call), call.location:
        manual = ir.Operation.create(
            "stablehlo.custom_call", results=[exit_.results[0].type for _, exit_ in exits],
            operands=list(globals_), attributes={
                "call_target_name": ir.StringAttr.get(MANUAL_CALL),
                CALLEE_ATTR: ir.StringAttr.get(attribute_text(call.attributes["callee"])),
                IN_SHARDINGS_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(s) for s in in_shardings]),
                OUT_SHARDINGS_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(s) for s in out_shardings]),
            })
    for index, (marker, exit_) in enumerate(exits):
        exit_.results[0].replace_all_uses_with(manual.results[index])
        exit_.erase()
        marker.erase()
    call.erase()
    for entry in entries:
        if not list(entry.results[0].uses):
            entry.erase()


def annotate_full_to_shard(text: str) -> str:
    """`text` with each `@SPMDFullToShardShape` carrying the sharding of its
    operand (`FULL_SHARDING_ATTR`), read from the `@Sharding` op that makes
    the operand: in the per-device mode the kernel must know which tile of
    the global value is this device's, and only that producer says."""
    from jaxlib.mlir import ir

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        for op in walk(module.operation):
            if custom_call_target(op) != "SPMDFullToShardShape":
                continue
            sharding = _sharding_of(_producer(op.operands[0]))
            if sharding is None:
                raise Unimplemented("SPMDFullToShardShape whose operand is not made by a "
                                    "@Sharding custom call")
            op.attributes[FULL_SHARDING_ATTR] = ir.StringAttr.get(sharding)
        return str(module)


def walk(op):
    """`op` and every op nested in it, outer first."""
    yield op
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield from walk(child.operation)


def custom_call_target(op) -> str | None:
    if getattr(op, "name", None) != "stablehlo.custom_call":
        return None
    return attribute_text(op.attributes["call_target_name"])


def _producer(value):
    """The op that defines `value` (None for a block argument)."""
    owner = value.owner
    owner = getattr(owner, "operation", owner)
    return owner if hasattr(owner, "name") else None


def _sharding_of(op) -> str | None:
    """The `mhlo.sharding` of a `@Sharding` custom call, else None."""
    if custom_call_target(op) != "Sharding" or "mhlo.sharding" not in op.attributes:
        return None
    return attribute_text(op.attributes["mhlo.sharding"])


def attribute_text(attr) -> str:
    """An attribute as a Python string: a string's value, a symbol
    reference's name (no `@`), anything else as MLIR prints it."""
    from jaxlib.mlir import ir

    try:
        return string_value(ir.StringAttr(attr))
    except (ValueError, TypeError):
        try:
            return ir.FlatSymbolRefAttr(attr).value
        except (ValueError, TypeError):
            return str(attr)
