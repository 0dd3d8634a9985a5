"""Cutting one op out of a program: the one-op module the other backend runs.

For an op `%r = stablehlo.tanh %x : tensor<8xf32>` the module is

    func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
      %0 = stablehlo.tanh %arg0 : tensor<8xf32>     (the op, cloned with its location)
      return %0 : tensor<8xf32>
    }

Its arguments are the op's operands, then the values its regions capture
from the enclosing scope (a while body may read a value defined before the
loop); functions it calls (`func.call`, a composite's decomposition) come
along. The reference feeds it its own operand values, so each op is judged
on its own inputs.

Some ops cannot be judged alone (`why_not_alone`): they talk to the host,
need the other devices, pass tokens, or give implementation-defined
results. A region-holding op that contains one is not compared either.
These modules are built once, when the program is planned; nothing here
runs while the program executes.
"""
from __future__ import annotations

from pjrt_ref.interpreter.records import TERMINATORS
from pjrt_ref.interpreter.types import TensorType, TokenType, convert_type

HOST_OPS = frozenset({"stablehlo.send", "stablehlo.recv", "stablehlo.infeed", "stablehlo.outfeed"})
GRID_OPS = frozenset({
    "stablehlo.all_reduce", "stablehlo.cross-replica-sum", "stablehlo.all_gather",
    "stablehlo.reduce_scatter", "stablehlo.all_to_all", "stablehlo.collective_permute",
    "stablehlo.collective_broadcast", "stablehlo.replica_id", "stablehlo.partition_id",
    "interpreter.run_parallel", "sdy.manual_computation"})
# Attributes naming a function an op calls.
_CALLING_ATTRIBUTES = ("callee", "decomposition")


# ------------------------------------------------------------ what cannot run alone
def _type_problem(types) -> str | None:
    for ttype in types:
        if isinstance(ttype, TokenType):
            return "passes tokens (they order side effects; there is no value to compare)"
        if not isinstance(ttype, TensorType):
            return f"has a {ttype} value (only tensors go to a one-op program)"
        if not ttype.is_static or ttype.bounds is not None:
            return "has dynamic shapes"
        if ttype.quant is not None:
            return "has quantized types"
    return None


def why_not_alone(op) -> str | None:
    """Why the MLIR operation `op` cannot be compared on its own, or None."""
    name = op.name
    if name in HOST_OPS:
        return "talks to the host"
    if name in GRID_OPS:
        return "needs the other devices of the process grid"
    if name == "stablehlo.custom_call":
        target = str(op.attributes["call_target_name"]).strip('"')
        return f"is a custom call (@{target} means what each backend makes it mean)"
    if name == "stablehlo.rng" or (name == "stablehlo.rng_bit_generator"
                                   and "DEFAULT" in str(op.attributes["rng_algorithm"])):
        return "gives implementation-defined random numbers"
    if name.startswith("stablehlo.async_"):
        return "is half of an async pair"
    values = list(op.operands) + list(op.results)
    try:
        types = [convert_type(v.type) for v in values]
    except ValueError as error:
        return f"has a type pjrt-ref cannot read ({error})"
    return _type_problem(types)


