"""JAX's shape assertions in shape-polymorphic exports.

`jax.export` with symbolic shapes emits

    stablehlo.custom_call @shape_assertion(%ok, %v0, %v1, ...) {
        error_message = "... {0} ... {1} ...", has_side_effect = true}

to check, when the shapes become known, that the actual argument shapes fit
the polymorphic specification (e.g. that a dimension is even, or that two
arguments share a dimension variable). It is defined by JAX
(`jax/_src/export/shape_poly.py`, `shape_assertion`) and by XLA's shape
refinement (which checks it when the operands are constants), not by the
StableHLO spec.
"""
from __future__ import annotations

import re

import numpy as np

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter.registry import register_custom_call
from pjrt_ref.interpreter.types import TensorType, is_bool, is_integer

_PLACEHOLDER = re.compile(r"\{(\d+)\}")


def _validate_shape_assertion(op) -> None:
    types = op.operand_types
    if not types or not isinstance(types[0], TensorType) or types[0].shape != () \
            or not is_bool(types[0].dtype):
        raise op.error("@shape_assertion takes a tensor<i1> predicate as its first operand")
    for ttype in types[1:]:
        if not isinstance(ttype, TensorType) or ttype.shape != () or not is_integer(ttype.dtype):
            raise op.error(f"@shape_assertion's message inputs are integer scalars, got {ttype}")
    if op.result_types:
        raise op.error("@shape_assertion has no results")


def format_error_message(template: str, inputs) -> str:
    """`template` with each `{i}` replaced by the i-th message input (text
    around the placeholders, braces included, is kept as it is)."""
    def substitute(match: re.Match) -> str:
        index = int(match[1])
        return str(int(inputs[index])) if index < len(inputs) else match[0]

    return _PLACEHOLDER.sub(substitute, template)


@register_custom_call("shape_assertion", validate=_validate_shape_assertion)
def shape_assertion(op, predicate, *message_inputs):
    """`@shape_assertion(ok, v0, v1, ...)`: nothing when `ok` is true;
    otherwise raise InvalidArgument with the `error_message` attribute,
    its `{0}`, `{1}`, ... replaced by v0, v1, ... (the dimension sizes that
    broke the specification). Returns no values."""
    if not bool(np.asarray(predicate)):
        message = format_error_message(op.attrs.get("error_message", "shape assertion failed"),
                                       message_inputs)
        raise InvalidArgument(message, op="stablehlo.custom_call @shape_assertion",
                              location=op.location)
    return ()
