"""A program read out of MLIR into plain data: what the planner needs, and no MLIR object.

`read_module(module)` walks a parsed, verified module once and records, per
function, every op's name, readable location, operand and result types
(types.py), attributes as Python values (attributes.py), the slots its
operands and results get and its nested regions; plus what the runtime asks
of a program (the entry's parameter attributes, memory kinds, layout modes,
the text and bytecode of the module). plan.py builds a plan from these
records alone.

Why a separate, data-only stage: every touch of MLIR (parsing, and reading
what was parsed, which can abort the process on a damaged string) happens
here, so that for untrusted bytecode it can happen in the checker process
(bytecode_checker.py), which hands the records back; the host then plans
without parsing the bytes itself (benchmarks/README.md, W11). For text, and
for bytecode the checker survived before, the host reads in-process.

A failure to read one op (a type or attribute pjrt-ref cannot convert) is
kept in its record and raised when that op is planned, after the check that
the op is supported at all, as planning straight from MLIR did.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from pjrt_ref.errors import InvalidArgument, PjrtRefError, Unimplemented
from pjrt_ref.interpreter import mesh_axes
from pjrt_ref.interpreter.attributes import convert_attribute, read_attributes, string_value
from pjrt_ref.interpreter.loader import make_context, parse_module
from pjrt_ref.interpreter.location import describe_location
from pjrt_ref.interpreter.types import convert_type

TERMINATORS = ("func.return", "stablehlo.return", "mhlo.return", "sdy.return")


@dataclass
class RegionRecord:
    """A region: its only block's arguments, ops and returned slots."""

    block_count: int
    arg_slots: tuple[int, ...] = ()
    arg_types: tuple = ()
    ops: list["OpRecord"] = field(default_factory=list)
    result_slots: tuple[int, ...] = ()


@dataclass
class OpRecord:
    """One op, read; `error` is why it could not be (raised when it is planned)."""

    name: str
    location: str
    operand_slots: tuple[int, ...] = ()
    result_slots: tuple[int, ...] = ()
    regions: tuple[RegionRecord, ...] = ()
    operand_types: tuple = ()
    result_types: tuple = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    error: PjrtRefError | None = None


@dataclass
class FunctionRecord:
    """One `func.func`: its signature, body (None for an external function) and
    the attributes of its parameters and results the runtime reads."""

    name: str
    num_slots: int = 0
    body: RegionRecord | None = None
    input_types: tuple = ()
    output_types: tuple = ()
    error: PjrtRefError | None = None
    # Per parameter, the names of its attributes (`jax.buffer_donor`, `mhlo.sharding`, ...).
    argument_attribute_names: list[frozenset[str]] = field(default_factory=list)
    # Per parameter and per result, `mhlo.memory_kind` and `mhlo.layout_mode` (None where unset).
    memory_kinds: tuple[tuple, tuple] = ((), ())
    layout_modes: tuple[tuple, tuple] = ((), ())
    # Per result, (parameter, permutation) where it is a parameter seen through transposes.
    result_transposes: tuple = ()


@dataclass
class ModuleRecord:
    functions: dict[str, FunctionRecord]
    num_partitions: int = 1
    num_replicas: int = 1
    text: str = ""
    bytecode: bytes = b""


def read_program(source: bytes | str) -> tuple[object, ModuleRecord]:
    """Parse and verify `source` (loader.py) and read it: (the module, its record).

    A string in the bytecode that is not UTF-8 (an op name, a string
    attribute's value) makes MLIR's bindings raise as it is read: that is the
    program's fault, so it is InvalidArgument."""
    try:
        module = parse_module(source, make_context())
        return module, read_module(module)
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"program contains a string that is not UTF-8: {error}") from None
    except RuntimeError as error:
        if "str_from_cstr_and_size" not in str(error):      # nanobind's conversion of a value
            raise
        raise InvalidArgument(f"program contains a string that is not UTF-8: {error}") from None


def read_module(module, with_text: bool = True) -> ModuleRecord:
    """Everything the planner and the runtime need of `module`, as plain data
    (without its text and bytecode, which only a `Program` keeps, unless `with_text`)."""
    meshes = mesh_axes.module_meshes(module)
    known = _Known()
    functions = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func":
            record = _FunctionReader(op, meshes, known).read()
            functions[record.name] = record
    return ModuleRecord(
        functions=functions,
        num_partitions=_module_int_attr(module, "mhlo.num_partitions", 1),
        num_replicas=_module_int_attr(module, "mhlo.num_replicas", 1),
        text=str(module) if with_text else "",
        bytecode=_bytecode_of(module) if with_text else b"",
    )


def function_ops(module) -> dict:
    """The module's `func.func` ops by name: what PJRT_REF_DIFF cuts ops out of."""
    return {convert_attribute(op.operation.attributes["sym_name"]): op.operation
            for op in module.body.operations if op.operation.name == "func.func"}


def _module_int_attr(module, name: str, default: int) -> int:
    attrs = module.operation.attributes
    return convert_attribute(attrs[name]) if name in attrs else default


def _bytecode_of(module) -> bytes:
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


