"""The layout follows the README's layer diagram: every import, read with `ast`.

Rooms, from the top (README, "Architecture"):

    cli
    testkit                       the plugin test kit (runs frameworks' suites, replays with debug's diff, asks conformance's oracle)
    judge                         `pjrt-ref fuzz`: random programs against another backend, shrunk and ruled on
    frameworks, capi_shim
    capi                          the C API layer (entry points, fast paths, strict mode, API log, profiler extension)
    debug                         tools that look at the layers below
    model                         the PJRT object model
    spmd, services, distributed   beside the model, below it
    interpreter, conformance      StableHLO on numpy
    errors, settings, limits,     shared by every layer
    process_files

A module may import its own room and the rooms `MAY_IMPORT` names; nothing
imports a room above it, so no circle can form between rooms. Function-level
imports count too: hiding an import in a function does not change the layers.
There are no exceptions: where a lower room needs something of a higher one
(the interpreter's PJRT_REF_PROFILE and _DIFF write to the debug package's
recorder and differ), the higher room hands it down (`instrument.plug_in`).

Every import is absolute, `pjrt_ref.` first: what a reader sees in the source
tree is the module the install imports.

Inside the interpreter, the same for its three packages: the optimiser
(`optimiser/`) rewrites plans of ops (`ops/`), and both run compiled and native
code (`native/`); ops never import the optimiser, native code neither.

The tests import their helpers (tests/support/) as a package, by the same
rule in code and in the code they run in child processes.
"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

from tests.support.repo_paths import REPO

# The installed package name of each top-level source folder.
FOLDERS = {"pjrt_ref": "pjrt_ref", "interpreter": "pjrt_ref.interpreter",
           "capi_shim": "pjrt_ref.capi_shim", "conformance": "pjrt_ref.conformance"}

ROOMS = {    # dotted prefix -> room (the longest prefix wins)
    "pjrt_ref": "base", "pjrt_ref.errors": "base", "pjrt_ref.settings": "base", "pjrt_ref.limits": "base",
    "pjrt_ref.process_files": "base",
    "pjrt_ref.interpreter": "interpreter", "pjrt_ref.conformance": "conformance",
    "pjrt_ref.spmd": "spmd", "pjrt_ref.services": "services", "pjrt_ref.distributed": "distributed",
    "pjrt_ref.model": "model", "pjrt_ref.debug": "debug", "pjrt_ref.capi": "capi",
    "pjrt_ref.capi_shim": "capi_shim", "pjrt_ref.frameworks": "frameworks", "pjrt_ref.cli": "cli",
    "pjrt_ref.testkit": "testkit", "pjrt_ref.judge": "judge",
    # The header's entry points as data: what the shim builds its table from
    # and the C API layer binds; it imports nothing.
    "pjrt_ref.capi_shim.entry_points": "base",
}

BELOW_MODEL = {"spmd", "services", "distributed", "interpreter", "base"}
MAY_IMPORT = {
    "base": set(),
    "interpreter": {"base"},
    "conformance": {"interpreter", "base"},
    "spmd": {"interpreter", "base"},
    "services": {"interpreter", "base"},
    "distributed": {"interpreter", "base"},
    "model": BELOW_MODEL,
    "debug": {"model"} | BELOW_MODEL,
    "capi": {"debug", "model"} | BELOW_MODEL,
    "capi_shim": {"capi", "base"},
    "frameworks": {"base"},
    "testkit": {"frameworks", "debug", "model", "conformance"} | BELOW_MODEL,
    "judge": {"debug", "model", "conformance"} | BELOW_MODEL,
    "cli": {"capi", "debug", "model", "frameworks", "conformance", "testkit", "judge"} | BELOW_MODEL,
}

def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(REPO)
    package = FOLDERS[rel.parts[0]]
    parts = list(rel.with_suffix("").parts[1:])
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def product_files() -> list[pathlib.Path]:
    return sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def imported_modules(path: pathlib.Path, modules: set[str]) -> set[str]:
    """Every pjrt_ref module `path` imports: `from package import module`
    counts as the module, `from module import name` as the module."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "pjrt_ref" or name.startswith("pjrt_ref.")}


def room_of(dotted: str) -> str:
    best = max((prefix for prefix in ROOMS if dotted == prefix or dotted.startswith(prefix + ".")), key=len)
    return ROOMS[best]


