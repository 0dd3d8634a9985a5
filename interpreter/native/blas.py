"""Matrix products on numpy's OpenBLAS: OpenBLAS on one thread, and big
products cut into blocks, fixed by their shape, that several threads compute.

One OpenBLAS thread (`limit_blas_threads`). OpenBLAS's workers busy-wait for
each other, so on a loaded machine (the host, JAX, has thread pools of its
own) a threaded product is many times slower than one thread. Left alone if
the user set OPENBLAS_NUM_THREADS or OMP_NUM_THREADS. Process-wide: the
host's own numpy matmuls use it too. Applied before a program is loaded
(the plugin's `Executable` calls it first): OpenBLAS stops its workers at
every fork (a pthread_atfork handler; the loader forks to check bytecode)
and restarts them, busy-waiting, when next asked for threads,
`openblas_set_num_threads` included; set once before the first fork, it
never restarts them. When OpenBLAS does not run on one thread (the user's
choice, or no OpenBLAS found: openblas.py), every product is one np.matmul
call.

Blocks: rows or columns of the result, fixed by the product's shape
alone (blocks.py), each one single-threaded gemm call; where a shape's
blocks equal one call (`blocks_are_exact`), a product with no helper is
that one call.

Helpers: the C pool (gemm_pool.c, built by cffi at install time; it runs
the whole product without the GIL, and its threads spin briefly between
products), or Python threads (helper_threads.py, also used by fused loops)
when the C module or numpy's ILP64 gemm is missing. Helpers join only for
CPUs idle at that moment (`idle_cpus`): a helper on a busy CPU would keep
the caller waiting for its block. The caller takes every block no helper
has claimed, so a helper slow to start costs nothing.

product_strategy.py times, once per shape and machine, whether sharing
pays, whether smaller blocks of the same bits (`fine_blocks`, for
OpenBLAS's small-product kernels) are quicker, and whether OpenBLAS's own
threads beat the blocks. `matmul_add` adds a product into an array the
caller owns (a loop's gradient accumulator), inside gemm where a probe
finds the same bits. Measurements:
benchmarks/README.md ("Products"; "Design notes moved from the code").
The C pool's design: docs/performance-design.md.

    PJRT_REF_BLAS_THREADS=n    OpenBLAS threads (default 1; 0: leave it alone)
    PJRT_REF_MATMUL_THREADS=n  threads per product (default: the CPUs this
                               process may run on; 1: this thread computes
                               every block)
    PJRT_REF_POOL_SPIN_US=n    how long the C pool's threads spin for the
                               next product before sleeping (default
                               DEFAULT_SPIN_US; 0: sleep at once)
    PJRT_REF_GEMM_POOL=0       Python threads instead of the C pool
"""
from __future__ import annotations

import ctypes
import math
import os
import threading
from typing import Callable

import numpy as np

from ... import settings
from . import openblas, product_strategy
from .blocks import COLUMN_BLOCKS, ROW_BLOCKS, Blocks, fine_blocks, product_blocks
from .helper_threads import run_shared

# The blocks are cut in blocks.py; their callers import them from here too.
__all__ = ["COLUMN_BLOCKS", "ROW_BLOCKS", "Blocks", "accumulate_is_exact", "blocks_are_exact",
           "compute_blocks", "fine_blocks", "idle_cpus", "layouts_agree", "limit_blas_threads",
           "matmul", "matmul_add", "matmul_threads", "matrix_operands", "measure_strategy",
           "product_blocks"]

_DONE = False
# OpenBLAS's thread count once limit_blas_threads ran (None: unknown, or
# left alone by PJRT_REF_BLAS_THREADS=0).
_BLAS_THREADS: int | None = None


def limit_blas_threads() -> int | None:
    """Apply PJRT_REF_BLAS_THREADS once; the thread count set, or None.
    A user who chose one thread (OPENBLAS_NUM_THREADS=1) gets the same
    blocks as our setting: only OpenBLAS's count matters."""
    global _DONE, _BLAS_THREADS
    if _DONE:
        return None
    _DONE = True
    library = openblas.find()
    if library is None:
        return None
    if "OPENBLAS_NUM_THREADS" in os.environ or "OMP_NUM_THREADS" in os.environ:
        _BLAS_THREADS = library.threads()
        return None
    threads = settings.get("PJRT_REF_BLAS_THREADS")
    if threads <= 0 or not library.set_threads(threads):
        return None
    _BLAS_THREADS = threads
    return threads


