"""Python helper threads that share a list of jobs with the calling thread:
the blocks of a product when the C pool (gemm_pool.c) is missing, and
the pieces of a fused elementwise loop (threads.py).

The caller takes jobs until none is left, helpers are woken only as the
caller asks (blas.idle_cpus decides how many), and the caller never waits
for a helper that has not started: a helper that wakes late finds nothing
left to do.
"""
from __future__ import annotations

import os
import threading


class _SharedJobs:
    """Jobs claimed one at a time by whichever thread asks first. `done`
    is held until the last job has finished (a plain lock: cheaper to make
    and to wait on than an Event, which matters for a sub-millisecond
    product)."""

    def __init__(self, jobs: list):
        self.jobs = jobs
        self.lock = threading.Lock()
        self.claimed = 0
        self.unfinished = len(jobs)
        self.done = threading.Lock()
        if jobs:
            self.done.acquire()
        self.error: BaseException | None = None

    def work(self) -> None:
        while True:
            with self.lock:
                index = self.claimed
                if index >= len(self.jobs):
                    return
                self.claimed += 1
            try:
                self.jobs[index]()
            except BaseException as error:  # re-raised in the calling thread
                self.error = error
            with self.lock:
                self.unfinished -= 1
                last = self.unfinished == 0
            if last:
                self.done.release()

    def wait(self) -> None:
        """Return once every job has finished, even if the wait is interrupted
        (Ctrl-C, a test timeout's signal): the helpers write into the caller's
        arrays, which must outlive them. The interruption is raised after."""
        interrupted = None
        while True:
            try:
                self.done.acquire()
                break
            except BaseException as error:   # raised by a signal handler while waiting
                interrupted = interrupted or error
        if interrupted is not None:
            raise interrupted


class _Helper:
    """One pool thread: sleeps on its own lock until handed jobs, helps with
    them, then offers itself again (`_IDLE`)."""

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.shared: _SharedJobs | None = None
        thread = threading.Thread(target=self._serve, name=f"pjrt_ref_helper_{len(_HELPERS)}",
                                  daemon=True)
        _HELPERS.append(self)
        thread.start()

    def _serve(self) -> None:
        while True:
            self.wake.acquire()
            shared, self.shared = self.shared, None
            shared.work()
            with _IDLE_LOCK:
                _IDLE.append(self)

    def help(self, shared: _SharedJobs) -> None:
        self.shared = shared
        self.wake.release()


_HELPERS: list[_Helper] = []   # every pool thread (at most MAX_HELPERS)
_IDLE: list[_Helper] = []      # those waiting for work
_IDLE_LOCK = threading.Lock()
MAX_HELPERS = 64


def _idle_helpers(count: int) -> list[_Helper]:
    """Up to `count` sleeping helpers, taken out of `_IDLE` (new threads are
    started while there are fewer than MAX_HELPERS). Helpers busy for
    another caller are not waited for: the caller does their share."""
    with _IDLE_LOCK:
        while len(_IDLE) < count and len(_HELPERS) < MAX_HELPERS:
            _IDLE.append(_Helper())
        taken = _IDLE[len(_IDLE) - min(count, len(_IDLE)):]
        del _IDLE[len(_IDLE) - len(taken):]
    return taken


def _forget_helpers_after_fork() -> None:
    """A forked child has none of the pool's threads: it starts new ones."""
    global _IDLE_LOCK
    _HELPERS.clear()
    _IDLE.clear()
    _IDLE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_helpers_after_fork)


def run_shared(jobs: list, helpers: int) -> None:
    """Run `jobs` on the calling thread and up to `helpers` pool threads;
    return when all are done. A helper that wakes up late finds nothing
    left to do: the caller never waits for a thread that has not started.
    The caller chooses `helpers` (no more than `idle_cpus()`: a helper
    woken on a busy CPU may keep the caller waiting for its block)."""
    shared = _SharedJobs(jobs)
    helpers = min(helpers, len(jobs) - 1)
    if helpers > 0:
        for helper in _idle_helpers(helpers):
            helper.help(shared)
    shared.work()
    shared.wait()
    if shared.error is not None:
        raise shared.error
