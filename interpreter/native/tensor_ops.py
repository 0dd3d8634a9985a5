"""Ops that move, reduce or multiply elements, for compiled loop bodies.

A `fori_loop` body rarely stays element-wise on one shape: JAX indexes
(`c[0]` is slice and reshape), concatenates, slices at a computed start
(dynamic_slice and dynamic_update_slice), counts (iota), sums (reduce) and
multiplies small matrices (dot_general). Before this module any of them
sent the whole loop back to op-by-op interpretation, 30 to 360 µs per
iteration where XLA takes nanoseconds (W13 in benchmarks/README.md).

Each translation below is one function, registered in TRANSLATIONS under
its op's name. Most are index maps: result element `index` (a flat,
row-major index) is an element of an operand at a flat index computed from
it, so they go through `Translator.elementwise` like any element-wise op
(inside the loop over S when the result has S's shape, else in a loop of
their own). `reduce` and `dot_general` fold: a loop over the result's
elements around a loop over the folded ones.

Bits: the interpreter's, on every machine. Index maps copy elements.
Integer and boolean folds are exact in any order (wrapping arithmetic is
associative), and so are floating-point maximum and minimum. A
floating-point sum or product depends on the order, so it follows the
interpreter's: `reduce` there is numpy's `add.reduce` (pairwise summation
over blocks of up to 128 elements, 8 accumulators each, from the identity;
compiled for whole-array sums only, as numpy's order over a row of a
partial reduction follows the operand's strides) or `multiply.reduce`
(left to right), then the init value combined once. A reduction of one
element per result is that element and of none the init value, as in the
interpreter.
FOLD_PRELUDE does the same in numba, and `fold_orders_agree` checks it
against numpy on this machine before a loop that uses it runs (a numpy
whose reductions sum in another order keeps such loops interpreted).
Float dot_general cannot be summed here: BLAS's order depends on the CPU's
kernels. A small one makes the BLAS call numpy makes (small_products.py);
integer products are exact and compile.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from pjrt_ref.interpreter.native import half_precision, small_products
from pjrt_ref.interpreter.native.translator import KeepInterpreted, NotCompilable, type_name

WITH_REGIONS = ("stablehlo.reduce",)
# Folding ops of a reduce body: exact in any order on integers and i1.
FOLDS = ("stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum",
         "stablehlo.and", "stablehlo.or", "stablehlo.xor")
ORDER_FREE_ON_FLOATS = ("stablehlo.maximum", "stablehlo.minimum")


def strides(shape) -> list[int]:
    """Row-major strides, in elements."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return out[::-1]


def digits(index: str, shape) -> list[str]:
    """Expressions of the multi-index of flat `index` in `shape`."""
    out = []
    for dim, (size, stride) in enumerate(zip(shape, strides(shape))):
        if size == 1:
            out.append("0")
            continue
        expression = index if stride == 1 else f"({index} // {stride})"
        out.append(expression if dim == 0 else f"({expression} % {size})")
    return out


def flat_index(indices: list[str], shape) -> str:
    """The flat row-major index of a multi-index (dims of size 1 add nothing)."""
    terms = [index if stride == 1 else f"{index} * {stride}"
             for index, stride, size in zip(indices, strides(shape), shape) if size != 1]
    return " + ".join(terms) or "0"


def _rounded(expression: str, dtype) -> str:
    """An integer-valued expression as a value of `dtype` (halves rounded)."""
    if half_precision.is_half(dtype):
        return f"{half_precision.ROUNDERS[dtype]}(float64({expression}))"
    return expression


# --- index maps --------------------------------------------------------------

def iota(t, step, operands, key) -> None:
    """Spec "iota": each element is its index along `iota_dimension`."""
    result = step.op.result_types[0]
    dimension = step.op.attrs["iota_dimension"]
    t.elementwise(key, result, lambda index: _rounded(digits(index, result.shape)[dimension], result.dtype))


def reshape(t, step, operands, key) -> None:
    """Spec "reshape": row-major order is kept, so element k is element k."""
    (operand,), (operand_type,) = operands, step.op.operand_types
    t.elementwise(key, step.op.result_types[0], lambda index: t.read(operand, operand_type, index))


def transpose(t, step, operands, key) -> None:
    """Spec "transpose": result dim k is operand dim permutation[k]."""
    (operand,), (operand_type,) = operands, step.op.operand_types
    result = step.op.result_types[0]
    permutation = step.op.attrs["permutation"]

    def element(index):
        result_index = digits(index, result.shape)
        at = [None] * len(permutation)
        for k, dim in enumerate(permutation):
            at[dim] = result_index[k]
        return t.read(operand, operand_type, flat_index(at, operand_type.shape))

    t.elementwise(key, result, element)


def broadcast_in_dim(t, step, operands, key) -> None:
    """Spec "broadcast_in_dim": operand dim d is result dim
    broadcast_dimensions[d]; a size-1 operand dim repeats its element."""
    (operand,), (operand_type,) = operands, step.op.operand_types
    result = step.op.result_types[0]
    if operand_type.dtype != result.dtype:
        raise NotCompilable("broadcast changes type")
    dims = step.op.attrs["broadcast_dimensions"]

    def element(index):
        result_index = digits(index, result.shape)
        at = [result_index[dims[d]] if size != 1 else "0" for d, size in enumerate(operand_type.shape)]
        return t.read(operand, operand_type, flat_index(at, operand_type.shape))

    t.elementwise(key, result, element)


def slice_(t, step, operands, key) -> None:
    """Spec "slice": element k of dim d is operand element
    start_indices[d] + k * strides[d]."""
    (operand,), (operand_type,) = operands, step.op.operand_types
    result = step.op.result_types[0]
    starts, steps = step.op.attrs["start_indices"], step.op.attrs["strides"]

    def element(index):
        result_index = digits(index, result.shape)
        at = [_affine(start, k, stride) for start, k, stride in zip(starts, result_index, steps)]
        return t.read(operand, operand_type, flat_index(at, operand_type.shape))

    t.elementwise(key, result, element)


def _affine(start, index: str, stride=1) -> str:
    scaled = index if stride == 1 else f"{index} * {stride}"
    return scaled if start in (0, "0") else f"({start} + {scaled})"


def concatenate(t, step, operands, key) -> None:
    """Spec "concatenate": along `dimension`, each operand after the last."""
    result = step.op.result_types[0]
    dimension = step.op.attrs["dimension"]
    types = step.op.operand_types
    offsets = np.cumsum([0] + [ttype.shape[dimension] for ttype in types]).tolist()

    def element(index):
        result_index = digits(index, result.shape)
        expression = None
        for k in reversed(range(len(types))):
            at = list(result_index)
            at[dimension] = f"({result_index[dimension]} - {offsets[k]})" if offsets[k] else at[dimension]
            piece = t.read(operands[k], types[k], flat_index(at, types[k].shape))
            expression = piece if expression is None else \
                f"({piece} if {result_index[dimension]} < {offsets[k + 1]} else {expression})"
        return expression

    t.elementwise(key, result, element)


def _clamped_starts(t, starts, start_types, operand_shape, window_shape) -> list[str]:
    """Spec "dynamic_slice": each start clamped into [0, dim - window], as
    numba int64 scalars (unsigned starts compared as unsigned)."""
    names = []
    for start, ttype, dim, window in zip(starts, start_types, operand_shape, window_shape):
        value, kind = t.value(start, ttype)
        if kind is not False:
            raise NotCompilable("a start index that is not 0-d")
        name, limit = t.fresh("s"), dim - window
        if ttype.dtype.kind == "u":
            line = f"{name} = int64(min(uint64({value}), uint64({limit})))"
        else:
            line = f"{name} = min(max(int64({value}), 0), {limit})"
        t.segments[-1].lines.append(line)
        names.append(name)
    return names


def dynamic_slice(t, step, operands, key) -> None:
    """Spec "dynamic_slice": the window of `slice_sizes` at the clamped starts."""
    operand, *starts = operands
    operand_type, *start_types = step.op.operand_types
    result = step.op.result_types[0]
    at_start = _clamped_starts(t, starts, start_types, operand_type.shape, step.op.attrs["slice_sizes"])

    def element(index):
        at = [_affine(start, k) for start, k in zip(at_start, digits(index, result.shape))]
        return t.read(operand, operand_type, flat_index(at, operand_type.shape))

    t.elementwise(key, result, element)


# A dynamic_update_slice here computes every element of its result each
# iteration, where an interpreted loop writes only the update, in place
# (optimiser/in_place.py): a scan stacking T outputs would cost T^2. Past this
# many elements the loop stays interpreted.
MAX_UPDATED_ELEMENTS = 1024


