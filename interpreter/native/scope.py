"""What the optimiser may do: whether it runs at all (PJRT_REF_OPTIMIZE),
whether it may use numba (PJRT_REF_JIT), and which ops' regions it may
rewrite like a function body.

The passes (optimiser/dots.py, optimiser/fusion.py, optimiser/in_place.py, ...) and the
region compiler (regions.py) ask these; they live here, below both,
because the region compiler, which the ops call, imports nothing of optimiser/.
"""
from __future__ import annotations

from pjrt_ref import settings


def optimize_enabled() -> bool:
    """PJRT_REF_OPTIMIZE, read each time a function is planned."""
    return settings.get("PJRT_REF_OPTIMIZE")


def jit_enabled() -> bool:
    """PJRT_REF_JIT (and PJRT_REF_OPTIMIZE), read each time a function is planned."""
    return optimize_enabled() and settings.get("PJRT_REF_JIT")


# Ops whose regions the interpreter runs as ordinary blocks (their kernels
# never look inside them): their bodies may be rewritten like a function's.
# Regions of other ops (reduce, scatter, sort, ...) are left alone: their
# kernels recognise bodies by their steps to run them as one numpy call.
CONTROL_FLOW_OPS = ("stablehlo.while", "stablehlo.if", "stablehlo.case")
