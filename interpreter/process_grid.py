"""The StableHLO process grid: processes as threads that exchange values.

Spec section "Collective ops" (docs/spec.md) describes a grid of
`num_replicas x num_partitions` processes that exchange values. A program
run on its own is the one process `(0, 0)` of a 1x1 grid. The reference
interpreter's test harness op `interpreter.run_parallel` (openxla/stablehlo
`stablehlo/reference/InterpreterOps.td`) runs a grid of functions, one per
process; here each process is a thread that knows its `Process` through a
context variable, and the processes meet in the grid's `Mailbox`.

The grid also serves as the processes' host channel (ops/side_effects.py):
`infeed` pops the values made by the functions named in run_parallel's
`infeed` attribute, `outfeed` collects, and `send`/`recv` pass values through
one FIFO queue per channel id.

This is runtime, not an op family: the collective ops (ops/collective.py)
and `interpreter.run_parallel` (ops/run_parallel.py) use it, and so do the
layers that run programs on several devices (model/multi_device.py, spmd/),
as StableHLO keeps `Process.h` and `ProcessGrid.h` beside its ops.
"""
from __future__ import annotations

import collections
import contextvars
import queue
import threading
from dataclasses import dataclass, field
from typing import Callable

from pjrt_ref import settings
from pjrt_ref.errors import DeadlineExceeded, InvalidArgument, PjrtRefError

# How long a process waits for its peers before giving up (a program whose
# processes do not run matching collectives would otherwise hang).
# PJRT_REF_COLLECTIVE_TIMEOUT (seconds) overrides it for grids made later.
WAIT_SECONDS = settings.default("PJRT_REF_COLLECTIVE_TIMEOUT")


def collective_timeout() -> float:
    """Seconds a process waits at a collective: PJRT_REF_COLLECTIVE_TIMEOUT, read at each call."""
    return settings.get("PJRT_REF_COLLECTIVE_TIMEOUT")


class MailStore:
    """Values posted under keys, each to be taken by a known number of readers.

    One store can serve many grids, each in its own namespace: the grids of
    an OS process whose programs span several processes share the store
    their transport delivers remote values into (see `process_hosts`).
    A namespace marked failed wakes its readers with that error.
    """

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.boxes: dict = {}
        self.failures: dict = {}        # namespace -> the error that failed it
        self.broken = None              # an error that fails every namespace (a dead transport)

    def post(self, namespace, key, value, readers: int) -> None:
        with self.condition:
            self.boxes[(namespace, key)] = [value, readers]
            self.condition.notify_all()

    def fail(self, namespace, error) -> None:
        with self.condition:
            self.failures.setdefault(namespace, error)
            self.condition.notify_all()

    def fail_all(self, error) -> None:
        with self.condition:
            self.broken = error
            self.condition.notify_all()


class Mailbox:
    """A grid's view of a `MailStore`: its namespace, its timeout.

    A reader that waits longer than `timeout` seconds gets DEADLINE_EXCEEDED
    (a peer never arrived); once any process fails, every waiting reader
    wakes up with an error instead of waiting out its timeout.
    """

    def __init__(self, timeout: float | None = None, store: MailStore | None = None,
                 namespace: tuple = ()):
        self.store = store if store is not None else MailStore()
        self.namespace = namespace
        self.timeout = WAIT_SECONDS if timeout is None else timeout

    @property
    def failed(self) -> BaseException | None:
        return self.store.failures.get(self.namespace) or self.store.broken

    def post(self, key, value, readers: int) -> None:
        self.store.post(self.namespace, key, value, readers)

    def take(self, key, what: str, op=None, waiting_for: str = "another process"):
        """The value posted under `key`; `what`/`op` name the waiting op in errors."""
        store, full_key = self.store, (self.namespace, key)
        with store.condition:
            ready = store.condition.wait_for(
                lambda: full_key in store.boxes or self.failed is not None, self.timeout)
            if self.failed is not None:
                raise _error(op, what, f"another process failed: {self.failed}", InvalidArgument)
            if not ready:
                raise _error(op, what, f"timed out after {self.timeout:g} s waiting for "
                             f"{waiting_for} (it never arrived at this collective; set "
                             f"PJRT_REF_COLLECTIVE_TIMEOUT to wait longer)", DeadlineExceeded)
            box = store.boxes[full_key]
            box[1] -= 1
            if box[1] == 0:
                del store.boxes[full_key]
            return box[0]

    def fail(self, error: BaseException) -> None:
        """Wake every waiting process: one of them failed."""
        self.store.fail(self.namespace, error)


