"""Random valid StableHLO programs, kept as data so they can be shrunk.

A `FuzzProgram` is a list of parameters and a list of `Node`s, each one op
whose operands are earlier values: `("arg", i)` is parameter i (`%a{i}`),
`("op", j)` node j's result (`%n{j}`). Values have the program's shape
unless a structural op (structural.py: transpose, slice, pad, reduce,
sort, ...) gave them another; an elementwise op's operands share one
shape. A program of elementwise ops on the program's shape can be cut down
to one element (element k of a result depends only on element k of the
operands), which the shrinker does. `mlir()` writes the program in MLIR's
generic op form; its function returns `outputs` (all nodes unless shrunk).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from pjrt_ref.judge.opset import (COMPARISON_DIRECTIONS, COMPLEX_OF, ELEMENT_CLASSES, OPS, PART_TYPE, OpSpec,
                                   bit_width, comparison_type)
from pjrt_ref.judge import structural
from pjrt_ref.judge.structural import STRUCTURAL, constant_text

Value = tuple[str, int]     # ("arg", i) or ("op", j)

SHAPES = ((), (0,), (1,), (2,), (5,), (2, 3), (1, 4), (3, 0))


@dataclass(frozen=True)
class Node:
    op: str                          # an opset.OPS name
    operands: tuple[Value, ...]
    element_type: str                # the result's element type
    direction: str | None = None     # compare's comparison_direction
    shape: tuple | None = None       # the result's shape (None: the program's)
    attrs: dict | None = None        # a structural op's attributes (structural.py)

    @property
    def spec(self) -> OpSpec:
        return OPS[self.op]

    @property
    def structural(self) -> bool:
        return self.op in STRUCTURAL


@dataclass
class FuzzProgram:
    shape: tuple[int, ...]
    params: list[str]                        # each parameter's element type
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] | None = None       # the values returned (None: every node's)
    param_shapes: list | None = None         # each parameter's shape (None: all the program's)

    def element_type(self, value: Value) -> str:
        kind, index = value
        return self.params[index] if kind == "arg" else self.nodes[index].element_type

    def values(self) -> list[Value]:
        return [("arg", i) for i in range(len(self.params))] + [("op", j) for j in range(len(self.nodes))]

    def returned(self) -> list[Value]:
        return [("op", j) for j in range(len(self.nodes))] if self.outputs is None else list(self.outputs)

    def shape_of(self, value: Value) -> tuple:
        kind, index = value
        if kind == "arg":
            return self.shape if self.param_shapes is None else tuple(self.param_shapes[index])
        node = self.nodes[index]
        return self.shape if node.shape is None else tuple(node.shape)

    def tensor_type(self, value: Value) -> str:
        return structural.tensor_type(self.shape_of(value), self.element_type(value))

    def elementwise(self) -> bool:
        """Whether every op is elementwise on the program's one shape (so it can lose elements)."""
        return all(not n.structural for n in self.nodes) and all(
            self.shape_of(v) == self.shape for v in self.values())

    def mlir(self) -> str:
        """The program as an MLIR module whose `main` returns `returned()`."""
        args = ", ".join(f"%a{i}: {self.tensor_type(('arg', i))}" for i in range(len(self.params)))
        results = self.returned()
        lines = [f"func.func @main({args}) -> ({', '.join(self.tensor_type(v) for v in results)}) {{"]
        for j, node in enumerate(self.nodes):
            lines.append("  " + self._op_line(j, node))
        lines.append(f"  func.return {', '.join(self._name(v) for v in results)} : "
                     f"{', '.join(self.tensor_type(v) for v in results)}")
        lines.append("}")
        return "module {\n" + "\n".join(lines) + "\n}\n"

    def _op_line(self, number: int, node: Node) -> str:
        if node.structural:
            return self._structural_line(number, node)
        operands = ", ".join(self._name(v) for v in node.operands)
        types = ", ".join(self.tensor_type(v) for v in node.operands)
        attributes = ""
        if node.op == "compare":
            operand_type = self.element_type(node.operands[0])
            attributes = (f" {{comparison_direction = #stablehlo<comparison_direction {node.direction}>, "
                          f"compare_type = #stablehlo<comparison_type {comparison_type(operand_type)}>}}")
        return (f'%n{number} = "{node.spec.mlir_name}"({operands}){attributes} : ({types}) -> '
                f"{self.tensor_type(('op', number))}")

    def _structural_line(self, number: int, node: Node) -> str:
        return STRUCTURAL[node.op].text(node.attrs, f"%n{number}", [self._name(v) for v in node.operands],
                                        [self.tensor_type(v) for v in node.operands],
                                        node.element_type, self.tensor_type(("op", number)))

    def _name(self, value: Value) -> str:
        """A value's SSA name (a while's first result: `%nJ_loop#0`)."""
        if value[0] == "op" and self.nodes[value[1]].structural and STRUCTURAL[self.nodes[value[1]].op].results > 1:
            return f"%n{value[1]}_loop#0"
        return _name(value)

    def ops_used(self) -> list[str]:
        return [node.op for node in self.nodes]

    def with_shape(self, shape: tuple[int, ...]) -> "FuzzProgram":
        """The program on `shape` (an elementwise one: every value has the program's shape)."""
        return replace(self, shape=tuple(shape), param_shapes=None)

    def param_shape(self, index: int) -> tuple:
        return self.shape_of(("arg", index))


