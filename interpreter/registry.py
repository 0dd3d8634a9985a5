"""The op table: op name -> kernel.

A kernel is a plain function `kernel(op, *operands)` that returns one numpy
array, or a tuple of them for ops with several results. `op` is the planned
`OpInfo` (attributes already converted, result types, location). Ops with
regions are registered with `regions=True` and receive the regions bound to
the running frame as the keyword argument `regions`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Kernel:
    name: str
    fn: Callable
    takes_regions: bool = False


KERNELS: dict[str, Kernel] = {}


def register(*names: str, regions: bool = False):
    """Register the decorated function as the kernel of the op(s) `names`."""

    def decorate(fn: Callable) -> Callable:
        for name in names:
            if name in KERNELS:
                raise RuntimeError(f"op {name} registered twice")
            KERNELS[name] = Kernel(name, fn, regions)
        return fn

    return decorate


def lookup(name: str) -> Kernel | None:
    _load_op_modules()
    return KERNELS.get(name)


_LOADED = False


def _load_op_modules() -> None:
    global _LOADED
    if not _LOADED:
        _LOADED = True
        from . import ops  # noqa: F401  (registers every family)