class _Known:
    """Types and locations already converted in this module, by MLIR object.

    MLIR uniques both in the context, and a program names few of each (a
    12-layer transformer: 38 types in 3,900 operands and results, 103
    locations for 1,539 ops), while printing one to convert it costs ten
    times a look-up: the look-up is by the object (types hash by identity;
    a location by its attribute, as `ir.Location` does not hash)."""

    def __init__(self):
        self.types: dict = {}
        self.locations: dict = {}

    def type(self, mlir_type):
        converted = self.types.get(mlir_type)
        if converted is None:
            converted = self.types[mlir_type] = convert_type(mlir_type)
        return converted

    def location(self, location) -> str:
        key = location.attr
        described = self.locations.get(key)
        if described is None:
            described = self.locations[key] = describe_location(location)
        return described


class _FunctionReader:
    """Reads one function: a slot per SSA value, numbered in the order the
    planner always used (a region's values before its op's operands and results)."""

    def __init__(self, func_op, meshes: dict, known: _Known):
        self.func_op = func_op
        self.meshes = meshes
        self.known = known
        self.slots: dict = {}

    def slot(self, value) -> int:
        # ir.Value is hashable and compares by identity.
        if value not in self.slots:
            self.slots[value] = len(self.slots)
        return self.slots[value]

    def read(self) -> FunctionRecord:
        attributes = self.func_op.attributes
        record = FunctionRecord(name=convert_attribute(attributes["sym_name"]))
        func_type = attributes["function_type"].value
        try:
            record.input_types = tuple(convert_type(t) for t in func_type.inputs)
            record.output_types = tuple(convert_type(t) for t in func_type.results)
        except ValueError as error:
            record.error = Unimplemented(f"function @{record.name}: {error}")
            return record
        region = self.func_op.regions[0]
        if len(region.blocks):
            record.body = self.read_region(region)
            record.result_transposes = _result_transposes(region, len(record.output_types))
        record.num_slots = len(self.slots)
        record.argument_attribute_names = _argument_attribute_names(attributes)
        record.memory_kinds, record.layout_modes = (
            (_texts(attributes, "arg_attrs", len(record.input_types), name),
             _texts(attributes, "res_attrs", len(record.output_types), name))
            for name in ("mhlo.memory_kind", "mhlo.layout_mode"))
        return record

    def read_region(self, region) -> RegionRecord:
        blocks = list(region.blocks)
        if len(blocks) != 1:
            return RegionRecord(block_count=len(blocks))
        block = blocks[0]
        record = RegionRecord(
            block_count=1,
            arg_slots=tuple(self.slot(a) for a in block.arguments),
            arg_types=tuple(self.known.type(a.type) for a in block.arguments))
        for op in block.operations:
            op = op.operation
            if op.name in TERMINATORS:
                record.result_slots = tuple(self.slot(v) for v in op.operands)
            else:
                record.ops.append(self.read_op(op))
        return record

    def read_op(self, op) -> OpRecord:
        record = OpRecord(op.name, self.known.location(op.location))
        operands, results = op.operands, op.results
        try:
            record.operand_types = tuple(self.known.type(v.type) for v in operands)
            record.result_types = tuple(self.known.type(r.type) for r in results)
            record.attrs = read_attributes(op, record.operand_types + record.result_types)
            if mesh_axes.is_mesh_axes(record.attrs.get("replica_groups")):
                record.attrs["replica_groups"] = mesh_axes.replica_groups(
                    record.attrs["replica_groups"], self.meshes)
        except PjrtRefError as error:
            record.error = error
        except ValueError as error:
            record.error = Unimplemented(str(error), op=record.name, location=record.location)
        record.regions = tuple(self.read_region(r) for r in op.regions)
        record.operand_slots = tuple(self.slot(v) for v in operands)
        record.result_slots = tuple(self.slot(r) for r in results)
        return record


def _argument_attribute_names(attributes) -> list[frozenset[str]]:
    if "arg_attrs" not in attributes:
        return []
    return [frozenset(attr.name for attr in arg) for arg in attributes["arg_attrs"]]


def _texts(attributes, which: str, count: int, name: str) -> tuple[str | None, ...]:
    """The string attribute `name` of each parameter (`which` = "arg_attrs")
    or result ("res_attrs"), None where it has none."""
    texts: list[str | None] = [None] * count
    if which in attributes:
        for index, entry in enumerate(list(attributes[which])[:count]):
            if name in entry:
                texts[index] = string_value(entry[name])
    return tuple(texts)


def _result_transposes(region, count: int) -> tuple[tuple[int, tuple[int, ...]] | None, ...]:
    """For each result that is a parameter seen through `stablehlo.transpose`s
    only: (parameter index, permutation p such that result dim j is the
    parameter's dim p[j]); None for any other result.

    What a compiler needs to give such a result, whose layout it may choose
    (`mhlo.layout_mode = "auto"`), the layout that makes the transposes free
    (pjrt_ref/model/layouts.py)."""
    returned = list(region.blocks[0].operations)[-1].operands
    return tuple(_transposed_parameter(value) for value in list(returned)[:count])


def _transposed_parameter(value) -> tuple[int, tuple[int, ...]] | None:
    from jaxlib.mlir import ir

    permutation: tuple[int, ...] | None = None
    while isinstance(value, ir.OpResult) and value.owner.operation.name == "stablehlo.transpose":
        transpose = value.owner.operation
        step = tuple(convert_attribute(transpose.attributes["permutation"]))
        permutation = step if permutation is None else tuple(step[k] for k in permutation)
        value = transpose.operands[0]
    if permutation is None or not isinstance(value, ir.BlockArgument):
        return None
    return value.arg_number, permutation
