"""numba's machine code in a Python of the plugin's own (PJRT_REF_RUNTIME=isolated).

A compiled kernel's wrapper calls Python's C API (PyNumber_Long,
PyErr_SetString, Py_None...). LLVM finds those by name with dlsym on the
process's main program, and in a link namespace of our own
(capi_shim/isolated_runtime.c) that finds the host's libpython: the call
then runs on the host's interpreter with our objects, and crashes. So,
before numba compiles or loads its first kernel, every symbol our libpython
exports is given to LLVM by address (llvmlite's `add_symbol`, which LLVM
searches before any library). `ctypes.pythonapi` has the same trap (it is
dlsym on the main program) and is pointed at our libpython too.
"""
from __future__ import annotations

import ctypes
import os
import struct
import sysconfig
import threading

from pjrt_ref import settings

_lock = threading.Lock()
_done = False

_SHT_DYNSYM = 11
_BINDINGS_SEEN_BY_OTHERS = (1, 2)   # STB_GLOBAL, STB_WEAK


def bind_compiled_code_to_own_python() -> None:
    """In a Python of our own: make numba's code and ctypes call our libpython. Once."""
    global _done
    if _done or not settings.runs_in_own_python():
        return
    with _lock:
        if _done:
            return
        path = own_libpython_path()
        library = ctypes.PyDLL(path)    # dlopen from our namespace: our copy of it
        ctypes.pythonapi = library
        import llvmlite.binding as llvm
        for name in exported_symbols(path):
            try:
                address = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
            except AttributeError:
                continue
            llvm.add_symbol(name, address)
        _done = True


def own_libpython_path() -> str:
    """The file of the libpython this interpreter runs on."""
    soname = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    candidate = os.path.join(sysconfig.get_config_var("LIBDIR") or "", soname)
    if os.path.exists(candidate):
        return candidate
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("/" + soname):
                return line.split(None, 5)[5].strip()
    raise FileNotFoundError(f"cannot find {soname}, the libpython this Python runs on")


def exported_symbols(path: str) -> list[str]:
    """Names of the symbols an ELF64 shared library defines for others (its .dynsym)."""
    with open(path, "rb") as f:
        data = f.read()
    section_offset, = struct.unpack_from("<Q", data, 0x28)
    entry_size, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, section_offset + i * entry_size)
                for i in range(count)]
    names = []
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind != _SHT_DYNSYM:
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, 24):
            name_at, info, _, section, _, _ = struct.unpack_from("<IBBHQQ", data, at)
            if section != 0 and info >> 4 in _BINDINGS_SEEN_BY_OTHERS and name_at:
                start = strings + name_at
                names.append(data[start:data.index(b"\0", start)].decode())
    return names
