"""JAX's face of pjrt-ref: the `jax_plugins` entry point.

JAX imports this package while discovering plugins and calls `initialize()`
(`plugin.py`), which registers the shim library as platform "pjrt_ref".
"""
from pjrt_ref.frameworks.jax.plugin import PLATFORM, initialize

__all__ = ["PLATFORM", "initialize"]
