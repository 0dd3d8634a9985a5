"""Unreduced values: where a program's partial sums are summed.

JAX's explicit sharding can leave a value *unreduced* over mesh axes
(`P(unreduced={'x'})`, Shardy's `#sdy.sharding<@mesh, [{}], unreduced={"x"}>`):
each device holds a partial value and the logical value is their sum over
those axes. XLA keeps such a value as it is: a `shard_map` whose
out_specs say unreduced inserts no all-reduce (each device returns its
own local value), an argument sharded that way arrives as each device's
partial, and the sum is only computed where a sharding drops the axis
(`jax.reshard(x, P())`, a `sdy.sharding_constraint` or `sdy.reshard` whose
sharding is not unreduced over it), as one all-reduce over the dropped axes.

pjrt-ref runs a program holding unreduced shardings on every device
(`spmd.PartitionedRunner`'s per-device mode: each device sees its own
partial sums where the values are unreduced). The kernels cannot see
where a value came from, so this module finds the reduction points at
load time: every constraint or reshard whose operand is unreduced over
axes the constraint's sharding is not, found by following the operand back
through element-wise and shape ops, calls and manual computations to a
sharding that says. The op gets the attribute `pjrt_ref.reduce_axes`
("x,y"), which `interpreter/ops/sharding.py` turns into a sum over the
devices that differ only in those axes.

The other way round (`jax.reshard(x, P(unreduced={'x'}))`, or a gradient
seeded with ones that JAX marks unreduced), a constraint makes a whole
value unreduced over new axes: XLA keeps the value on the devices at
coordinate 0 of those axes and zeros on the others, so the partial sums
still add up to the value. Such a constraint gets `pjrt_ref.unreduce_axes`.
"""
from __future__ import annotations

from pjrt_ref.spmd.gspmd import attribute_text
from pjrt_ref.spmd.layout import parse_sharding_per_value, parse_tensor_sharding

REDUCE_AXES_ATTR = "pjrt_ref.reduce_axes"
UNREDUCE_AXES_ATTR = "pjrt_ref.unreduce_axes"
_CONSTRAINTS = ("sdy.sharding_constraint", "sdy.reshard")
# Ops through which a partial sum stays a partial sum over the same axes
# (the linear ops JAX's unreduced rules allow, and pure data movement).
_LINEAR = frozenset("stablehlo." + name for name in (
    "add subtract negate multiply convert reshape transpose broadcast_in_dim "
    "bitcast_convert dot_general dot slice concatenate pad reverse copy").split())


def mark_reductions(module, entry: str) -> bool:
    """Set `pjrt_ref.reduce_axes` / `pjrt_ref.unreduce_axes` on every
    constraint of `module` (an MLIR module, changed in place) that drops or
    adds unreduced axes; whether there was one."""
    from jaxlib.mlir import ir

    functions = {_name(op): op for op in _ops(module.body) if op.name == "func.func"}
    finder = _UnreducedAxes(functions, entry)
    marked = False
    for func in functions.values():
        for op in _walk(func):
            if op.name not in _CONSTRAINTS:
                continue
            target = _unreduced_names(attribute_text(op.attributes["sharding"]))
            operand = finder.of(op.operands[0])
            for name, axes in ((REDUCE_AXES_ATTR, operand - target),
                               (UNREDUCE_AXES_ATTR, target - operand)):
                if axes:
                    op.attributes[name] = ir.StringAttr.get(",".join(sorted(axes)))
                    marked = True
    return marked


class _UnreducedAxes:
    """The mesh axes a value is unreduced over, from the shardings that say so."""

    def __init__(self, functions: dict, entry: str) -> None:
        self.functions = functions
        self.entry = entry

    def of(self, value, depth: int = 0) -> frozenset:
        from jaxlib.mlir import ir

        if depth > 200:
            return frozenset()
        value = value.maybe_downcast()
        if isinstance(value, ir.BlockArgument):
            return self._of_argument(value, depth)
        op = value.owner
        op = getattr(op, "operation", op)
        if op.name == "sdy.manual_computation":
            shardings = parse_sharding_per_value(attribute_text(op.attributes["out_shardings"]))
            return _names(shardings[value.result_number].unreduced)
        if op.name in _CONSTRAINTS:
            return _unreduced_names(attribute_text(op.attributes["sharding"]))
        if op.name == "func.call":
            callee = self.functions.get(attribute_text(op.attributes["callee"]).lstrip("@"))
            if callee is None:
                return frozenset()
            returned = _return_op(callee).operands[value.result_number]
            return self.of(returned, depth + 1)
        if op.name in _LINEAR:
            return frozenset().union(*(self.of(x, depth + 1) for x in op.operands))
        return frozenset()

    def _of_argument(self, argument, depth: int) -> frozenset:
        """An entry argument's from its sharding; a callee's from its one call site."""
        owner = argument.owner.owner
        owner = getattr(owner, "operation", owner)
        if owner.name != "func.func":
            return frozenset()
        name = _name(owner)
        if name == self.entry:
            if "arg_attrs" not in owner.attributes:
                return frozenset()
            attrs = owner.attributes["arg_attrs"][argument.arg_number]
            text = attribute_text(attrs)
            return _unreduced_names(text) if "sdy.sharding" in text else frozenset()
        calls = [op for func in self.functions.values() for op in _walk(func)
                 if op.name == "func.call"
                 and attribute_text(op.attributes["callee"]).lstrip("@") == name]
        if len(calls) != 1:
            return frozenset()
        return self.of(calls[0].operands[argument.arg_number], depth + 1)


def _unreduced_names(text: str) -> frozenset:
    """The unreduced axes of the Shardy sharding inside `text` (none without one)."""
    start = text.find("<@")
    if start < 0 or "unreduced" not in text:
        return frozenset()
    return _names(parse_tensor_sharding(text[start:_sharding_end(text, start) + 1]).unreduced)


def _sharding_end(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        depth += {"<": 1, ">": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text) - 1


def _names(axes) -> frozenset:
    return frozenset(axis.name for axis in axes)


def _name(func) -> str:
    return attribute_text(func.attributes["sym_name"]).strip('"')


def _ops(block):
    return [getattr(op, "operation", op) for op in block.operations]


def _walk(op):
    """Every op nested in `op` (regions of regions), in order."""
    for region in op.regions:
        for block in region.blocks:
            for inner in _ops(block):
                yield inner
                yield from _walk(inner)


def _return_op(func):
    block = func.regions[0].blocks[0]
    return _ops(block)[-1]
