"""Who watches programs run: which plan an execute runs, and who hears of compiles and executes.

By default nobody: a program's own optimised plan runs and nothing is
recorded. A debugging tool that wants more (pjrt_ref/debug/live_profile.py,
for PJRT_REF_PROFILE's file and for `jax.profiler.trace`) installs an
observer of its own when it switches on and puts this one back when it
switches off. The layers that run programs (pjrt_ref/model/executable.py and
multi_device.py, pjrt_ref/spmd/partitioner.py) read `current` once per
compile or execute and never branch through the debug package. It lives in
the interpreter, below all of them, because its subject is a program's plan.
"""
from __future__ import annotations


class Observer:
    """Nobody watching: the program's own plan, nothing recorded."""

    recording = False          # whether `slice` wants compile and execute slices
    picks_plans = False        # whether `function` may differ from the program's own plan

    def function(self, program):
        """The plan that runs `program`'s entry function (read only if `picks_plans`)."""
        return program.function

    def slice(self, name: str, category: str, start: float, end: float, args: dict) -> None:
        """A compile or execute slice (time.perf_counter() seconds); called only while `recording`."""


NOBODY = Observer()
current: Observer = NOBODY


def install(observer: Observer) -> None:
    """Make `observer` watch every program from now on (NOBODY to stop watching)."""
    global current
    current = observer
