"""Running a fused elementwise loop on several cores.

A fused loop (optimiser/fusion.py) treats every element independently, so its index
range can be cut into contiguous pieces that run at the same time: the
generated kernels are compiled with `nogil=True`, and each piece is one
ordinary call of the kernel on slices of the arrays. Results are the same
bits as one call over everything (no element's computation changes).

The pieces go to the pool that large matrix products use
(helper_threads.py): the calling thread takes pieces until none is left,
helper threads are woken only for CPUs that are idle at that moment, and
the caller never waits for a helper that has not started. Pieces are
several per thread, so a thread on a busy core takes fewer of them.

Why not numba's `parallel=True`: its default "workqueue" threading layer
aborts the process when two host threads enter parallel code at once (JAX
may run executables from several threads), and the OpenMP layer adds a
second pool that competes with the host's and with BLAS.

    PJRT_REF_JIT_THREADS=n   threads per fused loop (default: the usable
                             cores, at most 8; 1 turns splitting off)
"""
from __future__ import annotations

import functools
import os

from pjrt_ref import settings
from pjrt_ref.interpreter.native import blas, helper_threads

MAX_DEFAULT_THREADS = 8
# Pieces smaller than this are not worth a thread hand-off.
MIN_PIECE = 1 << 15
# Pieces per thread (see the module docstring).
PIECES_PER_THREAD = 8


def threads() -> int:
    """How many threads a fused loop may use (PJRT_REF_JIT_THREADS, read per loop; 0 counts as 1)."""
    setting = settings.get("PJRT_REF_JIT_THREADS")
    if setting is not None:
        return max(1, setting)
    return max(1, min(MAX_DEFAULT_THREADS, len(os.sched_getaffinity(0))))


def pieces(size: int, min_piece: int, count: int) -> list[tuple[int, int]]:
    """(start, stop) ranges covering [0, size): at most `count` of them, each
    at least `min_piece` long (one range if size is small), multiples of 64
    elements except the last (whole cache lines and vectors per piece)."""
    count = max(1, min(count, size // max(min_piece, 1)))
    step = -(-size // count)
    step = -(-step // 64) * 64
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def run_split(run_piece, size: int, min_piece: int = MIN_PIECE) -> None:
    """Call `run_piece(start, stop)` over pieces of [0, size) (at least
    `min_piece` elements each, several per thread) on this thread and idle
    pool threads; return when all are done. With no CPU idle right now,
    one call does everything. An exception in a piece is raised here once
    every piece has run."""
    workers = threads()
    ranges = pieces(size, min_piece, workers * PIECES_PER_THREAD)
    helpers = min(workers - 1, blas.idle_cpus()) if len(ranges) > 1 else 0
    if helpers <= 0:  # nothing to share with: one call, no per-piece overhead
        run_piece(0, size)
        return
    jobs = [functools.partial(run_piece, start, stop) for start, stop in ranges]
    helper_threads.run_shared(jobs, helpers)
