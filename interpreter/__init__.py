"""pjrt-ref's StableHLO interpreter: load -> plan -> execute, on numpy.

    from pjrt_ref.interpreter import load
    program = load(open("f.mlir").read())
    outputs = program(x, y)

Ops live in `ops/`, one module per family, one function per op, registered
by name in `registry.KERNELS` as their family is imported (when a program
first uses one of its ops; `ops.load_all()` imports them all).
"""
__all__ = ["Program", "load", "register", "KERNELS"]


def __getattr__(name: str):
    """The names above, loaded on first use (PEP 562): the layers above import
    light pieces of the interpreter (`partitioned_run`, the process grid) at
    start-up, and those must not load every op family and numba's helpers."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pjrt_ref.interpreter import program, registry

    return getattr(program if name in ("Program", "load") else registry, name)
