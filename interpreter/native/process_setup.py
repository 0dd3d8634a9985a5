"""Process-wide settings the native code needs before a program runs.

`set_up_process` runs each time a function is planned (the optimiser calls
it); each setting is applied once per process, so later calls cost a flag
check.
"""
from __future__ import annotations

from pjrt_ref.interpreter.native import heap, openblas_threads


def set_up_process(optimize: bool) -> None:
    """Cap OpenBLAS's threads (openblas_threads.py) and, with the optimiser on, keep
    freed array memory in the process (heap.py)."""
    # In both modes: OpenBLAS's threads change how it splits a product, and
    # so its bits; PJRT_REF_OPTIMIZE=0 must compute what the optimiser does.
    openblas_threads.PROCESS.limit()
    if optimize:
        heap.keep_freed_memory()
