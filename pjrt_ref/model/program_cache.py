"""Compiled programs kept for the next compile of the same program.

Why: JAX compiles a program again whenever its own caches miss: after
`jax.clear_caches()`, for a new function object with the same body (a
lambda made in a loop, a test that builds its function per case), and on
each load from its persistent compilation cache (`PJRT_Executable_
DeserializeAndLoad`). pjrt-ref's compile is parsing and planning, about
130 µs per op in Python; an `Executable` never changes once built and is
already shared by every loaded executable made from it, so a compile of
the same bytes can hand back the same one.

The key is everything a compile reads: the program's format and bytes,
the compile options pjrt-ref takes from CompileOptionsProto (parsed: the
serialized proto is no key, JAX's debug options hold a map whose entries
come in a different order each time), and the text of every `PJRT_REF_*`
setting in the compile key (`settings.texts`; planning reads several, and a
test that changes one between two compiles gets a fresh plan; the test
harnesses' variables and this cache's own size are left out). A program that fails to compile is not kept:
the next compile fails the same way, with the same error.

Bounded by `PJRT_REF_PROGRAM_CACHE` executables (default 32, 0: none),
least recently compiled out first; a program of more than MAX_KEPT_BYTES
(its constants are in its bytes) is never kept, so the cache holds no
more than a few of those programs' worth of memory.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

from pjrt_ref import settings
from pjrt_ref.errors import PjrtRefError
from pjrt_ref.model.compile_options import parse_compile_options

# Programs bigger than this are compiled each time rather than kept alive.
MAX_KEPT_BYTES = 64 << 20

_KEPT: OrderedDict[tuple, object] = OrderedDict()
_LOCK = threading.Lock()


def compiled(fmt: str, code: bytes, compile_options: bytes, compile: Callable[[], object]):
    """The executable of (`fmt`, `code`, `compile_options`) under the
    current settings: a kept one, else `compile()`'s (kept when allowed)."""
    capacity = settings.get("PJRT_REF_PROGRAM_CACHE")
    if capacity == 0 or len(code) > MAX_KEPT_BYTES:
        return compile()
    options = _options_key(compile_options)
    if options is None:
        return compile()        # which raises the options' error where a compile does
    key = (fmt, bytes(code), options, settings.texts())
    with _LOCK:
        executable = _KEPT.get(key)
        if executable is not None:
            _KEPT.move_to_end(key)
            return executable
    executable = compile()      # outside the lock: another thread's compile need not wait
    with _LOCK:
        _KEPT[key] = executable
        _KEPT.move_to_end(key)
        while len(_KEPT) > capacity:
            _KEPT.popitem(last=False)
    return executable


def _options_key(compile_options: bytes) -> tuple | None:
    """What pjrt-ref reads of `compile_options`, hashable and in a fixed
    order; None when they do not parse."""
    try:
        options = parse_compile_options(bytes(compile_options))
    except PjrtRefError:
        return None
    assignment = options.device_assignment
    return (options.num_replicas, options.num_partitions, options.use_spmd_partitioning,
            None if assignment is None else tuple(map(tuple, assignment)),
            tuple(sorted((name, repr(value)) for name, value in options.option_overrides)))


def clear() -> None:
    """Forget every kept executable (tests; `pjrt_ref.model.program_cache.clear()`)."""
    with _LOCK:
        _KEPT.clear()


def kept() -> int:
    """How many executables are kept now."""
    with _LOCK:
        return len(_KEPT)
