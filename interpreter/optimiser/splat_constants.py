"""Plan-time rewrite: fused runs read a big splat constant as its one value.

JAX's compile path folds `broadcast_in_dim` of a constant into one
constant of the full shape (`dense<1.0> : tensor<10000000xf32>`); a PRNG
program holds twenty of them, 900 MB written out for values that are each
one number (benchmarks/README.md, W15). The parser keeps a splat as its
value broadcast, which costs no memory (attributes.splat_array), and the
constant's kernel writes it out the first time a plan needs its elements
(ops/core.py `constant`).

So that a plan seldom needs them, `add_scalars` gives each big splat
constant a 0-d constant of its value, in a new slot. Fusion (fusion.py)
then reads the splat, in a run, as a `broadcast_in_dim` of that scalar
(spec "broadcast_in_dim": every result element is the operand's one
element), the form JAX started from, which a run never writes out. After
fusion, `drop_unread` removes the constants nothing reads any more: the
big splats every reader of which was fused, and the scalars no run took.
What is still read is preset in the frame as before
(preset.py). The values are the same either way.

Small splats are left alone: they cost little memory, and a constant preset
in the frame costs no step at all.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.attributes import splat_parts
from pjrt_ref.interpreter.ops import core
from pjrt_ref.interpreter.registry import lookup
from pjrt_ref.interpreter.steps import FRAME_REGION_OPS, FunctionPlan, OpInfo, RegionPlan, Step
from pjrt_ref.interpreter.types import TensorType
from pjrt_ref.interpreter.optimiser.fusion import count_uses
from pjrt_ref.interpreter.optimiser.preset import PRESET_BROADCAST_BYTES


class SplatScalars:
    """The big splat constants of a plan by slot, each with the 0-d constant
    of its value that `add_scalars` planned."""

    def __init__(self):
        self.scalars: dict[int, Step] = {}     # the splat's slot -> its scalar's step

    def __contains__(self, slot: int) -> bool:
        return slot in self.scalars

    def splat_step(self, slot: int, splat_type: TensorType, location: str, module) -> Step:
        """A step making the splat of `slot` from its scalar: the member a
        fused run takes in the splat constant's place."""
        scalar = self.scalars[slot]
        info = OpInfo("stablehlo.broadcast_in_dim", location, {"broadcast_dimensions": ()},
                      scalar.op.result_types, (splat_type,), module)
        return Step(kernel=lookup("stablehlo.broadcast_in_dim").fn, op=info,
                    operands=scalar.results, results=(slot,))


def add_scalars(plan: FunctionPlan) -> SplatScalars:
    """Plan a 0-d constant after each big splat constant of `plan`'s body
    and of the regions of its control-flow ops (which run in its frame)."""
    splats = SplatScalars()
    _add_in(plan.body, plan, splats)
    return splats


def _add_in(region: RegionPlan, plan: FunctionPlan, splats: SplatScalars) -> None:
    steps = []
    for step in region.steps:
        steps.append(step)
        if _is_big_splat(step):
            scalar = _scalar_of(step, plan)
            splats.scalars[step.results[0]] = scalar
            steps.append(scalar)
        elif step.op.name in FRAME_REGION_OPS:
            for nested in step.regions:
                _add_in(nested, plan, splats)
    if len(steps) != len(region.steps):
        region.steps = steps
        region.runners = None


def _is_big_splat(step: Step) -> bool:
    op = step.op
    if op.name != "stablehlo.constant" or step.operands or step.regions or len(step.results) != 1:
        return False
    ttype = op.result_type
    if not isinstance(ttype, TensorType) or ttype.quant is not None or not ttype.is_static:
        return False
    value = op.attrs.get("value")
    return (isinstance(value, np.ndarray) and splat_parts(value) is not None
            and value.size * value.itemsize > PRESET_BROADCAST_BYTES)


def _scalar_of(step: Step, plan: FunctionPlan) -> Step:
    """A 0-d constant step of the splat's value, writing a new slot."""
    op = step.op
    value, _ = splat_parts(op.attrs["value"])
    scalar_type = TensorType((), op.result_type.dtype, op.result_type.element_type)
    info = OpInfo("stablehlo.constant", op.location, {"value": np.array(value)}, (), (scalar_type,),
                  op.module)
    slot = plan.num_slots
    plan.num_slots += 1
    return Step(kernel=core.constant, op=info, operands=(), results=(slot,))


def drop_unread(plan: FunctionPlan, splats: SplatScalars) -> None:
    """Remove the splat constants, and their scalars, that no step reads any more."""
    if not splats.scalars:
        return
    planned = set(splats.scalars) | {scalar.results[0] for scalar in splats.scalars.values()}
    unread = planned - set(count_uses(plan.body))
    if unread:
        _drop_in(plan.body, unread)


def _drop_in(region: RegionPlan, unread: set) -> None:
    steps = [step for step in region.steps
             if not (step.op.name == "stablehlo.constant" and step.results[0] in unread)]
    for step in steps:
        if step.op.name in FRAME_REGION_OPS:
            for nested in step.regions:
                _drop_in(nested, unread)
    if len(steps) != len(region.steps):
        region.steps = steps
        region.runners = None
