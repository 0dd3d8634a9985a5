"""PJRT_REF_DIFF: compare every op with another backend as the program runs.

`Differ.prepare` runs once, when a function is planned: it cuts each op out
of the program as a one-op module (`one_op.py`) and returns a `Unit` per
step. `interpreter/instrument.py` wraps each step's kernel; after the
reference's kernel has run, `Unit.check` sends the op's module and the
reference's own operand values to the other backend's worker
(`backend.py`), compares the results (`compare.py`) and raises `Divergence`
at the first op whose results differ beyond tolerance.

Which ops are units: the ops of every function and of while/if/case bodies
(the ops `PJRT_REF_TRACE` shows), each on its own. A region-holding op is
also compared as a whole, after its body's ops: a while runs its whole loop
on the other backend, a reduce its body per element pair (a reduce body is
never compared alone). Ops that cannot run alone are counted, not compared.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from pjrt_ref import settings
from pjrt_ref.errors import Internal
from pjrt_ref.interpreter.instrument import CONTROL_FLOW_OPS, summarize, summary_text, type_text
from pjrt_ref.interpreter.records import TERMINATORS
from pjrt_ref.debug.diff.backend import DEFAULT_TIMEOUT, shared_backend
from pjrt_ref.debug.diff.compare import Comparison, Tolerance, compare
from pjrt_ref.debug.diff.one_op import module_functions, one_op_module, why_not_comparable

# Ops whose body's ops the reference runs as steps of their own (and so compares one by one).
_BODIES_COMPARED_ALONE = CONTROL_FLOW_OPS + ("func.call", "stablehlo.composite")


class Divergence(Internal):
    """PJRT_REF_DIFF: an op's result on the other backend differs from the reference's.

    `module` is the one-op program and `arguments` the values it was run
    on: what it takes to replay the op on the other backend alone."""

    module: str = ""
    arguments: tuple = ()
    result_index: int = 0
    comparison: "Comparison | None" = None     # the first result that differs

    def facts(self) -> dict:
        """What differs, as plain data (`pjrt-ref diff --json`)."""
        comparison = self.comparison
        facts = {"op": self.op, "location": self.location, "result": self.result_index}
        if comparison is None:
            return facts
        facts.update(dtype=str(comparison.reference.dtype), shape=list(comparison.reference.shape),
                     other_dtype=str(comparison.other.dtype), other_shape=list(comparison.other.shape),
                     problem=comparison.problem, differing=comparison.differing,
                     elements=int(comparison.reference.size), rtol=comparison.rtol, atol=comparison.atol,
                     max_ulp=comparison.max_ulp,
                     worst=[{"index": [int(i) for i in index], "pjrt_ref": str(ours), "other": str(other),
                             "ulp": ulp} for index, ours, other, ulp in comparison.worst])
        return facts


@dataclass
class Stats:
    """What a diff run saw, for `pjrt-ref diff`'s summary."""

    compared: dict = field(default_factory=dict)       # Unit -> runs compared
    not_compared: dict = field(default_factory=dict)   # Unit -> runs not compared
    closest: tuple = (0.0, 0, None)      # (fraction of the tolerance used, ULP distance, Unit)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_compared(self, unit: "Unit", comparisons: list[Comparison]) -> None:
        with self.lock:
            self.compared[unit] = self.compared.get(unit, 0) + 1
            for comparison in comparisons:
                if comparison.tolerance_used > self.closest[0]:
                    self.closest = (comparison.tolerance_used, comparison.max_ulp, unit)

    def add_not_compared(self, unit: "Unit") -> None:
        with self.lock:
            self.not_compared[unit] = self.not_compared.get(unit, 0) + 1


class Unit:
    """One op of the program as the other backend runs it (or why it cannot)."""

    def __init__(self, differ: "Differ", step, function: str, module: str | None,
                 reason: str | None, captured: list[int]) -> None:
        self.differ = differ
        self.name = step.op.name
        self.location = step.op.location
        self.function = function
        self.module = module               # one-op StableHLO text, None if not compared
        self.reason = reason               # why not, if not
        self.captured = captured           # frame slots its regions read from outside
        self.whole = bool(step.regions) or self.name in _BODIES_COMPARED_ALONE

    @property
    def in_function(self) -> str:
        """` (in @f)` for an op of a function other than @main."""
        return "" if self.function == "main" else f" (in @{self.function})"

    @property
    def what(self) -> str:
        return f"'{self.name}' at {self.location}{self.in_function}"

    def check(self, operands, regions, results) -> None:
        """Run this op on the other backend with `operands` (and the values its
        regions capture, read from the frame) and compare with `results`."""
        differ = self.differ
        if self.module is None:
            differ.stats.add_not_compared(self)
            return
        arguments = [np.asarray(value) for value in operands]
        if self.captured:
            frame = regions[0].frame
            arguments += [np.asarray(frame[slot]) for slot in self.captured]
        theirs = differ.backend.run(self.module, arguments, self.what)
        if len(theirs) != len(results):
            raise Internal(f"{differ.backend.description} returned {len(theirs)} results "
                           f"for {self.what}, which has {len(results)}")
        comparisons = [compare(ours, other, differ.tolerance) for ours, other in zip(results, theirs)]
        if not all(c.agrees for c in comparisons):
            divergence = Divergence(self.report(arguments, comparisons), op=self.name, location=self.location)
            divergence.module, divergence.arguments = self.module, tuple(arguments)
            divergence.result_index = next(i for i, c in enumerate(comparisons) if not c.agrees)
            divergence.comparison = comparisons[divergence.result_index]
            raise divergence
        differ.stats.add_compared(self, comparisons)

    # -- the message -----------------------------------------------------------
    def report(self, arguments, comparisons: list[Comparison]) -> str:
        """What differs, for the error message (its first line follows `'op' at loc: `)."""
        differ = self.differ
        index, first = next((i, c) for i, c in enumerate(comparisons) if not c.agrees)
        lines = [f"result {index} differs on the other backend{self.in_function}: {_headline(first)} "
                 "(PJRT_REF_DIFF)",
                 f"  other backend: {differ.backend.description}"]
        if self.whole:
            lines.append(f"  {_as_a_whole(self)}")
        operand_count = len(arguments) - len(self.captured)
        for position, value in enumerate(arguments):
            label = f"operand {position}" if position < operand_count else \
                f"captured value {position - operand_count}"
            lines.append(f"  {label}: {summary_text(summarize(value))}")
        for position, comparison in enumerate(comparisons):
            mark = "" if comparison.agrees else "  <- differs"
            lines.append(f"  result {position}, pjrt-ref: {summary_text(summarize(comparison.reference))}{mark}")
            lines.append(f"  result {position}, other:    {summary_text(summarize(comparison.other))}")
        if first.worst:
            lines.append(f"  worst elements of result {index} (pjrt-ref vs other):")
            for element, ours, other, ulp in first.worst:
                distance = "" if ulp is None else f"  ({ulp} ULP)"
                lines.append(f"    [{', '.join(str(int(i)) for i in element)}]  {str(ours)} vs {str(other)}{distance}")
        return "\n".join(lines)


