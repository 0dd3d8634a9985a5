"""Small readers of MLIR ops and values the per-device rewrite shares."""
from __future__ import annotations

from jaxlib.mlir import ir

from pjrt_ref.interpreter.attributes import convert_attribute


def nested_ops(op) -> list:
    found = []
    for region in op.regions:
        for block in region.blocks:
            found.extend(block_ops(block))
    return found


def block_ops(block) -> list:
    found = []
    for op in block.operations:
        op = op.operation
        found.append(op)
        found.extend(nested_ops(op))
    return found


def terminator(block):
    operations = block.operations
    return operations[len(operations) - 1].operation


def is_tensor(value) -> bool:
    return isinstance(value.type, ir.RankedTensorType) or ir.RankedTensorType.isinstance(value.type)


def ints(attribute) -> tuple[int, ...]:
    return tuple(int(v) for v in convert_attribute(attribute))


def i64_array(values) -> ir.Attribute:
    return ir.Attribute.parse("array<i64" + ("" if not values else ": " + ", ".join(map(str, values))) + ">")


def is_float(element) -> bool:
    """Floating-point or complex (types print as f32, bf16, f8E4M3FN, complex<f32>, ...)."""
    text = str(element)
    return text.startswith(("f", "bf", "complex"))

