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
(interpreter/optimiser/direct_kernels.py) for a leaner kernel for this one op: one whose
decisions that depend only on the op's types and attributes (axes, dtypes,
the ufunc of a body, target shapes) were made once, when the program was
planned, so each call does only the numpy work. It returns such a kernel
(same signature, same results bit for bit) or None where the generic kernel
must run. With PJRT_REF_OPTIMIZE=0 it is never asked: the generic kernels
are the reference the fast ones are tested against.

The tables fill as the families of `ops/` are imported: each registers its
kernels as its module loads. A program that uses three ops should not wait
for fifty families to load (the first compile of a fresh process,
benchmarks/README.md W0), so `lookup` imports, by name, the family that
`op_index.py` says registers an op it does not have yet. The registry
imports no family's code itself (the families import the registry); a
family is named in the index only. `ops.load_all()` fills the tables whole.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Callable

from pjrt_ref.interpreter.op_index import CUSTOM_CALL_FAMILIES, OP_FAMILIES


@dataclass(frozen=True)
class Kernel:
    name: str
    fn: Callable
    validate: Callable | None = None
    specialize: Callable | None = None
    module: str = ""           # the module that registered it (op_index.py's index)


KERNELS: dict[str, Kernel] = {}
CUSTOM_CALL_TARGETS: dict[str, Kernel] = {}


def _import_family(family: str | None) -> None:
    """Import op family `family` (a module of ops/), which registers its kernels."""
    if family is not None:
        importlib.import_module(f"{__package__}.ops.{family}")


def _registering_module() -> str:
    """The module whose import is registering a kernel: the innermost frame
    running a module's top level (families may register through a helper
    of another module, as the LAPACK families do with `add_target`)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


def register(*names: str, validate: Callable | None = None,
             specialize: Callable | None = None):
    """Register the decorated function as the kernel of the op(s) `names`."""

    module = _registering_module()

    def decorate(fn: Callable) -> Callable:
        for name in names:
            if name in KERNELS:
                raise RuntimeError(f"op {name} registered twice")
            KERNELS[name] = Kernel(name, fn, validate, specialize, module)
        return fn

    return decorate


def register_custom_call(*targets: str, validate: Callable | None = None):
    """Register the decorated function for `stablehlo.custom_call @target`.

    Only registered targets ever run: a program naming any other target is
    rejected when it is loaded.
    """

    module = _registering_module()

    def decorate(fn: Callable) -> Callable:
        for target in targets:
            if target in CUSTOM_CALL_TARGETS:
                raise RuntimeError(f"custom call target {target} registered twice")
            CUSTOM_CALL_TARGETS[target] = Kernel(target, fn, validate, module=module)
        return fn

    return decorate


def lookup(name: str) -> Kernel | None:
    """The kernel of op `name`, its family imported first if need be; None if there is none."""
    kernel = KERNELS.get(name)
    if kernel is None:
        _import_family(OP_FAMILIES.get(name))
        kernel = KERNELS.get(name)
    return kernel


def lookup_custom_call(target: str) -> Kernel | None:
    """The kernel of custom-call `target`, its family imported first if need be."""
    kernel = CUSTOM_CALL_TARGETS.get(target)
    if kernel is None:
        _import_family(CUSTOM_CALL_FAMILIES.get(target))
        kernel = CUSTOM_CALL_TARGETS.get(target)
    return kernel
