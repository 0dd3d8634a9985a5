"""Whole-module steps of the per-device rewrite: inlining calls before it,
combining all_reduces after it."""
from __future__ import annotations

from jaxlib.mlir import ir

from pjrt_ref.spmd.per_device.emit import Emitter, NotLowered, element_type
from pjrt_ref.spmd.per_device.ir_helpers import block_ops, nested_ops


# ------------------------------------------------------------------ helpers
def inline_calls(block, functions: dict) -> None:
    """Every `func.call` in `block` (and in its ops' regions) replaced by the
    callee's body, until none is left: the per-device program is one function."""
    for _ in range(10000):
        calls = [op for op in block_ops(block) if op.name == "func.call"]
        if not calls:
            return
        for call in calls:
            _inline_one(call, functions)
    raise NotLowered("calls nest too deeply")


def _inline_one(call, functions: dict) -> None:
    callee = functions.get(str(ir.FlatSymbolRefAttr(call.attributes["callee"]).value))
    if callee is None or len(callee.regions[0].blocks) != 1:
        raise NotLowered("a call to a function that cannot be inlined")
    body = callee.regions[0].blocks[0]
    mapping = {argument: operand for argument, operand in zip(body.arguments, call.operands)}
    with ir.InsertionPoint(call):
        for op in body.operations:
            op = op.operation
            if op.name == "func.return":
                for result, value in zip(call.results, op.operands):
                    result.replace_all_uses_with(mapping.get(value, value))
                break
            copy = op.clone()
            for inner in [copy, *nested_ops(copy)]:
                for i, operand in enumerate(inner.operands):
                    if operand in mapping:
                        inner.operands[i] = mapping[operand]
            for old, new in zip(op.results, copy.results):
                mapping[old] = new
    call.erase()


def combine_all_reduces(block, channels: list[int]) -> None:
    """Adjacent all_reduces over the same groups with the same computation and element
    type become one all_reduce of several operands, as XLA's all-reduce combiner makes
    them (a gradient tree's partial sums are added in one exchange)."""
    run: list = []
    for op in list(block.operations) + [None]:
        op = getattr(op, "operation", op)
        if op is not None and op.name == "stablehlo.all_reduce" and run and _combinable(run[-1], op):
            run.append(op)
            continue
        if len(run) > 1:
            _merge(run, channels)
        run = [op] if op is not None and op.name == "stablehlo.all_reduce" else []


def _combinable(first, second) -> bool:
    def computation(op):
        return [o.operation.name for o in op.regions[0].blocks[0].operations]
    return (str(first.attributes["replica_groups"]) == str(second.attributes["replica_groups"])
            and computation(first) == computation(second)
            and element_type(first.operands[0]) == element_type(second.operands[0])
            and all(operand.owner != first for operand in second.operands))


def _merge(run: list, channels: list[int]) -> None:
    first = run[0]
    operands = [v for op in run for v in op.operands]
    with ir.InsertionPoint(first), first.location:
        merged = Emitter(channels).all_reduce_many(operands, first)
    for result, new in zip([r for op in run for r in op.results], merged.results):
        result.replace_all_uses_with(new)
    for op in run:
        op.erase()

