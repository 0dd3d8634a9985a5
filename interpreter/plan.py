"""Lowering: a module's records -> a plan of plain Python steps, done once.

records.py reads a module out of MLIR, numbering every SSA value with a
slot; here `ModulePlan` plans each function on first reference: every op
becomes a `Step` with its kernel (steps.py holds those types and the loop
that runs them), and the finished plan is handed to the optimiser (optimiser/).
This module sits above both: it imports them, they import nothing of it.
"""
from __future__ import annotations

from typing import Callable

from pjrt_ref.errors import InvalidArgument, PjrtRefError, Unimplemented
from pjrt_ref.limits import check_result_types, max_bytes
# Importing ops/ registers every op family for `lookup`; Python's import lock
# makes a thread that plans at the same time wait until all are registered.
from pjrt_ref.interpreter import ops  # noqa: F401
from pjrt_ref.interpreter.instrument import from_environment as instrument_from_environment
from pjrt_ref.interpreter.optimiser import optimize_function
from pjrt_ref.interpreter.quantization import dequantize_op_quantize
from pjrt_ref.interpreter.records import FunctionRecord, ModuleRecord, OpRecord, RegionRecord, function_ops, read_module
from pjrt_ref.interpreter.registry import lookup
from pjrt_ref.interpreter.steps import FunctionPlan, OpInfo, RegionPlan, Step, copy_function


class ModulePlan:
    """All functions of a module, planned lazily on first reference, from the
    module's records (records.py): planning touches no MLIR object.

    `function_op(name)`, if given, returns the MLIR function a plan was read
    from: only PJRT_REF_DIFF needs it (to cut each op out), and asks once.
    """

    def __init__(self, record: ModuleRecord, function_op: Callable[[str], object] | None = None):
        self.records = record.functions
        self._function_op = function_op
        self.functions: dict[str, FunctionPlan] = {}
        # Functions as planned, before the optimiser rewrote them: what
        # optimiser/inline.py copies into callers (`inlinable`).
        self._unoptimized: dict[str, FunctionPlan] = {}
        self._planning: set[str] = set()
        self.num_partitions = record.num_partitions
        self.num_replicas = record.num_replicas
        # Debug switches (PJRT_REF_CHECK_NANS / _TRACE / _PROFILE / _DIFF), read once
        # per program: None unless one is set (interpreter/instrument.py).
        self.instrument = instrument_from_environment()

    @classmethod
    def of_module(cls, module) -> "ModulePlan":
        """A ModulePlan of a parsed MLIR module (read here, in this process)."""
        return cls(read_module(module, with_text=False), function_ops(module).get)

    @property
    def function_names(self) -> list[str]:
        return list(self.records)

    def function(self, name: str) -> FunctionPlan:
        plan = self.functions.get(name)
        return plan if plan is not None else self._plan(name, keep_unoptimized=False)

    def inlinable(self, name: str) -> FunctionPlan | None:
        """@name as planned, before the optimiser's rewrites: what
        optimiser/inline.py copies into a caller. Kept for functions first planned
        through here (a call reached while optimising its caller); None for
        others, for a function being planned (recursion) and for one that
        cannot be planned (the call then reports that when it runs, as before)."""
        if name in self._planning:
            return None
        if name not in self.functions:
            try:
                self._plan(name, keep_unoptimized=True)
            except PjrtRefError:
                return None
        return self._unoptimized.get(name)

    def unoptimized(self, name: str) -> FunctionPlan:
        """@name planned afresh, before any rewrite (cost.py counts its ops)."""
        return FunctionPlanner(self, self._record(name)).plan()

    def _record(self, name: str) -> FunctionRecord:
        if name not in self.records:
            raise InvalidArgument(f"no function @{name} in the program")
        return self.records[name]

    def _plan(self, name: str, keep_unoptimized: bool) -> FunctionPlan:
        record = self._record(name)
        self._planning.add(name)
        try:
            plan = FunctionPlanner(self, record).plan()
            if self.instrument is None:
                if keep_unoptimized:
                    self._unoptimized[name] = copy_function(plan, lambda slot: slot)
                optimize_function(plan)  # plan-time rewrites (interpreter/optimiser)
            else:
                function_op = self._function_op(name) if self._function_op else None
                self.instrument.apply(plan, function_op)  # every op visible, none fused
        finally:
            self._planning.discard(name)
        # Planning finished (callees were planned through `function`, and
        # recursive calls resolve lazily at run time).
        self.functions[name] = plan
        return plan

    def plan_all(self) -> None:
        for name in self.records:
            self.function(name)

    def release(self) -> None:
        """Let go of the plans once their program is gone (Program's
        finalizer). Each op's OpInfo names this ModulePlan, which holds the
        plans, so plans and module form a cycle that only Python's cyclic
        collector would free, at its next full collection, holding the
        memory until then (and counted as garbage by JAX's reference-cycle
        tests); without this dict reference counting frees them at once."""
        self.functions.clear()
        self._unoptimized.clear()

    def release_records(self) -> None:
        """Forget the records once every function is planned: the plans hold
        what they need, and the MLIR functions keep the whole module alive."""
        self.records = dict.fromkeys(self.functions)
        self._function_op = None
        self._unoptimized.clear()


class FunctionPlanner:
    """Plans one function from its record (`plan()`): a `Step` per op."""

    def __init__(self, module_plan: ModulePlan, record: FunctionRecord):
        self.module_plan = module_plan
        self.record = record
        self.max_bytes = max_bytes()      # results larger than this fail at plan time (pjrt_ref/limits.py)

    def plan(self) -> FunctionPlan:
        record = self.record
        if record.error is not None:
            raise record.error
        if record.body is None:
            raise Unimplemented(f"function @{record.name} has no body (external functions cannot run)")
        return FunctionPlan(
            name=record.name,
            num_slots=record.num_slots,
            body=self.plan_region(record.body),
            input_types=record.input_types,
            output_types=record.output_types,
        )

    def plan_region(self, region: RegionRecord) -> RegionPlan:
        if region.block_count != 1:
            raise Unimplemented(f"regions with {region.block_count} blocks are not supported")
        steps = [self.plan_op(op) for op in region.ops]
        return RegionPlan(list(region.arg_slots), region.arg_types, steps, list(region.result_slots))

    def plan_op(self, record: OpRecord) -> Step:
        name, location = record.name, record.location
        kernel = lookup(name)
        if kernel is None:
            raise Unimplemented("op is not supported by pjrt-ref", op=name, location=location)
        if record.error is not None:
            raise record.error
        check_result_types(record.result_types, self.max_bytes, name, location)
        info = OpInfo(name, location, dict(record.attrs), record.operand_types,
                      record.result_types, self.module_plan)
        regions = tuple(self.plan_region(r) for r in record.regions)
        info.region_plans = regions
        # Quantized operands/results: dequantize -> float kernel -> quantize.
        kernel = dequantize_op_quantize(kernel, info, has_regions=bool(regions))
        if kernel.validate is not None:
            kernel.validate(info)
        return Step(
            kernel=kernel.fn,
            op=info,
            operands=record.operand_slots,
            results=record.result_slots,
            regions=regions,
        )
