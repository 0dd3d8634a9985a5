"""PyTorch/XLA's face of pjrt-ref: the `torch_xla.plugins` entry point.

`import torch_xla` loads every `torch_xla.plugins` entry point and registers
its `DevicePlugin` under the entry point's name in capitals: our
`PjrtRefPlugin` (`plugin.py`) makes `PJRT_DEVICE=PJRT_REF` run PyTorch/XLA
on pjrt-ref. `suite.py` runs PyTorch/XLA's own test files on pjrt-ref and
on its CPU device (`pjrt-ref torch-tests`).

Only torch_xla and the CLI import this package; nothing in the plugin does.
"""
__all__ = ["DEVICE_TYPE", "PjrtRefPlugin"]


def __getattr__(name: str):
    # plugin.py imports torch_xla: load it when its names are asked for, so
    # that `pjrt-ref torch-tests` does not pay for (or need) torch_xla.
    if name in __all__:
        from pjrt_ref.frameworks.torch import plugin
        return getattr(plugin, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