_LOADAVG_FD: int | None = None
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


# --- One product ------------------------------------------------------------

def matrix_operands(lhs, rhs, lhs_free, rhs_free, lhs_contract, rhs_contract):
    """(a, b, shape): the matrices whose product, reshaped to `shape`, is
    dot_general's result (free dimensions flattened into rows of `a` and
    columns of `b`, contracting ones into the inner dimension)."""
    lhs_free_shape = [lhs.shape[d] for d in lhs_free]
    rhs_free_shape = [rhs.shape[d] for d in rhs_free]
    contract = math.prod([lhs.shape[d] for d in lhs_contract])
    lhs2 = np.transpose(lhs, list(lhs_free) + list(lhs_contract))
    rhs2 = np.transpose(rhs, list(rhs_contract) + list(rhs_free))
    return (lhs2.reshape(math.prod(lhs_free_shape), contract),
            rhs2.reshape(contract, math.prod(rhs_free_shape)), lhs_free_shape + rhs_free_shape)


def matmul(a: np.ndarray, b: np.ndarray, threads: int | None = None) -> np.ndarray:
    """`a @ b` for 2-d arrays (any strides), with the bits of the blocks
    `product_blocks` cuts it into, computed by this thread and by helpers
    on idle CPUs (module docstring). One np.matmul call when OpenBLAS does
    not run on one thread (or is not found), for a product of one block, for
    operands that are not both native f32 or both native f64, for `a @ a.T`
    on one buffer (numpy then uses syrk), and where the measured strategy
    is OpenBLAS's own threads."""
    if _BLAS_THREADS != 1:
        return np.matmul(a, b)
    blocks = product_blocks(a.shape[0], a.shape[1], b.shape[1])
    # One block first: small products skip _blockable's address reads (~3 µs).
    if blocks.count == 1 or not _blockable(a, b):
        return np.matmul(a, b)
    call = _gemm_call(a, b)
    strategy = _strategy(a, b, blocks, call)
    if strategy.openblas_threads > 1:
        return _on_openblas_threads(a, b, strategy.openblas_threads)
    if strategy.fine:   # the blocks' bits (product_strategy.py), quicker
        blocks = fine_blocks(a.shape[0], a.shape[1], b.shape[1])
        return compute_blocks(a, b, blocks, call, _helpers(blocks, strategy, threads))
    helpers = _helpers(blocks, strategy, threads)
    if helpers == 0 and _blocks_exact(a, b, blocks, call):
        return np.matmul(a, b)
    return compute_blocks(a, b, blocks, call, helpers)


def _helpers(blocks: Blocks, strategy: product_strategy.Strategy, threads: int | None) -> int:
    """Helper threads for one product: none unless its strategy splits,
    and no more than its blocks, the thread limit and the idle CPUs allow."""
    if not strategy.split:
        return 0
    limit = matmul_threads() if threads is None else threads
    return max(0, min(blocks.count - 1, limit - 1, idle_cpus()))


def matmul_add(a: np.ndarray, b: np.ndarray, c: np.ndarray, threads: int | None = None) -> np.ndarray:
    """`c + a @ b` written into `c` and returned, with the bits of
    `np.add(c, matmul(a, b))`: a gradient accumulated over a loop's steps
    (jit/in_place.py). Where the C pool computes the product's blocks and
    `accumulate_is_exact` found that adding each block's product inside
    gemm (beta = 1) gives those bits, one pass over `c` per block, with no
    new array; otherwise the product, then the add into `c`.
    `c` is 2-d, a @ b's shape and dtype, writeable; it may be any array
    (the fallback handles layouts and overlap the gemm cannot)."""
    call = _accumulate_call(a, b, c)
    if call is not None:
        blocks = product_blocks(a.shape[0], a.shape[1], b.shape[1])
        strategy = _strategy(a, b, blocks, call)
        if strategy.fine:
            blocks = fine_blocks(a.shape[0], a.shape[1], b.shape[1])
        if strategy.openblas_threads <= 1 and _accumulate_exact(a, b, blocks, call):
            if not _pool_multiply(call, c, blocks, _helpers(blocks, strategy, threads), accumulate=True):
                _pool_multiply(call, c, blocks, helpers=0, accumulate=True)
            return c
    return np.add(c, matmul(a, b, threads), out=c)


