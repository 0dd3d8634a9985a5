"""Whole `while` loops compiled into one numba function.

A loop whose cond and body are small element-wise programs (JAX's
`fori_loop` over a few vectors) spends its time in the interpreter's
per-op dispatch, once per op per iteration. `compile_while(step)` turns
such a loop into a numba function that runs every iteration natively.

What qualifies (anything else keeps the interpreted loop):

* every value is a tensor of static shape, 0-d or of one common shape S;
  element types f32, f64, i32, i64 or i1;
* the ops `scalar_expressions.scalar_expression` translates exactly, integer
  add/subtract/multiply/negate/maximum/minimum/compare/select, and/or/xor/not
  on integers and i1 (wrapping
  exactly like the interpreter: each result is cast back to its 32- or
  64-bit type), constants, splats (broadcast_in_dim of a 0-d value) and
  `func.call`s of functions made of the same (inlined);
* `cond` only computes 0-d values (there is no reduction to bring an
  S-shaped value down to a predicate).

0-d values are numba scalars; S-shaped ones are computed element by element
in one inner loop per iteration, into fresh arrays, so a value the body
passes through unchanged can be shared.
"""
from __future__ import annotations

import math

import numpy as np

from ...limits import loop_limit_error, max_steps
from ..native import codegen
from ..native.scalar_expressions import scalar_expression
from ..steps import OpInfo, Step
from ..types import TensorType

F32, F64, I32, I64, BOOL = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.bool_))
SCALAR_DTYPES = (F32, F64, I32, I64, BOOL)
TYPE_NAMES = {F32: "float32", F64: "float64", I32: "int32", I64: "int64", BOOL: "bool_"}

INTEGER_OPS = {
    "stablehlo.add": "{0} + {1}",
    "stablehlo.subtract": "{0} - {1}",
    "stablehlo.multiply": "{0} * {1}",
    "stablehlo.negate": "-{0}",
    "stablehlo.maximum": "max({0}, {1})",
    "stablehlo.minimum": "min({0}, {1})",
}
# Bitwise on integers, logical on i1 (spec "and", "or", "xor").
BITWISE_OPS = {"stablehlo.and": "{0} & {1}", "stablehlo.or": "{0} | {1}",
               "stablehlo.xor": "{0} ^ {1}"}
COMPARE = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
MAX_INLINE_DEPTH = 4


class NotCompilable(Exception):
    """The loop uses something this compiler does not translate."""


def compilable_tensor(ttype) -> TensorType:
    """`ttype` if the compilers can translate a value of it (a plain tensor
    of static shape, element type in SCALAR_DTYPES); else NotCompilable."""
    if not isinstance(ttype, TensorType) or ttype.quant is not None:
        raise NotCompilable("not a plain tensor")
    if ttype.dtype not in SCALAR_DTYPES or any(d is None for d in ttype.shape):
        raise NotCompilable(f"type {ttype}")
    return ttype


def _integer_expression(op) -> str | None:
    dtypes = [t.dtype for t in op.operand_types] + [t.dtype for t in op.result_types]
    if op.name in INTEGER_OPS:
        return INTEGER_OPS[op.name] if len(set(dtypes)) == 1 and dtypes[0] in (I32, I64) else None
    if op.name in BITWISE_OPS and len(set(dtypes)) == 1 and dtypes[0] in (I32, I64, BOOL):
        return BITWISE_OPS[op.name]
    if op.name == "stablehlo.not" and len(set(dtypes)) == 1:
        if dtypes[0] == BOOL:
            return "not {0}"
        if dtypes[0] in (I32, I64):
            return "~{0}"
    if op.name == "stablehlo.compare":
        operand = op.operand_types[0].dtype
        if operand in (I32, I64, BOOL) and op.attrs.get("compare_type") in (None, "SIGNED"):
            return "{0} %s {1}" % COMPARE[op.attrs["comparison_direction"]]
    if op.name == "stablehlo.convert" and dtypes[0] in (I32, I64) and dtypes[1] in (F32, F64, I32, I64):
        return "{0}"  # to float: nearest even; to a narrower int: wraps (as numpy's astype)
    if op.name == "stablehlo.select" and op.result_types[0].dtype in (I32, I64, BOOL):
        if op.operand_types[0].dtype == BOOL:
            return "{1} if {0} else {2}"
    return None


