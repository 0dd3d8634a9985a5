"""StableHLO test files -> test cases.

Both upstream formats read the same way:

* JAX-generated files (openxla/stablehlo `stablehlo/testdata`): one module
  whose `@main()` calls `@inputs()` and `@expected()`, runs the op under test
  and checks with `stablehlo.custom_call @check.expect_*`. One case: `@main`.
* Interpreter tests (`stablehlo/tests/interpret`): the file is split at
  `// -----` lines (as `--split-input-file` does); each chunk is a module or
  bare functions checking themselves with `check.*` ops. Like upstream's
  `stablehlo-translate --interpret`, a chunk with a `@main` runs `@main`;
  otherwise every function without arguments is a case.

Comment lines (`// RUN:`, `// CHECK:`) are just MLIR comments, except that
when upstream does not interpret a file (a `// RUN-DISABLED(reason)` line,
or RUN lines that never use `--interpret`, as for the dynamic-shape files
that only round-trip through serialization), the report of a case that does
not pass says so. (Those dynamic-shape files are run all the same: see
`dynamic.py`.) Finding the
cases uses a text scan, not the MLIR parser, so that the runner's main
process never loads MLIR (a crash there would end the whole run).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

_SPLIT_MARKER = re.compile(r"^\s*//\s*-----\s*$")
_RUN_LINE = re.compile(r"^\s*//\s*RUN:(.*)$", re.M)
_RUN_DISABLED = re.compile(r"^\s*//\s*RUN-DISABLED(?:\((?P<reason>[^)]*)\))?", re.M)
_FUNCTION = re.compile(
    r"^\s*func\.func\s+(?:(?:public|private|nested)\s+)?@(?P<name>[\w.$-]+|\"[^\"]+\")\s*"
    r"\((?P<args>[^)]*)\)", re.M)


@dataclass(frozen=True)
class Case:
    """One function to run: `file`'s chunk `chunk`, function `function`."""

    file: str
    chunk: int
    function: str
    line: int  # 1-based line of the function in the file
    name: str  # how reports name the case
    upstream_note: str = ""  # e.g. "RUN-DISABLED(inaccurate)": upstream skips it

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"


@dataclass(frozen=True)
class Chunk:
    index: int
    first_line: int  # 1-based line of the chunk's first line in the file
    text: str

    def padded_text(self) -> str:
        """The chunk preceded by blank lines, so MLIR line numbers are the file's."""
        return "\n" * (self.first_line - 1) + self.text


def split_chunks(text: str) -> list[Chunk]:
    """Split a file at `// -----` lines (a file without them is one chunk)."""
    lines = text.split("\n")
    chunks = []
    start = 0
    for number, line in enumerate(lines):
        if _SPLIT_MARKER.match(line):
            chunks.append(Chunk(len(chunks), start + 1, "\n".join(lines[start:number])))
            start = number + 1
    chunks.append(Chunk(len(chunks), start + 1, "\n".join(lines[start:])))
    return [c for c in chunks if c.text.strip()] or chunks[:1]


def chunk_functions(chunk: Chunk) -> list[tuple[str, bool, int]]:
    """(name, takes_no_arguments, line) of each func.func in the chunk."""
    found = []
    for match in _FUNCTION.finditer(chunk.text):
        name = match["name"].strip('"')
        line = chunk.first_line + chunk.text.count("\n", 0, match.start("name"))
        found.append((name, not match["args"].strip(), line))
    return found


def upstream_note(text: str) -> str:
    """Why upstream does not interpret this file ('' if it does)."""
    match = _RUN_DISABLED.search(text)
    if match:
        return f"RUN-DISABLED({match['reason']})" if match["reason"] else "RUN-DISABLED"
    run_lines = _RUN_LINE.findall(text)
    if run_lines and not any("--interpret" in line for line in run_lines):
        if any("--serialize" in line for line in run_lines):
            return "its RUN lines only test a serialization round trip"
        return "its RUN lines never use --interpret"
    return ""


def cases_in_chunk(path: str, chunk: Chunk, several_chunks: bool,
                   note: str = "") -> list[Case]:
    functions = chunk_functions(chunk)
    entries = [f for f in functions if f[0] == "main"]
    if not entries:
        entries = [f for f in functions if f[1]]
    if not entries and len(functions) == 1:
        entries = functions  # runs, and reports that it needs arguments
    cases = []
    for name, _, line in entries:
        label = f"{name}:{line}" if several_chunks or len(entries) > 1 else name
        cases.append(Case(path, chunk.index, name, line, label, note))
    return cases


def cases_in_file(path: str, text: str | None = None) -> list[Case]:
    """Every case of the test file at `path`."""
    if text is None:
        text = read_text(path)
    chunks = split_chunks(text)
    several = len(chunks) > 1
    note = upstream_note(text)
    cases: list[Case] = []
    for chunk in chunks:
        cases.extend(cases_in_chunk(path, chunk, several, note))
    if not cases:
        # Nothing recognisable: still report the file (it will error).
        cases.append(Case(path, 0, "main", 1, "main", note))
    return cases


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def find_test_files(paths: list[str]) -> list[str]:
    """The .mlir files named by `paths` (directories are searched recursively)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs.sort()
                files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".mlir"))
        else:
            files.append(path)
    seen = set()  # a file named twice (or reached twice) runs once
    unique = []
    for path in files:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique
