"""Sort failing tests by cause: the first op that differs, a custom call or
op the plugin rejects, a crash, a hang.

Each failing test gets one `Cause`; `triage` groups tests by cause, the
cause that explains the most tests first, so the report's top line is the
thing to fix first. The error's text decides first (its patterns are those
of XLA's, pjrt-ref's and MLIR's own messages); a test that failed on values
is filed under the first op, and its element type, where its replays found
the plugin leaving the reference.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from pjrt_ref.testkit.replay import Replay

# (kind, pattern with the subject as group 1), tried in order on the error text.
_ERROR_PATTERNS = (
    ("unsupported custom call", r"custom call (?:target )?(?:to )?['\"`]?([\w.\-]+)['\"`]? (?:is not registered|for platform)"),
    ("unsupported custom call", r"No registered implementation for (?:FFI )?custom call to ['\"`]?([\w.\-]+)"),
    ("unsupported custom call", r"No FFI handler registered for ['\"`]?([\w.\-]+)"),
    ("unsupported custom call", r"[Uu]nsupported custom[ _]call (?:target )?['\"`]?([\w.\-]+)"),
    # XLA's error quoting the HLO of a custom call it refuses to compile (its partitioner:
    # "Side-effect ops cannot be replicated: ... custom_call_target=\"InspectSharding\"").
    ("custom call rejected", r"custom_call_target=\"([\w.\-]+)\""),
    ("op rejected", r"['\"`]((?:stablehlo|chlo|mhlo|sdy|func|shardy)\.[\w.]+)['\"`][^\n]*?(?:not supported|unsupported|"
                    r"not implemented|unimplemented|failed to legalize|is unknown|cannot)"),
    ("op rejected", r"(?:not supported|unsupported|not implemented|unimplemented|failed to legalize)[^\n]*?"
                    r"['\"`]((?:stablehlo|chlo|mhlo|sdy)\.[\w.]+)['\"`]"),
)
# A test that asks JAX for its "cpu" backend by name, in the run of a plugin that is
# itself "cpu" (and so runs without jaxlib's cpu: plugin.py says why): not the plugin's doing.
_ASKS_FOR_CPU = ("test asks for JAX's own cpu backend", r"Unknown backend (cpu)\b")
_CRASH_SIGNS = ("crashed while running", "node down", "Fatal Python error", "Segmentation fault",
                "died of SIG", "worker crashed")


@dataclass(frozen=True)
class Cause:
    kind: str          # "op differs", "results differ", "unsupported custom call", "custom call
                       # rejected", "op rejected",
                       # "crash", "hang", "plugin does not load", "other error"
    subject: str = ""

    def title(self) -> str:
        return f"{self.kind}: {self.subject}" if self.subject else self.kind


@dataclass
class Finding:
    """One failing test: its cause, and what shows it."""
    test: str
    cause: Cause
    evidence: str = ""           # the op's location and ULPs, or the error line
    folder: str = ""


@dataclass
class CauseRow:
    cause: Cause
    findings: list[Finding] = field(default_factory=list)


def error_cause(reason: str, failure: str) -> tuple[Cause, str] | None:
    """The cause the error text alone gives (a hang, a crash, a custom call or op the
    plugin rejects), or None when the test failed on values (an assertion, say): only
    then does replaying its executions tell more."""
    text = f"{reason}\n{failure}"
    if reason.startswith("hung"):
        return Cause("hang"), reason
    if any(sign in text for sign in _CRASH_SIGNS):
        return Cause("crash"), first_matching_line(text, _CRASH_SIGNS)
    for kind, pattern in (*_ERROR_PATTERNS, _ASKS_FOR_CPU):
        match = re.search(pattern, text)
        if match:
            return Cause(kind, match.group(1)), first_line_with(text, match.group(0))
    return None


def cause_of(reason: str, failure: str, replays: list[Replay]) -> tuple[Cause, str]:
    """The cause of one failing test: its error text's, else its replays' first differing op."""
    known = error_cause(reason, failure)
    if known:
        return known
    for replay in replays:
        if replay.first_op:
            return op_cause(replay)
    for replay in replays:
        if replay.status == "differs":        # (`pjrt-ref diff` names ops of one-device programs)
            subject = ("no single op" if replay.devices == 1 else
                       f"only partitioned over {replay.devices} devices" if replay.one_device == "agrees" else
                       f"a program on {replay.devices} devices")
            return Cause("results differ", subject), replay.detail
    return Cause("other error", error_class(f"{reason}\n{failure}")), reason


def op_cause(replay: Replay) -> tuple[Cause, str]:
    facts = replay.first_op
    dtype = facts.get("dtype", "")
    evidence = f"at {facts.get('location', '?')}"
    if facts.get("max_ulp") is not None:
        evidence += f"; {facts.get('differing')} of {facts.get('elements')} elements differ, by up to " \
                    f"{facts['max_ulp']} ULP"
    elif facts.get("problem"):
        evidence += f"; {facts['problem']}: {facts.get('dtype')}{facts.get('shape')} against " \
                    f"{facts.get('other_dtype')}{facts.get('other_shape')}"
    worst = facts.get("worst") or []
    if worst:
        element = worst[0]
        evidence += f"; worst [{', '.join(map(str, element['index']))}]: pjrt-ref {element['pjrt_ref']}, " \
                    f"plugin {element['other']}"
    if replay.odd_one_out:
        evidence += f"; apart from the others: {replay.odd_one_out}"
    if replay.stablehlo_interpreter:
        evidence += f"; StableHLO's reference interpreter gives the values of: {replay.stablehlo_interpreter}"
    if replay.odd_one_out in ("pjrt-ref", "all differ") and facts.get("spec"):
        evidence += f" (cpu does not side with pjrt-ref: which side the spec supports decides; " \
                    f"pjrt-ref reads it as: {facts['spec']})"
    return Cause("op differs", f"{facts.get('op')} ({dtype})" if dtype else facts.get("op", "?")), evidence


def error_class(text: str) -> str:
    """`AssertionError`, `XlaRuntimeError: INTERNAL`...: the kind of error, without its details."""
    for line in text.splitlines():
        match = re.match(r"^\s*(?:E\s+)?([\w.]*(?:Error|Exception|Exit))\b:?\s*([A-Z_]+:)?", line)
        if match:
            return (match.group(1).rsplit(".", 1)[-1] + (f": {match.group(2)[:-1]}" if match.group(2) else ""))
    return "unknown"


def first_matching_line(text: str, signs: tuple[str, ...]) -> str:
    return next((line.strip()[:300] for line in text.splitlines() if any(s in line for s in signs)), "")


def first_line_with(text: str, fragment: str) -> str:
    head = fragment.splitlines()[0] if fragment else ""
    return next((line.strip()[:300] for line in text.splitlines() if head and head in line), head[:300])


def triage(findings: list[Finding]) -> list[CauseRow]:
    """Findings grouped by cause, the causes explaining the most tests first."""
    grouped: dict[Cause, CauseRow] = {}
    for finding in findings:
        grouped.setdefault(finding.cause, CauseRow(finding.cause)).findings.append(finding)
    return sorted(grouped.values(), key=lambda row: (-len(row.findings), row.cause.title()))


@dataclass
class KindRow:
    """The causes of one kind together: how many tests, how many distinct causes, the largest."""
    kind: str
    tests: int
    causes: int
    largest: CauseRow


def by_kind(rows: list[CauseRow]) -> list[KindRow]:
    """The cause rows gathered by kind (every unsupported custom call target together,
    say), the kind explaining the most tests first: the report's short view."""
    kinds: dict[str, KindRow] = {}
    for row in rows:                       # rows come largest first
        kind = kinds.setdefault(row.cause.kind, KindRow(row.cause.kind, 0, 0, row))
        kind.tests += len(row.findings)
        kind.causes += 1
    return sorted(kinds.values(), key=lambda kind: -kind.tests)
