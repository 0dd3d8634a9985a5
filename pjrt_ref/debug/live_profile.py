"""Slices for the host's profiler: what `jax.profiler.trace` shows of pjrt-ref.

The PJRT profiler extension (`pjrt_ref/capi/profiler_extension.py`) gives
the host one `TraceSession` per profiling session. While at least one is
started, `ACTIVE` is true and pjrt-ref records the same slices as
PJRT_REF_PROFILE (`pjrt_ref/debug/profile.py`): one per compile, per execute
and per op, with the op's location and its operand and result types.

How the op slices are made: the program is planned a second time, lazily at
its first execute under a trace, with `interpreter/instrument.py`'s
`Instrument` wrapping every step (the plan PJRT_REF_PROFILE would use: no
plan-time fusion, so every op is visible) and this module's `LiveSink` as
its recorder. While a trace is active (or PJRT_REF_PROFILE is set), this
module's `OBSERVER` watches every program (`interpreter/observer.py`): it
picks that plan under a trace and records compile and execute slices. It is
installed when the first session starts and removed when the last stops, so
with nothing to record executions run the normal, optimised plan and pay
one attribute read.
"""
from __future__ import annotations

import threading
import time
import weakref

from pjrt_ref import settings
from pjrt_ref.interpreter import observer
from pjrt_ref.debug.profile import from_environment, op_args
from pjrt_ref.debug.xspace import Slice
from pjrt_ref.interpreter.instrument import Instrument

ACTIVE = False                       # some session is started
_LOCK = threading.Lock()
_STARTED: list["TraceSession"] = []
_TRACED_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # Program -> FunctionPlan
_PLANNING = threading.Lock()
_PROFILE_FILE = bool(settings.get("PJRT_REF_PROFILE"))      # read once, at import


class TraceSession:
    """One profiling session of the host: records slices between start and stop."""

    def __init__(self) -> None:
        self.slices: list[Slice] = []
        self.running = False
        self._clock_anchor = (time.time_ns(), time.perf_counter())

    def start(self) -> None:
        """Begin recording (again: a restarted session drops what it had)."""
        global ACTIVE
        with _LOCK:
            self.slices = []
            # perf_counter is precise, the host's clock is Unix-epoch nanoseconds:
            # remember one instant on both to convert.
            self._clock_anchor = (time.time_ns(), time.perf_counter())
            if not self.running:
                _STARTED.append(self)
                self.running = True
            ACTIVE = True
            observer.install(OBSERVER)

    def stop(self) -> None:
        global ACTIVE
        with _LOCK:
            if self.running:
                _STARTED.remove(self)
                self.running = False
            ACTIVE = bool(_STARTED)
            if not ACTIVE and not _PROFILE_FILE:
                observer.install(observer.NOBODY)

    def epoch_ns(self, seconds: float) -> int:
        """A time.perf_counter() reading as Unix-epoch nanoseconds."""
        wall_ns, perf = self._clock_anchor
        return wall_ns + round((seconds - perf) * 1e9)

    def add(self, name: str, category: str, start: float, end: float, thread: int, args: dict) -> None:
        self.slices.append(Slice(name, category, self.epoch_ns(start), self.epoch_ns(end), thread, args))


def record(name: str, category: str, start: float, end: float, args: dict) -> None:
    """Give a slice (time.perf_counter() seconds) to every started session."""
    thread = threading.get_native_id()
    for session in list(_STARTED):
        session.add(name, category, start, end, thread, args)


def record_and_profile(name: str, category: str, start: float, end: float, args: dict) -> None:
    """A compile or execute slice: to PJRT_REF_PROFILE's file if set, and to started sessions."""
    recorder = from_environment()
    if recorder is not None:
        recorder.slice(name, category, start, end, args)
    if ACTIVE:
        record(name, category, start, end, args)


class LiveSink:
    """The recorder an `Instrument` calls per op: to the sessions, and to `file` if any."""

    def __init__(self, file=None) -> None:
        self.file = file          # PJRT_REF_PROFILE's Recorder, when that is set too

    def op_slice(self, op, operands, results, start: float, end: float) -> None:
        if self.file is not None:
            self.file.op_slice(op, operands, results, start, end)
        if ACTIVE:
            record(op.name, "op", start, end, op_args(op, operands, results))


def traced_plan(program):
    """`program`'s entry function planned with every op instrumented (built once)."""
    plan = _TRACED_PLANS.get(program)
    if plan is None:
        with _PLANNING:
            plan = _TRACED_PLANS.get(program)
            if plan is None:
                plan = _TRACED_PLANS[program] = _plan_instrumented(program)
    return plan


def _plan_instrumented(program):
    from pjrt_ref.interpreter.plan import ModulePlan

    module_plan = ModulePlan.of_module(program.mlir_module())
    # Keep the environment's other switches (PJRT_REF_CHECK_NANS, _TRACE) in force.
    instrument = module_plan.instrument or Instrument()
    instrument.profiler = LiveSink(instrument.profiler)
    module_plan.instrument = instrument
    plan = module_plan.function(program.entry)
    module_plan.plan_all()
    return plan


class LiveObserver(observer.Observer):
    """What watches programs while a trace is active or PJRT_REF_PROFILE is set:
    under a trace the instrumented plan (each op leaves a slice), and every
    compile and execute as a slice."""

    recording = True
    picks_plans = True

    def function(self, program):
        return traced_plan(program) if ACTIVE else program.function

    def slice(self, name: str, category: str, start: float, end: float, args: dict) -> None:
        record_and_profile(name, category, start, end, args)


OBSERVER = LiveObserver()


def watch_from_settings() -> None:
    """At the plugin's start (pjrt_ref/capi/__init__.py): PJRT_REF_PROFILE set
    means compile and execute slices for the whole process."""
    if _PROFILE_FILE:
        observer.install(OBSERVER)
