"""The per-device program: an annotated global program rewritten for one device.

What XLA's SPMD partitioner does, in the simplest form that is still a real
partitioning (each device computes its own tiles and only talks to the
others where the program needs it):

1. Every value gets a layout (`Layout`: which tile each device holds). Entry
   arguments and results have the runner's; an op's result gets the layout
   its annotation or a later sharding constraint asks for (the *wanted*
   layout, found by one backward walk, `_Wanted`) where its rule can make
   it directly, else the layout its operands give it.
2. Each op is rewritten to work on local tiles (its result types become the
   tile types), after its operands are moved to the layouts it needs
   (`reshard`: an `all_gather` per dimension that must become whole, a
   `dynamic_slice` at the device's offsets for each that must become split).
   A reduce over split dimensions, or a dot_general over split contracting
   dimensions, adds the devices' partial results with an `all_reduce`.
3. Any op without a rule here (sort, gather, scatter, convolution, custom
   calls without a sharding rule, ...) runs on whole operands: they are
   gathered first, and its results are whole on every device. Always
   correct, and what the program text then shows (`all-gather` in XLA's
   spelling).

The result is an ordinary StableHLO module with local shapes, collectives
and `partition_id`, which every device runs on its own thread (the process
grid of the spec's collectives). Programs with per-device parts of their
own (manual computations, unreduced values), collectives or side effects
are not rewritten (`NotLowered`); the runner runs those whole.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from jaxlib.mlir import ir

from ...interpreter.attributes import convert_attribute
from ..layout import Layout, gathered, replicated
from .emit import Emitter, NotLowered, element_type, local_type, shape_of, shard_shape
from .groups import NoGroups, groups_over, is_split, kept_dims, partial_groups, same_split, without_dims

# What a program carries that keeps it whole (see the module docstring).
_KEPT_WHOLE = re.compile(
    r"sdy\.manual_computation|SPMDFullToShardShape|SPMDShardToFullShape|"
    r"stablehlo\.(?:all_gather|all_reduce|all_to_all|reduce_scatter|collective_permute|collective_broadcast|"
    r"partition_id|replica_id|send|recv|infeed|outfeed|after_all|optimization_barrier)\b|"
    r"!stablehlo\.token|sdy\.named_computation|CustomSPMDPartitioning|"
    r"called_computations|xla_python|xla_ffi_python|PyCapsule|pjrt_ref\.manual_call")

ELEMENTWISE = frozenset("stablehlo." + name for name in (
    "abs add and atan2 cbrt ceil clamp compare complex convert cosine count_leading_zeros "
    "divide exponential exponential_minus_one floor imag is_finite log log_plus_one logistic "
    "maximum minimum multiply negate not or popcnt power real reduce_precision remainder "
    "round_nearest_afz round_nearest_even rsqrt select shift_left shift_right_arithmetic "
    "shift_right_logical sign sine sqrt subtract tan tanh xor bitcast_convert").split())
# Custom calls that hand their operand on unchanged (placement and layout hints).
_SAME_VALUE_CALLS = frozenset(("LayoutConstraint", "annotate_device_placement", "MoveToHost",
                               "MoveToDevice", "InspectSharding"))
# The reductions an all_reduce can finish, and the init values that may be
# counted once per device (idempotent ops: any init).
_COMBINERS = {"stablehlo.add": 0, "stablehlo.xor": 0, "stablehlo.or": None, "stablehlo.and": None,
              "stablehlo.maximum": None, "stablehlo.minimum": None, "stablehlo.multiply": 1}
# GSPMD's spelling of a sharding group: `@Sharding` with "{shard_as N}" or "{shard_like N}".
_GSPMD_GROUP = re.compile(r"\bshard_(?:as|like) (\d+)")
# Rewrites of a program with loops: a loop-carried value takes the layout its body
# made in the pass before, until the layouts settle.
_LOOP_PASSES = 4
_STRIPPED_ATTRIBUTES = ("sdy.sharding", "mhlo.sharding", "sdy.sharding_rule", "sdy.sharding_origins",
                        "mhlo.frontend_attributes")


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
    if _KEPT_WHOLE.search(text):
        raise NotLowered(f"the program has {_KEPT_WHOLE.search(text).group(0)}")
    from ...interpreter.loader import parse_module

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


class _Lowering:
    """One rewrite of one module, in place."""

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
        _inline_calls(block, self.functions)
        returned = list(_terminator(block).operands)
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
        terminator = _terminator(block)
        result_layouts = list(result_layouts)
        for i, value in enumerate(terminator.operands):
            natural = self.layouts.get(value)
            if open_results[i] and not is_split(result_layouts[i]) and natural is not None \
                    and natural.partial_of is None:
                result_layouts[i] = natural
            terminator.operands[i] = self.reshard(terminator, value, result_layouts[i])
        self.entry.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
            [a.type for a in block.arguments], [v.type for v in terminator.operands]))
        for inner in [block] + [b for op in _nested_ops_of_block(block) for r in op.regions for b in r.blocks]:
            _combine_all_reduces(inner, self.channels)
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
        target = _custom_call_target(op)
        if target is not None and target != "Sharding" and "has_side_effect" in op.attributes \
                and str(op.attributes["has_side_effect"]) == "true":
            raise NotLowered(f"the program has a custom call with side effects (@{target})")
        if name in ("sdy.sharding_constraint", "sdy.reshard") or (target == "Sharding"):
            return self.lower_constraint(op)
        if name in ("sdy.sharding_group", "sdy.propagation_barrier"):
            if name == "sdy.sharding_group":
                op.erase()
                return None
        if name in ELEMENTWISE or target in _SAME_VALUE_CALLS:
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
        if layout is not None and value not in self.wanted and _is_tensor(value) \
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
            if op.name in ("sdy.sharding_constraint", "sdy.reshard") or _custom_call_target(op) == "Sharding":
                self._want(op.operands[0], self._constraint(op))
                self._want(op.operands[0], self.wanted.get(op.results[0]))
            elif op.name in ELEMENTWISE or _custom_call_target(op) in _SAME_VALUE_CALLS:
                wish = self.wanted.get(op.results[0]) if len(op.results) == 1 else None
                for operand in op.operands:
                    if _is_tensor(operand) and shape_of(operand) == shape_of(op.results[0]):
                        self._want(operand, wish)
            elif op.name == "stablehlo.broadcast_in_dim" and op.results[0] in self.wanted:
                self._want(op.operands[0], _projected(self.wanted[op.results[0]], op, shape_of(op.operands[0])))
            elif op.name == "stablehlo.transpose" and op.results[0] in self.wanted:
                permutation = _ints(op.attributes["permutation"])
                inverse = tuple(permutation.index(d) for d in range(len(permutation)))
                self._want(op.operands[0], self.wanted[op.results[0]].transposed(inverse))
            elif op.name == "stablehlo.while":
                body = op.regions[1].blocks[0]
                for i, result in enumerate(op.results):
                    self._want(op.operands[i], self.wanted.get(result))
                    self._want(_terminator(body).operands[i], self.wanted.get(result))
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
            elif _custom_call_target(op) == "Sharding" and "mhlo.sharding" in op.attributes:
                match = _GSPMD_GROUP.search(str(op.attributes["mhlo.sharding"]))
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
        if owner is not None and (owner.name in ("sdy.sharding_constraint", "sdy.reshard")
                                  or _custom_call_target(owner) == "Sharding"):
            return self._constraint(owner)
        return None

    def _annotation(self, op) -> list[Layout] | None:
        if op.name.startswith("sdy.") or _custom_call_target(op) == "Sharding":
            return None
        return self.annotated_layouts(op)

    def _constraint(self, op) -> Layout | None:
        return self.constraint_layout(op, op.operands[0])

    # -- moving values between layouts ---------------------------------------
    def reshard(self, before, value, layout: Layout):
        """`value` in `layout`, with the ops that move it inserted before `before`."""
        current = self.layouts.get(value)
        if current is None or not _is_tensor(value):
            current = replicated(len(shape_of(value)) if _is_tensor(value) else 0, self.devices)
            self.layouts[value] = current
        if not _is_tensor(value) or current == layout:
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
            if cut:
                tiles = Layout(tuple(layout.tile_counts[d] if d in cut else 1
                                     for d in range(len(layout.tile_counts))),
                               {device: tuple(t if d in cut else 0 for d, t in enumerate(tile))
                                for device, tile in layout.tile_of.items()})
                value = emit.local_tile(value, tiles)
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
        tiles = Layout(tuple(current.tile_counts[d] if d in wrong else 1 for d in range(len(layout.tile_counts))),
                       {device: tuple(t if d in wrong else 0 for d, t in enumerate(tile))
                        for device, tile in current.tile_of.items()})
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
        whole_sum = Layout(current.tile_counts, current.tile_of)
        self.layouts[value] = whole_sum
        return value, whole_sum

    def reshard_operand(self, op, index: int, layout: Layout) -> None:
        op.operands[index] = self.reshard(op, op.operands[index], layout)

    def global_shape(self, value) -> tuple[int, ...]:
        """`value`'s shape in the global program (its type may already be its tile's)."""
        layout = self.layouts.get(value)
        local = shape_of(value)
        return local if layout is None else tuple(s * c for s, c in zip(local, layout.tile_counts))

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
        if wish is not None and wish.partial_of is not None and not partial:
            wish = Layout(wish.tile_counts, wish.tile_of)
        if wish is not None:
            try:
                shard_shape(shape_of(result), wish)
                return wish
            except NotLowered:
                pass
        return natural

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

    def lower_elementwise(self, op) -> None:
        """Element-wise ops (and hints that return their operand): every operand of the
        result's shape in the result's layout, the op on tiles."""
        result = op.results[0]
        shape = shape_of(result)
        same = [i for i, v in enumerate(op.operands) if _is_tensor(v) and self.global_shape(v) == shape]
        layouts = {i: self.layouts.get(op.operands[i], self.whole(result)) for i in same}
        partial = [i for i in same if layouts[i].partial_of is not None]
        if partial and self._keeps_partial_sums(op, same, partial, layouts):
            layout = layouts[partial[0]]
            tiles = Layout(layout.tile_counts, layout.tile_of)
            for i, operand in enumerate(op.operands):     # a scaling factor is whole: its tiles
                wanted = layout if op.name != "stablehlo.multiply" or i in partial else tiles
                self.reshard_operand(op, i, wanted if i in same else self.whole(operand))
            for r in op.results:
                self.set_result(r, layout)
            return
        natural = max((Layout(l.tile_counts, l.tile_of) for l in layouts.values()),
                      key=_tile_count, default=self.whole(result))
        layout = self.target(result, natural)
        for i, operand in enumerate(op.operands):
            self.reshard_operand(op, i, layout if i in same else self.whole(operand))
        for r in op.results:
            self.set_result(r, layout)

    @staticmethod
    def _keeps_partial_sums(op, same: list[int], partial: list[int], layouts: dict) -> bool:
        """Whether an element-wise op of unreduced operands is itself a sum of the devices'
        partial results: a sum or difference (the others' whole values counted on one
        device only), a negation or conversion, a product with one unreduced factor."""
        if op.name in ("stablehlo.add", "stablehlo.subtract"):
            return len({(tuple(sorted(layouts[i].partial_of.items()))) for i in partial}) == 1 \
                and all(layouts[i] == layouts[partial[0]] for i in partial)
        if op.name in ("stablehlo.negate", "stablehlo.convert") or _custom_call_target(op) in _SAME_VALUE_CALLS:
            return len(op.operands) == 1 and _is_float(element_type(op.results[0]))
        if op.name == "stablehlo.multiply":
            return len(partial) == 1 and len(same) == 2
        return False

    def lower_broadcast(self, op) -> None:
        """broadcast_in_dim: the operand's splits go to the dimensions they map to;
        a wanted split of a broadcast dimension is made locally (the values repeat)."""
        result = op.results[0]
        operand_layout = self.layouts.get(op.operands[0]) or self.whole(op.operands[0])
        dims = _ints(op.attributes["broadcast_dimensions"])
        operand_shape = self.global_shape(op.operands[0])
        natural = gathered([(operand_layout, dims.index(j)) if j in dims and
                            operand_shape[dims.index(j)] == shape_of(result)[j] else (None, 0)
                            for j in range(len(shape_of(result)))], self.devices) or self.whole(result)
        partial = operand_layout.partial_of           # partial sums stay partial sums, repeated
        layout = _carrying(self.target(result, natural), partial)
        self.reshard_operand(op, 0, _carrying(_projected(layout, op, operand_shape), partial))
        self.set_result(result, layout)

    def lower_transpose(self, op) -> None:
        permutation = _ints(op.attributes["permutation"])
        result = op.results[0]
        natural = (self.layouts.get(op.operands[0]) or self.whole(op.operands[0])).transposed(permutation)
        layout = self.target(result, natural, partial=natural.partial_of is not None)
        inverse = tuple(permutation.index(d) for d in range(len(permutation)))
        self.reshard_operand(op, 0, layout.transposed(inverse))
        self.set_result(result, layout)

    def lower_reshape(self, op) -> None:
        """reshape keeps a split of the major dimension of each group of dimensions
        it merges or splits, where the tile count divides the new major dimension
        (the group's other dimensions are gathered: a tile is then a contiguous block)."""
        operand, result = op.operands[0], op.results[0]
        layout = self.layouts.get(operand) or self.whole(operand)
        before, after = self.global_shape(operand), shape_of(result)
        sources = [(None, 0)] * len(after)
        kept = set()
        for dims_before, dims_after in _reshape_groups(before, after):
            major = dims_before[0] if dims_before else None
            if major is not None and dims_after and after[dims_after[0]] % layout.tile_counts[major] == 0:
                sources[dims_after[0]] = (layout, major)
                kept.add(major)
        needed = gathered([(layout, d) if d in kept else (None, 0) for d in range(len(before))], self.devices)
        result_layout = gathered(sources, self.devices)
        if needed is None or result_layout is None:
            needed, result_layout = self.whole(operand), self.whole(result)
        self.reshard_operand(op, 0, _carrying(needed, layout.partial_of))
        self.set_result(result, _carrying(result_layout, layout.partial_of))

    def lower_iota(self, op) -> None:
        """iota: each device counts from where its tile starts along the iota dimension."""
        result = op.results[0]
        layout = self.target(result, self.whole(result))
        dim = int(convert_attribute(op.attributes["iota_dimension"]))
        if layout.tile_counts[dim] == 1:
            return self.set_result(result, layout)
        emit = Emitter(self.channels)
        with ir.InsertionPoint(op):
            local = op.clone()
            self.set_result(local.results[0], layout)
            offsets = emit.tile_offsets(layout, shape_of(result))
            moved = emit.add_offset(local.results[0], offsets[dim])
        self.layouts[moved] = layout
        result.replace_all_uses_with(moved)
        op.erase()
        return None

    def lower_constant(self, op) -> bool:
        """A splat constant is made as a tile directly where its users want one."""
        result = op.results[0]
        layout = self.target(result, self.whole(result))
        try:
            value = op.attributes["value"]
        except TypeError:             # jaxlib cannot hand some constants (complex splats) to Python
            value = None
        if not is_split(layout) or not isinstance(value, ir.DenseElementsAttr) or not value.is_splat:
            self.layouts[result] = self.whole(result)
            return True
        local = local_type(result.type, layout)
        op.attributes["value"] = ir.DenseElementsAttr.get_splat(local, value.get_splat_value())
        self.set_result(result, layout)
        return True

    def lower_reduce(self, op) -> bool:
        """reduce: the split dimensions it keeps stay split; over split reduced
        dimensions each device reduces its tiles and an all_reduce adds the
        partial results, if the body is one op an all_reduce can apply and the
        init value may be counted once per device (else those dimensions are gathered first)."""
        count = len(op.operands) // 2
        inputs = list(range(count))
        dims = _ints(op.attributes["dimensions"])
        layout = self.layouts.get(op.operands[0]) or self.whole(op.operands[0])
        combiner = _single_combiner(op)
        split_reduced = tuple(d for d in dims if layout.tile_counts[d] > 1)
        if split_reduced and (count != 1 or combiner is None or not _init_fits(op.operands[1], combiner)):
            layout = without_dims(layout, split_reduced)
            split_reduced = ()
        for i in inputs:
            self.reshard_operand(op, i, layout)
        for i in range(count, 2 * count):
            self.reshard_operand(op, i, self.whole(op.operands[i]))
        kept = [d for d in range(len(layout.tile_counts)) if d not in dims]
        result_layout = kept_dims(layout, kept)
        if not split_reduced:
            for r in op.results:
                self.set_result(r, result_layout)
            return True
        try:
            groups = groups_over(layout, split_reduced, self.devices)
        except NoGroups as error:
            raise NotLowered(str(error)) from None
        if combiner == "stablehlo.add" and self._left_unreduced(op.results[0], result_layout, groups):
            self.set_result(op.results[0], self.wanted[op.results[0]])
            return True
        emit = Emitter(self.channels)
        with ir.InsertionPoint(op):
            local = op.clone()
            self.set_result(local.results[0], result_layout)
            summed = emit.all_reduce(local.results[0], groups, combiner)
        self.layouts[summed] = result_layout
        op.results[0].replace_all_uses_with(summed)
        op.erase()
        return True

    def _left_unreduced(self, result, tiles: Layout, groups: list[list[int]]) -> bool:
        """Whether `result`, whose devices hold partial sums over `groups`, is wanted
        unreduced over just those devices (JAX's `out_sharding=P(unreduced=...)`): then
        no all_reduce is made, as XLA makes none."""
        wish = self.wanted.get(result)
        if wish is None or wish.partial_of is None or Layout(wish.tile_counts, wish.tile_of) != tiles:
            return False
        try:
            return sorted(partial_groups(wish, self.devices)) == sorted(groups)
        except NoGroups:
            return False

    def lower_dot_general(self, op) -> bool:
        """dot_general on tiles: batch and contracting dimensions must be split alike on
        both sides, free dimensions keep their splits; split contracting dimensions
        leave partial sums an all_reduce adds. Where the sides' splits do not fit, the
        contracting dimensions are gathered, then the right side's free dimensions,
        then the left's, then whole sides."""
        numbers = _dot_numbers(op)
        lhs, rhs = op.operands[0], op.operands[1]
        left_now, right_now = self.layouts.get(lhs) or self.whole(lhs), self.layouts.get(rhs) or self.whole(rhs)
        lhs_free = tuple(d for d in range(len(shape_of(lhs))) if d not in numbers[0] + numbers[2])
        rhs_free = tuple(d for d in range(len(shape_of(rhs))) if d not in numbers[1] + numbers[3])
        bases = [(left_now, right_now),
                 (without_dims(left_now, tuple(numbers[2])), without_dims(right_now, tuple(numbers[3]))),
                 (left_now, without_dims(right_now, rhs_free)),
                 (without_dims(left_now, lhs_free), right_now), (left_now, self.whole(rhs)),
                 (self.whole(lhs), right_now), (self.whole(lhs), self.whole(rhs))]
        for base in bases:
            for left, right in (base, self._aligned(numbers, *base)):
                plan = left is not None and self._dot_plan(numbers, left, right, len(shape_of(lhs)),
                                                           len(shape_of(rhs)))
                if plan:
                    break
            if plan:
                break
        result_layout, groups = plan
        self.reshard_operand(op, 0, left)
        self.reshard_operand(op, 1, right)
        if groups is None:
            self.set_result(op.results[0], result_layout)
            return True
        if self._left_unreduced(op.results[0], result_layout, groups):
            self.set_result(op.results[0], self.wanted[op.results[0]])
            return True
        emit = Emitter(self.channels)
        with ir.InsertionPoint(op):
            local = op.clone()
            self.set_result(local.results[0], result_layout)
            summed = emit.all_reduce(local.results[0], groups, "stablehlo.add")
        self.layouts[summed] = result_layout
        op.results[0].replace_all_uses_with(summed)
        op.erase()
        return True

    def _aligned(self, numbers, left: Layout, right: Layout) -> tuple:
        """(left, right) where a batch or contracting dimension split on one side only is
        split alike on the other (cutting a tile of a whole value needs no communication)."""
        lhs_pairs = dict(zip(numbers[0] + numbers[2], numbers[1] + numbers[3]))
        rhs_pairs = {b: a for a, b in lhs_pairs.items()}
        new_left = gathered([(right, lhs_pairs[d]) if d in lhs_pairs and left.tile_counts[d] == 1
                             and right.tile_counts[lhs_pairs[d]] > 1 else (left, d)
                             for d in range(len(left.tile_counts))], self.devices)
        new_right = gathered([(left, rhs_pairs[d]) if d in rhs_pairs and right.tile_counts[d] == 1
                              and left.tile_counts[rhs_pairs[d]] > 1 else (right, d)
                              for d in range(len(right.tile_counts))], self.devices)
        return (new_left, new_right) if new_left is not None and new_right is not None else (None, None)

    def _dot_plan(self, numbers, left: Layout, right: Layout, lhs_rank: int, rhs_rank: int):
        """(result layout, all_reduce groups or None), or None when the splits do not fit."""
        lhs_batch, rhs_batch, lhs_contract, rhs_contract = numbers
        for a, b in zip(lhs_batch + lhs_contract, rhs_batch + rhs_contract):
            if not same_split(left, a, right, b):
                return None
        lhs_free = [d for d in range(lhs_rank) if d not in lhs_batch and d not in lhs_contract]
        rhs_free = [d for d in range(rhs_rank) if d not in rhs_batch and d not in rhs_contract]
        sources = ([(left, d) for d in lhs_batch] + [(left, d) for d in lhs_free]
                   + [(right, d) for d in rhs_free])
        split_contract = [(left, d) for d in lhs_contract if left.tile_counts[d] > 1]
        combined = gathered(sources + split_contract, self.devices)
        if combined is None:
            return None
        result_layout = kept_dims(combined, list(range(len(sources))))
        if not split_contract:
            return result_layout, None
        try:
            groups = groups_over(combined, tuple(range(len(sources), len(sources) + len(split_contract))),
                                 self.devices)
        except NoGroups:
            return None
        return result_layout, groups

    def lower_along(self, op) -> bool:
        """Ops that work along some dimensions and leave the others alone (slice,
        pad, reverse, concatenate, dynamic_slice, dynamic_update_slice, sort): the
        dimensions they touch are gathered, the others keep the first operand's
        splits, and the op runs on tiles (sizes in its attributes made local)."""
        data = [i for i, v in enumerate(op.operands)
                if _is_tensor(v) and len(shape_of(v)) == len(shape_of(op.results[0]))]
        if not data or data[0] != 0:
            return False
        touched = _touched_dims(op, self.global_shape(op.operands[0]),
                                [self.global_shape(op.operands[i]) for i in data])
        first = self.layouts.get(op.operands[0]) or self.whole(op.operands[0])
        partial = first.partial_of if op.name != "stablehlo.sort" else None    # all but sort are linear
        layout = _carrying(without_dims(first, touched), partial)
        for i, operand in enumerate(op.operands):      # a pad value is added in: a partial sum too
            scalar = _carrying(self.whole(operand), partial if op.name == "stablehlo.pad" else None)
            self.reshard_operand(op, i, layout if i in data else scalar)
        for result in op.results:
            self.set_result(result, layout)
        _make_sizes_local(op, layout)
        return True

    def lower_gather(self, op) -> bool:
        """gather: the operand's batching dimensions (what vmap of indexing makes) keep a
        split shared with the indices' matching ones, which the result's batch dimension
        takes; an operand dimension it takes whole (slice size = size) keeps its split,
        which the matching offset dimension of the result takes. Everything else is
        gathered first."""
        from jaxlib.mlir.dialects import stablehlo

        numbers = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
        operand, indices, result = op.operands[0], op.operands[1], op.results[0]
        layout = self.layouts.get(operand) or self.whole(operand)
        shape, sizes = self.global_shape(operand), _ints(op.attributes["slice_sizes"])
        collapsed, operand_batch = list(numbers.collapsed_slice_dims), list(numbers.operand_batching_dims)
        offset_sources = [d for d in range(len(shape)) if d not in collapsed and d not in operand_batch]
        result_batch = [d for d in range(len(shape_of(result))) if d not in list(numbers.offset_dims)]
        indices_batch = [d for d in range(len(shape_of(indices))) if d != numbers.index_vector_dim]
        kept_operand = {d for d in offset_sources if sizes[d] == shape[d] and layout.tile_counts[d] > 1}
        index_layout_now = self.layouts.get(indices) or self.whole(indices)
        for o, i in zip(operand_batch, numbers.start_indices_batching_dims):
            if layout.tile_counts[o] == 1 and index_layout_now.tile_counts[i] > 1:
                layout = gathered([(index_layout_now, i) if d == o else (layout, d) for d in range(len(shape))],
                                  self.devices) or layout
        kept_operand |= {d for d in operand_batch if layout.tile_counts[d] > 1}
        if not kept_operand:
            return False
        result_sources = [(None, 0)] * len(shape_of(result))
        for k, d in enumerate(offset_sources):
            if d in kept_operand:
                result_sources[list(numbers.offset_dims)[k]] = (layout, d)
        index_sources = [(None, 0)] * len(shape_of(indices))
        for o, i in zip(operand_batch, numbers.start_indices_batching_dims):
            if o in kept_operand:
                index_sources[i] = (layout, o)
                result_sources[result_batch[indices_batch.index(i)]] = (layout, o)
        operand_layout = gathered([(layout, d) if d in kept_operand else (None, 0) for d in range(len(shape))],
                                  self.devices)
        index_layout = gathered(index_sources, self.devices)
        result_layout = gathered(result_sources, self.devices)
        if None in (operand_layout, index_layout, result_layout):
            return False
        self.reshard_operand(op, 0, operand_layout)
        self.reshard_operand(op, 1, index_layout)
        self.set_result(result, result_layout)
        local = shard_shape(shape, operand_layout)
        op.attributes["slice_sizes"] = _i64_array(
            [local[d] if d in kept_operand and d not in operand_batch else size for d, size in enumerate(sizes)])
        return True

    def lower_scatter(self, op) -> bool:
        """scatter with batching dimensions: as gather, the inputs' and the indices'
        batching dimensions and the updates' matching scatter dimensions keep a common split."""
        from jaxlib.mlir.dialects import stablehlo

        count = (len(op.operands) - 1) // 2
        numbers = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
        indices_rank = len(shape_of(op.operands[count]))
        batch_dims = [d for d in range(indices_rank) if d != numbers.index_vector_dim]
        update_rank = len(shape_of(op.operands[count + 1]))
        update_scatter = [d for d in range(update_rank) if d not in list(numbers.update_window_dims)]
        mapping = [(o, i, update_scatter[batch_dims.index(i)])
                   for o, i in zip(numbers.input_batching_dims, numbers.scatter_indices_batching_dims)]
        input_shape, update_shape = self.global_shape(op.operands[0]), self.global_shape(op.operands[count + 1])
        window_sources = [d for d in range(len(input_shape)) if d not in list(numbers.inserted_window_dims)
                          and d not in list(numbers.input_batching_dims)]
        for d, u in zip(window_sources, numbers.update_window_dims):
            if update_shape[u] == input_shape[d]:          # taken whole: the window passes the split on
                mapping.append((d, None, u))
        if self._lower_scatter_batched(op, list(range(count)), count, list(range(count + 1, 2 * count + 1)),
                                       mapping):
            return True
        return count == 1 and self._lower_scatter_add(op, batch_dims, update_scatter)

    def _lower_scatter_add(self, op, batch_dims: list[int], update_scatter: list[int]) -> bool:
        """A scatter-add whose updates (and indices) are split along their scatter
        dimensions: each device adds its own updates into the input, which is counted
        on one device only, so the result is unreduced over those devices (a
        segment_sum or bincount of a split array); a later layout that is not adds
        the partial sums."""
        if _single_combiner(op) != "stablehlo.add":
            return False
        indices, updates = op.operands[1], op.operands[2]
        index_layout = self.layouts.get(indices) or self.whole(indices)
        update_layout = self.layouts.get(updates) or self.whole(updates)
        if any(update_layout.tile_counts[d] > 1 for d in range(len(update_layout.tile_counts))
               if d not in update_scatter):
            return False
        # Each scatter dimension's split: the updates', else the indices' (updates cut to match).
        split = [(i, u, (update_layout, u) if update_layout.tile_counts[u] > 1 else (index_layout, i))
                 for i, u in zip(batch_dims, update_scatter)
                 if update_layout.tile_counts[u] > 1 or index_layout.tile_counts[i] > 1]
        if not split:
            return False
        index_wanted = gathered([next((source for i, _, source in split if i == d), (None, 0))
                                 for d in range(len(index_layout.tile_counts))], self.devices)
        update_wanted = gathered([next((source for _, u, source in split if u == d), (None, 0))
                                  for d in range(len(update_layout.tile_counts))], self.devices)
        if index_wanted is None or update_wanted is None:
            return False
        rank = len(shape_of(op.results[0]))
        partial = Layout((1,) * rank, {d: (0,) * rank for d in self.devices},
                         {d: tuple(layout.tile_of[d][k] for _, _, (layout, k) in split) for d in self.devices})
        wish = self.wanted.get(op.results[0])
        if wish is not None and wish.partial_of is not None and not is_split(wish):
            try:
                if sorted(partial_groups(wish, self.devices)) == sorted(partial_groups(partial, self.devices)):
                    partial = wish
            except NoGroups:
                pass
        self.reshard_operand(op, 0, partial)
        self.reshard_operand(op, 1, index_wanted)
        self.reshard_operand(op, 2, update_wanted)
        self.set_result(op.results[0], partial)
        return True

    def _lower_scatter_batched(self, op, inputs: list[int], indices: int, updates: list[int],
                               mapping: list) -> bool:
        """`mapping` pairs (input dim, indices dim, update dim) of each batching
        dimension; each keeps the split the first side that has one gives it."""
        sides = [(inputs[0], 0), (indices, 1), (updates[0], 2)]
        sources = []
        for dims in mapping:
            for k, position in sides:
                layout = self.layouts.get(op.operands[k]) or self.whole(op.operands[k])
                if dims[position] is not None and layout.tile_counts[dims[position]] > 1:
                    sources.append((dims, layout, dims[position]))
                    break
        if not sources:
            return False
        rank = lambda k: len(shape_of(op.operands[k]))

        def layout_of(k: int, position: int) -> Layout | None:
            return gathered([next(((layout, d) for dims, layout, d in sources if dims[position] == dim), (None, 0))
                             for dim in range(rank(k))], self.devices)
        input_layout, index_layout, update_layout = (layout_of(k, p) for k, p in sides)
        if None in (input_layout, index_layout, update_layout):
            return False
        for k in inputs:
            self.reshard_operand(op, k, input_layout)
        self.reshard_operand(op, indices, index_layout)
        for k in updates:
            self.reshard_operand(op, k, update_layout)
        for result in op.results:
            self.set_result(result, input_layout)
        return True

    def lower_while(self, op) -> bool:
        """while: each loop-carried value keeps one layout (the wanted one, else its
        operand's); the condition and body are rewritten for it, and the body's
        results are moved back to it before the next iteration."""
        loop = len(self.loops_made)
        self.loops_made[loop] = None
        made = self.loops.get(loop)
        carried = []
        for i, operand in enumerate(op.operands):
            layout = self.target(op.results[i], self.layouts.get(operand) or self.whole(operand)) \
                if _is_tensor(operand) else None
            if made is not None and made[i] is not None and _evenly(self.global_shape(operand), made[i]):
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
        stop = _terminator(condition)
        self.reshard_operand(stop, 0, self.whole(stop.operands[0]))
        self._lower_block(body)
        back = _terminator(body)
        self.loops_made[loop] = tuple(self.layouts.get(v) if _is_tensor(v) else None for v in back.operands)
        for i, layout in enumerate(carried):
            if layout is not None:
                self.reshard_operand(back, i, layout)
        return True

    def lower_custom_call(self, op) -> bool:
        """A custom call with a Shardy sharding rule (`sdy.sharding_rule`, what JAX
        attaches to its LAPACK calls): a dimension whose factor every operand and
        result has, and the rule does not mark for reduction or replication, keeps its
        split (a batch dimension); the others are gathered."""
        rule = _parse_rule(str(op.attributes["sdy.sharding_rule"]))
        if rule is None or len(rule[0]) != len(op.operands) or len(rule[1]) != len(op.results):
            return False
        operand_factors, result_factors, special = rule
        shared = set.intersection(*(set(dims) for dims in operand_factors + result_factors)) - special
        split_of: dict = {}
        for value, factors in zip(op.operands, operand_factors):
            layout = self.layouts.get(value) or self.whole(value)
            for d, factor in enumerate(factors):
                if factor in shared and factor not in split_of and layout.tile_counts[d] > 1:
                    split_of[factor] = (layout, d)
        for i, (value, factors) in enumerate(zip(op.operands, operand_factors)):
            wanted = gathered([split_of.get(f, (None, 0)) for f in factors], self.devices)
            if wanted is None:
                return False
            self.reshard_operand(op, i, wanted)
        for result, factors in zip(op.results, result_factors):
            self.set_result(result, gathered([split_of.get(f, (None, 0)) for f in factors], self.devices))
        return True

    def lower_batch_partitionable(self, op) -> bool:
        """A custom call JAX marks batch-partitionable (`num_batch_dims` in its frontend
        attributes, `jax.ffi.register_ffi_target_as_batch_partitionable`): its leading
        batch dimensions keep the first operand's split on every operand and result."""
        if "mhlo.frontend_attributes" not in op.attributes:
            return False
        match = re.search(r'num_batch_dims\s*=\s*"(\d+)"', str(op.attributes["mhlo.frontend_attributes"]))
        values = list(op.operands) + list(op.results)
        if match is None or not op.operands or not all(_is_tensor(v) for v in values):
            return False
        batch = int(match.group(1))
        if batch == 0 or any(len(shape_of(v)) < batch for v in values):
            return False
        first = self.layouts.get(op.operands[0]) or self.whole(op.operands[0])

        def layout_of(value) -> Layout | None:
            return gathered([(first, d) if d < batch else (None, 0) for d in range(len(shape_of(value)))],
                            self.devices)
        if any(layout_of(v) is None for v in values) or not is_split(layout_of(op.operands[0])):
            return False
        for i, operand in enumerate(op.operands):
            self.reshard_operand(op, i, layout_of(operand))
        for result in op.results:
            self.set_result(result, layout_of(result))
        return True

    def lower_whole(self, op) -> None:
        """Any other op: it runs on whole values (its operands and the values its
        regions use from outside are gathered), and its results are whole."""
        if any(_is_tensor(v) and is_split(self.layouts.get(v) or self.whole(v)) for v in op.operands):
            self.gathered_for.append(op.name)
        for i, operand in enumerate(op.operands):
            if _is_tensor(operand):
                self.reshard_operand(op, i, self.whole(operand))
        for inner in _nested_ops(op):
            for i, operand in enumerate(inner.operands):
                if operand in self.layouts and is_split(self.layouts[operand]):
                    inner.operands[i] = self.reshard(op, operand, self.whole(operand))
            if inner.name in ("sdy.sharding_constraint", "sdy.reshard"):
                inner.results[0].replace_all_uses_with(inner.operands[0])
                inner.erase()
        for result in op.results:
            if _is_tensor(result):
                self.layouts[result] = self.whole(result)

    # -- the module's last touches -------------------------------------------
    def _strip_annotations(self) -> None:
        """Shardings, meshes and the functions inlined are gone: the per-device program
        is plain StableHLO."""
        for name in ("arg_attrs", "res_attrs"):
            if name in self.entry.attributes:
                self.entry.attributes[name] = ir.ArrayAttr.get([
                    ir.DictAttr.get({a.name: a.attr for a in ir.DictAttr(d)
                                           if a.name not in _STRIPPED_ATTRIBUTES})
                    for d in ir.ArrayAttr(self.entry.attributes[name])])
        for op in _nested_ops(self.entry):
            for name in _STRIPPED_ATTRIBUTES[:4]:
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


# ------------------------------------------------------------------ helpers
def _inline_calls(block, functions: dict) -> None:
    """Every `func.call` in `block` (and in its ops' regions) replaced by the
    callee's body, until none is left: the per-device program is one function."""
    for _ in range(10000):
        calls = [op for op in _nested_ops_of_block(block) if op.name == "func.call"]
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
            for inner in [copy, *_nested_ops(copy)]:
                for i, operand in enumerate(inner.operands):
                    if operand in mapping:
                        inner.operands[i] = mapping[operand]
            for old, new in zip(op.results, copy.results):
                mapping[old] = new
    call.erase()


def _combine_all_reduces(block, channels: list[int]) -> None:
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


def _nested_ops(op) -> list:
    found = []
    for region in op.regions:
        for block in region.blocks:
            found.extend(_nested_ops_of_block(block))
    return found


def _nested_ops_of_block(block) -> list:
    found = []
    for op in block.operations:
        op = op.operation
        found.append(op)
        found.extend(_nested_ops(op))
    return found


def _terminator(block):
    operations = block.operations
    return operations[len(operations) - 1].operation


def _is_tensor(value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) or ir.RankedTensorType.isinstance(value.type)


def _tile_count(layout: Layout) -> int:
    count = 1
    for c in layout.tile_counts:
        count *= c
    return count


def _ints(attribute) -> tuple[int, ...]:
    return tuple(int(v) for v in convert_attribute(attribute))


def _custom_call_target(op) -> str | None:
    if op.name != "stablehlo.custom_call":
        return None
    return str(ir.StringAttr(op.attributes["call_target_name"]).value)


def _carrying(layout: Layout, partial_of: dict | None) -> Layout:
    """`layout`'s tiles holding partial sums over `partial_of` (None: whole values)."""
    return Layout(layout.tile_counts, layout.tile_of, partial_of)


def _projected(layout: Layout, broadcast, operand_shape: tuple[int, ...]) -> Layout:
    """The layout a broadcast_in_dim's operand needs for its result to come out in
    `layout`: the splits of the dimensions it maps to (a size-1 operand dimension is whole)."""
    dims = _ints(broadcast.attributes["broadcast_dimensions"])
    result_shape = shape_of(broadcast.results[0])
    keep = [operand_shape[i] == result_shape[j] for i, j in enumerate(dims)]
    return Layout(tuple(layout.tile_counts[j] if keep[i] else 1 for i, j in enumerate(dims)),
                  {device: tuple(tile[j] if keep[i] else 0 for i, j in enumerate(dims))
                   for device, tile in layout.tile_of.items()})


def _reshape_groups(before: tuple, after: tuple) -> list[tuple[list[int], list[int]]]:
    """Consecutive groups of dimensions of equal products (a reshape's blocks)."""
    groups, i, j = [], 0, 0
    while i < len(before) or j < len(after):
        dims_before, dims_after = [], []
        size_before = size_after = 1
        while True:
            if size_before == size_after and (dims_before or dims_after) and \
                    (i == len(before) or before[i] != 1) and (j == len(after) or after[j] != 1):
                break
            if size_before <= size_after and i < len(before):
                size_before *= before[i]
                dims_before.append(i)
                i += 1
            elif j < len(after):
                size_after *= after[j]
                dims_after.append(j)
                j += 1
            else:
                break
        groups.append((dims_before, dims_after))
    return groups


def _touched_dims(op, shape: tuple[int, ...], data_shapes: list) -> tuple[int, ...]:
    """The dimensions a `lower_along` op works along (the others it leaves alone)."""
    name, rank = op.name, len(shape)
    attrs = op.attributes
    if name == "stablehlo.slice":
        start, limit, stride = (_ints(attrs[k]) for k in ("start_indices", "limit_indices", "strides"))
        return tuple(d for d in range(rank) if (start[d], limit[d], stride[d]) != (0, shape[d], 1))
    if name == "stablehlo.pad":
        low, high, inner = (_ints(attrs[k]) for k in ("edge_padding_low", "edge_padding_high", "interior_padding"))
        return tuple(d for d in range(rank) if (low[d], high[d], inner[d]) != (0, 0, 0))
    if name == "stablehlo.reverse":
        return _ints(attrs["dimensions"])
    if name in ("stablehlo.concatenate", "stablehlo.sort"):
        return (int(convert_attribute(attrs["dimension"])) % rank,)
    if name == "stablehlo.dynamic_slice":
        sizes = _ints(attrs["slice_sizes"])
        return tuple(d for d in range(rank) if sizes[d] != shape[d])
    if name == "stablehlo.dynamic_update_slice":
        update = data_shapes[1]
        return tuple(d for d in range(rank) if update[d] != shape[d])
    return tuple(range(rank))


def _make_sizes_local(op, layout: Layout) -> None:
    """Sizes an op's attributes give in global terms, made the tile's (only along
    dimensions it leaves alone, where they are the whole extent)."""
    if op.name == "stablehlo.slice":
        limits = _ints(op.attributes["limit_indices"])
        local = shape_of(op.operands[0])
        op.attributes["limit_indices"] = _i64_array(
            [local[d] if layout.tile_counts[d] > 1 else limit for d, limit in enumerate(limits)])
    elif op.name == "stablehlo.dynamic_slice":
        op.attributes["slice_sizes"] = _i64_array(shape_of(op.results[0]))


def _i64_array(values) -> ir.Attribute:
    return ir.Attribute.parse("array<i64" + ("" if not values else ": " + ", ".join(map(str, values))) + ">")


def _is_float(element) -> bool:
    """Floating-point or complex (types print as f32, bf16, f8E4M3FN, complex<f32>, ...)."""
    text = str(element)
    return text.startswith(("f", "bf", "complex"))


def _evenly(shape: tuple[int, ...], layout: Layout) -> bool:
    return len(shape) == len(layout.tile_counts) and not any(s % c for s, c in zip(shape, layout.tile_counts))


def _single_combiner(reduce) -> str | None:
    """The op name of a reduce body that is one op on its two arguments, if an all_reduce can apply it."""
    block = reduce.regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    if len(ops) != 2 or ops[0].name not in _COMBINERS or len(block.arguments) != 2:
        return None
    if list(ops[0].operands) != list(block.arguments) or list(ops[1].operands) != [ops[0].results[0]]:
        return None
    return ops[0].name


def _init_fits(init, combiner: str) -> bool:
    """Whether `init` may be counted once per device: any value for an idempotent op,
    the identity (a constant) for add, xor and multiply."""
    identity = _COMBINERS[combiner]
    if identity is None:
        return True
    owner = init.owner
    if not isinstance(owner, ir.OpView) and not hasattr(owner, "name"):
        return False
    owner = getattr(owner, "operation", owner)
    if owner.name != "stablehlo.constant":
        return False
    try:
        value = convert_attribute(owner.attributes["value"])
        return bool((value == identity).all()) if hasattr(value, "all") else value == identity
    except TypeError:
        return False


def _dot_numbers(op) -> tuple:
    from jaxlib.mlir.dialects import stablehlo

    numbers = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    return (list(numbers.lhs_batching_dimensions), list(numbers.rhs_batching_dimensions),
            list(numbers.lhs_contracting_dimensions), list(numbers.rhs_contracting_dimensions))


_RULE = re.compile(r"#sdy\.op_sharding_rule<\((.*?)\)->\((.*?)\)\s*\{([^}]*)\}(.*)>", re.S)


def _parse_rule(text: str):
    """(operand factors, result factors, factors not passed through) of a Shardy
    op sharding rule, each value's factors one name per dimension; None when a
    dimension has several factors or the rule cannot be read."""
    match = _RULE.fullmatch(text.strip())
    if match is None:
        return None

    def values(listing: str):
        out = []
        for dims in re.findall(r"\[([^\]]*)\]", listing):
            names = [d.strip() for d in dims.split(",") if d.strip()]
            if any(not re.fullmatch(r"[a-z]", n) for n in names):
                return None
            out.append(names)
        return out

    operands, results = values(match.group(1)), values(match.group(2))
    if operands is None or results is None:
        return None
    special = set()
    for listing in re.findall(r"(?:reduction|need_replication|permutation|blocked_propagation)=\{([^}]*)\}",
                              match.group(4)):
        special.update(n.strip() for n in listing.split(",") if n.strip())
    return operands, results, special
