"""Moving collective data between processes over MPI (mpi4py).

Why MPI: XLA's CPU client sends cross-process collective data through a
maintained library (Gloo or MPI, `xla/backends/cpu/collectives/`), never a
protocol of its own, and so does pjrt-ref. mpi4py with the `mpich` wheel
installs from PyPI on its own (`pip install pjrt-ref[mpi]`), runs unchanged
on a laptop and under a cluster's `mpiexec`, and its Python API keeps the
transport readable.

Connecting (`connect`). Two ways, chosen the same way by every process
from the facts they exchanged in the topology (`local_facts`):
- launched together (`mpiexec -n P python train.py`): MPI_COMM_WORLD
  already holds the P processes; it is split so that rank i is process i;
- started on their own (each process runs `jax.distributed.initialize`
  with explicit arguments): every process is an MPI "singleton" and they
  join through an MPI port: process 0 opens one (MPI_Open_port) and puts
  its name in the key-value store, the others connect one at a time
  (MPI_Comm_connect / MPI_Comm_accept), each merge (MPI_Intercomm_merge)
  adding one process. (With MPICH 5.0.x singletons cannot connect, its
  issue pmodels/mpich#7805: the extra pins `mpich<5`.)

Moving values (`MpiTransport`). A value for another host is pickled by the
thread that posts it and queued; one progress thread per process does
every MPI call: it starts the queued sends (MPI_Isend), completes them, and
receives whatever arrives (MPI_Improbe + MPI_Mrecv), posting each value
into this process's mail store, where the grid's threads take it. Because
receiving never waits for a reader, a sender never blocks on a busy peer,
and a reader's wait is bounded by the grid's timeout
(PJRT_REF_COLLECTIVE_TIMEOUT), not by MPI.
"""
from __future__ import annotations

import atexit
import pickle
import queue
import threading
import time

from pjrt_ref.errors import DeadlineExceeded, FailedPrecondition, Internal, Unavailable

# Every message of the transport carries this tag on its communicator.
_TAG = 1606
# The progress thread polls for messages every POLL_SECONDS when idle
# (MPI has no portable blocking receive that a thread can also leave).
POLL_SECONDS = 0.001


def import_mpi():
    """mpi4py's MPI module (initializing MPI), or why it cannot be had."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise FailedPrecondition(
            "pjrt-ref runs several processes over MPI, and mpi4py is not installed "
            f"({error}); install the extra: pip install 'pjrt-ref[mpi]'") from None
    return MPI


def local_facts(MPI) -> dict:
    """What the processes must know of each other's MPI to connect the same way."""
    return {"mpi_world_size": MPI.COMM_WORLD.Get_size(),
            "mpi_library": MPI.Get_library_version().splitlines()[0].strip()}


def connect(MPI, store, process_index: int, num_processes: int, descriptions: list[dict],
            timeout_seconds: float):
    """An intra-communicator of the `num_processes` processes, rank i = process i."""
    if all(d["mpi_world_size"] == num_processes for d in descriptions):
        return MPI.COMM_WORLD.Split(0, process_index)       # launched by mpiexec
    try:
        return _bounded(lambda: join_through_port(MPI, store, process_index, num_processes,
                                                  timeout_seconds),
                        timeout_seconds, "connecting the processes through an MPI port")
    except MPI.Exception as error:
        raise Unavailable(
            f"connecting the processes through an MPI port failed ({MPI.Get_library_version().splitlines()[0]}): "
            f"{error}. Processes started on their own need an MPI whose singletons can connect: "
            "the `mpich` wheel before 5.0 (5.0.x cannot, pmodels/mpich#7805; Open MPI's wheel "
            "needs a PMIx server); or start them together with mpiexec") from None


def join_through_port(MPI, store, process_index: int, num_processes: int,
                      timeout_seconds: float):
    """Singletons connect one by one to the port process 0 opened.

    The processes that already joined accept the next one together; process
    k connects only once process 0 has put `mpi/joined/{k-1}`, so process k
    gets rank k of the merged communicator.
    """
    if process_index == 0:
        port = MPI.Open_port()
        store.put("mpi/port", port.encode())
        store.put("mpi/joined/0", b"")
        comm = MPI.COMM_SELF
    else:
        port = store.get("mpi/port", timeout_seconds).decode()
        store.get(f"mpi/joined/{process_index - 1}", timeout_seconds)
        comm = _merged(MPI.COMM_SELF.Connect(port), high=True)
    while comm.Get_size() < num_processes:
        joined = _merged(comm.Accept(port if process_index == 0 else None, root=0), high=False)
        if comm is not MPI.COMM_SELF:
            comm.Free()
        comm = joined
        if process_index == 0:
            store.put(f"mpi/joined/{comm.Get_size() - 1}", b"")
    if process_index == 0:
        MPI.Close_port(port)
    return comm


