"""A plan's data, and how it runs: the layer the planner and the optimiser share.

A `FunctionPlan` numbers every SSA value of a function (its nested regions
included) with an integer slot. Each `Step` is a kernel, its planned `OpInfo`
and the slots it reads and writes. Running a function makes a fresh list of
slots (a frame), so one plan serves many threads and recursive calls; the
regions of an op run inside the frame of the op that owns them, which is how
they see values captured from the enclosing scope.

This module sits below both plan.py, which builds plans from MLIR and then
calls the optimiser, and optimiser/, the optimiser, whose passes build and rewrite
steps: neither imports the other's types through the other.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pjrt_ref.errors import InvalidArgument, PjrtRefError
from pjrt_ref.interpreter.numpy_errors import ERROR_STATE, IGNORE_ALL_ERRORS
from pjrt_ref.interpreter.types import TensorType


@dataclass
class OpInfo:
    """Everything a kernel needs to know about its op, in Python terms."""

    name: str
    location: str
    attrs: dict[str, Any]
    operand_types: tuple
    result_types: tuple
    # plan.ModulePlan, which sits above this module: named, not imported.
    module: "ModulePlan | None" = None  # noqa: F821
    cache: dict = field(default_factory=dict)
    # The planned regions of the op (set before `validate` runs), so a
    # validate hook can inspect a region's body, e.g. to spot an add body.
    region_plans: tuple = ()

    def error(self, message: str, cls=InvalidArgument) -> PjrtRefError:
        """An error naming this op and its location (raise it)."""
        return cls(message, op=self.name, location=self.location)

    @property
    def result_type(self) -> TensorType:
        return self.result_types[0]

    @property
    def has_static_types(self) -> bool:
        """Every operand and result is a tensor whose shape is fixed (no `?`
        dims, no bounds): run-time shapes are the planned ones, so a kernel
        specialised at plan time (registry `specialize`) may rely on them."""
        return all(isinstance(t, TensorType) and t.is_static and t.bounds is None
                   for t in self.operand_types + self.result_types)


@dataclass
class RegionPlan:
    """A region's block: argument slots, steps, and the slots it returns."""

    arg_slots: list[int]
    arg_types: tuple
    steps: list
    result_slots: list[int]
    # (run(frame), op) per step, built on first run (see `run_block`); a pass
    # that changes `steps` afterwards must reset it to None.
    runners: tuple | None = None


@dataclass
class Step:
    kernel: Callable
    op: OpInfo
    operands: tuple[int, ...]
    results: tuple[int, ...]
    regions: tuple[RegionPlan, ...] = ()


class BoundRegion:
    """A region ready to run inside a given frame: `region(*args) -> list`."""

    __slots__ = ("plan", "frame")

    def __init__(self, plan: RegionPlan, frame: list):
        self.plan = plan
        self.frame = frame

    @property
    def arg_types(self) -> tuple:
        return self.plan.arg_types

    def __call__(self, *args) -> list:
        return run_block(self.plan, self.frame, args)


# Exceptions a kernel may raise on bad input: they become errors naming the op.
_KERNEL_ERRORS = (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError,
                  MemoryError, ArithmeticError, KeyError)


def run_block(block: RegionPlan, frame: list, args) -> list:
    """Execute a block's steps in `frame` and return its results.

    This is the interpreter's hot loop: each step was turned into a small
    closure `run(frame)` once (`step_runner`), so a step costs one Python
    call plus its kernel.
    """
    for slot, value in zip(block.arg_slots, args):
        frame[slot] = value
    runners = block.runners
    if runners is None:
        runners = block.runners = block_runners(block)
    op = None
    try:
        for run, op in runners:
            run(frame)
    except PjrtRefError:
        raise
    except RecursionError:
        raise op.error("recursion too deep") from None
    except _KERNEL_ERRORS as error:
        raise op.error(f"{type(error).__name__}: {error}") from error
    return [frame[i] for i in block.result_slots]


def block_runners(block: RegionPlan) -> tuple:
    """(run(frame), op) per step; a step that is the last reader of a large value
    (`RELEASE_BYTES`) also empties its slot, so that a long program (a whole
    PyTorch/XLA training step is one) holds only its live values, not all it made."""
    released = released_after(block)
    return tuple((_releasing(step_runner(step), dead) if dead else step_runner(step), step.op)
                 for step, dead in zip(block.steps, released))


# Values smaller than this stay in the frame until the function returns:
# emptying a slot costs a Python call per step, which small programs feel.
RELEASE_BYTES = 1 << 20


def released_after(block: RegionPlan) -> list[tuple[int, ...]]:
    """Per step, the slots of large values the block made that nothing reads after that step.

    A value is read by the steps naming it as an operand and by the steps
    whose regions capture it; the block's results and the values it did not
    make (its arguments, values of an enclosing block, preset constants) are
    never released.
    """
    made = {slot: _is_large(ttype) for step in block.steps
            for slot, ttype in zip(step.results, step.op.result_types)}
    last_read = {slot: index for index, step in enumerate(block.steps) for slot in step.results}
    for index, step in enumerate(block.steps):
        for slot in slots_read_by(step):
            if slot in made:
                last_read[slot] = index
    kept = set(block.result_slots)
    released: list[list[int]] = [[] for _ in block.steps]
    for slot, index in last_read.items():
        if made[slot] and slot not in kept:
            released[index].append(slot)
    return [tuple(slots) for slots in released]