def _headline(comparison: Comparison) -> str:
    if comparison.problem is not None:
        return (f"pjrt-ref gives {type_text(comparison.reference)}, the other backend "
                f"{type_text(comparison.other)}")
    text = f"{comparison.differing} of {comparison.reference.size} elements differ"
    if comparison.max_ulp is not None:
        text += f" beyond rtol={comparison.rtol:g} atol={comparison.atol:g}, by up to {comparison.max_ulp} ULP"
    return text


def _as_a_whole(unit: Unit) -> str:
    if unit.name in _BODIES_COMPARED_ALONE:
        return ("compared as a whole, with its body: the ops in it agreed one by one "
                "(small differences may have added up)")
    return "compared as a whole, with its region (the region's ops are not compared alone)"


class Differ:
    """Compares a program's ops with the backend `spec` ("cpu" or a plugin path)."""

    def __init__(self, spec: str, tolerance: Tolerance = Tolerance(),
                 timeout: float = DEFAULT_TIMEOUT, backend=None) -> None:
        self.spec = spec
        self.tolerance = tolerance
        # Anything with `description` and `run(module_text, arguments, what)`:
        # normally the process's worker for `spec`.
        self.backend = backend if backend is not None else shared_backend(spec, timeout)
        self.stats = Stats()

    @classmethod
    def from_environment(cls, spec: str) -> "Differ":
        """PJRT_REF_DIFF=spec, with the settings PJRT_REF_DIFF_RTOL / _ATOL / _TIMEOUT."""
        return cls(spec, Tolerance(settings.get("PJRT_REF_DIFF_RTOL"), settings.get("PJRT_REF_DIFF_ATOL")),
                   settings.get("PJRT_REF_DIFF_TIMEOUT"))

    def prepare(self, plan, func_op) -> dict[int, Unit]:
        """A Unit per step of `plan` (and of its control-flow bodies), keyed by
        id(step); `func_op` is the MLIR function `plan` was planned from."""
        units: dict[int, Unit] = {}
        functions = module_functions(func_op)
        self._prepare_region(plan.body, func_op.regions[0].blocks[0], plan.name, functions, units)
        return units

    def _prepare_region(self, region, block, function: str, functions: dict, units: dict) -> None:
        operations = [o.operation for o in block.operations if o.operation.name not in TERMINATORS]
        if len(operations) != len(region.steps):
            raise Internal(f"PJRT_REF_DIFF: the plan of @{function} does not match its operations")
        for step, operation in zip(region.steps, operations):
            units[id(step)] = self.unit(step, operation, function, functions)
            if step.op.name in CONTROL_FLOW_OPS:
                for body, mlir_region in zip(step.regions, operation.regions):
                    self._prepare_region(body, mlir_region.blocks[0], function, functions, units)

    def unit(self, step, operation, function: str, functions: dict) -> Unit:
        reason = why_not_comparable(operation, functions)
        module, captured = None, []
        if reason is None:
            try:
                module, captured = one_op_module(step, operation, functions)
            except Exception as error:  # an op the bindings cannot clone or verify alone
                reason = f"cannot be cut out of the program ({str(error).splitlines()[0]})"
        return Unit(self, step, function, module, reason, captured)

    # -- the summary -----------------------------------------------------------
    def summary(self) -> str:
        """How the run went, for `pjrt-ref diff` (when no op differed)."""
        stats = self.stats
        lines = [f"all {len(stats.compared)} ops compared agree with {self.backend.description} "
                 f"within {self.tolerance}"]
        used, ulp, unit = stats.closest
        if unit is not None:
            lines.append(f"  closest to the tolerance: {unit.what}, using {used:.1%} of it "
                         f"(up to {ulp} ULP apart)")
        reasons = Counter((unit.name, unit.reason) for unit in stats.not_compared)
        if reasons:
            lines.append(f"  not compared: {len(stats.not_compared)} ops")
            for (name, reason), count in sorted(reasons.items()):
                lines.append(f"    {count} x {name}: {reason}")
        return "\n".join(lines)
