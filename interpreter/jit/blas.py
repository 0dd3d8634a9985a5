"""How many threads numpy's BLAS (OpenBLAS) may use, and how big matrix
products still use every core.

pjrt-ref runs inside a host process (JAX) that has thread pools of its own,
often on few cores. OpenBLAS's worker threads busy-wait for each other; when
one is descheduled the others spin, and a 128x784 @ 784x512 product that
takes 1 ms on one thread took 46 ms on two threads of this two-core machine
under load. So by default the interpreter asks OpenBLAS for one thread.

    PJRT_REF_BLAS_THREADS=n   use n threads (0: leave OpenBLAS alone)

Nothing changes if the user already chose (OPENBLAS_NUM_THREADS or
OMP_NUM_THREADS set). The setting is process-wide: numpy's own matmuls in
the host process use it too.

Large products use every core another way (`matmul`): the rows of the
result are cut into one block per configured thread, and the blocks are
handed out to the calling thread and a small pool of our own threads, each
calling single-threaded BLAS on its block. That is done only where the
blocks give the same bits as one BLAS call (checked once per shape and
layout, `blocks_are_exact`: BLAS's kernels at a block's edge may sum some
shapes in another order), so results never depend on the thread setting
or the load; otherwise the product is one BLAS call.

Helpers are woken only for CPUs that are idle at that moment (`idle_cpus`,
from /proc/loadavg). Measured on the 2-core benchmark machine (W2, 256x256
f32 through JAX): with the other core idle a split product takes 0.24 ms
instead of 0.33 ms; with another process running there, 0.40 ms instead of
0.33 ms, because the helper then shares a core with that process and the
caller waits for the helper's block. Splitting whatever the load, as XLA's
thread pool does, would make the busy case the slow one. Our threads sleep
(no spinning) when idle, and the caller takes every block no helper has
claimed, so a helper that is slow to start costs nothing.

    PJRT_REF_MATMUL_THREADS=n  threads per product (default: the CPUs this
                               process may run on; 1: never split). Only
                               when OpenBLAS runs on 1 thread by our setting.

Why the OpenBLAS setting is applied before a program is loaded (the
plugin's `Executable` calls `limit_blas_threads` first): OpenBLAS stops its worker
threads before every fork (a pthread_atfork handler; the loader forks to
check a program's bytecode) and starts them again the next time it is
asked for threads, `openblas_set_num_threads` included. A freshly started
OpenBLAS worker busy-waits for work for about 0.1 s, a whole core, before
it sleeps. Set once before the first fork, OpenBLAS never restarts its
workers (one-thread products do not need them). (That spinning worker,
restarted by the setting during every first compile, was the runnable
thread that made `idle_cpus` say "none idle" for the first ~0.1 s of calls,
which is all of a short benchmark.)
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading
from typing import Callable

import numpy as np

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_DONE = False
# The OpenBLAS thread count limit_blas_threads set (None: not set by us).
_BLAS_THREADS: int | None = None


def _openblas_libraries() -> list[str]:
    import numpy

    root = os.path.dirname(os.path.dirname(numpy.__file__))
    return glob.glob(os.path.join(root, "numpy.libs", "*openblas*.so*"))


def limit_blas_threads() -> int | None:
    """Apply PJRT_REF_BLAS_THREADS once; the thread count set, or None."""
    global _DONE, _BLAS_THREADS
    if _DONE:
        return None
    _DONE = True
    if "OPENBLAS_NUM_THREADS" in os.environ or "OMP_NUM_THREADS" in os.environ:
        return None
    threads = int(os.environ.get("PJRT_REF_BLAS_THREADS", "1"))
    if threads <= 0:
        return None
    for path in _openblas_libraries():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _SETTERS:
            setter = getattr(library, name, None)
            if setter is not None:
                setter(ctypes.c_int(threads))
                _BLAS_THREADS = threads
                return threads
    return None


# Products with fewer multiply-adds than this run on the calling thread as
# one BLAS call: waking a thread costs ~10-50 us, about 2**21 multiply-adds.
SPLIT_MIN_MULTIPLY_ADDS = 1 << 22
# Blocks have at least this many rows: narrower ones make BLAS's kernels slow.
MIN_BLOCK_ROWS = 64

_LOADAVG_FD: int | None = None
_THREADS: tuple[str, int] | None = None   # (PJRT_REF_MATMUL_THREADS, threads)


def matmul_threads() -> int:
    """Threads one product may use (PJRT_REF_MATMUL_THREADS, default the CPUs
    this process may run on). 1 unless OpenBLAS runs single-threaded by our
    setting: threads of ours each running a threaded BLAS would fight."""
    if _BLAS_THREADS != 1:
        return 1
    global _THREADS
    setting = os.environ.get("PJRT_REF_MATMUL_THREADS", "").strip()
    if _THREADS is None or _THREADS[0] != setting:   # read once per setting
        _THREADS = (setting, _threads_for(setting))
    return _THREADS[1]


def _threads_for(setting: str) -> int:
    if setting:
        try:
            return max(1, int(setting))
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def row_blocks(rows: int, inner: int, columns: int, threads: int) -> list[int]:
    """Where the result's rows would be cut: one block per thread, at least
    MIN_BLOCK_ROWS rows each, for products big enough to pay a thread's
    wake-up; [0, rows] means one block."""
    blocks = min(threads, rows // MIN_BLOCK_ROWS)
    if blocks < 2 or rows * inner * columns < SPLIT_MIN_MULTIPLY_ADDS:
        return [0, rows]
    return [rows * k // blocks for k in range(blocks + 1)]


def idle_cpus() -> int:
    """CPUs with nothing to run right now: configured CPUs minus the tasks
    the kernel has runnable (the 4th field of /proc/loadavg, this thread
    included). 0 when unknown. Products and fused loops (threads.py) wake
    no more helpers than this."""
    global _LOADAVG_FD
    try:
        if _LOADAVG_FD is None:
            _LOADAVG_FD = os.open("/proc/loadavg", os.O_RDONLY)
        running = int(os.pread(_LOADAVG_FD, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, (os.cpu_count() or 1) - running)


def matmul(a: np.ndarray, b: np.ndarray, threads: int | None = None) -> np.ndarray:
    """`a @ b` for 2-d float arrays (any strides), always with the bits of
    one BLAS call. A big product whose row blocks (`row_blocks`) give those
    same bits (`blocks_are_exact`) is computed block by block when CPUs are
    idle: by this thread and helper threads."""
    rows, inner = a.shape
    columns = b.shape[1]
    threads = matmul_threads() if threads is None else threads
    bounds = row_blocks(rows, inner, columns, threads)
    helpers = min(len(bounds) - 2, idle_cpus()) if len(bounds) > 2 else 0
    if helpers == 0 or not blocks_are_exact(a, b, bounds):
        return np.matmul(a, b)
    out = np.empty((rows, columns), np.result_type(a.dtype, b.dtype))

    def block(lo: int, hi: int) -> Callable[[], None]:
        def job() -> None:
            with np.errstate(all="ignore"):  # numpy's error state is per thread
                np.matmul(a[lo:hi], b, out=out[lo:hi])
        return job

    jobs = [block(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    run_shared(jobs, helpers)
    return out


_EXACT: dict = {}


def _layout(x: np.ndarray) -> str:
    """How BLAS reads a 2-d operand: rows contiguous, columns contiguous
    (a transposed view), or neither (numpy copies it first)."""
    if x.strides[1] == x.itemsize:
        return "rows"
    if x.strides[0] == x.itemsize:
        return "columns"
    return "copied"


def blocks_are_exact(a: np.ndarray, b: np.ndarray, bounds: list[int]) -> bool:
    """Whether computing the rows of `a @ b` in the blocks `bounds` gives
    the same bits as one BLAS call. BLAS's sequence of floating-point
    operations depends on the shapes, types and layouts only, never on the
    values, so one check on random operands of that shape and layout
    answers for all operands; the answer is kept per shape and layout
    (edge-of-block kernels sum some shapes in another order)."""
    key = (a.dtype, b.dtype, a.shape, b.shape, _layout(a), _layout(b), tuple(bounds))
    exact = _EXACT.get(key)
    if exact is None:
        rng = np.random.default_rng(0)
        probe_a, probe_b = (_random_like(x, rng) for x in (a, b))
        with np.errstate(all="ignore"):
            whole = np.matmul(probe_a, probe_b)
            blocks = np.concatenate([np.matmul(probe_a[lo:hi], probe_b)
                                     for lo, hi in zip(bounds[:-1], bounds[1:])])
        exact = _EXACT[key] = bool(np.array_equal(whole, blocks))
    return exact


def _random_like(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    values = rng.standard_normal(x.shape).astype(x.dtype)
    return np.asfortranarray(values) if _layout(x) == "columns" else values


class _SharedJobs:
    """Jobs claimed one at a time by whichever thread asks first. `done`
    is held until the last job has finished (a plain lock: cheaper to make
    and to wait on than an Event, which matters at ~0.2 ms per product)."""

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
        self.done.acquire()


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
