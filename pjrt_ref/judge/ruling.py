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

from pjrt_ref.debug.diff.compare import Tolerance, compare, ulp_distance
from pjrt_ref.interpreter.types import is_complex, is_float
from pjrt_ref.conformance.oracle import OracleUnavailable, reference_results
from pjrt_ref.judge.oracle import COMPLEX_SPECIALS, Oracle, Unsupported
from pjrt_ref.judge.programs import FuzzProgram, Node
from pjrt_ref.judge.structural import STRUCTURAL
from pjrt_ref.judge.values import dtype_of

VERDICTS = ("pjrt-ref wrong", "other backend wrong", "both wrong", "spec silent", "tolerance",
            "undecided", "other backend failed")
# Transcendental results this many ULPs from the correctly rounded value count as accurate.
ACCURATE_ULPS = 2


def spec_answer(program: FuzzProgram, inputs: list):
    """(value, silent reasons, clauses) of the program's (one) result by the oracle, None
    for the value where the spec leaves it open; raises Unsupported."""
    oracle = Oracle()
    values = {("arg", i): np.asarray(x) for i, x in enumerate(inputs)}
    silent, clauses = [], []
    for j, node in enumerate(program.nodes):
        operands = [values[v] for v in node.operands]
        types = [program.element_type(v) for v in node.operands]
        shape = program.shape_of(("op", j))
        if node.structural:
            result, why = _structural(oracle, node, operands, types, shape)
            clause = f"stablehlo.{node.op}"
        else:
            result, why, clause = _elementwise(oracle, node, operands, types, shape)
        clauses.append(clause)
        if why:
            silent.append(f"{node.op}: {why}")
        if result is None:
            return None, silent, clauses
        values[("op", j)] = result
    return values[program.returned()[0]], silent, clauses


def _elementwise(oracle: Oracle, node, operands: list, types: list, shape: tuple):
    """(result, why the spec is silent, clause): the oracle element by element."""
    result = np.empty(shape, dtype_of(node.element_type))
    why, clause = None, f"stablehlo.{node.op}"
    for index in np.ndindex(*shape):
        answer = oracle.evaluate(node, [x[index] for x in operands], types)
        clause, why = answer.clause, why or answer.silent
        if answer.value is None:
            return None, answer.silent, clause
        result[index] = np.asarray(answer.value).reshape(())
    return result, why, clause


def _structural(oracle: Oracle, node, operands: list, types: list, shape: tuple):
    """(result, why the spec is silent) of a structural op (structural.py), whose
    reductions fold with the elementwise oracle."""
    def apply(op: str, a, b, element_type: str):      # b None: a unary op
        operands = [a] if b is None else [a, b]
        answer = oracle.evaluate(Node(op, (), element_type), operands, [element_type] * len(operands))
        return None if answer.value is None else answer.value

    attrs = dict(node.attrs or {}, result_shape=list(shape))
    return STRUCTURAL[node.op].evaluate(attrs, operands, types[0], apply)


@dataclass
class Ruling:
    verdict: str                 # one of VERDICTS
    reason: str
    cause: str | None = None     # a cause shared by findings of any op ("flushes subnormals")


FLUSHES = "flushes subnormals"
FLUSHES_SUBNORMALS = (": it flushes subnormal numbers to zero (FTZ/DAZ), where IEEE 754, "
                      "whose arithmetic the spec's float types follow, keeps them")


def flushed(value: np.ndarray) -> np.ndarray:
    """`value` with subnormal floats replaced by zero of the same sign (what FTZ/DAZ hardware
    modes do); a complex number's parts each."""
    value = np.asarray(value)
    if is_complex(value.dtype):
        parts = np.empty_like(value)
        parts.real, parts.imag = flushed(value.real.copy()), flushed(value.imag.copy())
        return parts
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


def _third_flushed_explains(program: FuzzProgram, inputs: list, result) -> bool:
    """Whether the reference interpreter, given the inputs flushed, gives `result` once
    its own result is flushed too (for what the oracle does not compute: complex sign, exponential...)."""
    if all(np.array_equal(flushed(x), x) for x in inputs):
        return False
    third = third_opinion(program, [flushed(x) for x in inputs])
    return not isinstance(third, str) and _same(flushed(third), result)


