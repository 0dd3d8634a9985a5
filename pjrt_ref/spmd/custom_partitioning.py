"""`jax.experimental.custom_partitioning` over several devices: the callbacks' own partitioning.

JAX lowers a custom_partitioning function, on several devices, to

    %r = stablehlo.custom_call @CustomSPMDPartitioning(%a, %b) {backend_config = "<key>"}

without its body: only the callbacks JAX registered for the target know it
(through the PJRT Custom Partitioner extension,
pjrt_ref/capi/custom_partitioner_extension.py; `register` keeps them here).
XLA's SPMD partitioner asks them, for each such call, given every operand's
shape and sharding and the result's: `partition` answers with the
per-device module (MLIR, local shapes, collectives allowed) and the operand
and result shardings it was written for; `infer_sharding` gives the
result's sharding when nothing else does.

The reference asks the same questions at load time (`partition_calls`) and
runs the answer the way it runs a GSPMD manual region: each call becomes a
`@pjrt_ref.manual_call` (gspmd.py) whose callee is the per-device module's
entry function, renamed and copied into the program, with the shardings the
callback chose. At execute time the global operands are cut into those
shards, the callee runs once per device with its collectives meeting
across devices, and the result is put back together from the devices'
pieces (manual.PartitionedRun.run_manual_call). Values never depend on the
operands' shardings the reference proposes, only on the callback's answer.

What it proposes: for an operand, what the reference partitioner's
propagation gives it (partitioner._inherited_layout: an argument's
sharding, a constraint's, through element-wise ops and transposes),
replicated where it gives none; for the result, its own annotation, else
`infer_sharding`'s answer, else replicated.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Callable

from pjrt_ref.errors import InvalidArgument, Unimplemented
from pjrt_ref.interpreter.loader import make_context
from pjrt_ref.interpreter.types import convert_type
from pjrt_ref.spmd.layout import Layout, hlo_sharding_text
from pjrt_ref.spmd.gspmd import CALLEE_ATTR, IN_SHARDINGS_ATTR, MANUAL_CALL, OUT_SHARDINGS_ATTR, attribute_text, \
    custom_call_target, walk

TARGET = "CustomSPMDPartitioning"
# On the manual call that replaces one: the results' shardings as propagation gave them.
RESULT_SHARDINGS_ATTR = "pjrt_ref.result_shardings"

_PARTITIONERS: dict[str, object] = {}
_BATCH_PARTITIONABLE: set[str] = set()
_LOCK = threading.Lock()


def register(name: str, partitioner) -> None:
    """Keep `partitioner` (with `partition` and `infer_sharding`, on serialized
    protos: CApiPartitioner) as the one for custom call target `name`."""
    with _LOCK:
        _PARTITIONERS[name] = partitioner


def lookup(name: str):
    with _LOCK:
        return _PARTITIONERS.get(name)


def mark_batch_partitionable(name: str) -> None:
    with _LOCK:
        _BATCH_PARTITIONABLE.add(name)


def batch_partitionable(name: str) -> bool:
    """Whether a framework said custom call `name` may be split along its batch dimension."""
    with _LOCK:
        return name in _BATCH_PARTITIONABLE


def partition_calls(program, operand_layout: Callable, result_shardings: Callable, devices: list[int]) -> str:
    """`program`'s text with every @CustomSPMDPartitioning call replaced by a
    `@pjrt_ref.manual_call` of the per-device function its callbacks give.

    `operand_layout(value)` is the Layout the reference proposes for an
    operand; `result_shardings(op)` the HloSharding texts of the call's own
    result annotation, or None. Reads `program.mlir_module()` without
    changing it, then edits a fresh parse of the text.
    """
    answers = {}
    for op in walk(program.mlir_module().operation):
        if custom_call_target(op) == TARGET:
            answers[_key(op)] = _ask(op, operand_layout, result_shardings, devices)
    return _with_manual_calls(program.text, answers)


def _key(op) -> str:
    """The call's backend_config: JAX's key of its callbacks, one per lowered call."""
    if "backend_config" not in op.attributes:
        raise InvalidArgument(f"@{TARGET} without a backend_config naming its callbacks")
    return attribute_text(op.attributes["backend_config"])


def _ask(op, operand_layout: Callable, result_shardings: Callable,
         devices: list[int]) -> tuple[bytes, list[str], list[str], list[str]]:
    """(per-device module, operand shardings, result shardings) the callbacks
    answer for `op`, and the results' shardings as propagation gave them."""
    partitioner = lookup(TARGET)
    if partitioner is None:
        raise Unimplemented(f"@{TARGET}: no partition callbacks are registered with pjrt-ref "
                            "(the framework registers them through the PJRT Custom Partitioner "
                            "extension; JAX does when it loads the plugin)")
    key = _key(op).encode()
    layouts = [operand_layout(v) for v in op.operands]
    operands = [(_shape_proto(v.type), sharding_proto(hlo_sharding_text(layout, devices)))
                for v, layout in zip(op.operands, layouts)]
    result_shape = _result_shape_proto(op)
    results = result_shardings(op) or _propagated_result_shardings(
        op, partitioner, layouts, operands, result_shape, key, devices)
    module, operand_protos, result_proto = partitioner.partition(
        operands, (result_shape, sharding_proto(_packed(results))), key)
    return (module, [_sharding_texts(p, 1)[0] for p in operand_protos],
            _sharding_texts(result_proto, len(op.results)), results)


