"""Whole `while` loops compiled into one numba function.

A loop whose cond and body are small element-wise programs (JAX's
`fori_loop` over a few vectors) spends its time in the interpreter's
per-op dispatch, once per op per iteration. `compile_while(step)` turns
such a loop into a numba function that runs every iteration natively.

What qualifies (anything else keeps the interpreted loop):

* cond and body are made of what native/translator.py translates (plain
  tensors of static shape; floats from f16 to f64, integers of 8 to 64
  bits or i1; element-wise ops, constants, splats, inlined calls, the
  shape-changing ops, reductions and products of native/tensor_ops.py),
  or ops it hands back to the interpreter's kernels (native/hand_back.py);
* `cond` computes no array of its own (it may reduce a carried one).

0-d values are numba scalars; values of S, the largest carried shape, are
computed element by element in the inner loops of the body's segments,
and the carried ones land in two-row buffers made before the loop whose
rows iterations take in turn (or, where the body passes one carried array
through as another, which would keep a row alive across iterations, in a
fresh array per iteration). Values of other shapes are whole arrays.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from pjrt_ref import settings
from pjrt_ref.limits import loop_limit_error, max_steps
from pjrt_ref.interpreter.native import codegen
from pjrt_ref.interpreter.native.translator import (ARRAY, SCALAR, NotCompilable, Segment, Translator, compilable_tensor,
                                                    compute_dtype, type_name)
from pjrt_ref.interpreter.steps import OpInfo, Step
from pjrt_ref.interpreter.optimiser import background


def compile_while(step, fuse_regions=None) -> Step | None:
    """A Step running the whole loop in numba, or None if it does not qualify.

    With background builds on (PJRT_REF_JIT_BACKGROUND), the loop runs
    interpreted behind a `Switchable` until it has run
    PJRT_REF_JIT_HOT_SECONDS, and then until the background thread has
    built (or loaded) its kernel: a fresh process's first result does not
    wait for numba (W0, W6 in benchmarks/README.md), and a loop that runs
    for milliseconds never pays for a compile. `fuse_regions(step)` fuses
    the interpreted loop's own regions for that time."""
    try:
        return _compile_while(step, fuse_regions)
    except NotCompilable:
        return None
    except Exception as error:   # a combination numba cannot type: keep interpreting
        if type(error).__module__.startswith("numba"):
            return None
        raise


@dataclass
class TranslatedLoop:
    """A loop's numba source and what calling it takes."""

    translator: Translator
    carried: list         # (name, kind, type) of each carried value
    source: str

    @property
    def captures(self) -> list:
        return self.translator.captures

    @property
    def input_types(self) -> list:
        return [(compute_dtype(t.dtype), kind is not SCALAR) for _, kind, t in self.carried + self.captures]

    @property
    def functions(self) -> list:
        """The ctypes functions the code calls, after the captures (small_products.py)."""
        return list(self.translator.functions.values())


def _compile_while(step, fuse_regions) -> Step:
    op = step.op
    loop = _translate(step, frozenset())

    def build():
        return _build(step, loop)

    captures = loop.captures
    info = OpInfo(name="pjrt_ref.compiled_while", location=op.location,
                  attrs={"source": loop.source}, operand_types=op.operand_types + tuple(t for _, _, t in captures),
                  result_types=op.result_types, module=op.module)
    operands = tuple(step.operands) + tuple(s for s, _, _ in captures)
    if background.enabled():
        if fuse_regions is not None:
            fuse_regions(step)
        switch = background.Switchable(_interpreted(step))
        background.build_when_hot(build, switch, settings.get("PJRT_REF_JIT_HOT_SECONDS"))
        return Step(kernel=switch, op=info, operands=operands, results=step.results,
                    regions=step.regions)
    kernel = build()
    if kernel is None:
        raise NotCompilable("numba could not compile the loop")
    return Step(kernel=kernel, op=info, operands=operands, results=step.results)


