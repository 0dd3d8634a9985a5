"""Building the ops the per-device program adds: collectives and local slices.

Every op here is built with MLIR's generic `Operation.create` and parsed
attributes, so the code reads like the op's definition in the StableHLO
spec and does not depend on one jaxlib version's Python builders.
"""
from __future__ import annotations

from jaxlib.mlir import ir

from pjrt_ref.spmd.layout import Layout


class NotLowered(Exception):
    """The program keeps running whole (the reason says why)."""


def shard_shape(shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    """One device's tile of an array of `shape`; an uneven split is not lowered."""
    if not evenly_split(shape, layout):
        raise NotLowered(f"a split of {list(shape)} into {list(layout.tile_counts)} tiles is uneven")
    return tuple(size // count for size, count in zip(shape, layout.tile_counts))


def evenly_split(shape: tuple[int, ...], layout: Layout) -> bool:
    """Whether `layout` cuts an array of `shape` into equal tiles."""
    return len(shape) == len(layout.tile_counts) and not any(
        size % count for size, count in zip(shape, layout.tile_counts))


def tensor_type(shape, element_type) -> ir.Type:
    return ir.RankedTensorType.get(list(shape), element_type)


def local_type(global_type: ir.Type, layout: Layout) -> ir.Type:
    """The type of one device's tile of a value of `global_type`."""
    ranked = ir.RankedTensorType(global_type)
    return tensor_type(shard_shape(tuple(ranked.shape), layout), ranked.element_type)


def shape_of(value) -> tuple[int, ...]:
    return tuple(ir.RankedTensorType(value.type).shape)


def element_type(value) -> ir.Type:
    return ir.RankedTensorType(value.type).element_type


def _groups_attribute(groups: list[list[int]]) -> ir.Attribute:
    rows = ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups)
    return ir.Attribute.parse(f"dense<[{rows}]> : tensor<{len(groups)}x{len(groups[0])}xi64>")


class Emitter:
    """Adds ops before one op of the program (or at the end of a block)."""

    def __init__(self, channels: list[int]) -> None:
        self._channels = channels            # shared counter: one channel id per collective

    def _channel(self) -> ir.Attribute:
        self._channels[0] += 1
        return ir.Attribute.parse(f"#stablehlo.channel_handle<handle = {self._channels[0]}, type = 1>")

    def all_gather(self, value, dim: int, groups: list[list[int]]):
        """StableHLO `all_gather` along `dim` within each of `groups` (global device ids)."""
        shape = list(shape_of(value))
        shape[dim] *= len(groups[0])
        return ir.Operation.create(
            "stablehlo.all_gather", results=[tensor_type(shape, element_type(value))], operands=[value],
            attributes={"all_gather_dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim),
                        "replica_groups": _groups_attribute(groups), "channel_handle": self._channel(),
                        "use_global_device_ids": ir.UnitAttr.get()}).result

    def all_reduce(self, value, groups: list[list[int]], combiner: str):
        """StableHLO `all_reduce` whose computation is the one op `combiner` (e.g. stablehlo.add)."""
        op = ir.Operation.create(
            "stablehlo.all_reduce", results=[value.type], operands=[value], regions=1,
            attributes={"replica_groups": _groups_attribute(groups), "channel_handle": self._channel(),
                        "use_global_device_ids": ir.UnitAttr.get()})
        scalar = tensor_type((), element_type(value))
        block = op.regions[0].blocks.append(scalar, scalar)
        with ir.InsertionPoint(block):
            combined = ir.Operation.create(combiner, results=[scalar], operands=list(block.arguments))
            ir.Operation.create("stablehlo.return", operands=[combined.result])
        return op.result

    def all_reduce_many(self, operands: list, like):
        """One `all_reduce` of several operands, with the groups and computation of `like`."""
        op = ir.Operation.create(
            "stablehlo.all_reduce", results=[v.type for v in operands], operands=operands, regions=1,
            attributes={"replica_groups": like.attributes["replica_groups"], "channel_handle": self._channel(),
                        "use_global_device_ids": ir.UnitAttr.get()})
        combiner = like.regions[0].blocks[0].operations[0].operation.name
        scalar = tensor_type((), element_type(operands[0]))
        block = op.regions[0].blocks.append(scalar, scalar)
        with ir.InsertionPoint(block):
            combined = ir.Operation.create(combiner, results=[scalar], operands=list(block.arguments))
            ir.Operation.create("stablehlo.return", operands=[combined.result])
        return op

    def constant(self, text: str):
        """A `stablehlo.constant` of the attribute `text` (e.g. `dense<0> : tensor<i32>`)."""
        attribute = ir.Attribute.parse(text)
        return ir.Operation.create("stablehlo.constant", results=[attribute.type],
                                   attributes={"value": attribute}).result

    def tile_offsets(self, layout: Layout, shape: tuple[int, ...]) -> list:
        """Scalar i32 values: where this device's tile of an array of `shape`
        starts along each dimension, looked up by `stablehlo.partition_id`."""
        local = shard_shape(shape, layout)
        devices = sorted(layout.tile_of)
        offsets = []
        index = None
        for dim, count in enumerate(layout.tile_counts):
            if count == 1:
                offsets.append(self.constant("dense<0> : tensor<i32>"))
                continue
            if index is None:
                index = self._partition_index()
            table = ", ".join(str(layout.tile_of[d][dim] * local[dim]) for d in devices)
            column = self.constant(f"dense<[{table}]> : tensor<{len(devices)}xi32>")
            offsets.append(self._scalar_at(column, index))
        return offsets

    def _partition_index(self):
        """`partition_id` as a signed index (the tables are in partition order)."""
        i32 = tensor_type((), ir.IntegerType.get_signless(32))
        pid = ir.Operation.create("stablehlo.partition_id",
                                  results=[tensor_type((), ir.IntegerType.get_unsigned(32))]).result
        return ir.Operation.create("stablehlo.convert", results=[i32], operands=[pid]).result

    def _scalar_at(self, vector, index):
        one = ir.Operation.create(
            "stablehlo.dynamic_slice", results=[tensor_type((1,), element_type(vector))],
            operands=[vector, index],
            attributes={"slice_sizes": ir.Attribute.parse("array<i64: 1>")}).result
        return ir.Operation.create("stablehlo.reshape", results=[tensor_type((), element_type(vector))],
                                   operands=[one]).result

    def local_tile(self, value, layout: Layout):
        """This device's tile (by `layout`) of `value`, which every device holds whole:
        a `dynamic_slice` at the device's offsets; no device talks to another."""
        shape = shape_of(value)
        sizes = shard_shape(shape, layout)
        offsets = self.tile_offsets(layout, shape)
        return ir.Operation.create(
            "stablehlo.dynamic_slice", results=[tensor_type(sizes, element_type(value))],
            operands=[value, *offsets],
            attributes={"slice_sizes": ir.Attribute.parse(
                "array<i64" + ("" if not sizes else ": " + ", ".join(map(str, sizes))) + ">")}).result

    def kept_where(self, value, kept: list[bool]):
        """`value` on the partitions `kept` says (in partition order), zeros on the
        others (a whole value made unreduced: the partial sums still add up to it)."""
        table = ", ".join("true" if k else "false" for k in kept)
        column = self.constant(f"dense<[{table}]> : tensor<{len(kept)}xi1>")
        keep = self._scalar_at(column, self._partition_index())
        zero = ir.Operation.create("stablehlo.constant", results=[value.type], attributes={
            "value": ir.DenseElementsAttr.get_splat(value.type, _zero_of(element_type(value)))}).result
        return ir.Operation.create("stablehlo.select", results=[value.type], operands=[keep, value, zero]).result

    def placed_in_zeros(self, value, tiles: Layout, shape: tuple[int, ...]):
        """An array of `shape`, zeros but for `value` at this device's tile (by `tiles`)."""
        zeros_type = tensor_type(shape, element_type(value))
        zeros = ir.Operation.create("stablehlo.constant", results=[zeros_type], attributes={
            "value": ir.DenseElementsAttr.get_splat(zeros_type, _zero_of(element_type(value)))}).result
        offsets = self.tile_offsets(tiles, shape)
        return ir.Operation.create("stablehlo.dynamic_update_slice", results=[zeros_type],
                                   operands=[zeros, value, *offsets]).result

    def add_offset(self, value, offset):
        """`value + offset` with the scalar i32 `offset` converted and broadcast to `value`'s type."""
        scalar = tensor_type((), element_type(value))
        converted = ir.Operation.create("stablehlo.convert", results=[scalar], operands=[offset]).result
        spread = ir.Operation.create("stablehlo.broadcast_in_dim", results=[value.type], operands=[converted],
                                     attributes={"broadcast_dimensions": ir.Attribute.parse("array<i64>")}).result
        return ir.Operation.create("stablehlo.add", results=[value.type], operands=[value, spread]).result


def _zero_of(element) -> ir.Attribute:
    text = str(element)
    if text.startswith("complex"):
        raise NotLowered("an unreduced complex value")
    if text.startswith(("i", "ui")):
        return ir.IntegerAttr.get(element, 0)
    return ir.FloatAttr.get(element, 0.0)
