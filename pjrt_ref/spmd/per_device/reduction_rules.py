"""Per-device rules for ops that combine values: reduce, dot_general,
scatter-add, and custom calls with a sharding rule or batch dimensions.
Methods of the rewrite (`lowering._Lowering`); where devices hold partial
results the rule adds them with an all_reduce, or leaves them unreduced
where that is wanted.
"""
from __future__ import annotations

import re

from jaxlib.mlir import ir

from pjrt_ref.interpreter.attributes import convert_attribute
from pjrt_ref.spmd.layout import Layout, gathered
from pjrt_ref.spmd.per_device.emit import Emitter, NotLowered, shape_of
from pjrt_ref.spmd.per_device.groups import NoGroups, groups_over, is_split, kept_dims, partial_groups, same_split, tiles_only, without_dims
from pjrt_ref.spmd.per_device.ir_helpers import is_tensor, ints

# The reductions an all_reduce can finish, and the init values that may be
# counted once per device (idempotent ops: any init).
_COMBINERS = {"stablehlo.add": 0, "stablehlo.xor": 0, "stablehlo.or": None, "stablehlo.and": None,
              "stablehlo.maximum": None, "stablehlo.minimum": None, "stablehlo.multiply": 1}



class ReductionRules:
    """The rules of `lowering._Lowering` for ops that combine values."""

    def lower_reduce(self, op) -> bool:
        """reduce: the split dimensions it keeps stay split; over split reduced
        dimensions each device reduces its tiles and an all_reduce adds the
        partial results, if the body is one op an all_reduce can apply and the
        init value may be counted once per device (else those dimensions are gathered first)."""
        count = len(op.operands) // 2
        inputs = list(range(count))
        dims = ints(op.attributes["dimensions"])
        layout = self.layout_of(op.operands[0])
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
        self._finish_partial_results(op, result_layout, groups, combiner)
        return True

    def _finish_partial_results(self, op, tiles: Layout, groups: list[list[int]], combiner: str) -> None:
        """`op`, run on tiles, leaves each device a partial result over `groups`: left
        unreduced where that is wanted, as XLA leaves it, else combined by an all_reduce
        right after the op."""
        if combiner == "stablehlo.add" and self._left_unreduced(op.results[0], tiles, groups):
            self.set_result(op.results[0], self.wanted[op.results[0]])
            return
        emit = Emitter(self.channels)
        with ir.InsertionPoint(op):
            local = op.clone()
            self.set_result(local.results[0], tiles)
            combined = emit.all_reduce(local.results[0], groups, combiner)
        self.layouts[combined] = tiles
        op.results[0].replace_all_uses_with(combined)
        op.erase()

    def _left_unreduced(self, result, tiles: Layout, groups: list[list[int]]) -> bool:
        """Whether `result`, whose devices hold partial sums over `groups`, is wanted
        unreduced over just those devices (JAX's `out_sharding=P(unreduced=...)`): then
        no all_reduce is made, as XLA makes none."""
        wish = self.wanted.get(result)
        if wish is None or wish.partial_of is None or tiles_only(wish) != tiles:
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
        left_now, right_now = self.layout_of(lhs), self.layout_of(rhs)
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
        self._finish_partial_results(op, result_layout, groups, "stablehlo.add")
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

    def _lower_scatter_add(self, op, batch_dims: list[int], update_scatter: list[int]) -> bool:
        """A scatter-add whose updates (and indices) are split along their scatter
        dimensions: each device adds its own updates into the input, which is counted
        on one device only, so the result is unreduced over those devices (a
        segment_sum or bincount of a split array); a later layout that is not adds
        the partial sums."""
        if _single_combiner(op) != "stablehlo.add":
            return False
        indices, updates = op.operands[1], op.operands[2]
        index_layout = self.layout_of(indices)
        update_layout = self.layout_of(updates)
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
            layout = self.layout_of(value)
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
        if match is None or not op.operands or not all(is_tensor(v) for v in values):
            return False
        batch = int(match.group(1))
        if batch == 0 or any(len(shape_of(v)) < batch for v in values):
            return False
        first = self.layout_of(op.operands[0])

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

