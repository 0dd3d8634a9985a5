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
shared out between the calling thread and a small pool of our own threads,
each calling single-threaded BLAS on its block. That is done only where the
blocks give the same bits as one BLAS call (checked once per shape and
layout, `blocks_are_exact`: BLAS's kernels at a block's edge may sum some
shapes in another order), so results never depend on the thread setting
or the load; otherwise the product is one BLAS call.

The pool is written in C (gemm_pool.c, built by cffi at install time): the
caller hands it OpenBLAS's gemm function and the operands' addresses, and
the whole split product runs without the GIL. Its threads spin for a short
while after a product before they sleep, so the next product finds them
awake: on this virtual machine a sleeping thread's CPU is halted, and
waking it took 100+ us, as long as half a 256x256 product. (Our Python
threads, below, did just that, then needed the GIL to start and again to
report.) Measured on the 2-vCPU benchmark machine, 256x256 f32, medians
of interleaved runs: one BLAS call 325-335 us; split on Python threads
285 us; split on the C pool 173-180 us (its workers kept awake by the
spin), 240-290 us with no spin (PJRT_REF_POOL_SPIN_US=0: woken each
time); through JAX (W2) 440-460 us unsplit or on Python threads, 310-330
us on the C pool; W4 7.3-8.2 ms unsplit, 6.0-6.5 ms on Python threads,
5.5-6.1 ms on the C pool. If the C module is missing (a build without a
compiler) or numpy's OpenBLAS has no ILP64 gemm we can find, the blocks
run on Python threads instead (`run_shared`, which fused elementwise loops
use too: threads.py).

Helpers are used only for CPUs that are idle at that moment (`idle_cpus`,
from /proc/loadavg, not counting our own spinning threads, which would
yield to real work). A helper on a CPU that another process is using
shares the core with it, and the caller waits for the helper's block:
measured with the Python threads, a split W2 product then took 0.40 ms
instead of 0.33 ms unsplit. Splitting whatever the load, as XLA's thread
pool does, would make the busy case the slow one; with the check, a
product next to a busy-looping process is one call (measured: 345-350 us
against 335 us for np.matmul itself). The caller takes every block no
helper has claimed, so a helper that is slow to start costs nothing.

    PJRT_REF_MATMUL_THREADS=n  threads per product (default: the CPUs this
                               process may run on; 1: never split). Only
                               when OpenBLAS runs on 1 thread by our setting.
    PJRT_REF_POOL_SPIN_US=n    how long the C pool's threads spin for the
                               next product before sleeping (default
                               DEFAULT_SPIN_US; 0: sleep at once)
    PJRT_REF_GEMM_POOL=0       split products over the Python threads
                               instead of the C pool (for comparison)

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


def _openblas_libraries() -> list[ctypes.CDLL]:
    """numpy's bundled OpenBLAS libraries that load (wheels put them in
    numpy.libs/), to look up functions in with getattr."""
    import numpy

    root = os.path.dirname(os.path.dirname(numpy.__file__))
    libraries = []
    for path in glob.glob(os.path.join(root, "numpy.libs", "*openblas*.so*")):
        try:
            libraries.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libraries


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
    for library in _openblas_libraries():
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


# CPUs of the machine (what /proc/loadavg's runnable count is out of): read
# once, os.cpu_count() took 14 us per call here.
_CPUS = os.cpu_count() or 1