def _accumulate_call(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple | None:
    """`_gemm_call(a, b)` when the pool can also add into `c` in place: C
    pool products (one OpenBLAS thread) of more than one block (a one-block
    product is one np.matmul call, which may use gemv, far quicker than
    gemm for a matrix-vector product), `c` C-contiguous, aligned,
    writeable, of the product's dtype and not overlapping an operand."""
    if _BLAS_THREADS != 1 or c.dtype != a.dtype:
        return None
    blocks = product_blocks(a.shape[0], a.shape[1], b.shape[1])
    if not 1 < blocks.count <= MAX_POOL_BLOCKS or not _blockable(a, b):
        return None
    flags = c.flags
    if not (flags.c_contiguous and flags.aligned and flags.writeable):
        return None
    if np.may_share_memory(c, a) or np.may_share_memory(c, b):
        return None
    return _gemm_call(a, b)


def _address(x: np.ndarray) -> int:
    return x.__array_interface__["data"][0]


def _blockable(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.dtype == b.dtype and a.dtype.isnative and a.dtype.type in (np.float32, np.float64)
            and _address(a) != _address(b))


def compute_blocks(a: np.ndarray, b: np.ndarray, blocks: Blocks, call: tuple | None,
                   helpers: int) -> np.ndarray:
    """`a @ b` as `blocks`, each one gemm call, shared by this thread and up
    to `helpers` helpers: the C pool's when `call` (`_gemm_call(a, b)`) is
    given, else Python threads calling np.matmul per block."""
    out = np.empty((a.shape[0], b.shape[1]), np.result_type(a.dtype, b.dtype))
    if call is not None and blocks.count <= MAX_POOL_BLOCKS:
        # Another host thread's product may hold the pool: then this thread
        # computes every block itself (the same blocks, so the same bits).
        if not _pool_multiply(call, out, blocks, helpers):
            _pool_multiply(call, out, blocks, helpers=0)
        return out
    ranges = blocks.ranges(out.shape[0], out.shape[1])
    run_shared([_block_job(a, b, out, blocks.axis, lo, hi) for lo, hi in ranges], helpers)
    return out


def _block_job(a: np.ndarray, b: np.ndarray, out: np.ndarray, axis: int, lo: int,
               hi: int) -> Callable[[], None]:
    def job() -> None:
        with np.errstate(all="ignore"):   # numpy's error state is per thread
            if axis == ROW_BLOCKS:
                np.matmul(a[lo:hi], b, out=out[lo:hi])
            else:
                np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])
    return job


