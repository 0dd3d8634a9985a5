"""Where values live: the memory-placement and layout annotations JAX puts in programs.

`jax.device_put(x, memory_kind="pinned_host")` inside a jitted function,
`compute_on("device_host")`, and remat offload policies mark values with

    %y = stablehlo.custom_call @annotate_device_placement(%x) {has_side_effect = true,
           mhlo.frontend_attributes = {_xla_buffer_placement = "pinned_host"}}

(older JAX: `@MoveToHost` / `@MoveToDevice`), and the entry function's
parameters and results with `mhlo.memory_kind`. XLA moves the value into
that memory space; the value itself does not change.

pjrt-ref's memories of every kind are host RAM (pjrt_ref/model/memory.py),
so a placement is the identity on values. What a framework can observe —
which memory a parameter or result lives in — follows the entry function's
`mhlo.memory_kind` (pjrt_ref/model/executable.py). A placement names a
kind pjrt-ref has, checked when the program is loaded.

`with_sharding_constraint(x, Format(Layout(...)))` inside `jit` becomes
`stablehlo.custom_call @LayoutConstraint(%x) {result_layouts = [...]}`: XLA
lays the value out so. A layout never changes a value
(pjrt_ref/model/layouts.py), and inside a program the interpreter's arrays
have no layout anyone can observe, so it is the identity too.
"""
from __future__ import annotations

from pjrt_ref.interpreter.registry import register_custom_call

# The memory kinds of pjrt_ref/model/memory.py (the interpreter does not import the object model).
MEMORY_KINDS = ("device", "pinned_host", "unpinned_host")
_PLACEMENT = "_xla_buffer_placement"


def _validate_placement(op) -> None:
    """A placement names one of pjrt-ref's memory kinds (or none: XLA's default)."""
    attributes = op.attrs.get("mhlo.frontend_attributes") or {}
    kind = attributes.get(_PLACEMENT) if isinstance(attributes, dict) else None
    if kind is not None and kind not in MEMORY_KINDS:
        raise op.error(f"@{op.attrs.get('call_target_name')}: {_PLACEMENT} = {kind!r} names no "
                       f"memory kind of pjrt_ref "
                       f"({', '.join(MEMORY_KINDS)})")


@register_custom_call("annotate_device_placement", "MoveToHost", "MoveToDevice",
                      validate=_validate_placement)
def annotate_device_placement(op, *operands):
    """The operand(s) unchanged: placing a value in another memory does not change it."""
    return operands[0] if len(operands) == 1 else tuple(operands)


@register_custom_call("LayoutConstraint")
def layout_constraint(op, operand):
    """The operand unchanged: a layout says how elements lie in memory, not what they are."""
    return operand
