"""Replay the loader fuzz corpus (tests/data/fuzz_loader/, from tests/scripts/fuzz_loader.py).

Each input is loaded (and, if it loads, run on zero arguments) in one
subprocess, each file guarded separately, so an abort from MLIR's C++ fails
that file's test instead of killing pytest. Every input must end in a Program
or a PjrtRefError.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.repo_paths import DATA, SCRIPTS

CORPUS = DATA / "fuzz_loader"
FILES = sorted(p for p in CORPUS.iterdir() if p.is_file()) if CORPUS.is_dir() else []

# A child replays the files in turn, printing a line before and after each, so
# a crash is pinned to the file that was running. A child still running after
# HANG_SECONDS is taken to hang (on the file it started last): a guard, far
# above what the whole corpus takes.
HANG_SECONDS = 600
_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import fuzz_loader
for path in sys.argv[2:]:
    print("START", path, flush=True)
    try:
        outcome = fuzz_loader.run_one(open(path, "rb").read())
    except BaseException as error:
        outcome = "EXCEPTION " + type(error).__name__ + ": " + str(error)[:200].replace("\n", " ")
    print("END", path, outcome, flush=True)
"""


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """{path: outcome}; a process that dies is restarted after the file it died on.
    The cache directory starts empty, so every input goes through the checker."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PJRT_REF_BYTECODE_CHECK_TIMEOUT="3",
               PJRT_REF_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    outcomes = {}
    remaining = [str(p) for p in FILES]
    while remaining:
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD, str(SCRIPTS)] + remaining,
                                  capture_output=True, text=True, errors="replace",
                                  timeout=HANG_SECONDS, env=env)
            stdout, tail = proc.stdout, f"exit {proc.returncode}: {proc.stderr[-1500:]}"
        except subprocess.TimeoutExpired as error:
            stdout = error.stdout.decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
            tail = f"hang ({HANG_SECONDS} s)"
        started = None
        for line in stdout.splitlines():
            if line.startswith("START "):
                started = line.split(" ", 1)[1]
            elif line.startswith("END "):
                _, path, outcome = line.split(" ", 2)
                outcomes[path] = outcome
                started = None
        if started is None:
            break
        outcomes[started] = f"process died: {tail}"
        remaining = remaining[remaining.index(started) + 1:]
    return outcomes


def test_corpus_is_small():
    assert FILES, "no corpus"
    sizes = [p.stat().st_size for p in FILES]
    assert max(sizes) < 20_000 and sum(sizes) < 1_000_000


@pytest.mark.slow   # the `replay` fixture runs the whole corpus (about 10 s) first
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_input_ends_in_program_or_error(path, replay):
    outcome = replay.get(str(path), "not replayed")
    assert outcome in ("ran", "program", "error"), outcome
