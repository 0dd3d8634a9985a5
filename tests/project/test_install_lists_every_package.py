"""`pip install .` installs the packages pyproject.toml lists, no others: a new
package folder missing from that list works in the checkout and in an editable
install and is absent from a wheel (a subpackage added to `pjrt_ref/spmd/` once
broke the README's first command this way). Every folder with an `__init__.py`
under the installed trees must be listed, and every listed package must exist."""
from __future__ import annotations

import tomllib

from tests.support.repo_paths import REPO


def setuptools_config() -> dict:
    with open(REPO / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["tool"]["setuptools"]


def package_folders(config: dict) -> dict[str, str]:
    """{installed package name: its folder in the checkout}, from every package
    folder under the roots `package-dir` maps."""
    found = {}
    for name, root in config["package-dir"].items():
        base = REPO / root
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            relative = init.parent.relative_to(base).parts
            found[".".join((name, *relative))] = str(init.parent.relative_to(REPO))
    return found


def test_every_package_folder_is_installed():
    config = setuptools_config()
    missing = sorted(set(package_folders(config)) - set(config["packages"]))
    assert not missing, f"pyproject.toml's [tool.setuptools] packages lacks {missing}"


def test_every_listed_package_exists():
    config = setuptools_config()
    absent = sorted(set(config["packages"]) - set(package_folders(config)))
    assert not absent, f"pyproject.toml lists packages with no folder: {absent}"
