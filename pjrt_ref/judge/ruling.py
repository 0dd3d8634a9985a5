"""Which side the spec supports, for a shrunk disagreement.

The program (one element by then) is evaluated op by op by the oracle
(oracle.py), independently of pjrt-ref's kernels; each side's result is
then held against the spec's. A third opinion comes from StableHLO's own
reference interpreter (`eval_module`, in a forked child: conformance's
oracle), where it runs the program: it is quoted with every verdict, and
decides where the oracle has no computation of its own. Verdicts:

    pjrt-ref wrong         pjrt-ref's result is not the spec's; the other's is
    other backend wrong    the other backend's result is not the spec's; pjrt-ref's is
    both wrong             neither is
    spec silent            the spec leaves this case to the implementation (say why)
    tolerance              both are within what the spec allows (accuracy unspecified, both near)
    undecided              no independent computation for these ops or types
    other backend failed   (campaign.py) it crashed, hung or refused a valid program
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..debug.diff.compare import ulp_distance
from ..interpreter.types import is_float
from ..conformance.oracle import OracleUnavailable, reference_results
from .oracle import Oracle, Unsupported
from .programs import FuzzProgram

VERDICTS = ("pjrt-ref wrong", "other backend wrong", "both wrong", "spec silent", "tolerance",
            "undecided", "other backend failed")
# Transcendental results this many ULPs from the correctly rounded value count as accurate.
ACCURATE_ULPS = 2


def spec_answer(program: FuzzProgram, inputs: list):
    """(value, silent reasons, clauses) of the program's result by the oracle; raises Unsupported."""
    if any(np.asarray(x).size != 1 for x in inputs):
        raise Unsupported("not reduced to one element")
    oracle = Oracle()
    values = {("arg", i): np.asarray(x).reshape(()) for i, x in enumerate(inputs)}
    silent, clauses = [], []
    for j, node in enumerate(program.nodes):
        operands = [values[v] for v in node.operands]
        answer = oracle.evaluate(node, operands, [program.element_type(v) for v in node.operands])
        clauses.append(answer.clause)
        if answer.silent:
            silent.append(f"{node.op}: {answer.silent}")
        if answer.value is None:
            return None, silent, clauses
        values[("op", j)] = np.asarray(answer.value).reshape(())
    return values[program.returned()[0]], silent, clauses


@dataclass
class Ruling:
    verdict: str                 # one of VERDICTS
    reason: str
    cause: str | None = None     # a cause shared by findings of any op ("flushes subnormals")


FLUSHES = "flushes subnormals"
FLUSHES_SUBNORMALS = (": it flushes subnormal numbers to zero (FTZ/DAZ), where IEEE 754, "
                      "whose arithmetic the spec's float types follow, keeps them")


def flushed(value: np.ndarray) -> np.ndarray:
    """`value` with subnormal floats replaced by zero of the same sign (what FTZ/DAZ hardware modes do)."""
    value = np.asarray(value)
    if not is_float(value.dtype):
        return value
    wide = value.astype(np.float64)
    tiny = float(ml_dtypes.finfo(value.dtype).tiny)
    return np.where((wide != 0) & (np.abs(wide) < tiny), np.copysign(0.0, wide), wide).astype(value.dtype)


def _flushing_explains(program: FuzzProgram, inputs: list, result) -> bool:
    """Whether `result` is the spec's answer when subnormal inputs and results are flushed to zero."""
    if all(np.array_equal(flushed(x), x) for x in inputs) and not _has_subnormal_steps(program, inputs):
        return False
    try:
        spec, _, _ = spec_answer(program, [flushed(x) for x in inputs])
    except Unsupported:
        return False
    return spec is not None and _same(flushed(spec), result)


def _has_subnormal_steps(program: FuzzProgram, inputs: list) -> bool:
    try:
        spec, _, _ = spec_answer(program, inputs)
    except Unsupported:
        return False
    return spec is not None and not np.array_equal(flushed(spec), spec)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values, NaN equal to NaN (whatever its sign and payload)."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if is_float(a.dtype):
        wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(wide_a) & np.isnan(wide_b)
        equal = (wide_a == wide_b) & (np.signbit(wide_a) == np.signbit(wide_b))
        return bool(np.all(both_nan | equal))
    return bool(np.array_equal(a, b))


