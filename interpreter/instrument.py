"""Debug instrumentation: watch every op of a program as it runs.

Four switches, read when a program is loaded (pjrt_ref/settings.py declares them):

    PJRT_REF_CHECK_NANS=1        stop at the first op whose result holds a NaN
                                 (or an Inf) that none of its operands held
    PJRT_REF_TRACE=1             log each op (name, location, result summary)
                                 to the `pjrt_ref.trace` logger (stderr)
    PJRT_REF_TRACE=FILE.jsonl    write the same as JSON lines to FILE
    PJRT_REF_PROFILE=FILE.json   time each op into a Chrome trace-event file
                                 (see `pjrt_ref.debug.profile`)
    PJRT_REF_DIFF=cpu|PLUGIN.so  run each op on another backend too and stop at
                                 the first whose result differs (`pjrt_ref.debug.diff`)

The NaN check and the trace are done here. The profile's recorder and the
diff's comparer belong to the debug package, a layer above the interpreter:
it plugs them in (`plug_in`) when it is imported, and this module only knows
their shape (`OpRecorder`, `OpDiffer`).

With none of them set, `from_environment()` returns None and the interpreter
runs its plan untouched: nothing here costs anything. With one set, the
program is planned without the plan-time optimisations (`interpreter/optimiser`:
fused or compiled steps would hide ops) and each step's kernel is wrapped
once, at plan time, by `Instrument.apply`. The ops inside while/if/case
bodies (and shard_map's `sdy.manual_computation`) are wrapped as well; the regions of reduce, sort, scatter & co. are
not (their kernels may run them once per element pair).
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Callable, Protocol

import numpy as np

from pjrt_ref import settings
from pjrt_ref.errors import FailedPrecondition, InvalidArgument
from pjrt_ref.process_files import per_process
from pjrt_ref.settings import LogOrFile
from pjrt_ref.interpreter.types import DTYPE_ELEMENT_NAMES, Token, is_complex, is_float

# Ops whose bodies run as ordinary steps (run_block), so their ops can be wrapped too.
CONTROL_FLOW_OPS = ("stablehlo.while", "stablehlo.if", "stablehlo.case", "sdy.manual_computation")
# Ops that introduce values rather than compute them: a constant -inf (the
# init of a max reduction) is written in the program, not produced by it.
_SOURCE_OPS = ("stablehlo.constant", "stablehlo.iota")

_TRACE_LOG = logging.getLogger("pjrt_ref.trace")


class NonFiniteResult(InvalidArgument):
    """PJRT_REF_CHECK_NANS: an op produced a NaN or Inf from finite operands."""


# ------------------------------------------------------------ summaries
def type_text(value) -> str:
    """`f32[2,3]` for an array, `token`, or `tuple(...)`."""
    if isinstance(value, Token):
        return "token"
    if isinstance(value, tuple):
        return "tuple(" + ", ".join(type_text(v) for v in value) + ")"
    array = np.asarray(value)
    name = DTYPE_ELEMENT_NAMES.get(array.dtype, str(array.dtype))
    return f"{name}[{','.join(str(d) for d in array.shape)}]"


def _as_numbers(array: np.ndarray) -> np.ndarray | None:
    """The values as float64/complex128 for statistics, or None (tokens...)."""
    if array.dtype == np.bool_ or array.dtype.kind in "iuf":
        return array.astype(np.float64)
    if array.dtype.kind == "c":
        return array.astype(np.complex128)
    try:  # ml_dtypes: bf16, f8..., int4...
        return array.astype(np.float64)
    except (TypeError, ValueError):
        return None


def summarize(value) -> dict:
    """Type, min, max, mean and NaN/Inf counts of a value (JSON-ready).

    Complex values are summarised by their magnitudes; min/max/mean skip
    NaNs (they are counted instead)."""
    summary = {"type": type_text(value)}
    if isinstance(value, (Token, tuple)):
        return summary
    value = np.asarray(value)
    numbers = _as_numbers(value)
    if numbers is None or numbers.size == 0:
        return summary
    nans = np.isnan(numbers)
    infs = np.isinf(numbers)
    if is_float(value.dtype) or is_complex(value.dtype):
        summary["nan"] = int(nans.sum())
        summary["inf"] = int(infs.sum())
    finite = np.abs(numbers) if numbers.dtype.kind == "c" else numbers
    finite = finite[~nans]
    if finite.size:
        summary["min"] = float(finite.min())
        summary["max"] = float(finite.max())
        summary["mean"] = float(finite.mean()) if not infs.any() else float("nan")
    return summary


def summary_text(summary: dict) -> str:
    """`f32[3] min=-1 max=2 mean=0.5 nan=0 inf=0` (the fields present)."""
    parts = [summary["type"]]
    for key in ("min", "max", "mean", "nan", "inf"):
        if key in summary:
            value = summary[key]
            parts.append(f"{key}={value:.6g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


def _results_of(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


# ------------------------------------------------------------ the checks
def _non_finite_counts(values) -> tuple[int, int]:
    """Total NaN and Inf elements of the float/complex arrays among `values`."""
    nan = inf = 0
    for value in values:
        if isinstance(value, (Token, tuple)):
            continue
        array = np.asarray(value)
        if array.dtype.kind in "biu":
            continue
        numbers = _as_numbers(array)
        if numbers is None:
            continue
        nan += int(np.isnan(numbers).sum())
        inf += int(np.isinf(numbers).sum())
    return nan, inf


def check_non_finite(op, operands, results, function: str = "main") -> None:
    """Raise NonFiniteResult if `results` hold a NaN (Inf) no operand held."""
    result_nan, result_inf = _non_finite_counts(results)
    if not result_nan and not result_inf:
        return
    operand_nan, operand_inf = _non_finite_counts(operands)
    new = [kind for kind, got, had in (("NaN", result_nan, operand_nan), ("Inf", result_inf, operand_inf))
           if got and not had]
    if not new:
        return
    where = "" if function == "main" else f" (in @{function})"
    lines = [f"result holds {' and '.join(new)} that its operands did not{where} (PJRT_REF_CHECK_NANS)"]
    for index, value in enumerate(results):
        lines.append(f"  result {index}: {summary_text(summarize(value))}")
    for index, value in enumerate(operands):
        lines.append(f"  operand {index}: {summary_text(summarize(value))}")
    raise op.error("\n".join(lines), cls=NonFiniteResult)


# ------------------------------------------------------------ the trace
_SINKS: dict[str, "object"] = {}
_SINKS_LOCK = threading.Lock()


def _trace_file(path: str):
    """One line-buffered handle per path, truncated when first opened and shared by
    every program of the process (of a multi-process job: one file per process)."""
    path = per_process(path)
    with _SINKS_LOCK:
        sink = _SINKS.get(path)
        if sink is None:
            sink = _SINKS[path] = open(path, "w", buffering=1, encoding="utf-8")
        return sink


def _ensure_trace_handler() -> None:
    """Log to stderr, unless the host configured logging (then to its handlers,
    at INFO even if its root level is higher: PyTorch/XLA sets WARNING)."""
    if not logging.getLogger().handlers and not _TRACE_LOG.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("pjrt-ref trace: %(message)s"))
        _TRACE_LOG.addHandler(handler)
        _TRACE_LOG.propagate = False
    _TRACE_LOG.setLevel(logging.INFO)


def trace_record(op, function: str, results) -> dict:
    return {"op": op.name, "location": op.location, "function": function,
            "results": [summarize(value) for value in results]}


# ------------------------------------------------------------ the debug package's sinks
class OpRecorder(Protocol):
    """PJRT_REF_PROFILE's recorder (pjrt_ref/debug/profile.py's `Recorder`): told of every op run."""

    def op_slice(self, op, operands, results, start: float, end: float) -> None: ...


class OpDiffer(Protocol):
    """PJRT_REF_DIFF's comparer (pjrt_ref/debug/diff's `Differ`).

    `prepare` runs once per planned function and returns, keyed by
    id(step), a unit whose `check(operands, regions, results)` runs after
    the step's kernel."""

    def prepare(self, plan, func_op) -> dict: ...


