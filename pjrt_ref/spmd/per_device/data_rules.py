"""Per-device rules for ops that compute element by element or move data:
element-wise ops, broadcasts, transposes, reshapes, iota, constants, ops
that work along some dimensions (slice, pad, reverse, concatenate, dynamic
(update) slice, sort), gather and scatter. Methods of the rewrite
(`lowering._Lowering`); each keeps splits where the op lets every device
work on its own tiles.
"""
from __future__ import annotations

from jaxlib.mlir import ir

from pjrt_ref.interpreter.attributes import convert_attribute
from pjrt_ref.spmd import op_kinds
from pjrt_ref.spmd.gspmd import custom_call_target
from pjrt_ref.spmd.inspect_sharding import TARGET as INSPECT_SHARDING
from pjrt_ref.spmd.layout import Layout, gathered
from pjrt_ref.spmd.op_kinds import reshape_groups
from pjrt_ref.spmd.per_device.emit import Emitter, element_type, local_type, shape_of, shard_shape
from pjrt_ref.spmd.per_device.groups import is_split, tiles_only, with_partial, without_dims
from pjrt_ref.spmd.per_device.ir_helpers import i64_array, ints, is_float, is_tensor

# Element-wise here too: a bitcast between types of one width keeps every element in place.
ELEMENTWISE = op_kinds.ELEMENTWISE | {"stablehlo.bitcast_convert"}
# Custom calls that hand their operand on: placement hints, and jax.debug.inspect_array_sharding's.
SAME_VALUE_CALLS = op_kinds.SAME_VALUE_CALLS | {INSPECT_SHARDING}


