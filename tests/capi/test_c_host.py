"""A plain C program (no Python of its own) runs a StableHLO program through our plugin.

The library starts Python itself (cffi embedding), finds pjrt_ref, compiles
`x + y` on f32[4], executes it and reads the result back.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import pjrt_ref
from repo_paths import DATA


@pytest.fixture(scope="module")
def host_binary(tmp_path_factory) -> str:
    from pjrt_ref.capi_shim.build_shim import full_header

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("no C compiler (cc) on PATH")
    build = tmp_path_factory.mktemp("c_host")
    (build / "pjrt_ref_api.h").write_text(full_header())
    binary = str(build / "host")
    subprocess.run([compiler, "-std=c11", "-Wall", "-Werror", "-I", str(build),
                    str(DATA / "c_host" / "host.c"), "-ldl", "-o", binary], check=True)
    return binary


@pytest.mark.parametrize("runtime", ["shared", "isolated"])
def test_c_host_runs_add(host_binary, runtime):
    """The shim itself, and the library that loads it into a namespace of its
    own (what `pjrt-ref library-path` prints): a C host meets both."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("JAX_")}
    proc = subprocess.run([host_binary, pjrt_ref.library_path(runtime)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "PJRT API 0.114" in proc.stdout
    assert "platform pjrt_ref" in proc.stdout
    assert "result 11 22 33 44" in proc.stdout
    assert proc.stdout.strip().endswith("ok")
