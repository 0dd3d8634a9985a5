"""Which partitioned execute this thread works for: the interpreter's one hook into SPMD.

Inside a partitioned execute a manual region runs per device, so the
sharding ops (`ops/sharding.py`) ask `current_partitioned_run()` and call
the run's methods; outside one it is None and they act on global values.
The partitioner (`pjrt_ref/spmd/manual.py`) sets it around each device's
work. It lives here, beside the ops and below the partitioner, so that the
interpreter never imports the layer above it (as StableHLO's reference
interpreter keeps its process and process grid beside `Ops.cpp`).
"""
from __future__ import annotations

import contextvars

_PARTITIONED_RUN: contextvars.ContextVar = contextvars.ContextVar("pjrt_ref_partitioned_run",
                                                                  default=None)


def current_partitioned_run():
    """The partitioned execute this thread belongs to, if any."""
    return _PARTITIONED_RUN.get()


def enter(run) -> None:
    """Make `run` the partitioned execute of this thread from now on (a device's own thread)."""
    _PARTITIONED_RUN.set(run)


def run_with(run, work):
    """Call `work()` with `run` as this thread's partitioned execute."""
    reset = _PARTITIONED_RUN.set(run)
    try:
        return work()
    finally:
        _PARTITIONED_RUN.reset(reset)