def _error(op, what: str, message: str, cls) -> PjrtRefError:
    if op is not None:
        return op.error(message, cls=cls)
    return cls(f"{what}: {message}")


@dataclass
class ProcessGrid:
    """`num_replicas x num_partitions` processes and what they share.

    `placement` (see `process_hosts`) is set when the grid's processes
    live in several OS processes ("hosts", JAX's multi-controller mode):
    only this host's processes run here, and values for the others travel
    through the placement's transport. Without it every process is local.
    """

    num_replicas: int = 1
    num_partitions: int = 1
    infeed_queue: list = field(default_factory=list)
    outfeed_values: list = field(default_factory=list)
    placement: object = None
    mailbox: Mailbox = None
    _channels: dict = field(default_factory=lambda: collections.defaultdict(queue.Queue))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.mailbox is None:
            self.mailbox = (self.placement.mailbox(collective_timeout()) if self.placement is not None
                            else Mailbox(collective_timeout()))

    def is_local(self, process_id) -> bool:
        """Whether process `process_id` runs in this OS process."""
        return self.placement is None or self.placement.is_local(process_id)

    def share(self, key, value, readers: list) -> None:
        """Post `value` under `key` for the processes `readers` (each takes it once),
        wherever they run."""
        if self.placement is None:
            self.mailbox.post(key, value, readers=len(readers))
        else:
            self.placement.share(self.mailbox, key, value, readers)

    def fail(self, error: BaseException) -> None:
        """Wake every process of the grid, here and on other hosts: one of them failed."""
        if self.mailbox.failed is not None:     # already failed (this is a peer's echo)
            return
        self.mailbox.fail(error)
        if self.placement is not None:
            self.placement.fail_elsewhere(error)

    def describe(self, process_id) -> str:
        """`process (r, p)`, with its host when the grid spans several."""
        text = f"process {tuple(process_id)} (replica, partition)"
        return text if self.placement is None else text + self.placement.where(process_id)

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
            return self._channels[channel_id].get(timeout=self.mailbox.timeout)
        except queue.Empty:
            raise DeadlineExceeded(f"recv: nothing was sent on channel {channel_id}") from None


@dataclass
class Process:
    """One process of a grid: its id `(replica_id, partition_id)`.

    `standalone` marks the implicit process of a program run on its own
    (no grid was set up by `run_processes` or `run_parallel`).
    """

    id: tuple[int, int]
    grid: ProcessGrid
    standalone: bool = False
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
    return process if process is not None else Process((0, 0), ProcessGrid(), standalone=True)


def run_as(process: Process, work: Callable[[], list]) -> list:
    """Call `work()` with `process` as the current process (in the calling thread)."""
    reset = _CURRENT_PROCESS.set(process)
    try:
        return work()
    finally:
        _CURRENT_PROCESS.reset(reset)


def run_processes(grid: ProcessGrid, jobs: list[tuple[Process, Callable[[], list]]]) -> list[list]:
    """Run every job's `work()` at once, one thread per process; their results in order.

    This is how several devices execute one program: each thread is one
    process of `grid` and the threads meet in its mailbox at each
    collective. If a process fails, the others are woken (they fail too,
    with "another process failed") and the first real error is raised once
    every thread has ended; a process that never reaches a collective makes
    its peers fail with DEADLINE_EXCEEDED after the grid's timeout.
    """
    outcomes: list = [None] * len(jobs)

    def work(index: int) -> None:
        process, job = jobs[index]
        try:
            outcomes[index] = run_as(process, job)
        except BaseException as error:  # reported below, after every thread ends
            outcomes[index] = error
            grid.fail(error)

    # Each thread starts from a copy of the caller's context (host channel,
    # settings held in context variables), then sets its own process.
    threads = [threading.Thread(target=contextvars.copy_context().run, args=(work, i), daemon=True,
                                name=f"pjrt_ref process {jobs[i][0].id}") for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException as interrupted:   # Ctrl-C while waiting: wake the processes, then stop
        grid.fail(interrupted)
        raise
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        raise first_error(errors)
    return outcomes


def first_error(errors: list[BaseException]) -> BaseException:
    """The error that made the grid fail (not a peer's "another process failed")."""
    return next((e for e in errors if "another process failed" not in str(e)), errors[0])
