"""numpy's OpenBLAS: which library it is, and the few functions we call in it.

numpy multiplies float matrices with the BLAS its build linked: the
OpenBLAS bundled in its wheel (numpy.libs/libscipy_openblas64_-*.so for
numpy 2, libopenblas64_p-*.so for 1.26), or a system or conda
libopenblas. Other packages may load an OpenBLAS of their own into the same
process (scipy's wheel bundles an LP64 one in scipy.libs/), so "a library
named openblas" is not enough: `find()` takes the mapped libraries of this
process (/proc/self/maps) that belong to numpy or to no Python package at
all, then numpy's wheel folder, and keeps the first one that answers
OpenBLAS's own `openblas_get_config`.

Symbol names differ between builds. The scipy-openblas wheels prefix the
public names with `scipy_`, and ILP64 builds (64-bit integer arguments)
add the suffix `64_`: `scipy_cblas_sgemm64_`, `openblas_set_num_threads64_`,
plain `cblas_sgemm` in a system LP64 build. `_function` tries each spelling.

Without an OpenBLAS (numpy on MKL or Accelerate, no /proc, a stripped
build) `find()` is None and pjrt-ref degrades cleanly: OpenBLAS's threads
are left alone and every product is one np.matmul call (openblas_threads.py).
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
from dataclasses import dataclass, field

import numpy as np

# Spellings of one OpenBLAS function name: (prefix, suffix).
_PREFIXES = ("scipy_", "")
_SUFFIXES = ("64_", "_64", "")
_GEMMS = {np.dtype(np.float32): "cblas_sgemm", np.dtype(np.float64): "cblas_dgemm"}


@dataclass(frozen=True)
class OpenBLAS:
    """One loaded OpenBLAS and what pjrt-ref uses of it."""
    path: str
    config: str                 # openblas_get_config(): version and build options
    corename: str               # the kernels it chose for this CPU ("Haswell", "SkylakeX", ...)
    library: ctypes.CDLL = field(repr=False)
    # address of the ILP64 cblas_?gemm by dtype (the C pool's signature, gemm_pool.h)
    gemms: dict = field(repr=False)

    def function(self, base: str):
        return _function(self.library, base)

    def set_threads(self, threads: int) -> bool:
        """openblas_set_num_threads (process-wide); False if it has none."""
        setter = self.function("openblas_set_num_threads")
        if setter is None:
            return False
        setter(ctypes.c_int(threads))
        return True

    def threads(self) -> int | None:
        """openblas_get_num_threads: the threads it runs products on."""
        getter = self.function("openblas_get_num_threads")
        if getter is None:
            return None
        getter.restype = ctypes.c_int
        return int(getter())

    def cblas(self, base: str):
        """(function, integer type) of cblas function `base` ("cblas_sgemv"):
        the integer type its sizes and strides are (64-bit in an ILP64
        build), or None if the library lacks it."""
        for prefix in _PREFIXES:
            for suffix in _SUFFIXES:
                found = getattr(self.library, prefix + base + suffix, None)
                if found is not None:
                    wide = suffix != "" or "USE64BITINT" in self.config
                    return found, (ctypes.c_int64 if wide else ctypes.c_int)
        return None

    def thread_local_setter(self):
        """openblas_set_num_threads_local (this thread's calls only), or
        None: OpenBLAS 0.3.27 added it, but not every build exports it."""
        return self.function("openblas_set_num_threads_local")


def _function(library: ctypes.CDLL, base: str):
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            found = getattr(library, prefix + base + suffix, None)
            if found is not None:
                return found
    return None


def _text(library: ctypes.CDLL, base: str) -> str | None:
    getter = _function(library, base)
    if getter is None:
        return None
    getter.restype = ctypes.c_char_p
    value = getter()
    return value.decode(errors="replace").strip() if value else ""


def _ilp64_gemms(library: ctypes.CDLL, config: str) -> dict:
    """The cblas gemm functions whose integer arguments are 64-bit: the
    `64_`-suffixed names, or the plain ones in a build made with
    USE64BITINT."""
    gemms = {}
    for dtype, base in _GEMMS.items():
        for prefix in _PREFIXES:
            names = [prefix + base + "64_"] + ([prefix + base] if "USE64BITINT" in config else [])
            function = next((getattr(library, n) for n in names if hasattr(library, n)), None)
            if function is not None:
                gemms[dtype] = ctypes.cast(function, ctypes.c_void_p).value
                break
    return gemms if len(gemms) == len(_GEMMS) else {}


def candidate_paths(mapped: list[str], numpy_dir: str) -> list[str]:
    """Paths of OpenBLAS libraries that may be numpy's, best first: mapped
    ones inside numpy's wheel (numpy.libs/, numpy/.libs/), then mapped ones
    outside any Python package (a system library), then the wheel's folder
    on disk. A library inside another package (scipy.libs/) is another
    package's own copy and never numpy's."""
    site = os.path.dirname(numpy_dir)
    owned = (os.path.join(site, "numpy.libs") + os.sep, numpy_dir + os.sep)
    blas = [p for p in dict.fromkeys(mapped) if "openblas" in p.lower() and ".so" in p]
    numpys = [p for p in blas if p.startswith(owned)]
    system = [p for p in blas if "site-packages" not in p and "dist-packages" not in p
              and p not in numpys]
    on_disk = sorted(glob.glob(os.path.join(site, "numpy.libs", "*openblas*.so*")))
    return list(dict.fromkeys(numpys + system + on_disk))


def _mapped_paths() -> list[str]:
    """Files mapped into this process (Linux), in map order."""
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.split(None, 5) for line in maps]
    except OSError:
        return []
    return [f[5].strip() for f in fields if len(f) == 6 and f[5].startswith("/")]


def load(path: str) -> OpenBLAS | None:
    """The OpenBLAS at `path`, or None if it is not one (or does not load)."""
    try:
        library = ctypes.CDLL(path)
    except OSError:
        return None
    config = _text(library, "openblas_get_config")
    if config is None:
        return None
    corename = _text(library, "openblas_get_corename") or "unknown"
    return OpenBLAS(path, config, corename, library, _ilp64_gemms(library, config))


@functools.cache
def find() -> OpenBLAS | None:
    """numpy's OpenBLAS (see the module docstring), or None."""
    for path in candidate_paths(_mapped_paths(), os.path.dirname(np.__file__)):
        found = load(path)
        if found is not None:
            return found
    return None


def describe() -> dict:
    """What benchmark reports record: the library, its version and build,
    and the kernels it picked for this CPU."""
    found = find()
    if found is None:
        return {"blas": "no OpenBLAS found (numpy's BLAS: "
                        f"{_numpy_blas_name()})", "corename": None}
    return {"blas": os.path.basename(found.path), "config": found.config,
            "corename": found.corename}


def _numpy_blas_name() -> str:
    try:
        return str(np.__config__.CONFIG["Build Dependencies"]["blas"]["name"])
    except (AttributeError, KeyError, TypeError):
        return "unknown"
