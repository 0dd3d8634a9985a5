"""The product engine: how a process computes its big matrix products,
holding together the parts the other modules give it (`ProductEngine`).

A product of more than one block (blocks.py) on single-threaded OpenBLAS
(openblas_threads.py) is computed as those blocks, each one gemm call, by
this thread and by helpers. Helpers: the C pool (gemm_pool.c, built by
cffi at install time; it runs the whole product without the GIL, and its
threads spin briefly between products), or Python threads
(helper_threads.py, also used by fused loops) when the C module or numpy's
ILP64 gemm is missing. Helpers join only for CPUs idle at that moment
(`IdleCpus`): a helper on a busy CPU would keep the caller waiting for its
block. The caller takes every block no helper has claimed, so a helper slow
to start costs nothing.

product_strategy.py times, once per shape and machine, whether sharing
pays, whether smaller blocks of the same bits (`fine_blocks`, for
OpenBLAS's small-product kernels) are quicker, and whether OpenBLAS's own
threads beat the blocks; product_probes.py runs that timing and the checks
of which ways give the same bits. `matmul_add` adds a product into an
array the caller owns (a loop's gradient accumulator), inside gemm where a
probe finds the same bits. Measurements: benchmarks/README.md ("Products")
and docs/performance-design.md ("Design notes moved from the code"). The C
pool's design: docs/performance-design.md ("The C product pool").

A process has one engine, built at its first product (blas.py); tests
build their own with a part replaced (`ProductEngine`'s arguments).

    PJRT_REF_MATMUL_THREADS=n  threads per product (default: the CPUs this
                               process may run on; 1: this thread computes
                               every block)
"""
from __future__ import annotations

import os
from typing import Callable

import numpy as np

from pjrt_ref import settings
from pjrt_ref.interpreter.native import product_strategy
from pjrt_ref.interpreter.native.blocks import ROW_BLOCKS, Blocks, fine_blocks, product_blocks
from pjrt_ref.interpreter.native.gemm_pool import GemmPool, address
from pjrt_ref.interpreter.native.helper_threads import run_shared
from pjrt_ref.interpreter.native.openblas_threads import OpenBlasThreads
from pjrt_ref.interpreter.native.product_probes import ExactnessProbes, ShapeStrategies

_THREADS: tuple[int | None, int] | None = None   # (PJRT_REF_MATMUL_THREADS, threads)


def matmul_threads() -> int:
    """Threads one product may use (PJRT_REF_MATMUL_THREADS, default the
    CPUs this process may run on)."""
    global _THREADS
    setting = settings.get("PJRT_REF_MATMUL_THREADS")
    if _THREADS is None or _THREADS[0] != setting:   # usable_cpus() once per setting
        _THREADS = (setting, _threads_for(setting))
    return _THREADS[1]


def _threads_for(setting: int | None) -> int:
    """PJRT_REF_MATMUL_THREADS's count (0 counts as 1), or the usable CPUs when unset."""
    return product_strategy.usable_cpus() if setting is None else max(1, setting)


# CPUs of the machine (what /proc/loadavg's runnable count is out of): read
# once, not per product (os.cpu_count() asks the system each time).
_CPUS = os.cpu_count() or 1
# /proc/loadavg, opened at the first read and kept open: one pread a read.
_LOADAVG_FD: int | None = None


