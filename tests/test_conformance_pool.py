"""The conformance runner's worker pool: a case that aborts, crashes or hangs
costs only itself; the workers that replace the lost ones finish the run."""
from __future__ import annotations

import os
import signal
import time

from pjrt_ref.conformance.pool import WorkerPool


def misbehave(task):
    """A worker's task function (module level: workers import it by name)."""
    if task == "abort":
        print("LLVM ERROR: last words before abort", flush=True)
        os.abort()
    if task == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == "hang":
        time.sleep(60)
    return "pass", f"{task} in {os.getpid()}", 0.0


def _run(tasks, jobs=2, timeout=3.0):
    results = {}
    WorkerPool(jobs, timeout, misbehave).run(list(enumerate(tasks)),
                                            lambda key, result: results.__setitem__(key, result))
    return [results[i] for i in range(len(tasks))]


def test_crashes_and_hangs_are_reported_and_the_run_goes_on():
    tasks = ["ok", "abort", "ok", "segfault", "hang", "ok", "ok"]
    results = _run(tasks)
    statuses = [r[0] for r in results]
    assert statuses == ["pass", "error", "pass", "error", "timeout", "pass", "pass"]
    assert "SIGABRT" in results[1][1] and "LLVM ERROR: last words" in results[1][1]
    assert "SIGSEGV" in results[3][1]
    assert "3 s" in results[4][1]


def test_workers_are_reused_between_cases():
    results = _run(["ok"] * 6, jobs=2)
    pids = {r[1].split(" in ")[1] for r in results}
    assert len(pids) <= 2


def test_single_worker_survives_several_deaths():
    results = _run(["abort", "abort", "ok"], jobs=1)
    assert [r[0] for r in results] == ["error", "error", "pass"]
