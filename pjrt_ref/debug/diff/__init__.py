"""Differential debugging: the first op where another backend disagrees with pjrt-ref.

    pjrt-ref diff PROGRAM.mlir --against cpu|PLUGIN.so [--arg ...|--random-args] [--rtol R --atol A]
    PJRT_REF_DIFF=cpu|PLUGIN.so JAX_PLATFORMS=pjrt_ref python script.py

pjrt-ref runs the program op by op; each op is also cut out as a one-op
module and run on the other backend with the reference's own operand
values, and the first op whose results differ beyond tolerance is reported
(`Divergence`, with its location, operand and result summaries, worst
elements and ULP distances).

    differ    Differ (the PJRT_REF_DIFF instrument), Unit, Divergence
    one_op    cutting an op out of a program; which ops cannot run alone
    compare   tolerance and ULP distance
    backend   the other backend behind a worker process (OtherBackendFailed)
    worker    that process: jaxlib's client for `cpu` or a plugin
    protocol  the messages between them (JSON header + raw arrays, no pickle)
    cli       `pjrt-ref diff`
"""
from pjrt_ref.debug.diff.backend import OtherBackendFailed
from pjrt_ref.debug.diff.differ import Differ, Divergence

__all__ = ["Differ", "Divergence", "OtherBackendFailed"]
