"""Core ops every program needs: constants, calls and custom calls.

Spec sections: "constant", "custom_call"; and `func.call` (builtin calls).
"""
from __future__ import annotations

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter import ffi
from pjrt_ref.interpreter.attributes import filled
from pjrt_ref.interpreter.registry import Kernel, lookup_custom_call, register, register_custom_call


@register("stablehlo.constant")
def constant(op):
    """Spec "constant": the `value` attribute, already a numpy array. A
    splat is held as its one value (attributes.splat_array) and written out
    here, once, the first time a plan needs its elements; the optimiser
    plans most big ones as a scalar instead (optimiser/splat_constants.py)."""
    value = op.cache.get("filled")
    if value is None:
        value = op.cache["filled"] = filled(op.attrs["value"])
    return value


@register("func.call")
def call(op, *operands):
    """Call another function of the module with a fresh frame."""
    callee = op.module.function(op.attrs["callee"])
    results = callee.run(list(operands))
    return results[0] if len(results) == 1 else tuple(results)


def _validate_custom_call(op) -> None:
    target = op.attrs.get("call_target_name", "")
    kernel = lookup_custom_call(target)
    if kernel is None:
        kernel = _user_ffi_target(op, target)
    op.cache["target"] = kernel
    if kernel.validate is not None:
        kernel.validate(op)


def _user_ffi_target(op, target: str) -> Kernel:
    """A target the user registered as an XLA FFI handler (interpreter/ffi)."""
    call = ffi.plan_call(op, target)
    if call is None:
        raise op.error(ffi.targets.unknown_target_message(target), cls=Unimplemented)
    return Kernel(target, lambda op, *operands: _results(call(operands)))


def _results(values: list):
    return values[0] if len(values) == 1 else tuple(values)


@register("stablehlo.custom_call", validate=_validate_custom_call)
def custom_call(op, *operands):
    """Spec "custom_call": run the registered target named by the op.

    Targets are looked up when the program is loaded: pjrt-ref's own in
    `registry.CUSTOM_CALL_TARGETS`, then the C handlers the user registered
    through XLA FFI (interpreter/ffi); nothing in a program can reach any
    other code.
    """
    return op.cache["target"].fn(op, *operands)


@register_custom_call("dce_sink")
def dce_sink(op, *operands):
    """JAX's `lax.dce_sink(x, prevent_mlir_dce=True)`: a side-effecting call
    with no results whose only job is to keep `x` computed. Every op runs
    here anyway, so there is nothing to do."""
    return ()


@register_custom_call("control_dep")
def control_dep(op, *operands):
    """`jax.experimental.control_deps.control_dep(src, dst)`: a side-effecting
    call with no results that asks XLA's scheduler to run what computes
    `src` before what computes `dst`. Values do not depend on the order, and
    the interpreter runs ops in program order, so there is nothing to do."""
    return ()
