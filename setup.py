"""Build hook: compiles the cffi PJRT shim (capi_shim/build_shim.py) and the
matrix-product thread pool (interpreter/native/build_gemm_pool.py).

Everything else about the distribution lives in pyproject.toml; setuptools
only needs this file to learn about `cffi_modules`, which works for
`pip install .` and `pip install -e .` alike.
"""
from setuptools import setup

setup(cffi_modules=["capi_shim/build_shim.py:ffibuilder",
                     "interpreter/native/build_gemm_pool.py:ffibuilder"])