def _ulps(value, spec) -> str:
    if not is_float(np.asarray(value).dtype):
        return ""
    distance = ulp_distance(np.asarray(value).reshape(-1), np.asarray(spec).reshape(-1).astype(np.asarray(value).dtype))
    return "NaN" if np.isnan(distance[0]) else str(int(distance[0]))


def _near(value, spec) -> bool:
    distance = _ulps(value, spec)
    return distance.isdigit() and int(distance) <= ACCURATE_ULPS


def third_opinion(program: FuzzProgram, inputs: list):
    """StableHLO's reference interpreter's result, or the reason it has none (a str)."""
    try:
        return reference_results(program.mlir(), list(inputs), 0)[0]
    except OracleUnavailable as why:
        return f"no answer ({str(why).splitlines()[0][:120]})"


def _third_said(third, ours, theirs) -> str:
    if isinstance(third, str):
        return f"StableHLO's reference interpreter: {third}"
    sides = [name for name, value in (("pjrt-ref", ours), ("the other backend", theirs)) if _same(third, value)]
    return (f"StableHLO's reference interpreter gives {np.asarray(third).tolist()!r}, as "
            + (" and ".join(sides) if sides else "neither side"))


def rule(program: FuzzProgram, inputs: list, ours, theirs, third=None) -> Ruling:
    """The verdict on `ours` against `theirs` for `program` (see the module docstring);
    `third` is the reference interpreter's opinion (asked for here unless given)."""
    third = third_opinion(program, inputs) if third is None else third
    verdict, reason = _by_the_oracle(program, inputs, ours, theirs)
    if verdict == "undecided" and not isinstance(third, str):
        if _same(third, ours) and not _same(third, theirs):
            verdict = "other backend wrong"
        elif _same(third, theirs) and not _same(third, ours):
            verdict = "pjrt-ref wrong"
    cause = FLUSHES if reason.endswith(FLUSHES_SUBNORMALS) else None
    return Ruling(verdict, f"{reason}; {_third_said(third, ours, theirs)}", cause)


def _by_the_oracle(program: FuzzProgram, inputs: list, ours, theirs) -> tuple[str, str]:
    try:
        spec, silent, clauses = spec_answer(program, inputs)
    except Unsupported as why:
        return "undecided", f"no independent computation here: {why}"
    where = "; ".join(dict.fromkeys(clauses))
    if spec is None:
        return "spec silent", f"{'; '.join(silent)} ({where})"
    spec_text = f"the spec's result is {spec!r}"
    ours_right, theirs_right = _same(ours, spec), _same(theirs, spec)
    if silent:     # accuracy unspecified, but an answer for a flushed subnormal is no accuracy question
        for side, value, other in (("pjrt-ref", ours, theirs), ("other backend", theirs, ours)):
            if _near(other, spec) and not _near(value, spec) and _flushing_explains(program, inputs, value):
                return f"{side} wrong", f"{spec_text} ({where}); {side} gives {value!r}{FLUSHES_SUBNORMALS}"
    if silent:       # accuracy unspecified: near enough both, or say who is nearer
        ours_ulps, theirs_ulps = _ulps(ours, spec), _ulps(theirs, spec)
        distances = f"pjrt-ref {ours_ulps} ULP, other {theirs_ulps} ULP from the correctly rounded {spec!r}"
        if _near(ours, spec) and _near(theirs, spec):
            return "tolerance", f"{'; '.join(silent)}; {distances}"
        return "spec silent", f"{'; '.join(silent)}; {distances}"
    if ours_right and not theirs_right:
        flushing = FLUSHES_SUBNORMALS if _flushing_explains(program, inputs, theirs) else ""
        return "other backend wrong", f"{spec_text} ({where}); the other backend gives {theirs!r}{flushing}"
    if theirs_right and not ours_right:
        flushing = FLUSHES_SUBNORMALS if _flushing_explains(program, inputs, ours) else ""
        return "pjrt-ref wrong", f"{spec_text} ({where}); pjrt-ref gives {ours!r}{flushing}"
    if not ours_right and not theirs_right:
        return "both wrong", f"{spec_text} ({where}); pjrt-ref {ours!r}, other {theirs!r}"
    return "tolerance", f"both give {spec!r} ({where}) but compared apart (NaN bits)"
