"""pjrt-ref as a PyTorch/XLA device plugin (`[project.entry-points."torch_xla.plugins"]`).

PyTorch/XLA's plugin interface (torch_xla/experimental/plugins.py,
docs/source/contribute/plugins.md) asks a plugin package for a
`DevicePlugin` whose `library_path()` is the PJRT C API library; torch_xla
dlopens it, calls `GetPjrtApi` (from a pybind11 function, holding the GIL:
capi_shim/python_boot.c is why that works) and creates its client through
the C API, as for any other plugin.

All of pjrt-ref's virtual devices live in this one process
(`PJRT_REF_NUM_DEVICES`, read by the plugin's client, default 1), so
PyTorch/XLA runs one process per host: `physical_chip_count()` is 1.
"""
from __future__ import annotations

from torch_xla.experimental import plugins

import pjrt_ref

DEVICE_TYPE = "PJRT_REF"     # PJRT_DEVICE=PJRT_REF; torch_xla uppercases the entry point's name


class PjrtRefPlugin(plugins.DevicePlugin):
    """The `DevicePlugin` torch_xla registers as PJRT_REF."""

    def library_path(self) -> str:
        # torch_xla holds the GIL while it waits for results (indexing with a
        # tensor not yet computed): the plugin needs a Python of its own.
        return pjrt_ref.library_path(runtime="isolated")

    def physical_chip_count(self) -> int:
        """Processes torch_xla should start per host (xmp.spawn, torchrun): one, which has every device."""
        return 1

    def configure_single_process(self) -> None:
        """Nothing to set: one process is pjrt-ref's only mode."""
