"""Build hook: compiles the cffi PJRT shim (capi_shim/build_shim.py), the
matrix-product thread pool (interpreter/native/build_gemm_pool.py), and the
small C library that loads the shim into a Python of its own
(capi_shim/isolated_runtime.c).

Everything else about the distribution lives in pyproject.toml; setuptools
only needs this file to learn about `cffi_modules` and the C library, which
works for `pip install .` and `pip install -e .` alike.
"""
import sysconfig

from setuptools import Extension, setup

SHIM_FILE = "_pjrt_ref_shim" + sysconfig.get_config_var("EXT_SUFFIX")

# A plain C library, not a Python module: it never imports Python, so a
# framework can dlopen it before any Python exists in the process.
isolated_runtime = Extension(
    "pjrt_ref.capi_shim._pjrt_ref_isolated",
    sources=["capi_shim/isolated_runtime.c"],
    depends=["capi_shim/host_heap.h"],
    define_macros=[("PJRT_REF_SHIM_FILE", f'"{SHIM_FILE}"')],
    libraries=["dl", "pthread"],
)

setup(cffi_modules=["capi_shim/build_shim.py:ffibuilder",
                     "interpreter/native/build_gemm_pool.py:ffibuilder"],
      ext_modules=[isolated_runtime])
