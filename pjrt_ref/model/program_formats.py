"""The program formats of `PJRT_Program` (pjrt_c_api.h), turned into StableHLO.

pjrt-ref runs StableHLO. A framework may send another format:

- "mlir": StableHLO as MLIR text, bytecode or a portable artifact (what JAX
  sends); passed through as it is.
- "hlo": a serialized `xla.HloModuleProto` (what PyTorch/XLA sends: its
  `PjRtComputationClient::Compile` hands the C API client an XlaComputation,
  which `PjRtCApiClient` serializes as format "hlo"). It is converted with
  XLA's own HLO -> StableHLO importer, which jaxlib ships
  (`jax._src.lib._jax.mlir.xla_computation_to_mlir_module`), rather than parsed here.
  The importer keeps no trace of the module's buffer donors, so which
  parameters are donated is read from the proto and written back on the
  converted entry function (`donated_parameters`, `_mark_donors`).

The way back, `hlo_module`, gives a StableHLO program as an HloModuleProto,
with jaxlib's `mlir_module_to_xla_computation`: what a framework that keeps
HLO (PyTorch/XLA) reads from `PJRT_Executable_OptimizedProgram`.

jaxlib is imported when a program needs converting, never at import time.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass

from pjrt_ref.interpreter.loader import make_context, parse_module
from pjrt_ref.model.compile_options import packed_varints, wire_fields
from pjrt_ref.model.legacy_hlo import rewrite_legacy_forms
from pjrt_ref.errors import InvalidArgument, PjrtRefError, Unimplemented

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
    """XLA's importer, asked for MLIR's generic form (printed before any
    verification), so that the legacy HLO forms it carries over unchanged
    can be rewritten before the program is parsed (legacy_hlo.py)."""
    from jax._src.lib import _jax, xla_client

    try:
        generic = _jax.mlir.xla_computation_to_mlir_module(xla_client.XlaComputation(code))
    except Exception as error:   # jaxlib's XlaRuntimeError: "<STATUS CODE>: message"
        raise _conversion_error("PJRT_Program format 'hlo': XLA's HLO importer (jaxlib) could not "
                                "convert this HloModuleProto to StableHLO", error) from None
    converted = rewrite_legacy_forms(generic).encode()
    donors = donated_parameters(code)
    return _mark_donors(converted, donors) if donors else converted


@dataclass(frozen=True)
class DonatedParameters:
    """The entry parameters an HloModuleProto lets the runtime take over.

    `aliased`: parameter number -> output index, from `input_output_alias`
    (an output may be written into the parameter's buffer); `donors`: the
    parameter numbers of `buffer_donor` (the buffer may be reused for any
    output). PyTorch/XLA marks its donated tensors as buffer donors.
    """

    aliased: dict[int, int]
    donors: frozenset[int]

    def __bool__(self) -> bool:
        return bool(self.aliased or self.donors)


def donated_parameters(code: bytes) -> DonatedParameters:
    """The donated entry parameters of serialized HloModuleProto `code` (xla/service/hlo.proto):

        HloModuleProto             8: input_output_alias, 18: buffer_donor
        HloInputOutputAliasProto   1: entries (AliasEntryProto)
        AliasEntryProto            1: output_shape_index, 2: parameter_number,
                                   3: parameter_shape_index (repeated int64), 4: kind
        HloBufferDonorProto        1: entries (BufferDonorEntryProto)
        BufferDonorEntryProto      1: parameter_number, 2: parameter_shape_index

    Only whole parameters count (an empty `parameter_shape_index`): the
    converted entry function has a parameter per HLO parameter, and a part
    of a tuple parameter has no argument of its own to mark.
    """
    aliased: dict[int, int] = {}
    donors: set[int] = set()
    for field, _, value in wire_fields(code, "HloModuleProto"):
        if field == 8:
            for entry in _entries(value, "HloInputOutputAliasProto"):
                numbers = _numbers_of(entry, "AliasEntryProto")
                if numbers[3]:
                    continue
                if len(numbers[1]) <= 1:       # the output tuple's element (or the only output)
                    aliased[_first(numbers[2])] = _first(numbers[1])
                else:                          # inside a nested tuple: no one output to name
                    donors.add(_first(numbers[2]))
        elif field == 18:
            for entry in _entries(value, "HloBufferDonorProto"):
                numbers = _numbers_of(entry, "BufferDonorEntryProto")
                if not numbers[2]:
                    donors.add(_first(numbers[1]))
    return DonatedParameters(aliased, frozenset(donors - set(aliased)))


def _entries(message: bytes, what: str) -> list[bytes]:
    """The `entries` (field 1) of an alias or donor config message."""
    return [value for field, _, value in wire_fields(message, what) if field == 1]


def _numbers_of(entry: bytes, what: str) -> dict[int, list[int]]:
    """Every integer field of `entry` (packed or not), by field number: field -> values."""
    numbers: dict[int, list[int]] = {1: [], 2: [], 3: [], 4: []}
    for field, wire, value in wire_fields(entry, what):
        numbers.setdefault(field, []).extend(packed_varints(value, what) if wire == 2 else [value])
    return numbers


def _first(values: list[int]) -> int:
    """A scalar field's value (proto3: absent means 0), or an index's first element (empty: 0)."""
    return values[0] if values else 0


def _mark_donors(stablehlo: bytes, donated: DonatedParameters) -> bytes:
    """`stablehlo` with its entry parameters marked as donated, as JAX marks them:
    `tf.aliasing_output = OUTPUT` on an aliased parameter, `jax.buffer_donor`
    on a donor (what XLA's own StableHLO -> HLO conversion turns back into
    `input_output_alias` and `buffer_donor`)."""
    from jaxlib.mlir import ir

    context = make_context()
    module = parse_module(stablehlo, context)
    with context:
        entry = _entry_function(module)
        count = len(ir.FunctionType(ir.TypeAttr(entry.attributes["function_type"]).value).inputs)
        old = list(entry.attributes["arg_attrs"]) if "arg_attrs" in entry.attributes else []
        attributes = [{a.name: a.attr for a in old[i]} if i < len(old) else {} for i in range(count)]
        for number, output in donated.aliased.items():
            if number < count:
                attributes[number]["tf.aliasing_output"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(32), output)
        for number in donated.donors:
            if number < count:
                attributes[number]["jax.buffer_donor"] = ir.BoolAttr.get(True)
        entry.attributes["arg_attrs"] = ir.ArrayAttr.get([ir.DictAttr.get(a) for a in attributes])
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
    return buffer.getvalue()


def _entry_function(module):
    """The converted module's entry function: XLA's importer names it `main`."""
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and op.attributes["sym_name"].value == "main":
            return op
    raise InvalidArgument("XLA's HLO importer gave a module without a @main function")


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
