"""`map` (spec "map", docs/spec.md#map): a scalar computation applied to
every index of its inputs."""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.native.regions import map_applier
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.reduce_regions import analyse_regions, body_analysis, run_body


@register("stablehlo.map", validate=analyse_regions)
def map_(op, *inputs, regions):
    """Spec "map": result[i] = computation(inputs...[i]) for every index i.

    A computation made of element-wise ops runs once on the whole arrays;
    any other runs once per element.
    """
    computation = regions[0]
    result_type = op.result_type
    shape = inputs[0].shape
    if body_analysis(op, 0).elementwise:
        result, = run_body(computation, [result_type.dtype], shape, *inputs)
        return np.asarray(result, order="C")
    result = np.empty(shape, dtype=result_type.dtype)
    applier = map_applier(op)  # the same loop, compiled by numba (interpreter/native)
    if applier is not None:
        applier(*(np.ascontiguousarray(x).reshape(-1) for x in inputs), result.reshape(-1))
        return result
    for index in np.ndindex(*shape):
        result[index] = computation(*(np.asarray(x[index]) for x in inputs))[0]
    return result