def _name(value: Value) -> str:
    return f"%a{value[1]}" if value[0] == "arg" else f"%n{value[1]}"


__all__ = ["FuzzProgram", "Node", "Generator", "constant_text"]



# ------------------------------------------------------------------ generation
class Generator:
    """Writes random programs of up to `max_ops` ops drawn from `ops` (opset.selected)."""

    def __init__(self, rng: np.random.Generator, ops: dict[str, OpSpec], max_ops: int = 4) -> None:
        self.rng, self.ops, self.max_ops = rng, list(ops.values()), max_ops

    def program(self) -> FuzzProgram:
        """A program of one to `max_ops` ops (an op whose attributes do not suit the
        operand drawn, a reduce of a 0-d value, is drawn again)."""
        for _ in range(100):
            shape = SHAPES[self.rng.integers(len(SHAPES))]
            program = FuzzProgram(shape, [])
            for _ in range(int(self.rng.integers(1, self.max_ops + 1))):
                self._add_node(program)
            if program.nodes:
                return program
        raise ValueError("the ops chosen fit none of the shapes the fuzzer writes")

    def _pick(self, choices):
        return choices[int(self.rng.integers(len(choices)))]

    def _add_node(self, program: FuzzProgram) -> None:
        spec = self._pick(self.ops)
        if spec.name in STRUCTURAL:
            self._add_structural(program, spec)
            return
        element_type = self._operand_type(program, spec)
        first = self._value(program, element_type, None)
        shape = program.shape_of(first)
        if spec.name == "select":
            operands = (self._value(program, "i1", shape), first, self._value(program, element_type, shape))
        else:
            operands = (first,) + tuple(self._value(program, element_type, shape) for _ in range(spec.arity - 1))
        result = {"same": element_type, "i1": "i1", "real": PART_TYPE.get(element_type),
                  "complex": COMPLEX_OF.get(element_type)}.get(spec.result)
        if spec.name == "convert":
            result = self._pick([t for kind in ("bool", "signed", "unsigned", "float")
                                 for t in ELEMENT_CLASSES[kind]])
        if spec.name == "bitcast_convert":
            result = self._pick([t for kind in ("bool", "signed", "unsigned", "float") for t in ELEMENT_CLASSES[kind]
                                 if bit_width(t) == bit_width(element_type) and t != "i1"] or [element_type])
        direction = self._pick(COMPARISON_DIRECTIONS) if spec.name == "compare" else None
        program.nodes.append(Node(spec.name, operands, result, direction,
                                  None if shape == program.shape else shape))

    def _add_structural(self, program: FuzzProgram, spec: OpSpec) -> None:
        element_type = self._operand_type(program, spec)
        operand = self._value(program, element_type, None)
        made = STRUCTURAL[spec.name].make(self.rng, program.shape_of(operand), element_type)
        if made is None:
            return
        attrs, shape = made
        operands = (operand,) + tuple(self._new_param(program, extra_type or element_type, tuple(extra_shape))
                                      for extra_type, extra_shape in STRUCTURAL[spec.name].extra(
                                          attrs, program.shape_of(operand)))
        program.nodes.append(Node(spec.name, operands, element_type, None, tuple(shape), attrs))

    def _operand_type(self, program: FuzzProgram, spec: OpSpec) -> str:
        """An element type the op allows: often one a value already has (so ops chain)."""
        existing = [program.element_type(v) for v in program.values()]
        allowed = [t for kind in spec.classes for t in ELEMENT_CLASSES[kind] if not spec.only or t in spec.only]
        fitting = [t for t in existing if t in allowed]
        if fitting and self.rng.random() < 0.7:
            return self._pick(fitting)
        return self._pick(allowed)

    def _value(self, program: FuzzProgram, element_type: str, shape: tuple | None) -> Value:
        """An existing value of `element_type` (and `shape`, if given) mostly, else a new parameter."""
        fitting = [v for v in program.values() if program.element_type(v) == element_type
                   and (shape is None or program.shape_of(v) == shape)]
        if fitting and self.rng.random() < 0.75:
            return self._pick(fitting)
        return self._new_param(program, element_type, program.shape if shape is None else shape)

    @staticmethod
    def _new_param(program: FuzzProgram, element_type: str, shape: tuple) -> Value:
        if shape != program.shape and program.param_shapes is None:
            program.param_shapes = [program.shape] * len(program.params)
        program.params.append(element_type)
        if program.param_shapes is not None:
            program.param_shapes.append(tuple(shape))
        return ("arg", len(program.params) - 1)
