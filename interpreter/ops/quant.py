"""Quantization ops: uniform_quantize, uniform_dequantize.

Spec sections "uniform_quantize" and "uniform_dequantize" (docs/spec.md);
the arithmetic is in `interpreter/quantization.py`, which also makes every
other op accept quantized tensors (`dequantize_op_quantize`).
"""
from __future__ import annotations

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter.quantization import dequantize, quantize
from pjrt_ref.interpreter.registry import register


def _validate_uniform_quantize(op) -> None:
    if op.result_type.quant is None:
        raise op.error(f"result type {op.result_type} is not quantized", cls=InvalidArgument)


@register("stablehlo.uniform_quantize", validate=_validate_uniform_quantize)
def uniform_quantize(op, operand):
    """Spec "uniform_quantize": float -> quantized, or requantize.

    A float operand is quantized with the result's scales and zero points;
    a quantized operand is first dequantized with its own (which is how a
    per-axis tensor becomes a per-tensor one, or the reverse). Rounding is
    half to even; values beyond the storage range (or `storage_min/max`)
    saturate.
    """
    operand_quant = op.operand_types[0].quant
    values = operand if operand_quant is None else dequantize(operand, operand_quant)
    return quantize(values, op.result_type.quant)


def _validate_uniform_dequantize(op) -> None:
    if op.operand_types[0].quant is None:
        raise op.error(f"operand type {op.operand_types[0]} is not quantized",
                       cls=InvalidArgument)


@register("stablehlo.uniform_dequantize", validate=_validate_uniform_dequantize)
def uniform_dequantize(op, operand):
    """Spec "uniform_dequantize": `(storage - zero_point) * scale`, per tensor
    or per axis, in the expressed type."""
    return dequantize(operand, op.operand_types[0].quant).astype(op.result_type.dtype, copy=False)
