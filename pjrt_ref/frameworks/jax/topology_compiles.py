"""Compiles against a topology (`jax.experimental.topologies`) on jaxlib 0.10.

When a program is lowered for a topology's devices, JAX compiles it through
the real client of the same platform if there is one
(`jax._src.compiler._get_cross_compile_backend`), calling
`PyClient::CompileWithTopology`. In jaxlib 0.10 that call keeps the GIL
while it waits for the compile, and XLA's PjRt-IFRT layer runs the compile
(our `PJRT_Compile`) on a thread of its own compiler pool (jax-ml/jax#38829;
XLA removed the pool in "Disable async compilation in PjRt-IFRT", and
jaxlib 0.11.0 onwards compiles on the caller's thread). On the shared
runtime pjrt-ref's `PJRT_Compile` runs in the host's Python, so that
thread waits for the GIL its caller holds, for ever.

JAX's other route for the same compile, the topology's compile-only client
(used whenever no real client of the platform exists), calls `PJRT_Compile`
from the thread that holds the GIL, and gives the same executable. So on an
affected jaxlib, `route_topology_compiles` makes JAX take that route for
pjrt_ref; on every other jaxlib, and for every other platform, JAX decides.
"""
from __future__ import annotations

from typing import Callable

# The first jaxlib whose topology compile runs on the calling thread.
FIRST_JAXLIB_COMPILING_ON_THE_CALLER = (0, 11, 0)


def jaxlib_compiles_on_a_pool(version: str) -> bool:
    """Whether this jaxlib version compiles a topology's program on a worker
    thread while the caller keeps the GIL (jaxlib 0.10.x)."""
    numbers = []
    for part in version.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits) if digits else 0)
    return tuple(numbers) < FIRST_JAXLIB_COMPILING_ON_THE_CALLER


def route_topology_compiles(platform: str) -> None:
    """On an affected jaxlib, compile `platform`'s topology programs through
    JAX's compile-only client (idempotent)."""
    import jaxlib
    from jax._src import compiler

    if not jaxlib_compiles_on_a_pool(jaxlib.__version__):
        return
    choose = compiler._get_cross_compile_backend
    if not hasattr(choose, "pjrt_ref_wraps"):
        compiler._get_cross_compile_backend = _without_cross_compile_for(platform, choose)


def _without_cross_compile_for(platform: str, jax_choice: Callable) -> Callable:
    def _get_cross_compile_backend(compile_only_backend):
        if getattr(compile_only_backend, "platform", None) == platform:
            return None
        return jax_choice(compile_only_backend)

    _get_cross_compile_backend.pjrt_ref_wraps = jax_choice
    _get_cross_compile_backend.__doc__ = jax_choice.__doc__
    return _get_cross_compile_backend
