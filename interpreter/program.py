"""`load(source)` -> `Program`: the interpreter's public face."""
from __future__ import annotations

import threading
import weakref

import numpy as np

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter.bytecode_guard import read_checked
from pjrt_ref.interpreter.loader import is_bytecode, make_context, parse_module
from pjrt_ref.interpreter.optimiser import background
from pjrt_ref.interpreter.plan import ModulePlan
from pjrt_ref.interpreter.records import ModuleRecord, function_ops, read_program
from pjrt_ref.interpreter.types import TensorType, TokenType, TOKEN


class Program:
    """A planned StableHLO module; call it with numpy arrays.

    `program(*arrays)` checks the arguments against the entry function's
    signature, runs the plan and returns a list of numpy arrays (one per
    result). No MLIR object is touched while it runs.
    """

    def __init__(self, source: bytes | str, entry: str = "main", _checked: bool = False):
        record = None
        if (not _checked and isinstance(source, (bytes, bytearray, memoryview))
                and is_bytecode(bytes(source[:4]))):
            # Read in another process (raises if it crashes there); None where
            # the host may read it itself (a survivor of an earlier check).
            record = read_checked(bytes(source), entry)
        with background.while_planning():
            self._init(source, entry, record)

    def _init(self, source, entry, record: ModuleRecord | None):
        self._reparsed = None
        self._reparse_lock = threading.Lock()
        if record is None:
            module, record = read_program(source)
            self._reparsed = (module.context, module)
        # The plan holds no MLIR object; the module and its context (about a
        # megabyte even for a tiny program) are let go once it is planned, and
        # the few tools that need MLIR again (partitioner, profiler, cost
        # analysis, PJRT_REF_DIFF while planning) parse this.
        self._bytecode = record.bytecode
        self.module_plan = ModulePlan(record, self._function_op)
        # When the program goes, its plans go with it (ModulePlan.release);
        # not at exit, where a host thread may still be running it.
        weakref.finalize(self, self.module_plan.release).atexit = False
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
        self.text = record.text
        entry_record = record.functions[entry]
        self.entry_argument_attributes = entry_record.argument_attribute_names
        # Where a framework asked each parameter and result to live, and in which
        # layout (None where it did not say): pjrt_ref/model/memory.py, layouts.py.
        self.entry_memory_kinds = entry_record.memory_kinds
        self.entry_layout_modes = entry_record.layout_modes
        self.entry_result_transposes = entry_record.result_transposes
        self.module_plan.release_records()
        self._reparsed = None

    def mlir_module(self):
        """The program's verified module, parsed again from the bytecode kept
        at load (locations included); cached."""
        with self._reparse_lock:
            if self._reparsed is None:
                context = make_context()
                self._reparsed = (context, parse_module(self._bytecode, context))
            return self._reparsed[1]

    def _function_op(self, name: str):
        """The MLIR function @name (what PJRT_REF_DIFF cuts ops out of)."""
        return function_ops(self.mlir_module()).get(name)

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


def _shape_text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def load(source: bytes | str, entry: str = "main") -> Program:
    """Parse, verify and plan a StableHLO program (text, bytecode or artifact)."""
    return Program(source, entry)
