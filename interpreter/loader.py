"""Parse a StableHLO program: text, MLIR bytecode, or a portable artifact.

Parsing and verification go through jaxlib's MLIR bindings. One MLIR context
is made per program (contexts are not shared across threads).
"""
from __future__ import annotations

from pjrt_ref.errors import InvalidArgument

_REGISTRY = None


def _dialect_registry():
    global _REGISTRY
    if _REGISTRY is None:
        from jaxlib.mlir import ir
        import jaxlib.mlir._mlir_libs._jax_mlir_ext as jax_mlir_ext

        registry = ir.DialectRegistry()
        jax_mlir_ext.register_dialects(registry)
        _REGISTRY = registry
    return _REGISTRY


def make_context():
    """An MLIR context with func, stablehlo, chlo, sdy and mhlo loaded.

    Unregistered dialects are allowed so the interpreter-test `check.*` ops
    parse; the planner rejects any op it has no kernel for.
    """
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import chlo, sdy, stablehlo

    context = ir.Context()
    context.append_dialect_registry(_dialect_registry())
    context.load_all_available_dialects()
    stablehlo.register_dialect(context)
    chlo.register_dialect(context)
    sdy.register_dialect(context)
    _register_mhlo(context)
    _load_quant_dialect(context)
    context.allow_unregistered_dialects = True
    return context


def _register_mhlo(context) -> None:
    """Register the mhlo dialect (older programs and XLA's HLO conversion use it).

    Through the native module: `jaxlib.mlir.dialects.mhlo` also imports its
    generated op classes, which pjrt-ref never uses (20 to 140 ms in a
    process that has not imported them: the checker, a host that does not
    lower through JAX; benchmarks/README.md, W0)."""
    try:
        from jaxlib.mlir._mlir_libs import _mlirHlo as native
    except ImportError:  # a jaxlib that moved it: the public module has it too
        try:
            from jaxlib.mlir.dialects import mhlo as native
        except ImportError:  # pragma: no cover - mhlo is optional
            return
    native.register_mhlo_dialect(context)


def _load_quant_dialect(context) -> None:
    """Load MLIR's `quant` dialect, which gives `!quant.uniform` types meaning.

    jaxlib's Python bindings register no `quant` dialect, so without this a
    quantized type parses as an opaque type of an unregistered dialect and
    StableHLO's verifier rejects every quantized op. The dialect is compiled
    into jaxlib (StableHLO needs it); running the `vhlo-legalize-to-stablehlo`
    pass once, on an empty module, loads it as one of the pass's dependent
    dialects.
    """
    from jaxlib.mlir import ir, passmanager
    from jaxlib.mlir.dialects import stablehlo

    global _PASSES_REGISTERED
    if not _PASSES_REGISTERED:
        stablehlo.register_stablehlo_passes()
        _PASSES_REGISTERED = True
    with context, ir.Location.unknown():
        module = ir.Module.parse("module {}")
        passmanager.PassManager.parse("builtin.module(vhlo-legalize-to-stablehlo)").run(
            module.operation)


_PASSES_REGISTERED = False


def is_bytecode(data: bytes) -> bool:
    """MLIR bytecode (and portable artifacts) start with the magic 'ML\\xefR'."""
    return data[:4] == b"ML\xefR"


def parse_module(source: bytes | str, context):
    """Parse `source` into a verified `ir.Module` inside `context`.

    Portable artifacts are versioned VHLO bytecode: they are deserialized
    (upgraded to the current StableHLO) first. Anything else goes to the
    MLIR parser, which accepts text and bytecode.
    """
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    if isinstance(source, str):
        source = source.encode()
    if not isinstance(source, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"program must be bytes or str, not {type(source).__name__}")
    data = bytes(source)
    if not data.strip():
        raise InvalidArgument("empty program")
    with context, ir.Location.unknown():
        if is_bytecode(data):
            try:
                module = stablehlo.deserialize_portable_artifact(context, data)
            except Exception:
                module = _parse_text_or_bytecode(data)
        else:
            if b"\x00" in data:
                raise InvalidArgument("program text contains NUL bytes: not MLIR text or bytecode")
            module = _parse_text_or_bytecode(data)
        if not module.operation.verify():
            raise InvalidArgument("program failed verification")
    return module


def _parse_text_or_bytecode(data: bytes):
    from jaxlib.mlir import ir

    try:
        return ir.Module.parse(data)
    except ir.MLIRError as error:
        raise InvalidArgument(f"cannot parse program: {_error_text(error)}") from None
    except Exception as error:  # nanobind raises ValueError/RuntimeError too
        raise InvalidArgument(f"cannot parse program: {error}") from None


def _error_text(error) -> str:
    text = str(error)
    return text if len(text) < 4000 else text[:4000] + " ..."
