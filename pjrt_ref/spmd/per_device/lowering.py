"""The per-device program: an annotated global program rewritten for one device.

What XLA's SPMD partitioner does, in the simplest form that is still a real
partitioning (each device computes its own tiles and only talks to the
others where the program needs it):

1. Every value gets a layout (`Layout`: which tile each device holds, and
   for an unreduced value which partial sum). Entry arguments and results
   have the runner's; an op's result gets the layout its annotation or a
   later sharding constraint asks for (the *wanted* layout, found by one
   backward walk, `_find_wanted`) where its rule can make it directly, else
   the layout its operands give it. A loop-carried value takes the layout
   its body makes (the rewrite is repeated until those settle).
2. Each op is rewritten to work on local tiles (its result types become the
   tile types), after its operands are moved to the layouts it needs
   (`reshard`: an `all_gather` per dimension that must become whole, a
   `dynamic_slice` at the device's offsets for each that must become split,
   an `all_reduce` where partial sums must be added). The rules are in
   `data_rules.py` (element-wise and data-movement ops) and
   `reduction_rules.py` (reduce, dot_general, scatter-add, custom calls).
3. Any op without a rule (convolution, fft, custom calls without a sharding
   rule, ...) runs on whole operands: they are gathered first, and its
   results are whole on every device. Always correct, and what the program
   text then shows (`all-gather` in XLA's spelling).

The result is an ordinary StableHLO module with local shapes, collectives
and `partition_id`, which every device runs on its own thread (the process
grid of the spec's collectives). Programs with per-device parts of their
own (manual computations), collectives, side effects or uneven splits are
not rewritten (`NotLowered`); the runner runs those whole.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from jaxlib.mlir import ir

from pjrt_ref.interpreter.attributes import convert_attribute
from pjrt_ref.interpreter.loader import parse_module
from pjrt_ref.spmd.gspmd import custom_call_target
from pjrt_ref.spmd.layout import Layout, replicated
from pjrt_ref.spmd.op_kinds import GROUP_SHARDING
from pjrt_ref.spmd.per_device.data_rules import ELEMENTWISE, SAME_VALUE_CALLS, DataMovementRules, projected
from pjrt_ref.spmd.per_device.emit import Emitter, NotLowered, evenly_split, local_type, shape_of
from pjrt_ref.spmd.per_device.groups import NoGroups, groups_over, is_split, partial_groups, same_split, tiles_only, without_dims
from pjrt_ref.spmd.per_device.ir_helpers import block_ops, is_tensor, ints, nested_ops, terminator
from pjrt_ref.spmd.per_device.module_passes import combine_all_reduces, inline_calls
from pjrt_ref.spmd.per_device.reduction_rules import ReductionRules


# What a program carries that keeps it whole (see the module docstring).
_KEPT_WHOLE = re.compile(
    r"sdy\.manual_computation|SPMDFullToShardShape|SPMDShardToFullShape|"
    r"stablehlo\.(?:all_gather|all_reduce|all_to_all|reduce_scatter|collective_permute|collective_broadcast|"
    r"partition_id|replica_id|send|recv|infeed|outfeed|after_all|optimization_barrier)\b|"
    r"!stablehlo\.token|sdy\.named_computation|CustomSPMDPartitioning|"
    r"called_computations|xla_python|xla_ffi_python|PyCapsule|pjrt_ref\.manual_call")

# Rewrites of a program with loops: a loop-carried value takes the layout its body
# made in the pass before, until the layouts settle.
_LOOP_PASSES = 4

# The global program's sharding annotations, gone from the per-device program;
# arguments and results also lose their frontend attributes (Shardy's own notes).
_SHARDING_ATTRIBUTES = ("sdy.sharding", "mhlo.sharding", "sdy.sharding_rule", "sdy.sharding_origins")
_SIGNATURE_ATTRIBUTES = _SHARDING_ATTRIBUTES + ("mhlo.frontend_attributes",)


def lower_per_device(text: str, context, *, entry: str, devices: list[int],
                     argument_layouts: list[Layout], result_layouts: list[Layout],
                     annotated_layouts, constraint_layout, open_results: list[bool] = ()) -> "PerDeviceProgram":
    """The per-device program of the annotated module `text` (see the module
    docstring); `NotLowered` when the program stays whole.

    Results are moved to `result_layouts[i]`, except that a result JAX left
    to the compiler (`open_results[i]`) for which the runner's propagation
    found no split keeps the layout its value has in the per-device program
    (a custom call's batch dimension, say), as XLA's propagation gives it one.

    `annotated_layouts(op)`: the layouts an op's own sharding annotation
    gives its results (None without one); `constraint_layout(op, value)`:
    the layout a sharding constraint pins (None where it leaves some open).
    """
    kept_whole = _KEPT_WHOLE.search(text)
    if kept_whole:
        raise NotLowered(f"the program has {kept_whole.group(0)}")

    loops: dict = {}
    with context, ir.Location.unknown(context):
        for _ in range(_LOOP_PASSES):
            module = parse_module(text, context)
            lowering = _Lowering(module, entry, devices, annotated_layouts, constraint_layout, loops)
            layouts = lowering.run(argument_layouts, result_layouts, list(open_results))
            if lowering.loops_made == loops:
                break
            loops = lowering.loops_made
        if not module.operation.verify():
            raise NotLowered("the per-device module does not verify")
        return PerDeviceProgram(module.operation.get_asm(enable_debug_info=True), layouts,
                                tuple(lowering.gathered_for))


@dataclass(frozen=True)
class PerDeviceProgram:
    """What `lower_per_device` makes: the module's text, the layouts of its
    results, and the ops that ran on whole values gathered for them (no rule
    here keeps their operands split), in program order."""
    text: str
    result_layouts: list
    gathered_for: tuple[str, ...]


class _Lowering(DataMovementRules, ReductionRules):
    """One rewrite of one module, in place: the walk, the wanted layouts and the
    moves between layouts here; the rules for each op in `data_rules.py` and
    `reduction_rules.py`."""

    def __init__(self, module, entry: str, devices: list[int], annotated_layouts, constraint_layout,
                 loops: dict):
        self.module = module
        self.devices = devices
        self.functions = {str(ir.StringAttr(op.attributes["sym_name"]).value): op
                          for op in module.body.operations if op.operation.name == "func.func"}
        if entry not in self.functions:
            raise NotLowered(f"no function @{entry}")
        self.entry = self.functions[entry]
        self.annotated_layouts = annotated_layouts
        self.constraint_layout = constraint_layout
        self.layouts: dict = {}           # value -> its layout in the per-device program
        self.wanted: dict = {}            # value -> the layout a later annotation or constraint asks for
        self.channels = [0]
        self.gathered_for: list[str] = []     # ops that ran on whole values gathered for them
        # Loop-carried layouts: what the last pass's loop bodies made (k-th while
        # in walk order -> layouts), and what this pass's make.
        self.loops = loops
        self.loops_made: dict = {}

    # -- the walk -----------------------------------------------------------
    def run(self, argument_layouts: list[Layout], result_layouts: list[Layout], open_results: list[bool]) -> list:
        body = self.entry.regions[0]
        if len(body.blocks) != 1:
            raise NotLowered("the entry function has several blocks")
        block = body.blocks[0]
        inline_calls(block, self.functions)
        returned = list(terminator(block).operands)
        open_results = open_results + [False] * (len(returned) - len(open_results))
        for argument, layout in zip(block.arguments, argument_layouts):
            self.layouts[argument] = layout
        for value, layout, is_open in zip(returned, result_layouts, open_results):
            if not is_open or is_split(layout):       # for an open result, a hint of a split
                self._want(value, layout)
        self._want_groups(block)
        self._find_wanted(block)
        for argument in block.arguments:
            argument.set_type(local_type(argument.type, self.layouts[argument]))
        self._lower_block(block)
        returning = terminator(block)
        result_layouts = list(result_layouts)
        for i, value in enumerate(returning.operands):
            natural = self.layouts.get(value)
            if open_results[i] and not is_split(result_layouts[i]) and natural is not None \
                    and natural.partial_of is None:
                result_layouts[i] = natural
            returning.operands[i] = self.reshard(returning, value, result_layouts[i])
        self.entry.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], [v.type for v in returning.operands]))
        for inner in [block] + [b for op in block_ops(block) for r in op.regions for b in r.blocks]:
            combine_all_reduces(inner, self.channels)
        self._strip_annotations()
        return result_layouts

    def _lower_block(self, block) -> None:
        for op in list(block.operations):
            op = op.operation
            if op.name in ("func.return", "stablehlo.return"):
                continue
            self._lower_op(op)

    def _lower_op(self, op) -> None:
        name = op.name
        target = custom_call_target(op)
        if target is not None and target != "Sharding" and "has_side_effect" in op.attributes \
                and str(op.attributes["has_side_effect"]) == "true":
            raise NotLowered(f"the program has a custom call with side effects (@{target})")
        if _is_constraint(op):
            return self.lower_constraint(op)
        if name == "sdy.sharding_group":
            op.erase()
            return None
        if name in ELEMENTWISE or target in SAME_VALUE_CALLS:
            return self.lower_elementwise(op)
        rule = _RULES.get(name)
        if rule is not None and rule(self, op) is not False:
            return None
        if target is not None and "sdy.sharding_rule" in op.attributes and self.lower_custom_call(op):
            return None
        if target is not None and self.lower_batch_partitionable(op):
            return None
        return self.lower_whole(op)

    # -- wanted layouts ------------------------------------------------------
    def _want(self, value, layout: Layout | None) -> None:
        if layout is not None and value not in self.wanted and is_tensor(value) \
                and len(layout.tile_counts) == len(shape_of(value)):
            self.wanted[value] = layout

    def _find_wanted(self, block) -> None:
        """One backward walk: constraints and annotations ask their operands
        for a layout, element-wise ops, broadcasts, transposes and loops pass the wish on."""
        for op in reversed(list(block.operations)):
            op = op.operation
            annotated = self._annotation(op)
            for result, layout in zip(op.results, annotated or ()):
                self._want(result, layout)
            if _is_constraint(op):
                self._want(op.operands[0], self._constraint(op))
                self._want(op.operands[0], self.wanted.get(op.results[0]))
            elif op.name in ELEMENTWISE or custom_call_target(op) in SAME_VALUE_CALLS:
                wish = self.wanted.get(op.results[0]) if len(op.results) == 1 else None
                for operand in op.operands:
                    if is_tensor(operand) and shape_of(operand) == shape_of(op.results[0]):
                        self._want(operand, wish)
            elif op.name == "stablehlo.broadcast_in_dim" and op.results[0] in self.wanted:
                self._want(op.operands[0], projected(self.wanted[op.results[0]], op, shape_of(op.operands[0])))
            elif op.name == "stablehlo.transpose" and op.results[0] in self.wanted:
                permutation = ints(op.attributes["permutation"])
                inverse = tuple(permutation.index(d) for d in range(len(permutation)))
                self._want(op.operands[0], self.wanted[op.results[0]].transposed(inverse))
            elif op.name == "stablehlo.while":
                body = op.regions[1].blocks[0]
                for i, result in enumerate(op.results):
                    self._want(op.operands[i], self.wanted.get(result))
                    self._want(terminator(body).operands[i], self.wanted.get(result))
                self._find_wanted(body)

    def _want_groups(self, block) -> None:
        """The values of a sharding group (`sdy.sharding_group`, JAX's `shard_alike`) want
        the layout the first of them has: an argument's, a constraint's, or a wanted one."""
        members: dict = {}
        for op in block.operations:
            op = op.operation
            if op.name == "sdy.sharding_group":
                group = int(convert_attribute(op.attributes["group_id"]))
                members.setdefault(group, []).append(op.operands[0])
            elif custom_call_target(op) == "Sharding" and "mhlo.sharding" in op.attributes:
                match = GROUP_SHARDING.search(str(op.attributes["mhlo.sharding"]))
                if match:
                    members.setdefault(("gspmd", int(match.group(1))), []).append(op.results[0])
        for values in members.values():
            known = (self._known_layout(v) for v in values)
            source = next((layout for layout in known if layout is not None), None)
            for value in values:
                self._want(value, source)

    def _known_layout(self, value) -> Layout | None:
        if value in self.wanted or value in self.layouts:
            return self.wanted.get(value) or self.layouts[value]
        owner = getattr(value.owner, "operation", None)
        if owner is not None and _is_constraint(owner):
            return self._constraint(owner)
        return None

    def _annotation(self, op) -> list[Layout] | None:
        if op.name.startswith("sdy.") or custom_call_target(op) == "Sharding":
            return None
        return self.annotated_layouts(op)

    def _constraint(self, op) -> Layout | None:
        return self.constraint_layout(op, op.operands[0])

    # -- moving values between layouts ---------------------------------------
    def reshard(self, before, value, layout: Layout):
        """`value` in `layout`, with the ops that move it inserted before `before`."""
        if not is_tensor(value):
            return value
        current = self.layout_of(value)
        if current == layout:
            return value
        emit = Emitter(self.channels)
        if current.partial_of is not None and current.partial_of != layout.partial_of:
            value, current = self._summed(before, value, current, emit)
        wrong = tuple(d for d in range(len(layout.tile_counts)) if not same_split(current, d, layout, d))
        if layout.partial_of is not None and current.partial_of is None and wrong:
            spread = self._spread(before, value, current, layout, wrong, emit)
            if spread is not None:
                return spread
        with ir.InsertionPoint(before):
            for d in wrong:
                if current.tile_counts[d] > 1:
                    try:
                        groups = groups_over(current, (d,), self.devices)
                    except NoGroups as error:
                        raise NotLowered(str(error)) from None
                    value = emit.all_gather(value, d, groups)
                    current = without_dims(current, (d,))
                    self.layouts[value] = current
            cut = tuple(d for d in wrong if layout.tile_counts[d] > 1)
            if cut:        # the tiles of `layout` along the dimensions cut here
                value = emit.local_tile(value, without_dims(layout, _other_dims(layout, cut)))
            if layout.partial_of is not None and current.partial_of is None:
                value = emit.kept_where(value, [not any(layout.partial_of[d]) for d in self.devices])
        self.layouts[value] = layout
        return value

    def _spread(self, before, value, current: Layout, layout: Layout, wrong: tuple, emit: Emitter):
        """A split value made unreduced over the devices it is split over, without
        talking: each device puts its tile in zeros (its partial sum), as XLA does;
        None where the devices that split it are not those that hold the partial sums."""
        if any(layout.tile_counts[d] != 1 or current.tile_counts[d] == 1 for d in wrong):
            return None
        try:
            if sorted(groups_over(current, wrong, self.devices)) != sorted(partial_groups(layout, self.devices)):
                return None
        except NoGroups:
            return None
        tiles = without_dims(current, _other_dims(current, wrong))
        whole = tuple(size * (current.tile_counts[d] if d in wrong else 1)
                      for d, size in enumerate(shape_of(value)))
        with ir.InsertionPoint(before):
            value = emit.placed_in_zeros(value, tiles, whole)
        self.layouts[value] = layout
        return value

    def _summed(self, before, value, current: Layout, emit: Emitter) -> tuple:
        """An unreduced value's partial sums added up (`all_reduce` over the devices
        that hold the same tile and different partial sums): (value, its layout)."""
        with ir.InsertionPoint(before):
            value = emit.all_reduce(value, partial_groups(current, self.devices), "stablehlo.add")
        whole_sum = tiles_only(current)
        self.layouts[value] = whole_sum
        return value, whole_sum

    def reshard_operand(self, op, index: int, layout: Layout) -> None:
        op.operands[index] = self.reshard(op, op.operands[index], layout)

    def global_shape(self, value) -> tuple[int, ...]:
        """`value`'s shape in the global program (its type may already be its tile's)."""
        layout = self.layouts.get(value)
        local = shape_of(value)
        return local if layout is None else tuple(s * c for s, c in zip(local, layout.tile_counts))

    def layout_of(self, value) -> Layout:
        """`value`'s layout so far (a value no rule has placed is whole)."""
        return self.layouts.get(value) or self.whole(value)

    def whole(self, value) -> Layout:
        return replicated(len(shape_of(value)), self.devices)

    def set_result(self, result, layout: Layout) -> None:
        """`result` (an op's, rewritten in place) now holds its tile of `layout`."""
        result.set_type(local_type(result.type, layout))
        self.layouts[result] = layout

    def target(self, result, natural: Layout, partial: bool = False) -> Layout:
        """The layout an op that can make any layout gives `result`: wanted, else
        `natural`; a wanted unreduced layout only where the op can make partial sums
        (`partial`), its tiles otherwise."""
        wish = self.wanted.get(result)
        if wish is not None and not partial:
            wish = tiles_only(wish)
        return wish if wish is not None and evenly_split(shape_of(result), wish) else natural

    # -- rules -----------------------------------------------------------------
    def lower_constraint(self, op) -> None:
        """A sharding constraint: the value moves to the pinned layout (an open one
        keeps its own), and the op goes."""
        layout = self._constraint(op)
        value = op.operands[0]
        if layout is not None:
            value = self.reshard(op, value, layout)
        op.results[0].replace_all_uses_with(value)
        op.erase()

    def lower_while(self, op) -> bool:
        """while: each loop-carried value keeps one layout (the wanted one, else its
        operand's); the condition and body are rewritten for it, and the body's
        results are moved back to it before the next iteration."""
        loop = len(self.loops_made)
        self.loops_made[loop] = None
        made = self.loops.get(loop)
        carried = []
        for i, operand in enumerate(op.operands):
            layout = self.target(op.results[i], self.layout_of(operand)) \
                if is_tensor(operand) else None
            if made is not None and made[i] is not None and evenly_split(self.global_shape(operand), made[i]):
                layout = made[i]
            if layout is not None:
                self.reshard_operand(op, i, layout)
            carried.append(layout)
        for region in op.regions:
            block = region.blocks[0]
            for argument, layout in zip(block.arguments, carried):
                if layout is not None:
                    self.layouts[argument] = layout
                    argument.set_type(local_type(argument.type, layout))
        for result, layout in zip(op.results, carried):
            if layout is not None:
                self.set_result(result, layout)
        condition, body = (region.blocks[0] for region in op.regions)
        self._lower_block(condition)
        stop = terminator(condition)
        self.reshard_operand(stop, 0, self.whole(stop.operands[0]))
        self._lower_block(body)
        back = terminator(body)
        self.loops_made[loop] = tuple(self.layouts.get(v) if is_tensor(v) else None for v in back.operands)
        for i, layout in enumerate(carried):
            if layout is not None:
                self.reshard_operand(back, i, layout)
        return True

    def lower_whole(self, op) -> None:
        """Any other op: it runs on whole values (its operands and the values its
        regions use from outside are gathered), and its results are whole."""
        if any(is_tensor(v) and is_split(self.layout_of(v)) for v in op.operands):
            self.gathered_for.append(op.name)
        for i, operand in enumerate(op.operands):
            if is_tensor(operand):
                self.reshard_operand(op, i, self.whole(operand))
        for inner in nested_ops(op):
            for i, operand in enumerate(inner.operands):
                if operand in self.layouts and is_split(self.layouts[operand]):
                    inner.operands[i] = self.reshard(op, operand, self.whole(operand))
            if inner.name in _SHARDY_CONSTRAINTS:
                inner.results[0].replace_all_uses_with(inner.operands[0])
                inner.erase()
        for result in op.results:
            if is_tensor(result):
                self.layouts[result] = self.whole(result)

    # -- the module's last touches -------------------------------------------
    def _strip_annotations(self) -> None:
        """Shardings, meshes and the functions inlined are gone: the per-device program
        is plain StableHLO."""
        for name in ("arg_attrs", "res_attrs"):
            if name in self.entry.attributes:
                self.entry.attributes[name] = ir.ArrayAttr.get([
                    ir.DictAttr.get({a.name: a.attr for a in ir.DictAttr(d)
                                    if a.name not in _SIGNATURE_ATTRIBUTES})
                    for d in ir.ArrayAttr(self.entry.attributes[name])])
        for op in nested_ops(self.entry):
            for name in _SHARDING_ATTRIBUTES:
                if name in op.attributes:
                    del op.attributes[name]
        entry_text = str(self.entry)
        for op in list(self.module.body.operations):
            op = op.operation
            if op.name.startswith("sdy."):
                op.erase()
            elif op.name == "func.func" and op != self.entry.operation:
                name = str(ir.StringAttr(op.attributes["sym_name"]).value)
                if f"@{name}" not in entry_text:
                    op.erase()


