"""The op table: op name -> kernel, and custom-call target -> kernel.

A kernel is a plain function `kernel(op, *operands)` that returns one numpy
array, or a tuple of them for ops with several results. `op` is the planned
`OpInfo` (attributes already converted, result/operand types, location).
Ops with regions receive them, bound to the running frame, as the keyword
argument `regions`.

`validate(op)`, if given, runs once when the program is planned: it raises
(via `op.error(...)`) for element types or attribute values the kernel does
not support, so such programs fail at load time, not half way through.

`specialize(op)`, if given, is asked by the plan-time optimiser
(interpreter/jit/fastpath.py) for a leaner kernel for this one op: one whose
decisions that depend only on the op's types and attributes (axes, dtypes,
the ufunc of a body, target shapes) were made once, when the program was
planned, so each call does only the numpy work. It returns such a kernel
(same signature, same results bit for bit) or None where the generic kernel
must run. With PJRT_REF_OPTIMIZE=0 it is never asked: the generic kernels
are the reference the fast ones are tested against.

The tables fill when `ops/` is imported: each family registers its kernels
as its module loads. The registry imports nothing of ops/ (it sits below
them); whoever looks kernels up imports ops/ first (plan.py does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Kernel:
    name: str
    fn: Callable
    validate: Callable | None = None
    specialize: Callable | None = None


KERNELS: dict[str, Kernel] = {}
CUSTOM_CALL_TARGETS: dict[str, Kernel] = {}


def register(*names: str, validate: Callable | None = None,
             specialize: Callable | None = None):
    """Register the decorated function as the kernel of the op(s) `names`."""

    def decorate(fn: Callable) -> Callable:
        for name in names:
            if name in KERNELS:
                raise RuntimeError(f"op {name} registered twice")
            KERNELS[name] = Kernel(name, fn, validate, specialize)
        return fn

    return decorate


def register_custom_call(*targets: str, validate: Callable | None = None):
    """Register the decorated function for `stablehlo.custom_call @target`.

    Only registered targets ever run: a program naming any other target is
    rejected when it is loaded.
    """

    def decorate(fn: Callable) -> Callable:
        for target in targets:
            if target in CUSTOM_CALL_TARGETS:
                raise RuntimeError(f"custom call target {target} registered twice")
            CUSTOM_CALL_TARGETS[target] = Kernel(target, fn, validate)
        return fn

    return decorate


def lookup(name: str) -> Kernel | None:
    return KERNELS.get(name)


def lookup_custom_call(target: str) -> Kernel | None:
    return CUSTOM_CALL_TARGETS.get(target)
