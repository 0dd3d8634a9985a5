"""The program formats of `PJRT_Program` (pjrt_c_api.h), turned into StableHLO.

pjrt-ref runs StableHLO. A framework may send another format:

- "mlir": StableHLO as MLIR text, bytecode or a portable artifact (what JAX
  sends); passed through as it is.
- "hlo": a serialized `xla.HloModuleProto` (what PyTorch/XLA sends: its
  `PjRtComputationClient::Compile` hands the C API client an XlaComputation,
  which `PjRtCApiClient` serializes as format "hlo"). It is converted with
  XLA's own HLO -> StableHLO importer, which jaxlib ships
  (`jax._src.lib._jax.mlir.hlo_to_stablehlo`), rather than parsed here.

The way back, `hlo_module`, gives a StableHLO program as an HloModuleProto,
with jaxlib's `mlir_module_to_xla_computation`: what a framework that keeps
HLO (PyTorch/XLA) reads from `PJRT_Executable_OptimizedProgram`.

jaxlib is imported when a program needs converting, never at import time.
"""
from __future__ import annotations

import re

from .errors import InvalidArgument, PjrtRefError, Unimplemented

MLIR = "mlir"                          # pjrt_c_api.h: PJRT_Program format "mlir"
HLO = "hlo"                            # a serialized HloModuleProto
HLO_WITH_CONFIG = "hlo_with_config"    # HloModuleProtoWithConfig (OptimizedProgram's other answer)
ACCEPTED = (MLIR, HLO)


def to_stablehlo(code: bytes, fmt: str) -> bytes:
    """The StableHLO program (MLIR text, bytecode or portable artifact) that `code` in `fmt` is."""
    if fmt == MLIR:
        return code
    if fmt == HLO:
        return _hlo_to_stablehlo(code)
    if fmt == HLO_WITH_CONFIG:
        raise Unimplemented(f"PJRT_Program format {fmt!r} is not accepted by PJRT_Client_Compile "
                            f"(pjrt-ref accepts {' and '.join(map(repr, ACCEPTED))})")
    raise InvalidArgument(f"unknown PJRT_Program format {fmt!r} (pjrt-ref accepts "
                          f"{' and '.join(map(repr, ACCEPTED))})")


def check(fmt: str) -> None:
    """Raise the error `to_stablehlo` gives for a format it cannot take, without converting."""
    if fmt not in ACCEPTED:
        to_stablehlo(b"", fmt)


def _hlo_to_stablehlo(code: bytes) -> bytes:
    from jax._src.lib import _jax

    try:
        return _jax.mlir.hlo_to_stablehlo(code)
    except Exception as error:   # jaxlib's XlaRuntimeError: "<STATUS CODE>: message"
        raise _conversion_error("PJRT_Program format 'hlo': XLA's HLO importer (jaxlib) could not "
                                "convert this HloModuleProto to StableHLO", error) from None


def hlo_module(stablehlo_text: str) -> bytes:
    """`stablehlo_text` as a serialized HloModuleProto (XLA's StableHLO -> HLO, from jaxlib).

    The entry computation's results become one tuple, as XLA's own compiled
    modules have them: PyTorch/XLA reads its outputs from that tuple's shape.
    """
    from jax._src.lib import _jax

    try:
        computation = _jax.mlir.mlir_module_to_xla_computation(stablehlo_text, use_tuple_args=False,
                                                               return_tuple=True)
    except Exception as error:
        raise _conversion_error("XLA's StableHLO -> HLO converter (jaxlib) could not convert "
                                "this program", error) from None
    return computation.as_serialized_hlo_module_proto()


def _conversion_error(what: str, error: Exception) -> PjrtRefError:
    """UNIMPLEMENTED if the converter says so (a construct it lacks), else INVALID_ARGUMENT."""
    detail = str(error).strip()
    status = re.match(r"([A-Z_]+):", detail)
    kind = Unimplemented if status and status.group(1) == "UNIMPLEMENTED" else InvalidArgument
    return kind(f"{what}: {detail}")