def _translate(step, handed_back: frozenset) -> TranslatedLoop:
    """The numba source of `step`'s loop; the transcendentals in
    `handed_back` run by the interpreter's kernels (native/hand_back.py)."""
    op = step.op
    cond, body = step.regions
    carried_types = [compilable_tensor(t, halves=True) for t in op.operand_types]
    translator = Translator(_element_loop_shape(carried_types), op.module, loop_body=True,
                            handed_back=handed_back)
    carried = [(f"x{index}", translator.kind_of(ttype.shape), ttype)
               for index, ttype in enumerate(carried_types)]
    identity = lambda slot: slot  # noqa: E731
    cond_lines, predicate = _translate_cond(translator, cond, carried, identity)
    for (name, kind, ttype), slot in zip(carried, body.arg_slots):
        translator.define(slot, name, kind, ttype.dtype)
    translator.steps(getattr(body, "unfused_steps", body.steps), identity)
    body_results, array_outputs = _body_results(translator, body, carried)
    source = _loop_source(carried, translator, cond_lines, predicate, body_results, array_outputs)
    return TranslatedLoop(translator, carried, source)


def _build(step, loop: TranslatedLoop):
    """The loop's kernel, or None (it stays interpreted). A transcendental
    whose probe fails on this machine is handed back to the interpreter in
    a second translation, which must read the same values."""
    failed = loop.translator.failed_probes()
    if failed:
        try:
            retried = _translate(step, failed)
        except NotCompilable:
            return None
        if [c[:2] for c in retried.captures] != [c[:2] for c in loop.captures]:
            return None
        loop = retried
    if not loop.translator.verified():
        return None
    function = codegen.compile_safely(codegen.compile_loop, loop.source, loop.input_types, loop.functions)
    return None if function is None else _loop_kernel(function, loop)


def _element_loop_shape(carried_types) -> tuple:
    """S, the shape computed element by element in the loop over `i`: that
    of the largest carried array (the others are whole arrays)."""
    shapes = [t.shape for t in carried_types if t.shape != ()]
    return max(shapes, key=math.prod) if shapes else ()


def _translate_cond(translator, cond, carried, keys) -> tuple[list, str]:
    """cond's lines and its predicate's name. cond runs before the body's
    arrays exist: it may read carried arrays whole (a reduction) but not
    compute arrays of its own."""
    for (name, kind, ttype), slot in zip(carried, cond.arg_slots):
        translator.define(slot, name, kind, ttype.dtype)
    translator.steps(getattr(cond, "unfused_steps", cond.steps), keys)
    if len(translator.segments) > 1 or translator.array_lines or translator.buffers:
        raise NotCompilable("cond computes arrays")
    predicate = translator.names.get(cond.result_slots[0])
    if predicate is None or predicate[1] is not SCALAR:
        raise NotCompilable("cond result")
    lines = translator.scalar_lines
    translator.segments = [Segment()]
    return lines, predicate[0]


def _body_results(translator, body, carried) -> tuple[list, list]:
    """What each carried value becomes: a name rebound after the iteration
    (scalars, whole arrays, an input array passed through), or, for the
    arrays of shape S the body computes, the expression of their element
    `i` written in the last element loop (`array_outputs`: index, expression)."""
    inputs = {name for name, _, _ in carried} | {translator.names[slot][0] for slot, _, _ in translator.captures}
    body_results, array_outputs = [], []
    for index, slot in enumerate(body.result_slots):
        carried_name, carried_kind, ttype = carried[index]
        name, kind = translator.value(slot, ttype)
        if carried_kind is SCALAR:
            if kind is not SCALAR:
                raise NotCompilable("array result for a scalar")
            body_results.append(name)
        elif carried_kind is ARRAY and not (kind is ARRAY and name in inputs):
            array_outputs.append((index, translator.element(slot, ttype)))
            body_results.append(f"n{index}")
        elif kind is SCALAR:                   # a splat for a whole array
            body_results.append(f"np.full({math.prod(ttype.shape)}, {name})")
        else:    # a whole array: an input, made anew, or refilled (copied when rebound)
            body_results.append(name)
    return body_results, array_outputs


def _interpreted(step):
    """The loop's own kernel, for a compiled_while step's operands (the
    loop's, then its captures, which its regions read from the frame)."""
    kernel, op, count = step.kernel, step.op, len(step.operands)

    def interpreted_while(_, *values, regions):
        return kernel(op, *values[:count], regions=regions)

    return interpreted_while


def _alternates(carried, body_results, array_outputs) -> bool:
    """Whether the computed arrays may live in two-row buffers made before the
    loop, iterations writing the row the previous one read: only if no other
    carried value is a computed array passed through (it would keep a row the
    next iteration overwrites). An array carried unchanged (JAX carries a
    loop's captured operands this way) or a captured one is only read."""
    computed = {index for index, _ in array_outputs}
    computed_names = {carried[index][0] for index in computed}
    return not any(result in computed_names
                   for index, result in enumerate(body_results) if index not in computed)


