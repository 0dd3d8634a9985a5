"""How many threads numpy's BLAS (OpenBLAS) may use.

pjrt-ref runs inside a host process (JAX) that has thread pools of its own,
often on few cores. OpenBLAS's worker threads busy-wait for each other; when
one is descheduled the others spin, and a 128x784 @ 784x512 product that
takes 1 ms on one thread took 46 ms on two threads of this two-core machine
under load. So by default the interpreter asks OpenBLAS for one thread.

    PJRT_REF_BLAS_THREADS=n   use n threads (0: leave OpenBLAS alone)

Nothing changes if the user already chose (OPENBLAS_NUM_THREADS or
OMP_NUM_THREADS set). The setting is process-wide: numpy's own matmuls in
the host process use it too.
"""
from __future__ import annotations

import ctypes
import glob
import os

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_DONE = False


def _openblas_libraries() -> list[str]:
    import numpy

    root = os.path.dirname(os.path.dirname(numpy.__file__))
    return glob.glob(os.path.join(root, "numpy.libs", "*openblas*.so*"))


def limit_blas_threads() -> int | None:
    """Apply PJRT_REF_BLAS_THREADS once; the thread count set, or None."""
    global _DONE
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
                return threads
    return None
