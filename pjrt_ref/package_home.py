"""Which pjrt_ref this is, and how the processes it starts import the same one.

The repository keeps `interpreter/`, `conformance/` and `capi_shim/` beside
`pjrt_ref/`; the install puts them inside it as `pjrt_ref.interpreter`,
`pjrt_ref.conformance` and `pjrt_ref.capi_shim` (pyproject.toml's
package-dir: the plain names are taken on PyPI). So in a checkout the folder
`pjrt_ref/` alone is an incomplete package, and Python imports it first
whenever the current directory leads `sys.path` (`python -m`, `python -c`, a
notebook or a REPL started at the repository root). `settle_checkout` makes
that folder complete or steps aside for the installed copy:

- a non-editable install elsewhere on `sys.path` (`pip install .`) is what
  the user asked for, and only it has the compiled shim: the checkout's
  `pjrt_ref` hands the import over to it;
- otherwise (an editable install, or no install) the three sibling folders
  are mapped into this package, exactly as the install maps them.

Processes pjrt-ref starts (the bytecode checker, diff workers) must not
depend on the directory they start in either: `python_command` starts them
with Python's safe-path mode (`-P`: no current directory first on
`sys.path`) and the parent's `sys.path`, with the directory holding this
very `pjrt_ref` first.
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from types import ModuleType

PACKAGE = "pjrt_ref"
# Top-level folders of the repository installed inside the package, by their names there.
SIBLING_FOLDERS = ("interpreter", "conformance", "capi_shim")


def _is_complete(package_dir: str) -> bool:
    return os.path.isfile(os.path.join(package_dir, "interpreter", "__init__.py"))


def _checkout_root(package_dir: str) -> str | None:
    """The repository root if `package_dir` is a checkout's pjrt_ref/ (siblings beside it)."""
    root = os.path.dirname(os.path.abspath(package_dir))
    if _is_complete(package_dir) or not os.path.isfile(os.path.join(root, "interpreter", "__init__.py")):
        return None
    return root


def _installed_copy(root: str) -> str | None:
    """The first complete pjrt_ref package on sys.path that is not in the checkout at `root`."""
    root = os.path.realpath(root)
    for entry in sys.path:
        directory = os.path.realpath(entry or os.getcwd())
        candidate = os.path.join(directory, PACKAGE)
        if directory != root and _is_complete(candidate):
            return candidate
    return None


class _SiblingFolders(importlib.abc.MetaPathFinder):
    """Finds pjrt_ref.interpreter & co. in the checkout's top-level folders."""

    def __init__(self, root: str):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        if parent != PACKAGE or name not in SIBLING_FOLDERS:
            return None
        folder = os.path.join(self.root, name)
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


def _adopt(installed_dir: str) -> ModuleType:
    """Import the installed package as `pjrt_ref` in place of the checkout's."""
    for name in [n for n in sys.modules if n.startswith(PACKAGE + ".")]:
        del sys.modules[name]       # this module, loaded from the checkout: the install has its own
    spec = importlib.util.spec_from_file_location(
        PACKAGE, os.path.join(installed_dir, "__init__.py"), submodule_search_locations=[installed_dir])
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module   # the import statement returns what sys.modules holds after
    spec.loader.exec_module(module)
    return module


def settle_checkout(package_dir: str) -> bool:
    """Called by pjrt_ref/__init__.py. True if the installed copy took over the import."""
    root = _checkout_root(package_dir)
    if root is None:
        return False
    installed = _installed_copy(root)
    if installed is not None:
        _adopt(installed)
        return True
    if not any(isinstance(finder, _SiblingFolders) and finder.root == root for finder in sys.meta_path):
        sys.meta_path.insert(0, _SiblingFolders(root))
    return False


def home() -> str:
    """The directory that holds the pjrt_ref package in use."""
    return os.path.dirname(os.path.dirname(os.path.abspath(sys.modules[PACKAGE].__file__)))


def python_path() -> list[str]:
    """sys.path for a helper process: this pjrt_ref's home, then the parent's own entries."""
    entries = [home()]
    for entry in sys.path:
        absolute = os.path.abspath(entry or os.getcwd())
        if absolute not in entries:
            entries.append(absolute)
    return entries


def python_command(module: str, *args: str) -> list[str]:
    """The command that runs `python -m module args` in a fresh interpreter importing this pjrt_ref.

    Pass `python_environment()` as its environment."""
    return [sys.executable, "-P", "-m", module, *args]


def python_environment(base: dict[str, str] | None = None, **settings: str) -> dict[str, str]:
    """The environment for `python_command`: `base` (ours by default) and
    `settings`, with PYTHONPATH set to `python_path()`."""
    environment = dict(os.environ if base is None else base)
    return {**environment, "PYTHONPATH": os.pathsep.join(python_path()), **settings}
