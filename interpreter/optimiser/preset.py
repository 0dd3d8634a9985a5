"""Plan-time rewrite, the optimiser's last: constants move out of the steps
into the frame every call starts from.

A step that only returns its attribute costs a call and a frame store per
run; in a loop body it costs that every iteration. `preset_constants` puts
the values of the function's constants (those of loop bodies and if/case
branches too, which run in the function's frame), and of small static
broadcasts of them, into `FunctionPlan.initial_frame`.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.steps import FRAME_REGION_OPS, FunctionPlan, RegionPlan, Step


# A static broadcast_in_dim of a preset value up to this many bytes is
# computed once, when planned (bigger ones would sit in every plan's frame).
PRESET_BROADCAST_BYTES = 1 << 16


def preset_constants(plan: FunctionPlan) -> None:
    """Take `constant` steps out of the hot loop: their values (the same
    array on every call) go into the frame every call starts from. A step
    that only returns its attribute costs a call and a frame store per run
    (a few microseconds each, cold, in W4's ~15); in a loop body (and the
    branches of if/case, which run in the same frame) it costs that every
    iteration. So does the broadcast of such a constant that JAX writes for
    each `1 - x` (11 in a forward step of W9's LSTM): a small static one is
    computed here once, by its own kernel (kernels never write into their
    operands, so every iteration and call may share the array)."""
    frame = list(plan.initial_frame or [None] * plan.num_slots)
    if _preset_in(plan.body, frame, set()):
        plan.initial_frame = tuple(frame)


def _preset_in(region: RegionPlan, frame: list, preset: set) -> bool:
    """Move `region`'s presettable steps (and those of the frame regions
    inside it) into `frame`; whether any moved."""
    kept, moved = [], False
    for step in region.steps:
        if _is_constant(step) or _is_small_broadcast_of(step, preset):
            frame[step.results[0]] = step.kernel(step.op, *(frame[s] for s in step.operands))
            preset.add(step.results[0])
            moved = True
            continue
        if step.op.name in FRAME_REGION_OPS:
            for nested in step.regions:
                moved |= _preset_in(nested, frame, preset)
        kept.append(step)
    if moved:
        region.steps = kept
        region.runners = None
    return moved


def _is_constant(step: Step) -> bool:
    return (step.op.name == "stablehlo.constant" and not step.operands and not step.regions
            and len(step.results) == 1)


def _is_small_broadcast_of(step: Step, preset: set) -> bool:
    op = step.op
    if op.name != "stablehlo.broadcast_in_dim" or step.operands[0] not in preset:
        return False
    if not op.has_static_types or any(getattr(t, "quant", None) is not None
                                      for t in op.operand_types + op.result_types):
        return False
    result = op.result_type
    return int(np.prod(result.shape, dtype=np.int64)) * np.dtype(result.dtype).itemsize \
        <= PRESET_BROADCAST_BYTES