def idle_cpus() -> int:
    """CPUs with nothing to run right now: configured CPUs minus the tasks
    the kernel has runnable (the 4th field of /proc/loadavg, this thread
    included), not counting the C pool's threads that are only spinning
    for the next product. 0 when unknown. Products and fused loops
    (threads.py) wake no more helpers than this."""
    global _LOADAVG_FD
    try:
        if _LOADAVG_FD is None:
            _LOADAVG_FD = os.open("/proc/loadavg", os.O_RDONLY)
        running = int(os.pread(_LOADAVG_FD, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    if _POOL is not None:
        running -= _POOL.lib.gemm_pool_spinning()
    return max(0, _CPUS - running)


def matmul(a: np.ndarray, b: np.ndarray, threads: int | None = None) -> np.ndarray:
    """`a @ b` for 2-d float arrays (any strides), always with the bits of
    one BLAS call. A big product whose row blocks (`row_blocks`) give those
    same bits (`blocks_are_exact`) is computed block by block when CPUs are
    idle: by this thread and the C pool's threads (or Python helper
    threads, see the module docstring)."""
    rows, inner = a.shape
    columns = b.shape[1]
    threads = matmul_threads() if threads is None else threads
    bounds = row_blocks(rows, inner, columns, threads)
    helpers = min(len(bounds) - 2, idle_cpus()) if len(bounds) > 2 else 0
    if helpers == 0:
        return np.matmul(a, b)
    call = _gemm_call(a, b) if len(bounds) - 1 <= MAX_POOL_BLOCKS else None
    if not _blocks_exact(a, b, bounds, call):
        return np.matmul(a, b)
    if call is None:
        return _matmul_on_python_threads(a, b, bounds, helpers)
    out = np.empty((rows, columns), a.dtype)
    if _pool_multiply(call, out, len(bounds) - 1, helpers):
        return out
    return np.matmul(a, b)   # another thread's product has the pool


def _matmul_on_python_threads(a: np.ndarray, b: np.ndarray, bounds: list[int],
                              helpers: int) -> np.ndarray:
    """The row blocks as np.matmul calls shared by this thread and up to
    `helpers` Python pool threads (`run_shared`)."""
    out = np.empty((a.shape[0], b.shape[1]), np.result_type(a.dtype, b.dtype))

    def block(lo: int, hi: int) -> Callable[[], None]:
        def job() -> None:
            with np.errstate(all="ignore"):  # numpy's error state is per thread
                np.matmul(a[lo:hi], b, out=out[lo:hi])
        return job

    run_shared([block(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])], helpers)
    return out


# --- The C pool (gemm_pool.c) -------------------------------------------

# How long the C pool's threads spin for the next product before sleeping.
# Long enough to bridge the gap between back-to-back calls (W2 through JAX)
# and most gaps between the products of a training step (W4), short enough
# that an idle plugin gives its CPU back at once. Measured on W4's products
# inside the step: no spin 5-8% slower than 300 us, 1-3 ms only 3-5%
# faster (at the cost of a core spinning after every product).
DEFAULT_SPIN_US = 300
# CBLAS's transpose flags (cblas.h).
_NO_TRANS, _TRANS = 111, 112


class _Pool:
    """The loaded C module and OpenBLAS's ILP64 gemm functions (addresses),
    by dtype."""

    def __init__(self, lib, gemms: dict):
        self.lib = lib
        self.gemms = gemms


# What blas.py uses of the C module (gemm_pool.h).
_POOL_NAMES = ("gemm_pool_multiply", "gemm_pool_spinning", "gemm_pool_workers",
               "GEMM_POOL_MAX_BLOCKS")


def _load_pool() -> "_Pool | None":
    """The C pool, or None: module not built, built from an older
    gemm_pool.h (an editable install after a pull: `pip install -e .`
    rebuilds it), or no ILP64 cblas gemm in numpy's OpenBLAS. Only the
    `64_`-suffixed symbols are taken: their integer arguments are 64-bit,
    as gemm_pool.h declares them."""
    try:
        from . import _gemm_pool
    except ImportError:
        return None
    if not all(hasattr(_gemm_pool.lib, name) for name in _POOL_NAMES):
        return None
    for library in _openblas_libraries():
        gemms = {}
        for dtype, names in ((np.dtype(np.float32), ("scipy_cblas_sgemm64_", "cblas_sgemm64_")),
                             (np.dtype(np.float64), ("scipy_cblas_dgemm64_", "cblas_dgemm64_"))):
            for name in names:
                function = getattr(library, name, None)
                if function is not None:
                    gemms[dtype] = ctypes.cast(function, ctypes.c_void_p).value
                    break
        if len(gemms) == 2:
            return _Pool(_gemm_pool.lib, gemms)
    return None


_POOL = _load_pool()
# Most row blocks the C pool takes in one product (gemm_pool.h).
MAX_POOL_BLOCKS = _POOL.lib.GEMM_POOL_MAX_BLOCKS if _POOL is not None else 0


def _pool_enabled() -> bool:
    return _POOL is not None and os.environ.get("PJRT_REF_GEMM_POOL", "1").strip() != "0"


def _spin_ns() -> int:
    setting = os.environ.get("PJRT_REF_POOL_SPIN_US", "").strip()
    try:
        return max(0, int(setting)) * 1000 if setting else DEFAULT_SPIN_US * 1000
    except ValueError:
        return DEFAULT_SPIN_US * 1000


def _operand(x: np.ndarray, rows: int, columns: int) -> tuple[int, int, int] | None:
    """(address, CBLAS transpose flag, leading dimension) describing the
    row-major `rows` x `columns` matrix `x` the way a row-major CBLAS call
    takes it, as numpy's own matmul passes it: rows contiguous (NoTrans) or
    columns contiguous (a transposed view: Trans). None when BLAS cannot
    read it in place (numpy would copy it first) or the address is not
    aligned to the element size."""
    size = x.itemsize
    address = x.__array_interface__["data"][0]
    row_stride, column_stride = x.strides
    if address % size:
        return None
    if column_stride == size and row_stride % size == 0 and row_stride // size >= max(1, columns):
        return address, _NO_TRANS, row_stride // size
    if row_stride == size and column_stride % size == 0 and column_stride // size >= max(1, rows):
        return address, _TRANS, column_stride // size
    return None


def _gemm_call(a: np.ndarray, b: np.ndarray) -> tuple | None:
    """gemm_pool_multiply's arguments up to ldb for `a @ b`, or None when
    the C pool cannot compute it: pool off or missing, other dtypes, byte
    order or layouts, or `a` and `b` the same memory (numpy then may use
    syrk, whose bits gemm blocks need not match)."""
    if not _pool_enabled() or a.dtype != b.dtype or a.dtype not in _POOL.gemms:
        return None
    if not a.dtype.isnative:
        return None
    rows, inner = a.shape
    columns = b.shape[1]
    lhs = _operand(a, rows, inner)
    rhs = _operand(b, inner, columns)
    if lhs is None or rhs is None or lhs[0] == rhs[0]:
        return None
    return (_POOL.gemms[a.dtype], int(a.dtype == np.float64), lhs[1], rhs[1], rows, columns,
            inner, lhs[0], lhs[2], rhs[0], rhs[2])


def _pool_multiply(call: tuple, out: np.ndarray, blocks: int, helpers: int) -> bool:
    """Run `call` (`_gemm_call`) into the C-contiguous `out` in `blocks` row
    blocks with up to `helpers` pool threads (0: all on this thread).
    False if another thread's product has the pool (nothing done)."""
    gemm, is_double, trans_a, trans_b, rows, columns, inner, a, lda, b, ldb = call
    return bool(_POOL.lib.gemm_pool_multiply(
        gemm, is_double, trans_a, trans_b, rows, columns, inner, a, lda, b, ldb,
        out.__array_interface__["data"][0], columns, blocks, helpers, _spin_ns()))


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
    (edge-of-block kernels sum some shapes in another order). The blocks
    are computed by the path that will compute the real ones: the C pool's
    code (all on this thread) or np.matmul per block."""
    return _blocks_exact(a, b, bounds, _gemm_call(a, b))


def _blocks_exact(a: np.ndarray, b: np.ndarray, bounds: list[int], call: tuple | None) -> bool:
    """blocks_are_exact, given `_gemm_call(a, b)` (None: the Python path)."""
    if call is not None:   # dtype, transpose flags and sizes say it all
        key = (call[1:7], tuple(bounds))
    else:
        key = (a.dtype, b.dtype, a.shape, b.shape, _layout(a), _layout(b), tuple(bounds))
    exact = _EXACT.get(key)
    if exact is None:
        rng = np.random.default_rng(0)
        probe_a, probe_b = (_random_like(x, rng) for x in (a, b))
        with np.errstate(all="ignore"):
            whole = np.matmul(probe_a, probe_b)
            blocks = _probe_blocks(probe_a, probe_b, bounds, call is not None)
        exact = _EXACT[key] = blocks is not None and bool(np.array_equal(whole, blocks))
    return exact


def _probe_blocks(a: np.ndarray, b: np.ndarray, bounds: list[int], in_c: bool):
    """`a @ b` computed in the row blocks `bounds` on this thread, by the C
    pool's code (in_c) or np.matmul per block."""
    if not in_c:
        return np.concatenate([np.matmul(a[lo:hi], b) for lo, hi in zip(bounds[:-1], bounds[1:])])
    call = _gemm_call(a, b)
    if call is None:   # cannot happen: the probe has the real operands' layouts
        return None
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    return out if _pool_multiply(call, out, len(bounds) - 1, helpers=0) else None


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
