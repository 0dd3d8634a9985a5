"""Steps translated into lines of numba source, element by element.

The shared part of the two numba compilers: optimiser/loops.py compiles whole
`while` loops with it (at plan time), regions.py region bodies (when their
op first runs). `Translator` takes the steps of a block and writes one line
per op, each value a numba scalar (0-d values) or an element of one common
shape S (computed in an inner loop over the elements). It translates
(anything else raises NotCompilable, and the caller keeps interpreting):

* tensors of static shape whose element type is a signed or unsigned
  integer of 8 to 64 bits, f32, f64 or i1 (`compilable_tensor`);
* the ops `loop_expressions.loop_expression` (integers, bits, conversions,
  rounding) and `scalar_expressions.scalar_expression` (float arithmetic and
  math) translate exactly, constants, splats (broadcast_in_dim of a 0-d
  value) and `func.call`s of functions made of the same (inlined).

For a whole loop's body (`loop_body=True`) it also translates:

* f16 and bf16 values, held as float32 and rounded after each op
  (half_precision.py), and float64 transcendentals: libm's where it gives
  numpy's bits on the machine (float64_math.py), else numpy's own loop
  called by address (numpy_loops.py);
* values of other shapes than S and the ops that move elements between
  shapes, reduce or multiply them (tensor_ops.py: iota, reshape,
  transpose, broadcast, slices, concatenate, dynamic slices and updates,
  reduce, dot_general; small float products by numpy's BLAS call,
  small_products.py).

The lines come in `segments`: each segment's `lines` run once per
iteration, then its element loop (`loop`, over the elements of S, index
`i`). One segment suffices while every value is element-wise on S; a value
that needs a whole computed array (a reduction, an element at another
index) ends the segment: the array is stored in a buffer made before the
while loop (`buffers`) and the next segment reads it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pjrt_ref.interpreter.types import TensorType
from pjrt_ref.interpreter.native import float64_math, half_precision, hand_back, numpy_loops, small_products
from pjrt_ref.interpreter.native.loop_expressions import TYPE_NAMES, element_expression
from pjrt_ref.interpreter.native.scalar_expressions import F32, F64

SCALAR_DTYPES = tuple(TYPE_NAMES)
MAX_INLINE_DEPTH = 4


class NotCompilable(Exception):
    """The loop uses something this compiler does not translate."""


class KeepInterpreted(NotCompilable):
    """An op the whole loop is better off interpreted for (not handed back)."""


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


@dataclass
class Segment:
    """Lines run once per iteration, then the element loop's lines."""

    lines: list = field(default_factory=list)
    loop: list = field(default_factory=list)


# The kinds of a value's name (Translator.names):
SCALAR = False     # a numba scalar
ARRAY = True       # a flat array of shape S, read at [i]
# ("local", k): an element of S computed in segment k's loop, a scalar there
# ("tensor", shape): a flat array of another shape (loop bodies only)


def is_local(kind) -> bool:
    return isinstance(kind, tuple) and kind[0] == "local"


def is_tensor(kind) -> bool:
    return isinstance(kind, tuple) and kind[0] == "tensor"


