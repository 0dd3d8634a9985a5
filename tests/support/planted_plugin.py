"""Helpers (no tests): a copy of this pjrt-ref, with one kernel planted wrong, as a plugin library of its own.

The copy is installed as `pip install .` would lay it out (pjrt_ref/ with
interpreter/, capi_shim/ and conformance/ inside) into the site-packages of
a venv made for it, whose other packages are this environment's (a `.pth`
line, which adds the folders without running their `.pth` files, so an
editable install of this pjrt-ref is not seen there). Its isolated runtime
library starts a Python of its own as that venv's interpreter
(capi_shim/python_boot.c), which imports the planted copy; everything
else in the process (JAX, and pjrt-ref as the reference) runs the real one.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig

import pjrt_ref

# The planted kernels: (file in the installed layout, text replaced, replacement).
REVERSE_RIGHT = '''    dims = tuple(op.attrs["dimensions"])
    return np.flip(operand, axis=dims) if dims else operand
'''
CONCATENATE_RIGHT = '''    return np.concatenate([np.asarray(x, dtype=dtype) for x in inputs], axis=op.attrs["dimension"])
'''
FAULTS = {"off by one": "result = np.array(result); result.flat[0] = result.flat[1]",
          "crash": "__import__('os').abort()",
          "hang": "__import__('time').sleep(3600)"}


def reverse_planted(fault: str) -> tuple[str, str, str]:
    """stablehlo.reverse on float32 with `fault`: "off by one" (element 0 repeats element 1),
    "crash" (the process aborts) or "hang" (it never returns)."""
    planted = ('''    dims = tuple(op.attrs["dimensions"])
    result = np.flip(operand, axis=dims) if dims else operand
    if result.dtype == np.float32 and result.size > 1:    # PLANTED
        ''' + FAULTS[fault] + '''
    return result
''')
    return "interpreter/ops/shape.py", REVERSE_RIGHT, planted


def concatenate_planted(fault: str) -> tuple[str, str, str]:
    """stablehlo.concatenate on float32 with `fault` (as `reverse_planted`)."""
    planted = ('''    result = np.concatenate([np.asarray(x, dtype=dtype) for x in inputs], axis=op.attrs["dimension"])
    if result.dtype == np.float32 and result.size > 1:    # PLANTED
        ''' + FAULTS[fault] + '''
    return result
''')
    return "interpreter/ops/shape.py", CONCATENATE_RIGHT, planted


def planted_plugin(folder, *plants: tuple[str, str, str]) -> str:
    """Build the planted copy under `folder`; the path of its plugin library."""
    venv = os.path.join(str(folder), "venv")
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", venv],
                   check=True)
    purelib = os.path.relpath(sysconfig.get_paths()["purelib"], sys.prefix)
    site_packages = os.path.join(venv, purelib)
    package = os.path.join(site_packages, "pjrt_ref")
    copy = dict(ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
    shutil.copytree(os.path.dirname(pjrt_ref.__file__), package, **copy)
    for part in ("interpreter", "capi_shim", "conformance"):
        spec = importlib.util.find_spec(f"pjrt_ref.{part}")
        shutil.copytree(list(spec.submodule_search_locations)[0], os.path.join(package, part), **copy)
    with open(os.path.join(site_packages, "this-environment.pth"), "w") as handle:
        handle.write("\n".join(site.getsitepackages()) + "\n")
    for path, right, wrong in plants:
        target = os.path.join(package, path)
        with open(target) as handle:
            text = handle.read()
        assert right in text, f"{path} no longer has the kernel the test plants a bug in"
        with open(target, "w") as handle:
            handle.write(text.replace(right, wrong))
    return os.path.join(package, "capi_shim", "_pjrt_ref_isolated" + sysconfig.get_config_var("EXT_SUFFIX"))