def dynamic_update_slice(t, step, operands, key) -> None:
    """Spec "dynamic_update_slice": the operand, with the update written at
    the clamped starts."""
    operand, update, *starts = operands
    operand_type, update_type, *start_types = step.op.operand_types
    if math.prod(operand_type.shape) > MAX_UPDATED_ELEMENTS:
        raise KeepInterpreted("dynamic_update_slice of a large array: updated in place when interpreted")
    result = step.op.result_types[0]
    at_start = _clamped_starts(t, starts, start_types, operand_type.shape, update_type.shape)

    def element(index):
        result_index = digits(index, result.shape)
        inside = " and ".join(f"{s} <= {k} < {s} + {size}" for s, k, size
                              in zip(at_start, result_index, update_type.shape)) or "True"
        at = [f"({k} - {s})" for k, s in zip(result_index, at_start)]
        new = t.read(update, update_type, flat_index(at, update_type.shape))
        return f"({new} if {inside} else {t.read(operand, operand_type, index)})"

    t.elementwise(key, result, element)


# --- folds -------------------------------------------------------------------

def reduce(t, step, operands, key) -> None:
    """Spec "reduce" of one input whose body is one folding op, for each
    result element: the reduced elements folded as the interpreter folds
    them (see the module docstring), then the init value combined."""
    op = step.op
    if len(operands) != 2:
        raise NotCompilable("reduce of several inputs")
    body_op = _fold_body(step.regions[0])
    operand, init = operands
    operand_type, init_type = op.operand_types
    result = op.result_types[0]
    dtype = result.dtype
    if operand_type.dtype != dtype or body_op.result_types[0].dtype != dtype:
        raise NotCompilable("reduce changes type")
    ordered = dtype.kind == "f" and body_op.name in ("stablehlo.add", "stablehlo.multiply")
    if half_precision.is_half(dtype) and body_op.name not in ORDER_FREE_ON_FLOATS:
        raise NotCompilable("half-precision sums: the interpreter widens them its own way")
    template = t.template(body_op)
    reduced = list(op.attrs["dimensions"])
    kept = [d for d in range(len(operand_type.shape)) if d not in reduced]
    folded_shape = [operand_type.shape[d] for d in reduced]
    count = math.prod(folded_shape)

    def operand_at(j: str, m: str) -> str:
        at = [None] * len(operand_type.shape)
        for d, expression in zip(kept, digits(j, result.shape)):
            at[d] = expression
        for d, expression in zip(reduced, digits(m, folded_shape)):
            at[d] = expression
        return t.read(operand, operand_type, flat_index(at, operand_type.shape))

    init_value = t.value(init, init_type)[0]
    if count == 0:              # nothing to fold: the init value, as in the interpreter
        t.names[key] = t.value(init, init_type)
        return
    if count == 1:              # one element per result: that element, init unused (as XLA)
        t.elementwise(key, result, lambda index: operand_at(index, "0"))
        return
    if not ordered:
        fold = _any_order_fold(template, type_name(dtype), init_value, count, operand_at)
    elif body_op.name == "stablehlo.add":
        if kept:    # numpy sums a partial reduction's rows in an order that follows the strides
            raise NotCompilable("a partial float sum")
        fold = _numpy_sum(t.scratch(count, dtype), type_name(dtype), init_value, count, operand_at)
    else:
        fold = _numpy_product(type_name(dtype), init_value, count, operand_at)
    if ordered:
        t.fold_checks.add(dtype)
    _fold(t, key, result, fold)


def _any_order_fold(template, cast, init_value, count, operand_at):
    """Lines folding result element j left to right from the init value:
    exact in any order (integers, i1, float maximum and minimum)."""
    def fold(acc, j):
        return [f"{acc} = {init_value}", f"for m in range({count}):",
                f"    {acc} = {cast}({template.format(acc, operand_at(j, 'm'))})"]
    return fold


def _numpy_sum(row, cast, init_value, count, operand_at):
    """Lines summing the elements as np.add.reduce does (FOLD_PRELUDE's
    numpy_sum over a scratch row), then adding the init value."""
    def fold(acc, j):
        return [f"for m in range({count}):", f"    {row}[m] = {operand_at(j, 'm')}",
                f"{acc} = {cast}({init_value} + numpy_sum({row}, {cast}(0)))"]
    return fold


def _numpy_product(cast, init_value, count, operand_at):
    """Lines multiplying the elements left to right, as np.multiply.reduce
    does, then the init value by their product."""
    def fold(acc, j):
        return [f"{acc} = {cast}(1)", f"for m in range({count}):",
                f"    {acc} = {cast}({acc} * {operand_at(j, 'm')})",
                f"{acc} = {cast}({init_value} * {acc})"]
    return fold


