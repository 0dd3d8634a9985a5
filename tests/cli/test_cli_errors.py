"""The CLI's answer to a wrong path or a malformed file: one line on stderr and exit status 1."""
from __future__ import annotations

import os

import pytest

from pjrt_ref.cli.main import main


@pytest.mark.parametrize("command", ["run", "cost", "profile", "trace"])
def test_a_missing_file_is_one_line_naming_it(command, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PJRT_REF_TRACE", raising=False)
    missing = tmp_path / "missing.mlir"
    assert main([command, str(missing)]) == 1
    err = capsys.readouterr().err
    assert f"pjrt-ref {command}: error: No such file or directory: {missing}" in err
    assert "Traceback" not in err
    # `trace` overrides the setting for its run only: the environment is left as it was.
    assert "PJRT_REF_TRACE" not in os.environ


def test_profile_of_a_file_that_is_not_json(tmp_path, capsys):
    trace = tmp_path / "trace.json"
    trace.write_text("garbage")
    assert main(["profile", str(trace)]) == 1
    err = capsys.readouterr().err
    assert "pjrt-ref profile: error: not a JSON file" in err and "Traceback" not in err


def test_cost_of_a_program_that_does_not_parse_names_the_problem(tmp_path, capsys):
    program = tmp_path / "bad.mlir"
    program.write_text("garbage")
    assert main(["cost", str(program)]) == 1
    err = capsys.readouterr().err
    assert "pjrt-ref cost: error: cannot parse program" in err and "garbage" in err
    assert "Traceback" not in err
