"""Calls of small functions become the callee's steps in the caller's frame.

JAX lowers many library functions to private functions called with
`func.call`: `lax.scan`'s `dynamic_index_in_dim` and
`dynamic_update_index_in_dim`, `jnp.where`, `clip`, `remainder`, and the
body of a `jax.checkpoint` or a custom-vjp rule (`closed_call`). Run as
calls, each costs a fresh frame per call (`FunctionPlan.run`), and the
passes after this one (fusion, in-place updates) stop at the call: an
elementwise run cannot continue into the callee, and an update inside the
callee is seen only through `in_place`'s call-following special case.

This pass, the first of `optimize_function`, replaces such a call by the
callee's steps, renumbered into slots of the caller's frame: the callee's
arguments become the call's operands, and every read of a call result
reads the callee's returned value instead (the spec's "func.call" returns
exactly those values); the callee's regions (a `reduce` body, a loop) are
copied with their slots renumbered the same way (`steps.copy_region`). The
callee qualifies when it has at most MAX_INLINED_STEPS steps (nested ones
counted) and is not already being planned or inlined on this path
(recursion keeps its call; `ModulePlan.inlinable`). Calls inside the
inlined steps are inlined the same way.

Bits: the same kernels on the same values, in the same order; only the
frames differ. Errors still name the callee's op and location. With
PJRT_REF_OPTIMIZE=0 or an instrumented run (PJRT_REF_TRACE, _PROFILE, ...)
calls stay calls, so a trace shows them.
"""
from __future__ import annotations

import dataclasses

from pjrt_ref.interpreter.ops import core
from pjrt_ref.interpreter.steps import FRAME_REGION_OPS, FunctionPlan, RegionPlan, Step, copy_region

# A bigger callee stays a call: copying it to every call site would make
# planning (and fusion's analysis) grow with callers x callee size.
MAX_INLINED_STEPS = 256



def inline_calls(plan: FunctionPlan) -> None:
    """Inline `plan`'s qualifying calls, in its body and nested regions."""
    replaced: dict[int, int] = {}   # call result slot -> the callee's value's slot
    if _inline_region(plan, plan.body, (plan.name,), replaced):
        _read_through(plan.body, replaced)


def _inline_region(plan: FunctionPlan, region: RegionPlan, chain: tuple,
                   replaced: dict[int, int]) -> bool:
    changed = False
    steps: list[Step] = []
    for step in region.steps:
        # Only regions that run in the caller's frame: the bodies of reduce,
        # sort, scatter... are compiled on their own (native/regions.py).
        if step.op.name in FRAME_REGION_OPS:
            for nested in step.regions:
                changed |= _inline_region(plan, nested, chain, replaced)
        expanded = _expanded(plan, step, chain, replaced)
        changed |= expanded is not None
        steps.extend([step] if expanded is None else expanded)
    if changed:
        region.steps = steps
        region.runners = None
    return changed


def _expanded(plan: FunctionPlan, step: Step, chain: tuple,
              replaced: dict[int, int]) -> list[Step] | None:
    """The steps standing for `step` if it is a call to inline, else None."""
    if step.kernel is not core.call or step.op.module is None:
        return None
    name = step.op.attrs["callee"]
    if name in chain:
        return None
    callee = step.op.module.inlinable(name)
    if callee is None or _count_steps(callee.body) > MAX_INLINED_STEPS:
        return None
    slots = _slots_in_caller(plan, callee, step.operands)
    moved = copy_region(callee.body, slots.__getitem__)
    for result, returned in zip(step.results, moved.result_slots):
        replaced[result] = returned
    steps: list[Step] = []
    for inner in moved.steps:
        expanded = _expanded(plan, inner, chain + (name,), replaced)
        steps.extend([inner] if expanded is None else expanded)
    return steps


def _count_steps(region: RegionPlan) -> int:
    return sum(1 + sum(_count_steps(r) for r in step.regions) for step in region.steps)


def _slots_in_caller(plan: FunctionPlan, callee: FunctionPlan, operands: tuple) -> dict[int, int]:
    """Callee slot -> caller slot: its arguments are the call's operands,
    every other slot a new one at the end of the caller's frame."""
    base = plan.num_slots
    plan.num_slots += callee.num_slots
    slots = {slot: base + slot for slot in range(callee.num_slots)}
    slots.update(zip(callee.body.arg_slots, operands))
    return slots


def _read_through(region: RegionPlan, replaced: dict[int, int]) -> None:
    """Every read of a replaced call result, in `region` and the regions
    inside it, reads the callee's value instead (followed through calls
    that return another call's result).

    Plain functions, not closures: a closure that calls itself is a
    reference cycle each compile would leave to Python's cycle collector."""
    region.result_slots = [_resolved(s, replaced) for s in region.result_slots]
    region.steps = [_with_operands(step, replaced) for step in region.steps]
    region.runners = None


def _resolved(slot: int, replaced: dict[int, int]) -> int:
    while slot in replaced:
        slot = replaced[slot]
    return slot


def _with_operands(step: Step, replaced: dict[int, int]) -> Step:
    for nested in step.regions:
        _read_through(nested, replaced)
    operands = tuple(_resolved(s, replaced) for s in step.operands)
    return step if operands == step.operands else dataclasses.replace(step, operands=operands)