class Translator:
    """Translates the steps of cond and body into lines of numba source."""

    def __init__(self, shape: tuple, module):
        self.shape = shape
        self.module = module
        self.names: dict = {}      # slot (or inlined value key) -> (name, is_array)
        self.captures: list = []   # (slot, is_array, ttype) read from the frame
        self.scalar_lines: list = []
        self.array_lines: list = []
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def value(self, key, ttype):
        """The name of a value; a value from outside the loop becomes an input."""
        if key not in self.names:
            if not isinstance(key, int):
                raise NotCompilable("value of an inlined function defined nowhere")
            ttype = compilable_tensor(ttype)
            is_array = self._is_array(ttype)
            name = self.fresh("c")
            self.names[key] = (name, is_array)
            self.captures.append((key, is_array, ttype))
        return self.names[key]

    def _is_array(self, ttype) -> bool:
        if ttype.shape == ():
            return False
        if ttype.shape != self.shape:
            raise NotCompilable("two different non-scalar shapes")
        return True

    def steps(self, steps, keys, depth=0):
        """Translate `steps`; `keys(slot)` maps a slot to its value key."""
        for step in steps:
            op = step.op
            if step.regions:
                raise NotCompilable(f"{op.name} has regions")
            if op.name == "func.call":
                self.call(step, keys, depth)
                continue
            for ttype in op.operand_types + op.result_types:
                compilable_tensor(ttype)
            if len(step.results) != 1:
                raise NotCompilable(op.name)
            result_key, result_type = keys(step.results[0]), op.result_types[0]
            if op.name == "stablehlo.constant":
                self.constant(result_key, op)
                continue
            operands = [self.value(keys(s), t) for s, t in zip(step.operands, op.operand_types)]
            if op.name == "stablehlo.broadcast_in_dim" and op.operand_types[0].shape == ():
                if op.operand_types[0].dtype != result_type.dtype:
                    raise NotCompilable("broadcast changes type")
                self._is_array(result_type)
                self.names[result_key] = operands[0]
                continue
            template = _integer_expression(op) or scalar_expression(op)
            if template is None:
                raise NotCompilable(op.name)
            is_array = self._is_array(result_type)
            if any(a for _, a in operands) and not is_array:
                raise NotCompilable("array operand, scalar result")
            # Arrays from outside the loop are read at [i]; values computed in
            # the array loop are scalars there ("local").
            expression = template.format(*(f"{n}[i]" if a is True else n for n, a in operands))
            name = self.fresh("v")
            line = f"{name} = {TYPE_NAMES[result_type.dtype]}({expression})"
            (self.array_lines if is_array else self.scalar_lines).append(line)
            # Inside the array loop a computed value is a scalar named `name`.
            self.names[result_key] = (name, False) if not is_array else (name, "local")

    def constant(self, key, op):
        value = np.asarray(op.attrs["value"])
        if value.shape != ():
            raise NotCompilable("non-scalar constant")
        name = self.fresh("k")
        literal = repr(value.item())
        if value.dtype.kind == "f" and not np.isfinite(value):
            literal = "np.nan" if np.isnan(value) else ("np.inf" if value > 0 else "-np.inf")
        self.scalar_lines.append(f"{name} = {TYPE_NAMES[value.dtype]}({literal})")
        self.names[key] = (name, False)

    def call(self, step, keys, depth):
        """Inline a `func.call`: the callee's steps, in a namespace of their own."""
        if depth >= MAX_INLINE_DEPTH:
            raise NotCompilable("calls nested too deeply")
        callee = self.module.function(step.op.attrs["callee"])
        body = callee.body
        prefix = (id(step), depth)
        for arg, operand, ttype in zip(body.arg_slots, step.operands, step.op.operand_types):
            self.names[(prefix, arg)] = self.value(keys(operand), ttype)
        inner_keys = lambda slot: (prefix, slot)  # noqa: E731  (callee frames are separate)
        self.steps(getattr(body, "unfused_steps", body.steps), inner_keys, depth + 1)
        for result, slot in zip(step.results, body.result_slots):
            self.names[keys(result)] = self.value((prefix, slot), None)


def compile_while(step) -> Step | None:
    """A Step running the whole loop in numba, or None if it does not qualify."""
    from numba.core.errors import NumbaError

    try:
        return _compile_while(step)
    except NotCompilable:
        return None
    except NumbaError:  # a combination numba cannot type: keep interpreting
        return None


