"""Lowering: an MLIR module -> a plan of plain Python steps, done once.

`ModulePlan` plans each function of a module on first reference: every SSA
value gets a slot, every op a `Step` (steps.py holds those types and the
loop that runs them), and the finished plan is handed to the optimiser
(jit/). This module sits above both: it imports them, they import nothing
of it.
"""
from __future__ import annotations

from ..errors import InvalidArgument, PjrtRefError, Unimplemented
from ..limits import check_result_types, max_bytes
from . import mesh_axes
# Importing ops/ registers every op family for `lookup`; Python's import lock
# makes a thread that plans at the same time wait until all are registered.
from . import ops  # noqa: F401
from .attributes import convert_attribute, read_attributes
from .instrument import from_environment as instrument_from_environment
from .jit import optimize_function
from .location import describe_location
from .quantization import dequantize_op_quantize
from .registry import lookup
from .steps import FunctionPlan, OpInfo, RegionPlan, Step, copy_function
from .types import convert_type

TERMINATORS = ("func.return", "stablehlo.return", "mhlo.return", "sdy.return")


class ModulePlan:
    """All functions of a module, planned lazily on first reference."""

    def __init__(self, module):
        self._funcs = {}
        self.functions: dict[str, FunctionPlan] = {}
        # Functions as planned, before the optimiser rewrote them: what
        # jit/inline.py copies into callers (`inlinable`).
        self._unoptimized: dict[str, FunctionPlan] = {}
        self._planning: set[str] = set()
        for op in module.body.operations:
            op = op.operation
            if op.name == "func.func":
                name = convert_attribute(op.attributes["sym_name"])
                self._funcs[name] = op
        self.num_partitions = _module_int_attr(module, "mhlo.num_partitions", 1)
        self.num_replicas = _module_int_attr(module, "mhlo.num_replicas", 1)
        # Device meshes that collectives' mesh-axes replica groups name.
        self.meshes = mesh_axes.module_meshes(module)
        # Debug switches (PJRT_REF_CHECK_NANS / _TRACE / _PROFILE / _DIFF), read once
        # per program: None unless one is set (interpreter/instrument.py).
        self.instrument = instrument_from_environment()

    @property
    def function_names(self) -> list[str]:
        return list(self._funcs)

    def function(self, name: str) -> FunctionPlan:
        plan = self.functions.get(name)
        return plan if plan is not None else self._plan(name, keep_unoptimized=False)

    def inlinable(self, name: str) -> FunctionPlan | None:
        """@name as planned, before the optimiser's rewrites: what
        jit/inline.py copies into a caller. Kept for functions first planned
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

    def _plan(self, name: str, keep_unoptimized: bool) -> FunctionPlan:
        if name not in self._funcs:
            raise InvalidArgument(f"no function @{name} in the program")
        self._planning.add(name)
        try:
            plan = FunctionPlanner(self, self._funcs[name]).plan()
            if self.instrument is None:
                if keep_unoptimized:
                    self._unoptimized[name] = copy_function(plan, lambda slot: slot)
                optimize_function(plan)  # plan-time rewrites (interpreter/jit)
            else:
                self.instrument.apply(plan, self._funcs[name])  # every op visible, none fused
        finally:
            self._planning.discard(name)
        # Planning finished (callees were planned through `function`, and
        # recursive calls resolve lazily at run time).
        self.functions[name] = plan
        return plan

    def plan_all(self) -> None:
        for name in self._funcs:
            self.function(name)

    def release_mlir(self) -> None:
        """Forget the MLIR functions once every one is planned: the plans
        hold none of them, and they keep the whole module alive."""
        self._funcs = dict.fromkeys(self.functions)
        self._unoptimized.clear()


def _module_int_attr(module, name: str, default: int) -> int:
    attrs = module.operation.attributes
    return convert_attribute(attrs[name]) if name in attrs else default


class FunctionPlanner:
    """Plans one MLIR function (`plan()`): a slot per SSA value, a `Step` per op."""

    def __init__(self, module_plan: ModulePlan, func_op):
        self.module_plan = module_plan
        self.func_op = func_op
        self.slots: dict = {}
        self.max_bytes = max_bytes()      # results larger than this fail at plan time (pjrt_ref/limits.py)

    def slot(self, value) -> int:
        key = value  # ir.Value is hashable and compares by identity
        if key not in self.slots:
            self.slots[key] = len(self.slots)
        return self.slots[key]

    def plan(self) -> FunctionPlan:
        from jaxlib.mlir import ir

        func_type = self.func_op.attributes["function_type"].value
        name = convert_attribute(self.func_op.attributes["sym_name"])
        region = self.func_op.regions[0]
        if len(region.blocks) == 0:
            raise Unimplemented(f"function @{name} has no body (external functions cannot run)")
        body = self.plan_region(region)
        return FunctionPlan(
            name=name,
            num_slots=len(self.slots),
            body=body,
            input_types=tuple(convert_type(t) for t in func_type.inputs),
            output_types=tuple(convert_type(t) for t in func_type.results),
        )

    def plan_region(self, region) -> RegionPlan:
        blocks = list(region.blocks)
        if len(blocks) != 1:
            raise Unimplemented(f"regions with {len(blocks)} blocks are not supported")
        block = blocks[0]
        arg_slots = [self.slot(a) for a in block.arguments]
        arg_types = tuple(convert_type(a.type) for a in block.arguments)
        steps = []
        result_slots: list[int] = []
        for op in block.operations:
            op = op.operation
            if op.name in TERMINATORS:
                result_slots = [self.slot(v) for v in op.operands]
                continue
            steps.append(self.plan_op(op))
        return RegionPlan(arg_slots, arg_types, steps, result_slots)

    def plan_op(self, op) -> Step:
        location = describe_location(op.location)
        name = op.name
        kernel = lookup(name)
        if kernel is None:
            raise Unimplemented("op is not supported by pjrt-ref", op=name, location=location)
        try:
            operand_types = tuple(convert_type(v.type) for v in op.operands)
            result_types = tuple(convert_type(r.type) for r in op.results)
            attrs = read_attributes(op)
            if mesh_axes.is_mesh_axes(attrs.get("replica_groups")):
                attrs["replica_groups"] = mesh_axes.replica_groups(attrs["replica_groups"],
                                                                   self.module_plan.meshes)
        except PjrtRefError:
            raise
        except ValueError as error:
            raise Unimplemented(str(error), op=name, location=location) from None
        check_result_types(result_types, self.max_bytes, name, location)
        info = OpInfo(name, location, attrs, operand_types, result_types, self.module_plan)
        regions = tuple(self.plan_region(r) for r in op.regions)
        info.region_plans = regions
        # Quantized operands/results: dequantize -> float kernel -> quantize.
        kernel = dequantize_op_quantize(kernel, info, has_regions=bool(regions))
        if kernel.validate is not None:
            kernel.validate(info)
        return Step(
            kernel=kernel.fn,
            op=info,
            operands=tuple(self.slot(v) for v in op.operands),
            results=tuple(self.slot(r) for r in op.results),
            regions=regions,
        )
