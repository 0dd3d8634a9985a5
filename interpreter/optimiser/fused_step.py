"""The plan step that stands for a fused run of elementwise steps.

All three kinds of fused run (numba loop, numpy chunks, chunked kernels; see
fusion.py) end the same way: one `Step` named `pjrt_ref.fused` that reads
the run's inputs and writes the values used after it. Its `OpInfo` keeps the
first member's location (errors and profiles point at the user's line) and
lists the member ops, so a trace or profile still says what ran.
"""
from __future__ import annotations

from pjrt_ref.interpreter.steps import OpInfo, Step


def fused_step(run: list, kernel, inputs: list, input_types: list, outputs: list,
               **attrs) -> Step:
    """One step running `kernel` on the run's `inputs` ((slot, ...) pairs)
    into the results of `outputs` (the run's steps whose values are used
    after it)."""
    info = OpInfo(
        name="pjrt_ref.fused",
        location=run[0].op.location,
        attrs={"ops": tuple(s.op.name for s in run), **attrs},
        operand_types=tuple(input_types),
        result_types=tuple(s.op.result_type for s in outputs),
        module=run[0].op.module,
    )
    return Step(kernel=kernel, op=info, operands=tuple(slot for slot, _ in inputs),
                results=tuple(s.results[0] for s in outputs))
