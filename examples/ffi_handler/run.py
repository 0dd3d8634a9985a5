"""Build a small XLA FFI handler library, register it for pjrt_ref, run it.

    JAX_PLATFORMS=pjrt_ref,cpu python examples/ffi_handler/run.py

Compiles axpb.cc with g++ against the headers jaxlib ships
(`jax.ffi.include_dir()`) into a temporary directory, registers its two
handlers with `jax.ffi.register_ffi_target(..., platform="pjrt_ref")`, calls
them with `jax.ffi.ffi_call` on pjrt_ref and compares with numpy; then shows
a handler's error arriving as a Python exception.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def build(source: str, directory: str) -> str:
    """Compile `source` into a shared library in `directory`; its path."""
    import jax
    library = os.path.join(directory, "libaxpb.so")
    subprocess.run(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-w", f"-I{jax.ffi.include_dir()}",
                    source, "-o", library], check=True)
    return library


def main() -> int:
    import jax
    import jax.numpy as jnp

    with tempfile.TemporaryDirectory() as directory:
        library = ctypes.cdll.LoadLibrary(build(os.path.join(HERE, "axpb.cc"), directory))
        for name in ("Axpb", "SqrtOrError"):
            jax.ffi.register_ffi_target(name.lower(), jax.ffi.pycapsule(getattr(library, name)),
                                        platform="pjrt_ref")

        device = jax.devices("pjrt_ref")[0]
        x = np.linspace(-2.0, 2.0, 8, dtype=np.float32)

        def axpb(x, a, b):
            return jax.ffi.ffi_call("axpb", jax.ShapeDtypeStruct(x.shape, x.dtype))(
                x, a=np.float32(a), b=np.float32(b))

        y = jax.jit(axpb, static_argnums=(1, 2))(jax.device_put(x, device), 3.0, 0.5)
        expected = np.float32(3.0) * x + np.float32(0.5)
        print("axpb on", y.devices().pop(), ":", np.asarray(y))
        print("numpy              :", expected)
        print("equal:", np.array_equal(np.asarray(y), expected))

        def sqrt_or_error(x):
            return jax.ffi.ffi_call("sqrtorerror", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

        print("sqrt of |x|:", np.asarray(jax.jit(sqrt_or_error)(jax.device_put(np.abs(x), device))))
        try:
            jax.jit(sqrt_or_error)(jax.device_put(x, device)).block_until_ready()
        except Exception as error:   # jax.errors.JaxRuntimeError
            print("sqrt of x raised", type(error).__name__ + ":", error)
        else:
            print("sqrt of x did not raise")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
