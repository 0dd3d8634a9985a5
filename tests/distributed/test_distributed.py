"""Multi-process pjrt-ref (JAX multi-controller) against XLA CPU's multi-process run.

Each test starts P processes on this machine (tests/support/distributed_launch.py),
each running tests/support/distributed_programs.py: pmap collectives over every
device, jax.jit over global NamedShardings, shard_map collectives, and a
data-parallel training loop. The expected values are XLA CPU's own
multi-process run of the same programs (Gloo collectives); pjrt-ref's
multi-process run must also equal, bit for bit, pjrt-ref's single-process
run of the same programs on as many devices (the process grid's semantics
do not depend on where the devices live).

P = 2 runs by default; P = 4 only with PJRT_REF_SLOW_TESTS=1 (each job
starts 4 JAX processes on a 2-core machine).
"""
from __future__ import annotations

import numpy as np
import pytest

from pjrt_ref import settings
from tests.support.distributed_launch import (check_all_succeeded, mpi_missing_reason, mpiexec_path,
                                              results, run_job, run_mpiexec_job)

pytestmark = [pytest.mark.skipif(mpi_missing_reason() is not None,
                                 reason=f"multi-process pjrt-ref needs the [mpi] extra: {mpi_missing_reason()}"),
              pytest.mark.slow]

SLOW = pytest.mark.skipif(not settings.get("PJRT_REF_SLOW_TESTS"),
                          reason="4-process jobs run with PJRT_REF_SLOW_TESTS=1")
JOBS = [pytest.param(2, 1, id="P2-D1"), pytest.param(2, 2, id="P2-D2"),
        pytest.param(4, 1, id="P4-D1", marks=SLOW), pytest.param(4, 2, id="P4-D2", marks=SLOW)]

_RUNS: dict = {}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """job(backend, P, D, single=False) -> each process's results, run once per module.
    `single`: pjrt-ref in ONE process with P x D devices, running the P-process programs."""
    def run(backend: str, num_processes: int, devices: int, single: bool = False):
        key = (backend, num_processes, devices, single)
        if key not in _RUNS:
            out = str(tmp_path_factory.mktemp(f"{backend}-P{num_processes}-D{devices}-{single}"))
            if single:
                outcomes = run_job(backend, 1, num_processes * devices, out,
                                   extra_arguments={0: ["--mesh-rows", str(num_processes)]})
            else:
                outcomes = run_job(backend, num_processes, devices, out)
            check_all_succeeded(outcomes)
            _RUNS[key] = results(out, backend, len(outcomes))
        return _RUNS[key]
    return run


@pytest.mark.parametrize("num_processes,devices", JOBS)
def test_every_process_matches_xla_cpu(job, num_processes, devices):
    expected = job("cpu", num_processes, devices)
    ours = job("pjrt_ref", num_processes, devices)
    for process_id, (theirs, mine) in enumerate(zip(expected, ours)):
        assert sorted(mine) == sorted(theirs)
        for name in theirs:
            # XLA may sum a group's values in another order: a few ulps.
            np.testing.assert_allclose(mine[name], theirs[name], rtol=2e-6, atol=1e-6,
                                       err_msg=f"process {process_id}: {name}")


@pytest.mark.parametrize("num_processes,devices", JOBS)
def test_training_losses_agree_in_every_process(job, num_processes, devices):
    losses = [process["train/losses"] for process in job("pjrt_ref", num_processes, devices)]
    every_device = np.concatenate(losses, axis=1)        # steps x devices
    assert np.all(every_device == every_device[:, :1]), every_device
    assert np.all(np.diff(every_device[:, 0]) < 0), "SGD lowers the loss"


@pytest.mark.parametrize("num_processes,devices", JOBS)
def test_processes_together_equal_the_single_process_run(job, num_processes, devices):
    single = job("pjrt_ref", num_processes, devices, single=True)[0]
    spread = job("pjrt_ref", num_processes, devices)
    for name, value in single.items():
        joined = np.concatenate([process[name] for process in spread],
                                axis=1 if name == "train/losses" else 0)
        np.testing.assert_array_equal(joined, value, err_msg=name)


@pytest.mark.skipif(mpiexec_path() is None, reason="no mpiexec (the mpich wheel brings one)")
def test_a_job_launched_by_mpiexec_matches_xla_cpu(job, tmp_path):
    """`mpiexec -n 2 python ...`: the processes meet in MPI_COMM_WORLD."""
    outcome = run_mpiexec_job("pjrt_ref", 2, 2, str(tmp_path))
    check_all_succeeded([outcome])
    for process_id, (theirs, mine) in enumerate(zip(job("cpu", 2, 2), results(str(tmp_path), "pjrt_ref", 2))):
        for name in theirs:
            np.testing.assert_allclose(mine[name], theirs[name], rtol=2e-6, atol=1e-6,
                                       err_msg=f"process {process_id}: {name}")


# ------------------------------------------------------------------- faults
# Promises checked by what each process reports (which wait ended, and why),
# never by how long a step took on this machine: the only wall-clock facts
# asserted are that a collective's timeout does not fire before it is due.
FAULT_TIMEOUT = 5.0      # PJRT_REF_COLLECTIVE_TIMEOUT of the fault jobs, seconds
TIMED_OUT = f"timed out after {FAULT_TIMEOUT:g} s"


