"""Dynamic-shape ops: the result shape comes from run-time operands.

Spec sections: "dynamic_broadcast_in_dim", "dynamic_reshape",
"dynamic_iota", "dynamic_pad"; and `real_dynamic_slice` (kept by StableHLO
from MHLO: `slice` with run-time start/limit/strides). Result types may
have `?` dims; the shape computed here from the operands is what the result
gets. Where the result type has a static dim, it must agree.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.gather import as_int64
from pjrt_ref.interpreter.ops.shape import broadcast_to_shape, iota_array, reshape_to
from pjrt_ref.interpreter.ops.slicing import pad_array


def shape_from_tensor(op, shape_tensor: np.ndarray) -> tuple[int, ...]:
    """A 1-d integer tensor as a shape, checked against the result type."""
    shape = tuple(int(d) for d in as_int64(shape_tensor).reshape(-1))
    declared = op.result_type.shape
    if len(shape) != len(declared) or any(d < 0 for d in shape) or any(
            s is not None and s != d for s, d in zip(declared, shape)):
        raise op.error(f"run-time shape {list(shape)} does not match the result type "
                       f"{op.result_type}")
    return shape


@register("stablehlo.dynamic_broadcast_in_dim")
def dynamic_broadcast_in_dim(op, operand, output_dimensions):
    """Spec "dynamic_broadcast_in_dim" (docs/spec.md#dynamic_broadcast_in_dim):
    broadcast_in_dim to the run-time `output_dimensions`; the
    known_(non)expanding_dimensions hints are not needed and are ignored."""
    shape = shape_from_tensor(op, output_dimensions)
    dims = op.attrs["broadcast_dimensions"]
    for d, size in enumerate(operand.shape):
        if size != 1 and size != shape[dims[d]]:
            raise op.error(f"operand dim {d} of size {size} cannot broadcast to "
                           f"{shape[dims[d]]}")
    return broadcast_to_shape(operand, shape, dims)


@register("stablehlo.dynamic_reshape")
def dynamic_reshape(op, operand, output_shape):
    """Spec "dynamic_reshape" (docs/spec.md#dynamic_reshape)."""
    return reshape_to(operand, shape_from_tensor(op, output_shape))


def validate_dynamic_iota(op) -> None:
    if op.result_type.quant is not None:
        raise op.error("iota of a quantized tensor is not supported", cls=Unimplemented)


@register("stablehlo.dynamic_iota", validate=validate_dynamic_iota)
def dynamic_iota(op, output_shape):
    """Spec "dynamic_iota" (docs/spec.md#dynamic_iota)."""
    shape = shape_from_tensor(op, output_shape)
    return iota_array(shape, op.attrs["iota_dimension"], op.result_type.dtype)


@register("stablehlo.dynamic_pad")
def dynamic_pad(op, operand, padding_value, edge_padding_low, edge_padding_high,
                interior_padding):
    """Spec "dynamic_pad" (docs/spec.md#dynamic_pad): pad with run-time
    (possibly negative) edge padding and (non-negative) interior padding."""
    low, high, interior = (as_int64(v).reshape(-1).tolist()
                           for v in (edge_padding_low, edge_padding_high, interior_padding))
    return pad_array(operand, padding_value, low, high, interior)


@register("stablehlo.real_dynamic_slice")
def real_dynamic_slice(op, operand, start_indices, limit_indices, strides):
    """`real_dynamic_slice` (MHLO): `slice` with run-time start/limit/strides.

    The result has ceil((limit - start) / stride) elements per dim. A window
    that sticks out of the operand is moved inside, as dynamic_slice clamps
    its starts (StableHLO canonicalises unit-stride real_dynamic_slice to
    dynamic_slice; XLA clamps too); a window longer than the dim, a limit
    below the start or a non-positive stride is an error.
    """
    starts, limits, steps = (as_int64(v).reshape(-1).tolist()
                             for v in (start_indices, limit_indices, strides))
    index = []
    for d, (start, limit, step, size) in enumerate(zip(starts, limits, steps, operand.shape)):
        count = -(-(limit - start) // step) if step > 0 else -1
        span = (count - 1) * step + 1 if count > 0 else 0
        if count < 0 or span > size:
            raise op.error(f"dimension {d}: slice {start}:{limit}:{step} does not fit size {size}")
        start = min(max(start, 0), size - span)
        index.append(slice(start, start + span, step))
    return operand[tuple(index)]
