"""OpenBLAS's own threads: one for the whole process (`OpenBlasThreads.limit`,
the process's being `blas.limit_blas_threads`), or several for one
product of one calling thread (`OpenBlasThreads.threaded_matmul`).

One OpenBLAS thread. OpenBLAS's workers busy-wait for each other, so on a
loaded machine (the host, JAX, has thread pools of its own) a threaded
product is many times slower than one thread. Left alone if the user set
OPENBLAS_NUM_THREADS or OMP_NUM_THREADS. Process-wide: the host's own numpy
matmuls use it too. Applied before a program is loaded (the plugin's
`Executable` calls it first): OpenBLAS stops its workers at every fork (a
pthread_atfork handler; the loader forks to check bytecode) and restarts
them, busy-waiting, when next asked for threads, `openblas_set_num_threads`
included; set once before the first fork, it never restarts them. When
OpenBLAS does not run on one thread (the user's choice, or no OpenBLAS
found: openblas.py), every product is one np.matmul call (products.py).

Several threads for one product: where the timing (product_strategy.py)
found OpenBLAS's own threads at least twice as fast as the blocks, a
product of that shape is one np.matmul call on them, set for the calling
thread only, where numpy's OpenBLAS lets it (`thread_local_setter`).

    PJRT_REF_BLAS_THREADS=n    OpenBLAS threads (default 1; 0: leave it alone)
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from pjrt_ref import settings
from pjrt_ref.interpreter.native import openblas


class OpenBlasThreads:
    """OpenBLAS's thread count as this process set it: `threads` is the
    count once `limit` ran (None: unknown, not limited yet, or left alone by
    PJRT_REF_BLAS_THREADS=0). A process has one (blas.py); an engine built
    with a fresh one sees an OpenBLAS it may not cut products for."""

    def __init__(self):
        self.applied = False
        self.threads: int | None = None

    def limit(self) -> int | None:
        """Apply PJRT_REF_BLAS_THREADS once; the thread count set, or None.
        A user who chose one thread (OPENBLAS_NUM_THREADS=1) gets the same
        blocks as our setting: only OpenBLAS's count matters."""
        if self.applied:
            return None
        self.applied = True
        library = openblas.find()
        if library is None:
            return None
        if "OPENBLAS_NUM_THREADS" in os.environ or "OMP_NUM_THREADS" in os.environ:
            self.threads = library.threads()
            return None
        threads = settings.get("PJRT_REF_BLAS_THREADS")
        if threads <= 0 or not library.set_threads(threads):
            return None
        self.threads = threads
        return threads

    def threaded_matmul(self, a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
        """One np.matmul call on `threads` OpenBLAS threads, set for this
        thread's calls only (other threads' products stay single-threaded)."""
        setter = thread_local_setter()
        previous = setter(threads)
        try:
            return np.matmul(a, b)
        finally:
            setter(previous)


def thread_local_setter():
    """openblas_set_num_threads_local, typed, or None where numpy's OpenBLAS
    does not export it (the timing then never offers OpenBLAS's threads)."""
    library = openblas.find()
    setter = library.thread_local_setter() if library is not None else None
    if setter is not None:
        setter.restype = ctypes.c_int
        setter.argtypes = (ctypes.c_int,)
    return setter


# This process's OpenBLAS (blas.py builds the product engine on it). Here, not in
# blas.py, so that setting its threads before a program is planned
# (process_setup.py) does not load the product engine a program may never use.
PROCESS = OpenBlasThreads()