# What the debug package plugs in: a file path -> its recorder, "cpu" or a
# plugin path -> a differ. None until `pjrt_ref.debug` is imported.
_MAKE_RECORDER: Callable[[str], OpRecorder] | None = None
_MAKE_DIFFER: Callable[[str], OpDiffer] | None = None


def plug_in(make_recorder: Callable[[str], OpRecorder], make_differ: Callable[[str], OpDiffer]) -> None:
    """Called by `pjrt_ref.debug` when it is imported: the makers of the sinks
    PJRT_REF_PROFILE and PJRT_REF_DIFF write to."""
    global _MAKE_RECORDER, _MAKE_DIFFER
    _MAKE_RECORDER, _MAKE_DIFFER = make_recorder, make_differ


def _plugged_in(maker, setting: str, value: str | None):
    """`maker(value)` when `setting` is on (None when off), or an error saying who makes its sink."""
    if not value:
        return None
    if maker is None:
        raise FailedPrecondition(
            f"{setting}={value} is set, but pjrt_ref.debug, which does its work, is not loaded: "
            "import pjrt_ref.debug before loading programs (the PJRT plugin and the pjrt-ref command do)")
    return maker(value)


# ------------------------------------------------------------ the wrapper
class Instrument:
    """What to do around each op; `apply(plan)` wraps a function's steps.

    The arguments are the settings' parsed values: `trace` is
    `LogOrFile.LOG` (the log) or a file path."""

    def __init__(self, check_nans: bool = False, trace: str | None = None,
                 profile: str | None = None, diff: str | None = None) -> None:
        self.check_nans = check_nans
        self.trace_file = None
        self.trace_log = False
        if trace:
            if trace == LogOrFile.LOG:
                self.trace_log = True
                _ensure_trace_handler()
            else:
                self.trace_file = _trace_file(trace)
        self.profiler: OpRecorder | None = _plugged_in(_MAKE_RECORDER, "PJRT_REF_PROFILE", profile)
        self.differ: OpDiffer | None = _plugged_in(_MAKE_DIFFER, "PJRT_REF_DIFF", diff)

    @classmethod
    def from_environment(cls) -> "Instrument | None":
        """The instrument the debug settings ask for, or None when none is on."""
        check_nans = settings.get("PJRT_REF_CHECK_NANS")
        trace = settings.get("PJRT_REF_TRACE")
        profile = settings.get("PJRT_REF_PROFILE")
        diff = settings.get("PJRT_REF_DIFF")
        if not (check_nans or trace or profile or diff):
            return None
        return cls(check_nans, trace, profile, diff)

    def apply(self, plan, func_op=None) -> None:
        """Wrap every step of `plan` (and of its control-flow bodies).

        `func_op`, the MLIR function `plan` was planned from, is where
        PJRT_REF_DIFF cuts out each op (once, now)."""
        units = {}
        if self.differ is not None and func_op is not None:
            units = self.differ.prepare(plan, func_op)
        self._apply_region(plan.body, plan.name, units)

    def _apply_region(self, region, function: str, units: dict) -> None:
        for step in region.steps:
            step.kernel = self.wrap(step.kernel, function, units.get(id(step)))
            if step.op.name in CONTROL_FLOW_OPS:
                for body in step.regions:
                    self._apply_region(body, function, units)
        region.runners = None

    def wrap(self, kernel, function: str, diff_unit=None):
        """`kernel` with this instrument's work around it; `diff_unit` is the
        step's PJRT_REF_DIFF unit (made by `OpDiffer.prepare`), if any."""
        check_nans = self.check_nans
        trace_log, trace_file, profiler = self.trace_log, self.trace_file, self.profiler
        clock = time.perf_counter

        where = "" if function == "main" else f"@{function} "

        def instrumented(op, *operands, **regions):
            start = clock()
            result = kernel(op, *operands, **regions)
            end = clock()
            results = _results_of(result)
            if profiler is not None:
                profiler.op_slice(op, operands, results, start, end)
            if trace_log or trace_file is not None:
                record = trace_record(op, function, results)
                if trace_log:
                    _TRACE_LOG.info("%s  %s%s  %s", op.name, where, op.location,
                                    "; ".join(summary_text(s) for s in record["results"]))
                if trace_file is not None:
                    trace_file.write(json.dumps(record) + "\n")
            if check_nans and op.name not in _SOURCE_OPS:
                check_non_finite(op, operands, results, function)
            if diff_unit is not None:
                diff_unit.check(operands, regions.get("regions"), results)
            return result
        return instrumented


def from_environment() -> Instrument | None:
    return Instrument.from_environment()
