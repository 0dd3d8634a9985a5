"""The campaign: generate a program, run it on both sides, and judge each disagreement.

For every program: pjrt-ref runs it in this process (the interpreter), the
other backend in its worker process (debug/diff/backend.py: a crash, hang
or refusal there is reported, and the worker restarts). Results are
compared with each op's tolerance: exact where the spec asks for an exact
or correctly rounded result (opset.OpSpec.accuracy), otherwise the
element type's default tolerance (debug/diff/compare.py). The first
differing result is shrunk (shrink.py) and ruled on (ruling.py); findings
are deduplicated by cause: the ops and element types of the reproducer and
the verdict.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from pjrt_ref.debug.diff.backend import OtherBackend, OtherBackendFailed
from pjrt_ref.debug.diff.compare import Tolerance, compare
from pjrt_ref.errors import PjrtRefError
from pjrt_ref.interpreter import load
from pjrt_ref.judge import ruling
from pjrt_ref.judge.opset import OPS
from pjrt_ref.judge.programs import FuzzProgram, Generator
from pjrt_ref.judge.shrink import ancestors, shrink
from pjrt_ref.judge.values import random_array

EXACT = Tolerance(0.0, 0.0)


@dataclass
class Finding:
    """One minimal disagreement with its verdict."""

    program: FuzzProgram
    inputs: list
    ours: object                 # pjrt-ref's result (an array), or its error text
    theirs: object               # the other backend's, or its error text
    verdict: str                 # ruling.VERDICTS
    reason: str
    seed: int | None = None      # the campaign seed and program number that found it
    number: int | None = None
    shared_cause: str | None = None   # ruling.Ruling.cause

    @property
    def cause(self) -> tuple:
        """What makes two findings the same one: the ops, the element types they
        read (in order, each once) and the verdict; or a cause the ruling named
        that holds for any op (a backend that flushes subnormals)."""
        if self.shared_cause:
            return (("(any op)",), (self.shared_cause,), self.verdict)
        program = self.program
        types = [program.element_type(v) for node in program.nodes for v in node.operands]
        return (tuple(n.op for n in program.nodes), tuple(dict.fromkeys(types)), self.verdict)


@dataclass
class Tally:
    programs: int = 0
    seconds: float = 0.0
    ops: Counter = field(default_factory=Counter)
    element_types: Counter = field(default_factory=Counter)
    verdicts: Counter = field(default_factory=Counter)
    findings: dict = field(default_factory=dict)       # cause -> first Finding

    def count(self, program: FuzzProgram) -> None:
        self.programs += 1
        self.ops.update(n.op for n in program.nodes)
        self.element_types.update(program.params)

    def add(self, finding: Finding) -> None:
        self.verdicts[finding.verdict] += 1
        self.findings.setdefault(finding.cause, finding)


class Judge:
    """Runs programs on pjrt-ref and `other`, and turns disagreements into findings."""

    def __init__(self, other: OtherBackend) -> None:
        self.other = other

    # -- the two sides ---------------------------------------------------------
    def ours(self, program: FuzzProgram, inputs: list) -> list[np.ndarray]:
        return [np.asarray(r) for r in load(program.mlir())(*inputs)]

    def theirs(self, program: FuzzProgram, inputs: list) -> list[np.ndarray]:
        return [np.asarray(r) for r in self.other.run(program.mlir(), inputs, "a fuzzed program")]

    def node_values(self, program: FuzzProgram, inputs: list) -> list[np.ndarray]:
        every = replace(program, outputs=[("op", j) for j in range(len(program.nodes))])
        return self.ours(every, inputs)

    # -- comparing ---------------------------------------------------------------
    @staticmethod
    def tolerance(program: FuzzProgram, value) -> Tolerance:
        """Exact for a result only exact ops lead to; the type's default otherwise."""
        ops = [program.nodes[v[1]].op for v in ancestors(program, [value]) if v[0] == "op"]
        return EXACT if all(OPS[op].accuracy == "exact" for op in ops) else Tolerance()

    def first_difference(self, program, ours, theirs):
        """(value, comparison) of the first returned value that differs, or None."""
        for value, a, b in zip(program.returned(), ours, theirs):
            comparison = compare(a, b, self.tolerance(program, value))
            if not comparison.agrees:
                return value, comparison
        return None

    def disagrees(self, program: FuzzProgram, inputs: list) -> bool:
        """Whether the sides disagree on `program`'s (one) result, or one side fails on it."""
        try:
            ours = self.ours(program, inputs)
        except PjrtRefError:
            return True
        try:
            theirs = self.theirs(program, inputs)
        except OtherBackendFailed:
            return True
        return self.first_difference(program, ours, theirs) is not None

    # -- one program ---------------------------------------------------------------
    def judge(self, program: FuzzProgram, inputs: list) -> Finding | None:
        """The finding `program` gives on `inputs`, shrunk and ruled on; None if both agree."""
        try:
            ours = self.ours(program, inputs)
        except PjrtRefError as error:
            return Finding(program, inputs, str(error), None, "pjrt-ref wrong",
                           f"pjrt-ref refused a valid program: {str(error).splitlines()[0]}")
        try:
            theirs = self.theirs(program, inputs)
        except OtherBackendFailed:
            return self._failure(program, inputs)
        difference = self.first_difference(program, ours, theirs)
        if difference is None:
            return None
        value, comparison = difference
        element = comparison.worst[0][0] if comparison.worst else None
        small, small_inputs = shrink(program, inputs, value, self.node_values, self.disagrees, element)
        return self.rule(small, small_inputs)

    def _failure(self, program: FuzzProgram, inputs: list) -> Finding:
        """The other backend crashed, hung or refused: the failure cut down to the first op
        whose program alone fails, then shrunk like a disagreement (a failure disagrees)."""
        for j in range(len(program.nodes)):
            alone = replace(program, outputs=[("op", j)])
            if self._other_fails(alone, inputs):
                program, inputs = shrink(program, inputs, ("op", j), self.node_values, self.disagrees, None)
                break
        return self.rule(program, inputs)

    def _other_fails(self, program: FuzzProgram, inputs: list) -> bool:
        try:
            self.theirs(program, inputs)
        except OtherBackendFailed:
            return True
        return False

    def rule(self, program: FuzzProgram, inputs: list) -> Finding | None:
        """The verdict on a (shrunk) program: both sides run again, then ruling.rule."""
        try:
            ours = self.ours(program, inputs)[0]
        except PjrtRefError as error:
            return Finding(program, inputs, str(error), None, "pjrt-ref wrong", str(error).splitlines()[0])
        try:
            theirs = self.theirs(program, inputs)[0]
        except OtherBackendFailed as error:
            return Finding(program, inputs, ours, str(error), "other backend failed", str(error))
        verdict = ruling.rule(program, inputs, ours, theirs)
        return Finding(program, inputs, ours, theirs, verdict.verdict, verdict.reason,
                       shared_cause=verdict.cause)


def run_campaign(judge: Judge, ops: dict, seconds: float, seed: int, max_ops: int = 4,
                 save=None, on_finding=None) -> Tally:
    """Fuzz for `seconds`: programs from `Generator(seed)`, each judged; `save(number, program,
    inputs)` keeps each program (a corpus), `on_finding(finding)` sees each new cause."""
    rng = np.random.default_rng(seed)
    generator = Generator(rng, ops, max_ops)
    tally, start = Tally(), time.monotonic()
    while time.monotonic() - start < seconds:
        program = generator.program()
        inputs = [random_array(t, program.param_shape(i), rng) for i, t in enumerate(program.params)]
        if save is not None:
            save(tally.programs, program, inputs)
        tally.count(program)
        finding = judge.judge(program, inputs)
        if finding is not None:
            finding.seed, finding.number = seed, tally.programs - 1
            new = finding.cause not in tally.findings
            tally.add(finding)
            if new and on_finding is not None:
                on_finding(finding)
    tally.seconds = time.monotonic() - start
    return tally