def _fold_body(region):
    """The one op of a body `(a, b) -> op(a, b)` with op in FOLDS."""
    if len(region.steps) != 1 or len(region.arg_slots) != 2:
        raise NotCompilable("reduce body")
    (body_step,) = region.steps
    if body_step.op.name not in FOLDS or sorted(body_step.operands) != sorted(region.arg_slots):
        raise NotCompilable("reduce body")
    if list(region.result_slots) != list(body_step.results):
        raise NotCompilable("reduce body")
    return body_step.op


def dot_general(t, step, operands, key) -> None:
    """Spec "dot_general" on integers (floats: see the module docstring):
    for each result element (batch dims, then the lhs's free dims, then the
    rhs's), the wrapping sum of products over the contracting dims."""
    op = step.op
    lhs, rhs = operands
    lhs_type, rhs_type = op.operand_types
    result = op.result_types[0]
    dtype = result.dtype
    if dtype.kind == "f":
        small_products.translate(t, step, operands, key)
        return
    if not (lhs_type.dtype == rhs_type.dtype == dtype) or dtype.kind not in "iu":
        raise NotCompilable("dot_general other than on integers of one type")
    numbers = op.attrs.get("dot_dimension_numbers")
    if numbers is None:        # a product optimiser/dots.py rewrote: its kernel writes a transposed result
        raise NotCompilable("rewritten dot_general")
    lhs_batch, rhs_batch = numbers.lhs_batching_dimensions, numbers.rhs_batching_dimensions
    lhs_contract, rhs_contract = numbers.lhs_contracting_dimensions, numbers.rhs_contracting_dimensions
    lhs_free = [d for d in range(len(lhs_type.shape)) if d not in lhs_batch and d not in lhs_contract]
    rhs_free = [d for d in range(len(rhs_type.shape)) if d not in rhs_batch and d not in rhs_contract]
    contracted_shape = [lhs_type.shape[d] for d in lhs_contract]
    cast = type_name(dtype)

    def operand_at(operand, ttype, batch, free, contract, j, free_offset):
        result_index, contract_index = digits(j, result.shape), digits("m", contracted_shape)
        at = [None] * len(ttype.shape)
        for k, d in enumerate(batch):
            at[d] = result_index[k]
        for k, d in enumerate(free):
            at[d] = result_index[free_offset + k]
        for k, d in enumerate(contract):
            at[d] = contract_index[k]
        return t.read(operand, ttype, flat_index(at, ttype.shape))

    def fold(acc, j):
        a = operand_at(lhs, lhs_type, lhs_batch, lhs_free, lhs_contract, j, len(lhs_batch))
        b = operand_at(rhs, rhs_type, rhs_batch, rhs_free, rhs_contract, j, len(lhs_batch) + len(lhs_free))
        return [f"{acc} = {cast}(0)", f"for m in range({math.prod(contracted_shape)}):",
                f"    {acc} = {cast}({acc} + {cast}({a} * {b}))"]

    _fold(t, key, result, fold)


def _fold(t, key, result, fold) -> None:
    """`key` = for each result element j, the accumulator `fold(acc, j)`'s
    lines leave (once per iteration, after the arrays they read exist)."""
    accumulator = t.fresh("acc")
    t.reads = []
    body = fold(accumulator, "j")
    if result.shape == ():          # no result index: j does not occur
        name = t.fresh("v")
        lines = body + [f"{name} = {accumulator}"]
    else:
        size = math.prod(result.shape)
        name = t.refillable(size, result.dtype)
        lines = [f"for j in range({size}):"]
        lines += [f"    {line}" for line in body] + [f"    {name}[j] = {accumulator}"]
    t.statement(lines, t.reads)
    t.define(key, name, t.kind_of(result.shape), result.dtype)


