"""Build hook: compiles the cffi PJRT shim (capi_shim/build_shim.py), the
matrix-product thread pool (interpreter/native/build_gemm_pool.py), the
small C library that loads the shim into a Python of its own
(capi_shim/isolated_runtime.c), and the recording proxy the plugin test kit
puts in front of a plugin under test (capi_shim/recording_proxy.c).

Everything else about the distribution lives in pyproject.toml; setuptools
only needs this file to learn about `cffi_modules` and the C library, which
works for `pip install .` and `pip install -e .` alike.
"""
import os
import sys
import sysconfig

from setuptools import Extension, setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "capi_shim"))
from entry_points import SLOTS  # noqa: E402

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

# Also a plain C library: a PJRT plugin that forwards to another. It finds
# its slots in the plugin's table by their position in entry_points.SLOTS.
RECORDED_SLOTS = ("PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Event_Destroy", "PJRT_Event_Await",
                  "PJRT_Client_Compile", "PJRT_Executable_DeserializeAndLoad",
                  "PJRT_LoadedExecutable_Execute", "PJRT_Buffer_ElementType", "PJRT_Buffer_Dimensions",
                  "PJRT_Buffer_ToHostBuffer")
recording_proxy = Extension(
    "pjrt_ref.capi_shim._pjrt_ref_recorder",
    sources=["capi_shim/recording_proxy.c"],
    depends=["capi_shim/pjrt_c_api.h", "capi_shim/entry_points.py"],
    include_dirs=["capi_shim"],
    define_macros=[(f"PJRT_REF_SLOT_{name}", str(SLOTS.index(name))) for name in RECORDED_SLOTS],
    libraries=["dl", "pthread"],
)

setup(cffi_modules=["capi_shim/build_shim.py:ffibuilder",
                     "interpreter/native/build_gemm_pool.py:ffibuilder"],
      ext_modules=[isolated_runtime, recording_proxy])
