"""cffi builder for the product pool's C module (API mode, out of line).

Produces `pjrt_ref/interpreter/native/_gemm_pool*.so`, an ordinary CPython
extension whose functions (gemm_pool.h) gemm_pool.py calls. cffi's API mode
releases the GIL around every call, which is the point: a split product
runs entirely without it (gemm_pool.c explains the pool).

Built by setuptools through `cffi_modules` (setup.py), for `pip install .`
and `pip install -e .` alike; `python interpreter/native/build_gemm_pool.py`
builds it in place. If the module cannot be built or imported, products
are split over Python threads instead (products.py).
"""
from __future__ import annotations

import os
import sysconfig

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE_NAME = "pjrt_ref.interpreter.native._gemm_pool"
HEADER = os.path.join(HERE, "gemm_pool.h")
SOURCE = os.path.join(HERE, "gemm_pool.c")


def cdef_text() -> str:
    """The header as cffi's parser takes it: without preprocessor lines,
    and with its constants declared so Python can read them."""
    with open(HEADER) as f:
        lines = [line for line in f.read().splitlines() if not line.lstrip().startswith("#")]
    names = ("GEMM_POOL_ABI", "GEMM_POOL_MAX_WORKERS", "GEMM_POOL_MAX_BLOCKS", "GEMM_POOL_ROW_BLOCKS",
             "GEMM_POOL_COLUMN_BLOCKS")
    constants = "".join(f"#define {name} ...\n" for name in names)
    return constants + "\n".join(lines)


def make_builder() -> cffi.FFI:
    builder = cffi.FFI()
    builder.cdef(cdef_text())
    with open(SOURCE) as f:
        source = f.read()
    builder.set_source(MODULE_NAME, source, include_dirs=[HERE], libraries=["pthread"],
                       extra_compile_args=["-O2", "-std=gnu11"], depends=[HEADER, SOURCE],
                       py_limited_api=False)   # one file name for both builds (EXT_SUFFIX)
    return builder


ffibuilder = make_builder()


def build_in_place() -> str:
    """Development build: the .so lands next to this file (replaced with one
    rename, so processes that have the old one mapped keep their copy)."""
    build_dir = os.path.join(HERE, "..", "..", "build", "gemm_pool")
    final = os.path.join(HERE, "_gemm_pool" + sysconfig.get_config_var("EXT_SUFFIX"))
    built = ffibuilder.compile(tmpdir=build_dir, target=os.path.join(build_dir, "_gemm_pool.so.new"))
    os.replace(built, final)
    return final


if __name__ == "__main__":
    print(build_in_place())
