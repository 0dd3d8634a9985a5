"""Starting the processes of a multi-process job on this machine, bounded in time.

`run_job(...)` starts `num_processes` copies of tests/support/distributed_programs.py
(each `jax.distributed.initialize`s with a free loopback port), waits for
all of them at most `timeout` seconds (then kills what is left) and returns
each process's outcome. MPI and Gloo are kept on this machine: MPICH's UCX
moves data through shared memory only (`UCX_TLS=self,sm`, no network
interface), JAX's coordinator listens on 127.0.0.1, and the XLA CPU oracle
binds Gloo to `lo` (distributed_programs.use_loopback_gloo).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "distributed_programs.py")

# MPICH (the `mpich` wheel) on one machine, no network: UCX's shared memory.
LOOPBACK_MPI = {"UCX_TLS": "self,sm", "MPIR_CVAR_CH4_NETMOD": "ucx"}


def mpi_missing_reason() -> str | None:
    """Why multi-process pjrt-ref cannot run here, or None."""
    for module in ("mpi4py",):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[mpi]')"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Outcome:
    """One process's end: exit code (None: killed at the timeout) and output."""

    process_id: int
    returncode: int | None
    output: str
    seconds: float

    def describe(self) -> str:
        return (f"--- process {self.process_id}: exit {self.returncode} after "
                f"{self.seconds:.1f} s\n{self.output[-6000:]}")


def job_environment(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(LOOPBACK_MPI)
    env.pop("JAX_PLATFORMS", None)
    env.setdefault("PJRT_REF_COLLECTIVE_TIMEOUT", "60")
    env.update(extra or {})
    return env


def run_job(backend: str, num_processes: int, devices: int, out: str, *, timeout: float = 240,
            programs: str = "all", env: dict | None = None,
            extra_arguments: dict[int, list[str]] | None = None) -> list[Outcome]:
    """Run the job; every process's outcome (in process order)."""
    port = free_port()
    commands = [[sys.executable, PROGRAMS, "--backend", backend, "--process-id", str(process_id),
                 "--num-processes", str(num_processes), "--port", str(port),
                 "--devices", str(devices), "--out", out, "--programs", programs,
                 *(extra_arguments or {}).get(process_id, [])]
                for process_id in range(num_processes)]
    return _run_all(commands, job_environment(env), out, timeout)


def mpiexec_path() -> str | None:
    """The `mpiexec` of the MPI that mpi4py uses (the mpich wheel puts it beside python)."""
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside_python if os.access(beside_python, os.X_OK) else shutil.which("mpiexec")


def run_mpiexec_job(backend: str, num_processes: int, devices: int, out: str, *,
                    timeout: float = 240) -> Outcome:
    """`mpiexec -n P python distributed_programs.py ...`: JAX finds the processes
    through mpi4py (`cluster_detection_method="mpi4py"`), pjrt-ref's MPI transport
    uses MPI_COMM_WORLD. Hydra's control traffic stays on `lo` (HYDRA_IFACE), and
    JAX's coordinator on 127.0.0.1 (JAX_COORDINATOR_ADDRESS)."""
    environment = job_environment({"HYDRA_IFACE": "lo",
                                   "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{free_port()}"})
    command = [mpiexec_path(), "-n", str(num_processes), sys.executable, PROGRAMS,
               "--backend", backend, "--devices", str(devices), "--out", out]
    return _run_all([command], environment, out, timeout)[0]


def _run_all(commands: list[list[str]], environment: dict, out: str, timeout: float) -> list[Outcome]:
    """Start every command at once, each writing its output to a file (a pipe
    nobody reads could block a process that its peers wait for); wait for all
    of them at most `timeout` seconds in total, killing what is left."""
    os.makedirs(out, exist_ok=True)
    started = time.monotonic()
    running = []
    for index, command in enumerate(commands):
        log = open(os.path.join(out, f"output_{index}.log"), "w+")
        running.append((subprocess.Popen(command, env=environment, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT), log))
    return [_finish(index, process, log, started, timeout)
            for index, (process, log) in enumerate(running)]


def _finish(process_id: int, process: subprocess.Popen, log, started: float, timeout: float) -> Outcome:
    try:
        code = process.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        code = None
    log.seek(0)
    output = log.read()
    log.close()
    return Outcome(process_id, code, output, time.monotonic() - started)


def results(out: str, backend: str, num_processes: int) -> list[dict[str, np.ndarray]]:
    """Each process's saved results."""
    loaded = []
    for process_id in range(num_processes):
        with np.load(os.path.join(out, f"{backend}_{process_id}.npz")) as data:
            loaded.append({name: data[name] for name in data.files})
    return loaded


def check_all_succeeded(outcomes: list[Outcome]) -> None:
    failed = [o for o in outcomes if o.returncode != 0]
    assert not failed, "\n".join(o.describe() for o in failed)
