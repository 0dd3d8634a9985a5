"""The StableHLO process grid: processes as threads, and `interpreter.run_parallel`.

Spec section "Collective ops" (docs/spec.md) describes a grid of
`num_replicas x num_partitions` processes that exchange values. A program
run on its own is the one process `(0, 0)` of a 1x1 grid. The reference
interpreter's test harness op `interpreter.run_parallel` (openxla/stablehlo
`stablehlo/reference/InterpreterOps.td`) runs a grid of functions, one per
process; here each process is a thread that knows its `Process` through a
context variable, and the processes meet in the grid's `Mailbox`.

The grid also serves as the processes' host channel (see `side_effects`):
`infeed` pops the values made by the functions named in run_parallel's
`infeed` attribute, `outfeed` collects, and `send`/`recv` pass values through
one FIFO queue per channel id.
"""
from __future__ import annotations

import collections
import contextvars
import queue
import threading
from dataclasses import dataclass, field

from ...errors import DeadlineExceeded, InvalidArgument, PjrtRefError
from ..registry import register
from .side_effects import attach_host_channel

# How long a process waits for its peers before giving up (a program whose
# processes do not run matching collectives would otherwise hang).
WAIT_SECONDS = 120.0


class Mailbox:
    """Values posted under a key, each to be taken by a known number of readers."""

    def __init__(self):
        self._condition = threading.Condition()
        self._boxes: dict = {}
        self.failed: BaseException | None = None

    def post(self, key, value, readers: int) -> None:
        with self._condition:
            self._boxes[key] = [value, readers]
            self._condition.notify_all()

    def take(self, key, what: str):
        with self._condition:
            ready = self._condition.wait_for(
                lambda: key in self._boxes or self.failed is not None, WAIT_SECONDS)
            if self.failed is not None:
                raise InvalidArgument(f"{what}: another process failed: {self.failed}")
            if not ready:
                raise DeadlineExceeded(f"{what}: timed out waiting for another process")
            box = self._boxes[key]
            box[1] -= 1
            if box[1] == 0:
                del self._boxes[key]
            return box[0]

    def fail(self, error: BaseException) -> None:
        """Wake every waiting process: one of them failed."""
        with self._condition:
            self.failed = error
            self._condition.notify_all()


@dataclass
class ProcessGrid:
    """`num_replicas x num_partitions` processes and what they share."""

    num_replicas: int = 1
    num_partitions: int = 1
    infeed_queue: list = field(default_factory=list)
    outfeed_values: list = field(default_factory=list)
    mailbox: Mailbox = field(default_factory=Mailbox)
    _channels: dict = field(default_factory=lambda: collections.defaultdict(queue.Queue))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # HostChannel (see side_effects): what the grid's processes read and write.
    def infeed(self, config: str, result_types: tuple) -> list:
        with self._lock:
            if len(self.infeed_queue) < len(result_types):
                raise InvalidArgument("infeed: the infeed queue is empty")
            values, self.infeed_queue[:len(result_types)] = \
                self.infeed_queue[:len(result_types)], []
        return values

    def outfeed(self, config: str, values: list) -> None:
        with self._lock:
            self.outfeed_values.append(values)

    def send(self, channel_id: int, channel_type: int, is_host_transfer: bool,
             values: list) -> None:
        self._channels[channel_id].put(values)

    def recv(self, channel_id: int, channel_type: int, is_host_transfer: bool,
             result_types: tuple) -> list:
        try:
            return self._channels[channel_id].get(timeout=WAIT_SECONDS)
        except queue.Empty:
            raise DeadlineExceeded(f"recv: nothing was sent on channel {channel_id}") from None


@dataclass
class Process:
    """One process of a grid: its id `(replica_id, partition_id)`."""

    id: tuple[int, int]
    grid: ProcessGrid
    # How many times this process has run each collective (by key), so
    # that the n-th run meets the n-th run of its peers.
    runs: collections.Counter = field(default_factory=collections.Counter)

    def next_run(self, key) -> int:
        self.runs[key] += 1
        return self.runs[key]


_CURRENT_PROCESS: contextvars.ContextVar = contextvars.ContextVar("pjrt_ref_process",
                                                                  default=None)


def current_process() -> Process:
    """The running process; a program run on its own is (0, 0) of a 1x1 grid."""
    process = _CURRENT_PROCESS.get()
    return process if process is not None else Process((0, 0), ProcessGrid())


def run_process(process: Process, function, args: list) -> list:
    """Run `function` as `process` (in the calling thread)."""
    reset = _CURRENT_PROCESS.set(process)
    try:
        with attach_host_channel(process.grid):
            return function.run(args)
    finally:
        _CURRENT_PROCESS.reset(reset)


def _validate_run_parallel(op) -> None:
    programs = op.attrs.get("programs") or []
    if not programs or not programs[0] or any(len(row) != len(programs[0]) for row in programs):
        raise op.error("`programs` must be a non-empty grid of functions", cls=InvalidArgument)
    missing = [name for row in programs for name in row if name not in op.module.function_names]
    if missing:
        raise op.error(f"no function @{missing[0]} in the program", cls=InvalidArgument)


@register("interpreter.run_parallel", validate=_validate_run_parallel)
def run_parallel(op, *inputs):
    """`interpreter.run_parallel`: run `programs[r][p]` as process (r, p).

    `inputs` and the results are the processes' arguments and results in
    row-major process order. Each process runs in its own thread.
    """
    programs = op.attrs["programs"]
    grid = ProcessGrid(len(programs), len(programs[0]))
    for name in op.attrs.get("infeed") or []:
        grid.infeed_queue.extend(op.module.function(name).run([]))
    jobs, remaining = [], list(inputs)
    for r, row in enumerate(programs):
        for p, name in enumerate(row):
            function = op.module.function(name)
            count = len(function.input_types)
            jobs.append((Process((r, p), grid), function, remaining[:count]))
            remaining = remaining[count:]
    outcomes: list = [None] * len(jobs)

    def work(index: int) -> None:
        process, function, args = jobs[index]
        try:
            outcomes[index] = run_process(process, function, args)
        except BaseException as error:  # reported below, after every thread ends
            outcomes[index] = error
            grid.mailbox.fail(error)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        first = next((e for e in errors if "another process failed" not in str(e)), errors[0])
        if isinstance(first, PjrtRefError):
            raise first
        raise op.error(f"a process failed: {type(first).__name__}: {first}") from first
    results = [value for outcome in outcomes for value in outcome]
    return results[0] if len(op.result_types) == 1 else tuple(results)
