"""`custom_call @ApproxTopK`: `jax.lax.approx_max_k` / `approx_min_k`.

JAX lowers approx_max_k to this custom call on every platform; only TPUs
run an approximate algorithm. Elsewhere (`is_fallback = true` in the
backend config) XLA replaces it with an exact top-k (openxla/xla,
`ApproxTopKFallback` in `xla/hlo/builder/lib/approx_topk.cc`): a stable
`sort` of all the operands along `reduction_dim` ordered by the called
comparator, then a slice of the first entries along that dimension (`top_k`
of them with `aggregate_to_topk`, otherwise as many as the result type
has). The trailing operands are the init values of the TPU algorithm and
are not read.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.registry import register_custom_call
from pjrt_ref.interpreter.steps import BoundRegion
from pjrt_ref.interpreter.ops.sort import stable_order


def _comparator(op) -> BoundRegion:
    """The called comparator as a region bound to a fresh frame."""
    (name,) = op.attrs["called_computations"]
    function = op.module.function(name.lstrip("@"))
    frame = list(function.initial_frame) if function.initial_frame else [None] * function.num_slots
    return BoundRegion(function.body, frame)


@register_custom_call("ApproxTopK")
def approx_top_k(op, *operands):
    """The exact top-k XLA's fallback computes (see the module docstring)."""
    config = op.attrs["mhlo.backend_config"]
    inputs = [np.asarray(x) for x in operands[:len(operands) // 2]]
    axis = int(config["reduction_dim"])
    axis = axis + inputs[0].ndim if axis < 0 else axis
    comparator = _comparator(op)
    rows = [np.moveaxis(x, axis, -1) for x in inputs]
    order = stable_order(rows, comparator, comparator.plan)
    results = []
    for row, ttype in zip(rows, op.result_types):
        count = tuple(ttype.shape)[axis]
        taken = np.take_along_axis(row, order[..., :count], axis=-1)
        results.append(np.ascontiguousarray(np.moveaxis(taken, -1, axis)))
    return results[0] if len(results) == 1 else tuple(results)