def _compile_while(step) -> Step:
    op = step.op
    cond, body = step.regions
    carried_types = [compilable_tensor(t) for t in op.operand_types]
    shapes = {t.shape for t in carried_types if t.shape != ()}
    if len(shapes) > 1:
        raise NotCompilable("carried values of several shapes")
    shape = shapes.pop() if shapes else ()
    translator = Translator(shape, op.module)
    carried = []
    for index, ttype in enumerate(carried_types):
        is_array = ttype.shape != () and ttype.shape == shape
        carried.append((f"x{index}", is_array, ttype))
    identity = lambda slot: slot  # noqa: E731

    # cond: scalars only.
    for (name, is_array, _), slot in zip(carried, cond.arg_slots):
        translator.names[slot] = (name, is_array)
    translator.steps(getattr(cond, "unfused_steps", cond.steps), identity)
    if translator.array_lines:
        raise NotCompilable("cond computes arrays")
    predicate = translator.names.get(cond.result_slots[0])
    if predicate is None or predicate[1]:
        raise NotCompilable("cond result")
    cond_lines = translator.scalar_lines
    translator.scalar_lines = []

    for (name, is_array, _), slot in zip(carried, body.arg_slots):
        translator.names[slot] = (name, is_array)
    translator.steps(getattr(body, "unfused_steps", body.steps), identity)
    body_results = []
    array_outputs = []  # (carried index, scalar expression in the array loop)
    for index, slot in enumerate(body.result_slots):
        name, kind = translator.value(slot, carried_types[index])
        if carried[index][1] and kind is not True:
            array_outputs.append((index, name))  # computed, or a splat
            body_results.append(f"n{index}")
        elif not carried[index][1] and kind:
            raise NotCompilable("array result for a scalar")
        else:
            body_results.append(name)
    source = _loop_source(carried, translator, cond_lines, predicate[0], body_results, array_outputs)
    captures = translator.captures
    input_types = [(t.dtype, is_array) for _, is_array, t in carried] + \
                  [(t.dtype, is_array) for _, is_array, t in captures]
    function = codegen.compile_safely(codegen.compile_loop, source, input_types)
    if function is None:
        raise NotCompilable("numba could not compile the loop")
    kernel = _loop_kernel(function, carried, captures, shape)
    info = OpInfo(name="pjrt_ref.compiled_while", location=op.location,
                  attrs={"source": source}, operand_types=op.operand_types + tuple(t for _, _, t in captures),
                  result_types=op.result_types, module=op.module)
    return Step(kernel=kernel, op=info, operands=tuple(step.operands) + tuple(s for s, _, _ in captures),
                results=step.results)


def _loop_source(carried, translator, cond_lines, predicate, body_results, array_outputs) -> str:
    captured = [translator.names[slot][0] for slot, _, _ in translator.captures]
    parameters = ["n", "budget"] + [name for name, _, _ in carried] + captured
    lines = ["", "", "@njit(cache=True, error_model=\"numpy\")",
             f"def loop({', '.join(parameters)}):",
             "    done = False",
             "    k = 0",
             "    while True:"]
    lines += [f"        {line}" for line in cond_lines]
    lines += [f"        if not {predicate}:", "            done = True", "            break"]
    lines += ["        if k >= budget:", "            break"]
    lines += [f"        {line}" for line in translator.scalar_lines]
    for index, _ in array_outputs:
        lines.append(f"        n{index} = np.empty(n, {TYPE_NAMES[carried[index][2].dtype]})")
    if array_outputs:
        lines.append("        for i in range(n):")
        lines += [f"            {line}" for line in translator.array_lines]
        lines += [f"            n{index}[i] = {name}" for index, name in array_outputs]
    targets = ", ".join(name for name, _, _ in carried)
    lines.append(f"        {targets}, = {', '.join(body_results)},")
    lines.append("        k += 1")
    lines.append(f"    return done, k, {targets},")
    return codegen.with_prelude("\n".join(lines) + "\n")


# Iterations per call into numba: between calls Python runs, so Ctrl-C
# (KeyboardInterrupt) is noticed and PJRT_REF_MAX_STEPS is enforced.
CHUNK = 1 << 16


def _run_in_chunks(function, size: int, args: list, dtypes: list, location) -> tuple:
    """Run the numba `loop` at most CHUNK iterations per call until its cond is false.

    `loop(n, budget, *carried, *captured)` evaluates cond before each
    iteration and returns `(done, iterations, *carried)`: done is False when
    it stopped with cond still true after `budget` iterations. The carried
    values (scalars cast back to their dtype) feed the next call.
    """
    limit = max_steps()
    total = 0
    while True:
        budget = CHUNK if limit is None else min(CHUNK, limit - total)
        done, ran, *carried = function(size, budget, *args)
        total += ran
        if done:
            return tuple(carried)
        if limit is not None and total >= limit:
            raise loop_limit_error("stablehlo.while", location, total)
        carried = [value if isinstance(value, np.ndarray) else dtype.type(value)
                   for value, dtype in zip(carried, dtypes)]
        args = carried + args[len(carried):]


def _loop_kernel(function, carried, captures, shape):
    size = math.prod(shape)
    kinds = [is_array for _, is_array, _ in carried] + [is_array for _, is_array, _ in captures]
    result_dtypes = [t.dtype for _, _, t in carried]
    result_shapes = [t.shape for _, _, t in carried]

    def compiled_while(op, *values):
        args = [v.ravel() if is_array else v[()] for v, is_array in zip(values, kinds)]
        results = _run_in_chunks(function, size, args, result_dtypes, op.location)
        out = tuple(np.asarray(r, dtype=d).reshape(s)
                    for r, d, s in zip(results, result_dtypes, result_shapes))
        return out[0] if len(out) == 1 else out

    compiled_while.__doc__ = "A while loop compiled by numba (interpreter/jit/loops.py)."
    return compiled_while