def _loop_source(carried, translator, cond_lines, predicate, body_results, array_outputs) -> str:
    """The numba `loop`: cond, then the body's segments, each its lines and
    its element loop (the last one also writes the computed arrays).

    Computed arrays live in two-row buffers when `_alternates` allows: no
    array is made or rebound per iteration (numba counts references to an
    array each time one is rebound, which cost more than computing 8
    elements: W13 in benchmarks/README.md). Otherwise each iteration writes
    a fresh array."""
    captured = [translator.names[slot][0] for slot, _, _ in translator.captures]
    parameters = ["n", "budget"] + [name for name, _, _ in carried] + captured + list(translator.functions)
    lines = ["", "", "@njit(cache=True, error_model=\"numpy\")",
             f"def loop({', '.join(parameters)}):",
             "    done = False",
             "    k = 0"]
    lines += [f"    {name} = np.empty({size}, {type_name(dtype)})" for name, size, dtype in translator.buffers]
    rows = _alternates(carried, body_results, array_outputs) and bool(array_outputs)
    computed = {index for index, _ in array_outputs}
    if rows:
        for index in sorted(computed):
            name, dtype = carried[index][0], type_name(carried[index][2].dtype)
            lines += [f"    rows{index} = np.empty((2, n), {dtype})", f"    rows{index}[0, :] = {name}"]
    iteration = ["p = k % 2", "q = 1 - p"] if rows else []
    iteration += cond_lines + [f"if not {predicate}:", "    done = True", "    break",
                               "if k >= budget:", "    break"]
    if not rows:
        iteration += [f"n{index} = np.empty(n, {type_name(carried[index][2].dtype)})"
                      for index, _ in array_outputs]
    segments = translator.segments
    for number, segment in enumerate(segments):
        iteration += segment.lines
        loop = list(segment.loop)
        if number == len(segments) - 1:
            loop += [f"rows{index}[q, i] = {expression}" if rows else f"n{index}[i] = {expression}"
                     for index, expression in array_outputs]
        if loop:
            iteration += codegen.element_loop(loop)
    if rows:       # a computed carried array is read from the row the last iteration wrote
        for index in sorted(computed):
            name = carried[index][0]
            iteration = [re.sub(rf"\b{name}\b", f"rows{index}[p]", re.sub(rf"\b{name}\[", f"rows{index}[p, ", line))
                         for line in iteration]
    rebound = [(name, result) for index, ((name, _, _), result) in enumerate(zip(carried, body_results))
               if not (rows and index in computed)]
    if rebound:
        kept = [f"{r}.copy()" if r in translator.refilled else r for _, r in rebound]
        iteration.append(f"{', '.join(n for n, _ in rebound)}, = {', '.join(kept)},")
    iteration.append("k += 1")
    lines.append("    while True:")
    lines += [f"        {line}" for line in iteration]
    returned = [f"rows{index}[k % 2]" if rows and index in computed else name
                for index, (name, _, _) in enumerate(carried)]
    lines.append(f"    return done, k, {', '.join(returned)},")
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


def _loop_kernel(function, loop: TranslatedLoop):
    """The kernel of a compiled_while step. Values go to numba flat (arrays)
    or as numpy scalars, in the dtype they compute in: f16 and bf16 as the
    float32 holding them, converted back on the way out (exact both ways)."""
    size = math.prod(loop.translator.shape)      # elements of S, the element loop's shape
    inputs = loop.input_types
    result_dtypes = [t.dtype for _, _, t in loop.carried]
    result_shapes = [t.shape for _, _, t in loop.carried]
    carried_dtypes = [compute_dtype(d) for d in result_dtypes]

    def compiled_while(op, *values, regions=None):   # regions: those of a Switchable's first form
        args = [v.ravel().astype(dtype, copy=False) if is_array else dtype.type(v[()])
                for v, (dtype, is_array) in zip(values, inputs)] + loop.functions
        results = _run_in_chunks(function, size, args, carried_dtypes, op.location)
        out = tuple(np.asarray(r, dtype=d).reshape(s)
                    for r, d, s in zip(results, result_dtypes, result_shapes))
        return out[0] if len(out) == 1 else out

    compiled_while.__doc__ = "A while loop compiled by numba (interpreter/optimiser/loops.py)."
    compiled_while.source = loop.source      # what runs: the translation with hand-backs, if any
    return compiled_while