def runnable_tasks() -> int | None:
    """Tasks the kernel has runnable right now, this thread included (the
    4th field of /proc/loadavg); None when unknown."""
    global _LOADAVG_FD
    try:
        if _LOADAVG_FD is None:
            _LOADAVG_FD = os.open("/proc/loadavg", os.O_RDONLY)
        return int(os.pread(_LOADAVG_FD, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


class IdleCpus:
    """CPUs with nothing to run right now: configured CPUs minus the tasks
    the kernel has runnable (`runnable_tasks`), not counting the C pool's
    threads that are only spinning for the next product. 0 when unknown.
    Products and fused loops (threads.py) wake no more helpers than this."""

    def __init__(self, pool: GemmPool | None, cpus: int = _CPUS,
                 runnable: Callable[[], int | None] = runnable_tasks):
        self.pool = pool
        self.cpus = cpus
        self.runnable = runnable

    def __call__(self) -> int:
        running = self.runnable()
        if running is None:
            return 0
        if self.pool is not None:
            running -= self.pool.spinning()
        return max(0, self.cpus - running)


class ProductEngine:
    """Computes matrix products as the module docstring says, from its parts:

        openblas        OpenBLAS's thread count (openblas_threads.py): blocks
                        only while it is one
        pool            the C pool (gemm_pool.py), or None: Python threads
        idle_cpus       () -> CPUs idle now (default `IdleCpus(pool)`)
        python_threads  (jobs, helpers) -> None: runs block jobs on this
                        thread and up to `helpers` helper threads, where
                        the C pool does not (helper_threads.run_shared)
        strategies      how each shape runs: `for_product(a, b, blocks,
                        call)` gives its product_strategy.Strategy (default
                        product_probes.ShapeStrategies: timed)
        exactness       which ways give the same bits (default
                        product_probes.ExactnessProbes: probed)

    Every part is a public attribute; a test builds an engine with the part
    it fakes, or sets `strategies` or `exactness` on one it built."""

    def __init__(self, openblas: OpenBlasThreads, pool: GemmPool | None, *,
                 idle_cpus: Callable[[], int] | None = None,
                 python_threads: Callable[[list, int], None] = run_shared,
                 strategies: ShapeStrategies | None = None,
                 exactness: ExactnessProbes | None = None):
        self.openblas = openblas
        self.pool = pool
        self.idle_cpus = idle_cpus if idle_cpus is not None else IdleCpus(pool)
        self.python_threads = python_threads
        self.strategies = strategies if strategies is not None else ShapeStrategies(self)
        self.exactness = exactness if exactness is not None else ExactnessProbes(self)

    def matmul(self, a: np.ndarray, b: np.ndarray, threads: int | None = None) -> np.ndarray:
        """`a @ b` for 2-d arrays (any strides), with the bits of the blocks
        `product_blocks` cuts it into, computed by this thread and by helpers
        on idle CPUs (module docstring). One np.matmul call when OpenBLAS does
        not run on one thread (or is not found), for a product of one block, for
        operands that are not both native f32 or both native f64, for `a @ a.T`
        on one buffer (numpy then uses syrk), and where the measured strategy
        is OpenBLAS's own threads."""
        if self.openblas.threads != 1:
            return np.matmul(a, b)
        blocks = product_blocks(a.shape[0], a.shape[1], b.shape[1])
        # One block first: small products skip _blockable's address reads (~3 µs).
        if blocks.count == 1 or not _blockable(a, b):
            return np.matmul(a, b)
        call = self.gemm_call(a, b)
        strategy = self.strategies.for_product(a, b, blocks, call)
        if strategy.openblas_threads > 1:
            return self.openblas.threaded_matmul(a, b, strategy.openblas_threads)
        if strategy.fine:   # the blocks' bits (product_strategy.py), quicker
            blocks = fine_blocks(a.shape[0], a.shape[1], b.shape[1])
            return self.compute_blocks(a, b, blocks, call, self._helpers(blocks, strategy, threads))
        helpers = self._helpers(blocks, strategy, threads)
        if helpers == 0 and self.exactness.blocks_exact(a, b, blocks, call):
            return np.matmul(a, b)
        return self.compute_blocks(a, b, blocks, call, helpers)

    def _helpers(self, blocks: Blocks, strategy: product_strategy.Strategy,
                 threads: int | None) -> int:
        """Helper threads for one product: none unless its strategy splits,
        and no more than its blocks, the thread limit and the idle CPUs allow."""
        if not strategy.split:
            return 0
        limit = matmul_threads() if threads is None else threads
        return max(0, min(blocks.count - 1, limit - 1, self.idle_cpus()))

    def matmul_add(self, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                   threads: int | None = None) -> np.ndarray:
        """`c + a @ b` written into `c` and returned, with the bits of
        `np.add(c, matmul(a, b))`: a gradient accumulated over a loop's steps
        (optimiser/in_place.py). Where the C pool computes the product's blocks and
        `accumulate_is_exact` found that adding each block's product inside
        gemm (beta = 1) gives those bits, one pass over `c` per block, with no
        new array; otherwise the product, then the add into `c`.
        `c` is 2-d, a @ b's shape and dtype, writeable; it may be any array
        (the fallback handles layouts and overlap the gemm cannot)."""
        call = self._accumulate_call(a, b, c)
        if call is not None:
            blocks = product_blocks(a.shape[0], a.shape[1], b.shape[1])
            strategy = self.strategies.for_product(a, b, blocks, call)
            if strategy.fine:
                blocks = fine_blocks(a.shape[0], a.shape[1], b.shape[1])
            if strategy.openblas_threads <= 1 and self.exactness.accumulate_exact(a, b, blocks, call):
                self._on_pool(call, c, blocks, self._helpers(blocks, strategy, threads), accumulate=True)
                return c
        return np.add(c, self.matmul(a, b, threads), out=c)

    def _accumulate_call(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple | None:
        """`gemm_call(a, b)` when the pool can also add into `c` in place: C
        pool products (one OpenBLAS thread) of more than one block (a one-block
        product is one np.matmul call, which may use gemv, far quicker than
        gemm for a matrix-vector product), `c` C-contiguous, aligned,
        writeable, of the product's dtype and not overlapping an operand."""
        if self.openblas.threads != 1 or c.dtype != a.dtype or self.pool is None:
            return None
        blocks = product_blocks(a.shape[0], a.shape[1], b.shape[1])
        if not 1 < blocks.count <= self.pool.max_blocks or not _blockable(a, b):
            return None
        flags = c.flags
        if not (flags.c_contiguous and flags.aligned and flags.writeable):
            return None
        if np.may_share_memory(c, a) or np.may_share_memory(c, b):
            return None
        return self.gemm_call(a, b)

    def gemm_call(self, a: np.ndarray, b: np.ndarray) -> tuple | None:
        """The C pool's call for `a @ b` (`GemmPool.call`), or None: no
        pool, or one that cannot compute it."""
        return None if self.pool is None else self.pool.call(a, b)

    def compute_blocks(self, a: np.ndarray, b: np.ndarray, blocks: Blocks, call: tuple | None,
                       helpers: int) -> np.ndarray:
        """`a @ b` as `blocks`, each one gemm call, shared by this thread and up
        to `helpers` helpers: the C pool's when `call` (`gemm_call(a, b)`) is
        given, else Python threads calling np.matmul per block."""
        out = np.empty((a.shape[0], b.shape[1]), np.result_type(a.dtype, b.dtype))
        if call is not None and blocks.count <= self.pool.max_blocks:
            self._on_pool(call, out, blocks, helpers)
            return out
        ranges = blocks.ranges(out.shape[0], out.shape[1])
        self.python_threads([_block_job(a, b, out, blocks.axis, lo, hi) for lo, hi in ranges], helpers)
        return out

    def _on_pool(self, call: tuple, out: np.ndarray, blocks: Blocks, helpers: int,
                 accumulate: bool = False) -> None:
        """`call` into `out` on the C pool. Another host thread's product may
        hold the pool: then this thread computes every block itself (the
        same blocks, so the same bits)."""
        if not self.pool.multiply(call, out, blocks, helpers, accumulate):
            self.pool.multiply(call, out, blocks, 0, accumulate)


def _blockable(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.dtype == b.dtype and a.dtype.isnative and a.dtype.type in (np.float32, np.float64)
            and address(a) != address(b))


def _block_job(a: np.ndarray, b: np.ndarray, out: np.ndarray, axis: int, lo: int,
               hi: int) -> Callable[[], None]:
    def job() -> None:
        with np.errstate(all="ignore"):   # numpy's error state is per thread
            if axis == ROW_BLOCKS:
                np.matmul(a[lo:hi], b, out=out[lo:hi])
            else:
                np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])
    return job
