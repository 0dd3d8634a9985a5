"""Hosts written in C run a StableHLO program through our plugin.

A plain C program (no Python of its own): the library starts Python itself
(cffi embedding), finds pjrt_ref, compiles `x + y` on f32[4], executes it and
reads the result back. And a Python host that keeps its GIL while another
thread runs that program, as PyTorch/XLA does (issue 35's deadlock).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import pjrt_ref
from tests.support.repo_paths import DATA


SOURCES = DATA / "c_host"


@pytest.fixture(scope="module")
def build_c(tmp_path_factory):
    """Compiles C files of tests/data/c_host against pjrt-ref's header."""
    from pjrt_ref.capi_shim.build_shim import full_header

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("no C compiler (cc) on PATH")
    build = tmp_path_factory.mktemp("c_host")
    (build / "pjrt_ref_api.h").write_text(full_header())

    def build_c(output: str, sources: list[str], flags: list[str] = ()) -> str:
        target = str(build / output)
        subprocess.run([compiler, "-std=c11", "-Wall", "-Werror", "-I", str(build), *flags,
                        *(str(SOURCES / name) for name in sources), "-ldl", "-lpthread",
                        "-o", target], check=True)
        return target
    return build_c


@pytest.fixture(scope="module")
def host_binary(build_c) -> str:
    return build_c("host", ["host.c", "add_program.c"])


@pytest.fixture(scope="module")
def gil_holder(build_c) -> str:
    return build_c("gil_holder.so", ["gil_holder.c", "add_program.c"], ["-shared", "-fPIC"])


def _host_environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("JAX_")}
    env.update(extra)
    return env


@pytest.mark.parametrize("runtime", ["shared", "isolated"])
def test_c_host_runs_add(host_binary, runtime):
    """The shim itself, and the library that loads it into a namespace of its
    own (what `pjrt-ref library-path` prints): a C host meets both."""
    proc = subprocess.run([host_binary, pjrt_ref.library_path(runtime)], env=_host_environment(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "PJRT API 0.114" in proc.stdout
    assert "platform pjrt_ref" in proc.stdout
    assert "result 11 22 33 44" in proc.stdout
    assert proc.stdout.strip().endswith("ok")


GIL_HOLDING_HOST = """
import ctypes, sys
holder = ctypes.PyDLL(sys.argv[1])      # PyDLL: the GIL stays held for the whole call
holder.run_add_program_on_a_thread.argtypes = [ctypes.c_char_p]
print("status", holder.run_add_program_on_a_thread(sys.argv[2].encode()), flush=True)
"""


def test_isolated_runtime_answers_a_thread_while_the_host_holds_the_gil(gil_holder):
    """Issue 35's deadlock, reproduced without PyTorch/XLA: the host's main
    thread holds the GIL and waits for another thread that loads the plugin,
    compiles, executes and reads back. The isolated runtime's entry points
    take only the plugin's own GIL, so the program completes."""
    proc = subprocess.run([sys.executable, "-c", GIL_HOLDING_HOST, gil_holder,
                           pjrt_ref.library_path("isolated")],
                          env=_host_environment(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "result 11 22 33 44" in proc.stdout
    assert "status 0" in proc.stdout


def test_shared_runtime_names_the_stall_when_the_host_holds_the_gil(gil_holder):
    """The same host with the shim in the host's own Python: the thread's
    first entry point, GetPjrtApi, waits for the GIL the main thread never
    releases. The hang detector names the entry point, the threads and the
    way out; the test then ends the deadlocked process."""
    with pytest.raises(subprocess.TimeoutExpired) as deadlocked:
        subprocess.run([sys.executable, "-c", GIL_HOLDING_HOST, gil_holder, pjrt_ref.shim_path()],
                       env=_host_environment(PJRT_REF_GIL_STALL="1"), capture_output=True, timeout=8)
    report = (deadlocked.value.stderr or b"").decode(errors="replace")
    assert "GetPjrtApi on thread" in report and "has waited" in report, report
    assert "Threads inside pjrt-ref's entry points" in report, report
    assert "PJRT_REF_RUNTIME=isolated" in report, report
