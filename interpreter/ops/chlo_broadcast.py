"""CHLO's broadcasting elementwise ops: `chlo.broadcast_add` and friends.

Each `chlo.broadcast_<op>` is an elementwise op whose operands may differ in
shape (ChloOps.td, "CHLO_BroadcastBinaryElementwiseOp"): the operands are
first broadcast to the result shape, then the elementwise op runs. There is
no arithmetic here: the elementwise semantics are those of the StableHLO (or
CHLO) op named in `ELEMENTWISE_OP_OF`, looked up in the kernel table, so
they cannot drift apart.

Broadcasting follows numpy's rule (dimensions aligned from the right; a
dimension of size 1 stretches), except when a binary op carries
`broadcast_dimensions`: then the lower-rank operand's dimension i is the
result's dimension broadcast_dimensions[i], as in StableHLO's
`broadcast_in_dim`. `chlo.broadcast_compare` carries CHLO's own
comparison_direction and compare_type enums; they are translated to
StableHLO's (same names) for `stablehlo.compare`.
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.steps import OpInfo
from pjrt_ref.interpreter.registry import lookup, register

ELEMENTWISE_OP_OF = {
    "chlo.broadcast_add": "stablehlo.add",
    "chlo.broadcast_and": "stablehlo.and",
    "chlo.broadcast_atan2": "stablehlo.atan2",
    "chlo.broadcast_compare": "stablehlo.compare",
    "chlo.broadcast_complex": "stablehlo.complex",
    "chlo.broadcast_divide": "stablehlo.divide",
    "chlo.broadcast_maximum": "stablehlo.maximum",
    "chlo.broadcast_minimum": "stablehlo.minimum",
    "chlo.broadcast_multiply": "stablehlo.multiply",
    "chlo.broadcast_next_after": "chlo.next_after",
    "chlo.broadcast_or": "stablehlo.or",
    "chlo.broadcast_polygamma": "chlo.polygamma",
    "chlo.broadcast_power": "stablehlo.power",
    "chlo.broadcast_remainder": "stablehlo.remainder",
    "chlo.broadcast_select": "stablehlo.select",
    "chlo.broadcast_shift_left": "stablehlo.shift_left",
    "chlo.broadcast_shift_right_arithmetic": "stablehlo.shift_right_arithmetic",
    "chlo.broadcast_shift_right_logical": "stablehlo.shift_right_logical",
    "chlo.broadcast_subtract": "stablehlo.subtract",
    "chlo.broadcast_xor": "stablehlo.xor",
    "chlo.broadcast_zeta": "chlo.zeta",
}

# `#chlo<comparison_direction LT>` -> "LT"; `#chlo<comparison_type FLOAT>` -> "FLOAT".
_CHLO_ENUM = re.compile(r"#chlo<\w+\s+(\w+)>")


def _chlo_enum_value(value):
    match = _CHLO_ENUM.fullmatch(value) if isinstance(value, str) else None
    return match.group(1) if match else value


def result_axes_of_operands(op) -> list[tuple[int, ...]]:
    """For each operand, the result dimension each of its dimensions maps to."""
    result_rank = len(op.result_type.shape)
    ranks = [len(t.shape) for t in op.operand_types]
    broadcast_dimensions = op.attrs.get("broadcast_dimensions")
    axes = []
    for rank in ranks:
        if broadcast_dimensions is not None and rank < result_rank and len(ranks) == 2:
            if len(broadcast_dimensions) != rank:
                raise op.error(f"broadcast_dimensions {list(broadcast_dimensions)} do not "
                               f"match the rank-{rank} operand")
            axes.append(tuple(int(d) for d in broadcast_dimensions))
        else:
            if rank > result_rank:
                raise op.error(f"operand of rank {rank} does not broadcast to rank {result_rank}")
            axes.append(tuple(range(result_rank - rank, result_rank)))
    return axes


def _validate_broadcasting(op) -> None:
    elementwise_name = ELEMENTWISE_OP_OF[op.name]
    kernel = lookup(elementwise_name)
    if kernel is None:
        raise op.error(f"needs {elementwise_name}, which pjrt-ref does not implement",
                       cls=Unimplemented)
    axes = result_axes_of_operands(op)
    result_shape = op.result_type.shape
    for operand_type, operand_axes in zip(op.operand_types, axes):
        for size, axis in zip(operand_type.shape, operand_axes):
            if size not in (None, 1) and result_shape[axis] not in (None, size):
                raise op.error(f"operand shape {operand_type.shape} does not broadcast "
                               f"to {result_shape}")
    attrs = {name: _chlo_enum_value(value) for name, value in op.attrs.items()
             if name != "broadcast_dimensions"}
    operand_types = tuple(replace(t, shape=result_shape) for t in op.operand_types)
    elementwise_op = OpInfo(elementwise_name, op.location, attrs, operand_types,
                            op.result_types, op.module)
    if kernel.validate is not None:
        kernel.validate(elementwise_op)
    op.cache["kernel"] = kernel.fn
    op.cache["elementwise_op"] = elementwise_op
    op.cache["axes"] = axes


def expand_rank(array: np.ndarray, axes: tuple[int, ...], rank: int) -> np.ndarray:
    """`array` reshaped to `rank` dimensions, its own at `axes`, 1 elsewhere."""
    shape = [1] * rank
    for size, axis in zip(array.shape, axes):
        shape[axis] = size
    return array.reshape(shape)


@register(*ELEMENTWISE_OP_OF, validate=_validate_broadcasting)
def broadcasting_elementwise(op, *operands):
    """ChloOps.td "broadcast_*": broadcast every operand to the result shape
    (numpy's rule, or `broadcast_dimensions` for the lower-rank operand),
    then apply the elementwise op of `ELEMENTWISE_OP_OF`. A size-1 dimension
    stretches; any other mismatch is an error."""
    rank = len(op.result_type.shape)
    expanded = [expand_rank(np.asarray(x), axes, rank)
                for x, axes in zip(operands, op.cache["axes"])]
    shape = np.broadcast_shapes(*(x.shape for x in expanded))
    broadcast = [np.broadcast_to(x, shape) for x in expanded]
    result = op.cache["kernel"](op.cache["elementwise_op"], *broadcast)
    return np.array(result) if not result.flags.writeable else result
