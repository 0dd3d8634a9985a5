"""docs/debugging.md cannot rot: its scripts are written to a fresh directory,
its console commands run there, and each transcript line must appear in the
real output.

Lines are compared after putting the test's directory in place of
`/tmp/tutorial`. Skipped: `...` (a cut), lines with handle addresses (`0x`)
and the profile's timing lines (they change from run to run). The jaxlib
version, how many ops the diff compared (JAX 0.12 lowers the tutorial's
model to one op fewer than 0.10), how often `explain` saw each entry
point called and the names JAX gives jitted functions in locations (JAX
versions differ) are compared as placeholders.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.jax_support import clean_env
from tests.support.repo_paths import REPO

DOC = REPO / "docs" / "debugging.md"
_FILE = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```", re.S)
_CONSOLE = re.compile(r"```console\n(.*?)```", re.S)
_VARIABLE = re.compile(r"0x[0-9a-f]+|\d+\.\d+ ms|\d\.\d+%")
_VERSIONED = [(re.compile(r"jaxlib \d+(\.\d+)+"), "jaxlib X"),
              (re.compile(r"all \d+ ops compared"), "all N ops compared"),
              (re.compile(r"\b\d+(  PJRT_\w+)$", re.M), r"N\1"),   # explain's calls per entry point
              (re.compile(r"jit\(_?(\w+)\)"), r"jit(\1)")]             # jnp.flip is `_flip` in some versions


def unversioned(text: str) -> str:
    for pattern, placeholder in _VERSIONED:
        text = pattern.sub(placeholder, text)
    return text


def sessions(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected lines) for every `$ ` line of the console blocks."""
    found = []
    for block in _CONSOLE.findall(text):
        for line in block.splitlines():
            if line.startswith("$ "):
                if line.startswith("$ JAX_PLATFORMS=pjrt_ref PJRT_REF_LOG_API=1 python"):
                    found[-1][1].append(line)   # the explain report echoes its command
                    continue
                found.append((line[2:], []))
            elif found:
                found[-1][1].append(line)
    return found


def checked(line: str) -> bool:
    return bool(line.strip()) and line.strip() != "..." and not _VARIABLE.search(line)


@pytest.mark.slow
def test_tutorial_transcripts_are_true(tmp_path):
    text = DOC.read_text()
    for name, body in _FILE.findall(text):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body)
    runs = sessions(text)
    assert len(runs) >= 10
    # A reader's shell: Python's stdout is block-buffered when piped (this
    # machine's shell sets PYTHONUNBUFFERED; a reader's and CI's do not).
    env = {k: v for k, v in clean_env().items() if k != "PYTHONUNBUFFERED"}
    # `python` and `pjrt-ref` are this interpreter's and its environment's,
    # as in a reader's activated venv.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    for command, expected in runs:
        proc = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        output = unversioned((proc.stdout + proc.stderr).replace(str(tmp_path), "/tmp/tutorial"))
        for line in filter(checked, expected):
            assert unversioned(line.strip()) in output, f"$ {command}\nmissing: {line}\n--- output\n{output[-3000:]}"