def run_fault(tmp_path, fault: str, collective_timeout: float = FAULT_TIMEOUT):
    """A 2-process job whose process 1 spoils a psum (distributed_programs.fault_program);
    each process's (exit code, seconds its execution took to fail, output). The
    job's 120 s limit is a hang guard only."""
    outcomes = run_job("pjrt_ref", 2, 1, str(tmp_path), timeout=120,
                       env={"PJRT_REF_COLLECTIVE_TIMEOUT": str(collective_timeout)},
                       extra_arguments={0: ["--fault", fault], 1: ["--fault", fault]})
    return [(o.returncode, _seconds_to_fail(o.output), o.output) for o in outcomes]


def _seconds_to_fail(output: str) -> float | None:
    for line in output.splitlines():
        if line.startswith("FAILED after "):
            return float(line.split()[2])
    return None


def _error_code(output: str) -> str | None:
    """The code of the error the process's execution failed with ("FAILED after
    S s: CODE: message"): its own, whatever other process's error it quotes."""
    for line in output.splitlines():
        if line.startswith("FAILED after "):
            return line.split(": ", 2)[1]
    return None


def test_a_process_that_dies_fails_its_peer_at_the_collective_timeout(tmp_path):
    (code, seconds, output), (code_1, _, output_1) = run_fault(tmp_path, "die")
    assert code == 1 and code_1 == 0, output + output_1
    assert seconds >= FAULT_TIMEOUT, output          # the wait is not cut short
    for part in ("DEADLINE_EXCEEDED", "'stablehlo.all_reduce' at ", "distributed_programs.py", TIMED_OUT,
                 "waiting for process (0, 1) (replica, partition) on host process 1"):
        assert part in output, (part, output)


def test_a_late_process_fails_both(tmp_path):
    """Process 1 reaches the psum only after process 0 gave up waiting for it
    (forced: it waits for process 0's end). Process 0 times out; process 1
    hears of that failure when it arrives instead of waiting out a timeout."""
    (code_0, seconds_0, output_0), (code_1, _, output_1) = run_fault(tmp_path, "late")
    assert code_0 == code_1 == 1, output_0 + output_1
    assert seconds_0 >= FAULT_TIMEOUT, output_0
    assert TIMED_OUT in output_0, output_0
    assert "waiting for process (0, 1) (replica, partition) on host process 1" in output_0, output_0
    assert "another process failed: host process 0" in output_1, output_1
    assert _error_code(output_0) == "DEADLINE_EXCEEDED", output_0
    assert _error_code(output_1) not in (None, "DEADLINE_EXCEEDED"), output_1   # it did not wait


def test_processes_with_different_shapes_at_one_collective_fail_naming_both(tmp_path):
    """Both fail on the shapes they bring, not by waiting out the timeout. (The
    timeout is long here: on a loaded machine one process may reach the
    collective seconds after the other, which is no fault of this test's.)"""
    outcomes = run_fault(tmp_path, "mismatch", collective_timeout=90.0)
    for code, seconds, output in outcomes:
        assert code == 1 and seconds is not None, output
        assert _error_code(output) not in (None, "DEADLINE_EXCEEDED") and "timed out after" not in output, output
    # The devices' argument shards meet first (pjrt_ref/spmd/partitioner.py): that is where
    # the different shapes show.
    message = outcomes[0][2]
    for part in ("gathering the argument shards", "argument 0",
                 "process (0, 1) (replica, partition) on host process 1 brought float32[6, 3]",
                 "process (0, 0) (replica, partition) on host process 0 runs a program that takes "
                 "float32[4, 3]", "do not run the same program"):
        assert part in message, (part, message)


# ---------------------------------------------------------------- debugging
def test_trace_and_profile_write_a_file_per_process_and_merge(tmp_path):
    """PJRT_REF_TRACE / PJRT_REF_PROFILE in a 2-process job (2 devices each): one
    file per process; `pjrt-ref profile` merges the profiles into one Chrome
    trace with a row group per process and a row per device."""
    import json
    import subprocess
    import sys

    outcomes = run_job("pjrt_ref", 2, 2, str(tmp_path / "out"), programs="shard_map",
                       env={"PJRT_REF_TRACE": str(tmp_path / "trace.jsonl"),
                            "PJRT_REF_PROFILE": str(tmp_path / "profile.json")})
    check_all_succeeded(outcomes)
    for process_id in (0, 1):
        lines = (tmp_path / f"trace.process{process_id}.jsonl").read_text().splitlines()
        assert any(json.loads(line)["op"] == "stablehlo.all_reduce" for line in lines)
    profiles = [str(tmp_path / f"profile.process{i}.json") for i in (0, 1)]
    merged_path = tmp_path / "merged.json"
    report = subprocess.run([sys.executable, "-m", "pjrt_ref.cli.main", "profile", *profiles,
                             "--merged", str(merged_path)], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "stablehlo.all_reduce" in report.stdout
    events = json.loads(merged_path.read_text())["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M"}
    assert {(0, "pjrt-ref process 0"), (1, "pjrt-ref process 1")} <= names
    device_rows = {(0, "pjrt_ref process (0, 0)"), (0, "pjrt_ref process (0, 1)"),
                   (1, "pjrt_ref process (0, 2)"), (1, "pjrt_ref process (0, 3)")}
    assert device_rows <= names, names
    reduced_in = {e["pid"] for e in events if e["ph"] == "X" and e["name"] == "all_reduce"}
    assert reduced_in == {0, 1}
