"""`map` (spec "map", docs/spec.md#map): a scalar computation applied to
every index of its inputs."""
from __future__ import annotations

import numpy as np

from ..registry import register
from .reduce_regions import is_elementwise, run_body


@register("stablehlo.map")
def map_(op, *inputs, regions):
    """Spec "map": result[i] = computation(inputs...[i]) for every index i.

    A computation made of element-wise ops runs once on the whole arrays;
    any other runs once per element.
    """
    computation = regions[0]
    result_type = op.result_type
    shape = tuple(result_type.shape)
    if is_elementwise(op.region_plans[0]):
        result, = run_body(computation, [result_type.dtype], shape, *inputs)
        return np.asarray(result, order="C")
    result = np.empty(shape, dtype=result_type.dtype)
    for index in np.ndindex(*shape):
        result[index] = computation(*(np.asarray(x[index]) for x in inputs))[0]
    return result