class Translator:
    """Translates the steps of cond and body into lines of numba source."""

    def __init__(self, shape: tuple, module, loop_body=False, handed_back=frozenset()):
        self.shape = shape
        self.module = module
        self.loop_body = loop_body
        # (op name, dtype) of transcendentals whose probe failed: run by the
        # interpreter's kernel (hand_back.py), not by compiled code.
        self.handed_back = handed_back
        # (op name, dtype) of transcendentals on f16, bf16 or f64 whose
        # probe must pass before the code may run (`verified`).
        self.math_checks: set = set()
        # float dtypes whose sums and products follow numpy's order, which
        # tensor_ops.fold_orders_agree must confirm before the code may run.
        self.fold_checks: set = set()
        # (op, call) of float products made by numpy's BLAS call
        # (small_products.py), which its probe must confirm.
        self.product_checks: list = []
        # parameter name -> ctypes function the code calls (a BLAS routine,
        # a numpy loop), passed to the compiled function as an argument.
        self.functions: dict = {}
        self.names: dict = {}      # slot (or inlined value key) -> (name, kind)
        self.dtypes: dict = {}     # name -> numpy dtype of the value
        self.captures: list = []   # (slot, kind, ttype) read from the frame
        self.segments = [Segment()]
        self.buffers: list = []    # (name, elements, dtype) made before the loop
        # values of another shape than S, refilled each iteration in such a
        # buffer: what keeps one past the iteration (a carried value, the
        # interpreter's kernel, which may return a view) takes a copy.
        self.refilled: set = set()
        self.written_in: dict = {}  # buffer name -> segment whose loop writes it
        self.reads: list = []      # arrays read by the expression being made
        self.counter = 0

    # --- where lines go --------------------------------------------------------

    @property
    def scalar_lines(self) -> list:
        """The first segment's lines (cond and region bodies have one segment)."""
        return self.segments[0].lines

    @property
    def array_lines(self) -> list:
        return [line for segment in self.segments for line in segment.loop]

    @property
    def current(self) -> int:
        return len(self.segments) - 1

    def new_segment(self) -> None:
        self.segments.append(Segment())

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def statement(self, lines: list, reads: list) -> None:
        """Lines run once per iteration, reading the arrays `reads`: after
        the current segment's loop if that loop writes one of them."""
        if self._loop_writes_any(reads):
            self.new_segment()
        self.segments[-1].lines.extend(lines)

    # --- values --------------------------------------------------------------

    def value(self, key, ttype):
        """The name of a value; a value from outside the loop becomes an input."""
        if key not in self.names:
            if not isinstance(key, int):
                raise NotCompilable("value of an inlined function defined nowhere")
            ttype = compilable_tensor(ttype, self.loop_body)
            kind = self.kind_of(ttype.shape)
            name = self.fresh("c")
            self.names[key] = (name, kind)
            self.dtypes[name] = ttype.dtype
            self.captures.append((key, kind, ttype))
        return self.names[key]

    def kind_of(self, shape) -> object:
        """SCALAR, ARRAY or ("tensor", shape) for a flat array of `shape`."""
        if shape == ():
            return SCALAR
        if shape == self.shape:
            return ARRAY
        if not self.loop_body:
            raise NotCompilable("two different non-scalar shapes")
        return ("tensor", tuple(shape))

    def element(self, key, ttype) -> str:
        """`key`'s value as an element of S in the current segment's loop:
        a scalar as itself, an array at [i], an earlier segment's element
        through the buffer it is stored in."""
        name, kind = self.value(key, ttype)
        if kind is SCALAR:
            return name
        if is_local(kind) and kind[1] == self.current:
            return name
        if is_tensor(kind):
            raise NotCompilable("an array of another shape read element-wise")
        return f"{self.array(key, ttype)}[i]"

    def array(self, key, ttype) -> str:
        """`key`'s value as a flat array (a computed element of S is stored
        in a buffer by the loop that computes it)."""
        name, kind = self.value(key, ttype)
        if kind is SCALAR:
            raise NotCompilable("a scalar where an array is read")
        if is_local(kind):
            buffer = self.fresh("b")
            dtype = self.dtypes[name]
            self.segments[kind[1]].loop.append(f"{buffer}[i] = {name}")
            self.buffers.append((buffer, math.prod(self.shape), dtype))
            self.written_in[buffer] = kind[1]
            self.dtypes[buffer] = dtype
            self.names[key] = (buffer, ARRAY)
            return buffer
        return name

    def scratch(self, size: int, dtype) -> str:
        """A flat array of `size` elements made once before the loop, for
        lines that fill and read it within one iteration."""
        name = self.fresh("g")
        self.buffers.append((name, size, dtype))
        return name

    def refillable(self, size: int, dtype) -> str:
        """A flat array made once before the loop that holds a computed
        value, refilled each iteration (see `refilled`)."""
        name = self.scratch(size, dtype)
        self.refilled.add(name)
        return name

    def external(self, name: str, function) -> str:
        """The parameter the code calls ctypes `function` by: `name`, a C
        function's name (small_products.py, numpy_loops.py)."""
        self.functions.setdefault(name, function)
        return name

    def define(self, key, name: str, kind, dtype) -> None:
        self.names[key] = (name, kind)
        self.dtypes[name] = dtype

    def elementwise(self, key, ttype, expression_at) -> None:
        """Define `key` (of type `ttype`) element by element:
        `expression_at(index)` is its element at the flat index `index`,
        reading other values through `read`. An element of S is computed in
        the current segment's loop (index `i`); a 0-d value once per
        iteration; another shape fills, once per iteration, an array made
        before the loop (`refilled`: an allocation per iteration cost more
        than the few elements such values have, W13's dynamic_update_slice
        row in benchmarks/README.md)."""
        dtype = ttype.dtype
        cast = type_name(dtype)
        kind = self.kind_of(ttype.shape)
        name = self.fresh("v") if not is_tensor(kind) else self.refillable(math.prod(ttype.shape), dtype)
        index = "i" if kind is ARRAY else ("0" if kind is SCALAR else "j")
        expression = self._expression(expression_at, index)
        if self._loop_writes_any(self.reads):
            self.new_segment()
            expression = self._expression(expression_at, index)
        if kind is ARRAY:
            self.segments[-1].loop.append(f"{name} = {cast}({expression})")
            self.define(key, name, ("local", self.current), dtype)
            return
        if kind is SCALAR:
            self.segments[-1].lines.append(f"{name} = {cast}({expression})")
        else:
            self.segments[-1].lines += [f"for j in range({math.prod(ttype.shape)}):",
                                        f"    {name}[j] = {cast}({expression})"]
        self.define(key, name, kind, dtype)

    def _expression(self, expression_at, index: str) -> str:
        self.reads = []
        return expression_at(index)

    def _loop_writes_any(self, arrays) -> bool:
        """Whether the current segment's loop writes one of `arrays`: what
        reads them whole (or at another index than the loop's own) must come
        after that loop."""
        return any(self.written_in.get(name) == self.current for name in arrays)

    def read(self, key, ttype, index: str) -> str:
        """`key`'s element at flat `index` inside an `elementwise`
        expression: a scalar as itself, an element of S at the loop's own
        index as `element` gives it, anything else from its whole array."""
        name, kind = self.value(key, ttype)
        if kind is SCALAR:
            return name
        if index == "i" and not is_tensor(kind):
            return self.element(key, ttype)
        array = self.array(key, ttype)
        self.reads.append(array)
        return f"{array}[{index}]"

    # --- steps ---------------------------------------------------------------

    def steps(self, steps, keys, depth=0):
        """Translate `steps`; `keys(slot)` maps a slot to its value key. In
        a loop body, a step that cannot be translated is handed back to the
        interpreter (hand_back.py) where it can be."""
        for step in steps:
            op = step.op
            if op.name == "func.call":
                self.call(step, keys, depth)
                continue
            for ttype in op.operand_types + op.result_types:
                compilable_tensor(ttype, self.loop_body)
            try:
                self.step(step, keys)
            except KeepInterpreted:
                raise
            except NotCompilable:
                if not (self.loop_body and hand_back.can_hand_back(step)):
                    raise
                operands, result = [keys(s) for s in step.operands], keys(step.results[0])
                if not numpy_loops.translate(self, step, operands, result):
                    self.hand_back(step, operands, result)

    def step(self, step, keys) -> None:
        """Translate one step (not a call) into lines."""
        from pjrt_ref.interpreter.native import tensor_ops

        op = step.op
        if len(step.results) != 1:
            raise NotCompilable(op.name)
        result_key, result_type = keys(step.results[0]), op.result_types[0]
        if step.regions and not (self.loop_body and op.name in tensor_ops.WITH_REGIONS):
            raise NotCompilable(f"{op.name} has regions")
        if op.name == "stablehlo.constant":
            self.constant(result_key, op)
            return
        operands = [keys(s) for s in step.operands]
        if op.name == "stablehlo.broadcast_in_dim" and op.operand_types[0].shape == ():
            if op.operand_types[0].dtype != result_type.dtype:
                raise NotCompilable("broadcast changes type")
            self.kind_of(result_type.shape)
            self.names[result_key] = self.value(operands[0], op.operand_types[0])   # a splat
            return
        if self.loop_body and op.name in tensor_ops.TRANSLATIONS:
            tensor_ops.TRANSLATIONS[op.name](self, step, operands, result_key)
            return
        self.elementwise_op(op, operands, result_key)

    def hand_back(self, step, operands, result_key) -> None:
        """Run `step` with the interpreter's kernel in object mode, once per
        iteration (hand_back.py): the rest of the loop stays compiled."""
        op = step.op
        arguments, reads = [], []
        for key, ttype in zip(operands, op.operand_types):
            name, kind = self.value(key, ttype)
            if kind is not SCALAR:
                name = self.array(key, ttype)
                reads.append(name)
            arguments.append(f"{name}.copy()" if name in self.refilled else name)
        result = op.result_types[0]
        kind = self.kind_of(result.shape)
        name = self.fresh("v")
        declared = hand_back.numba_type(result.dtype, kind is not SCALAR)
        self.statement([f"with objmode({name}={declared!r}):",
                        f"    {name} = hand_back_run({hand_back.register(step)!r}, {', '.join(arguments)})"],
                       reads)
        self.define(result_key, name, kind, result.dtype)

    def elementwise_op(self, op, operands, result_key) -> None:
        """One element-wise op: a line in the current segment's loop (S),
        before it (0-d), or a loop of its own (another shape)."""
        template = self.template(op)
        pairs = list(zip(operands, op.operand_types))
        self.elementwise(result_key, op.result_types[0], lambda index: template.format(
            *(self.read(key, ttype, index) for key, ttype in pairs)))

    def template(self, op) -> str:
        """The expression template of `op` over its operands {0}, {1}, ..."""
        dtypes = [t.dtype for t in op.operand_types + op.result_types]
        if (op.name, op.result_types[0].dtype) in self.handed_back:
            raise NotCompilable(f"{op.name} differs from numpy's here")
        if self.loop_body and op.name in float64_math.MATH_F64 and dtypes == [F64, F64]:
            self.math_checks.add((op.name, F64))
            template = float64_math.MATH_F64[op.name]
        elif not any(half_precision.is_half(d) for d in dtypes):
            template = element_expression(op)
        else:
            found = half_precision.half_expression(op, element_expression)
            template = None if found is None else found[0]
            if found is not None and found[1]:
                self.math_checks.add((op.name, op.result_types[0].dtype))
        if template is None:
            raise NotCompilable(op.name)
        return template

    def verified(self) -> bool:
        """Whether the code gives the interpreter's bits on this machine where
        that rests on a probe: transcendentals on half types
        (half_precision.math_agrees) and float64 (float64_math.libm_agrees),
        float sums and products (tensor_ops.fold_orders_agree), float
        matrix products (small_products.agrees). Each probe is a numba
        build or BLAS calls, so callers ask where they compile."""
        from pjrt_ref.interpreter.native import tensor_ops

        return not self.failed_probes() and \
            all(tensor_ops.fold_orders_agree(dtype) for dtype in sorted(self.fold_checks, key=str))

    def failed_probes(self) -> frozenset:
        """What fails its probe here: (op name, dtype) transcendentals and
        small_products.probe_key's of products. A translation that hands
        them back (`handed_back`) can still compile."""

        def agrees(name, dtype):
            return float64_math.libm_agrees(name) if dtype == F64 else half_precision.math_agrees(name, dtype)

        math_failed = {pair for pair in self.math_checks if not agrees(*pair)}
        products_failed = {small_products.probe_key(op, call) for op, call in self.product_checks
                           if not small_products.agrees(op, call)}
        return frozenset(math_failed | products_failed)

    def constant(self, key, op):
        """A 0-d constant, or (in a loop body) a splat: every element the same."""
        value = np.asarray(op.attrs["value"])
        flat = value.reshape(-1)
        if value.shape != ():
            bits = flat.view(f"u{value.dtype.itemsize}")
            if not self.loop_body or flat.size == 0 or np.any(bits != bits[0]):
                raise NotCompilable("non-scalar constant")
            self.kind_of(value.shape)
        name = self.fresh("k")
        first = flat[0]
        literal = repr(float(first) if half_precision.is_half(value.dtype) else first.item())
        if (value.dtype.kind == "f" or half_precision.is_half(value.dtype)) and not np.isfinite(float(first)):
            literal = "np.nan" if np.isnan(first) else ("np.inf" if first > 0 else "-np.inf")
        self.segments[-1].lines.append(f"{name} = {type_name(value.dtype)}({literal})")
        self.define(key, name, SCALAR, value.dtype)

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
