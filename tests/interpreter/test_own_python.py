"""interpreter/native/own_python.py: what numba's code is bound to in a
Python of the plugin's own (PJRT_REF_RUNTIME=isolated)."""
from __future__ import annotations

import ctypes
import sysconfig

import pytest

from pjrt_ref.interpreter.native import own_python

pytestmark = pytest.mark.skipif(not sysconfig.get_config_var("Py_ENABLE_SHARED"),
                                reason="a Python linked statically has no libpython to read")


def test_the_exported_symbols_are_libpythons_own_definitions():
    path = own_python.own_libpython_path()
    names = set(own_python.exported_symbols(path))
    # functions and data a compiled kernel's wrapper uses
    assert {"PyNumber_Long", "PyErr_SetString", "_Py_NoneStruct", "PyExc_RuntimeError"} <= names
    # libc's functions are imported by libpython, not defined by it
    assert "malloc" not in names and "memcpy" not in names
    library = ctypes.PyDLL(path)
    assert all(getattr(library, name) for name in ("PyNumber_Long", "_Py_NoneStruct"))


def test_in_the_hosts_python_nothing_is_rebound(monkeypatch):
    before = ctypes.pythonapi
    monkeypatch.setattr(own_python, "_done", False)
    own_python.bind_compiled_code_to_own_python()
    assert ctypes.pythonapi is before and own_python._done is False
