"""Imported once by the workers' fork server: the interpreter, jaxlib's MLIR
bindings and every op family, so each forked worker starts with them loaded.

Any failure is swallowed here (an op module with a syntax error must not
stop the fork server); the workers then meet it again and report it as the
error of each case.

First, work that numpy or numba would spread over threads stays in one
thread per worker: the pool already uses every core it is given. Those
libraries take their thread counts only from the environment, when they
load, so the fork server sets them in its own environment (the workers
inherit it) before importing them, unless the user chose a count. The
runner's process is left alone: multiprocessing starts the fork server with
the runner's environment and cannot be given another, and writing the
runner's would change it for everything else running there.
"""
import os
import signal

ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
for _name in ONE_THREAD:
    os.environ.setdefault(_name, "1")

from pjrt_ref.conformance.worker import preload  # noqa: E402  (after the thread counts: it imports numpy)

# Ctrl-C is the runner's to handle: it stops the workers itself.
signal.signal(signal.SIGINT, signal.SIG_IGN)
try:
    preload()
except Exception:  # noqa: BLE001
    pass