def slots_read_by(step: Step) -> set[int]:
    """The slots `step` reads: its operands and what its regions capture from outside them."""
    reads = set(step.operands)
    for region in step.regions:
        inner = set(region.arg_slots) | {slot for inner_step in region.steps for slot in inner_step.results}
        captured = set(region.result_slots).union(*(slots_read_by(inner_step) for inner_step in region.steps))
        reads |= captured - inner
    return reads


def _is_large(ttype) -> bool:
    """Whether a value of `ttype` is worth releasing: a tensor of RELEASE_BYTES or more (or of unknown size)."""
    if not isinstance(ttype, TensorType):
        return False
    if not ttype.is_static:
        return True
    return int(np.prod(ttype.shape, dtype=np.int64)) * np.dtype(ttype.dtype).itemsize >= RELEASE_BYTES


def _releasing(run: Callable[[list], None], dead: tuple[int, ...]) -> Callable[[list], None]:
    def run_and_release(frame):
        run(frame)
        for slot in dead:
            frame[slot] = None
    return run_and_release


def step_runner(step: Step) -> Callable[[list], None]:
    """`run(frame)`: read the step's operands from the frame, call its
    kernel, store its result(s). Closures for the common arities keep the
    hot loop free of per-step lists."""
    kernel, op, operands, results = step.kernel, step.op, step.operands, step.results
    if step.regions or len(results) != 1 or len(operands) > 3:
        regions = step.regions

        def run(frame):
            values = [frame[i] for i in operands]
            if regions:
                bound = tuple(BoundRegion(r, frame) for r in regions)
                result = kernel(op, *values, regions=bound)
            else:
                result = kernel(op, *values)
            if len(results) == 1:
                frame[results[0]] = result
            else:
                for slot, value in zip(results, result):
                    frame[slot] = value
        return run
    (out,) = results
    if len(operands) == 0:
        def run(frame):
            frame[out] = kernel(op)
    elif len(operands) == 1:
        (a,) = operands

        def run(frame):
            frame[out] = kernel(op, frame[a])
    elif len(operands) == 2:
        a, b = operands

        def run(frame):
            frame[out] = kernel(op, frame[a], frame[b])
    else:
        a, b, c = operands

        def run(frame):
            frame[out] = kernel(op, frame[a], frame[b], frame[c])
    return run


@dataclass
class FunctionPlan:
    name: str
    num_slots: int
    body: RegionPlan
    input_types: tuple
    output_types: tuple
    # What every frame starts as (None: all empty): constants the optimiser
    # took out of the steps (optimiser/preset.py) are there from the start.
    initial_frame: tuple | None = None

    def run(self, args) -> list:
        if self.initial_frame is None:
            frame: list = [None] * self.num_slots
        else:
            frame = list(self.initial_frame)
        # Integer wrap-around and IEEE special values are the spec's
        # semantics, not accidents: numpy must not warn about them.
        if ERROR_STATE is None:
            with np.errstate(all="ignore"):
                return run_block(self.body, frame, args)
        token = ERROR_STATE.set(IGNORE_ALL_ERRORS)
        try:
            return run_block(self.body, frame, args)
        finally:
            ERROR_STATE.reset(token)


def copy_function(plan: FunctionPlan, slot: Callable[[int], int]) -> FunctionPlan:
    """`plan` with every slot `s` renamed `slot(s)`, in fresh regions and
    steps: rewrites of the copy (the optimiser's are in place) do not reach
    `plan`. Ops with regions get their own `OpInfo`, pointing at the copied
    regions; their cache (plan-time analyses of the body, compiled bodies)
    is carried over, as it does not depend on slot numbers."""
    return dataclasses.replace(plan, body=copy_region(plan.body, slot))


def copy_region(region: RegionPlan, slot: Callable[[int], int]) -> RegionPlan:
    return RegionPlan([slot(s) for s in region.arg_slots], region.arg_types,
                      [copy_step(step, slot) for step in region.steps],
                      [slot(s) for s in region.result_slots])


def copy_step(step: Step, slot: Callable[[int], int]) -> Step:
    regions = tuple(copy_region(r, slot) for r in step.regions)
    op = step.op
    if regions:
        op = dataclasses.replace(op, cache=dict(op.cache), region_plans=regions)
    return dataclasses.replace(step, op=op, regions=regions,
                               operands=tuple(slot(s) for s in step.operands),
                               results=tuple(slot(s) for s in step.results))


# Ops whose regions run as steps in the function's own frame (ops/control.py).
FRAME_REGION_OPS = frozenset(("stablehlo.while", "stablehlo.if", "stablehlo.case"))
