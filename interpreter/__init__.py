"""pjrt-ref's StableHLO interpreter: load -> plan -> execute, on numpy.

    from pjrt_ref.interpreter import load
    program = load(open("f.mlir").read())
    outputs = program(x, y)

Ops live in `ops/`, one module per family, one function per op, registered
by name in `registry.KERNELS`.
"""
from .program import Program, load
from .registry import KERNELS, register

__all__ = ["Program", "load", "register", "KERNELS"]
