"""The recording proxy (capi_shim/recording_proxy.c) in front of a real plugin, driven by JAX."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

from tests.support.jax_support import clean_env

import pjrt_ref
from pjrt_ref import recording_proxy_path
from pjrt_ref.testkit.plugin import parse_plugin, recording_environment
from pjrt_ref.testkit.records import read_records

PROGRAM = """
import os
import jax, numpy as np
f = jax.jit(lambda x, y: x * y + 1)
x = np.arange(6, dtype=np.float32).reshape(2, 3)
os.environ["PJRT_REF_RECORD_TEST"] = "t.py::first"
print(f(x, np.float32(3)).sum())
os.environ["PJRT_REF_RECORD_TEST"] = "t.py::second"
print(f(x, np.float32(4)).sum())        # jaxlib's C++ dispatch path: still through the table
del os.environ["PJRT_REF_RECORD_TEST"]
print(f(x, np.float32(5)).sum())        # outside any test: not kept
"""


def run_recorded(tmp_path, code: str, **extra: str) -> subprocess.CompletedProcess:
    plugin = parse_plugin(f"recorded={pjrt_ref.library_path('isolated')}")
    env = recording_environment(plugin, clean_env(), str(tmp_path))
    env.update(JAX_PLATFORMS="recorded", **extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=180, cwd=tmp_path)


def test_every_execution_inside_a_test_is_kept_with_its_program_and_arguments(tmp_path):
    done = run_recorded(tmp_path, PROGRAM)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["51.0", "66.0", "81.0"]
    records = read_records(str(tmp_path))
    assert records.tests() == ["t.py::first", "t.py::second"]
    first_programs, first_runs = records.of_test("t.py::first")
    second_programs, second_runs = records.of_test("t.py::second")
    jitted = first_runs[0]                   # then the .sum() of its result, also jitted
    assert [e.program for e in second_runs] == [e.program for e in first_runs]   # compiled once, run twice
    assert second_programs == first_programs and all(p.test == "t.py::first" for p in first_programs)
    assert records.programs[jitted.program].format == "mlir" and records.programs[jitted.program].compiled
    assert open(records.program_path(jitted.program), "rb").read()
    for execution, y in ((jitted, 3.0), (second_runs[0], 4.0)):
        assert execution.outcome == "ok" and execution.devices == 1
        x_kept, y_kept = (argument.value() for argument in execution.device_arguments())
        np.testing.assert_array_equal(x_kept, np.arange(6, dtype=np.float32).reshape(2, 3))
        assert y_kept.dtype == np.float32 and y_kept.shape == () and float(y_kept) == y
    assert all(e.test for e in records.executions)      # the third call was not kept


def test_a_proxy_without_a_loadable_plugin_returns_no_table(tmp_path):
    """GetPjrtApi answers NULL, which a host reports as a plugin that does not load."""
    code = f"""
import ctypes
proxy = ctypes.CDLL({recording_proxy_path()!r})
proxy.GetPjrtApi.restype = ctypes.c_void_p
print(proxy.GetPjrtApi())
"""
    for plugin in ("", str(tmp_path / "missing.so")):
        done = subprocess.run([sys.executable, "-c", code], env=clean_env(PJRT_REF_RECORD_PLUGIN=plugin),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr
        assert "pjrt-ref recording proxy:" in done.stderr
