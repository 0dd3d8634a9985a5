"""`load(source)` -> `Program`: the interpreter's public face."""
from __future__ import annotations

import threading

import numpy as np

from ..errors import InvalidArgument
from .bytecode_guard import check_bytecode
from .loader import is_bytecode, make_context, parse_module
from .attributes import convert_attribute, string_value
from .jit import background
from .plan import ModulePlan
from .types import TensorType, TokenType, TOKEN


class Program:
    """A planned StableHLO module; call it with numpy arrays.

    `program(*arrays)` checks the arguments against the entry function's
    signature, runs the plan and returns a list of numpy arrays (one per
    result). No MLIR object is touched while it runs.
    """

    def __init__(self, source: bytes | str, entry: str = "main", _checked: bool = False):
        if (not _checked and isinstance(source, (bytes, bytearray, memoryview))
                and is_bytecode(bytes(source[:4]))):
            check_bytecode(bytes(source), entry)     # raises if it crashes another process
        try:
            with background.while_planning():
                self._init(source, entry)
        except UnicodeDecodeError as error:
            # A string attribute or op name in bytecode that is not UTF-8.
            raise InvalidArgument(f"program contains a string that is not UTF-8: {error}") from None
        except RuntimeError as error:
            # The same for a string attribute's value (nanobind's conversion).
            if "str_from_cstr_and_size" not in str(error):
                raise
            raise InvalidArgument(f"program contains a string that is not UTF-8: {error}") from None

    def _init(self, source, entry):
        context = make_context()
        module = parse_module(source, context)
        self.module_plan = ModulePlan(module)
        names = self.module_plan.function_names
        if entry not in names:
            if len(names) == 1:
                entry = names[0]
            else:
                raise InvalidArgument(f"program has no @{entry} function (it has: {', '.join(names)})")
        self.entry = entry
        self.function = self.module_plan.function(entry)
        # Plan every function now, so unknown ops fail at load, not half way.
        self.module_plan.plan_all()
        self.text = str(module)
        self.entry_argument_attributes = _argument_attribute_names(module, entry)
        # Where a framework asked each parameter and result to live, and in which
        # layout (None where it did not say): pjrt_ref/model/memory.py, layouts.py.
        self.entry_memory_kinds, self.entry_layout_modes = (
            (_entry_texts(module, entry, "arg_attrs", len(self.input_types), name),
             _entry_texts(module, entry, "res_attrs", len(self.output_types), name))
            for name in ("mhlo.memory_kind", "mhlo.layout_mode"))
        self.entry_result_transposes = _result_transposes(module, entry, len(self.output_types))
        # The plan holds no MLIR object; the module and its context (about a
        # megabyte even for a tiny program) are let go, and the few tools that
        # need MLIR again (partitioner, profiler, cost analysis) parse this.
        self._bytecode = _bytecode_of(module)
        self.module_plan.release_mlir()
        self._reparsed = None
        self._reparse_lock = threading.Lock()

    def mlir_module(self):
        """The program's verified module, parsed again from the bytecode kept
        at load (locations included); cached."""
        with self._reparse_lock:
            if self._reparsed is None:
                context = make_context()
                self._reparsed = (context, parse_module(self._bytecode, context))
            return self._reparsed[1]

    @property
    def input_types(self) -> tuple:
        return self.function.input_types

    @property
    def output_types(self) -> tuple:
        return self.function.output_types

    @property
    def num_partitions(self) -> int:
        return self.module_plan.num_partitions

    @property
    def num_replicas(self) -> int:
        return self.module_plan.num_replicas

    def __call__(self, *args) -> list:
        converted = self.check_arguments(args)
        return self.function.run(converted)

    def check_arguments(self, args) -> list:
        """Arguments as numpy arrays matching the signature, or InvalidArgument."""
        expected = self.input_types
        if len(args) != len(expected):
            raise InvalidArgument(
                f"@{self.entry} takes {len(expected)} argument(s), got {len(args)}")
        converted = []
        for index, (arg, ttype) in enumerate(zip(args, expected)):
            if isinstance(ttype, TokenType):
                converted.append(TOKEN)
                continue
            array = np.asarray(arg)
            if not isinstance(ttype, TensorType):
                converted.append(arg)
                continue
            if array.dtype != ttype.dtype:
                raise InvalidArgument(
                    f"argument {index} of @{self.entry}: expected element type "
                    f"{ttype.element_type} ({ttype.dtype}), got {array.dtype}")
            if len(array.shape) != len(ttype.shape) or any(
                    d is not None and d != s for d, s in zip(ttype.shape, array.shape)):
                raise InvalidArgument(
                    f"argument {index} of @{self.entry}: expected shape "
                    f"{_shape_text(ttype.shape)}, got {_shape_text(array.shape)}")
            converted.append(array)
        return converted


def _bytecode_of(module) -> bytes:
    import io

    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


def _argument_attribute_names(module, entry: str) -> list[frozenset[str]]:
    """The names of each entry-function parameter's attributes
    (`jax.buffer_donor`, `tf.aliasing_output`, `mhlo.sharding`, ...)."""
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and string_value(op.attributes["sym_name"]) == entry:
            if "arg_attrs" not in op.attributes:
                return []
            return [frozenset(attr.name for attr in arg) for arg in op.attributes["arg_attrs"]]
    return []


def _entry_texts(module, entry: str, which: str, count: int, name: str) -> tuple[str | None, ...]:
    """The string attribute `name` of each entry parameter (`which` = "arg_attrs")
    or result ("res_attrs"), None where it has none."""
    texts: list[str | None] = [None] * count
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and string_value(op.attributes["sym_name"]) == entry:
            if which in op.attributes:
                for index, attributes in enumerate(list(op.attributes[which])[:count]):
                    if name in attributes:
                        texts[index] = string_value(attributes[name])
    return tuple(texts)


def _result_transposes(module, entry: str, count: int) -> tuple[tuple[int, tuple[int, ...]] | None, ...]:
    """For each entry result that is a parameter seen through `stablehlo.transpose`s
    only: (parameter index, permutation p such that result dim j is the
    parameter's dim p[j]); None for any other result.

    What a compiler needs to give such a result, whose layout it may choose
    (`mhlo.layout_mode = "auto"`), the layout that makes the transposes free
    (pjrt_ref/model/layouts.py)."""
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and string_value(op.attributes["sym_name"]) == entry:
            body = op.regions[0].blocks[0]
            returned = list(body.operations)[-1].operands
            return tuple(_transposed_parameter(value) for value in list(returned)[:count])
    return (None,) * count


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


def _shape_text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def load(source: bytes | str, entry: str = "main") -> Program:
    """Parse, verify and plan a StableHLO program (text, bytecode or artifact)."""
    return Program(source, entry)
