"""Steps translated into lines of numba source, element by element.

The shared part of the two numba compilers: jit/loops.py compiles whole
`while` loops with it (at plan time), regions.py region bodies (when their
op first runs). `Translator` takes the steps of a block and writes one line
per op, each value a numba scalar (0-d values) or an element of one common
shape S (computed in an inner loop over the elements). It translates
(anything else raises NotCompilable, and the caller keeps interpreting):

* tensors of static shape whose element type is a signed or unsigned
  integer of 8 to 64 bits, f32, f64 or i1 (`compilable_tensor`), and, for
  whole loops (`halves=True`), f16 and bf16, held as float32 and
  rounded after each op (half_precision.py);
* the ops `loop_expressions.loop_expression` (integers, bits, conversions,
  rounding) and `scalar_expressions.scalar_expression` (float arithmetic and
  math) translate exactly, constants, splats (broadcast_in_dim of a 0-d
  value) and `func.call`s of functions made of the same (inlined).
"""
from __future__ import annotations

import numpy as np

from ..types import TensorType
from . import half_precision
from .loop_expressions import TYPE_NAMES, loop_expression
from .scalar_expressions import F32, scalar_expression

SCALAR_DTYPES = tuple(TYPE_NAMES)
MAX_INLINE_DEPTH = 4


class NotCompilable(Exception):
    """The loop uses something this compiler does not translate."""


def compilable_tensor(ttype, halves=False) -> TensorType:
    """`ttype` if the compilers can translate a value of it (a plain tensor
    of static shape, element type in SCALAR_DTYPES, or f16/bf16 if
    `halves`); else NotCompilable."""
    if not isinstance(ttype, TensorType) or ttype.quant is not None:
        raise NotCompilable("not a plain tensor")
    allowed = ttype.dtype in SCALAR_DTYPES or (halves and half_precision.is_half(ttype.dtype))
    if not allowed or any(d is None for d in ttype.shape):
        raise NotCompilable(f"type {ttype}")
    return ttype


def type_name(dtype) -> str:
    """The numba type a value of `dtype` is computed in (halves: float32)."""
    return "float32" if half_precision.is_half(dtype) else TYPE_NAMES[dtype]


def compute_dtype(dtype) -> np.dtype:
    """The numpy dtype a value of `dtype` is passed to numba in."""
    return F32 if half_precision.is_half(dtype) else dtype


class Translator:
    """Translates the steps of cond and body into lines of numba source."""

    def __init__(self, shape: tuple, module, halves=False):
        self.shape = shape
        self.module = module
        self.halves = halves
        # (op name, half dtype) of transcendentals that must pass
        # half_precision.math_agrees before the code may run.
        self.math_checks: set = set()
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
            ttype = compilable_tensor(ttype, self.halves)
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
                compilable_tensor(ttype, self.halves)
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
            template = self.template(op)
            is_array = self._is_array(result_type)
            if any(a for _, a in operands) and not is_array:
                raise NotCompilable("array operand, scalar result")
            # Arrays from outside the loop are read at [i]; values computed in
            # the array loop are scalars there ("local").
            expression = template.format(*(f"{n}[i]" if a is True else n for n, a in operands))
            name = self.fresh("v")
            line = f"{name} = {type_name(result_type.dtype)}({expression})"
            (self.array_lines if is_array else self.scalar_lines).append(line)
            # Inside the array loop a computed value is a scalar named `name`.
            self.names[result_key] = (name, False) if not is_array else (name, "local")

    def template(self, op) -> str:
        """The expression template of `op` over its operands {0}, {1}, ..."""
        def widened(op):
            return loop_expression(op) or scalar_expression(op)

        dtypes = [t.dtype for t in op.operand_types + op.result_types]
        if not any(half_precision.is_half(d) for d in dtypes):
            template = widened(op)
        else:
            found = half_precision.half_expression(op, widened)
            template = None if found is None else found[0]
            if found is not None and found[1]:
                self.math_checks.add((op.name, op.result_types[0].dtype))
        if template is None:
            raise NotCompilable(op.name)
        return template

    def math_verified(self) -> bool:
        """Whether every transcendental on half types gives the interpreter's
        bits here (half_precision.math_agrees; a numba build, so callers ask
        where they compile)."""
        return all(half_precision.math_agrees(name, dtype) for name, dtype in sorted(
            self.math_checks, key=str))

    def constant(self, key, op):
        value = np.asarray(op.attrs["value"])
        if value.shape != ():
            raise NotCompilable("non-scalar constant")
        name = self.fresh("k")
        literal = repr(value.item())
        if value.dtype.kind == "f" and not np.isfinite(value):
            literal = "np.nan" if np.isnan(value) else ("np.inf" if value > 0 else "-np.inf")
        self.scalar_lines.append(f"{name} = {type_name(value.dtype)}({literal})")
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
