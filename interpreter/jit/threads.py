"""Running a fused elementwise loop on several cores.

A fused loop (fusion.py) treats every element independently, so its index
range can be cut into contiguous pieces that run at the same time: the
generated kernels are compiled with `nogil=True`, and each piece is one
ordinary call of the kernel on slices of the arrays. Results are the same
bits as one call over everything (no element's computation changes; a
reduction is never split here).

Why not numba's `parallel=True`: its default "workqueue" threading layer
aborts the process when two host threads enter parallel code at once (JAX
may run executables from several threads), and the OpenMP layer adds a
second pool that competes with the host's. One small pool of our own,
shared by every kernel, used only for large arrays, is easier to reason
about: at most `threads()` threads compute, the caller being one of them.
OpenBLAS is capped separately (blas.py, one thread by default); the two
never run at the same time within one execution.

    PJRT_REF_JIT_THREADS=n   threads per fused loop (default: the usable
                             cores, at most 8; 1 turns splitting off)
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

MAX_DEFAULT_THREADS = 8
# Pieces smaller than this are not worth a thread hand-off (tens of µs).
MIN_PIECE = 1 << 15
# Pieces per thread (see run_split).
PIECES_PER_THREAD = 8

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def threads() -> int:
    """How many threads a fused loop may use (PJRT_REF_JIT_THREADS)."""
    setting = os.environ.get("PJRT_REF_JIT_THREADS")
    if setting is not None:
        try:
            return max(1, int(setting))
        except ValueError:
            return 1
    return max(1, min(MAX_DEFAULT_THREADS, len(os.sched_getaffinity(0))))


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            if _POOL is not None:
                _POOL.shutdown(wait=False)  # its threads finish their queued pieces
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pjrt_ref_jit")
            _POOL_SIZE = workers
        return _POOL


def _forget_pool_after_fork() -> None:
    """A forked child has no pool threads: it makes a new pool if needed."""
    global _POOL, _POOL_SIZE, _POOL_LOCK
    _POOL, _POOL_SIZE = None, 0
    _POOL_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def pieces(size: int, min_piece: int, count: int) -> list[tuple[int, int]]:
    """(start, stop) ranges covering [0, size): at most `count` of them, each
    at least `min_piece` long (one range if size is small), multiples of 64
    elements except the last (whole cache lines and vectors per piece)."""
    count = max(1, min(count, size // max(min_piece, 1)))
    step = -(-size // count)
    step = -(-step // 64) * 64
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def run_split(run_piece, size: int, min_piece: int = MIN_PIECE) -> None:
    """Call `run_piece(start, stop)` over pieces of [0, size), several per
    thread (at least `min_piece` elements each), with `run_ranges`."""
    run_ranges(run_piece, pieces(size, min_piece, threads() * PIECES_PER_THREAD))


def run_ranges(run_piece, ranges: list[tuple[int, int]]) -> None:
    """Call `run_piece(start, stop)` for every range, in this thread and up
    to `threads() - 1` pool threads, each taking the next range until none
    is left. Ranges are several per thread, so a thread whose core is busy
    with other work takes fewer of them instead of holding up the others.
    After an exception no new range starts; it propagates once every thread
    has stopped."""
    helpers = min(threads(), len(ranges)) - 1
    if helpers <= 0:
        for start, stop in ranges:
            run_piece(start, stop)
        return
    remaining = iter(ranges)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def take_pieces() -> None:
        while not errors:
            with lock:
                piece = next(remaining, None)
            if piece is None:
                return
            try:
                run_piece(*piece)
            except BaseException as error:  # noqa: B902 (re-raised by the caller)
                errors.append(error)

    futures = [_pool(helpers).submit(take_pieces) for _ in range(helpers)]
    take_pieces()
    for future in futures:
        future.result()
    if errors:
        raise errors[0]
