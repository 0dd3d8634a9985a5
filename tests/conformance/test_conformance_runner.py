"""`pjrt-ref conformance`: statuses, JSON report, filters and exit codes.

Runs the runner on the small hand-written files in tests/data/conformance
(both upstream formats); the expected statuses follow from how those files
were written (one wrong expected value, one unknown op, ...).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import repo_paths
from pjrt_ref.conformance.runner import main

DATA = str(repo_paths.DATA / "conformance")
INTERPRET = os.path.join(DATA, "interpret", "checks.mlir")
# The self-checking files; the dynamic cases (data/conformance/dynamic) have
# their own tests in test_conformance_dynamic.py.
CHECKED = [os.path.join(DATA, name) for name in sorted(os.listdir(DATA)) if name != "dynamic"]

EXPECTED_STATUSES = {
    ("jax_add_pass.mlir", "main"): "pass",
    ("jax_add_wrong_expected.mlir", "main"): "fail",
    ("jax_unknown_target.mlir", "main"): "unsupported",
    ("checks.mlir", "eq_const_passes:4"): "pass",
    ("checks.mlir", "float_checks_pass:15"): "pass",
    ("checks.mlir", "eq_const_fails:31"): "fail",
    ("checks.mlir", "close_fails_below_min_ulp:39"): "fail",
    ("checks.mlir", "unknown_op_is_unsupported:47"): "unsupported",
    ("checks.mlir", "main:61"): "pass",
}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Run the runner once over all test data; (exit status, JSON report)."""
    path = tmp_path_factory.mktemp("conformance") / "report.json"
    status = main([*CHECKED, "--jobs", "2", "--json", str(path)])
    with open(path) as handle:
        return status, json.load(handle)


def test_every_case_has_its_expected_status(report):
    _, data = report
    statuses = {(os.path.basename(c["file"]), c["case"]): c["status"] for c in data["cases"]}
    assert statuses == EXPECTED_STATUSES


def test_json_report_has_the_documented_shape(report):
    _, data = report
    assert set(data) == {"summary", "cases"}
    summary = data["summary"]
    assert set(summary) == {"total", "passed", "failed", "errors", "unsupported", "timeouts",
                            "seconds"}
    assert summary["total"] == len(data["cases"]) == len(EXPECTED_STATUSES)
    assert (summary["passed"], summary["failed"], summary["errors"], summary["unsupported"],
            summary["timeouts"]) == (4, 3, 0, 2, 0)
    assert isinstance(summary["seconds"], float)
    for case in data["cases"]:
        assert set(case) == {"file", "case", "status", "message", "seconds"}
        assert isinstance(case["message"], str) and isinstance(case["seconds"], float)


def test_failure_names_check_index_values_and_count(report):
    _, data = report
    by_case = {(os.path.basename(c["file"]), c["case"]): c for c in data["cases"]}
    jax = by_case[("jax_add_wrong_expected.mlir", "main")]["message"]
    assert "check.expect_close" in jax and "jax_add_wrong_expected.mlir:10" in jax
    assert "first at index [1, 2]" in jax and "1 of 6" in jax
    assert "2.4999999620608018e+30" in jax  # the (wrong) expected value
    interpret = by_case[("checks.mlir", "eq_const_fails:31")]["message"]
    assert "index [1, 1]: actual 4 vs expected 5" in interpret


def test_unsupported_names_the_op(report):
    _, data = report
    messages = {c["case"]: c["message"] for c in data["cases"] if c["status"] == "unsupported"}
    assert "mydialect.frobnicate" in messages["unknown_op_is_unsupported:47"]
    assert "no.such.target" in messages["main"]


def test_exit_status_is_1_when_something_failed(report):
    status, _ = report
    assert status == 1


def test_exit_status_is_0_when_everything_passes(capsys):
    assert main([os.path.join(DATA, "jax_add_pass.mlir"), "--jobs", "1"]) == 0
    assert "1 cases: 1 passed" in capsys.readouterr().out


def test_unsupported_alone_does_not_fail_the_run():
    assert main([os.path.join(DATA, "jax_unknown_target.mlir"), "--jobs", "1"]) == 0


def test_k_selects_cases_by_substring(tmp_path):
    path = tmp_path / "report.json"
    assert main([*CHECKED, "-k", "checks.mlir::eq_const", "--jobs", "1", "--json", str(path)]) == 1
    cases = json.loads(path.read_text())["cases"]
    assert sorted(c["case"] for c in cases) == ["eq_const_fails:31", "eq_const_passes:4"]


def test_nothing_to_run_is_exit_status_2(tmp_path):
    assert main([str(tmp_path)]) == 2


def test_missing_file_is_an_error(tmp_path):
    path = tmp_path / "report.json"
    assert main([str(tmp_path / "missing.mlir"), "--json", str(path)]) == 1
    (case,) = json.loads(path.read_text())["cases"]
    assert case["status"] == "error" and "missing.mlir" in case["message"]


def test_parse_error_is_an_error(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main() {\n  %0 = stablehlo.add : oops\n}\n")
    path = tmp_path / "report.json"
    assert main([str(bad), "--json", str(path)]) == 1
    (case,) = json.loads(path.read_text())["cases"]
    assert case["status"] == "error" and "bad.mlir:2" in case["message"]


def test_verbose_prints_every_case_that_did_not_pass(capsys):
    assert main([*CHECKED, os.path.join(DATA, "jax_add_pass.mlir"), "-v", "--jobs", "2"]) == 1
    lines = capsys.readouterr().out.splitlines()
    flagged = sorted(line.split(":: ")[0].split()[0] for line in lines[:-1])
    assert flagged == ["FAIL", "FAIL", "FAIL", "UNSUPPORTED", "UNSUPPORTED"]
    assert lines[-1].startswith("9 cases: 4 passed")  # the file named twice runs once


@pytest.mark.parametrize("switch, value", [("PJRT_REF_DIFF", "cpu"), ("PJRT_REF_PROFILE", "profile.json")])
def test_the_command_runs_cases_with_the_debugging_switches_on(tmp_path, switch, value):
    """The workers get the debug package's recorder and differ from the
    command (the runner, a layer below, does not import it): with the switch
    on, a passing case still passes instead of erroring for want of them."""
    env = dict(os.environ, **{switch: value})
    done = subprocess.run([sys.executable, "-m", "pjrt_ref.cli.main", "conformance",
                           os.path.join(DATA, "jax_add_pass.mlir"), "--jobs", "1", "-v"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 cases: 1 passed" in done.stdout
