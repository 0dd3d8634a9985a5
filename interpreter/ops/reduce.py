"""Reductions: `reduce` (spec "reduce", docs/spec.md#reduce).

The body is inspected once (see `reduce_regions`): a plain add/max/... body
becomes numpy's `ufunc.reduce`, an element-wise body (argmax's
compare/select chain) runs vectorised in log2(n) steps, anything else runs
element by element.
"""
from __future__ import annotations

import numpy as np

from ...errors import Unimplemented
from ..registry import register
from .reduce_regions import analyse_regions, body_analysis, reduce_last_axis


def _validate_reduce(op) -> None:
    if any(t.quant is not None for t in op.operand_types):
        raise op.error("quantized reduce is not supported", cls=Unimplemented)
    analyse_regions(op)


def move_axes_last(array: np.ndarray, axes) -> np.ndarray:
    """`array` with `axes` moved to the end and flattened into one axis."""
    axes = tuple(axes)
    kept = [d for d in range(array.ndim) if d not in axes]
    kept_shape = tuple(array.shape[d] for d in kept)
    count = int(np.prod([array.shape[d] for d in axes], dtype=np.int64))
    return np.transpose(array, kept + list(axes)).reshape(kept_shape + (count,))


@register("stablehlo.reduce", validate=_validate_reduce)
def reduce(op, *operands, regions):
    """Spec "reduce": fold `inputs` along `dimensions` with `body`, from `init_values`.

    Variadic: N inputs and N inits give N results, the body seeing N
    accumulators then N elements. Reducing an empty dimension gives the init
    values. Where each result folds exactly one element (no dimension, or
    only size-1 dimensions, reduced) the result is that element, as in XLA
    (the spec leaves where init values enter the schedule open).
    """
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    dims = op.attrs["dimensions"]
    dtypes = [t.dtype for t in op.result_types]
    out_shape = tuple(size for d, size in enumerate(inputs[0].shape) if d not in dims)
    values = [move_axes_last(x, dims) for x in inputs]
    if values[0].shape[-1] == 1:
        results = [v[..., 0].astype(d) for v, d in zip(values, dtypes)]
        return results[0] if n == 1 else tuple(results)
    results = reduce_last_axis(regions[0], body_analysis(op, 0), dtypes, values, inits)
    results = [np.asarray(r, dtype=d).reshape(out_shape) for r, d in zip(results, dtypes)]
    return results[0] if n == 1 else tuple(results)
