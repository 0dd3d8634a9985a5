"""Helpers (no tests) to run plugin code in a child process: a crash fails one test, not pytest."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


# Kept for children: `PJRT_REF_RUNTIME=isolated python -m pytest` runs every
# child on that runtime (pjrt_ref/settings.py).
KEPT_SETTINGS = ("PJRT_REF_RUNTIME",)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_", "PJRT_", "XLA_")) or k in KEPT_SETTINGS}
    env.update(extra)
    return env


def run_python(code: str, *, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter; fail the test (with its output) if it does not exit 0."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=clean_env(**env),
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"child exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def run_jax(code: str, *, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Run `code` with JAX_PLATFORMS=pjrt_ref (jax, jnp and np imported)."""
    prelude = "import jax, jax.numpy as jnp, numpy as np\n"
    env.setdefault("JAX_PLATFORMS", "pjrt_ref")
    return run_python(prelude + textwrap.dedent(code), timeout=timeout, **env)


def run_on_cpu_and_pjrt_ref(program: str, *, prelude: str = "", timeout: float = 120) -> dict:
    """{"cpu": ..., "pjrt_ref": ...}: `run(devices)` of `program` (which defines it
    and returns JSON-able results) called with each platform's devices, in one
    child process with JAX_PLATFORMS=pjrt_ref,cpu: JAX's cpu backend is the oracle."""
    driver = (f"import json\n{textwrap.dedent(prelude)}\n{textwrap.dedent(program)}\n"
              'print(json.dumps({p: run(jax.devices(p)) for p in ("cpu", "pjrt_ref")}))\n')
    proc = run_jax(driver, timeout=timeout, JAX_PLATFORMS="pjrt_ref,cpu")
    import json
    return json.loads(proc.stdout.strip().splitlines()[-1])
