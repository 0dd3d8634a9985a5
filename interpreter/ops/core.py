"""Core ops every program needs: constants and calls.

Spec sections: "constant", and `func.call` (builtin function calls).
"""
from __future__ import annotations

import numpy as np

from ..registry import register


@register("stablehlo.constant")
def constant(op):
    """Spec "constant": the `value` attribute, already a numpy array."""
    return op.attrs["value"]


@register("func.call")
def call(op, *operands):
    """Call another function of the module with a fresh frame."""
    callee = op.module.function(op.attrs["callee"])
    results = callee.run(list(operands))
    return results[0] if len(results) == 1 else tuple(results)
