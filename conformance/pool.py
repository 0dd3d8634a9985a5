"""Long-lived worker processes that survive crashing and hanging cases.

Starting Python and importing the interpreter costs about a second, so cases
are not run in a process each. Instead `WorkerPool` keeps N workers; each
runs one case at a time. When a case outlives its timeout the worker is
killed (SIGKILL) and the case reported as "timeout"; when a worker dies
(an abort or segfault inside MLIR, say) its case is reported as "error" with
the signal and the worker's last output. Either way a fresh worker takes
its place and the run goes on.

Workers are forked from a fork server that imported the interpreter once
(`multiprocessing`'s "forkserver" start method with a preload), so a
replacement is ready in milliseconds, and the runner's own process never
loads MLIR.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import time
from collections import deque
from multiprocessing.connection import wait
from typing import Callable, Iterable

from pjrt_ref.conformance import worker as worker_module

_CONTEXT = None
# Modules every worker imports before its first case: the interpreter, and
# what a layer above hands down (`preload_also`).
_PRELOAD = [__package__ + ".preload"]


def preload_also(module: str) -> None:
    """Have every worker import `module` before its first case.

    This is how a layer above this one equips the workers without the
    conformance runner importing it: `pjrt-ref conformance` hands down
    `pjrt_ref.debug`, which plugs PJRT_REF_PROFILE's recorder and
    PJRT_REF_DIFF's differ into the interpreter. Call it before the first
    pool starts (the fork server keeps what it imported at its start).
    """
    if module not in _PRELOAD:
        _PRELOAD.append(module)


def _context():
    """A forkserver context whose server has the interpreter imported."""
    global _CONTEXT
    if _CONTEXT is None:
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        _CONTEXT = multiprocessing.get_context(method)
        if method == "forkserver":
            _CONTEXT.set_forkserver_preload(list(_PRELOAD))
    return _CONTEXT


class _Worker:
    def __init__(self, number: int, directory: str, run: Callable):
        self.output_path = os.path.join(directory, f"worker{number}.out")
        parent_end, child_end = _context().Pipe()
        self.connection = parent_end
        self.process = _context().Process(target=worker_module.serve,
                                          args=(child_end, self.output_path, run, tuple(_PRELOAD[1:])),
                                          daemon=True)
        self.process.start()
        child_end.close()
        self.task = None  # (key, task) while busy
        self.started = 0.0

    def send(self, key, task) -> None:
        self.task = (key, task)
        self.started = time.monotonic()
        try:
            self.connection.send(task)
        except (OSError, ValueError):
            pass  # the worker died; the pool notices through its sentinel

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.connection.close()

    def stop(self) -> None:
        try:
            self.connection.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(2)
        self.connection.close()

    def last_output(self, limit: int = 600) -> str:
        try:
            with open(self.output_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - limit))
                return handle.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""


def _give_work(w: _Worker, pending: deque) -> None:
    if pending:
        w.send(*pending.popleft())


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class WorkerPool:
    """Run tasks on `jobs` workers; see the module docstring.

    `run(task) -> (status, message, seconds)` is what a worker does with a
    task (a module-level function, as workers import it by name).
    """

    def __init__(self, jobs: int, timeout: float | None, run: Callable = worker_module.run_case):
        self.jobs = max(1, jobs)
        self.timeout = timeout
        self.run_task = run
        self._directory = tempfile.TemporaryDirectory(prefix="pjrt-ref-conformance-")
        self._started = 0

    def _new_worker(self) -> _Worker:
        self._started += 1
        return _Worker(self._started, self._directory.name, self.run_task)

    def run(self, tasks: Iterable[tuple], on_result: Callable[[object, tuple], None]) -> None:
        """Run each (key, task); call `on_result(key, (status, message, seconds))`."""
        pending = deque(tasks)
        workers = [self._new_worker() for _ in range(min(self.jobs, len(pending)))]
        try:
            self._loop(pending, workers, on_result)
        finally:
            for w in workers:
                if w.task is None:
                    w.stop()
                else:
                    w.kill()
            self._directory.cleanup()

    def _loop(self, pending: deque, workers: list, on_result) -> None:
        for w in workers:
            _give_work(w, pending)
        while any(w.task is not None for w in workers):
            busy = [w for w in workers if w.task is not None]
            ready = wait([w.connection for w in busy] + [w.process.sentinel for w in busy],
                         timeout=self._wait_time(busy))
            for index, w in enumerate(workers):
                if w.task is None:
                    continue
                result, lost = self._outcome(w, ready)
                if result is None:
                    continue  # still working
                key, _ = w.task
                w.task = None
                on_result(key, result)
                if lost:
                    w.kill()
                    workers[index] = w = self._new_worker()
                _give_work(w, pending)

    def _outcome(self, w: _Worker, ready: list) -> tuple[tuple | None, bool]:
        """(the busy worker's result or None if it is still working,
        whether the worker is lost: dead, or to be killed for a timeout)."""
        now = time.monotonic()
        if w.connection in ready:
            try:
                return w.connection.recv(), False
            except (EOFError, OSError):
                pass  # it died; the sentinel tells
        if w.process.sentinel in ready or not w.process.is_alive():
            w.process.join(1)
            message = f"worker process died ({_describe_exit(w.process.exitcode)})"
            output = w.last_output()
            if output:
                message += f"; its last output: {output}"
            return ("error", message, now - w.started), True
        if self.timeout is not None and now - w.started > self.timeout:
            return ("timeout", f"no result after {self.timeout:g} s", now - w.started), True
        return None, False

    def _wait_time(self, busy: list) -> float | None:
        if self.timeout is None:
            return None
        now = time.monotonic()
        return max(0.0, min(w.started + self.timeout - now for w in busy)) + 0.01