def nested_operations(op):
    """Every operation inside `op`'s regions, depth first (terminators included)."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                yield inner
                yield from nested_operations(inner)


def called_functions(op, functions: dict) -> list[str]:
    """Names of the functions `op` and the ops in its regions call, transitively
    (`functions`: name -> func.func operation of the module)."""
    found: list[str] = []
    pending = [op]
    while pending:
        current = pending.pop()
        for inner in [current, *nested_operations(current)]:
            for attribute in _CALLING_ATTRIBUTES:
                if attribute in inner.attributes:
                    name = str(inner.attributes[attribute]).lstrip("@").strip('"')
                    if name not in found and name in functions:
                        found.append(name)
                        pending.append(functions[name])
    return found


def why_not_comparable(op, functions: dict) -> str | None:
    """Why `op` (with its regions and callees) cannot be compared, or None."""
    reason = why_not_alone(op)
    if reason is not None:
        return reason
    callees = called_functions(op, functions)
    if "main" in callees:
        return "calls @main (the one-op program's own name)"
    for inner in [*nested_operations(op), *(i for name in callees for i in nested_operations(functions[name]))]:
        if inner.name in TERMINATORS:
            continue
        reason = why_not_alone(inner)
        if reason is not None:
            return f"holds a {inner.name}, which {reason}"
    return None


# ------------------------------------------------------------ captured values
def _uses_in_regions(step, op):
    """(operation, operand index, slot) for every operand inside `op`'s regions,
    walking the MLIR op and its planned step side by side (the planner made one
    step per operation, in order, and took terminator operands as the region's
    result slots)."""
    for plan, region in zip(step.regions, op.regions):
        operations = [o.operation for o in region.blocks[0].operations]
        body = [o for o in operations if o.name not in TERMINATORS]
        terminator = operations[-1]
        if len(body) != len(plan.steps):
            raise ValueError(f"region of {op.name} does not match its plan")
        for inner_step, inner in zip(plan.steps, body):
            for index, slot in enumerate(inner_step.operands):
                yield inner, index, slot
            yield from _uses_in_regions(inner_step, inner)
        for index, slot in enumerate(plan.result_slots):
            yield terminator, index, slot


def _slots_in_regions(step):
    """(slots defined, slots read) inside `step`'s regions, recursively."""
    defined: set[int] = set()
    read: list[int] = []
    for plan in step.regions:
        defined.update(plan.arg_slots)
        for inner in plan.steps:
            read.extend(inner.operands)
            defined.update(inner.results)
            inner_defined, inner_read = _slots_in_regions(inner)
            defined.update(inner_defined)
            read.extend(inner_read)
        read.extend(plan.result_slots)
    return defined, read


def captured_slots(step) -> list[int]:
    """Frame slots that `step`'s regions read but do not define, in first-use order."""
    defined, read = _slots_in_regions(step)
    return list(dict.fromkeys(slot for slot in read if slot not in defined))


# ------------------------------------------------------------ the module
def _defining_constant(value):
    """The `stablehlo.constant` operation that defines `value`, or None."""
    from jaxlib.mlir import ir

    owner = value.owner
    if isinstance(owner, ir.OpView):
        owner = owner.operation
    if isinstance(owner, ir.Operation) and owner.name == "stablehlo.constant":
        return owner
    return None


def one_op_module(step, op, functions: dict) -> tuple[str, list[int]]:
    """The text of a module whose @main runs `op` alone (see the module doc),
    and the frame slots of the captured values it takes after the operands.

    A captured constant is copied next to each use instead of becoming an
    argument: a sort comparator or a reduce body must be self-contained for
    XLA (JAX hoists constants out of them; XLA sinks them back before export).
    `step` is `op`'s planned step (for the slots its regions capture),
    `functions` the module's func.func operations by name."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import func

    captured = captured_slots(step)
    capture_types, constants = {}, {}
    for inner, index, slot in _uses_in_regions(step, op):
        if slot in captured and slot not in capture_types:
            value = inner.operands[index]
            capture_types[slot] = value.type
            constant = _defining_constant(value)
            if constant is not None:
                constants[slot] = constant
    captured = [slot for slot in captured if slot not in constants]
    with op.context, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            inputs = [v.type for v in op.operands] + [capture_types[s] for s in captured]
            main = func.FuncOp("main", ir.FunctionType.get(inputs, [r.type for r in op.results]))
            block = main.add_entry_block()
            with ir.InsertionPoint(block):
                clone = op.clone()
                for index, argument in enumerate(block.arguments[:len(op.operands)]):
                    clone.operands[index] = argument
                func.ReturnOp(list(clone.results))
            capture_arguments = dict(zip(captured, block.arguments[len(op.operands):]))
            for inner, index, slot in list(_uses_in_regions(step, clone)):
                if slot in capture_arguments:
                    inner.operands[index] = capture_arguments[slot]
                elif slot in constants:
                    inner.operands[index] = constants[slot].clone(ip=ir.InsertionPoint(inner)).results[0]
            for name in called_functions(op, functions):
                functions[name].clone()
        module.operation.verify()
        return module.operation.get_asm(enable_debug_info=True), captured


def module_functions(func_op) -> dict:
    """name -> func.func operation, for the module holding `func_op`."""
    module = func_op.parent
    functions = {}
    for candidate in module.regions[0].blocks[0].operations:
        candidate = candidate.operation
        if candidate.name == "func.func":
            functions[str(candidate.attributes["sym_name"]).strip('"')] = candidate
    return functions
