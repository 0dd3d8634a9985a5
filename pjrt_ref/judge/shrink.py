"""A disagreement cut down to its fewest ops, one element and the simplest values.

Given a program whose value `bad` differs between the two sides (the first
in program order, so every value it is computed from agrees), the shrinker
tries, keeping each step only while the two sides still disagree:

1. only `bad` and what it is computed from, `bad` the one result;
2. each op before `bad` replaced by a parameter carrying pjrt-ref's value of
   it (both sides then start from the same numbers there);
3. the shape cut to the one element where the results differ (the ops are
   elementwise), as a 0-d tensor, else as a 1-element one;
4. each parameter's value replaced by 0, then 1, of its type.

What is left is the reproducer: no op can be cut, no element dropped.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from pjrt_ref.judge.programs import FuzzProgram, Value
from pjrt_ref.judge.values import dtype_of

# `disagrees(program, inputs)`: whether the two sides still disagree on the program's one result.
Check = Callable[[FuzzProgram, list], bool]
# `node_values(program, inputs)`: pjrt-ref's value of each node, in node order.
NodeValues = Callable[[FuzzProgram, list], list]


def ancestors(program: FuzzProgram, outputs: list[Value]) -> set[Value]:
    """The values `outputs` are computed from, themselves included."""
    seen, stack = set(), list(outputs)
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        if value[0] == "op":
            stack.extend(program.nodes[value[1]].operands)
    return seen


def compact(program: FuzzProgram, inputs: list) -> tuple[FuzzProgram, list]:
    """`program` with only what its outputs need, values renumbered."""
    needed = ancestors(program, program.returned())
    arg_map = {("arg", i): ("arg", n) for n, i in enumerate(
        i for i in range(len(program.params)) if ("arg", i) in needed)}
    op_map: dict[Value, Value] = {}
    nodes = []
    for j, node in enumerate(program.nodes):
        if ("op", j) in needed:
            op_map[("op", j)] = ("op", len(nodes))
            nodes.append(replace(node, operands=tuple({**arg_map, **op_map}[v] for v in node.operands)))
    renumber = {**arg_map, **op_map}
    kept = [i for i in range(len(program.params)) if ("arg", i) in needed]
    shapes = None if program.param_shapes is None else [program.param_shapes[i] for i in kept]
    return (FuzzProgram(program.shape, [program.params[i] for i in kept], nodes,
                        [renumber[v] for v in program.returned()], shapes),
            [inputs[i] for i in kept])


def as_parameter(program: FuzzProgram, inputs: list, node_index: int, value: np.ndarray) -> tuple:
    """`program` with node `node_index` replaced by a new parameter fed `value`."""
    new = ("arg", len(program.params))
    cut = ("op", node_index)
    nodes = [replace(n, operands=tuple(new if v == cut else v for v in n.operands)) for n in program.nodes]
    outputs = [new if v == cut else v for v in program.returned()]
    shapes = [program.param_shape(i) for i in range(len(program.params))] + [program.shape_of(cut)]
    widened = FuzzProgram(program.shape, program.params + [program.nodes[node_index].element_type],
                          nodes, outputs, shapes)
    return compact(widened, inputs + [value])


def shrink(program: FuzzProgram, inputs: list, bad: Value, node_values: NodeValues,
           disagrees: Check, element: tuple | None) -> tuple[FuzzProgram, list]:
    """The smallest program and inputs (steps 1-4 above) on which the sides still disagree."""
    program, inputs = compact(replace(program, outputs=[bad]), inputs)
    program, inputs = _cut_ops(program, inputs, node_values, disagrees)
    if element is not None and program.elementwise():
        program, inputs = _one_element(program, inputs, element, disagrees)
    return _simplest_values(program, inputs, disagrees)


def _cut_ops(program, inputs, node_values: NodeValues, disagrees):
    """Step 2, repeated until no op before the result can be cut."""
    changed = True
    while changed:
        changed = False
        values = node_values(program, inputs)
        for j in range(len(program.nodes) - 2, -1, -1):          # never the last: the result
            candidate = as_parameter(program, inputs, j, values[j])
            if disagrees(*candidate):
                program, inputs = candidate
                changed = True
                break
    return program, inputs


def _one_element(program, inputs, element, disagrees):
    """Step 3: the inputs' elements at `element`, as 0-d tensors, else as 1-element ones."""
    for shape in ((), (1,)):
        candidate = program.with_shape(shape), [np.asarray(x[element]).reshape(shape) for x in inputs]
        if disagrees(*candidate):
            return candidate
    return program, inputs


def _simplest_values(program, inputs, disagrees):
    """Step 4: each 0-d or 1-element parameter set to 0, then 1, where the disagreement stays."""
    inputs = list(inputs)
    for i, x in enumerate(inputs):
        if x.size != 1:
            continue
        for simple in (0, 1):
            candidate = np.array(simple).astype(dtype_of(program.params[i])).reshape(x.shape)
            if np.array_equal(candidate, x, equal_nan=False):
                break
            trial = inputs[:i] + [candidate] + inputs[i + 1:]
            if disagrees(program, trial):
                inputs = trial
                break
    return program, inputs

