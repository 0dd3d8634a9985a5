"""Keep freed array memory in the process heap instead of giving it back to
the kernel after every op.

The interpreter allocates a fresh numpy array for every op result. glibc's
malloc serves blocks above `M_MMAP_THRESHOLD` (128 KiB at start, adjusted up
to the largest block freed so far) with a fresh `mmap`, and returns free
memory at the top of the heap to the kernel once it exceeds
`M_TRIM_THRESHOLD`. Either way the next array of that size lands on pages
the kernel has to fault in and zero again, a large part of a training
step's time (docs/performance-design.md, "Design notes moved from the
code").
XLA reuses one preallocated buffer and pays none of that.

`keep_freed_memory()` sets both thresholds once per process (glibc only):

    M_MMAP_THRESHOLD = 32 MiB   arrays up to 32 MiB come from the heap
    M_TRIM_THRESHOLD = 64 MiB   up to 64 MiB of free heap is kept for reuse

Peak memory is unchanged (the same arrays are alive at the same time); what
changes is that up to 64 MiB of freed memory stays mapped in the process
between calls. The setting is process-wide, so it is applied only when the
interpreter's optimizer first runs, and not at all if:

    PJRT_REF_HEAP=0                    leave malloc alone
    MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ / MALLOC_TOP_PAD_ set
                                       (the user tuned malloc already)
    the C library is not glibc         (mallopt's parameters are glibc's)
"""
from __future__ import annotations

import ctypes
import os
import platform
import threading

from pjrt_ref import settings

# glibc's <malloc.h>: parameter numbers for mallopt().
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 32 << 20     # glibc's upper limit on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD_BYTES = 64 << 20

_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_LOCK = threading.Lock()
_APPLIED: bool | None = None


def heap_tuning_wanted() -> bool:
    if not settings.get("PJRT_REF_HEAP"):
        return False
    if any(name in os.environ for name in _USER_SETTINGS):
        return False
    return platform.libc_ver()[0] == "glibc"


def keep_freed_memory() -> bool:
    """Apply the thresholds above once; True if they are in effect."""
    global _APPLIED
    with _LOCK:
        if _APPLIED is None:
            _APPLIED = heap_tuning_wanted() and _set_thresholds()
        return _APPLIED


# The C library's handle, kept once made: a ctypes library let go is a
# reference cycle, left to Python's cycle collector (which JAX's tests count).
_LIBC: list = []


def _set_thresholds() -> bool:
    try:
        if not _LIBC:
            _LIBC.append(ctypes.CDLL(None))
        mallopt = _LIBC[0].mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 on a value glibc refuses.
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