class DataMovementRules:
    """The rules of `lowering._Lowering` for element-wise and data-movement ops."""

    def lower_elementwise(self, op) -> None:
        """Element-wise ops (and hints that return their operand): every operand of the
        result's shape in the result's layout, the op on tiles."""
        result = op.results[0]
        shape = shape_of(result)
        same = [i for i, v in enumerate(op.operands) if is_tensor(v) and self.global_shape(v) == shape]
        layouts = {i: self.layout_of(op.operands[i]) for i in same}
        partial = [i for i in same if layouts[i].partial_of is not None]
        if partial and self._keeps_partial_sums(op, same, partial, layouts):
            layout = layouts[partial[0]]
            tiles = tiles_only(layout)
            for i, operand in enumerate(op.operands):     # a scaling factor is whole: its tiles
                wanted = layout if op.name != "stablehlo.multiply" or i in partial else tiles
                self.reshard_operand(op, i, wanted if i in same else self.whole(operand))
            for r in op.results:
                self.set_result(r, layout)
            return
        natural = max((tiles_only(l) for l in layouts.values()),
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
        if op.name in ("stablehlo.negate", "stablehlo.convert") or custom_call_target(op) in SAME_VALUE_CALLS:
            return len(op.operands) == 1 and is_float(element_type(op.results[0]))
        if op.name == "stablehlo.multiply":
            return len(partial) == 1 and len(same) == 2
        return False

    def lower_broadcast(self, op) -> None:
        """broadcast_in_dim: the operand's splits go to the dimensions they map to;
        a wanted split of a broadcast dimension is made locally (the values repeat)."""
        result = op.results[0]
        operand_layout = self.layout_of(op.operands[0])
        dims = ints(op.attributes["broadcast_dimensions"])
        operand_shape = self.global_shape(op.operands[0])
        natural = gathered([(operand_layout, dims.index(j)) if j in dims and
                            operand_shape[dims.index(j)] == shape_of(result)[j] else (None, 0)
                            for j in range(len(shape_of(result)))], self.devices) or self.whole(result)
        partial = operand_layout.partial_of           # partial sums stay partial sums, repeated
        layout = with_partial(self.target(result, natural), partial)
        self.reshard_operand(op, 0, with_partial(projected(layout, op, operand_shape), partial))
        self.set_result(result, layout)

    def lower_transpose(self, op) -> None:
        permutation = ints(op.attributes["permutation"])
        result = op.results[0]
        natural = (self.layout_of(op.operands[0])).transposed(permutation)
        layout = self.target(result, natural, partial=natural.partial_of is not None)
        inverse = tuple(permutation.index(d) for d in range(len(permutation)))
        self.reshard_operand(op, 0, layout.transposed(inverse))
        self.set_result(result, layout)

    def lower_reshape(self, op) -> None:
        """reshape keeps a split of the major dimension of each group of dimensions
        it merges or splits, where the tile count divides the new major dimension
        (the group's other dimensions are gathered: a tile is then a contiguous block)."""
        operand, result = op.operands[0], op.results[0]
        layout = self.layout_of(operand)
        before, after = self.global_shape(operand), shape_of(result)
        sources = [(None, 0)] * len(after)
        kept = set()
        for dims_before, dims_after in reshape_groups(before, after):
            major = dims_before[0] if dims_before else None
            if major is not None and dims_after and after[dims_after[0]] % layout.tile_counts[major] == 0:
                sources[dims_after[0]] = (layout, major)
                kept.add(major)
        needed = gathered([(layout, d) if d in kept else (None, 0) for d in range(len(before))], self.devices)
        result_layout = gathered(sources, self.devices)
        if needed is None or result_layout is None:
            needed, result_layout = self.whole(operand), self.whole(result)
        self.reshard_operand(op, 0, with_partial(needed, layout.partial_of))
        self.set_result(result, with_partial(result_layout, layout.partial_of))

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

    def lower_along(self, op) -> bool:
        """Ops that work along some dimensions and leave the others alone (slice,
        pad, reverse, concatenate, dynamic_slice, dynamic_update_slice, sort): the
        dimensions they touch are gathered, the others keep the first operand's
        splits, and the op runs on tiles (sizes in its attributes made local)."""
        data = [i for i, v in enumerate(op.operands)
                if is_tensor(v) and len(shape_of(v)) == len(shape_of(op.results[0]))]
        if not data or data[0] != 0:
            return False
        touched = _touched_dims(op, self.global_shape(op.operands[0]),
                                [self.global_shape(op.operands[i]) for i in data])
        first = self.layout_of(op.operands[0])
        partial = first.partial_of if op.name != "stablehlo.sort" else None    # all but sort are linear
        layout = with_partial(without_dims(first, touched), partial)
        for i, operand in enumerate(op.operands):      # a pad value is added in: a partial sum too
            scalar = with_partial(self.whole(operand), partial if op.name == "stablehlo.pad" else None)
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
        layout = self.layout_of(operand)
        shape, sizes = self.global_shape(operand), ints(op.attributes["slice_sizes"])
        collapsed, operand_batch = list(numbers.collapsed_slice_dims), list(numbers.operand_batching_dims)
        offset_sources = [d for d in range(len(shape)) if d not in collapsed and d not in operand_batch]
        result_batch = [d for d in range(len(shape_of(result))) if d not in list(numbers.offset_dims)]
        indices_batch = [d for d in range(len(shape_of(indices))) if d != numbers.index_vector_dim]
        kept_operand = {d for d in offset_sources if sizes[d] == shape[d] and layout.tile_counts[d] > 1}
        index_layout_now = self.layout_of(indices)
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
        op.attributes["slice_sizes"] = i64_array(
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

    def _lower_scatter_batched(self, op, inputs: list[int], indices: int, updates: list[int],
                               mapping: list) -> bool:
        """`mapping` pairs (input dim, indices dim, update dim) of each batching
        dimension; each keeps the split the first side that has one gives it."""
        sides = [(inputs[0], 0), (indices, 1), (updates[0], 2)]
        sources = []
        for dims in mapping:
            for k, position in sides:
                layout = self.layout_of(op.operands[k])
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


def _tile_count(layout: Layout) -> int:
    count = 1
    for c in layout.tile_counts:
        count *= c
    return count


def projected(layout: Layout, broadcast, operand_shape: tuple[int, ...]) -> Layout:
    """The layout a broadcast_in_dim's operand needs for its result to come out in
    `layout`: the splits of the dimensions it maps to (a size-1 operand dimension is whole)."""
    dims = ints(broadcast.attributes["broadcast_dimensions"])
    result_shape = shape_of(broadcast.results[0])
    keep = [operand_shape[i] == result_shape[j] for i, j in enumerate(dims)]
    return Layout(tuple(layout.tile_counts[j] if keep[i] else 1 for i, j in enumerate(dims)),
                  {device: tuple(tile[j] if keep[i] else 0 for i, j in enumerate(dims))
                   for device, tile in layout.tile_of.items()})


def _touched_dims(op, shape: tuple[int, ...], data_shapes: list) -> tuple[int, ...]:
    """The dimensions a `lower_along` op works along (the others it leaves alone)."""
    name, rank = op.name, len(shape)
    attrs = op.attributes
    if name == "stablehlo.slice":
        start, limit, stride = (ints(attrs[k]) for k in ("start_indices", "limit_indices", "strides"))
        return tuple(d for d in range(rank) if (start[d], limit[d], stride[d]) != (0, shape[d], 1))
    if name == "stablehlo.pad":
        low, high, inner = (ints(attrs[k]) for k in ("edge_padding_low", "edge_padding_high", "interior_padding"))
        return tuple(d for d in range(rank) if (low[d], high[d], inner[d]) != (0, 0, 0))
    if name == "stablehlo.reverse":
        return ints(attrs["dimensions"])
    if name in ("stablehlo.concatenate", "stablehlo.sort"):
        return (int(convert_attribute(attrs["dimension"])) % rank,)
    if name == "stablehlo.dynamic_slice":
        sizes = ints(attrs["slice_sizes"])
        return tuple(d for d in range(rank) if sizes[d] != shape[d])
    if name == "stablehlo.dynamic_update_slice":
        update = data_shapes[1]
        return tuple(d for d in range(rank) if update[d] != shape[d])
    return tuple(range(rank))


def _make_sizes_local(op, layout: Layout) -> None:
    """Sizes an op's attributes give in global terms, made the tile's (only along
    dimensions it leaves alone, where they are the whole extent)."""
    if op.name == "stablehlo.slice":
        limits = ints(op.attributes["limit_indices"])
        local = shape_of(op.operands[0])
        op.attributes["limit_indices"] = i64_array(
            [local[d] if layout.tile_counts[d] > 1 else limit for d, limit in enumerate(limits)])
    elif op.name == "stablehlo.dynamic_slice":
        op.attributes["slice_sizes"] = i64_array(shape_of(op.results[0]))

