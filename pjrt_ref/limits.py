"""Resource limits: loop iterations (PJRT_REF_MAX_STEPS) and allocation size (PJRT_REF_MAX_BYTES).

A plugin runs inside someone else's process, so a runaway program must end
in an error, not in an endless loop or the OOM killer.

* `PJRT_REF_MAX_STEPS=N` (unset or 0: no limit): a `stablehlo.while` whose
  cond is still true after N body iterations stops with RESOURCE_EXHAUSTED
  naming the op, its location and the count. The bound is per execution of
  one while op (a nested loop's count restarts each time its parent
  iterates). RESOURCE_EXHAUSTED rather than DEADLINE_EXCEEDED: the limit
  counts work, not wall-clock time.
* `PJRT_REF_MAX_BYTES=N` (default: MemAvailable from /proc/meminfo, read
  at most once a second; no limit if that cannot be read): a host
  transfer (PJRT_Client_BufferFromHostBuffer, CreateUninitializedBuffer) or
  an op result whose static type needs more than N bytes fails with
  RESOURCE_EXHAUSTED before anything is allocated. Op results are checked
  when the program is planned (i.e. at PJRT_Client_Compile); results with
  dynamic dimensions are not checked (numpy's MemoryError still becomes an
  error naming the op).

Both variables (pjrt_ref/settings.py) are read each time a limit is
checked, so tests and users may change them between compilations.
"""
from __future__ import annotations

import math
# Bound at import, as `threading` binds its clock: the plugin runs inside the
# user's process, and a test that patches `time.monotonic` (JAX's cache tests
# count its calls) must not reach the plugin's clock.
from time import monotonic

import numpy as np

from pjrt_ref import settings
from pjrt_ref.errors import ResourceExhausted

_MEMINFO = "/proc/meminfo"


def max_steps() -> int | None:
    """PJRT_REF_MAX_STEPS, or None when it is 0 (its default: no limit)."""
    return settings.get("PJRT_REF_MAX_STEPS") or None


_MEMINFO_CACHE: list = [-1.0, None]   # [time read, value]: re-read at most once a second


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (cached for a second), or None where there is none."""
    now = monotonic()
    if now - _MEMINFO_CACHE[0] > 1.0:
        _MEMINFO_CACHE[:] = [now, _read_mem_available()]
    return _MEMINFO_CACHE[1]


def _read_mem_available() -> int | None:
    try:
        with open(_MEMINFO) as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def max_bytes() -> int | None:
    """The allocation limit: PJRT_REF_MAX_BYTES if set, else available memory (None: no limit)."""
    limit = settings.get("PJRT_REF_MAX_BYTES")
    if limit is None:
        return available_memory()
    return limit or None


def nbytes(dtype, dims) -> int:
    """Bytes of a dense array of `dtype` and `dims` (Python ints: no overflow)."""
    return math.prod(int(d) for d in dims) * np.dtype(dtype).itemsize


def check_allocation(size: int, what: str, op: str | None = None, location: str | None = None) -> None:
    """RESOURCE_EXHAUSTED if allocating `size` bytes would exceed the limit."""
    if size <= 0:
        return
    limit = max_bytes()
    if limit is not None and size > limit:
        source = "available memory" if settings.get("PJRT_REF_MAX_BYTES") is None else "PJRT_REF_MAX_BYTES"
        raise ResourceExhausted(f"{what} needs {size} bytes, more than the limit of {limit} bytes ({source})",
                                op=op, location=location)


def loop_limit_error(op: str, location: str | None, iterations: int) -> ResourceExhausted:
    """The error for a loop stopped by PJRT_REF_MAX_STEPS after `iterations` iterations."""
    return ResourceExhausted(f"loop stopped after {iterations} iterations: PJRT_REF_MAX_STEPS={iterations} "
                             "(raise or unset it to let loops run longer)", op=op, location=location)


def check_result_types(result_types, limit: int | None, op: str, location: str | None) -> None:
    """At plan time: RESOURCE_EXHAUSTED if one statically shaped result of `op` exceeds `limit` bytes."""
    if limit is None:
        return
    for index, ttype in enumerate(result_types):
        dtype, shape = getattr(ttype, "dtype", None), getattr(ttype, "shape", None)
        if dtype is None or shape is None or any(d is None for d in shape):
            continue
        size = nbytes(dtype, shape)
        if size > limit:
            raise ResourceExhausted(f"result {index} ({ttype}) needs {size} bytes, more than the limit of "
                                    f"{limit} bytes (PJRT_REF_MAX_BYTES, default available memory)",
                                    op=op, location=location)