def crossings() -> list[tuple[str, str]]:
    """(importer, imported) pairs that run against the diagram."""
    modules = {module_name(p) for p in product_files()}
    bad = []
    for path in product_files():
        importer = module_name(path)
        here = room_of(importer)
        for target in imported_modules(path, modules):
            there = room_of(target)
            if there != here and there not in MAY_IMPORT[here] and not (there == "base" and target == "pjrt_ref"):
                bad.append((importer, target))
    return sorted(set(bad))


# Inside the interpreter: package -> the packages it may not import.
INTERPRETER_NEVER = {
    "pjrt_ref.interpreter.ops": ("pjrt_ref.interpreter.optimiser",),
    "pjrt_ref.interpreter.native": ("pjrt_ref.interpreter.optimiser", "pjrt_ref.interpreter.ops"),
    "pjrt_ref.interpreter.ffi": ("pjrt_ref.interpreter.optimiser", "pjrt_ref.interpreter.ops"),
}


def within(dotted: str, package: str) -> bool:
    return dotted == package or dotted.startswith(package + ".")


def interpreter_imports_against_its_packages() -> list[tuple[str, str]]:
    """(importer, imported) pairs that INTERPRETER_NEVER forbids."""
    modules = {module_name(p) for p in product_files()}
    bad = []
    for path in product_files():
        importer = module_name(path)
        for package, never in INTERPRETER_NEVER.items():
            if within(importer, package):
                bad += [(importer, target) for target in imported_modules(path, modules)
                        if any(within(target, other) for other in never)]
    return sorted(set(bad))


def test_every_product_module_is_in_a_room():
    assert product_files()
    for path in product_files():
        assert room_of(module_name(path)) in MAY_IMPORT, path


def test_every_import_names_its_module_from_the_top():
    """Imports are absolute (`from pjrt_ref.interpreter.types import ...`), never relative:
    `interpreter/` and `conformance/` are installed inside `pjrt_ref`, so a relative
    import there, read in the source tree, points at a folder that is not its parent."""
    relative = [f"{path.relative_to(REPO)}:{node.lineno}" for path in product_files()
                for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom) and node.level]
    assert relative == []


def test_no_module_imports_against_the_layer_diagram():
    against = crossings()
    assert against == [], "\n".join(f"{a} imports {b} ({room_of(a)} -> {room_of(b)})" for a, b in against)


def test_ops_and_native_code_do_not_import_the_optimiser():
    against = interpreter_imports_against_its_packages()
    assert against == [], "\n".join(f"{a} imports {b}" for a, b in against)


@pytest.mark.parametrize("room", sorted(MAY_IMPORT))
def test_rooms_below_do_not_reach_up(room):
    """The diagram itself has no circle: no room may import a room that may import it."""
    for other in MAY_IMPORT[room]:
        assert room not in MAY_IMPORT.get(other, set()), (room, other)


def private_names_taken_across_rooms() -> list[str]:
    """`from X import _name` where X is in another room than the importer."""
    found = []
    for path in product_files():
        importer = module_name(path)
        package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("pjrt_ref") or room_of(target) == room_of(importer):
                continue
            found += [f"{importer}: from {target} import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_room_takes_another_rooms_private_names():
    assert private_names_taken_across_rooms() == []


# ------------------------------------------------------------------ the tests' own helpers
TESTS = REPO / "tests"
HELPERS = sorted(p.stem for p in (TESTS / "support").glob("*.py") if p.stem != "__init__")


def bare_helper_imports() -> list[str]:
    """Lines under tests/ that import a helper of tests/support/ by its bare
    name, or put tests/support/ itself on sys.path: in code and in the code
    strings tests hand to child processes alike (so a plain text scan)."""
    bare = re.compile(rf"^\s*(from|import)\s+({'|'.join(HELPERS)})\b")
    support_on_path = re.compile(r"sys\.path.*(SUPPORT|[\"']support[\"'])")
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if "data" in path.relative_to(TESTS).parts:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if bare.match(line) or support_on_path.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def test_tests_import_their_helpers_as_a_package():
    """`from tests.support.oracle import ...`, never `import oracle` through a
    sys.path entry for tests/support/ (tests/__init__.py says why)."""
    assert HELPERS and (TESTS / "support" / "__init__.py").is_file()
    assert bare_helper_imports() == []
