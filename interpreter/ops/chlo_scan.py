"""`chlo.scan`: a sequential scan along one dimension with carried state.

ChloOps.td ("scan"; XLA's operation semantics "Scan"): `inputs` are sliced
along `dimension`; at each position the body receives the slices of every
input (the scan dimension removed) followed by the current carries, and
returns the outputs for that position followed by the new carries. The
outputs are stacked back along `dimension`; the carries after the last
position are the op's final results. `is_reverse` runs from the last
position to the first (outputs still land at their own positions).
`is_associative` only licenses reordering, so a sequential scan honours it.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.registry import register


def _validate_scan(op) -> None:
    num_inputs, num_inits = op.attrs["operandSegmentSizes"]
    num_outputs, num_carries = op.attrs["resultSegmentSizes"]
    if num_carries != num_inits:
        raise op.error(f"scan has {num_inits} inits but {num_carries} carries")
    dimension = op.attrs["dimension"]
    for t in op.operand_types[:num_inputs] + op.result_types[:num_outputs]:
        if dimension >= len(t.shape):
            raise op.error(f"scan dimension {dimension} is out of range for {t}")


@register("chlo.scan", validate=_validate_scan)
def scan(op, *operands, regions):
    """Spec-less CHLO op; see the module docstring. A scan over an empty
    dimension returns empty outputs and the inits as carries."""
    num_inputs, _ = op.attrs["operandSegmentSizes"]
    num_outputs, _ = op.attrs["resultSegmentSizes"]
    dimension = op.attrs["dimension"]
    inputs, carries = operands[:num_inputs], list(operands[num_inputs:])
    length = op.result_types[0].shape[dimension] if num_outputs else inputs[0].shape[dimension]
    if length is None:
        length = inputs[0].shape[dimension]
    output_types = op.result_types[:num_outputs]
    outputs = [np.empty(_run_time_shape(t.shape, dimension, length, inputs), t.dtype)
               for t in output_types]
    positions = range(length - 1, -1, -1) if op.attrs.get("is_reverse") else range(length)
    body = regions[0]
    for i in positions:
        slices = [np.take(x, i, axis=dimension) for x in inputs]
        results = body(*slices, *carries)
        for output, value in zip(outputs, results[:num_outputs]):
            np.moveaxis(output, dimension, 0)[i] = value
        carries = list(results[num_outputs:])
    return tuple(outputs) + tuple(np.asarray(c) for c in carries)


def _run_time_shape(shape, dimension, length, inputs):
    """A result shape with its dynamic dims taken from the first input."""
    return tuple(length if axis == dimension else
                 (size if size is not None else inputs[0].shape[axis])
                 for axis, size in enumerate(shape))