def _propagated_result_shardings(op, partitioner, layouts, operands, result_shape: bytes, key: bytes,
                                 devices: list[int]) -> list[str]:
    """The results' shardings as propagation gives them: by the op's Shardy
    sharding rule where it has one (what XLA's Shardy propagation reads),
    else by the `infer_sharding` callback (GSPMD's), else replicated."""
    if "sdy.sharding_rule" in op.attributes:
        rule = parse_sharding_rule(attribute_text(op.attributes["sdy.sharding_rule"]))
        return [hlo_sharding_text(layout, devices) for layout in rule.result_layouts(layouts, devices)]
    inferred = partitioner.infer_sharding(operands, result_shape, key)
    if inferred is None:
        return ["{replicated}"] * len(op.results)
    return _sharding_texts(inferred, len(op.results))


@dataclass(frozen=True)
class ShardingRule:
    """An `#sdy.op_sharding_rule`: the factors each dimension of each operand
    and result is made of, major to minor (`([ij, k], [ijk])->([ijk])
    {i=2, j=2, k=2} need_replication={j}`: operand 0's dim 0 is factors i
    and j), their sizes, and the factors that must stay whole."""

    operands: tuple[tuple[tuple[str, ...], ...], ...]
    results: tuple[tuple[tuple[str, ...], ...], ...]
    sizes: dict
    need_replication: frozenset

    def result_layouts(self, operand_layouts: list[Layout], devices: list[int]) -> list[Layout]:
        """Each result split as the operands are along the same factors.

        An operand dimension split into t tiles gives its split to its
        major-most factor (if that factor may be split and t divides its
        size); a result dimension whose major-most factor carries a split
        takes it, device by device. Other dimensions stay whole: any split
        gives the same values, the callbacks only compute them in pieces."""
        carriers = self._carriers(operand_layouts)
        layouts = []
        for dims in self.results:
            counts, tiles = [], {d: [] for d in devices}
            for factors in dims:
                layout, dim = carriers.get(factors[0], (None, None)) if factors else (None, None)
                counts.append(1 if layout is None else layout.tile_counts[dim])
                for d in devices:
                    tiles[d].append(0 if layout is None else layout.tile_of[d][dim])
            layouts.append(Layout(tuple(counts), {d: tuple(t) for d, t in tiles.items()}))
        return layouts

    def _carriers(self, operand_layouts: list[Layout]) -> dict:
        """factor -> (operand layout, dimension) of the first split it carries."""
        carriers = {}
        for dims, layout in zip(self.operands, operand_layouts):
            for dim, factors in enumerate(dims):
                if not factors or dim >= len(layout.tile_counts) or layout.tile_counts[dim] <= 1:
                    continue
                major = factors[0]
                size = self.sizes.get(major)
                if major in self.need_replication or (size is not None and size % layout.tile_counts[dim]):
                    continue
                carriers.setdefault(major, (layout, dim))
        return carriers


def parse_sharding_rule(text: str) -> ShardingRule:
    """The factors of an `#sdy.op_sharding_rule<...>` (Shardy's printed form)."""
    match = re.search(r"<\s*\((.*?)\)\s*->\s*\((.*?)\)\s*\{([^}]*)\}", text)
    if match is None:
        raise InvalidArgument(f"@{TARGET}: cannot read the sharding rule {text!r}")
    sizes = {name.strip(): int(size) for name, size in re.findall(r"(\w+)\s*=\s*(\d+)", match.group(3))}
    replicated = re.search(r"need_replication\s*=\s*\{([^}]*)\}", text)
    return ShardingRule(_tensor_factors(match.group(1)), _tensor_factors(match.group(2)), sizes,
                        frozenset(_factor_names(replicated.group(1)) if replicated else ()))


def _tensor_factors(text: str) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """`[ij, k], [ijk]` -> ((("i", "j"), ("k",)), (("i", "j", "k"),))."""
    return tuple(tuple(tuple(_factor_names(dim)) for dim in body.split(","))
                 if body.strip() else ()
                 for body in re.findall(r"\[([^\]]*)\]", text))


def _factor_names(text: str) -> list[str]:
    """Factor names run together: single letters, and `z_1`, `z_2`, ... after `z`."""
    return re.findall(r"z_\d+|[a-z]", text)


