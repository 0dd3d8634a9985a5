"""Framework hooks: what a framework needs beyond the PJRT C API.

- `jax/`: JAX's plugin entry point (registration, host-callback lowering) and
  the lowering rules pjrt-ref registers for its platform.

Nothing below `pjrt_ref.capi` imports this package: frameworks sit beside the
plugin, never underneath it.
"""
