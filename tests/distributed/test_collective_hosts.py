"""Process grids spread over several hosts, without MPI (needs no extra).

`interpreter/process_hosts.py` lets a grid's processes live in
several OS processes; only the transport between them (pjrt-ref's is MPI,
`pjrt_ref/distributed/mpi_transport.py`) is outside the interpreter. Here
the "hosts" are threads of this process and the transport posts straight
into the other host's mail store, so the grid logic can be checked on its
own: the 2 x 2 grid of tests/support/collective_grid_cases.py split over
two hosts must give XLA CPU's results, and a host that never runs must fail
the other at the first collective, naming it. The topology exchange and
the per-process debugging files are checked here too.
"""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from tests.support.collective_grid_cases import ARGS, CASES, LOGICAL_IDS, MISMATCH, P, R, grid_program, run_on_xla_cpu
from pjrt_ref import process_files
from pjrt_ref.debug.profile import merge
from pjrt_ref.distributed import LocalStore
from pjrt_ref.distributed.topology_exchange import exchange_local_topologies, global_devices
from pjrt_ref.errors import DeadlineExceeded
from pjrt_ref.interpreter import load
from pjrt_ref.interpreter.process_grid import MailStore
from pjrt_ref.interpreter.process_hosts import HostPlacement
from pjrt_ref.model.multi_device import run_per_device

# (replica, partition) -> host: replica 0 on host 0, replica 1 on host 1.
HOSTS = {(r, p): r for r in range(R) for p in range(P)}


class InMemoryLinks:
    """The links of one host: a send posts into the receiving host's store."""

    def __init__(self, this_host: int, stores: list[MailStore]) -> None:
        self.this_host = this_host
        self.store = stores[this_host]
        self._stores = stores

    def send(self, host, namespace, key, value, readers) -> None:
        self._stores[host].post(namespace, key, value, readers)

    def fail(self, hosts, namespace, error_text) -> None:
        for host in hosts:
            self._stores[host].fail(namespace, error_text)


def run_on_hosts(program, arguments: dict, hosts: dict, running: list[int]) -> dict:
    """Each host in `running` runs its processes of `program` in its own thread;
    {host: its per-device results, or the exception it raised}."""
    stores = [MailStore() for _ in set(hosts.values())]
    outcomes: dict = {}

    def host(index: int) -> None:
        ids = [i for i in LOGICAL_IDS if hosts[i] == index]
        placement = HostPlacement(InMemoryLinks(index, stores), hosts, ("execution", 0))
        try:
            outcomes[index] = run_per_device(program, R, P, [arguments[i] for i in ids], ids, placement)
        except Exception as error:   # reported to the test
            outcomes[index] = error

    threads = [threading.Thread(target=host, args=(h,)) for h in running]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def test_a_grid_split_over_two_hosts_matches_xla_cpu():
    text = grid_program(CASES)
    expected = run_on_xla_cpu(text, ARGS)
    outcomes = run_on_hosts(load(text), dict(zip(LOGICAL_IDS, ARGS)), HOSTS, running=[0, 1])
    ours = outcomes[0] + outcomes[1]          # host 0 has replica 0, host 1 replica 1
    for d, (mine, theirs) in enumerate(zip(ours, expected)):
        for case, a, b in zip(CASES, mine, theirs):
            np.testing.assert_array_equal(a, b, err_msg=f"{case} on process {LOGICAL_IDS[d]}")


def test_a_host_that_never_runs_fails_the_other_naming_it(monkeypatch):
    monkeypatch.setenv("PJRT_REF_COLLECTIVE_TIMEOUT", "0.5")
    hosts = {(0, 0): 0, (1, 0): 1}
    x = np.ones(3, np.float32)
    # Replica 0 waits in MISMATCH's all_reduce; replica 1's host never starts.
    program = load(MISMATCH)
    stores = [MailStore(), MailStore()]
    placement = HostPlacement(InMemoryLinks(0, stores), hosts, ("execution", 0))
    with pytest.raises(DeadlineExceeded) as caught:
        run_per_device(program, 2, 1, [[x]], [(0, 0)], placement)
    message = str(caught.value)
    assert "stablehlo.all_reduce" in message and "model.py" in message
    assert "process (1, 0) (replica, partition) on host process 1" in message


def test_processes_agree_on_one_global_device_list():
    store, counts = LocalStore(), [2, 1, 3]
    seen: dict = {}

    def process(index: int) -> None:
        described = exchange_local_topologies(store, index, len(counts),
                                              {"process_index": index, "device_count": counts[index]}, 10)
        seen[index] = global_devices(described)

    threads = [threading.Thread(target=process, args=(i,)) for i in range(len(counts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen[0] == seen[1] == seen[2]
    assert [(d.id, d.process_index, d.local_index) for d in seen[0]] == [
        (0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 2, 0), (4, 2, 1), (5, 2, 2)]


def test_debugging_files_are_per_process_and_merge(tmp_path, monkeypatch):
    monkeypatch.setattr(process_files, "_PROCESS_INDEX", None)
    assert process_files.per_process("out/profile.json") == "out/profile.json"
    monkeypatch.setattr(process_files, "_PROCESS_INDEX", 3)
    assert process_files.per_process("out/profile.json") == "out/profile.process3.json"
    paths = []
    for index, origin in ((1, 2_000_000.0), (0, 1_000_000.0)):
        path = tmp_path / f"p{index}.json"
        path.write_text(json.dumps({"traceEvents": [
            {"name": "thread_name", "ph": "M", "pid": 99, "tid": 7, "args": {"name": "device"}},
            {"name": "all_reduce", "cat": "op", "ph": "X", "ts": 10.0, "dur": 5.0, "pid": 99, "tid": 7}],
            "otherData": {"origin_unix_us": origin, "process_index": index}}))
        paths.append(str(path))
    events = merge(paths)["traceEvents"]
    slices = {e["pid"]: e["ts"] for e in events if e["ph"] == "X"}
    assert slices == {0: 10.0, 1: 1_000_010.0}     # one clock: process 1 started 1 s later
    assert {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"} == {
        (0, "pjrt-ref process 0"), (1, "pjrt-ref process 1")}