@functools.cache
def fold_orders_agree(dtype) -> bool:
    """Whether FOLD_PRELUDE's numpy_sum and a left-to-right product give
    numpy's add.reduce and multiply.reduce bits on this machine: rows of
    every length up to 300 and some longer ones (several blocks of 128),
    values of mixed sign and magnitude, and rows of zeros of either sign."""
    from pjrt_ref.interpreter.native import codegen

    source = codegen.with_prelude(
        "\n\n@njit(cache=True, error_model=\"numpy\")\n"
        "def probe(values, zero, one):\n"
        "    product = one\n"
        "    for k in range(values.size):\n"
        "        product = product * values[k]\n"
        "    return numpy_sum(values, zero), product\n")
    probe = codegen.load_generated(source).probe
    rng = np.random.default_rng(2026)
    zero, one = dtype.type(0), dtype.type(1)
    lengths = list(range(301)) + [511, 1000, 1031, 4099]
    for length in lengths:
        rows = [(rng.standard_normal(length) * 10.0 ** rng.integers(-4, 5, length)).astype(dtype),
                (1 + rng.standard_normal(length) / 64).astype(dtype),
                np.full(length, -0.0, dtype), np.where(rng.random(length) < 0.5, -0.0, 0.0).astype(dtype)]
        for row in rows:
            total, product = probe(row, zero, one)
            with np.errstate(all="ignore"):
                if dtype.type(total).tobytes() != np.add.reduce(row).tobytes():
                    return False
                if dtype.type(product).tobytes() != np.multiply.reduce(row).tobytes():
                    return False
    return True


# numpy's add.reduce over a contiguous row, added by codegen to a generated
# module that calls numpy_sum.
FOLD_PRELUDE = '''

@njit(cache=True, error_model="numpy")
def pairwise_block(values, start, n, zero):
    """numpy's pairwise summation of a run of at most 128 elements: shorter
    than 8 from zero, left to right; else 8 accumulators over the multiple
    of 8, combined as a tree, then the rest left to right."""
    if n < 8:
        total = zero
        for k in range(n):
            total += values[start + k]
        return total
    r0, r1, r2, r3 = values[start], values[start + 1], values[start + 2], values[start + 3]
    r4, r5, r6, r7 = values[start + 4], values[start + 5], values[start + 6], values[start + 7]
    k = 8
    while k < n - n % 8:
        r0 += values[start + k]
        r1 += values[start + k + 1]
        r2 += values[start + k + 2]
        r3 += values[start + k + 3]
        r4 += values[start + k + 4]
        r5 += values[start + k + 5]
        r6 += values[start + k + 6]
        r7 += values[start + k + 7]
        k += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while k < n:
        total += values[start + k]
        k += 1
    return total


@njit(cache=True, error_model="numpy")
def pairwise_sum(values, zero):
    """numpy's pairwise summation of `values`: a run longer than 128 is the
    sum of its two halves (the first a multiple of 8 long). numpy recurses;
    this walks the same tree with a stack (numba cannot load a recursive
    function from its cache)."""
    n = values.size
    if n <= 128:
        return pairwise_block(values, 0, n, zero)
    starts = np.empty(64, np.int64)
    lengths = np.empty(64, np.int64)
    stages = np.empty(64, np.int64)     # 0: split next, 1: left pushed, 2: both pushed
    sums = np.empty(64, values.dtype)
    top, done = 1, 0
    starts[0], lengths[0], stages[0] = 0, n, 0
    while top > 0:
        start, length = starts[top - 1], lengths[top - 1]
        half = length // 2
        half -= half % 8
        if length <= 128:
            top -= 1
            sums[done] = pairwise_block(values, start, length, zero)
            done += 1
        elif stages[top - 1] == 0:
            stages[top - 1] = 1
            starts[top], lengths[top], stages[top] = start, half, 0
            top += 1
        elif stages[top - 1] == 1:
            stages[top - 1] = 2
            starts[top], lengths[top], stages[top] = start + half, length - half, 0
            top += 1
        else:
            top -= 1
            done -= 1
            sums[done - 1] = sums[done - 1] + sums[done]
    return sums[0]


@njit(cache=True, error_model="numpy")
def numpy_sum(values, zero):
    """np.add.reduce of a contiguous row: the identity plus the pairwise sum."""
    return zero + pairwise_sum(values, zero)
'''
PRELUDE_FUNCTIONS = ("numpy_sum",)


TRANSLATIONS = {
    "stablehlo.iota": iota,
    "stablehlo.reshape": reshape,
    "stablehlo.transpose": transpose,
    "stablehlo.broadcast_in_dim": broadcast_in_dim,
    "stablehlo.slice": slice_,
    "stablehlo.concatenate": concatenate,
    "stablehlo.dynamic_slice": dynamic_slice,
    "stablehlo.dynamic_update_slice": dynamic_update_slice,
    "stablehlo.reduce": reduce,
    "stablehlo.dot_general": dot_general,
}
