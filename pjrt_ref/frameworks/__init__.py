"""Framework hooks: what a framework needs beyond the PJRT C API.

- `jax/`: JAX's plugin entry point (registration, host-callback lowering) and
  the lowering rules pjrt-ref registers for its platform.
- `torch/`: PyTorch/XLA's `DevicePlugin` (the `torch_xla.plugins` entry point).
- `suite_runner.py`: running a framework's own test files on its reference
  backend and on pjrt_ref (`pjrt-ref jax-tests`, `pjrt-ref torch-tests`).

Nothing below `pjrt_ref.capi` imports this package: frameworks sit beside the
plugin, never underneath it.
"""
