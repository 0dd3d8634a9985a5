"""User XLA FFI handlers on pjrt-ref: custom calls the interpreter runs by
calling C functions the user registered.

How a handler gets here and runs:
1. The user compiles a handler against jaxlib's `xla/ffi/api/ffi.h`
   (`jax.ffi.include_dir()`) and registers it:
   `jax.ffi.register_ffi_target("axpb", jax.ffi.pycapsule(lib.Axpb), platform="pjrt_ref")`.
   jaxlib hands registrations for a plugin's platform to the handler the
   plugin installed (`xla_client.register_custom_call_handler`); pjrt-ref's
   (pjrt_ref/frameworks/jax/ffi.py) calls the PJRT FFI extension's
   `register_handler` (pjrt_ref/capi/ffi_extension.py), as jaxlib does for
   XLA's GPU plugins, and that adds it to `targets.py`'s table.
2. `jax.ffi.ffi_call("axpb", ...)` emits `stablehlo.custom_call @axpb` with
   its attributes in a dictionary. When the program is planned, the
   custom_call op (ops/core.py) finds the target in the table (`plan_call`)
   and encodes the attributes once (attributes.py, call_frame.py).
3. Each execution builds an XLA_FFI_CallFrame over the operands' memory and
   fresh result arrays (buffers.py) and calls the handler through the C
   bridge (bridge.py, xla_ffi_api.c: pjrt-ref's XLA_FFI_Api table), without
   the GIL. An error the handler returns is the execution's error, with the
   handler's message.

Legacy custom calls (XLA CPU's raw-pointer targets, api_version 0) run
through legacy.py. The PJRT FFI extension of PJRT 0.114 carries typed
handlers only, so JAX's `register_ffi_target(..., api_version=0)` is refused
for pjrt_ref with that reason; such a target is registered from Python with
`targets.register(name, address, platform="pjrt_ref", api_version=0)`.
"""
from __future__ import annotations

from pjrt_ref.interpreter.ffi import targets
from pjrt_ref.interpreter.ffi.call_frame import TypedCall
from pjrt_ref.interpreter.ffi.legacy import LegacyCall


def plan_call(op, target: str):
    """The kernel `run(operands) -> results` of a custom call to user target
    `target`, or None if no handler is registered under that name."""
    handler = targets.lookup(target)
    if handler is None:
        return None
    if handler.api_version == targets.TYPED_FFI:
        return TypedCall(op, handler)
    return LegacyCall(op, handler)