def _with_manual_calls(text: str, answers: dict) -> str:
    """Edit `text`: copy each answer's functions in under fresh names and
    replace its call by a manual call of the copied entry function."""
    from jaxlib.mlir import ir

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        calls = [op for op in walk(module.operation) if custom_call_target(op) == TARGET]
        for index, call in enumerate(calls):
            per_device, in_shardings, out_shardings, propagated = answers[_key(call)]
            callee = _copy_functions(ir.Module.parse(per_device), module, f"pjrt_ref.custom_partition_{index}")
            _replace_by_manual_call(call, callee, in_shardings, out_shardings, propagated)
        return str(module)


def _copy_functions(source, module, prefix: str) -> str:
    """Copy every function of `source` into `module`, renamed `prefix.name` and
    private; the name of the copy of its entry function (`main`)."""
    from jaxlib.mlir import ir

    functions = [op.operation for op in source.body.operations if op.operation.name == "func.func"]
    names = [attribute_text(f.attributes["sym_name"]) for f in functions]
    if "main" not in names:
        raise InvalidArgument(f"@{TARGET}: the per-device module has no @main (it has "
                              f"{', '.join(names) or 'no functions'})")
    for old in names:
        ir.SymbolTable.replace_all_symbol_uses(old, f"{prefix}.{old}", source.operation)
    for function, old in zip(functions, names):
        function.attributes["sym_name"] = ir.StringAttr.get(f"{prefix}.{old}")
        function.attributes["sym_visibility"] = ir.StringAttr.get("private")
        ir.InsertionPoint(module.body).insert(function.clone())
    return f"{prefix}.main"


def _replace_by_manual_call(call, callee: str, in_shardings: list[str], out_shardings: list[str],
                            propagated: list[str]) -> None:
    """`call` becomes a manual call of `callee`: operands cut by `in_shardings`,
    results put together by `out_shardings` (the callee's), and then, as XLA
    reshards the call's result to the sharding propagation gave it, known
    by that one (`RESULT_SHARDINGS_ATTR`) to what reads shardings further on."""
    from jaxlib.mlir import ir

    with ir.InsertionPoint(call), call.location:
        manual = ir.Operation.create(
            "stablehlo.custom_call", results=[r.type for r in call.results], operands=list(call.operands),
            attributes={
                "call_target_name": ir.StringAttr.get(MANUAL_CALL),
                CALLEE_ATTR: ir.StringAttr.get(callee),
                IN_SHARDINGS_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(s) for s in in_shardings]),
                OUT_SHARDINGS_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(s) for s in out_shardings]),
                RESULT_SHARDINGS_ATTR: ir.ArrayAttr.get([ir.StringAttr.get(s) for s in propagated]),
            })
    for old, new in zip(call.results, manual.results):
        old.replace_all_uses_with(new)
    call.erase()


# ------------------------------------------------------- what the callbacks read
def _shape_proto(mlir_type) -> bytes:
    """A tensor type as a serialized xla.ShapeProto (jaxlib's Shape)."""
    from jax._src.lib import xla_client as xc

    return _array_shape(xc, mlir_type).to_serialized_proto()


def _array_shape(xc, mlir_type):
    ttype = convert_type(mlir_type)
    if not hasattr(ttype, "shape") or any(d is None for d in ttype.shape):
        raise Unimplemented(f"@{TARGET}: operand or result of type {mlir_type} (static tensors only)")
    return xc.Shape.array_shape(ttype.dtype, tuple(ttype.shape))


def _result_shape_proto(op) -> bytes:
    """The call's result shape: the one tensor's, or a tuple of all (as in HLO)."""
    from jax._src.lib import xla_client as xc

    shapes = [_array_shape(xc, r.type) for r in op.results]
    shape = shapes[0] if len(shapes) == 1 else xc.Shape.tuple_shape(shapes)
    return shape.to_serialized_proto()


def sharding_proto(text: str) -> bytes:
    """HloSharding `text` as a serialized xla.OpSharding."""
    from jax._src.lib import xla_client as xc

    return xc.HloSharding.from_string(text).to_proto().SerializeToString()


def _packed(texts: list[str]) -> str:
    """One HloSharding text for all results: a tuple sharding for several."""
    return texts[0] if len(texts) == 1 else "{" + ", ".join(texts) + "}"


def sharding_elements(text: str, count: int) -> list[str]:
    """The `count` element shardings of HloSharding `text` (itself for one value)."""
    return _sharding_texts(sharding_proto(text), count)


def _sharding_texts(proto: bytes, count: int) -> list[str]:
    """The HloSharding text(s) a serialized OpSharding holds: `count` of them
    (a tuple sharding's elements for several results)."""
    from jax._src.lib import xla_client as xc

    message = xc.OpSharding()
    message.ParseFromString(proto)
    sharding = xc.HloSharding.from_proto(message)
    elements = list(sharding.tuple_elements()) if count > 1 else [sharding]
    if len(elements) != count:
        raise InvalidArgument(f"@{TARGET}: the callbacks gave {len(elements)} sharding(s) for "
                              f"{count} value(s)")
    return [str(e) for e in elements]
