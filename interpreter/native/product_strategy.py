"""How one shape of matrix product runs on this machine, decided by timing
it once and remembered on disk.

What is fastest depends on the CPU and on the kernels numpy's OpenBLAS
picked for it, not only on the size: the same product can be many times
slower on one thread of one machine than of another, where OpenBLAS's own
threads then beat one thread by far (benchmarks/README.md, "Products", has
the numbers). So the first time a process meets a shape worth splitting
(products.py's engine, through product_probes.py), it times the
candidates on operands of that shape and layout:

    serial    this thread computes every block (one call where that
              gives the blocks' bits)
    split     the blocks shared with helper threads
    fine      smaller blocks of the same axis (`blocks.fine_blocks`), shared
              likewise: OpenBLAS has kernels for small products that skip
              copying the operands into packed panels, several times
              quicker for a thin product's slices on some CPUs (an LSTM
              step's 32x256 @ 256x1024: benchmarks/README.md, "W9");
              a candidate only where they give the blocks' bits
    openblas  one call on OpenBLAS's own threads (where numpy's
              OpenBLAS exports openblas_set_num_threads_local, which
              sets them for one calling thread: numpy 2.4's does, 2.5's
              does not)

and keeps a `Strategy`. `serial` and `split` compute the same blocks, so
they give the same bits; choosing between them only moves time, and
splitting is kept unless it measured clearly slower (SPLIT_MARGIN).
`fine` is a candidate only where a check on random operands found its
blocks' bits equal to the shape's blocks' bits, and is chosen where it is
FINE_MARGIN faster than both. `openblas` gives other bits
(OpenBLAS cuts a product by its own thread count) and busy-waits its
threads, which makes products far slower on a loaded machine; it is chosen
only where it beat both by OPENBLAS_MARGIN.

Timings are taken only while the other CPUs are idle: on a busy machine a
helper waits for a CPU and the caller waits for the helper, which says
nothing about the machine, and a verdict taken then would stay for good.
A process that finds the machine busy uses DEFAULT and leaves the shape
for a later process to time.

Strategies are kept per process and in a JSON file in the kernel cache
directory (`$PJRT_REF_CACHE_DIR`, see codegen.py), one file per machine
(CPU model, usable CPUs, OpenBLAS build and kernels): a second process
reads them instead of timing again.

    PJRT_REF_PRODUCT_PROBE=0   time nothing: every shape gets DEFAULT
                               (blocks, split onto idle CPUs)
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from pjrt_ref import settings
from pjrt_ref.interpreter.native import codegen, openblas

# `openblas` must be this many times faster than the better of the others.
OPENBLAS_MARGIN = 2.0
# Splitting is dropped only where it measured this many times slower than
# serial. Equal times mean the helpers never ran (the CPUs were busier than
# the quiet check saw), and a verdict is kept for good (an example:
# docs/performance-design.md, "Design notes moved from the code").
SPLIT_MARGIN = 1.1
# Fine blocks must be this many times faster than the better of serial and split.
FINE_MARGIN = 1.1
# Timed rounds of each candidate (after one untimed call); the best counts.
# A round starts only when the machine is quiet: up to MAX_ROUNDS tries,
# QUIET_WAIT_SECONDS apart.
ROUNDS = 5
MAX_ROUNDS = 10
QUIET_WAIT_SECONDS = 0.001
# Products whose serial call takes longer than this are not timed: for them
# splitting pays on any machine, and the probe would cost too much.
MAX_PROBED_SECONDS = 0.02
# Bumped when the candidates or the rule change: older files are ignored.
FORMAT = 3


@dataclass(frozen=True)
class Strategy:
    """How a product of one shape runs: the blocks split over helpers or
    not, in `blocks.fine_blocks` (`fine`), or one call on OpenBLAS's threads
    (`openblas_threads` > 1)."""
    split: bool = True
    openblas_threads: int = 0
    fine: bool = False
    # Best time of each candidate in microseconds (empty: not measured).
    measured_us: dict = field(default_factory=dict)


DEFAULT = Strategy()


def probe_enabled() -> bool:
    return settings.get("PJRT_REF_PRODUCT_PROBE")


def decide(times: dict[str, float], openblas_threads: int) -> Strategy:
    """The strategy the best times (seconds, by candidate name) call for."""
    measured = {name: round(seconds * 1e6, 1) for name, seconds in times.items()}
    ours = min(times["serial"], times.get("split", times["serial"]))
    fine = "fine" in times and times["fine"] * FINE_MARGIN < ours
    threaded = times.get("openblas")
    if threaded is not None and threaded * OPENBLAS_MARGIN < min(ours, times.get("fine", ours)):
        return Strategy(split=False, openblas_threads=openblas_threads, measured_us=measured)
    split = "split" not in times or times["split"] <= times["serial"] * SPLIT_MARGIN
    return Strategy(split=split or fine, fine=fine, measured_us=measured)


def measure(ours: dict[str, Callable[[], None]], openblas: Callable[[], None] | None,
            quiet: Callable[[], bool]) -> dict[str, float] | None:
    """Best times of our candidates (taking turns, so that a change of load
    hits all alike), then of OpenBLAS's threads on their own (its workers
    keep spinning for a while after a call, which would slow whatever runs
    next; it gets its rounds only if one call already beats ours).
    Rounds count only when `quiet()` says the CPUs a candidate needs are
    idle as they start: None if too few were (a busy machine says nothing
    about what splitting gains)."""
    times = _best_times(ours, quiet)
    if times is None or openblas is None:
        return times
    openblas()   # untimed: starts OpenBLAS's threads
    ours_best = min(times.values())
    times["openblas"] = serial_seconds(openblas)
    if times["openblas"] < ours_best:
        threaded = _best_times({"openblas": openblas}, quiet)
        if threaded is None:
            return None
        times.update(threaded)
    return times


def _best_times(candidates: dict[str, Callable[[], None]],
                quiet: Callable[[], bool]) -> dict[str, float] | None:
    """Each candidate's best time over ROUNDS quiet rounds, after one
    untimed call each (first-call costs); None without enough quiet."""
    for run in candidates.values():
        run()
    best = {name: float("inf") for name in candidates}
    counted = 0
    for _ in range(MAX_ROUNDS):
        if counted == ROUNDS:
            return best
        if not quiet():
            time.sleep(QUIET_WAIT_SECONDS)
            continue
        for name, run in candidates.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
        counted += 1
    return best if counted == ROUNDS else None


def serial_seconds(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


# --- Remembering strategies -------------------------------------------------

_LOCK = threading.Lock()
_KNOWN: dict[str, Strategy] = {}
_LOADED_FROM: str | None = None


@functools.cache
def machine() -> dict:
    """What a strategy depends on besides the shape: the file's name is a
    hash of it, and the file records it for people reading it."""
    blas = openblas.find()
    return {"cpu": cpu_model(), "usable_cpus": usable_cpus(),
            "blas": blas.config if blas else None, "kernels": blas.corename if blas else None,
            "format": FORMAT}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cache_path() -> str:
    description = json.dumps(machine(), sort_keys=True)
    digest = hashlib.sha256(description.encode()).hexdigest()[:16]
    return os.path.join(codegen.cache_dir(), f"products-{digest}.json")


def lookup(key: str) -> Strategy | None:
    """The strategy kept for `key`, in this process or on disk."""
    with _LOCK:
        _load_file_once()
        return _KNOWN.get(key)


def remember(key: str, strategy: Strategy) -> None:
    """Keep `strategy` for `key`, and add it to the file (a failure to
    write only costs a later process the probe)."""
    with _LOCK:
        _KNOWN[key] = strategy
        try:
            _write_file()
        except OSError:
            pass


def forget_all() -> None:
    """Drop what this process knows (the file stays): tests, and a cache
    directory changed under a running process."""
    global _LOADED_FROM
    with _LOCK:
        _KNOWN.clear()
        _LOADED_FROM = None


def _load_file_once() -> None:
    global _LOADED_FROM
    path = cache_path()
    if _LOADED_FROM == path:
        return
    _LOADED_FROM = path
    for key, fields in _read(path).items():
        try:
            _KNOWN.setdefault(key, Strategy(**fields))
        except TypeError:
            continue


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            content = json.load(f)
    except (OSError, ValueError):
        return {}
    strategies = content.get("strategies") if isinstance(content, dict) else None
    return strategies if isinstance(strategies, dict) else {}


def _write_file() -> None:
    """Merge this process's strategies into the file; written under a
    temporary name and renamed, so a reader never sees half a file."""
    path = cache_path()
    merged = {**_read(path), **{key: asdict(s) for key, s in _KNOWN.items()}}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(handle, "w") as f:
        json.dump({"machine": machine(), "strategies": merged}, f, indent=1, sort_keys=True)
    os.replace(temporary, path)
