"""Imports sit at their module's top, except the deferred loads named in
pjrt_ref/deferred_imports.py: every import inside a function or method, in
the product and in the benchmarks, is read with `ast` and must name a module
DEFERRED covers; and every DEFERRED key must still be used by one."""
from __future__ import annotations

import ast
import pathlib

from pjrt_ref.deferred_imports import DEFERRED, DEFERRED_IN, deferred
from tests.project.test_layout import FOLDERS, module_name, product_files
from tests.support.repo_paths import REPO


def checked_files() -> list[pathlib.Path]:
    return product_files() + sorted(p for p in (REPO / "benchmarks").rglob("*.py") if "__pycache__" not in p.parts)


def dotted(path: pathlib.Path) -> str:
    if path.relative_to(REPO).parts[0] in FOLDERS:
        return module_name(path)
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def imported_modules(node: ast.Import | ast.ImportFrom, path: pathlib.Path, modules: set[str]) -> list[str]:
    """The modules an import loads: `from package import module` is the module,
    `from module import name` the module; relative imports are resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = dotted(path)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    return sorted({f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names})


def is_fallback(node: ast.AST, try_blocks: list[ast.Try]) -> bool:
    """Inside a `try` that catches ImportError (its body or a handler): a fallback, tried at call time."""
    for block in try_blocks:
        catches = {ast.unparse(handler.type) if handler.type else "" for handler in block.handlers}
        if any("ImportError" in name or "ModuleNotFoundError" in name for name in catches) and \
                any(node is inner for inner in ast.walk(block)):
            return True
    return False


def function_imports() -> list[tuple[str, str, str]]:
    """(file:line, importing module, imported module) for every import inside a function, fallbacks left out."""
    files = checked_files()
    modules = {dotted(p) for p in files}
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            try_blocks = [node for node in ast.walk(function) if isinstance(node, ast.Try)]
            nested = {id(node) for inner in ast.walk(function) if inner is not function
                      and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for node in ast.walk(inner)}
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in nested \
                        and not is_fallback(node, try_blocks):
                    found += [(f"{path.relative_to(REPO)}:{node.lineno}", dotted(path), module)
                              for module in imported_modules(node, path, modules)]
    return found


def test_imports_inside_functions_are_only_the_deferred_loads():
    undeclared = [f"{where} imports {module} inside a function: move it to the top, or name it in "
                  "pjrt_ref/deferred_imports.py with the reason" for where, importer, module in function_imports()
                  if deferred(module) is None and importer not in DEFERRED_IN]
    assert undeclared == [], "\n".join(undeclared)


def test_every_deferred_load_is_still_deferred_somewhere():
    found = function_imports()
    used = {deferred(module) for _, importer, module in found if importer not in DEFERRED_IN}
    assert sorted(set(DEFERRED) - used) == []
    assert sorted(set(DEFERRED_IN) - {importer for _, importer, _ in found}) == []


def test_every_deferred_load_says_why():
    assert all(len(reason) > 40 for reason in [*DEFERRED.values(), *DEFERRED_IN.values()])
