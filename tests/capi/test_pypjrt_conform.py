"""`python -m pypjrt.conform` against our plugin: no FAIL.

UNSUPPORTED/SKIP are capability differences (see the report printed on failure).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import pjrt_ref

pytest.importorskip("pypjrt.conform")


def test_conform_reports_no_failures(tmp_path):
    report = tmp_path / "conform.json"
    proc = subprocess.run([sys.executable, "-m", "pypjrt.conform", pjrt_ref.library_path(),
                           "--json", str(report)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    failures = [c for c in data["checks"] if c["result"] == "fail"]
    assert not failures, proc.stdout
    passed = sum(c["result"] == "pass" for c in data["checks"])
    assert passed >= 53, proc.stdout
    assert data["api_version"] == [0, 114]
    assert data["platform"] == "pjrt_ref"