def _has_subnormal_steps(program: FuzzProgram, inputs: list) -> bool:
    try:
        spec, _, _ = spec_answer(program, inputs)
    except Unsupported:
        return False
    return spec is not None and not np.array_equal(flushed(spec), spec)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values, NaN equal to NaN (whatever its sign and payload)."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if is_complex(a.dtype) and is_complex(b.dtype):
        return _same(a.real.copy(), b.real.copy()) and _same(a.imag.copy(), b.imag.copy())
    if is_float(a.dtype):
        wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(wide_a) & np.isnan(wide_b)
        equal = (wide_a == wide_b) & (np.signbit(wide_a) == np.signbit(wide_b))
        return bool(np.all(both_nan | equal))
    return bool(np.array_equal(a, b))


def _ulps(value, spec) -> str:
    """The largest distance in ULPs between `value` and the spec's (NaN: one is NaN, the other not);
    for complex numbers, the larger of their parts'."""
    value = np.asarray(value)
    if is_complex(value.dtype) and value.size:
        spec = np.asarray(spec).astype(value.dtype)
        distances = [_ulps(getattr(value, part).copy(), getattr(spec, part).copy()) for part in ("real", "imag")]
        return "NaN" if "NaN" in distances else str(max(int(d) for d in distances))
    if not is_float(value.dtype) or value.size == 0:
        return ""
    distance = ulp_distance(value.reshape(-1), np.asarray(spec).reshape(-1).astype(value.dtype))
    return "NaN" if np.isnan(distance).any() else str(int(distance.max()))


def _nan_for_a_number(value, spec) -> bool:
    """Whether `value` holds a NaN where the spec's result holds a number."""
    value, spec = np.asarray(value), np.asarray(spec)
    if not (is_float(value.dtype) or is_complex(value.dtype)):
        return False
    return bool((np.isnan(value) & ~np.isnan(spec.astype(value.dtype))).any())


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
        verdict, reason = _by_the_third_opinion(program, inputs, ours, theirs, third, reason)
    cause = FLUSHES if reason.endswith(FLUSHES_SUBNORMALS) else None
    return Ruling(verdict, f"{reason}; {_third_said(third, ours, theirs)}", cause)


# Complex ops exact on any parts: they compare, move or negate, and do no arithmetic.
_EXACT_ON_COMPLEX = {"maximum", "minimum", "compare", "select", "negate", "real", "imag", "complex",
                     "bitcast_convert", "convert"} | set(STRUCTURAL)


def _complex_arithmetic(program: FuzzProgram) -> bool:
    """Whether the program does arithmetic on complex numbers."""
    return any(node.op not in _EXACT_ON_COMPLEX
               and any("complex" in program.element_type(v) for v in node.operands)
               for node in program.nodes)


def _non_finite_parts(*values) -> bool:
    """Whether any complex value among `values` has an infinite or NaN part."""
    return any(is_complex(np.asarray(v).dtype) and not np.isfinite(np.asarray(v)).all() for v in values)


def _by_the_third_opinion(program, inputs, ours, theirs, third, reason: str) -> tuple[str, str]:
    """Where the oracle computes nothing (complex functions): a side that flushes subnormals is
    wrong; results within the type's rounding tolerance of each other are a matter of
    rounding, which the spec does not pin down for complex arithmetic, and so are
    infinite or NaN parts in an input or a result; otherwise the side the reference
    interpreter disagrees with is wrong."""
    for side, value, other in (("other backend", theirs, ours), ("pjrt-ref", ours, theirs)):
        if _same(third, other) and not _same(third, value) and _third_flushed_explains(program, inputs, value):
            return f"{side} wrong", reason + FLUSHES_SUBNORMALS
    if compare(ours, theirs, Tolerance()).agrees:
        return "tolerance", reason + "; the two differ by rounding, which the spec leaves open here"
    if _complex_arithmetic(program) and _non_finite_parts(ours, theirs, *inputs):
        return "spec silent", f"{reason}; {COMPLEX_SPECIALS}"
    for side, value, other in (("other backend", theirs, ours), ("pjrt-ref", ours, theirs)):
        if _same(third, other) and not _same(third, value):
            return f"{side} wrong", reason
    return "undecided", reason


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
    if silent:     # accuracy unspecified, but a flushed subnormal or a NaN for a number is no accuracy question
        for side, value, other in (("pjrt-ref", ours, theirs), ("other backend", theirs, ours)):
            if not _near(other, spec) or _near(value, spec):
                continue
            if _flushing_explains(program, inputs, value):
                return f"{side} wrong", f"{spec_text} ({where}); {side} gives {value!r}{FLUSHES_SUBNORMALS}"
            if _nan_for_a_number(value, spec):
                return f"{side} wrong", (f"{spec_text} ({where}); {side} gives {value!r}: a NaN where the "
                                         "spec's result is a number, which no accuracy allows")
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
