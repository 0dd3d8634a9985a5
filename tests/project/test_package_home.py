"""A checkout imported from its root behaves like the install (pjrt_ref/package_home.py),
and the processes pjrt-ref starts import the same pjrt_ref as their parent.

The checkout's layout is rebuilt in a temporary folder with the real
`pjrt_ref/__init__.py` and `package_home.py`, so these tests hold whatever
install (editable or not) runs them."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from tests.support.repo_paths import REPO


def _package(folder, mark: str, *, complete: bool) -> None:
    """A pjrt_ref package (the real __init__ and package_home) in `folder`,
    with `interpreter` inside it if `complete`, beside it otherwise."""
    package = folder / "pjrt_ref"
    package.mkdir(parents=True)
    for name in ("__init__.py", "package_home.py"):
        shutil.copy(REPO / "pjrt_ref" / name, package / name)
    (package / "mark.py").write_text(f"MARK = {mark!r}\n")
    interpreter = (package if complete else folder) / "interpreter"
    interpreter.mkdir()
    (interpreter / "__init__.py").write_text(f"MARK = {mark!r}\n")


def _python(code: str, cwd, *path) -> list[str]:
    """Run `code` without site-packages, with sys.path = [cwd first, *path] (what
    `python -c` at a repository root gives), and return its lines."""
    done = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path[1:1] = {[str(p) for p in path]!r}\n"
         + textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


SHOW = """
    import pjrt_ref, pjrt_ref.interpreter, pjrt_ref.mark
    print(pjrt_ref.mark.MARK, pjrt_ref.interpreter.MARK)
    print(pjrt_ref.package_home.__file__.startswith(pjrt_ref.__path__[0]))
"""


def test_a_checkout_without_an_install_maps_its_sibling_folders(tmp_path):
    _package(tmp_path / "checkout", "checkout", complete=False)
    assert _python(SHOW, tmp_path / "checkout") == ["checkout checkout", "True"]


def test_a_checkout_hands_the_import_to_a_non_editable_install(tmp_path):
    """At the root of a clone after `pip install .`, `import pjrt_ref` is the install,
    with all its submodules (none of the checkout's left in sys.modules)."""
    _package(tmp_path / "checkout", "checkout", complete=False)
    _package(tmp_path / "site", "installed", complete=True)
    assert _python(SHOW, tmp_path / "checkout", tmp_path / "site") == ["installed installed", "True"]


def test_an_installed_package_is_used_as_it_is(tmp_path):
    _package(tmp_path / "site", "installed", complete=True)
    (tmp_path / "elsewhere").mkdir()
    assert _python(SHOW, tmp_path / "elsewhere", tmp_path / "site") == ["installed installed", "True"]


def test_helper_processes_get_this_pjrt_ref_first_and_no_current_directory():
    from pjrt_ref import package_home
    import pjrt_ref

    path = package_home.python_path()
    assert path[0] == os.path.dirname(os.path.dirname(pjrt_ref.__file__))
    assert all(os.path.isabs(entry) for entry in path)
    assert "-P" in package_home.python_command("pjrt_ref.some.module")
    assert package_home.python_environment()["PYTHONPATH"].split(os.pathsep) == path


def _decoy(folder) -> None:
    """A package named pjrt_ref that is not pjrt-ref."""
    (folder / "pjrt_ref").mkdir(parents=True)
    (folder / "pjrt_ref" / "__init__.py").write_text("raise ImportError('the decoy pjrt_ref was imported')\n")


HOST = """
import sys
import numpy as np
from pjrt_ref.interpreter import load
from pjrt_ref.interpreter.loader import make_context, parse_module
import io

module = parse_module(
    "func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {"
    " %y = stablehlo.add %x, %x : tensor<3xf32> return %y : tensor<3xf32> }", make_context())
buffer = io.BytesIO()
module.operation.write_bytecode(buffer)
print(load(buffer.getvalue())(np.ones(3, np.float32))[0].tolist())
"""


def test_the_bytecode_checker_imports_this_pjrt_ref_from_a_directory_holding_a_decoy(tmp_path):
    """The host runs in a directory with a `pjrt_ref/` that is not pjrt-ref (as the
    repository root is, after a non-editable install); its checker, a `python -m`
    process, still imports the real one and the program runs. The cache
    directory is empty, so the program is checked (no earlier survivor)."""
    _decoy(tmp_path / "cwd")
    script = tmp_path / "host.py"
    script.write_text(HOST)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path / "cwd", capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PJRT_REF_BYTECODE_CHECK": "1",
                                                          "PJRT_REF_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["[2.0, 2.0, 2.0]"]


def test_jax_on_pjrt_ref_runs_from_a_directory_holding_a_decoy(tmp_path):
    _decoy(tmp_path / "cwd")
    script = tmp_path / "host.py"
    script.write_text("import jax, jax.numpy as jnp\n"
                      "print(jax.jit(lambda x: x * 3)(jnp.arange(3.0)).tolist(), jax.devices()[0].platform)\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path / "cwd", capture_output=True,
                          text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "pjrt_ref",
                                                          "PJRT_REF_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["[0.0, 3.0, 6.0] pjrt_ref"]
