"""Random valid StableHLO programs, kept as data so they can be shrunk.

A `FuzzProgram` is a list of parameters and a list of `Node`s, each one op
whose operands are earlier values: `("arg", i)` is parameter i (`%a{i}`),
`("op", j)` node j's result (`%n{j}`). Every value has the program's one shape; the ops
are elementwise (opset.py), so element k of a result depends only on
element k of its operands, which is what lets the shrinker cut a program
down to one element. `mlir()` writes it in MLIR's generic op form; the
function returns the results of `outputs` (all nodes unless shrunk).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .opset import COMPARISON_DIRECTIONS, ELEMENT_CLASSES, OPS, OpSpec, comparison_type, element_class

Value = tuple[str, int]     # ("arg", i) or ("op", j)

SHAPES = ((), (0,), (1,), (2,), (5,), (2, 3), (1, 4), (3, 0))


@dataclass(frozen=True)
class Node:
    op: str                          # an opset.OPS name
    operands: tuple[Value, ...]
    element_type: str                # the result's element type
    direction: str | None = None     # compare's comparison_direction

    @property
    def spec(self) -> OpSpec:
        return OPS[self.op]


@dataclass
class FuzzProgram:
    shape: tuple[int, ...]
    params: list[str]                        # each parameter's element type
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] | None = None       # the values returned (None: every node's)

    def element_type(self, value: Value) -> str:
        kind, index = value
        return self.params[index] if kind == "arg" else self.nodes[index].element_type

    def values(self) -> list[Value]:
        return [("arg", i) for i in range(len(self.params))] + [("op", j) for j in range(len(self.nodes))]

    def returned(self) -> list[Value]:
        return [("op", j) for j in range(len(self.nodes))] if self.outputs is None else list(self.outputs)

    def tensor_type(self, value: Value) -> str:
        return _tensor(self.shape, self.element_type(value))

    def mlir(self) -> str:
        """The program as an MLIR module whose `main` returns `returned()`."""
        args = ", ".join(f"%a{i}: {_tensor(self.shape, t)}" for i, t in enumerate(self.params))
        results = self.returned()
        lines = [f"func.func @main({args}) -> ({', '.join(self.tensor_type(v) for v in results)}) {{"]
        for j, node in enumerate(self.nodes):
            lines.append("  " + self._op_line(j, node))
        lines.append(f"  func.return {', '.join(_name(v) for v in results)} : "
                     f"{', '.join(self.tensor_type(v) for v in results)}")
        lines.append("}")
        return "module {\n" + "\n".join(lines) + "\n}\n"

    def _op_line(self, number: int, node: Node) -> str:
        operands = ", ".join(_name(v) for v in node.operands)
        types = ", ".join(self.tensor_type(v) for v in node.operands)
        attributes = ""
        if node.op == "compare":
            operand_type = self.element_type(node.operands[0])
            attributes = (f" {{comparison_direction = #stablehlo<comparison_direction {node.direction}>, "
                          f"compare_type = #stablehlo<comparison_type {comparison_type(operand_type)}>}}")
        return (f'%n{number} = "{node.spec.mlir_name}"({operands}){attributes} : ({types}) -> '
                f"{_tensor(self.shape, node.element_type)}")

    def ops_used(self) -> list[str]:
        return [node.op for node in self.nodes]

    def with_shape(self, shape: tuple[int, ...]) -> "FuzzProgram":
        return replace(self, shape=tuple(shape))


def _name(value: Value) -> str:
    return f"%a{value[1]}" if value[0] == "arg" else f"%n{value[1]}"


def _tensor(shape: tuple[int, ...], element_type: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + element_type + ">"


# ------------------------------------------------------------------ generation
class Generator:
    """Writes random programs of up to `max_ops` ops drawn from `ops` (opset.selected)."""

    def __init__(self, rng: np.random.Generator, ops: dict[str, OpSpec], max_ops: int = 4) -> None:
        self.rng, self.ops, self.max_ops = rng, list(ops.values()), max_ops

    def program(self) -> FuzzProgram:
        shape = SHAPES[self.rng.integers(len(SHAPES))]
        program = FuzzProgram(shape, [])
        for _ in range(int(self.rng.integers(1, self.max_ops + 1))):
            self._add_node(program)
        return program

    def _pick(self, choices):
        return choices[int(self.rng.integers(len(choices)))]

    def _add_node(self, program: FuzzProgram) -> None:
        spec = self._pick(self.ops)
        element_type = self._operand_type(program, spec)
        if spec.name == "select":
            operands = (self._value(program, "i1"), self._value(program, element_type),
                        self._value(program, element_type))
        else:
            operands = tuple(self._value(program, element_type) for _ in range(spec.arity))
        result = {"same": element_type, "i1": "i1"}.get(spec.result)
        if spec.name == "convert":
            result = self._pick([t for kind in ("bool", "signed", "unsigned", "float")
                                 for t in ELEMENT_CLASSES[kind]])
        direction = self._pick(COMPARISON_DIRECTIONS) if spec.name == "compare" else None
        program.nodes.append(Node(spec.name, operands, result, direction))

    def _operand_type(self, program: FuzzProgram, spec: OpSpec) -> str:
        """An element type the op allows: often one a value already has (so ops chain)."""
        existing = [program.element_type(v) for v in program.values()]
        fitting = [t for t in existing if element_class(t) in spec.classes]
        if fitting and self.rng.random() < 0.7:
            return self._pick(fitting)
        return self._pick([t for kind in spec.classes for t in ELEMENT_CLASSES[kind]])

    def _value(self, program: FuzzProgram, element_type: str) -> Value:
        """An existing value of `element_type` (mostly), or a new parameter."""
        fitting = [v for v in program.values() if program.element_type(v) == element_type]
        if fitting and self.rng.random() < 0.75:
            return self._pick(fitting)
        program.params.append(element_type)
        return ("arg", len(program.params) - 1)
