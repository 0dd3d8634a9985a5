"""The conformance runner's worker pool: a case that aborts, crashes or hangs
costs only itself; the workers that replace the lost ones finish the run."""
from __future__ import annotations

import os
import signal
import time

from pjrt_ref.conformance.pool import WorkerPool
from pjrt_ref.conformance.runner import run_cases


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


# What the fork server (conformance/preload.py) sets to 1 unless the user chose.
_THREAD_COUNTS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def thread_counts(task):
    """A worker's task function: the thread counts its numeric libraries read."""
    return "pass", " ".join(os.environ.get(name, "") for name in _THREAD_COUNTS), 0.0


def test_workers_compute_on_one_thread_without_the_runner_writing_its_environment(monkeypatch):
    expected = " ".join(os.environ.get(name, "1") for name in _THREAD_COUNTS)
    results = {}
    WorkerPool(1, 30.0, thread_counts).run([(0, "counts")], lambda key, result: results.__setitem__(key, result))
    assert results[0][:2] == ("pass", expected)

    for name in _THREAD_COUNTS:
        monkeypatch.delenv(name, raising=False)
    assert run_cases([], jobs=1, timeout=None) == []
    assert not [name for name in _THREAD_COUNTS if name in os.environ]