def _on_openblas_threads(a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """One np.matmul call on `threads` OpenBLAS threads, set for this
    thread's calls only (other threads' products stay single-threaded)."""
    setter = _thread_local_setter()
    previous = setter(threads)
    try:
        return np.matmul(a, b)
    finally:
        setter(previous)


def _thread_local_setter():
    library = openblas.find()
    setter = library.thread_local_setter() if library is not None else None
    if setter is not None:
        setter.restype = ctypes.c_int
        setter.argtypes = (ctypes.c_int,)
    return setter


# --- Which way a shape runs (product_strategy.py) ----------------------------

_STRATEGIES: dict[str, product_strategy.Strategy] = {}
_PROBE_LOCK = threading.Lock()


def _shape_key(a: np.ndarray, b: np.ndarray, call: tuple | None) -> str:
    """What a strategy is kept under: dtype, sizes, layouts and which
    helpers (C pool or Python threads) would compute the blocks."""
    (rows, inner), columns = a.shape, b.shape[1]
    helpers = "c" if call is not None else "python"
    return f"{a.dtype.name} {rows}x{inner}x{columns} {_layout(a)},{_layout(b)} {helpers}"


def _strategy(a: np.ndarray, b: np.ndarray, blocks: Blocks,
              call: tuple | None) -> product_strategy.Strategy:
    key = _shape_key(a, b, call)
    known = _STRATEGIES.get(key)
    if known is None:
        known = _STRATEGIES[key] = _find_strategy(key, a, b, blocks, call is not None)
    return known


def _find_strategy(key: str, a: np.ndarray, b: np.ndarray, blocks: Blocks,
                   in_c: bool) -> product_strategy.Strategy:
    """The strategy on disk, or measured now (and written); DEFAULT when
    timing is off, another thread is timing, or the machine is busy."""
    if not product_strategy.probe_enabled():
        return product_strategy.DEFAULT
    known = product_strategy.lookup(key)
    if known is not None:
        return known
    if not _PROBE_LOCK.acquire(blocking=False):
        return product_strategy.DEFAULT
    try:
        measured = measure_strategy(a, b, blocks, in_c)
    finally:
        _PROBE_LOCK.release()
    if measured is None:
        return product_strategy.DEFAULT
    product_strategy.remember(key, measured)
    return measured


def measure_strategy(a: np.ndarray, b: np.ndarray, blocks: Blocks,
                     in_c: bool) -> product_strategy.Strategy | None:
    """Time the candidates (product_strategy.py) on random operands with
    `a` and `b`'s shapes and layouts; None if the machine was too busy."""
    rng = np.random.default_rng(0)
    probe_a, probe_b = _random_like(a, rng), _random_like(b, rng)
    call = _gemm_call(probe_a, probe_b) if in_c else None
    exact = _blocks_exact(probe_a, probe_b, blocks, call)

    def serial() -> None:
        if exact:
            np.matmul(probe_a, probe_b)
        else:
            compute_blocks(probe_a, probe_b, blocks, call, helpers=0)

    if product_strategy.serial_seconds(serial) > product_strategy.MAX_PROBED_SECONDS:
        return product_strategy.DEFAULT
    cpus = product_strategy.usable_cpus()
    ours = {"serial": serial}
    helpers = min(blocks.count - 1, cpus - 1)
    if helpers > 0:
        ours["split"] = lambda: compute_blocks(probe_a, probe_b, blocks, call, helpers)
    fine = fine_blocks(a.shape[0], a.shape[1], b.shape[1])
    if fine.count > blocks.count and _same_bits(probe_a, probe_b, blocks, fine, call):
        fine_helpers = min(fine.count - 1, cpus - 1)
        ours["fine"] = lambda: compute_blocks(probe_a, probe_b, fine, call, fine_helpers)
    threaded = None
    if cpus > 1 and _thread_local_setter() is not None:
        threaded = lambda: _on_openblas_threads(probe_a, probe_b, cpus)  # noqa: E731
    needed = min(blocks.count, cpus) - 1
    times = product_strategy.measure(ours, threaded, quiet=lambda: idle_cpus() >= needed)
    return None if times is None else product_strategy.decide(times, cpus)


# --- Are the blocks one call's bits? ------------------------------------------

def _same_bits(a: np.ndarray, b: np.ndarray, blocks: Blocks, other: Blocks,
               call: tuple | None) -> bool:
    """Whether `a @ b` computed as `blocks` and as `other` gives the same
    bits, on these (random) operands: as for `blocks_are_exact`, BLAS's
    order of operations depends on shapes and layouts only."""
    with np.errstate(all="ignore"):
        return bool(np.array_equal(compute_blocks(a, b, blocks, call, helpers=0),
                                   compute_blocks(a, b, other, call, helpers=0)))


_EXACT: dict = {}


def _layout(x: np.ndarray) -> str:
    """How BLAS reads a 2-d operand: rows contiguous, columns contiguous
    (a transposed view), or neither (numpy copies it first)."""
    if x.strides[1] == x.itemsize:
        return "rows"
    if x.strides[0] == x.itemsize:
        return "columns"
    return "copied"


def blocks_are_exact(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the blocks of `a @ b` (`product_blocks`) give the bits of one
    np.matmul call. BLAS's sequence of floating-point operations depends on
    the shapes, types and layouts only, never on the values, so one check
    on random operands of that shape and layout answers for all operands;
    the answer is kept per shape and layout. The blocks are computed by the
    path that computes the real ones: the C pool's code or np.matmul per
    block."""
    blocks = product_blocks(a.shape[0], a.shape[1], b.shape[1])
    return _blocks_exact(a, b, blocks, _gemm_call(a, b))


def _blocks_exact(a: np.ndarray, b: np.ndarray, blocks: Blocks, call: tuple | None) -> bool:
    key = (_shape_key(a, b, call), blocks)
    exact = _EXACT.get(key)
    if exact is None:
        rng = np.random.default_rng(0)
        probe_a, probe_b = _random_like(a, rng), _random_like(b, rng)
        probe_call = _gemm_call(probe_a, probe_b) if call is not None else None
        with np.errstate(all="ignore"):
            whole = np.matmul(probe_a, probe_b)
            split = compute_blocks(probe_a, probe_b, blocks, probe_call, helpers=0)
        exact = _EXACT[key] = bool(np.array_equal(whole, split))
    return exact


_LAYOUTS_AGREE: dict = {}


def layouts_agree(a: np.ndarray, b: np.ndarray, copy: np.ndarray, position: int) -> bool:
    """Whether `matmul` gives the same bits with operand `position` (0: `a`,
    1: `b`) replaced by `copy`, the same matrix row-major, for operands of
    these shapes and layouts (jit/invariant_layouts.py). Checked once per
    shape and layout on random operands, as `blocks_are_exact` is; both
    products take their own strategy, as the real ones do."""
    key = (a.dtype.str, a.shape, b.shape, _layout(a), _layout(b), position)
    agree = _LAYOUTS_AGREE.get(key)
    if agree is None:
        rng = np.random.default_rng(0)
        probe = [_random_like(a, rng), _random_like(b, rng)]
        with np.errstate(all="ignore"):
            original = matmul(*probe)
            probe[position] = np.ascontiguousarray(probe[position])
            agree = _LAYOUTS_AGREE[key] = bool(np.array_equal(original, matmul(*probe)))
    return agree


_ACCUMULATE_EXACT: dict = {}


def accumulate_is_exact(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether `matmul_add`'s gemm with beta = 1 gives the bits of adding
    `a @ b`'s blocks to `c` afterwards, for operands of this shape and
    layout. It does when gemm sums each element's products in registers and
    adds `c` once at the end; a kernel that adds partial sums to `c` (a
    long inner dimension cut into panels) or rounds `c * beta` apart does
    not. Decided as `blocks_are_exact` is: on random operands, once per
    shape and layout, by the C pool's own code."""
    call = _gemm_call(a, b)
    if call is None:
        return False
    return _accumulate_exact(a, b, product_blocks(a.shape[0], a.shape[1], b.shape[1]), call)


def _accumulate_exact(a: np.ndarray, b: np.ndarray, blocks: Blocks, call: tuple) -> bool:
    key = (_shape_key(a, b, call), blocks)
    exact = _ACCUMULATE_EXACT.get(key)
    if exact is None:
        rng = np.random.default_rng(0)
        probe_a, probe_b = _random_like(a, rng), _random_like(b, rng)
        start = rng.standard_normal((a.shape[0], b.shape[1])).astype(a.dtype)
        probe_call = _gemm_call(probe_a, probe_b)
        accumulated = start.copy()
        with np.errstate(all="ignore"):
            added = np.add(start, compute_blocks(probe_a, probe_b, blocks, probe_call, helpers=0))
            done = _pool_multiply(probe_call, accumulated, blocks, helpers=0, accumulate=True)
        exact = _ACCUMULATE_EXACT[key] = done and bool(np.array_equal(added, accumulated))
    return exact


def _random_like(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random values in `x`'s shape, dtype and layout (`_layout`)."""
    layout = _layout(x)
    if layout == "copied":
        wide = rng.standard_normal((x.shape[0], 2 * x.shape[1])).astype(x.dtype)
        return wide[:, ::2]
    values = rng.standard_normal(x.shape).astype(x.dtype)
    return np.asfortranarray(values) if layout == "columns" else values


# --- The C pool (gemm_pool.c) -------------------------------------------

# How long the C pool's threads spin for the next product before sleeping.
# Long enough to bridge the gap between back-to-back calls (W2 through JAX)
# and most gaps between the products of a training step (W4), short enough
# that an idle plugin gives its CPU back at once (benchmarks/README.md).
DEFAULT_SPIN_US = settings.default("PJRT_REF_POOL_SPIN_US")
# CBLAS's transpose flags (cblas.h).
_NO_TRANS, _TRANS = 111, 112


class _Pool:
    """The loaded C module and OpenBLAS's ILP64 gemm functions (addresses),
    by dtype."""

    def __init__(self, lib, gemms: dict):
        self.lib = lib
        self.gemms = gemms


# What blas.py uses of the C module (gemm_pool.h), and the version of its
# declarations it was written for.
_POOL_NAMES = ("gemm_pool_multiply", "gemm_pool_spinning", "gemm_pool_workers",
               "GEMM_POOL_MAX_BLOCKS", "GEMM_POOL_COLUMN_BLOCKS", "GEMM_POOL_ABI")
_POOL_ABI = 2


def _load_pool() -> "_Pool | None":
    """The C pool, or None: module not built, built from an older
    gemm_pool.h (missing names or another GEMM_POOL_ABI: an editable
    install after a pull; `pip install -e .` rebuilds it), or no ILP64
    cblas gemm in numpy's OpenBLAS (gemm_pool.h declares 64-bit integer
    arguments)."""
    try:
        from . import _gemm_pool
    except ImportError:
        return None
    if not all(hasattr(_gemm_pool.lib, name) for name in _POOL_NAMES):
        return None
    if _gemm_pool.lib.GEMM_POOL_ABI != _POOL_ABI:
        return None
    library = openblas.find()
    if library is None or not library.gemms:
        return None
    return _Pool(_gemm_pool.lib, library.gemms)


_POOL = _load_pool()
# Most blocks the C pool takes in one product (gemm_pool.h).
MAX_POOL_BLOCKS = _POOL.lib.GEMM_POOL_MAX_BLOCKS if _POOL is not None else 0


def _pool_enabled() -> bool:
    return _POOL is not None and settings.get("PJRT_REF_GEMM_POOL")


def _spin_ns() -> int:
    """PJRT_REF_POOL_SPIN_US in nanoseconds, read per product."""
    return settings.get("PJRT_REF_POOL_SPIN_US") * 1000


def _operand(x: np.ndarray, rows: int, columns: int) -> tuple[int, int, int] | None:
    """(address, CBLAS transpose flag, leading dimension) describing the
    row-major `rows` x `columns` matrix `x` the way a row-major CBLAS call
    takes it, as numpy's own matmul passes it: rows contiguous (NoTrans) or
    columns contiguous (a transposed view: Trans). None when BLAS cannot
    read it in place (numpy would copy it first) or the address is not
    aligned to the element size."""
    size = x.itemsize
    address = _address(x)
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
    order or layouts, or `a` and `b` the same memory."""
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


def _pool_multiply(call: tuple, out: np.ndarray, blocks: Blocks, helpers: int,
                   accumulate: bool = False) -> bool:
    """Run `call` (`_gemm_call`) into the C-contiguous `out` as `blocks`
    with up to `helpers` pool threads (0: all on this thread); with
    `accumulate`, add the product to `out` (gemm's beta = 1). False if
    another thread's product has the pool, or the pool refuses the block
    count (nothing done)."""
    lib = _POOL.lib
    axis = (lib.GEMM_POOL_ROW_BLOCKS, lib.GEMM_POOL_COLUMN_BLOCKS)[blocks.axis]
    gemm, is_double, trans_a, trans_b, rows, columns, inner, a, lda, b, ldb = call
    return bool(lib.gemm_pool_multiply(
        gemm, is_double, trans_a, trans_b, rows, columns, inner, a, lda, b, ldb,
        _address(out), columns, int(accumulate), axis, blocks.count, helpers, _spin_ns()))