def _merged(intercomm, high: bool):
    comm = intercomm.Merge(high=high)
    intercomm.Free()
    return comm


def _bounded(work, timeout_seconds: float, what: str):
    """`work()` in a helper thread, given up after `timeout_seconds` (MPI's
    connect and accept cannot be interrupted, and a peer that died before
    connecting must not hang this process)."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as error:       # reported in the calling thread
            outcome.append((False, error))

    thread = threading.Thread(target=run, daemon=True, name="pjrt_ref MPI connect")
    thread.start()
    thread.join(timeout_seconds)
    if not outcome:
        raise DeadlineExceeded(f"{what}: not done after {timeout_seconds:g} s (a process "
                               "never connected)")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


class MpiTransport:
    """The links of pjrt-ref's multi-host process grids (see
    `interpreter/process_hosts.py`) over an MPI communicator."""

    def __init__(self, MPI, comm, store) -> None:
        self.MPI = MPI
        self.comm = comm
        self.this_host = comm.Get_rank()
        self.num_hosts = comm.Get_size()
        self.store = store                        # a process_grid.MailStore
        self.broken: BaseException | None = None
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._in_flight: list = []                # (request, bytes) until the send completes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._progress, daemon=True,
                                        name=f"pjrt_ref MPI transport (host {self.this_host})")
        self._thread.start()
        atexit.register(self.close)               # before mpi4py's MPI_Finalize (atexit is LIFO)

    # -- the links interface ----------------------------------------------------
    def send(self, host: int, namespace, key, value, readers: int) -> None:
        """Post `value` under `key` for `readers` readers on `host` (asynchronously)."""
        self._queue(host, ("value", namespace, key, value, readers))

    def fail(self, hosts: list[int], namespace, error_text: str) -> None:
        """Fail `namespace` on `hosts`: their readers stop waiting."""
        for host in hosts:
            self._queue(host, ("fail", namespace, error_text))

    def _queue(self, host: int, message: tuple) -> None:
        if self.broken is not None:
            raise Internal(f"the MPI transport failed earlier: {self.broken}")
        # Pickled now, by the sender: the value may change once the op returns.
        self._outbox.put((host, pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)))

    # -- the progress thread ------------------------------------------------------
    def _progress(self) -> None:
        try:
            while not self._stop.is_set():
                if not (self._start_sends() | self._finish_sends() | self._receive()):
                    time.sleep(POLL_SECONDS)
        except BaseException as error:           # an MPI failure: every reader must hear it
            self.broken = error
            self.store.fail_all(f"the MPI transport of host process {self.this_host} failed: "
                                f"{type(error).__name__}: {error}")

    def _start_sends(self) -> bool:
        started = False
        while True:
            try:
                host, data = self._outbox.get_nowait()
            except queue.Empty:
                return started
            request = self.comm.Isend([data, self.MPI.BYTE], dest=host, tag=_TAG)
            self._in_flight.append((request, data))
            started = True

    def _finish_sends(self) -> bool:
        before = len(self._in_flight)
        self._in_flight = [(r, d) for r, d in self._in_flight if not r.Test()]
        return len(self._in_flight) != before

    def _receive(self) -> bool:
        received = False
        status = self.MPI.Status()
        while True:
            message = self.comm.Improbe(source=self.MPI.ANY_SOURCE, tag=_TAG, status=status)
            if message is None:
                return received
            data = bytearray(status.Get_count(self.MPI.BYTE))
            message.Recv([data, self.MPI.BYTE])
            self._deliver(pickle.loads(data))
            received = True

    def _deliver(self, message: tuple) -> None:
        if message[0] == "value":
            _, namespace, key, value, readers = message
            self.store.post(namespace, key, value, readers)
        else:
            _, namespace, error_text = message
            self.store.fail(namespace, error_text)

    # -- shutdown -------------------------------------------------------------------
    def close(self, drain_seconds: float = 2.0) -> None:
        """Stop the progress thread once queued sends went out (or `drain_seconds` passed)."""
        deadline = time.monotonic() + drain_seconds
        while (not self._outbox.empty() or self._in_flight) and time.monotonic() < deadline \
                and self._thread.is_alive():
            time.sleep(POLL_SECONDS)
        self._stop.set()
        self._thread.join(drain_seconds)
