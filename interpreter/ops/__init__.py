"""Op families, one module each, imported when a program first uses one of their ops.

`registry.lookup` imports the family `op_index.py` names for an op or
custom-call target it does not know yet. `load_all()` imports every family
(the conformance workers' preload, and whatever needs the whole table).
"""
import importlib
import pkgutil


def families() -> list[str]:
    """Every op family's module name."""
    return [m.name for m in pkgutil.iter_modules(__path__)]


def load_all() -> None:
    """Import every family: after this, registry.KERNELS and CUSTOM_CALL_TARGETS are whole."""
    for family in families():
        importlib.import_module(f"{__name__}.{family}")
