"""JAX's entry point for pjrt-ref (`[project.entry-points.jax_plugins]`).

JAX calls `initialize()` while discovering plugins. We register the shim
library under the platform name "pjrt_ref" with a priority below the CPU
backend's (0), so a plain `import jax` keeps "cpu" as the default backend;
`JAX_PLATFORMS=pjrt_ref` or `jax.devices("pjrt_ref")` select ours.

Registration only loads the shim (which imports the small `pjrt_ref.capi`
package); the interpreter, jaxlib's MLIR bindings and numba are imported
when the first program is compiled.
"""
from __future__ import annotations

PLATFORM = "pjrt_ref"
PRIORITY = -100


def _allow_donation() -> None:
    """JAX only emits buffer-donation aliases for platforms it lists; add ours.

    pjrt-ref honours `tf.aliasing_output` / `jax.buffer_donor` by deleting
    donated arguments, which is what `donate_argnums` promises.
    """
    from jax._src.interpreters import mlir

    if PLATFORM not in mlir._platforms_with_donation:
        mlir._platforms_with_donation.append(PLATFORM)


def _named_in_environment() -> bool:
    """Whether PJRT_NAMES_AND_LIBRARY_PATHS already registers "pjrt_ref" (JAX reads it after us)."""
    import os

    entries = os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS", "")
    separator = ";" if os.name == "nt" else ":"
    return any(entry.split(separator, 1)[0].strip() == PLATFORM for entry in entries.split(",") if entry)


def initialize() -> None:
    from jax._src import xla_bridge

    from . import library_path

    if not _named_in_environment():     # an explicit PJRT_NAMES_AND_LIBRARY_PATHS entry wins
        xla_bridge.register_plugin(PLATFORM, priority=PRIORITY, library_path=library_path())
    try:
        _allow_donation()
    except (ImportError, AttributeError):  # pragma: no cover - a future JAX moved it
        pass
