"""Numba kernels compiled on a background thread while their runs go on numpy.

Why: a program's first compile used to wait for numba. A fused run that
needs a compiled loop (fusion.py, "When numba pays") cost that compile
numba's start-up (about 0.9 s per process: the import and its target) and
0.2 to 1 s per kernel never compiled on the machine before: most of a
12-layer transformer's 2.5 s cold compile (benchmarks/README.md, W11).

Now such a run starts as its chunked numpy form (fusion._chunked_step: each
element meets the kernels it met unfused) behind a `Switchable` kernel, and
once it has run PJRT_REF_JIT_HOT_SECONDS (`build_when_hot`; numba's import
holds the GIL in long stretches, so starting it at once slowed every numpy
call of a fresh process's first run, W0) one daemon thread compiles the
loop and switches the step to it. Calls
made meanwhile run the numpy form: slower, with the compiled loop's bits
but for the two exceptions fusion always has (optimiser/__init__.py, "Bits": a
NaN's payload, and one float32 input of a compiled logistic). A kernel
numba compiled before on this machine (`codegen.is_built`) is loaded at
plan time as before once numba runs in the process: that is quick, and a
program then runs at full speed from its first call. Before numba has
started, it too loads in the background: numba's import alone (0.5 s and
more) outlasts a fresh process's first result on numpy (W0,
benchmarks/README.md).

Kernels queued while a program is planned wait until no plan is being
made (`while_planning`): numba's import and its compiles hold the GIL for
long stretches, and started at once they took 0.05 to 0.08 s from a cold
compile of W11's program, which the plan then finished that much later.

PJRT_REF_JIT_BACKGROUND=0 compiles every kernel before the program loads
(the test suite does, to run the compiled loops it checks). `wait()`
returns when every queued kernel is built.

Process life: at exit the thread finishes the kernel it is compiling
(numba must not be stopped inside LLVM) and takes no more; a fork waits
until no kernel is being compiled, so the child inherits no held lock,
and the child's steps stay on numpy unless it plans them again.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
import weakref
import warnings
from collections import deque
from typing import Callable

from pjrt_ref import settings

Kernel = Callable[..., object]


class Switchable:
    """A step kernel that calls `current`, which the background thread
    replaces by the compiled loop once it is built.

    A first form that runs long in one call (a fused run's numpy form on
    10^8 elements) need not finish on numpy: it reports its time as it goes
    (`spend`), which queues the build once the run is hot, and hands what is
    left of the call to the compiled kernel as soon as `built()` has one."""

    __slots__ = ("current", "first", "_spend", "__weakref__")

    def __init__(self, first: Kernel) -> None:
        self.current = self.first = first
        self._spend = None

    def __call__(self, op, *values, **regions):   # regions: a loop's (optimiser/loops.py)
        return self.current(op, *values, **regions)

    def spend(self, seconds: float) -> None:
        """Count `seconds` of running the first form towards building the kernel."""
        if self._spend is not None:
            self._spend(seconds)

    def built(self) -> Kernel | None:
        """The compiled kernel, once the background thread has switched to it."""
        current = self.current
        return None if current is self.first or getattr(current, "warming", False) else current


def enabled() -> bool:
    """PJRT_REF_JIT_BACKGROUND, read for each run planned."""
    return settings.get("PJRT_REF_JIT_BACKGROUND")


_JOBS: deque = deque()                 # (build, switch) pairs not yet started
_CONDITION = threading.Condition()
_BUILDING = threading.Lock()           # held while one kernel compiles
_STATE = {"thread": None, "busy": False, "closing": False, "planning": 0}


def build_later(build: Callable[[], Kernel | None], switch: Switchable) -> None:
    """Queue `build` (the compiled kernel, or None if numba could not make
    it) to replace `switch.current` when done."""
    with _CONDITION:
        if _STATE["closing"]:
            return                      # exiting: the step stays on numpy
        _JOBS.append((build, switch))
        if _STATE["thread"] is None:
            thread = threading.Thread(target=_work, name="pjrt-ref-kernels", daemon=True)
            _STATE["thread"] = thread
            thread.start()
        _CONDITION.notify_all()


def build_when_hot(build: Callable[[], Kernel | None], switch: Switchable, seconds: float) -> None:
    """Queue `build` once `switch`'s first form has run `seconds` in all (0:
    at once). A loop that runs for milliseconds costs less interpreted than
    its kernel's compile, which a test suite of thousands of short loops
    would otherwise pay for each (benchmarks/README.md, W13)."""
    if seconds <= 0:
        build_later(build, switch)
        return
    # The switch holds `spend` and `warming`; they hold it weakly (no cycle: a
    # dropped plan goes at once, not at Python's next cycle collection).
    first, spent, queued, switch_ref = switch.first, [0.0], [False], weakref.ref(switch)

    def spend(elapsed: float) -> None:
        spent[0] += elapsed
        switch = switch_ref()
        if spent[0] >= seconds and not queued[0] and switch is not None:
            queued[0] = True
            if getattr(switch.current, "warming", False):
                switch.current = first
            build_later(build, switch)

    def warming(op, *values, **regions):
        start = time.perf_counter()
        try:
            return first(op, *values, **regions)
        finally:
            spend(time.perf_counter() - start)

    warming.warming = True
    switch._spend = spend
    # A first form that reports its own time (fusion.py's chunked runs) runs unwrapped.
    switch.current = first if getattr(first, "reports_time", False) else warming


@contextlib.contextmanager
def while_planning():
    """Around a program's planning: no queued kernel starts to compile
    until every such block has ended."""
    with _CONDITION:
        _STATE["planning"] += 1
    try:
        yield
    finally:
        with _CONDITION:
            _STATE["planning"] -= 1
            _CONDITION.notify_all()


def _work() -> None:
    while True:
        with _CONDITION:
            while (not _JOBS or _STATE["planning"]) and not _STATE["closing"]:
                _CONDITION.wait()
            if _STATE["closing"]:
                return
            build, switch = _JOBS.popleft()
            _STATE["busy"] = True
        try:
            with _BUILDING:
                kernel = build()
            if kernel is not None:
                switch.current = kernel
        except Exception as error:     # never let a kernel take the thread (or the host) down
            warnings.warn(f"pjrt-ref: a fused run's kernel was not compiled in the background "
                          f"({type(error).__name__}: {error}); it keeps running on numpy",
                          RuntimeWarning)
        finally:
            with _CONDITION:
                _STATE["busy"] = False
                _CONDITION.notify_all()


def pending() -> int:
    """Kernels queued or being compiled."""
    with _CONDITION:
        return len(_JOBS) + int(_STATE["busy"])


def wait(timeout: float | None = None) -> bool:
    """Block until every queued kernel is built (True), or `timeout`
    seconds pass (False)."""
    with _CONDITION:
        return _CONDITION.wait_for(lambda: not _JOBS and not _STATE["busy"], timeout)


def _close() -> None:
    """At exit: take no more jobs, let the one compiling finish."""
    with _CONDITION:
        _STATE["closing"] = True
        _JOBS.clear()
        compiling = _STATE["busy"]
        _CONDITION.notify_all()
        _CONDITION.wait_for(lambda: not _STATE["busy"], timeout=60)
    if compiling:
        _keep_interrupted_exit()


def _keep_interrupted_exit() -> None:
    """After an uncaught Ctrl-C, CPython exits by SIGINT (a shell sees ^C),
    unless a string is exec'd before it exits: each `exec(str)` clears that
    flag (pythonrun.c, run_eval_code_obj), and numba's compile, finishing
    here, execs strings. Set it again the only way there is: a string whose
    evaluation ends in KeyboardInterrupt."""
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if isinstance(last, KeyboardInterrupt):
        try:
            exec("raise KeyboardInterrupt")
        except KeyboardInterrupt:
            pass


def _before_fork() -> None:
    _BUILDING.acquire()


def _after_fork_in_parent() -> None:
    _BUILDING.release()


def _after_fork_in_child() -> None:
    global _CONDITION, _BUILDING
    _CONDITION = threading.Condition()
    _BUILDING = threading.Lock()
    _JOBS.clear()
    _STATE.update(thread=None, busy=False, closing=False, planning=0)


atexit.register(_close)
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
