"""A bounded run of the C API fuzzer (tests/scripts/fuzz_capi.py) in child processes: no crash, no accepted misuse."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.jax_support import clean_env
from tests.support.repo_paths import SCRIPTS

FUZZER = str(SCRIPTS / "fuzz_capi.py")


@pytest.mark.parametrize("misuse", ["0.4", "0.05"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_calls_never_crash_and_misuse_is_an_error(seed, misuse):
    """misuse 0.4: mostly bad handles and sizes; 0.05: mostly valid calls that reach deeper."""
    command = [sys.executable, "-X", "faulthandler", FUZZER, "--seed", str(seed), "--calls", "2000", "--misuse", misuse]
    proc = subprocess.run(command, env=clean_env(), capture_output=True, text=True, timeout=300)
    report = f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, report          # a signal (crash) is negative; 1 is an accepted misuse
    assert f"seed {seed}: 2000 calls" in proc.stdout, report
    assert "0 accepted misuses, 0 INTERNAL errors" in proc.stdout, report