_RULES = {
    "stablehlo.broadcast_in_dim": _Lowering.lower_broadcast,
    "stablehlo.transpose": _Lowering.lower_transpose,
    "stablehlo.reshape": _Lowering.lower_reshape,
    "stablehlo.iota": _Lowering.lower_iota,
    "stablehlo.constant": _Lowering.lower_constant,
    "stablehlo.reduce": _Lowering.lower_reduce,
    "stablehlo.dot_general": _Lowering.lower_dot_general,
    "stablehlo.while": _Lowering.lower_while,
    "stablehlo.gather": _Lowering.lower_gather,
    "stablehlo.scatter": _Lowering.lower_scatter,
    **{"stablehlo." + name: _Lowering.lower_along for name in (
        "slice", "pad", "reverse", "concatenate", "dynamic_slice", "dynamic_update_slice", "sort")},
}


_SHARDY_CONSTRAINTS = ("sdy.sharding_constraint", "sdy.reshard")


def _is_constraint(op) -> bool:
    """A sharding constraint: Shardy's, or GSPMD's `@Sharding` custom call."""
    return op.name in _SHARDY_CONSTRAINTS or custom_call_target(op) == "Sharding"


def _other_dims(layout: Layout, dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in range(len(layout.tile_counts)) if d not in dims)
