"""Ops that run another computation: composite, async_start, async_done.

Spec sections "composite", "async_start" and "async_done" (docs/spec.md).
(`func.call` lives in `core.py`.)
"""
from __future__ import annotations

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.control import as_results


def _validate_composite(op) -> None:
    name = op.attrs.get("decomposition")
    if name not in op.module.function_names:
        raise op.error(f"decomposition @{name} of composite "
                       f"'{op.attrs.get('name', '?')}' is not a function of the module",
                       cls=InvalidArgument)


@register("stablehlo.composite", validate=_validate_composite)
def composite(op, *inputs, regions=()):
    """Spec "composite": run the `decomposition` function on `inputs`.

    The spec defines a composite by its decomposition, so `name`,
    `composite_attributes`, `version` and the optional `regions` (which
    only model the body of the composed op) change nothing here. The callee
    runs in a fresh frame, like `func.call`.
    """
    decomposition = op.module.function(op.attrs["decomposition"])
    return as_results(op, decomposition.run(list(inputs)))


@register("stablehlo.async_start")
def async_start(op, *operands, regions):
    """Spec "async_start": start the one-op `body` on `operands`.

    The spec lets a backend run the computation synchronously, which is
    what happens here: the future's value is the tuple of the body's
    results, ready at once.
    """
    (body,) = regions
    return tuple(body(*operands))


@register("stablehlo.async_done")
def async_done(op, future):
    """Spec "async_done": the values of the `future` made by `async_start`."""
    return as_results(op, future)
